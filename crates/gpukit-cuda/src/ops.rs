//! The built-in ops that remain the backend's: [`op`] runs gemm through cuBLAS
//! ([`crate::blas`]). (Every other op is a gpukit-core kernel.)

use gpukit_core::DType;
use gpukit_core::{BufAt, Error, Gemm, Op, Result};

use crate::backend::{CudaBackend, CudaStream};
use crate::blas;

/// One op's target: the backend, the stream and the element type.
#[derive(Clone, Copy)]
struct Launcher<'a> {
    b: &'a CudaBackend,
    s: &'a CudaStream,
    dtype: DType,
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
    let l = Launcher { b, s, dtype };
    // SAFETY: every family function's contract is `Backend::op`'s for the op's ranges, which
    // this function's caller holds.
    unsafe {
        match *op {
            Op::Gemm { g, a, b: bm, c } => gemm(l, &g, a, bm, c),
        }
    }
}

/// Each product of the batch through cuBLAS, one call per matrix on the stream.
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::op`] for the op's ranges.
unsafe fn gemm(
    l: Launcher<'_>,
    g: &Gemm<f64>,
    a: BufAt<'_, CudaBackend>,
    b: BufAt<'_, CudaBackend>,
    c: BufAt<'_, CudaBackend>,
) -> Result<()> {
    let size = l.dtype.size();
    // The offset of matrix `i` of an operand whose matrices are `stride` elements apart.
    let nth = |m: BufAt<'_, CudaBackend>, i: usize, stride: usize| m.offset + i * stride * size;
    for i in 0..g.batch {
        let ma = BufAt {
            offset: nth(a, i, g.stride_a),
            ..a
        };
        let mb = BufAt {
            offset: nth(b, i, g.stride_b),
            ..b
        };
        let mc = BufAt {
            offset: nth(c, i, g.stride_c),
            ..c
        };
        // SAFETY: matrix `i` of each operand lies inside the batch's ranges, which meet this
        // function's contract (gpukit-core checked the spans of the strides).
        unsafe { blas::gemm(l.b, l.s, l.dtype, g, ma, mb, mc)? };
    }
    Ok(())
}
