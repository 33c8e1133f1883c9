//! Random fills on every backend: the same bits as gpukit-core's reference
//! (`random_floats`, `random_integers`) for any seed, offset and length, so the same bits on
//! every backend; a fill split in two equals the whole; the samples follow their
//! distributions (moments, Kolmogorov-Smirnov against the exact CDFs, counts per integer);
//! dropout keeps about `1 - p` of its input, scaled, and the same key replays the same mask.

use super::*;
use gpukit::core::optable::{random_floats, random_integers, Distribution};
use gpukit::core::Wide;
use gpukit::Rng;

/// The float fills of `T` against the reference, bit for bit, split or whole.
pub(super) fn floats_match_reference<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    if common::lacks_math(ctx, T::DTYPE) && T::DTYPE != DType::F64 {
        return Ok(());
    }
    let case = (0..3000usize, any::<u64>(), any::<u64>(), 0..3000usize);
    check(10, case, |(n, seed, offset, cut)| {
        let cut = cut.min(n);
        let x: Vec<T> = (0..n)
            .map(|i| T::from_f64(i as f64 * 0.25 - 100.0))
            .collect();
        let dx = ctx.alloc_upload(&x).tc()?;
        let params = [
            (Distribution::Uniform, (-3.0, 5.0)),
            (Distribution::Normal, (1.5, 2.0)),
        ];
        for (dist, (a, b)) in params {
            let (a, b) = (T::from_f64(a), T::from_f64(b));
            let mut want = vec![T::from_f64(0.0); n];
            random_floats(dist, (seed, offset), (a, b), None, &mut want);
            let mut out = ctx.alloc::<T>(n).tc()?;
            let mut parts = ctx.alloc::<T>(n).tc()?;
            match dist {
                Distribution::Uniform => {
                    ctx.random_uniform(&mut out, a, b, seed, offset).tc()?;
                    ctx.random_uniform(&mut parts.slice_mut(..cut).tc()?, a, b, seed, offset)
                        .tc()?;
                    let rest = offset.wrapping_add(cut as u64);
                    ctx.random_uniform(&mut parts.slice_mut(cut..).tc()?, a, b, seed, rest)
                        .tc()?;
                }
                _ => {
                    ctx.random_normal(&mut out, a, b, seed, offset).tc()?;
                    ctx.random_normal(&mut parts.slice_mut(..cut).tc()?, a, b, seed, offset)
                        .tc()?;
                    let rest = offset.wrapping_add(cut as u64);
                    ctx.random_normal(&mut parts.slice_mut(cut..).tc()?, a, b, seed, rest)
                        .tc()?;
                }
            }
            let (got, split) = (out.download().tc()?, parts.download().tc()?);
            for i in 0..n {
                prop_assert!(
                    got[i].same(want[i]) && split[i].same(want[i]),
                    "{dist:?} {} [{i}] of {n} (seed {seed}, offset {offset}): {:?} whole, {:?} split at {cut}, reference {:?}",
                    T::DTYPE,
                    got[i],
                    split[i],
                    want[i]
                );
            }
        }
        let p = 0.3;
        let mut want = vec![T::from_f64(0.0); n];
        let pt = (T::from_f64(p), T::from_f64(1.0 / (1.0 - p)));
        random_floats(
            Distribution::Dropout,
            (seed, offset),
            pt,
            Some(&x),
            &mut want,
        );
        let mut out = ctx.alloc::<T>(n).tc()?;
        ctx.dropout(&dx, p, seed, offset, &mut out).tc()?;
        let mut inplace = ctx.alloc_upload(&x).tc()?;
        ctx.dropout_inplace(&mut inplace, p, seed, offset).tc()?;
        let (got, got_in) = (out.download().tc()?, inplace.download().tc()?);
        for i in 0..n {
            prop_assert!(
                got[i].same(want[i]) && got_in[i].same(want[i]),
                "dropout {} [{i}]: {:?}, in place {:?}, reference {:?}",
                T::DTYPE,
                got[i],
                got_in[i],
                want[i]
            );
        }
        Ok(())
    })
}

/// The integer fills of `T` against the reference, and inside `[lo, hi)`.
pub(super) fn integers_match_reference<T: Cross + Ord>(ctx: &Context) -> gpukit::Result<()> {
    let case = (
        0..3000usize,
        any::<u64>(),
        any::<u64>(),
        T::edgy(),
        T::edgy(),
    );
    check(10, case, |(n, seed, offset, x, y)| {
        let (lo, hi) = if x < y { (x, y) } else { (y, x) };
        let mut out = ctx.alloc::<T>(n).tc()?;
        let wide = |v: T| match v.to_wide() {
            Wide::Int(v) => v,
            Wide::Float(_) => unreachable!("an integer type"),
        };
        let span = wide(hi) - wide(lo);
        let r = ctx.random_integers(&mut out, lo, hi, seed, offset);
        if lo == hi || span > 1 << 32 {
            prop_assert!(
                matches!(r, Err(gpukit::Error::InvalidArgument { .. })),
                "[{lo:?}, {hi:?}): {r:?}"
            );
            return Ok(());
        }
        r.tc()?;
        let mut want = vec![lo; n];
        random_integers((seed, offset), lo, span as u64 as u32, &mut want);
        let got = out.download().tc()?;
        prop_assert_eq!(&got, &want, "{} [{:?}, {:?})", T::DTYPE, lo, hi);
        prop_assert!(got.iter().all(|v| *v >= lo && *v < hi));
        Ok(())
    })
}

/// `erf`, Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    y.copysign(x)
}

/// The Kolmogorov-Smirnov statistic of `xs` against the CDF `cdf`.
fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter().enumerate().fold(0.0f64, |d, (i, &x)| {
        let f = cdf(x);
        d.max((f - i as f64 / n).abs())
            .max(((i + 1) as f64 / n - f).abs())
    })
}

/// The samples follow their distributions: 200,000 each, Kolmogorov-Smirnov within the
/// 0.1% critical value (`1.95 / sqrt(n)`), mean and variance within 5 standard errors,
/// every integer of a small range within 5 standard deviations of its expected count, and
/// dropout keeping within 5 standard deviations of `1 - p`.
pub(super) fn samples_follow_their_distributions(ctx: &Context) -> gpukit::Result<()> {
    let n = 200_000;
    let mut rng = Rng::new(0x5eed);
    let mut out = ctx.alloc::<f32>(n)?;
    let crit = 1.95 / (n as f64).sqrt();
    let five = |sd: f64| 5.0 * sd / (n as f64).sqrt();

    rng.normal(ctx, &mut out, 0.0, 1.0)?;
    let z: Vec<f64> = out.download()?.iter().map(|&v| f64::from(v)).collect();
    let mean = z.iter().sum::<f64>() / n as f64;
    let var = z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
    assert!(mean.abs() < five(1.0), "normal mean {mean}");
    assert!(
        (var - 1.0).abs() < five(2f64.sqrt()),
        "normal variance {var}"
    );
    let d = ks(z, |x| 0.5 * (1.0 + erf(x / 2f64.sqrt())));
    assert!(d < crit, "normal KS {d} (critical {crit})");

    rng.uniform(ctx, &mut out, -2.0, 6.0)?;
    let u: Vec<f64> = out.download()?.iter().map(|&v| f64::from(v)).collect();
    assert!(u.iter().all(|&v| (-2.0..6.0).contains(&v)));
    let d = ks(u, |x| ((x + 2.0) / 8.0).clamp(0.0, 1.0));
    assert!(d < crit, "uniform KS {d} (critical {crit})");

    let mut dice = ctx.alloc::<i32>(n)?;
    rng.integers(ctx, &mut dice, -3, 4)?;
    let dice = dice.download()?;
    let expect = n as f64 / 7.0;
    for v in -3..4 {
        let count = dice.iter().filter(|&&d| d == v).count() as f64;
        let sd = (n as f64 * (1.0 / 7.0) * (6.0 / 7.0)).sqrt();
        assert!((count - expect).abs() < 5.0 * sd, "{v}: {count} of {n}");
    }

    let ones = ctx.alloc_upload(&vec![1.0f32; n])?;
    let at = rng.dropout(ctx, &ones, 0.25, &mut out)?;
    let kept = out.download()?;
    assert!(kept.iter().all(|&v| v == 0.0 || v == 1.0 / 0.75));
    let frac = kept.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
    assert!(
        (frac - 0.75).abs() < five((0.75f64 * 0.25).sqrt()),
        "kept {frac}"
    );
    // The backward pass: the same seed and offset on the gradient keep the same elements.
    let grad = ctx.alloc_upload(&vec![2.0f32; n])?;
    let mut back = ctx.alloc::<f32>(n)?;
    ctx.dropout(&grad, 0.25, rng.seed(), at, &mut back)?;
    for (b, k) in back.download()?.iter().zip(&kept) {
        assert_eq!(*b == 0.0, *k == 0.0);
    }
    assert_eq!(rng.offset(), 4 * n as u64);
    Ok(())
}

/// Parameters outside what a fill accepts are `InvalidArgument` naming the call and the
/// argument, and leave the output as it was.
pub(super) fn bad_parameters_are_refused(ctx: &Context) -> gpukit::Result<()> {
    let mut out = ctx.alloc_upload(&[7.0f32; 4])?;
    let x = ctx.alloc_upload(&[1.0f32; 4])?;
    let refused = |r: gpukit::Result<()>, op: &str, arg: &str| match r {
        Err(gpukit::Error::InvalidArgument { op: o, arg: a, .. }) if o == op && a == arg => {}
        other => panic!("{op} `{arg}`: {other:?}"),
    };
    refused(
        ctx.random_uniform(&mut out, 1.0, 0.0, 1, 0),
        "random_uniform",
        "hi",
    );
    refused(
        ctx.random_uniform(&mut out, f32::NAN, 1.0, 1, 0),
        "random_uniform",
        "lo",
    );
    refused(
        ctx.random_normal(&mut out, 0.0, -1.0, 1, 0),
        "random_normal",
        "std",
    );
    refused(
        ctx.random_normal(&mut out, f32::INFINITY, 1.0, 1, 0),
        "random_normal",
        "mean",
    );
    refused(ctx.dropout(&x, 1.0, 1, 0, &mut out), "dropout", "p");
    refused(ctx.dropout_inplace(&mut out, -0.5, 1, 0), "dropout", "p");
    refused(
        ctx.random_integers(&mut out, 0.0, 4.0, 1, 0),
        "random_integers",
        "out",
    );
    let mut ints = ctx.alloc::<i64>(4)?;
    refused(
        ctx.random_integers(&mut ints, 0, 1 << 33, 1, 0),
        "random_integers",
        "hi",
    );
    refused(
        ctx.random_integers(&mut ints, 5, 5, 1, 0),
        "random_integers",
        "hi",
    );
    let mut rng = Rng::new(1);
    refused(
        rng.kaiming_normal(ctx, &mut out, 0),
        "kaiming_normal",
        "fan_in",
    );
    assert_eq!(rng.offset(), 0, "a refused fill does not advance");
    assert_eq!(out.download()?, [7.0; 4]);
    Ok(())
}
