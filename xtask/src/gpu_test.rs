//! `cargo xtask gpu-test`: runs the CUDA tests on this machine and fails when no GPU is usable.
//!
//! Every behaviour test has a CUDA variant named `<test>::cuda`; on a machine without a
//! usable GPU it normally prints `SKIPPED: <reason>` and passes. Here the tests run with
//! `GPU_REQUIRE_CUDA=1`, which the test harness turns into a failure instead, so this
//! command can never report a GPU pass without a GPU. It runs
//!
//! 1. `cargo test --release --no-fail-fast --workspace --exclude xtask cuda [args] --
//!    --show-output`: the filter `cuda` selects the CUDA variants of the mixed binaries
//!    (the facade's `it`, with `behaviour::...::cuda`, `props::...::cuda`, ..., and other
//!    crates' tests); xtask's own tests are not GPU tests;
//! 2. the targets in [`UNFILTERED_TARGETS`], unfiltered: their tests use CUDA without
//!    `cuda` in their names (the NVRTC tests, gpukit-cuda's unit tests, `cuda_poison`), so the
//!    filter would leave them out. One cargo run per kind of target, since cargo applies
//!    `--lib` to every package named.
//!
//! It relays the tests' output line by line while adding up cargo's `test result:` lines,
//! and ends with one summary line. A run in which no test passed (a filter that matched
//! nothing, say) is a failure too: nothing was verified. `--show-output` makes the
//! `SKIPPED:` lines that passing tests still print (a CPU-only behaviour's CUDA variant,
//! say) visible; they are listed, with their tests, before the summary.

use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::util::{self, Cli, Failure, Result};

/// The test filter: the CUDA variants (`<test>::cuda`).
const FILTER: &str = "cuda";

/// What kind of test target an unfiltered one is: cargo selects each kind differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A library's unit tests (`--lib`).
    Lib,
    /// An integration test (`--test NAME`).
    Test,
}

/// A test target run without the `cuda` filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnfilteredTarget {
    /// The package (`cargo test -p`).
    pub package: &'static str,
    /// Library unit tests or an integration test.
    pub kind: TargetKind,
    /// The target's name: its file name in a GPU bundle's `tests/`.
    pub name: &'static str,
    /// Whether the GPU bundle's compute-sanitizer steps run it: not for a target that
    /// faults on purpose, which a sanitizer reports by design (they leave it out; this
    /// command and the bundle's test step still run it).
    pub sanitize: bool,
}

/// The test targets whose tests use CUDA without `cuda` in their names, run unfiltered here
/// and by the GPU bundle's sanitizer steps (which find them by [`UnfilteredTarget::name`],
/// and leave out those without [`UnfilteredTarget::sanitize`]).
pub const UNFILTERED_TARGETS: &[UnfilteredTarget] = &[
    // The probe and library discovery on a real driver.
    UnfilteredTarget {
        package: "gpukit-cuda-sys",
        kind: TargetKind::Lib,
        name: "gpukit_cuda_sys",
        sanitize: true,
    },
    // NVRTC compiling a kernel to PTX and to a cubin.
    UnfilteredTarget {
        package: "gpukit-cuda-sys",
        kind: TargetKind::Test,
        name: "nvrtc",
        sanitize: true,
    },
    UnfilteredTarget {
        package: "gpukit-cuda",
        kind: TargetKind::Lib,
        name: "gpukit_cuda",
        sanitize: true,
    },
    // A wild write poisons the device (a sticky CUDA error): out of bounds on purpose, which
    // memcheck reports.
    UnfilteredTarget {
        package: "gpukit",
        kind: TargetKind::Test,
        name: "cuda_poison",
        sanitize: false,
    },
];

/// The cargo arguments (after `test --release --no-fail-fast`) that select
/// [`UNFILTERED_TARGETS`]: one run for the libraries and one for the integration tests.
fn unfiltered_selections() -> Vec<Vec<String>> {
    let mut runs = Vec::new();
    for kind in [TargetKind::Lib, TargetKind::Test] {
        let targets: Vec<&UnfilteredTarget> = UNFILTERED_TARGETS
            .iter()
            .filter(|target| target.kind == kind)
            .collect();
        if targets.is_empty() {
            continue;
        }
        let mut args = Vec::new();
        let mut packages: Vec<&str> = Vec::new();
        for target in &targets {
            if !packages.contains(&target.package) {
                packages.push(target.package);
            }
        }
        for package in packages {
            args.extend(["-p".to_owned(), package.to_owned()]);
        }
        match kind {
            TargetKind::Lib => args.push("--lib".to_owned()),
            TargetKind::Test => {
                for target in targets {
                    args.extend(["--test".to_owned(), target.name.to_owned()]);
                }
            }
        }
        runs.push(args);
    }
    runs
}

/// The environment variable that makes a CUDA test fail, not skip, when CUDA is unusable.
pub const REQUIRE_CUDA_VAR: &str = "GPU_REQUIRE_CUDA";

/// Counts summed over cargo's `test result:` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests marked `#[ignore]`.
    pub ignored: u64,
    /// How many `test result:` lines were added up (one per test binary that finished).
    pub results: u64,
}

impl Tally {
    /// Adds `line` when it is a libtest summary such as
    /// `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`;
    /// returns whether it was one.
    pub fn add_line(&mut self, line: &str) -> bool {
        let Some(counts) = parse_result_line(line) else {
            return false;
        };
        self.passed += counts.passed;
        self.failed += counts.failed;
        self.ignored += counts.ignored;
        self.results += 1;
        true
    }
}

/// The counts of one `test result:` line, or `None` when `line` is not one.
fn parse_result_line(line: &str) -> Option<Tally> {
    let rest = line.trim().strip_prefix("test result: ")?;
    // `ok. 12 passed; 0 failed; ...` or `FAILED. 1 passed; 2 failed; ...`
    let (status, counts) = rest.split_once(". ")?;
    if status != "ok" && status != "FAILED" {
        return None;
    }
    let mut tally = Tally::default();
    let mut saw_passed = false;
    for part in counts.split(';') {
        let mut words = part.split_whitespace();
        let (Some(number), Some(word)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(number) = number.parse::<u64>() else {
            continue;
        };
        match word {
            "passed" => {
                tally.passed = number;
                saw_passed = true;
            }
            "failed" => tally.failed = number,
            "ignored" => tally.ignored = number,
            _ => {}
        }
    }
    saw_passed.then_some(tally)
}

/// The `SKIPPED:` lines of a `--show-output` run, each with the test that printed it.
///
/// libtest prints a passing test's captured output under `---- <test> stdout ----`.
#[derive(Debug, Default)]
struct Skips {
    current_test: Option<String>,
    lines: Vec<String>,
}

impl Skips {
    fn add_line(&mut self, line: &str) {
        let line = line.trim_end();
        if let Some(test) = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"))
        {
            self.current_test = Some(test.to_owned());
        } else if line.contains("SKIPPED:") {
            let test = self.current_test.as_deref().unwrap_or("?");
            self.lines.push(format!("{test}: {}", line.trim()));
        }
    }
}

/// The arguments after `cargo test ... cuda`: the caller's, plus `--show-output` for the test
/// binaries (so the `SKIPPED:` lines of passing tests are seen and reported).
fn test_args(extra: &[String]) -> Vec<String> {
    let mut args = extra.to_vec();
    if !args.iter().any(|arg| arg == "--") {
        args.push("--".to_owned());
    }
    args.push("--show-output".to_owned());
    args
}

/// Runs a `cargo test` command, relaying its output as it comes (cargo's own messages go to
/// stderr, untouched) while adding up its results and `SKIPPED:` lines; returns the command
/// as shown and its exit status.
fn relay(
    cmd: &mut std::process::Command,
    tally: &mut Tally,
    skips: &mut Skips,
) -> Result<(String, std::process::ExitStatus)> {
    let (mut child, shown) = util::spawn_piped(cmd)?;
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    print!("{text}");
                    tally.add_line(&text);
                    skips.add_line(&text);
                }
                Err(err) => {
                    eprintln!("warning: reading the tests' output failed: {err}");
                    break;
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|err| Failure::new(format!("waiting for `{shown}` failed: {err}")))?;
    Ok((shown, status))
}

/// Runs `cargo xtask gpu-test [-- args]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let (mut cli, extra) = Cli::with_passthrough(args);
    cli.none()?;

    // The filtered run over the workspace, then the unfiltered targets.
    let filtered = ["--workspace", "--exclude", "xtask", FILTER].map(str::to_owned);
    let mut selections = vec![filtered.to_vec()];
    selections.extend(unfiltered_selections());

    let mut tally = Tally::default();
    let mut skips = Skips::default();
    let mut failed_runs = Vec::new();
    for selection in &selections {
        let mut cmd = util::cargo(root);
        cmd.env(REQUIRE_CUDA_VAR, "1")
            .args(["test", "--release", "--no-fail-fast"])
            .args(selection)
            .args(test_args(&extra));
        let results_before = tally.results;
        let (shown, status) = relay(&mut cmd, &mut tally, &mut skips)?;
        if !status.success() {
            failed_runs.push((shown, status));
            if tally.results == results_before {
                // No test binary reported: the build failed, and the next runs would too.
                break;
            }
        }
    }

    if !skips.lines.is_empty() {
        // With GPU_REQUIRE_CUDA=1 a missing GPU fails; these are skips the harness still
        // allows (a CPU-only behaviour, say). List them so a reader can check.
        println!(
            "==> {} lines printed `SKIPPED:` although {REQUIRE_CUDA_VAR}=1; check that none \
             is a GPU behaviour left unverified:",
            skips.lines.len()
        );
        for line in &skips.lines {
            println!("    {line}");
        }
    }
    let counts = format!(
        "{} passed, {} failed, {} ignored",
        tally.passed, tally.failed, tally.ignored
    );
    if let Some((shown, status)) = failed_runs.first() {
        if tally.results == 0 {
            println!(
                "==> gpu-test FAILED: no test result (the build, or a test binary before its \
                 summary, failed; see the output above)"
            );
        } else {
            println!(
                "==> gpu-test FAILED: {counts} (with {REQUIRE_CUDA_VAR}=1 a CUDA test fails \
                 when no GPU is usable; see the output above)"
            );
        }
        let more = match failed_runs.len() {
            1 => String::new(),
            n => format!(" (and {} more cargo runs)", n - 1),
        };
        return Err(Failure {
            message: format!("`{shown}` failed ({status}){more}"),
            code: util::exit_code(*status),
        });
    }
    if tally.passed == 0 {
        println!("==> gpu-test FAILED: {counts}: no test ran, so nothing was verified on a GPU");
        return Err(Failure::new(format!(
            "no test matching `{FILTER}`, and no unfiltered CUDA test, passed; nothing was \
             verified on a GPU"
        )));
    }
    println!("==> gpu-test PASSED on a usable GPU ({REQUIRE_CUDA_VAR}=1): {counts}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ok_and_failed_result_lines() {
        let ok = "test result: ok. 12 passed; 0 failed; 3 ignored; 0 measured; \
                  5 filtered out; finished in 0.42s";
        assert_eq!(
            parse_result_line(ok),
            Some(Tally {
                passed: 12,
                failed: 0,
                ignored: 3,
                results: 0
            })
        );
        let failed = "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; \
                      0 filtered out; finished in 1.00s\n";
        assert_eq!(
            parse_result_line(failed),
            Some(Tally {
                passed: 1,
                failed: 2,
                ignored: 0,
                results: 0
            })
        );
    }

    #[test]
    fn ignores_other_lines() {
        for line in [
            "",
            "test foo::cuda ... ok",
            "running 3 tests",
            "SKIPPED: no CUDA driver",
            "test result: maybe. 1 passed",
            "test result: ok.",
            "my test result: ok. 1 passed; 0 failed",
        ] {
            assert_eq!(parse_result_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn shows_output_after_the_callers_arguments() {
        let strings = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(test_args(&[]), strings(&["--", "--show-output"]));
        assert_eq!(
            test_args(&strings(&["-p", "gpu"])),
            strings(&["-p", "gpu", "--", "--show-output"])
        );
        assert_eq!(
            test_args(&strings(&["--", "--nocapture"])),
            strings(&["--", "--nocapture", "--show-output"])
        );
    }

    /// The folder under `crates/` whose manifest names `package` (folders keep their short
    /// names, e.g. `crates/gpukit-cuda-sys` holds `gpukit-cuda-sys`).
    fn package_dir(root: &std::path::Path, package: &str) -> std::path::PathBuf {
        let wanted = format!("name = \"{package}\"");
        std::fs::read_dir(root.join("crates"))
            .expect("crates/ is readable")
            .map(|entry| entry.expect("crates/ entry").path())
            .find(|dir| {
                std::fs::read_to_string(dir.join("Cargo.toml"))
                    .is_ok_and(|manifest| manifest.lines().any(|line| line == wanted))
            })
            .unwrap_or_else(|| panic!("no crate under crates/ is named {package}"))
    }

    #[test]
    fn unfiltered_targets_are_selected_by_kind_and_exist() {
        let strings = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(
            unfiltered_selections(),
            [
                strings(&["-p", "gpukit-cuda-sys", "-p", "gpukit-cuda", "--lib"]),
                strings(&[
                    "-p",
                    "gpukit-cuda-sys",
                    "-p",
                    "gpukit",
                    "--test",
                    "nvrtc",
                    "--test",
                    "cuda_poison"
                ]),
            ]
        );
        // A renamed or moved target must not silently drop out of the GPU runs.
        let root = util::workspace_root();
        for target in UNFILTERED_TARGETS {
            let package = package_dir(&root, target.package);
            let source = match target.kind {
                TargetKind::Lib => package.join("src/lib.rs"),
                TargetKind::Test => package.join("tests").join(format!("{}.rs", target.name)),
            };
            assert!(source.is_file(), "{target:?}: no {}", source.display());
            if target.kind == TargetKind::Lib {
                assert_eq!(target.name, target.package.replace('-', "_"), "{target:?}");
            }
        }
    }

    #[test]
    fn attributes_skipped_lines_to_their_tests() {
        let mut skips = Skips::default();
        for line in [
            "SKIPPED: before any test",
            "successes:",
            "",
            "---- behaviour::fill::cuda stdout ----",
            "SKIPPED: fill is a CPU-backend behaviour (cuda backend)",
            "",
            "---- props::ops::cuda stdout ----",
            "some other output",
        ] {
            skips.add_line(line);
        }
        assert_eq!(
            skips.lines,
            [
                "?: SKIPPED: before any test",
                "behaviour::fill::cuda: SKIPPED: fill is a CPU-backend behaviour (cuda backend)",
            ]
        );
    }

    #[test]
    fn sums_several_binaries() {
        let mut tally = Tally::default();
        let output = "\
running 2 tests
test a::cuda ... ok
test b::cuda ... FAILED
test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 4 filtered out; finished in 0.01s
   Doc-tests gpukit
test result: ok. 7 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.20s
";
        let added = output.lines().filter(|line| tally.add_line(line)).count();
        assert_eq!(added, 2);
        assert_eq!(
            tally,
            Tally {
                passed: 8,
                failed: 1,
                ignored: 2,
                results: 2
            }
        );
    }
}
