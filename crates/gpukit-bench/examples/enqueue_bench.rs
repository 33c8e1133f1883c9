//! Host cost of queuing a built-in op on the CPU backend: through the facade against
//! handing the same task to the stream's worker directly.
//!
//! Each round blocks a stream's worker with a gate (a kernel that sleeps until the round
//! opens it, so that it takes no core from the timing thread), times `--ops` enqueues on
//! the host, then opens the gate and syncs: the work queues up behind the gate, so what is
//! timed is the enqueue alone, never the work. The ways run in the same process, alternating
//! round by round; nanoseconds per op are medians over `--rounds` rounds, and each ratio is
//! the median of the rounds' ratios to its baseline's round run beside it:
//! - `facade`: `out = a + b` over `--elems` f32 through `gpukit::Context` with one stream
//!   (`Stream::add`: argument checks, the bookkeeping of gpukit-core, the `AnyBackend`
//!   dispatch, the backend);
//! - `facade with 2 streams`: the same in a context with a second stream, where every op
//!   also records the event that would order another stream after it (target 1.6);
//! - `core`: `gpukit_core::Context<CpuBackend>` with one stream (the facade without its
//!   dispatch);
//! - their baseline, `Backend::launch of its kernel`: the backend's own submission of the
//!   same work, a `Backend::launch` of the built-in kernel `Stream::add` launches, with the
//!   arguments it passes, on a CPU backend stream, with none of the library's safety around
//!   it;
//! - `Stream::launch`: a closure kernel `out = a + b` launched through gpukit-core, against
//!   `Backend::launch` of the same kernel.
//!
//! The ratios are the cost of the safe layers; the target is at most 1.3 (the project's
//! goal: enqueue close to a raw launch), 1.6 with two streams. The timing thread is pinned
//! to the core it starts on (Linux), so that the ways see the same core's caches and clock.
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
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use gpukit::core::{
    Backend, BinaryOp, BufAt, Context as CoreContext, GpuArray, In, Kernel, KernelArg, Out, Stream,
    FAULT_WORDS,
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

/// Whether the round has opened the gate, and the gate kernel's wake-up.
static GATE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// Opens (`true`) or closes the gate.
fn set_gate(open: bool) {
    *GATE.0.lock().unwrap_or_else(|p| p.into_inner()) = open;
    GATE.1.notify_all();
}

/// The signature of an add kernel: `(a, b, out)`.
type AddSig = (In<f32>, In<f32>, Out<f32>);

/// The closure kernel of `Stream::launch`'s way: `out = a + b` on the CPU, thread by
/// thread (its work is not timed).
fn add_spec() -> KernelSpec<AddSig> {
    KernelSpec::<AddSig>::named("add").cpu(|t, (a, b, out)| {
        let i = t.x();
        if i < out.len() {
            out[i] = a[i] + b[i];
        }
    })
}

/// Holds the worker of the stream it runs on, asleep, until the round opens it.
fn gate_spec() -> KernelSpec<(u32,)> {
    KernelSpec::<(u32,)>::named("gate").cpu(|_, _| {
        let mut open = GATE.0.lock().unwrap_or_else(|p| p.into_inner());
        while !*open {
            open = GATE.1.wait(open).unwrap_or_else(|p| p.into_inner());
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
    set_gate(false);
    block()?;
    let start = Instant::now();
    for _ in 0..ops {
        enqueue()?;
    }
    let took = start.elapsed();
    set_gate(true);
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
    /// The closure kernel, where the way is `Stream::launch` of it (else `Stream::add`).
    add: Option<Kernel<AddSig, B>>,
}

impl<B: Backend> Way<B> {
    fn new(ctx: &CoreContext<B>, stream: Stream<B>, n: usize) -> Res<Self> {
        Ok(Way {
            stream,
            a: ctx.alloc_upload(&vec![1f32; n])?,
            b: ctx.alloc_upload(&vec![2f32; n])?,
            c: ctx.alloc_zeros::<f32>(n)?,
            gate: ctx.kernel(gate_spec())?,
            add: None,
        })
    }

    /// One [`round`] of `ops` adds (or launches of the closure kernel) on this way's
    /// stream: nanoseconds per op.
    fn round(&mut self, ops: usize) -> Res<f64> {
        let Way {
            stream: s,
            a,
            b,
            c,
            gate,
            add,
        } = self;
        let cfg = LaunchConfig::for_elems(c.len());
        round(
            ops,
            &mut || Ok(s.launch(gate, LaunchConfig::linear(1, 1), (0u32,))?),
            &mut || match add {
                Some(k) => Ok(s.launch(k, cfg, (&*a, &*b, &mut *c))?),
                None => Ok(s.add(a, b, c)?),
            },
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

/// The baseline: a CPU backend stream, its arrays `c = a + b` (`n` f32 each), the gate and
/// two add kernels, launched through `Backend::launch` alone.
struct Raw {
    backend: CpuBackend,
    stream: <CpuBackend as Backend>::Stream,
    bufs: [<CpuBackend as Backend>::Buffer; 3],
    /// The fault record the built-in kernel's convention takes (nothing writes it: the
    /// kernel is loaded unchecked, as the op loads it in release builds).
    record: <CpuBackend as Backend>::Buffer,
    gate: <CpuBackend as Backend>::Kernel,
    /// The built-in kernel `Stream::add` launches.
    builtin: <CpuBackend as Backend>::Kernel,
    /// The closure kernel of `Stream::launch`'s way.
    closure: <CpuBackend as Backend>::Kernel,
    bytes: usize,
}

impl Raw {
    fn new(n: usize) -> Res<Self> {
        let backend = CpuBackend::new()?;
        let stream = backend.create_stream(0)?;
        let bytes = n * 4;
        let bufs = [
            backend.alloc(bytes, true)?,
            backend.alloc(bytes, true)?,
            backend.alloc(bytes, true)?,
        ];
        let record = backend.alloc(FAULT_WORDS * 4, true)?;
        let gate = backend.load_kernel(gate_spec().desc())?;
        let builtin =
            backend.load_kernel(gpukit::core::__binary_kernel_spec::<f32>(BinaryOp::Add).desc())?;
        let closure = backend.load_kernel(add_spec().desc())?;
        let raw = Raw {
            backend,
            stream,
            bufs,
            record,
            gate,
            builtin,
            closure,
            bytes,
        };
        for (buf, value) in [(&raw.bufs[0], 1f32), (&raw.bufs[1], 2f32)] {
            let host: Vec<u8> = std::iter::repeat_n(value.to_ne_bytes(), n)
                .flatten()
                .collect();
            // SAFETY: the buffer holds `n` f32 and only this stream uses it; `host` outlives
            // the sync below.
            unsafe {
                raw.backend
                    .copy_h2d(&raw.stream, host.as_ptr(), at(buf), bytes)?
            };
            raw.backend.stream_sync(&raw.stream)?;
        }
        Ok(raw)
    }

    /// One [`round`] of `ops` launches of the built-in kernel (`builtin`) or the closure
    /// kernel: nanoseconds per op.
    fn round(&self, ops: usize, builtin: bool) -> Res<f64> {
        let (backend, s, bytes) = (&self.backend, &self.stream, self.bytes);
        let one = LaunchConfig::linear(1, 1);
        let cfg = LaunchConfig::for_elems(bytes / 4);
        round(
            ops,
            &mut || {
                // SAFETY: the gate's CPU closure takes one u32 and touches no memory.
                unsafe { backend.launch(s, &self.gate, &one, &[scalar(&0u32.to_ne_bytes())])? };
                Ok(())
            },
            &mut || {
                let arg = |i: usize, write| KernelArg::Buffer {
                    at: Some(at(&self.bufs[i])),
                    bytes,
                    write,
                };
                if builtin {
                    // The op's arguments: (src, rhs, mode 0, cols 1, out), the tag, the fault
                    // record (the CPU backend takes no lengths: `checked_lengths`).
                    let args = [
                        arg(0, false),
                        arg(1, false),
                        scalar(&0u32.to_ne_bytes()),
                        scalar(&1u32.to_ne_bytes()),
                        arg(2, true),
                        scalar(&1u32.to_ne_bytes()),
                        KernelArg::Buffer {
                            at: Some(at(&self.record)),
                            bytes: FAULT_WORDS * 4,
                            write: true,
                        },
                    ];
                    // SAFETY: the three buffers hold `n` f32 each, are aligned, and only
                    // this stream uses them; the output overlaps neither input; the kernel
                    // is the built-in binary add over (In<f32>, In<f32>, u32, u32,
                    // Out<f32>) with the checked convention's arguments after them (as the
                    // CPU backend takes them), and its record is a buffer of FAULT_WORDS
                    // words.
                    unsafe { backend.launch(s, &self.builtin, &cfg, &args)? };
                } else {
                    let args = [arg(0, false), arg(1, false), arg(2, true)];
                    // SAFETY: as above; the kernel is a CPU closure over (In<f32>,
                    // In<f32>, Out<f32>).
                    unsafe { backend.launch(s, &self.closure, &cfg, &args)? };
                }
                Ok(())
            },
            &mut || Ok(backend.stream_sync(s)?),
        )
    }

    fn check(&self) -> Res {
        let mut back = vec![0u8; self.bytes];
        // SAFETY: `back` has `bytes` writable bytes, and the stream is synced before it is
        // read.
        unsafe {
            self.backend.copy_d2h(
                &self.stream,
                at(&self.bufs[2]),
                back.as_mut_ptr(),
                self.bytes,
            )?
        };
        self.backend.stream_sync(&self.stream)?;
        let floats: Vec<f32> = back
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        check_sum(floats, "backend")
    }
}

/// The whole of a buffer as a launch argument's position.
fn at(buf: &<CpuBackend as Backend>::Buffer) -> BufAt<'_, CpuBackend> {
    BufAt { buf, offset: 0 }
}

/// A scalar launch argument from its bytes.
fn scalar(value: &[u8]) -> KernelArg<'static, CpuBackend> {
    KernelArg::scalar(value)
}

fn run() -> Res {
    let args = cli::parse_or_exit("enqueue_bench", USAGE, parse_args);
    let n = args.elems;

    // The facade: a context with one stream, and one with two (where every op also records
    // the event that orders other streams after it).
    let ctx = Context::new(DeviceSpec::Cpu(None))?;
    let mut facade = Way::new(&ctx, ctx.default_stream().clone(), n)?;
    let ctx2 = Context::new(DeviceSpec::Cpu(None))?;
    let mut multi = Way::new(&ctx2, ctx2.create_stream()?, n)?;
    // gpukit-core on the CPU backend, without the facade: `Stream::add`, and
    // `Stream::launch` of the closure kernel.
    let core = CpuBackend::context()?;
    let mut core_way = Way::new(&core, core.default_stream().clone(), n)?;
    let core2 = CpuBackend::context()?;
    let mut launch = Way::new(&core2, core2.default_stream().clone(), n)?;
    launch.add = Some(core2.kernel(add_spec())?);
    // The backend alone.
    let raw = Raw::new(n)?;

    let ways = ["facade", "facade with 2 streams", "core", "Stream::launch"];
    let (mut ns, mut base) = (vec![Vec::new(); ways.len()], Vec::new());
    let mut closure_base = Vec::new();
    pin_to_current_core();
    for _ in 0..args.rounds {
        ns[0].push(facade.round(args.ops)?);
        ns[1].push(multi.round(args.ops)?);
        ns[2].push(core_way.round(args.ops)?);
        base.push(raw.round(args.ops, true)?);
        ns[3].push(launch.round(args.ops)?);
        closure_base.push(raw.round(args.ops, false)?);
    }
    facade.check("facade")?;
    multi.check("facade, two streams")?;
    core_way.check("core")?;
    launch.check("Stream::launch")?;
    raw.check()?;

    // The ratio is the median of each round's ratio to the baseline's round beside it, so
    // that the machine's drift between rounds (frequency, other load) cancels.
    let mut records: Vec<Record> = ways
        .iter()
        .zip(ns)
        .map(|(way, ns)| {
            let (name, against) = if *way == "Stream::launch" {
                (
                    "a closure kernel via Stream::launch vs Backend::launch of it".to_owned(),
                    &closure_base,
                )
            } else {
                (
                    format!("add_f32_{n} via {way} vs Backend::launch of its kernel"),
                    &base,
                )
            };
            Record {
                backend: "cpu",
                name,
                ratio: median_or_nan(ns.iter().zip(against).map(|(o, b)| o / b).collect()),
                ours_ns: median_or_nan(ns),
                baseline_ns: median_or_nan(against.clone()),
            }
        })
        .collect();
    println!(
        "enqueue_bench: cpu backend, {} ops of add over {n} f32 queued behind a gate, medians of {} rounds",
        args.ops, args.rounds
    );
    println!(
        "  Backend::launch of add's kernel {:6.0} ns per op; of the closure kernel {:6.0}",
        median_or_nan(base.clone()),
        median_or_nan(closure_base.clone())
    );
    for (way, r) in ways.iter().zip(&records) {
        let target = if way.contains("2 streams") { 1.6 } else { 1.3 };
        let verdict = if r.ratio <= target { "holds" } else { "MISSED" };
        println!(
            "  {way:<23} {:8.0} ns per op  {:.2}x  (target <= {target}: {verdict})",
            r.ours_ns, r.ratio
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
    Ok(())
}
