//! `cuda_doctor`: what this machine offers CUDA, and what the workspace's probe and loaders
//! make of it, printed before any test runs. The GPU bundle ships it as `tools/cuda_doctor`
//! and `run.sh --doctor` runs it.
//!
//! It reports, section by section: the environment (`CUDA_VISIBLE_DEVICES`, `CUDA_HOME`,
//! `CUDA_PATH`, `LD_LIBRARY_PATH`); `nvidia-smi`, if present; the driver (every libcuda that
//! discovery finds, the one loaded, `cuDriverGetVersion`, and the probe's devices or its
//! typed error with every folder searched); the driver library cudarc will open (the check
//! every CUDA context runs first); NVRTC (every candidate, the one chosen, its version,
//! supported architectures and builtins library); built-in kernels (the element-wise add of
//! each of the ten element types, as gpukit-core generates it, compiled by NVRTC in
//! parallel for the device's architecture, timed cold, then stored in and read back from
//! the kernel cache on disk, timed); cuBLAS (every candidate, the ones chosen, the version); and a smoke
//! test on device 0 that runs in seconds: context, alloc, upload, add, sum, f32 and f16
//! gemm, capture and replay (with a reduction), managed memory with prefetch and an event
//! timing, one `PASS`/`FAIL` line each, with the error.
//!
//! A check that fails is reported and the others still run. Without a device the kernels are
//! compiled for sm_90 (an H100) instead, and the output says so: NVRTC needs no GPU; the
//! smoke test then fails at its first line with the reason. The exit status is 0 only when
//! every check passed, 1 when one failed, 2 for bad usage.
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
use std::time::{Duration, Instant};

use gpukit::cuda::cache::{DiskCache, KernelKey};
use gpukit::cuda::GENERATED_OPTIONS;
use gpukit::half::f16;
use gpukit::{BinaryOp, DType};
use gpukit::{Gemm, Location};
use gpukit_cuda_sys::discover::{self, Lib};
use gpukit_cuda_sys::nvrtc::{self, NvrtcLib, Target};
use gpukit_cuda_sys::probe::{self, version_pair};
use gpukit_examples::cli::{self, Cli};

/// The architecture compiled for when there is no device: an H100's.
const FALLBACK_CC: (u32, u32) = (9, 0);

const USAGE: &str = "usage: cuda_doctor

Prints what this machine offers CUDA (driver, devices, NVRTC, cuBLAS, the environment) and
what the workspace's probe found, compiles every built-in kernel module with NVRTC into the
kernel cache (GPU_KERNEL_CACHE), runs a smoke test on device 0, and lists the Vulkan adapters
the wgpu backend finds (for information). Exits 0 when every CUDA check passed, 1 otherwise.";

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
    smoke_test(&mut checks);
    nvtx_section();
    nccl_section();
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
    println!("  not compiled in (gpukit-tools' `vulkan` feature is off)");
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
    match &lib.builtins {
        Ok(path) => println!("  builtins: {}", path.display()),
        Err(why) => println!(
            "  builtins: not loaded by path ({why}); NVRTC looks for them on the loader's path"
        ),
    }
    let (cc, why) = match facts.compute_capability {
        Some(cc) => (cc, "device 0's architecture"),
        None => (
            FALLBACK_CC,
            "no device: an H100's architecture instead of the device's",
        ),
    };
    builtin_modules(checks, lib, cc, why);
}

/// Compiles a built-in kernel of every element type (the element-wise add, as gpukit-core
/// generates it) with NVRTC at once (cold: the kernel cache is not asked), stores each in
/// the kernel cache on disk, and reads them back (cached), timing both: the cost a process
/// pays without the cache and with it.
fn builtin_modules(checks: &mut Checks, lib: &'static NvrtcLib, cc: (u32, u32), why: &str) {
    heading("built-in kernels");
    let target = lib.target_for(cc);
    let shown = match target {
        Target::Sass(major, minor) => format!("sm_{major}{minor} (cubin)"),
        Target::Ptx(major, minor) => format!("compute_{major}{minor} (PTX)"),
    };
    println!(
        "  compiling the element-wise add of all {} element types for compute capability {}.{} ({why}): {shown}",
        DType::ALL.len(),
        cc.0,
        cc.1
    );
    let programs: Vec<(DType, String, String)> = DType::ALL
        .iter()
        .map(|&d| {
            let (name, source) = gpukit::core::__binary_kernel_cuda(BinaryOp::Add, d);
            (d, source, format!("{name}_{d}"))
        })
        .collect();
    let start = Instant::now();
    let compiled: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = programs
            .iter()
            .map(|(_, source, name)| {
                s.spawn(move || {
                    let t = Instant::now();
                    let r = lib.compile(source, name, target, GENERATED_OPTIONS);
                    (r, t.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let cold = start.elapsed();
    let mut failed = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut images = Vec::new();
    for ((elem, _, _), result) in programs.iter().zip(compiled) {
        match result {
            Ok((Ok(c), took)) => {
                slowest = slowest.max(took);
                if !c.log.is_empty() {
                    println!("  {elem} compiler log: {}", c.log);
                }
                images.push(Some(c));
            }
            Ok((Err(e), _)) => {
                failed.push(format!("{elem}: {e}"));
                images.push(None);
            }
            Err(_) => {
                failed.push(format!("{elem}: the compiling thread panicked"));
                images.push(None);
            }
        }
    }
    if !failed.is_empty() {
        checks.fail("NVRTC compile", failed.join("\n    "));
        return;
    }
    let bytes: usize = images.iter().flatten().map(|c| c.image.len()).sum();
    checks.pass(format_args!(
        "cold: {} programs ({:.1} MiB) compiled in {:.2} s, one thread each on {} cores (the slowest took {:.2} s)",
        images.len(),
        bytes as f64 / f64::from(1u32 << 20),
        cold.as_secs_f64(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        slowest.as_secs_f64()
    ));
    let Some(disk) = DiskCache::from_env() else {
        println!("  kernel cache: off (GPU_KERNEL_CACHE=off): every process compiles again");
        return;
    };
    println!("  kernel cache: {}", disk.dir().display());
    let key = |program| builtin_key(program, lib.version, target);
    for (program, c) in programs.iter().zip(images.iter().flatten()) {
        if let Err(e) = disk.store(&key(program), c) {
            checks.fail(
                "kernel cache",
                format_args!("could not store {}: {e}", program.2),
            );
            return;
        }
    }
    let start = Instant::now();
    let read: Vec<_> = programs.iter().map(|p| disk.load(&key(p))).collect();
    let cached = start.elapsed();
    let same = read
        .iter()
        .zip(images.iter().flatten())
        .all(|(r, c)| r.as_ref() == Some(c));
    if same {
        checks.pass(format_args!(
            "cached: the same {} programs read back from disk in {:.1} ms ({:.0}x faster)",
            read.len(),
            cached.as_secs_f64() * 1e3,
            cold.as_secs_f64() / cached.as_secs_f64().max(1e-9)
        ));
    } else {
        checks.fail(
            "kernel cache",
            "an entry read back differs from what was stored",
        );
    }
}

/// The kernel cache's key of a built-in kernel's program.
fn builtin_key(
    (_, source, name): &(DType, String, String),
    nvrtc: (u32, u32),
    target: Target,
) -> KernelKey<'_> {
    KernelKey {
        source,
        name,
        options: GENERATED_OPTIONS,
        nvrtc,
        target,
    }
}

/// Seconds-long checks of the CUDA paths a test run relies on, on device 0 through the CUDA
/// backend directly (no fallback): one `PASS`/`FAIL` line each, with the error. Without a
/// context the rest are not run.
fn smoke_test(checks: &mut Checks) {
    heading("smoke test (device 0)");
    let ctx = match gpukit::cuda::CudaBackend::context(0) {
        Ok(ctx) => {
            let info = ctx.info();
            checks.pass(format_args!(
                "PASS context: cuda:0 {} (compute capability {:?}, {} SMs)",
                info.name, info.compute_capability, info.multiprocessors
            ));
            ctx
        }
        Err(e) => {
            checks.fail(
                "smoke test",
                format_args!("FAIL context: {}", gpukit::error_chain(&e)),
            );
            println!("  not run: alloc, upload, add, sum, gemm f32, gemm f16, capture and replay, managed memory, event timing (no context)");
            return;
        }
    };
    let steps: [(&str, SmokeStep); 9] = [
        ("alloc", smoke_alloc),
        ("upload", smoke_upload),
        ("add", smoke_add),
        ("sum", smoke_sum),
        ("gemm f32", smoke_gemm_f32),
        ("gemm f16", smoke_gemm_f16),
        ("capture and replay", smoke_capture),
        ("managed memory with prefetch", smoke_managed),
        ("event timing", smoke_event),
    ];
    let mut failed = 0;
    for (name, step) in steps {
        let t = Instant::now();
        match step(&ctx) {
            Ok(detail) => println!(
                "  PASS {name}: {detail} ({:.1} ms)",
                t.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => {
                failed += 1;
                println!("  FAIL {name}: {e}");
            }
        }
    }
    if failed == 0 {
        checks.pass(format_args!("smoke test: all {} steps passed", steps.len()));
    } else {
        checks.fail(
            "smoke test",
            format_args!("{failed} of {} steps failed", steps.len()),
        );
    }
}

/// What a smoke step reports: a detail line, or the error.
type Step = Result<String, Box<dyn std::error::Error>>;

/// One step of the smoke test.
type SmokeStep = fn(&gpukit::cuda::CudaContext) -> Step;

/// `Err` with `what` unless `ok`.
fn ensure(ok: bool, what: impl Display) -> Result<(), Box<dyn std::error::Error>> {
    if ok {
        Ok(())
    } else {
        Err(what.to_string().into())
    }
}

/// Values that are not all equal and not all zero (zeros hide unwritten outputs).
fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i % 97) as f32 - 40.0).collect()
}

fn smoke_alloc(ctx: &gpukit::cuda::CudaContext) -> Step {
    let a = ctx.alloc_zeros::<f32>(1 << 20)?;
    let back = a.download()?;
    ensure(
        back.iter().all(|&v| v == 0.0),
        "alloc_zeros read back non-zero",
    )?;
    Ok(format!("1 Mi f32 zeroed, {} bytes", a.size_bytes()))
}

fn smoke_upload(ctx: &gpukit::cuda::CudaContext) -> Step {
    let host = ramp(1 << 20);
    let a = ctx.alloc_upload(&host)?;
    ensure(a.download()? == host, "download differs from the upload")?;
    Ok("1 Mi f32 round trip".into())
}

fn smoke_add(ctx: &gpukit::cuda::CudaContext) -> Step {
    let x = ramp(1 << 20);
    let a = ctx.alloc_upload(&x)?;
    let mut out = ctx.alloc_zeros::<f32>(x.len())?;
    ctx.add(&a, &a, &mut out)?;
    let want: Vec<f32> = x.iter().map(|v| v + v).collect();
    ensure(out.download()? == want, "a + a differs from the host's")?;
    Ok("1 Mi f32, bit for bit".into())
}

fn smoke_sum(ctx: &gpukit::cuda::CudaContext) -> Step {
    let x = ramp(1 << 20);
    let a = ctx.alloc_upload(&x)?;
    let got = ctx.sum(&a)?;
    // Small integers: every partial sum is exact in f64, so the f32 result is exact.
    let want = x.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
    ensure(got == want, format_args!("sum {got}, want {want}"))?;
    Ok(format!("1 Mi f32 = {got}"))
}

/// A product of small integers, exact in f32 accumulation: any correct gemm gives the same.
fn gemm_case() -> (usize, usize, usize, Vec<f32>, Vec<f32>, Vec<f32>) {
    let (m, n, k) = (64, 48, 32);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
        }
    }
    (m, n, k, a, b, c)
}

fn smoke_gemm_f32(ctx: &gpukit::cuda::CudaContext) -> Step {
    let (m, n, k, a, b, want) = gemm_case();
    let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
    let mut dc = ctx.alloc_zeros::<f32>(m * n)?;
    ctx.gemm(Gemm::new(m, n, k), &da, &db, &mut dc)?;
    ensure(dc.download()? == want, "C differs from the host's product")?;
    Ok(format!("{m}x{n}x{k} (cuBLAS), exact"))
}

fn smoke_gemm_f16(ctx: &gpukit::cuda::CudaContext) -> Step {
    let (m, n, k, a, b, want) = gemm_case();
    let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<f16>>();
    let (da, db) = (ctx.alloc_upload(&h(&a))?, ctx.alloc_upload(&h(&b))?);
    let mut dc = ctx.alloc_zeros::<f16>(m * n)?;
    ctx.gemm(Gemm::new(m, n, k), &da, &db, &mut dc)?;
    // Every entry is an integer below 2048 in magnitude: exact in f16.
    let got: Vec<f32> = dc.download()?.iter().map(|v| v.to_f32()).collect();
    ensure(got == want, "C differs from the host's product")?;
    Ok(format!("{m}x{n}x{k} (cublasGemmEx, f32 compute), exact"))
}

fn smoke_capture(ctx: &gpukit::cuda::CudaContext) -> Step {
    let x = ramp(1 << 16);
    let dx = ctx.alloc_upload(&x)?;
    let mut y = ctx.alloc_zeros::<f32>(x.len())?;
    let mut total = ctx.alloc_zeros::<f32>(1)?;
    // A capture cannot wait for other streams' unfinished work (the zeroing above).
    ctx.sync()?;
    let s = ctx.create_stream()?;
    let graph = s.capture(|s| {
        s.relu(&dx, &mut y)?;
        s.add_inplace(&mut y, &dx)?;
        s.sum_into(&y, &mut total)
    })?;
    // Replayed on another stream, after the capturing one is gone: the graph owns what its
    // reduction needs.
    drop(s);
    let other = ctx.create_stream()?;
    for _ in 0..3 {
        graph.launch(&other)?;
    }
    other.sync()?;
    let want_y: Vec<f32> = x.iter().map(|&v| v.max(0.0) + v).collect();
    let want_total = want_y.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
    ensure(y.download()? == want_y, "y differs after the replays")?;
    let got = total.download()?[0];
    ensure(
        got == want_total,
        format_args!("sum {got}, want {want_total}"),
    )?;
    Ok(format!(
        "{} ops captured, replayed 3x on another stream",
        graph.len()
    ))
}

fn smoke_managed(ctx: &gpukit::cuda::CudaContext) -> Step {
    let n = 1 << 16;
    let mut u = ctx.alloc_unified::<f32>(n)?;
    u.host_mut()?.copy_from_slice(&ramp(n));
    let s = ctx.create_stream()?;
    u.prefetch(&s, Location::Device)?;
    s.scale(2.0f32, &mut u)?;
    u.prefetch(&s, Location::Host)?;
    s.sync()?;
    let want: Vec<f32> = ramp(n).iter().map(|v| v * 2.0).collect();
    ensure(u.host()? == &want[..], "host view differs after the scale")?;
    Ok("64 Ki f32 written on the host, scaled on the device, read on the host".into())
}

fn smoke_event(ctx: &gpukit::cuda::CudaContext) -> Step {
    let s = ctx.create_stream()?;
    let mut x = ctx.alloc_zeros::<f32>(1 << 24)?;
    let start = s.record_event()?;
    for _ in 0..8 {
        s.fill(&mut x, 1.0)?;
    }
    let end = s.record_event()?;
    let ms = start.elapsed_ms(&end)?;
    ensure(
        ms > 0.0 && ms < 10_000.0,
        format_args!("{ms} ms for 8 fills of 64 MiB"),
    )?;
    let bytes = 8.0 * f64::from(1u32 << 26);
    Ok(format!(
        "8 fills of 64 MiB in {ms:.3} ms ({:.0} GB/s written)",
        bytes / (ms * 1e-3) / 1e9
    ))
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

/// NCCL is optional (collectives across GPUs and processes; without it `Communicator` runs
/// in process and a `ProcessGroup` of one process works): reported, never a failed check.
fn nccl_section() {
    heading("NCCL (Communicator on CUDA devices, ProcessGroup)");
    match gpukit::cuda::nccl::version() {
        Ok((major, minor, patch)) => {
            println!("  NCCL {major}.{minor}.{patch} loads: collectives on CUDA devices use it")
        }
        Err(e) => println!("  {e}"),
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
