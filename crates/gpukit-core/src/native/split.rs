//! Spreading an op over the machine's cores: large element-wise work in pieces of whole rows
//! across rayon's pool (shared by every stream), sized by the op's cost class, so that the
//! result is the same bits however it is split.
//!
//! Every split goes through [`run_all`], a list of boxed jobs run by one instantiation of
//! rayon's machinery: written generically per op and element type, rayon's join and job
//! code was instantiated for each, most of this crate's machine code and build time.

use crate::{MathFn, Numeric, RhsSlice};
use rayon::prelude::*;

/// One piece of a split op.
pub type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// Runs `jobs` across rayon's pool; returns once every one has run.
pub fn run_all(jobs: Vec<Job<'_>>) {
    jobs.into_par_iter().for_each(|job| job());
}

/// `f(k, chunk)` for each `chunk`-sized piece of `x` (the last may be shorter), run across
/// the cores, the results in order.
pub fn map_chunks<T: Sync, R: Send>(
    x: &[T],
    chunk: usize,
    f: impl Fn(usize, &[T]) -> R + Sync,
) -> Vec<R> {
    let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None)
        .take(x.len().div_ceil(chunk))
        .collect();
    let f = &f;
    run_all(
        out.iter_mut()
            .zip(x.chunks(chunk))
            .enumerate()
            .map(|(k, (slot, c))| Box::new(move || *slot = Some(f(k, c))) as Job<'_>)
            .collect(),
    );
    out.into_iter().flatten().collect()
}

/// `f(k, piece)` for each `per`-sized piece of `out` (the last may be shorter), run across
/// the cores.
pub fn each_piece<T: Send>(out: &mut [T], per: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let f = &f;
    run_all(
        out.chunks_mut(per)
            .enumerate()
            .map(|(k, o)| Box::new(move || f(k, o)) as Job<'_>)
            .collect(),
    );
}

/// Elements from which an element-wise op is split across the machine's cores (rayon's
/// pool, shared by every stream); smaller ones run whole on the stream's worker.
pub const SPLIT_FROM: usize = 1 << 20;
/// Elements per piece of a split op (rounded down to whole rows).
pub const PIECE: usize = 1 << 16;
/// The work of an element-wise op per element, in units of a memory-bound one (`add`): an
/// op calling the math library per element (`exp`, `tanh`, `pow`, softmax, ...) takes
/// about 3-4 ns per element here against a fraction of a nanosecond, so it is split from
/// [`SPLIT_FROM`] / `MATH` elements, in pieces of [`PIECE`] / `MATH`.
pub const MATH: usize = 16;
/// The work per element of an f32 op run through the vectorised math (`ops::vmath`: `exp`,
/// `tanh`, ..., softmax), in the same units: 0.17-0.25 ns an element on one core here (in
/// the cache), about twice `add`'s (the exceptions, `softplus` and `pow`, keep [`MATH`]).
/// So they are split from 512 Ki elements: at 256 Ki (about 50 us on one core) the split
/// measured bimodal on this project's 2-core VM, `tanh` 0.12 ns an element where the pool's
/// threads were awake and 0.26 where they were not, against 0.18 unsplit every time.
pub const VMATH: usize = 2;

/// The work per element of an op whose `math` column is `math`: [`MATH`] when it calls the
/// math library, else 1.
pub fn work(math: Option<MathFn>) -> usize {
    if math.is_some() {
        MATH
    } else {
        1
    }
}

/// Runs `f(start, piece)` over `out` in pieces of whole `row`s, in parallel when `out` holds
/// at least [`SPLIT_FROM`] elements' worth of work (`work` per element, [`MATH`] or 1), else
/// once over all of it. For element-wise work, whose every output depends only on inputs at
/// its own index (and its row's broadcast vector), the result is the same bits however it
/// is split.
pub fn pieces<T: Send>(out: &mut [T], row: usize, work: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if out.len().saturating_mul(work) < SPLIT_FROM {
        return f(0, out);
    }
    let piece = (PIECE / work / row.max(1)).max(1) * row.max(1);
    each_piece(out, piece, |i, o| f(i * piece, o));
}

/// `src[start..start + len]`, for the piece of a split op.
pub fn part<T>(src: Option<&[T]>, start: usize, len: usize) -> Option<&[T]> {
    src.map(|s| &s[start..start + len])
}

/// A binary op over `out` (`rows x cols`), split by [`pieces`] into whole rows for a row or
/// column vector (anywhere for an array or a scalar), each piece given its part of the
/// operands.
pub fn binary_pieces<T: Numeric>(
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
    work: usize,
    map: impl Fn(Option<&[T]>, RhsSlice<'_, T>, usize, &mut [T]) + Sync,
) {
    let row = match rhs {
        RhsSlice::Row(_) | RhsSlice::Col(_) => cols,
        RhsSlice::Array(_) | RhsSlice::Scalar(_) => 1,
    };
    pieces(out, row, work, |start, o| {
        let n = o.len();
        let (rhs, cols) = match rhs {
            RhsSlice::Array(b) => (RhsSlice::Array(&b[start..start + n]), n),
            RhsSlice::Scalar(v) => (RhsSlice::Scalar(v), n),
            RhsSlice::Row(v) => (RhsSlice::Row(v), cols),
            RhsSlice::Col(v) => (RhsSlice::Col(&v[start / cols..(start + n) / cols]), cols),
        };
        map(part(src, start, n), rhs, cols, o);
    });
}
