//! The reference semantics of the row-wise ops: softmax and log-softmax
//! ([`softmax_rows`]) and cross-entropy with its gradient ([`cross_entropy_rows`]), each row
//! reduced in f64 and rounded once.

use std::any::TypeId;

use crate::element::{Numeric, Real};

/// Row-wise softmax (or log-softmax) of a `rows x cols` matrix with the reference semantics:
/// per row, `m = max(x)` (NaNs ignored), `e_j = exp(x_j - m)` in the compute type, `s = sum e_j`
/// in f64; softmax `e_j / s` and log-softmax `(x_j - m) - ln(s)`, both in f64, rounded once.
/// A row holding a NaN or an infinity gives NaNs. In place when `src` is `None`.
pub fn softmax_rows<T: Numeric<Compute = C>, C: Real>(
    log: bool,
    src: Option<&[T]>,
    cols: usize,
    out: &mut [T],
) {
    if cols == 0 {
        return;
    }
    for (r, o) in out.chunks_mut(cols).enumerate() {
        let row = src.map(|s| &s[r * cols..r * cols + o.len()]);
        if stores_exactly::<T, C>() && !log {
            let (_, s) = stored_exps(row, o);
            for o in o.iter_mut() {
                *o = T::from_f64(o.load().to_f64() / s);
            }
            continue;
        }
        // Each output depends on its own input and the row's statistics only, so in place
        // the row is read for the statistics and then overwritten element by element (no
        // copy of the row: the op allocates nothing).
        let (m, s) = match row {
            Some(x) => softmax_stats(x.iter().map(|v| v.load())),
            None => softmax_stats(o.iter().map(|v| v.load())),
        };
        for (j, o) in o.iter_mut().enumerate() {
            let x: C = row.map_or_else(|| o.load(), |x| x[j].load());
            let d = x.sub(m);
            *o = if log {
                T::from_f64(d.to_f64() - s.ln())
            } else {
                T::from_f64(d.exp().to_f64() / s)
            };
        }
    }
}

/// Whether `T` is its own compute type (f32, f64): then `e_j` stored in an output row is
/// exact, and softmax and cross-entropy store it in the sum pass and divide it in the output
/// pass, one exp per element instead of two, with the same bits.
fn stores_exactly<T: 'static, C: 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<C>()
}

/// The softmax statistics of [`softmax_stats`] for a row read from `src` (from `out` when
/// `None`: in place), storing each `e_j = exp(x_j - m)` in `out` as it is summed. Only for
/// an element that [`stores_exactly`].
fn stored_exps<T: Numeric<Compute = C>, C: Real>(src: Option<&[T]>, out: &mut [T]) -> (C, f64) {
    let m = match src {
        Some(x) => row_max(x.iter().map(|v| v.load())),
        None => row_max(out.iter().map(|v| v.load())),
    };
    let mut s = -0.0f64; // where Rust's f64 `sum` starts, as in `softmax_stats`
    for (j, o) in out.iter_mut().enumerate() {
        let x: C = src.map_or_else(|| o.load(), |x| x[j].load());
        let e = x.sub(m).exp();
        s += e.to_f64();
        *o = T::store(e);
    }
    (m, s)
}

/// A row's maximum, NaNs ignored (`0` for an empty row, which is never passed).
fn row_max<C: Real>(row: impl Iterator<Item = C>) -> C {
    row.reduce(|m, v| m.max(v)).unwrap_or(C::ZERO)
}

/// A row's maximum (NaNs ignored) and `sum exp(x - max)` accumulated in f64; the row is
/// read twice. An empty row is never passed (`cols > 0`).
fn softmax_stats<C: Real>(row: impl Iterator<Item = C> + Clone) -> (C, f64) {
    let m = row_max(row.clone());
    let s = row.map(|x| x.sub(m).exp().to_f64()).sum::<f64>();
    (m, s)
}

/// Cross-entropy of each row of `rows x cols` logits against its label, with the reference
/// semantics: `loss_r = ln(s) - (x_l - m)` (the softmax statistics of [`softmax_rows`], in
/// f64, rounded once) and, when `grad` is given, `grad_rj = e_j / s - [j == l]`, the
/// gradient of `loss_r` with respect to the logits. A label `>= cols` gives a NaN loss and a
/// NaN gradient row.
pub fn cross_entropy_rows<T: Numeric<Compute = C>, C: Real>(
    logits: &[T],
    labels: &[u32],
    cols: usize,
    loss: &mut [T],
    mut grad: Option<&mut [T]>,
) {
    if cols == 0 {
        return;
    }
    for (r, (l, &label)) in loss.iter_mut().zip(labels).enumerate() {
        let row = &logits[r * cols..(r + 1) * cols];
        let label = label as usize;
        let g = grad
            .as_deref_mut()
            .map(|g| &mut g[r * cols..(r + 1) * cols]);
        if label >= cols {
            *l = T::from_f64(f64::NAN);
            if let Some(g) = g {
                g.fill(T::from_f64(f64::NAN));
            }
            continue;
        }
        let hot = |j: usize| if j == label { 1.0 } else { 0.0 };
        match g {
            Some(g) if stores_exactly::<T, C>() => {
                let (m, s) = stored_exps(Some(row), g);
                for (j, g) in g.iter_mut().enumerate() {
                    *g = T::from_f64(g.load().to_f64() / s - hot(j));
                }
                *l = T::from_f64(s.ln() - row[label].load().sub(m).to_f64());
            }
            g => {
                let (m, s) = softmax_stats(row.iter().map(|v| v.load()));
                *l = T::from_f64(s.ln() - row[label].load().sub(m).to_f64());
                for (j, (g, x)) in g.into_iter().flatten().zip(row).enumerate() {
                    *g = T::from_f64(x.load().sub(m).exp().to_f64() / s - hot(j));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_rows_sum_to_one_and_cross_entropy_matches_log_softmax() {
        let x = [1.0f32, 2.0, 3.0, -1.0, 0.0, 1000.0];
        let mut p = [0.0f32; 6];
        softmax_rows(false, Some(&x), 3, &mut p);
        for row in p.chunks(3) {
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-6, "{row:?}");
        }
        assert_eq!(p[5], 1.0);
        let mut lp = [0.0f32; 6];
        softmax_rows(true, Some(&x), 3, &mut lp);
        let (mut loss, mut grad) = ([0.0f32; 2], [0.0f32; 6]);
        cross_entropy_rows(&x, &[2, 7], 3, &mut loss, Some(&mut grad));
        assert_eq!(loss[0], -lp[2]);
        assert!((grad[2] - (p[2] - 1.0)).abs() < 1e-7 && grad[0] == p[0]);
        assert!(loss[1].is_nan() && grad[3..].iter().all(|g| g.is_nan()));
    }

    /// Softmax and cross-entropy with the definitions written out plainly (two exps per
    /// element), against `softmax_rows` and `cross_entropy_rows` (one exp where the element
    /// is its own compute type), softmax from a source and in place, for f32 and f64, with
    /// NaN and infinite rows, rows of one element and an out-of-range label.
    #[test]
    fn softmax_and_cross_entropy_follow_the_definition_bit_for_bit() {
        fn check<T: Numeric<Compute = C>, C: Real>(x: &[T], cols: usize) {
            let mut want = vec![T::ZERO; x.len()];
            for (row, w) in x.chunks(cols).zip(want.chunks_mut(cols)) {
                let m = row.iter().map(|v| v.load()).reduce(|m, v| m.max(v));
                let m = m.unwrap_or(C::ZERO);
                let e = |v: &T| v.load().sub(m).exp().to_f64();
                let s: f64 = row.iter().map(e).sum();
                for (w, v) in w.iter_mut().zip(row) {
                    *w = T::from_f64(e(v) / s);
                }
            }
            // A NaN's sign and payload are not defined (Rust's float semantics): any NaN.
            let bits = |v: &[T]| {
                let bits = |v: f64| {
                    if v.is_nan() {
                        f64::NAN.to_bits()
                    } else {
                        v.to_bits()
                    }
                };
                v.iter()
                    .map(|v| bits(v.load().to_f64()))
                    .collect::<Vec<_>>()
            };
            let mut out = vec![T::ZERO; x.len()];
            softmax_rows(false, Some(x), cols, &mut out);
            assert_eq!(bits(&out), bits(&want), "{cols} columns");
            let mut inplace = x.to_vec();
            softmax_rows(false, None, cols, &mut inplace);
            assert_eq!(bits(&inplace), bits(&want), "{cols} columns, in place");
            // Cross-entropy: loss ln(s) - (x_l - m), gradient e_j / s - [j == l]; the last
            // row's label is out of range (NaNs).
            let rows = x.len() / cols;
            let labels: Vec<u32> = (0..rows)
                .map(|r| if r + 1 == rows { cols } else { (r * 7) % cols } as u32)
                .collect();
            let (mut want_loss, mut want_grad) = (vec![T::ZERO; rows], vec![T::ZERO; rows * cols]);
            for (r, row) in x.chunks_exact(cols).enumerate() {
                let (label, g) = (labels[r] as usize, &mut want_grad[r * cols..][..cols]);
                if label >= cols {
                    want_loss[r] = T::from_f64(f64::NAN);
                    g.fill(T::from_f64(f64::NAN));
                    continue;
                }
                let m = row.iter().map(|v| v.load()).reduce(|m, v| m.max(v));
                let m = m.unwrap_or(C::ZERO);
                let e = |v: &T| v.load().sub(m).exp().to_f64();
                let s: f64 = row.iter().map(e).sum();
                want_loss[r] = T::from_f64(s.ln() - row[label].load().sub(m).to_f64());
                for (j, (g, v)) in g.iter_mut().zip(row).enumerate() {
                    *g = T::from_f64(e(v) / s - if j == label { 1.0 } else { 0.0 });
                }
            }
            let x = &x[..rows * cols];
            let (mut loss, mut grad) = (vec![T::ZERO; rows], vec![T::ZERO; rows * cols]);
            cross_entropy_rows(x, &labels, cols, &mut loss, Some(&mut grad));
            assert_eq!(bits(&loss), bits(&want_loss), "{cols} columns: loss");
            assert_eq!(bits(&grad), bits(&want_grad), "{cols} columns: grad");
            let mut alone = vec![T::ZERO; rows];
            cross_entropy_rows(x, &labels, cols, &mut alone, None);
            assert_eq!(bits(&alone), bits(&want_loss), "{cols} columns: loss alone");
        }
        let mut next = crate::element::tests::xorshift(0x2545_f491_4f6c_dd1d);
        let mut xs: Vec<f64> = (0..4096)
            .map(|_| (next() % 20_001) as f64 / 1000.0 - 10.0)
            .collect();
        xs[5] = f64::NAN;
        xs[70] = f64::INFINITY;
        xs[200] = f64::NEG_INFINITY;
        for cols in [1, 3, 64, 1000] {
            check(&xs, cols);
            check(&xs.iter().map(|&x| x as f32).collect::<Vec<_>>(), cols);
            // f16 computes in f32: the path that recomputes each exp.
            #[cfg(feature = "half")]
            check(
                &xs.iter()
                    .map(|&x| half::f16::from_f64(x))
                    .collect::<Vec<_>>(),
                cols,
            );
        }
    }

    /// Log-softmax written out, `(x_j - m) - ln(s)` in f64 rounded once, from a source and in
    /// place, for f32, f64 and (with the `half` feature) f16, computed in f32.
    #[test]
    fn log_softmax_follows_the_definition() {
        fn check<T: Numeric<Compute = C>, C: Real>(x: &[T], cols: usize) {
            let mut want = vec![T::ZERO; x.len()];
            for (row, w) in x.chunks(cols).zip(want.chunks_mut(cols)) {
                let m = row
                    .iter()
                    .map(|v| v.load())
                    .reduce(|m, v| m.max(v))
                    .unwrap();
                let s: f64 = row.iter().map(|v| v.load().sub(m).exp().to_f64()).sum();
                for (w, v) in w.iter_mut().zip(row) {
                    *w = T::from_f64(v.load().sub(m).to_f64() - s.ln());
                }
            }
            let mut out = vec![T::ZERO; x.len()];
            softmax_rows(true, Some(x), cols, &mut out);
            let bits = |v: &[T]| {
                v.iter()
                    .map(|v| v.load().to_f64().to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&out), bits(&want), "{cols} columns");
            let mut inplace = x.to_vec();
            softmax_rows(true, None, cols, &mut inplace);
            assert_eq!(bits(&inplace), bits(&want), "{cols} columns, in place");
        }
        let xs: Vec<f64> = (0..600)
            .map(|i| ((i * 37) % 101) as f64 / 7.0 - 6.0)
            .collect();
        for cols in [1, 5, 600] {
            check(&xs, cols);
            check(&xs.iter().map(|&x| x as f32).collect::<Vec<_>>(), cols);
            #[cfg(feature = "half")]
            check(
                &xs.iter()
                    .map(|&x| half::f16::from_f64(x))
                    .collect::<Vec<_>>(),
                cols,
            );
        }
        // By hand: the softmax of [0, ln 3] is [1/4, 3/4].
        let mut o = [0.0f64; 2];
        softmax_rows(true, Some(&[0.0, 3f64.ln()]), 2, &mut o);
        assert!((o[0] + 4f64.ln()).abs() < 1e-15 && (o[1] - (0.75f64).ln()).abs() < 1e-15);
        let mut p = [0.0f64; 2];
        softmax_rows(false, Some(&[0.0, 3f64.ln()]), 2, &mut p);
        assert!((p[0] - 0.25).abs() < 1e-15 && (p[1] - 0.75).abs() < 1e-15);
        let mut untouched = [5.0f32; 2];
        softmax_rows(false, None, 0, &mut untouched);
        assert_eq!(untouched, [5.0; 2]);
    }
}
