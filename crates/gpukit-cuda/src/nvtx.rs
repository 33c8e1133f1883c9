//! NVTX ranges through cudarc's `nvtx` module, with the NVTX library loaded at run time.
//!
//! cudarc resolves `libnvToolsExt.so.1` (NVTX 2, shipped with CUDA toolkits up to 12 and by
//! the `nvidia-nvtx-cu12` wheel) on first use and panics if it is missing, so the library's
//! presence is checked once, here, and every call is a no-op without it. Whether a profiler
//! is attached is NVTX's business: without one its calls return at once.

use std::sync::OnceLock;

/// Whether the NVTX library can be loaded (checked once per process).
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: loading the library runs only its initialisers, which NVTX keeps empty (its
    // entry points bind to a profiler lazily, on their first call).
    *PRESENT.get_or_init(|| unsafe { cudarc::nvtx::sys::is_culib_present() })
}

/// Pushes a range named `name` (up to its first NUL byte) on the calling thread's NVTX
/// stack; false when the library is absent.
pub(crate) fn push(name: &str) -> bool {
    if !available() {
        return false;
    }
    let name = name.split('\0').next().unwrap_or_default();
    cudarc::nvtx::result::range_push(name);
    true
}

/// Pops the calling thread's innermost NVTX range (pushed by [`push`]).
pub(crate) fn pop() {
    if available() {
        cudarc::nvtx::result::range_pop();
    }
}
