//! Making sure no cudarc call can panic.
//!
//! cudarc (with `dynamic-loading`) looks each function's symbol up on its first call and
//! panics if the driver lacks it. [`check`] runs before the backend's first cudarc call:
//! `gpukit_cuda_sys::probe::driver` has made sure cudarc reaches the driver the probe
//! loaded, and here every driver symbol the backend calls ([`DRIVER_SYMBOLS`], which a unit
//! test derives from the backend's source, so that a new call cannot be left out) must be
//! in it. The calls themselves are the wrappers of [`crate::driver`], one per symbol, which
//! the unit tests also check.
//!
//! This module calls no driver function itself: it hands the names to the probe's own
//! loader, which looks each symbol up without calling it.

use std::sync::OnceLock;

use crate::error::CudaError;

/// Every driver entry point the backend calls through cudarc (`sys::cu*(` in its source;
/// the unit test `every_driver_call_is_listed` keeps the two equal).
pub(crate) const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxGetStreamPriorityRange",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemAllocManaged",
    "cuMemPrefetchAsync",
    "cuMemFree_v2",
    "cuMemsetD8Async",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyPeerAsync",
    "cuDeviceCanAccessPeer",
    "cuCtxEnablePeerAccess",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuLaunchHostFunc",
    "cuStreamGetCtx",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphDestroy",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuEventElapsedTime",
    "cuEventDestroy_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncGetAttribute",
    "cuLaunchKernel",
];

/// Checks once per process that every call of the backend reaches a driver entry point
/// (see the module docs).
pub(crate) fn check() -> Result<(), CudaError> {
    static CHECKED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            gpukit_cuda_sys::probe::driver()
                .and_then(|drv| drv.require(DRIVER_SYMBOLS))
                .map_err(|e| CudaError::Unavailable(e.to_string()))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backend's source files, as compiled into this test (the GPU bundle runs it
    /// without the source tree).
    const SOURCES: &[(&str, &str)] = &[
        ("backend.rs", include_str!("backend.rs")),
        ("blas.rs", include_str!("blas.rs")),
        ("cache.rs", include_str!("cache.rs")),
        ("device.rs", include_str!("device.rs")),
        ("driver.rs", include_str!("driver.rs")),
        ("error.rs", include_str!("error.rs")),
        ("graph.rs", include_str!("graph.rs")),
        ("kernel.rs", include_str!("kernel.rs")),
        ("lib.rs", include_str!("lib.rs")),
        ("loader.rs", include_str!("loader.rs")),
        ("memory.rs", include_str!("memory.rs")),
        ("nccl.rs", include_str!("nccl.rs")),
        ("nccl/comm.rs", include_str!("nccl/comm.rs")),
        ("nccl/tests.rs", include_str!("nccl/tests.rs")),
        ("nvtx.rs", include_str!("nvtx.rs")),
        ("streams.rs", include_str!("streams.rs")),
    ];

    /// The driver functions `text` calls, once per call: `cuName(` after `sys::`, outside
    /// comments.
    fn calls_in(text: &str) -> Vec<String> {
        let mut calls = Vec::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("sys::cu") {
                let name: String = code[at + "sys::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let called = code[at + "sys::".len() + name.len()..].starts_with('(');
                // `culib` is cudarc's loader itself, not a driver symbol.
                if called && name != "culib" {
                    calls.push(name);
                }
            }
        }
        calls
    }

    /// The driver functions the source calls, each once, sorted.
    fn driver_calls() -> Vec<String> {
        let mut calls: Vec<String> = SOURCES.iter().flat_map(|(_, t)| calls_in(t)).collect();
        calls.sort();
        calls.dedup();
        calls
    }

    /// Every raw driver call is a wrapper of `driver.rs`, one per entry point, so that the
    /// error path (`Device::check`) and the safety contracts have one place.
    #[test]
    fn every_driver_call_is_one_wrapper_in_the_driver_module() {
        for (name, text) in SOURCES {
            if *name != "driver.rs" {
                assert_eq!(
                    calls_in(text),
                    Vec::<String>::new(),
                    "raw driver calls in {name}"
                );
            }
        }
        let (_, driver) = SOURCES
            .iter()
            .find(|(name, _)| *name == "driver.rs")
            .expect("driver.rs is scanned");
        let mut calls = calls_in(driver);
        let all = calls.len();
        calls.sort();
        calls.dedup();
        assert_eq!(
            calls.len(),
            all,
            "an entry point is called twice in driver.rs"
        );
    }

    /// Regression test for the desk-check's "the loader pre-check misses 9 driver symbols
    /// the backend calls" (graphs, capture, managed memory, `cuStreamGetCtx`): a symbol
    /// missing from the check makes cudarc panic inside the call instead of the backend
    /// returning a typed error before it.
    #[test]
    fn every_driver_call_is_listed() {
        let mut listed: Vec<String> = DRIVER_SYMBOLS.iter().map(|s| (*s).to_owned()).collect();
        listed.sort();
        assert_eq!(
            driver_calls(),
            listed,
            "sys:: calls in the source vs DRIVER_SYMBOLS"
        );
        // Every source file is scanned (checked where the source tree is at hand).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".rs") {
                    assert!(
                        SOURCES.iter().any(|(n, _)| *n == name),
                        "{name} is not among the scanned SOURCES"
                    );
                }
            }
        }
    }

    /// Regression test for the desk-check's "`synchronize()` is `cuCtxSynchronize`": a
    /// context-wide sync waits for every context on the device and invalidates their
    /// captures, so the backend never calls it.
    #[test]
    fn the_backend_never_synchronises_the_whole_device() {
        let calls = driver_calls();
        assert!(!calls.iter().any(|c| c == "cuCtxSynchronize"), "{calls:?}");
        assert!(
            calls.iter().any(|c| c == "cuStreamSynchronize"),
            "{calls:?}"
        );
    }

    #[test]
    fn every_listed_symbol_is_a_driver_entry_point() {
        for s in DRIVER_SYMBOLS {
            assert!(s.starts_with("cu"), "{s}");
        }
        let mut sorted = DRIVER_SYMBOLS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            DRIVER_SYMBOLS.len(),
            "a symbol is listed twice"
        );
    }
}
