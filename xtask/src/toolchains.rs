//! `cargo xtask toolchains` and CI's `toolchains` step: the workspace compiles on the
//! oldest Rust it declares (`rust-version`), and the library crates a user builds on the
//! current nightly.
//!
//! The declared minimum comes from [`crate::msrv::declared_toolchain`]. Each toolchain is
//! installed with rustup where it is missing (`--profile minimal`; the nightly is brought
//! up to date), then `cargo check` runs with it, in a target folder of its own under
//! `target/toolchains/` so that its artifacts never mix with the stable build's: on the
//! declared minimum `--workspace --all-targets` (the tutorials, tests and programs too), on
//! the nightly `-p gpukit --lib` (the facade and every library crate it builds on, what
//! breaks for a user; the programs' and tests' own dependencies are left out, which halves
//! the step's time).
//!
//! - The declared minimum must pass: a user on that version gets a build that stops at once
//!   otherwise. [`crate::msrv`] (in tidy) checks what the dependencies declare; this checks
//!   what the compiler says.
//! - A failing nightly is reported with its errors and fails nothing: a nightly can break
//!   for reasons that are not ours, and whoever reads the report decides whether our code
//!   is at fault (as it once was, with an inference that nightly rejected).
//!
//! Where rustup is missing or cannot install a toolchain (no network), the check of that
//! toolchain is reported as not run and fails nothing.

use std::path::Path;
use std::process::Command;

use crate::util::{self, Cli, Failure, Result};

/// What became of one toolchain's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// `cargo check` passed.
    Passed,
    /// `cargo check` failed (its output went to the terminal).
    Failed(String),
    /// The toolchain could not be installed or run; why.
    NotRun(String),
}

/// `rustup` with the environment of the cargo that runs xtask removed, so that the
/// toolchain it is asked for is the one that runs.
fn rustup() -> Command {
    let mut cmd = Command::new("rustup");
    for var in [
        "RUSTUP_TOOLCHAIN",
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The command that checks the workspace at `root` with `toolchain` (the nightly: the
/// library crates).
fn check_command(root: &Path, toolchain: &str) -> Command {
    let mut cmd = rustup();
    let what: &[&str] = if toolchain == "nightly" {
        &["-p", "gpukit", "--lib"]
    } else {
        &["--workspace", "--all-targets"]
    };
    cmd.current_dir(root)
        .args(["run", toolchain, "cargo", "check"])
        .args(what)
        .arg("--locked")
        .arg("--target-dir")
        .arg(root.join("target").join("toolchains").join(toolchain));
    cmd
}

/// `rustc --version` of `toolchain`, when rustup has it.
fn version(toolchain: &str) -> Option<String> {
    let out = rustup()
        .args(["run", toolchain, "rustc", "--version"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Installs `toolchain` when rustup lacks it (the nightly always, to bring it up to date);
/// its `rustc --version`, or why it cannot be had.
fn install(toolchain: &str) -> std::result::Result<String, String> {
    if !util::succeeds(rustup().arg("--version")) {
        return Err("rustup is not installed".into());
    }
    let installed = version(toolchain);
    if let Some(version) = &installed {
        if toolchain != "nightly" {
            return Ok(version.clone());
        }
    }
    let mut cmd = rustup();
    cmd.args(["toolchain", "install", toolchain, "--profile", "minimal"]);
    match (util::run(&mut cmd), installed) {
        (Ok(()), _) => {
            version(toolchain).ok_or_else(|| "rustup installed it, but it does not run".into())
        }
        // An outdated nightly that is installed still says something.
        (Err(_), Some(version)) => {
            println!("warning: could not update {toolchain}; checking the one installed");
            Ok(version)
        }
        (Err(err), None) => Err(format!("rustup could not install it ({})", err.message)),
    }
}

/// Checks the workspace with `toolchain`, installing it first where needed.
fn check(root: &Path, toolchain: &str) -> Checked {
    match install(toolchain) {
        Ok(version) => println!("{toolchain}: {version}"),
        Err(why) => return Checked::NotRun(why),
    }
    match util::run(&mut check_command(root, toolchain)) {
        Ok(()) => Checked::Passed,
        Err(err) => Checked::Failed(err.message),
    }
}

/// The verdict on the two checks: only a failing declared minimum fails.
fn verdict(msrv: &str, at_msrv: &Checked, at_nightly: &Checked) -> Result {
    for (toolchain, checked, fatal) in [(msrv, at_msrv, true), ("nightly", at_nightly, false)] {
        match checked {
            Checked::Passed if fatal => {
                println!("toolchains: {toolchain}: the workspace compiles")
            }
            Checked::Passed => println!("toolchains: {toolchain}: the library crates compile"),
            Checked::NotRun(why) => {
                println!("toolchains: {toolchain}: not run: {why}")
            }
            Checked::Failed(why) if fatal => {
                return Err(Failure::new(format!(
                    "toolchains: the workspace does not compile on its declared minimum, \
                     {toolchain} ({why}): fix the code, or raise `rust-version` and the \
                     README's toolchain line"
                )));
            }
            Checked::Failed(why) => println!(
                "toolchains: {toolchain}: FAILED, reported and not fatal ({why}); if the \
                 errors above are in our code, fix it"
            ),
        }
    }
    Ok(())
}

/// Runs `cargo xtask toolchains`.
pub fn run(root: &Path, args: &[String]) -> Result {
    Cli::new(args).none()?;
    let msrv = crate::msrv::declared_toolchain(root)?;
    util::header(&format!("toolchains: the declared minimum, {msrv}"));
    let at_msrv = check(root, &msrv);
    util::header("toolchains: the current nightly");
    let at_nightly = check(root, "nightly");
    verdict(&msrv, &at_msrv, &at_nightly)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_with_the_toolchain_in_a_target_folder_of_its_own() {
        let shown = util::display(&check_command(Path::new("/w"), "1.90.0"));
        assert!(
            shown.ends_with(
                "rustup run 1.90.0 cargo check --workspace --all-targets --locked \
                 --target-dir /w/target/toolchains/1.90.0"
            ),
            "{shown}"
        );
        let shown = util::display(&check_command(Path::new("/w"), "nightly"));
        assert!(
            shown.ends_with(
                "rustup run nightly cargo check -p gpukit --lib --locked \
                 --target-dir /w/target/toolchains/nightly"
            ),
            "{shown}"
        );
    }

    #[test]
    fn only_the_declared_minimum_is_fatal() {
        let failed = Checked::Failed("exit 101".into());
        let not_run = Checked::NotRun("no network".into());
        assert!(verdict("1.90.0", &Checked::Passed, &failed).is_ok());
        assert!(verdict("1.90.0", &not_run, &not_run).is_ok());
        let err = verdict("1.90.0", &failed, &Checked::Passed).unwrap_err();
        assert!(err.message.contains("1.90.0"), "{}", err.message);
    }
}
