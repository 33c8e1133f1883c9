//! # gpukit-cpu
//!
//! The CPU reference backend of the `gpukit` workspace: a complete implementation of
//! [`gpukit_core::Backend`] on the host, and the oracle every other backend is tested against.
//! It sits beside `gpukit-cuda` in the layers (`backends -> gpukit-core`), needs nothing but the
//! standard library, `matrixmultiply` and `rayon`, and runs everywhere, so every program and test of
//! the workspace also runs on a machine without a GPU.
//!
//! ## Semantics (the contract the CUDA backend is tested against)
//!
//! - **Device memory** is host memory aligned to 256 bytes, always zero-initialized (so
//!   `alloc` and `alloc_zeros` differ only in promise). An allocation larger than the
//!   machine's memory is `OutOfMemory` before the allocator is asked.
//! - **Streams** are in-order queues run by a pool of worker threads (`gpukit-cpu-worker`)
//!   that every stream of the process shares, as a GPU's schedulers serve all its streams:
//!   a queue with work waits in the pool's ready list until a worker takes it and runs its
//!   tasks in order, one at a time. Workers start as needed, eagerly up to the number of
//!   cores and at most one per live stream, so that every stream with work can always get
//!   one, whatever another stream's task blocks on; idle ones park, and end when they
//!   outnumber the streams. Every copy, op and kernel is a task on its stream's queue and
//!   really runs asynchronously: the call returns once the task is queued. The exception is
//!   short work on an idle stream (nothing queued or running): a copy of at most 1 MiB, a
//!   built-in op whose arrays are at most 1 MiB each (256 Ki f32) or a gemm of at most 16 Ki
//!   multiply-adds runs in place on the calling thread, in the stream's
//!   order (it takes the next position, and nothing queued after it starts before it has
//!   finished), since that costs less than waking a worker; the call then returns after
//!   the work, and its errors are reported at the next sync as always. Kernels and waits
//!   always go to the pool. A queue holds up to 256 tasks; queuing onto a full one waits
//!   for a worker to take one, as a GPU's launch queue does. Queuing allocates nothing: a
//!   task is a closure stored inline in a ring allocated with the stream.
//! - **Latency**: an idle worker, and a host thread waiting for a task or an event, polls
//!   for up to 50 us before it parks, so that the next op of a loop, or the end of a short
//!   one, costs no thread wake-up. At most one fewer threads than the machine has cores
//!   poll at once (at least one), so polling never takes every core from the threads doing
//!   the work; a parked thread uses no CPU, so an idle context costs none.
//! - **Events** are positions in a queue; a timing event is a task that stamps the time
//!   when a worker reaches it. A stream waiting on an event queues a wait that holds no
//!   thread: the stream is set aside until the other queue passes the position, and the
//!   worker that finishes that position runs the waiting stream next when it has nothing
//!   else (a chain of dependent work across streams runs on one thread, with no wake-up).
//!   Waits only point at work queued earlier, so they cannot deadlock.
//! - **Copies** are `memcpy`s run by the stream's worker, asynchronous like everything else;
//!   host memory from `alloc_host` is page-aligned heap memory (a CPU has nothing to pin)
//!   and registration is accepted and does nothing.
//! - **Ops** run the op table's reference semantics (`gpukit_core::optable`) exactly (the
//!   f32 math ops within the table's ulp budgets instead, see below): element-wise loops in
//!   the element's compute type; `sum`, `mean` and `dot` accumulate floats in f64 in the
//!   order `gpukit_core::SUM_CHUNK` defines (`gpukit_core::ordered_sum`); softmax and
//!   cross-entropy as `gpukit_core::softmax_rows` and `gpukit_core::cross_entropy_rows`;
//!   gemm (batched by a loop) runs f32 products of at least 288³ multiply-adds through
//!   this crate's AVX-512 kernel on CPUs that have AVX-512F (packed cache-sized blocks, a
//!   12 x 32 register tile), the others through `matrixmultiply` (f16/bf16 widened to
//!   f32). The ops written as kernels (the element-wise table, fill, axpy, clamp,
//!   comparisons, `select`, `cumsum`, the reductions, softmax, cross-entropy, the random
//!   fills, gather, ...) run their native body, gpukit-core's (`gpukit_core::native`), when
//!   launched; gemm is the backend's `Backend::gemm` (`src/ops/`).
//!   An element-wise op added to the table needs nothing here. The f32 math ops (`exp`,
//!   `log`, `log1p`, `tanh`, `sigmoid`, `silu`, `gelu`, `softplus`, `pow`, softmax,
//!   log-softmax and cross-entropy) run vectorised code instead of one libm call per
//!   element (gpukit-core's `native::vmath`: AVX2 with FMA or AVX-512 chosen at run time,
//!   else the baseline build, NEON on AArch64; fused multiply-adds, so the same bits on
//!   every path and core count), each within its table budget with room (`exp`, `log`,
//!   `log1p` 2 ulp of budget 3; `tanh`, `sigmoid`, `silu`, `softplus` 3 of 4; `gelu` its
//!   budget; `pow` 1 of 8; the row-wise ops' sums in f64 as `gpukit_core::chunk_sum_of`
//!   orders them): on this project's
//!   VM (AMD EPYC, AVX-512), one thread, 0.16 ns an element for `exp`, 0.18 for `log`,
//!   0.23 for `log1p`, 0.16 for `tanh`, 0.75 for `pow`; `ops_bench` prints them all.
//!   The element-wise ones take f16 and bf16 through the same f32 code (widened exactly,
//!   rounded once, as the table does); f64 keeps the table's bodies.
//! - **Cores**: gemm on the AVX-512 kernel is split by blocks of output rows or columns
//!   across rayon's pool, other gemms run on matrixmultiply's thread pool (one thread per
//!   physical core, at most 4; `MATMUL_NUM_THREADS` overrides); either way each output
//!   element is summed over k in the same order however the product is split. Element-wise
//!   ops from 1 Mi elements (the vectorised f32 math ops but `softplus` and `pow` from
//!   512 Ki; other ops calling the math library per element, as their table entry's
//!   `math` column says, and `softplus` and `pow`, from 64 Ki) are split in row-aligned
//!   pieces across rayon's pool (one thread per core, `RAYON_NUM_THREADS` overrides); both
//!   pools are shared by every
//!   stream, and the results are the bits one thread gives (each output element is
//!   computed the same way whatever the split). Softmax and cross-entropy of many
//!   rows are split by rows from 512 Ki elements (f32; 64 Ki for the others), and from 1 Mi
//!   elements reductions of many rows are split by rows too, and a long row's sum, mean,
//!   min, max, argmin, argmax or dot in chunks
//!   of `gpukit_core::SUM_CHUNK` whose results are combined in order: the order
//!   gpukit-core defines for float sums, so the bits are the same on any number of cores.
//!   A chunk's sum (`gpukit_core::chunk_sum_of`: 32 interleaved f64 partial sums, added
//!   pairwise) runs on the widest vectors the CPU has (`sum`: SSE2, AVX2 or AVX-512 chosen
//!   at run time, the same additions in the same order on each), as do dots and the f64
//!   sums of rows (`row_sum` of floats, `row_mean`, softmax's and cross-entropy's).
//! - **Kernels** are Rust closures called once per thread of the launch with CUDA's
//!   coordinates (`gpukit_core::ThreadIndex`), blocks by z, y, x and threads by z, y, x, one
//!   after another on one worker. A panicking closure does not take the worker down: the launch's
//!   outputs are undefined and the stream's next `sync` (or the context's) returns
//!   `KernelFailed`; the context stays usable. With `GPU_KERNEL_RACECHECK=1` (or
//!   [`CpuBackend::with_kernel_racecheck`]) a `#[kernel]`'s twin reports data races between
//!   the threads of a launch as `KernelFailed`.
//! - **Priorities** are accepted in CUDA's usual range (0 least, -5 most urgent) and
//!   recorded; the workers all run at the OS's normal priority.
//! - **Schedules**: the above is the default schedule. [`Schedule::Chaos`] (per backend,
//!   [`CpuBackend::with_schedule`], or for every backend `GPU_CPU_SCHEDULE=chaos:<seed>`) is
//!   a schedule fuzzer for tests: nothing runs in place or is handed from worker to worker,
//!   ready queues are listed in random order and each task is preceded by a pause drawn from
//!   the seed, so streams' work overlaps and reorders as far as its waits allow; a race
//!   checker reports two tasks on the same bytes, one writing, with no ordering between them,
//!   naming both calls (see [`chaos`]). The later task fails, and its stream's next sync
//!   returns a report such as:
//!
//!   ```text
//!   race on 16384 bytes at 0x7fdc2c0d0500: written by task 1 of stream queue 62, queued at
//!   ./tests/chaos.rs:58, in fill_then_copy (calling fill<gpukit_cpu::CpuBackend, f32, ...>); and
//!   read by task 1 of stream queue 63, queued at ./tests/chaos.rs:60, in fill_then_copy (calling
//!   copy<gpukit_cpu::CpuBackend, f32, ...>), with no ordering between them (chaos schedule, seed
//!   0: GPU_CPU_SCHEDULE=chaos:0 replays it)
//!   ```
//! - **Launch limits** are CUDA's common ones ([`gpukit_core::LaunchLimits::CUDA_COMMON`]), so
//!   a launch the CPU accepts is accepted by any recent GPU.
//!
//! Dependencies: `matrixmultiply` for the gemms the AVX-512 kernel does not take (f64,
//! small products, CPUs without AVX-512F; a well-kept, pure-Rust, cache-blocked kernel that
//! beats a hand-written loop by an order of magnitude; with its `threading` feature),
//! `rayon` for splitting large ops across cores, `thiserror` for [`CpuError`].

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![warn(unsafe_op_in_unsafe_fn)]

pub mod chaos;
mod error;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod info;
mod mem;
mod ops;
mod queue;
pub mod reference;
mod task;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use gpukit_core::{
    Backend, BufAt, CpuKernelFn, CpuRun, DType, DeviceInfo, Gemm, HostUse, KernelArg, KernelDesc,
    LaunchConfig, RawArg, RawPtr, RawStream, Result, Wake, MAX_KERNEL_ARGS,
};

pub use chaos::{Race, RaceSide, Schedule};
pub use error::CpuError;
#[cfg(feature = "fault-injection")]
pub use fault::{FaultKind, FaultPlan, FaultProbe, FaultStats, InjectedFault};
pub use mem::{CpuBuffer, CpuHostMem, CpuRegistration};
pub use queue::{CpuEvent, CpuStream};

use chaos::Access;
use mem::{Mem, SendPtr, DEVICE_ALIGN, HOST_ALIGN};
use queue::{panic_message, run_task, Queue, Task};

/// A context on the CPU reference backend.
pub type CpuContext = gpukit_core::Context<CpuBackend>;

/// The CPU backend: a logical device on the host.
///
/// A process may open any number of logical devices ([`CpuBackend::device`]), so that every
/// multi-device path (peer copies, collectives, data-parallel training) runs on any
/// machine. Each has its own contexts' memory pools and streams; all of them share the
/// host's memory and the process's worker threads (the pool serves every stream with work,
/// whatever its device, as the cores are one). A copy between two logical devices is a
/// `memcpy` on the destination's stream, and a stream of one can wait on an event of
/// another without the host.
pub struct CpuBackend {
    info: DeviceInfo,
    /// The logical device's ordinal.
    ordinal: usize,
    /// Every stream's queue, for `synchronize`.
    queues: Mutex<Vec<Weak<Queue>>>,
    /// How its streams schedule their work.
    schedule: Schedule,
    /// Whether `#[kernel]` launches run under the race checker.
    racecheck: bool,
    /// Call counters, the armed fault plan and live counts.
    #[cfg(feature = "fault-injection")]
    faults: fault::Faults,
}

/// Counts a backend call of a fault kind and returns the injected error when it is the
/// planned one (feature `fault-injection`; expands to nothing without it).
macro_rules! inject {
    ($self:ident, $kind:ident, $call:expr) => {
        inject!($self, $kind, $call, 0)
    };
    ($self:ident, $kind:ident, $call:expr, $bytes:expr) => {
        #[cfg(feature = "fault-injection")]
        $self.faults.hit(fault::FaultKind::$kind, $call, $bytes)?;
    };
}

/// A kernel on the CPU: its name and closure.
pub struct CpuKernel {
    name: Arc<str>,
    f: CpuKernelFn,
    /// A bounds-checked kernel's arity: its launches pass it the signature's arguments, the
    /// tag and the fault record, not the arrays' lengths (the slices carry them).
    checked_arity: Option<usize>,
    /// A built-in op's native body (`KernelDesc::native`): short on small arrays.
    native: bool,
    /// How its launches run (under the race checker or not).
    run: CpuRun,
}

impl std::fmt::Debug for CpuBackend {
    /// The host's name and how many streams are open (`?` while another thread is
    /// creating one: never blocks).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("CpuBackend");
        d.field("device", &self.info.name);
        d.field("ordinal", &self.ordinal);
        match self.queues.try_lock() {
            Ok(q) => d.field(
                "streams",
                &q.iter().filter(|w| w.strong_count() > 0).count(),
            ),
            Err(_) => d.field("streams", &format_args!("?")),
        };
        d.finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CpuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuKernel")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CpuBackend {
    /// Opens the CPU backend (logical device 0); never fails on a working machine.
    pub fn new() -> Result<CpuBackend> {
        CpuBackend::device(0)
    }

    /// Opens logical device `ordinal` of the CPU backend (any number is valid), with the
    /// schedule `GPU_CPU_SCHEDULE` asks for ([`Schedule::from_env`]; an unparsable value is
    /// an `Error::Config` naming the variable); never fails otherwise on a working machine.
    pub fn device(ordinal: usize) -> Result<CpuBackend> {
        Ok(CpuBackend {
            info: info::host_info(),
            ordinal,
            queues: Mutex::new(Vec::new()),
            schedule: Schedule::from_env()?,
            racecheck: racecheck_from_env()?,
            #[cfg(feature = "fault-injection")]
            faults: fault::Faults::new(None),
        })
    }

    /// Opens the CPU backend with `plan` armed (feature `fault-injection`): the plan's
    /// `nth` call of its kind fails with a typed error (see [`fault`]).
    /// The probe reads the counters and live counts, also after a context took the backend.
    #[cfg(feature = "fault-injection")]
    pub fn with_faults(plan: FaultPlan) -> Result<(CpuBackend, FaultProbe)> {
        let backend = CpuBackend {
            info: info::host_info(),
            ordinal: 0,
            queues: Mutex::new(Vec::new()),
            schedule: Schedule::from_env()?,
            racecheck: racecheck_from_env()?,
            faults: fault::Faults::new(Some(plan)),
        };
        let probe = backend.faults.probe();
        Ok((backend, probe))
    }

    /// A shared handle on this backend's fault counters and plan (feature
    /// `fault-injection`); reach it through `ctx.backend().fault_probe()`.
    #[cfg(feature = "fault-injection")]
    pub fn fault_probe(&self) -> FaultProbe {
        self.faults.probe()
    }

    /// Calls counted per kind so far, faults injected, and live buffers, host allocations
    /// and streams (feature `fault-injection`).
    #[cfg(feature = "fault-injection")]
    pub fn fault_stats(&self) -> FaultStats {
        self.faults.probe().stats()
    }

    /// The backend with its streams scheduled by `schedule` (streams created before keep
    /// theirs): [`Schedule::Chaos`] turns on the schedule fuzzer and race checker of
    /// [`chaos`] for this backend alone.
    ///
    /// ```
    /// use gpukit::cpu::{CpuBackend, CpuContext, Schedule};
    ///
    /// let backend = CpuBackend::new()?.with_schedule(Schedule::Chaos { seed: 7 });
    /// let ctx = CpuContext::new(backend)?;
    /// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
    /// assert_eq!(ctx.sum(&a)?, 6.0);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn with_schedule(mut self, schedule: Schedule) -> CpuBackend {
        self.schedule = schedule;
        self
    }

    /// How this backend's streams schedule their work.
    pub fn schedule(&self) -> Schedule {
        self.schedule
    }

    /// The backend with the race checker of `#[kernel]` launches on or off (kernels loaded
    /// before keep theirs); `GPU_KERNEL_RACECHECK=1` turns it on for every CPU backend
    /// opened without this call.
    ///
    /// Under the checker, each launch of a `#[kernel]` records which threads read, write
    /// and atomically update each element of its arrays and shared arrays between
    /// barriers. Two threads' accesses to one element, one a write and not both atomic,
    /// with no `barrier()` between them (threads of one block) or in different blocks
    /// (which nothing but the launch's end orders) fail the launch: the stream's next sync
    /// returns `KernelFailed` naming the kernel, the array, the index and both threads.
    /// The checker keeps 56 bytes per element of each array the launch touches, for the
    /// launch's duration. Closures written by hand (`KernelSpec::cpu`) are not checked.
    ///
    /// ```
    /// use gpukit::cpu::{CpuBackend, CpuContext};
    ///
    /// #[gpukit::kernel]
    /// fn count(hits: &mut [u32]) {
    ///     hits[0] += 1; // every thread, with no atomic: a race on a GPU
    /// }
    ///
    /// let ctx = CpuContext::new(CpuBackend::new()?.with_kernel_racecheck(true))?;
    /// let k = ctx.kernel(count())?;
    /// let mut hits = ctx.alloc_zeros::<u32>(1)?;
    /// ctx.launch(&k, gpukit::LaunchConfig::for_elems(64), (&mut hits,))?;
    /// let err = ctx.sync().unwrap_err();
    /// assert!(err.to_string().contains("data race on `hits`[0]"), "{err}");
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn with_kernel_racecheck(mut self, on: bool) -> CpuBackend {
        self.racecheck = on;
        self
    }

    /// Whether `#[kernel]` launches run under the race checker
    /// ([`CpuBackend::with_kernel_racecheck`]).
    pub fn kernel_racecheck(&self) -> bool {
        self.racecheck
    }

    /// Opens a context on the CPU backend.
    ///
    /// ```
    /// let ctx = gpukit::cpu::CpuBackend::context()?;
    /// let a = ctx.alloc_upload(&[1i32, 2, 3])?;
    /// assert_eq!(ctx.sum(&a)?, 6);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn context() -> Result<CpuContext> {
        gpukit_core::Context::new(CpuBackend::new()?)
    }

    /// Queues a task on the stream, or records it while the stream captures a graph.
    /// `accesses` lists the ranges it reads and writes, for the chaos schedule's race
    /// checker (called only under it).
    fn push(
        &self,
        stream: &CpuStream,
        task: Task,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<()> {
        if stream.capturing.load(Ordering::Acquire) {
            let mut capture = stream.capture.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((tasks, declared)) = capture.as_mut() {
                tasks.push(task);
                if stream.is_chaos() {
                    declared.extend(accesses());
                }
                return Ok(());
            }
        }
        stream.queue.push_with(task, accesses).map(|_| ())
    }

    /// [`CpuBackend::push`] for a short task (a copy of at most [`SHORT_COPY`] bytes, a gemm
    /// that [`ops::is_short`]): run in place on the calling thread when the stream is idle
    /// (a launch of a native body does the same without building the task).
    fn push_short(
        &self,
        stream: &CpuStream,
        task: Task,
        short: bool,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<()> {
        if !short || stream.capturing.load(Ordering::Acquire) {
            return self.push(stream, task, accesses);
        }
        stream.queue.run_or_push(task, accesses).map(|_| ())
    }

    fn limit(&self) -> u64 {
        self.info.total_memory
    }
}

/// Bytes up to which a copy runs in place on the calling thread when its stream is idle: at
/// most a few tens of microseconds of `memcpy`, about what handing it to a parked worker
/// costs, and the copy then runs on the core whose caches hold the source.
const SHORT_COPY: usize = 1 << 20;

/// Bytes of its largest array up to which a built-in op's native body is short, run on the
/// calling thread when its stream is idle (as [`CpuBackend::push_short`] runs a short task),
/// as much as a short copy: up to 256 Ki f32 an op takes at most a few tens of
/// microseconds, about what handing it to a worker and waking the waiting host can cost.
/// Measured on this project's 2-core VM, op and sync, medians: idle, the hand-off costs
/// little (`add` of 64 Ki f32 5.6 us in place, 5.9-6.4 handed over; 256 Ki, 31 and 31-35);
/// with a build running beside it, much more (64 Ki: 5.5 against 19.5; 256 Ki: 31 against
/// 45), which running in place does not pay. numpy's ufunc: 5.0 and 31.7.
const SHORT_LAUNCH: usize = 1 << 20;

/// A launch's arguments as its CPU closure receives them, carried to the stream's worker.
struct LaunchArgs([RawArg; MAX_KERNEL_ARGS + 2]);

// SAFETY: the pointers are only dereferenced by the launch's task, whose access gpukit-core
// orders against every other access to the same memory while the task's `Arc<Mem>`s keep
// it alive (as for `SendPtr`).
unsafe impl Send for LaunchArgs {}

impl LaunchArgs {
    /// The first `n` arguments. A method (not the field) so that closures capture the whole
    /// `LaunchArgs`.
    fn get(&self, n: usize) -> &[RawArg] {
        &self.0[..n]
    }
}

/// The environment variable that turns on the race checker of `#[kernel]` launches for
/// every CPU backend opened without [`CpuBackend::with_kernel_racecheck`]: `1` (or `0`).
pub const RACECHECK_ENV: &str = "GPU_KERNEL_RACECHECK";

/// Whether `GPU_KERNEL_RACECHECK` asks for the race checker (`1`, `true`, `on`; `0`,
/// `false`, `off` or unset: not); another value is an `Error::Config` naming it.
fn racecheck_from_env() -> Result<bool> {
    match std::env::var_os(RACECHECK_ENV) {
        Some(v) => parse_racecheck(&v.to_string_lossy()),
        None => Ok(false),
    }
}

/// A value of `GPU_KERNEL_RACECHECK`, as [`racecheck_from_env`] reads it.
fn parse_racecheck(v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "off" => Ok(false),
        "1" | "true" | "on" => Ok(true),
        _ => Err(gpukit_core::Error::Config {
            path: RACECHECK_ENV.to_string(),
            message: format!("{v:?} is not `1` (check kernels for races) or `0`"),
        }),
    }
}

/// Calls a kernel's CPU function, its error or panic the stream's error naming it.
fn call_kernel(
    f: &CpuKernelFn,
    name: &str,
    run: CpuRun,
    cfg: &LaunchConfig,
    args: &[RawArg],
) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(|| f(cfg, args, run))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(message)) => Err(CpuError::KernelError {
            kernel: name.to_string(),
            message,
        }
        .into()),
        Err(panic) => Err(CpuError::KernelPanicked {
            kernel: name.to_string(),
            message: panic_message(&*panic),
        }
        .into()),
    }
}

/// A zero-sized type whose dangling pointer is 256-aligned: the start of empty ranges.
#[repr(align(256))]
struct Align256;

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;
    type HostMem = CpuHostMem;
    type Registration = CpuRegistration;
    type Stream = CpuStream;
    type Event = CpuEvent;
    type Kernel = CpuKernel;
    type Graph = CpuGraph;

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// A checked kernel's CPU code gets its arrays as slices, which carry their lengths.
    fn checked_lengths(&self) -> bool {
        false
    }

    fn device_id(&self) -> usize {
        self.ordinal
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn alloc(&self, bytes: usize, _zeroed: bool) -> Result<CpuBuffer> {
        inject!(self, Alloc, "alloc", bytes);
        #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
        let mut mem = Mem::new(bytes, DEVICE_ALIGN, self.limit())?;
        #[cfg(feature = "fault-injection")]
        {
            mem.live = Some(self.faults.live(fault::LiveKind::Buffer));
        }
        Ok(CpuBuffer { mem: Arc::new(mem) })
    }

    unsafe fn free(&self, buf: CpuBuffer, _users: &[&CpuStream]) -> Result<()> {
        // Queued tasks hold their own `Arc` of the memory: it is freed after the last one.
        drop(buf);
        Ok(())
    }

    fn alloc_host(&self, bytes: usize, _usage: HostUse) -> Result<CpuHostMem> {
        inject!(self, Alloc, "alloc_host", bytes);
        #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
        let mut mem = Mem::new(bytes, HOST_ALIGN, self.limit())?;
        #[cfg(feature = "fault-injection")]
        {
            mem.live = Some(self.faults.live(fault::LiveKind::Host));
        }
        Ok(CpuHostMem { mem })
    }

    fn host_ptr(&self, mem: &CpuHostMem) -> *mut u8 {
        mem.mem.ptr()
    }

    unsafe fn free_host(&self, mem: CpuHostMem) -> Result<()> {
        drop(mem);
        Ok(())
    }

    unsafe fn register_host(&self, ptr: *mut u8, _bytes: usize) -> Result<CpuRegistration> {
        if ptr.is_null() {
            return Err(CpuError::NullHostPointer.into());
        }
        Ok(CpuRegistration)
    }

    unsafe fn unregister_host(&self, _reg: CpuRegistration) -> Result<()> {
        Ok(())
    }

    fn create_stream(&self, priority: i32) -> Result<CpuStream> {
        #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
        let mut stream = CpuStream::spawn(priority, self.schedule)?;
        #[cfg(feature = "fault-injection")]
        {
            stream.live = Some(self.faults.live(fault::LiveKind::Stream));
        }
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.retain(|q| q.strong_count() > 0);
        queues.push(Arc::downgrade(&stream.queue));
        Ok(stream)
    }

    fn destroy_stream(&self, mut stream: CpuStream) -> Result<()> {
        stream.shutdown()
    }

    fn stream_sync(&self, stream: &CpuStream) -> Result<()> {
        stream.queue.wait_for(stream.queue.tail());
        stream.queue.take_error()
    }

    fn stream_query(&self, stream: &CpuStream) -> Result<bool> {
        stream.queue.take_error()?;
        Ok(stream.queue.seen_done(stream.queue.tail()))
    }

    fn record_event(&self, stream: &CpuStream, timing: bool) -> Result<CpuEvent> {
        inject!(self, Event, "record_event");
        CpuEvent::record(stream, timing)
    }

    fn record_event_again(&self, stream: &CpuStream, event: &mut CpuEvent) -> Result<()> {
        inject!(self, Event, "record_event");
        event.record_again(stream)
    }

    fn stream_wait(&self, stream: &CpuStream, event: &CpuEvent) -> Result<()> {
        inject!(self, Event, "stream_wait");
        event.wait_on(stream)
    }

    fn stream_wait_peer(
        &self,
        stream: &CpuStream,
        _peer: &CpuBackend,
        event: &CpuEvent,
    ) -> Result<()> {
        // An event is a position in a queue, whichever logical device the queue serves.
        self.stream_wait(stream, event)
    }

    fn notify(&self, event: &CpuEvent, wake: Wake) -> Option<Wake> {
        event.queue.notify(event.seq, wake);
        None
    }

    fn event_sync(&self, event: &CpuEvent) -> Result<()> {
        event.wait();
        Ok(())
    }

    fn event_query(&self, event: &CpuEvent) -> Result<bool> {
        Ok(event.is_done())
    }

    fn event_elapsed_ms(&self, start: &CpuEvent, end: &CpuEvent) -> Result<f64> {
        let (a, b) = (start.time()?, end.time()?);
        Ok(if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        })
    }

    fn synchronize(&self) -> Result<()> {
        let queues: Vec<Arc<Queue>> = {
            let q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            q.iter().filter_map(Weak::upgrade).collect()
        };
        let mut first = Ok(());
        for q in queues {
            q.wait_for(q.tail());
            if let Err(e) = q.take_error() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    unsafe fn copy_h2d(
        &self,
        stream: &CpuStream,
        src: *const u8,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        inject!(self, Copy, "copy_h2d");
        let from = SendPtr(src.cast_mut());
        let keep = dst.buf.mem.clone();
        let to = dst.buf.at(dst.offset);
        self.push_short(
            stream,
            Task::new(move || {
                let _keep = &keep;
                // SAFETY: the caller keeps `src..src + bytes` readable and unmodified until
                // the stream passes this task (Backend::copy_h2d contract); `to` is inside a
                // live buffer (held by `_keep`) that gpukit-core orders against other access.
                unsafe { std::ptr::copy_nonoverlapping(from.get(), to.get(), bytes) };
                Ok(())
            }),
            bytes <= SHORT_COPY,
            || vec![Access::read(src, bytes), Access::write(to.get(), bytes)],
        )
    }

    unsafe fn copy_d2h(
        &self,
        stream: &CpuStream,
        src: BufAt<'_, Self>,
        dst: *mut u8,
        bytes: usize,
    ) -> Result<()> {
        inject!(self, Copy, "copy_d2h");
        let keep = src.buf.mem.clone();
        let from = src.buf.at(src.offset);
        let to = SendPtr(dst);
        self.push_short(
            stream,
            Task::new(move || {
                let _keep = &keep;
                // SAFETY: the caller keeps `dst..dst + bytes` writable and otherwise
                // unaccessed until the stream passes this task (Backend::copy_d2h contract);
                // `from` is inside a live buffer ordered against writers by gpukit-core.
                unsafe { std::ptr::copy_nonoverlapping(from.get(), to.get(), bytes) };
                Ok(())
            }),
            bytes <= SHORT_COPY,
            || vec![Access::read(from.get(), bytes), Access::write(dst, bytes)],
        )
    }

    unsafe fn copy_d2d(
        &self,
        stream: &CpuStream,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        inject!(self, Copy, "copy_d2d");
        let keep = (src.buf.mem.clone(), dst.buf.mem.clone());
        let (from, to) = (src.buf.at(src.offset), dst.buf.at(dst.offset));
        self.push_short(
            stream,
            Task::new(move || {
                let _keep = &keep;
                // SAFETY: both ranges are inside live buffers (held by `_keep`) and do not
                // overlap (Backend::copy_d2d contract); gpukit-core orders both against other
                // access.
                unsafe { std::ptr::copy_nonoverlapping(from.get(), to.get(), bytes) };
                Ok(())
            }),
            bytes <= SHORT_COPY,
            || {
                vec![
                    Access::read(from.get(), bytes),
                    Access::write(to.get(), bytes),
                ]
            },
        )
    }

    unsafe fn copy_peer(
        &self,
        stream: &CpuStream,
        _peer: &CpuBackend,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the `copy_peer` contract is `copy_d2d`'s, and every logical device's
        // memory is host memory that a buffer keeps alive wherever it is used.
        unsafe { self.copy_d2d(stream, src, dst, bytes) }
    }

    fn has_gemm(&self, dtype: DType) -> bool {
        dtype.is_float()
    }

    unsafe fn gemm(
        &self,
        stream: &CpuStream,
        dtype: DType,
        g: &Gemm<f64>,
        ops: [BufAt<'_, Self>; 3],
    ) -> Result<()> {
        inject!(self, Op, "gemm");
        // SAFETY: forwarded from our caller (the `Backend::gemm` contract `task` asks for).
        let task = unsafe { ops::task(dtype, g, ops) }?;
        let accesses = || {
            ops.iter()
                .zip(ops::ranges(dtype, g))
                .map(|(at, (len, write))| Access {
                    start: at.buf.at(at.offset).get() as usize,
                    len,
                    write,
                })
                .collect()
        };
        self.push_short(stream, task, ops::is_short(g), accesses)
    }

    fn load_kernel(&self, desc: &KernelDesc) -> Result<CpuKernel> {
        match &desc.cpu {
            Some(f) => Ok(CpuKernel {
                name: desc.name.as_str().into(),
                f: f.clone(),
                checked_arity: desc.checked.as_ref().map(|c| c.arity),
                native: desc.native,
                run: CpuRun::racecheck(self.racecheck),
            }),
            None => Err(CpuError::NoCpuKernel {
                kernel: desc.name.clone(),
            }
            .into()),
        }
    }

    unsafe fn launch(
        &self,
        stream: &CpuStream,
        kernel: &CpuKernel,
        cfg: &LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<()> {
        inject!(self, Op, "launch");
        // Fixed-size arrays, so that a launch allocates nothing (and its task stays small):
        // at most a signature's MAX_KERNEL_ARGS arguments, and a checked kernel's tag and
        // fault record (no lengths: `checked_lengths`).
        let n = args.len();
        if n > MAX_KERNEL_ARGS + 2 || (n > MAX_KERNEL_ARGS && kernel.checked_arity.is_none()) {
            return Err(gpukit_core::Error::Unsupported {
                backend: "cpu",
                what: format!(
                    "a launch with {} arguments (at most {MAX_KERNEL_ARGS})",
                    args.len()
                ),
            });
        }
        let mut raw = LaunchArgs([RawArg::Scalar([0; 16]); MAX_KERNEL_ARGS + 2]);
        for (r, a) in raw.0.iter_mut().zip(args) {
            *r = match a {
                KernelArg::Buffer {
                    at: Some(at),
                    bytes,
                    ..
                } => RawArg::Slice {
                    ptr: at.buf.at(at.offset).get(),
                    bytes: *bytes,
                },
                KernelArg::Buffer { at: None, .. } => RawArg::Slice {
                    ptr: std::ptr::NonNull::<Align256>::dangling()
                        .as_ptr()
                        .cast::<u8>(),
                    bytes: 0,
                },
                KernelArg::Scalar { bytes, .. } => RawArg::Scalar(*bytes),
            };
        }
        // The buffers as the signature marks them (the checker's declaration), without a
        // checked launch's fault record, which every launch claims atomically and nothing
        // orders.
        let record = usize::from(matches!(kernel.checked_arity, Some(a) if args.len() >= a + 2));
        let accesses = || {
            args[..args.len() - record]
                .iter()
                .filter_map(|a| match a {
                    KernelArg::Buffer {
                        at: Some(at),
                        bytes,
                        write,
                    } => Some(Access {
                        start: at.buf.at(at.offset).get() as usize,
                        len: *bytes,
                        write: *write,
                    }),
                    _ => None,
                })
                .collect()
        };
        // A built-in op's native body on small arrays runs in place when the stream is idle,
        // as a short op does.
        let short = kernel.native
            && args.iter().all(|a| match a {
                KernelArg::Buffer { bytes, .. } => *bytes <= SHORT_LAUNCH,
                KernelArg::Scalar { .. } => true,
            });
        // Queued: the task keeps each buffer alive until it has run (the fault record, a
        // checked launch's last argument, needs none: the context keeps a record that a
        // launch may write until a sync after that launch has read it).
        let task = |raw: LaunchArgs| {
            let mut keep: [Option<Arc<Mem>>; MAX_KERNEL_ARGS] = Default::default();
            for (k, a) in keep.iter_mut().zip(args) {
                if let KernelArg::Buffer { at: Some(at), .. } = a {
                    *k = Some(at.buf.mem.clone());
                }
            }
            // A `u8` count (at most 14): the task's closure fits its inline storage.
            let (f, name, run, cfg, n) = (
                kernel.f.clone(),
                kernel.name.clone(),
                kernel.run,
                *cfg,
                n as u8,
            );
            Task::new(move || {
                let _keep = &keep;
                call_kernel(&f, &name, run, &cfg, raw.get(usize::from(n)))
            })
        };
        // On the calling thread when the stream is idle: the arguments borrowed, nothing
        // kept (the caller's buffers outlive this call), no task built. One lock of the
        // queue decides.
        if short && !stream.capturing.load(Ordering::Acquire) {
            let here =
                |raw: LaunchArgs| call_kernel(&kernel.f, &kernel.name, kernel.run, cfg, raw.get(n));
            return stream
                .queue
                .run_here_or_push(raw, here, task, accesses)
                .map(|_| ());
        }
        self.push(stream, task(raw), accesses)
    }

    fn raw_ptr(&self, at: BufAt<'_, Self>) -> RawPtr {
        RawPtr::Host(at.buf.at(at.offset).get())
    }

    /// Device memory is host memory: unified memory is an ordinary (zeroed) buffer, and
    /// prefetching has nothing to move.
    fn alloc_unified(&self, bytes: usize) -> Result<CpuBuffer> {
        self.alloc(bytes, true)
    }

    fn unified_ptr(&self, at: BufAt<'_, Self>) -> Option<*mut u8> {
        Some(at.buf.at(at.offset).get())
    }

    fn raw_stream(&self, _stream: &CpuStream) -> RawStream {
        RawStream::None
    }

    unsafe fn buffer_from_raw(&self, ptr: RawPtr, bytes: usize) -> Result<CpuBuffer> {
        let RawPtr::Host(p) = ptr else {
            return Err(gpukit_core::Error::Unsupported {
                backend: "cpu",
                what: format!("{ptr:?} as device memory (it needs a host address)"),
            });
        };
        let Some(p) = std::ptr::NonNull::new(p) else {
            return Err(gpukit_core::Error::Unsupported {
                backend: "cpu",
                what: "a null host address as device memory".into(),
            });
        };
        // SAFETY: the caller's contract (Backend::buffer_from_raw): `bytes` readable and
        // writable bytes that outlive the buffer and the work queued on it.
        let mem = unsafe { Mem::foreign(p, bytes) }?;
        Ok(CpuBuffer { mem: Arc::new(mem) })
    }

    unsafe fn stream_from_raw(&self, raw: RawStream) -> Result<CpuStream> {
        Err(gpukit_core::Error::Unsupported {
            backend: "cpu",
            what: format!(
                "wrapping a native stream ({raw:?}): its streams are worker-thread queues \
                 with no native handle"
            ),
        })
    }

    fn begin_capture(&self, stream: &CpuStream) -> Result<()> {
        let mut capture = stream.capture.lock().unwrap_or_else(|p| p.into_inner());
        *capture = Some((Vec::new(), Vec::new()));
        stream.capturing.store(true, Ordering::Release);
        Ok(())
    }

    fn end_capture(&self, stream: &CpuStream) -> Result<CpuGraph> {
        let mut capture = stream.capture.lock().unwrap_or_else(|p| p.into_inner());
        stream.capturing.store(false, Ordering::Release);
        let (tasks, accesses) = capture.take().unwrap_or_default();
        Ok(CpuGraph {
            len: tasks.len(),
            tasks: Arc::new(Mutex::new(tasks)),
            accesses,
        })
    }

    unsafe fn launch_graph(&self, graph: &CpuGraph, stream: &CpuStream) -> Result<()> {
        inject!(self, Op, "launch_graph");
        let tasks = graph.tasks.clone();
        // One task runs the graph's tasks in order, as the worker would have run them one
        // by one: each runs even after an earlier one failed, and the first error is the
        // stream's.
        self.push(
            stream,
            Task::new(move || {
                let tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
                let mut first = Ok(());
                for task in tasks.iter() {
                    let r = run_task(task);
                    if first.is_ok() {
                        first = r;
                    }
                }
                first
            }),
            // What its tasks declared when they were captured (under the chaos schedule).
            || graph.accesses.clone(),
        )
    }

    fn destroy_graph(&self, graph: CpuGraph) -> Result<()> {
        // A queued run holds its own handle on the tasks.
        drop(graph);
        Ok(())
    }
}

/// A graph on the CPU backend: the tasks recorded from a capturing stream, run again in
/// order, inside one task, at each launch.
pub struct CpuGraph {
    tasks: Arc<Mutex<Vec<Task>>>,
    len: usize,
    /// The ranges its tasks read and write (declared under the chaos schedule only).
    accesses: Vec<Access>,
}

impl std::fmt::Debug for CpuGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuGraph")
            .field("tasks", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racecheck_values_parse_and_others_name_the_variable() {
        for (v, on) in [
            ("1", true),
            (" ON ", true),
            ("true", true),
            ("0", false),
            ("", false),
            ("off", false),
        ] {
            assert_eq!(parse_racecheck(v).ok(), Some(on), "{v:?}");
        }
        match parse_racecheck("yes please") {
            Err(gpukit_core::Error::Config { path, message }) => {
                assert_eq!(path, RACECHECK_ENV);
                assert!(message.contains("\"yes please\""), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
