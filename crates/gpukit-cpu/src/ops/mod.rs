//! The built-in ops as tasks: the op table's reference semantics (`gpukit_core::optable`) run
//! over slices on the stream's worker, large ones spread over the machine's cores; gemm
//! through `matrixmultiply`.
//!
//! [`task`] turns any [`Op`] into a task for its element type: the `match` over the op only
//! dispatches, one function per op family (`gemm`). The
//! element-wise table needs nothing here: the CPU runs each entry's reference body, and
//! takes its cost class from the entry's `math` column.

mod gemm;
mod kind;
mod ranges;

use gpukit_core::{DType, DTypeVisitor, Float, Numeric, Op, Result};

use crate::queue::Task;
use crate::CpuBackend;
use kind::{Floats, Ints, Kind};

fn unsupported(what: String) -> gpukit_core::Error {
    gpukit_core::Error::Unsupported {
        backend: "cpu",
        what,
    }
}

/// An element type this build of gpukit-core lacks.
fn lacks(dtype: DType) -> gpukit_core::Error {
    unsupported(format!(
        "{dtype} elements (gpukit-core is built without its `half` feature)"
    ))
}

/// Builds the task of an op for the element type the visit names.
///
/// Constructed only by [`task`], which holds the contract [`typed`] needs, so that the
/// visitor's safe methods may call it.
struct Build<'o, 'b> {
    op: &'o Op<'b, CpuBackend>,
}

impl DTypeVisitor for Build<'_, '_> {
    type Output = Result<Task>;
    fn integer<T: Numeric>(self) -> Result<Task> {
        // SAFETY: a `Build` exists only inside `task`, under its contract.
        unsafe { typed::<T, Ints>(self.op) }
    }
    fn float<T: Float>(self) -> Result<Task> {
        // SAFETY: as above.
        unsafe { typed::<T, Floats>(self.op) }
    }
}

/// Elements of the largest operand up to which an op is short enough to run in place on the
/// calling thread when its stream is idle (see `Queue::run_or_push`): a few microseconds of
/// memory-bound work, less than a hand-off to the worker costs.
const SHORT_ELEMENTS: usize = 16 << 10;

/// Whether `op` is short enough to run in place (see [`SHORT_ELEMENTS`]); a gemm counts its
/// multiply-adds.
pub(crate) fn is_short(op: &Op<'_, CpuBackend>) -> bool {
    let elements = match *op {
        Op::Gemm { g, .. } => {
            g.m.checked_mul(g.n)
                .and_then(|mn| mn.checked_mul(g.k))
                .and_then(|mnk| mnk.checked_mul(g.batch))
        }
    };
    elements.is_some_and(|n| n <= SHORT_ELEMENTS)
}

/// The task that runs `op` on elements of `dtype`, or why the CPU backend cannot. Every
/// element type gpukit-core has is supported (f16 and bf16 when its `half` feature is on).
///
/// # Safety
///
/// The contract of `Backend::op`: every range lies inside its buffer and is aligned, and
/// gpukit-core orders every other access to the written ranges against the task.
pub(crate) unsafe fn task(dtype: DType, op: &Op<'_, CpuBackend>) -> Result<Task> {
    dtype
        .visit(Build { op })
        .unwrap_or_else(|| Err(lacks(dtype)))
}

/// [`task`] for the element type `T`, whose part of the table is `K`'s: one family function
/// per arm.
///
/// # Safety
///
/// As [`task`].
unsafe fn typed<T: Numeric, K: Kind<T>>(op: &Op<'_, CpuBackend>) -> Result<Task> {
    if op.floats_only() && !K::FLOAT {
        return Err(unsupported(format!("`{}` on {}", op.name(), T::DTYPE)));
    }
    // SAFETY: every family function's contract is `task`'s, which this function's caller
    // holds for all of `op`'s ranges.
    unsafe {
        Ok(match *op {
            Op::Gemm { g, a, b, c } => gemm::gemm::<T, K>(g, a, b, c),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpukit_core::BufAt;

    /// The backend runs every element type gpukit-core has: f16 and bf16 exactly when
    /// gpukit-core's `half` feature is on; without it, ops on them are `Unsupported` naming
    /// the feature, before anything is queued or touched.
    #[test]
    fn sixteen_bit_types_follow_gpukit_cores_half_feature() {
        use gpukit_core::{Backend, Error};
        struct Has;
        impl DTypeVisitor for Has {
            type Output = ();
            fn integer<T: Numeric>(self) {}
            fn float<T: Float>(self) {}
        }
        let has_half = DType::F16.visit(Has).is_some();
        let b = CpuBackend::new().expect("the CPU backend opens");
        let s = b.create_stream(0).expect("a stream");
        let buf = b.alloc(8, true).expect("8 bytes");
        let at = BufAt {
            buf: &buf,
            offset: 0,
        };
        let (mid, hi) = (
            BufAt {
                buf: &buf,
                offset: 2,
            },
            BufAt {
                buf: &buf,
                offset: 4,
            },
        );
        let op = Op::Gemm {
            g: gpukit_core::Gemm::new(1, 1, 1),
            a: at,
            b: mid,
            c: hi,
        };
        // SAFETY: the ranges are inside the 8-byte buffer and aligned: the 1 x 1 product
        // reads the bf16s at bytes 0 and 2 and writes one at byte 4; nothing else uses the
        // buffer.
        let r = unsafe { b.op(&s, DType::BF16, &op) };
        if has_half {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert!(
                matches!(r, Err(Error::Unsupported { backend: "cpu", ref what }) if what.contains("half")),
                "{r:?}"
            );
        }
        b.stream_sync(&s).expect("nothing failed on the stream");
        b.destroy_stream(s).expect("destroyed");
        // SAFETY: no stream uses the buffer any more.
        unsafe { b.free(buf, &[]) }.expect("freed");
    }
}
