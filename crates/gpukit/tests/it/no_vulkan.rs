//! The no-Vulkan contract: with no Vulkan driver, every Vulkan request is a typed
//! `Unavailable` naming what was looked for, `auto` records it and opens another backend,
//! and nothing panics. The adapters are listed once per process, so the check runs in a
//! child process (this test binary again) whose loader is pointed at a driver file that does
//! not exist (`VK_DRIVER_FILES`), which hides every driver, lavapipe included.

use crate::common;

use gpukit::{Context, DeviceSpec, Error};

/// Set in the child process.
const CHILD: &str = "GPUKIT_NO_VULKAN_CHILD";

#[test]
fn vulkan_requests_without_a_driver_are_typed_errors() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    common::run_in_child(
        module_path!(),
        "vulkan_requests_without_a_driver_are_typed_errors",
        CHILD,
        |cmd| {
            cmd.env("VK_DRIVER_FILES", "/nonexistent/gpukit-no-driver.json")
                .env_remove("VK_ICD_FILENAMES")
                .env_remove("VK_ADD_DRIVER_FILES")
                .env_remove("GPU_DEVICE")
        },
    );
}

/// The checks, in a process whose loader finds no driver.
fn child() {
    let reason = match gpukit::wgpu::probe() {
        Ok(p) => panic!("a driver was found although VK_DRIVER_FILES hides them: {p:?}"),
        Err(e) => e.to_string(),
    };
    assert!(
        reason.contains("VK_DRIVER_FILES") || reason.contains("loader"),
        "the reason says what was looked for: {reason}"
    );
    for spec in [
        DeviceSpec::Vulkan(None),
        DeviceSpec::Vulkan(Some(0)),
        DeviceSpec::Vulkan(Some(7)),
    ] {
        match Context::new(spec) {
            Err(Error::Unavailable {
                backend: "vulkan",
                reason: r,
            }) => assert_eq!(r, reason),
            other => panic!("{spec}: expected Unavailable, got {other:?}"),
        }
    }
    let ctx = Context::new(DeviceSpec::Auto).expect("auto opens another backend");
    assert_ne!(ctx.backend_name(), "vulkan");
    if ctx.backend_name() == "cuda" {
        return; // nothing fell back
    }
    let vk = ctx
        .selection()
        .rejected
        .iter()
        .find(|r| r.backend == "vulkan")
        .expect("auto records the Vulkan rejection when it did not open CUDA")
        .clone();
    assert!(matches!(vk.reason, Error::Unavailable { .. }), "{vk:?}");
}
