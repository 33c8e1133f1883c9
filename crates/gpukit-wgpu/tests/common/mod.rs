//! What the backend's integration tests share: opening the device.

use gpukit_core::Context;
use gpukit_wgpu::{WgpuBackend, WgpuOptions};

/// A context on the first usable adapter opened with `opts`; without a Vulkan driver
/// `None` after printing `SKIPPED: <reason>` (with `GPU_REQUIRE_VULKAN=1` a panic instead).
pub fn open(opts: WgpuOptions) -> Option<Context<WgpuBackend>> {
    match WgpuBackend::with_options(None, opts).and_then(Context::new) {
        Ok(ctx) => Some(ctx),
        Err(e) if std::env::var("GPU_REQUIRE_VULKAN").is_ok_and(|v| v == "1") => {
            panic!("GPU_REQUIRE_VULKAN is set but Vulkan is unusable: {e}")
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {e}");
            None
        }
    }
}
