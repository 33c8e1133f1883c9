//! Start-up: how long a fresh process takes from `main` to an open context and to its first
//! op's result, for each way of choosing a device, and what the probe prints.
//!
//! Each run is a child process of this program (`--child`), so every figure includes the
//! probes a real program pays once per process (the CUDA driver's, the Vulkan instance and
//! its adapters) and nothing is warm but the operating system's file cache. The child times
//! `Context::default()` with `GPU_DEVICE` set to the device (`open_ms`), then an upload of
//! 1024 floats, an add and the download of the result (`first_result_ms`), both from the
//! first line of its `main`. The parent also times each child from spawn to exit
//! (`process_ms`) beside a child that exits at once (`empty_process_ms`: the process's own
//! cost, not the library's), and counts the lines the child printed on stderr
//! (`stderr_lines`: a driver's noise, which a program that asked for `cpu` must not see).
//! Medians over `--runs` children per device; the devices alternate run by run.
//!
//! `probe:cuda` and `probe:vulkan` time one backend's probe alone in a fresh process (what
//! `auto` pays for it), so `auto`'s time can be read as its parts.
//!
//! Target: `GPU_DEVICE=cpu` reaches its first result in under 20 ms. `auto` and `vulkan`
//! pay the Vulkan probe (creating an instance and listing adapters, lavapipe's included);
//! `auto` without a CUDA driver also pays the CUDA probe's search for the library.
//!
//! ```text
//! cargo run --release --example startup_bench -- [--json FILE] [--runs N] [--devices LIST]
//! ```

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use gpukit::Context;
use gpukit_bench::{median_or_nan, write_json};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: startup_bench [options]

  --json FILE      write the records to FILE as JSON
  --runs N         child processes per device, at least 3 (default 11)
  --devices LIST   the GPU_DEVICE values, comma-separated (default
                   cpu,auto,vulkan,probe:cuda,probe:vulkan; probe:NAME times that probe
                   alone: its backend column says whether it found a device)
  -h, --help       this text";

/// The target for `GPU_DEVICE=cpu`: its first result within this many milliseconds.
const CPU_TARGET_MS: f64 = 20.0;

struct Args {
    json: Option<String>,
    runs: usize,
    devices: Vec<String>,
    /// Set in a child: the device it opens (`none`: exit at once).
    child: Option<String>,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        json: None,
        runs: 11,
        devices: ["cpu", "auto", "vulkan", "probe:cuda", "probe:vulkan"]
            .into_iter()
            .filter(|d| compiled_in(d))
            .map(String::from)
            .collect(),
        child: None,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("runs") => args.runs = cli.number("--runs", "a count", 3..)?,
            Long("devices") => {
                args.devices = cli
                    .string("--devices")?
                    .split(',')
                    .map(|d| d.trim().to_owned())
                    .filter(|d| !d.is_empty())
                    .collect();
            }
            Long("child") => args.child = Some(cli.string("--child")?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

#[derive(Serialize)]
struct Record {
    device: String,
    /// The backend `Context::default()` chose.
    backend: String,
    open_ms: f64,
    first_result_ms: f64,
    process_ms: f64,
    empty_process_ms: f64,
    stderr_lines: usize,
    /// The target of `first_result_ms`, where there is one.
    target_ms: Option<f64>,
    runs: usize,
}

/// A child that times one probe alone (`probe:cuda`, `probe:vulkan`), as `auto` runs it
/// first in a process; prints `found|none ms ms` (the probe, twice: it has no first result).
fn probe_child(which: &str) -> Res {
    let start = Instant::now();
    let found = match which {
        "probe:cuda" => cuda_probe(),
        "probe:vulkan" => vulkan_probe(),
        _ => None,
    }
    .ok_or_else(|| format!("no probe {which} in this build"))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    println!("{} {ms} {ms}", if found { "found" } else { "none" });
    Ok(())
}

/// Whether the CUDA probe found a device (`None`: not compiled in).
fn cuda_probe() -> Option<bool> {
    #[cfg(feature = "cuda")]
    return Some(gpukit::cuda::probe().is_ok());
    #[cfg(not(feature = "cuda"))]
    None
}

/// Whether the Vulkan probe found an adapter (`None`: not compiled in).
fn vulkan_probe() -> Option<bool> {
    #[cfg(feature = "vulkan")]
    return Some(gpukit::wgpu::probe().is_ok());
    #[cfg(not(feature = "vulkan"))]
    None
}

/// The child: opens the device `GPU_DEVICE` names and prints `backend open_ms first_ms`.
fn child() -> Res {
    let start = Instant::now();
    let ctx = Context::default()?;
    let open = start.elapsed();
    let a = ctx.alloc_upload(&[1.5f32; 1024])?;
    let mut out = ctx.alloc_zeros::<f32>(1024)?;
    ctx.add(&a, &a, &mut out)?;
    let host = out.download()?;
    let first = start.elapsed();
    if host[1023] != 3.0 {
        return Err(format!("the first result is {}, not 3", host[1023]).into());
    }
    println!(
        "{} {} {}",
        ctx.backend_name(),
        open.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Whether this build has the backend `device` names (`vulkan`, `probe:cuda`, ...).
fn compiled_in(device: &str) -> bool {
    if device.contains("vulkan") {
        return cfg!(feature = "vulkan");
    }
    if device.contains("cuda") {
        return cfg!(feature = "cuda");
    }
    true
}

/// What one child run measured.
#[derive(Clone)]
struct Sample {
    backend: String,
    open_ms: f64,
    first_ms: f64,
    process_ms: f64,
    stderr_lines: usize,
}

/// One child run for `device`.
fn spawn(device: &str) -> Res<Sample> {
    let exe = std::env::current_exe()?;
    let start = Instant::now();
    let out = Command::new(exe)
        .args(["--child", device])
        .env("GPU_DEVICE", device)
        .stdin(Stdio::null())
        .output()?;
    let process = start.elapsed().as_secs_f64() * 1e3;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("the child for {device} failed ({}): {stderr}", out.status).into());
    }
    let lines = stderr.lines().filter(|l| !l.trim().is_empty()).count();
    if device == "none" {
        return Ok(Sample {
            backend: String::new(),
            open_ms: 0.0,
            first_ms: 0.0,
            process_ms: process,
            stderr_lines: lines,
        });
    }
    let mut words = stdout.split_whitespace();
    let backend = words.next().unwrap_or("?").to_owned();
    let mut number = || -> Res<f64> {
        Ok(words
            .next()
            .ok_or_else(|| format!("the child for {device} printed {stdout:?}"))?
            .parse::<f64>()?)
    };
    let (open_ms, first_ms) = (number()?, number()?);
    Ok(Sample {
        backend,
        open_ms,
        first_ms,
        process_ms: process,
        stderr_lines: lines,
    })
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("startup_bench", run())
}

fn run() -> Res {
    let args = cli::parse_or_exit("startup_bench", USAGE, parse_args);
    if let Some(device) = &args.child {
        return match device.as_str() {
            "none" => Ok(()),
            d if d.starts_with("probe:") => probe_child(d),
            _ => child(),
        };
    }
    let n = args.devices.len();
    let mut empty = Vec::new();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); n];
    // One warm-up round (the binary and the libraries into the file cache), not counted.
    spawn("none")?;
    for d in &args.devices {
        spawn(d)?;
    }
    for _ in 0..args.runs {
        empty.push(spawn("none")?.process_ms);
        for (k, d) in args.devices.iter().enumerate() {
            samples[k].push(spawn(d)?);
        }
    }
    let empty_ms = median_or_nan(empty);
    println!(
        "start-up, {} children per device (medians; an empty child process: {empty_ms:.1} ms)",
        args.runs
    );
    println!(
        "  {:<12} {:<8} {:>9} {:>14} {:>11} {:>7}",
        "device", "backend", "open ms", "first result", "process ms", "stderr"
    );
    let mut records = Vec::new();
    for (d, s) in args.devices.iter().zip(samples) {
        let backend = s.first().map(|x| x.backend.clone()).unwrap_or_default();
        let column = |f: fn(&Sample) -> f64| median_or_nan(s.iter().map(f).collect());
        let record = Record {
            device: d.clone(),
            backend,
            open_ms: column(|x| x.open_ms),
            first_result_ms: column(|x| x.first_ms),
            process_ms: column(|x| x.process_ms),
            empty_process_ms: empty_ms,
            stderr_lines: s.iter().map(|x| x.stderr_lines).max().unwrap_or(0),
            target_ms: (d == "cpu").then_some(CPU_TARGET_MS),
            runs: args.runs,
        };
        let verdict = match record.target_ms {
            Some(t) if record.first_result_ms <= t => format!("  (target <= {t} ms: holds)"),
            Some(t) => format!("  (target <= {t} ms: MISSED)"),
            None => String::new(),
        };
        println!(
            "  {:<12} {:<8} {:>9.2} {:>11.2} ms {:>11.1} {:>7}{verdict}",
            record.device,
            record.backend,
            record.open_ms,
            record.first_result_ms,
            record.process_ms,
            record.stderr_lines
        );
        records.push(record);
    }
    if let Some(path) = &args.json {
        write_json(path, &records)?;
    }
    Ok(())
}
