//! The compiler of gpukit's kernel language, front end aside: the typed IR of a kernel
//! ([`ir`]), and its three emitters, each bounds-checked with the same semantics:
//!
//! - [`cuda`]: CUDA C, as NVRTC compiles it (gpukit's CUDA backend);
//! - [`wgsl`]: WGSL in the binding layout of gpukit's wgpu backend;
//! - [`twin`]: the Rust source of the CPU twin (gpukit's CPU backend), a whole launch block
//!   by block, barriers included.
//!
//! `#[kernel]` (gpukit-macros) lowers a Rust function to a [`ir::Kernel`] and expands to
//! the three sources; the backends build IR for their built-in ops and render it with the
//! same emitters, so that every GPU body is written in one language. The crate has no
//! dependencies: the backends link it at run time, the proc macro at build time.

mod bounds;
pub mod cuda;
pub mod ir;
mod lines;
pub mod twin;
pub mod wgsl;

#[cfg(test)]
mod tests;

/// The helpers' CUDA C (see [`cuda::PTX_HELPERS`]), as a string literal, so that `concat!` can put
/// it in front of a kernel's source at compile time.
///
/// ```
/// const SRC: &str = concat!(
///     gpukit_kernel::cuda_ptx_helpers!(),
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
