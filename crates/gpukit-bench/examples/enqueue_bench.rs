//! Host cost of queuing a built-in op on the CPU backend: through the facade against
//! handing the same task to the stream's worker directly.
//!
//! Each round blocks a stream's worker with a gate (a kernel spinning until the round opens
//! it), times `--ops` enqueues of `out = a + b` over `--elems` f32 elements on the host, then
//! opens the gate and syncs: the ops queue up behind the gate, so what is timed is the
//! enqueue alone, never the work. Four ways, in the same process, alternating round by
//! round; nanoseconds per op are medians over `--rounds` rounds, and each ratio is the
//! median of the rounds' ratios to the baseline round run beside them:
//! - `facade`: `gpukit::Context` with one stream (`Stream::add`: argument checks, the
//!   bookkeeping of gpukit-core, the `AnyBackend` dispatch, the backend);
//! - `facade with 2 streams`: the same in a context with a second stream, where every op
//!   also records the event that would order another stream after it;
//! - `core`: `gpukit_core::Context<CpuBackend>` with one stream (the facade without its
//!   dispatch);
//! - `backend` (the baseline): `Backend::launch` of an add kernel on the CPU backend's own
//!   stream (as the built-in `add` is launched), which builds a task and pushes it onto the
//!   same kind of queue, with none of the library's safety around it.
//!
//! The ratios `facade / backend` and `core / backend` are the cost of the safe layers; the
//! target is at most 1.3 (the project's goal: enqueue close to a raw launch). The timing
//! thread is pinned to the core it starts on (Linux), so that the ways see the same core's
//! caches and clock.
//!
//! **PyTorch.** Where `import torch` works in a `python3` child (`--python`), the child
//! times PyTorch's eager `torch.add(a, b, out=c)` on CPU tensors of `--elems` f32 (one
//! thread, medians of 101 rounds of 200 calls after 1000 warm-up calls; the call does the
//! add, which on 1 Ki elements is a small part of it), and the record `facade vs torch.add`
//! is our facade's enqueue over that: the target is at most 0.25. Without PyTorch the
//! program says why and leaves the record out.
//!
//! ```text
//! cargo run --release --example enqueue_bench -- [--json FILE] [--rounds N] [--ops N] [--elems N]
//!     [--python EXE] [--no-torch]
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpukit::core::{
    Backend, BufAt, Context as CoreContext, GpuArray, In, Kernel, KernelArg, Out, Stream,
};
use gpukit::cpu::CpuBackend;
use gpukit::{Context, DeviceSpec, KernelSpec, LaunchConfig};
use gpukit_bench::{median_or_nan, write_json};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: enqueue_bench [options]

  --json FILE    write the records to FILE as JSON
  --rounds N     rounds per way, at least 5 (default 101)
  --ops N        ops queued per round, 1 to 250 (default 200; a CPU stream holds 256)
  --elems N      elements per op, at least 1 (default 1024)
  --python EXE   the Python that times PyTorch's torch.add, where it imports (default python3)
  --no-torch     leave PyTorch out
  -h, --help     this text";

struct Args {
    json: Option<String>,
    rounds: usize,
    ops: usize,
    elems: usize,
    python: String,
    torch: bool,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        json: None,
        rounds: 101,
        ops: 200,
        elems: 1024,
        python: "python3".to_owned(),
        torch: true,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("rounds") => args.rounds = cli.number("--rounds", "a count", 5..)?,
            Long("ops") => args.ops = cli.number("--ops", "a count", 1..=250)?,
            Long("elems") => args.elems = cli.number("--elems", "a count", 1..)?,
            Long("python") => args.python = cli.string("--python")?,
            Long("no-torch") => args.torch = false,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

#[derive(Serialize)]
struct Record {
    backend: &'static str,
    name: String,
    ours_ns: f64,
    baseline_ns: f64,
    ratio: f64,
}

/// The Python side: times `torch.add(a, b, out=c)` on `argv[1]` f32 elements; one JSON
/// object on the last line of stdout.
const TORCH_SCRIPT: &str = r#"
import json, sys, time
try:
    import torch
except Exception as e:
    print(json.dumps({"ok": False, "reason": "%s: %s" % (type(e).__name__, e)}))
    sys.exit(0)
n = int(sys.argv[1])
torch.set_num_threads(1)
a, b, c = torch.ones(n), torch.full((n,), 2.0), torch.empty(n)
for _ in range(1000):
    torch.add(a, b, out=c)
ts = []
for _ in range(101):
    t = time.perf_counter_ns()
    for _ in range(200):
        torch.add(a, b, out=c)
    ts.append((time.perf_counter_ns() - t) / 200)
ts.sort()
print(json.dumps({"ok": True, "version": torch.__version__, "ns": ts[len(ts) // 2],
                  "correct": bool((c == 3).all())}))
"#;

/// PyTorch's nanoseconds per `torch.add(a, b, out=c)` on `n` f32 and its version, or why
/// it was not measured.
fn torch_add_ns(python: &str, n: usize) -> Result<(f64, String), String> {
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(TORCH_SCRIPT)
        .arg(n.to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .map_err(|_| {
            format!(
                "{python} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
    if answer["ok"].as_bool() != Some(true) {
        return Err(answer["reason"]
            .as_str()
            .unwrap_or("no reason given")
            .to_owned());
    }
    if answer["correct"].as_bool() != Some(true) {
        return Err("torch.add gave a wrong result".to_owned());
    }
    let ns = answer["ns"].as_f64().ok_or("no time in the answer")?;
    Ok((ns, answer["version"].as_str().unwrap_or("?").to_owned()))
}

/// Pins the calling thread to the core it is running on (Linux; elsewhere nothing).
fn pin_to_current_core() {
    #[cfg(target_os = "linux")]
    // SAFETY: `sched_getcpu` has no preconditions; `set` is a zeroed `cpu_set_t` that
    // CPU_SET fills for a core number the kernel gave, and `sched_setaffinity(0, ..)`
    // changes only the calling thread's affinity.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu >= 0 {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// Holds the worker of the stream it runs on until the round opens it.
static GATE: AtomicBool = AtomicBool::new(false);

/// The baseline's add: `out = a + b` on the CPU, thread by thread (its work is not timed).
fn add_spec() -> KernelSpec<(In<f32>, In<f32>, Out<f32>)> {
    KernelSpec::<(In<f32>, In<f32>, Out<f32>)>::named("add").cpu(|t, (a, b, out)| {
        let i = t.x();
        if i < out.len() {
            out[i] = a[i] + b[i];
        }
    })
}

fn gate_spec() -> KernelSpec<(u32,)> {
    KernelSpec::<(u32,)>::named("gate").cpu(|_, _| {
        while !GATE.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
    })
}

/// One round: closes the gate, queues it on the stream (`block`), times `ops` calls of
/// `enqueue`, opens the gate and waits (`drain`). Nanoseconds per op.
fn round(
    ops: usize,
    block: &mut dyn FnMut() -> Res,
    enqueue: &mut dyn FnMut() -> Res,
    drain: &mut dyn FnMut() -> Res,
) -> Res<f64> {
    GATE.store(false, Ordering::Release);
    block()?;
    let start = Instant::now();
    for _ in 0..ops {
        enqueue()?;
    }
    let took = start.elapsed();
    GATE.store(true, Ordering::Release);
    drain()?;
    Ok(took.as_nanos() as f64 / ops as f64)
}

/// Fails unless every element is `1 + 2`.
fn check_sum(got: Vec<f32>, who: &str) -> Res {
    if got.iter().any(|&v| v != 3.0) {
        return Err(format!("{who}: a + b is not 3 everywhere").into());
    }
    Ok(())
}

/// One way through the library: a stream of a gpukit-core context (the facade's is one over
/// `AnyBackend`), its arrays `c = a + b` and its gate kernel.
struct Way<B: Backend> {
    stream: Stream<B>,
    a: GpuArray<f32, B>,
    b: GpuArray<f32, B>,
    c: GpuArray<f32, B>,
    gate: Kernel<(u32,), B>,
}

impl<B: Backend> Way<B> {
    fn new(ctx: &CoreContext<B>, stream: Stream<B>, n: usize) -> Res<Self> {
        Ok(Way {
            stream,
            a: ctx.alloc_upload(&vec![1f32; n])?,
            b: ctx.alloc_upload(&vec![2f32; n])?,
            c: ctx.alloc_zeros::<f32>(n)?,
            gate: ctx.kernel(gate_spec())?,
        })
    }

    /// One [`round`] of `ops` adds on this way's stream: nanoseconds per op.
    fn round(&mut self, ops: usize) -> Res<f64> {
        let Way {
            stream: s,
            a,
            b,
            c,
            gate,
        } = self;
        round(
            ops,
            &mut || Ok(s.launch(gate, LaunchConfig::linear(1, 1), (0u32,))?),
            &mut || Ok(s.add(a, b, c)?),
            &mut || Ok(s.sync()?),
        )
    }

    fn check(&self, who: &str) -> Res {
        check_sum(self.c.download()?, who)
    }
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("enqueue_bench", run())
}

fn run() -> Res {
    let args = cli::parse_or_exit("enqueue_bench", USAGE, parse_args);
    let n = args.elems;
    let one = LaunchConfig::linear(1, 1);

    // The facade: a context with one stream, and one with two (where every op also records
    // the event that orders other streams after it).
    let ctx = Context::new(DeviceSpec::Cpu(None))?;
    let mut facade = Way::new(&ctx, ctx.default_stream().clone(), n)?;
    let ctx2 = Context::new(DeviceSpec::Cpu(None))?;
    let mut multi = Way::new(&ctx2, ctx2.create_stream()?, n)?;
    // gpukit-core on the CPU backend, without the facade.
    let core = CpuBackend::context()?;
    let mut core_way = Way::new(&core, core.default_stream().clone(), n)?;

    // The backend alone.
    let backend = CpuBackend::new()?;
    let bs = backend.create_stream(0)?;
    let bytes = n * 4;
    let (ba, bb, bc) = (
        backend.alloc(bytes, true)?,
        backend.alloc(bytes, true)?,
        backend.alloc(bytes, true)?,
    );
    let bgate = backend.load_kernel(gate_spec().desc())?;
    let badd = backend.load_kernel(add_spec().desc())?;
    let at = |buf| BufAt { buf, offset: 0 };
    for (buf, value) in [(&ba, 1f32), (&bb, 2f32)] {
        let host: Vec<u8> = std::iter::repeat_n(value.to_ne_bytes(), n)
            .flatten()
            .collect();
        // SAFETY: the buffer holds `n` f32 and only this stream uses it; `host` outlives
        // the sync below.
        unsafe { backend.copy_h2d(&bs, host.as_ptr(), at(buf), bytes)? };
        backend.stream_sync(&bs)?;
    }
    let cfg = LaunchConfig::for_elems(n);
    let (mut facade_ns, mut multi_ns, mut core_ns, mut raw) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    pin_to_current_core();
    for _ in 0..args.rounds {
        facade_ns.push(facade.round(args.ops)?);
        multi_ns.push(multi.round(args.ops)?);
        core_ns.push(core_way.round(args.ops)?);
        raw.push(round(
            args.ops,
            &mut || {
                let arg = KernelArg::Scalar {
                    bytes: [0; 16],
                    len: 4,
                };
                // SAFETY: the gate's CPU closure takes one u32 and touches no memory.
                unsafe { backend.launch(&bs, &bgate, &one, &[arg])? };
                Ok(())
            },
            &mut || {
                let arg = |buf, write| KernelArg::Buffer {
                    at: Some(at(buf)),
                    bytes,
                    write,
                };
                let args = [arg(&ba, false), arg(&bb, false), arg(&bc, true)];
                // SAFETY: the three buffers hold `n` f32 each, are aligned, and only this
                // stream uses them; `bc` overlaps neither input; the kernel is a CPU
                // closure over (In<f32>, In<f32>, Out<f32>).
                unsafe { backend.launch(&bs, &badd, &cfg, &args)? };
                Ok(())
            },
            &mut || Ok(backend.stream_sync(&bs)?),
        )?);
    }
    facade.check("facade")?;
    multi.check("facade, two streams")?;
    core_way.check("core")?;
    let mut back = vec![0u8; bytes];
    // SAFETY: `back` has `bytes` writable bytes, and the stream is synced before it is read.
    unsafe { backend.copy_d2h(&bs, at(&bc), back.as_mut_ptr(), bytes)? };
    backend.stream_sync(&bs)?;
    let floats: Vec<f32> = back
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    check_sum(floats, "backend")?;

    // The ratio is the median of each round's ratio to the baseline's round beside it, so
    // that the machine's drift between rounds (frequency, other load) cancels.
    let baseline = median_or_nan(raw.clone());
    let mut records: Vec<Record> = [
        ("facade", facade_ns),
        ("facade with 2 streams", multi_ns),
        ("core", core_ns),
    ]
    .into_iter()
    .map(|(way, ns)| Record {
        backend: "cpu",
        name: format!("add_f32_{n} via {way} vs Backend::launch"),
        ratio: median_or_nan(ns.iter().zip(&raw).map(|(o, b)| o / b).collect()),
        ours_ns: median_or_nan(ns),
        baseline_ns: baseline,
    })
    .collect();
    println!(
        "enqueue_bench: cpu backend, {} ops of add over {n} f32 queued behind a gate, medians of {} rounds",
        args.ops, args.rounds
    );
    println!("  Backend::launch (base) {baseline:8.0} ns per op");
    for r in &records {
        let verdict = if r.ratio <= 1.3 { "holds" } else { "MISSED" };
        println!(
            "  {:<23} {:8.0} ns per op  {:.2}x  (target <= 1.3: {verdict})",
            r.name
                .split(" via ")
                .nth(1)
                .and_then(|w| w.strip_suffix(" vs Backend::launch"))
                .unwrap_or(&r.name),
            r.ours_ns,
            r.ratio
        );
    }
    let torch = if args.torch {
        torch_add_ns(&args.python, n)
    } else {
        Err("--no-torch".to_owned())
    };
    match torch {
        Ok((ns, version)) => {
            let ours = records[0].ours_ns;
            let ratio = ours / ns;
            let verdict = if ratio <= 0.25 { "holds" } else { "MISSED" };
            println!(
                "  torch {version} torch.add(a, b, out=c): {ns:.0} ns per call; the facade's \
                 enqueue is {ratio:.3}x of it (target <= 0.25: {verdict})"
            );
            records.push(Record {
                backend: "cpu",
                name: format!("add_f32_{n} via facade vs torch.add"),
                ours_ns: ours,
                baseline_ns: ns,
                ratio,
            });
        }
        Err(why) => println!("  torch.add: not available ({why})"),
    }
    if let Some(path) = &args.json {
        write_json(path, &records)?;
    }
    backend.destroy_stream(bs)?;
    Ok(())
}
