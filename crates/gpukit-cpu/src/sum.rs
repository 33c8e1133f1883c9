//! Float sums in gpukit-core's order, fast: [`gpukit_core::SUM_CHUNK`] defines the order
//! (each chunk of that many elements added in order, then the chunks' sums in order) and
//! [`gpukit_core::ordered_sum`] writes it out plainly; this module computes the same bits
//! several times faster.
//!
//! The chunks of a block of [`SUM_LANES`] chunks are summed side by side, each in its own
//! order (independent chains of additions that a core overlaps), and blocks may be summed on
//! several cores at once and their chunks' sums then added in order ([`block_sums`],
//! [`add_chunk_sums`]); the sums of several rows go side by side the same way
//! ([`ordered_sums`]). None of it changes a bit of the result, which the tests check against
//! gpukit-core's definition.

use gpukit_core::{Numeric, SUM_CHUNK};

/// Chunks per block: the chunks of a full block are summed side by side.
pub(crate) const SUM_LANES: usize = 4;

/// Elements per block of [`block_sums`] and [`block_dots`]: [`SUM_LANES`] chunks.
pub(crate) const SUM_BLOCK: usize = SUM_LANES * SUM_CHUNK;

/// [`gpukit_core::ordered_sum`]: the f64 sum of `xs` in the order [`SUM_CHUNK`] defines
/// (`-0.0` when empty).
pub(crate) fn ordered_sum<T: Numeric>(xs: &[T]) -> f64 {
    if xs.is_empty() {
        return -0.0;
    }
    add_chunk_sums(xs.chunks(SUM_BLOCK).flat_map(block_sums))
}

/// The f64 sum of the products of `xs` and `ys` (their common length) in the order
/// [`SUM_CHUNK`] defines (`-0.0` when empty): the value `Numeric::dot` rounds.
pub(crate) fn ordered_dot<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    let n = xs.len().min(ys.len());
    if n == 0 {
        return -0.0;
    }
    let blocks = xs[..n].chunks(SUM_BLOCK).zip(ys[..n].chunks(SUM_BLOCK));
    add_chunk_sums(blocks.flat_map(|(x, y)| block_dots(x, y)))
}

/// The in-order f64 sums of the (at most [`SUM_LANES`]) chunks of one block, the block being
/// the `k`th [`SUM_BLOCK`] elements of an input: so the chunks' sums of a whole input are its
/// blocks' sums in order, which several cores can compute at once.
pub(crate) fn block_sums<T: Numeric>(block: &[T]) -> ChunkSums {
    debug_assert!(block.len() <= SUM_BLOCK);
    if let Ok(lanes) = <&[T; SUM_BLOCK]>::try_from(block) {
        let (a, rest) = lanes.split_at(SUM_CHUNK);
        let (b, rest) = rest.split_at(SUM_CHUNK);
        let (c, d) = rest.split_at(SUM_CHUNK);
        return ChunkSums::full(lane_sums([a, b, c, d]));
    }
    ChunkSums::each(block.chunks(SUM_CHUNK).map(f64_sum))
}

/// [`ordered_sum`] of each of [`SUM_LANES`] rows of one length, side by side: the rows'
/// chunks are summed together, then each row adds its own chunks' sums in order (the bits
/// of one row at a time).
pub(crate) fn ordered_sums<T: Numeric>(rows: [&[T]; SUM_LANES]) -> [f64; SUM_LANES] {
    let n = rows[0].len();
    if rows.iter().any(|r| r.len() != n) {
        return rows.map(ordered_sum);
    }
    let mut total = [-0.0f64; SUM_LANES];
    for start in (0..n).step_by(SUM_CHUNK) {
        let end = n.min(start + SUM_CHUNK);
        let sums = lane_sums(rows.map(|r| &r[start..end]));
        if start == 0 {
            total = sums;
        } else {
            for (t, s) in total.iter_mut().zip(sums) {
                *t += s;
            }
        }
    }
    total
}

/// The in-order f64 sums of [`SUM_LANES`] slices of one length, side by side (independent
/// chains, each starting where `f64_sum` does).
fn lane_sums<T: Numeric>([a, b, c, d]: [&[T]; SUM_LANES]) -> [f64; SUM_LANES] {
    debug_assert!(b.len() == a.len() && c.len() == a.len() && d.len() == a.len());
    let mut s = [-0.0f64; SUM_LANES];
    for (((a, b), c), d) in a.iter().zip(b).zip(c).zip(d) {
        s[0] += a.to_f64();
        s[1] += b.to_f64();
        s[2] += c.to_f64();
        s[3] += d.to_f64();
    }
    s
}

/// [`block_sums`] of the products of two blocks of equal length.
pub(crate) fn block_dots<T: Numeric>(xs: &[T], ys: &[T]) -> ChunkSums {
    debug_assert!(xs.len() == ys.len() && xs.len() <= SUM_BLOCK);
    if let (Ok(x), Ok(y)) = (
        <&[T; SUM_BLOCK]>::try_from(xs),
        <&[T; SUM_BLOCK]>::try_from(ys),
    ) {
        let mut s = [-0.0f64; SUM_LANES];
        for i in 0..SUM_CHUNK {
            for (l, acc) in s.iter_mut().enumerate() {
                let j = l * SUM_CHUNK + i;
                *acc += x[j].to_f64() * y[j].to_f64();
            }
        }
        return ChunkSums::full(s);
    }
    ChunkSums::each(
        xs.chunks(SUM_CHUNK)
            .zip(ys.chunks(SUM_CHUNK))
            .map(|(x, y)| f64_dot(x, y)),
    )
}

/// The sums of one block's chunks, in order (an iterator over at most [`SUM_LANES`] f64s).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkSums {
    sums: [f64; SUM_LANES],
    len: usize,
}

impl ChunkSums {
    fn full(sums: [f64; SUM_LANES]) -> Self {
        ChunkSums {
            sums,
            len: SUM_LANES,
        }
    }

    fn each(sums: impl Iterator<Item = f64>) -> Self {
        let mut all = ChunkSums {
            sums: [0.0; SUM_LANES],
            len: 0,
        };
        for (slot, sum) in all.sums.iter_mut().zip(sums) {
            *slot = sum;
            all.len += 1;
        }
        all
    }
}

impl IntoIterator for ChunkSums {
    type Item = f64;
    type IntoIter = std::iter::Take<std::array::IntoIter<f64, SUM_LANES>>;

    fn into_iter(self) -> Self::IntoIter {
        self.sums.into_iter().take(self.len)
    }
}

/// Adds up the sums of consecutive chunks in order (`0.0` when there are none).
pub(crate) fn add_chunk_sums(sums: impl IntoIterator<Item = f64>) -> f64 {
    sums.into_iter().reduce(|a, b| a + b).unwrap_or(0.0)
}

/// The in-order f64 sum of one chunk (exact widening of each element).
fn f64_sum<T: Numeric>(xs: &[T]) -> f64 {
    xs.iter().map(|x| x.to_f64()).sum()
}

/// The in-order f64 sum of the products of one chunk's elements.
fn f64_dot<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    xs.iter()
        .zip(ys)
        .map(|(x, y)| x.to_f64() * y.to_f64())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`ordered_sum`], [`ordered_dot`], the blocks' sums and [`ordered_sums`] (side-by-side
    /// chunks in full blocks, rows side by side) give the bits of gpukit-core's definition,
    /// at every length around the chunk and block boundaries. f64 data of wide magnitudes,
    /// so that another order is another number.
    #[test]
    fn fast_sums_give_the_bits_of_the_defined_order() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = state;
            let mag = 2f64.powi((x % 80) as i32 - 40);
            if x & (1 << 40) == 0 {
                mag * (x >> 11) as f64 / (1u64 << 53) as f64
            } else {
                -mag * (x >> 13) as f64 / (1u64 << 51) as f64
            }
        };
        let defined = |terms: &[f64]| gpukit_core::ordered_sum(terms);
        let (c, b) = (SUM_CHUNK, SUM_BLOCK);
        let longest = 2 * b + 3 * c + 5;
        let xs: Vec<f64> = (0..longest).map(|_| next()).collect();
        let ys: Vec<f64> = (0..longest).map(|_| next()).collect();
        for n in [1, c - 1, c, c + 1, 3 * c, b - 1, b, b + 1, 2 * b, longest] {
            let (x, y) = (&xs[..n], &ys[..n]);
            assert_eq!(ordered_sum(x).to_bits(), defined(x).to_bits(), "sum of {n}");
            let products: Vec<f64> = x.iter().zip(y).map(|(a, b)| a * b).collect();
            let dot = ordered_dot(x, y).to_bits();
            assert_eq!(dot, defined(&products).to_bits(), "dot of {n}");
            assert_eq!(dot, Numeric::dot(x, y).to_bits(), "Numeric::dot of {n}");
            // The blocks' sums, as the backend computes them on several cores.
            let blocks = x.chunks(SUM_BLOCK).flat_map(block_sums);
            assert_eq!(
                add_chunk_sums(blocks).to_bits(),
                defined(x).to_bits(),
                "{n}"
            );
        }
        // Four rows side by side: each row's bits, whatever its length (unequal: one by one).
        for n in [0, 1, 1000, c + 3, 2 * c] {
            let rows = [0, 1, 2, 3].map(|k| &xs[k * (n + 1)..][..n]);
            let want = rows.map(|r| defined(r).to_bits());
            assert_eq!(ordered_sums(rows).map(f64::to_bits), want, "rows of {n}");
            let uneven = [rows[0], rows[1], &xs[..n + 1], rows[3]];
            let want = uneven.map(|r| defined(r).to_bits());
            assert_eq!(
                ordered_sums(uneven).map(f64::to_bits),
                want,
                "uneven rows of {n}"
            );
        }
        // Signed zeros and NaN in a full block's lanes keep their meaning.
        let (zeros, ones) = (vec![-0.0f64; b], vec![1.0f64; b]);
        assert_eq!(ordered_sum(&zeros).to_bits(), (-0.0f64).to_bits());
        assert_eq!(ordered_dot(&zeros, &ones).to_bits(), (-0.0f64).to_bits());
        assert_eq!(ordered_sum::<f64>(&[]).to_bits(), (-0.0f64).to_bits());
        let mut nan = vec![1.0f32; b];
        nan[2 * c + 7] = f32::NAN;
        assert!(ordered_sum(&nan).is_nan());
        assert!(ordered_dot(&nan, &vec![1.0f32; b]).is_nan());
        // Unequal lengths: the dot of the common length.
        let short = ordered_dot(&xs[..b + 3], &ys[..b]);
        assert_eq!(short.to_bits(), ordered_dot(&xs[..b], &ys[..b]).to_bits());
    }
}
