//! `cargo xtask python`: builds the Python package (`crates/gpukit-python`, maturin's
//! `pyproject.toml`) into a wheel, installs it in a virtual environment and checks it: its
//! type stubs against the module (mypy's `stubtest`, and `mypy --strict` over a typed use of
//! the API) and its tests (`crates/gpukit-python/tests/test_*.py`, `unittest`) against
//! NumPy, and PyTorch where the environment has it; then the tests of the wheel built for
//! every CPython from 3.9 (the crate's `abi3-py39` feature: no buffer protocol) on CPython
//! 3.9 with NumPy 2.0 (where a 3.9 interpreter is installed); then the CUDA tests
//! (`tests/test_cuda.py`) again against the CUDA emulator (`cargo xtask cuda-emu`), where they
//! may not skip.
//!
//! The environment is `target/python/venv` (made with `$PYTHON -m venv`, `$PYTHON` else
//! `python3`), with maturin, NumPy and mypy from PyPI, and JAX (CPU jaxlib) where pip can
//! install it (its tests print `SKIPPED` where not). The wheel is built by pip through the
//! package's build backend, as `pip install crates/gpukit-python` builds it, but with the
//! dev profile (the test build's: the workspace's dependencies are reused; a user's
//! `pip install` builds the release profile) and without build isolation (maturin comes
//! from the environment, so a second run needs no network). Without an interpreter, or
//! where the environment cannot be made or filled, the step prints `SKIPPED:` and why;
//! `GPU_REQUIRE_PYTHON=1` makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Cli, Failure, Result};

/// The package of the module.
pub const PACKAGE: &str = "gpukit-python";
/// The Python package's folder (its `pyproject.toml`), relative to the workspace root.
const PROJECT: &str = "crates/gpukit-python";
/// Its tests, relative to the workspace root.
const TESTS: &str = "crates/gpukit-python/tests";
/// The tests that run a second time against the CUDA emulator.
const CUDA_TESTS: &str = "test_cuda.py";
/// The typed use of the API that `mypy --strict` checks against the stubs.
const TYPED_USE: &str = "crates/gpukit-python/tests/test_typing.py";
/// What stubtest may leave unchecked (the extension module inside the package).
const STUBTEST_ALLOWLIST: &str = "crates/gpukit-python/stubtest-allowlist.txt";
/// What it may also leave unchecked on CPython 3.11 (the buffer protocol's methods, which
/// 3.11 gives no Python names).
const STUBTEST_ALLOWLIST_311: &str = "crates/gpukit-python/stubtest-allowlist-py311.txt";
/// The crate's feature of the wheel for every CPython from 3.9.
const ABI3_PY39: &str = "abi3-py39";
/// Where the environment and the wheels go, relative to the workspace root.
const WORK_DIR: &str = "target/python";
/// What the environment gets from PyPI: the build backend (the range `pyproject.toml`
/// asks for), NumPy for the tests, mypy for the stubs.
const REQUIREMENTS: &[&str] = &["maturin>=1.5,<2", "numpy>=1.22", "mypy>=1.10"];
/// JAX with its CPU jaxlib, for the tests that share memory with it (optional).
const JAX: &str = "jax>=0.4.30";

/// The interpreter: `$PYTHON`, else `python3`.
fn interpreter() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// `python -m pip install --quiet` (pip's own notices off), to which the caller adds what.
fn pip_install(python: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    cmd
}

/// The environment's interpreter.
fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
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
    "crates/gpukit-python/tests/test_buffer.py",
    "crates/gpukit-python/tests/test_dlpack.py",
    "crates/gpukit-python/tests/test_cuda.py",
    "crates/gpukit-python/tests/test_examples.py",
    "crates/gpukit-python/tests/test_ops.py",
    "crates/gpukit-python/tests/test_protocols.py",
    "crates/gpukit-python/tests/test_semantics.py",
    "crates/gpukit-python/tests/test_typing.py",
    "examples/torch_interop.py",
];

/// The runner that reports the tests as libtest does: the GPU bundle's test unit `python`.
pub const LIBTEST_RUNNER: &str = "crates/gpukit-python/tests/libtest.py";

/// Builds the module's library with cargo's release profile (the GPU bundle's, which
/// carries the bare module, not a wheel), for every CPython from 3.9 (the device's Python
/// is not known here); returns the file cargo wrote and the name Python imports it by
/// (`gpukit.abi3.so`).
pub fn build_library(root: &Path) -> Result<(PathBuf, &'static str)> {
    let mut cmd = util::cargo(root);
    cmd.args([
        "build",
        "--release",
        "--package",
        PACKAGE,
        "--features",
        ABI3_PY39,
    ]);
    util::run(&mut cmd)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let (built, module) = library_names();
    Ok((target.join("release").join(built), module))
}

/// The environment's interpreter, once the environment holds what the build and the checks
/// need; else why it cannot.
fn environment(root: &Path) -> std::result::Result<PathBuf, String> {
    let python = interpreter();
    if !util::succeeds(Command::new(&python).arg("--version")) {
        return Err(format!("no Python interpreter ({python}, or $PYTHON)"));
    }
    let venv = root.join(WORK_DIR).join("venv");
    let venv_py = venv_python(&venv);
    if !util::succeeds(Command::new(&venv_py).arg("--version")) {
        util::header(&format!(
            "python: a virtual environment in {}",
            venv.display()
        ));
        let made = util::run(Command::new(&python).arg("-m").arg("venv").arg(&venv));
        if made.is_err() {
            return Err(format!(
                "`{python} -m venv` could not make an environment (Debian: apt-get install python3-venv)"
            ));
        }
    }
    let mut install = pip_install(&venv_py);
    install.args(REQUIREMENTS);
    if util::run(&mut install).is_err() {
        return Err(format!(
            "pip could not install {} from PyPI into {}",
            REQUIREMENTS.join(", "),
            venv.display()
        ));
    }
    // JAX (CPU jaxlib), whose tests print SKIPPED without it.
    let mut jax = pip_install(&venv_py);
    jax.arg(JAX);
    if util::run(&mut jax).is_err() {
        println!("warning: pip could not install {JAX}; its tests will print SKIPPED");
    }
    Ok(venv_py)
}

/// Builds the wheel with pip through the package's build backend (dev profile; with the
/// crate's `features`, into `target/python/<dir>`); returns it.
fn build_wheel(root: &Path, python: &Path, features: Option<&str>, dir: &str) -> Result<PathBuf> {
    let wheels = root.join(WORK_DIR).join(dir);
    // Only this build's wheel in the folder, so that it is the one installed.
    let _ = std::fs::remove_dir_all(&wheels);
    // The environment's `bin/` first on PATH, as activating it would: the build backend runs
    // its `maturin` from there.
    let bin = python.parent().unwrap_or(python);
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        ),
    )
    .map_err(|e| Failure::new(format!("PATH: {e}")))?;
    let mut build = Command::new(python);
    build
        .current_dir(root)
        .env("PATH", path)
        .args(["-m", "pip", "wheel", "--no-deps", "--no-build-isolation"])
        .args(["--disable-pip-version-check", "--config-settings"])
        .arg(match features {
            Some(f) => format!("build-args=--profile dev --features {f}"),
            None => "build-args=--profile dev".to_owned(),
        })
        .arg("--wheel-dir")
        .arg(&wheels)
        .arg(PROJECT);
    util::run(&mut build)?;
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| Failure::new(format!("could not read {}: {e}", wheels.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| Failure::new(format!("pip wrote no wheel to {}", wheels.display())))?;
    let size = std::fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
    println!(
        "{} ({:.1} MB, dev profile)",
        wheel.display(),
        size as f64 / 1e6
    );
    Ok(wheel)
}

/// Installs `wheel` in `python`'s environment in place of any earlier build of it.
fn install_wheel(python: &Path, wheel: &Path) -> Result {
    util::run(
        pip_install(python)
            .args(["--force-reinstall", "--no-deps"])
            .arg(wheel),
    )
}

/// Builds the package, installs it and runs its checks (the CI step and `cargo xtask
/// python`).
pub fn test(root: &Path) -> Result {
    util::header("python: the environment (target/python/venv: maturin, NumPy, mypy)");
    let python = match environment(root) {
        Ok(python) => python,
        Err(why) => {
            if std::env::var("GPU_REQUIRE_PYTHON").as_deref() == Ok("1") {
                return Err(Failure::new(format!(
                    "python: {why}, and GPU_REQUIRE_PYTHON=1"
                )));
            }
            println!("SKIPPED: the Python package's build and tests: {why}");
            return Ok(());
        }
    };
    // The CUDA emulator first, built as the test step builds the workspace (after that step,
    // nothing to compile): built after the wheel, PyO3 and the module would be compiled
    // again, as maturin's build gives PyO3's build script another interpreter setting.
    util::header("python: the CUDA emulator (for the CUDA tests at the end)");
    let emu = crate::cuda_emu::as_tested(root)?;
    util::header("python: build the wheel (pip, maturin; dev profile) and install it");
    let wheel = build_wheel(root, &python, None, "wheels")?;
    install_wheel(&python, &wheel)?;
    // From the workspace root, where no folder shadows the installed package.
    util::header("python: the type stubs against the module, and a typed use of the API");
    let mut stubtest = Command::new(&python);
    stubtest.current_dir(root).args([
        "-m",
        "mypy.stubtest",
        "gpukit",
        "--allowlist",
        STUBTEST_ALLOWLIST,
    ]);
    if minor_version(&python) == Some(11) {
        stubtest.args(["--allowlist", STUBTEST_ALLOWLIST_311]);
    }
    util::run(&mut stubtest)?;
    util::run(Command::new(&python).current_dir(root).args([
        "-m",
        "mypy",
        "--strict",
        "--no-incremental",
        TYPED_USE,
    ]))?;
    util::header("python: the module's tests (unittest, NumPy; PyTorch where installed)");
    util::run(&mut unittest(root, &python, "test_*.py"))?;
    oldest(root, &python)?;
    // The CUDA arrays' paths (DLPack's stream handshake, the CUDA Array Interface) against
    // the CUDA emulator, where nothing may be skipped.
    util::header("python: the CUDA tests against the CUDA emulator");
    let mut cuda = unittest(root, &python, CUDA_TESTS);
    emu.apply(&mut cuda);
    cuda.env("GPU_REQUIRE_CUDA", "1")
        .env("GPUKIT_CUDA_EMU_SMS", crate::cuda_emu::suite::sms());
    util::run(&mut cuda)
}

/// The wheel for every CPython from 3.9 (built by the environment's `builder`) on the
/// oldest, with the NumPy that Python gets (2.0, which speaks legacy DLPack only), where that
/// interpreter is installed (`python3.9` on PATH, or pyenv's); else a `SKIPPED:` line.
fn oldest(root: &Path, builder: &Path) -> Result {
    util::header("python: the wheel for CPython 3.9 and later (abi3-py39), on CPython 3.9");
    let Some(python) = python39() else {
        println!("SKIPPED: the wheel on CPython 3.9: no python3.9 here (on PATH or pyenv's)");
        return Ok(());
    };
    let wheel = build_wheel(root, builder, Some(ABI3_PY39), "wheels-py39")?;
    let venv = root.join(WORK_DIR).join("venv39");
    let venv_py = venv_python(&venv);
    if !util::succeeds(Command::new(&venv_py).arg("--version")) {
        util::run(Command::new(&python).arg("-m").arg("venv").arg(&venv))?;
    }
    let mut install = pip_install(&venv_py);
    install.arg("numpy");
    if util::run(&mut install).is_err() {
        println!("SKIPPED: the wheel on CPython 3.9: pip could not install NumPy");
        return Ok(());
    }
    install_wheel(&venv_py, &wheel)?;
    util::run(&mut unittest(root, &venv_py, "test_*.py"))
}

/// The minor version of the interpreter `python` (`11` for CPython 3.11).
fn minor_version(python: &Path) -> Option<u32> {
    let out = Command::new(python)
        .args(["-c", "import sys; print(sys.version_info[1])"])
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// A CPython 3.9 interpreter: `python3.9` where it runs, else pyenv's newest 3.9.
fn python39() -> Option<PathBuf> {
    if util::succeeds(Command::new("python3.9").arg("--version")) {
        return Some(PathBuf::from("python3.9"));
    }
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("3.9."))
        .map(|e| e.path().join("bin").join("python3.9"))
        .filter(|p| util::succeeds(Command::new(p).arg("--version")))
        .collect();
    found.sort();
    found.pop()
}

/// `unittest` over the tests matching `pattern`, with the installed wheel (nothing on
/// PYTHONPATH; `GPUKIT_WHEEL=1`: a bare module fails the wheel's test).
fn unittest(root: &Path, python: &Path, pattern: &str) -> Command {
    let mut run = Command::new(python);
    run.current_dir(root)
        .env_remove("PYTHONPATH")
        .env("GPUKIT_WHEEL", "1")
        .args(["-m", "unittest", "discover", "--start-directory", TESTS])
        .args(["--pattern", pattern, "--verbose"]);
    run
}

/// Runs `cargo xtask python`.
pub fn run(root: &Path, args: &[String]) -> Result {
    Cli::new(args).none()?;
    test(root)
}
