//! Gemm as a task: each product of a batch through the crate's AVX-512 f32 kernel
//! (`sgemm.rs`, large f32 products on CPUs with AVX-512F) or `matrixmultiply` (the rest),
//! run on the stream's worker (the backend's gemm fast path, `Backend::gemm`). Every other built-in op is a
//! gpukit-core kernel, which the CPU runs through its twin or native body.

mod gemm;
mod ranges;
mod sgemm;

use gpukit_core::{BufAt, DType, DTypeVisitor, Float, Gemm, Numeric, Result};

use crate::queue::Task;
use crate::CpuBackend;

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

/// A gemm's operands: `A`, `B` and `C`.
pub(crate) type Operands<'b> = [BufAt<'b, CpuBackend>; 3];

/// Builds the gemm task for the element type the visit names.
///
/// Constructed only by [`task`], which holds the contract [`gemm::gemm`] needs, so that the
/// visitor's safe methods may call it.
struct Build<'g, 'b> {
    g: &'g Gemm<f64>,
    ops: Operands<'b>,
}

impl DTypeVisitor for Build<'_, '_> {
    type Output = Result<Task>;
    fn integer<T: Numeric>(self) -> Result<Task> {
        Err(unsupported(format!("`gemm` on {}", T::DTYPE)))
    }
    fn float<T: Float>(self) -> Result<Task> {
        let [a, b, c] = self.ops;
        // SAFETY: a `Build` exists only inside `task`, under its contract, which is
        // `gemm::gemm`'s.
        Ok(unsafe { gemm::gemm::<T>(*self.g, a, b, c) })
    }
}

/// Multiply-adds up to which a gemm is short enough to run in place on the calling thread
/// when its stream is idle (see `Queue::run_or_push`): a few microseconds of work, less than
/// a hand-off to the worker costs.
const SHORT_ELEMENTS: usize = 16 << 10;

/// Whether the gemm `g` is short enough to run in place (see [`SHORT_ELEMENTS`]).
pub(crate) fn is_short(g: &Gemm<f64>) -> bool {
    g.m.checked_mul(g.n)
        .and_then(|mn| mn.checked_mul(g.k))
        .and_then(|mnk| mnk.checked_mul(g.batch))
        .is_some_and(|n| n <= SHORT_ELEMENTS)
}

/// Each operand's range in bytes on elements of `dtype`, from its start to the end of the
/// last matrix of its batch, and whether it is written (`C`): what the chaos schedule
/// declares for the gemm.
pub(crate) fn ranges(dtype: DType, g: &Gemm<f64>) -> [(usize, bool); 3] {
    // gpukit-core checked every span to fit a `usize` before queuing the gemm.
    let bytes = |size: usize, stride: usize| {
        g.span(size, stride)
            .unwrap_or(usize::MAX)
            .saturating_mul(dtype.size())
    };
    [
        (bytes(g.m * g.k, g.stride_a), false),
        (bytes(g.k * g.n, g.stride_b), false),
        (bytes(g.m * g.n, g.stride_c), true),
    ]
}

/// The task that runs the gemm `g` on elements of `dtype`, or why the CPU backend cannot:
/// float element types (f16 and bf16 when gpukit-core's `half` feature is on).
///
/// # Safety
///
/// The contract of `Backend::gemm`: every range lies inside its buffer and is aligned, and
/// gpukit-core orders every other access to the written range against the task.
pub(crate) unsafe fn task(dtype: DType, g: &Gemm<f64>, ops: Operands<'_>) -> Result<Task> {
    dtype
        .visit(Build { g, ops })
        .unwrap_or_else(|| Err(lacks(dtype)))
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
        let g = gpukit_core::Gemm::new(1, 1, 1);
        // SAFETY: the ranges are inside the 8-byte buffer and aligned: the 1 x 1 product
        // reads the bf16s at bytes 0 and 2 and writes one at byte 4; nothing else uses the
        // buffer.
        let r = unsafe { b.gemm(&s, DType::BF16, &g, [at, mid, hi]) };
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
