//! The no-GPU contract: on a machine where CUDA cannot be used, every public constructor
//! that can request CUDA returns a typed error (`Error::Unavailable { backend: "cuda", .. }`
//! with the probe's reason, or `InvalidDevice`) and never panics.
//!
//! Where a GPU *is* usable the same calls must open it instead: every request succeeds on
//! device 0 with the probe's name and compute capability, and only an ordinal past the
//! devices is refused (`InvalidDevice`). Under `GPU_REQUIRE_CUDA=1` (a GPU run) a failed
//! probe, or a CUDA request that fails although the probe found a device, is a failure.
//!
//! The same calls are made by `crates/gpukit-tools/examples/no_gpu_abort.rs`, which `cargo
//! xtask no-gpu` builds with `panic = "abort"` (a test harness needs unwinding, an example does
//! not) and which only checks that each returns; that example
//! also drives gpukit-cuda-sys's library loaders (driver, NVRTC, cuBLAS), which this crate does not
//! depend on directly. Environment-variable cases (`GPU_DEVICE`, `GPU_CONFIG`) are in
//! `selection.rs`: nothing here sets environment variables.

use crate::common;

use std::path::PathBuf;

use gpukit::cuda::{probe, CudaBackend};
use gpukit::{Config, Context, DeviceSpec, Error, FallbackPolicy, SpecOrigin};

/// The error every CUDA request gives without a GPU: the probe's reason. `None` where the
/// probe finds a GPU (the GPU-branch assertions run instead).
fn expected_error() -> Option<Error> {
    match probe() {
        Err(pe) => {
            assert!(
                !common::require_cuda(),
                "GPU_REQUIRE_CUDA=1 but the CUDA probe failed: {pe}"
            );
            Some(Error::Unavailable {
                backend: "cuda",
                reason: pe.to_string(),
            })
        }
        Ok(p) => {
            println!(
                "a GPU is usable here ({} device(s)): checking that CUDA requests open it",
                p.devices.len()
            );
            None
        }
    }
}

/// Asserts that `got` is `want` (no GPU). With a GPU, returns the opened value, or accepts
/// a typed CUDA error where a GPU is not required (NVRTC missing, say).
fn check<T>(what: &str, got: gpukit::Result<T>, want: &Option<Error>) -> Option<T> {
    match (want, got) {
        (Some(want), Err(e)) => {
            assert_eq!(&e, want, "{what}");
            None
        }
        (Some(_), Ok(_)) => panic!("{what} succeeded although the CUDA probe failed"),
        (None, Ok(v)) => Some(v),
        (None, Err(e)) => {
            assert!(
                !common::require_cuda(),
                "{what}: the probe found a GPU and GPU_REQUIRE_CUDA=1, but: {e}"
            );
            // A GPU is there, but this request may still be refused: a typed error it is.
            assert!(
                matches!(
                    e,
                    Error::Unavailable {
                        backend: "cuda",
                        ..
                    } | Error::InvalidDevice {
                        backend: "cuda",
                        ..
                    }
                ),
                "{what}: {e:?}"
            );
            println!("{what}: {e}");
            None
        }
    }
}

#[test]
fn the_probe_says_why_without_panicking() {
    match probe() {
        Ok(p) => {
            assert!(!p.devices.is_empty());
            println!("a GPU is usable here ({:?})", p.devices);
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "{e:?}");
            assert!(!common::require_cuda(), "GPU_REQUIRE_CUDA=1 but: {e}");
            println!("no CUDA here: {e}");
        }
    }
}

#[test]
fn context_new_with_cuda_is_a_typed_error() {
    let want = expected_error();
    for (what, spec) in [
        ("Context::new(Cuda(None))", DeviceSpec::Cuda(None)),
        ("Context::new(Cuda(Some(0)))", DeviceSpec::Cuda(Some(0))),
    ] {
        if let Some(ctx) = check(what, Context::new(spec), &want) {
            common::assert_on_gpu(what, &ctx, 0);
        }
    }
    // Without a GPU the probe's reason comes first, not an ordinal error.
    let seven = Context::new(DeviceSpec::Cuda(Some(7)));
    let what = "Context::new(Cuda(Some(7)))";
    match (&want, probe()) {
        (Some(_), _) => {
            check(what, seven, &want);
        }
        (None, Ok(p)) if p.devices.len() <= 7 => assert_eq!(
            seven.err(),
            Some(Error::InvalidDevice {
                backend: "cuda",
                ordinal: 7,
                count: p.devices.len()
            })
        ),
        (None, _) => {
            if let Some(ctx) = check(what, seven, &want) {
                common::assert_on_gpu(what, &ctx, 7);
            }
        }
    }
}

#[test]
fn parsed_cuda_specs_are_typed_errors() {
    let want = expected_error();
    for text in ["cuda", "cuda:0", "CUDA:0", " cuda "] {
        let spec: DeviceSpec = match text.parse() {
            Ok(spec) => spec,
            // A spelling the parser refuses is a typed error too, not a panic.
            Err(e) => {
                assert!(
                    matches!(e, Error::InvalidDeviceSpec { .. }),
                    "{text:?}: {e:?}"
                );
                continue;
            }
        };
        let what = format!("Context::new({text:?})");
        if let Some(ctx) = check(&what, Context::new(spec), &want) {
            common::assert_on_gpu(&what, &ctx, 0);
        }
    }
}

#[test]
fn the_cuda_backend_constructors_are_typed_errors() {
    let want = expected_error();
    check("CudaBackend::new(0)", CudaBackend::new(0), &want);
    if let Some(ctx) = check("CudaBackend::context(0)", CudaBackend::context(0), &want) {
        assert_eq!((ctx.backend_name(), ctx.device_id()), ("cuda", 0));
    }
    match probe() {
        Err(_) => {
            check("CudaBackend::new(7)", CudaBackend::new(7), &want);
            check("CudaBackend::context(7)", CudaBackend::context(7), &want);
        }
        // One past the last device is refused, naming the count, before anything opens.
        Ok(p) => {
            let count = p.devices.len();
            let invalid = Some(Error::InvalidDevice {
                backend: "cuda",
                ordinal: count,
                count,
            });
            assert_eq!(CudaBackend::new(count).err(), invalid);
            assert_eq!(CudaBackend::context(count).err(), invalid);
        }
    }
}

#[test]
fn a_config_that_forbids_fallback_is_a_typed_error() {
    let want = expected_error();
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
            let what = format!("Context::with_config({device}, fallback = error, from {origin})");
            if let Some(ctx) = check(&what, Context::with_config(&cfg, origin), &want) {
                common::assert_on_gpu(&what, &ctx, 0);
            }
        }
    }
    // The same configuration as gpu.toml text.
    let cfg = Config::from_toml("device = \"cuda\"\nfallback = \"error\"\n", &path)
        .expect("a valid gpu.toml");
    assert_eq!(cfg.fallback, FallbackPolicy::Error);
    let what = "Context::with_config(gpu.toml: cuda, fallback = error)";
    if let Some(ctx) = check(
        what,
        Context::with_config(&cfg, SpecOrigin::File(path)),
        &want,
    ) {
        common::assert_on_gpu(what, &ctx, 0);
    }
}

#[test]
fn fallback_to_the_cpu_records_the_typed_reason() {
    let path = PathBuf::from("gpu.toml");
    let cfg = Config::from_toml("device = \"cuda\"\nfallback = \"cpu\"\n", &path)
        .expect("a valid gpu.toml");
    let Some(want) = expected_error() else {
        // With a GPU nothing falls back: the file's GPU and `auto` open it.
        for (what, opened) in [
            (
                "gpu.toml: cuda, fallback = cpu",
                Context::with_config(&cfg, SpecOrigin::File(path.clone())),
            ),
            ("auto", Context::new(DeviceSpec::Auto)),
        ] {
            if let Some(ctx) = check(what, opened, &None) {
                common::assert_on_gpu(what, &ctx, 0);
            }
        }
        return;
    };
    // A file that allows fallback: the CPU, with CUDA's typed error recorded.
    let ctx = Context::with_config(&cfg, SpecOrigin::File(path)).expect("falls back to the CPU");
    assert_eq!(ctx.backend_name(), "cpu");
    assert_eq!(ctx.selection().rejected.len(), 1);
    assert_eq!(ctx.selection().rejected[0].backend, "cuda");
    assert_eq!(ctx.selection().rejected[0].reason, want);
    // `auto` likewise.
    let ctx = Context::new(DeviceSpec::Auto).expect("auto opens the CPU");
    assert_eq!(ctx.backend_name(), "cpu");
    assert_eq!(ctx.selection().rejected[0].reason, want);
    // A code-given CUDA request never falls back, whatever the policy says.
    let cfg = Config {
        device: DeviceSpec::Cuda(None),
        fallback: FallbackPolicy::Cpu,
        ..Config::default()
    };
    assert_eq!(
        Context::with_config(&cfg, SpecOrigin::Explicit).err(),
        Some(want)
    );
}

#[test]
fn asking_twice_gives_the_same_typed_error() {
    let Some(want) = expected_error() else {
        // With a GPU: the same device each time.
        for _ in 0..3 {
            if let Some(ctx) = check(
                "Context::new(Cuda(None))",
                Context::new(DeviceSpec::Cuda(None)),
                &None,
            ) {
                common::assert_on_gpu("Context::new(Cuda(None)), again", &ctx, 0);
            }
        }
        return;
    };
    for _ in 0..3 {
        assert_eq!(
            Context::new(DeviceSpec::Cuda(None)).err(),
            Some(want.clone())
        );
        assert_eq!(CudaBackend::new(0).err(), Some(want.clone()));
    }
}
