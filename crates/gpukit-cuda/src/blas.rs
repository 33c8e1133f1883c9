//! gemm through cuBLAS: one handle per stream, created and bound to it on the stream's
//! first gemm, and gpukit-core's row-major product as cuBLAS's column-major call
//! ([`BlasCall`], whose arguments a unit test runs through a reference BLAS). A gemm queued
//! while its stream captures uses the capture's own workspace (`cublasSetWorkspace`), which
//! the graph keeps; eager gemms use the handle's default one.
//!
//! cuBLAS is loaded on the first gemm (`gpukit_cuda_sys::cublas`); without it, gemm is
//! `Unavailable` and every other op works. See the
//! [cuBLAS documentation](https://docs.nvidia.com/cuda/cublas/) for the calls.

use std::ffi::c_void;

use gpukit_core::{BufAt, DType, Error, Gemm, Result};
use gpukit_cuda_sys::cublas::CublasLib;
use gpukit_cuda_sys::ffi::cublas::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t,
    cublasStatus_t, cudaDataType,
};

use crate::backend::{CudaBackend, CudaStream};
use crate::device::{lock, Raw};
use crate::error::CudaError;

/// A pointer to a host scalar, as cuBLAS's `void *` alpha and beta.
fn param<V>(v: &V) -> *const c_void {
    (v as *const V).cast()
}

fn blas_lib(b: &CudaBackend) -> Result<&'static CublasLib> {
    let major = gpukit_cuda_sys::probe()
        .ok()
        .map(|p| p.driver_version_pair().0);
    gpukit_cuda_sys::cublas::cublas(major).map_err(|e| Error::Unavailable {
        backend: "cuda",
        reason: format!("gemm needs cuBLAS on CUDA device {}: {e}", b.dev.ordinal),
    })
}

fn blas_check(lib: &CublasLib, call: &'static str, st: cublasStatus_t) -> Result<()> {
    if st == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    let (name, message) = lib.status_parts(st);
    Err(CudaError::Cublas {
        call,
        status: st.0,
        name,
        message,
    }
    .into())
}

/// The stream's cuBLAS handle, created and bound to the stream on first use.
fn blas_handle(b: &CudaBackend, lib: &CublasLib, s: &CudaStream) -> Result<cublasHandle_t> {
    let mut slot = lock(&s.blas);
    if let Some(h) = *slot {
        return Ok(h.0);
    }
    let mut h: cublasHandle_t = std::ptr::null_mut();
    // SAFETY: the context is current (callers bind); live out-pointer.
    blas_check(lib, "cublasCreate", unsafe {
        lib.api.cublasCreate_v2(&mut h)
    })?;
    // SAFETY: a live handle and a live stream of the current context; cuBLAS's stream type
    // is the driver's `CUstream_st *`.
    let st = unsafe { lib.api.cublasSetStream_v2(h, s.raw.0.cast()) };
    // Default math (no TF32 unless NVIDIA_TF32_OVERRIDE asks), and no reductions in 16 bits:
    // with split-K, cuBLAS may otherwise sum f16/bf16 partial products in the output type,
    // and results would drift from the f32-accumulated ones the CPU backend gives.
    let mode = cublasMath_t(
        cublasMath_t::CUBLAS_DEFAULT_MATH.0
            | cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.0,
    );
    let st = blas_check(lib, "cublasSetStream", st).and_then(|()| {
        // SAFETY: a live handle; the mode is a valid combination of cublasMath_t flags.
        let r = unsafe { lib.api.cublasSetMathMode(h, mode) };
        blas_check(lib, "cublasSetMathMode", r)
    });
    if let Err(e) = st {
        // SAFETY: the handle was just created and has no work.
        unsafe { lib.api.cublasDestroy_v2(h) };
        return Err(e);
    }
    *slot = Some(Raw(h));
    let _ = b;
    Ok(h)
}

/// Points the stream's handle at the workspace its next gemm must use: while the stream
/// captures, the capture's own (which the graph keeps, so that replays never share the
/// handle's default workspace with the stream's later gemms, nor outlive it); otherwise
/// back at cuBLAS's default pool, which `cublasSetStream` restores ("this function
/// unconditionally resets the cuBLAS library workspace back to the default workspace
/// pool").
fn bind_workspace(lib: &CublasLib, s: &CudaStream, h: cublasHandle_t) -> Result<()> {
    let want = s.scratch.for_gemm();
    let mut current = lock(&s.blas_workspace);
    let target = want.map_or(0, |(p, _)| p);
    if *current == target {
        return Ok(());
    }
    match want {
        Some((p, bytes)) => {
            // SAFETY: a live handle; `p` is `bytes` of device memory of its context
            // (cudaMalloc alignment), which the graph made from this capture owns and frees
            // only after its last launch.
            let st = unsafe { lib.set_workspace(h, p as *mut c_void, bytes) }.map_err(|e| {
                Error::Unavailable {
                    backend: "cuda",
                    reason: format!("gemm in a stream capture needs {e}"),
                }
            })?;
            blas_check(lib, "cublasSetWorkspace", st)?;
        }
        None => {
            // SAFETY: a live handle and the live stream it is bound to.
            let st = unsafe { lib.api.cublasSetStream_v2(h, s.raw.0.cast()) };
            blas_check(lib, "cublasSetStream", st)?;
        }
    }
    *current = target;
    Ok(())
}

/// Destroys a stream's cuBLAS handle (its stream is synchronised).
pub(crate) fn destroy_blas(h: Raw<cublasHandle_t>) {
    if let Ok(lib) = gpukit_cuda_sys::cublas::cublas(None) {
        // SAFETY: a handle created by `blas_handle`, destroyed once, its stream idle.
        unsafe { lib.api.cublasDestroy_v2(h.0) };
    }
}

/// Which stored matrix fills one of cuBLAS's operand slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    /// gpukit-core's `A`.
    A,
    /// gpukit-core's `B`.
    B,
}

/// Every argument of the cuBLAS gemm call but the handle, the scalars and the element type:
/// the one description that `gemm` passes and the unit test runs through a reference BLAS,
/// so the two cannot drift apart.
///
/// cuBLAS is column-major and a row-major `r x c` matrix is a column-major `c x r` one, so
/// gpukit-core's row-major `C = op(A) op(B)` is cuBLAS's `C^T = op(B)^T op(A)^T`: B fills the
/// first slot, A the second, and cuBLAS's `m x n` result is gpukit-core's `n x m` C^T.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlasCall {
    /// The matrix in cuBLAS's first slot (its `A`), its operation and leading dimension.
    first: Operand,
    op_first: cublasOperation_t,
    ld_first: i32,
    /// The matrix in cuBLAS's second slot (its `B`), its operation and leading dimension.
    second: Operand,
    op_second: cublasOperation_t,
    ld_second: i32,
    /// cuBLAS's `m`, `n` and `k`: its column-major C is `m x n`, the inner dimension `k`.
    m: i32,
    n: i32,
    k: i32,
    /// C's leading dimension.
    ldc: i32,
}

impl BlasCall {
    /// The call for gpukit-core's row-major gemm of `op(A)` (`m x k`) and `op(B)` (`k x n`).
    ///
    /// Row-major `B` (`k x n`, or `n x k` when transposed) read column-major is `B^T` with
    /// leading dimension `n` (or `B` itself with leading dimension `k`, which the call
    /// transposes); the same for `A` with `m` and `k`.
    fn for_row_major(trans_a: bool, trans_b: bool, m: i32, n: i32, k: i32) -> BlasCall {
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        BlasCall {
            first: Operand::B,
            op_first: op(trans_b),
            ld_first: if trans_b { k } else { n },
            second: Operand::A,
            op_second: op(trans_a),
            ld_second: if trans_a { m } else { k },
            m: n,
            n: m,
            k,
            ldc: n,
        }
    }

    /// The operands in cuBLAS's order, given gpukit-core's `a` and `b`.
    fn operands<P: Copy>(&self, a: P, b: P) -> (P, P) {
        let pick = |o: Operand| match o {
            Operand::A => a,
            Operand::B => b,
        };
        (pick(self.first), pick(self.second))
    }
}

/// Each product of the batch `g` describes through cuBLAS, one call per matrix on the
/// stream (the strided-batched cuBLAS entry points are not among the bound functions yet).
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::gemm`].
pub(crate) unsafe fn gemm_batch(
    b: &CudaBackend,
    s: &CudaStream,
    dtype: DType,
    g: &Gemm<f64>,
    [a, bm, c]: [BufAt<'_, CudaBackend>; 3],
) -> Result<()> {
    let size = dtype.size();
    // The offset of matrix `i` of an operand whose matrices are `stride` elements apart.
    let nth = |m: &BufAt<'_, CudaBackend>, i: usize, stride: usize| m.offset + i * stride * size;
    for i in 0..g.batch {
        let ma = BufAt {
            offset: nth(&a, i, g.stride_a),
            ..a
        };
        let mb = BufAt {
            offset: nth(&bm, i, g.stride_b),
            ..bm
        };
        let mc = BufAt {
            offset: nth(&c, i, g.stride_c),
            ..c
        };
        // SAFETY: matrix `i` of each operand lies inside the batch's ranges, which meet this
        // function's contract (gpukit-core checked the spans of the strides).
        unsafe { gemm(b, s, dtype, g, ma, mb, mc)? };
    }
    Ok(())
}

/// `C = alpha op(A) op(B) + beta C`, row-major, through the column-major cuBLAS call that
/// [`BlasCall`] describes: one product of a gemm.
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::gemm`] for one matrix of each operand.
unsafe fn gemm(
    b: &CudaBackend,
    s: &CudaStream,
    dtype: DType,
    g: &Gemm<f64>,
    a: BufAt<'_, CudaBackend>,
    bm: BufAt<'_, CudaBackend>,
    c: BufAt<'_, CudaBackend>,
) -> Result<()> {
    b.dev.bind()?;
    let lib = blas_lib(b)?;
    let h = blas_handle(b, lib, s)?;
    bind_workspace(lib, s, h)?;
    let int = |v: usize| -> Result<i32> {
        i32::try_from(v).map_err(|_| Error::Backend {
            backend: "cuda",
            call: "cublasGemm",
            message: format!("dimension {v} exceeds cuBLAS's 32-bit limit"),
        })
    };
    let call = BlasCall::for_row_major(g.trans_a, g.trans_b, int(g.m)?, int(g.n)?, int(g.k)?);
    let (first, second) = call.operands(a.buf.at(a.offset), bm.buf.at(bm.offset));
    let cp = c.buf.at(c.offset);
    // SAFETY: (all three calls) a live handle bound to `s`; device pointers to ranges gpukit-core
    // checked to hold op(A) m x k, op(B) k x n and C m x n (all non-zero), which `call` lays
    // out as cuBLAS's column-major operands (its unit test runs these very arguments); alpha
    // and beta are host scalars of the type the call reads.
    let st = unsafe {
        match dtype {
            DType::F32 => {
                let (alpha, beta) = (g.alpha as f32, g.beta as f32);
                lib.api.cublasSgemm_v2(
                    h,
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    &alpha,
                    first as *const f32,
                    call.ld_first,
                    second as *const f32,
                    call.ld_second,
                    &beta,
                    cp as *mut f32,
                    call.ldc,
                )
            }
            DType::F64 => {
                let (alpha, beta) = (g.alpha, g.beta);
                lib.api.cublasDgemm_v2(
                    h,
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    &alpha,
                    first as *const f64,
                    call.ld_first,
                    second as *const f64,
                    call.ld_second,
                    &beta,
                    cp as *mut f64,
                    call.ldc,
                )
            }
            DType::F16 | DType::BF16 => {
                let ty = if dtype == DType::F16 {
                    cudaDataType::CUDA_R_16F
                } else {
                    cudaDataType::CUDA_R_16BF
                };
                // The compute type is f32; 16-bit alpha and beta are exact in it.
                let (alpha, beta) = (g.alpha as f32, g.beta as f32);
                lib.api.cublasGemmEx(
                    h,
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    param(&alpha),
                    first as *const c_void,
                    ty,
                    call.ld_first,
                    second as *const c_void,
                    ty,
                    call.ld_second,
                    param(&beta),
                    cp as *mut c_void,
                    ty,
                    call.ldc,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            other => {
                return Err(Error::Backend {
                    backend: "cuda",
                    call: "cublasGemm",
                    message: format!("no gemm for {other}"),
                })
            }
        }
    };
    blas_check(lib, "cublasGemm", st)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BLAS's column-major `C = op(A) op(B)` as cuBLAS defines it, with its argument checks
    /// (`CUBLAS_STATUS_INVALID_VALUE` becomes a panic).
    #[allow(clippy::too_many_arguments)]
    fn blas_gemm(
        op_a: cublasOperation_t,
        op_b: cublasOperation_t,
        m: i32,
        n: i32,
        k: i32,
        a: &[f64],
        lda: i32,
        b: &[f64],
        ldb: i32,
        c: &mut [f64],
        ldc: i32,
    ) {
        let transposed = |op: cublasOperation_t| match op {
            cublasOperation_t::CUBLAS_OP_N => false,
            cublasOperation_t::CUBLAS_OP_T => true,
            other => panic!("unexpected operation {other:?}"),
        };
        let (ta, tb) = (transposed(op_a), transposed(op_b));
        let dim = |v: i32| usize::try_from(v).unwrap_or_else(|_| panic!("negative argument {v}"));
        let (m, n, k, lda, ldb, ldc) = (dim(m), dim(n), dim(k), dim(lda), dim(ldb), dim(ldc));
        // The stored operands have `lda`/`ldb` rows: m (k if transposed) for A, k (n) for B.
        assert!(lda >= (if ta { k } else { m }).max(1), "lda {lda}");
        assert!(ldb >= (if tb { n } else { k }).max(1), "ldb {ldb}");
        assert!(ldc >= m.max(1), "ldc {ldc}");
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0.0;
                for l in 0..k {
                    let x = if ta { a[l + i * lda] } else { a[i + l * lda] };
                    let y = if tb { b[j + l * ldb] } else { b[l + j * ldb] };
                    acc += x * y;
                }
                c[i + j * ldc] = acc;
            }
        }
    }

    /// The cuBLAS call `gemm` makes, every argument taken from the same [`BlasCall`], computes
    /// the row-major product gpukit-core defines.
    #[test]
    fn column_major_call_computes_the_row_major_product() {
        for (m, n, k) in [(3usize, 4usize, 5usize), (1, 6, 2), (7, 1, 3), (2, 3, 1)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                // Stored A is m x k (k x m if ta), B is k x n (n x k if tb), row-major.
                let a: Vec<f64> = (0..m * k).map(|i| (i * 7 % 11) as f64 - 5.0).collect();
                let b: Vec<f64> = (0..k * n).map(|i| (i * 5 % 13) as f64 - 6.0).collect();
                let at = |i: usize, l: usize| if ta { a[l * m + i] } else { a[i * k + l] };
                let bt = |l: usize, j: usize| if tb { b[j * k + l] } else { b[l * n + j] };
                let mut want = vec![0.0; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
                    }
                }
                let call = BlasCall::for_row_major(ta, tb, m as i32, n as i32, k as i32);
                let (first, second) = call.operands(&a[..], &b[..]);
                let mut got = vec![f64::NAN; m * n];
                blas_gemm(
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    first,
                    call.ld_first,
                    second,
                    call.ld_second,
                    &mut got,
                    call.ldc,
                );
                assert_eq!(
                    got, want,
                    "{m}x{n}x{k}, trans_a {ta}, trans_b {tb}: {call:?}"
                );
            }
        }
    }
}
