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
//!
//! Also `ops_bench` on the CPU (built-in ops against memcpy, gemm against other gemms and
//! numpy; `ops_bench.json`) and, once `examples/enqueue_bench.rs` exists (checked when the
//! command runs), `enqueue_bench` (`enqueue_bench.json`). After the runs it prints one table
//! of every ratio with its target and verdict ([`table`]), between the load averages taken
//! at the start and the end, and writes it to `summary.json`; `--table-only` prints it from
//! the reports already there, without running anything. A missed target is in the table,
//! not a failure.

use std::fs;
use std::path::{Path, PathBuf};

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

mod table;

/// Where the JSON report goes when `--json` is not given, relative to the workspace root.
const DEFAULT_JSON: &str = "target/bench/transfer_bench.json";

/// Runs `cargo xtask bench [--json FILE] [-- extra args]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let (mut cli, extra) = Cli::with_passthrough(args);
    let mut json: Option<PathBuf> = None;
    let mut table_only = false;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("json") => json = Some(PathBuf::from(cli.string("--json")?)),
            Long("table-only") => table_only = true,
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

    let reports = table::Reports {
        transfer: json.clone(),
        dir: json.parent().unwrap_or(root).to_path_buf(),
    };
    if table_only {
        println!("bench: --table-only: from the reports already there; the load is today's");
        let load = table::load_average();
        return print_table(&reports, &load, &load);
    }
    let load_start = table::load_average();
    println!("bench: load average (1, 5, 15 min) at start: {load_start}");

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
    // Without a GPU it skips and writes nothing: no stale report may pass for this run's.
    run_reporting(root, "cuda_bench", &[], &cuda_json)?;
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
    let ops_json = json.with_file_name("ops_bench.json");
    run_reporting(root, "ops_bench", &["--device", "cpu"], &ops_json)?;
    // The CPU enqueue cost against a direct push onto the worker, once the program exists.
    let enqueue_json = json.with_file_name("enqueue_bench.json");
    if root.join(ENQUEUE_BENCH).is_file() {
        run_reporting(root, "enqueue_bench", &[], &enqueue_json)?;
    } else {
        let _ = fs::remove_file(&enqueue_json);
        println!("bench: no {ENQUEUE_BENCH} yet; its rows are n/a");
    }
    for report in [
        &json,
        &vulkan_json,
        &cuda_json,
        &pipeline_json,
        &pipeline_cuda_json,
        &graph_json,
        &graph_cuda_json,
        &ops_json,
        &enqueue_json,
    ] {
        if report.is_file() {
            println!("bench: JSON report in {}", report.display());
        }
    }
    print_table(&reports, &load_start, &table::load_average())
}

/// The source of the CPU enqueue benchmark, relative to the workspace root.
const ENQUEUE_BENCH: &str = "examples/enqueue_bench.rs";

/// Prints the table of every ratio and its target from `reports` and writes it to
/// `summary.json` beside them.
fn print_table(reports: &table::Reports, load_start: &str, load_end: &str) -> Result {
    let rows = table::rows(reports);
    util::header("bench summary");
    print!("{}", table::render(&rows, load_start, load_end));
    let path = reports.dir.join("summary.json");
    let text = serde_json::to_string_pretty(&table::to_json(&rows, load_start, load_end))
        .map_err(|err| Failure::new(format!("could not write the summary as JSON: {err}")))?;
    fs::write(&path, text + "\n")
        .map_err(|err| Failure::new(format!("could not write `{}`: {err}", path.display())))?;
    println!("bench: summary in {}", path.display());
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
