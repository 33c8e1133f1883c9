//! # gpukit
//!
//! One safe interface to GPU compute: pick a device in one line, move typed arrays to it and
//! back, launch work on streams, and overlap upload, compute and download.
//!
//! ```
//! use gpukit::{Context, HostUse};
//!
//! let ctx = Context::default()?;                 // GPU_DEVICE, else CUDA if usable, else CPU
//! println!("{} device {}", ctx.backend_name(), ctx.device_id());
//!
//! let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0])?;
//! let b = ctx.alloc_upload(&[5.0f32, 6.0, 7.0, 8.0])?;
//! let mut out = ctx.alloc_zeros::<f32>(4)?;
//! ctx.add(&a, &b, &mut out)?;                    // a built-in op on the default stream
//! assert_eq!(out.download()?, vec![6.0, 8.0, 10.0, 12.0]);
//!
//! let s = ctx.create_stream()?;
//! let start = s.record_event()?;
//! let mut host = ctx.alloc_host::<f32>(4, HostUse::Upload)?;   // pinned where it can be
//! host.copy_from_slice(&[1.0, 1.0, 1.0, 1.0]);
//! let pending = s.upload(host, &mut out)?;       // the buffer moves into the copy ...
//! let host = pending.wait()?;                    // ... and comes back when it is done
//! let ms = start.elapsed_ms(&s.record_event()?)?;
//! assert!(ms >= 0.0);
//! assert_eq!(out.download()?, &host[..]);
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! ## Where this crate sits
//!
//! `gpukit` is the facade users start from. It chooses a backend at run time through
//! [`AnyBackend`], an enum over the compiled-in backends that implements
//! [`gpukit_core::Backend`] itself, so every type here is gpukit-core's generic type instantiated
//! once (`GpuArray<T> = gpukit_core::GpuArray<T, AnyBackend>`). Programs that know their
//! backend at compile time can use `gpukit_core` with `gpukit_cpu::CpuBackend` directly.
//!
//! The fallback chain is CUDA (`gpukit-cuda`), then a Vulkan GPU (`gpukit-wgpu`), then the
//! CPU (`gpukit-cpu`). `auto` opens CUDA device 0 when the probe finds a usable driver,
//! device and NVRTC; else the first Vulkan adapter that is a GPU (CPU implementations such as
//! lavapipe are passed over: the CPU backend is faster on the same cores); else the CPU. It
//! logs why each was rejected (`tracing` at info level) and records it in
//! [`Context::selection`]; `cuda`, `cuda:N`, `vulkan` and `vulkan:N` fail with the reason
//! instead. CUDA devices are numbered as the driver numbers them after
//! `CUDA_VISIBLE_DEVICES`; Vulkan adapters in `gpukit_wgpu::probe`'s stable order.
//!
//! ## Several devices
//!
//! [`DeviceGroup`] opens one context per device of a [`DeviceSet`] (`cuda:0,1`, `cuda:*`,
//! `cpu:0..4`, `auto`; from code, `GPU_DEVICE` or `gpu.toml`'s `devices`); the CPU backend has
//! any number of logical devices (`cpu:N`), so multi-device code runs on any machine.
//! [`Stream::copy_peer`](gpukit_core::Stream::copy_peer) copies between devices, ordered
//! through both devices' events. [`Communicator`] runs collectives over a group in this
//! process (NCCL on CUDA devices, else the in-process implementation on any backend), and
//! [`ProcessGroup`] is this process's rank of a job a launcher started (`torchrun`, Slurm,
//! Open MPI: [`launch`]), on NCCL. `examples/data_parallel.rs` trains a model on every device
//! of a group.
//!
//! ## Async
//!
//! [`Stream::synchronize_async`](gpukit_core::Stream::synchronize_async),
//! [`Event::wait_async`](gpukit_core::Event::wait_async) and `.await` on a
//! [`Pending`](gpukit_core::Pending) copy complete without blocking a thread, on any async
//! runtime (the library depends on none; the README has a tokio example).
//!
//! ## Cargo features
//!
//! - `cuda` (on by default): the CUDA backend (`gpukit-cuda`, `gpukit-cuda-sys`, `cudarc`). It loads
//!   the driver, NVRTC and cuBLAS at run time, so building it needs no CUDA toolkit. With
//!   `default-features = false` none of those crates is compiled, the facade has the CPU
//!   backend alone, and a CUDA request is [`Error::Unavailable`] whose reason begins
//!   "not compiled in" (`auto` records it in [`Context::selection`] and uses the CPU).
//! - `vulkan` (on by default): the Vulkan (Metal, DX12) backend (`gpukit-wgpu` on `wgpu`).
//!   It opens the Vulkan loader at run time, so building it needs no Vulkan SDK; without it a
//!   Vulkan request is [`Error::Unavailable`] whose reason begins "not compiled in".
//! - `half` (on by default): f16 and bf16 elements ([`half::f16`], [`half::bf16`]), stored
//!   in 16 bits, computed in f32 and rounded once, identically on every backend.
//!
//! Elements without a feature: `f32`, `f64`, `i32`, `u32`, `i64`, `u64`, `i8`, `u8`.
//!
//! ## Interop with other CUDA code
//!
//! Arrays, views and streams give their native handles to code outside this library
//! (cudarc, your own cuBLAS or cuDNN calls, other CUDA libraries), and foreign allocations
//! and streams can be used as arrays and streams. Every entry point is `unsafe`, with the
//! contract in its `# Safety` section:
//!
//! - [`Stream::with_raw`](gpukit_core::Stream::with_raw) /
//!   [`with_raw_mut`](gpukit_core::Stream::with_raw_mut): run a closure with an array's
//!   [`RawPtr`] (a `CUdeviceptr` with the view's offset) and the stream's [`RawStream`] (a
//!   `CUstream`), ordered like one of the library's own ops: the work the closure enqueues on
//!   the raw stream comes after the queued work it must follow, on any stream, and before
//!   the later work that must follow it. On the CPU backend the closure touches host memory
//!   itself, after the stream has drained.
//! - [`DeviceRead::raw_ptr`] and [`Stream::raw_handle`](gpukit_core::Stream::raw_handle):
//!   the bare handles, when you order the work yourself.
//! - [`Context::array_from_raw`](gpukit_core::Context::array_from_raw) and
//!   [`Context::stream_from_raw`](gpukit_core::Context::stream_from_raw): wrap a foreign
//!   allocation or stream without taking ownership (dropping the wrapper frees and destroys
//!   nothing).
//!
//! `gpukit::cuda::cudarc` is the cudarc this build uses. A pointer or stream of another
//! backend's kind is [`Error::Unsupported`].
//!
//! ## Configuration
//!
//! [`Context::from_config`] reads `gpu.toml` (or the file `GPU_CONFIG` names) through
//! [`Config`]: `device`, `dtype` and `fallback`, each optional; `GPU_DEVICE` overrides the
//! device. Code beats `GPU_DEVICE` beats the file.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![warn(unsafe_op_in_unsafe_fn)]

mod any;
mod config;
mod context;
pub mod launch;
pub use launch::{LaunchEnv, LaunchSource};
mod group;

pub use any::{
    AnyBackend, AnyBuffer, AnyEvent, AnyGraph, AnyHostMem, AnyKernel, AnyRegistration, AnyStream,
    Member,
};
pub use config::{
    read_device_var, Config, FallbackPolicy, SpecOrigin, CONFIG_FILE, CONFIG_VAR, DEVICE_VAR,
};
pub use context::{Context, Rejection, Selection};
pub use group::{Communicator, DeviceGroup, ProcessGroup, JOIN_TIMEOUT};

pub use gpukit_core::{
    BinaryOp, CollectiveOp, DType, DeviceInfo, DeviceRead, DeviceSet, DeviceSpec, DeviceWrite,
    Dim3, Element, Error, Float, Gemm, HostPoolStats, HostSlice, HostUse, In, KernelSpec,
    LaunchConfig, LaunchLimits, Location, MemoryStats, Numeric, Out, ParseDTypeError, RawPtr,
    RawStream, ReduceOp, Rejected, Result, Rng, Shape, ThreadIndex, UnaryOp,
};

/// The backend-generic core, for code generic over backends.
#[doc(inline)]
pub use gpukit_core as core;
/// The `half` crate's f16 and bf16, the element types of cargo feature `half`.
#[cfg(feature = "half")]
#[doc(no_inline)]
pub use gpukit_core::half;
/// The CPU reference backend.
#[doc(inline)]
pub use gpukit_cpu as cpu;
/// The CUDA backend (and its availability probe, `gpukit::cuda::probe()`); cargo feature
/// `cuda`, on by default.
#[cfg(feature = "cuda")]
#[doc(inline)]
pub use gpukit_cuda as cuda;
#[doc(inline)]
pub use gpukit_macros::kernel;
/// Overlapped upload, compute and download ([`Pipeline`], [`Pattern`], reports, timelines).
#[doc(inline)]
pub use gpukit_pipeline as pipeline;
pub use gpukit_pipeline::{
    Batch, BoundSource, BoxError, Filled, GroupTimeline, Lane, Pattern, PipelineError, Progress,
    ProgressSnapshot, Report, Span, Stage, StageTimes, Timeline,
};
/// The portable GPU backend on wgpu: Vulkan (Metal, DX12), with its probe
/// (`gpukit::wgpu::probe()`); cargo feature `vulkan`, on by default.
#[cfg(feature = "vulkan")]
#[doc(inline)]
pub use gpukit_wgpu as wgpu;

/// A pipeline over the context's backend, carrying `In` and `Out` arrays (set by
/// [`Pipeline::input`] and [`Pipeline::output`]).
pub type Pipeline<In = (), Out = ()> = gpukit_pipeline::Pipeline<AnyBackend, In, Out>;

// The READMEs' Rust blocks are complete programs, compiled and run as doc tests so that
// they stay in step with the API (the workspace README's f16 block needs `half`).
#[cfg(all(doctest, feature = "half"))]
#[doc = include_str!("../../../README.md")]
struct WorkspaceReadme;
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadme;

/// An error and its causes, `: `-joined, as anyhow's `{:#}` prints them.
///
/// Each level of this workspace's errors states one fact and leaves its cause to
/// [`source`](std::error::Error::source) (a pipeline error says which batch and stage failed,
/// its source says how), so `{e}` alone shows only the outermost fact. Programs that do not
/// use anyhow or eyre print errors with this:
///
/// ```
/// use gpukit::{Context, DeviceSpec, Pattern, Pipeline};
///
/// let ctx = Context::new(DeviceSpec::Cpu(None))?;
/// let err = Pipeline::new(&ctx, Pattern::Double)
///     .batches(2)
///     .max_rows(4)
///     .input::<f32>(1)
///     .output::<f32>(1)
///     .run(
///         |_i, buf| Ok(buf.len()),
///         |s, _b, x, y| s.add(x, &x.slice(..1)?, y), // lengths 4 and 1
///         |_b, _y| Ok(()),
///     )
///     .unwrap_err();
/// assert_eq!(err.to_string(), "batch 0: the compute stage failed");
/// let chain = gpukit::error_chain(&err);
/// assert!(chain.starts_with("batch 0: the compute stage failed: "), "{chain}");
/// assert!(chain.ends_with("has 1 elements, expected 4"), "{chain}");
/// # Ok::<(), gpukit::Error>(())
/// ```
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A typed array in device memory.
pub type GpuArray<T> = gpukit_core::GpuArray<T, AnyBackend>;
/// A read-only view of part of a [`GpuArray`].
pub type GpuView<'a, T> = gpukit_core::GpuView<'a, T, AnyBackend>;
/// A writable view of part of a [`GpuArray`].
pub type GpuViewMut<'a, T> = gpukit_core::GpuViewMut<'a, T, AnyBackend>;
/// An in-order queue of work.
pub type Stream = gpukit_core::Stream<AnyBackend>;
/// A position in a stream, with timing.
pub type Event = gpukit_core::Event<AnyBackend>;
/// Host memory for fast transfers.
pub type HostBuffer<T> = gpukit_core::HostBuffer<T, AnyBackend>;
/// A copy in flight that owns its host memory.
pub type Pending<H> = gpukit_core::Pending<H, AnyBackend>;
/// A kernel loaded on a context.
pub type Kernel<S> = gpukit_core::Kernel<S, AnyBackend>;
/// An array in unified (managed) memory, from [`core::Context::alloc_unified`].
pub type UnifiedArray<T> = gpukit_core::UnifiedArray<T, AnyBackend>;
/// Work captured from a stream ([`core::Stream::capture`]), launchable again and again.
pub type Graph = gpukit_core::Graph<AnyBackend>;
/// A named range on a profiler's timeline (NVTX on CUDA), from [`core::Context::range`].
pub type Range<'a> = gpukit_core::Range<'a, AnyBackend>;

/// The names most programs use.
pub mod prelude {
    pub use crate::{
        Context, DeviceSpec, Element, Error, Event, Gemm, GpuArray, HostBuffer, HostUse, In,
        KernelSpec, LaunchConfig, Out, Result, Stream, ThreadIndex,
    };
}
