//! Reductions, whole and per row, against host references: sums within the summation bound,
//! min, max and the arg reductions exactly; empty inputs.

use super::*;
use gpukit::{Error, ReduceOp};

/// The reference of a value reduction of one row (no NaN among floats... or NaN ignored).
fn host_minmax<T: Numeric>(max: bool, row: &[T]) -> Option<f64> {
    row.iter()
        .map(|v| v.to_f64())
        .filter(|v| !v.is_nan())
        .reduce(|m, v| {
            if (max && v > m) || (!max && v < m) {
                v
            } else {
                m
            }
        })
        .or_else(|| row.first().map(|_| f64::NAN))
}

/// The first index of the largest (smallest) element, NaNs ranking last.
fn host_arg<T: Numeric>(max: bool, row: &[T]) -> Option<u32> {
    let best = host_minmax(max, row)?;
    let i = row
        .iter()
        .position(|v| v.to_f64() == best || (best.is_nan() && v.to_f64().is_nan()))?;
    u32::try_from(i).ok()
}

/// Whole and per-row reductions: sums and means within the summation bound, min, max and
/// the arg reductions exactly (a NaN planted in some rows is ignored); empty inputs.
pub(super) fn reductions_vs_reference<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    let case = (matrix_case::<T>(), any::<u8>());
    check(16, case, |((shape, mut x, _, _, _), nan_at)| {
        let (rows, cols) = (shape.rows, shape.cols);
        if T::DTYPE.is_float() && cols > 1 {
            for r in (0..rows).step_by(2) {
                x[r * cols + usize::from(nan_at) % cols] = T::from_f64(f64::NAN);
            }
        }
        let dx = ctx.alloc_upload(&x).tc()?;
        let mut v = ctx.alloc::<T>(rows).tc()?;
        let mut idx = ctx.alloc::<u32>(rows).tc()?;
        for op in ReduceOp::ALL {
            if op == ReduceOp::Mean {
                continue; // float-only: `softmax_vs_f64` checks it
            }
            let r = match op {
                ReduceOp::Sum => ctx.row_sum(shape, &dx, &mut v),
                ReduceOp::Min => ctx.row_min(shape, &dx, &mut v),
                ReduceOp::Max => ctx.row_max(shape, &dx, &mut v),
                ReduceOp::ArgMin => ctx.row_argmin(shape, &dx, &mut idx),
                ReduceOp::ArgMax => ctx.row_argmax(shape, &dx, &mut idx),
                ReduceOp::Mean => Ok(()),
            };
            if rows > 0 && cols == 0 && op != ReduceOp::Sum {
                prop_assert!(
                    matches!(r, Err(Error::EmptyInput { .. })),
                    "{} of empty rows: {r:?}",
                    op.name()
                );
                continue;
            }
            r.tc()?;
            let (vals, ids) = (v.download().tc()?, idx.download().tc()?);
            for rr in 0..rows {
                let row = &x[rr * cols..(rr + 1) * cols];
                let clean: Vec<f64> = row
                    .iter()
                    .map(|v| v.to_f64())
                    .filter(|v| !v.is_nan())
                    .collect();
                let scale: f64 = clean.iter().map(|v| v.abs()).sum();
                match op {
                    ReduceOp::Sum if T::DTYPE.is_float() => {
                        if row.iter().all(|v| !v.to_f64().is_nan()) {
                            let want = T::from_f64(clean.iter().sum()).to_f64();
                            prop_assert!(
                                tolerance::sums_agree(
                                    T::DTYPE,
                                    want,
                                    vals[rr].to_f64(),
                                    cols,
                                    scale
                                ),
                                "row_sum {} row {rr}: {:?} vs {want}",
                                T::DTYPE,
                                vals[rr]
                            );
                        } else {
                            prop_assert!(vals[rr].to_f64().is_nan(), "a NaN makes the sum NaN");
                        }
                    }
                    ReduceOp::Sum => prop_assert_eq!(vals[rr], T::sum(row), "row_sum {}", T::DTYPE),
                    ReduceOp::Mean => {}
                    ReduceOp::Min | ReduceOp::Max => {
                        let want = host_minmax(op == ReduceOp::Max, row);
                        let got = vals[rr].to_f64();
                        prop_assert!(
                            want.is_some_and(|w| w == got || (w.is_nan() && got.is_nan())),
                            "{} {} row {rr}: {got} vs {want:?}",
                            op.name(),
                            T::DTYPE
                        );
                    }
                    ReduceOp::ArgMin | ReduceOp::ArgMax => {
                        let want = host_arg(op == ReduceOp::ArgMax, row);
                        prop_assert_eq!(
                            Some(ids[rr]),
                            want,
                            "{} {} row {}",
                            op.name(),
                            T::DTYPE,
                            rr
                        );
                    }
                }
            }
        }
        // The whole array, as one row.
        if !x.is_empty() {
            prop_assert_eq!(
                ctx.argmax(&dx).tc()?,
                host_arg(true, &x).unwrap_or(0) as usize
            );
            prop_assert_eq!(
                ctx.argmin(&dx).tc()?,
                host_arg(false, &x).unwrap_or(0) as usize
            );
            let (mn, mx) = (ctx.min(&dx).tc()?.to_f64(), ctx.max(&dx).tc()?.to_f64());
            let (wn, wx) = (host_minmax(false, &x), host_minmax(true, &x));
            prop_assert!(
                wn.is_some_and(|w| w == mn || (w.is_nan() && mn.is_nan())),
                "min {mn} vs {wn:?}"
            );
            prop_assert!(
                wx.is_some_and(|w| w == mx || (w.is_nan() && mx.is_nan())),
                "max {mx} vs {wx:?}"
            );
        } else {
            let r = ctx.argmax(&dx);
            prop_assert!(
                matches!(r, Err(Error::EmptyInput { op: "argmax" })),
                "{r:?}"
            );
            let r = ctx.min(&dx);
            prop_assert!(matches!(r, Err(Error::EmptyInput { op: "min" })), "{r:?}");
        }
        Ok(())
    })
}
