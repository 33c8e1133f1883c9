//! `cargo xtask fuzz [--seconds N] [--target NAME] [-- <libFuzzer args>]`: runs the
//! cargo-fuzz targets in `fuzz/` for N seconds each and reports how many inputs each ran.
//!
//! `fuzz/` is its own workspace (excluded from the main one, so the stable `cargo xtask ci`
//! never builds it): cargo-fuzz needs the nightly toolchain for its sanitizer flags. Each
//! target runs as `cargo +nightly fuzz run TARGET -- -max_total_time=N -print_final_stats=1`
//! in `fuzz/`; libFuzzer's output is passed through, and its final statistics
//! (`stat::number_of_executed_units`, else the last `#N DONE` line) give the executions.
//! Every target runs even when one fails; the exit status is 1 when any did.
//!
//! The targets (each file's module docs say what it generates, what it asserts and, for
//! the unsafe surfaces, what is in and out of contract):
//! - `device_spec`: text through `DeviceSpec` and `DeviceSet` parsing (`GPU_DEVICE`,
//!   `gpu.toml`'s `devices`): typed errors naming input and origin, `Display` round trips,
//!   a set's list checked against an independent reading of its ordinals and ranges;
//! - `config_toml`: text through `gpu.toml` parsing and the `GPU_DEVICE` rule;
//! - `op_program`: random programs of ops over several streams on the CPU backend, against
//!   a sequential interpreter;
//! - `dlpack_import`: hostile DLPack tensors (shape, strides, offsets, dtype and device
//!   codes, overflowing sizes, null pointers, versions, flags) into `Context::from_dlpack`,
//!   `from_dlpack_legacy` and `from_dlpack_copy`: a typed error or the right contents, the
//!   deleter called exactly once, no read outside the producer's buffer (AddressSanitizer);
//! - `kernel_codegen`: random programs of `#[kernel]`'s language (and deliberately wrong
//!   ones) through its compiler: an error with a message, or CUDA C, a CPU twin that is
//!   Rust, and WGSL that naga validates;
//! - `launcher_env`: launcher environments through `LaunchEnv::from_vars`: a typed error
//!   naming the variable, or a consistent result that agrees with the variables.
//!
//! Each target's corpus, `fuzz/corpus/TARGET`, is committed: the inputs that reached new
//! coverage, kept small with `cargo +nightly fuzz cmin TARGET` (run in `fuzz/` after a long
//! run grows it; a few hundred files at most a target), plus hand-written seeds
//! (`seed_*`). A run starts from it and adds to it; commit what it adds only after `cmin`.
//! Crashing inputs land in `fuzz/artifacts/TARGET` (ignored by git): reproduce with
//! `cargo +nightly fuzz run TARGET ARTIFACT`, and turn each into a regression test.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

/// The fuzz targets, in the order they run by default.
pub const TARGETS: [&str; 6] = [
    "device_spec",
    "config_toml",
    "op_program",
    "dlpack_import",
    "kernel_codegen",
    "launcher_env",
];

/// Seconds per target when `--seconds` is not given.
pub const DEFAULT_SECONDS: u64 = 60;

/// What `cargo xtask fuzz` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    /// Seconds of fuzzing per target (libFuzzer's `-max_total_time`).
    pub seconds: u64,
    /// The targets to run.
    pub targets: Vec<String>,
    /// Arguments after `--`, for libFuzzer.
    pub extra: Vec<String>,
}

/// Parses `[--seconds N] [--target NAME]... [-- libFuzzer args]`.
pub fn parse(args: &[String]) -> Result<Opts> {
    let (mut cli, extra) = Cli::with_passthrough(args);
    let mut seconds = DEFAULT_SECONDS;
    let mut targets = Vec::new();
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("seconds") => {
                seconds =
                    cli.number("--seconds", "a whole number of seconds, at least 1", |n| {
                        *n >= 1
                    })?;
            }
            Long("target") => {
                let target = cli.one_of("--target", &TARGETS)?.to_owned();
                if !targets.contains(&target) {
                    targets.push(target);
                }
            }
            other => return Err(other.unexpected().into()),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    Ok(Opts {
        seconds,
        targets,
        extra,
    })
}

/// What libFuzzer's output says about a run.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stats {
    /// Inputs executed: `stat::number_of_executed_units`, else the `#N DONE` line, else the
    /// last `#N` status line seen (a run that crashed).
    pub executions: Option<u64>,
    /// `stat::average_exec_per_sec`.
    pub per_second: Option<u64>,
    /// Where libFuzzer wrote a crashing input (`Test unit written to PATH`).
    pub artifact: Option<String>,
}

impl Stats {
    /// Updates the statistics with one line of libFuzzer output.
    pub fn feed(&mut self, line: &str) {
        let line = line.trim();
        if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
            if let Ok(n) = n.trim().parse() {
                self.executions = Some(n);
            }
        } else if let Some(n) = line.strip_prefix("stat::average_exec_per_sec:") {
            self.per_second = n.trim().parse().ok().or(self.per_second);
        } else if let Some(path) = line.split("Test unit written to ").nth(1) {
            self.artifact = Some(path.trim().to_string());
        } else if let Some(rest) = line.strip_prefix('#') {
            // `#1234\tNEW ...`, `#1234\tpulse ...`, `#1234\tDONE ...`: the count so far.
            let mut words = rest.split_whitespace();
            let count = words.next().and_then(|n| n.parse::<u64>().ok());
            let is_status = matches!(
                words.next(),
                Some("NEW" | "pulse" | "DONE" | "REDUCE" | "INITED" | "RELOAD")
            );
            if let (Some(n), true) = (count, is_status) {
                self.executions = Some(n);
            }
        }
    }
}

/// One target's outcome.
struct Outcome {
    target: String,
    stats: Stats,
    error: Option<String>,
}

/// Fails with install instructions unless `cargo +nightly fuzz` works.
fn check_tools(fuzz_dir: &Path) -> Result {
    let nightly = util::succeeds(
        Command::new("cargo")
            .args(["+nightly", "--version"])
            .current_dir(fuzz_dir),
    );
    if !nightly {
        return Err(Failure::new(
            "the nightly toolchain is not installed (cargo-fuzz needs it): run \
             `rustup toolchain install nightly`",
        ));
    }
    let cargo_fuzz = util::succeeds(
        Command::new("cargo")
            .args(["+nightly", "fuzz", "--version"])
            .current_dir(fuzz_dir),
    );
    if !cargo_fuzz {
        return Err(Failure::new(
            "cargo-fuzz is not installed: run `cargo install cargo-fuzz --locked`",
        ));
    }
    Ok(())
}

/// Runs one target, echoing libFuzzer's output (stderr) while reading its statistics.
fn run_target(fuzz_dir: &Path, target: &str, opts: &Opts) -> Outcome {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(fuzz_dir)
        .args(["+nightly", "fuzz", "run", target, "--"])
        .arg(format!("-max_total_time={}", opts.seconds))
        .arg("-print_final_stats=1")
        .args(&opts.extra)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let shown = util::display(&cmd);
    util::header(&format!("(in fuzz/) {shown}"));
    let mut outcome = Outcome {
        target: target.to_string(),
        stats: Stats::default(),
        error: None,
    };
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) => {
            outcome.error = Some(util::spawn_failure(&shown, &err).message);
            return outcome;
        }
    };
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            outcome.stats.feed(&line);
        }
    }
    match child.wait() {
        Ok(status) if status.success() => {}
        Ok(status) => outcome.error = Some(format!("`{shown}` failed ({status})")),
        Err(err) => outcome.error = Some(format!("`{shown}`: {err}")),
    }
    outcome
}

fn show(n: Option<u64>) -> String {
    n.map_or_else(|| "?".to_string(), |n| n.to_string())
}

/// Runs `cargo xtask fuzz ...`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let opts = parse(args)?;
    let fuzz_dir = root.join("fuzz");
    if !fuzz_dir.join("Cargo.toml").is_file() {
        return Err(Failure::new(format!(
            "{} has no Cargo.toml: the fuzz package is missing",
            fuzz_dir.display()
        )));
    }
    check_tools(&fuzz_dir)?;

    let mut outcomes = Vec::new();
    for target in &opts.targets {
        let outcome = run_target(&fuzz_dir, target, &opts);
        let verdict = outcome.error.as_deref().unwrap_or("ok");
        println!(
            "fuzz {target}: {} executions in {} s ({verdict})",
            show(outcome.stats.executions),
            opts.seconds
        );
        outcomes.push(outcome);
    }

    println!();
    println!("fuzz summary ({} s per target):", opts.seconds);
    println!(
        "  {:<14} {:>12} {:>8}  result",
        "target", "executions", "exec/s"
    );
    for o in &outcomes {
        let result = match (&o.error, &o.stats.artifact) {
            (None, _) => "ok".to_string(),
            (Some(_), Some(path)) => format!("FAILED: crash input {path}"),
            (Some(err), None) => format!("FAILED: {err}"),
        };
        println!(
            "  {:<14} {:>12} {:>8}  {result}",
            o.target,
            show(o.stats.executions),
            show(o.stats.per_second)
        );
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.error.is_some())
        .map(|o| o.target.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "fuzz target(s) failed: {} (reproduce with `cargo +nightly fuzz run TARGET \
             ARTIFACT` in fuzz/)",
            failed.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn defaults_to_every_target_for_sixty_seconds() {
        let opts = parse(&[]).unwrap();
        assert_eq!(opts.seconds, DEFAULT_SECONDS);
        assert_eq!(opts.targets, strings(&TARGETS));
        assert!(opts.extra.is_empty());
    }

    #[test]
    fn parses_seconds_targets_and_extra() {
        let opts = parse(&strings(&[
            "--seconds",
            "30",
            "--target=op_program",
            "--target",
            "device_spec",
            "--",
            "-jobs=2",
        ]))
        .unwrap();
        assert_eq!(opts.seconds, 30);
        assert_eq!(opts.targets, strings(&["op_program", "device_spec"]));
        assert_eq!(opts.extra, strings(&["-jobs=2"]));
    }

    #[test]
    fn rejects_bad_arguments() {
        for bad in [
            &["--seconds"][..],
            &["--seconds", "0"],
            &["--seconds", "1.5"],
            &["--target", "nope"],
            &["--frobnicate"],
        ] {
            let err = parse(&strings(bad)).unwrap_err();
            assert_eq!(err.code, 2, "{bad:?}");
        }
    }

    #[test]
    fn reads_final_stats() {
        let mut stats = Stats::default();
        for line in [
            "INFO: Running with entropic power schedule (0xFF, 100).",
            "#2\tINITED cov: 10 ft: 10 corp: 1/1b exec/s: 0 rss: 30Mb",
            "#7612\tNEW    cov: 2004 ft: 4328 corp: 254/1947b lim: 11 exec/s: 380 rss: 334Mb",
            "#7622\tDONE   cov: 2004 ft: 4328 corp: 254/1947b lim: 11 exec/s: 362 rss: 334Mb",
            "Done 7622 runs in 21 second(s)",
            "stat::number_of_executed_units: 7623",
            "stat::average_exec_per_sec:     362",
        ] {
            stats.feed(line);
        }
        assert_eq!(stats.executions, Some(7623));
        assert_eq!(stats.per_second, Some(362));
        assert_eq!(stats.artifact, None);
    }

    #[test]
    fn reads_a_crash() {
        let mut stats = Stats::default();
        for line in [
            "#1024\tpulse  cov: 5 ft: 5 corp: 1/1b exec/s: 512 rss: 30Mb",
            "#1500\tNEW    cov: 6 ft: 6 corp: 2/2b exec/s: 500 rss: 30Mb",
            "==123== ERROR: libFuzzer: deadly signal",
            "artifact_prefix='/w/fuzz/artifacts/op_program/'; Test unit written to \
             /w/fuzz/artifacts/op_program/crash-abc",
        ] {
            stats.feed(line);
        }
        assert_eq!(stats.executions, Some(1500));
        assert_eq!(
            stats.artifact.as_deref(),
            Some("/w/fuzz/artifacts/op_program/crash-abc")
        );
    }
}
