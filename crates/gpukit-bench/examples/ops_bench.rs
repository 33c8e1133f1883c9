//! Built-in ops against `memcpy`, and gemm against other CPU gemms and numpy's BLAS, in the
//! same process.
//!
//! **Roofline.** For each size (64 KiB, 1 MiB, 16 MiB and 64 MiB of f32; `--quick` stops at
//! 16 MiB), the median wall time of one op followed by a `sync`, after a warm-up run:
//!
//! | op                              | bytes it must move (S = the array's size) |
//! |---------------------------------|--------------------------------------------|
//! | `add(&a, &b, &mut c)`           | 3 S (reads two arrays, writes one)         |
//! | `mul_scalar_inplace(&mut x, -1)`| 2 S (reads and writes one)                 |
//! | `relu(&a, &mut c)`              | 2 S                                        |
//! | `exp(&a, &mut c)`               | 2 S                                        |
//! | `sum_into(&a, &mut one)`        | S + 4 (reads one, writes one element)      |
//! | `row_sum(rows of 1024)`         | S + S / 1024 (reads one, writes a sum/row) |
//! | `softmax(rows of 1024)`         | 2 S                                        |
//!
//! Each becomes bytes moved per second, divided by memcpy's bandwidth counted the same way
//! (read + written: `2 S / t_memcpy`), measured on buffers of the same size in the same
//! process (`copy_nonoverlapping` between two host `Vec`s, timed before and after the ops):
//! 1.00 = the op moves its bytes as fast as memcpy. The `memcpy GB/s` column is the copy
//! rate (`S / t_memcpy`, as transfer_bench prints it). On a GPU the ratio still compares with
//! the host's memcpy. Every op's result is checked at sampled elements against the host.
//!
//! **gemm.** GFLOP/s (`2 n^3 / median seconds`) of square f32 products, n = 256, 512, 1024
//! and 2048 (`--quick`: to 1024), each after a warm-up run:
//! - `ours`: `ctx.gemm(Gemm::new(n, n, n), ..)` and a `sync` on the device `--device` names;
//! - `matrixmultiply::sgemm` called directly on host slices, with one thread and with its
//!   `threading` feature's pool (as the CPU backend calls it; see below);
//! - the `gemm` crate (candle's CPU gemm): `Parallelism::Rayon(0)` (rayon's pool, one thread
//!   per core unless `RAYON_NUM_THREADS` says otherwise) and `Parallelism::None`;
//! - numpy's `a @ b` on the same matrices in a `python3` child (`--python`), after two
//!   warm-up products, with `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` removed from the
//!   child's environment; the child reports which BLAS ran (numpy's build configuration,
//!   threadpoolctl's view where it is installed, the BLAS libraries mapped into the process,
//!   and for OpenBLAS its core name, configuration and thread count through ctypes). Without
//!   numpy the program prints `numpy: not available (<reason>)` and leaves those rows out.
//!
//! Every result is checked: the reference, our CPU backend's product, at 64 sampled entries
//! against f64 dot products; every timed result (ours included) against the reference's
//! whole matrix (`max |x - ref| / max |ref| <= 1e-3`), so no row can pass by doing nothing.
//!
//! The CPU backend turns matrixmultiply's `threading` feature on, and Cargo unifies a crate's
//! features within a build, so matrixmultiply is threaded in this program too (this
//! package's default `matrixmultiply-threading` feature says so); the single-threaded
//! matrixmultiply row comes from a child process of this program run with
//! `MATMUL_NUM_THREADS=1` (checked at sampled entries only).
//!
//! ```text
//! cargo run --release --example ops_bench -- [--device SPEC] [--json FILE] [--quick]
//!     [--python EXE] [--no-numpy]
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use gpukit::{Context, DeviceSpec, Gemm, Shape};
use gpukit_bench::{median_or_nan, samples, write_json};
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};
use gpukit_examples::fmt_bytes;
use serde::Serialize;
use serde_json::Value;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: ops_bench [options]

  --device SPEC  the device to measure: auto | cpu | cuda[:N] | vulkan[:N] (default cpu)
  --json FILE    write the records to FILE as JSON
  --quick        fewer sizes and runs: roofline to 16 MiB, gemm to 1024 (a few seconds)
  --python EXE   the Python that times numpy's gemm (default python3)
  --no-numpy     leave numpy out
  --matrixmultiply-child
                 (internal) time matrixmultiply::sgemm alone and print JSON lines
  -h, --help     this text";

/// The roofline's array sizes in bytes; `--quick` takes the first three.
const ROOF_SIZES: [usize; 4] = [64 << 10, 1 << 20, 16 << 20, 64 << 20];
/// Elements per row of the softmax.
const ROW: usize = 1024;
/// The gemm sizes; `--quick` takes the first three.
const GEMM_SIZES: [usize; 4] = [256, 512, 1024, 2048];
/// Largest tolerated `max |x - ref| / max |ref|` of a gemm result.
const GEMM_TOL: f64 = 1e-3;

struct Args {
    device: DeviceSpec,
    json: Option<String>,
    quick: bool,
    python: String,
    numpy: bool,
    mm_child: bool,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cpu,
        json: None,
        quick: false,
        python: "python3".to_owned(),
        numpy: true,
        mm_child: false,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("device") => args.device = cli.device("--device", ANY_DEVICE, |_| true)?,
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("quick") => args.quick = true,
            Long("python") => args.python = cli.string("--python")?,
            Long("no-numpy") => args.numpy = false,
            Long("matrixmultiply-child") => args.mm_child = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// One measurement, as written to the JSON report (`bench` tells the kinds apart).
#[derive(Serialize)]
#[serde(tag = "bench", rename_all = "lowercase")]
enum Record {
    /// A built-in op on arrays of `bytes`, against memcpy of `bytes`.
    Roofline {
        backend: &'static str,
        op: &'static str,
        bytes: usize,
        bytes_moved: usize,
        seconds: f64,
        /// `bytes_moved / seconds`, in GB/s.
        gbps: f64,
        memcpy_seconds: f64,
        /// memcpy's copy rate, `bytes / memcpy_seconds`, in GB/s.
        memcpy_gbps: f64,
        /// `(bytes_moved / seconds) / (2 bytes / memcpy_seconds)`.
        ratio_vs_memcpy: f64,
    },
    /// One gemm implementation at one size.
    Gemm {
        /// A stable name: `ours`, `matrixmultiply`, `matrixmultiply_threading`,
        /// `gemm_rayon`, `gemm_none`, `numpy`.
        key: &'static str,
        implementation: String,
        device: String,
        /// Threads it ran on, where known (`null` for a GPU).
        threads: Option<usize>,
        n: usize,
        runs: usize,
        seconds: f64,
        gflops: f64,
        /// `gflops / numpy's gflops` at this size (`null` without numpy).
        ratio_vs_numpy: f64,
        /// `max |x - ref| / max |ref|` against the reference (see `checked_against`).
        max_rel_err: f64,
        checked_against: &'static str,
    },
    /// What numpy's BLAS was, or why numpy was not measured.
    Numpy {
        available: bool,
        reason: Option<String>,
        info: Value,
    },
}

/// A gemm measurement before it becomes a [`Record`].
struct GemmRow {
    key: &'static str,
    label: String,
    device: String,
    threads: Option<usize>,
    results: Vec<GemmResult>,
}

#[derive(Clone, Copy)]
struct GemmResult {
    n: usize,
    runs: usize,
    seconds: f64,
    max_rel_err: f64,
    checked_against: &'static str,
}

impl GemmResult {
    fn gflops(&self) -> f64 {
        2.0 * (self.n as f64).powi(3) / self.seconds / 1e9
    }
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("ops_bench", run())
}

fn run() -> Res {
    let args = cli::parse_or_exit("ops_bench", USAGE, parse_args);
    if args.mm_child {
        return matrixmultiply_child(args.quick);
    }
    let ctx = match Context::new(args.device) {
        Ok(ctx) => ctx,
        // A GPU that is not there is a skip, as the tests report it, not a failure.
        Err(e @ gpukit::Error::Unavailable { .. }) if args.device != DeviceSpec::Cpu => {
            println!("SKIPPED: ops_bench on {}: {e}", args.device);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "ops_bench: {} backend, device {} ({}){}",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name,
        if args.quick { ", --quick" } else { "" }
    );
    let mut records = Vec::new();
    roofline(&ctx, &args, &mut records)?;
    gemm_section(&ctx, &args, &mut records)?;
    if let Some(path) = &args.json {
        write_json(path, &records)?;
        println!("wrote {} records to {path}", records.len());
    }
    ctx.close()?;
    Ok(())
}

/// `len` values in [-1, 1) from a xorshift generator seeded with `seed`: the same on every
/// run and in every process.
fn input(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Up to 8 indices spread over `0..len`, first and last included.
fn sample_indices(len: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..8).map(|i| i * (len - 1) / 7).collect();
    idx.dedup();
    idx
}

/// Whether `got` is within `rel` of `want`, relative to `max(|want|, 1e-30)`.
fn close(got: f32, want: f64, rel: f64) -> bool {
    (f64::from(got) - want).abs() <= rel * want.abs().max(1e-30)
}

/// The built-in ops of the roofline, with the arrays each moves (besides its small output).
const OPS: [(&str, usize); 7] = [
    ("add", 3),
    ("mul_scalar_inplace", 2),
    ("relu", 2),
    ("exp", 2),
    ("sum_into", 1),
    ("row_sum", 1),
    ("softmax", 2),
];

fn roofline(ctx: &Context, args: &Args, records: &mut Vec<Record>) -> Res {
    let sizes = if args.quick {
        &ROOF_SIZES[..3]
    } else {
        &ROOF_SIZES[..]
    };
    // Per size: many runs where one is short, fewer where it is long.
    let runs_for = |bytes: usize| match (args.quick, bytes >= 16 << 20) {
        (false, false) => 21,
        (false, true) => 11,
        (true, false) => 9,
        (true, true) => 5,
    };
    println!(
        "\nroofline: bytes each op must read and write per second, as a fraction of memcpy's \
         (1.00 = memcpy speed); medians of {} runs ({} from 16 MiB)",
        runs_for(0),
        runs_for(16 << 20)
    );
    print!("{:>10} {:>12}", "size", "memcpy GB/s");
    for (op, _) in OPS {
        print!(" {op:>18}");
    }
    println!();
    for &bytes in sizes {
        let n = bytes / 4;
        let runs = runs_for(bytes);
        let xa = input(n, 1);
        let xb = input(n, 2);

        // Baseline: memcpy between two touched host buffers, before and after the ops.
        let mut dst = vec![0.0f32; n];
        let mut memcpy = |samples_out: &mut Vec<f64>| {
            let Ok(s) = samples::<std::convert::Infallible>(runs, || {
                let src = std::hint::black_box(&xa);
                // SAFETY: both buffers hold `n` f32s and are distinct allocations.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), n) };
                std::hint::black_box(&mut dst);
                Ok(())
            });
            samples_out.extend(s);
        };
        let mut memcpy_samples = Vec::new();
        memcpy(&mut memcpy_samples);

        let a = ctx.alloc_upload(&xa)?;
        let b = ctx.alloc_upload(&xb)?;
        let mut c = ctx.alloc_zeros::<f32>(n)?;
        let mut x = ctx.alloc_upload(&xa)?;
        let mut one = ctx.alloc_zeros::<f32>(1)?;
        let shape = Shape::new(n / ROW, ROW);
        let mut sums = ctx.alloc_zeros::<f32>(n / ROW)?;
        let idx = sample_indices(n);
        let mut times = Vec::new();
        for (op, _) in OPS {
            let mut calls = 0usize;
            let t = median_or_nan(samples(runs, || -> gpukit::Result<()> {
                match op {
                    "add" => ctx.add(&a, &b, &mut c)?,
                    "mul_scalar_inplace" => {
                        calls += 1;
                        ctx.mul_scalar_inplace(&mut x, -1.0f32)?
                    }
                    "relu" => ctx.relu(&a, &mut c)?,
                    "exp" => ctx.exp(&a, &mut c)?,
                    "sum_into" => ctx.sum_into(&a, &mut one)?,
                    "row_sum" => ctx.row_sum(shape, &a, &mut sums)?,
                    _ => ctx.softmax(shape, &a, &mut c)?,
                }
                ctx.sync()
            })?);
            let outs = Outputs {
                c: &c,
                x: &x,
                one: &one,
                sums: &sums,
            };
            check_op(op, &xa, &xb, &outs, calls, &idx)?;
            times.push(t);
        }
        memcpy(&mut memcpy_samples);
        let t_memcpy = median_or_nan(memcpy_samples);

        print!(
            "{:>10} {:>12.2}",
            fmt_bytes(bytes),
            bytes as f64 / t_memcpy / 1e9
        );
        for ((op, arrays), t) in OPS.iter().zip(&times) {
            let moved = arrays * bytes
                + match *op {
                    "sum_into" => 4,
                    "row_sum" => bytes / ROW,
                    _ => 0,
                };
            let ratio = (moved as f64 / t) / (2.0 * bytes as f64 / t_memcpy);
            print!(" {ratio:>18.2}");
            records.push(Record::Roofline {
                backend: ctx.backend_name(),
                op,
                bytes,
                bytes_moved: moved,
                seconds: *t,
                gbps: moved as f64 / t / 1e9,
                memcpy_seconds: t_memcpy,
                memcpy_gbps: bytes as f64 / t_memcpy / 1e9,
                ratio_vs_memcpy: ratio,
            });
        }
        println!();
    }
    Ok(())
}

/// The arrays the roofline's ops write.
struct Outputs<'a> {
    /// The output of `add`, `relu`, `exp` and `softmax`.
    c: &'a gpukit::GpuArray<f32>,
    /// `mul_scalar_inplace`'s array, negated once per call.
    x: &'a gpukit::GpuArray<f32>,
    /// `sum_into`'s one element.
    one: &'a gpukit::GpuArray<f32>,
    /// `row_sum`'s sum per row.
    sums: &'a gpukit::GpuArray<f32>,
}

/// Checks the result of the last run of `op` at the sampled indices `idx` against the host.
fn check_op(
    op: &str,
    xa: &[f32],
    xb: &[f32],
    out: &Outputs<'_>,
    calls: usize,
    idx: &[usize],
) -> Res {
    let Outputs { c, x, one, sums } = *out;
    let wrong = |what: String| -> Res { Err(format!("{op} gave a wrong result: {what}").into()) };
    match op {
        "sum_into" => {
            let got = one.download()?[0];
            let want: f64 = xa.iter().map(|&v| f64::from(v)).sum();
            // The sum accumulates in f64 and is rounded once; allow for f32's rounding of
            // a value near zero.
            if (f64::from(got) - want).abs() > 1e-6 * xa.len() as f64 {
                return wrong(format!("sum {got}, expected {want}"));
            }
        }
        "row_sum" => {
            let got = sums.download()?;
            let rows = xa.len() / ROW;
            for r in [0, rows / 2, rows - 1] {
                let want: f64 = xa[r * ROW..(r + 1) * ROW]
                    .iter()
                    .map(|&v| f64::from(v))
                    .sum();
                if (f64::from(got[r]) - want).abs() > 1e-6 * ROW as f64 {
                    return wrong(format!("row {r}: sum {}, expected {want}", got[r]));
                }
            }
        }
        "mul_scalar_inplace" => {
            let got = x.download()?;
            let sign = if calls.is_multiple_of(2) { 1.0 } else { -1.0 };
            for &i in idx {
                if got[i] != xa[i] * sign {
                    return wrong(format!("x[{i}] = {}, expected {}", got[i], xa[i] * sign));
                }
            }
        }
        "softmax" => {
            let got = c.download()?;
            let rows = xa.len() / ROW;
            for r in [0, rows / 2, rows - 1] {
                let row = &xa[r * ROW..(r + 1) * ROW];
                let m = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
                let s: f64 = row.iter().map(|&v| (f64::from(v) - m).exp()).sum();
                for j in [0, ROW / 2, ROW - 1] {
                    let want = (f64::from(row[j]) - m).exp() / s;
                    if !close(got[r * ROW + j], want, 1e-5) {
                        return wrong(format!("row {r} col {j}: {}", got[r * ROW + j]));
                    }
                }
            }
        }
        _ => {
            let got = c.download()?;
            for &i in idx {
                let (a, b) = (xa[i], xb[i]);
                let (want, rel) = match op {
                    "add" => (f64::from(a + b), 0.0),
                    "relu" => (f64::from(a.max(0.0)), 0.0),
                    _ => (f64::from(a).exp(), 1e-6),
                };
                if !close(got[i], want, rel) {
                    return wrong(format!("[{i}] = {}, expected {want}", got[i]));
                }
            }
        }
    }
    Ok(())
}

/// Runs per gemm size.
fn gemm_runs(n: usize, quick: bool) -> usize {
    match (n, quick) {
        (..=256, false) => 31,
        (..=512, false) => 15,
        (..=1024, false) => 9,
        (_, false) => 5,
        (..=256, true) => 15,
        (..=512, true) => 9,
        (_, true) => 5,
    }
}

fn gemm_sizes(quick: bool) -> &'static [usize] {
    if quick {
        &GEMM_SIZES[..3]
    } else {
        &GEMM_SIZES[..]
    }
}

/// Whether a gemm's relative error is within [`GEMM_TOL`] (a NaN is not).
fn within_tol(err: f64) -> bool {
    err <= GEMM_TOL
}

/// One size's inputs and the CPU backend's product of them.
struct GemmInput {
    n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    reference: Vec<f32>,
}

/// `max |x - ref| / max |ref|`.
fn rel_err(x: &[f32], reference: &[f32]) -> f64 {
    let scale = reference
        .iter()
        .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    let err = x.iter().zip(reference).fold(0.0f64, |m, (&a, &b)| {
        m.max((f64::from(a) - f64::from(b)).abs())
    });
    if x.len() != reference.len() {
        return f64::INFINITY;
    }
    err / scale.max(f64::MIN_POSITIVE)
}

/// `max |c - exact| / max |exact|` over 64 sampled entries of the `n x n` product `c = a b`,
/// the exact values from f64 dot products.
fn sampled_rel_err(a: &[f32], b: &[f32], c: &[f32], n: usize) -> f64 {
    let (mut err, mut scale) = (0.0f64, 0.0f64);
    for t in 0..64usize {
        let i = (t * 7919 + 13) % n;
        let j = (t * 104_729 + 31) % n;
        let exact: f64 = (0..n)
            .map(|k| f64::from(a[i * n + k]) * f64::from(b[k * n + j]))
            .sum();
        err = err.max((f64::from(c[i * n + j]) - exact).abs());
        scale = scale.max(exact.abs());
    }
    err / scale.max(f64::MIN_POSITIVE)
}

/// `c = a b` for `n x n` row-major matrices through `matrixmultiply::sgemm`.
fn mm_sgemm(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let ld = n as isize;
    // SAFETY: the three slices hold n*n f32s (checked above), row-major with row stride n
    // and column stride 1, so every index sgemm forms is inside them; `c` is exclusive.
    unsafe {
        matrixmultiply::sgemm(
            n,
            n,
            n,
            1.0,
            a.as_ptr(),
            ld,
            1,
            b.as_ptr(),
            ld,
            1,
            0.0,
            c.as_mut_ptr(),
            ld,
            1,
        );
    }
}

/// `c = a b` for `n x n` row-major matrices through the `gemm` crate.
fn gemm_crate(n: usize, a: &[f32], b: &[f32], c: &mut [f32], par: gemm::Parallelism) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let ld = n as isize;
    // SAFETY: the three slices hold n*n f32s (checked above), row-major (row stride n,
    // column stride 1), so every index gemm forms is inside them; `c` is exclusive and not
    // read (`read_dst` false): c = 1 * a b.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            c.as_mut_ptr(),
            1,
            ld,
            false,
            a.as_ptr(),
            1,
            ld,
            b.as_ptr(),
            1,
            ld,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// The threads of rayon's global pool: `RAYON_NUM_THREADS`, else one per logical core.
fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The threads of matrixmultiply's pool: 1 without the `threading` feature, else
/// `MATMUL_NUM_THREADS` or one per physical core (as matrixmultiply chooses).
fn matrixmultiply_threads() -> usize {
    #[cfg(feature = "matrixmultiply-threading")]
    {
        std::env::var("MATMUL_NUM_THREADS")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| v.parse::<usize>().unwrap_or(1))
            .unwrap_or_else(num_cpus::get_physical)
            .clamp(1, 4)
    }
    #[cfg(not(feature = "matrixmultiply-threading"))]
    {
        1
    }
}

fn gemm_section(ctx: &Context, args: &Args, records: &mut Vec<Record>) -> Res {
    let sizes = gemm_sizes(args.quick);
    let threaded_mm = cfg!(feature = "matrixmultiply-threading");
    let mm_threads = matrixmultiply_threads();
    println!(
        "\ngemm: square f32, C = A B, GFLOP/s = 2 n^3 / median seconds (runs: {})",
        sizes
            .iter()
            .map(|&n| format!("{} at {n}", gemm_runs(n, args.quick)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The reference: the CPU backend, whatever device is measured.
    let cpu_owned;
    let cpu: &Context = if ctx.backend_name() == "cpu" {
        ctx
    } else {
        cpu_owned = Context::new(DeviceSpec::Cpu)?;
        &cpu_owned
    };
    let ours_label = if ctx.backend_name() == "cpu" {
        if threaded_mm {
            format!("ours (cpu: matrixmultiply threading, {mm_threads} threads)")
        } else {
            "ours (cpu: matrixmultiply)".to_owned()
        }
    } else {
        format!("ours ({}: {})", ctx.backend_name(), ctx.info().name)
    };
    let mut rows = vec![
        GemmRow {
            key: "ours",
            label: ours_label,
            device: ctx.backend_name().to_owned(),
            threads: (ctx.backend_name() == "cpu").then_some(mm_threads),
            results: Vec::new(),
        },
        GemmRow {
            key: if threaded_mm {
                "matrixmultiply_threading"
            } else {
                "matrixmultiply"
            },
            label: if threaded_mm {
                format!("matrixmultiply::sgemm, threading ({mm_threads} threads)")
            } else {
                "matrixmultiply::sgemm (1 thread)".to_owned()
            },
            device: "host".to_owned(),
            threads: Some(mm_threads),
            results: Vec::new(),
        },
        GemmRow {
            key: "gemm_rayon",
            label: format!("gemm crate, Rayon(0) ({} threads)", rayon_threads()),
            device: "host".to_owned(),
            threads: Some(rayon_threads()),
            results: Vec::new(),
        },
        GemmRow {
            key: "gemm_none",
            label: "gemm crate, Parallelism::None".to_owned(),
            device: "host".to_owned(),
            threads: Some(1),
            results: Vec::new(),
        },
    ];
    let mut inputs = Vec::new();
    for &n in sizes {
        let runs = gemm_runs(n, args.quick);
        let (ha, hb) = (input(n * n, 10 + n as u64), input(n * n, 20 + n as u64));

        // The CPU backend's product: the reference, itself checked against f64.
        let (ca, cb) = (cpu.alloc_upload(&ha)?, cpu.alloc_upload(&hb)?);
        let mut cc = cpu.alloc_zeros::<f32>(n * n)?;
        cpu.gemm(Gemm::new(n, n, n), &ca, &cb, &mut cc)?;
        cpu.sync()?;
        let reference = cc.download()?;
        drop((ca, cb, cc));
        let ref_err = sampled_rel_err(&ha, &hb, &reference, n);
        if !within_tol(ref_err) {
            return Err(format!(
                "the CPU backend's gemm at n = {n} is off by {ref_err:.2e} from f64 dot products"
            )
            .into());
        }

        let check = |what: &str, got: &[f32]| -> Res<f64> {
            let err = rel_err(got, &reference);
            if !within_tol(err) {
                return Err(format!("{what} at n = {n}: relative error {err:.2e} > {GEMM_TOL:.0e} against the CPU backend").into());
            }
            Ok(err)
        };

        // Ours on the device measured.
        let (da, db) = (ctx.alloc_upload(&ha)?, ctx.alloc_upload(&hb)?);
        let mut dc = ctx.alloc_zeros::<f32>(n * n)?;
        let t = median_or_nan(samples(runs, || {
            ctx.gemm(Gemm::new(n, n, n), &da, &db, &mut dc)?;
            ctx.sync()
        })?);
        // On the CPU this is the reference's own computation: the check proves the timed
        // runs wrote the product; the reference itself was checked against f64 above.
        let err = check(&rows[0].label, &dc.download()?)?;
        drop((da, db, dc));
        rows[0].results.push(GemmResult {
            n,
            runs,
            seconds: t,
            max_rel_err: err,
            checked_against: "cpu backend",
        });

        let mut hc = vec![0.0f32; n * n];
        // Rows 1 to 3: matrixmultiply, then the gemm crate on rayon and on one thread.
        for (row, par) in [
            (1, None),
            (2, Some(gemm::Parallelism::Rayon(0))),
            (3, Some(gemm::Parallelism::None)),
        ] {
            hc.fill(0.0);
            let t = median_or_nan(samples::<std::convert::Infallible>(runs, || {
                let c = std::hint::black_box(&mut hc);
                match par {
                    None => mm_sgemm(n, &ha, &hb, c),
                    Some(par) => gemm_crate(n, &ha, &hb, c, par),
                }
                Ok(())
            })?);
            let err = check(&rows[row].label, &hc)?;
            rows[row].results.push(GemmResult {
                n,
                runs,
                seconds: t,
                max_rel_err: err,
                checked_against: "cpu backend",
            });
        }
        inputs.push(GemmInput {
            n,
            a: ha,
            b: hb,
            reference,
        });
    }

    if threaded_mm {
        match matrixmultiply_single_in_child(args.quick) {
            Ok(results) => rows.insert(
                2,
                GemmRow {
                    key: "matrixmultiply",
                    label: "matrixmultiply::sgemm (1 thread, child)".to_owned(),
                    device: "host".to_owned(),
                    threads: Some(1),
                    results,
                },
            ),
            Err(e) => println!("matrixmultiply, 1 thread: not measured ({e})"),
        }
    } else {
        println!(
            "matrixmultiply threading: not measured in this build (built without the default \
             `matrixmultiply-threading` feature)"
        );
    }

    if args.numpy {
        match numpy_gemm(&args.python, &inputs, args.quick) {
            Ok((info, row)) => {
                println!("numpy: {}", describe_blas(&info));
                records.push(Record::Numpy {
                    available: true,
                    reason: None,
                    info,
                });
                rows.push(row);
            }
            Err(NumpyError::Unavailable(reason)) => {
                println!("numpy: not available ({reason})");
                records.push(Record::Numpy {
                    available: false,
                    reason: Some(reason),
                    info: Value::Null,
                });
            }
            Err(NumpyError::Failed(e)) => return Err(e),
        }
    } else {
        println!("numpy: not measured (--no-numpy)");
    }

    print_gemm_table(sizes, &rows);
    let numpy = rows.iter().find(|r| r.key == "numpy");
    for row in &rows {
        for r in &row.results {
            let vs_numpy = numpy
                .and_then(|np| np.results.iter().find(|x| x.n == r.n))
                .map_or(f64::NAN, |np| r.gflops() / np.gflops());
            records.push(Record::Gemm {
                key: row.key,
                implementation: row.label.clone(),
                device: row.device.clone(),
                threads: row.threads,
                n: r.n,
                runs: r.runs,
                seconds: r.seconds,
                gflops: r.gflops(),
                ratio_vs_numpy: vs_numpy,
                max_rel_err: r.max_rel_err,
                checked_against: r.checked_against,
            });
        }
    }
    print_fastest(sizes, &rows);
    Ok(())
}

fn print_gemm_table(sizes: &[usize], rows: &[GemmRow]) {
    let width = rows
        .iter()
        .map(|r| r.label.len())
        .max()
        .unwrap_or(0)
        .max(14);
    print!("{:<width$}", "GFLOP/s");
    for n in sizes {
        print!(" {n:>8}");
    }
    println!();
    for row in rows {
        print!("{:<width$}", row.label);
        for &n in sizes {
            match row.results.iter().find(|r| r.n == n) {
                Some(r) => print!(" {:>8.1}", r.gflops()),
                None => print!(" {:>8}", "-"),
            }
        }
        println!();
    }
    if let (Some(ours), Some(np)) = (
        rows.iter().find(|r| r.key == "ours"),
        rows.iter().find(|r| r.key == "numpy"),
    ) {
        print!("{:<width$}", "ours / numpy");
        for &n in sizes {
            let o = ours.results.iter().find(|r| r.n == n);
            let p = np.results.iter().find(|r| r.n == n);
            match (o, p) {
                (Some(o), Some(p)) => print!(" {:>7.2}x", o.gflops() / p.gflops()),
                _ => print!(" {:>8}", "-"),
            }
        }
        println!();
    }
}

/// Per size, the fastest implementation on one thread and on several.
fn print_fastest(sizes: &[usize], rows: &[GemmRow]) {
    println!("fastest per size among the host implementations (ours left out):");
    for &n in sizes {
        let best = |single: bool| {
            rows.iter()
                .filter(|r| r.key != "ours" && r.threads.is_some_and(|t| (t == 1) == single))
                .filter_map(|r| r.results.iter().find(|x| x.n == n).map(|x| (r, x.gflops())))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map_or("-".to_owned(), |(r, g)| format!("{} {g:.1}", r.label))
        };
        println!(
            "  n = {n:>4}: 1 thread: {:<45} several: {}",
            best(true),
            best(false)
        );
    }
}

/// Child mode (`--matrixmultiply-child`): times `matrixmultiply::sgemm` at every gemm size
/// on the same inputs as the parent, checks each at sampled entries, and prints one JSON
/// line per size.
fn matrixmultiply_child(quick: bool) -> Res {
    for &n in gemm_sizes(quick) {
        let runs = gemm_runs(n, quick);
        let (ha, hb) = (input(n * n, 10 + n as u64), input(n * n, 20 + n as u64));
        let mut hc = vec![0.0f32; n * n];
        let t = median_or_nan(samples::<std::convert::Infallible>(runs, || {
            mm_sgemm(n, &ha, &hb, std::hint::black_box(&mut hc));
            Ok(())
        })?);
        let err = sampled_rel_err(&ha, &hb, &hc, n);
        println!(
            "{}",
            serde_json::json!({"n": n, "runs": runs, "seconds": t, "max_rel_err": err})
        );
    }
    Ok(())
}

/// Runs this program again as `--matrixmultiply-child` with `MATMUL_NUM_THREADS=1`.
fn matrixmultiply_single_in_child(quick: bool) -> Res<Vec<GemmResult>> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("--matrixmultiply-child")
        .env("MATMUL_NUM_THREADS", "1")
        .stdin(Stdio::null());
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "the child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let mut results = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line)?;
        let num = |k: &str| {
            v[k].as_f64()
                .ok_or(format!("child's line lacks {k}: {line}"))
        };
        let err = num("max_rel_err")?;
        if !within_tol(err) {
            return Err(format!("matrixmultiply (1 thread) relative error {err:.2e}").into());
        }
        results.push(GemmResult {
            n: num("n")? as usize,
            runs: num("runs")? as usize,
            seconds: num("seconds")?,
            max_rel_err: err,
            checked_against: "f64 (sampled)",
        });
    }
    Ok(results)
}

/// Why numpy's row is missing: numpy cannot be used here (a skip), or it ran and failed.
enum NumpyError {
    Unavailable(String),
    Failed(Box<dyn std::error::Error>),
}

/// The Python side: `probe` imports numpy and reports its BLAS; `time DIR N:RUNS,...` also
/// times `a @ b` on `DIR/a{N}.f32` and `DIR/b{N}.f32` (little-endian f32, row-major) and
/// writes the product to `DIR/c{N}.f32`. One JSON object on the last line of stdout.
const NUMPY_SCRIPT: &str = r#"
import json, os, sys, time

def openblas_runtime(path):
    import ctypes
    out = {"library": path}
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        out["error"] = str(e)
        return out
    for what, restype in (("corename", ctypes.c_char_p), ("config", ctypes.c_char_p),
                          ("num_threads", ctypes.c_int), ("parallel", ctypes.c_int)):
        for name in ("openblas_get_" + what, "openblas_get_" + what + "64_",
                     "scipy_openblas_get_" + what, "scipy_openblas_get_" + what + "64_"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = []
                v = fn()
                out[what] = v.decode() if isinstance(v, bytes) else v
                out[what + "_symbol"] = name
                break
    return out

def blas_info(np):
    info = {"numpy": np.__version__, "python": sys.version.split()[0]}
    try:
        cfg = np.show_config(mode="dicts")
    except TypeError:
        cfg = None
    if isinstance(cfg, dict):
        deps = cfg.get("Build Dependencies", {})
        for key in ("blas", "lapack"):
            if key in deps:
                info["build_" + key] = deps[key]
        if "SIMD Extensions" in cfg:
            info["simd_extensions"] = cfg["SIMD Extensions"]
    else:
        import contextlib, io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            np.show_config()
        info["config_lines"] = [l.strip() for l in buf.getvalue().splitlines()
                                if "blas" in l.lower()][:40]
    try:
        from threadpoolctl import threadpool_info
        info["threadpoolctl"] = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    except ImportError:
        info["threadpoolctl"] = "not installed"
    except Exception as e:
        info["threadpoolctl"] = "failed: %s" % e
    loaded = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    base = os.path.basename(parts[5]).lower()
                    if any(s in base for s in ("blas", "mkl", "blis")) and parts[5] not in loaded:
                        loaded.append(parts[5])
    except OSError:
        pass
    info["blas_libraries_loaded"] = loaded
    for path in loaded:
        if "openblas" in os.path.basename(path).lower():
            info["openblas"] = openblas_runtime(path)
            break
    info["env"] = {k: v for k, v in os.environ.items()
                   if k.startswith(("OPENBLAS", "OMP_", "MKL_", "GOTO"))}
    return info

def timing(np, folder, pairs):
    out = []
    for n, runs in pairs:
        a = np.fromfile(os.path.join(folder, "a%d.f32" % n), dtype="<f4").reshape(n, n)
        b = np.fromfile(os.path.join(folder, "b%d.f32" % n), dtype="<f4").reshape(n, n)
        c = a @ b
        c = a @ b
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            c = a @ b
            ts.append(time.perf_counter() - t)
        c.astype("<f4").tofile(os.path.join(folder, "c%d.f32" % n))
        ts.sort()
        m = len(ts)
        med = ts[m // 2] if m % 2 else (ts[m // 2 - 1] + ts[m // 2]) / 2
        out.append({"n": n, "runs": runs, "seconds": med, "dtype": str(c.dtype)})
    return out

def main():
    try:
        import numpy as np
    except Exception as e:
        print(json.dumps({"ok": False, "reason": "%s: %s" % (type(e).__name__, e)}))
        return
    result = {"ok": True, "info": blas_info(np)}
    if sys.argv[1] == "time":
        pairs = [tuple(int(x) for x in p.split(":")) for p in sys.argv[3].split(",")]
        result["results"] = timing(np, sys.argv[2], pairs)
    print(json.dumps(result, default=str))

main()
"#;

/// A folder removed, with what is in it, when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the Python side with `args`; its JSON answer.
fn python(python: &str, args: &[&str]) -> Result<Value, NumpyError> {
    let out = Command::new(python)
        .arg("-c")
        .arg(NUMPY_SCRIPT)
        .args(args)
        // What OpenBLAS picks for this machine by itself, not a core type forced on it.
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| NumpyError::Unavailable(format!("cannot run {python}: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    let answer = serde_json::from_str::<Value>(last).ok();
    match answer {
        Some(v) if out.status.success() => {
            if v["ok"].as_bool() == Some(true) {
                Ok(v)
            } else {
                Err(NumpyError::Unavailable(
                    v["reason"]
                        .as_str()
                        .unwrap_or("numpy did not import")
                        .to_owned(),
                ))
            }
        }
        _ => {
            let why = format!(
                "{python} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Err(if args.first() == Some(&"probe") {
                NumpyError::Unavailable(why)
            } else {
                NumpyError::Failed(why.into())
            })
        }
    }
}

/// Times numpy's `a @ b` on `inputs` and checks its products against the CPU backend's;
/// numpy's BLAS description and its row.
fn numpy_gemm(
    python_exe: &str,
    inputs: &[GemmInput],
    quick: bool,
) -> Result<(Value, GemmRow), NumpyError> {
    python(python_exe, &["probe"])?;
    let failed = |e: String| NumpyError::Failed(e.into());
    let dir = TempDir(std::env::temp_dir().join(format!("ops_bench_{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| failed(format!("{}: {e}", dir.0.display())))?;
    let write = |path: &Path, v: &[f32]| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| failed(format!("{}: {e}", path.display())))
    };
    let mut pairs = Vec::new();
    for input in inputs {
        let n = input.n;
        write(&dir.0.join(format!("a{n}.f32")), &input.a)?;
        write(&dir.0.join(format!("b{n}.f32")), &input.b)?;
        pairs.push(format!("{n}:{}", gemm_runs(n, quick)));
    }
    let folder = dir.0.to_string_lossy().into_owned();
    let answer = python(python_exe, &["time", &folder, &pairs.join(",")])?;
    let info = answer["info"].clone();
    let threads = info["openblas"]["num_threads"]
        .as_u64()
        .map(|t| t as usize)
        .or_else(|| {
            info["threadpoolctl"]
                .get(0)
                .and_then(|p| p["num_threads"].as_u64())
                .map(|t| t as usize)
        });
    let mut results = Vec::new();
    for GemmInput { n, reference, .. } in inputs {
        let r = answer["results"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["n"].as_u64() == Some(*n as u64)))
            .ok_or_else(|| failed(format!("numpy gave no result for n = {n}")))?;
        let path = dir.0.join(format!("c{n}.f32"));
        let bytes = std::fs::read(&path).map_err(|e| failed(format!("{}: {e}", path.display())))?;
        let c: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let err = rel_err(&c, reference);
        if !within_tol(err) {
            return Err(failed(format!(
                "numpy's product at n = {n}: relative error {err:.2e} > {GEMM_TOL:.0e} against the CPU backend"
            )));
        }
        results.push(GemmResult {
            n: *n,
            runs: r["runs"].as_u64().unwrap_or(0) as usize,
            seconds: r["seconds"].as_f64().unwrap_or(f64::NAN),
            max_rel_err: err,
            checked_against: "cpu backend",
        });
    }
    let label = format!(
        "numpy a @ b ({}{})",
        blas_name(&info),
        threads.map_or(String::new(), |t| format!(", {t} threads"))
    );
    Ok((
        info,
        GemmRow {
            key: "numpy",
            label,
            device: "host".to_owned(),
            threads,
            results,
        },
    ))
}

/// The BLAS library's name (and OpenBLAS's core) from the child's report.
fn blas_name(info: &Value) -> String {
    let name = info["build_blas"]["name"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            info["blas_libraries_loaded"]
                .get(0)
                .and_then(Value::as_str)
                .map(|p| {
                    Path::new(p)
                        .file_name()
                        .map_or(p.to_owned(), |f| f.to_string_lossy().into_owned())
                })
        })
        .unwrap_or_else(|| "BLAS unknown".to_owned());
    match info["openblas"]["corename"].as_str() {
        Some(core) => format!("{name}, core {core}"),
        None => name,
    }
}

/// One line on numpy's BLAS for the console.
fn describe_blas(info: &Value) -> String {
    let mut parts = vec![format!("numpy {}", info["numpy"].as_str().unwrap_or("?"))];
    if let Some(b) = info["build_blas"].as_object() {
        let get = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("?");
        parts.push(format!(
            "built with {} {} ({})",
            get("name"),
            get("version"),
            b.get("openblas configuration")
                .and_then(Value::as_str)
                .unwrap_or("no configuration string")
        ));
    } else if let Some(lines) = info["config_lines"].as_array() {
        let lines: Vec<&str> = lines.iter().filter_map(Value::as_str).take(4).collect();
        parts.push(format!("config: {}", lines.join("; ")));
    }
    let ob = &info["openblas"];
    if ob.is_object() {
        parts.push(format!(
            "OpenBLAS at run time: core {}, {} threads, config {:?}",
            ob["corename"].as_str().unwrap_or("?"),
            ob["num_threads"]
                .as_i64()
                .map_or("?".to_owned(), |t| t.to_string()),
            ob["config"].as_str().unwrap_or("?")
        ));
    } else if let Some(libs) = info["blas_libraries_loaded"].as_array() {
        let libs: Vec<&str> = libs.iter().filter_map(Value::as_str).collect();
        parts.push(format!("BLAS libraries loaded: {}", libs.join(", ")));
    }
    if let Some(t) = info["threadpoolctl"].as_array() {
        for p in t {
            parts.push(format!(
                "threadpoolctl: {} {} {} threads, architecture {}",
                p["internal_api"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?"),
                p["num_threads"]
                    .as_u64()
                    .map_or("?".to_owned(), |t| t.to_string()),
                p["architecture"].as_str().unwrap_or("?")
            ));
        }
    }
    parts.join("; ")
}
