//! Profiler ranges (`ctx.range`): NVTX ranges on CUDA where the NVTX library loads, nothing
//! elsewhere; they nest, tolerate any name, and leave the work inside them unchanged.

use crate::backend_tests;

/// Whether this context's ranges reach a profiler timeline.
fn records(ctx: &gpukit::Context) -> bool {
    #[cfg(feature = "cuda")]
    if ctx.backend_name() == "cuda" {
        return gpukit::cuda::nvtx::available();
    }
    let _ = ctx;
    false
}

backend_tests! {
    fn ranges_nest_and_record_only_where_a_profiler_timeline_exists(ctx) {
        let x = ctx.alloc_upload(&[1.0f32, -2.0, 3.0])?;
        let mut y = ctx.alloc::<f32>(3)?;
        let outer = ctx.range("outer");
        {
            // A NUL byte ends the name for NVTX rather than failing.
            let inner = ctx.range("inner\0rest");
            assert_eq!(inner.is_recorded(), records(ctx));
            ctx.relu(&x, &mut y)?;
        }
        assert_eq!(outer.is_recorded(), records(ctx), "{outer:?}");
        drop(outer);
        assert_eq!(y.download()?, [1.0, 0.0, 3.0]);
        Ok(())
    }
}
