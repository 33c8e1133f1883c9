//! The driver's result codes, their names and descriptions (`cuGetErrorName`,
//! `cuGetErrorString`), and the emulator's diagnostics.
//!
//! The entry points return `CUresult` as the `u32` it is in the C ABI: the emulator never
//! builds a Rust enum from a value a caller passed in (an unknown value would be undefined
//! behaviour in an enum), so codes are plain constants here.
//!
//! Codes and texts: <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html>.
//! Where the emulator gives a code a meaning of its own (the PTX JIT compiler it does not
//! have), the text says so.

use std::ffi::CStr;

/// A `CUresult`.
pub type CuResult = u32;

/// The `CUresult` values the emulator returns.
#[allow(missing_docs)]
pub mod cu {
    use super::CuResult;
    pub const SUCCESS: CuResult = 0;
    pub const INVALID_VALUE: CuResult = 1;
    pub const OUT_OF_MEMORY: CuResult = 2;
    pub const NOT_INITIALIZED: CuResult = 3;
    pub const DEINITIALIZED: CuResult = 4;
    pub const NO_DEVICE: CuResult = 100;
    pub const INVALID_DEVICE: CuResult = 101;
    pub const INVALID_IMAGE: CuResult = 200;
    pub const INVALID_CONTEXT: CuResult = 201;
    pub const CONTEXT_ALREADY_CURRENT: CuResult = 202;
    pub const NO_BINARY_FOR_GPU: CuResult = 209;
    pub const UNSUPPORTED_LIMIT: CuResult = 215;
    pub const INVALID_PTX: CuResult = 218;
    pub const JIT_COMPILER_NOT_FOUND: CuResult = 221;
    pub const INVALID_SOURCE: CuResult = 300;
    pub const FILE_NOT_FOUND: CuResult = 301;
    pub const SHARED_OBJECT_INIT_FAILED: CuResult = 303;
    pub const OPERATING_SYSTEM: CuResult = 304;
    pub const INVALID_HANDLE: CuResult = 400;
    pub const ILLEGAL_STATE: CuResult = 401;
    pub const NOT_FOUND: CuResult = 500;
    pub const NOT_READY: CuResult = 600;
    pub const ILLEGAL_ADDRESS: CuResult = 700;
    pub const LAUNCH_OUT_OF_RESOURCES: CuResult = 701;
    pub const PEER_ACCESS_ALREADY_ENABLED: CuResult = 704;
    pub const PEER_ACCESS_NOT_ENABLED: CuResult = 705;
    pub const PRIMARY_CONTEXT_ACTIVE: CuResult = 708;
    pub const CONTEXT_IS_DESTROYED: CuResult = 709;
    pub const ASSERT: CuResult = 710;
    pub const HOST_MEMORY_ALREADY_REGISTERED: CuResult = 712;
    pub const HOST_MEMORY_NOT_REGISTERED: CuResult = 713;
    pub const HARDWARE_STACK_ERROR: CuResult = 714;
    pub const ILLEGAL_INSTRUCTION: CuResult = 715;
    pub const MISALIGNED_ADDRESS: CuResult = 716;
    pub const LAUNCH_FAILED: CuResult = 719;
    pub const NOT_PERMITTED: CuResult = 800;
    pub const NOT_SUPPORTED: CuResult = 801;
    pub const STREAM_CAPTURE_UNSUPPORTED: CuResult = 900;
    pub const STREAM_CAPTURE_INVALIDATED: CuResult = 901;
    pub const STREAM_CAPTURE_MERGE: CuResult = 902;
    pub const STREAM_CAPTURE_UNMATCHED: CuResult = 903;
    pub const STREAM_CAPTURE_UNJOINED: CuResult = 904;
    pub const STREAM_CAPTURE_ISOLATION: CuResult = 905;
    pub const STREAM_CAPTURE_IMPLICIT: CuResult = 906;
    pub const CAPTURED_EVENT: CuResult = 907;
    pub const STREAM_CAPTURE_WRONG_THREAD: CuResult = 908;
    pub const UNKNOWN: CuResult = 999;
}

/// Every code the emulator knows: `(code, name, description)`, NUL-terminated for the C API.
/// Descriptions are the driver's, except where the emulator says what it does instead.
const TABLE: &[(CuResult, &str, &str)] = &[
    (0, "CUDA_SUCCESS\0", "no error\0"),
    (1, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (3, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (4, "CUDA_ERROR_DEINITIALIZED\0", "driver shutting down\0"),
    (5, "CUDA_ERROR_PROFILER_DISABLED\0", "profiler disabled while using a system profiler\0"),
    (34, "CUDA_ERROR_STUB_LIBRARY\0", "CUDA driver is a stub library\0"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE\0", "CUDA-capable device(s) is/are busy or unavailable\0"),
    (100, "CUDA_ERROR_NO_DEVICE\0", "no CUDA-capable device is detected\0"),
    (101, "CUDA_ERROR_INVALID_DEVICE\0", "invalid device ordinal\0"),
    (200, "CUDA_ERROR_INVALID_IMAGE\0", "device kernel image is invalid\0"),
    (201, "CUDA_ERROR_INVALID_CONTEXT\0", "invalid device context\0"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT\0", "context already current\0"),
    (205, "CUDA_ERROR_MAP_FAILED\0", "mapping of buffer object failed\0"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU\0", "no kernel image is available for execution on the device\0"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT\0", "limit is not supported on this architecture\0"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED\0", "peer access is not supported between these two devices\0"),
    (218, "CUDA_ERROR_INVALID_PTX\0", "a PTX JIT compilation failed\0"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND\0", "PTX JIT compiler library not found (the CUDA emulator has no PTX compiler: it runs CUDA C compiled by its own NVRTC only)\0"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION\0", "the provided PTX was compiled with an unsupported toolchain.\0"),
    (300, "CUDA_ERROR_INVALID_SOURCE\0", "device kernel image is invalid\0"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND\0", "file not found\0"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND\0", "shared object symbol not found\0"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED\0", "shared object initialization failed\0"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM\0", "OS call failed or operation not supported on this OS\0"),
    (400, "CUDA_ERROR_INVALID_HANDLE\0", "invalid resource handle\0"),
    (401, "CUDA_ERROR_ILLEGAL_STATE\0", "the operation cannot be performed in the present state\0"),
    (500, "CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
    (600, "CUDA_ERROR_NOT_READY\0", "device not ready\0"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS\0", "an illegal memory access was encountered\0"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES\0", "too many resources requested for launch\0"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT\0", "the launch timed out and was terminated\0"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0", "peer access is already enabled\0"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED\0", "peer access has not been enabled\0"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE\0", "cannot set while device is active in this process\0"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED\0", "context is destroyed\0"),
    (710, "CUDA_ERROR_ASSERT\0", "device-side assert triggered\0"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0", "part or all of the requested memory range is already mapped\0"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0", "pointer does not correspond to a registered memory region\0"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR\0", "hardware stack error\0"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION\0", "an illegal instruction was encountered\0"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS\0", "misaligned address\0"),
    (719, "CUDA_ERROR_LAUNCH_FAILED\0", "unspecified launch failure\0"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE\0", "too many blocks in cooperative launch\0"),
    (800, "CUDA_ERROR_NOT_PERMITTED\0", "operation not permitted\0"),
    (801, "CUDA_ERROR_NOT_SUPPORTED\0", "operation not supported\0"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\0", "operation not permitted when stream is capturing\0"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\0", "operation failed due to a previous error during capture\0"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE\0", "operation would result in a merge of separate capture sequences\0"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED\0", "capture was not ended in the same stream as it began\0"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED\0", "capturing stream has unjoined work\0"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION\0", "dependency created on uncaptured work in another stream\0"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT\0", "operation would make the legacy stream depend on a capturing blocking stream\0"),
    (907, "CUDA_ERROR_CAPTURED_EVENT\0", "operation not permitted on an event last recorded in a capturing stream\0"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD\0", "attempt to terminate a thread-local capture sequence from another thread\0"),
    (909, "CUDA_ERROR_TIMEOUT\0", "wait operation timed out\0"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE\0", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update\0"),
    (999, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

fn entry(code: CuResult) -> Option<&'static (CuResult, &'static str, &'static str)> {
    TABLE.iter().find(|(c, _, _)| *c == code)
}

/// The code's name and description as C strings, or `None` for a code the emulator does not
/// know (`cuGetErrorName` then answers `CUDA_ERROR_INVALID_VALUE`, as the driver does).
pub fn describe(code: CuResult) -> Option<(&'static CStr, &'static CStr)> {
    let (_, name, text) = entry(code)?;
    let name = CStr::from_bytes_with_nul(name.as_bytes()).ok()?;
    let text = CStr::from_bytes_with_nul(text.as_bytes()).ok()?;
    Some((name, text))
}

/// The code's name, for diagnostics.
pub fn name(code: CuResult) -> &'static str {
    entry(code).map_or("CUDA_ERROR_UNKNOWN", |(_, n, _)| n.trim_end_matches('\0'))
}

/// Errors after which the context is unusable (the driver's "sticky" errors: "This leaves the
/// process in an inconsistent state and any further CUDA work will return the same error").
pub fn is_sticky(code: CuResult) -> bool {
    matches!(
        code,
        214 | 700 | 702 | 710 | 714 | 715 | 716 | 717 | 718 | 719
    )
}

/// The emulator's diagnostics go to standard error, prefixed: it is a test tool, and these
/// lines are what explains a failed test (a race, an illegal address, a rule of the
/// documentation broken). `GPUKIT_CUDA_EMU_QUIET=1` silences them.
pub fn diagnose(message: &str) {
    if crate::config::get().quiet {
        return;
    }
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    for line in message.lines() {
        let _ = writeln!(err, "cuda-emu: {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_terminated_and_unique() {
        for (i, (code, name, text)) in TABLE.iter().enumerate() {
            assert!(name.ends_with('\0') && text.ends_with('\0'), "{name}");
            assert!(TABLE[..i].iter().all(|(c, _, _)| c != code), "{code} twice");
            assert!(describe(*code).is_some());
        }
        assert_eq!(name(cu::ILLEGAL_ADDRESS), "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert!(describe(12345).is_none());
    }
}
