//! Making sure cudarc's driver loader can never panic.
//!
//! cudarc (with `dynamic-loading`) opens the driver the first time one of its functions is
//! called, by trying a list of file names, and panics if none opens; each function looks up
//! its own symbol (named exactly like the function) on its first call and panics if the
//! driver lacks it. [`check`] runs before any cudarc call: it makes sure every driver symbol
//! the backend calls ([`DRIVER_SYMBOLS`], which a unit test derives from the backend's
//! source, so that a new call cannot be left out) exists in the driver the probe loaded,
//! and that the first name on cudarc's list that
//! opens is that same library (the dynamic loader matches a name against libraries already
//! loaded, so `libcuda.so.1` finds the probe's copy; a stray `libcuda.so` earlier on the
//! search path, such as the toolkit's link stub, would not). Then it lets cudarc load,
//! inside `catch_unwind` for good measure. [`cudarc_driver_report`] shows the same walk
//! over cudarc's names, for a diagnosis (the bundle's `cuda_doctor`).

use std::path::PathBuf;
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
    "cuGetErrorName",
    "cuGetErrorString",
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
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
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

/// Checks once per process that cudarc will load the probe's driver (see the module docs).
pub(crate) fn check() -> Result<(), CudaError> {
    static CHECKED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    CHECKED.get_or_init(run).clone()
}

fn run() -> Result<(), CudaError> {
    let drv =
        gpukit_cuda_sys::probe::driver().map_err(|e| CudaError::Unavailable(e.to_string()))?;
    let path = drv.loaded.path.display().to_string();
    if let Some(missing) = DRIVER_SYMBOLS.iter().find(|s| !drv.has_symbol(s)) {
        return Err(CudaError::Unavailable(format!(
            "the CUDA driver at {path} has no `{missing}`: update the NVIDIA driver"
        )));
    }
    let ours = drv.symbol_address("cuInit");
    match first_opening_candidate() {
        None => Err(CudaError::Unavailable(format!(
            "cudarc cannot open the CUDA driver by name although it was loaded from {path}"
        ))),
        Some((name, addr)) if addr != ours || addr.is_none() => {
            Err(CudaError::Unavailable(format!(
            "cudarc would open `{name}`, which is not the driver loaded from {path} (a stub or \
             a second driver on the library path?); remove it from LD_LIBRARY_PATH"
        )))
        }
        Some(_) => {
            // SAFETY: cudarc's loader opens the library just checked; catch_unwind turns an
            // unexpected panic (in a build that unwinds) into an error.
            let loaded = std::panic::catch_unwind(|| unsafe {
                cudarc::driver::sys::culib()
                    .get::<*const std::ffi::c_void>(b"cuInit\0")
                    .is_ok()
            });
            match loaded {
                Ok(true) => Ok(()),
                _ => Err(CudaError::Unavailable(format!(
                    "cudarc could not load the CUDA driver from {path}"
                ))),
            }
        }
    }
}

/// The library cudarc will get: the first of its names that opens, as it tries them, with
/// the address of its `cuInit` (to compare with the probe's).
fn first_opening_candidate() -> Option<(String, Option<usize>)> {
    for name in cudarc::get_lib_name_candidates("cuda") {
        // SAFETY: opening a library runs its initialisers; every candidate is a name of the
        // CUDA driver, which cudarc would open anyway. The handle is closed again at once;
        // the probe's own handle keeps its library loaded.
        if let Ok(lib) = unsafe { libloading::Library::new(&name) } {
            // SAFETY: looked up only to compare addresses.
            let addr = unsafe { lib.get::<*const std::ffi::c_void>(b"cuInit\0") }
                .ok()
                .map(|s| *s as usize);
            return Some((name, addr));
        }
    }
    None
}

/// What cudarc's driver loader will open, next to what the probe loaded: the facts behind
/// the check every CUDA context runs first.
#[derive(Debug, Clone, PartialEq)]
pub struct CudarcDriverReport {
    /// cudarc's file names for the driver, in the order it tries them.
    pub candidates: Vec<String>,
    /// Where the probe loaded the driver from, if it did.
    pub probe_path: Option<PathBuf>,
    /// The first candidate that opens, and whether it is the probe's library (the same
    /// `cuInit`); `None` when none opens.
    pub first_opened: Option<(String, bool)>,
    /// The check's verdict, as opening a CUDA context would get it (the probe's error where
    /// there is no driver).
    pub verdict: Result<(), CudaError>,
}

/// Walks cudarc's driver names as the check before every context does and reports what it
/// found. Never panics and, where the check fails, never lets cudarc load.
pub fn cudarc_driver_report() -> CudarcDriverReport {
    let driver = gpukit_cuda_sys::probe::driver().ok();
    let ours = driver.and_then(|drv| drv.symbol_address("cuInit"));
    let first_opened =
        first_opening_candidate().map(|(name, addr)| (name, addr.is_some() && addr == ours));
    CudarcDriverReport {
        candidates: cudarc::get_lib_name_candidates("cuda"),
        probe_path: driver.map(|drv| drv.loaded.path.clone()),
        first_opened,
        verdict: check(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backend's source files, as compiled into this test (the GPU bundle runs it
    /// without the source tree).
    const SOURCES: &[(&str, &str)] = &[
        ("backend.rs", include_str!("backend.rs")),
        ("builtins.rs", include_str!("builtins.rs")),
        ("cache.rs", include_str!("cache.rs")),
        ("device.rs", include_str!("device.rs")),
        ("error.rs", include_str!("error.rs")),
        ("graph.rs", include_str!("graph.rs")),
        ("kernel.rs", include_str!("kernel.rs")),
        ("lib.rs", include_str!("lib.rs")),
        ("loader.rs", include_str!("loader.rs")),
        ("nvtx.rs", include_str!("nvtx.rs")),
        ("ops.rs", include_str!("ops.rs")),
        ("source.rs", include_str!("source.rs")),
        ("streams.rs", include_str!("streams.rs")),
    ];

    /// The driver functions the source calls: `sys::cuName(`, outside comments.
    fn driver_calls() -> Vec<String> {
        let mut calls = Vec::new();
        for (_, text) in SOURCES {
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or_default();
                for (at, _) in code.match_indices("sys::cu") {
                    let name: String = code[at + "sys::".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let called = code[at + "sys::".len() + name.len()..].starts_with('(');
                    // `culib` is cudarc's loader itself, not a driver symbol.
                    if called && name != "culib" && !calls.contains(&name) {
                        calls.push(name);
                    }
                }
            }
        }
        calls.sort();
        calls
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
