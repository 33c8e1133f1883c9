//! [`ReduceOp`]: the reductions, of a whole array or of each row of a matrix, and their
//! reference results.

use crate::element::{Arith, Numeric};

/// Reductions, of a whole array (one result) or of each row of a matrix (one per row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum ([`Numeric::sum`]: floats accumulate in f64, integers wrap).
    Sum,
    /// The mean: the sum accumulated in f64 (in the order of [`crate::SUM_CHUNK`]), divided
    /// by the count, rounded once (floats).
    Mean,
    /// The smallest element (NaNs ignored unless all are NaN).
    Min,
    /// The largest element (NaNs ignored unless all are NaN).
    Max,
    /// The index (`u32`) of the first smallest element; NaNs rank above every number, so
    /// an all-NaN input gives 0.
    ArgMin,
    /// The index (`u32`) of the first largest element; NaNs rank below every number, so an
    /// all-NaN input gives 0.
    ArgMax,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::ArgMin,
        ReduceOp::ArgMax,
    ];

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::ArgMax => "argmax",
        }
    }

    /// The name of the reduction of each column (`col_sum`, ...), for errors.
    pub const fn col_name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "col_sum",
            ReduceOp::Mean => "col_mean",
            ReduceOp::Min => "col_min",
            ReduceOp::Max => "col_max",
            ReduceOp::ArgMin => "col_argmin",
            ReduceOp::ArgMax => "col_argmax",
        }
    }

    /// Whether the result is an index (`u32`) rather than an element.
    pub const fn is_index(self) -> bool {
        matches!(self, ReduceOp::ArgMin | ReduceOp::ArgMax)
    }

    /// Whether an empty input has a result (only the sum does: 0).
    pub const fn has_identity(self) -> bool {
        matches!(self, ReduceOp::Sum)
    }

    /// The reference result of a value reduction (`Sum`, `Mean`, `Min`, `Max`) of a
    /// non-empty slice; `None` for the index reductions.
    pub fn value<T: Numeric>(self, x: &[T]) -> Option<T> {
        let first = x.first()?.load();
        Some(match self {
            ReduceOp::Sum => T::sum(x),
            ReduceOp::Mean => return self.of_sum(crate::ordered_sum(x), x.len()),
            ReduceOp::Min => T::store(x.iter().fold(first, |m, v| m.min(v.load()))),
            ReduceOp::Max => T::store(x.iter().fold(first, |m, v| m.max(v.load()))),
            ReduceOp::ArgMin | ReduceOp::ArgMax => return None,
        })
    }

    /// The `Mean` of `len` elements, or a float's `Sum`, from their f64 sum in the order
    /// [`crate::SUM_CHUNK`] defines ([`crate::ordered_sum`]): what [`ReduceOp::value`]
    /// gives, for a backend that computes the sum its own way. `None` for the other
    /// reductions (an integer `Sum` wraps instead: [`Numeric::sum`]).
    pub fn of_sum<T: Numeric>(self, sum: f64, len: usize) -> Option<T> {
        match self {
            ReduceOp::Sum => Some(T::from_f64(sum)),
            ReduceOp::Mean => Some(T::from_f64(sum / len as f64)),
            _ => None,
        }
    }

    /// The reference result of an index reduction of a non-empty slice; `None` for the
    /// value reductions.
    pub fn index<T: Numeric>(self, x: &[T]) -> Option<u32> {
        let max = match self {
            ReduceOp::ArgMax => true,
            ReduceOp::ArgMin => false,
            _ => return None,
        };
        let mut best = 0usize;
        let mut bv = x.first()?.load();
        for (i, v) in x.iter().enumerate().skip(1) {
            let v = v.load();
            if arg_better(max, v, bv) {
                best = i;
                bv = v;
            }
        }
        u32::try_from(best).ok()
    }
}

/// The reference reduction of each column of a `rows x cols` matrix (`rows > 0`): for the
/// value reductions into `values` (`cols` elements), for the index reductions into
/// `indices` (`cols` row indices). Each column folds its rows in order, from its first row:
/// sums and means accumulate floats in f64 (integers wrap) and round once, min and max ignore NaN, the index
/// reductions take the first best row and rank NaN last, as [`ReduceOp::value`] and
/// [`ReduceOp::index`] do for a row.
pub fn reduce_cols<T: Numeric>(
    op: ReduceOp,
    x: &[T],
    cols: usize,
    values: &mut [T],
    indices: &mut [u32],
) {
    let rows = x.len().checked_div(cols).unwrap_or(0);
    if rows == 0 {
        return;
    }
    let float = T::DTYPE.is_float();
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            if float {
                let mut acc: Vec<f64> = x[..cols].iter().map(|v| v.to_f64()).collect();
                for row in x.chunks_exact(cols).skip(1) {
                    for (a, v) in acc.iter_mut().zip(row) {
                        *a += v.to_f64();
                    }
                }
                for (o, a) in values.iter_mut().zip(acc) {
                    *o = op.of_sum(a, rows).unwrap_or(*o);
                }
            } else {
                values[..cols].copy_from_slice(&x[..cols]);
                for row in x.chunks_exact(cols).skip(1) {
                    for (o, &v) in values.iter_mut().zip(row) {
                        *o = o.add(v);
                    }
                }
            }
        }
        ReduceOp::Min | ReduceOp::Max => {
            values[..cols].copy_from_slice(&x[..cols]);
            for row in x.chunks_exact(cols).skip(1) {
                for (o, v) in values.iter_mut().zip(row) {
                    let (m, v) = (o.load(), v.load());
                    *o = T::store(if op == ReduceOp::Min {
                        m.min(v)
                    } else {
                        m.max(v)
                    });
                }
            }
        }
        ReduceOp::ArgMin | ReduceOp::ArgMax => {
            let max = op == ReduceOp::ArgMax;
            let mut best: Vec<T::Compute> = x[..cols].iter().map(|v| v.load()).collect();
            indices[..cols].fill(0);
            for (r, row) in x.chunks_exact(cols).enumerate().skip(1) {
                for ((b, i), v) in best.iter_mut().zip(indices.iter_mut()).zip(row) {
                    let v = v.load();
                    if arg_better(max, v, *b) {
                        *b = v;
                        *i = r as u32;
                    }
                }
            }
        }
    }
}

/// Whether `v` (at a later index) displaces `best` in an argmax (`max`) or argmin: strictly
/// better, or a number where `best` is a NaN.
fn arg_better<C: Arith>(max: bool, v: C, best: C) -> bool {
    if v.is_nan() {
        return false;
    }
    best.is_nan() || if max { v > best } else { v < best }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg_reductions_rank_nan_last_and_take_the_first_of_ties() {
        let x = [f32::NAN, 1.0, 3.0, 3.0, -2.0, f32::NAN];
        assert_eq!(ReduceOp::ArgMax.index(&x), Some(2));
        assert_eq!(ReduceOp::ArgMin.index(&x), Some(4));
        assert_eq!(ReduceOp::ArgMax.index(&[f32::NAN, f32::NAN]), Some(0));
        assert_eq!(ReduceOp::ArgMax.index::<f32>(&[]), None);
        assert_eq!(ReduceOp::Sum.index(&x), None);
    }

    #[test]
    fn value_reductions_give_known_answers() {
        let x = [2.0f32, f32::NAN, -1.5, 4.0];
        assert_eq!(ReduceOp::Min.value(&x), Some(-1.5));
        assert_eq!(ReduceOp::Max.value(&x), Some(4.0));
        assert!(ReduceOp::Sum.value(&x).unwrap().is_nan());
        let y = [1.0f32, 2.0, 4.0, 8.0, 16.0];
        assert_eq!(ReduceOp::Sum.value(&y), Some(31.0));
        assert_eq!(ReduceOp::Mean.value(&y), Some(6.2));
        assert_eq!(ReduceOp::Mean.value(&[1i32, 2, 4]), Some(2), "2.33 to i32");
        assert_eq!(ReduceOp::Sum.value(&[i32::MAX, 1]), Some(i32::MIN), "wraps");
        assert_eq!(ReduceOp::Max.value(&[3u8, 9, 1]), Some(9));
        assert_eq!(ReduceOp::Min.value(&[3u8, 9, 1]), Some(1));
        assert_eq!(ReduceOp::ArgMax.value(&y), None);
        assert_eq!(ReduceOp::Min.value::<f32>(&[]), None);
        assert_eq!(ReduceOp::Sum.of_sum::<f32>(7.0, 2), Some(7.0));
        assert_eq!(ReduceOp::Mean.of_sum::<f64>(7.0, 2), Some(3.5));
        assert_eq!(ReduceOp::Max.of_sum::<f64>(7.0, 2), None);
        assert_eq!(ReduceOp::ArgMin.index(&[3i32, 1, 1, 5]), Some(1));
        assert_eq!(ReduceOp::ArgMax.index(&[3i32, 1, 5, 5]), Some(2));
    }

    #[test]
    fn names_and_kinds() {
        let names = ReduceOp::ALL.map(|op| (op.name(), op.col_name()));
        assert_eq!(
            names,
            [
                ("sum", "col_sum"),
                ("mean", "col_mean"),
                ("min", "col_min"),
                ("max", "col_max"),
                ("argmin", "col_argmin"),
                ("argmax", "col_argmax"),
            ]
        );
        let kinds = ReduceOp::ALL.map(|op| (op.is_index(), op.has_identity()));
        assert_eq!(
            kinds,
            [
                (false, true),
                (false, false),
                (false, false),
                (false, false),
                (true, false),
                (true, false),
            ]
        );
    }

    /// Each column of a 3 x 2 matrix, against the column written out.
    #[test]
    fn columns_reduce_like_rows() {
        let x = [1.0f32, f32::NAN, -4.0, 2.0, 6.0, 2.0];
        let col = |c: usize| [x[c], x[2 + c], x[4 + c]];
        for op in ReduceOp::ALL {
            let (mut v, mut i) = ([9.0f32; 2], [9u32; 2]);
            reduce_cols(op, &x, 2, &mut v, &mut i);
            for c in 0..2 {
                if op.is_index() {
                    assert_eq!(Some(i[c]), op.index(&col(c)), "{op:?} column {c}");
                } else {
                    let want = op.value(&col(c)).unwrap();
                    assert!(v[c] == want || v[c].is_nan() && want.is_nan(), "{op:?} {c}");
                }
            }
        }
        let (mut v, mut i) = ([0.0f32; 2], [0u32; 2]);
        reduce_cols(ReduceOp::Mean, &x, 2, &mut v, &mut i);
        assert_eq!(v[0], 1.0);
        reduce_cols(ReduceOp::ArgMax, &x, 2, &mut v, &mut i);
        assert_eq!(i, [2, 1]);
        let xi = [i32::MAX, 5, 1, -7];
        let (mut vi, mut ii) = ([0i32; 2], [0u32; 2]);
        reduce_cols(ReduceOp::Sum, &xi, 2, &mut vi, &mut ii);
        assert_eq!(vi, [i32::MIN, -2]);
        reduce_cols(ReduceOp::Min, &xi, 2, &mut vi, &mut ii);
        assert_eq!(vi, [1, -7]);
        reduce_cols(ReduceOp::Max, &xi, 2, &mut vi, &mut ii);
        assert_eq!(vi, [i32::MAX, 5]);
        reduce_cols(ReduceOp::ArgMin, &xi, 2, &mut vi, &mut ii);
        assert_eq!(ii, [1, 1]);
        let mut untouched = [3i32; 2];
        reduce_cols(ReduceOp::Sum, &xi, 8, &mut untouched, &mut ii);
        assert_eq!(untouched, [3, 3], "no full row");
    }
}
