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
//! **Side by side.** The same ops on the same sizes through numpy (ufuncs into preallocated
//! outputs, `out=`; one thread, as numpy's ufuncs have none) and, where `import torch` works
//! in the same `python3` child, PyTorch's CPU backend (`out=` and in-place forms; its
//! softmax has none) with `torch.set_num_threads` set to this machine's threads, medians of
//! as many runs as ours after a warm-up: each roofline record carries `numpy_seconds`,
//! `torch_seconds`, `time_ratio_vs_numpy` and `time_ratio_vs_torch` (our time over theirs:
//! below 1.0 we are faster) and `time_ratio_vs_fastest`, whose target is at most 1.0.
//! Without numpy (or with `--no-numpy`) the ratios are `null` and the program says why;
//! without PyTorch, its column says why. Neither is installed by the program.
//!
//! **Math.** The f32 math ops the CPU backend runs through vectorised code (`exp`, `log`,
//! `log1p`, `tanh`, `sigmoid`, `silu`, `gelu`, `softplus`, `pow` to the scalar power 1.5,
//! `log_softmax` and `cross_entropy` over rows of 1024), at 64 KiB, 1 MiB and 16 MiB
//! (`--quick`: to 1 MiB), on x in [-4, 4) (`log`, `log1p`, `pow`: on `|x| + 1/64`): our
//! nanoseconds per element, each result checked at sampled elements against f64; at 64 KiB,
//! where our op runs on one thread, the same work through the op table's scalar body
//! (`UnaryOp::map_float`, `softmax_rows`, ...: what the CPU backend ran before) on one
//! thread, as `speedup_vs_table`; and side by side with numpy (its ufunc where it has one,
//! else the ops as numpy programs write them: `1 / (1 + exp(-x))`, the tanh GELU, ...) and
//! PyTorch (`torch.sigmoid`, `F.silu`, `F.gelu(approximate="tanh")`, `F.softplus`,
//! `torch.log_softmax`, `F.cross_entropy(reduction="none")`, ...), as for the roofline.
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
//!   numpy the program prints `numpy: not available (<reason>)` and leaves those rows out;
//! - where `import torch` works in the same child, PyTorch's `torch.mm(a, b, out=c)` on the
//!   machine's threads (`torch: not available (<reason>)` otherwise).
//!
//! Each record carries `time_ratio_vs_numpy`, `time_ratio_vs_torch` and
//! `time_ratio_vs_fastest` (its time over theirs; the target for ours is at most 1.0 from
//! n = 512) besides GFLOP/s.
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

mod math;
mod matmul;
mod numpy;
mod roofline;

use matmul::{gemm_section, matrixmultiply_child};
use roofline::roofline;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: ops_bench [options]

  --device SPEC  the device to measure: auto | cpu | cuda[:N] | vulkan[:N] (default cpu)
  --json FILE    write the records to FILE as JSON
  --quick        fewer sizes and runs: roofline to 16 MiB, math to 1 MiB, gemm to 1024
  --python EXE   the Python that times numpy (and PyTorch, where it imports) (default python3)
  --no-numpy     leave numpy and PyTorch out
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

impl Args {
    /// `all`, or with `--quick` its first `quick` sizes.
    fn sizes<'a>(&self, all: &'a [usize], quick: usize) -> &'a [usize] {
        if self.quick {
            &all[..quick]
        } else {
            all
        }
    }

    /// Runs per size: many where one is short, fewer where it is long.
    fn runs_for(&self, bytes: usize) -> usize {
        match (self.quick, bytes >= 16 << 20) {
            (false, false) => 21,
            (false, true) => 11,
            (true, false) => 9,
            (true, true) => 5,
        }
    }
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cpu(None),
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
        /// The same op through numpy and PyTorch, where measured.
        #[serde(flatten)]
        foreign: Foreign,
    },
    /// A math op (`exp`, `log`, ..., `pow`, log-softmax, cross-entropy) on f32 arrays of
    /// `bytes`, against the op table's scalar body on one thread and numpy and PyTorch.
    Math {
        backend: &'static str,
        op: &'static str,
        bytes: usize,
        seconds: f64,
        /// `seconds` per element, in nanoseconds.
        ns_per_element: f64,
        /// The op table's scalar body (gpukit-core's reference, what the CPU backend ran
        /// before its vectorised math) on one thread, at the smallest size only (where our
        /// op runs on one thread too).
        table_seconds: Option<f64>,
        /// `table_seconds / seconds`.
        speedup_vs_table: Option<f64>,
        /// The same op through numpy and PyTorch, where measured.
        #[serde(flatten)]
        foreign: Foreign,
    },
    /// Which foreign libraries the roofline ran beside ours.
    Libraries {
        /// `numpy 2.x, 1 thread`, or why not.
        numpy: String,
        /// `torch 2.x, N threads`, or why not.
        torch: String,
    },
    /// One gemm implementation at one size.
    Gemm {
        /// A stable name: `ours`, `matrixmultiply`, `matrixmultiply_threading`,
        /// `gemm_rayon`, `gemm_none`, `numpy`, `torch`.
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
        /// numpy's and PyTorch's times at this size, and ours over theirs (time ratios:
        /// below 1.0 is faster; the target for ours is at most 1.0 from n = 512).
        #[serde(flatten)]
        foreign: Foreign,
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

/// An op's time through numpy and PyTorch, and ours over theirs.
#[derive(Serialize, Default)]
struct Foreign {
    /// The same op through numpy (one thread), where measured.
    numpy_seconds: Option<f64>,
    /// Through PyTorch's CPU backend (the machine's threads), where measured.
    torch_seconds: Option<f64>,
    /// `seconds / numpy_seconds`: below 1.0 we are faster.
    time_ratio_vs_numpy: Option<f64>,
    /// `seconds / torch_seconds`: below 1.0 we are faster.
    time_ratio_vs_torch: Option<f64>,
    /// `seconds` over the faster of numpy and PyTorch (the target: at most 1.0).
    time_ratio_vs_fastest: Option<f64>,
}

impl Foreign {
    /// Ours (`seconds`) against `numpy` and `torch`.
    fn new(seconds: f64, numpy: Option<f64>, torch: Option<f64>) -> Foreign {
        let fastest = match (numpy, torch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Foreign {
            numpy_seconds: numpy,
            torch_seconds: torch,
            time_ratio_vs_numpy: numpy.map(|t| seconds / t),
            time_ratio_vs_torch: torch.map(|t| seconds / t),
            time_ratio_vs_fastest: fastest.map(|t| seconds / t),
        }
    }
}

impl Record {
    /// A roofline or math record's op, size, time and foreign times.
    fn timed(&mut self) -> Option<(&'static str, usize, f64, &mut Foreign)> {
        match self {
            Record::Roofline {
                op,
                bytes,
                seconds,
                foreign,
                ..
            }
            | Record::Math {
                op,
                bytes,
                seconds,
                foreign,
                ..
            } => Some((*op, *bytes, *seconds, foreign)),
            _ => None,
        }
    }
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
        Err(e @ gpukit::Error::Unavailable { .. })
            if !matches!(args.device, DeviceSpec::Cpu(_)) =>
        {
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
    math::math(&ctx, &args, &mut records)?;
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
