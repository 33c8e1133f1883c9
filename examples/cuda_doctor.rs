//! `cuda_doctor`: what this machine offers CUDA, and what the workspace's probe and loaders
//! make of it, printed before any test runs. The GPU bundle ships it as `tools/cuda_doctor`
//! and `run.sh --doctor` runs it.
//!
//! It reports, section by section: the environment (`CUDA_VISIBLE_DEVICES`, `CUDA_HOME`,
//! `CUDA_PATH`, `LD_LIBRARY_PATH`); `nvidia-smi`, if present; the driver (every libcuda that
//! discovery finds, the one loaded, `cuDriverGetVersion`, and the probe's devices or its
//! typed error with every folder searched); the driver library cudarc will open (the check
//! every CUDA context runs first); NVRTC (every candidate, the one chosen, its version and
//! supported architectures, and the built-in f32 module compiled for the device's
//! architecture, timed); cuBLAS (every candidate, the ones chosen, the version).
//!
//! A check that fails is reported and the others still run. Without a device the module is
//! compiled for sm_90 (an H100) instead, and the output says so: NVRTC needs no GPU. The
//! exit status is 0 only when every check passed, 1 when one failed, 2 for bad usage.
//!
//! ```text
//! cargo run --release --example cuda_doctor
//! ```
//!
//! It uses `gpukit-cuda-sys` and `gpukit-cuda` directly: it diagnoses those
//! layers, so it must not go through the facade's fallback to the CPU.

use std::fmt::Display;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use gpukit_cuda_sys::discover::{self, Lib};
use gpukit_cuda_sys::kernels::BUILTIN_OPTIONS;
use gpukit_cuda_sys::nvrtc::{self, Target};
use gpukit_cuda_sys::probe::{self, version_pair};
use gpukit_examples::cli::{self, Cli};

/// The architecture compiled for when there is no device: an H100's.
const FALLBACK_CC: (u32, u32) = (9, 0);

const USAGE: &str = "usage: cuda_doctor

Prints what this machine offers CUDA (driver, devices, NVRTC, cuBLAS, the environment) and
what the workspace's probe found, then compiles one built-in module with NVRTC; lists the Vulkan
adapters the wgpu backend finds (for information). Exits 0 when every CUDA check passed, 1
otherwise.";

/// The checks that failed, by name, for the last line and the exit status.
#[derive(Default)]
struct Checks {
    run: usize,
    failed: Vec<&'static str>,
}

impl Checks {
    fn pass(&mut self, detail: impl Display) {
        self.run += 1;
        println!("  ok: {detail}");
    }

    fn fail(&mut self, check: &'static str, why: impl Display) {
        self.run += 1;
        self.failed.push(check);
        println!("  FAILED ({check}): {why}");
    }
}

/// What the driver section learnt, for the sections after it.
struct DriverFacts {
    /// The driver's CUDA major version, which steers NVRTC and cuBLAS away from newer copies.
    major: Option<u32>,
    /// Device 0's compute capability, when the probe found a device.
    compute_capability: Option<(u32, u32)>,
    /// Whether a driver library loaded (the cudarc check means something only then).
    loaded: bool,
}

fn main() -> ExitCode {
    cli::parse_or_exit("cuda_doctor", USAGE, Cli::none);
    let mut checks = Checks::default();
    environment();
    nvidia_smi();
    let facts = driver(&mut checks);
    cudarc_loader(&mut checks, &facts);
    nvrtc_section(&mut checks, &facts);
    cublas_section(&mut checks, &facts);
    nvtx_section();
    vulkan_section();

    println!();
    if checks.failed.is_empty() {
        println!("cuda_doctor: all {} checks passed", checks.run);
        ExitCode::SUCCESS
    } else {
        println!(
            "cuda_doctor: {} of {} checks FAILED: {}",
            checks.failed.len(),
            checks.run,
            checks.failed.join(", ")
        );
        ExitCode::FAILURE
    }
}

/// What the Vulkan backend finds: the loader, the adapters with their drivers and shader
/// features, or why there are none. For information: the doctor's verdict is about CUDA.
fn vulkan_section() {
    heading("Vulkan (the wgpu backend; informational)");
    for var in ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"] {
        match std::env::var_os(var) {
            Some(value) => println!("  {var:<21}= {}", value.to_string_lossy()),
            None => println!("  {var:<21}  (unset)"),
        }
    }
    #[cfg(feature = "vulkan")]
    match gpukit::wgpu::probe() {
        Ok(p) => {
            for a in &p.adapters {
                println!(
                    "  vulkan:{} {} ({:?}, {} via {}; f16 {}, f64 {}){}",
                    a.ordinal,
                    a.name,
                    a.kind,
                    a.driver,
                    a.api,
                    a.f16,
                    a.f64,
                    if a.usable() {
                        String::new()
                    } else {
                        format!(" UNUSABLE: lacks {}", a.missing.join(", "))
                    }
                );
            }
        }
        Err(e) => println!("  no adapter: {e}"),
    }
    #[cfg(not(feature = "vulkan"))]
    println!("  not compiled in (the examples' `vulkan` feature is off)");
}

fn heading(title: &str) {
    println!("\n== {title}");
}

fn environment() {
    heading("environment");
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "LD_LIBRARY_PATH",
        "GPU_DEVICE",
    ] {
        match std::env::var_os(var) {
            Some(value) => println!("  {var:<21}= {}", value.to_string_lossy()),
            None => println!("  {var:<21}  (unset)"),
        }
    }
}

/// `nvidia-smi`'s own view, for comparison with the probe's; informational, not a check.
fn nvidia_smi() {
    heading("nvidia-smi");
    match Command::new("nvidia-smi").output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let errors = String::from_utf8_lossy(&out.stderr);
            for line in text.lines().chain(errors.lines()) {
                println!("  {line}");
            }
            if !out.status.success() {
                println!("  (nvidia-smi exited with {})", out.status);
            }
        }
        Err(err) => println!("  not run: {err} (not on PATH?)"),
    }
}

/// Lists every file of `lib` discovery finds, in the order it would try them.
fn candidates(lib: Lib) -> Vec<PathBuf> {
    let dirs = discover::search_dirs(lib);
    let found = discover::candidates(lib, &dirs);
    println!(
        "  {lib} candidates ({} found in {} folders searched):",
        found.len(),
        dirs.len()
    );
    for path in &found {
        println!("    {}", path.display());
    }
    found
}

fn driver(checks: &mut Checks) -> DriverFacts {
    heading("driver (libcuda)");
    candidates(Lib::Driver);
    let mut facts = DriverFacts {
        major: None,
        compute_capability: None,
        loaded: false,
    };
    match probe::driver() {
        Ok(drv) => {
            facts.loaded = true;
            println!("  loaded: {}", drv.loaded.path.display());
            match drv.version() {
                Ok(version) => {
                    let (major, minor) = version_pair(version);
                    facts.major = Some(major);
                    println!("  cuDriverGetVersion: {version} (CUDA {major}.{minor})");
                }
                Err(err) => println!("  cuDriverGetVersion: {err}"),
            }
        }
        Err(_) => println!("  loaded: none (the probe below says why)"),
    }
    match probe::probe() {
        Ok(found) => {
            let devices = found
                .devices
                .iter()
                .map(|d| {
                    format!(
                        "device {}: {}, compute capability {}.{}, {:.1} GiB, {} SMs, {} copy engines",
                        d.ordinal,
                        d.name,
                        d.compute_capability.0,
                        d.compute_capability.1,
                        d.total_memory as f64 / f64::from(1u32 << 30),
                        d.multiprocessors,
                        d.copy_engines
                    )
                })
                .collect::<Vec<_>>();
            facts.compute_capability = found.devices.first().map(|d| d.compute_capability);
            checks.pass(format_args!(
                "the probe found {} device(s)\n    {}",
                devices.len(),
                devices.join("\n    ")
            ));
        }
        Err(err) => checks.fail("probe", err),
    }
    facts
}

fn cudarc_loader(checks: &mut Checks, facts: &DriverFacts) {
    heading("cudarc's driver loader");
    let report = gpukit_cuda::cudarc_driver_report();
    // cudarc's list repeats some names; each is shown once, in its first place.
    let mut names: Vec<&str> = Vec::new();
    for name in &report.candidates {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    println!("  cudarc tries, in order: {}", names.join(" "));
    match &report.first_opened {
        Some((name, true)) => println!("  first that opens: {name} (the probe's library)"),
        Some((name, false)) => println!("  first that opens: {name} (NOT the probe's library)"),
        None => println!("  first that opens: none"),
    }
    match (&report.verdict, facts.loaded) {
        (Ok(()), _) => checks.pass("cudarc will load the driver the probe loaded"),
        (Err(err), true) => checks.fail("cudarc loader", err),
        // Without a driver the check only repeats the probe's error, already counted.
        (Err(_), false) => println!("  not checked: no driver loaded (see above)"),
    }
}

fn nvrtc_section(checks: &mut Checks, facts: &DriverFacts) {
    heading("NVRTC");
    candidates(Lib::Nvrtc);
    // The same choice the CUDA backend makes: nothing newer than the driver if it can help.
    let lib = match nvrtc::nvrtc(facts.major) {
        Ok(lib) => lib,
        Err(err) => {
            checks.fail("NVRTC", err);
            return;
        }
    };
    let (major, minor) = lib.version;
    println!(
        "  loaded: {} (NVRTC {major}.{minor})",
        lib.loaded.path.display()
    );
    let archs: Vec<String> = lib.archs.iter().map(|a| format!("sm_{a}")).collect();
    println!("  supported architectures: {}", archs.join(" "));
    let (cc, why) = match facts.compute_capability {
        Some(cc) => (cc, "device 0's architecture"),
        None => (
            FALLBACK_CC,
            "no device: an H100's architecture instead of the device's",
        ),
    };
    let target = lib.target_for(cc);
    let shown = match target {
        Target::Sass(major, minor) => format!("sm_{major}{minor} (cubin)"),
        Target::Ptx(major, minor) => format!("compute_{major}{minor} (PTX)"),
    };
    println!(
        "  compiling the built-in f32 module for compute capability {}.{} ({why}): {shown}",
        cc.0, cc.1
    );
    let start = Instant::now();
    let compiled = lib.compile(
        &gpukit::cuda::builtin_module_source(gpukit::DType::F32),
        "builtin_f32",
        target,
        BUILTIN_OPTIONS,
    );
    let ms = start.elapsed().as_secs_f64() * 1e3;
    match compiled {
        Ok(compiled) => {
            if !compiled.log.is_empty() {
                println!("  compiler log: {}", compiled.log);
            }
            checks.pass(format_args!(
                "compiled for {shown}: {} bytes in {ms:.0} ms",
                compiled.image.len()
            ));
        }
        Err(err) => checks.fail("NVRTC compile", format_args!("after {ms:.0} ms: {err}")),
    }
}

/// NVTX is optional (profiler ranges only): reported, never a failed check.
fn nvtx_section() {
    heading("NVTX (profiler ranges: ctx.range, pipeline stages)");
    if gpukit::cuda::nvtx::available() {
        println!("  libnvToolsExt loads: ranges appear in Nsight Systems");
    } else {
        println!("  libnvToolsExt not found: ranges are no-ops (nothing else depends on it)");
    }
}

fn cublas_section(checks: &mut Checks, facts: &DriverFacts) {
    heading("cuBLAS");
    candidates(Lib::Cublas);
    candidates(Lib::CublasLt);
    let lib = match gpukit_cuda_sys::cublas::cublas(facts.major) {
        Ok(lib) => lib,
        Err(err) => {
            checks.fail("cuBLAS", err);
            return;
        }
    };
    println!("  loaded: {}", lib.loaded.path.display());
    println!("  loaded: {}", lib.lt.path.display());
    match lib.version() {
        Ok((major, minor, patch)) => {
            checks.pass(format_args!("cuBLAS {major}.{minor}.{patch} loaded"));
        }
        Err(err) => checks.fail("cuBLAS version", err),
    }
}
