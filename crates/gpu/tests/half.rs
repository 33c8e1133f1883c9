//! f16 and bf16 elements (feature `half`, enabled for the tests): storage round trips and
//! ops computed in f32, against an f64 reference.

mod common;

use gpu::core::half::{bf16, f16};
use gpu::Gemm;

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
        let want: f64 = xs.iter().map(|v| v.to_f64()).sum();
        let got = ctx.sum(&x)?.to_f64();
        assert!((got - want).abs() <= 1e-3 * want.abs().max(1.0), "{got} vs {want}");
        Ok(())
    }

    fn bf16_gemm_matches_f64(ctx) {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<bf16> = (0..m * k).map(|i| bf16::from_f32(i as f32 * 0.5 - 2.0)).collect();
        let b: Vec<bf16> = (0..k * n).map(|i| bf16::from_f32(1.0 - i as f32 * 0.25)).collect();
        let da = ctx.alloc_upload(&a)?;
        let db = ctx.alloc_upload(&b)?;
        let mut dc = ctx.alloc_zeros::<bf16>(m * n)?;
        ctx.gemm(Gemm::new(m, n, k), &da, &db, &mut dc)?;
        let c = dc.download()?;
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| a[i * k + l].to_f64() * b[l * n + j].to_f64()).sum();
                let got = c[i * n + j].to_f64();
                // bf16 keeps 8 bits of mantissa: one rounding of the result.
                assert!((got - want).abs() <= want.abs() / 128.0 + 1e-6, "c[{i},{j}] = {got}, want {want}");
            }
        }
        Ok(())
    }
}
