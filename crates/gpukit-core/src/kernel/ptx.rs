//! The helpers CUDA C calls instead of inline PTX or hardware registers, defined once.
//!
//! The built-in modules, `#[kernel]`'s generated code and hand-written test kernels convert
//! 16-bit floats and read the global timer through these functions, each defined with inline
//! PTX for NVRTC. An emulated device header (gpukit-cuda-emu's) defines the same functions
//! in C++ and `GK_PTX_HELPERS_DEFINED`, so these definitions step aside: CUDA C that uses
//! PTX only through them also runs where PTX cannot.
//!
//! - `float gk_cvt_f32_f16(unsigned short)`: PTX `cvt.f32.f16` (exact);
//! - `unsigned short gk_cvt_rn_f16_f32(float)`: PTX `cvt.rn.f16.f32` (to nearest even);
//! - `unsigned long long gk_globaltimer()`: the `%globaltimer` register, in nanoseconds.

/// The helpers' CUDA C (see the module docs), as a string literal, so that `concat!` can put
/// it in front of a kernel's source at compile time.
///
/// ```
/// const SRC: &str = concat!(
///     gpukit_core::cuda_ptx_helpers!(),
///     r#"extern "C" __global__ void stamp(unsigned long long *t) { *t = gk_globaltimer(); }"#
/// );
/// assert!(SRC.contains("#ifndef GK_PTX_HELPERS_DEFINED"));
/// ```
#[macro_export]
macro_rules! cuda_ptx_helpers {
    () => {
        "#ifndef GK_PTX_HELPERS_DEFINED
#define GK_PTX_HELPERS_DEFINED 1
__device__ __forceinline__ float gk_cvt_f32_f16(unsigned short x) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); return f; }
__device__ __forceinline__ unsigned short gk_cvt_rn_f16_f32(float x) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x)); return h; }
__device__ __forceinline__ unsigned long long gk_globaltimer() { unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }
#endif
"
    };
}

/// [`cuda_ptx_helpers!`](crate::cuda_ptx_helpers) as a constant.
pub const CUDA_PTX_HELPERS: &str = cuda_ptx_helpers!();
