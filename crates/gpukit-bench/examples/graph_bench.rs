//! Host cost per op of a chain of small ops, queued eagerly and replayed from a graph, in
//! the same process.
//!
//! The chain is `--ops` built-in ops (default 100: `scale`, `add_scalar_inplace`,
//! `relu_inplace`, `add_inplace`, in turn) over two arrays of `--len` f32s (default 256):
//! small enough that the device work is negligible and the host's enqueue cost is what is
//! measured. For each of `--runs` runs (median reported):
//!
//! - `eager`: the host time to queue the whole chain op by op (the sync after it not
//!   counted), divided by the ops;
//! - `replay`: the host time of one `Graph::launch` of the captured chain, divided by the
//!   ops;
//! - `eager_total` / `replay_total`: queue and sync, per op (what a loop of steps sees).
//!
//! The ratio `eager / replay` is how much cheaper a replayed op is (target on CUDA: at
//! least 5). Every replay's result is checked against the eager run's, bit for bit. The
//! Vulkan backend has no graphs: there the program prints `SKIPPED`.
//!
//! ```text
//! cargo run --release --example graph_bench -- [--device SPEC] [--ops N] [--len N] [--runs N] [--json FILE]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use gpukit::{Context, DeviceSpec, Error, GpuArray, Stream};
use gpukit_bench::write_json;
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};
use gpukit_examples::median;
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: graph_bench [options]

  --device SPEC  the device to measure: auto | cpu | cuda[:N] | vulkan[:N] (default cpu)
  --ops N        ops in the chain, 1 to 100000 (default 100)
  --len N        elements per array, 1 to 16777216 (default 256)
  --runs N       runs, at least 5 (default 51); the median is reported
  --json FILE    write the record to FILE as JSON
  -h, --help     this text";

struct Args {
    device: DeviceSpec,
    ops: usize,
    len: usize,
    runs: usize,
    json: Option<String>,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cpu(None),
        ops: 100,
        len: 256,
        runs: 51,
        json: None,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("device") => args.device = cli.device("--device", ANY_DEVICE, |_| true)?,
            Long("ops") => args.ops = cli.number("--ops", "a count", 1..=100_000)?,
            Long("len") => args.len = cli.number("--len", "a length", 1..=1 << 24)?,
            Long("runs") => args.runs = cli.number("--runs", "a count", 5..)?,
            Long("json") => args.json = Some(cli.string("--json")?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// The measurement, as written to the JSON report.
#[derive(Serialize)]
struct Record {
    backend: &'static str,
    device: String,
    ops: usize,
    len: usize,
    runs: usize,
    eager_us_per_op: f64,
    replay_us_per_op: f64,
    eager_total_us_per_op: f64,
    replay_total_us_per_op: f64,
    ratio_eager_vs_replay: f64,
    ratio_total: f64,
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("graph_bench", run())
}

/// Queues the chain of `ops` ops on `s`.
fn chain(s: &Stream, ops: usize, x: &mut GpuArray<f32>, y: &GpuArray<f32>) -> gpukit::Result<()> {
    for i in 0..ops {
        match i % 4 {
            0 => s.scale(0.5f32, x)?,
            1 => s.add_scalar_inplace(x, 0.25f32)?,
            2 => s.relu_inplace(x)?,
            _ => s.add_inplace(x, y)?,
        }
    }
    Ok(())
}

fn run() -> Res {
    let args = cli::parse_or_exit("graph_bench", USAGE, parse_args);
    let ctx = match Context::new(args.device) {
        Ok(ctx) => ctx,
        Err(e @ Error::Unavailable { .. }) if !matches!(args.device, DeviceSpec::Cpu(_)) => {
            println!("SKIPPED: graph_bench on {}: {e}", args.device);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let s = ctx.create_stream()?;
    let init: Vec<f32> = (0..args.len).map(|i| (i % 17) as f32 - 8.0).collect();
    let y = ctx.alloc_upload(&init)?;

    // Eager: queue the chain op by op.
    let mut xe = ctx.alloc_upload(&init)?;
    let (mut eager, mut eager_total) = (Vec::new(), Vec::new());
    for _ in 0..=args.runs {
        let t = Instant::now();
        chain(&s, args.ops, &mut xe, &y)?;
        let queued = t.elapsed().as_secs_f64();
        s.sync()?;
        eager.push(queued);
        eager_total.push(t.elapsed().as_secs_f64());
    }

    // Replay: the same chain, captured once, from the same start.
    let mut xr = ctx.alloc_upload(&init)?;
    let graph = match s.capture(|s| chain(s, args.ops, &mut xr, &y)) {
        Ok(g) => g,
        Err(e @ Error::Unsupported { .. }) => {
            println!("SKIPPED: graph_bench on {}: {e}", ctx.backend_name());
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let (mut replay, mut replay_total) = (Vec::new(), Vec::new());
    for _ in 0..=args.runs {
        let t = Instant::now();
        graph.launch(&s)?;
        let queued = t.elapsed().as_secs_f64();
        s.sync()?;
        replay.push(queued);
        replay_total.push(t.elapsed().as_secs_f64());
    }
    drop(graph);
    let (want, got) = (xe.download()?, xr.download()?);
    if want
        .iter()
        .zip(&got)
        .any(|(a, b)| a.to_bits() != b.to_bits())
    {
        return Err("the replayed chain's result differs from the eager chain's".into());
    }

    // The first run of each warms up.
    let per_op = |v: &mut Vec<f64>| -> f64 {
        let mut rest = v.split_off(1);
        median(&mut rest).unwrap_or(f64::NAN) * 1e6 / args.ops as f64
    };
    let (e, et) = (per_op(&mut eager), per_op(&mut eager_total));
    let (r, rt) = (per_op(&mut replay), per_op(&mut replay_total));
    let record = Record {
        backend: ctx.backend_name(),
        device: ctx.info().name.clone(),
        ops: args.ops,
        len: args.len,
        runs: args.runs,
        eager_us_per_op: e,
        replay_us_per_op: r,
        eager_total_us_per_op: et,
        replay_total_us_per_op: rt,
        ratio_eager_vs_replay: e / r,
        ratio_total: et / rt,
    };
    println!(
        "graph_bench: {} backend ({}), a chain of {} ops over {} f32, medians of {} runs",
        record.backend, record.device, args.ops, args.len, args.runs
    );
    println!(
        "  host us per op, queueing:       eager {e:>8.3}   replay {r:>8.3}   eager/replay {:>7.1}x",
        e / r
    );
    println!(
        "  host us per op, queue and sync: eager {et:>8.3}   replay {rt:>8.3}   eager/replay {:>7.1}x",
        et / rt
    );
    if let Some(path) = &args.json {
        write_json(path, &[record])?;
    }
    Ok(())
}
