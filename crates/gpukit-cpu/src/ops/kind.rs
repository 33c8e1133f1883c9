//! Which ops an element type runs: [`Ints`] the indexing ops, [`Floats`] also gemm.

use gpukit_core::{Float, Gemm, Numeric};

use super::gemm;

/// What an element type runs of the table.
pub(crate) trait Kind<T: Numeric> {
    /// Whether the type has float-only ops.
    const FLOAT: bool;
    fn gemm(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]);
}

/// The integer element types' part of the table.
pub(crate) struct Ints;
/// The float element types' part: all of it.
pub(crate) struct Floats;

impl<T: Numeric> Kind<T> for Ints {
    const FLOAT: bool = false;
    // Unreachable: `typed` refuses float-only ops on integers before queuing them.
    fn gemm(_: &Gemm<T>, _: &[T], _: &[T], _: &mut [T]) {}
}

impl<T: Float> Kind<T> for Floats {
    const FLOAT: bool = true;
    fn gemm(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]) {
        gemm::product(g, a, b, c);
    }
}
