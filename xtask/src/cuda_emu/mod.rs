//! `cargo xtask cuda-emu`: the CUDA emulator (`crates/gpukit-cuda-emu`) in place of NVIDIA's
//! libraries, for any program.
//!
//! `build` builds the emulator's shared library and makes the folder of links that stands
//! for NVIDIA's libraries (`target/cuda-emu/lib`: `libcuda.so.1`, `libcuda.so`,
//! `libnvrtc.so.12`, `libcublas.so.12`, `libcublasLt.so.12`, `libnccl.so.2`, `libnccl.so`,
//! all links to the one library, which the dynamic loader then loads once); `env` prints the
//! `export` lines that select it for a shell or a CI script; `run -- COMMAND` runs a
//! command with them; `test` runs the CUDA tests against it ([`suite`]). The library is built with the test profile, so a CI step after
//! `cargo test` reuses that build.
//!
//! The variables: `LD_LIBRARY_PATH` (the link folder first: gpukit's discovery and cudarc's
//! loader look there before anywhere else), `GPUKIT_CUDA_EMU_CACHE` (the emulator's compiled
//! modules, under `target/cuda-emu/cache`) and `GPU_KERNEL_CACHE` (gpukit's kernel cache,
//! kept apart from the user's and started afresh for each build of the emulator). A shell that exported them hands the emulator to every CUDA
//! program it starts, PyTorch's included: use `run` for one command instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Cli, Failure, Result};

pub mod suite;

/// The links that stand for NVIDIA's libraries.
pub const LINKS: [&str; 7] = [
    "libcuda.so.1",
    "libcuda.so",
    "libnvrtc.so.12",
    "libcublas.so.12",
    "libcublasLt.so.12",
    "libnccl.so.2",
    "libnccl.so",
];

/// `cargo xtask cuda-emu ...`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let (mut cli, passthrough) = Cli::with_passthrough(args);
    let mut command: Option<String> = None;
    let mut release = false;
    let mut jobs = 2usize;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            lexopt::Arg::Long("release") => release = true,
            lexopt::Arg::Long("jobs") => {
                jobs = cli.number("--jobs", "1 to 64", |n: &usize| (1..=64).contains(n))?
            }
            lexopt::Arg::Value(v) if command.is_none() => {
                command = Some(
                    v.into_string()
                        .map_err(|v| Failure::usage(format!("{v:?} is not UTF-8")))?,
                )
            }
            other => return Err(Failure::usage(format!("unexpected {other:?}"))),
        }
    }
    match command.as_deref() {
        Some("build") => {
            let env = prepare(root, release)?;
            println!("{}", env.lib_dir.display());
            Ok(())
        }
        Some("env") => {
            let env = prepare_quiet(root, release)?;
            // The shell's own LD_LIBRARY_PATH (at `eval` time) after the links.
            println!(
                "export LD_LIBRARY_PATH='{}'\"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\"",
                env.lib_dir.display()
            );
            for (k, v) in env.vars().into_iter().skip(1) {
                println!("export {k}='{v}'");
            }
            Ok(())
        }
        Some("run") => {
            let Some((program, rest)) = passthrough.split_first() else {
                return Err(Failure::usage("`run` needs a command after `--`"));
            };
            let env = prepare(root, release)?;
            let mut cmd = Command::new(program);
            cmd.args(rest);
            env.apply(&mut cmd);
            util::run(&mut cmd)
        }
        Some("test") => {
            let env = prepare(root, release)?;
            suite::run(root, &env, release, jobs, &passthrough)
        }
        _ => Err(Failure::usage(
            "cuda-emu takes `build`, `env`, `run -- COMMAND [ARGS]` or `test [--jobs N] [-- FILTER...]` (with `--release` for a release build)",
        )),
    }
}

/// The emulator's environment.
#[derive(Debug, Clone)]
pub struct EmuEnv {
    /// The folder of links.
    pub lib_dir: PathBuf,
    /// The emulator's module cache.
    pub cache: PathBuf,
    /// gpukit's kernel cache while the emulator runs.
    pub kernels: PathBuf,
}

impl EmuEnv {
    /// The variables, in the order `env` prints them.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut path = self.lib_dir.display().to_string();
        if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
            if !old.is_empty() {
                path = format!("{path}:{old}");
            }
        }
        vec![
            ("LD_LIBRARY_PATH", path),
            ("GPUKIT_CUDA_EMU_CACHE", self.cache.display().to_string()),
            ("GPU_KERNEL_CACHE", self.kernels.display().to_string()),
        ]
    }

    /// Sets the variables on `cmd`.
    pub fn apply(&self, cmd: &mut Command) {
        for (k, v) in self.vars() {
            cmd.env(k, v);
        }
    }
}

fn target_dir(root: &Path) -> Result<PathBuf> {
    let meta = util::cargo_metadata(root, &["--no-deps"])?;
    meta["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| Failure::new("`cargo metadata` names no target directory"))
}

fn build_command(root: &Path, release: bool) -> Command {
    let mut cmd = util::cargo(root);
    cmd.args(["build", "--package", "gpukit-cuda-emu", "--lib"]);
    if release {
        cmd.arg("--release");
    }
    cmd
}

/// Builds the emulator (showing the command) and makes its link folder.
pub fn prepare(root: &Path, release: bool) -> Result<EmuEnv> {
    util::run(&mut build_command(root, release))?;
    links(root, release)
}

/// CI's `cuda-emu` step, after the test step: the suite ([`suite`]) with `test_args` as its
/// filters, then (without filters) the `data_parallel` example on two emulated devices
/// through NCCL, checked against one device, and `cuda_doctor`'s checks and smoke test.
/// Everything is built as the test step built it (`--workspace`, the same features), so
/// only the emulator's library and the two examples are linked.
pub fn ci(root: &Path, test_args: &[String]) -> Result {
    let env = as_tested(root)?;
    // The test filters among CI's test arguments (libtest's own options left out).
    let filters: Vec<String> = test_args
        .iter()
        .take_while(|a| *a != "--")
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    suite::run(root, &env, false, 2, &filters)?;
    if !test_args.is_empty() {
        return Ok(());
    }
    let examples = target_dir(root)?.join("debug").join("examples");
    let programs: [(&str, &[&str]); 2] = [
        (
            "data_parallel",
            &["--devices", "cuda:0,1", "--check-against-one"],
        ),
        ("cuda_doctor", &[]),
    ];
    for (name, args) in programs {
        let mut cmd = Command::new(examples.join(name));
        cmd.args(args)
            .env("GPU_POOL", "off")
            .env("GPUKIT_CUDA_EMU_SMS", suite::sms());
        env.apply(&mut cmd);
        util::run(&mut cmd)?;
    }
    Ok(())
}

/// The emulator built as the test step builds the workspace (`--workspace`, with the two
/// examples the `cuda-emu` step runs: the features the test build resolved, so after that
/// step only what another build changed is compiled again, such as PyO3 after the Python
/// wheel's build, whose build script follows the interpreter: the Python step calls this
/// before it builds the wheel), and its environment.
pub fn as_tested(root: &Path) -> Result<EmuEnv> {
    util::run(util::cargo(root).args([
        "build",
        "--workspace",
        "--lib",
        "--example",
        "data_parallel",
        "--example",
        "cuda_doctor",
    ]))?;
    links(root, false)
}

/// As [`prepare`], with cargo's output on standard error only (`env`'s standard output is
/// the export lines).
fn prepare_quiet(root: &Path, release: bool) -> Result<EmuEnv> {
    let mut cmd = build_command(root, release);
    cmd.arg("--quiet");
    let shown = util::display(&cmd);
    let status = cmd
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| util::spawn_failure(&shown, &e))?;
    if !status.success() {
        return Err(Failure::new(format!("`{shown}` failed ({status})")));
    }
    links(root, release)
}

fn links(root: &Path, release: bool) -> Result<EmuEnv> {
    let target = target_dir(root)?;
    let profile = if release { "release" } else { "debug" };
    let lib = target.join(profile).join("libgpukit_cuda_emu.so");
    if !lib.is_file() {
        return Err(Failure::new(format!("{} was not built", lib.display())));
    }
    let base = target.join("cuda-emu");
    let lib_dir = base.join(format!("lib-{profile}"));
    std::fs::create_dir_all(&lib_dir)
        .map_err(|e| Failure::new(format!("could not make {}: {e}", lib_dir.display())))?;
    for name in LINKS {
        let link = lib_dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).map_err(|e| {
            Failure::new(format!(
                "could not link {} to {}: {e}",
                link.display(),
                lib.display()
            ))
        })?;
    }
    Ok(EmuEnv {
        lib_dir,
        cache: base.join("cache"),
        kernels: kernel_cache(&base, profile, &lib)?,
    })
}

/// gpukit's kernel cache for this build of the emulator: `kernels-<profile>-<stamp>`, named after
/// the library's size and modification time, the caches of earlier builds removed. gpukit keys
/// its cache on NVRTC's version, which the emulator does not change when its own compiler
/// does, so an image cached by an earlier build would otherwise outlive it.
fn kernel_cache(base: &Path, profile: &str, lib: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(lib)
        .map_err(|e| Failure::new(format!("could not read {}: {e}", lib.display())))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("kernels-{profile}-");
    let name = format!("{prefix}{:x}-{modified:x}", meta.len());
    if let Ok(entries) = std::fs::read_dir(base) {
        for entry in entries.flatten() {
            let old = entry.file_name();
            let old = old.to_string_lossy();
            if old.starts_with(&prefix) && old != name {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    Ok(base.join(name))
}
