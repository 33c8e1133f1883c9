//! The emulated cuBLAS's gemm entry points (`cublasSgemm`, `cublasDgemm`, `cublasGemmEx` and
//! their strided-batched forms): arguments checked as cuBLAS checks them, then the product
//! queued on the handle's stream.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use super::compute::{run_gemm, Gemm, Ty};
use super::*;

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
    // SAFETY: forwarded; one product, no strides.
    unsafe {
        sgemm_strided(
            "cublasSgemm",
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            0,
            b,
            ldb,
            0,
            beta,
            c,
            ldc,
            0,
            1,
        )
    }
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
    // SAFETY: forwarded; one product, no strides.
    unsafe {
        dgemm_strided(
            "cublasDgemm",
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            0,
            b,
            ldb,
            0,
            beta,
            c,
            ldc,
            0,
            1,
        )
    }
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
    // SAFETY: forwarded; one product, no strides.
    unsafe {
        gemm_ex_strided(
            "cublasGemmEx",
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            a_type,
            lda,
            0,
            b,
            b_type,
            ldb,
            0,
            beta,
            c,
            c_type,
            ldc,
            0,
            1,
            compute,
            _algo,
        )
    }
}

/// `cublasSgemmStridedBatched`, and its single form (batch 1, no strides) queued as `name`.
unsafe fn sgemm_strided(
    name: &str,
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
            name,
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
    // SAFETY: forwarded.
    unsafe {
        sgemm_strided(
            "cublasSgemmStridedBatched",
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            sa,
            b,
            ldb,
            sb,
            beta,
            c,
            ldc,
            sc,
            batch,
        )
    }
}

/// `cublasDgemmStridedBatched`, and its single form (batch 1, no strides) queued as `name`.
unsafe fn dgemm_strided(
    name: &str,
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
            name,
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
    // SAFETY: forwarded.
    unsafe {
        dgemm_strided(
            "cublasDgemmStridedBatched",
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            sa,
            b,
            ldb,
            sb,
            beta,
            c,
            ldc,
            sc,
            batch,
        )
    }
}

/// `cublasGemmStridedBatchedEx`, and its single form (batch 1, no strides) queued as `name`.
unsafe fn gemm_ex_strided(
    name: &str,
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
            name,
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
    // SAFETY: forwarded.
    unsafe {
        gemm_ex_strided(
            "cublasGemmStridedBatchedEx",
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            a_type,
            lda,
            sa,
            b,
            b_type,
            ldb,
            sb,
            beta,
            c,
            c_type,
            ldc,
            sc,
            batch,
            compute,
            _algo,
        )
    }
}
