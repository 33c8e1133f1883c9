//! A first behaviour through the per-backend harness.

mod common;

backend_tests! {
    fn add_round_trip(ctx) {
        let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0])?;
        let b = ctx.alloc_upload(&[5.0f32, 6.0, 7.0, 8.0])?;
        let mut out = ctx.alloc_zeros::<f32>(4)?;
        ctx.add(&a, &b, &mut out)?;
        assert_eq!(out.download()?, vec![6.0, 8.0, 10.0, 12.0]);
        Ok(())
    }
}
