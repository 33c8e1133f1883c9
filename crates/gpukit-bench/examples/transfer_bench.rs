//! Transfer throughput of a backend against `memcpy` in the same process.
//!
//! For each size, the median wall time of repeated runs of:
//! - `memcpy`: `copy_nonoverlapping` between two host buffers (the baseline);
//! - `d2d`: `Stream::copy` between two device arrays, then `sync`;
//! - `upload` / `download`: an asynchronous copy from / to a pinned [`gpukit::HostBuffer`]
//!   (`HostUse::Upload` / `Download`), then `Pending::wait`;
//! - `upload_slice`: the blocking `GpuArray::upload` from a borrowed slice;
//! - `add`: the built-in op `out = a + b` on device arrays, then `sync`; it moves three
//!   arrays' worth of bytes where memcpy moves two, so its ratio is `1.5 x t_memcpy / t_add`
//!   (1.00 = bytes through memory as fast as memcpy).
//!
//! Each is printed as a ratio of memcpy's throughput (1.00 = as fast as memcpy). On the CPU
//! backend every copy is a memcpy run by a stream's worker thread, so the ratio measures
//! what the queue, the hand-off to the worker and the wake-up cost.
//!
//! ```text
//! cargo run --release --example transfer_bench -- [--device SPEC] [--json FILE] [--max-mib N] [--runs N]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use gpukit::{Context, DeviceSpec, HostUse};
use gpukit_bench::{gbps, median_seconds, write_json};
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};
use gpukit_examples::{fmt_bytes, median};
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: transfer_bench [options]

  --device SPEC  the device to measure: auto | cpu | cuda[:N] | vulkan[:N] (default cpu)
  --json FILE    write the records to FILE as JSON
  --max-mib N    the largest size, in MiB: 1 to 65536 (default 256)
  --runs N       runs per size below 64 MiB, at least 11 (default 15); from 64 MiB on,
                 where one run is long, every size runs 11 times
  -h, --help     this text";

/// Runs of the sizes from [`LARGE`] on, and the fewest runs of the smaller ones.
const MIN_RUNS: usize = 11;
/// The sizes that run [`MIN_RUNS`] times whatever `--runs` says.
const LARGE: usize = 64 << 20;

struct Args {
    device: DeviceSpec,
    json: Option<String>,
    max_bytes: usize,
    runs: usize,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cpu(None),
        json: None,
        max_bytes: 256 << 20,
        runs: 15,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("device") => args.device = cli.device("--device", ANY_DEVICE, |_| true)?,
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("max-mib") => {
                args.max_bytes = cli.number::<usize>("--max-mib", "a size in MiB", 1..=65536)? << 20
            }
            Long("runs") => args.runs = cli.number("--runs", "a count", MIN_RUNS..)?,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// One measurement, as written to the JSON report.
#[derive(Serialize)]
struct Record {
    backend: &'static str,
    kind: &'static str,
    bytes: usize,
    seconds: f64,
    gbps: f64,
    memcpy_seconds: f64,
    ratio_vs_memcpy: f64,
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("transfer_bench", run())
}

/// Runs per size: `--runs` for a stable median at small sizes, [`MIN_RUNS`] where one run
/// is long.
fn runs_for(bytes: usize, runs: usize) -> usize {
    if bytes >= LARGE {
        MIN_RUNS
    } else {
        runs
    }
}

fn run() -> Res {
    let args = cli::parse_or_exit("transfer_bench", USAGE, parse_args);
    let ctx = match Context::new(args.device) {
        Ok(ctx) => ctx,
        // A GPU that is not there is a skip, as the tests report it, not a failure.
        Err(e @ gpukit::Error::Unavailable { .. })
            if !matches!(args.device, DeviceSpec::Cpu(_)) =>
        {
            println!("SKIPPED: transfer_bench on {}: {e}", args.device);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "transfer_bench: {} backend, device {} ({}), medians of {} runs ({MIN_RUNS} from {})",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name,
        args.runs,
        fmt_bytes(LARGE)
    );
    println!(
        "{:>10} {:>12} {:>8} {:>8} {:>10} {:>13} {:>8}",
        "size", "memcpy GB/s", "d2d", "upload", "download", "upload_slice", "add"
    );

    let s = ctx.create_stream()?;
    let mut records = Vec::new();
    let mut large = Vec::new();
    let mut bytes = 4 << 10;
    while bytes <= args.max_bytes {
        let n = bytes / 4;
        let runs = runs_for(bytes, args.runs);

        // Baseline: memcpy between two touched host buffers.
        let src = vec![1.0f32; n];
        let mut dst = vec![0.0f32; n];
        let t_memcpy = median_seconds::<std::convert::Infallible>(runs, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
            Ok(())
        })?;

        let a = ctx.alloc_upload(&src)?;
        let mut b = ctx.alloc_zeros::<f32>(n)?;
        let t_d2d = median_seconds(runs, || {
            s.copy(&a, &mut b)?;
            s.sync()
        })?;

        let mut host_up = Some(ctx.alloc_host::<f32>(n, HostUse::Upload)?);
        let t_upload = median_seconds(runs, || -> Res {
            let h = host_up.take().ok_or("upload buffer lost")?;
            host_up = Some(s.upload(h, &mut b)?.wait()?);
            Ok(())
        })?;

        let mut host_down = Some(ctx.alloc_host::<f32>(n, HostUse::Download)?);
        let t_download = median_seconds(runs, || -> Res {
            let h = host_down.take().ok_or("download buffer lost")?;
            host_down = Some(s.download(&a, h)?.wait()?);
            Ok(())
        })?;
        let ok = host_down
            .as_ref()
            .is_some_and(|h| h.iter().all(|&v| v == 1.0));
        if !ok {
            return Err("downloaded data differs from what was uploaded".into());
        }

        let t_slice = median_seconds(runs, || b.upload(&src))?;

        let mut c = ctx.alloc_zeros::<f32>(n)?;
        let t_add = median_seconds(runs, || {
            s.add(&a, &b, &mut c)?;
            s.sync()
        })?;
        if c.download()?.iter().any(|&v| v != 2.0) {
            return Err("add gave a wrong sum".into());
        }

        let ratio = |t: f64| t_memcpy / t;
        // `add` moves 3 arrays (2 read, 1 written) where memcpy moves 2.
        let add_ratio = 1.5 * ratio(t_add);
        println!(
            "{:>10} {:>12.2} {:>8.2} {:>8.2} {:>10.2} {:>13.2} {:>8.2}",
            fmt_bytes(bytes),
            gbps(bytes, t_memcpy),
            ratio(t_d2d),
            ratio(t_upload),
            ratio(t_download),
            ratio(t_slice),
            add_ratio
        );
        for (kind, t, r) in [
            ("d2d", t_d2d, ratio(t_d2d)),
            ("upload_pinned", t_upload, ratio(t_upload)),
            ("download_pinned", t_download, ratio(t_download)),
            ("upload_slice", t_slice, ratio(t_slice)),
            ("add", t_add, add_ratio),
        ] {
            records.push(Record {
                backend: ctx.backend_name(),
                kind,
                bytes,
                seconds: t,
                gbps: gbps(bytes, t),
                memcpy_seconds: t_memcpy,
                ratio_vs_memcpy: r,
            });
            if bytes >= 8 << 20 {
                large.push((kind, r));
            }
        }
        bytes *= 4;
    }

    if !large.is_empty() {
        println!("median ratio vs memcpy at >= 8 MiB:");
        for kind in [
            "d2d",
            "upload_pinned",
            "download_pinned",
            "upload_slice",
            "add",
        ] {
            let mut r: Vec<f64> = large
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, r)| *r)
                .collect();
            if let Some(m) = median(&mut r) {
                println!("  {kind:<16} {m:.3}x");
            }
        }
    }
    if let Some(path) = &args.json {
        let t = Instant::now();
        write_json(path, &records)?;
        println!(
            "wrote {} records to {path} in {:?}",
            records.len(),
            t.elapsed()
        );
    }
    ctx.close()?;
    Ok(())
}
