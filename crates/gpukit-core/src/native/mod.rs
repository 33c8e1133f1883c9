//! The CPU bodies of the built-in kernels ([`KernelSpec::native`](crate::KernelSpec)): what
//! the CPU backend runs for a built-in op in place of the kernel's thread-by-thread twin.
//! Each computes the bits of gpukit-core's reference (`optable`), faster: the table's f32
//! and f64 math on vectors ([`vmath`]), float sums in the reference's order on vectors
//! ([`sum`]), and large work split across the machine's cores ([`split`]), which changes
//! no bit of the result.
//!
//! Public (hidden) for the CPU backend, which still runs the ops that are not kernels yet
//! through them.

pub(crate) mod reduce;
pub(crate) mod rows;
pub mod split;
pub mod sum;
pub mod vmath;

use crate::element::{Float, Numeric};
use crate::optable::{BinaryOp, RhsSlice, UnaryOp};

use split::{binary_pieces, part, pieces, work, VMATH};

/// The table's unary op `op` over an integer type (in place where `src` is `None`).
pub(crate) fn unary_ints<T: Numeric>(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
    pieces(out, 1, work(op.math()), |start, o| {
        op.map_numeric(part(src, start, o.len()), o);
    });
}

/// The table's unary op `op` over a float type, on vectors where [`vmath`] has it.
pub(crate) fn unary_floats<T: Float>(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
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

/// The table's binary op `op` over an integer type, `out` a matrix of `cols` columns for a
/// row or column vector (in place where `src` is `None`).
pub(crate) fn binary_ints<T: Numeric>(
    op: BinaryOp,
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
) {
    binary_pieces(src, rhs, cols, out, work(op.math()), |s, r, c, o| {
        op.map_numeric(s, r, c, o);
    });
}

/// The table's binary op `op` over a float type, on vectors where [`vmath`] has it.
pub(crate) fn binary_floats<T: Float>(
    op: BinaryOp,
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
) {
    binary_pieces(src, rhs, cols, out, work(op.math()), |s, r, c, o| {
        if !vmath::binary(op, s, r, c, o) {
            op.map_float(s, r, c, o)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optable::{BinaryOp, RhsSlice, UnaryOp};
    use split::SPLIT_FROM;

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
            f32::__unary(op, Some(&x), &mut split);
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
                f32::__binary(op, Some(&x), r, cols, &mut split);
                if !vmath::binary(op, Some(&x), r, cols, &mut whole) {
                    op.map_float(Some(&x), r, cols, &mut whole);
                }
                assert!(bits(&split) == bits(&whole), "{op:?} with {r:?}");
                // In place too.
                let mut inplace = x.clone();
                f32::__binary(op, None, r, cols, &mut inplace);
                assert!(bits(&inplace) == bits(&whole), "{op:?} in place with {r:?}");
            }
        }
        let xi: Vec<i32> = (0..n as i32).map(|i| i % 1000 - 500).collect();
        let (mut split, mut whole) = (vec![0i32; n], vec![0i32; n]);
        i32::__binary(
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
