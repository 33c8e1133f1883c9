//! `cargo xtask python`: builds the Python module (`gpukit-python`, a `cdylib` on PyO3's
//! stable ABI) and runs its tests (`crates/gpukit-python/tests/test_*.py`, `unittest`)
//! against NumPy, and PyTorch where it is installed.
//!
//! The module is built with the dev profile and the test build's features
//! ([`build_library`]), so in CI it reuses the test step's build of the library crates,
//! and copied to `target/python/gpukit.abi3.so` (`gpukit.pyd` on Windows), which goes
//! first on `PYTHONPATH`. The interpreter is `$PYTHON`, else `python3`.
//! Without an interpreter, or without NumPy, the step prints `SKIPPED:` and what to install
//! (`.ci/run` installs NumPy); `GPU_REQUIRE_PYTHON=1` makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Cli, Failure, Result};

/// The package of the module.
pub const PACKAGE: &str = "gpukit-python";
/// Its tests, relative to the workspace root.
const TESTS: &str = "crates/gpukit-python/tests";
/// Where the module is put, relative to the workspace root.
pub const MODULE_DIR: &str = "target/python";

/// The interpreter: `$PYTHON`, else `python3`.
fn interpreter() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Why the tests cannot run here (no interpreter, no NumPy), or `None`.
pub fn missing() -> Option<&'static str> {
    let python = interpreter();
    if !util::succeeds(Command::new(&python).arg("--version")) {
        return Some("no Python interpreter (python3, or $PYTHON)");
    }
    if !util::succeeds(Command::new(&python).args(["-c", "import numpy"])) {
        return Some("NumPy is not installed (python3 -m pip install numpy)");
    }
    None
}

/// The file cargo builds for the `cdylib` and the name Python imports it by.
fn library_names() -> (String, &'static str) {
    let built = format!(
        "{}gpukit_python{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let module = if cfg!(windows) {
        "gpukit.pyd"
    } else {
        "gpukit.abi3.so"
    };
    (built, module)
}

/// The tests' files, relative to the workspace root, that the GPU bundle carries beside the
/// module (with the example one of them runs).
pub const BUNDLED_SCRIPTS: &[&str] = &[
    "crates/gpukit-python/tests/test_dlpack.py",
    "crates/gpukit-python/tests/test_examples.py",
    "examples/torch_interop.py",
];

/// The runner that reports the tests as libtest does: the GPU bundle's test unit `python`.
pub const LIBTEST_RUNNER: &str = "crates/gpukit-python/tests/libtest.py";

/// Builds the module with cargo's `profile` (`dev` or `release`); returns the file cargo
/// wrote and the name Python imports it by (`gpukit.abi3.so`).
///
/// The `dev` build names the whole workspace and one example: cargo then resolves the
/// dependencies' features as the test build did (an example brings in the dev-dependencies),
/// so the module links against that build; built alone, the package resolves fewer
/// features and compiles its whole dependency tree again (two and a half minutes of CI
/// here). The release build (the GPU bundle's) builds the package alone.
pub fn build_library(root: &Path, profile: &str) -> Result<(PathBuf, &'static str)> {
    let mut cmd = util::cargo(root);
    cmd.args(["build", "--profile", profile]);
    if profile == "dev" {
        cmd.args(["--workspace", "--lib", "--example", "data_parallel"]);
    } else {
        cmd.args(["--package", PACKAGE]);
    }
    util::run(&mut cmd)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let (built, module) = library_names();
    let folder = if profile == "dev" { "debug" } else { profile };
    Ok((target.join(folder).join(built), module))
}

/// Builds the module into [`MODULE_DIR`]; returns that folder.
pub fn build(root: &Path) -> Result<PathBuf> {
    util::header("python: build the gpukit module (gpukit-python, dev profile)");
    let (from, module) = build_library(root, "dev")?;
    let dir = root.join(MODULE_DIR);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(format!("could not create {}: {e}", dir.display())))?;
    let to = dir.join(module);
    // A fresh file, not an overwrite: a running interpreter may have the old one mapped.
    let _ = std::fs::remove_file(&to);
    std::fs::copy(&from, &to).map_err(|e| {
        Failure::new(format!(
            "could not copy {} to {}: {e}",
            from.display(),
            to.display()
        ))
    })?;
    println!("{} -> {}", from.display(), to.display());
    Ok(dir)
}

/// Builds the module and runs its tests (the CI step and `cargo xtask python`).
pub fn test(root: &Path) -> Result {
    if let Some(why) = missing() {
        if std::env::var("GPU_REQUIRE_PYTHON").as_deref() == Ok("1") {
            return Err(Failure::new(format!(
                "python: {why}, and GPU_REQUIRE_PYTHON=1"
            )));
        }
        println!("SKIPPED: the Python module's tests: {why}");
        return Ok(());
    }
    let dir = build(root)?;
    util::header("python: the module's tests (unittest, NumPy; PyTorch where installed)");
    let python_path = match std::env::var_os("PYTHONPATH") {
        Some(old) if !old.is_empty() => {
            let mut paths = vec![dir.clone()];
            paths.extend(std::env::split_paths(&old));
            std::env::join_paths(paths).map_err(|e| Failure::new(format!("PYTHONPATH: {e}")))?
        }
        _ => dir.into_os_string(),
    };
    let mut run = Command::new(interpreter());
    run.current_dir(root)
        .env("PYTHONPATH", python_path)
        .args(["-m", "unittest", "discover", "--start-directory", TESTS])
        .args(["--pattern", "test_*.py", "--verbose"]);
    util::run(&mut run)
}

/// Runs `cargo xtask python`.
pub fn run(root: &Path, args: &[String]) -> Result {
    Cli::new(args).none()?;
    test(root)
}
