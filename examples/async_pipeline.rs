//! The main program of the workspace: one data set pushed through every standard pipeline
//! pattern (sequential, double, triple and 4-deep buffering) on the detected backend, every
//! result checked bit for bit against the sequential run, a table of what overlap bought,
//! and the timelines of the triple-buffered and sequential runs as pictures.
//!
//! ```text
//! cargo run --release --example async_pipeline                  # GPU_DEVICE, else CUDA, else CPU
//! cargo run --release --example async_pipeline -- --quick       # a smaller data set
//! cargo run --release --example async_pipeline -- --device cpu --compute-ops 3 --io-ms 2.5
//! ```
//!
//! Each batch goes through five stages:
//!
//! - **load**: the loader fills a pinned staging buffer with the batch's data (a hash of the
//!   batch and element index, cheap and deterministic) and then waits `--io-ms` to model the
//!   latency of reading it from disk (a wait that uses no CPU);
//! - **upload**, **compute** (`--compute-ops` chained built-in ops: relu, scale, axpy, mul,
//!   add), **download**, on their own streams in the buffered patterns;
//! - **deliver**: the sink copies the batch's output into the run's result set.
//!
//! Unless both are given, `--compute-ops` and `--io-ms` come from a short calibration (a few
//! sequential batches without I/O wait) that balances the stages on this machine: on the CPU
//! backend, where every stage runs on the same cores, compute takes about as long as upload
//! and download together, and the load somewhat longer than a batch's CPU work spread over
//! the cores; on a GPU, whose copy engines and SMs work beside the host, compute takes about
//! as long as the slowest of upload, download and the loader's fill. Balanced stages are where
//! buffering gains the most; the buffered patterns approach the max-stage bound (`effic` 1.0).
//!
//! Writes `pipeline_triple.{trace.json,svg}` and `pipeline_sequential.{trace.json,svg}` into
//! the current folder (Perfetto, <https://ui.perfetto.dev>, opens the JSON). Any error or a
//! result that differs between patterns prints a message and exits with status 1.

use std::error::Error;
use std::ops::Bound;
use std::process::ExitCode;
use std::time::Duration;

use gpukit::{
    Context, DeviceSpec, GpuArray, GpuView, GpuViewMut, Pattern, Pipeline, Report, Stage, Stream,
};
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};
use gpukit_examples::{fmt_bytes, median_stage_ms};

type Res<T = ()> = Result<T, Box<dyn Error>>;

const USAGE: &str = "\
usage: async_pipeline [options]

  --quick              a small data set (24 batches of 2 MiB on the CPU)
  --batches N          batches per run (default 96)
  --batch-mib X        MiB of f32 per batch, above 0, at most 4096 (default 4 on the
                       CPU, 8 on CUDA)
  --device SPEC        auto | cpu | cuda[:N] | vulkan[:N] (default: GPU_DEVICE, else auto)
  --io-ms X            simulated I/O wait per batch in ms, 0 to 10000 (default:
                       calibrated)
  --compute-ops N      chained built-in ops per batch (default: calibrated)
  --compute-streams K  spread compute over K streams (default 1)
  -h, --help           this text";

/// Ops per batch in the calibration run.
const CALIBRATION_OPS: usize = 4;
/// Batches in each calibration run.
const CALIBRATION_BATCHES: usize = 6;
/// Calibration runs.
const CALIBRATION_RUNS: usize = 3;
/// On the CPU backend, how much longer than a batch's CPU work (spread over the cores) the
/// calibrated load takes: enough that the loader, not the cores, is the bottleneck.
const LOADER_MARGIN: f64 = 1.35;

/// The command line.
#[derive(Debug, Default)]
struct Opts {
    quick: bool,
    batches: Option<usize>,
    batch_mib: Option<f64>,
    device: Option<DeviceSpec>,
    io_ms: Option<f64>,
    compute_ops: Option<usize>,
    compute_streams: usize,
}

fn parse_args(cli: &mut Cli) -> Result<Opts, CliError> {
    let mut o = Opts {
        compute_streams: 1,
        ..Opts::default()
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("quick") => o.quick = true,
            Long("batches") => o.batches = Some(cli.number("--batches", "a count", 1..)?),
            Long("batch-mib") => {
                let mib = (Bound::Excluded(0.0), Bound::Included(4096.0));
                o.batch_mib = Some(cli.number("--batch-mib", "a size in MiB", mib)?);
            }
            Long("device") => o.device = Some(cli.device("--device", ANY_DEVICE, |_| true)?),
            Long("io-ms") => {
                o.io_ms = Some(cli.number("--io-ms", "milliseconds", 0.0..=10_000.0)?);
            }
            Long("compute-ops") => {
                o.compute_ops = Some(cli.number("--compute-ops", "a count", 1..)?);
            }
            Long("compute-streams") => {
                o.compute_streams = cli.number("--compute-streams", "a count", 1..)?;
            }
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(o)
}

/// What every pattern processes.
#[derive(Debug, Clone, Copy)]
struct Workload {
    batches: usize,
    /// f32 elements per batch.
    len: usize,
    io_ms: f64,
    ops: usize,
    compute_streams: usize,
}

/// The loader's data: element `i` of batch `batch`, a hash mapped to [-1, 1). Written as
/// plain integer arithmetic so that it vectorizes (it models reading bytes, not work).
fn fill(batch: usize, buf: &mut [f32]) {
    let seed = (batch as u32).wrapping_mul(0x9E37_79B9) ^ 0x5BD1_E995;
    for (i, v) in buf.iter_mut().enumerate() {
        let mut h = (i as u32) ^ seed;
        h = h.wrapping_mul(0x7FEB_352D);
        h ^= h >> 15;
        h = h.wrapping_mul(0x846C_A68B);
        h ^= h >> 16;
        *v = (h >> 8) as f32 * (2.0 / 16_777_216.0) - 1.0;
    }
}

/// Enqueues the compute stage: `y = relu(x)`, then `ops - 1` more ops cycling through
/// `y *= 0.5`, `y += 0.25 x`, `t = x * y`, `y = t + x` (bounded: |y| stays below 2.5).
fn compute(
    s: &Stream,
    ops: usize,
    x: &GpuView<'_, f32>,
    y: &mut GpuViewMut<'_, f32>,
    t: &mut GpuArray<f32>,
) -> gpukit::Result<()> {
    s.relu(x, y)?;
    for j in 1..ops {
        match (j - 1) % 4 {
            0 => s.scale(0.5f32, y)?,
            1 => s.axpy(0.25f32, x, y)?,
            2 => s.mul(x, y, t)?,
            _ => s.add(t, x, y)?,
        }
    }
    Ok(())
}

/// The same computation on the host, for one batch.
fn reference(batch: usize, len: usize, ops: usize) -> Vec<f32> {
    let mut x = vec![0.0f32; len];
    fill(batch, &mut x);
    let mut y: Vec<f32> = x.iter().map(|&v| v.max(0.0)).collect();
    let mut t = vec![0.0f32; len];
    for j in 1..ops {
        for k in 0..len {
            match (j - 1) % 4 {
                0 => y[k] *= 0.5,
                1 => y[k] += 0.25 * x[k],
                2 => t[k] = x[k] * y[k],
                _ => y[k] = t[k] + x[k],
            }
        }
    }
    y
}

/// Whether `got` is within rounding of `want` (false for a NaN).
fn close(want: f32, got: f32) -> bool {
    (want - got).abs() <= 1e-5
}

/// Runs `pattern` over the workload, delivering batch `i`'s output into `outputs[i]`.
fn run_pattern(
    ctx: &Context,
    pattern: Pattern,
    w: &Workload,
    outputs: &mut [Vec<f32>],
) -> Res<Report> {
    let lanes = if pattern == Pattern::Sequential {
        1
    } else {
        w.compute_streams
    };
    // One scratch array per compute stream: batches on one stream run in order, so they
    // can share it; batches on different streams must not.
    let mut scratch = (0..lanes)
        .map(|_| ctx.alloc_zeros::<f32>(w.len))
        .collect::<gpukit::Result<Vec<_>>>()?;
    let io = Duration::from_secs_f64(w.io_ms / 1e3);
    let report = Pipeline::new(ctx, pattern)
        .batches(w.batches)
        .max_rows(w.len)
        .input::<f32>(1)
        .output::<f32>(1)
        .compute_streams(lanes)
        .run(
            |i, buf| {
                fill(i, buf);
                if !io.is_zero() {
                    std::thread::sleep(io); // the disk: a wait that uses no CPU
                }
                Ok(buf.len())
            },
            |s, b, x, y| compute(s, w.ops, x, y, &mut scratch[b.index % lanes]),
            |b, y| {
                outputs[b.index].copy_from_slice(y);
                Ok(())
            },
        )?;
    ctx.check()?;
    Ok(report)
}

/// Picks `--compute-ops` and `--io-ms` (unless given) from short sequential runs without
/// I/O wait, so that the stages are balanced:
///
/// - on the CPU backend, where one pool of cores runs every stage, compute takes about as
///   long as upload and download together, and the load (fill plus I/O wait) a third longer
///   than a batch's CPU work (fill, copies, compute, the sink's copy) spread over the cores:
///   the loader waiting on I/O is the bottleneck, and the rest hides behind it;
/// - on a GPU, whose copy engines and SMs work beside the host, compute takes about as long
///   as the slowest of upload, download and the loader's fill, and the load as long as the
///   slowest device stage.
fn calibrate(ctx: &Context, opts: &Opts, w: &mut Workload) -> Res {
    if let (Some(ops), Some(io)) = (opts.compute_ops, opts.io_ms) {
        w.ops = ops;
        w.io_ms = io;
        return Ok(());
    }
    let probe = Workload {
        batches: CALIBRATION_BATCHES,
        io_ms: 0.0,
        ops: CALIBRATION_OPS,
        compute_streams: 1,
        ..*w
    };
    // The least of the medians of a few short runs: another process busy during one of them
    // would otherwise unbalance everything that follows.
    let mut sink = vec![vec![0.0f32; w.len]; probe.batches];
    let mut best = [f64::INFINITY; 5];
    for _ in 0..CALIBRATION_RUNS {
        let report = run_pattern(ctx, Pattern::Sequential, &probe, &mut sink)?;
        for (b, stage) in best.iter_mut().zip(Stage::ALL) {
            *b = b.min(median_stage_ms(&report, stage));
        }
    }
    let [fill, up, comp, down, deliver] = best;
    let per_op = (comp / CALIBRATION_OPS as f64).max(1e-4);
    let info = ctx.info();
    let cpu = info.compute_capability.is_none();
    let target = if cpu {
        up + down
    } else {
        up.max(down).max(fill)
    };
    w.ops = opts
        .compute_ops
        .unwrap_or_else(|| ((target / per_op).round() as usize).clamp(1, 1000));
    let compute = w.ops as f64 * per_op;
    w.io_ms = opts.io_ms.unwrap_or_else(|| {
        let mut load = up.max(down).max(compute);
        if cpu {
            let cores = f64::from(info.multiprocessors.max(1));
            load = load.max(LOADER_MARGIN * (fill + up + compute + down + deliver) / cores);
        }
        // Two decimals are plenty, and the value can be given back on the command line.
        ((load - fill).max(0.0) * 100.0).round() / 100.0
    });
    println!(
        "calibration ({CALIBRATION_RUNS} x {} sequential batches, no I/O wait), per batch: \
         fill {fill:.2} ms, upload {up:.2} ms, compute {per_op:.3} ms per op, \
         download {down:.2} ms, sink {deliver:.2} ms",
        probe.batches
    );
    println!(
        "  -> --compute-ops {} --io-ms {} (give both to skip the calibration)",
        w.ops, w.io_ms
    );
    Ok(())
}

/// The first element where `got` differs from `want` bit for bit (NaNs included).
fn first_difference(want: &[Vec<f32>], got: &[Vec<f32>]) -> Option<(usize, usize, f32, f32)> {
    for (b, (w, g)) in want.iter().zip(got).enumerate() {
        if let Some(k) = w
            .iter()
            .zip(g)
            .position(|(a, c)| a.to_bits() != c.to_bits())
        {
            return Some((b, k, w[k], g[k]));
        }
    }
    None
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("async_pipeline", run())
}

fn run() -> Res {
    let opts = cli::parse_or_exit("async_pipeline", USAGE, parse_args);
    let ctx = gpukit_examples::open_context(opts.device)?;
    let sel = ctx.selection();
    let info = ctx.info();
    println!(
        "backend {} device {} ({}; requested `{}` by {})",
        ctx.backend_name(),
        ctx.device_id(),
        info.name,
        sel.requested,
        sel.origin
    );
    for r in &sel.rejected {
        println!("  {} rejected: {}", r.backend, r.reason);
    }
    let cpu = info.compute_capability.is_none();
    let default_mib = match (opts.quick, cpu) {
        (true, true) => 2.0,
        (true, false) => 4.0,
        (false, true) => 4.0,
        (false, false) => 8.0,
    };
    let batch_bytes = (opts.batch_mib.unwrap_or(default_mib) * 1024.0 * 1024.0) as usize;
    let mut w = Workload {
        batches: opts.batches.unwrap_or(if opts.quick { 24 } else { 96 }),
        len: (batch_bytes / 4).max(1),
        io_ms: 0.0,
        ops: 1,
        compute_streams: opts.compute_streams,
    };
    println!(
        "data set: {} batches of {} ({} f32 each), {} in and {} out per run",
        w.batches,
        fmt_bytes(w.len * 4),
        w.len,
        fmt_bytes(w.batches * w.len * 4),
        fmt_bytes(w.batches * w.len * 4),
    );
    calibrate(&ctx, &opts, &mut w)?;
    // Warm up every buffer the deepest pattern needs (the pinned pool keeps them), so that no
    // pattern pays for first-touch allocations the others do not.
    let warm = Workload {
        batches: 8.min(w.batches),
        io_ms: 0.0,
        ..w
    };
    let mut scratch = vec![vec![0.0f32; w.len]; warm.batches];
    run_pattern(&ctx, Pattern::Deep(4), &warm, &mut scratch)?;
    drop(scratch);
    println!(
        "per batch: load = fill + {} ms I/O wait, compute = {} chained op(s){}",
        w.io_ms,
        w.ops,
        if w.compute_streams > 1 {
            format!(" on {} compute streams", w.compute_streams)
        } else {
            String::new()
        }
    );
    println!();

    // Pre-touched result sets: the sequential run's, and one the other patterns reuse.
    let mut expected = vec![vec![f32::NAN; w.len]; w.batches];
    let mut outputs = vec![vec![f32::NAN; w.len]; w.batches];
    let mut reports = Vec::new();
    for pattern in Pattern::STANDARD {
        print!("running {pattern:<10} ... ");
        use std::io::Write as _;
        std::io::stdout().flush()?;
        let sequential = pattern == Pattern::Sequential;
        let target = if sequential {
            &mut expected
        } else {
            &mut outputs
        };
        // NaN everywhere first: a batch the sink never delivered cannot pass for a result.
        for v in target.iter_mut() {
            v.fill(f32::NAN);
        }
        let report = run_pattern(&ctx, pattern, &w, target)?;
        if sequential {
            // The baseline itself is checked against the host (to rounding: a GPU may fuse
            // a multiply and an add), so that agreeing patterns are also right.
            for b in [0, w.batches - 1] {
                let want = reference(b, w.len, w.ops);
                let got = &expected[b];
                if let Some(k) = (0..w.len).find(|&k| !close(want[k], got[k])) {
                    return Err(format!(
                        "sequential: batch {b} element {k} is {}, the host computes {}",
                        got[k], want[k]
                    )
                    .into());
                }
            }
            println!("{:.0} ms, checked against the host", report.wall_ms);
        } else {
            if let Some((b, k, want, got)) = first_difference(&expected, &outputs) {
                return Err(format!(
                    "{pattern}: batch {b} element {k} is {got} ({:#010x}), the sequential run \
                     gave {want} ({:#010x})",
                    got.to_bits(),
                    want.to_bits()
                )
                .into());
            }
            println!(
                "{:.0} ms, {} batches identical to sequential",
                report.wall_ms, w.batches
            );
        }
        // Every pattern judged against the sequential run: one bound for all, so a pattern
        // slower than sequential shows the lower efficiency.
        let report = match reports.first() {
            Some(seq) => report.against(seq)?,
            None => report.against(&report)?,
        };
        reports.push(report);
    }
    println!();
    print_table(&reports);

    let mut written = Vec::new();
    for r in &reports {
        if matches!(r.pattern, Pattern::Triple | Pattern::Sequential) {
            let base = format!("pipeline_{}", r.pattern.name());
            let (json, svg) = (format!("{base}.trace.json"), format!("{base}.svg"));
            r.timeline
                .write_chrome_trace(&json)
                .map_err(|e| format!("writing {json}: {e}"))?;
            r.timeline
                .write_svg(&svg)
                .map_err(|e| format!("writing {svg}: {e}"))?;
            written.extend([json, svg]);
        }
    }
    println!();
    println!("timelines: {}", written.join(", "));
    println!("  open the .trace.json files in Perfetto (https://ui.perfetto.dev) or chrome://tracing; the .svg in a browser");

    let seq = reports[0].wall_ms;
    if let Some(triple) = reports.iter().find(|r| r.pattern == Pattern::Triple) {
        println!();
        println!(
            "triple buffering: {:.2}x the sequential pattern, {:.2} of the max-stage bound, \
             device idle {:.0}% of the time (sequential: {:.0}%); all {} patterns agree bit for bit",
            seq / triple.wall_ms,
            triple.efficiency,
            triple.device_idle * 100.0,
            reports[0].device_idle * 100.0,
            reports.len()
        );
    }
    let backend = ctx.backend_name();
    ctx.close()?;
    println!("done on the {backend} backend");
    Ok(())
}

fn print_table(reports: &[Report]) {
    let seq = reports.first().map_or(f64::NAN, |r| r.wall_ms);
    println!(
        "{:<10} {:>9} {:>8} {:>6} {:>6} {:>7} | {:>8} {:>8} {:>8} {:>8}",
        "pattern",
        "wall ms",
        "speedup",
        "effic",
        "idle",
        "GB/s",
        "load",
        "upload",
        "compute",
        "download"
    );
    println!("{}", "-".repeat(96));
    for r in reports {
        println!(
            "{:<10} {:>9.1} {:>7.2}x {:>6.2} {:>5.0}% {:>7.2} | {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            r.pattern.name(),
            r.wall_ms,
            seq / r.wall_ms,
            r.efficiency,
            r.device_idle * 100.0,
            r.bytes_per_s / 1e9,
            r.stages.load,
            r.stages.upload,
            r.stages.compute,
            r.stages.download
        );
    }
    println!(
        "(stage columns: total ms over all batches; effic = max-stage bound / wall time, the \
         bound from the sequential run's stage times; idle = no device stage running; GB/s = \
         bytes in + out per second)"
    );
}
