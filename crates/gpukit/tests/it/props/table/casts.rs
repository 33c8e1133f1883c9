//! Casts between every pair of element types, against `Numeric::from_wide`.

use super::*;

/// Casts `x` to `U` on `ctx`: `Err` names the first element unlike `Numeric::from_wide`'s.
fn to<T: Numeric, U: Numeric + std::fmt::Debug>(
    ctx: &Context,
    x: &[T],
) -> gpukit::Result<Result<(), String>> {
    let dx = ctx.alloc_upload(x)?;
    let mut out = ctx.alloc::<U>(x.len())?;
    ctx.cast(&dx, &mut out)?;
    let got = out.download()?;
    for (i, (&v, &g)) in x.iter().zip(&got).enumerate() {
        let want = U::from_wide(v.to_wide());
        let same = want == g || (want.to_f64().is_nan() && g.to_f64().is_nan());
        if !same {
            return Ok(Err(format!(
                "cast {} -> {} [{i}] of {v:?}: {g:?}, want {want:?}",
                T::DTYPE,
                U::DTYPE
            )));
        }
    }
    Ok(Ok(()))
}

/// Casts from `T` to every element type, against `Numeric::from_wide` (Rust's `as` but for
/// f16 and bf16, which round once, correctly: gpukit-core's unit test
/// `half_casts_round_once_correctly` checks that against exact midpoints).
pub(super) fn casts_from<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    check(8, length(300).prop_flat_map(|n| vec(T::edgy(), n)), |x| {
        for r in [
            to::<T, f32>(ctx, &x).tc()?,
            to::<T, f64>(ctx, &x).tc()?,
            to::<T, f16>(ctx, &x).tc()?,
            to::<T, bf16>(ctx, &x).tc()?,
            to::<T, i8>(ctx, &x).tc()?,
            to::<T, u8>(ctx, &x).tc()?,
            to::<T, i32>(ctx, &x).tc()?,
            to::<T, u32>(ctx, &x).tc()?,
            to::<T, i64>(ctx, &x).tc()?,
            to::<T, u64>(ctx, &x).tc()?,
        ] {
            r.map_err(TestCaseError::fail)?;
        }
        Ok(())
    })
}

/// Casts into f16 and bf16 from values just past a rounding tie of the 16-bit type, which
/// come out wrong when a backend rounds twice (through f64 or f32, or dropping low bits):
/// each must round once, as `Numeric::from_wide` does. (The first one failed on Vulkan.)
pub(super) fn casts_round_once(ctx: &Context) -> gpukit::Result<()> {
    let ints: [i64; 6] = [
        -7_728_177_275_992_759_802,
        (1 << 40) + (1 << 32) + 1,
        (1 << 60) + (1 << 53) + (1 << 52) - 1,
        -((1 << 40) + (1 << 32) + 1),
        65519,
        i64::MIN,
    ];
    let unsigned: [u64; 3] = [
        (1 << 63) + (1 << 55) + 1,
        (1 << 40) + (1 << 32) + 1,
        u64::MAX,
    ];
    let words: [i32; 3] = [
        (1 << 30) + (1 << 22) + 1,
        -((1 << 30) + (1 << 22) + 1),
        i32::MIN,
    ];
    let tie = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
    let floats = [
        tie,
        -tie,
        1.0 + 2f64.powi(-11) + 2f64.powi(-30),
        65520.0 - 2f64.powi(-30),
    ];
    for r in [
        to::<i64, f16>(ctx, &ints)?,
        to::<i64, bf16>(ctx, &ints)?,
        to::<u64, f16>(ctx, &unsigned)?,
        to::<u64, bf16>(ctx, &unsigned)?,
        to::<i32, bf16>(ctx, &words)?,
        to::<u32, bf16>(ctx, &words.map(|w| w as u32))?,
        to::<f64, f16>(ctx, &floats)?,
        to::<f64, bf16>(ctx, &floats)?,
    ] {
        if let Err(e) = r {
            panic!("{e}");
        }
    }
    Ok(())
}
