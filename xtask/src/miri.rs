//! `cargo xtask miri`: gpukit-core's and gpukit-cpu's tests (unit tests and doc tests) under Miri.
//!
//! Miri runs the tests in an interpreter that checks every memory access, so undefined
//! behaviour in the unsafe code of gpukit-core (host buffers, views, the CPU kernel argument
//! plumbing) and gpukit-cpu (its memory, queues and worker threads) shows up as an error. It
//! needs the nightly toolchain with the `miri` component (`rustup component add
//! --toolchain nightly miri rust-src`); this command says so when they are missing.
//! Isolation is disabled because the CPU backend reads `/proc/cpuinfo` and `/proc/meminfo`
//! for its device description. Arguments after `--` go to `cargo miri test`.

use std::path::Path;
use std::process::Command;

use crate::util::{self, Cli, Failure, Result};

/// Runs `cargo xtask miri [-- <args>]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let (mut cli, extra) = Cli::with_passthrough(args);
    cli.none()?;
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
    // `cargo miri test` without `--doc` runs no doc tests: the unit tests and the doc tests
    // are two runs.
    for kind in ["--lib", "--doc"] {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(root)
            .env("MIRIFLAGS", "-Zmiri-disable-isolation")
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
        util::run(&mut cmd)?;
    }
    Ok(())
}
