//! A load function, compute function or sink that panics is that batch's error for its
//! stage, in every pattern: neither the loader thread nor the calling thread is taken down,
//! earlier batches are delivered, and the context stays usable.
//!
//! The batches panicking cover each path of the engine: a calibration batch (0; the
//! buffered patterns run the first two alone), batches of the overlapped loop, and the last
//! batch, whose sink runs when the loop drains what is still in flight.

use gpukit_cpu::CpuContext;
use gpukit_pipeline::{Pattern, Pipeline, PipelineError, Stage};

const PATTERNS: [Pattern; 5] = [
    Pattern::Sequential,
    Pattern::Deep(1),
    Pattern::Double,
    Pattern::Triple,
    Pattern::Deep(5),
];

const BATCHES: usize = 6;

fn cpu() -> CpuContext {
    match gpukit_cpu::CpuBackend::context() {
        Ok(ctx) => ctx,
        Err(e) => panic!("the CPU backend opens: {e}"),
    }
}

/// Runs [`BATCHES`] batches that panic as `panics_at` says (in a stage, at a batch); returns the
/// delivered batches.
fn run(
    ctx: &CpuContext,
    pattern: Pattern,
    panics_at: Option<(Stage, usize)>,
) -> (
    Vec<(usize, f32)>,
    Result<gpukit_pipeline::Report, PipelineError>,
) {
    let mut delivered = Vec::new();
    let r = Pipeline::new(ctx, pattern)
        .batches(BATCHES)
        .max_rows(16)
        .input::<f32>(1)
        .output::<f32>(1)
        .run(
            |i, buf| {
                if panics_at == Some((Stage::Load, i)) {
                    panic!("disk on fire at batch {i}");
                }
                buf.fill(i as f32);
                Ok(buf.len())
            },
            |s, b, x, y| {
                if panics_at == Some((Stage::Compute, b.index)) {
                    panic!("the model diverged at batch {}", b.index);
                }
                s.copy(x, y)
            },
            |b, y| {
                if panics_at == Some((Stage::Deliver, b.index)) {
                    panic!("cannot write batch {}", b.index);
                }
                delivered.push((b.index, y[0]));
                Ok(())
            },
        );
    (delivered, r)
}

#[test]
fn a_panicking_stage_is_the_batchs_error_for_that_stage() {
    let ctx = cpu();
    let cases = [
        (Stage::Load, 0, "disk on fire at batch 0"),
        (Stage::Load, 3, "disk on fire at batch 3"),
        (Stage::Compute, 0, "the model diverged at batch 0"),
        (Stage::Compute, 2, "the model diverged at batch 2"),
        (Stage::Compute, 5, "the model diverged at batch 5"),
        (Stage::Deliver, 1, "cannot write batch 1"),
        (Stage::Deliver, 4, "cannot write batch 4"),
        (Stage::Deliver, 5, "cannot write batch 5"),
    ];
    for pattern in PATTERNS {
        for (stage, at, message) in cases {
            let what = format!("{pattern}, {stage} panics at batch {at}");
            let (delivered, r) = run(&ctx, pattern, Some((stage, at)));
            match r {
                Err(e @ PipelineError::Stage { .. }) => {
                    assert_eq!((e.batch(), e.stage()), (Some(at), Some(stage)), "{what}");
                    // The panic's message is the cause, one level down.
                    let cause = std::error::Error::source(&e).map(ToString::to_string);
                    assert!(
                        cause.as_deref().is_some_and(|c| c.contains(message)),
                        "{what}: {e}: {cause:?}"
                    );
                }
                other => panic!("{what}: expected the batch's {stage} error, got {other:?}"),
            }
            let want: Vec<(usize, f32)> = (0..at).map(|i| (i, i as f32)).collect();
            assert_eq!(delivered, want, "{what}");
            if let Err(e) = ctx.sync() {
                panic!("{what}: the context is unusable after the panic: {e}");
            }
        }
        // And it runs the next pipeline correctly.
        let (delivered, r) = run(&ctx, pattern, None);
        assert!(r.is_ok(), "{pattern}: {:?}", r.err());
        let want: Vec<(usize, f32)> = (0..BATCHES).map(|i| (i, i as f32)).collect();
        assert_eq!(delivered, want, "{pattern}");
    }
}
