//! The emulated cuBLAS (<https://docs.nvidia.com/cuda/cublas/>): handles bound to a stream,
//! and gemm (`cublasSgemm`, `cublasDgemm`, `cublasGemmEx` in f32, f64, f16 and bf16 with f32
//! compute, and their strided-batched forms) computed on the CPU in stream order.
//!
//! Rules: a handle needs a current context (`CUBLAS_STATUS_NOT_INITIALIZED` without);
//! `alpha` and `beta` are read when the call is made (host pointer mode); leading dimensions
//! smaller than the rows they hold are `CUBLAS_STATUS_INVALID_VALUE`; with `beta == 0` C is
//! not read (it may hold NaN). Each handle has a workspace: its own default one (4 MiB of
//! device memory, allocated with the handle and freed with it) or the caller's
//! (`cublasSetWorkspace`, until `cublasSetStream` resets it to the default), and every gemm
//! is taken to write its first 4 KiB: cuBLAS may use it for any gemm, so work captured into
//! a graph that uses a handle's default workspace races with the handle's later gemms on
//! another stream, and a replay after the handle is destroyed touches freed memory; both
//! are reported. Results are computed in f32 or f64 as the types ask, without TF32 and with
//! a different summation order than a GPU's: they agree with cuBLAS's to rounding, not bit
//! for bit.

#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use crate::context;
use crate::handles::{Table, Tag};
use crate::hb::Kind;
use crate::memory::{memory, MemKind};
use crate::work::{Call, Exec, Fault, Touch, Work};

/// `cublasStatus_t`.
pub type Status = u32;
const SUCCESS: Status = 0;
const NOT_INITIALIZED: Status = 1;
const ALLOC_FAILED: Status = 3;
const INVALID_VALUE: Status = 7;
const EXECUTION_FAILED: Status = 13;
const INTERNAL_ERROR: Status = 14;
const NOT_SUPPORTED: Status = 15;

/// The default workspace's size, and the part every gemm is taken to write.
const WORKSPACE: u64 = 4 << 20;
const WORKSPACE_TOUCHED: u64 = 4096;

#[derive(Debug)]
struct Handle {
    ctx: u64,
    stream: Mutex<u64>,
    math: Mutex<u32>,
    /// The default workspace (freed with the handle) and the one in use.
    own_workspace: u64,
    workspace: Mutex<(u64, u64)>,
}

fn handles() -> &'static Table<Handle> {
    static H: OnceLock<Table<Handle>> = OnceLock::new();
    H.get_or_init(|| Table::new(Tag::Blas))
}

fn guarded(f: impl FnOnce() -> Result<(), Status>) -> Status {
    if crate::stream::in_host_fn() {
        return NOT_INITIALIZED;
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(s)) => s,
        Err(_) => INTERNAL_ERROR,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cublasCreate_v2(handle: *mut u64) -> Status {
    guarded(|| {
        if handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let ctx = context::current().map_err(|_| NOT_INITIALIZED)?;
        let ws = memory()
            .and_then(|m| m.alloc(MemKind::Device, ctx.device, ctx.handle, WORKSPACE))
            .map_err(|_| ALLOC_FAILED)?;
        let h = handles().insert(Arc::new(Handle {
            ctx: ctx.handle,
            stream: Mutex::new(0),
            math: Mutex::new(0),
            own_workspace: ws.base,
            workspace: Mutex::new((ws.base, WORKSPACE)),
        }));
        // SAFETY: a writable cublasHandle_t.
        unsafe { *handle = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasDestroy_v2(handle: u64) -> Status {
    guarded(|| {
        let h = handles().remove(handle).ok_or(NOT_INITIALIZED)?;
        // The default workspace goes with the handle (as cuBLAS frees it); work still queued
        // or captured on it finds it freed.
        if let Ok(m) = memory() {
            let _ = m.free(h.own_workspace, &[MemKind::Device]);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetVersion_v2(handle: u64, version: *mut c_int) -> Status {
    guarded(|| {
        handles().get(handle).ok_or(NOT_INITIALIZED)?;
        if version.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: a writable int: cuBLAS 12.9.0.
        unsafe { *version = 120900 };
        Ok(())
    })
}

/// `cublasGetProperty`: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2 of cuBLAS 12.9.0.
#[no_mangle]
pub unsafe extern "C" fn cublasGetProperty(kind: u32, value: *mut c_int) -> Status {
    guarded(|| {
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        let v = match kind {
            0 => 12,
            1 => 9,
            2 => 0,
            _ => return Err(INVALID_VALUE),
        };
        // SAFETY: a writable int.
        unsafe { *value = v };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetStream_v2(handle: u64, stream: u64) -> Status {
    guarded(|| {
        let h = handles().get(handle).ok_or(NOT_INITIALIZED)?;
        if stream > crate::api::STREAM_PER_THREAD {
            let s = context::driver()
                .ok()
                .and_then(|d| d.streams.get(stream))
                .ok_or(INVALID_VALUE)?;
            if s.ctx.handle != h.ctx {
                return Err(INVALID_VALUE);
            }
        }
        *h.stream.lock().unwrap_or_else(|e| e.into_inner()) = stream;
        // "this function unconditionally resets the cuBLAS library workspace back to the
        // default workspace pool" (cublasSetStream).
        *h.workspace.lock().unwrap_or_else(|e| e.into_inner()) = (h.own_workspace, WORKSPACE);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetStream_v2(handle: u64, stream: *mut u64) -> Status {
    guarded(|| {
        let h = handles().get(handle).ok_or(NOT_INITIALIZED)?;
        if stream.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: a writable cudaStream_t.
        unsafe { *stream = *h.stream.lock().unwrap_or_else(|e| e.into_inner()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetMathMode(handle: u64, mode: u32) -> Status {
    guarded(|| {
        let h = handles().get(handle).ok_or(NOT_INITIALIZED)?;
        *h.math.lock().unwrap_or_else(|e| e.into_inner()) = mode;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetMathMode(handle: u64, mode: *mut u32) -> Status {
    guarded(|| {
        let h = handles().get(handle).ok_or(NOT_INITIALIZED)?;
        if mode.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: a writable cublasMath_t.
        unsafe { *mode = *h.math.lock().unwrap_or_else(|e| e.into_inner()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetWorkspace_v2(
    handle: u64,
    ws: *mut c_void,
    size: usize,
) -> Status {
    guarded(|| {
        let h = handles().get(handle).ok_or(NOT_INITIALIZED)?;
        if size > 0 {
            let ok = memory()
                .ok()
                .and_then(|m| m.find(ws as u64))
                .is_some_and(|a| a.contains(ws as u64, size as u64));
            if !ok || !(ws as u64).is_multiple_of(256) {
                return Err(INVALID_VALUE);
            }
        }
        let base = if size == 0 { 0 } else { ws as u64 };
        *h.workspace.lock().unwrap_or_else(|e| e.into_inner()) = (base, size as u64);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetStatusName(status: Status) -> *const c_char {
    let s: &'static str = match status {
        0 => "CUBLAS_STATUS_SUCCESS\0",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED\0",
        3 => "CUBLAS_STATUS_ALLOC_FAILED\0",
        7 => "CUBLAS_STATUS_INVALID_VALUE\0",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH\0",
        11 => "CUBLAS_STATUS_MAPPING_ERROR\0",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED\0",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR\0",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED\0",
        16 => "CUBLAS_STATUS_LICENSE_ERROR\0",
        _ => "CUBLAS_STATUS_UNKNOWN\0",
    };
    s.as_ptr().cast()
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetStatusString(status: Status) -> *const c_char {
    let s: &'static str = match status {
        0 => "success\0",
        1 => "the library was not initialized\0",
        3 => "the resource allocation failed\0",
        7 => "an invalid numeric value was used as an argument\0",
        13 => "the GPU program failed to execute\0",
        14 => "an internal operation failed\0",
        15 => "the functionality requested is not supported\0",
        _ => "unknown error\0",
    };
    s.as_ptr().cast()
}

mod compute;
mod gemm;

pub use gemm::{
    cublasDgemmStridedBatched, cublasDgemm_v2, cublasGemmEx, cublasGemmStridedBatchedEx,
    cublasSgemmStridedBatched, cublasSgemm_v2,
};
