//! Reductions on the CPU: per row (a whole array is one row), long rows in chunks of
//! [`SUM_CHUNK`] across the cores and many rows spread over them, with the bits of
//! gpukit-core's references whatever the split. The native bodies of the reduction kernels.

use crate::element::Numeric;
use crate::optable::ReduceOp;
use crate::SUM_CHUNK;

use super::split::{each_piece, map_chunks, PIECE, SPLIT_FROM};
use super::sum::{self, add_chunk_sums, block_dots, block_sums, ChunkSums, SUM_BLOCK, SUM_LANES};

/// `out[r] = f(row r of x)` for the `cols`-wide rows of `x`, the rows spread over the
/// machine's cores when `x` has at least [`SPLIT_FROM`] elements in more than one row (each
/// row's result is the same wherever it is computed).
pub(crate) fn by_rows<T: Sync, U: Send>(
    x: &[T],
    cols: usize,
    out: &mut [U],
    f: impl Fn(&[T]) -> U + Sync,
) {
    // Empty rows: `chunks` would yield none; every output is `f(&[])`.
    let row = |r: usize| &x[(r * cols).min(x.len())..((r + 1) * cols).min(x.len())];
    if out.len() > 1 && x.len() >= SPLIT_FROM {
        // Pieces of whole rows, about PIECE elements each.
        let per = (PIECE / cols.max(1)).max(1);
        each_piece(out, per, |k, o| {
            for (j, o) in o.iter_mut().enumerate() {
                *o = f(row(k * per + j));
            }
        });
    } else {
        for (r, o) in out.iter_mut().enumerate() {
            *o = f(row(r));
        }
    }
}

/// `out[r] = f(s_r)`, `s_r` the f64 sum of row `r` of `x` in the order gpukit-core defines
/// ([`sum::ordered_sum`]: each row's partial sums are independent chains on vectors), the
/// rows `cols` wide; groups of [`SUM_LANES`] rows spread over the cores from [`SPLIT_FROM`]
/// elements.
pub(crate) fn sum_rows<T: Numeric, U: Send>(
    x: &[T],
    cols: usize,
    out: &mut [U],
    f: impl Fn(f64) -> U + Sync,
) {
    let row = |r: usize| &x[(r * cols).min(x.len())..((r + 1) * cols).min(x.len())];
    let group = |g: usize, o: &mut [U]| {
        for (k, o) in o.iter_mut().enumerate() {
            *o = f(sum::ordered_sum(row(g * SUM_LANES + k)));
        }
    };
    if out.len() > SUM_LANES && x.len() >= SPLIT_FROM {
        // Pieces of whole groups, about PIECE elements each.
        let groups = (PIECE / (cols.max(1) * SUM_LANES)).max(1);
        each_piece(out, groups * SUM_LANES, |k, o| {
            for (j, o) in o.chunks_mut(SUM_LANES).enumerate() {
                group(k * groups + j, o);
            }
        });
    } else {
        for (g, o) in out.chunks_mut(SUM_LANES).enumerate() {
            group(g, o);
        }
    }
}

/// A value reduction (sum, mean, min, max) of one row, as `ReduceOp::value` defines it; a
/// row of at least [`SPLIT_FROM`] elements is reduced in chunks of [`SUM_CHUNK`] across the
/// machine's cores, then the chunks' results in order: the order gpukit-core defines for
/// float sums and means, and the same bits for the rest (integer sums wrap; min and max
/// keep the first of equals and ignore NaNs, whatever the grouping).
pub(crate) fn value_reduce<T: Numeric>(op: ReduceOp, float: bool, x: &[T]) -> Option<T> {
    if x.len() < SPLIT_FROM {
        return op.value(x);
    }
    Some(match op {
        // Wrapping sums: any grouping gives the same bits.
        ReduceOp::Sum if !float => map_chunks(x, SUM_CHUNK, |_, c| T::sum(c))
            .into_iter()
            .fold(T::ZERO, T::add),
        ReduceOp::Sum | ReduceOp::Mean => {
            let blocks: Vec<ChunkSums> = map_chunks(x, SUM_BLOCK, |_, c| block_sums(c));
            return op.of_sum(add_chunk_sums(blocks.into_iter().flatten()), x.len());
        }
        ReduceOp::Min | ReduceOp::Max => {
            let each: Vec<T> = map_chunks(x, SUM_CHUNK, |_, c| op.value(c))
                .into_iter()
                .flatten()
                .collect();
            return op.value(&each);
        }
        ReduceOp::ArgMin | ReduceOp::ArgMax => return None,
    })
}

/// An index reduction (argmin, argmax) of one row, as `ReduceOp::index` defines it; a long
/// row in chunks across the cores, then the chunks' winners ranked in order by the same
/// `ReduceOp::index` (the first best element is the first best of the first chunk holding
/// one: the same index).
pub(crate) fn arg_reduce<T: Numeric>(op: ReduceOp, x: &[T]) -> Option<u32> {
    if x.len() < SPLIT_FROM {
        return op.index(x);
    }
    let winners: Vec<(usize, T)> = map_chunks(x, SUM_CHUNK, |k, c| {
        let i = op.index(c)? as usize;
        Some((k * SUM_CHUNK + i, c[i]))
    })
    .into_iter()
    .flatten()
    .collect();
    let values: Vec<T> = winners.iter().map(|&(_, v)| v).collect();
    let best = op.index(&values)? as usize;
    u32::try_from(winners[best].0).ok()
}

/// `Numeric::dot`: for floats the f64 sum of the products in gpukit-core's order, side by
/// side within a block and, from [`SPLIT_FROM`] elements, blocks across the cores; integer
/// sums wrap, in chunks across the cores from [`SPLIT_FROM`].
pub(crate) fn dot_of<T: Numeric>(float: bool, x: &[T], y: &[T]) -> T {
    match (float, x.len() < SPLIT_FROM) {
        (false, true) => T::dot(x, y),
        (false, false) => map_chunks(x, SUM_CHUNK, |k, a| {
            T::dot(a, &y[k * SUM_CHUNK..k * SUM_CHUNK + a.len()])
        })
        .into_iter()
        .fold(T::ZERO, T::add),
        (true, true) => T::from_f64(sum::ordered_dot(x, y)),
        (true, false) => {
            let sums: Vec<ChunkSums> = map_chunks(x, SUM_BLOCK, |k, a| {
                block_dots(a, &y[k * SUM_BLOCK..k * SUM_BLOCK + a.len()])
            });
            T::from_f64(add_chunk_sums(sums.into_iter().flatten()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reductions and dots large enough to be spread over the cores give the bits of the
    /// same work done in one pass in the defined order (gpukit-core's references): long
    /// single rows in chunks, many rows row by row; with NaNs, ties (argmin/argmax take the
    /// first) and signed zeros (min/max keep the first of equals).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe code over 2^20 elements split across rayon: hours interpreted"
    )]
    fn split_reductions_equal_the_reference() {
        let n = 3 * SPLIT_FROM + 12_345;
        let mut x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 100_003) as f32 * 1e-3 - 50.0)
            .collect();
        // The largest and smallest value twice, in different chunks; NaNs and zeros.
        let (hi, lo) = (1e6f32, -1e6f32);
        x[SUM_CHUNK + 5] = hi;
        x[3 * SUM_CHUNK + 1] = hi;
        x[7] = lo;
        x[n - 3] = lo;
        x[SUM_CHUNK - 1] = f32::NAN;
        x[2 * SUM_CHUNK] = f32::NAN;
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 31) % 977) as f32 * 0.01 - 4.0)
            .collect();
        let bits = |v: Option<f32>| v.map(f32::to_bits);
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max] {
            let clean: Vec<f32> = x
                .iter()
                .map(|v| if v.is_nan() { 0.5 } else { *v })
                .collect();
            for data in [&x, &clean] {
                assert_eq!(
                    bits(value_reduce(op, true, data)),
                    bits(op.value(data)),
                    "{op:?}"
                );
            }
        }
        // f64 sums show any other order of adding (f32 results round it away).
        let w: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 100_003) as f64 * 1.1e-3 * if i % 3 == 0 { 1e9 } else { -1.0 })
            .collect();
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            let got = value_reduce(op, true, &w).map(f64::to_bits);
            assert_eq!(got, op.value(&w).map(f64::to_bits), "f64 {op:?}");
        }
        let plain: f64 = w.iter().sum();
        assert_ne!(
            ReduceOp::Sum.value(&w),
            Some(plain),
            "the data tells orders apart"
        );
        for len in [n, SPLIT_FROM - 1, SUM_BLOCK + 3] {
            assert_eq!(
                dot_of(true, &w[..len], &w[..len]).to_bits(),
                Numeric::dot(&w[..len], &w[..len]).to_bits(),
                "f64 dot of {len}"
            );
        }
        for op in [ReduceOp::ArgMin, ReduceOp::ArgMax] {
            assert_eq!(arg_reduce(op, &x), op.index(&x), "{op:?}");
        }
        assert_eq!(
            arg_reduce(ReduceOp::ArgMax, &x),
            Some((SUM_CHUNK + 5) as u32)
        );
        assert_eq!(arg_reduce(ReduceOp::ArgMin, &x), Some(7));
        // All NaN but one chunk's element: the chunk holding a number wins.
        let mut nans = vec![f32::NAN; n];
        nans[2 * SUM_CHUNK + 9] = 1.0;
        assert_eq!(
            arg_reduce(ReduceOp::ArgMax, &nans),
            ReduceOp::ArgMax.index(&nans)
        );
        assert_eq!(
            dot_of(true, &x, &y).to_bits(),
            Numeric::dot(&x[..], &y[..]).to_bits()
        );
        // Signed zeros: min and max keep the first of equal values.
        let mut z = vec![0.0f32; n];
        z[SUM_CHUNK * 2 + 3] = -0.0;
        z[0] = -0.0;
        for op in [ReduceOp::Min, ReduceOp::Max] {
            assert_eq!(
                bits(value_reduce(op, true, &z)),
                bits(op.value(&z)),
                "{op:?} of zeros"
            );
        }
        // Integers wrap: any grouping gives the same sum.
        let xi: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(1_000_003)).collect();
        assert_eq!(
            value_reduce(ReduceOp::Sum, false, &xi),
            ReduceOp::Sum.value(&xi)
        );
        assert_eq!(
            value_reduce(ReduceOp::Mean, false, &xi),
            ReduceOp::Mean.value(&xi)
        );
        assert_eq!(dot_of(false, &xi, &xi), Numeric::dot(&xi[..], &xi[..]));
        // Many rows: each row's result, wherever computed.
        let cols = 1000;
        let rows = n / cols;
        let mut split = vec![0f32; rows];
        by_rows(&x[..rows * cols], cols, &mut split, |r| {
            value_reduce(ReduceOp::Sum, true, r).unwrap_or(0.0)
        });
        for (r, s) in split.iter().enumerate() {
            let want = ReduceOp::Sum
                .value(&x[r * cols..(r + 1) * cols])
                .unwrap_or(0.0);
            assert_eq!(s.to_bits(), want.to_bits(), "row {r}");
        }
        // Sums and means of many rows (f64 data that tells orders apart): each row's bits; across the cores, in one pass, with a last group short
        // and rows longer than a chunk.
        for (cols, rows) in [(1000, n / 1000), (1000, 7), (SUM_CHUNK + 3, 6)] {
            let w = &w[..rows * cols];
            assert!(rows % SUM_LANES != 0, "a short last group");
            for op in [ReduceOp::Sum, ReduceOp::Mean] {
                let mut got = vec![0f64; rows];
                sum_rows(w, cols, &mut got, |s| {
                    if op == ReduceOp::Mean {
                        s / cols as f64
                    } else {
                        s
                    }
                });
                for (r, g) in got.iter().enumerate() {
                    let want = op.value(&w[r * cols..(r + 1) * cols]).map(f64::to_bits);
                    assert_eq!(
                        Some(g.to_bits()),
                        want,
                        "{op:?} of row {r} of {rows}x{cols}"
                    );
                }
            }
        }
    }
}
