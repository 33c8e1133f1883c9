//! Float sums in gpukit-core's order, fast: [`crate::SUM_CHUNK`] and
//! [`crate::SUM_PARTIALS`] define the order (each chunk of that many elements added in
//! 32 interleaved partial sums, then the chunks' sums in order) and
//! [`crate::ordered_sum`] writes it out; this module computes the same bits on the
//! widest vectors the CPU has.
//!
//! A chunk's partials are independent chains, which [`chunk_sum`] and [`chunk_dot`] run as
//! vector additions (SSE2 on any x86-64, AVX2 or AVX-512 chosen at run time: 2, 4 or 8 f64
//! lanes, the same additions in the same order on every path); blocks of [`SUM_LANES`]
//! chunks may be summed on several cores at once and their chunks' sums then added in order
//! ([`block_sums`], [`add_chunk_sums`]). None of it changes a bit of the result, which the
//! tests check against gpukit-core's definition.

use crate::{add_to_partials, chunk_dot_of, combine_partials, Numeric, SUM_CHUNK, SUM_PARTIALS};

/// Chunks per block of [`block_sums`] (and rows per group of the row-wise sums on several
/// cores).
pub const SUM_LANES: usize = 4;

/// Elements per block of [`block_sums`] and [`block_dots`]: [`SUM_LANES`] chunks.
pub const SUM_BLOCK: usize = SUM_LANES * SUM_CHUNK;

/// [`crate::ordered_sum`]: the f64 sum of `xs` in the order [`SUM_CHUNK`] defines
/// (`-0.0` when empty).
pub fn ordered_sum<T: Numeric>(xs: &[T]) -> f64 {
    if xs.is_empty() {
        return -0.0;
    }
    add_chunk_sums(xs.chunks(SUM_BLOCK).flat_map(block_sums))
}

/// The f64 sum of the products of `xs` and `ys` (their common length) in the order
/// [`SUM_CHUNK`] defines (`-0.0` when empty): the value `Numeric::dot` rounds.
pub fn ordered_dot<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    let n = xs.len().min(ys.len());
    if n == 0 {
        return -0.0;
    }
    let blocks = xs[..n].chunks(SUM_BLOCK).zip(ys[..n].chunks(SUM_BLOCK));
    add_chunk_sums(blocks.flat_map(|(x, y)| block_dots(x, y)))
}

/// The sums of the (at most [`SUM_LANES`]) chunks of one block, the block being the `k`th
/// [`SUM_BLOCK`] elements of an input: so the chunks' sums of a whole input are its blocks'
/// sums in order, which several cores can compute at once.
pub fn block_sums<T: Numeric>(block: &[T]) -> ChunkSums {
    debug_assert!(block.len() <= SUM_BLOCK);
    ChunkSums::each(block.chunks(SUM_CHUNK).map(chunk_sum))
}

/// [`block_sums`] of the products of two blocks of equal length.
pub fn block_dots<T: Numeric>(xs: &[T], ys: &[T]) -> ChunkSums {
    debug_assert!(xs.len() == ys.len() && xs.len() <= SUM_BLOCK);
    ChunkSums::each(
        xs.chunks(SUM_CHUNK)
            .zip(ys.chunks(SUM_CHUNK))
            .map(|(x, y)| chunk_dot(x, y)),
    )
}

/// The sums of one block's chunks, in order (an iterator over at most [`SUM_LANES`] f64s).
#[derive(Clone, Copy, Debug)]
pub struct ChunkSums {
    sums: [f64; SUM_LANES],
    len: usize,
}

impl ChunkSums {
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
pub fn add_chunk_sums(sums: impl IntoIterator<Item = f64>) -> f64 {
    sums.into_iter().reduce(|a, b| a + b).unwrap_or(0.0)
}

/// `crate::chunk_sum_of` on the widest vectors the CPU has ([`add_partials`]).
pub fn chunk_sum<T: Numeric>(xs: &[T]) -> f64 {
    let mut p = [-0.0f64; SUM_PARTIALS];
    add_partials(&mut p, xs);
    combine_partials(p)
}

/// `crate::add_to_partials` on the widest vectors the CPU has (SSE2, AVX2 or
/// AVX-512, chosen at run time: the same additions in the same order on every path).
pub fn add_partials<T: Numeric>(p: &mut [f64; SUM_PARTIALS], xs: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, checked just above.
            return unsafe { sum_avx512(p, xs) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { sum_avx2(p, xs) };
        }
    }
    add_to_partials(p, xs)
}

/// `crate::chunk_dot_of`, dispatched as [`chunk_sum`].
pub fn chunk_dot<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, checked just above.
            return unsafe { dot_avx512(xs, ys) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { dot_avx2(xs, ys) };
        }
    }
    chunk_dot_of(xs, ys)
}

/// `add_to_partials` compiled for AVX2.
///
/// # Safety
///
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2<T: Numeric>(p: &mut [f64; SUM_PARTIALS], xs: &[T]) {
    add_to_partials(p, xs)
}

/// `add_to_partials` compiled for AVX-512.
///
/// # Safety
///
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512<T: Numeric>(p: &mut [f64; SUM_PARTIALS], xs: &[T]) {
    add_to_partials(p, xs)
}

/// `chunk_dot_of` compiled for AVX2.
///
/// # Safety
///
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    chunk_dot_of(xs, ys)
}

/// `chunk_dot_of` compiled for AVX-512.
///
/// # Safety
///
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    chunk_dot_of(xs, ys)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`ordered_sum`], [`ordered_dot`] and the blocks' sums (on whatever
    /// vectors this CPU dispatches to) give the bits of gpukit-core's definition, at every
    /// length around the partials', chunk and block boundaries, for f64 and f32. f64 data of
    /// wide magnitudes, so that another order is another number.
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
        let defined = |terms: &[f64]| crate::ordered_sum(terms);
        let defined_f32 = |terms: &[f32]| crate::ordered_sum(terms);
        let (c, b) = (SUM_CHUNK, SUM_BLOCK);
        let longest = if cfg!(miri) { 200 } else { 2 * b + 3 * c + 5 };
        // A full block (a short input under Miri).
        let b = b.min(longest - 10);
        let xs: Vec<f64> = (0..longest).map(|_| next()).collect();
        let ys: Vec<f64> = (0..longest).map(|_| next()).collect();
        let lengths: &[usize] = if cfg!(miri) {
            // Miri checks the unsafe dispatch, not the order at every boundary: short inputs.
            &[1, 31, 32, 33, 95]
        } else {
            &[
                1,
                31,
                32,
                33,
                95,
                c - 1,
                c,
                c + 1,
                3 * c,
                b - 1,
                b,
                b + 1,
                2 * b,
                longest,
            ]
        };
        for &n in lengths {
            let (x, y) = (&xs[..n], &ys[..n]);
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            assert_eq!(
                ordered_sum(&x32).to_bits(),
                defined_f32(&x32).to_bits(),
                "f32 sum of {n}"
            );
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
        // Signed zeros and NaN in a full block keep their meaning.
        let (zeros, ones) = (vec![-0.0f64; b], vec![1.0f64; b]);
        assert_eq!(ordered_sum(&zeros).to_bits(), (-0.0f64).to_bits());
        assert_eq!(ordered_dot(&zeros, &ones).to_bits(), (-0.0f64).to_bits());
        assert_eq!(ordered_sum::<f64>(&[]).to_bits(), (-0.0f64).to_bits());
        let mut nan = vec![1.0f32; b];
        nan[b - 7] = f32::NAN;
        assert!(ordered_sum(&nan).is_nan());
        assert!(ordered_dot(&nan, &vec![1.0f32; b]).is_nan());
        // Unequal lengths: the dot of the common length.
        let short = ordered_dot(&xs[..b + 3], &ys[..b]);
        assert_eq!(short.to_bits(), ordered_dot(&xs[..b], &ys[..b]).to_bits());
    }
}
