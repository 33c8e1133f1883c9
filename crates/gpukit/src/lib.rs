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
//! ## Kernels written in Rust
//!
//! [`#[kernel]`](macro@kernel) (from `gpukit-macros`) compiles one plain Rust function to
//! three targets: CUDA C (compiled by NVRTC like the built-in ops), WGSL (for the Vulkan
//! backend) and a CPU twin with the same semantics. The expansion of `#[kernel] fn name(..)`
//! is a function `name()` returning the kernel's [`KernelSpec`], typed by the parameters:
//! `&[T]` is an [`In<T>`](In) (read), `&mut [T]` an [`Out<T>`](Out) (written), a scalar is
//! itself; `ctx.kernel(name())?` loads it, a [`Kernel`] of that signature, whose type the
//! macro names too (`NameKernel`: `saxpy` -> `SaxpyKernel`, to keep in a struct or pass to a
//! function), and `s.launch(&k, cfg, args)` checks the arguments' types at compile time, as
//! for any kernel. The launch configuration
//! ([`LaunchConfig`]): `for_elems(n)` (a thread per element, 256 to a block),
//! `linear(blocks, threads)`, `for_elems_2d(width, height, [bx, by])` and `for_elems_3d`
//! (blocks covering a grid of elements), `new(grid, block)`. The workspace's
//! `examples/kernels.rs` has five worked examples (saxpy, a tiled matrix multiply with
//! shared tiles and barriers, a block reduction with an atomic add per block, the same
//! reduction with subgroup sums, a 2-D stencil), each tested on the CPU, on lavapipe and
//! under the CUDA emulator against plain Rust and compiled with NVRTC in CI.
//!
//! **The language.** Parameters (at most 12): slices and scalars of `f32`, `f64`, `i32`,
//! `u32`, `i64`, `u64`, `u8`, `i8`, `f16` and `bf16`. `f16` and `bf16` are storage types, as
//! in the built-in ops (with the `half` feature): an element read from such an array, or
//! such a scalar, is an `f32` (a scalar reaches GPU code as its `f32` value), and an `f32`
//! written to such an array is rounded to it (`x as f32` of a wider `x`, such as an f64
//! accumulator stored as `T`, is rounded once, from `x`). Statements:
//! `let`/`let mut` (also of a tuple), `const`, assignments and `+=` etc. to locals and array
//! elements, `if`/`else`, `for i in a..b` and `for i in (a..b).step_by(s)`, `while`, `loop`,
//! `break`, `continue`, `return`. Expressions: literals, arithmetic, comparisons,
//! `&&`/`||`/`!`, bit operations and shifts, `as` casts (Rust's on every target: integers
//! wrap, floats to integers saturate toward zero, a NaN to 0), indexing, `a.len()`,
//! `T::MIN`/`T::MAX` of integer types, an `if`/`else` as the whole value of a `let` or an
//! assignment, the math methods `abs`, `min`, `max`, `sqrt`, `exp`, `exp2`, `ln`, `log2`,
//! `ln_1p`, `sin`, `cos`, `tanh`, `powf`, `floor`, `ceil`, `mul_add` (`min` and `max` as the
//! built-in `minimum` and `maximum`: a NaN loses to a number, and of two equal values, `0.0`
//! and `-0.0` included, the receiver wins), and `u32`'s `mul_hi` (the high word of the
//! 64-bit product, for hashes and counter-based generators such as Philox). Intrinsics: `global_x()`
//! (`blockIdx.x * blockDim.x + threadIdx.x`), `thread_x()`, `block_x()`, `block_dim_x()`,
//! `grid_dim_x()` and their `_y`, `_z` (all `usize`); `barrier()` (`__syncthreads`,
//! `workgroupBarrier`); `shared::<T, N>()` (a block-shared array, `N` a constant
//! expression; undefined when each block starts, so write before reading: zeroed on Vulkan,
//! not on CUDA, the last block's on the CPU twin); `atomic_add`, `atomic_min`, `atomic_max`,
//! `atomic_exchange`, `atomic_cas` on `&mut a[i]` of `i32`/`u32` arrays, slices and shared
//! arrays alike (add and exchange also `f32`; add also `i64`, `u64` and
//! `f64`, on the CPU and CUDA: WGSL's atomics are 32-bit), returning the old value;
//! `report_out_of_bounds("rows", i, n)` (two `usize`s) reports an index the kernel checks
//! itself (a row number read from an array, say) as a checked access out of bounds is
//! reported, the first of the launch as [`Error::KernelFailed`] at the next sync, "index `i`
//! is out of bounds for `rows` (length `n`)", in [`KernelSpec::unchecked`] code too.
//! Types are Rust's, with no implicit conversion; an unsuffixed literal takes its type from
//! the other operand (two literal bounds of a `for` make a `usize` loop). Anything else
//! (method calls, closures, references, macros) is a compile error at its span that says
//! what is supported.
//!
//! **Subgroups** (warps on CUDA). `subgroup_size()`, `subgroup_lane()`, `subgroup_id()` (the
//! thread's subgroup in its block) and `num_subgroups()` (all `usize`) say where a thread is;
//! the size is the target's own: 32 on CUDA, the adapter's on Vulkan (8 on lavapipe, 32 to 64
//! on GPUs), 32 on the CPU twin, so write kernels that read it rather than assume it. A
//! subgroup's lanes are consecutive threads by linear index in the block (on Vulkan, where
//! the driver places them; there `subgroup_lane()`, `subgroup_id()` and the shuffles need a
//! 1-D block, as naga allows their built-ins in no other); a block's last subgroup may have
//! fewer.
//! Collectives, each the whole value of a `let` (`let s = subgroup_add(x);`):
//! `subgroup_add`, `subgroup_min`, `subgroup_max` (over the subgroup's lanes; a NaN loses
//! to a number), `subgroup_inclusive_add`, `subgroup_exclusive_add` (prefix sums; 0 on lane
//! 0) of an `f32`, `f64`, `i32`, `u32`, `i64`, `u64`, `u8` or `i8` (the 8-bit types take part
//! widened to 32 bits and come back wrapped); `subgroup_shuffle(x, lane)`,
//! `subgroup_shuffle_xor(x, mask)`, `subgroup_shuffle_up(x, delta)`,
//! `subgroup_shuffle_down(x, delta)` (a source lane that is not there gives the thread's own
//! `x`); `subgroup_any(c)`, `subgroup_all(c)` of a `bool`. A ballot as a bit mask is not in
//! the language (a Vulkan subgroup has up to 128 lanes): `subgroup_add(c as u32)` counts the
//! lanes where `c` holds and `subgroup_exclusive_add(c as u32)` is a lane's place among them.
//! Integer sums wrap; a float sum's order is the target's (a tree of warp shuffles on CUDA,
//! the driver's on Vulkan, lane order on the twin), so its last bits may differ between
//! backends. Like `barrier()`, a collective is reached by every thread of the block (the
//! same rules, and the twin's check, apply). CUDA: warp shuffles (`__shfl_down_sync` trees,
//! `__shfl_up_sync` scans, `__any_sync`); Vulkan: WGSL's subgroup built-ins where the
//! adapter has them (wgpu's `SUBGROUP`), else the kernel's second WGSL, which computes each
//! collective through workgroup memory in subgroups of 32 (two barriers and a read of the
//! subgroup's lanes: correct, slower); [`KernelSpec::without_subgroups`] chooses the second
//! on any adapter. CPU: the twin splits the block at the collective, as at a barrier, and
//! computes each subgroup's result from its lanes' values.
//!
//! Kernels call device functions: `#[kernel(device)] fn hypot(a: f32, b: f32) -> f32 {
//! (a * a + b * b).sqrt() }` takes and returns scalars (no thread coordinates, arrays,
//! barriers or atomics), stays an ordinary Rust function on the host and in CPU twins, and
//! its CUDA C and WGSL are linked into every kernel that calls it (device functions may call
//! each other); the compiler checks each call against its signature. A kernel may be generic
//! over its element type: `fn axpy<T: Float>(a: T, x: &[T], y: &mut [T])` is compiled for
//! `f32`, `f64`, `f16` and `bf16` (`T: Numeric`: for all ten types; the body must compile for
//! each, and an unsuffixed integer literal takes the type `T` there), and `axpy::<f64>()` is
//! that instantiation's spec. In the `f16` and `bf16` instantiations `T` is the 16-bit type in
//! the parameters and `f32` in the body (a `let v: T` is an `f32`), as the built-in ops
//! compute them.
//!
//! **Compile-time parameters** specialise a kernel as cubecl's `comptime` does: the const
//! generics of `fn reduce<const B: usize, const SQUARE: bool>(..)` (`usize`, `u32`, `i32`,
//! `u64`, `i64` or `bool`) are constants of its body, and `reduce::<256, true>()` is the spec
//! with those values written into its CUDA C and WGSL (each instantiation compiled apart, so
//! `if SQUARE` and loops over `0..B` are resolved by the GPU compiler) and its CPU twin
//! generic over them. A `usize` one may size a shared array: `shared::<f32, B>()`, a tile as
//! large as the block; a length outside 1..=65536 is an error when the kernel is loaded
//! (CUDA, Vulkan) or launched (CPU), never an allocation of it.
//!
//! Integer arithmetic is the built-in ops' on every target (the README states it): it wraps,
//! `x / 0 == 0` and `x % 0 == 0`; shifts take the amount modulo the width; float-to-integer
//! casts saturate on the CPU and CUDA. An expression of constants (`1.0f32 / 0.0`, `7 / z`
//! with `let z = 0`) is computed when it runs, as Rust computes it, on every backend. (WGSL
//! lets a Vulkan driver assume floats are never NaN; a float `!=` is written `!(a == b)`,
//! which keeps IEEE's answer, true for a NaN, on the drivers tested.)
//!
//! **The bounds-check contract.** Every read and write of a slice or shared array, atomics
//! included, is checked against the length passed with the array (for a view, the view's
//! length) or the shared array's size. An access outside is not made: a read gives zero, a
//! write is dropped, and the stream's first such access is reported as
//! [`Error::KernelFailed`] (`{ kernel, message }`, naming the array, the index and the
//! length) once: at that stream's next `sync` (or `query` that finds it idle; a graph's, at
//! the sync of the stream it was launched on) or at `Context::sync`, which reads every
//! stream's (a dropped stream's fault waits for it); the launch's other threads run to
//! their end, so its outputs are undefined, and the context stays usable. This holds on
//! every backend (the CPU twin checks in Rust, the GPU code before each access, reporting
//! through a small fault record each stream owns), so constructing and launching a
//! `#[kernel]` needs no `unsafe`. What the macro cannot rule out: data races between
//! threads of one launch (two threads writing one element, or one reading what another
//! writes without a barrier or an atomic between them) give unspecified values, as in CUDA.
//! The CPU backend finds them: under `GPU_KERNEL_RACECHECK=1` (or
//! [`cpu::CpuBackend::with_kernel_racecheck`]) each launch records which threads read and
//! write each element between barriers, and two threads' accesses to one element, one a
//! write and not both atomic, with no `barrier()` between them (one block) or in different
//! blocks are `KernelFailed` naming the array, the index and both threads (56 bytes per
//! element of each array the launch touches, for the launch's time; CI runs every kernel
//! test under it). Every thread of a block reaches the same barriers and
//! subgroup collectives (on a GPU, one that some threads skip hangs or corrupts the block):
//! the macro refuses one inside an `if`, `while` or `for` whose condition or bounds may
//! differ between the block's threads (they depend on `thread_*()`, `global_*()`,
//! `subgroup_lane()`, a value read from memory, or a local that does), and a `return` or
//! `break` that could skip one; kernel arguments, lengths, `block_*()` and constants are
//! the same for the whole block. `let n = uniform_load(&t[i]);` reads element `i` (an index
//! the block shares) of the shared array `t` between two barriers, so every thread of the
//! block gets the same value, which may then steer a barrier (WGSL's
//! `workgroupUniformLoad`): thread 0 stores a count read from a slice in `t[0]`, say.
//!
//! **What runs where.** CUDA: every type; compiled with `--fmad=false`, so `a * b + c` gives
//! the CPU's bits. Vulkan: every type too (`usize` is 32 bits there): `u8` and `i8` arrays
//! are packed four to a 32-bit word and `bf16` two (written with atomic bit operations, so
//! threads writing neighbours do not race), 8-bit values are computed in 32 bits and wrapped
//! back after each operation, and `f64`, `i64`, `u64` and `f16` arrays need the adapter's
//! `SHADER_F64`, `SHADER_INT64` and `SHADER_F16` (loading a kernel that uses one the adapter
//! lacks is [`Error::KernelUnavailable`] saying which); Vulkan has no math functions of an
//! `f64` but `abs`, `min`, `max`, `sqrt`, `floor`, `ceil` and `mul_add`, so a kernel calling
//! another has no WGSL (the same error). CPU: the twin runs a launch block by block
//! on the stream's worker; a kernel with barriers is split at them, so the threads really
//! meet there. Math functions are each device's own (as for the built-in ops): results agree
//! within a few ulps, arithmetic bit for bit.
//!
//! **What the checks cost.** An access the code already guards carries no check in the GPU
//! code: its index is proven in bounds when it is an unchanging value (a `let` never
//! assigned again, a loop variable, `global_*()`, `thread_*()`) below the array's length
//! inside `if i < a.len()` (or `&&` of such, or after `if i >= a.len() { return; }`), inside
//! `for i in s..a.len()`, or below a `let n = a.len().min(b.len())`; and, for a shared
//! array of a constant size, when its numeric range (`thread_*()` below 1024, loop bounds,
//! guards such as `tx < 16`; any operation that could wrap gives no range) lies inside the
//! array. So `if i < x.len() && i < y.len() { y[i] = a * x[i] + y[i]; }` runs at the
//! unchecked speed, and the examples' 5 x 5 convolution (a shared tile with a halo) at
//! 1.15x its unchecked time on lavapipe (3.5x without the proofs); each access no guard
//! covers keeps a compare and a report path (saxpy guarding `y` alone: 1.8x on lavapipe,
//! which runs the never-taken path masked for every invocation; `kernel_bench` measures
//! all three). For a hot kernel whose every access is known to be in bounds,
//! `unsafe { name().unchecked() }` is the same kernel without the checks in its GPU code
//! (atomics keep theirs, and the CPU twin, safe Rust, all of its).
//!
//! **Naming a loaded kernel, launching it.** `#[kernel] fn tiled_gemm` also defines
//! `type TiledGemmKernel<B = AnyBackend>`, the loaded kernel's type (a generic kernel's
//! takes its element type first), to keep in a struct or take as a parameter.
//! `LaunchConfig::for_elems(n)`, `for_elems_2d(w, h, [bx, by])` and `for_elems_3d` size a
//! grid that covers the elements. The arguments are checked one by one against the
//! signature: a wrong one is a compile error at that argument.
//!
//! **Seeing the generated code.** `name().cuda_source()` and `name().wgsl_source()` return
//! it; `cargo run --example rust_kernels -- --print tiled_gemm --target wgsl` prints an
//! example's.
//!
//! **The escape hatch.** Hand-written kernels stay: [`KernelSpec::cuda`] (or `ptx`),
//! `.wgsl(src)` and a safe CPU closure `.cpu(|t, args| ..)`. GPU code written by hand is
//! `unsafe` to construct: you vouch that it matches the signature and stays in bounds.
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
//! runtime (the library depends on none). The backend wakes the task when the work is done
//! (no thread per await), so a thousand awaits cost no thousand threads. With tokio:
//!
//! ```
//! use gpukit::{Context, DeviceSpec, HostUse};
//!
//! let ctx = Context::new(DeviceSpec::Cpu(None))?;
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     let mut x = ctx.alloc_zeros::<f32>(1 << 20)?;
//!     ctx.fill(&mut x, 1.0)?;
//!     ctx.synchronize_async().await?;              // the work so far; the thread stays free
//!     let host = ctx.alloc_host::<f32>(1 << 20, HostUse::Download)?;
//!     let host = ctx.download(&x, host).map_err(|r| r.error)?.await.map_err(|r| r.error)?;
//!     assert_eq!(host[0], 1.0);
//!     Ok::<(), gpukit::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/async_service.rs` serves 64 requests (upload, softmax, download, each awaited)
//! on one thread and checks them against the host.
//!
//! ## Cargo features
//!
//! - `cuda` (on by default): the CUDA backend (`gpukit-cuda`, `gpukit-cuda-sys`, `cudarc`). It loads
//!   the driver, NVRTC and cuBLAS at run time, so building it needs no CUDA toolkit. With
//!   `default-features = false` none of those crates is compiled, the facade has the CPU
//!   backend alone, and a CUDA request is [`Error::Unavailable`] whose reason begins
//!   "not compiled in" (`auto` records it in [`Context::selection`] and uses the CPU).
//! - `vulkan` (on by default): the Vulkan (Metal, DX12) backend (`gpukit-wgpu` on `wgpu`,
//!   about 60 crates).
//!   It opens the Vulkan loader at run time, so building it needs no Vulkan SDK; without it a
//!   Vulkan request is [`Error::Unavailable`] whose reason begins "not compiled in".
//! - `half` (on by default): f16 and bf16 elements ([`half::f16`], [`half::bf16`]), stored
//!   in 16 bits, computed in f32 and rounded once, identically on every backend (gemm
//!   accumulates in f32 too).
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
