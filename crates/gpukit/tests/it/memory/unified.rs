//! Unified (managed) memory, on every backend: host writes seen by ops and kernels, their
//! results read in place on the host, host access waiting for queued work on any stream,
//! prefetch as a hint that changes nothing. The Vulkan backend has none: there each test
//! checks that `alloc_unified` is `Error::Unsupported`.

use crate::{backend_tests, common};

use common::delay_spec;
use gpukit::{Context, Error, LaunchConfig, Location};

/// Whether the backend has unified memory; on one without, checks that it says so.
fn unified(ctx: &Context) -> gpukit::Result<bool> {
    if ctx.backend_name() != "vulkan" {
        return Ok(true);
    }
    match ctx.alloc_unified::<f32>(4) {
        Err(Error::Unsupported { .. }) => Ok(false),
        other => panic!("vulkan alloc_unified: expected Unsupported, got {other:?}"),
    }
}

backend_tests! {
    fn host_writes_reach_ops_and_results_are_read_in_place(ctx) {
        if !unified(ctx)? {
            return Ok(());
        }
        let n = 1000;
        let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 500.0) * 0.25).collect();
        let mut x = ctx.alloc_unified::<f32>(n)?;
        assert!(x.host()?.iter().all(|&v| v == 0.0), "allocated zeroed");
        x.host_mut()?.copy_from_slice(&xs);
        let mut y = ctx.alloc_unified::<f32>(n)?;
        ctx.relu(&x, &mut y)?;
        ctx.scale(2.0f32, &mut y)?;
        let want: Vec<f32> = xs.iter().map(|v| v.max(0.0) * 2.0).collect();
        assert_eq!(y.host()?, &want[..]);
        // Views, downloads and copies to ordinary arrays work as on any array.
        assert_eq!(y.slice(10..20)?.download()?, want[10..20]);
        let mut z = ctx.alloc_zeros::<f32>(n)?;
        ctx.copy(&y, &mut z)?;
        assert_eq!(z.download()?, want);
        Ok(())
    }

    fn host_access_waits_for_queued_work_on_other_streams(ctx) {
        if !unified(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let delay = ctx.kernel(delay_spec())?;
        let mut x = ctx.alloc_unified::<f32>(1 << 12)?;
        s.launch(&delay, LaunchConfig::linear(1, 1), (30_000u32,))?;
        s.fill(&mut x, 7.0)?;
        // No sync: the host read must wait for the fill behind the delay.
        assert!(x.host()?.iter().all(|&v| v == 7.0));
        // A host write waits for queued reads too.
        let mut y = ctx.alloc_zeros::<f32>(1 << 12)?;
        s.launch(&delay, LaunchConfig::linear(1, 1), (30_000u32,))?;
        s.copy(&x, &mut y)?;
        x.host_mut()?.fill(-1.0);
        assert!(y.download()?.iter().all(|&v| v == 7.0), "the copy read x before the host wrote it");
        Ok(())
    }

    fn prefetch_is_a_hint_that_changes_nothing(ctx) {
        if !unified(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let mut x = ctx.alloc_unified::<i32>(513)?;
        for (i, v) in x.host_mut()?.iter_mut().enumerate() {
            *v = i as i32 - 256;
        }
        x.prefetch(&s, Location::Device)?;
        s.abs_inplace(&mut x)?;
        x.prefetch(&s, Location::Host)?;
        let want: Vec<i32> = (0..513).map(|i: i32| (i - 256).abs()).collect();
        assert_eq!(x.host()?, &want[..]);
        let empty = ctx.alloc_unified::<i32>(0)?;
        empty.prefetch(&s, Location::Device)?;
        assert!(empty.host()?.is_empty());
        Ok(())
    }

    fn unified_memory_is_refused_in_a_capture_and_outside_the_pool(ctx) {
        if !unified(ctx)? {
            return Ok(());
        }
        let before = ctx.memory_stats();
        let x = ctx.alloc_unified::<f32>(1 << 10)?;
        assert_eq!(ctx.memory_stats(), before, "unified memory is not counted by the pool");
        drop(x);
        let s = ctx.create_stream()?;
        let r = s.capture(|_| {
            assert!(matches!(
                ctx.alloc_unified::<f32>(4),
                Err(Error::CaptureViolation { call: "Context::alloc_unified", .. })
            ));
            Ok(())
        });
        assert!(r.is_ok(), "{r:?}");
        Ok(())
    }
}
