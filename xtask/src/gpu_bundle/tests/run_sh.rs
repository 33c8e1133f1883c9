//! `run.sh` on fake bundles of shell scripts: the tallies, the verdict (a green run must
//! have verified something), the files it leaves in the output folder, the time limits;
//! the doctor, sanitizer and benchmark steps (with the PyTorch comparator) in [`steps`], the
//! order of the test units in [`order`], the short benchmarks of a short plan in [`quick`], and
//! what run.sh does about the machine (the preflight, gVisor, a refused device) in
//! [`machine`]. No GPU is needed.

mod machine;
mod order;
mod quick;
mod steps;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::TempDir;
use crate::gpu_bundle::{
    assembled_template, make_executable, run_sh_text, GROUPED_PLACEHOLDER, MANIFEST,
    NOT_SANITIZED_PLACEHOLDER, RUN_SH_PARTS, TORCH_COMPARATOR, TORCH_COMPARATOR_SOURCE,
    UNFILTERED_PLACEHOLDER,
};
use crate::util;

fn bash_available() -> bool {
    let found = util::succeeds(Command::new("bash").arg("--version"));
    if !found {
        println!("SKIPPED: bash not found");
    }
    found
}

/// Writes an executable script to `path`.
fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/usr/bin/env bash\n{body}")).unwrap();
    make_executable(path).unwrap();
}

/// A bundle with `run.sh` and the given `tests/` scripts (name, body).
fn fake_bundle(tmp: &TempDir, tests: &[(&str, &str)]) -> PathBuf {
    let dir = tmp.path().join("bundle");
    for sub in ["tests", "bench", "tools"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    fs::write(dir.join(MANIFEST), "commit: fake123\n").unwrap();
    fs::write(dir.join("run.sh"), run_sh_text()).unwrap();
    make_executable(&dir.join("run.sh")).unwrap();
    for (name, body) in tests {
        script(&dir.join("tests").join(name), body);
    }
    dir
}

/// How to call `run.sh` in a test.
#[derive(Default)]
struct Call<'a> {
    /// Its arguments.
    args: &'a [&'a str],
    /// The folder to run it from (the bundle's parent when `None`).
    cwd: Option<&'a Path>,
    /// Prepended to PATH (for a fake compute-sanitizer).
    path_prefix: Option<&'a Path>,
    /// The value of `OUT` (unset when `None`).
    out: Option<&'a Path>,
    /// More environment variables.
    env: &'a [(&'a str, &'a str)],
}

/// A kernel release that is not gVisor's, for [`Call::env`]'s `RUN_SH_KERNEL_RELEASE`.
const NOT_GVISOR: &str = "6.1.0-test";

/// [`run_sh`] with only arguments.
fn run_args(bundle: &Path, args: &[&str]) -> (i32, String) {
    run_sh(
        bundle,
        Call {
            args,
            ..Call::default()
        },
    )
}

/// Runs `bundle/run.sh`; returns (exit code, stdout). Nothing may reach stderr. Fresh log
/// folders go next to the bundle (`TMPDIR`), so they are removed with it.
fn run_sh(bundle: &Path, call: Call<'_>) -> (i32, String) {
    let tmp = bundle.parent().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(bundle.join("run.sh"))
        .args(call.args)
        .current_dir(call.cwd.unwrap_or(tmp))
        .env("TMPDIR", tmp)
        .env_remove("OUT")
        .env_remove("GPU_REQUIRE_CUDA")
        .env_remove("COMPUTE_SANITIZER")
        .env_remove("TORCH_PYTHON")
        // Not gVisor, whatever this machine is, unless a test says otherwise.
        .env("RUN_SH_KERNEL_RELEASE", NOT_GVISOR)
        .envs(call.env.iter().copied());
    if let Some(out) = call.out {
        cmd.env("OUT", out);
    }
    if let Some(prefix) = call.path_prefix {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", prefix.display()));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(
        stderr.is_empty(),
        "run.sh wrote to stderr: {stderr}\nstdout:\n{stdout}"
    );
    (status.code().unwrap_or(-1), stdout)
}

/// The line starting with `prefix`.
fn line<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starts with {prefix:?}:\n{stdout}"))
}

/// The verdict: `run.sh: PASSED (...)` or `run.sh: FAILED: ...`.
fn verdict(stdout: &str) -> &str {
    line(stdout, "run.sh: ")
}

/// The names of the files in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The device tool returns at most 8 files, each named with letters, digits, `.`, `_`, `-`.
fn assert_fits_the_device_tool(out: &Path) {
    let names = files_in(out);
    assert!(names.len() <= 8, "{names:?}");
    for name in &names {
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
            "{name}"
        );
        assert!(out.join(name).is_file(), "{name} is not a file");
    }
}

/// The names in a `.tar.gz`, without a leading `./`.
fn archive_names(archive: &Path) -> Vec<String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|name| name.trim_start_matches("./").to_owned())
        .collect();
    names.sort();
    names
}

/// Prints its arguments and GPU_REQUIRE_CUDA, a CPU and a CUDA test passing, and two
/// result lines (two test binaries' worth).
const PASSING: &str = r#"
echo "args: $*"
echo "GPU_REQUIRE_CUDA=${GPU_REQUIRE_CUDA:-unset}"
echo "test a::cpu ... ok"
echo "test a::cuda ... ok"
echo "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
echo "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;

/// A CUDA test that passes after printing `SKIPPED:` (what a GPU-less machine shows).
const SKIPPING: &str = r#"
echo "test b::cuda ... ok"
echo "successes:"
echo "---- b::cuda stdout ----"
echo "SKIPPED: no CUDA driver"
echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;

/// Two result lines, one failing, and exit 101 as libtest does.
const FAILING: &str = r#"
echo "test a::cuda ... FAILED"
echo "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
echo "SKIPPED: x"
echo "SKIPPED: y"
exit 101
"#;

#[test]
fn run_sh_is_valid_bash_with_the_unfiltered_targets_filled_in() {
    let text = run_sh_text();
    assert!(text.starts_with("#!/usr/bin/env bash\n"));
    assert!(!text.contains(UNFILTERED_PLACEHOLDER));
    assert!(!text.contains(NOT_SANITIZED_PLACEHOLDER));
    assert!(!text.contains(GROUPED_PLACEHOLDER));
    // Every part is in place, once.
    assert!(
        !text.lines().any(|line| line.starts_with("# @include ")),
        "a part of run.sh is missing"
    );
    let assembled = assembled_template();
    for (name, part) in RUN_SH_PARTS {
        assert_eq!(assembled.matches(part).count(), 1, "{name}");
    }
    assert!(
        text.contains("grouped_targets=\"it\""),
        "run.sh must know the binaries it runs a group at a time"
    );
    assert!(
        text.contains("unfiltered_targets=\"gpukit_cuda_sys nvrtc gpukit_cuda cuda_poison\""),
        "the sanitizer steps must know the unfiltered targets"
    );
    // cuda_poison writes out of bounds on purpose: memcheck would fail on it by design.
    assert!(
        text.contains("not_sanitized_targets=\"cuda_poison\""),
        "the sanitizer steps must know what to leave out"
    );
    if !bash_available() {
        return;
    }
    let out = Command::new("bash")
        .arg("-n")
        .arg("-c")
        .arg(&text)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_green_run_exits_0_and_leaves_a_summary_and_an_archive() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("green");
    let bundle = fake_bundle(&tmp, &[("alpha", PASSING)]);
    let out = tmp.path().join("out");
    fs::create_dir_all(&out).unwrap();
    // Run from another folder: run.sh finds its bundle; the logs go to a fresh folder.
    let cwd = tmp.path().join("elsewhere");
    fs::create_dir_all(&cwd).unwrap();
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--serial"],
            cwd: Some(&cwd),
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(verdict(&stdout), "run.sh: PASSED (tests)", "{stdout}");
    assert_eq!(line(&stdout, "5 passed"), "5 passed, 0 failed", "{stdout}");
    assert!(
        line(&stdout, "==> tests: expected ").contains("(an estimate)"),
        "{stdout}"
    );
    let alpha: Vec<&str> = line(&stdout, "alpha ").split_whitespace().collect();
    // The seconds it took (column 11) depend on the machine.
    assert_eq!(
        [&alpha[..10], &alpha[11..]].concat(),
        [
            "alpha", "tests", "5", "passed", "0", "failed", "1", "ignored", "0", "skipped", "s",
            "ok"
        ]
    );
    assert_fits_the_device_tool(&out);
    assert_eq!(files_in(&out), ["tests.logs.tar.gz", "tests.summary.txt"]);
    assert_eq!(archive_names(&out.join("tests.logs.tar.gz")), ["alpha.log"]);
    let summary = fs::read_to_string(out.join("tests.summary.txt")).unwrap();
    assert!(summary.contains("commit: fake123"), "{summary}");
    assert!(
        summary.ends_with("run.sh: PASSED (tests)\n"),
        "the summary is complete: {summary}"
    );
    // Nothing was written where run.sh was started; the log went to the fresh folder.
    assert!(files_in(&cwd).is_empty());
    let logs = PathBuf::from(line(&stdout, "logs:   ").trim_start_matches("logs:   "));
    let log = fs::read_to_string(logs.join("alpha.log")).unwrap();
    assert!(log.contains("GPU_REQUIRE_CUDA=1"), "{log}");
    assert!(
        log.contains("args: --show-output --test-threads=1"),
        "{log}"
    );
    assert!(logs.starts_with(tmp.path()), "{}", logs.display());
}

#[test]
fn a_failing_binary_and_a_crash_fail_the_run() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("fail");
    let bundle = fake_bundle(
        &tmp,
        &[
            ("alpha", PASSING),
            ("beta", FAILING),
            ("crash", "echo boom\nexit 3\n"),
        ],
    );
    let logs = tmp.path().join("logs");
    let out = tmp.path().join("out");
    let (code, stdout) = run_args(
        &bundle,
        &[
            "--allow-skip",
            "--logs",
            logs.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--",
            "extra",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(line(&stdout, "6 passed"), "6 passed, 3 failed", "{stdout}");
    assert_eq!(verdict(&stdout), "run.sh: FAILED: 3 failed", "{stdout}");
    let beta = line(&stdout, "beta ");
    assert!(beta.contains("    1 passed     2 failed"), "{beta}");
    assert!(beta.contains(" s  FAILED"), "{beta}");
    assert!(beta.ends_with("FAILED (exit 101)"), "{beta}");
    let crash = line(&stdout, "crash ");
    assert!(crash.contains("    0 passed     1 failed"), "{crash}");
    assert!(crash.ends_with("no test result line)"), "{crash}");
    assert!(stdout.contains("    test a::cuda ... FAILED"), "{stdout}");
    // --allow-skip: the SKIPPED lines are listed but fail nothing.
    assert!(stdout.contains("  1x beta: ?: SKIPPED: x"), "{stdout}");

    let alpha_log = fs::read_to_string(logs.join("alpha.log")).unwrap();
    assert!(alpha_log.contains("GPU_REQUIRE_CUDA=unset"), "{alpha_log}");
    assert!(
        alpha_log.contains("args: --show-output extra"),
        "{alpha_log}"
    );
    assert_eq!(
        archive_names(&out.join("tests.logs.tar.gz")),
        ["alpha.log", "beta.log", "crash.log"]
    );
}

#[test]
fn a_run_where_nothing_passed_fails() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("nothing");
    // A filter that matched nothing: libtest says ok, with 0 passed.
    let filtered_out = r#"
echo "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 5 filtered out; finished in 0.00s"
"#;
    let bundle = fake_bundle(&tmp, &[("alpha", filtered_out)]);
    for args in [
        &["--", "nomatch"][..],
        &["--allow-skip", "--", "nomatch"][..],
    ] {
        let (code, stdout) = run_sh(
            &bundle,
            Call {
                args,
                ..Call::default()
            },
        );
        assert_eq!(code, 1, "{args:?}: {stdout}");
        assert_eq!(
            verdict(&stdout),
            "run.sh: FAILED: tests: no test passed, so nothing was verified",
            "{stdout}"
        );
    }
}

#[test]
fn a_run_where_no_cuda_test_passed_fails_unless_skips_are_allowed() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("skipcuda");
    // What `-- --skip cuda` leaves: CPU tests only.
    let cpu_only = r#"
echo "test a::cpu ... ok"
echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.00s"
"#;
    let bundle = fake_bundle(&tmp, &[("alpha", cpu_only)]);
    let (code, stdout) = run_args(&bundle, &["--", "--skip", "cuda"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        verdict(&stdout).contains("no test with `cuda` in its name passed"),
        "{stdout}"
    );
    let (code, stdout) = run_args(&bundle, &["--allow-skip"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn a_skipped_line_fails_unless_allowed_or_expected() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("skipped");
    let bundle = fake_bundle(&tmp, &[("alpha", PASSING), ("beta", SKIPPING)]);
    let (code, stdout) = run_sh(&bundle, Call::default());
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("  1x beta: b::cuda: SKIPPED: no CUDA driver"),
        "the line is listed with its test: {stdout}"
    );
    assert!(
        verdict(&stdout).contains("1 SKIPPED: lines although GPU_REQUIRE_CUDA=1"),
        "{stdout}"
    );
    assert_eq!(
        line(&stdout, "1 skipped"),
        "1 skipped (0 expected), 1 ignored"
    );

    let (code, stdout) = run_args(&bundle, &["--expect-skip", "no CUDA driver"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("  1x (expected) beta: b::cuda: SKIPPED: no CUDA driver"),
        "{stdout}"
    );

    let (code, stdout) = run_args(&bundle, &["--allow-skip"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn usage_errors_exit_2_and_an_empty_bundle_fails() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("usage");
    let bundle = fake_bundle(&tmp, &[]);
    for args in [
        &["--frobnicate"][..],
        &["--sanitize"][..],
        &["--sanitize", "bogus"][..],
        &["--budget", "soon"][..],
        &["--logs", "same", "--out", "same"][..],
        &["--quick"][..],
        &["--max-mib", "64"][..],
        &["--bench", "--max-mib", "0"][..],
        &["--bench", "--max-mib", "lots"][..],
        &["--first"][..],
        &["--first", "nosuch"][..],
        &["--only", "nosuch"][..],
        &["--only="][..],
    ] {
        let out = Command::new("bash")
            .arg(bundle.join("run.sh"))
            .args(args)
            .current_dir(tmp.path())
            .env_remove("OUT")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let (code, stdout) = run_args(&bundle, &["--logs", "logs"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(verdict(&stdout).contains("no test binaries"), "{stdout}");
}

#[test]
fn a_program_past_its_time_is_cut_and_the_outputs_still_written() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("timeout");
    let hang = "echo 'test slow::cuda has been running for over 60 seconds'\nsleep 30\n";
    let bundle = fake_bundle(&tmp, &[("a_hang", hang), ("b_alpha", PASSING)]);
    let out = tmp.path().join("out");
    let started = std::time::Instant::now();
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--binary-timeout", "1"],
            out: Some(&out),
            ..Call::default()
        },
    );
    assert!(started.elapsed().as_secs() < 20, "the hang was not cut");
    assert_eq!(code, 1, "{stdout}");
    assert!(
        line(&stdout, "a_hang ").ends_with("FAILED (timed out after 1 s)"),
        "{stdout}"
    );
    // The next binary still ran.
    assert!(line(&stdout, "b_alpha ").ends_with(" ok"), "{stdout}");
    assert!(
        stdout.contains("    test slow::cuda has been running for over 60 seconds"),
        "{stdout}"
    );
    assert!(
        verdict(&stdout).contains("1 programs cut short by the time limits"),
        "{stdout}"
    );
    assert_eq!(files_in(&out), ["tests.logs.tar.gz", "tests.summary.txt"]);
    let summary = fs::read_to_string(out.join("tests.summary.txt")).unwrap();
    assert!(
        summary.contains("  a_hang (tests): timed out after 1 s"),
        "{summary}"
    );

    // A spent budget: the first binary takes it all, the second never starts. (run.sh
    // counts whole seconds with bash's SECONDS, which ticks with the wall clock, so a 1 s
    // budget can be spent before the first program starts: 3 s leaves it at least one.)
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--budget", "3"],
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        !line(&stdout, "a_hang ").contains("not started"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "b_alpha ").contains("not started: the time budget (--budget 3) was spent"),
        "{stdout}"
    );
    assert!(
        verdict(&stdout).contains("1 programs not started"),
        "{stdout}"
    );
}

/// A fake compute-sanitizer: prints its options, runs the program; racecheck finds 2
/// errors, the other tools none.
const FAKE_SANITIZER: &str = r#"
tool=
while [ $# -gt 0 ]; do
    case $1 in
        --tool) tool=$2; shift 2 ;;
        --*) echo "sanitizer option: $1 $2"; shift 2 ;;
        *) break ;;
    esac
done
"$@"
if [ "$tool" = racecheck ]; then echo "========= ERROR SUMMARY: 2 errors"; exit 1; fi
echo "========= ERROR SUMMARY: 0 errors"
"#;

/// A fake comparator, run by `bash` (`TORCH_PYTHON=bash`): prints its arguments, then acts
/// as `$FAKE_TORCH` says: `runs` prints a table line and writes its JSON (the last
/// argument), `absent` says it was not run, `fails` exits 1 after writing its JSON.
const FAKE_COMPARATOR: &str = r#"
echo "comparator args: $*"
json=${@: -1}
case $FAKE_TORCH in
    runs) echo "enqueue   add_f32_1024   host us/op   2.00   5.00   0.400   <= 0.50   met"; echo '{}' > "$json" ;;
    absent) echo "torch comparator: not run (import torch failed: No module named 'torch')" ;;
    fails) echo '{}' > "$json"; echo "torch comparator: error: RuntimeError: CUDA error" >&2; exit 1 ;;
esac
"#;
