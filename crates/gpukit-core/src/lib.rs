//! # gpukit-core
//!
//! The backend-agnostic heart of the `gpukit` workspace. It defines what every backend must do
//! (the [`Backend`] trait, with associated types for buffers, host memory, streams, events
//! and kernels, dispatched statically) and builds the safe, typed API on top of it once, for
//! all backends:
//!
//! - [`Context`]: an opened device, which is also its default [`Stream`];
//! - [`GpuArray`] and its views [`GpuView`] / [`GpuViewMut`]: typed device memory for any
//!   [`Element`], freed on drop without racing queued work, their memory from a
//!   stream-ordered pool ([`Context::memory_stats`]);
//! - [`UnifiedArray`]: unified (managed) memory the host reads and writes in place;
//! - [`HostBuffer`]: pinned (or registered) host memory chosen by [`HostUse`], pooled;
//! - [`Stream`] and [`Event`]: in-order queues, ordering and timing;
//! - asynchronous copies that are safe by ownership ([`Stream::upload`] moves the host
//!   memory into a [`Pending`] that gives it back when the copy is done);
//! - built-in ops, each written once as kernels of the kernel language (element-wise
//!   unary and binary ops from the op table, [`optable`], with scalar, row and column
//!   forms, all also in place; reductions whole and per row; softmax; cross-entropy; casts;
//!   indexing; random fills; batched gemm, which a backend may run with a library of its
//!   own, [`Backend::gemm`]); custom kernels ([`KernelSpec`], [`Stream::launch`]);
//! - [`Graph`]: work captured from a stream ([`Stream::capture`]) and launched again;
//! - [`DeviceSpec`] (parsed from code, `GPU_DEVICE` or the facade's `gpu.toml`), and the one
//!   [`Error`] type.
//!
//! ## Layers
//!
//! `gpukit-cuda-sys -> backends (gpukit-cpu, gpukit-cuda) -> gpukit-core <- gpukit-pipeline`, with the `gpukit`
//! facade on top. This crate depends on no GPU library: backends depend on it.
//!
//! ## Design choices
//!
//! - Backends see untyped buffers and byte offsets; the element type is added once, in
//!   `GpuArray<T, B>` (as cudarc's `CudaSlice<T>` does).
//! - Everything a caller can get wrong is checked here, before a backend is called, so a
//!   rejected call changes nothing and every backend rejects the same inputs the same way.
//! - Ordering between streams is automatic: each allocation records its last writer and
//!   readers ([`Stream`] explains the rule). Until a context has a second stream nothing is
//!   recorded beyond the stream itself, so single-stream programs pay no events.
//! - Device memory comes from a stream-ordered caching pool per context
//!   ([`Context::memory_stats`], [`Context::trim`]): a dropped array's block serves the next
//!   request of its size class without a device call or a host sync, its next owner
//!   inheriting the old owner's record of uses, so the same rule orders the reuse. The pool
//!   lives here, not in the backends, so that every backend has the same behaviour and the
//!   same counters.
//! - Graphs ([`Stream::capture`], [`Graph`]) are captured per stream through a backend
//!   hook (CUDA graphs; recorded tasks on the CPU). Captured work records no uses: the
//!   graph holds its arrays and each launch is ordered like one op over all of them, so no
//!   event made in a capture escapes it; calls that would break a capture are refused here,
//!   the same for every backend ([`Error::CaptureViolation`]).
//! - Profiler ranges ([`Context::range`]) are a backend hook, NVTX on CUDA, nothing
//!   elsewhere.
//! - Errors raised in `Drop` are kept by the context and returned by its next call (or
//!   [`Context::check`]); a context dropped with errors still pending logs them with
//!   `tracing::error!` (a library only logs; call [`Context::sync`] before the drop to get
//!   them as values).
//! - Dependencies: `thiserror` for errors, `tracing` (without its proc-macro crate) for
//!   logs, and `half` (feature `half`) for f16/bf16 elements. Reading `gpu.toml` is the
//!   facade's job, so this crate needs no parser.
//!
//! The CPU backend (`gpukit-cpu`) is the reference implementation of the semantics written on
//! each [`Backend`] method; the tests of the `gpukit` facade run every behaviour on every
//! backend against it.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![warn(unsafe_op_in_unsafe_fn)]

mod array;
mod backend;
pub mod collective;
mod context;
pub mod dlpack;
mod dtype;
mod element;
mod error;
mod graph;
mod host;
mod kernel;
#[doc(hidden)]
pub mod native;
mod ops;
pub mod optable;
mod peer;
#[doc(hidden)]
pub mod plant;
mod pool;
mod spec;
mod stackvec;
mod stream;
mod track;
mod transfer;
mod wait;

/// Locks `m`, taking a poisoned lock's data as it is: what this crate's mutexes guard is
/// changed by whole assignments and pushes, which a panic leaves consistent.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub use array::{DeviceRead, DeviceWrite, GpuArray, GpuView, GpuViewMut, UnifiedArray};
pub use backend::{
    Backend, BufAt, DeviceInfo, HostUse, KernelArg, LaunchLimits, Location, RawPtr, RawStream, Wake,
};
pub use collective::CollectiveOp;
pub use context::{Context, Range};
pub use dlpack::{DlpackArray, DlpackLegacy, DlpackTensor};
#[cfg(feature = "half")]
#[doc(hidden)]
pub use element::half_types::{odd_f32 as __odd_f32, odd_f32_int as __odd_f32_int};
pub use element::{
    add_to_partials, chunk_dot_of, chunk_sum_of, combine_partials, ordered_sum, Arith, DType,
    DTypeVisitor, Element, Float, Numeric, ParseDTypeError, Real, Wide, SUM_CHUNK, SUM_PARTIALS,
};
pub use error::{Error, Rejected, Result};
pub use gpukit_kernel::cuda_ptx_helpers;
pub use graph::Graph;
pub use host::{HostBuffer, HostPoolStats, HostSlice, Pending};
#[doc(hidden)]
pub use kernel::{__Access, RaceCheck};
pub use kernel::{
    __comptime, ArgRef, CheckedAbi, CpuKernelFn, CpuRun, DeviceFn, Dim3, In, Kernel, KernelDesc,
    KernelFaults, KernelFloat, KernelNumeric, KernelParam, KernelSig, KernelSource, KernelSpec,
    LaunchArg, LaunchArgFor, LaunchArgs, LaunchConfig, Out, RawArg, ThreadIndex, CUDA_PTX_HELPERS,
    FAULT_WORDS, MAX_KERNEL_ARGS, MAX_LAUNCH_ARGS,
};
#[doc(hidden)]
pub use ops::fold::__row_sum_kernel;
pub use ops::map::{__binary_kernel_cuda, __binary_kernel_spec};
pub use ops::Rng;
pub use optable::{
    cast_slice, cross_entropy_rows, softmax_rows, BinaryOp, Distribution, Domain, Gemm, MathFn,
    ReduceOp, RhsSlice, Shape, UnaryOp,
};
pub use pool::{caching as pool_caching, MemoryStats, POOL_VAR};
pub use spec::{DeviceSet, DeviceSpec, SpecBackend, MAX_SET_DEVICES};
#[doc(hidden)]
pub use stackvec::StackVec as __StackVec;
pub use stream::{Event, Stream};
pub use track::SliceRef;
pub use wait::{EventFuture, PendingFuture};

#[cfg(feature = "half")]
#[doc(no_inline)]
pub use half;

/// Its input where gpukit-core has f16 and bf16 (the feature `half`), else nothing:
/// `#[kernel]` wraps a generic kernel's f16 and bf16 instantiations in it, so that they
/// are compiled exactly where those types exist.
#[cfg(feature = "half")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_half {
    ($($t:tt)*) => { $($t)* };
}

/// Its input where gpukit-core has f16 and bf16 (the feature `half`), else nothing.
#[cfg(not(feature = "half"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_half {
    ($($t:tt)*) => {};
}
