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

/// An element type of gemm's matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    F32,
    F64,
    F16,
    BF16,
}

impl Ty {
    fn from_cuda(t: u32) -> Option<Ty> {
        Some(match t {
            0 => Ty::F32,
            1 => Ty::F64,
            2 => Ty::F16,
            14 => Ty::BF16,
            _ => return None,
        })
    }
    fn size(self) -> u64 {
        match self {
            Ty::F64 => 8,
            Ty::F32 => 4,
            Ty::F16 | Ty::BF16 => 2,
        }
    }
}

/// One gemm (column-major), its matrices as device addresses.
#[derive(Debug, Clone, Copy)]
struct Gemm {
    ta: bool,
    tb: bool,
    m: u64,
    n: u64,
    k: u64,
    alpha: f64,
    beta: f64,
    a: u64,
    lda: u64,
    b: u64,
    ldb: u64,
    c: u64,
    ldc: u64,
    ab: Ty,
    c_ty: Ty,
    batch: u64,
    stride: [u64; 3],
}

/// Bytes a column-major `rows x cols` matrix with leading dimension `ld` spans.
fn span(rows: u64, cols: u64, ld: u64, size: u64) -> u64 {
    if rows == 0 || cols == 0 {
        0
    } else {
        ((cols - 1) * ld + rows) * size
    }
}

fn load(ty: Ty, p: u64, i: u64) -> f64 {
    // SAFETY: callers check that element `i` lies in a live allocation (its span).
    unsafe {
        match ty {
            Ty::F32 => f64::from(*(p as *const f32).add(i as usize)),
            Ty::F64 => *(p as *const f64).add(i as usize),
            Ty::F16 => f64::from(half::f16::from_bits(*(p as *const u16).add(i as usize)).to_f32()),
            Ty::BF16 => {
                f64::from(half::bf16::from_bits(*(p as *const u16).add(i as usize)).to_f32())
            }
        }
    }
}

fn store(ty: Ty, p: u64, i: u64, v: f64) {
    // SAFETY: as in `load`.
    unsafe {
        match ty {
            Ty::F32 => *(p as *mut f32).add(i as usize) = v as f32,
            Ty::F64 => *(p as *mut f64).add(i as usize) = v,
            Ty::F16 => *(p as *mut u16).add(i as usize) = half::f16::from_f32(v as f32).to_bits(),
            Ty::BF16 => *(p as *mut u16).add(i as usize) = half::bf16::from_f32(v as f32).to_bits(),
        }
    }
}

fn run_gemm(exec: &Exec<'_>, g: &Gemm, workspace: (u64, u64)) -> Result<Vec<Touch>, Fault> {
    let (ra, ca) = if g.ta { (g.k, g.m) } else { (g.m, g.k) };
    let (rb, cb) = if g.tb { (g.n, g.k) } else { (g.k, g.n) };
    let mut touches = Vec::new();
    if workspace.1 > 0 {
        touches.push(exec.device(workspace.0, workspace.1.min(WORKSPACE_TOUCHED), Kind::Write)?);
    }
    for batch in 0..g.batch {
        let a = g.a + batch * g.stride[0] * g.ab.size();
        let b = g.b + batch * g.stride[1] * g.ab.size();
        let c = g.c + batch * g.stride[2] * g.c_ty.size();
        let sa = span(ra, ca, g.lda, g.ab.size());
        let sb = span(rb, cb, g.ldb, g.ab.size());
        let sc = span(g.m, g.n, g.ldc, g.c_ty.size());
        if sa > 0 {
            touches.push(exec.device(a, sa, Kind::Read)?);
        }
        if sb > 0 {
            touches.push(exec.device(b, sb, Kind::Read)?);
        }
        if sc == 0 {
            continue;
        }
        if g.beta != 0.0 {
            touches.push(exec.device(c, sc, Kind::Read)?);
        }
        touches.push(exec.device(c, sc, Kind::Write)?);
        let mem = memory().map_err(|code| Fault {
            code,
            message: String::new(),
        })?;
        let _live = mem.read();
        let mm = |p: u64, rows: u64, cols: u64, ld: u64| -> Vec<f64> {
            let mut out = vec![0.0; (rows * cols) as usize];
            for j in 0..cols {
                for i in 0..rows {
                    out[(i * cols + j) as usize] = load(g.ab, p, i + j * ld);
                }
            }
            out
        };
        // Row-major copies of op(A) (m x k) and op(B) (k x n).
        let a_rm = mm(a, ra, ca, g.lda);
        let b_rm = mm(b, rb, cb, g.ldb);
        let (sar, sac) = if g.ta {
            (1, g.m as isize)
        } else {
            (g.k as isize, 1)
        };
        let (sbr, sbc) = if g.tb {
            (1, g.k as isize)
        } else {
            (g.n as isize, 1)
        };
        let mut out = vec![0.0f64; (g.m * g.n) as usize];
        let f32_compute = g.c_ty != Ty::F64;
        if f32_compute {
            let a32: Vec<f32> = a_rm.iter().map(|&v| v as f32).collect();
            let b32: Vec<f32> = b_rm.iter().map(|&v| v as f32).collect();
            let mut o32 = vec![0.0f32; out.len()];
            // SAFETY: the slices hold the m x k, k x n and m x n matrices at these strides.
            unsafe {
                matrixmultiply::sgemm(
                    g.m as usize,
                    g.k as usize,
                    g.n as usize,
                    1.0,
                    a32.as_ptr(),
                    sar,
                    sac,
                    b32.as_ptr(),
                    sbr,
                    sbc,
                    0.0,
                    o32.as_mut_ptr(),
                    g.n as isize,
                    1,
                );
            }
            out.iter_mut().zip(o32).for_each(|(o, v)| *o = f64::from(v));
        } else {
            // SAFETY: as above.
            unsafe {
                matrixmultiply::dgemm(
                    g.m as usize,
                    g.k as usize,
                    g.n as usize,
                    1.0,
                    a_rm.as_ptr(),
                    sar,
                    sac,
                    b_rm.as_ptr(),
                    sbr,
                    sbc,
                    0.0,
                    out.as_mut_ptr(),
                    g.n as isize,
                    1,
                );
            }
        }
        for j in 0..g.n {
            for i in 0..g.m {
                let prod = out[(i * g.n + j) as usize];
                let at = i + j * g.ldc;
                let v = if f32_compute {
                    let mut r = (g.alpha as f32) * prod as f32;
                    if g.beta != 0.0 {
                        r += (g.beta as f32) * load(g.c_ty, c, at) as f32;
                    }
                    f64::from(r)
                } else {
                    let mut r = g.alpha * prod;
                    if g.beta != 0.0 {
                        r += g.beta * load(g.c_ty, c, at);
                    }
                    r
                };
                store(g.c_ty, c, at, v);
            }
        }
    }
    Ok(touches)
}

/// Queues `g` on the handle's stream.
fn enqueue(handle: u64, g: Gemm, name: &str) -> Result<(), Status> {
    let h = handles().get(handle).ok_or(NOT_INITIALIZED)?;
    let (ra, _) = if g.ta { (g.k, g.m) } else { (g.m, g.k) };
    let (rb, _) = if g.tb { (g.n, g.k) } else { (g.k, g.n) };
    if g.lda < ra.max(1) || g.ldb < rb.max(1) || g.ldc < g.m.max(1) {
        return Err(INVALID_VALUE);
    }
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    let stream_handle = *h.stream.lock().unwrap_or_else(|e| e.into_inner());
    let current = context::current_handle();
    // The handle's context must be current for the default stream to be its.
    if stream_handle <= crate::api::STREAM_PER_THREAD && current != Some(h.ctx) {
        return Err(EXECUTION_FAILED);
    }
    let s = crate::api::stream(stream_handle).map_err(|_| EXECUTION_FAILED)?;
    let workspace = *h.workspace.lock().unwrap_or_else(|e| e.into_inner());
    let call: Call = Arc::new(move |exec| run_gemm(exec, &g, workspace));
    let what: Arc<str> = Arc::from(format!(
        "{name} ({}x{}x{}) on stream 0x{:x}",
        g.m, g.n, g.k, s.handle
    ));
    s.enqueue(Work::Call(call), what, None)
        .map(|_| ())
        .map_err(|_| EXECUTION_FAILED)
}

fn dims(m: c_int, n: c_int, k: c_int) -> Result<(u64, u64, u64), Status> {
    if m < 0 || n < 0 || k < 0 {
        return Err(INVALID_VALUE);
    }
    Ok((m as u64, n as u64, k as u64))
}

fn op(t: u32) -> Result<bool, Status> {
    match t {
        0 => Ok(false),
        1 | 2 => Ok(true),
        _ => Err(INVALID_VALUE),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cublasSgemm_v2(
    handle: u64,
    ta: u32,
    tb: u32,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> Status {
    guarded(|| {
        let (m, n, k) = dims(m, n, k)?;
        if alpha.is_null() || beta.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: host scalars (host pointer mode).
        let (alpha, beta) = unsafe { (f64::from(*alpha), f64::from(*beta)) };
        enqueue(
            handle,
            Gemm {
                ta: op(ta)?,
                tb: op(tb)?,
                m,
                n,
                k,
                alpha,
                beta,
                a: a as u64,
                lda: lda.max(0) as u64,
                b: b as u64,
                ldb: ldb.max(0) as u64,
                c: c as u64,
                ldc: ldc.max(0) as u64,
                ab: Ty::F32,
                c_ty: Ty::F32,
                batch: 1,
                stride: [0; 3],
            },
            "cublasSgemm",
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasDgemm_v2(
    handle: u64,
    ta: u32,
    tb: u32,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    b: *const f64,
    ldb: c_int,
    beta: *const f64,
    c: *mut f64,
    ldc: c_int,
) -> Status {
    guarded(|| {
        let (m, n, k) = dims(m, n, k)?;
        if alpha.is_null() || beta.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: host scalars.
        let (alpha, beta) = unsafe { (*alpha, *beta) };
        enqueue(
            handle,
            Gemm {
                ta: op(ta)?,
                tb: op(tb)?,
                m,
                n,
                k,
                alpha,
                beta,
                a: a as u64,
                lda: lda.max(0) as u64,
                b: b as u64,
                ldb: ldb.max(0) as u64,
                c: c as u64,
                ldc: ldc.max(0) as u64,
                ab: Ty::F64,
                c_ty: Ty::F64,
                batch: 1,
                stride: [0; 3],
            },
            "cublasDgemm",
        )
    })
}

/// The scalars of `cublasGemmEx`: f64 for a 64-bit compute type, f32 otherwise.
unsafe fn scalars(
    compute: u32,
    alpha: *const c_void,
    beta: *const c_void,
) -> Result<(f64, f64), Status> {
    if alpha.is_null() || beta.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: host scalars of the compute type's width (the API's contract).
    unsafe {
        match compute {
            70 | 71 => Ok((*alpha.cast::<f64>(), *beta.cast::<f64>())),
            64 | 65 => Err(NOT_SUPPORTED),
            _ => Ok((
                f64::from(*alpha.cast::<f32>()),
                f64::from(*beta.cast::<f32>()),
            )),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cublasGemmEx(
    handle: u64,
    ta: u32,
    tb: u32,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: u32,
    lda: c_int,
    b: *const c_void,
    b_type: u32,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    c_type: u32,
    ldc: c_int,
    compute: u32,
    _algo: c_int,
) -> Status {
    guarded(|| {
        let (m, n, k) = dims(m, n, k)?;
        let ab = Ty::from_cuda(a_type).ok_or(NOT_SUPPORTED)?;
        if Ty::from_cuda(b_type) != Some(ab) {
            return Err(NOT_SUPPORTED);
        }
        let c_ty = Ty::from_cuda(c_type).ok_or(NOT_SUPPORTED)?;
        // SAFETY: host scalars.
        let (alpha, beta) = unsafe { scalars(compute, alpha, beta) }?;
        enqueue(
            handle,
            Gemm {
                ta: op(ta)?,
                tb: op(tb)?,
                m,
                n,
                k,
                alpha,
                beta,
                a: a as u64,
                lda: lda.max(0) as u64,
                b: b as u64,
                ldb: ldb.max(0) as u64,
                c: c as u64,
                ldc: ldc.max(0) as u64,
                ab,
                c_ty,
                batch: 1,
                stride: [0; 3],
            },
            "cublasGemmEx",
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSgemmStridedBatched(
    handle: u64,
    ta: u32,
    tb: u32,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    sa: i64,
    b: *const f32,
    ldb: c_int,
    sb: i64,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
    sc: i64,
    batch: c_int,
) -> Status {
    guarded(|| {
        let (m, n, k) = dims(m, n, k)?;
        if alpha.is_null() || beta.is_null() || batch < 0 || sa < 0 || sb < 0 || sc < 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: host scalars.
        let (alpha, beta) = unsafe { (f64::from(*alpha), f64::from(*beta)) };
        enqueue(
            handle,
            Gemm {
                ta: op(ta)?,
                tb: op(tb)?,
                m,
                n,
                k,
                alpha,
                beta,
                a: a as u64,
                lda: lda.max(0) as u64,
                b: b as u64,
                ldb: ldb.max(0) as u64,
                c: c as u64,
                ldc: ldc.max(0) as u64,
                ab: Ty::F32,
                c_ty: Ty::F32,
                batch: batch as u64,
                stride: [sa as u64, sb as u64, sc as u64],
            },
            "cublasSgemmStridedBatched",
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasDgemmStridedBatched(
    handle: u64,
    ta: u32,
    tb: u32,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    sa: i64,
    b: *const f64,
    ldb: c_int,
    sb: i64,
    beta: *const f64,
    c: *mut f64,
    ldc: c_int,
    sc: i64,
    batch: c_int,
) -> Status {
    guarded(|| {
        let (m, n, k) = dims(m, n, k)?;
        if alpha.is_null() || beta.is_null() || batch < 0 || sa < 0 || sb < 0 || sc < 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: host scalars.
        let (alpha, beta) = unsafe { (*alpha, *beta) };
        enqueue(
            handle,
            Gemm {
                ta: op(ta)?,
                tb: op(tb)?,
                m,
                n,
                k,
                alpha,
                beta,
                a: a as u64,
                lda: lda.max(0) as u64,
                b: b as u64,
                ldb: ldb.max(0) as u64,
                c: c as u64,
                ldc: ldc.max(0) as u64,
                ab: Ty::F64,
                c_ty: Ty::F64,
                batch: batch as u64,
                stride: [sa as u64, sb as u64, sc as u64],
            },
            "cublasDgemmStridedBatched",
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGemmStridedBatchedEx(
    handle: u64,
    ta: u32,
    tb: u32,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: u32,
    lda: c_int,
    sa: i64,
    b: *const c_void,
    b_type: u32,
    ldb: c_int,
    sb: i64,
    beta: *const c_void,
    c: *mut c_void,
    c_type: u32,
    ldc: c_int,
    sc: i64,
    batch: c_int,
    compute: u32,
    _algo: c_int,
) -> Status {
    guarded(|| {
        let (m, n, k) = dims(m, n, k)?;
        if batch < 0 || sa < 0 || sb < 0 || sc < 0 {
            return Err(INVALID_VALUE);
        }
        let ab = Ty::from_cuda(a_type).ok_or(NOT_SUPPORTED)?;
        if Ty::from_cuda(b_type) != Some(ab) {
            return Err(NOT_SUPPORTED);
        }
        let c_ty = Ty::from_cuda(c_type).ok_or(NOT_SUPPORTED)?;
        // SAFETY: host scalars.
        let (alpha, beta) = unsafe { scalars(compute, alpha, beta) }?;
        enqueue(
            handle,
            Gemm {
                ta: op(ta)?,
                tb: op(tb)?,
                m,
                n,
                k,
                alpha,
                beta,
                a: a as u64,
                lda: lda.max(0) as u64,
                b: b as u64,
                ldb: ldb.max(0) as u64,
                c: c as u64,
                ldc: ldc.max(0) as u64,
                ab,
                c_ty,
                batch: batch as u64,
                stride: [sa as u64, sb as u64, sc as u64],
            },
            "cublasGemmStridedBatchedEx",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_the_last_column() {
        assert_eq!(span(3, 2, 5, 4), (5 + 3) * 4);
        assert_eq!(span(0, 2, 5, 4), 0);
    }
}
