//! The no-GPU contract under `panic = "abort"`: every way into CUDA returns, without a
//! panic, whatever the machine offers. `cargo xtask no-gpu` builds this program with
//! `CARGO_PROFILE_RELEASE_PANIC=abort` after running `cargo test -p gpukit --test it no_gpu::`.
//!
//! The test asserts what each call returns (without a GPU, the probe's typed error); like
//! every test harness it unwinds. This program covers what unwinding hides: a panic the
//! library catches on the way (the CUDA backend's loader runs cudarc's inside
//! `catch_unwind`) is a typed error there but kills the process here. So it makes the same
//! kinds of calls and asks only that each returns; the values are the test's to check.
//!
//! ```text
//! cargo xtask no-gpu
//! ```
//!
//! Exit status 0 when every call returned; 2 when not built with `panic = "abort"`, where
//! the check would prove nothing. `--panic` panics on purpose after that check, so that the
//! caller sees a panic really abort (SIGABRT).

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpukit::cuda::CudaBackend;
use gpukit::{Config, Context, DeviceSpec, FallbackPolicy, SpecOrigin};
use gpukit_examples::cli::{self, Cli, CliError, Long};

const USAGE: &str = "\
usage: no_gpu_abort [--panic]

Calls every way into CUDA (the facade's constructors, gpu.toml with and without fallback,
the CUDA backend's constructors, the driver, NVRTC and cuBLAS loaders) and prints what each
returned. Built with panic = \"abort\" (exit status 2 otherwise), so a panic anywhere kills
it with SIGABRT.

  --panic     panic on purpose, to show that a panic aborts
  -h, --help  this text";

/// `--panic`.
fn parse_args(cli: &mut Cli) -> Result<bool, CliError> {
    let mut panic = false;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("panic") => panic = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(panic)
}

/// `Ok`, or the error's first line (the probe's reasons list every folder searched).
fn outcome<T, E: Display>(result: Result<T, E>) -> String {
    match result {
        Ok(_) => "Ok".to_owned(),
        Err(e) => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or_default();
            let short: String = line.chars().take(160).collect();
            let cut = if short.len() < line.len() { "..." } else { "" };
            format!("typed error: {short}{cut}")
        }
    }
}

/// gpu.toml's text, as a file would give it.
fn from_gpu_toml(text: &str) -> gpukit::Result<Context> {
    let path = Path::new("gpu.toml");
    let cfg = Config::from_toml(text, path)?;
    Context::with_config(&cfg, SpecOrigin::File(path.to_path_buf()))
}

/// A call into CUDA, named, that returns what became of it.
type Call = (&'static str, fn() -> String);

/// Every way into CUDA.
const CALLS: &[Call] = &[
    ("Context::new(Cuda(None))", || {
        outcome(Context::new(DeviceSpec::Cuda(None)))
    }),
    ("Context::new(Cuda(Some(7)))", || {
        outcome(Context::new(DeviceSpec::Cuda(Some(7))))
    }),
    ("Context::new(\"cuda:0\".parse())", || {
        outcome("cuda:0".parse::<DeviceSpec>().and_then(Context::new))
    }),
    ("Context::new(Auto)", || {
        outcome(Context::new(DeviceSpec::Auto))
    }),
    (
        "Context::with_config(cuda, fallback = error, explicit)",
        || {
            let cfg = Config {
                device: DeviceSpec::Cuda(None),
                fallback: FallbackPolicy::Error,
                source: Some(PathBuf::from("gpu.toml")),
                ..Config::default()
            };
            outcome(Context::with_config(&cfg, SpecOrigin::Explicit))
        },
    ),
    ("gpu.toml: cuda, fallback = error", || {
        outcome(from_gpu_toml("device = \"cuda\"\nfallback = \"error\"\n"))
    }),
    ("gpu.toml: cuda, fallback = cpu", || {
        outcome(from_gpu_toml("device = \"cuda\"\nfallback = \"cpu\"\n"))
    }),
    ("CudaBackend::new(0)", || outcome(CudaBackend::new(0))),
    ("CudaBackend::context(7)", || {
        outcome(CudaBackend::context(7))
    }),
    ("gpukit_cuda_sys::probe()", || {
        outcome(gpukit_cuda_sys::probe())
    }),
    ("gpukit_cuda_sys::probe::driver()", || {
        outcome(gpukit_cuda_sys::probe::driver())
    }),
    ("gpukit_cuda_sys::nvrtc::nvrtc(None)", || {
        outcome(gpukit_cuda_sys::nvrtc::nvrtc(None))
    }),
    ("gpukit_cuda_sys::cublas::cublas(None)", || {
        outcome(gpukit_cuda_sys::cublas::cublas(None))
    }),
];

fn main() -> ExitCode {
    let panic = cli::parse_or_exit("no_gpu_abort", USAGE, parse_args);
    if !cfg!(panic = "abort") {
        eprintln!(
            "no_gpu_abort: not built with panic = \"abort\", so a panic would not show; build \
             it with CARGO_PROFILE_RELEASE_PANIC=abort (`cargo xtask no-gpu` does)"
        );
        return ExitCode::from(2);
    }
    if panic {
        panic!("no_gpu_abort: a deliberate panic (--panic)");
    }
    for (call, run) in CALLS {
        println!("  {call}: {}", run());
    }
    println!(
        "no_gpu_abort: PASS: {} calls returned under panic = \"abort\"",
        CALLS.len()
    );
    ExitCode::SUCCESS
}
