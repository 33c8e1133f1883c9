//! The enqueue path allocates nothing in the steady state: a counting global allocator sees
//! no heap allocation, on any thread (the caller's or a stream worker's), across 1,000 ops,
//! launches and copies queued after a warm-up, on one stream and across streams ordered by
//! events. The results are checked against the same work computed on the host, so the loop
//! cannot pass by doing nothing.
//!
//! gemm is counted apart: the CPU backend's gemm of small products (matrixmultiply, as these
//! are) allocates its packing buffer on the stream's worker at every product, which is the
//! kernel's own workspace, not the enqueue path; the caller's thread must still allocate
//! nothing for it.
//!
//! Here too, as it needs a process to itself: an idle CPU-backend context uses no CPU (its
//! workers poll for a few microseconds after work, then park).
//!
//! Under a chaos schedule (`GPU_CPU_SCHEDULE=chaos:<seed>`) the CPU backend's counting cases
//! print `SKIPPED` with the reason: the schedule allocates by design (its race checker keeps,
//! for every task, the byte ranges it uses, a vector clock and the call site that queued it),
//! so a count there would measure the fuzzer, not the enqueue path.
//!
//! Its own test binary without libtest's harness (`harness = false`): the allocator is
//! process-wide, and libtest runs other tests (and its own bookkeeping) on other threads
//! while one counts. `main` runs the tests one after another and prints libtest's lines
//! (`test NAME ... ok`, `test result: ...`); it takes name filters and `--list` as libtest
//! does. The Vulkan backend is left out: wgpu allocates inside every submission (command
//! encoders, bind groups), which this library cannot avoid.

#[path = "common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpukit::{Context, Gemm, HostUse, LaunchConfig, Result, Shape};

/// The system allocator, counting every allocation and reallocation, in all and per thread.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's allocations (const-initialized: reading it allocates nothing).
    static MINE: Cell<u64> = const { Cell::new(0) };
}

fn counted() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: a thread being torn down has no slot left, and is not counted.
    let _ = MINE.try_with(|n| n.set(n.get() + 1));
}

/// Waits (up to 2 s) until no thread has allocated for 50 ms: the end of the warm-up's
/// background start-up. matrixmultiply's pool threads, started by the warm-up's gemm,
/// allocate once when each first blocks for work (crossbeam-channel's per-thread context);
/// one that got there late was counted in the rounds about 1 run in 10. A steady state
/// allocates nothing while idle, so waiting for it hides nothing the rounds do.
fn settle() {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut seen = allocations().0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = allocations().0;
        if now == seen {
            return;
        }
        seen = now;
    }
}

/// (all threads, this thread) allocations so far.
fn allocations() -> (u64, u64) {
    (ALLOCATIONS.load(Ordering::SeqCst), MINE.with(Cell::get))
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the counter has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: forwarded from our caller.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: forwarded from our caller.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted();
        // SAFETY: forwarded from our caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from our caller.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Rows and columns of the matrices the loop works on.
const ROWS: usize = 16;
const COLS: usize = 64;
const N: usize = ROWS * COLS;
/// Rounds counted, each queuing [`PER_ROUND`] ops, launches and copies.
const ROUNDS: usize = 100;
const PER_ROUND: usize = 10;
/// gemms counted apart (see the module docs).
const GEMMS: usize = 100;
/// Rounds run before counting: enough to fill every bounded cache the loop reaches (a
/// stream keeps its last 32 ordering events, which transfers' rounds record three at a
/// time).
const WARM_UP: usize = 20;

/// The arrays one round works on.
struct Arrays {
    a: gpukit::GpuArray<f32>,
    b: gpukit::GpuArray<f32>,
    c: gpukit::GpuArray<f32>,
    d: gpukit::GpuArray<f32>,
    e: gpukit::GpuArray<f32>,
    f: gpukit::GpuArray<f32>,
    bias: gpukit::GpuArray<f32>,
    w: gpukit::GpuArray<f32>,
    y: gpukit::GpuArray<f32>,
    total: gpukit::GpuArray<f32>,
    ints: gpukit::GpuArray<i32>,
}

fn inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let a = (0..N).map(|i| (i % 13) as f32 * 0.25 - 1.0).collect();
    let b = (0..N).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
    let bias = (0..COLS).map(|j| j as f32 * 0.01).collect();
    let w = (0..COLS * COLS)
        .map(|i| ((i % 5) as f32 - 2.0) * 0.125)
        .collect();
    (a, b, bias, w)
}

impl Arrays {
    fn new(ctx: &Context) -> Result<Arrays> {
        let (a, b, bias, w) = inputs();
        Ok(Arrays {
            a: ctx.alloc_upload(&a)?,
            b: ctx.alloc_upload(&b)?,
            c: ctx.alloc_zeros(N)?,
            d: ctx.alloc_zeros(N)?,
            e: ctx.alloc_zeros(N)?,
            f: ctx.alloc_zeros(N)?,
            bias: ctx.alloc_upload(&bias)?,
            w: ctx.alloc_upload(&w)?,
            y: ctx.alloc_zeros(N)?,
            total: ctx.alloc_zeros(1)?,
            ints: ctx.alloc_zeros(N)?,
        })
    }
}

/// One round of ten: every kind of work the enqueue path has (element-wise, in place,
/// scalar, broadcast, softmax, reduction into the device, cast, copy, kernel launch; gemm is
/// counted apart).
/// With two streams, the first half runs on `s1` and the second on `s2`, which orders
/// itself after `s1` through the arrays' events.
fn round(
    s1: &gpukit::Stream,
    s2: &gpukit::Stream,
    x: &mut Arrays,
    add: &gpukit::Kernel<common::VectorAdd>,
) -> Result<()> {
    let shape = Shape::new(ROWS, COLS);
    s1.add(&x.a, &x.b, &mut x.c)?;
    s1.mul_scalar_inplace(&mut x.c, 0.5)?;
    s1.relu_inplace(&mut x.c)?;
    s1.add_row_inplace(shape, &mut x.c, &x.bias)?;
    s1.softmax(shape, &x.c, &mut x.d)?;
    s2.sum_into(&x.d, &mut x.total)?;
    s2.mul(&x.c, &x.d, &mut x.y)?;
    s2.cast(&x.y, &mut x.ints)?;
    s2.copy(&x.d, &mut x.e)?;
    s2.launch(
        add,
        LaunchConfig::for_elems(N),
        (&x.c, &x.y, &mut x.f, N as u64),
    )
}

/// The same round on the host (f64 where the backend rounds once from it), and the gemm
/// `c x w` of the counted gemms.
struct Expected {
    d: Vec<f32>,
    y: Vec<f32>,
    total: f32,
    f: Vec<f32>,
    ints: Vec<i32>,
    gemm: Vec<f32>,
}

fn expected() -> Expected {
    let (a, b, bias, w) = inputs();
    let mut c: Vec<f32> = a.iter().zip(&b).map(|(a, b)| a + b).collect();
    for (i, v) in c.iter_mut().enumerate() {
        *v = (*v * 0.5).max(0.0) + bias[i % COLS];
    }
    let mut d = vec![0f32; N];
    for r in 0..ROWS {
        let row = &c[r * COLS..(r + 1) * COLS];
        let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let z: f64 = row.iter().map(|&v| f64::from(v - m).exp()).sum();
        for j in 0..COLS {
            d[r * COLS + j] = (f64::from(c[r * COLS + j] - m).exp() / z) as f32;
        }
    }
    let total = d.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
    let y: Vec<f32> = c.iter().zip(&d).map(|(c, d)| c * d).collect();
    let f = c.iter().zip(&y).map(|(c, y)| c + y).collect();
    let ints = y.iter().map(|&v| v as i32).collect();
    let mut gemm = vec![0f32; N];
    for r in 0..ROWS {
        for j in 0..COLS {
            gemm[r * COLS + j] = (0..COLS)
                .map(|k| f64::from(c[r * COLS + k]) * f64::from(w[k * COLS + j]))
                .sum::<f64>() as f32;
        }
    }
    Expected {
        d,
        y,
        total,
        f,
        ints,
        gemm,
    }
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            common::close(f64::from(*g), f64::from(*w), 1e-4),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// Runs the warm-up, counts the allocations of the counted rounds (the streams' syncs
/// included) and of the counted gemms, and checks the results.
fn count(ctx: &Context, s1: &gpukit::Stream, s2: &gpukit::Stream) -> Result<()> {
    let mut x = Arrays::new(ctx)?;
    let add = ctx.kernel(common::vector_add_spec())?;
    let mut g = ctx.alloc_zeros::<f32>(N)?;
    let gemm = Gemm::new(ROWS, COLS, COLS);
    for _ in 0..WARM_UP {
        round(s1, s2, &mut x, &add)?;
        s2.gemm(gemm, &x.c, &x.w, &mut g)?;
    }
    s1.sync()?;
    s2.sync()?;
    settle();

    let (before, _) = allocations();
    for _ in 0..ROUNDS {
        round(s1, s2, &mut x, &add)?;
    }
    s1.sync()?;
    s2.sync()?;
    let (after, mine_before) = allocations();
    assert_eq!(
        after - before,
        0,
        "{} backend: {} heap allocations across {} queued ops, launches and copies",
        ctx.backend_name(),
        after - before,
        ROUNDS * PER_ROUND
    );

    for _ in 0..GEMMS {
        s2.gemm(gemm, &x.c, &x.w, &mut g)?;
    }
    s2.sync()?;
    let (end, mine) = allocations();
    assert_eq!(
        mine - mine_before,
        0,
        "{} backend: queuing {GEMMS} gemms allocated on the caller's thread",
        ctx.backend_name()
    );
    // CPU: matrixmultiply's packing buffer (these products are small), one per product on
    // the worker (module docs).
    let kernel_own = if ctx.backend_name() == "cpu" {
        GEMMS
    } else {
        0
    };
    assert!(
        end - after <= kernel_own as u64,
        "{} backend: {} heap allocations across {GEMMS} gemms (at most {kernel_own})",
        ctx.backend_name(),
        end - after
    );

    let want = expected();
    assert_close(&x.d.download()?, &want.d, "softmax");
    assert_close(&x.e.download()?, &want.d, "copy");
    assert_close(&x.y.download()?, &want.y, "mul");
    assert_close(&x.f.download()?, &want.f, "launch");
    assert_close(&x.total.download()?, &[want.total], "sum");
    assert_close(&g.download()?, &want.gemm, "gemm");
    let got = x.ints.download()?;
    for (i, (g, w)) in got.iter().zip(&want.ints).enumerate() {
        assert!((g - w).abs() <= 1, "cast[{i}]: {g} vs {w}");
    }
    Ok(())
}

fn one_stream(ctx: &Context) -> Result<()> {
    let s = ctx.default_stream();
    count(ctx, s, s)
}

fn across_streams(ctx: &Context) -> Result<()> {
    let (s1, s2) = (ctx.create_stream()?, ctx.create_stream()?);
    count(ctx, &s1, &s2)
}

/// Uploads, an op and downloads of pinned host buffers, waited for each round.
fn transfers(ctx: &Context) -> Result<()> {
    let s = ctx.create_stream()?;
    let mut dev = ctx.alloc_zeros::<u32>(N)?;
    let mut up = Some(ctx.alloc_host::<u32>(N, HostUse::Upload)?);
    let mut down = Some(ctx.alloc_host::<u32>(N, HostUse::Download)?);
    let err = |r: gpukit::Rejected<gpukit::HostBuffer<u32>>| r.into_parts().0;
    // An upload, an op and a download, waited for: three queued calls a round.
    let mut round = |i: u32| -> Result<()> {
        let mut host = up.take().expect("the upload buffer is back");
        host.iter_mut()
            .enumerate()
            .for_each(|(j, v)| *v = i * 7 + j as u32);
        let pending = s.upload(host, &mut dev).map_err(err)?;
        s.add_scalar_inplace(&mut dev, 3)?;
        let back = s.download(&dev, down.take().expect("the download buffer is back"));
        let back = back.map_err(err)?;
        up = Some(pending.wait().map_err(err)?);
        let got = back.wait().map_err(err)?;
        let ok = got
            .iter()
            .enumerate()
            .all(|(j, &v)| v == i * 7 + j as u32 + 3);
        down = Some(got);
        assert!(ok, "round {i}: the download differs from upload + 3");
        Ok(())
    };
    for i in 0..WARM_UP as u32 {
        round(i)?;
    }
    settle();
    let (before, _) = allocations();
    let rounds = ROUNDS * PER_ROUND / 3;
    for i in 0..rounds as u32 {
        round(i)?;
    }
    let allocations = allocations().0 - before;
    assert_eq!(
        allocations,
        0,
        "{} backend: {allocations} heap allocations across {} uploads, ops and downloads",
        ctx.backend_name(),
        rounds * 3
    );
    Ok(())
}

/// This process's CPU time so far (user + system), from `/proc/self/stat`; `None` where
/// there is no procfs (not Linux).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces, so split after its `)`):
    // utime and stime are the 12th and 13th, in clock ticks.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // The kernel's USER_HZ is 100 on every Linux architecture this runs on.
    Some(Duration::from_millis(ticks * 10))
}

/// A context whose streams have just worked (so their workers were polling) and then sit
/// idle uses no CPU: process CPU time over one idle second stays near zero, where one
/// polling thread would use the whole second. The measurement itself is checked first on a
/// thread that does spin.
fn idle(ctx: &Context) -> Result<()> {
    let Some(start) = process_cpu() else {
        common::skipped("no /proc/self/stat: process CPU time is read from procfs (Linux)");
        return Ok(());
    };
    let spin_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < spin_until {
        std::hint::spin_loop();
    }
    let spun = process_cpu().unwrap_or_default().saturating_sub(start);
    assert!(
        spun >= Duration::from_millis(150),
        "the measurement saw {spun:?} of CPU time in 300 ms of spinning"
    );

    let streams = [
        ctx.create_stream()?,
        ctx.create_stream()?,
        ctx.create_stream()?,
    ];
    let mut arrays = Vec::new();
    for s in &streams {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        for _ in 0..50 {
            s.add_scalar_inplace(&mut a, 1.0)?;
        }
        arrays.push(a);
    }
    for s in &streams {
        s.sync()?;
    }
    std::thread::sleep(Duration::from_millis(50));
    let before = process_cpu().unwrap_or_default();
    std::thread::sleep(Duration::from_secs(1));
    let used = process_cpu().unwrap_or_default().saturating_sub(before);
    assert!(
        used <= Duration::from_millis(50),
        "an idle context with {} streams used {used:?} of CPU time in one second",
        streams.len()
    );
    for a in &arrays {
        assert_eq!(
            a.download()?[0],
            50.0,
            "the work before the idle second ran"
        );
    }
    Ok(())
}

/// A test body.
type Body = fn(&Context) -> Result<()>;
/// Opens a backend's context, or skips.
type Open = fn() -> Option<Context>;
/// A test: its name (libtest's style, `body::backend`), the backend and the body.
type Case = (String, Open, Body);

fn cases() -> Vec<Case> {
    let bodies: [(&str, Body); 3] = [
        ("ops_on_one_stream_allocate_nothing", one_stream),
        ("ops_across_streams_allocate_nothing", across_streams),
        ("transfers_of_host_buffers_allocate_nothing", transfers),
    ];
    let mut backends: Vec<(&str, Open)> = vec![("cpu", common::cpu)];
    // Without the `cuda` feature there is no CUDA backend to skip.
    if cfg!(feature = "cuda") {
        backends.push(("cuda", common::cuda));
    }
    let mut out = Vec::new();
    for (name, body) in bodies {
        for &(backend, open) in &backends {
            out.push((format!("{name}::{backend}"), open, body));
        }
    }
    // Polling is the CPU backend's own (its queue); a GPU backend's waits are the driver's.
    out.push(("an_idle_context_uses_no_cpu::cpu".into(), common::cpu, idle));
    out
}

/// Whether the case counts the CPU backend's allocations (the idle case counts CPU time).
fn counts_cpu_allocations(name: &str) -> bool {
    name.ends_with("::cpu") && name.contains("allocate")
}

/// libtest's command line as far as the tools here use it: name filters (substrings),
/// `--exact`, `--list`; other flags (`--show-output`, `--test-threads=1`, ...) change
/// nothing here, since the tests run one at a time on the main thread anyway.
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let all = cases();
    let total = all.len();
    let chosen: Vec<Case> = all
        .into_iter()
        .filter(|(name, ..)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if flag("--exact") {
                        name == *f
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    if flag("--list") {
        for (name, ..) in &chosen {
            println!("{name}: test");
        }
        println!("\n{} tests, 0 benchmarks", chosen.len());
        return ExitCode::SUCCESS;
    }
    println!("\nrunning {} tests", chosen.len());
    let start = Instant::now();
    let mut failed = Vec::new();
    let chaos = gpukit::cpu::Schedule::from_env()
        .ok()
        .and_then(|s| s.seed());
    for (name, open, body) in &chosen {
        if let (Some(seed), true) = (chaos, counts_cpu_allocations(name)) {
            eprintln!(
                "SKIPPED: {name}: the chaos schedule (GPU_CPU_SCHEDULE=chaos:{seed}) allocates \
                 by design (its race checker keeps every task's byte ranges, vector clock and \
                 call site); the count is of the default schedule"
            );
            println!("test {name} ... ok");
            continue;
        }
        let ok = catch_unwind(AssertUnwindSafe(|| common::run(open(), body))).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed.push(name.clone());
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len(),
        total - chosen.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
