//! # gpukit-cuda
//!
//! The CUDA backend of the `gpukit` workspace: [`gpukit_core::Backend`] on NVIDIA GPUs, through
//! cudarc's driver bindings, with NVRTC and cuBLAS from `gpukit-cuda-sys`.
//!
//! ```no_run
//! # fn main() -> gpukit::Result<()> {
//! let ctx = gpukit::cuda::CudaBackend::context(0)?;       // a clear error without a GPU
//! let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
//! let mut b = ctx.alloc_zeros::<f32>(3)?;
//! ctx.add(&a, &a, &mut b)?;                            // an NVRTC-compiled kernel
//! assert_eq!(b.download()?, vec![2.0, 4.0, 6.0]);
//! # Ok(()) }
//! ```
//!
//! ## How each part maps onto CUDA
//!
//! - **Opening** a device runs `gpukit-cuda-sys`'s probe first (driver found and loaded by absolute
//!   path, cudarc checked to reach that very library, `cuInit`, devices listed), so a machine
//!   without CUDA gets [`gpukit_core::Error::Unavailable`] with the probe's reason and never
//!   reaches cudarc's loader, which panics when it finds no library. Before the first call
//!   the backend also checks that the driver has every entry point it calls. The driver is
//!   called through cudarc's raw `driver::sys`, the workspace's one binding of it. The
//!   device's primary context is used, so memory can be shared with the CUDA runtime and
//!   other libraries.
//! - **Raw driver calls** all live in one module, `driver` (`src/driver.rs`): one wrapper per
//!   entry point, each returning `Result` with the call's name and `CUresult` on failure and
//!   its outputs as values; `unsafe` where a handle or pointer must be valid, with the
//!   contract in its `# Safety` section. The rest of the backend calls these wrappers, never
//!   `driver::sys` (cuBLAS, NVRTC, NCCL and NVTX have their own bindings).
//! - **Device memory** is `cuMemAlloc` (zeroed on an internal stream when asked). A buffer
//!   freed while streams still use it is freed later: the backend records an event on each
//!   of those streams and frees the memory once all have completed, checking on later calls,
//!   so `free` never blocks. Running out is `OutOfMemory` with the free and total memory,
//!   after the deferred frees have been waited for and the allocation retried. The backend
//!   is called only on a miss of gpukit-core's stream-ordered pool, which caches dropped
//!   arrays' blocks and reuses them without a driver call; its `trim` is what frees here.
//!   (The driver's own pool, `cuMemAllocAsync`, is not used: a pool hit here costs no driver
//!   call at all, and the counters are the same on every backend.)
//! - **NVTX ranges** ([`gpukit_core::Context::range`], the pipeline's stages) go through
//!   cudarc's `nvtx` module when `libnvToolsExt` loads ([`nvtx::available`]); without it they
//!   are no-ops.
//! - **NCCL** ([`nccl`]): communicators (`ncclCommInitAll` for many GPUs in one process,
//!   `ncclCommInitRank` with an id from the launcher for one process per GPU) and the
//!   collectives on raw device pointers and streams, through cudarc's `nccl::sys`, loaded at
//!   run time; without the library every call is `Unavailable` ([`nccl::available`]).
//! - **Pinned host memory** is `cuMemHostAlloc`: write-combined for [`gpukit_core::HostUse::Upload`]
//!   (fast for the device to read over PCIe, slow for the CPU to read), plainly pinned
//!   otherwise, portable to every context. gpukit-core's pool reuses it, so a steady-state
//!   pipeline pins nothing. Existing memory is registered with `cuMemHostRegister`.
//! - **Streams** are `CU_STREAM_NON_BLOCKING` streams with the requested priority (they never
//!   synchronise with the legacy default stream). **Events** are `CUevent`s; ordering events
//!   (without timing) come from a pool. Copies are `cuMemcpy*Async`.
//! - **Built-in ops** (the element-wise table, fill, axpy, clamp, comparisons, `select`,
//!   `cumsum`, the reductions, softmax, cross-entropy, the random fills, gather, scatter-add,
//!   one-hot, ...) are gpukit-core's kernels: their CUDA C comes from the kernel language's
//!   emitter, and they load and launch as any kernel does (`src/kernel.rs`). NVRTC compiles
//!   generated code with `--fmad=false` ([`GENERATED_OPTIONS`]), so results equal the CPU
//!   backend's bit for bit for the element-wise ops without transcendental functions. Gemm
//!   alone is the backend's: cuBLAS (`Backend::gemm`, `src/blas.rs`).
//! - **The kernel cache** ([`cache`]): every CUDA C program (built-in and custom kernels)
//!   is compiled once per process, also when several threads ask at once, and kept on disk
//!   (`GPU_KERNEL_CACHE`, else `~/.cache/gpukit/kernels`; `off` turns it off), keyed by the
//!   source, options, NVRTC version and architecture; an entry that does not match exactly
//!   or is damaged is compiled again, never trusted.
//! - **Synchronisation** of a context ([`gpukit_core::Context::sync`]) waits for its own
//!   streams, one by one, never the device (`cuCtxSynchronize` would wait for every context
//!   on it and invalidate captures running on them, PyTorch's included).
//! - **Graphs** are stream captures in relaxed mode, instantiated once. A capture's gemms
//!   use a cuBLAS workspace of the graph's own (`cublasSetWorkspace`, cuBLAS's recommended 32 MiB on Hopper, 4 MiB
//!   before, kept only when the capture has a gemm), allocated before the capture and freed
//!   after the graph's last launch, so replays on any stream never share the capturing
//!   stream's handle's workspace, and outlive it.
//! - **gemm** is cuBLAS (`cublasSgemm`/`cublasDgemm`, `cublasGemmEx` with f32 compute for
//!   f16/bf16), one handle per stream, created on the stream's first gemm, with cuBLAS's
//!   default math mode (no TF32 unless `NVIDIA_TF32_OVERRIDE` asks for it) and reductions
//!   never in 16 bits (`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`). Row-major
//!   products are computed as the column-major product of the transposes. cuBLAS is loaded
//!   on the first gemm; without it, gemm is `Unavailable` and everything else works. A
//!   batched gemm is one call per matrix of the batch on the stream (the strided-batched
//!   entry points are not among the bound functions: binding them needs `cargo xtask bindgen`
//!   with CUDA's headers).
//! - **Custom kernels** from CUDA C go through NVRTC (SASS for the device's architecture when
//!   NVRTC knows it, PTX otherwise; through the kernel cache), PTX is loaded as is. A launch is
//!   checked against the device's limits by gpukit-core and against the kernel's own
//!   `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` (registers can lower it) here. The GPU code
//!   itself is the caller's promise (`KernelSpec::cuda`/`ptx` are `unsafe fn`).
//!   [`compile_check`] compiles a spec's CUDA C with NVRTC alone, so a machine without a
//!   GPU (CI) can tell that a kernel compiles and has its entry point.
//! - **Errors**: every `CUresult` becomes a [`gpukit_core::Error`] naming the failed call.
//!   A sticky error (illegal address, failed launch, device assertion, ...) breaks the
//!   device's primary context, so it poisons the device for the whole process: that call and
//!   every later one, on every context of that device, return
//!   [`gpukit_core::Error::Poisoned`] with the first error as the origin, and opening a new
//!   context on it fails the same way.
//! - **Kernel modules** of dropped custom kernels are unloaded at the context's next
//!   `synchronize` (launches of them may still be queued), or after 64 have piled up,
//!   outside captures.
//!
//! ## CUDA versions
//!
//! cudarc is built with `cuda-12000` and `dynamic-loading`: the driver API as of CUDA 12.0,
//! resolved symbol by symbol at run time. The probe requires a driver of CUDA 12.0 or newer;
//! CUDA 13 drivers keep every 12.x entry point, so the same build runs on 12.x and 13.x
//! drivers. NVRTC and cuBLAS of CUDA 11.2 to 13 are found by `gpukit-cuda-sys`, preferring a major
//! version not newer than the driver's.
//!
//! Dependencies: `cudarc` (driver API), `gpukit-cuda-sys` (discovery, probe, NVRTC, cuBLAS),
//! `thiserror`, and `tracing` (a kernel cache that cannot be written is logged).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod backend;
mod blas;
pub mod cache;
mod device;
mod driver;
mod error;
mod graph;
mod kernel;
mod loader;
mod memory;
pub mod nccl;
pub mod nvtx;
mod streams;

pub use backend::{CudaBackend, CudaEvent, CudaKernel, CudaStream};
/// The cudarc this backend is built on, for interop at the same version (raw handles from
/// [`gpukit_core::Stream::with_raw`] and friends are cudarc `sys` types).
pub use cudarc;
pub use cudarc::driver::sys::CUresult;
pub use error::{driver_result, CudaError};
pub use gpukit_cuda_sys::probe::{probe, DeviceProbe, Probe, ProbeError};
pub use graph::CudaGraph;
pub use kernel::{compile_check, GENERATED_OPTIONS};
pub use memory::{CudaBuffer, CudaHostMem, CudaRegistration};

pub use gpukit_cuda_sys::probe::{cudarc_driver_report, CudarcDriverReport};

/// A context on the CUDA backend.
pub type CudaContext = gpukit_core::Context<CudaBackend>;
