//! Which ops an element type runs: [`Ints`] the integer ones, [`Floats`] also gemm and
//! the float fills, each split over the cores by the op's cost class.

use gpukit_core::native::split::{part, pieces, MATH};
use gpukit_core::{Distribution, Float, Gemm, Numeric};

use super::gemm;

/// What an element type runs of the table.
pub(crate) trait Kind<T: Numeric> {
    /// Whether the type has float-only ops.
    const FLOAT: bool;
    fn gemm(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]);
    /// A random fill (gpukit-core's `random_floats` or `random_integers`), split across the
    /// cores at element offsets, which gives the bits of the whole fill.
    fn random(
        dist: Distribution,
        key: (u64, u64),
        ab: (T, T),
        range: u32,
        src: Option<&[T]>,
        out: &mut [T],
    );
}

/// The integer element types' part of the table.
pub(crate) struct Ints;
/// The float element types' part: all of it.
pub(crate) struct Floats;

impl<T: Numeric> Kind<T> for Ints {
    const FLOAT: bool = false;
    // Unreachable: `typed` refuses float-only ops on integers before queuing them.
    fn gemm(_: &Gemm<T>, _: &[T], _: &[T], _: &mut [T]) {}
    fn random(
        _: Distribution,
        (seed, offset): (u64, u64),
        (lo, _): (T, T),
        range: u32,
        _: Option<&[T]>,
        out: &mut [T],
    ) {
        pieces(out, 1, MATH, |start, o| {
            gpukit_core::optable::random_integers(
                (seed, offset.wrapping_add(start as u64)),
                lo,
                range,
                o,
            );
        });
    }
}

impl<T: Float> Kind<T> for Floats {
    const FLOAT: bool = true;
    fn gemm(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]) {
        gemm::product(g, a, b, c);
    }
    fn random(
        dist: Distribution,
        (seed, offset): (u64, u64),
        ab: (T, T),
        _: u32,
        src: Option<&[T]>,
        out: &mut [T],
    ) {
        pieces(out, 1, MATH, |start, o| {
            let key = (seed, offset.wrapping_add(start as u64));
            gpukit_core::optable::random_floats(dist, key, ab, part(src, start, o.len()), o);
        });
    }
}
