//! The CUDA emulator's integration tests, in one test binary: the emulated driver, NVRTC,
//! cuBLAS and NCCL called through their C entry points (`gpukit_cuda_emu::api::*`), as a
//! program linked against NVIDIA's libraries would call them, and checked against
//! NVIDIA's documented rules and independent references (CPU computations, known answers).
//!
//! Ground rules of the harness (this file):
//!
//! - **The cache.** Before the first emulator call every test goes through [`setup`], which
//!   points `GPUKIT_CUDA_EMU_CACHE` at a folder under `CARGO_TARGET_TMPDIR` (once per
//!   process, through a [`Once`]): the emulator reads its settings once, on first use, and
//!   keeps compiled modules there, so a second run compiles nothing. Every other setting is
//!   left at its default (2 devices) unless a test runs in a child process of its own.
//! - **Child processes.** A sticky error (an illegal address, a failed launch, an assertion,
//!   a race reported as a launch failure) breaks a device for the life of the process, and
//!   some settings (fault injection, seeds, memory size, the race policy) are read once per
//!   process. Tests that cause or risk either, or that depend on timing or on the whole
//!   context (the legacy default stream, global-mode stream capture, `cuMemGetInfo`), run
//!   in a child: [`in_child`] re-runs this binary with `--exact <test path>
//!   --test-threads=1 --nocapture`, the marker variable [`CHILD_MARKER`] set to the test's
//!   path and the settings the test asks for; in the child the test does its work, and the
//!   parent relays the child's output, asserts that it ran exactly that one test and that
//!   it passed, and may check its standard error (the emulator's diagnostics).
//! - **No compiler, no test.** Everything that compiles kernels needs the host's C++
//!   compiler (the emulated NVRTC runs it): such a test calls [`skip_without_cxx`] first,
//!   which prints `SKIPPED: <reason>` to standard error when neither `g++` nor `clang++`
//!   runs, and the test returns. It never passes by doing nothing otherwise.
//! - **References.** Every test asserts something that could be false, against a reference
//!   computed independently of the emulator.

mod common;

mod api_header;
mod capture;
mod cublas;
mod driver;
mod faults;
mod kernels;
mod memory;
mod nccl;
mod races;
mod streams;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// The variable that tells a child process which test it runs (its value: the test's path).
pub const CHILD_MARKER: &str = "GPUKIT_CUDA_EMU_TEST_CHILD";

/// How long a child may run before the parent kills it and fails the test (a hang in the
/// emulator must fail the test, not the whole run).
const CHILD_TIMEOUT: Duration = Duration::from_secs(600);

/// The emulator's cache folder for these tests.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpukit-cuda-emu-tests-cache")
}

/// Points the emulator's cache under `CARGO_TARGET_TMPDIR`, once per process, before the
/// first emulator call (the emulator reads its settings once, on first use).
pub fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = cache_dir();
        std::fs::create_dir_all(&dir).expect("the emulator's cache folder can be made");
        // Edition 2021: `set_var` is safe; it runs once, before any emulator call of this
        // process (every test calls `setup` first), so no emulator thread reads it meanwhile.
        std::env::set_var("GPUKIT_CUDA_EMU_CACHE", &dir);
    });
}

/// Whether the host's C++ compiler (which the emulated NVRTC runs) is missing; when it is,
/// says so on standard error as `SKIPPED: <reason>`. A test that compiles kernels returns
/// when this is true.
pub fn skip_without_cxx() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let have = *HAVE.get_or_init(|| {
        ["g++", "clang++"].iter().any(|c| {
            Command::new(c)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    });
    if !have {
        eprintln!(
            "SKIPPED: no host C++ compiler (`g++ --version` and `clang++ --version` fail), which the emulated NVRTC needs to compile kernels"
        );
    }
    !have
}

/// The name libtest gives test `name` of module `module` (a `module_path!()`): the module
/// path without the crate's name, then the function's.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_krate, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// What a child process wrote.
#[derive(Debug)]
pub struct ChildOutput {
    /// Its standard output (the test's prints and libtest's summary).
    pub stdout: String,
    /// Its standard error (the emulator's diagnostics, `cuda-emu: ...`).
    pub stderr: String,
}

/// Runs the test `module::name` (`module` a `module_path!()`) in a child process with the
/// settings `env` (every other `GPUKIT_CUDA_EMU_*` variable of this process but the cache
/// and the compiler is removed, so that the child sees the defaults). In the child (the
/// marker names this test) runs `body` and returns `None`; in the parent relays the child's
/// output, asserts that the child ran exactly this test and that it passed, and returns
/// what it wrote.
pub fn in_child(
    module: &str,
    name: &str,
    env: &[(&str, &str)],
    body: impl FnOnce(),
) -> Option<ChildOutput> {
    setup();
    let path = test_path(module, name);
    if std::env::var(CHILD_MARKER).as_deref() == Ok(path.as_str()) {
        body();
        return None;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", &path, "--test-threads=1", "--nocapture"]);
    for (k, _) in std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| k.starts_with("GPUKIT_CUDA_EMU_"))
    {
        if k != "GPUKIT_CUDA_EMU_CACHE" && k != "GPUKIT_CUDA_EMU_CXX" {
            cmd.env_remove(&k);
        }
    }
    cmd.env(CHILD_MARKER, &path)
        .env("GPUKIT_CUDA_EMU_CACHE", cache_dir())
        .env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the child test starts");
    let mut out_pipe = child.stdout.take().expect("piped stdout");
    let mut err_pipe = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break Some(status);
        }
        if start.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().expect("stdout reader");
    let stderr = err_reader.join().expect("stderr reader");
    // Relayed as this test's own output: shown on failure, or always with --nocapture.
    print!("{stdout}");
    eprint!("{stderr}");
    let Some(status) = status else {
        panic!(
            "the child running `{path}` did not finish within {CHILD_TIMEOUT:?} and was killed; its output is above"
        );
    };
    assert!(
        status.success(),
        "the child running `{path}` failed ({status}); its output is above"
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran nothing under the name `{path}`; its output is above"
    );
    Some(ChildOutput { stdout, stderr })
}
