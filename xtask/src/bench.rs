//! `cargo xtask bench`: builds and runs the benchmarks in release mode, prints one table of
//! every figure against its target, and with `--write-docs` regenerates
//! `docs/BENCHMARKS.md` from the JSON reports.
//!
//! The benchmarks are examples of the `gpukit-bench` package, run in the order of [`plan`]:
//! `transfer_bench` (copies and a built-in op against `memcpy`, on the CPU backend, then on
//! `vulkan`, which prints `SKIPPED: <reason>` without a Vulkan driver), `cuda_bench` (the
//! CUDA backend against raw cudarc, on a GPU, then on the CUDA emulator, where only its host
//! cost over raw, in nanoseconds per op, counts), `pipeline_bench` (every pipeline pattern against
//! sequential over compute:transfer ratios) and `graph_bench` (host cost per op, eager
//! against a replayed graph), each on the CPU and on CUDA, `ops_bench` (built-in ops against
//! memcpy, gemm against other gemms and numpy), `enqueue_bench` (the CPU enqueue cost
//! against pushing the same task onto the worker), `startup_bench` (a fresh process's time
//! to an open context and a first result, per device, and each probe alone),
//! `kernel_bench` (`#[kernel]`s against
//! hand-written kernels, on the CPU, Vulkan and CUDA) and `allreduce_bench` (all-reduce bus
//! bandwidth against memcpy, and data-parallel training against one device, on `cpu:0..2`
//! and on every CUDA device, through NCCL where it loads). Without a GPU the CUDA runs print
//! `SKIPPED` and write no report. `--quick` gives each program its own short form (fewer
//! sizes and runs). Arguments after `--` go to both `transfer_bench` runs.
//!
//! Reports: transfer_bench's CPU report goes to `--json FILE` (default
//! `target/bench/transfer_bench.json`), every other `NAME.json` beside it, and a stale report
//! is removed before its program runs, so a run that skips cannot pass for one that
//! measured. Beside them, `run.json` records the run (date, commit, toolchain, the machine,
//! `--quick`, the load averages, each program's arguments), and `summary.json` the table
//! ([`table`]), printed between the load averages at the start and the end. A missed target
//! is in the table, not a failure; a benchmark that fails fails the command.
//!
//! `--write-docs` writes the page ([`page`]) from those files; `--table-only` runs nothing
//! and prints the table (and with `--write-docs`, the page) from the files already there.

mod machine;
mod page;
mod table;

use std::fs;
use std::path::{Path, PathBuf};

use lexopt::Arg::Long;
use serde_json::Value;

use crate::gpu_bundle::{self, BENCH_PACKAGE};
use crate::util::{self, Cli, Failure, Result};

use page::{Run, RunInfo};

/// Where the JSON report goes when `--json` is not given, relative to the workspace root.
const DEFAULT_JSON: &str = "target/bench/transfer_bench.json";

/// What `cargo xtask bench` was asked for.
#[derive(Debug, Default, PartialEq)]
struct Options {
    json: Option<PathBuf>,
    table_only: bool,
    quick: bool,
    write_docs: bool,
    /// Arguments after `--`, for transfer_bench.
    extra: Vec<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options> {
        let (mut cli, extra) = Cli::with_passthrough(args);
        let mut options = Options {
            extra,
            ..Options::default()
        };
        while let Some(arg) = cli.next_arg()? {
            match arg {
                Long("json") => options.json = Some(PathBuf::from(cli.string("--json")?)),
                Long("table-only") => options.table_only = true,
                Long("quick") => options.quick = true,
                Long("write-docs") => options.write_docs = true,
                other => return Err(other.unexpected().into()),
            }
        }
        if options.table_only && (options.quick || !options.extra.is_empty()) {
            return Err(Failure::usage(
                "--table-only runs nothing: --quick and arguments after `--` have no effect",
            ));
        }
        Ok(options)
    }
}

/// The end of the name of a report made against the CUDA emulator.
pub const EMULATED: &str = "_emu";

/// The programs `cargo xtask bench` runs, in order, each with its arguments and report.
pub fn plan(quick: bool, transfer_args: &[String]) -> Vec<Run> {
    let run = |program: &str, args: &[&str], short: &[&str], report: &str| {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        if quick {
            all.extend(short.iter().map(|a| (*a).to_owned()));
        }
        Run {
            program: program.to_owned(),
            args: all,
            report: report.to_owned(),
        }
    };
    let mut runs = vec![
        run(
            "transfer_bench",
            &[],
            &["--max-mib", "16"],
            "transfer_bench",
        ),
        run(
            "transfer_bench",
            &["--device", "vulkan"],
            &["--max-mib", "16"],
            "transfer_bench_vulkan",
        ),
        run("cuda_bench", &[], &["--max-mib", "256"], "cuda_bench"),
        // The CUDA backend's host cost on the CUDA emulator (a report whose name ends in
        // `_emu` runs with the emulator in place of NVIDIA's libraries): only its
        // differences from raw cudarc mean anything there.
        run(
            "cuda_bench",
            &["--max-mib", "1", "--require"],
            &["--runs", "10"],
            "cuda_bench_emu",
        ),
        run(
            "pipeline_bench",
            &["--backend", "cpu"],
            &["--quick"],
            "pipeline_bench",
        ),
        run(
            "pipeline_bench",
            &["--backend", "cuda"],
            &["--quick"],
            "pipeline_bench_cuda",
        ),
        run("graph_bench", &["--device", "cpu"], &[], "graph_bench"),
        run(
            "graph_bench",
            &["--device", "cuda"],
            &[],
            "graph_bench_cuda",
        ),
        run("ops_bench", &["--device", "cpu"], &["--quick"], "ops_bench"),
        run("enqueue_bench", &[], &["--rounds", "21"], "enqueue_bench"),
        run("startup_bench", &[], &["--runs", "5"], "startup_bench"),
        run(
            "kernel_bench",
            &["--device", "cpu"],
            &["--runs", "7"],
            "kernel_bench",
        ),
        run(
            "kernel_bench",
            &["--device", "vulkan"],
            &["--runs", "7"],
            "kernel_bench_vulkan",
        ),
        run(
            "kernel_bench",
            &["--device", "cuda"],
            &["--runs", "7"],
            "kernel_bench_cuda",
        ),
        run("allreduce_bench", &[], &["--quick"], "allreduce_bench"),
        run(
            "allreduce_bench",
            &["--devices", "cuda:*"],
            &["--quick"],
            "allreduce_bench_cuda",
        ),
    ];
    for run in runs.iter_mut().filter(|r| r.program == "transfer_bench") {
        run.args.extend(transfer_args.iter().cloned());
    }
    runs
}

/// Runs `cargo xtask bench [--quick] [--json FILE] [--write-docs] [--table-only] [-- args]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let options = Options::parse(args)?;
    let json = match &options.json {
        // Cargo leaves us in the caller's directory, but the benchmark runs in the root.
        Some(path) => util::absolute(path)?,
        None => root.join(DEFAULT_JSON),
    };
    let dir = json.parent().unwrap_or(root).to_path_buf();
    fs::create_dir_all(&dir)
        .map_err(|err| Failure::new(format!("could not create `{}`: {err}", dir.display())))?;
    let reports = table::Reports {
        transfer: json.clone(),
        dir,
    };

    let info = if options.table_only {
        println!("bench: --table-only: from the reports already there");
        read_run_info(&reports)
    } else {
        run_benchmarks(root, &options, &reports).map(Some)?
    };
    let (load_start, load_end) = match &info {
        Some(info) => (info.load_start.clone(), info.load_end.clone()),
        None => {
            println!(
                "bench: no {}; the load average is today's",
                page::RUN_RECORD
            );
            let load = table::load_average();
            (load.clone(), load)
        }
    };
    let rows = table::rows(&reports);
    print_table(&reports, &rows, &load_start, &load_end)?;
    if options.write_docs {
        let Some(info) = info else {
            return Err(Failure::new(format!(
                "--write-docs needs the run's record, {}, which is not in `{}`: run `cargo \
                 xtask bench --write-docs` (without --table-only)",
                page::RUN_RECORD,
                reports.dir.display()
            )));
        };
        let path = root.join(page::PAGE);
        write(&path, &page::render(&info, &rows, &reports))?;
        println!("bench: the benchmarks page is {}", path.display());
    }
    Ok(())
}

/// Runs every program of the plan and writes `run.json`; the run's record.
fn run_benchmarks(root: &Path, options: &Options, reports: &table::Reports) -> Result<RunInfo> {
    let provenance = gpu_bundle::provenance(root);
    let machine = machine::describe();
    let load_start = table::load_average();
    println!("bench: load average (1, 5, 15 min) at start: {load_start}");
    let runs = plan(options.quick, &options.extra);
    for run in &runs {
        let report = reports.path(&run.report);
        // Without a GPU a CUDA run skips and writes nothing: no stale report may pass for
        // this run's.
        let _ = fs::remove_file(&report);
        let mut cmd = util::cargo(root);
        if run.report.ends_with(EMULATED) {
            cmd.envs(crate::cuda_emu::prepare(root, true)?.vars());
        }
        cmd.args(["run", "--release", "--package", BENCH_PACKAGE])
            .args(["--example", &run.program, "--"])
            .args(&run.args)
            .arg("--json")
            .arg(&report);
        util::run(&mut cmd)?;
        if report.is_file() {
            println!("bench: JSON report in {}", report.display());
        }
    }
    let info = RunInfo {
        date: provenance.date,
        commit: provenance.commit,
        rustc: provenance.rustc,
        machine,
        quick: options.quick,
        load_start,
        load_end: table::load_average(),
        runs,
    };
    let text = serde_json::to_string_pretty(&info.to_json())
        .map_err(|err| Failure::new(format!("could not write the run's record: {err}")))?;
    write(&reports.dir.join(page::RUN_RECORD), &(text + "\n"))?;
    Ok(info)
}

/// The record of the run whose reports are in `reports.dir`, if it is there and readable
/// (a warning says why not otherwise).
fn read_run_info(reports: &table::Reports) -> Option<RunInfo> {
    let path = reports.dir.join(page::RUN_RECORD);
    let text = fs::read_to_string(&path).ok()?;
    let parsed = serde_json::from_str::<Value>(&text)
        .map_err(|err| err.to_string())
        .and_then(|value| RunInfo::from_json(&value));
    match parsed {
        Ok(info) => Some(info),
        Err(why) => {
            eprintln!("warning: `{}` is not a run's record: {why}", path.display());
            None
        }
    }
}

/// Prints the table of every ratio and its target and writes it to `summary.json` beside
/// the reports.
fn print_table(
    reports: &table::Reports,
    rows: &[table::Row],
    load_start: &str,
    load_end: &str,
) -> Result {
    util::header("bench summary");
    print!("{}", table::render(rows, load_start, load_end));
    let path = reports.dir.join("summary.json");
    let text = serde_json::to_string_pretty(&table::to_json(rows, load_start, load_end))
        .map_err(|err| Failure::new(format!("could not write the summary as JSON: {err}")))?;
    write(&path, &(text + "\n"))?;
    println!("bench: summary in {}", path.display());
    Ok(())
}

fn write(path: &Path, text: &str) -> Result {
    fs::write(path, text)
        .map_err(|err| Failure::new(format!("could not write `{}`: {err}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn parses_flags() {
        let options =
            Options::parse(&strings(&["--quick", "--write-docs", "--", "--runs", "11"])).unwrap();
        assert!(options.quick && options.write_docs && !options.table_only);
        assert_eq!(options.extra, strings(&["--runs", "11"]));
        assert!(Options::parse(&strings(&["--table-only", "--write-docs"])).is_ok());
        for bad in [&["--fast"][..], &["--table-only", "--quick"][..]] {
            assert_eq!(
                Options::parse(&strings(bad)).unwrap_err().code,
                2,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_plan_runs_every_report_of_the_table_once() {
        let full = plan(false, &strings(&["--runs", "21"]));
        let reports: Vec<&str> = full.iter().map(|r| r.report.as_str()).collect();
        assert_eq!(
            reports,
            [
                "transfer_bench",
                "transfer_bench_vulkan",
                "cuda_bench",
                "cuda_bench_emu",
                "pipeline_bench",
                "pipeline_bench_cuda",
                "graph_bench",
                "graph_bench_cuda",
                "ops_bench",
                "enqueue_bench",
                "startup_bench",
                "kernel_bench",
                "kernel_bench_vulkan",
                "kernel_bench_cuda",
                "allreduce_bench",
                "allreduce_bench_cuda"
            ]
        );
        assert_eq!(full[0].args, strings(&["--runs", "21"]));
        assert_eq!(
            full[1].args,
            strings(&["--device", "vulkan", "--runs", "21"])
        );
        assert_eq!(full[8].args, strings(&["--device", "cpu"]));
        assert_eq!(full[3].args, strings(&["--max-mib", "1", "--require"]));
        assert!(full[3].report.ends_with(EMULATED));
        let quick = plan(true, &[]);
        assert_eq!(quick[0].args, strings(&["--max-mib", "16"]));
        assert_eq!(quick[8].args, strings(&["--device", "cpu", "--quick"]));
        // Every program is an example of the benchmarks' package.
        let root = util::workspace_root();
        for run in &full {
            let examples = root.join("crates").join(BENCH_PACKAGE).join("examples");
            let file = examples.join(format!("{}.rs", run.program));
            let folder = examples.join(&run.program).join("main.rs");
            assert!(
                file.is_file() || folder.is_file(),
                "{} or {}",
                file.display(),
                folder.display()
            );
        }
    }
}
