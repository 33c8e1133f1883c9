//! Device specs, configuration files and the fallback policy: not about a backend, so
//! plain tests.

use super::*;

#[test]
fn unusable_cuda_devices_are_errors() {
    for spec in [DeviceSpec::Cuda(Some(7)), DeviceSpec::Cuda(Some(999))] {
        match gpukit::Context::new(spec) {
            Err(
                Error::Unavailable {
                    backend: "cuda", ..
                }
                | Error::InvalidDevice { .. },
            ) => {}
            Err(e) => panic!("{spec}: expected Unavailable or InvalidDevice, got {e:?}"),
            Ok(ctx) if spec == DeviceSpec::Cuda(Some(7)) && ctx.backend_name() == "cuda" => {
                println!("{spec} exists on this machine");
            }
            Ok(ctx) => panic!("{spec} opened: {ctx:?}"),
        }
    }
    let spec = "cuda".parse::<DeviceSpec>();
    assert_eq!(spec, Ok(DeviceSpec::Cuda(None)));
    match spec.and_then(gpukit::Context::new) {
        Err(Error::Unavailable {
            backend: "cuda",
            reason,
        }) => assert!(!reason.is_empty()),
        Err(e) => panic!("cuda: expected Unavailable, got {e:?}"),
        Ok(ctx) => assert_eq!(ctx.backend_name(), "cuda", "`cuda` must never mean the CPU"),
    }
}

#[test]
fn malformed_device_specs_are_rejected() {
    for bad in [
        "cuda:x!",
        "",
        "   ",
        "gpu",
        "cuda:",
        "cuda:-1",
        "cuda:1:2",
        "cpu:",
        "cpu:x",
        "cuda:0,1",
        "cpu:0..2",
        "cuda:*",
        "cuda: 1",
        "cuda1",
        "cuda:99999999999999999999999",
    ] {
        match bad.parse::<DeviceSpec>() {
            Err(Error::InvalidDeviceSpec {
                input,
                origin,
                reason,
            }) => {
                assert_eq!(input, bad);
                assert_eq!(origin, "code");
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?}: expected InvalidDeviceSpec, got {other:?}"),
        }
    }
    // The variable's name is the origin when the spec comes from GPU_DEVICE.
    let r = gpukit::Config::resolve(None, Some("tpu"), None);
    assert!(
        matches!(&r, Err(Error::InvalidDeviceSpec { origin, .. }) if origin == "GPU_DEVICE"),
        "{r:?}"
    );
    // Good ones parse.
    assert_eq!(
        "  CUDA:3 ".parse::<DeviceSpec>(),
        Ok(DeviceSpec::Cuda(Some(3)))
    );
    assert_eq!("Cpu".parse::<DeviceSpec>(), Ok(DeviceSpec::Cpu(None)));
    assert_eq!("cpu:3".parse::<DeviceSpec>(), Ok(DeviceSpec::Cpu(Some(3))));
}

#[test]
fn malformed_config_files_are_rejected() {
    let path = Path::new("conf/gpu.toml");
    for bad in [
        "device = \"tpu\"",
        "device = \"cuda:x!\"",
        "device = 3",
        "dtype = \"f33\"",
        "fallback = \"maybe\"",
        "colour = \"blue\"",
        "device = ",
        "[device]\nname = \"cpu\"",
        "device = \"cpu\"\ndevice = \"cuda\"",
    ] {
        match gpukit::Config::from_toml(bad, path) {
            Err(Error::Config { path: p, message }) => {
                assert_eq!(p, path.display().to_string(), "{bad:?}");
                assert!(!message.is_empty(), "{bad:?}");
            }
            other => panic!("{bad:?}: expected Config, got {other:?}"),
        }
    }
    let good = gpukit::Config::from_toml("device = \"cpu\"\ndtype = \"i8\"", path);
    assert!(
        matches!(&good, Ok(c) if c.device == DeviceSpec::Cpu(None) && c.dtype == gpukit::DType::I8),
        "{good:?}"
    );
    // A missing file named explicitly is a Config error too.
    let r = gpukit::Config::load(Path::new("/nonexistent/dir/gpu.toml"));
    assert!(matches!(r, Err(Error::Config { .. })), "{r:?}");
}

#[test]
fn a_configured_gpu_that_cannot_be_used_follows_the_fallback_policy() {
    // gpu.toml naming a GPU that does not exist (no env vars: those are process-global and
    // tested in `it/selection.rs`). Device 999 never exists.
    let path = Path::new("conf/gpu.toml");
    let strict = Config::from_toml("device = \"cuda:999\"\nfallback = \"error\"", path)
        .expect("a valid file");
    assert_eq!(strict.fallback, FallbackPolicy::Error);
    let lenient =
        Config::from_toml("device = \"cuda:999\"", path).expect("a valid file, fallback = cpu");
    let is_unusable = |r: gpukit::Result<gpukit::Context>, what: &str| match r {
        Err(Error::Unavailable {
            backend: "cuda", ..
        }) => {}
        Err(Error::InvalidDevice {
            backend: "cuda",
            ordinal: 999,
            ..
        }) => {}
        other => panic!("{what}: expected Unavailable or InvalidDevice, got {other:?}"),
    };
    let file = SpecOrigin::File(path.to_path_buf());
    is_unusable(
        gpukit::Context::with_config(&strict, file.clone()),
        "file, fallback = error",
    );
    // Code and GPU_DEVICE never fall back, whatever the file says.
    is_unusable(
        gpukit::Context::with_config(&lenient, SpecOrigin::Explicit),
        "explicit",
    );
    is_unusable(
        gpukit::Context::with_config(&lenient, SpecOrigin::Env),
        "env",
    );
    // The file's default policy falls back to the CPU and records why.
    let ctx = gpukit::Context::with_config(&lenient, file).expect("fallback to the CPU");
    assert_eq!(ctx.backend_name(), "cpu");
    let rejected = &ctx.selection().rejected;
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(matches!(
        rejected[0].reason,
        Error::Unavailable { .. } | Error::InvalidDevice { .. }
    ));
}
