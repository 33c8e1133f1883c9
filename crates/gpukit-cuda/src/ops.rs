//! The built-in ops: [`op`] turns the op table's [`Op`] into launches of the built-in
//! modules ([`crate::builtins`]), one function per op family, the `match` only dispatching;
//! gemm goes to cuBLAS ([`crate::blas`]).
//!
//! Each family function is `unsafe` with the contract of [`gpukit_core::Backend::op`] for the
//! op's ranges, and passes its launch the parameters of its entry point's signature in the
//! module's source (`source.rs`, `builtin.cu`) in order and type: device pointers as
//! `CUdeviceptr`, `unsigned long long` as u64, `unsigned int` as u32.

use std::ffi::c_void;

use crate::kernels::Elem;
use cudarc::driver::sys;
use gpukit_core::{BufAt, DType, Error, Gemm, Op, Result};

use crate::backend::{CudaBackend, CudaStream};
use crate::blas;
use crate::driver;
use crate::index;
use crate::source::Entry;

/// Threads per block of the element-wise kernels.
pub(crate) const BLOCK: u32 = 256;
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

/// The launches of one op: the backend, the stream and the element type they all use.
#[derive(Clone, Copy)]
pub(crate) struct Launcher<'a> {
    b: &'a CudaBackend,
    s: &'a CudaStream,
    pub(crate) dtype: DType,
}

impl Launcher<'_> {
    /// Launches built-in `entry` of the element type's module with the given parameters.
    ///
    /// # Safety
    ///
    /// - `params` point, in order, at values of the types `entry`'s parameters have in the
    ///   module's source for the element type;
    /// - the device ranges among them meet the [`gpukit_core::Backend::op`] contract (inside
    ///   their buffers, ordered, not freed before the launch has run), and the scratch
    ///   buffer is the one the stream gives reductions queued now (its own, or its
    ///   capture's).
    pub(crate) unsafe fn launch(
        &self,
        entry: Entry,
        grid: u32,
        block: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let b = self.b;
        b.dev.bind()?;
        let f = b.dev.builtins.get(&b.dev, elem(self.dtype))?.get(entry)?;
        // SAFETY: `f` is a kernel of this context whose parameters are, in order, the values
        // the pointers in `params` point to, and every device range among them is valid for
        // the launch (this function's contract).
        let r = unsafe {
            driver::launch_kernel(f, [grid, 1, 1], [block, 1, 1], 0, self.s.raw.0, params)
        };
        Ok(b.dev.check(r)?)
    }

    /// The grid for an element-wise launch over `n` elements.
    pub(crate) fn grid_for(&self, n: usize) -> u32 {
        let cap = self.b.dev.info.multiprocessors.max(1) * BLOCKS_PER_SM;
        let blocks = n.div_ceil(BLOCK as usize).max(1);
        u32::try_from(blocks).unwrap_or(u32::MAX).min(cap)
    }
}

/// A pointer to a kernel parameter, as `cuLaunchKernel` wants it.
pub(crate) fn param<V>(v: &V) -> *mut c_void {
    (v as *const V).cast_mut().cast()
}

/// The device address of a range.
pub(crate) fn ptr(at: BufAt<'_, CudaBackend>) -> sys::CUdeviceptr {
    at.buf.at(at.offset)
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
            Op::Gather {
                src,
                idx,
                out,
                shape,
                n,
                faults,
            } => index::rows_by_index(l, false, (src, idx, out), (shape, n), faults),
            Op::ScatterAdd {
                src,
                idx,
                out,
                shape,
                n,
                faults,
            } => {
                if !index::has_atomic_add(elem(dtype)) {
                    return Err(Error::Unsupported {
                        backend: "cuda",
                        what: format!(
                            "`scatter_add_rows` on {dtype} (no atomic add of 1 or 2 bytes)"
                        ),
                    });
                }
                index::rows_by_index(l, true, (src, idx, out), (shape, n), faults)
            }
            Op::OneHot {
                idx,
                out,
                shape,
                faults,
            } => index::one_hot(l, idx, out, shape, faults),
            Op::CheckIndices {
                idx,
                len,
                bound,
                faults,
            } => index::check_indices(l, idx, len, bound, faults),
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
