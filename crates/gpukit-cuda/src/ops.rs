//! The built-in ops: one dispatcher from the op table's [`Op`] to launches of the built-in
//! modules ([`crate::builtins`]), and gemm through cuBLAS.

use std::ffi::c_void;

use cudarc::driver::sys;
use gpukit_core::{BufAt, DType, Error, Gemm, Op, ReduceOp, Result, Rhs, Scalar};
use gpukit_cuda_sys::cublas::CublasLib;
use gpukit_cuda_sys::ffi::cublas::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t,
    cublasStatus_t, cudaDataType,
};
use gpukit_cuda_sys::kernels::{Elem, MAX_PARTIALS, REDUCE_BLOCK};

use crate::backend::{CudaBackend, CudaStream};
use crate::device::{lock, Raw};
use crate::error::CudaError;
use crate::source::Entry;

/// Threads per block of the element-wise kernels.
const BLOCK: u32 = 256;
/// Blocks per SM the element-wise grids are capped at (grid-stride loops cover the rest).
const BLOCKS_PER_SM: u32 = 32;

/// The kernel module element type of a dtype.
pub(crate) fn elem(d: DType) -> Elem {
    match d {
        DType::F32 => Elem::F32,
        DType::F64 => Elem::F64,
        DType::F16 => Elem::F16,
        DType::BF16 => Elem::BF16,
        DType::I8 => Elem::I8,
        DType::U8 => Elem::U8,
        DType::I32 => Elem::I32,
        DType::U32 => Elem::U32,
        DType::I64 => Elem::I64,
        DType::U64 => Elem::U64,
    }
}

/// The grid for an element-wise launch over `n` elements.
fn grid_for(b: &CudaBackend, n: usize) -> u32 {
    let cap = b.dev.info.multiprocessors.max(1) * BLOCKS_PER_SM;
    let blocks = n.div_ceil(BLOCK as usize).max(1);
    u32::try_from(blocks).unwrap_or(u32::MAX).min(cap)
}

/// Launches built-in `entry` of `dtype`'s module with the given parameters.
///
/// # Safety
///
/// - `params` point, in order, at values of the types `entry`'s parameters have in the
///   module's source for `dtype`;
/// - the device ranges among them meet the [`gpukit_core::Backend::op`] contract (inside
///   their buffers, ordered, not freed before the launch has run), and the scratch buffer
///   is the one the stream gives reductions queued now (its own, or its capture's).
unsafe fn run(
    b: &CudaBackend,
    stream: &CudaStream,
    dtype: DType,
    entry: Entry,
    grid: u32,
    block: u32,
    params: &mut [*mut c_void],
) -> Result<()> {
    b.dev.bind()?;
    let f = b.dev.builtins.get(&b.dev, elem(dtype))?.get(entry)?;
    // SAFETY: `f` is a kernel of this context whose parameters are, in order, the values the
    // pointers in `params` point to, and every device range among them is valid for the
    // launch (this function's contract).
    let r = unsafe {
        sys::cuLaunchKernel(
            f,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            stream.raw.0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    Ok(b.dev.check("cuLaunchKernel", r)?)
}

/// A pointer to a kernel parameter, as `cuLaunchKernel` wants it.
fn p<V>(v: &V) -> *mut c_void {
    (v as *const V).cast_mut().cast()
}

/// The grid of a kernel that gives each row a block (blocks stride over the rows).
fn row_grid(rows: usize) -> u32 {
    u32::try_from(rows).unwrap_or(u32::MAX).clamp(1, 65_535)
}

/// Blocks of a reduction's first launch.
fn partial_grid(len: usize) -> u32 {
    u32::try_from(len.div_ceil(REDUCE_BLOCK as usize).max(1))
        .unwrap_or(MAX_PARTIALS)
        .min(MAX_PARTIALS)
}

/// A pointer to a scalar operand's bytes, as `cuLaunchKernel` reads a `T` parameter.
fn ps(v: &Scalar) -> *mut c_void {
    v.bytes().as_ptr().cast_mut().cast()
}

/// Runs one op of the table (the contract of [`gpukit_core::Backend::op`]).
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::op`].
pub(crate) unsafe fn op(
    b: &CudaBackend,
    s: &CudaStream,
    dtype: DType,
    op: &Op<'_, CudaBackend>,
) -> Result<()> {
    if op.floats_only() && !dtype.is_float() {
        return Err(Error::Unsupported {
            backend: "cuda",
            what: format!("`{}` on {dtype}", op.name()),
        });
    }
    let ptr = |at: BufAt<'_, CudaBackend>| at.buf.at(at.offset);
    // SAFETY: for every launch below, the parameters follow the entry point's signature in the
    // module's source for `dtype` (source.rs, builtin.cu, kernels.rs), in order and type:
    // device pointers as `CUdeviceptr`, `unsigned long long` as u64, `int` as i32,
    // `unsigned int` as u32, a `T` scalar as the bytes of a `Scalar` of `dtype`; the ranges
    // meet the `Backend::op` contract this function was called under.
    unsafe {
        let launch = |entry, grid, block, params: &mut [*mut c_void]| {
            run(b, s, dtype, entry, grid, block, params)
        };
        match *op {
            Op::Fill { out, len, value } => {
                let (o, n) = (ptr(out), len as u64);
                launch(
                    Entry::Named("fill"),
                    grid_for(b, len),
                    BLOCK,
                    &mut [p(&o), ps(&value), p(&n)],
                )
            }
            Op::Axpy { alpha, x, y, len } => {
                let (xp, yp, n) = (ptr(x), ptr(y), len as u64);
                launch(
                    Entry::Named("axpy"),
                    grid_for(b, len),
                    BLOCK,
                    &mut [ps(&alpha), p(&xp), p(&yp), p(&n)],
                )
            }
            Op::Unary { op, src, out, len } => {
                let (o, n) = (ptr(out), len as u64);
                let i = src.map_or(o, ptr);
                launch(
                    Entry::Unary(op),
                    grid_for(b, len),
                    BLOCK,
                    &mut [p(&i), p(&o), p(&n)],
                )
            }
            Op::Binary {
                op,
                src,
                ref rhs,
                out,
                shape,
            } => {
                let len = shape.rows * shape.cols;
                let (o, n, cols) = (ptr(out), len as u64, shape.cols as u64);
                let i = src.map_or(o, ptr);
                let (v, mode) = match *rhs {
                    Rhs::Scalar(v) => {
                        return launch(
                            Entry::Scalar(op),
                            grid_for(b, len),
                            BLOCK,
                            &mut [p(&i), ps(&v), p(&o), p(&n)],
                        )
                    }
                    Rhs::Array(v) => (ptr(v), 0i32),
                    Rhs::Row(v) => (ptr(v), 1),
                    Rhs::Col(v) => (ptr(v), 2),
                };
                launch(
                    Entry::Binary(op),
                    grid_for(b, len),
                    BLOCK,
                    &mut [p(&i), p(&v), p(&o), p(&n), p(&cols), p(&mode)],
                )
            }
            Op::Clamp {
                lo,
                hi,
                src,
                out,
                len,
            } => {
                let (o, n) = (ptr(out), len as u64);
                let i = src.map_or(o, ptr);
                launch(
                    Entry::Named("clamp_op"),
                    grid_for(b, len),
                    BLOCK,
                    &mut [p(&i), ps(&lo), ps(&hi), p(&o), p(&n)],
                )
            }
            Op::Reduce { op, x, shape, out } => {
                let (xp, o) = (ptr(x), ptr(out));
                let is_max = i32::from(matches!(op, ReduceOp::Max | ReduceOp::ArgMax));
                let (rows, cols) = (shape.rows as u64, shape.cols as u64);
                if shape.rows > 1 {
                    let grid = row_grid(shape.rows);
                    let mut params = [p(&xp), p(&rows), p(&cols), p(&is_max), p(&o)];
                    let mean = i32::from(op == ReduceOp::Mean);
                    let entry = match op {
                        ReduceOp::Sum | ReduceOp::Mean => {
                            params[3] = p(&mean);
                            "row_sum"
                        }
                        ReduceOp::Min | ReduceOp::Max => "row_minmax",
                        ReduceOp::ArgMin | ReduceOp::ArgMax => "row_arg",
                    };
                    return launch(Entry::Named(entry), grid, REDUCE_BLOCK, &mut params);
                }
                let (n, scratch, parts) =
                    (cols, s.scratch.for_reduction(), partial_grid(shape.cols));
                match op {
                    ReduceOp::Sum | ReduceOp::Mean => {
                        let count = if op == ReduceOp::Mean { n } else { 0 };
                        launch(
                            Entry::Named("sum_partial"),
                            parts,
                            REDUCE_BLOCK,
                            &mut [p(&xp), p(&n), p(&scratch)],
                        )?;
                        launch(
                            Entry::Named("sum_final"),
                            1,
                            REDUCE_BLOCK,
                            &mut [p(&scratch), p(&parts), p(&o), p(&count)],
                        )
                    }
                    ReduceOp::Min | ReduceOp::Max => {
                        launch(
                            Entry::Named("minmax_partial"),
                            parts,
                            REDUCE_BLOCK,
                            &mut [p(&xp), p(&n), p(&is_max), p(&scratch)],
                        )?;
                        launch(
                            Entry::Named("minmax_final"),
                            1,
                            REDUCE_BLOCK,
                            &mut [p(&scratch), p(&parts), p(&is_max), p(&o)],
                        )
                    }
                    ReduceOp::ArgMin | ReduceOp::ArgMax => {
                        launch(
                            Entry::Named("arg_partial"),
                            parts,
                            REDUCE_BLOCK,
                            &mut [p(&xp), p(&n), p(&is_max), p(&scratch)],
                        )?;
                        launch(
                            Entry::Named("arg_final"),
                            1,
                            REDUCE_BLOCK,
                            &mut [p(&scratch), p(&parts), p(&is_max), p(&o)],
                        )
                    }
                }
            }
            Op::Dot { x, y, len, out } => {
                let (xp, yp, o, n) = (ptr(x), ptr(y), ptr(out), len as u64);
                let scratch = s.scratch.for_reduction();
                let (parts, count) = (partial_grid(len), 0u64);
                launch(
                    Entry::Named("dot_partial"),
                    parts,
                    REDUCE_BLOCK,
                    &mut [p(&xp), p(&yp), p(&n), p(&scratch)],
                )?;
                launch(
                    Entry::Named("sum_final"),
                    1,
                    REDUCE_BLOCK,
                    &mut [p(&scratch), p(&parts), p(&o), p(&count)],
                )
            }
            Op::Softmax {
                log,
                src,
                out,
                shape,
            } => {
                let o = ptr(out);
                let i = src.map_or(o, ptr);
                let (rows, cols, log) = (shape.rows as u64, shape.cols as u64, i32::from(log));
                launch(
                    Entry::Named("softmax_rows"),
                    row_grid(shape.rows),
                    REDUCE_BLOCK,
                    &mut [p(&i), p(&o), p(&rows), p(&cols), p(&log)],
                )
            }
            Op::CrossEntropy {
                logits,
                labels,
                loss,
                grad,
                shape,
            } => {
                let (x, y, l) = (ptr(logits), ptr(labels), ptr(loss));
                let g: sys::CUdeviceptr = grad.map_or(0, ptr);
                let (rows, cols) = (shape.rows as u64, shape.cols as u64);
                launch(
                    Entry::Named("cross_entropy_rows"),
                    row_grid(shape.rows),
                    REDUCE_BLOCK,
                    &mut [p(&x), p(&y), p(&l), p(&g), p(&rows), p(&cols)],
                )
            }
            Op::Cast { to, src, out, len } => {
                let (i, o, n) = (ptr(src), ptr(out), len as u64);
                launch(
                    Entry::Cast(elem(to)),
                    grid_for(b, len),
                    BLOCK,
                    &mut [p(&i), p(&o), p(&n)],
                )
            }
            Op::Gemm { g, a, b: bm, c } => {
                let size = dtype.size();
                for i in 0..g.batch {
                    let (ma, mb, mc) = (a, bm, c);
                    let (ma, mb, mc) = (
                        BufAt {
                            offset: ma.offset + i * g.stride_a * size,
                            ..ma
                        },
                        BufAt {
                            offset: mb.offset + i * g.stride_b * size,
                            ..mb
                        },
                        BufAt {
                            offset: mc.offset + i * g.stride_c * size,
                            ..mc
                        },
                    );
                    gemm(b, s, dtype, &g, ma, mb, mc)?;
                }
                Ok(())
            }
        }
    }
}

// ----- gemm --------------------------------------------------------------------------

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

/// `C = alpha op(A) op(B) + beta C`, row-major, through the column-major cuBLAS call that
/// [`BlasCall`] describes.
///
/// One product of a gemm (the batch is the caller's loop: the strided-batched cuBLAS entry
/// points are not among the bound functions yet).
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::op`] for one matrix of each operand.
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
                    p(&alpha),
                    first as *const c_void,
                    ty,
                    call.ld_first,
                    second as *const c_void,
                    ty,
                    call.ld_second,
                    p(&beta),
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

    #[test]
    fn reduction_grids_stay_within_the_scratch_buffer() {
        assert_eq!(partial_grid(1), 1);
        assert_eq!(partial_grid(256), 1);
        assert_eq!(partial_grid(257), 2);
        assert_eq!(partial_grid(usize::MAX), MAX_PARTIALS);
    }
}
