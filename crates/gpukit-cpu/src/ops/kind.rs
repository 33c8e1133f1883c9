//! Which part of the op table an element type runs: [`Ints`] the `numeric` entries,
//! [`Floats`] all of them (and softmax, cross-entropy and gemm), each split over the cores by
//! the op's cost class.

use gpukit_core::{BinaryOp, Distribution, Float, Gemm, Numeric, RhsSlice, UnaryOp};

use super::split::{binary_pieces, part, pieces, work, MATH, VMATH};
use super::{gemm, rows, vmath};

/// What an element type runs of the table.
pub(crate) trait Kind<T: Numeric> {
    /// Whether the type has float-only ops.
    const FLOAT: bool;
    fn unary(op: UnaryOp, src: Option<&[T]>, out: &mut [T]);
    fn binary(op: BinaryOp, src: Option<&[T]>, rhs: RhsSlice<'_, T>, cols: usize, out: &mut [T]);
    fn softmax(log: bool, src: Option<&[T]>, cols: usize, out: &mut [T]);
    fn cross_entropy(
        logits: &[T],
        labels: &[u32],
        cols: usize,
        loss: &mut [T],
        grad: Option<&mut [T]>,
    );
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
    fn unary(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
        pieces(out, 1, work(op.math()), |start, o| {
            op.map_numeric(part(src, start, o.len()), o);
        });
    }
    fn binary(op: BinaryOp, src: Option<&[T]>, rhs: RhsSlice<'_, T>, cols: usize, out: &mut [T]) {
        binary_pieces(src, rhs, cols, out, work(op.math()), |s, r, c, o| {
            op.map_numeric(s, r, c, o);
        });
    }
    // Unreachable: `typed` refuses float-only ops on integers before queuing them.
    fn softmax(_: bool, _: Option<&[T]>, _: usize, _: &mut [T]) {}
    fn cross_entropy(_: &[T], _: &[u32], _: usize, _: &mut [T], _: Option<&mut [T]>) {}
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
    fn unary(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
        let cost = if vmath::cheap::<T>(op) {
            VMATH
        } else {
            work(op.math())
        };
        pieces(out, 1, cost, |start, o| {
            let s = part(src, start, o.len());
            if !vmath::unary(op, s, o) {
                op.map_float(s, o)
            }
        });
    }
    fn binary(op: BinaryOp, src: Option<&[T]>, rhs: RhsSlice<'_, T>, cols: usize, out: &mut [T]) {
        binary_pieces(src, rhs, cols, out, work(op.math()), |s, r, c, o| {
            if !vmath::binary(op, s, r, c, o) {
                op.map_float(s, r, c, o)
            }
        });
    }
    fn softmax(log: bool, src: Option<&[T]>, cols: usize, out: &mut [T]) {
        rows::split_softmax(log, src, cols, out);
    }
    fn cross_entropy(
        logits: &[T],
        labels: &[u32],
        cols: usize,
        loss: &mut [T],
        grad: Option<&mut [T]>,
    ) {
        rows::split_cross_entropy(logits, labels, cols, loss, grad);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::split::SPLIT_FROM;

    /// Ops large enough to be split across cores give the bits of the same op run whole,
    /// for every kind of operand (a piece boundary falls inside no row).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe code over 2^20 elements split across rayon: hours interpreted"
    )]
    fn split_element_wise_ops_equal_the_whole() {
        let (rows, cols) = (1103, 997); // 1,099,691 elements: split, with a short last piece
        let n = rows * cols;
        assert!(n >= SPLIT_FROM);
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 1013) as f32 * 0.01 - 5.0)
            .collect();
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 11) % 997) as f32 * 0.02 - 9.0)
            .collect();
        let row: Vec<f32> = (0..cols).map(|j| j as f32 * 0.5 - 3.0).collect();
        let col: Vec<f32> = (0..rows).map(|r| r as f32 * 0.25 + 1.0).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

        for op in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Relu] {
            let (mut split, mut whole) = (vec![0f32; n], vec![0f32; n]);
            <Floats as Kind<f32>>::unary(op, Some(&x), &mut split);
            // The same code unsplit: the vectorised body where there is one.
            if !vmath::unary(op, Some(&x), &mut whole) {
                op.map_float(Some(&x), &mut whole);
            }
            assert!(bits(&split) == bits(&whole), "{op:?}");
        }
        let rhs = [
            RhsSlice::Array(&y[..]),
            RhsSlice::Scalar(1.5),
            RhsSlice::Row(&row[..]),
            RhsSlice::Col(&col[..]),
        ];
        for op in [BinaryOp::Add, BinaryOp::Div, BinaryOp::Pow] {
            for r in rhs {
                let (mut split, mut whole) = (vec![0f32; n], vec![0f32; n]);
                <Floats as Kind<f32>>::binary(op, Some(&x), r, cols, &mut split);
                if !vmath::binary(op, Some(&x), r, cols, &mut whole) {
                    op.map_float(Some(&x), r, cols, &mut whole);
                }
                assert!(bits(&split) == bits(&whole), "{op:?} with {r:?}");
                // In place too.
                let mut inplace = x.clone();
                <Floats as Kind<f32>>::binary(op, None, r, cols, &mut inplace);
                assert!(bits(&inplace) == bits(&whole), "{op:?} in place with {r:?}");
            }
        }
        let xi: Vec<i32> = (0..n as i32).map(|i| i % 1000 - 500).collect();
        let (mut split, mut whole) = (vec![0i32; n], vec![0i32; n]);
        <Ints as Kind<i32>>::binary(
            BinaryOp::Mul,
            Some(&xi),
            RhsSlice::Scalar(3),
            cols,
            &mut split,
        );
        BinaryOp::Mul.map_numeric(Some(&xi), RhsSlice::Scalar(3), cols, &mut whole);
        assert_eq!(split, whole);
    }
}
