//! Built-in ops against host references: float ops against f64, gemm, integer arithmetic.

use super::*;

backend_tests! {
    fn float_ops_match_f64_reference(ctx) {
        float_ops::<f32>(ctx, 1e-5)?;
        float_ops::<f64>(ctx, 1e-12)?;
        Ok(())
    }

    fn gemm_all_transposes_and_scalings(ctx) {
        gemm_all::<f32>(ctx, 1e-5)?;
        gemm_all::<f64>(ctx, 1e-12)?;
        // m = 0: nothing to do, and the call succeeds.
        let e = ctx.alloc_zeros::<f32>(0)?;
        let b = ctx.alloc_zeros::<f32>(6)?;
        let mut c = ctx.alloc_zeros::<f32>(0)?;
        ctx.gemm(Gemm::<f32>::new(0, 2, 3), &e, &b, &mut c)?;
        Ok(())
    }

    fn integer_ops_wrap_and_divide_safely(ctx) {
        int_ops!(ctx, i32);
        int_ops!(ctx, u32);
        int_ops!(ctx, i64);
        int_ops!(ctx, u64);
        int_ops!(ctx, u8);
        int_ops!(ctx, i8);
        Ok(())
    }

    fn integer_edge_cases(ctx) {
        let a = ctx.alloc_upload(&[i32::MAX, i32::MIN, i32::MIN, 7, -7, 0])?;
        let b = ctx.alloc_upload(&[1, -1, -1, 0, 2, 0])?;
        let mut out = ctx.alloc_zeros::<i32>(6)?;
        ctx.add(&a, &b, &mut out)?;
        assert_eq!(out.download()?, [i32::MIN, i32::MAX, i32::MAX, 7, -5, 0]);
        ctx.div(&a, &b, &mut out)?;
        // MIN / -1 wraps to MIN; x / 0 is 0; division truncates toward zero.
        assert_eq!(out.download()?, [i32::MAX, i32::MIN, i32::MIN, 0, -3, 0]);
        ctx.div(&a, &a, &mut out)?;
        assert_eq!(out.download()?, [1, 1, 1, 1, 1, 0], "x / x, and 0 / 0 = 0");
        let u = ctx.alloc_upload(&[255u8, 0, 200])?;
        let v = ctx.alloc_upload(&[1u8, 1, 100])?;
        let mut w = ctx.alloc_zeros::<u8>(3)?;
        ctx.add(&u, &v, &mut w)?;
        assert_eq!(w.download()?, [0, 1, 44]);
        ctx.sub(&v, &u, &mut w)?;
        assert_eq!(w.download()?, [2, 1, 156]);
        assert_eq!(ctx.sum(&u)?, 199); // 455 mod 256
        Ok(())
    }

    fn float_max_ignores_nan(ctx) {
        let a = ctx.alloc_upload(&[f32::NAN, 1.0, 3.0, f32::NAN, -2.0])?;
        assert_eq!(ctx.max(&a)?, 3.0);
        let b = ctx.alloc_upload(&[-5.0f64, f64::NAN])?;
        assert_eq!(ctx.max(&b)?, -5.0);
        let c = ctx.alloc_upload(&[f64::NEG_INFINITY, -1e308])?;
        assert_eq!(ctx.max(&c)?, -1e308);
        let d = ctx.alloc_upload(&[f32::NAN, f32::NAN])?;
        assert!(ctx.max(&d)?.is_nan());
        Ok(())
    }
}
