//! `cargo xtask cuda-emu test`: the CUDA tests against the emulator, each test in a process
//! of its own.
//!
//! The tests are those [`SUITE`] selects: the CUDA arms of the facade's test binary (every
//! test whose name has `cuda` in it, as `cargo xtask gpu-test` selects them on a GPU), the
//! binaries whose tests all use CUDA, and the kernel examples' CUDA arms. They run with
//! `GPU_REQUIRE_CUDA=1` (a CUDA arm that finds no usable CUDA fails instead of printing
//! `SKIPPED`), `GPU_POOL=off` (every array its own allocation, so the emulator's guard zones
//! and never-reused addresses catch an access past an array or after its free, which the
//! pool's rounded, reused blocks would hide; but the pool's own tests, [`POOL_TESTS`], run
//! with it on) and `GPUKIT_CUDA_EMU_SMS=8` unless the caller
//! set it (fewer multiprocessors: tests that size their inputs by the device's grid cap
//! reach it with 16 times fewer elements than on a 132-SM H100).
//!
//! One process per test, as on a GPU one test's sticky error (an illegal address, a race
//! the emulator reports as a launch failure) would otherwise fail every test after it in the
//! same process, and hide which test caused it. The binaries come from the same `cargo test
//! --workspace --lib --bins --tests` build as CI's test step (`--no-run`: nothing is built
//! again after that step). Each test's output goes to `target/cuda-emu/logs/`; a failing
//! test's is printed. The summary counts passes, failures and skips, lists every `SKIPPED:`
//! line a passing test printed (with `GPU_REQUIRE_CUDA=1` only a test that cannot run on
//! the emulator may, the PTX ones say why) and the slowest tests.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::EmuEnv;
use crate::gpu_bundle::{cargo_artifacts, Artifact};
use crate::util::{self, Failure, Result};

/// One test binary of the suite and the tests of it that run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// The target's name.
    pub target: &'static str,
    /// `lib` for a library's unit tests, `test` for an integration test.
    pub kind: &'static str,
    /// The tests whose names contain it; `None`: every test.
    pub filter: Option<&'static str>,
}

/// The emulator's suite.
pub const SUITE: &[Selection] = &[
    // The facade's CUDA arms (`<test>::cuda`, `props::cuda_vs_cpu::...`, `behaviour::cuda`).
    Selection {
        target: "it",
        kind: "test",
        filter: Some("cuda"),
    },
    // A wild write poisons the device, on purpose.
    Selection {
        target: "cuda_poison",
        kind: "test",
        filter: None,
    },
    // The backend's own unit tests (NCCL's communicators among them).
    Selection {
        target: "gpukit_cuda",
        kind: "lib",
        filter: None,
    },
    // The `#[kernel]` examples on CUDA.
    Selection {
        target: "kernel_examples",
        kind: "test",
        filter: Some("cuda"),
    },
];

/// Tests with `cuda` in their names that use no CUDA device: the CPU and Vulkan arms of a
/// test about CUDA (`...cuda...::cpu`), and the comparisons' own test on two CPU contexts.
/// The test step runs them.
fn uses_no_cuda(name: &str) -> bool {
    name.ends_with("::cpu")
        || name.ends_with("::vulkan")
        || name == "props::cuda_vs_cpu::comparisons_accept_two_cpu_contexts"
}

/// The tests of the pool itself, which run with the pool's caching on.
pub const POOL_TESTS: &str = "memory::pool::";

/// How long one test may run before it is killed and counted as failed.
const TEST_TIMEOUT: Duration = Duration::from_secs(900);

/// One test to run.
#[derive(Debug, Clone)]
struct Job {
    target: &'static str,
    executable: PathBuf,
    name: String,
}

/// What became of one test.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Passed,
    Ignored,
    Failed(String),
}

#[derive(Debug)]
struct Outcome {
    job: Job,
    verdict: Verdict,
    seconds: f64,
    skipped: Vec<String>,
}

/// Runs the suite with `jobs` tests at a time; `filters` narrow it to the tests whose names
/// contain any of them.
pub fn run(root: &Path, env: &EmuEnv, release: bool, jobs: usize, filters: &[String]) -> Result {
    let mut build = vec![
        "test",
        "--workspace",
        "--lib",
        "--bins",
        "--tests",
        "--no-run",
    ];
    if release {
        build.push("--release");
    }
    let artifacts = cargo_artifacts(root, &build)?;
    let mut queue = VecDeque::new();
    for selection in SUITE {
        let artifact = find(&artifacts, selection)?;
        for name in list_tests(&artifact.executable)? {
            let chosen = selection
                .filter
                .is_none_or(|f| name.contains(f) && !uses_no_cuda(&name))
                && (filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())));
            if chosen {
                queue.push_back(Job {
                    target: selection.target,
                    executable: artifact.executable.clone(),
                    name,
                });
            }
        }
    }
    let total = queue.len();
    let logs = env.lib_dir.with_file_name("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)
        .map_err(|e| Failure::new(format!("could not make {}: {e}", logs.display())))?;
    util::header(&format!(
        "{total} tests against the CUDA emulator, {jobs} at a time, each in its own process \
         (GPU_REQUIRE_CUDA=1 GPU_POOL=off GPUKIT_CUDA_EMU_SMS={})",
        sms()
    ));
    let start = Instant::now();
    let queue = Arc::new(Mutex::new(
        queue.into_iter().enumerate().collect::<VecDeque<_>>(),
    ));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..jobs.max(1))
        .map(|_| {
            let (queue, outcomes, env, logs) = (
                Arc::clone(&queue),
                Arc::clone(&outcomes),
                env.clone(),
                logs.clone(),
            );
            std::thread::spawn(move || loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some((index, job)) = next else { break };
                let outcome = run_one(&env, &logs.join(format!("{index:04}.log")), job);
                report(&outcome, index + 1, total);
                outcomes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(outcome);
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap_or_else(|e| e.into_inner()));
    summarise(&outcomes, start.elapsed())
}

/// The multiprocessor count the suite's emulated devices report.
pub fn sms() -> String {
    std::env::var("GPUKIT_CUDA_EMU_SMS").unwrap_or_else(|_| "8".to_owned())
}

fn find<'a>(artifacts: &'a [Artifact], selection: &Selection) -> Result<&'a Artifact> {
    artifacts
        .iter()
        .find(|a| {
            a.test && a.name == selection.target && a.kinds.iter().any(|k| k == selection.kind)
        })
        .ok_or_else(|| {
            Failure::new(format!(
                "the test build has no {} target `{}`",
                selection.kind, selection.target
            ))
        })
}

/// The tests of a libtest binary (`--list --format terse`: `name: test` lines).
fn list_tests(executable: &Path) -> Result<Vec<String>> {
    let out = Command::new(executable)
        .args(["--list", "--format", "terse"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| util::spawn_failure(&executable.display().to_string(), &e))?;
    if !out.status.success() {
        return Err(Failure::new(format!(
            "`{} --list` failed ({})",
            executable.display(),
            out.status
        )));
    }
    Ok(parse_list(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect()
}

fn run_one(env: &EmuEnv, log: &Path, job: Job) -> Outcome {
    let started = Instant::now();
    let verdict = match execute(env, log, &job) {
        Ok(v) => v,
        Err(e) => Verdict::Failed(e),
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let skipped = text
        .lines()
        .filter(|l| l.contains("SKIPPED:"))
        .map(|l| l.trim().to_owned())
        .collect();
    let verdict = match verdict {
        Verdict::Failed(why) => Verdict::Failed(format!("{why}\n{}", tail(&text, 300))),
        other => other,
    };
    Outcome {
        job,
        verdict,
        seconds: started.elapsed().as_secs_f64(),
        skipped,
    }
}

fn execute(env: &EmuEnv, log: &Path, job: &Job) -> std::result::Result<Verdict, String> {
    let out = File::create(log).map_err(|e| format!("could not make {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&job.executable);
    cmd.args(["--exact", &job.name, "--test-threads", "1", "--show-output"])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("GPU_REQUIRE_CUDA", "1")
        .env("GPUKIT_CUDA_EMU_SMS", sms());
    if job.name.contains(POOL_TESTS) {
        cmd.env_remove("GPU_POOL");
    } else {
        cmd.env("GPU_POOL", "off");
    }
    env.apply(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start the test: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > TEST_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("killed after {} s", TEST_TIMEOUT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for the test failed: {e}")),
        }
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let result = text.lines().find(|l| l.starts_with("test result: "));
    match result {
        Some(l) if status.success() && l.contains(" 1 passed;") => Ok(Verdict::Passed),
        Some(l) if status.success() && l.contains(" 1 ignored;") => Ok(Verdict::Ignored),
        Some(l) if status.success() => Err(format!("the test did not run: {l}")),
        _ => Err(format!("the test failed ({status})")),
    }
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    let mut out = String::new();
    if from > 0 {
        out.push_str(&format!("    ... ({from} lines before)\n"));
    }
    for l in &all[from..] {
        out.push_str("    ");
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn report(outcome: &Outcome, n: usize, total: usize) {
    let (word, detail) = match &outcome.verdict {
        Verdict::Passed if outcome.skipped.is_empty() => ("PASS", String::new()),
        Verdict::Passed => ("SKIP", String::new()),
        Verdict::Ignored => ("IGNORED", String::new()),
        Verdict::Failed(why) => ("FAIL", format!("\n{why}")),
    };
    println!(
        "{word:7} [{:7.2}s] ({n}/{total}) {} {}{detail}",
        outcome.seconds, outcome.job.target, outcome.job.name
    );
}

fn summarise(outcomes: &[Outcome], elapsed: Duration) -> Result {
    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let passed = count(&|o| o.verdict == Verdict::Passed && o.skipped.is_empty());
    let skipped = count(&|o| o.verdict == Verdict::Passed && !o.skipped.is_empty());
    let ignored = count(&|o| o.verdict == Verdict::Ignored);
    let failed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Failed(_)))
        .collect();
    let mut slowest: Vec<&Outcome> = outcomes.iter().collect();
    slowest.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    println!("==> the slowest tests:");
    for o in slowest.iter().take(10) {
        println!("    {:7.2}s {} {}", o.seconds, o.job.target, o.job.name);
    }
    let skips: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.skipped
                .iter()
                .map(move |l| format!("{} {}: {l}", o.job.target, o.job.name))
        })
        .collect();
    if !skips.is_empty() {
        println!(
            "==> {} tests printed `SKIPPED:` with GPU_REQUIRE_CUDA=1 (what the emulator cannot run):",
            skipped
        );
        for l in &skips {
            println!("    {l}");
        }
    }
    for o in &failed {
        println!("    FAILED: {} {}", o.job.target, o.job.name);
    }
    println!(
        "==> cuda-emu test: {passed} passed, {} failed, {skipped} skipped, {ignored} ignored in {:.0} s",
        failed.len(),
        elapsed.as_secs_f64()
    );
    if !failed.is_empty() {
        return Err(Failure::new(format!(
            "{} tests failed against the CUDA emulator",
            failed.len()
        )));
    }
    if passed == 0 {
        return Err(Failure::new(
            "no test passed against the CUDA emulator: nothing was verified",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_the_tests_of_a_terse_listing() {
        let text = "a::b::cuda: test\nc: test\nbench_x: benchmark\n\n2 tests, 1 benchmark\n";
        assert_eq!(parse_list(text), ["a::b::cuda", "c"]);
    }

    #[test]
    fn the_cpu_and_vulkan_arms_are_left_to_the_test_step() {
        assert!(uses_no_cuda(
            "behaviour::kernels::kernels_see_cuda_thread_coordinates::vulkan"
        ));
        assert!(uses_no_cuda("interop::cuda_like::cpu"));
        assert!(!uses_no_cuda("memory::pool::trim::cuda"));
        assert!(!uses_no_cuda(
            "props::cuda_vs_cpu::large_lengths_match_the_cpu"
        ));
    }

    #[test]
    fn the_tail_keeps_the_last_lines_and_says_how_many_went() {
        let text = "1\n2\n3\n4\n";
        assert_eq!(tail(text, 2), "    ... (2 lines before)\n    3\n    4\n");
        assert_eq!(tail(text, 9), "    1\n    2\n    3\n    4\n");
    }
}
