//! Softmax, log-softmax and cross-entropy on the CPU: gpukit-core's references
//! ([`softmax_rows`](crate::softmax_rows), [`cross_entropy_rows`](crate::cross_entropy_rows))
//! on vectors for f32 ([`vmath`](super::vmath)), many rows split across the cores (rows are
//! independent: the same bits). The native bodies of the row kernels.

use crate::element::{DType, Float};

use super::split::{each_piece, part, pieces, run_all, Job, MATH, PIECE, SPLIT_FROM, VMATH};

/// The work per element of a row-wise op on `T`: [`VMATH`] where the vectorised math runs
/// it (f32), else [`MATH`].
fn row_cost<T: Float>() -> usize {
    if T::DTYPE == DType::F32 {
        VMATH
    } else {
        MATH
    }
}

/// [`softmax_rows`](crate::softmax_rows) over rows of `cols` (in place where `src` is
/// `None`), many rows split across the cores.
pub(crate) fn softmax<T: Float>(log: bool, src: Option<&[T]>, cols: usize, out: &mut [T]) {
    // Rows are independent: split in whole rows, the same bits.
    pieces(out, cols, row_cost::<T>(), |start, o| {
        let s = part(src, start, o.len());
        if !super::vmath::softmax(log, s, cols, o) {
            crate::softmax_rows(log, s, cols, o)
        }
    });
}

/// [`cross_entropy_rows`](crate::cross_entropy_rows) over rows of `cols`, many rows split
/// across the cores.
pub(crate) fn cross_entropy<T: Float>(
    logits: &[T],
    labels: &[u32],
    cols: usize,
    loss: &mut [T],
    grad: Option<&mut [T]>,
) {
    let rows = loss.len();
    let cost = row_cost::<T>();
    if rows.saturating_mul(cols).saturating_mul(cost) < SPLIT_FROM || cols == 0 {
        return cross_entropy_whole(logits, labels, cols, loss, grad);
    }
    // Rows are independent: split in whole rows, the same bits.
    let per = (PIECE / cost / cols).max(1);
    let rows_of = |k: usize, l: &[T]| (k * per, k * per + l.len());
    let rows_of = &rows_of;
    match grad {
        Some(grad) => run_all(
            loss.chunks_mut(per)
                .zip(grad.chunks_mut(per * cols))
                .enumerate()
                .map(|(k, (l, g))| {
                    Box::new(move || {
                        let (a, b) = rows_of(k, l);
                        let x = &logits[a * cols..b * cols];
                        cross_entropy_whole(x, &labels[a..b], cols, l, Some(g));
                    }) as Job<'_>
                })
                .collect(),
        ),
        None => each_piece(loss, per, |k, l| {
            let (a, b) = rows_of(k, l);
            let x = &logits[a * cols..b * cols];
            cross_entropy_whole(x, &labels[a..b], cols, l, None);
        }),
    }
}

/// [`cross_entropy_rows`](crate::cross_entropy_rows), the vectorised one where there is one
/// (f32).
fn cross_entropy_whole<T: Float>(
    logits: &[T],
    labels: &[u32],
    cols: usize,
    loss: &mut [T],
    mut grad: Option<&mut [T]>,
) {
    if !super::vmath::cross_entropy(logits, labels, cols, loss, grad.as_deref_mut()) {
        crate::cross_entropy_rows(logits, labels, cols, loss, grad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Softmax and cross-entropy of many rows, split across the cores, give the bits of
    /// the same code run over all the rows in one pass (f32: the vectorised one).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe code over 2^20 elements split across rayon: hours interpreted"
    )]
    fn split_rows_equal_the_reference() {
        let n = 3 * SPLIT_FROM + 12_345;
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 31) % 977) as f32 * 0.01 - 4.0)
            .collect();
        let cols = 1000;
        let rows = n / cols;
        let m = &y[..rows * cols];
        let (mut split, mut whole) = (vec![0f32; m.len()], vec![0f32; m.len()]);
        softmax(true, Some(m), cols, &mut split);
        assert!(super::super::vmath::softmax(
            true,
            Some(m),
            cols,
            &mut whole
        ));
        assert!(split
            .iter()
            .zip(&whole)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let labels: Vec<u32> = (0..rows as u32).map(|r| (r * 7) % cols as u32).collect();
        let (mut ls, mut lw) = (vec![0f32; rows], vec![0f32; rows]);
        let (mut gs, mut gw) = (vec![0f32; m.len()], vec![0f32; m.len()]);
        cross_entropy(m, &labels, cols, &mut ls, Some(&mut gs));
        cross_entropy_whole(m, &labels, cols, &mut lw, Some(&mut gw));
        assert!(ls.iter().zip(&lw).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(gs.iter().zip(&gw).all(|(a, b)| a.to_bits() == b.to_bits()));
        let mut ln = vec![0f32; rows];
        cross_entropy(m, &labels, cols, &mut ln, None);
        assert!(ln.iter().zip(&lw).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
