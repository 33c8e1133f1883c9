//! The report's timeline, for every pattern: each batch has one span per stage on the lane
//! its pattern puts it, each span inside the run, and a batch's device stages in their
//! order (its compute starts after its upload ends, its download after its compute),
//! since each waits for the one before.
//!
//! Device spans are timed by events from the start event; the load spans and the wall time
//! by the host's clock, started when the host saw the start event complete. The two zero
//! points differ by that wake-up (tens of microseconds here, more on a loaded machine), so
//! comparisons across the clocks allow [`CLOCKS`]; device spans among themselves are exact.

use gpukit_cpu::{CpuBackend, CpuContext};
use gpukit_pipeline::{Batch, Lane, Pattern, Pipeline, Stage};

const BATCHES: usize = 6;
const ROWS: usize = 4096;
/// How far the host's clock may lag the device's (ms): the start event's wake-up.
const CLOCKS: f64 = 25.0;

#[test]
fn every_batch_has_its_stages_in_order_inside_the_run() {
    let ctx = CpuContext::new(CpuBackend::new().unwrap()).unwrap();
    for pattern in Pattern::STANDARD {
        let report = Pipeline::new(&ctx, pattern)
            .batches(BATCHES)
            .max_rows(ROWS)
            .input::<f32>(1)
            .output::<f32>(1)
            .run(
                |i, x: &mut [f32]| {
                    x.iter_mut().for_each(|v| *v = i as f32);
                    Ok((ROWS, ()))
                },
                |s, _b, x, y| {
                    s.copy(x, y)?;
                    s.scale(2.0, y)
                },
                |_b: Batch<()>, _y: &[f32]| Ok(()),
            )
            .unwrap();
        let spans = &report.timeline.spans;
        let eps = 1e-6;
        for b in 0..BATCHES {
            let of = |stage: Stage| {
                let found: Vec<_> = spans
                    .iter()
                    .filter(|s| s.batch == b && s.stage == stage)
                    .collect();
                assert_eq!(found.len(), 1, "{pattern:?} batch {b} {stage:?}: {found:?}");
                found[0]
            };
            let (load, up, comp, down) = (
                of(Stage::Load),
                of(Stage::Upload),
                of(Stage::Compute),
                of(Stage::Download),
            );
            assert_eq!(load.lane, Lane::Loader, "{pattern:?}");
            let lanes = [up.lane, comp.lane, down.lane];
            if pattern == Pattern::Sequential {
                assert_eq!(lanes, [Lane::Stream(0); 3], "{pattern:?}");
            } else {
                assert!(
                    matches!(lanes, [Lane::Upload, Lane::Compute(_), Lane::Download]),
                    "{pattern:?}: {lanes:?}"
                );
            }
            for s in [load, up, comp, down] {
                assert!(
                    s.start_ms >= -eps
                        && s.start_ms <= s.end_ms
                        && s.end_ms <= report.wall_ms + CLOCKS,
                    "{pattern:?} batch {b}: {s:?} outside 0..{}",
                    report.wall_ms
                );
            }
            assert!(
                up.end_ms <= comp.start_ms + eps,
                "{pattern:?} batch {b}: {up:?} {comp:?}"
            );
            assert!(
                comp.end_ms <= down.start_ms + eps,
                "{pattern:?} batch {b}: {comp:?} {down:?}"
            );
            assert!(
                load.end_ms <= up.start_ms + CLOCKS,
                "{pattern:?} batch {b}: {load:?} {up:?}"
            );
        }
    }
}
