//! The reference semantics of the ops that select, compare and index: comparisons into a
//! `u8` mask and `where`, `gather` and `scatter_add` of rows by a `u32` index array,
//! `one_hot`, `arange` and a random permutation ([`permutation`]).
//!
//! An index past its array is never read or written: the reference calls `fault(index,
//! len)` and skips it (a gathered or one-hot row stays zero), and the backends report the
//! first such index of the context through its fault record as
//! [`crate::Error::KernelFailed`] at the next sync.

use crate::element::{Numeric, Real, Wide};

use super::random::{philox4x32_10, seed_key};
use super::CmpOp;

/// `out[i] = cmp(a[i], b(i)) as u8`.
pub fn compare_slice<T: Numeric>(op: CmpOp, a: &[T], b: impl Fn(usize) -> T, out: &mut [u8]) {
    for (i, (o, &x)) in out.iter_mut().zip(a).enumerate() {
        *o = u8::from(op.apply(x.load(), b(i).load()));
    }
}

/// The number of positions where `a` and `b` are equal in the compute type (a NaN equals
/// nothing), wrapping past `u32::MAX`.
pub fn count_eq<T: Numeric>(a: &[T], b: &[T]) -> u32 {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.load() == y.load())
        .fold(0u32, |n, _| n.wrapping_add(1))
}

/// `out[i] = if mask[i] != 0 { a[i] } else { b(i) }`.
pub fn where_slice<T: Numeric>(mask: &[u8], a: &[T], b: impl Fn(usize) -> T, out: &mut [T]) {
    for (i, (o, (&m, &x))) in out.iter_mut().zip(mask.iter().zip(a)).enumerate() {
        *o = if m != 0 { x } else { b(i) };
    }
}

/// Row `r` of `out` is row `idx[r]` of the `rows x cols` table `src`; a bad index leaves its
/// row zero and calls `fault`.
pub fn gather_rows<T: Numeric>(
    src: &[T],
    cols: usize,
    idx: &[u32],
    out: &mut [T],
    mut fault: impl FnMut(u64, u64),
) {
    let rows = src.len().checked_div(cols).unwrap_or(0);
    for (o, &i) in out.chunks_exact_mut(cols.max(1)).zip(idx) {
        let i = i as usize;
        if i < rows {
            o.copy_from_slice(&src[i * cols..(i + 1) * cols]);
        } else {
            o.fill(T::ZERO);
            fault(i as u64, rows as u64);
        }
    }
}

/// Adds row `r` of `src` into row `idx[r]` of the `rows x cols` matrix `out`, in order of
/// `r` (floats in the compute type); a bad index is skipped and calls `fault`.
pub fn scatter_add_rows<T: Numeric>(
    src: &[T],
    cols: usize,
    idx: &[u32],
    out: &mut [T],
    mut fault: impl FnMut(u64, u64),
) {
    let rows = out.len().checked_div(cols).unwrap_or(0);
    for (s, &i) in src.chunks_exact(cols.max(1)).zip(idx) {
        let i = i as usize;
        if i < rows {
            for (o, &v) in out[i * cols..(i + 1) * cols].iter_mut().zip(s) {
                *o = o.add(v);
            }
        } else {
            fault(i as u64, rows as u64);
        }
    }
}

/// One-hot rows of `cols` classes: `out[r][idx[r]] = 1`, the rest 0; a bad index leaves its
/// row zero and calls `fault`.
pub fn one_hot_rows<T: Numeric>(
    idx: &[u32],
    cols: usize,
    out: &mut [T],
    mut fault: impl FnMut(u64, u64),
) {
    let one = T::from_wide(Wide::Int(1));
    for (o, &i) in out.chunks_exact_mut(cols.max(1)).zip(idx) {
        o.fill(T::ZERO);
        match o.get_mut(i as usize) {
            Some(v) => *v = one,
            None => fault(u64::from(i), cols as u64),
        }
    }
}

/// `out[i] = start + (first + i) * step` in the compute type (`first + i` converted to it
/// from f64 for floats, wrapping for integers).
pub fn arange_slice<T: Numeric>(start: T, step: T, first: usize, out: &mut [T]) {
    let float = T::DTYPE.is_float();
    for (k, o) in out.iter_mut().enumerate() {
        let i = first + k;
        *o = if float {
            let (s, d) = (start.to_f64(), step.to_f64());
            // In the compute type: `i` converted once, then one multiply and one add.
            T::from_f64(arange_float(s, d, i as u64, T::DTYPE == crate::DType::F64))
        } else {
            start.add(T::from_wide(Wide::Int(i as i128)).mul(step))
        };
    }
}

/// `start + i * step` in f32 (or f64 when `wide`), each operation rounded, as f64.
fn arange_float(start: f64, step: f64, i: u64, wide: bool) -> f64 {
    if wide {
        start + (i as f64) * step
    } else {
        f64::from(<f32 as Real>::from_f64(start) + (i as f32) * <f32 as Real>::from_f64(step))
    }
}

/// The Feistel network's half width for a permutation of `len` elements: half of the bits of
/// `len - 1`, rounded up (at least 1), so that the network permutes `[0, 4^h)`, at most
/// four times `len`.
pub fn feistel_half_bits(len: u64) -> u32 {
    let bits = 64 - len.saturating_sub(1).leading_zeros();
    bits.div_ceil(2).max(1)
}

/// Rounds of the permutation's Feistel network.
pub const FEISTEL_ROUNDS: u32 = 4;

/// Where `v` (below `4^h`) goes under the keyed Feistel network of half width `h`: four
/// rounds `(l, r) -> (r, l ^ F(round, r))`, `F` the first Philox word of counter
/// `(r, round, 0, 0)` under the seed, masked to `h` bits.
pub fn feistel(seed: u64, h: u32, v: u64) -> u64 {
    let mask = (1u64 << h) - 1;
    let (mut l, mut r) = (v >> h, v & mask);
    for round in 0..FEISTEL_ROUNDS {
        let f = philox4x32_10([r as u32, round, 0, 0], seed_key(seed))[0];
        (l, r) = (r, l ^ (u64::from(f) & mask));
    }
    (l << h) | r
}

/// The random permutation of `0..len` keyed by `seed`: position `i` holds the first value
/// below `len` on `i`'s cycle under [`feistel`] (cycle walking, a bijection of `0..len`;
/// four steps at most on average). Each position is computed alone, so every backend gives
/// the same permutation.
pub fn permutation(seed: u64, len: u64, first: u64, out: &mut [u32]) {
    let h = feistel_half_bits(len);
    for (k, o) in out.iter_mut().enumerate() {
        let mut v = first + k as u64;
        loop {
            v = feistel(seed, h, v);
            if v < len {
                break;
            }
        }
        *o = v as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permutation of `0..10` under seed 9.
    const PERMUTATION_9_10: [u32; 10] = [9, 0, 4, 8, 2, 7, 3, 6, 1, 5];

    #[test]
    fn permutations_are_bijections_and_differ_by_seed() {
        for len in [1u64, 2, 3, 5, 16, 17, 1000, 1797] {
            let mut p = vec![0u32; len as usize];
            permutation(9, len, 0, &mut p);
            let mut sorted = p.clone();
            sorted.sort_unstable();
            assert!(
                sorted.iter().enumerate().all(|(i, &v)| v as usize == i),
                "{len}"
            );
            let mut q = vec![0u32; len as usize];
            permutation(10, len, 0, &mut q);
            if len > 16 {
                assert_ne!(p, q, "{len}");
                let fixed = p
                    .iter()
                    .enumerate()
                    .filter(|&(i, &v)| v as usize == i)
                    .count();
                assert!(fixed < 10, "{len}: {fixed} fixed points");
            }
        }
    }

    #[test]
    fn comparisons_count_and_where_give_known_answers() {
        let (a, b) = ([1.0f32, 2.0, 3.0, f32::NAN], [2.0f32, 2.0, 2.0, f32::NAN]);
        let expect = [
            (CmpOp::Eq, [0, 1, 0, 0]),
            (CmpOp::Ne, [1, 0, 1, 1]),
            (CmpOp::Lt, [1, 0, 0, 0]),
            (CmpOp::Le, [1, 1, 0, 0]),
            (CmpOp::Gt, [0, 0, 1, 0]),
            (CmpOp::Ge, [0, 1, 1, 0]),
        ];
        for (op, want) in expect {
            let mut out = [9u8; 4];
            compare_slice(op, &a, |i| b[i], &mut out);
            assert_eq!(out, want, "{op:?}");
        }
        assert_eq!(count_eq(&a, &b), 1);
        assert_eq!(count_eq(&[1i32, 5, 3, 3], &[1, 4, 3, 3]), 3);
        assert_eq!(count_eq::<u8>(&[], &[]), 0);
        let mut out = [0i32; 4];
        where_slice(&[1, 0, 2, 0], &[1, 2, 3, 4], |i| 10 + i as i32, &mut out);
        assert_eq!(out, [1, 11, 3, 13]);
    }

    #[test]
    fn the_first_index_past_the_rows_is_a_fault() {
        let mut faults = Vec::new();
        let mut out = [9.0f32; 4];
        gather_rows(&[1.0f32, 2.0, 3.0, 4.0], 2, &[2, 0], &mut out, |i, n| {
            faults.push((i, n))
        });
        assert_eq!(out, [0.0, 0.0, 1.0, 2.0]);
        let mut acc = [0i32; 4];
        scatter_add_rows(&[1, 2, 3, 4], 2, &[2, 0], &mut acc, |i, n| {
            faults.push((i, n))
        });
        assert_eq!(acc, [3, 4, 0, 0]);
        // Rows past the first, three columns wide.
        let mut wide = [0i32; 6];
        scatter_add_rows(&[1, 2, 3, 4, 5, 6], 3, &[1, 1], &mut wide, |i, n| {
            faults.push((i, n))
        });
        assert_eq!(wide, [0, 0, 0, 5, 7, 9]);
        let mut rows = [0i32; 6];
        gather_rows(&[1, 2, 3, 4, 5, 6], 3, &[1, 0], &mut rows, |i, n| {
            faults.push((i, n))
        });
        assert_eq!(rows, [4, 5, 6, 1, 2, 3]);
        let mut hot = [7u8; 4];
        one_hot_rows(&[2, 1], 2, &mut hot, |i, n| faults.push((i, n)));
        assert_eq!(hot, [0, 0, 0, 1]);
        assert_eq!(faults, [(2, 2), (2, 2), (2, 2)]);
    }

    #[test]
    fn arange_counts_from_its_first_index() {
        let mut f = [0.0f32; 3];
        arange_slice(0.5f32, 0.25, 2, &mut f);
        assert_eq!(f, [1.0, 1.25, 1.5]);
        let mut d = [0.0f64; 2];
        arange_slice(1.0f64, 0.1, 3, &mut d);
        assert_eq!(d, [1.0 + 3.0 * 0.1, 1.0 + 4.0 * 0.1]);
        // f32 rounds each step in f32: 0.1f32 * 3 is not 0.3f32 computed in f64.
        let mut t = [0.0f32; 1];
        arange_slice(0.0f32, 0.1, 3, &mut t);
        assert_eq!(t[0], 3.0f32 * 0.1f32);
        let mut i = [0i32; 3];
        arange_slice(-4i32, 3, 1, &mut i);
        assert_eq!(i, [-1, 2, 5]);
        let mut u = [0u8; 2];
        arange_slice(250u8, 3, 1, &mut u);
        assert_eq!(u, [253, 0], "integers wrap");
    }

    #[test]
    fn the_feistel_network_is_pinned() {
        for (len, h) in [
            (0, 1),
            (1, 1),
            (2, 1),
            (4, 1),
            (5, 2),
            (16, 2),
            (17, 3),
            (1 << 32, 16),
        ] {
            assert_eq!(feistel_half_bits(len), h, "{len}");
        }
        // Permutations are part of a seed's meaning: every backend and every version gives
        // these.
        let mut p = [0u32; 10];
        permutation(9, 10, 0, &mut p);
        assert_eq!(p, PERMUTATION_9_10);
        let mut tail = [0u32; 4];
        permutation(9, 10, 6, &mut tail);
        assert_eq!(tail, PERMUTATION_9_10[6..]);
    }

    #[test]
    fn bad_indices_are_skipped_and_reported() {
        let src = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [9.0f32; 4];
        let mut faults = Vec::new();
        gather_rows(&src, 2, &[1, 5], &mut out, |i, n| faults.push((i, n)));
        assert_eq!(out, [3.0, 4.0, 0.0, 0.0]);
        assert_eq!(faults, [(5, 2)]);
        let mut acc = [0i32; 4];
        scatter_add_rows(&[1, 2, 3, 4, 5, 6], 2, &[1, 1, 2], &mut acc, |i, n| {
            faults.push((i, n))
        });
        assert_eq!(acc, [0, 0, 4, 6]);
        assert_eq!(faults[1], (2, 2));
        let mut hot = [7u8; 6];
        one_hot_rows(&[2, 3], 3, &mut hot, |i, n| faults.push((i, n)));
        assert_eq!(hot, [0, 0, 1, 0, 0, 0]);
        assert_eq!(faults[2], (3, 3));
    }
}
