//! Custom kernels: a backend-agnostic spec (CUDA C or PTX for GPUs, a Rust closure for the
//! CPU backend), a typed signature, launch configurations checked against device limits,
//! and launches that order their array arguments like any other op.
//!
//! The usual way to write one is `#[kernel]` (`gpukit::kernel`): a plain Rust function
//! compiled to CUDA C, WGSL and a CPU twin, every access bounds-checked, so that it needs no
//! `unsafe` anywhere; its spec takes the checked launch convention of [`CheckedAbi`] (an
//! out-of-bounds access becomes [`crate::Error::KernelFailed`] at the next sync). What
//! follows is the escape hatch: kernels written by hand in CUDA C, PTX or WGSL, with a CPU
//! closure for the CPU backend.
//!
//! ```
//! use gpukit::{In, KernelSpec, LaunchConfig, Out};
//!
//! const SRC: &str = r#"
//! extern "C" __global__ void vector_add(const float* a, const float* b, float* out, unsigned long long n) {
//!     unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
//!     if (i < n) out[i] = a[i] + b[i];
//! }"#;
//!
//! // The signature says what each argument is; the CPU closure sees host slices and the
//! // thread's coordinates (`t.x()` is CUDA's `blockIdx.x * blockDim.x + threadIdx.x`).
//! type VectorAdd = (In<f32>, In<f32>, Out<f32>, u64);
//! // SAFETY: `vector_add` takes (const float*, const float*, float*, unsigned long long),
//! // which is `VectorAdd` in order and type, and touches only indices below `n`, the
//! // length passed with the arrays.
//! let spec = unsafe { KernelSpec::<VectorAdd>::cuda(SRC, "vector_add") }.cpu(|t, (a, b, out, n)| {
//!     let i = t.x();
//!     if (i as u64) < *n {
//!         out[i] = a[i] + b[i];
//!     }
//! });
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
//! let k = ctx.kernel(spec)?;
//! let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
//! let b = ctx.alloc_upload(&[10.0f32, 20.0, 30.0])?;
//! let mut out = ctx.alloc_zeros::<f32>(3)?;
//! ctx.launch(&k, LaunchConfig::for_elems(3), (&a, &b, &mut out, 3u64))?;
//! assert_eq!(out.download()?, [11.0, 22.0, 33.0]);
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! ## Why GPU code is `unsafe` to construct
//!
//! Nothing can check that CUDA C or PTX reads its parameters as the signature says, or that
//! it stays inside the arrays it is given: a kernel that indexes past an array writes over
//! whatever the device keeps there. [`KernelSpec::cuda`] and [`KernelSpec::ptx`] are
//! therefore `unsafe fn`s, and the caller vouches for the code once, where it is named;
//! launching a loaded [`Kernel`] is then safe, because everything else a launch needs
//! (argument types matching the signature, arrays of this context, launch limits, ordering
//! against other streams, no aliasing between written arguments) is checked or enforced by
//! types. A CPU closure is safe Rust and needs no such promise. Safe code cannot build
//! launch arguments of its own: [`LaunchArg`] and [`LaunchArgs`] are sealed.
//!
//! ```compile_fail,E0133
//! use gpukit::{In, KernelSpec};
//! let spec = KernelSpec::<(In<f32>,)>::cuda("extern \"C\" __global__ void k(const float*) {}", "k");
//! ```
//!
//! ```compile_fail,E0133
//! use gpukit::{In, KernelSpec};
//! let spec = KernelSpec::<(In<f32>,)>::ptx(".version 8.0", "k");
//! ```
//!
//! Nor can safe code make an argument that claims to be something it is not:
//!
//! ```compile_fail,E0277
//! use gpukit::core::{ArgRef, Backend, LaunchArg, Out};
//! struct Pretend;
//! impl<B: Backend> LaunchArg<B> for Pretend {
//!     type Param = Out<f32>;
//!     fn arg(&self) -> ArgRef<'_, B> {
//!         ArgRef::Scalar { bytes: [0; 16], len: 4 }
//!     }
//! }
//! ```
//!
//! Arguments are checked against the signature one by one: a wrong one is a compile error
//! at that argument (`expected Out<f32>, found Out<f64>`; "`&Vec<f32>` is not a launch
//! argument"; a tuple of the wrong length names the signature). A scalar literal needs its
//! type (`0.5f32`): an unsuffixed float is an `f64`.
//!
//! ```
//! # use gpukit::{In, KernelSpec, LaunchConfig, Out};
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
//! let k = ctx.kernel(KernelSpec::<(f32, In<f32>, Out<f32>)>::named("axpy").cpu(|t, (a, x, y)| {
//!     if let (Some(y), Some(x)) = (y.get_mut(t.x()), x.get(t.x())) {
//!         *y += *a * x;
//!     }
//! }))?;
//! let x = ctx.alloc_upload(&[1.0f32, 2.0])?;
//! let mut y = ctx.alloc_zeros::<f32>(2)?;
//! ctx.launch(&k, LaunchConfig::for_elems(2), (0.5f32, &x, &mut y))?;
//! assert_eq!(y.download()?, [0.5, 1.0]);
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! ```compile_fail,E0271
//! # use gpukit::{In, KernelSpec, LaunchConfig, Out};
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None)).unwrap();
//! let k = ctx.kernel(KernelSpec::<(In<f32>, Out<f32>)>::named("copy").cpu(|_, _| {})).unwrap();
//! let x = ctx.alloc_upload(&[1.0f32]).unwrap();
//! let mut y = ctx.alloc_zeros::<f64>(1).unwrap();
//! ctx.launch(&k, LaunchConfig::for_elems(1), (&x, &mut y)); // an f64 array for Out<f32>
//! ```
//!
//! ```compile_fail,E0277
//! # use gpukit::{In, KernelSpec, LaunchConfig, Out};
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None)).unwrap();
//! let k = ctx.kernel(KernelSpec::<(In<f32>, Out<f32>)>::named("copy").cpu(|_, _| {})).unwrap();
//! let mut y = ctx.alloc_zeros::<f32>(1).unwrap();
//! ctx.launch(&k, LaunchConfig::for_elems(1), (&vec![1.0f32], &mut y)); // host memory
//! ```
//!
//! The parts, one file each: launch geometry ([`LaunchConfig`], [`Dim3`], [`ThreadIndex`]),
//! what a backend is given to load ([`KernelDesc`], [`KernelSource`], the erased CPU
//! closure), typed signatures and launch arguments ([`In`], [`Out`], [`KernelSig`],
//! [`LaunchArg`]), the spec a user writes ([`KernelSpec`]), and the loaded kernel and its
//! launch ([`Kernel`], `Stream::launch`).

mod args;
mod builtin;
mod checked;
mod desc;
mod geometry;
mod launch;
mod ptx;
mod race;
mod spec;

pub use args::{
    ArgRef, In, KernelParam, KernelSig, LaunchArg, LaunchArgFor, LaunchArgs, Out, MAX_KERNEL_ARGS,
    MAX_LAUNCH_ARGS,
};
pub(crate) use args::{Reads, Value, Writes};
pub(crate) use builtin::Builtins;
pub use checked::{
    __comptime, CheckedAbi, DeviceFn, KernelFaults, KernelFloat, KernelNumeric, FAULT_WORDS,
};
pub(crate) use checked::{FaultLog, FaultRecord};
pub use desc::{CpuKernelFn, CpuRun, KernelDesc, KernelSource, RawArg};
pub use geometry::{Dim3, LaunchConfig, ThreadIndex};
pub use launch::Kernel;
pub use ptx::CUDA_PTX_HELPERS;
#[doc(hidden)]
pub use race::{Access as __Access, RaceCheck};
pub use spec::KernelSpec;
