//! Built-in ops, queued on a stream: fill, axpy, the element-wise table (unary, binary,
//! scalar, row and column broadcasts, each also in place), clamp, reductions (whole and per
//! row), softmax, cross-entropy, casts and gemm (plain and batched).
//!
//! Every op checks lengths, shapes, element types and contexts before anything is queued,
//! so a rejected call changes nothing. Empty inputs are valid: element-wise ops on them do
//! nothing, `sum` and `dot` give zero; `mean`, `min`, `max`, `argmin` and `argmax` of
//! nothing are [`Error::EmptyInput`]. The typed methods of the element-wise table (`relu`,
//! `add_row_inplace`, ...) are generated in `optable/`; this module has what they share
//! (`run_op`, the one place the safe layer calls [`Backend::op`]) and one file per family:
//! element-wise ([`elementwise`]), reductions ([`reduce`]), softmax and cross-entropy
//! ([`rows`]), gemm ([`gemm`]), prefix sums ([`scan`], whose kernels are `#[kernel]`s launched
//! through `Stream::launch_builtin`, the way every op is to be written).

mod elementwise;
pub(crate) mod fold;
mod gemm;
mod index;
pub(crate) mod map;
mod random;
mod reduce;
mod rows;
mod scan;

pub use random::Rng;

use crate::backend::{Backend, BufAt};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::optable::{Op, Shape};
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

fn product(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow {
        op,
        len: a,
        elem_bytes: b,
    })
}

/// `Some` of every element when none is `None`.
fn all_some<T: Copy, const N: usize>(xs: [Option<T>; N]) -> Option<[T; N]> {
    let first = xs.first().copied().flatten()?;
    if xs.iter().any(Option::is_none) {
        return None;
    }
    Some(xs.map(|x| x.unwrap_or(first)))
}

/// The elements of a `shape` matrix.
fn shape_len(op: &'static str, shape: Shape) -> Result<usize> {
    product(op, shape.rows, shape.cols)
}

impl<B: Backend> Stream<B> {
    /// Checks that every argument belongs to this stream's context, for the shortcuts that
    /// return before `enqueue` (which checks them otherwise).
    fn same_contexts<const N: usize>(
        &self,
        op: &'static str,
        args: [(&'static str, u64); N],
    ) -> Result<()> {
        for (arg, id) in args {
            self.shared_arc().same_context(op, arg, id)?;
        }
        Ok(())
    }

    /// A float-only op asked of an integer type, through the untyped entry points.
    fn floats_only(&self, name: &'static str, floats_only: bool, dtype: DType) -> Result<()> {
        if floats_only && !dtype.is_float() {
            return Err(Error::Unsupported {
                backend: self.backend().name(),
                what: format!("`{name}` on {dtype} (a float-only op)"),
            });
        }
        Ok(())
    }

    /// Queues one op of the table on `args` (read or written as marked): the one place the
    /// safe layer calls [`Backend::op`]. Does nothing when a range is empty.
    fn run_op<'s, const N: usize>(
        &self,
        name: &'static str,
        dtype: DType,
        args: [(&'static str, &SliceRef<'s, B>, Access); N],
        make: impl FnOnce([BufAt<'s, B>; N]) -> Op<'s, B>,
    ) -> Result<()> {
        self.enqueue(name, &args, || {
            let Some(ats) = all_some(args.map(|(_, s, _)| s.at())) else {
                return Ok(());
            };
            let op = make(ats);
            // SAFETY: every range comes from a checked view of an array of this context (in
            // bounds, aligned, of the element type the op reads there) whose length the
            // caller checked against the op's shape; `enqueue` has ordered the ranges after
            // conflicting uses on other streams and records this use, so no buffer is freed
            // before the op has run; a written range is a `&mut` borrow, so it overlaps no
            // other argument (in-place ops pass it once, as `out`).
            unsafe { self.backend().op(self.raw(), dtype, &op) }
        })
    }
}
