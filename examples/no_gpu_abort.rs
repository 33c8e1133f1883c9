//! The no-GPU contract under `panic = "abort"`: every public constructor that can request
//! CUDA, and gpukit-cuda-sys's library loaders, called on this machine; without a usable GPU each
//! must return a typed error. A panic anywhere aborts the process (SIGABRT), which
//! `cargo xtask no-gpu` reports as a failure.
//!
//! ```text
//! CARGO_PROFILE_RELEASE_PANIC=abort cargo run --release --example no_gpu_abort \
//!     --target-dir target/panic-abort -- --require-abort
//! cargo xtask no-gpu          # the same, after the `no_gpu` test of the gpukit crate
//! ```
//!
//! Exit status 0 when every call returned what the contract says (with a GPU usable, the
//! calls that need its absence print `SKIPPED: a GPU is usable here` and only have to return
//! `Ok` or a typed error), 1 when a call broke it, 2 when `--require-abort` is given and the
//! binary was not built with `panic = "abort"`. `--panic` panics on purpose, so the caller can
//! check that a panic really aborts. The same calls are asserted, with unwinding, by
//! `crates/gpukit/tests/no_gpu.rs`.

use std::path::PathBuf;
use std::process::ExitCode;

use gpukit::cuda::{probe, CudaBackend};
use gpukit::{Config, Context, DeviceSpec, Error, FallbackPolicy, SpecOrigin};
use gpukit_examples::cli::{self, Cli, CliError, Long};

/// What the calls returned, and what broke the contract.
#[derive(Default)]
struct Tally {
    calls: usize,
    broken: Vec<String>,
}

impl Tally {
    /// Records a constructor's result against the expected error (`None`: a GPU is usable,
    /// so `Ok` or a typed CUDA error will do).
    fn check<T>(&mut self, what: &str, got: gpukit::Result<T>, want: Option<&Error>) {
        self.calls += 1;
        let verdict = match (want, &got) {
            (Some(want), Err(e)) if e == want => Ok(format!("typed error: {e}")),
            (Some(want), Err(e)) => Err(format!("{e:?}, expected {want:?}")),
            (Some(_), Ok(_)) => Err("Ok although the CUDA probe failed".to_string()),
            (None, Ok(_)) => Ok("Ok (a GPU is usable)".to_string()),
            (
                None,
                Err(
                    e @ (Error::Unavailable {
                        backend: "cuda", ..
                    }
                    | Error::InvalidDevice {
                        backend: "cuda", ..
                    }),
                ),
            ) => Ok(format!("typed error: {e}")),
            (None, Err(e)) => Err(format!("unexpected error {e:?}")),
        };
        self.report(what, verdict);
    }

    /// Records a loader's result: `Ok` or a typed error are both fine (pip-installed CUDA
    /// libraries load on a machine without a driver).
    fn loader<E: std::fmt::Display>(&mut self, what: &str, got: Result<String, E>) {
        self.calls += 1;
        let text = match got {
            Ok(found) => format!("Ok: {found}"),
            Err(e) => format!("typed error: {e}"),
        };
        self.report(what, Ok(text));
    }

    fn report(&mut self, what: &str, verdict: Result<String, String>) {
        match verdict {
            Ok(text) => println!("  ok    {what}: {}", first_line(&text)),
            Err(text) => {
                println!("  FAIL  {what}: {text}");
                self.broken.push(what.to_string());
            }
        }
    }
}

/// The first line of a message, shortened: the probe's reasons list every folder searched.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 160 {
        format!("{}...", line.chars().take(160).collect::<String>())
    } else {
        line.to_string()
    }
}

const USAGE: &str = "\
usage: no_gpu_abort [options]

  --require-abort  exit with status 2 unless built with panic = \"abort\"
  --panic          panic on purpose (after the --require-abort check), to show that a
                   panic aborts
  -h, --help       this text";

/// The command line.
#[derive(Default)]
struct Args {
    require_abort: bool,
    panic: bool,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args::default();
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("require-abort") => args.require_abort = true,
            Long("panic") => args.panic = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = cli::parse_or_exit("no_gpu_abort", USAGE, parse_args);
    let abort = cfg!(panic = "abort");
    println!(
        "no_gpu_abort: built with panic = \"{}\"",
        if abort { "abort" } else { "unwind" }
    );
    if args.require_abort && !abort {
        eprintln!("no_gpu_abort: not built with panic = \"abort\"");
        return ExitCode::from(2);
    }
    if args.panic {
        panic!("no_gpu_abort: a deliberate panic (--panic)");
    }

    let want = match probe() {
        Err(pe) => {
            println!("CUDA probe: {}", first_line(&pe.to_string()));
            Some(Error::Unavailable {
                backend: "cuda",
                reason: pe.to_string(),
            })
        }
        Ok(p) => {
            println!(
                "SKIPPED: a GPU is usable here ({} device(s)); the calls must only not panic",
                p.devices.len()
            );
            None
        }
    };
    let want = want.as_ref();
    let mut t = Tally::default();

    // The facade's constructors.
    t.check(
        "Context::new(Cuda(None))",
        Context::new(DeviceSpec::Cuda(None)),
        want,
    );
    t.check(
        "Context::new(Cuda(Some(0)))",
        Context::new(DeviceSpec::Cuda(Some(0))),
        want,
    );
    t.check(
        "Context::new(Cuda(Some(7)))",
        Context::new(DeviceSpec::Cuda(Some(7))),
        want,
    );
    for text in ["cuda", "cuda:0"] {
        match text.parse::<DeviceSpec>() {
            Ok(spec) => t.check(&format!("Context::new({text:?})"), Context::new(spec), want),
            Err(e) => t.report(&format!("{text:?}.parse()"), Err(format!("{e:?}"))),
        }
    }
    // The CUDA backend's own.
    t.check("CudaBackend::new(0)", CudaBackend::new(0), want);
    t.check("CudaBackend::context(0)", CudaBackend::context(0), want);
    t.check("CudaBackend::new(7)", CudaBackend::new(7), want);
    // Configurations that forbid falling back, from every origin.
    let path = PathBuf::from("gpu.toml");
    for device in [DeviceSpec::Cuda(None), DeviceSpec::Cuda(Some(0))] {
        let cfg = Config {
            device,
            fallback: FallbackPolicy::Error,
            source: Some(path.clone()),
            ..Config::default()
        };
        for origin in [
            SpecOrigin::File(path.clone()),
            SpecOrigin::Explicit,
            SpecOrigin::Env,
        ] {
            t.check(
                &format!("Context::with_config({device}, fallback = error, from {origin})"),
                Context::with_config(&cfg, origin),
                want,
            );
        }
    }
    match Config::from_toml("device = \"cuda\"\nfallback = \"error\"\n", &path) {
        Ok(cfg) => t.check(
            "Context::with_config(gpu.toml: cuda, fallback = error)",
            Context::with_config(&cfg, SpecOrigin::File(path.clone())),
            want,
        ),
        Err(e) => t.report("Config::from_toml", Err(format!("{e:?}"))),
    }
    // `auto` and a file that allows fallback open the CPU, with CUDA's typed reason recorded.
    for (what, got) in [
        ("Context::new(Auto)", Context::new(DeviceSpec::Auto)),
        (
            "Context::with_config(gpu.toml: cuda, fallback = cpu)",
            Config::from_toml("device = \"cuda\"\nfallback = \"cpu\"\n", &path)
                .and_then(|cfg| Context::with_config(&cfg, SpecOrigin::File(path.clone()))),
        ),
    ] {
        t.calls += 1;
        let verdict = match (want, got) {
            (_, Err(e)) => Err(format!("{e:?}")),
            (None, Ok(ctx)) => Ok(format!("Ok on {}", ctx.backend_name())),
            (Some(want), Ok(ctx)) => {
                let rejected = &ctx.selection().rejected;
                if ctx.backend_name() == "cpu" && rejected.len() == 1 && rejected[0].reason == *want
                {
                    Ok(format!("the CPU, CUDA rejected: {}", rejected[0].reason))
                } else {
                    Err(format!("{} with {rejected:?}", ctx.backend_name()))
                }
            }
        };
        t.report(what, verdict);
    }
    // gpukit-cuda-sys's loaders: Ok or a typed error.
    t.loader(
        "gpukit_cuda_sys::probe()",
        gpukit_cuda_sys::probe().map(|p| format!("driver {}", p.driver_path.display())),
    );
    t.loader(
        "gpukit_cuda_sys::probe::driver()",
        gpukit_cuda_sys::probe::driver().map(|d| d.loaded.path.display().to_string()),
    );
    t.loader(
        "gpukit_cuda_sys::nvrtc::nvrtc(None)",
        gpukit_cuda_sys::nvrtc::nvrtc(None)
            .map(|n| format!("{} (NVRTC {:?})", n.loaded.path.display(), n.version)),
    );
    t.loader(
        "gpukit_cuda_sys::cublas::cublas(None)",
        gpukit_cuda_sys::cublas::cublas(None).map(|c| c.loaded.path.display().to_string()),
    );

    if t.broken.is_empty() {
        println!(
            "no_gpu_abort: PASS: {} calls, none panicked, every CUDA request {}",
            t.calls,
            if want.is_some() {
                "returned the probe's typed error"
            } else {
                "returned Ok or a typed error (a GPU is usable)"
            }
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "no_gpu_abort: FAIL: {} of {} calls broke the contract: {}",
            t.broken.len(),
            t.calls,
            t.broken.join(", ")
        );
        ExitCode::FAILURE
    }
}
