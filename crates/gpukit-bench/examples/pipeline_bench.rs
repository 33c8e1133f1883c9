//! Overlap of upload, compute and download: every pattern of [`gpukit::Pattern::STANDARD`]
//! against the sequential pattern, in the same run, over compute:transfer ratios 0.25, 1 and
//! 4 and three batch sizes.
//!
//! Calibration, per batch size, on the backend under test:
//! - the **transfer time** `t` of one batch: the median upload span (timed by events) of a
//!   sequential pipeline run with neither loader wait nor compute, so the copies see the
//!   same buffers and caches as in the measured runs;
//! - the **loader** waits on I/O (sleeps, using no core) for about `t` per batch (with a
//!   1 ns timer slack on Linux, and the sleep's own overshoot, measured first, taken into
//!   account);
//! - the **compute** stage is one launch of a spinning kernel that runs `ratio * t`: on the
//!   CPU backend a kernel closure spinning on the host clock, on CUDA the same kernel in CUDA
//!   C spinning on `%globaltimer`. It also writes `out[0] = in[0] + 1`, which the sink checks
//!   (batch `i` arrives as `i + 1`, in order).
//!
//! Batch sizes: 1, 4 and 16 MiB of f32 on the CPU (on a small machine, the per-batch cost of
//! handing work between threads weighs on the smallest), 4, 16 and 64 MiB on CUDA;
//! `--sizes-kib` chooses others.
//!
//! Each point (ratio, batch size, pattern) is the run whose wall time is the median of
//! `--runs` repeats (at least 3; 5 by default, 3 with `--quick`), after a warm-up run per
//! batch size that fills the pinned pool; the patterns alternate within each repeat. Seconds
//! are the pipeline's own wall time (start event to last delivery). `efficiency` is the
//! max-stage bound over that time with the bound built from the sequential median's stage
//! times (`Report::against`): every pattern of a point shares that bound, so a pattern
//! slower than sequential always shows a lower efficiency than sequential's. `eff(cal)` is
//! the run's own figure, its bound from the calibration batches it ran alone (on the CPU
//! backend the bound counts every stage but the loader's waiting as work for the same
//! cores). After the sweep, every point where a buffered pattern ran slower than sequential
//! is listed with both efficiencies: the honesty check of the report.
//!
//! **The machine's bound** (`of bound`, `fraction_of_machine_bound`), on the CPU backend:
//! what this machine allows the pattern at best, per batch the largest of
//! - the loader's wait, the compute, and the calling thread's enqueue and deliver time per
//!   batch (the sequential median's uncontended figures);
//! - the copies: an upload and a download as plain `memcpy`s of one batch on buffers of the
//!   pattern's footprint (its depth in sets of pinned input, device input, device output and
//!   pinned output, used in turn, so the caches see what the pattern's copies see), each
//!   alone (`U`, `D`) and both at once on two threads (`UD`, the memory bandwidth when upload
//!   and download overlap): the copies take at least `min(UD, U + D)`;
//! - the cores: every stage but the loader's waiting is work for the same cores, so at least
//!   (load CPU time + `U` + compute + `D` + enqueue + deliver) / cores.
//!
//! No schedule of the work beats that bound times the batches; the target is triple
//! buffering at ratio 1 at >= 0.85 of it from 1 MiB batches, and never slower than
//! sequential.
//!
//! **The hand-off** (`handoff_seconds_per_batch`): triple buffering of batches of one f32,
//! with a loader that waits for nothing and a compute that spins 0 ns, median of the runs:
//! the engine's own cost of a batch (its threads' hand-offs, the enqueues, the events),
//! which no copy or compute hides. For each triple-buffered point at ratio 1 the program
//! splits the time per batch above the machine's bound into that floor and the rest (the
//! stages slowing each other down on the same cores and memory), and gives beside it what
//! a spinning core adds to a batch's plain copies (`copy_contention_seconds_per_batch`: an
//! upload then a download of the pattern's footprint on one thread while another spins,
//! against the two alone). On CUDA the copies run on copy engines, which plain `memcpy` does not measure:
//! there the figure is the library's own efficiency (its max-stage bound with the copy
//! engines counted).
//!
//! ```text
//! cargo run --release --example pipeline_bench -- [--backend cpu|cuda] [--device SPEC]
//!     [--json FILE] [--quick] [--runs N] [--batches N] [--sizes-kib K,K,...] [--require]
//! ```
//!
//! `--device` (as `run.sh` of a GPU bundle passes it) is a synonym of `--backend` that also
//! takes `cuda:N`. Without a usable GPU, `--backend cuda` prints `SKIPPED: <reason>` and exits
//! with status 0 (or 1 with `--require`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpukit::{Context, DeviceSpec, In, KernelSpec, LaunchConfig, Out, Pattern, Stage};
use gpukit_bench::write_json;
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::{fmt_bytes, median, median_stage_ms};
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The compute:transfer ratios swept.
const RATIOS: [f64; 3] = [0.25, 1.0, 4.0];

/// The spinning kernel: `out[0] = in[0] + 1` after spinning for `ns` nanoseconds (one thread).
const SPIN_SRC: &str = concat!(
    gpukit::core::cuda_ptx_helpers!(),
    r#"
extern "C" __global__ void spin(const float* in, float* out, unsigned long long ns) {
    unsigned long long start = gk_globaltimer(), now;
    do {
        now = gk_globaltimer();
    } while (now - start < ns);
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = in[0] + 1.0f;
}
"#
);

type SpinSig = (In<f32>, Out<f32>, u64);
type SpinKernel = gpukit::Kernel<SpinSig>;

struct Args {
    device: DeviceSpec,
    json: Option<String>,
    quick: bool,
    runs: Option<usize>,
    batches: Option<usize>,
    sizes: Option<Vec<usize>>,
    require: bool,
}

const USAGE: &str = "\
usage: pipeline_bench [options]

  --backend B        the backend to measure: cpu | cuda (default cpu)
  --device SPEC      the same, naming a device: cpu | cuda[:N] | vulkan[:N]
  --json FILE        write the records to FILE as JSON
  --quick            fewer runs and batches
  --runs N           repeats per point, at least 3 (default 5, 3 with --quick)
  --batches N        batches per run, at least 1 (default: by backend and --quick)
  --sizes-kib K,...  batch sizes in KiB, each 1 to 4194304 (default: by backend)
  --require          exit with status 1, not 0, when the backend is unusable (SKIPPED)
  -h, --help         this text";

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cpu(None),
        json: None,
        quick: false,
        runs: None,
        batches: None,
        sizes: None,
        require: false,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("backend") => {
                args.device = match cli.choice("--backend", &["cpu", "cuda"])? {
                    "cpu" => DeviceSpec::Cpu(None),
                    _ => DeviceSpec::Cuda(None),
                }
            }
            // A benchmark names what it measures: `auto` could measure either.
            Long("device") => {
                args.device = cli.device("--device", "cpu, cuda or cuda:N", |spec| {
                    spec != DeviceSpec::Auto
                })?
            }
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("quick") => args.quick = true,
            Long("runs") => args.runs = Some(cli.number("--runs", "a count", 3..)?),
            Long("batches") => args.batches = Some(cli.number("--batches", "a count", 1..)?),
            Long("sizes-kib") => {
                let kib: Vec<usize> = cli.numbers("--sizes-kib", "a size in KiB", 1..=4 << 20)?;
                args.sizes = Some(kib.into_iter().map(|k| k << 10).collect());
            }
            Long("require") => args.require = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// One point, as written to the JSON report.
#[derive(Serialize)]
struct Record {
    backend: &'static str,
    pattern: String,
    ratio: f64,
    batch_bytes: usize,
    batches: usize,
    seconds: f64,
    speedup_vs_sequential: f64,
    efficiency: f64,
    /// The machine's bound for the pattern's work (see the program's docs), seconds.
    machine_bound_seconds: f64,
    /// `machine_bound_seconds / seconds`.
    fraction_of_machine_bound: f64,
    /// The engine's own cost of a batch through the pattern (a batch of one f32, no loader
    /// wait, no compute), seconds per batch: the part of the gap to the bound that is the
    /// hand-off between threads and streams, not copies (see the program's docs).
    handoff_seconds_per_batch: f64,
    /// What a spinning core adds to one batch's upload and download as plain copies of the
    /// pattern's footprint, seconds per batch (null on CUDA): the part of the rest of the
    /// gap that is the copies meeting the compute on the same cores and memory.
    copy_contention_seconds_per_batch: f64,
}

fn main() -> ExitCode {
    let args = cli::parse_or_exit("pipeline_bench", USAGE, parse_args);
    let ctx = match Context::new(args.device) {
        Ok(ctx) => ctx,
        Err(e) if !matches!(args.device, DeviceSpec::Cpu(_)) => {
            println!("SKIPPED: {e}");
            return if args.require {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
        Err(e) => {
            eprintln!("pipeline_bench: error: {}", gpukit::error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    match run(&ctx, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline_bench: error: {}", gpukit::error_chain(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Waits like a loader blocked on I/O: sleeps (using no core) for about `d`, the measured
/// overshoot of `thread::sleep` taken into account.
///
/// Linux lets a sleeping thread wake up to 50 us late (its timer slack): longer than a small
/// batch's transfer, so the loader would wait far longer than asked, or (with the overshoot
/// taken off) not at all. The threads that sleep here ask for a 1 ns slack first, so that
/// a sleep lasts about what it asks, as a wait for a device's interrupt would.
#[derive(Clone, Copy)]
struct IoWait {
    overshoot: Duration,
}

impl IoWait {
    fn calibrate(d: Duration) -> IoWait {
        precise_sleeps();
        let mut samples: Vec<f64> = (0..31)
            .map(|_| {
                let t = Instant::now();
                std::thread::sleep(d);
                t.elapsed().saturating_sub(d).as_secs_f64()
            })
            .collect();
        IoWait {
            overshoot: Duration::from_secs_f64(median(&mut samples).unwrap_or(0.0)),
        }
    }

    /// Sleeps until about `d` from now: for what is left less the usual overshoot (at least
    /// 1 us), again while more than half an overshoot is left. A wait shorter than the
    /// overshoot lasts about one overshoot, never nothing.
    fn wait(self, d: Duration) {
        precise_sleeps();
        let end = Instant::now() + d;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left <= self.overshoot / 2 {
                break;
            }
            std::thread::sleep(
                left.saturating_sub(self.overshoot)
                    .max(Duration::from_micros(1)),
            );
        }
    }
}

/// Sets the calling thread's timer slack to 1 ns (once per thread; Linux only).
fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    {
        thread_local!(static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        if !SET.replace(true) {
            // SAFETY: PR_SET_TIMERSLACK takes one integer argument (the slack in ns; the
            // others are ignored) and changes only the calling thread's timer slack.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        }
    }
}

/// One run of `pattern` over `batches` batches of `rows` f32: the loader calls `wait` and
/// writes the batch's index, the compute spins `spin_ns` and writes `in[0] + 1`, and, with
/// `check`, the sink fails on a batch that did not arrive as its index plus one.
fn spin_run(
    ctx: &Context,
    kernel: &SpinKernel,
    pattern: Pattern,
    (batches, rows): (usize, usize),
    spin_ns: u64,
    wait: impl Fn() + Send + Sync,
    check: bool,
) -> Res<gpukit::Report> {
    Ok(gpukit::Pipeline::new(ctx, pattern)
        .batches(batches)
        .max_rows(rows)
        .input::<f32>(1)
        .output::<f32>(1)
        .run(
            |i, buf| {
                wait();
                buf[0] = i as f32;
                Ok(buf.len())
            },
            |s, _, x, y| s.launch(kernel, LaunchConfig::linear(1, 1), (x, y, spin_ns)),
            |b, y| {
                let i = b.index;
                if !check || y[0] == i as f32 + 1.0 {
                    Ok(())
                } else {
                    Err(format!("batch {i} delivered {} (expected {})", y[0], i + 1).into())
                }
            },
        )?)
}

/// The median milliseconds of one batch's upload and download, from the stage spans of a
/// sequential pipeline of `batches` batches of `n` f32 with no loader wait and no compute
/// (the second of two runs: the first fills the pinned pool). Measured inside a pipeline,
/// the transfers see the buffers and caches the benchmark's runs see.
fn transfer_ms(ctx: &Context, n: usize, batches: usize, kernel: &SpinKernel) -> Res<(f64, f64)> {
    let run = || {
        spin_run(
            ctx,
            kernel,
            Pattern::Sequential,
            (batches, n),
            0,
            || {},
            false,
        )
    };
    run()?;
    let report = run()?;
    Ok((
        median_stage_ms(&report, Stage::Upload),
        median_stage_ms(&report, Stage::Download),
    ))
}

/// One measured run.
struct Sample {
    seconds: f64,
    report: gpukit::Report,
}

/// What the sweep measured at one point.
struct Point {
    ratio: f64,
    batch_bytes: usize,
    pattern: Pattern,
    batches: usize,
    seconds: f64,
    speedup: f64,
    /// Against the sequential median's bound.
    efficiency: f64,
    /// Against the run's own calibrated bound (the sequential run's own for sequential).
    calibrated_efficiency: f64,
    /// The machine's bound, seconds, and the run's fraction of it.
    machine_bound: f64,
    of_bound: f64,
    /// What a spinning core adds to one batch's upload and download (plain copies of the
    /// pattern's footprint), ms; NaN on CUDA.
    contention: f64,
    /// Per-batch stage means of the median run, ms: load, upload, compute, download.
    stages: [f64; 4],
}

/// The CPU and CUDA targets for triple buffering at ratio 1: the fraction of the machine's
/// bound (on CUDA the library's efficiency) and the speedup over sequential.
fn targets(backend: &str) -> (f64, f64) {
    if backend == "cuda" {
        (0.95, 2.7)
    } else {
        (0.85, 1.0)
    }
}

/// Per-batch milliseconds of one batch's copies as plain `memcpy`s on buffers of a
/// pattern's footprint: upload alone, download alone, both at once on two threads, and one
/// then the other beside a spinning core.
#[derive(Clone, Copy)]
struct RawCopies {
    up: f64,
    down: f64,
    both: f64,
    /// An upload then a download on this thread while another spins, as the copies run
    /// while the compute stage holds a core: what the cores' and memory's sharing costs
    /// them.
    beside_spin: f64,
}

/// Measures [`RawCopies`] for batches of `n` f32 and `depth` buffer sets (pinned input,
/// device input, device output, pinned output, used in turn): medians over `rounds`
/// batches after a warm-up pass over every set. The two threads of `both` start together
/// on a spinning flag, and the time is from the flag to the later of the two finishing.
fn raw_copies(n: usize, depth: usize, rounds: usize) -> RawCopies {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Per set: (pinned input, device input) for the upload, (device output, pinned output)
    // for the download.
    let buffers = |first: usize| -> Vec<(Vec<f32>, Vec<f32>)> {
        (0..depth)
            .map(|k| (vec![(first + k) as f32; n], vec![0.0; n]))
            .collect()
    };
    let (mut ups, mut downs) = (buffers(0), buffers(depth));
    let copy = |(src, dst): &mut (Vec<f32>, Vec<f32>)| {
        dst.copy_from_slice(src);
        std::hint::black_box(dst);
    };
    let timed = |f: &mut dyn FnMut(usize)| -> f64 {
        for k in 0..depth {
            f(k);
        }
        let mut ms: Vec<f64> = (0..rounds)
            .map(|r| {
                let t = Instant::now();
                f(r % depth);
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        median(&mut ms).unwrap_or(f64::NAN)
    };
    // Alone: each batch's upload then its download, as a sequential pipeline runs them (so
    // each sees the caches the other leaves), timed one by one.
    let (mut up_ms, mut down_ms) = (Vec::new(), Vec::new());
    for r in 0..depth + rounds {
        let k = r % depth;
        let t = Instant::now();
        copy(&mut ups[k]);
        let t1 = Instant::now();
        copy(&mut downs[k]);
        if r >= depth {
            up_ms.push((t1 - t).as_secs_f64() * 1e3);
            down_ms.push(t1.elapsed().as_secs_f64() * 1e3);
        }
    }
    let (up, down) = (
        median(&mut up_ms).unwrap_or(f64::NAN),
        median(&mut down_ms).unwrap_or(f64::NAN),
    );
    // Both at once: this thread uploads; a helper downloads set `(go - 1) % depth` each
    // time `go` moves, and says so in `done`.
    let (go, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let both = std::thread::scope(|scope| {
        let (go, done, downs) = (&go, &done, &mut downs);
        scope.spawn(move || loop {
            let g = go.load(Ordering::Acquire);
            if g == usize::MAX {
                return;
            }
            if g > done.load(Ordering::Relaxed) {
                copy(&mut downs[(g - 1) % depth]);
                done.store(g, Ordering::Release);
            } else {
                std::hint::spin_loop();
            }
        });
        let mut round = 0usize;
        let ms = timed(&mut |k| {
            round += 1;
            go.store(round, Ordering::Release);
            copy(&mut ups[k]);
            while done.load(Ordering::Acquire) < round {
                std::hint::spin_loop();
            }
        });
        go.store(usize::MAX, Ordering::Release);
        ms
    });
    // Beside a spinning core: this thread's upload then download while a helper spins.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let beside_spin = std::thread::scope(|scope| {
        let stop = &stop;
        scope.spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        });
        let ms = timed(&mut |k| {
            copy(&mut ups[k]);
            copy(&mut downs[k]);
        });
        stop.store(true, Ordering::Release);
        ms
    });
    RawCopies {
        up,
        down,
        both,
        beside_spin,
    }
}

/// The machine's bound, seconds, for `batches` batches of `pattern`'s work whose
/// uncontended stage times the sequential run `seq` measured (see the program's docs).
fn machine_bound(seq: &gpukit::Report, raw: RawCopies, batches: usize, cores: usize) -> f64 {
    let per = |ms: f64| ms / batches as f64;
    let u = &seq.uncontended;
    let (load, compute) = (per(u.load), per(u.compute));
    let host = per(u.enqueue + u.deliver);
    let copies = raw.both.min(raw.up + raw.down);
    let work = per(seq.uncontended_load_cpu_ms) + raw.up + compute + raw.down + host;
    let batch_ms = load
        .max(compute)
        .max(host)
        .max(copies)
        .max(work / cores.max(1) as f64);
    batch_ms * batches as f64 / 1e3
}

fn run(ctx: &Context, args: &Args) -> Res {
    let backend = ctx.backend_name();
    let cuda = backend == "cuda";
    let sizes = match &args.sizes {
        Some(sizes) => sizes.clone(),
        None if cuda => vec![4 << 20, 16 << 20, 64 << 20],
        None => vec![1 << 20, 4 << 20, 16 << 20],
    };
    let runs = args.runs.unwrap_or(if args.quick { 3 } else { 5 });
    let batches = args.batches.unwrap_or(match (cuda, args.quick) {
        (true, false) => 128,
        (true, true) => 48,
        (false, false) => 40,
        (false, true) => 16,
    });
    println!(
        "pipeline_bench: {backend} backend, device {} ({}), {} cores/SMs, {} copy engines",
        ctx.device_id(),
        ctx.info().name,
        ctx.info().multiprocessors,
        ctx.info().copy_engines
    );
    println!(
        "{batches} batches per run; each point is the median of {runs} runs (after a warm-up \
         run per batch size); patterns {}",
        Pattern::STANDARD.map(|p| p.name()).join(", ")
    );

    // SAFETY: `spin` takes (const float*, float*, unsigned long long), `SpinSig` in order and
    // type, and touches only element 0 of each array, which every batch has.
    let spin = unsafe { KernelSpec::<SpinSig>::cuda(SPIN_SRC, "spin") };
    let kernel = ctx.kernel(spin.cpu(|_, (input, out, ns)| {
        let t = Instant::now();
        while t.elapsed().as_nanos() < u128::from(*ns) {
            std::hint::spin_loop();
        }
        out[0] = input[0] + 1.0;
    }))?;

    let handoff = handoff_ms(ctx, &kernel, batches, runs)?;
    println!(
        "hand-off: triple buffering of batches of one f32, no loader wait, no compute: \
         {handoff:.4} ms per batch (the engine's own cost of a batch; medians of {runs} runs)"
    );

    let mut points: Vec<Point> = Vec::new();
    for &bytes in &sizes {
        let n = bytes / std::mem::size_of::<f32>();
        let (t_up, t_down) = transfer_ms(ctx, n, batches, &kernel)?;
        let transfer = Duration::from_secs_f64(t_up / 1e3);
        let io = IoWait::calibrate(transfer);
        println!(
            "\n{}: a batch's upload takes {t_up:.3} ms, its download {t_down:.3} ms (medians of a \
             sequential run without compute); the loader sleeps {t_up:.3} ms per batch (a \
             sleep overshoots by {:.3} ms); compute spins ratio x {t_up:.3} ms",
            fmt_bytes(bytes),
            io.overshoot.as_secs_f64() * 1e3
        );

        // One run of `pattern` with compute taking `ratio` transfers.
        let run_once = |pattern: Pattern, ratio: f64| -> Res<Sample> {
            let spin_ns = (t_up * ratio * 1e6) as u64;
            let wait = || io.wait(transfer);
            let report = spin_run(ctx, &kernel, pattern, (batches, n), spin_ns, wait, true)?;
            Ok(Sample {
                seconds: report.wall_ms / 1e3,
                report,
            })
        };

        // The machine's copies with each pattern's footprint (CPU backend).
        let raw: Vec<Option<RawCopies>> = Pattern::STANDARD
            .iter()
            .map(|p| (!cuda).then(|| raw_copies(n, p.depth(), if args.quick { 15 } else { 31 })))
            .collect();
        for (p, r) in Pattern::STANDARD.iter().zip(&raw) {
            if let Some(r) = r {
                println!(
                    "  plain memcpy of a batch, {}'s footprint ({} buffer sets): upload {:.3} \
                     ms, download {:.3} ms, both at once on two threads {:.3} ms, upload then \
                     download beside a spinning core {:.3} ms",
                    p.name(),
                    p.depth(),
                    r.up,
                    r.down,
                    r.both,
                    r.beside_spin
                );
            }
        }
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());

        // Warm-up: the deepest pattern takes as many pinned buffers as any.
        let deepest = Pattern::STANDARD.iter().max_by_key(|p| p.depth());
        run_once(*deepest.unwrap_or(&Pattern::Triple), 1.0)?;
        print_header();

        for &ratio in &RATIOS {
            let mut samples: Vec<Vec<Sample>> = Pattern::STANDARD.iter().map(|_| vec![]).collect();
            for _ in 0..runs {
                for (k, &pattern) in Pattern::STANDARD.iter().enumerate() {
                    samples[k].push(run_once(pattern, ratio)?);
                }
            }
            let mut medians = Vec::new();
            for mut s in samples {
                s.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
                let mid = s.swap_remove(s.len() / 2);
                medians.push(mid);
            }
            let seq = &medians[0].report;
            for ((m, &pattern), raw) in medians.iter().zip(&Pattern::STANDARD).zip(&raw) {
                let per = |ms: f64| ms / batches as f64;
                let st = &m.report.stages;
                // Every pattern against the sequential median: one bound for all of them,
                // so the slower run always shows the lower efficiency.
                let judged = m.report.against(seq)?;
                let machine_bound = match raw {
                    Some(raw) => machine_bound(seq, *raw, batches, cores),
                    // CUDA: the library's bound (copy engines counted).
                    None => judged.bound_ms / 1e3,
                };
                let p = Point {
                    ratio,
                    batch_bytes: bytes,
                    pattern,
                    batches,
                    seconds: m.seconds,
                    speedup: judged.speedup_vs_sequential.unwrap_or(f64::NAN),
                    efficiency: judged.efficiency,
                    calibrated_efficiency: m.report.efficiency,
                    machine_bound,
                    of_bound: machine_bound / m.seconds,
                    contention: raw.map_or(f64::NAN, |r| r.beside_spin - (r.up + r.down)),
                    stages: [
                        per(st.load),
                        per(st.upload),
                        per(st.compute),
                        per(st.download),
                    ],
                };
                print_point(&p);
                points.push(p);
            }
        }
    }

    honesty(&points);
    if let Some(&largest) = sizes.iter().max() {
        staging_readback(ctx, largest / std::mem::size_of::<f32>(), batches.min(16))?;
    }
    let (eff_target, speedup_target) = targets(backend);
    println!(
        "\ntarget ({backend}): triple buffering at ratio 1 reaches >= {eff_target:.2} of the \
         {} and >= {speedup_target:.1}x sequential",
        if cuda {
            "max-stage bound"
        } else {
            "machine's bound"
        }
    );
    let (mut met, mut missed) = (Vec::new(), Vec::new());
    for p in points
        .iter()
        .filter(|p| p.pattern == Pattern::Triple && p.ratio == 1.0)
    {
        let ok = p.of_bound >= eff_target && p.speedup >= speedup_target;
        println!(
            "  {:>8}: {} {:.3} ({}), speedup {:.2}x ({}) -> {}",
            fmt_bytes(p.batch_bytes),
            if cuda { "efficiency" } else { "of bound" },
            p.of_bound,
            if p.of_bound >= eff_target {
                "ok"
            } else {
                "below"
            },
            p.speedup,
            if p.speedup >= speedup_target {
                "ok"
            } else {
                "below"
            },
            if ok { "MET" } else { "NOT MET" }
        );
        if ok { &mut met } else { &mut missed }.push(fmt_bytes(p.batch_bytes));
        // Where the time above the bound goes: at most the hand-off's floor is the engine's
        // own cost of moving batches; the rest is the stages slowing each other down.
        // A spinning core's cost to the copies is measured apart: what is left after it is
        // the engine's scheduling of the stages on the cores.
        let per = |s: f64| s * 1e3 / p.batches as f64;
        let gap = per(p.seconds) - per(p.machine_bound);
        println!(
            "            per batch {:.4} ms, bound {:.4} ms, above it {gap:.4} ms: the \
             hand-off's floor {handoff:.4} ms, the rest {:.4} ms (a spinning core adds \
             {:.4} ms to a batch's plain copies)",
            per(p.seconds),
            per(p.machine_bound),
            gap - handoff,
            p.contention
        );
    }
    let verdict = match (met.is_empty(), missed.is_empty()) {
        (_, true) => "meets them at every batch size".to_string(),
        (true, false) => "meets them at no batch size".to_string(),
        (false, false) => format!(
            "meets them at {} (not at {})",
            met.join(", "),
            missed.join(", ")
        ),
    };
    println!("triple buffering at ratio 1 on {backend}: {verdict}");

    if let Some(path) = &args.json {
        let records: Vec<Record> = points
            .iter()
            .map(|p| Record {
                backend,
                pattern: p.pattern.name(),
                ratio: p.ratio,
                batch_bytes: p.batch_bytes,
                batches: p.batches,
                seconds: p.seconds,
                speedup_vs_sequential: p.speedup,
                efficiency: p.efficiency,
                machine_bound_seconds: p.machine_bound,
                fraction_of_machine_bound: p.of_bound,
                handoff_seconds_per_batch: handoff / 1e3,
                copy_contention_seconds_per_batch: p.contention / 1e3,
            })
            .collect();
        write_json(path, &records)?;
        println!("wrote {} records to {path}", records.len());
    }
    Ok(())
}

/// Milliseconds per batch of triple buffering on batches of one f32, with a loader that
/// waits for nothing and a compute that spins 0 ns, median of `runs` runs: what the engine
/// itself costs a batch (its threads' and streams' hand-offs, the enqueues, the events),
/// which copies and compute of real batches come on top of.
fn handoff_ms(ctx: &Context, kernel: &SpinKernel, batches: usize, runs: usize) -> Res<f64> {
    let mut ms = Vec::with_capacity(runs + 1);
    for run in 0..=runs {
        let report = spin_run(ctx, kernel, Pattern::Triple, (batches, 1), 0, || {}, true)?;
        // The first run is a warm-up.
        if run > 0 {
            ms.push(report.wall_ms / batches as f64);
        }
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

/// The cost of a loader that reads back what it wrote (a checksum over its staging buffer),
/// with staging memory write-combined (the default: fast to upload from, uncached for host
/// reads on CUDA) and plainly pinned (`loader_reads_back(true)`): median load ms per batch
/// of a sequential run each, and their ratio. On the CPU backend both are ordinary memory.
fn staging_readback(ctx: &Context, n: usize, batches: usize) -> Res {
    let load_ms = |reads_back: bool| -> Res<f64> {
        let run = || {
            gpukit::Pipeline::new(ctx, Pattern::Sequential)
                .batches(batches)
                .max_rows(n)
                .input::<f32>(1)
                .output::<f32>(1)
                .loader_reads_back(reads_back)
                .run(
                    |i, buf| {
                        buf.iter_mut()
                            .enumerate()
                            .for_each(|(j, v)| *v = (i + j) as f32);
                        let sum: f64 = buf.iter().map(|&v| f64::from(v)).sum();
                        std::hint::black_box(sum);
                        Ok(buf.len())
                    },
                    |s, _, x, y| s.copy(x, y),
                    |_, _| Ok(()),
                )
        };
        run()?; // fills the pinned pool
        Ok(median_stage_ms(&run()?, Stage::Load))
    };
    let (wc, pinned) = (load_ms(false)?, load_ms(true)?);
    println!(
        "
staging read-back ({}, a loader that writes its batch then sums it): {wc:.3} ms per \
         batch from default staging, {pinned:.3} ms with loader_reads_back(true): {:.2}x",
        fmt_bytes(n * std::mem::size_of::<f32>()),
        wc / pinned
    );
    Ok(())
}

/// Lists the points where a buffered pattern ran slower than sequential, with its
/// efficiency next to sequential's (which must be higher), and says whether any contradicts.
fn honesty(points: &[Point]) {
    let mut slower = 0;
    let mut contradictions = 0;
    for p in points
        .iter()
        .filter(|p| p.pattern != Pattern::Sequential && p.speedup < 1.0)
    {
        let Some(seq) = points.iter().find(|q| {
            q.pattern == Pattern::Sequential && q.ratio == p.ratio && q.batch_bytes == p.batch_bytes
        }) else {
            continue;
        };
        slower += 1;
        let honest = p.efficiency < seq.efficiency;
        contradictions += usize::from(!honest);
        println!(
            "  slower than sequential: {} at ratio {} and {}: {:.2}x, efficiency {:.3} vs \
             sequential's {:.3} ({}; eff(cal) {:.3})",
            p.pattern,
            p.ratio,
            fmt_bytes(p.batch_bytes),
            p.speedup,
            p.efficiency,
            seq.efficiency,
            if honest {
                "lower, as it must be"
            } else {
                "NOT LOWER"
            },
            p.calibrated_efficiency
        );
    }
    println!(
        "honesty: {slower} buffered point(s) slower than sequential, {contradictions} reporting a \
         higher efficiency than sequential"
    );
}

fn print_header() {
    println!(
        "{:>6} {:>8} {:>11} {:>9} {:>8} {:>10} {:>9} {:>8}   ms/batch: load upload compute download",
        "ratio", "batch", "pattern", "seconds", "speedup", "efficiency", "eff(cal)", "of bound",
    );
}

fn print_point(p: &Point) {
    println!(
        "{:>6} {:>8} {:>11} {:>9.4} {:>7.2}x {:>10.3} {:>9.3} {:>8.3}   {:>8.3} {:>6.3} {:>7.3} {:>8.3}",
        p.ratio,
        fmt_bytes(p.batch_bytes),
        p.pattern.name(),
        p.seconds,
        p.speedup,
        p.efficiency,
        p.calibrated_efficiency,
        p.of_bound,
        p.stages[0],
        p.stages[1],
        p.stages[2],
        p.stages[3]
    );
}
