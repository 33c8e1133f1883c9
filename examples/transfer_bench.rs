//! Transfer throughput of a backend against `memcpy` in the same process.
//!
//! For each size, the median wall time of repeated runs of:
//! - `memcpy`: `copy_nonoverlapping` between two host buffers (the baseline);
//! - `d2d`: `Stream::copy` between two device arrays, then `sync`;
//! - `upload` / `download`: an asynchronous copy from / to a pinned [`gpukit::HostBuffer`]
//!   (`HostUse::Upload` / `Download`), then `Pending::wait`;
//! - `upload_slice`: the blocking `GpuArray::upload` from a borrowed slice.
//!
//! Each is printed as a ratio of memcpy's throughput (1.00 = as fast as memcpy). On the CPU
//! backend every copy is a memcpy run by a stream's worker thread, so the ratio measures
//! what the queue, the hand-off to the worker and the wake-up cost.
//!
//! ```text
//! cargo run --release --example transfer_bench -- [--device cpu] [--json FILE] [--max-mib N] [--runs N]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use gpukit::{Context, DeviceSpec, HostUse};
use gpukit_examples::{fmt_bytes, gbps, median_seconds, to_json, Json};

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    device: DeviceSpec,
    json: Option<String>,
    max_bytes: usize,
    runs: usize,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        device: DeviceSpec::Cpu,
        json: None,
        max_bytes: 256 << 20,
        runs: 15,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--device" => args.device = value("--device")?.parse()?,
            "--json" => args.json = Some(value("--json")?),
            "--max-mib" => args.max_bytes = value("--max-mib")?.parse::<usize>()? << 20,
            "--runs" => args.runs = value("--runs")?.parse()?,
            "-h" | "--help" => {
                println!(
                    "usage: transfer_bench [--device SPEC] [--json FILE] [--max-mib N] [--runs N]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("transfer_bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs per size: enough for a stable median at small sizes, fewer where one run is long.
fn runs_for(bytes: usize, base: usize) -> usize {
    if bytes >= 64 << 20 {
        base.min(11)
    } else {
        base.max(11)
    }
}

fn run() -> Res {
    let args = parse_args()?;
    let ctx = Context::new(args.device)?;
    println!(
        "transfer_bench: {} backend, device {} ({}), medians of >= 11 runs",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name
    );
    println!(
        "{:>10} {:>12} {:>8} {:>8} {:>10} {:>13}",
        "size", "memcpy GB/s", "d2d", "upload", "download", "upload_slice"
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

        let ratio = |t: f64| t_memcpy / t;
        println!(
            "{:>10} {:>12.2} {:>8.2} {:>8.2} {:>10.2} {:>13.2}",
            fmt_bytes(bytes),
            gbps(bytes, t_memcpy),
            ratio(t_d2d),
            ratio(t_upload),
            ratio(t_download),
            ratio(t_slice)
        );
        for (kind, t) in [
            ("d2d", t_d2d),
            ("upload_pinned", t_upload),
            ("download_pinned", t_download),
            ("upload_slice", t_slice),
        ] {
            records.push(vec![
                ("backend", Json::Str(ctx.backend_name().into())),
                ("kind", Json::Str(kind.into())),
                ("bytes", Json::Num(bytes as f64)),
                ("seconds", Json::Num(t)),
                ("gbps", Json::Num(gbps(bytes, t))),
                ("memcpy_seconds", Json::Num(t_memcpy)),
                ("ratio_vs_memcpy", Json::Num(ratio(t))),
            ]);
            if bytes >= 8 << 20 {
                large.push((kind, ratio(t)));
            }
        }
        bytes *= 4;
    }

    if !large.is_empty() {
        println!("median ratio vs memcpy at >= 8 MiB:");
        for kind in ["d2d", "upload_pinned", "download_pinned", "upload_slice"] {
            let mut r: Vec<f64> = large
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, r)| *r)
                .collect();
            if let Some(m) = gpukit_examples::median(&mut r) {
                println!("  {kind:<16} {m:.3}x");
            }
        }
    }
    if let Some(path) = &args.json {
        let t = Instant::now();
        std::fs::write(path, to_json(&records)).map_err(|e| format!("cannot write {path}: {e}"))?;
        println!(
            "wrote {} records to {path} in {:?}",
            records.len(),
            t.elapsed()
        );
    }
    ctx.close()?;
    Ok(())
}
