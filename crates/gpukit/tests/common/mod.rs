//! Test harness shared by the facade's integration tests: one body per behaviour, run on
//! every backend.
//!
//! `backend_tests! { fn name(ctx) { ...; Ok(()) } }` makes a module `name` with one test per
//! backend (`name::cpu`, `name::cuda` when the `cuda` feature compiles CUDA in, and
//! `name::vulkan` when the `vulkan` feature compiles the wgpu backend in). Each
//! body gets a `&gpukit::Context` and returns
//! `gpukit::Result<()>`. A backend that cannot be opened on this machine prints
//! `SKIPPED: <reason>` and returns: the test never counts a GPU behaviour as verified, and
//! never fails because hardware is missing. Adding a backend means adding one function
//! here and one test in the macro, not new tests.
//!
//! `cpu_tests! { fn name(ctx) { ... } }` is the same for behaviours only the CPU backend has
//! (a kernel closure that panics, say): it makes `name::cpu` alone, so that a GPU run has no
//! CUDA variant that would print `SKIPPED` and count as passed without running anything.

#![allow(dead_code)]

use gpukit::{Context, DeviceSpec, In, KernelSpec, Out};

/// Runs the test `name` of module `module` (the caller's `module_path!()`) again in a child
/// process of this test binary, the only test there, on one thread, with the variable
/// `marker` set (the test checks it, and in the child does its work) and whatever else
/// `configure` sets; relays the child's output as this test's own and asserts that the
/// child ran that one test and it passed. For tests that need a process of their own: ones
/// that set the environment, or need it set before anything reads it.
pub fn run_in_child(
    module: &str,
    name: &str,
    marker: &str,
    configure: impl FnOnce(&mut std::process::Command) -> &mut std::process::Command,
) {
    let test = test_path(module, name);
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", &test, "--test-threads=1", "--nocapture"])
        .env(marker, "1");
    let out = configure(&mut cmd).output().expect("the child test runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Relayed as this test's own output: shown on failure, or always with --nocapture.
    print!("{text}");
    assert!(
        out.status.success(),
        "the child failed ({}); its output is above",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "the child ran nothing; its output is above"
    );
}

/// The name libtest gives the test `name` of module `module` (a `module_path!()`): the
/// module path without the crate's name, then the function's (`selection::env_rules` for
/// `it::selection` and `env_rules`; the bare name at a crate's root).
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// The CPU reference backend: always available.
pub fn cpu() -> Option<Context> {
    match Context::new(DeviceSpec::Cpu(None)) {
        Ok(ctx) => Some(ctx),
        Err(e) => panic!("the CPU backend must always open: {e}"),
    }
}

/// The first CUDA device, or `None` after printing why it cannot be used.
///
/// With `GPU_REQUIRE_CUDA=1` (set by `cargo xtask gpu-test` and the GPU bundle's `run.sh`)
/// an unusable CUDA backend fails the test instead, so a GPU run can never pass by skipping.
pub fn cuda() -> Option<Context> {
    match Context::new(DeviceSpec::Cuda(None)) {
        Ok(ctx) => {
            keep_cuda_context_alive(&ctx);
            Some(ctx)
        }
        Err(e) if require_cuda() => panic!("GPU_REQUIRE_CUDA is set but CUDA is unusable: {e}"),
        Err(e) => {
            skipped(&e.to_string());
            None
        }
    }
}

/// The first Vulkan adapter (lavapipe included), or `None` after printing why it cannot be
/// used. With `GPU_REQUIRE_VULKAN=1` (set by `.ci/run` once it has installed lavapipe, and
/// by the GPU bundle) an unusable Vulkan backend fails the test instead.
pub fn vulkan() -> Option<Context> {
    match Context::new(DeviceSpec::Vulkan(None)) {
        Ok(ctx) => Some(ctx),
        Err(e) if require_vulkan() => {
            panic!("GPU_REQUIRE_VULKAN is set but Vulkan is unusable: {e}")
        }
        Err(e) => {
            skipped(&e.to_string());
            None
        }
    }
}

/// Whether `GPU_REQUIRE_VULKAN=1`.
pub fn require_vulkan() -> bool {
    std::env::var("GPU_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// Checks the selection of an `auto` context that did not get CUDA: CUDA rejected first,
/// then either a Vulkan GPU (never a CPU-type adapter such as lavapipe) or the CPU with the
/// Vulkan backend rejected too.
pub fn assert_auto_without_cuda(ctx: &Context) {
    let rejected = &ctx.selection().rejected;
    assert!(!rejected.is_empty(), "auto without CUDA records why");
    assert_eq!(rejected[0].backend, "cuda", "{rejected:?}");
    assert!(!rejected[0].reason.to_string().is_empty());
    match ctx.backend_name() {
        "vulkan" => {
            assert_eq!(rejected.len(), 1, "{rejected:?}");
            #[cfg(feature = "vulkan")]
            {
                let p = gpukit::wgpu::probe().expect("auto opened Vulkan, so the probe finds it");
                let a = &p.adapters[ctx.device_id()];
                assert_ne!(a.kind, gpukit::wgpu::AdapterKind::Cpu, "auto took {a:?}");
            }
        }
        "cpu" => {
            assert_eq!(rejected.len(), 2, "{rejected:?}");
            assert_eq!(rejected[1].backend, "vulkan", "{rejected:?}");
            assert!(!rejected[1].reason.to_string().is_empty());
        }
        other => panic!("auto chose {other} after rejecting CUDA"),
    }
}

/// Whether `ctx`'s backend documents that it lacks the transcendental ops (`exp`, `log`,
/// `tanh`, `pow` and those built on them) on `dtype`: the wgpu backend in f64, which WGSL on
/// Vulkan does not have. Callers check that the op then fails with `Unsupported`.
pub fn lacks_math(ctx: &Context, dtype: gpukit::DType) -> bool {
    ctx.backend_name() == "vulkan" && dtype == gpukit::DType::F64
}

/// Asserts that `r` is the typed `Unsupported` error a documented gap gives.
pub fn assert_unsupported<T: std::fmt::Debug>(r: gpukit::Result<T>, what: &str) {
    match r {
        Err(gpukit::Error::Unsupported { .. }) => {}
        other => panic!("{what}: expected Unsupported, got {other:?}"),
    }
}

/// Reports a skipped test: `SKIPPED: <reason>` on the process's real stderr, which the test
/// harness does not capture, so the line shows in every test log (CI's included).
pub fn skipped(reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {reason}");
}

/// Whether `ctx` is a device of the CUDA emulator (gpukit-cuda-emu, `cargo xtask cuda-emu`),
/// which runs CUDA C only: a test of something the emulator does not model (PTX) prints
/// `SKIPPED: the CUDA emulator runs CUDA C only` through [`skipped_on_emulator`].
pub fn cuda_emulated(ctx: &Context) -> bool {
    ctx.backend_name() == "cuda" && ctx.info().name.contains("CUDA emulator")
}

/// On the CUDA emulator, prints `SKIPPED: the CUDA emulator runs CUDA C only` (and `what`)
/// and returns true.
pub fn skipped_on_emulator(ctx: &Context, what: &str) -> bool {
    if cuda_emulated(ctx) {
        skipped(&format!("the CUDA emulator runs CUDA C only ({what})"));
        return true;
    }
    false
}

/// Whether `GPU_REQUIRE_CUDA=1`.
pub fn require_cuda() -> bool {
    std::env::var("GPU_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// Keeps one CUDA context open for the life of the test process, so that the device's
/// primary context is not torn down and rebuilt between tests (hundreds of milliseconds
/// each time on a large GPU). Tests still get contexts of their own.
fn keep_cuda_context_alive(ctx: &Context) {
    static KEEP: std::sync::OnceLock<gpukit::Result<Context>> = std::sync::OnceLock::new();
    KEEP.get_or_init(|| Context::new(DeviceSpec::Cuda(Some(ctx.device_id()))));
}

/// Runs a test body and turns an error into a failure that shows the error.
pub fn run(ctx: Option<Context>, body: impl FnOnce(&Context) -> gpukit::Result<()>) {
    let Some(ctx) = ctx else { return };
    if let Err(e) = body(&ctx) {
        panic!(
            "{} backend: {}",
            ctx.backend_name(),
            gpukit::error_chain(&e)
        );
    }
    if let Err(e) = ctx.sync() {
        panic!(
            "{} backend: error left after the test: {}",
            ctx.backend_name(),
            gpukit::error_chain(&e)
        );
    }
}

/// One test per backend for each body: see the module docs.
#[macro_export]
macro_rules! backend_tests {
    ($( $(#[$meta:meta])* fn $name:ident($ctx:ident) $body:block )*) => {$(
        // Without the `cuda` (`vulkan`) feature there is no CUDA (Vulkan) backend to skip.
        $crate::tests_on! { [cpu, #[cfg(feature = "cuda")] cuda, #[cfg(feature = "vulkan")] vulkan] $(#[$meta])* fn $name($ctx) $body }
    )*};
}

/// One test, on the CPU backend only, for each body: see the module docs.
#[macro_export]
macro_rules! cpu_tests {
    ($( $(#[$meta:meta])* fn $name:ident($ctx:ident) $body:block )*) => {$(
        $crate::tests_on! { [cpu] $(#[$meta])* fn $name($ctx) $body }
    )*};
}

/// The module of one body with a test per listed backend (each a function of this
/// module opening that backend, with the attributes given before it).
#[macro_export]
macro_rules! tests_on {
    ([$( $(#[$when:meta])* $backend:ident ),+] $(#[$meta:meta])* fn $name:ident($ctx:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($ctx: &gpukit::Context) -> gpukit::Result<()> $body

            $(
                $(#[$when])*
                #[test]
                fn $backend() {
                    $crate::common::run($crate::common::$backend(), body);
                }
            )+
        }
    };
}

/// A harness error (not a property's failure) as a `gpukit::Error`.
pub fn harness_error(call: &'static str, message: String) -> gpukit::Error {
    gpukit::Error::Backend {
        backend: "test",
        call,
        message,
    }
}

/// The cases to run for a property test whose default is `default`: more when the
/// environment variable `PROPTEST_CASES` asks for more, never fewer; a value that is not a
/// number is an error rather than ignored.
pub fn cases(default: u32) -> gpukit::Result<u32> {
    cases_from(default, std::env::var("PROPTEST_CASES"))
}

/// [`cases`] for a given value of the variable.
pub fn cases_from(default: u32, var: Result<String, std::env::VarError>) -> gpukit::Result<u32> {
    match var {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map(|n| n.max(default))
            .map_err(|e| {
                harness_error(
                    "PROPTEST_CASES",
                    format!("PROPTEST_CASES={text:?} is not a case count: {e}"),
                )
            }),
        Err(e) => Err(harness_error("PROPTEST_CASES", e.to_string())),
    }
}

/// Relative-or-absolute closeness for float comparisons against an f64 reference.
pub fn close(got: f64, want: f64, rel: f64) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= rel * want.abs().max(1.0)
}

/// CUDA C of the `vector_add` test kernel: `out[i] = a[i] + b[i]` for `i < n`.
pub const VECTOR_ADD_SRC: &str = r#"
extern "C" __global__ void vector_add(const float* a, const float* b, float* out,
                                      unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}"#;

/// WGSL of the `vector_add` test kernel (the block size is the launch's: `override`).
pub const VECTOR_ADD_WGSL: &str = r#"
struct Args { n: vec2<u32> }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
override block_x: u32 = 256;
override block_y: u32 = 1;
override block_z: u32 = 1;
@compute @workgroup_size(block_x, block_y, block_z)
fn vector_add(@builtin(workgroup_id) blk: vec3<u32>, @builtin(local_invocation_id) t: vec3<u32>) {
    let i = blk.x * block_x + t.x;
    if (args.n.y == 0u && i < args.n.x) { out[i] = a[i] + b[i]; }
}"#;

/// The signature of `vector_add`.
pub type VectorAdd = (In<f32>, In<f32>, Out<f32>, u64);

/// `vector_add` for every backend: CUDA C and the same thing as a CPU closure.
pub fn vector_add_spec() -> KernelSpec<VectorAdd> {
    // SAFETY: `vector_add` takes (const float*, const float*, float*, unsigned long long),
    // `VectorAdd` in order and type, and touches only indices below `n`.
    let spec = unsafe { KernelSpec::<VectorAdd>::cuda(VECTOR_ADD_SRC, "vector_add") };
    // SAFETY: the WGSL binds a, b (read) and out (written) in that order, takes `n` as the
    // immediate `vec2<u32>`, and touches only indices below `n`, like the CUDA C.
    let spec = unsafe { spec.wgsl(VECTOR_ADD_WGSL) };
    spec.cpu(|t, (a, b, out, n)| {
        let i = t.x();
        if (i as u64) < *n {
            out[i] = a[i] + b[i];
        }
    })
}

/// CUDA C of the `delay` test kernel: one thread spins for `us` microseconds on the GPU's
/// nanosecond clock (`%globaltimer` through `gk_globaltimer`, not `clock64()`, whose rate is
/// the SM clock's).
pub const DELAY_SRC: &str = concat!(
    gpukit::core::cuda_ptx_helpers!(),
    r#"
extern "C" __global__ void delay(unsigned int us) {
    unsigned long long start = gk_globaltimer(), now;
    do {
        now = gk_globaltimer();
    } while (now - start < (unsigned long long)us * 1000ull);
}"#
);

/// WGSL of the `delay` test kernel. WGSL has no clock: the thread runs 200 atomic adds on
/// workgroup memory per microsecond asked for (atomics are not folded away), and an add to
/// one address takes 5 ns or more on a GPU and on lavapipe (a locked host instruction), so
/// the delay is at least `us`. The adds are written out, one microsecond's 200 per
/// iteration of the loop, because lavapipe cuts all the loops of an invocation short once
/// they have run 65535 iterations in all (llvmpipe's `LP_MAX_TGSI_LOOP_ITERATIONS`): there
/// a delay is whole up to 65 ms asked, and a longer one lasts about as long as 65 ms asked.
pub const DELAY_WGSL: &str = r#"
struct Args { us: u32 }
var<immediate> args: Args;
var<workgroup> sink: atomic<u32>;
fn add8() {
    atomicAdd(&sink, 1u); atomicAdd(&sink, 1u); atomicAdd(&sink, 1u); atomicAdd(&sink, 1u);
    atomicAdd(&sink, 1u); atomicAdd(&sink, 1u); atomicAdd(&sink, 1u); atomicAdd(&sink, 1u);
}
fn add40() { add8(); add8(); add8(); add8(); add8(); }
@compute @workgroup_size(1)
fn delay() {
    for (var us = 0u; us < args.us; us++) { add40(); add40(); add40(); add40(); add40(); }
}"#;

/// `delay` for every backend: launched with one thread, it keeps its stream busy for `us`
/// microseconds (the CPU closure sleeps).
pub fn delay_spec() -> KernelSpec<(u32,)> {
    // SAFETY: `delay(unsigned int)` matches `(u32,)` and touches no memory.
    let spec = unsafe { KernelSpec::<(u32,)>::cuda(DELAY_SRC, "delay") };
    // SAFETY: the WGSL takes `us` as its one immediate and touches no buffer.
    let spec = unsafe { spec.wgsl(DELAY_WGSL) };
    spec.cpu(|_, (us,)| std::thread::sleep(std::time::Duration::from_micros(u64::from(*us))))
}

/// The probe's devices, `(name, compute capability)` by ordinal: none in a build without
/// the `cuda` feature, where CUDA is never usable.
pub fn probed_devices() -> Vec<(String, (u32, u32))> {
    #[cfg(feature = "cuda")]
    let devices = match gpukit::cuda::probe() {
        Ok(p) => p
            .devices
            .iter()
            .map(|d| (d.name.clone(), d.compute_capability))
            .collect(),
        Err(_) => Vec::new(),
    };
    #[cfg(not(feature = "cuda"))]
    let devices = Vec::new();
    devices
}

/// Asserts that `ctx` is CUDA device `ordinal`, the one the probe describes, chosen with
/// no rejection.
pub fn assert_on_gpu(what: &str, ctx: &Context, ordinal: usize) {
    let devices = probed_devices();
    let Some((name, cc)) = devices.get(ordinal) else {
        panic!("{what}: CUDA device {ordinal} opened, but the probe lists {devices:?}");
    };
    assert_eq!(ctx.backend_name(), "cuda", "{what}");
    assert_eq!(ctx.device_id(), ordinal, "{what}");
    assert!(
        ctx.selection().rejected.is_empty(),
        "{what}: {:?}",
        ctx.selection()
    );
    assert_eq!(&ctx.info().name, name, "{what}");
    assert_eq!(ctx.info().compute_capability, Some(*cc), "{what}");
}
