//! Device selection: explicit specs, `GPU_DEVICE`, `gpu.toml` and the fallback chain.
//!
//! The environment is process-wide, so everything that sets variables runs in one test,
//! in order; this file is its own test binary (its own process).

mod common;

use std::path::PathBuf;

use gpu::{Context, DType, DeviceSpec, Error, SpecOrigin};

fn expect_err(r: gpu::Result<Context>) -> Error {
    match r {
        Ok(ctx) => panic!("expected an error, got a context on {}", ctx.backend_name()),
        Err(e) => e,
    }
}

#[test]
fn explicit_cpu_opens_the_cpu_backend() -> gpu::Result<()> {
    let ctx = Context::new(DeviceSpec::Cpu)?;
    assert_eq!(ctx.backend_name(), "cpu");
    assert_eq!(ctx.device_id(), 0);
    assert!(ctx.selection().rejected.is_empty());
    assert_eq!(ctx.selection().origin, SpecOrigin::Explicit);
    Ok(())
}

#[test]
fn auto_records_why_cuda_was_rejected() -> gpu::Result<()> {
    let ctx = Context::new(DeviceSpec::Auto)?;
    if ctx.backend_name() == "cuda" {
        common::skipped("a CUDA device is usable here, so auto did not fall back");
        return Ok(());
    }
    assert_eq!(ctx.backend_name(), "cpu");
    let rejected = &ctx.selection().rejected;
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].backend, "cuda");
    assert!(!rejected[0].reason.to_string().is_empty());
    Ok(())
}

#[test]
fn explicit_cuda_fails_with_the_reason_instead_of_falling_back() {
    for spec in [DeviceSpec::Cuda(None), DeviceSpec::Cuda(Some(7))] {
        match Context::new(spec) {
            Ok(ctx) => assert_eq!(ctx.backend_name(), "cuda"),
            Err(e) => assert!(
                matches!(
                    e,
                    Error::Unavailable {
                        backend: "cuda",
                        ..
                    } | Error::InvalidDevice { .. }
                ),
                "{spec}: {e:?}"
            ),
        }
    }
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-selection-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp file");
    path
}

#[test]
fn environment_and_file_follow_the_precedence_rules() {
    let set = |k: &str, v: Option<&std::ffi::OsStr>| match v {
        Some(v) => std::env::set_var(k, v),
        None => std::env::remove_var(k),
    };
    let cuda_usable = Context::new(DeviceSpec::Cuda(None)).is_ok();

    // GPU_DEVICE is read by default() and from_config().
    set("GPU_CONFIG", None);
    set("GPU_DEVICE", Some("cpu".as_ref()));
    let ctx = Context::default().expect("GPU_DEVICE=cpu");
    assert_eq!(
        (ctx.backend_name(), &ctx.selection().origin),
        ("cpu", &SpecOrigin::Env)
    );

    // A malformed GPU_DEVICE is a typed error naming the variable, from both constructors.
    set("GPU_DEVICE", Some("cuda:x!".as_ref()));
    for e in [
        expect_err(Context::default()),
        expect_err(Context::from_config()),
    ] {
        assert!(
            matches!(&e, Error::InvalidDeviceSpec { origin, input, .. } if origin == "GPU_DEVICE" && input == "cuda:x!"),
            "{e:?}"
        );
    }

    // A GPU_DEVICE that is not UTF-8 is a typed error too, not a panic.
    {
        use std::os::unix::ffi::OsStrExt;
        set("GPU_DEVICE", Some(std::ffi::OsStr::from_bytes(b"cuda\xff")));
        for e in [
            expect_err(Context::default()),
            expect_err(Context::from_config()),
        ] {
            assert!(
                matches!(&e, Error::InvalidDeviceSpec { origin, reason, .. } if origin == "GPU_DEVICE" && reason.contains("UTF-8")),
                "{e:?}"
            );
        }
    }

    // A GPU named by GPU_DEVICE must be usable: no silent fallback.
    set("GPU_DEVICE", Some("cuda".as_ref()));
    if !cuda_usable {
        let e = expect_err(Context::default());
        assert!(
            matches!(
                e,
                Error::Unavailable {
                    backend: "cuda",
                    ..
                }
            ),
            "{e:?}"
        );
    }

    // A GPU named by the file falls back to the CPU when the file allows it ...
    set("GPU_DEVICE", None);
    let fallback = temp_file(
        "fallback.toml",
        "device = \"cuda:0\"\ndtype = \"f64\"\nfallback = \"cpu\"\n",
    );
    set("GPU_CONFIG", Some(fallback.as_os_str()));
    let ctx = Context::from_config().expect("fallback to cpu");
    assert_eq!(ctx.default_dtype(), DType::F64);
    assert_eq!(ctx.selection().origin, SpecOrigin::File(fallback.clone()));
    if !cuda_usable {
        assert_eq!(ctx.backend_name(), "cpu");
        assert_eq!(ctx.selection().rejected.len(), 1);
    }

    // ... and fails with the reason when it does not.
    let strict = temp_file("strict.toml", "device = \"cuda:0\"\nfallback = \"error\"\n");
    set("GPU_CONFIG", Some(strict.as_os_str()));
    if !cuda_usable {
        let e = expect_err(Context::from_config());
        assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    }

    // GPU_DEVICE beats the file.
    set("GPU_DEVICE", Some("cpu".as_ref()));
    let ctx = Context::from_config().expect("env beats file");
    assert_eq!(
        (ctx.backend_name(), &ctx.selection().origin),
        ("cpu", &SpecOrigin::Env)
    );
    set("GPU_DEVICE", None);

    // A malformed file, and a GPU_CONFIG naming a missing file, are Config errors.
    let bad = temp_file("bad.toml", "device = \"cpu\"\nunknown_key = 1\n");
    set("GPU_CONFIG", Some(bad.as_os_str()));
    let e = expect_err(Context::from_config());
    assert!(
        matches!(&e, Error::Config { path, .. } if path.ends_with("bad.toml")),
        "{e:?}"
    );
    let missing = bad.with_file_name("does-not-exist.toml");
    set("GPU_CONFIG", Some(missing.as_os_str()));
    let e = expect_err(Context::from_config());
    assert!(matches!(e, Error::Config { .. }), "{e:?}");

    // Nothing set: auto.
    set("GPU_CONFIG", None);
    let ctx = Context::default().expect("auto");
    assert_eq!(ctx.selection().requested, DeviceSpec::Auto);
    assert_eq!(ctx.selection().origin, SpecOrigin::Default);
}
