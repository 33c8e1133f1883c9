//! `cargo xtask no-gpu`: the no-GPU contract, with unwinding and with `panic = "abort"`.
//!
//! 1. `cargo test -p gpukit --test it no_gpu::`, the `no_gpu` module of the facade's test
//!    binary: every public constructor that can request CUDA returns a typed error on a
//!    machine without a usable GPU, the probe's (with a GPU, the same calls must open it).
//!    This is where the values are asserted.
//! 2. The same kinds of calls, plus gpukit-cuda-sys's library loaders, in the
//!    `no_gpu_abort` tool (an example of gpukit-tools) built with
//!    `CARGO_PROFILE_RELEASE_PANIC=abort` into `target/panic-abort` (its own target folder,
//!    so the normal build cache keeps its `panic = "unwind"` artefacts). A test harness needs
//!    unwinding, an example does not; under unwinding a panic the library catches on the way
//!    would pass for a typed error, under abort it kills the process. The tool asks only
//!    that every call returns, since step 1 checks what they return. It is run directly, so
//!    that a panic shows as what it is, death by SIGABRT, rather than as cargo's exit status
//!    101.
//! 3. The same binary with `--panic`, which must die by SIGABRT: proof that the build really
//!    aborts on a panic, so that step 2's exit status 0 means no panic happened.

use std::path::Path;
use std::process::{Command, ExitStatus};

use crate::gpu_bundle::TOOL_PACKAGE;
use crate::util::{self, Cli, Failure, Result};

/// The target folder of the `panic = "abort"` build, relative to the workspace root.
pub const ABORT_TARGET_DIR: &str = "target/panic-abort";

/// The facade's test binary and the filter that selects its `no_gpu` module (no other
/// test's name holds `no_gpu::`).
const CONTRACT_TESTS: [&str; 2] = ["it", "no_gpu::"];

/// SIGABRT's number on Linux and macOS.
const SIGABRT: i32 = 6;

/// Runs `cargo xtask no-gpu`.
pub fn run(root: &Path, args: &[String]) -> Result {
    Cli::new(args).none()?;

    let mut test = util::cargo(root);
    let [binary, filter] = CONTRACT_TESTS;
    test.args(["test", "--package", "gpukit", "--test", binary, filter])
        .args(["--", "--nocapture", "--test-threads=1"]);
    util::run(&mut test)?;

    let target_dir = root.join(ABORT_TARGET_DIR);
    let mut build = util::cargo(root);
    build
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .args(["build", "--release", "--package", TOOL_PACKAGE])
        .args(["--example", "no_gpu_abort", "--target-dir"])
        .arg(&target_dir);
    util::run(&mut build)?;
    let binary = target_dir
        .join("release")
        .join("examples")
        .join(format!("no_gpu_abort{}", std::env::consts::EXE_SUFFIX));

    let mut contract = Command::new(&binary);
    contract.current_dir(root);
    let status = status_of(&mut contract)?;
    if !status.success() {
        return Err(Failure::new(format!(
            "no-gpu: the panic = \"abort\" build broke the contract: {}",
            describe(status)
        )));
    }

    println!("no-gpu: now a deliberate panic, which must abort the process:");
    let mut panics = Command::new(&binary);
    panics.current_dir(root).arg("--panic");
    let status = status_of(&mut panics)?;
    if signal(status) != Some(SIGABRT) {
        return Err(Failure::new(format!(
            "no-gpu: a deliberate panic should abort (SIGABRT), but the process {}",
            describe(status)
        )));
    }
    println!("no-gpu: a deliberate panic aborted as it should (SIGABRT): the check above is real");
    println!(
        "no-gpu: PASS: typed errors, no panic, with unwinding (cargo test) and with panic = \"abort\""
    );
    Ok(())
}

/// Echoes and runs `cmd` with inherited output; its status, whatever it is.
fn status_of(cmd: &mut Command) -> Result<ExitStatus> {
    let shown = util::display(cmd);
    util::header(&shown);
    cmd.status()
        .map_err(|err| util::spawn_failure(&shown, &err))
}

/// The signal that ended the process, if one did.
#[cfg(unix)]
fn signal(status: ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

#[cfg(not(unix))]
fn signal(_status: ExitStatus) -> Option<i32> {
    None
}

/// `exited with status 1`, `was killed by SIGABRT (a panic)`, ...
fn describe(status: ExitStatus) -> String {
    match (status.code(), signal(status)) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(SIGABRT)) => "was killed by SIGABRT (a panic aborted it)".to_string(),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => format!("ended with {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_arguments() {
        let err = run(Path::new("."), &["--fast".to_string()]).unwrap_err();
        assert_eq!(err.code, 2);
    }

    #[test]
    fn the_contract_tests_are_a_module_of_the_facades_test_binary() {
        // A renamed module would leave the filter matching nothing, and step 1 verifying
        // nothing.
        let [binary, filter] = CONTRACT_TESTS;
        let main_rs = util::workspace_root()
            .join("crates/gpukit/tests")
            .join(binary)
            .join("main.rs");
        let text = std::fs::read_to_string(&main_rs).unwrap();
        let module = filter.trim_end_matches("::");
        assert!(
            text.lines().any(|line| line == format!("mod {module};")),
            "{} declares no `mod {module};`",
            main_rs.display()
        );
    }

    #[cfg(unix)]
    #[test]
    fn describes_statuses() {
        use std::os::unix::process::ExitStatusExt;
        // Raw wait statuses: exit code in the high byte, a signal in the low bits.
        assert_eq!(
            describe(ExitStatus::from_raw(1 << 8)),
            "exited with status 1"
        );
        assert_eq!(signal(ExitStatus::from_raw(SIGABRT)), Some(SIGABRT));
        assert!(describe(ExitStatus::from_raw(SIGABRT)).contains("SIGABRT"));
        assert!(describe(ExitStatus::from_raw(9)).contains("signal 9"));
    }
}
