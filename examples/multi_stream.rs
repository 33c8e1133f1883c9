//! Independent work on several streams, joined by events, watched without blocking.
//!
//! Four worker streams each upload their own input from pinned memory and run a chain of a
//! custom kernel (CUDA C through NVRTC on a GPU, a Rust closure on the CPU backend) and
//! built-in ops on their own arrays, stream `k` doing `k + 1` times the work of stream 0. A
//! fifth stream waits on the events recorded at the end of the four, adds their results and
//! downloads the sum. Meanwhile the host polls `Event::query`, `Stream::query` and
//! `Pending::is_ready` (none of which blocks) and prints each change of state; once all is
//! done it checks every result against the same computation on the host and prints the
//! timings the events measured.
//!
//! ```text
//! cargo run --release --example multi_stream
//! cargo run --release --example multi_stream -- --device cpu --len 65536 --rounds 2
//! ```
//!
//! gpukit-core would order the combine stream's reads after the workers' writes by itself;
//! waiting on the events says so explicitly, and keeps the combine stream's timing events
//! around its own work. A wrong result or any error prints a message and exits with status 1.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpukit::{DeviceSpec, Event, GpuArray, HostUse, In, KernelSpec, LaunchConfig, Out};
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};

type Res<T = ()> = Result<T, Box<dyn Error>>;

/// `y = ((c3 x + c2) x + c1) x + c0`. `__fmul_rn` and `__fadd_rn` keep NVCC from fusing a
/// multiply and an add, so the GPU rounds exactly as the CPU closure and the host do.
const POLY3: &str = r#"
extern "C" __global__ void poly3(const float* x, float* y, float c0, float c1, float c2,
                                 float c3, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float r = __fadd_rn(__fmul_rn(c3, v), c2);
        r = __fadd_rn(__fmul_rn(r, v), c1);
        y[i] = __fadd_rn(__fmul_rn(r, v), c0);
    }
}
"#;

/// `poly3` in WGSL, for the Vulkan backend (the same order of operations).
const POLY3_WGSL: &str = r#"
struct Args { c0: f32, c1: f32, c2: f32, c3: f32, n: vec2<u32> }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
override block_x: u32 = 256;
@compute @workgroup_size(block_x)
fn poly3(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (args.n.y == 0u && i < args.n.x) {
        let v = x[i];
        var r = args.c3 * v + args.c2;
        r = r * v + args.c1;
        y[i] = r * v + args.c0;
    }
}
"#;

/// The kernel's signature: input, output, four coefficients, length.
type Poly3 = (In<f32>, Out<f32>, f32, f32, f32, f32, u64);

const WORKERS: usize = 4;

const USAGE: &str = "\
usage: multi_stream [options]

  --len N        elements per array (default 1048576)
  --rounds N     rounds of stream 0; stream k does k + 1 times as many
                 (default 4 on the CPU, 100 on a GPU)
  --device SPEC  auto | cpu | cuda[:N] | vulkan[:N] (default: GPU_DEVICE, else auto)
  --quick        --len 65536 --rounds 2
  -h, --help     this text";

#[derive(Debug, Default)]
struct Opts {
    len: Option<usize>,
    rounds: Option<usize>,
    device: Option<DeviceSpec>,
    quick: bool,
}

fn parse_args(cli: &mut Cli) -> Result<Opts, CliError> {
    let mut o = Opts::default();
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("len") => o.len = Some(cli.number("--len", "a count", 1..)?),
            Long("rounds") => o.rounds = Some(cli.number("--rounds", "a count", 1..)?),
            Long("device") => o.device = Some(cli.device("--device", ANY_DEVICE, |_| true)?),
            Long("quick") => o.quick = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(o)
}

/// Worker `k`'s input: a sawtooth in [-1, 1).
fn input(k: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 + k * 131) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// Worker `k`'s polynomial coefficients `c0..c3`.
fn coefficients(k: usize) -> [f32; 4] {
    [0.25 * k as f32 - 0.5, 1.0, -0.75, 0.5 + 0.125 * k as f32]
}

fn poly(c: [f32; 4], v: f32) -> f32 {
    ((c[3] * v + c[2]) * v + c[1]) * v + c[0]
}

/// One round of a worker, as each stream runs it: `p = poly3(x)`, `r = relu(p)`,
/// `acc += 0.5 r`, `x *= 0.875`. The host's version of `rounds` of them, returning `acc`.
fn host_worker(k: usize, len: usize, rounds: usize) -> Vec<f32> {
    let c = coefficients(k);
    let mut x = input(k, len);
    let mut acc = vec![0.0f32; len];
    for _ in 0..rounds {
        for (a, v) in acc.iter_mut().zip(x.iter_mut()) {
            let r = poly(c, *v).max(0.0);
            *a += 0.5 * r;
            *v *= 0.875;
        }
    }
    acc
}

/// Largest error of `got` against `want`, relative to `1 + |want|`; `None` on a length
/// mismatch or a NaN.
fn max_error(want: &[f32], got: &[f32]) -> Option<f64> {
    if want.len() != got.len() {
        return None;
    }
    want.iter().zip(got).try_fold(0.0f64, |m, (&w, &g)| {
        let e = (f64::from(w) - f64::from(g)).abs() / (1.0 + f64::from(w).abs());
        (!e.is_nan()).then_some(m.max(e))
    })
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("multi_stream", run())
}

/// A worker stream's arrays and events.
struct Worker {
    stream: gpukit::Stream,
    x: GpuArray<f32>,
    acc: GpuArray<f32>,
    rounds: usize,
    start: Event,
    end: Event,
}

fn run() -> Res {
    let opts = cli::parse_or_exit("multi_stream", USAGE, parse_args);
    let ctx = gpukit_examples::open_context(opts.device)?;
    println!(
        "backend {} device {} ({})",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name
    );
    for r in &ctx.selection().rejected {
        println!("  {} rejected: {}", r.backend, r.reason);
    }
    let gpu_backend = ctx.info().compute_capability.is_some();
    let len = opts
        .len
        .unwrap_or(if opts.quick { 1 << 16 } else { 1 << 20 });
    let rounds = opts.rounds.unwrap_or(match (opts.quick, gpu_backend) {
        (true, _) => 2,
        (false, false) => 4,
        (false, true) => 100,
    });
    println!(
        "{WORKERS} worker streams on {len} f32 each, stream k doing (k + 1) x {rounds} rounds of \
         poly3 kernel + relu + axpy + scale; a combine stream adds their results"
    );

    // SAFETY: `poly3` takes (const float*, float*, float x 4, unsigned long long), `Poly3` in
    // order and type, and touches only indices below `n`.
    let poly3 = unsafe { KernelSpec::<Poly3>::cuda(POLY3, "poly3") };
    // SAFETY: the WGSL binds x (read) and y (written), reads the coefficients and `n` from
    // the immediates in signature order, and touches only indices below `n`.
    let poly3 = unsafe { poly3.wgsl(POLY3_WGSL) };
    let kernel = ctx.kernel(poly3.cpu(|t, (x, y, c0, c1, c2, c3, n)| {
        let i = t.x();
        if (i as u64) < *n {
            y[i] = poly([*c0, *c1, *c2, *c3], x[i]);
        }
    }))?;
    let cfg = LaunchConfig::for_elems(len);
    let n = len as u64;

    // Everything is allocated and the inputs staged before the first stream starts, so the
    // events time the streams' work alone.
    let mut workers = Vec::with_capacity(WORKERS);
    let mut staged = Vec::with_capacity(WORKERS);
    let mut scratch = Vec::with_capacity(WORKERS);
    for k in 0..WORKERS {
        let mut host = ctx.alloc_host::<f32>(len, HostUse::Upload)?;
        host.copy_from_slice(&input(k, len));
        staged.push(host);
        scratch.push((ctx.alloc_zeros::<f32>(len)?, ctx.alloc_zeros::<f32>(len)?));
        let stream = ctx.create_stream()?;
        let start = stream.record_event()?;
        workers.push(Worker {
            x: ctx.alloc_zeros::<f32>(len)?,
            acc: ctx.alloc_zeros::<f32>(len)?,
            rounds: rounds * (k + 1),
            end: start.clone(),
            start,
            stream,
        });
    }
    let combine = ctx.create_stream()?;
    let (mut s01, mut s23, mut total) = (
        ctx.alloc_zeros::<f32>(len)?,
        ctx.alloc_zeros::<f32>(len)?,
        ctx.alloc_zeros::<f32>(len)?,
    );
    let result_host = ctx.alloc_host::<f32>(len, HostUse::Download)?;
    ctx.sync()?;

    // Enqueue: nothing below blocks on the device.
    let t0 = Instant::now();
    let mut uploads = Vec::with_capacity(WORKERS);
    for (k, (w, host)) in workers.iter_mut().zip(staged).enumerate() {
        let s = &w.stream;
        let c = coefficients(k);
        let (p, r) = &mut scratch[k];
        w.start = s.record_event()?;
        uploads.push(s.upload(host, &mut w.x).map_err(|r| r.error)?);
        for _ in 0..w.rounds {
            s.launch(&kernel, cfg, (&w.x, &mut *p, c[0], c[1], c[2], c[3], n))?;
            s.relu(&*p, r)?;
            s.axpy(0.5f32, &*r, &mut w.acc)?;
            s.scale(0.875f32, &mut w.x)?;
        }
        w.end = s.record_event()?;
    }
    for w in &workers {
        combine.wait(&w.end)?;
    }
    let combine_start = combine.record_event()?;
    combine.add(&workers[0].acc, &workers[1].acc, &mut s01)?;
    combine.add(&workers[2].acc, &workers[3].acc, &mut s23)?;
    combine.add(&s01, &s23, &mut total)?;
    let download = combine.download(&total, result_host).map_err(|r| r.error)?;
    let combine_end = combine.record_event()?;
    println!(
        "enqueued {} launches and copies in {:.2} ms; polling:",
        workers.iter().map(|w| 4 * w.rounds + 1).sum::<usize>() + 4,
        t0.elapsed().as_secs_f64() * 1e3
    );

    // Poll without blocking until every stream is done, printing each change of state.
    let mut polls = 0usize;
    let mut last = String::new();
    loop {
        polls += 1;
        let mut line = String::new();
        let mut workers_done = true;
        for (k, w) in workers.iter().enumerate() {
            let done = w.end.query()?;
            workers_done &= done;
            line.push_str(&format!(
                "stream {k} {:<8} ",
                if done { "done" } else { "running" }
            ));
        }
        let combined = combine.query()?;
        let state = match (workers_done, combine_end.query()?, download.is_ready()?) {
            (false, _, _) => "waiting",
            (true, false, _) => "running",
            (true, true, false) => "copying",
            (true, true, true) => "done",
        };
        line.push_str(&format!("| combine {state}"));
        if line != last {
            println!("  {:>8.2} ms  {line}", t0.elapsed().as_secs_f64() * 1e3);
            last = line;
        }
        if workers_done && combined && download.is_ready()? {
            break;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let host_ms = t0.elapsed().as_secs_f64() * 1e3;
    println!("all streams done after {polls} polls, {host_ms:.2} ms on the host clock");
    for u in uploads {
        drop(u.wait().map_err(|r| r.error)?); // the staging buffers go back to the pool
    }
    let result = download.wait().map_err(|r| r.error)?;
    ctx.check()?;

    // Timings from the events.
    println!("timings (events):");
    let mut busy = 0.0;
    for (k, w) in workers.iter().enumerate() {
        let ms = w.start.elapsed_ms(&w.end)?;
        busy += ms;
        println!(
            "  stream {k}: {:>4} rounds in {ms:>9.3} ms, ended {:>9.3} ms after stream 0 started",
            w.rounds,
            workers[0].start.elapsed_ms(&w.end)?
        );
    }
    let combine_ms = combine_start.elapsed_ms(&combine_end)?;
    let span = workers[0].start.elapsed_ms(&combine_end)?;
    println!(
        "  combine:  3 adds + download in {combine_ms:.3} ms, started {:.3} ms after the last \
         worker ended",
        workers
            .iter()
            .map(|w| w.end.elapsed_ms(&combine_start))
            .collect::<gpukit::Result<Vec<f64>>>()?
            .into_iter()
            .fold(f64::INFINITY, f64::min)
    );
    println!(
        "  first start to last end: {span:.3} ms for {busy:.3} ms of stream work \
         ({:.2} streams in flight on average)",
        busy / span.max(f64::MIN_POSITIVE)
    );

    // Check every result against the host.
    println!("verifying against the host:");
    let tolerance = 1e-5;
    let mut want_total = vec![0.0f32; len];
    let mut want = Vec::with_capacity(WORKERS);
    for (k, w) in workers.iter().enumerate() {
        let acc = host_worker(k, len, w.rounds);
        want.push(acc);
        let got = w.acc.download()?;
        let err = max_error(&want[k], &got)
            .ok_or_else(|| format!("stream {k}: wrong length or NaN in the result"))?;
        if err > tolerance {
            return Err(format!(
                "stream {k}: result off by {err:.3e} (relative), more than {tolerance:e}"
            )
            .into());
        }
        println!("  stream {k}: {len} elements, max relative error {err:.1e}");
    }
    for (i, t) in want_total.iter_mut().enumerate() {
        *t = (want[0][i] + want[1][i]) + (want[2][i] + want[3][i]);
    }
    let err = max_error(&want_total, &result)
        .ok_or("combine: wrong length or NaN in the downloaded sum")?;
    if err > tolerance {
        return Err(
            format!("combine: sum off by {err:.3e} (relative), more than {tolerance:e}").into(),
        );
    }
    println!("  combined sum: {len} elements, max relative error {err:.1e}");

    let backend = ctx.backend_name();
    ctx.close()?;
    println!("all results verified on the {backend} backend");
    Ok(())
}
