//! The reference loops of the element-wise ops: a function of the element's compute type
//! mapped over slices, in place or from a source, with the second operand of a binary op as
//! an array, a row or column vector, or a scalar ([`RhsSlice`]); and casts.
//!
//! The table's generated `map_numeric`/`map_float` run the ops' bodies through these, and
//! the CPU backend runs those.

use crate::element::Numeric;

/// Applies `f` to each element of `src` (or, in place, of `out`) into `out`.
#[inline(always)]
pub(super) fn map1<T: Numeric>(
    src: Option<&[T]>,
    out: &mut [T],
    f: impl Fn(T::Compute) -> T::Compute,
) {
    match src {
        Some(src) => {
            for (o, &x) in out.iter_mut().zip(src) {
                *o = T::store(f(x.load()));
            }
        }
        None => {
            for o in out.iter_mut() {
                *o = T::store(f(o.load()));
            }
        }
    }
}

/// `out[i] = f(src[i], other[i])` (in place when `src` is `None`).
#[inline(always)]
fn zip2<T: Numeric>(
    src: Option<&[T]>,
    other: &[T],
    out: &mut [T],
    f: &impl Fn(T::Compute, T::Compute) -> T::Compute,
) {
    match src {
        Some(src) => {
            for ((o, &x), &y) in out.iter_mut().zip(src).zip(other) {
                *o = T::store(f(x.load(), y.load()));
            }
        }
        None => {
            for (o, &y) in out.iter_mut().zip(other) {
                *o = T::store(f(o.load(), y.load()));
            }
        }
    }
}

/// The second operand of a binary op on slices.
#[derive(Debug, Clone, Copy)]
pub enum RhsSlice<'a, T> {
    /// An array of the output's length.
    Array(&'a [T]),
    /// A row vector of `cols` elements, added (...) to every row.
    Row(&'a [T]),
    /// A column vector of `rows` elements: row `r` uses element `r`.
    Col(&'a [T]),
    /// One value for every element.
    Scalar(T),
}

/// Applies `f(x, rhs)` over a `shape` matrix (in place when `src` is `None`).
#[inline(always)]
pub(crate) fn map2<T: Numeric>(
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
    f: impl Fn(T::Compute, T::Compute) -> T::Compute,
) {
    let cols = cols.max(1);
    match rhs {
        RhsSlice::Array(b) => zip2(src, b, out, &f),
        RhsSlice::Scalar(s) => {
            let s = s.load();
            map1(src, out, |x| f(x, s));
        }
        RhsSlice::Row(v) => {
            for (r, o) in out.chunks_mut(cols).enumerate() {
                let s = src.map(|s| &s[r * cols..r * cols + o.len()]);
                zip2(s, v, o, &f);
            }
        }
        RhsSlice::Col(v) => {
            for ((r, o), &c) in out.chunks_mut(cols).enumerate().zip(v) {
                let s = src.map(|s| &s[r * cols..r * cols + o.len()]);
                let c = c.load();
                map1(s, o, |x| f(x, c));
            }
        }
    }
}

/// Casts a slice with the reference semantics of [`Numeric::from_wide`].
pub fn cast_slice<T: Numeric, U: Numeric>(src: &[T], out: &mut [U]) {
    for (o, &x) in out.iter_mut().zip(src) {
        *o = U::from_wide(x.to_wide());
    }
}

#[cfg(test)]
mod tests {
    use crate::element::Arith;
    use crate::{BinaryOp, UnaryOp};

    #[test]
    fn an_ops_index_is_its_position_in_the_table() {
        for (i, op) in UnaryOp::ALL.iter().enumerate() {
            assert_eq!(op.index() as usize, i, "{op:?}");
        }
        for (i, op) in BinaryOp::ALL.iter().enumerate() {
            assert_eq!(op.index() as usize, i, "{op:?}");
        }
    }

    #[test]
    fn min_and_max_ignore_nan_and_keep_the_first_of_equals() {
        assert_eq!(Arith::max(f32::NAN, 1.0), 1.0);
        assert_eq!(Arith::max(1.0, f32::NAN), 1.0);
        assert!(Arith::max(f32::NAN, f32::NAN).is_nan());
        assert_eq!(Arith::min(2.0f32, -1.0), -1.0);
        assert!(Arith::max(-0.0f32, 0.0).is_sign_negative());
        assert!(Arith::min(0.0f32, -0.0).is_sign_positive());
    }

    #[test]
    fn casts_saturate_floats_and_wrap_integers() {
        use super::cast_slice;
        let mut i = [0i32; 5];
        cast_slice(&[f32::NAN, 3.9, -3.9, 1e20, -1e20], &mut i);
        assert_eq!(i, [0, 3, -3, i32::MAX, i32::MIN]);
        let mut u = [0u8; 3];
        cast_slice(&[-1i32, 256, 300], &mut u);
        assert_eq!(u, [255, 0, 44]);
        let mut f = [0f32; 1];
        cast_slice(&[u64::MAX], &mut f);
        assert_eq!(f[0], u64::MAX as f32);
    }
}
