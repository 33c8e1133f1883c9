//! f16 and bf16 elements (feature `half`, enabled for the tests): storage round trips and
//! ops computed in f32, against an f64 reference. The properties (random inputs, every op,
//! CUDA against the CPU) are in `props/`.

use crate::backend_tests;

use gpukit::core::half::{bf16, f16};
use gpukit::cpu::reference;
use gpukit::{Float, Gemm};

/// Every transpose combination of a small product, against f64: one rounding of the f32
/// result to `significand_bits` bits (half an ulp: `2^-bits` relative), plus the f32
/// accumulation of `k` products (far below that).
fn gemm_all_transposes<T: Float>(
    ctx: &gpukit::Context,
    significand_bits: i32,
) -> gpukit::Result<()> {
    let (m, n, k) = (3, 4, 5);
    let a: Vec<T> = (0..m * k)
        .map(|i| T::from_f64(i as f64 * 0.5 - 2.0))
        .collect();
    let b: Vec<T> = (0..k * n)
        .map(|i| T::from_f64(1.0 - i as f64 * 0.25))
        .collect();
    let da = ctx.alloc_upload(&a)?;
    let db = ctx.alloc_upload(&b)?;
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut dc = ctx.alloc_zeros::<T>(m * n)?;
        let g = Gemm::new(m, n, k).transpose(ta, tb);
        ctx.gemm(g, &da, &db, &mut dc)?;
        // The exact f64 values of the T inputs, multiplied and summed in f64.
        let want = reference::gemm(&g, &a, &b, &[]).expect("the reference gets whole matrices");
        for (i, (got, want)) in dc.download()?.iter().zip(&want).enumerate() {
            let got = got.to_f64();
            let bound = want.abs() * 2f64.powi(-significand_bits) + 1e-6;
            assert!(
                (got - want).abs() <= bound,
                "{} ta={ta} tb={tb} c[{i}] = {got}, want {want}",
                T::DTYPE
            );
        }
    }
    Ok(())
}

backend_tests! {
    fn f16_round_trip_and_ops(ctx) {
        let xs: Vec<f16> = (0..100).map(|i| f16::from_f32(i as f32 * 0.25 - 5.0)).collect();
        let ys: Vec<f16> = (0..100).map(|i| f16::from_f32(1.0 + i as f32 * 0.125)).collect();
        let x = ctx.alloc_upload(&xs)?;
        let y = ctx.alloc_upload(&ys)?;
        assert_eq!(x.download()?, xs);
        let mut out = ctx.alloc_zeros::<f16>(100)?;
        ctx.mul(&x, &y, &mut out)?;
        for ((o, a), b) in out.download()?.iter().zip(&xs).zip(&ys) {
            assert_eq!(*o, f16::from_f32(a.to_f32() * b.to_f32()));
        }
        ctx.relu(&x, &mut out)?;
        for (o, a) in out.download()?.iter().zip(&xs) {
            assert_eq!(*o, f16::from_f32(a.to_f32().max(0.0)));
        }
        // Multiples of 1/4: exact in f64 in any order, so every backend rounds this number.
        let want: f64 = xs.iter().map(|v| v.to_f64()).sum();
        assert_eq!(ctx.sum(&x)?, f16::from_f64(want));
        Ok(())
    }

    fn f16_gemm_matches_f64_for_every_transpose(ctx) {
        gemm_all_transposes::<f16>(ctx, 11)
    }

    fn bf16_gemm_matches_f64_for_every_transpose(ctx) {
        gemm_all_transposes::<bf16>(ctx, 8)
    }
}
