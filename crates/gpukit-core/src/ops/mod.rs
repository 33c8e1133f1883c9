//! Built-in ops, queued on a stream: fill, axpy, the element-wise table (unary, binary,
//! scalar, row and column broadcasts, each also in place), clamp, reductions (whole and per
//! row), softmax, cross-entropy, casts and gemm (plain and batched).
//!
//! Every op checks lengths, shapes, element types and contexts before anything is queued,
//! so a rejected call changes nothing. Empty inputs are valid: element-wise ops on them do
//! nothing, `sum` and `dot` give zero; `mean`, `min`, `max`, `argmin` and `argmax` of
//! nothing are [`Error::EmptyInput`]. The typed methods of the element-wise table (`relu`,
//! `add_row_inplace`, ...) are generated in `optable/`; this module has the checks they
//! share and one file per family: element-wise ([`elementwise`]), reductions ([`reduce`]),
//! softmax and cross-entropy ([`rows`]), gemm ([`gemm`]), prefix sums ([`scan`]). Each op
//! launches its built-in kernel through `Stream::launch_builtin` (`kernel::builtin`), which
//! reaches the backend through [`Backend::launch`]; gemm calls [`Backend::gemm`] instead
//! where the backend has its own.

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

use crate::backend::Backend;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::optable::Shape;
use crate::stream::Stream;

fn product(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow {
        op,
        len: a,
        elem_bytes: b,
    })
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
}
