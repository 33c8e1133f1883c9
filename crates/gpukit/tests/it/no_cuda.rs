//! The facade built without its default `cuda` feature (`cargo test -p gpukit
//! --no-default-features`, which `cargo xtask ci` runs): there is no CUDA arm, every CUDA
//! request is `Unavailable` with a reason that says it was not compiled in, `auto` records
//! that and opens the CPU, and the CPU backend works. Nothing here sets environment
//! variables: configurations are passed in.

use std::path::PathBuf;

use gpukit::{Config, Context, DeviceSpec, Error, FallbackPolicy, SpecOrigin};

/// Whether `e` says that CUDA is not compiled in.
fn not_compiled_in(e: &Error) -> bool {
    matches!(e, Error::Unavailable { backend: "cuda", reason } if reason.starts_with("not compiled in"))
}

#[test]
fn auto_opens_the_cpu_and_records_that_cuda_is_not_compiled_in() -> gpukit::Result<()> {
    let ctx = Context::with_config(&Config::default(), SpecOrigin::Default)?;
    assert_eq!(ctx.backend_name(), "cpu");
    let rejected = &ctx.selection().rejected;
    // CUDA, then the Vulkan backend (not compiled in either without default features, or
    // without a Vulkan GPU).
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert_eq!(rejected[0].backend, "cuda");
    assert!(not_compiled_in(&rejected[0].reason), "{:?}", rejected[0]);
    assert_eq!(rejected[1].backend, "vulkan");
    // The CPU backend does real work.
    let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
    let mut out = ctx.alloc_zeros::<f32>(3)?;
    ctx.add(&a, &a, &mut out)?;
    assert_eq!(out.download()?, [2.0, 4.0, 6.0]);
    Ok(())
}

#[test]
fn explicit_cuda_requests_say_not_compiled_in() {
    for spec in [
        DeviceSpec::Cuda(None),
        DeviceSpec::Cuda(Some(0)),
        DeviceSpec::Cuda(Some(3)),
    ] {
        match Context::new(spec) {
            Err(e) => assert!(not_compiled_in(&e), "{spec}: {e:?}"),
            Ok(ctx) => panic!(
                "{spec} opened {} without the cuda feature",
                ctx.backend_name()
            ),
        }
    }
    let parsed: DeviceSpec = "cuda:1".parse().expect("a valid spec");
    assert!(matches!(Context::new(parsed), Err(e) if not_compiled_in(&e)));
}

#[test]
fn a_config_file_naming_cuda_falls_back_or_fails_as_it_says() -> gpukit::Result<()> {
    let file = SpecOrigin::File(PathBuf::from("gpu.toml"));
    let fallback = Config {
        device: DeviceSpec::Cuda(None),
        fallback: FallbackPolicy::Cpu,
        ..Config::default()
    };
    let ctx = Context::with_config(&fallback, file.clone())?;
    assert_eq!(ctx.backend_name(), "cpu");
    assert!(not_compiled_in(&ctx.selection().rejected[0].reason));

    let strict = Config {
        fallback: FallbackPolicy::Error,
        ..fallback
    };
    match Context::with_config(&strict, file) {
        Err(e) => assert!(not_compiled_in(&e), "{e:?}"),
        Ok(ctx) => panic!("fallback = error opened {}", ctx.backend_name()),
    }
    Ok(())
}
