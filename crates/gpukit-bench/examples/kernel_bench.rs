//! What `#[kernel]` costs, against hand-written kernels doing the same work in the same
//! process, on one device:
//!
//! - `gemm`: the CPU twin of `tiled_gemm` (shared tiles and barriers, split at its
//!   barriers, every access checked) against the same product written as a plain CPU
//!   closure (one thread per element of `c`, the dot product in a loop), `--n` square. On
//!   the CPU backend only (a closure runs nowhere else). Target: the twin within 2x.
//! - `saxpy`: the examples' `#[kernel]` saxpy (bounds-checked; its guard names both
//!   arrays, so every access is proven in bounds) against saxpy written by hand for the
//!   backend (a CPU closure, WGSL on Vulkan, CUDA C on CUDA) over `--len` elements;
//!   `saxpy_unchecked`: the same `#[kernel]` made `KernelSpec::unchecked` (its GPU code
//!   without checks; the CPU twin keeps them); `saxpy_one_guard`: saxpy guarding `y` alone,
//!   so that each read of `x` keeps its check, against itself made unchecked (the baseline
//!   column): what one check the code does not prove costs.
//! - `conv5x5`: the examples' 5 x 5 convolution (shared tile with a halo, shared weights)
//!   over a `--side` square image, bounds-checked, against the same kernel made
//!   `KernelSpec::unchecked` (the baseline column): what the checks the code does not prove
//!   cost. Target: at most 1.3x. On the CPU the twin checks either way.
//!
//! Every result is compared with the baseline's, bit for bit. Ratios are `#[kernel]` time
//! over the baseline's (below 1.0 is faster), medians of `--runs`.
//!
//! ```text
//! cargo run --release -p gpukit-bench --example kernel_bench -- [--device SPEC] [--n N] [--len N] [--side N] [--runs N] [--json FILE]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use gpukit::{Context, DeviceSpec, Error, In, KernelSpec, LaunchConfig, Out};
use gpukit_bench::write_json;
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};
use gpukit_examples::kernels::{conv5x5, conv_config, gemm_config, saxpy, tiled_gemm};
use gpukit_examples::median;
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: kernel_bench [options]

  --device SPEC  the device to measure: auto | cpu | cuda[:N] | vulkan[:N] (default cpu)
  --n N          the gemm's side, 16 to 2048 (default 256; CPU backend only)
  --len N        saxpy's elements, 1 to 67108864 (default 4194304)
  --side N       the convolution's image side, 16 to 8192 (default 1024)
  --runs N       runs, at least 5 (default 21); the median is reported
  --json FILE    write the records to FILE as JSON
  -h, --help     this text";

struct Args {
    device: DeviceSpec,
    n: usize,
    len: usize,
    side: usize,
    runs: usize,
    json: Option<String>,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cpu(None),
        n: 256,
        len: 1 << 22,
        side: 1024,
        runs: 21,
        json: None,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("device") => args.device = cli.device("--device", ANY_DEVICE, |_| true)?,
            Long("n") => args.n = cli.number("--n", "a size", 16..=2048)?,
            Long("len") => args.len = cli.number("--len", "a length", 1..=1 << 26)?,
            Long("side") => args.side = cli.number("--side", "a side", 16..=8192)?,
            Long("runs") => args.runs = cli.number("--runs", "a count", 5..)?,
            Long("json") => args.json = Some(cli.string("--json")?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// One comparison, as written to the JSON report.
#[derive(Serialize)]
struct Record {
    bench: &'static str,
    backend: &'static str,
    device: String,
    size: usize,
    runs: usize,
    kernel_ms: f64,
    /// What `handwritten_ms` measured: `hand-written`, or `unchecked` (the same kernel).
    baseline: &'static str,
    handwritten_ms: f64,
    /// `kernel_ms / handwritten_ms`.
    time_ratio: f64,
}

type Gemm = (In<f32>, In<f32>, Out<f32>, u32, u32, u32);
/// Saxpy guarding `y` alone: each read of `x` keeps its check.
#[gpukit::kernel]
fn saxpy_one_guard(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_x();
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// Saxpy by hand takes the length as well.
type SaxpyByHand = (f32, In<f32>, Out<f32>, u32);

/// The product as a plain CPU closure: one thread per element of `c`.
fn gemm_closure() -> KernelSpec<Gemm> {
    KernelSpec::<Gemm>::named("gemm_closure").cpu(|t, (a, b, c, m, n, k)| {
        let (row, col) = (t.y(), t.x());
        let (m, n, k) = (*m as usize, *n as usize, *k as usize);
        if row < m && col < n {
            let mut acc = 0.0f32;
            for q in 0..k {
                acc += a[row * k + q] * b[q * n + col];
            }
            c[row * n + col] = acc;
        }
    })
}

const SAXPY_CUDA: &str = r#"extern "C" __global__ void saxpy_by_hand(float a, const float* x, float* y, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"#;

const SAXPY_WGSL: &str = "
struct Args { a: f32, n: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
override block_x: u32 = 256;
@compute @workgroup_size(block_x)
fn saxpy_by_hand(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < args.n) { y[g.x] = args.a * x[g.x] + y[g.x]; }
}";

/// Saxpy by hand, for every backend; the length is passed as a fourth argument on CUDA and
/// in the WGSL's immediates, so the signatures differ: each is its own kernel type.
fn saxpy_by_hand(ctx: &Context) -> Res<gpukit::Kernel<SaxpyByHand>> {
    // SAFETY: `saxpy_by_hand` (CUDA C and WGSL) takes (f32, const float*, float*, length)
    // and touches only indices below the length, which the caller passes as the array's.
    let spec = unsafe {
        KernelSpec::<SaxpyByHand>::cuda(
            SAXPY_CUDA.replace("unsigned long long n", "unsigned int n"),
            "saxpy_by_hand",
        )
        .wgsl(SAXPY_WGSL)
    }
    .cpu(|t, (a, x, y, n)| {
        let i = t.x();
        if i < *n as usize {
            y[i] += *a * x[i];
        }
    });
    Ok(ctx.kernel(spec)?)
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("kernel_bench", run())
}

fn time_ms(ctx: &Context, runs: usize, mut f: impl FnMut() -> gpukit::Result<()>) -> Res<f64> {
    let mut samples = Vec::with_capacity(runs);
    f()?;
    ctx.sync()?;
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        ctx.sync()?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut samples).unwrap_or(f64::NAN))
}

fn same_bits(what: &str, a: &[f32], b: &[f32]) -> Res {
    if a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()) {
        Ok(())
    } else {
        Err(format!("{what}: the #[kernel] and the hand-written kernel disagree").into())
    }
}

fn run() -> Res {
    let args = cli::parse_or_exit("kernel_bench", USAGE, parse_args);
    let ctx = match Context::new(args.device) {
        Ok(ctx) => ctx,
        Err(e @ Error::Unavailable { .. }) if !matches!(args.device, DeviceSpec::Cpu(_)) => {
            println!("SKIPPED: kernel_bench on {}: {e}", args.device);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let device = ctx.info().name.clone();
    let mut records = Vec::new();
    let record = |bench, size, kernel_ms: f64, handwritten_ms: f64| Record {
        bench,
        backend: ctx.backend_name(),
        device: device.clone(),
        size,
        runs: args.runs,
        kernel_ms,
        baseline: if bench == "conv5x5" || bench == "saxpy_one_guard" {
            "unchecked"
        } else {
            "hand-written"
        },
        handwritten_ms,
        time_ratio: kernel_ms / handwritten_ms,
    };

    if ctx.backend_name() == "cpu" {
        let n = args.n;
        let a: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 * 0.25 - 1.5).collect();
        let b: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.5 - 1.0).collect();
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let (mut c1, mut c2) = (
            ctx.alloc_zeros::<f32>(n * n)?,
            ctx.alloc_zeros::<f32>(n * n)?,
        );
        let (twin, closure) = (ctx.kernel(tiled_gemm())?, ctx.kernel(gemm_closure())?);
        let cfg = gemm_config(n, n);
        let d = n as u32;
        let t_twin = time_ms(&ctx, args.runs, || {
            ctx.launch(&twin, cfg, (&da, &db, &mut c1, d, d, d))
        })?;
        let t_closure = time_ms(&ctx, args.runs, || {
            ctx.launch(&closure, cfg, (&da, &db, &mut c2, d, d, d))
        })?;
        same_bits("gemm", &c1.download()?, &c2.download()?)?;
        records.push(record("gemm", n, t_twin, t_closure));
    }

    let len = args.len;
    let x: Vec<f32> = (0..len).map(|i| (i % 101) as f32 * 0.01).collect();
    let y0: Vec<f32> = (0..len).map(|i| (i % 37) as f32 - 18.0).collect();
    let dx = ctx.alloc_upload(&x)?;
    let (mut y1, mut y2) = (ctx.alloc_upload(&y0)?, ctx.alloc_upload(&y0)?);
    let mut y3 = ctx.alloc_upload(&y0)?;
    let (checked, by_hand) = (ctx.kernel(saxpy())?, saxpy_by_hand(&ctx)?);
    // SAFETY: the launches below give every thread an index below both arrays' length
    // (the kernel compares it with `y.len()`, and `x` is as long as `y`).
    let unchecked = ctx.kernel(unsafe { saxpy().unchecked() })?;
    let cfg = LaunchConfig::for_elems(len);
    let n32 = u32::try_from(len)?;
    // All run the same number of times, so the results stay comparable bit for bit.
    let t_checked = time_ms(&ctx, args.runs, || {
        ctx.launch(&checked, cfg, (0.5f32, &dx, &mut y1))
    })?;
    let t_hand = time_ms(&ctx, args.runs, || {
        ctx.launch(&by_hand, cfg, (0.5f32, &dx, &mut y2, n32))
    })?;
    let t_unchecked = time_ms(&ctx, args.runs, || {
        ctx.launch(&unchecked, cfg, (0.5f32, &dx, &mut y3))
    })?;
    same_bits("saxpy", &y1.download()?, &y2.download()?)?;
    same_bits("saxpy, unchecked", &y3.download()?, &y2.download()?)?;
    records.push(record("saxpy", len, t_checked, t_hand));
    records.push(record("saxpy_unchecked", len, t_unchecked, t_hand));
    let one = ctx.kernel(saxpy_one_guard())?;
    // SAFETY: as above: `x` is as long as `y`, which the kernel guards.
    let one_unchecked = ctx.kernel(unsafe { saxpy_one_guard().unchecked() })?;
    let (mut y4, mut y5) = (ctx.alloc_upload(&y0)?, ctx.alloc_upload(&y0)?);
    let t_one = time_ms(&ctx, args.runs, || {
        ctx.launch(&one, cfg, (0.5f32, &dx, &mut y4))
    })?;
    let t_one_unchecked = time_ms(&ctx, args.runs, || {
        ctx.launch(&one_unchecked, cfg, (0.5f32, &dx, &mut y5))
    })?;
    same_bits("saxpy, one guard", &y4.download()?, &y5.download()?)?;
    records.push(record("saxpy_one_guard", len, t_one, t_one_unchecked));

    let side = args.side;
    let img: Vec<f32> = (0..side * side)
        .map(|i| (i % 29) as f32 * 0.125 - 1.75)
        .collect();
    let w: Vec<f32> = (0..25).map(|i| (i % 5) as f32 * 0.0625 - 0.125).collect();
    let (ds, dw) = (ctx.alloc_upload(&img)?, ctx.alloc_upload(&w)?);
    let (mut o1, mut o2) = (
        ctx.alloc_zeros::<f32>(side * side)?,
        ctx.alloc_zeros::<f32>(side * side)?,
    );
    let checked = ctx.kernel(conv5x5())?;
    // SAFETY: conv5x5 reads `src` at `gy * cols + gx` with `gy < rows`, `gx < cols`, writes
    // `dst` at `y * cols + x` with `y < rows`, `x < cols`, and `src` and `dst` below hold
    // `rows * cols` elements; its shared indices are proven by its loops and guards.
    let unchecked = ctx.kernel(unsafe { conv5x5().unchecked() })?;
    let (cfg, d) = (conv_config(side, side), u32::try_from(side)?);
    let t_checked = time_ms(&ctx, args.runs, || {
        ctx.launch(&checked, cfg, (&ds, &dw, &mut o1, d, d))
    })?;
    let t_unchecked = time_ms(&ctx, args.runs, || {
        ctx.launch(&unchecked, cfg, (&ds, &dw, &mut o2, d, d))
    })?;
    same_bits("conv5x5", &o1.download()?, &o2.download()?)?;
    records.push(record("conv5x5", side * side, t_checked, t_unchecked));

    println!(
        "kernel_bench: {} backend ({}), medians of {} runs; ratio = #[kernel] / baseline",
        ctx.backend_name(),
        device,
        args.runs
    );
    for r in &records {
        println!(
            "  {:<15} size {:>9}   #[kernel] {:>9.3} ms   {:>12} {:>9.3} ms   ratio {:>5.2}x",
            r.bench, r.size, r.kernel_ms, r.baseline, r.handwritten_ms, r.time_ratio
        );
    }
    if let Some(path) = &args.json {
        write_json(path, &records)?;
    }
    Ok(())
}
