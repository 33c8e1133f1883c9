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
//! - `backend` (the baseline): `Backend::op` called on the CPU backend's own stream with
//!   the op's descriptor, which builds the same task and pushes it onto the same kind of
//!   queue, with none of the library's safety around it.
//!
//! The ratios `facade / backend` and `core / backend` are the cost of the safe layers; the
//! target is at most 1.3 (SPEC: enqueue close to a raw launch).
//!
//! ```text
//! cargo run --release --example enqueue_bench -- [--json FILE] [--rounds N] [--ops N] [--elems N]
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpukit::core::{Backend, BinaryOp, BufAt, DType, KernelArg, Op, Rhs, Scalar};
use gpukit::cpu::CpuBackend;
use gpukit::{Context, DeviceSpec, KernelSpec, LaunchConfig, Shape};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::write_json;
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: enqueue_bench [options]

  --json FILE    write the records to FILE as JSON
  --rounds N     rounds per way, at least 5 (default 101)
  --ops N        ops queued per round, 1 to 250 (default 200; a CPU stream holds 256)
  --elems N      elements per op, at least 1 (default 1024)
  -h, --help     this text";

struct Args {
    json: Option<String>,
    rounds: usize,
    ops: usize,
    elems: usize,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        json: None,
        rounds: 101,
        ops: 200,
        elems: 1024,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("rounds") => args.rounds = cli.number("--rounds", "a count", 5..)?,
            Long("ops") => args.ops = cli.number("--ops", "a count", 1..=250)?,
            Long("elems") => args.elems = cli.number("--elems", "a count", 1..)?,
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

/// Holds the worker of the stream it runs on until the round opens it.
static GATE: AtomicBool = AtomicBool::new(false);

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

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
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
    let ctx = Context::new(DeviceSpec::Cpu)?;
    let fs = ctx.default_stream().clone();
    let (fa, fb) = (
        ctx.alloc_upload(&vec![1f32; n])?,
        ctx.alloc_upload(&vec![2f32; n])?,
    );
    let mut fc = ctx.alloc_zeros::<f32>(n)?;
    let fgate = ctx.kernel(gate_spec())?;
    let ctx2 = Context::new(DeviceSpec::Cpu)?;
    let ms = ctx2.create_stream()?;
    let (ma, mb) = (
        ctx2.alloc_upload(&vec![1f32; n])?,
        ctx2.alloc_upload(&vec![2f32; n])?,
    );
    let mut mc = ctx2.alloc_zeros::<f32>(n)?;
    let mgate = ctx2.kernel(gate_spec())?;

    // gpukit-core on the CPU backend, without the facade.
    let core = CpuBackend::context()?;
    let cs = core.default_stream().clone();
    let (ca, cb) = (
        core.alloc_upload(&vec![1f32; n])?,
        core.alloc_upload(&vec![2f32; n])?,
    );
    let mut cc = core.alloc_zeros::<f32>(n)?;
    let cgate = core.kernel(gate_spec())?;

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
    let at = |buf| BufAt { buf, offset: 0 };
    for (buf, value) in [(&ba, 1f32), (&bb, 2f32)] {
        let fill = Op::Fill {
            out: at(buf),
            len: n,
            value: Scalar::new(value),
        };
        // SAFETY: the buffer holds `n` aligned f32 and only this stream uses it.
        unsafe { backend.op(&bs, DType::F32, &fill)? };
    }

    let (mut facade, mut multi, mut core_ns, mut raw) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        facade.push(round(
            args.ops,
            &mut || Ok(fs.launch(&fgate, one, (0u32,))?),
            &mut || Ok(fs.add(&fa, &fb, &mut fc)?),
            &mut || Ok(fs.sync()?),
        )?);
        multi.push(round(
            args.ops,
            &mut || Ok(ms.launch(&mgate, one, (0u32,))?),
            &mut || Ok(ms.add(&ma, &mb, &mut mc)?),
            &mut || Ok(ms.sync()?),
        )?);
        core_ns.push(round(
            args.ops,
            &mut || Ok(cs.launch(&cgate, one, (0u32,))?),
            &mut || Ok(cs.add(&ca, &cb, &mut cc)?),
            &mut || Ok(cs.sync()?),
        )?);
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
                let op = Op::Binary {
                    op: BinaryOp::Add,
                    src: Some(at(&ba)),
                    rhs: Rhs::Array(at(&bb)),
                    out: at(&bc),
                    shape: Shape::new(1, n),
                };
                // SAFETY: the three buffers hold `n` f32 each, are aligned, and only this
                // stream uses them; `bc` overlaps neither input.
                unsafe { backend.op(&bs, DType::F32, &op)? };
                Ok(())
            },
            &mut || Ok(backend.stream_sync(&bs)?),
        )?);
    }
    let check = |got: Vec<f32>, who: &str| -> Res {
        if got.iter().any(|&v| v != 3.0) {
            return Err(format!("{who}: a + b is not 3 everywhere").into());
        }
        Ok(())
    };
    check(fc.download()?, "facade")?;
    check(mc.download()?, "facade, two streams")?;
    check(cc.download()?, "core")?;
    let mut back = vec![0u8; bytes];
    // SAFETY: `back` has `bytes` writable bytes, and the stream is synced before it is read.
    unsafe { backend.copy_d2h(&bs, at(&bc), back.as_mut_ptr(), bytes)? };
    backend.stream_sync(&bs)?;
    let floats: Vec<f32> = back
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    check(floats, "backend")?;

    let baseline = median(raw);
    let records: Vec<Record> = [
        ("facade", median(facade)),
        ("facade with 2 streams", median(multi)),
        ("core", median(core_ns)),
    ]
    .into_iter()
    .map(|(way, ns)| Record {
        backend: "cpu",
        name: format!("add_f32_{n} via {way} vs Backend::op"),
        ours_ns: ns,
        baseline_ns: baseline,
        ratio: ns / baseline,
    })
    .collect();
    println!(
        "enqueue_bench: cpu backend, {} ops of add over {n} f32 queued behind a gate, medians of {} rounds",
        args.ops, args.rounds
    );
    println!("  Backend::op (baseline)  {baseline:8.0} ns per op");
    for r in &records {
        let verdict = if r.ratio <= 1.3 { "holds" } else { "MISSED" };
        println!(
            "  {:<23} {:8.0} ns per op  {:.2}x  (target <= 1.3: {verdict})",
            r.name
                .split(" via ")
                .nth(1)
                .and_then(|w| w.strip_suffix(" vs Backend::op"))
                .unwrap_or(&r.name),
            r.ours_ns,
            r.ratio
        );
    }
    if let Some(path) = &args.json {
        write_json(path, &records)?;
    }
    backend.destroy_stream(bs)?;
    Ok(())
}
