//! `cargo xtask miri [--minutes N] [-- <args>]`: gpukit-core's and gpukit-cpu's tests (unit
//! tests and doc tests) and the facade's DLPack tests (the `it` binary's `dlpack::` group,
//! built without the GPU backends) under Miri, within N minutes (default
//! [`DEFAULT_MINUTES`]).
//!
//! Miri runs the tests in an interpreter that checks every memory access, so undefined
//! behaviour in the unsafe code of gpukit-core (host buffers, views, DLPack export and
//! import with their deleters, the kernel argument plumbing) and gpukit-cpu (its memory,
//! queues, tasks, worker threads and vectorised loops) shows up as an error. It needs the
//! nightly toolchain with the `miri` component (`rustup component add --toolchain nightly
//! miri rust-src`); this command says so when they are missing. Isolation is disabled
//! because the CPU backend reads `/proc/cpuinfo` and `/proc/meminfo` for its device
//! description, and the leak check is off because its worker threads live as long as the
//! process (see [`MIRIFLAGS`]). Arguments after `--` go to `cargo miri test`.
//!
//! The op table's reference tests ([`SAFE_ONLY`]: modules with no `unsafe` code, checked by
//! this module's test) are skipped: interpreted, their millions of float operations take
//! hours and give Miri nothing to check. Tests that are pure arithmetic elsewhere are sized
//! down or ignored under `cfg(miri)` where they are written. The whole run is stopped after N
//! minutes, failing with the test that was running, so the command always ends.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

/// Miri's flags: isolation off (the CPU backend reads `/proc`), and no leak check: the CPU
/// backend's worker threads serve the whole process and are never joined, so the main
/// thread always ends before them.
const MIRIFLAGS: &str = "-Zmiri-disable-isolation -Zmiri-ignore-leaks";

/// Minutes the runs may take together unless `--minutes` says otherwise.
pub const DEFAULT_MINUTES: f64 = 60.0;

/// Test paths skipped under Miri: the op table's modules whose code (and tests) have no
/// `unsafe`, only arithmetic.
pub const SAFE_ONLY: [&str; 7] = [
    "optable::elementwise",
    "optable::index",
    "optable::random",
    "optable::reduce",
    "optable::rows",
    "optable::symbolic",
    "optable::tests",
];

/// Runs `cargo xtask miri [--minutes N] [-- <args>]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let (mut cli, extra) = Cli::with_passthrough(args);
    let mut minutes = DEFAULT_MINUTES;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("minutes") => {
                minutes = cli.number("--minutes", "a number of minutes above 0", |m: &f64| {
                    *m > 0.0 && m.is_finite()
                })?;
            }
            other => return Err(other.unexpected().into()),
        }
    }
    let has_miri = Command::new("cargo")
        .args(["+nightly", "miri", "--version"])
        .current_dir(root)
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_miri {
        return Err(Failure::new(
            "Miri is not installed: run `rustup toolchain install nightly` and \
             `rustup component add --toolchain nightly miri rust-src`",
        ));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    // `cargo miri test` without `--doc` runs no doc tests: the unit tests and the doc tests
    // are two runs; the DLPack tests (export, import, deleters) are the facade's, a third.
    for kind in ["--lib", "--doc", "dlpack"] {
        if kind == "dlpack" {
            let mut cmd = Command::new("cargo");
            cmd.current_dir(root)
                .env("MIRIFLAGS", MIRIFLAGS)
                .args(["+nightly", "miri", "test", "-p", "gpukit"])
                .args(["--no-default-features", "--test", "it"])
                .args(&extra)
                .args(["--", "dlpack::"]);
            run_until(&mut cmd, deadline, minutes)?;
            continue;
        }
        let mut cmd = Command::new("cargo");
        cmd.current_dir(root)
            .env("MIRIFLAGS", MIRIFLAGS)
            .args([
                "+nightly",
                "miri",
                "test",
                "-p",
                "gpukit-core",
                "-p",
                "gpukit-cpu",
                kind,
            ])
            .args(&extra);
        if kind == "--lib" {
            cmd.arg("--");
            for path in SAFE_ONLY {
                cmd.args(["--skip", path]);
            }
        }
        run_until(&mut cmd, deadline, minutes)?;
    }
    Ok(())
}

/// Runs `cmd`, echoing its output, and kills it at `deadline` (failing with the last test
/// it started).
pub(crate) fn run_until(cmd: &mut Command, deadline: Instant, minutes: f64) -> Result {
    let (mut child, shown) = util::spawn_piped(cmd.stderr(Stdio::inherit()))?;
    let last = Arc::new(Mutex::new(String::new()));
    let echo = child.stdout.take().map(|out| {
        let last = last.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                println!("{line}");
                if line.starts_with("test ") {
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = line;
                }
            }
        })
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let last = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
                return Err(Failure::new(format!(
                    "`{shown}` did not finish within {minutes} minutes; last test line: \
                     {last:?} (size it down or ignore it under cfg(miri))"
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(err) => return Err(Failure::new(format!("`{shown}`: {err}"))),
        }
    };
    if let Some(echo) = echo {
        let _ = echo.join();
    }
    if status.success() {
        Ok(())
    } else {
        Err(Failure {
            message: format!("`{shown}` failed ({status})"),
            code: util::exit_code(status),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The skipped modules must stay free of `unsafe`: otherwise Miri has to see them.
    #[test]
    fn the_skipped_modules_have_no_unsafe_code() {
        let root = util::workspace_root();
        for path in SAFE_ONLY {
            let module = path.trim_start_matches("optable::");
            if module == "tests" {
                continue;
            }
            let file = root.join(format!("crates/gpukit-core/src/optable/{module}.rs"));
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert!(
                !text.contains("unsafe"),
                "{} has unsafe code: Miri must run its tests (take it out of SAFE_ONLY)",
                file.display()
            );
        }
        let table = root.join("crates/gpukit-core/src/optable/mod.rs");
        let text = std::fs::read_to_string(&table).unwrap();
        assert!(
            !text.contains("unsafe"),
            "{} has unsafe code",
            table.display()
        );
    }
}
