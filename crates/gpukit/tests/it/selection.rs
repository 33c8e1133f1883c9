//! Device selection: explicit specs, `GPU_DEVICE`, `gpu.toml` and the fallback chain.
//!
//! The environment is process-wide, so everything that sets variables runs in one test,
//! in order, and in a child process of its own (this test binary again, running that test
//! alone): `setenv` while another thread calls `getenv` (another test, inside libcuda or
//! NVRTC) is undefined behaviour in glibc.
//!
//! Each rule is checked on both kinds of machine: without a usable GPU every CUDA request
//! says why (and a file may fall back to the CPU); with one, the same requests open it, with
//! no rejection recorded. Under `GPU_REQUIRE_CUDA=1` (a GPU run) an unusable GPU fails.

use crate::common;

use std::path::PathBuf;

use gpukit::{Context, DType, DeviceSpec, Error, SpecOrigin};

/// Whether CUDA opens here; under `GPU_REQUIRE_CUDA=1` it must.
fn cuda_usable() -> bool {
    match Context::new(DeviceSpec::Cuda(None)) {
        Ok(_) => true,
        Err(e) => {
            assert!(
                !common::require_cuda(),
                "GPU_REQUIRE_CUDA=1 but CUDA is unusable: {e}"
            );
            false
        }
    }
}

fn expect_err(r: gpukit::Result<Context>) -> Error {
    match r {
        Ok(ctx) => panic!("expected an error, got a context on {}", ctx.backend_name()),
        Err(e) => e,
    }
}

#[test]
fn explicit_cpu_opens_the_cpu_backend() -> gpukit::Result<()> {
    let ctx = Context::new(DeviceSpec::Cpu(None))?;
    assert_eq!(ctx.backend_name(), "cpu");
    assert_eq!(ctx.device_id(), 0);
    assert!(ctx.selection().rejected.is_empty());
    assert_eq!(ctx.selection().origin, SpecOrigin::Explicit);
    Ok(())
}

#[test]
fn auto_records_why_cuda_was_rejected() -> gpukit::Result<()> {
    let ctx = Context::new(DeviceSpec::Auto)?;
    assert_eq!(ctx.selection().requested, DeviceSpec::Auto);
    if cuda_usable() {
        // Nothing to fall back from: auto is the first CUDA device.
        common::assert_on_gpu("auto", &ctx, 0);
        return Ok(());
    }
    common::assert_auto_without_cuda(&ctx);
    Ok(())
}

#[test]
fn explicit_cuda_fails_with_the_reason_instead_of_falling_back() {
    if cuda_usable() {
        let count = common::probed_devices().len();
        let first = Context::new(DeviceSpec::Cuda(None)).expect("CUDA is usable");
        common::assert_on_gpu("cuda", &first, 0);
        // An ordinal past the devices is refused with the count, never the CPU.
        for ordinal in [count, 1000] {
            assert_eq!(
                Context::new(DeviceSpec::Cuda(Some(ordinal))).err(),
                Some(Error::InvalidDevice {
                    backend: "cuda",
                    ordinal,
                    count
                }),
                "cuda:{ordinal}"
            );
        }
        return;
    }
    for spec in [DeviceSpec::Cuda(None), DeviceSpec::Cuda(Some(7))] {
        match Context::new(spec) {
            Ok(ctx) => panic!(
                "{spec} opened {} although CUDA is unusable",
                ctx.backend_name()
            ),
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

/// Set in the child process that runs `environment_and_file_follow_the_precedence_rules`.
const CHILD: &str = "GPUKIT_SELECTION_ENV_CHILD";

/// Regression test of the data race on the environment: the body sets variables while, in
/// the same process, the other tests of this binary ran on other threads and read the
/// environment inside libcuda and NVRTC (`setenv` racing `getenv` is undefined behaviour in
/// glibc). The body now runs in a child process, the only test there, on one thread; this
/// test checks that it passed and relays its output.
#[test]
fn environment_and_file_follow_the_precedence_rules() {
    if std::env::var_os(CHILD).is_some() {
        return precedence_rules_with_this_process_environment();
    }
    common::run_in_child(
        module_path!(),
        "environment_and_file_follow_the_precedence_rules",
        CHILD,
        |cmd| cmd,
    );
}

/// The body of `environment_and_file_follow_the_precedence_rules`: sets `GPU_DEVICE` and
/// `GPU_CONFIG` in turn, so only a process with no other thread reading the environment
/// may run it (the child).
fn precedence_rules_with_this_process_environment() {
    let set = |k: &str, v: Option<&std::ffi::OsStr>| match v {
        Some(v) => std::env::set_var(k, v),
        None => std::env::remove_var(k),
    };
    let cuda_usable = cuda_usable();

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
    if cuda_usable {
        for ctx in [Context::default(), Context::from_config()] {
            let ctx = ctx.expect("GPU_DEVICE=cuda with a usable GPU");
            common::assert_on_gpu("GPU_DEVICE=cuda", &ctx, 0);
            assert_eq!(ctx.selection().origin, SpecOrigin::Env);
        }
        // One past the last device is refused, naming the count.
        let count = common::probed_devices().len();
        set("GPU_DEVICE", Some(format!("cuda:{count}").as_ref()));
        let e = expect_err(Context::default());
        assert!(
            matches!(e, Error::InvalidDevice { backend: "cuda", ordinal, count: c } if ordinal == count && c == count),
            "{e:?}"
        );
    } else {
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
    if cuda_usable {
        // ... where there is nothing to fall back from ...
        common::assert_on_gpu("gpu.toml cuda:0, fallback = cpu", &ctx, 0);
    } else {
        assert_eq!(ctx.backend_name(), "cpu");
        assert_eq!(ctx.selection().rejected.len(), 1);
    }

    // ... and fails with the reason when it does not.
    let strict = temp_file("strict.toml", "device = \"cuda:0\"\nfallback = \"error\"\n");
    set("GPU_CONFIG", Some(strict.as_os_str()));
    if cuda_usable {
        let ctx = Context::from_config().expect("gpu.toml cuda:0 with a usable GPU");
        common::assert_on_gpu("gpu.toml cuda:0, fallback = error", &ctx, 0);
    } else {
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

    // Nothing set: auto, which is the GPU when there is one.
    set("GPU_CONFIG", None);
    let ctx = Context::default().expect("auto");
    assert_eq!(ctx.selection().requested, DeviceSpec::Auto);
    assert_eq!(ctx.selection().origin, SpecOrigin::Default);
    if cuda_usable {
        common::assert_on_gpu("Context::default() with nothing set", &ctx, 0);
    } else {
        common::assert_auto_without_cuda(&ctx);
    }
}
