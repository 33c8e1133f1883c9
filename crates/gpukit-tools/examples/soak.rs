//! A soak test: a triple-buffered pipeline run over and over for a set time, while host and
//! device memory are sampled; after a warm-up, memory must stay flat.
//!
//! ```text
//! cargo run --release --example soak -- --minutes 0.5 [--backend cpu|cuda]
//! cargo xtask soak --minutes 0.5 --backend cuda     # the same, through xtask
//! ```
//!
//! Each run is a fresh `Pipeline::new(&ctx, Pattern::Triple)` over `--batches` batches of
//! `--batch-mib` MiB of f32 (`y = relu(x) * 0.5 + 0.25 x`, three built-in ops per batch), so
//! every run creates and drops its streams, events, device buffers and staging buffers.
//! What is sampled, between runs (when no buffer is out):
//!
//! - **RSS**: the process's resident set (`VmRSS` in `/proc/self/status`). On the CPU backend
//!   device memory *is* host memory, so RSS covers it too.
//! - **pinned**: the context's pinned-host pool, `ctx.host_pool_stats()`: `retained_bytes`
//!   (all pinned memory the context holds, since nothing is out between runs), and the
//!   counts of `fresh` allocations and `reused` buffers.
//! - **device pool**: the context's device memory pool, `ctx.memory_stats()`: `misses`
//!   (allocations that reserved new device memory) and the bytes `reserved`. Every run
//!   drops its device buffers and the next run's come back from the pool, so after the
//!   warm-up there must be no new reservation at all.
//! - **device used** (CUDA only): total minus free device memory from `cuMemGetInfo` (through
//!   cudarc on the context the backend made current; the `gpukit` API does not expose free
//!   memory). It counts the whole device, other processes included.
//!
//! The warm-up is the first 20 % of the time, and at least 3 runs; the first sample after it
//! is the baseline. The verdict fails (exit status 1) unless, over the window of the last
//! quarter of the samples taken after the baseline, RSS, the pool's pinned bytes and (on
//! CUDA) device memory used stay within max(8 MiB, 5 %) of the baseline, and the pool's
//! count of fresh allocations does not grow across the window, and the device pool makes no
//! new reservation (miss) from the baseline to the end.
//! Every run's output is checked too: the first run's against a host reference (to rounding),
//! every later run's bit for bit against the first's (a checksum per batch).
//!
//! `--leak-kib N` leaks N KiB per run on purpose, to see the verdict fail.
//! `--backend cuda` without a usable GPU prints `SKIPPED: <reason>` and exits with status 0.

use std::error::Error;
use std::ops::Bound;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpukit::{Context, DeviceSpec, GpuView, GpuViewMut, Pattern, Pipeline, Stream};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::fmt_bytes;

type Res<T = ()> = Result<T, Box<dyn Error>>;

const USAGE: &str = "\
usage: soak --minutes X [options]

  --minutes X        how long to run, in minutes, above 0 and at most 10080 (a week);
                     fractions allowed: 0.2 is 12 s
  --backend B        cpu | cuda | cuda:N (default cpu); cuda without a GPU prints SKIPPED
  --batches N        batches per pipeline run, at least 1 (default 16)
  --batch-mib X      MiB of f32 per batch, above 0 and at most 4096 (default 1 on the
                     CPU, 8 on CUDA)
  --leak-kib N       leak N KiB (at most 1048576) of host memory per run, on purpose
                     (checks the check)
  -h, --help         this text";

/// The longest soak `--minutes` accepts: a week.
const MAX_MINUTES: f64 = 7.0 * 24.0 * 60.0;
/// Fraction of the time that is warm-up.
const WARMUP_FRACTION: f64 = 0.2;
/// Runs that are warm-up at least.
const WARMUP_RUNS: usize = 3;
/// Samples over the whole time, roughly (one per run at most).
const SAMPLES: f64 = 24.0;
/// The tolerance on memory growth: max(this, TOLERANCE_FRACTION of the baseline).
const TOLERANCE_BYTES: u64 = 8 << 20;
/// See [`TOLERANCE_BYTES`].
const TOLERANCE_FRACTION: f64 = 0.05;
/// Allowed difference between the first run and the host reference.
const REFERENCE_TOLERANCE: f32 = 1e-5;

/// The command line.
#[derive(Debug)]
struct Opts {
    minutes: f64,
    backend: DeviceSpec,
    batches: usize,
    batch_mib: Option<f64>,
    leak_kib: usize,
}

fn parse_args(cli: &mut Cli) -> Result<Opts, CliError> {
    let mut minutes = None;
    let mut o = Opts {
        minutes: 0.0,
        backend: DeviceSpec::Cpu(None),
        batches: 16,
        batch_mib: None,
        leak_kib: 0,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("minutes") => {
                let range = (Bound::Excluded(0.0), Bound::Included(MAX_MINUTES));
                minutes = Some(cli.number("--minutes", "a number of minutes", range)?);
            }
            Long("backend") => {
                // `auto` would let the machine choose what the soak checks.
                o.backend = cli.device("--backend", "cpu, cuda or cuda:N", |spec| {
                    spec != DeviceSpec::Auto
                })?
            }
            Long("batches") => o.batches = cli.number("--batches", "a count", 1..)?,
            Long("batch-mib") => {
                let range = (Bound::Excluded(0.0), Bound::Included(4096.0));
                o.batch_mib = Some(cli.number("--batch-mib", "a size in MiB", range)?);
            }
            Long("leak-kib") => {
                o.leak_kib = cli.number("--leak-kib", "a size in KiB", 0..=1 << 20)?
            }
            other => return Err(other.unexpected().into()),
        }
    }
    o.minutes = minutes.ok_or_else(|| CliError::Bad("--minutes is required".into()))?;
    Ok(o)
}

/// Element `i` of batch `batch`: a hash mapped to [-1, 1), the same in every run.
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

/// The device work of a batch: `y = relu(x)`, `y *= 0.5`, `y += 0.25 x`.
fn compute(s: &Stream, x: &GpuView<'_, f32>, y: &mut GpuViewMut<'_, f32>) -> gpukit::Result<()> {
    s.relu(x, y)?;
    s.scale(0.5f32, y)?;
    s.axpy(0.25f32, x, y)
}

/// The same on the host, element by element.
fn reference(x: f32) -> f32 {
    x.max(0.0) * 0.5 + 0.25 * x
}

/// FNV-1a over the bits of `y`: two runs agree bit for bit when their checksums do.
fn checksum(y: &[f32]) -> u64 {
    y.iter().fold(0xCBF2_9CE4_8422_2325, |h, v| {
        (h ^ u64::from(v.to_bits())).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The resident set of this process in bytes (`VmRSS`), where Linux tells it.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Device memory in use (total minus free) on the CUDA context current on this thread;
/// `None` on the CPU backend, or when the driver does not say.
#[cfg(feature = "cuda")]
fn device_used(cuda: bool) -> Option<u64> {
    if !cuda {
        return None;
    }
    let (free, total) = cudarc::driver::result::mem_get_info().ok()?;
    Some(total.saturating_sub(free) as u64)
}

/// Without the `cuda` feature there is no CUDA context to ask.
#[cfg(not(feature = "cuda"))]
fn device_used(_cuda: bool) -> Option<u64> {
    None
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
struct Sample {
    secs: f64,
    runs: usize,
    rss: Option<u64>,
    pinned: usize,
    fresh: u64,
    reused: u64,
    misses: u64,
    reserved: u64,
    device: Option<u64>,
    warmup: bool,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn print_header(cuda: bool) {
    println!(
        "{:>8} {:>6} {:>10} {:>11} {:>7} {:>8} {:>7} {:>12} {:>12}  phase",
        "t (s)",
        "runs",
        "RSS MiB",
        "pinned MiB",
        "fresh",
        "reused",
        "misses",
        "reserved MiB",
        if cuda { "dev used MiB" } else { "device" }
    );
}

fn print_row(s: &Sample, baseline: bool) {
    let rss = s
        .rss
        .map_or("n/a".to_string(), |b| format!("{:.1}", mib(b)));
    let dev = s
        .device
        .map_or("in RSS".to_string(), |b| format!("{:.1}", mib(b)));
    let phase = match (s.warmup, baseline) {
        (_, true) => "baseline",
        (true, false) => "warm-up",
        (false, false) => "",
    };
    println!(
        "{:>8.1} {:>6} {:>10} {:>11.1} {:>7} {:>8} {:>7} {:>12.1} {:>12}  {phase}",
        s.secs,
        s.runs,
        rss,
        mib(s.pinned as u64),
        s.fresh,
        s.reused,
        s.misses,
        mib(s.reserved),
        dev
    );
}

/// The tolerance around `baseline` bytes.
fn tolerance(baseline: u64) -> u64 {
    TOLERANCE_BYTES.max((baseline as f64 * TOLERANCE_FRACTION) as u64)
}

/// Checks `values` (the last samples) against `baseline`; `Err` says by how much they grew.
fn flat(what: &str, baseline: u64, values: impl Iterator<Item = u64>) -> Result<String, String> {
    let tol = tolerance(baseline);
    let peak = values.max().unwrap_or(baseline);
    let grew = peak as i128 - baseline as i128;
    let text = format!(
        "{what}: baseline {:.1} MiB, last samples' peak {:.1} MiB ({:+.1} MiB, tolerance {:.1} MiB)",
        mib(baseline),
        mib(peak),
        grew as f64 / (1024.0 * 1024.0),
        mib(tol)
    );
    if grew > i128::from(tol) {
        Err(text)
    } else {
        Ok(text)
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: error: {}", gpukit::error_chain(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Runs the soak; `Ok(false)` when the verdict is FAIL.
fn run() -> Res<bool> {
    let opts = cli::parse_or_exit("soak", USAGE, parse_args);
    let ctx = match Context::new(opts.backend) {
        Ok(ctx) => ctx,
        Err(e) if !matches!(opts.backend, DeviceSpec::Cpu(_)) => {
            println!("SKIPPED: {e}");
            return Ok(true);
        }
        Err(e) => return Err(e.into()),
    };
    let info = ctx.info();
    let cuda = ctx.backend_name() == "cuda";
    let batch_bytes = (opts.batch_mib.unwrap_or(if cuda { 8.0 } else { 1.0 }) * 1048576.0) as usize;
    let len = (batch_bytes / 4).max(1);
    let total = Duration::from_secs_f64(opts.minutes * 60.0);
    let warmup = total.mul_f64(WARMUP_FRACTION);
    let interval = total.div_f64(SAMPLES);
    println!(
        "soak: {} device {} ({}): triple-buffered pipeline runs of {} batches x {}, repeated \
         for {:.1} s",
        ctx.backend_name(),
        ctx.device_id(),
        info.name,
        opts.batches,
        fmt_bytes(len * 4),
        total.as_secs_f64()
    );
    println!(
        "  warm-up: the first {:.1} s and at least {WARMUP_RUNS} runs; tolerance max({}, {:.0} %) \
         of the baseline; sampled between runs: RSS (VmRSS), the pinned pool (retained bytes, \
         fresh allocations, reuses){}",
        warmup.as_secs_f64(),
        fmt_bytes(TOLERANCE_BYTES as usize),
        TOLERANCE_FRACTION * 100.0,
        if cuda {
            ", device memory used (cuMemGetInfo: total - free, whole device)"
        } else {
            "; the CPU backend's device memory is host memory, counted in RSS"
        }
    );
    println!();
    print_header(cuda);

    let mut expected: Vec<u64> = Vec::new();
    let mut sums = vec![0u64; opts.batches];
    let mut samples: Vec<Sample> = Vec::new();
    let mut baseline: Option<usize> = None;
    let mut next_sample = Duration::ZERO;
    let mut batches_done = 0usize;
    let start = Instant::now();
    let mut runs = 0usize;
    loop {
        let first = runs == 0;
        let mut mismatch: Option<String> = None;
        Pipeline::new(&ctx, Pattern::Triple)
            .batches(opts.batches)
            .max_rows(len)
            .input::<f32>(1)
            .output::<f32>(1)
            .run(
                |i, buf| {
                    fill(i, buf);
                    Ok(buf.len())
                },
                |s, _b, x, y| compute(s, x, y),
                |b, y| {
                    let i = b.index;
                    if first && mismatch.is_none() {
                        let mut x = vec![0.0f32; y.len()];
                        fill(i, &mut x);
                        if let Some(k) = x.iter().zip(y).position(|(&x, &y)| {
                            let want = reference(x);
                            (want - y).abs() > REFERENCE_TOLERANCE || y.is_nan()
                        }) {
                            mismatch = Some(format!(
                                "run 0 batch {i} element {k}: {} against the reference {}",
                                y[k],
                                reference(x[k])
                            ));
                        }
                    }
                    sums[i] = checksum(y);
                    Ok(())
                },
            )?;
        ctx.check()?;
        if let Some(m) = mismatch {
            return Err(format!("wrong result: {m}").into());
        }
        if first {
            expected.clone_from(&sums);
        } else if let Some(b) = (0..opts.batches).find(|&b| sums[b] != expected[b]) {
            return Err(format!(
                "run {runs} batch {b}: checksum {:016x} differs from run 0's {:016x}",
                sums[b], expected[b]
            )
            .into());
        }
        runs += 1;
        batches_done += opts.batches;
        if opts.leak_kib > 0 {
            // Touched, so that it is resident; never freed.
            std::mem::forget(vec![1u8; opts.leak_kib * 1024]);
        }

        let elapsed = start.elapsed();
        let done = elapsed >= total;
        let warm = elapsed < warmup || runs < WARMUP_RUNS;
        let ends_warmup = !warm && baseline.is_none();
        if elapsed >= next_sample || done || ends_warmup {
            ctx.sync()?;
            let pool = ctx.host_pool_stats();
            let dev_pool = ctx.memory_stats();
            let s = Sample {
                secs: elapsed.as_secs_f64(),
                runs,
                rss: rss_bytes(),
                pinned: pool.retained_bytes,
                fresh: pool.fresh,
                reused: pool.reused,
                misses: dev_pool.pool_misses,
                reserved: dev_pool.bytes_reserved,
                device: device_used(cuda),
                warmup: warm,
            };
            // The baseline: the first sample taken once warm.
            if ends_warmup {
                baseline = Some(samples.len());
            }
            print_row(&s, ends_warmup);
            samples.push(s);
            while next_sample <= elapsed {
                next_sample += interval;
            }
        }
        if done && baseline.is_some() {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!();
    println!(
        "{runs} runs, {batches_done} batches, {} through the pipeline in {secs:.1} s; every \
         run's output equal to run 0's (checksums), run 0's equal to the host reference",
        fmt_bytes(batches_done * len * 4)
    );
    Ok(verdict(&samples, baseline.unwrap_or(0)))
}

/// Prints the checks and the verdict; true when it passes.
///
/// The window is the last quarter (at least one) of the samples after the baseline: RSS,
/// pinned bytes and device memory in it must stay within the tolerance of the baseline, and
/// the pool's fresh-allocation count must not grow across it (from the sample before it); the
/// device pool must make no new reservation from the baseline to the end.
fn verdict(samples: &[Sample], baseline: usize) -> bool {
    let base = samples[baseline];
    let after = samples.len() - baseline - 1;
    let from = samples.len() - (after / 4).max(1).min(after);
    let window = &samples[from..];
    let before = samples[from - 1];
    let end = samples[samples.len() - 1];
    let mut failures = Vec::new();
    let mut lines = Vec::new();
    if window.is_empty() {
        failures.push("no sample after the warm-up (run longer)".to_string());
    }
    let mut judge = |result: Result<String, String>| match result {
        Ok(t) => lines.push(t),
        Err(t) => failures.push(t),
    };
    match base.rss {
        Some(b) => judge(flat("RSS", b, window.iter().filter_map(|s| s.rss))),
        None => judge(Ok("RSS: not available on this system (not checked)".into())),
    }
    judge(flat(
        "pinned (pool)",
        base.pinned as u64,
        window.iter().map(|s| s.pinned as u64),
    ));
    if let Some(b) = base.device {
        judge(flat(
            "device used",
            b,
            window.iter().filter_map(|s| s.device),
        ));
    }
    let fresh = format!(
        "fresh pinned allocations: {} at the baseline, {} before the window, {} at the end \
         ({} reuses)",
        base.fresh, before.fresh, end.fresh, end.reused
    );
    judge(if end.fresh > before.fresh {
        Err(format!("{fresh}: still growing"))
    } else {
        Ok(fresh)
    });
    let misses = format!(
        "device pool reservations (misses): {} at the baseline, {} at the end ({} MiB \
         reserved at the end)",
        base.misses,
        end.misses,
        mib(end.reserved)
    );
    judge(if end.misses > base.misses {
        Err(format!("{misses}: new reservations after the warm-up"))
    } else {
        Ok(misses)
    });
    for l in &lines {
        println!("  ok   {l}");
    }
    for f in &failures {
        println!("  FAIL {f}");
    }
    if failures.is_empty() {
        println!(
            "soak: PASS (memory flat after the warm-up; window: the last {} sample(s), from {:.1} s)",
            window.len(),
            window[0].secs
        );
        true
    } else {
        println!("soak: FAIL ({} check(s) failed)", failures.len());
        false
    }
}
