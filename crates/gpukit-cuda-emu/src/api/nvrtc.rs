//! The emulated NVRTC (<https://docs.nvidia.com/cuda/nvrtc/index.html>): programs compiled by
//! [`crate::compile`]; their "PTX" and "cubin" are the emulator's images, which only its
//! `cuModuleLoadData` runs.
//!
//! It reports version 12.99, which no real NVRTC has, so that a kernel cache keyed by the
//! NVRTC version never hands the emulator's images to a real driver or the other way round.
//! Compiling for a virtual architecture (`compute_XX`) gives no cubin (size 0), as NVRTC does.

#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, Mutex, OnceLock};

use crate::handles::{Table, Tag};

/// `nvrtcResult`.
pub type NvrtcResult = u32;

/// The version the emulated NVRTC reports.
pub const VERSION: (c_int, c_int) = (12, 99);

/// The architectures it compiles for.
const ARCHS: [c_int; 15] = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100];

const SUCCESS: NvrtcResult = 0;
const INVALID_INPUT: NvrtcResult = 3;
const INVALID_PROGRAM: NvrtcResult = 4;
const INTERNAL_ERROR: NvrtcResult = 11;

const STRINGS: [&str; 12] = [
    "NVRTC_SUCCESS\0",
    "NVRTC_ERROR_OUT_OF_MEMORY\0",
    "NVRTC_ERROR_PROGRAM_CREATION_FAILURE\0",
    "NVRTC_ERROR_INVALID_INPUT\0",
    "NVRTC_ERROR_INVALID_PROGRAM\0",
    "NVRTC_ERROR_INVALID_OPTION\0",
    "NVRTC_ERROR_COMPILATION\0",
    "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE\0",
    "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION\0",
    "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION\0",
    "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID\0",
    "NVRTC_ERROR_INTERNAL_ERROR\0",
];

#[derive(Debug, Default)]
struct ProgramState {
    log: String,
    image: Option<Vec<u8>>,
    real_arch: bool,
}

#[derive(Debug)]
struct Program {
    src: String,
    name: String,
    headers: Vec<(String, String)>,
    state: Mutex<ProgramState>,
}

fn programs() -> &'static Table<Program> {
    static P: OnceLock<Table<Program>> = OnceLock::new();
    P.get_or_init(|| Table::new(Tag::Program))
}

fn guarded(f: impl FnOnce() -> Result<(), NvrtcResult>) -> NvrtcResult {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => INTERNAL_ERROR,
    }
}

/// # Safety
///
/// `s` is null or NUL-terminated.
unsafe fn text(s: *const c_char) -> Option<String> {
    // SAFETY: the caller's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

fn program(p: u64) -> Result<Arc<Program>, NvrtcResult> {
    programs().get(p).ok_or(INVALID_PROGRAM)
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetErrorString(result: NvrtcResult) -> *const c_char {
    STRINGS
        .get(result as usize)
        .copied()
        .unwrap_or("NVRTC_ERROR unknown\0")
        .as_ptr()
        .cast()
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcVersion(major: *mut c_int, minor: *mut c_int) -> NvrtcResult {
    if major.is_null() || minor.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: writable ints.
    unsafe {
        *major = VERSION.0;
        *minor = VERSION.1;
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetNumSupportedArchs(n: *mut c_int) -> NvrtcResult {
    if n.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: a writable int.
    unsafe { *n = ARCHS.len() as c_int };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetSupportedArchs(archs: *mut c_int) -> NvrtcResult {
    if archs.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: the caller's buffer has room for nvrtcGetNumSupportedArchs entries.
    unsafe { std::ptr::copy_nonoverlapping(ARCHS.as_ptr(), archs, ARCHS.len()) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcCreateProgram(
    prog: *mut u64,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> NvrtcResult {
    guarded(|| {
        if prog.is_null() || num_headers < 0 {
            return Err(INVALID_INPUT);
        }
        // SAFETY: NUL-terminated strings (the API's contract).
        let src = unsafe { text(src) }.ok_or(INVALID_INPUT)?;
        // SAFETY: as above.
        let name = unsafe { text(name) }
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default_program".into());
        let mut hs = Vec::new();
        if num_headers > 0 {
            if headers.is_null() || include_names.is_null() {
                return Err(INVALID_INPUT);
            }
            for i in 0..num_headers as usize {
                // SAFETY: `num_headers` entries in each array, each NUL-terminated.
                let (h, n) = unsafe { (text(*headers.add(i)), text(*include_names.add(i))) };
                hs.push((n.ok_or(INVALID_INPUT)?, h.ok_or(INVALID_INPUT)?));
            }
        }
        let name = name.strip_suffix(".cu").unwrap_or(&name).to_string();
        let h = programs().insert(Arc::new(Program {
            src,
            name,
            headers: hs,
            state: Mutex::new(ProgramState::default()),
        }));
        // SAFETY: a writable nvrtcProgram.
        unsafe { *prog = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcDestroyProgram(prog: *mut u64) -> NvrtcResult {
    guarded(|| {
        if prog.is_null() {
            return Err(INVALID_PROGRAM);
        }
        // SAFETY: a readable and writable nvrtcProgram.
        let h = unsafe { *prog };
        programs().remove(h).ok_or(INVALID_PROGRAM)?;
        // SAFETY: as above.
        unsafe { *prog = 0 };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcCompileProgram(
    prog: u64,
    n: c_int,
    options: *const *const c_char,
) -> NvrtcResult {
    guarded(|| {
        let p = program(prog)?;
        let mut opts = Vec::new();
        if n > 0 {
            if options.is_null() {
                return Err(INVALID_INPUT);
            }
            for i in 0..n as usize {
                // SAFETY: `n` NUL-terminated options.
                opts.push(unsafe { text(*options.add(i)) }.ok_or(INVALID_INPUT)?);
            }
        }
        let real_arch = opts.iter().any(|o| o.contains("sm_"));
        let result = crate::compile::compile(&p.src, &p.name, &p.headers, &opts);
        let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
        st.real_arch = real_arch;
        match result {
            Ok(c) => {
                st.log = c.log;
                st.image = Some(c.image);
                Ok(())
            }
            Err(e) => {
                st.log = e.log;
                st.image = None;
                Err(e.code)
            }
        }
    })
}

/// Copies the program's output; `ptx`: with a terminating NUL, as PTX text has.
unsafe fn output(prog: u64, size: *mut usize, buf: *mut c_char, ptx: bool) -> NvrtcResult {
    guarded(|| {
        let p = program(prog)?;
        let st = p.state.lock().unwrap_or_else(|e| e.into_inner());
        let image = st.image.as_ref().ok_or(INVALID_PROGRAM)?;
        let empty = !ptx && !st.real_arch;
        let len = if empty {
            0
        } else {
            image.len() + usize::from(ptx)
        };
        if !size.is_null() {
            // SAFETY: a writable size_t.
            unsafe { *size = len };
        }
        if !buf.is_null() && !empty {
            // SAFETY: the caller's buffer has the size just reported.
            unsafe {
                std::ptr::copy_nonoverlapping(image.as_ptr(), buf.cast::<u8>(), image.len());
                if ptx {
                    *buf.add(image.len()) = 0;
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetPTXSize(prog: u64, size: *mut usize) -> NvrtcResult {
    if size.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: forwarded.
    unsafe { output(prog, size, std::ptr::null_mut(), true) }
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetPTX(prog: u64, buf: *mut c_char) -> NvrtcResult {
    if buf.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: forwarded.
    unsafe { output(prog, std::ptr::null_mut(), buf, true) }
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetCUBINSize(prog: u64, size: *mut usize) -> NvrtcResult {
    if size.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: forwarded.
    unsafe { output(prog, size, std::ptr::null_mut(), false) }
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetCUBIN(prog: u64, buf: *mut c_char) -> NvrtcResult {
    if buf.is_null() {
        return INVALID_INPUT;
    }
    // SAFETY: forwarded.
    unsafe { output(prog, std::ptr::null_mut(), buf, false) }
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetProgramLogSize(prog: u64, size: *mut usize) -> NvrtcResult {
    guarded(|| {
        let p = program(prog)?;
        if size.is_null() {
            return Err(INVALID_INPUT);
        }
        let st = p.state.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a writable size_t.
        unsafe { *size = st.log.len() + 1 };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvrtcGetProgramLog(prog: u64, buf: *mut c_char) -> NvrtcResult {
    guarded(|| {
        let p = program(prog)?;
        if buf.is_null() {
            return Err(INVALID_INPUT);
        }
        let st = p.state.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller's buffer has nvrtcGetProgramLogSize bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(st.log.as_ptr(), buf.cast::<u8>(), st.log.len());
            *buf.add(st.log.len()) = 0;
        }
        Ok(())
    })
}
