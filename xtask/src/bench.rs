//! `cargo xtask bench`: builds and runs the benchmarks in release mode.
//!
//! The benchmarks are examples of the `gpukit-examples` package: `transfer_bench` (copies
//! and a built-in op against `memcpy`, on the device `--device` names, the CPU by default;
//! then again on `vulkan`, which prints `SKIPPED: <reason>` without a Vulkan driver,
//! reporting to `transfer_bench_vulkan.json`), `cuda_bench`
//! (the CUDA backend against raw cudarc; it prints `SKIPPED: <reason>` without a GPU) and
//! `graph_bench` (host cost per op of a chain of 100 small ops, eager vs replayed from a
//! graph; `graph_bench.json`, `graph_bench_cuda.json`), and
//! `pipeline_bench` (every pipeline pattern against sequential over compute:transfer
//! ratios), run twice: `--backend cpu`, then `--backend cuda` (which skips without a GPU).
//! This fixes the build profile, picks where the JSON reports go (`FILE` for
//! transfer_bench; `cuda_bench.json`, `pipeline_bench.json` and `pipeline_bench_cuda.json`
//! beside it, creating the folder) and passes whatever follows `--` to transfer_bench. A
//! benchmark's failure becomes ours.

use std::fs;
use std::path::{Path, PathBuf};

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

/// Where the JSON report goes when `--json` is not given, relative to the workspace root.
const DEFAULT_JSON: &str = "target/bench/transfer_bench.json";

/// Runs `cargo xtask bench [--json FILE] [-- extra args]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let (mut cli, extra) = Cli::with_passthrough(args);
    let mut json: Option<PathBuf> = None;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("json") => json = Some(PathBuf::from(cli.string("--json")?)),
            other => return Err(other.unexpected().into()),
        }
    }

    let json = match json {
        // Cargo leaves us in the caller's directory, but the benchmark runs in the root.
        Some(path) => util::absolute(&path)?,
        None => root.join(DEFAULT_JSON),
    };
    if let Some(dir) = json.parent() {
        fs::create_dir_all(dir)
            .map_err(|err| Failure::new(format!("could not create `{}`: {err}", dir.display())))?;
    }

    let mut cmd = util::cargo(root);
    cmd.args(["run", "--release", "--package", "gpukit-examples"])
        .args(["--example", "transfer_bench", "--", "--json"])
        .arg(&json)
        .args(&extra);
    util::run(&mut cmd)?;
    // The same on the Vulkan backend (lavapipe where no GPU has a Vulkan driver).
    let vulkan_json = json.with_file_name("transfer_bench_vulkan.json");
    let _ = fs::remove_file(&vulkan_json);
    let mut cmd = util::cargo(root);
    cmd.args(["run", "--release", "--package", "gpukit-examples"])
        .args([
            "--example",
            "transfer_bench",
            "--",
            "--device",
            "vulkan",
            "--json",
        ])
        .arg(&vulkan_json)
        .args(&extra);
    util::run(&mut cmd)?;
    let cuda_json = json.with_file_name("cuda_bench.json");
    let mut cmd = util::cargo(root);
    cmd.args(["run", "--release", "--package", "gpukit-examples"])
        .args(["--example", "cuda_bench", "--", "--json"])
        .arg(&cuda_json);
    util::run(&mut cmd)?;
    let pipeline_json = json.with_file_name("pipeline_bench.json");
    let pipeline_cuda_json = json.with_file_name("pipeline_bench_cuda.json");
    for (backend, report) in [("cpu", &pipeline_json), ("cuda", &pipeline_cuda_json)] {
        run_reporting(root, "pipeline_bench", &["--backend", backend], report)?;
    }
    let graph_json = json.with_file_name("graph_bench.json");
    let graph_cuda_json = json.with_file_name("graph_bench_cuda.json");
    for (device, report) in [("cpu", &graph_json), ("cuda", &graph_cuda_json)] {
        run_reporting(root, "graph_bench", &["--device", device], report)?;
    }
    for report in [
        &json,
        &vulkan_json,
        &cuda_json,
        &pipeline_json,
        &pipeline_cuda_json,
        &graph_json,
        &graph_cuda_json,
    ] {
        if report.is_file() {
            println!("bench: JSON report in {}", report.display());
        }
    }
    Ok(())
}

/// Runs the benchmark `example` with `args` and `--json report`. A stale report from an
/// earlier run is removed first, so it cannot pass for this one's (a run that skips writes
/// none).
fn run_reporting(root: &Path, example: &str, args: &[&str], report: &Path) -> Result {
    let _ = fs::remove_file(report);
    let mut cmd = util::cargo(root);
    cmd.args(["run", "--release", "--package", "gpukit-examples"])
        .args(["--example", example, "--"])
        .args(args)
        .arg("--json")
        .arg(report);
    util::run(&mut cmd)
}
