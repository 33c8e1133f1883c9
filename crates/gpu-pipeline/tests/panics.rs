//! A load function that panics is that batch's load error, in every pattern: the loader
//! thread does not take the run down, earlier batches are delivered, and the context stays
//! usable.

use gpukit_pipeline::{Pattern, Pipeline, PipelineError, Stage};

#[test]
fn a_panicking_load_is_the_batchs_load_error() {
    let ctx = match gpukit_cpu::CpuBackend::context() {
        Ok(ctx) => ctx,
        Err(e) => panic!("the CPU backend opens: {e}"),
    };
    for pattern in [Pattern::Sequential, Pattern::Double, Pattern::Triple] {
        let mut delivered = Vec::new();
        let r = Pipeline::new(&ctx, pattern)
            .batches(6)
            .input_len(16)
            .output_len(16)
            .run(
                |i, buf: &mut [f32]| {
                    if i == 3 {
                        panic!("disk on fire at batch {i}");
                    }
                    buf.fill(i as f32);
                    Ok(())
                },
                |s, _i, x, y| s.copy(x, y),
                |i, y: &[f32]| {
                    delivered.push((i, y[0]));
                    Ok(())
                },
            );
        match r {
            Err(e @ PipelineError::Stage { .. }) => {
                assert_eq!(
                    (e.batch(), e.stage()),
                    (Some(3), Some(Stage::Load)),
                    "{pattern}"
                );
                // The panic's message is the cause, one level down.
                let cause = std::error::Error::source(&e).map(ToString::to_string);
                assert!(
                    cause
                        .as_deref()
                        .is_some_and(|c| c.contains("disk on fire at batch 3")),
                    "{e}: {cause:?}"
                );
            }
            other => panic!("{pattern}: expected the load error of batch 3, got {other:?}"),
        }
        assert_eq!(delivered, [(0, 0.0), (1, 1.0), (2, 2.0)], "{pattern}");
        if let Err(e) = ctx.sync() {
            panic!("{pattern}: the context is unusable after the panic: {e}");
        }
    }
}
