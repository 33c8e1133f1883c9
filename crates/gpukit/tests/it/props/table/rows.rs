//! Softmax, log-softmax, cross-entropy and its gradient, and the row means, against an f64
//! computation of the same definitions.

use super::*;
use gpukit::Error;

/// Whether `got` is within `rel` of the f64 `want` plus one ulp of `T` there (NaN matches
/// NaN).
fn close<T: Numeric>(want: f64, got: T, rel: f64) -> bool {
    let g = got.to_f64();
    if want.is_nan() || g.is_nan() {
        return want.is_nan() && g.is_nan();
    }
    (g - want).abs() <= rel + tolerance::ulp(T::DTYPE, want)
}

/// Row-wise softmax, log-softmax (both also in place), cross-entropy and its gradient, and
/// the means, against an f64 computation of the same definitions. The device computes
/// `exp(x - max)` in the compute type, so each result is within a few of its epsilons,
/// scaled by how far below its row's maximum the element lies.
pub(super) fn softmax_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    if common::lacks_math(ctx, T::DTYPE) {
        let x = ctx.alloc_upload(&[T::from_f64(1.0); 4])?;
        let mut out = ctx.alloc_zeros::<T>(4)?;
        common::assert_unsupported(ctx.softmax(Shape::new(2, 2), &x, &mut out), "softmax");
        return Ok(());
    }
    let eps = compute_eps::<T>();
    let case = (matrix_case::<T>(), vec(any::<u16>(), 6));
    check(16, case, |((shape, x, _, _, _), picks)| {
        let (rows, cols) = (shape.rows, shape.cols);
        let xf: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
        // Labels in range, and one out of range (its row's loss and gradient are NaN).
        let labels: Vec<u32> = (0..rows)
            .map(|r| {
                let p = u32::from(picks[r % picks.len()]);
                if r == 1 {
                    cols as u32 + p % 3
                } else {
                    p % cols.max(1) as u32
                }
            })
            .collect();
        let dx = ctx.alloc_upload(&x).tc()?;
        let dl = ctx.alloc_upload(&labels).tc()?;
        let n = x.len();
        let (mut p, mut lp, mut ip) = (
            ctx.alloc::<T>(n).tc()?,
            ctx.alloc::<T>(n).tc()?,
            ctx.alloc_upload(&x).tc()?,
        );
        let mut ilp = ctx.alloc_upload(&x).tc()?;
        let (mut loss, mut grad, mut loss2) = (
            ctx.alloc::<T>(rows).tc()?,
            ctx.alloc::<T>(n).tc()?,
            ctx.alloc::<T>(rows).tc()?,
        );
        let mut mean = ctx.alloc::<T>(rows).tc()?;
        ctx.softmax(shape, &dx, &mut p).tc()?;
        ctx.log_softmax(shape, &dx, &mut lp).tc()?;
        ctx.softmax_inplace(shape, &mut ip).tc()?;
        ctx.log_softmax_inplace(shape, &mut ilp).tc()?;
        let ce = ctx.cross_entropy_grad(shape, &dx, &dl, &mut loss, &mut grad);
        if rows > 0 && cols == 0 {
            prop_assert!(matches!(ce, Err(Error::EmptyInput { .. })), "{ce:?}");
            return Ok(());
        }
        ce.tc()?;
        ctx.cross_entropy(shape, &dx, &dl, &mut loss2).tc()?;
        ctx.row_mean(shape, &dx, &mut mean).tc()?;
        let (p, lp, ip, ilp) = (
            p.download().tc()?,
            lp.download().tc()?,
            ip.download().tc()?,
            ilp.download().tc()?,
        );
        let (loss, grad, loss2, mean) = (
            loss.download().tc()?,
            grad.download().tc()?,
            loss2.download().tc()?,
            mean.download().tc()?,
        );
        for r in 0..rows {
            let row = &xf[r * cols..(r + 1) * cols];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            let l = labels[r] as usize;
            for (j, &xj) in row.iter().enumerate() {
                let i = r * cols + j;
                let d = xj - m;
                let (want_p, want_lp) = (d.exp() / s, d - s.ln());
                let lp_rel = 8.0 * eps * (d.abs() + s.ln().abs() + 1.0);
                // `x - max` rounds to within eps/2 of |d|, which exp turns into a
                // relative error of |d| eps/2: far down a row that outweighs exp's own.
                let p_rel = eps * (d.abs() + 8.0) * want_p;
                let flushed = flushes(ctx) && p[i].to_f64() == 0.0 && want_p < min_normal::<T>();
                prop_assert!(
                    close(want_p, p[i], p_rel) || flushed,
                    "softmax [{r}][{j}]: {:?} vs {want_p}",
                    p[i]
                );
                prop_assert!(
                    close(want_lp, lp[i], lp_rel),
                    "log_softmax [{r}][{j}]: {:?} vs {want_lp}",
                    lp[i]
                );
                prop_assert!(
                    p[i].same(ip[i]) && lp[i].same(ilp[i]),
                    "in place differs at [{r}][{j}]"
                );
                let want_g = if l < cols {
                    want_p - f64::from(u8::from(j == l))
                } else {
                    f64::NAN
                };
                prop_assert!(
                    close(want_g, grad[i], 8.0 * eps),
                    "grad [{r}][{j}]: {:?} vs {want_g}",
                    grad[i]
                );
            }
            let want_loss = if l < cols {
                s.ln() - (row[l] - m)
            } else {
                f64::NAN
            };
            let rel = 8.0 * eps * (want_loss.abs() + 1.0);
            prop_assert!(
                close(want_loss, loss[r], rel),
                "loss [{r}]: {:?} vs {want_loss}",
                loss[r]
            );
            prop_assert!(
                loss[r].same(loss2[r]),
                "the loss without the gradient differs at {r}"
            );
            let want_mean = T::from_f64(row.iter().sum::<f64>() / cols as f64).to_f64();
            let scale: f64 = row.iter().map(|v| v.abs()).sum::<f64>() / cols as f64;
            prop_assert!(
                tolerance::sums_agree(T::DTYPE, want_mean, mean[r].to_f64(), cols, scale),
                "row_mean [{r}]: {:?} vs {want_mean}",
                mean[r]
            );
        }
        if n > 0 {
            let want = T::from_f64(xf.iter().sum::<f64>() / n as f64).to_f64();
            let scale: f64 = xf.iter().map(|v| v.abs()).sum::<f64>() / n as f64;
            let got = ctx.mean(&dx).tc()?.to_f64();
            prop_assert!(
                tolerance::sums_agree(T::DTYPE, want, got, n, scale),
                "mean: {got} vs {want}"
            );
        } else {
            let r = ctx.mean(&dx);
            prop_assert!(matches!(r, Err(Error::EmptyInput { op: "mean" })), "{r:?}");
        }
        Ok(())
    })
}
