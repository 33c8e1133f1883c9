//! Bad input to pipelines: configurations that cannot run, batches over the maximum or of
//! broken shape, user stages that fail or panic, and sizes too large for memory. Each case
//! checks the exact `PipelineError` variant with its batch and stage, and that the sink saw
//! exactly the batches before the failing one, in order and correct (nothing of the failing
//! batch or later). The rows are listed in docs/BAD-INPUT.md.
//!
//! Every body runs on every backend through `backend_tests!`, with small batches and few
//! of them so the file stays fast on a 2-core CI machine.

use crate::backend_tests;

use gpukit::pipeline::BoxError;
use gpukit::{Batch, Error, GpuView, GpuViewMut, Pattern, Pipeline, PipelineError, Stage, Stream};

/// Rows per batch at most (one f32 a row each way).
const LEN: usize = 4;

/// The patterns each case runs in: the baseline (everything on the calling thread), the
/// shallowest buffered pattern and the usual triple buffering.
const PATTERNS: [Pattern; 3] = [Pattern::Sequential, Pattern::Deep(1), Pattern::Triple];

/// Batch `i`'s input.
fn input(i: usize) -> Vec<f32> {
    (0..LEN).map(|j| (i * LEN + j) as f32).collect()
}

/// Batch `i`'s expected output: its input doubled.
fn output(i: usize) -> Vec<f32> {
    input(i).iter().map(|x| 2.0 * x).collect()
}

/// The compute stage of every case that does not fail there: `y = 2 * x`.
fn double<M>(
    s: &Stream,
    _b: &Batch<M>,
    x: &GpuView<'_, f32>,
    y: &mut GpuViewMut<'_, f32>,
) -> gpukit::Result<()> {
    s.copy(x, y)?;
    s.scale(2.0, y)
}

/// The load stage of every case that does not fail there: a full batch.
fn load(i: usize, buf: &mut [f32]) -> Result<usize, BoxError> {
    buf.copy_from_slice(&input(i));
    Ok(LEN)
}

/// A pipeline of `batches` batches of up to `LEN` rows of one f32 each way.
fn pipeline(ctx: &gpukit::Context, pattern: Pattern, batches: usize) -> Pipeline<f32, f32> {
    Pipeline::new(ctx, pattern)
        .batches(batches)
        .max_rows(LEN)
        .input::<f32>(1)
        .output::<f32>(1)
}

/// Asserts that the sink got batches `0..n`, in order, with the right contents.
#[track_caller]
fn assert_delivered(got: &[(usize, Vec<f32>)], n: usize, what: &str) {
    let want: Vec<(usize, Vec<f32>)> = (0..n).map(|i| (i, output(i))).collect();
    assert_eq!(
        got, want,
        "{what}: the sink should have got batches 0..{n} only"
    );
}

/// Asserts a `PipelineError::Stage` (a user stage's error or panic) at `batch` and
/// `stage`; returns its message.
#[track_caller]
fn assert_stage(
    r: Result<gpukit::Report, PipelineError>,
    batch: usize,
    stage: Stage,
    what: &str,
) -> String {
    match r {
        Err(PipelineError::Stage {
            batch: b,
            stage: s,
            source,
        }) => {
            assert_eq!((b, s), (batch, stage), "{what}: {source}");
            assert!(!source.to_string().is_empty(), "{what}");
            source.to_string()
        }
        Err(e) => panic!("{what}: expected Stage {{ {batch}, {stage} }}, got {e:?}"),
        Ok(_) => panic!("{what}: the run succeeded"),
    }
}

/// Asserts a `PipelineError::Gpu` at `batch` and `stage`; returns the device error.
#[track_caller]
fn assert_gpu(
    r: Result<gpukit::Report, PipelineError>,
    batch: usize,
    stage: Stage,
    what: &str,
) -> Error {
    match r {
        Err(PipelineError::Gpu {
            batch: b,
            stage: s,
            source,
        }) => {
            assert_eq!((b, s), (batch, stage), "{what}: {source}");
            source
        }
        Err(e) => panic!("{what}: expected Gpu {{ {batch}, {stage} }}, got {e:?}"),
        Ok(_) => panic!("{what}: the run succeeded"),
    }
}

/// Asserts a `PipelineError::Config` (no batch, no stage, a message).
#[track_caller]
fn assert_config(r: Result<gpukit::Report, PipelineError>, what: &str) {
    match r {
        Err(e @ PipelineError::Config(_)) => {
            assert_eq!((e.batch(), e.stage()), (None, None), "{what}");
            assert!(!e.to_string().is_empty());
        }
        Err(e) => panic!("{what}: expected Config, got {e:?}"),
        Ok(_) => panic!("{what}: the run succeeded"),
    }
}

backend_tests! {
    fn configurations_that_cannot_run_are_rejected_before_any_work(ctx) {
        let huge = usize::MAX / 2;
        let cases = [
            ("Deep(0)", pipeline(ctx, Pattern::Deep(0), 3)),
            ("compute_streams(0), triple", pipeline(ctx, Pattern::Triple, 3).compute_streams(0)),
            ("compute_streams(0), sequential", pipeline(ctx, Pattern::Sequential, 3).compute_streams(0)),
            ("batches(0)", pipeline(ctx, Pattern::Triple, 0)),
            ("batches never set", Pipeline::new(ctx, Pattern::Double).max_rows(LEN).input::<f32>(1).output::<f32>(1)),
            ("max_rows never set", Pipeline::new(ctx, Pattern::Triple).batches(3).input::<f32>(1).output::<f32>(1)),
            ("max_rows(0)", pipeline(ctx, Pattern::Sequential, 3).max_rows(0)),
            ("input width 0", pipeline(ctx, Pattern::Triple, 3).input::<f32>(0)),
            ("output width 0", pipeline(ctx, Pattern::Sequential, 3).output::<f32>(0)),
            ("calibration_batches(0), double", pipeline(ctx, Pattern::Double, 3).calibration_batches(0)),
            ("max_rows * width overflows", pipeline(ctx, Pattern::Triple, 3).max_rows(huge).input::<f32>(4)),
        ];
        let loads = std::sync::atomic::AtomicUsize::new(0);
        let mut sunk = 0;
        for (what, p) in &cases {
            let r = p.run(
                |i, buf| {
                    loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    load(i, buf)
                },
                double,
                |_, _| {
                    sunk += 1;
                    Ok(())
                },
            );
            assert_config(r, what);
            // run_iter is checked the same way.
            let r = p.run_iter((0..3).map(input), double, |_, _| {
                sunk += 1;
                Ok(())
            });
            assert_config(r, &format!("{what}, run_iter"));
        }
        // A sequential run needs no calibration: calibration_batches(0) is fine there.
        let r = pipeline(ctx, Pattern::Sequential, 1).calibration_batches(0).run(load, double, |_, _| Ok(()));
        assert!(r.is_ok(), "{:?}", r.err());
        assert_eq!(loads.into_inner(), 0, "a rejected pipeline loaded batches");
        assert_eq!(sunk, 0, "a rejected pipeline delivered batches");
        Ok(())
    }

    fn batches_over_the_maximum_stop_the_run_at_that_batch(ctx) {
        for pattern in PATTERNS {
            // The loader says it filled more rows than max_rows.
            let what = format!("{pattern}, load reports LEN + 1 rows");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(
                |i, buf| {
                    load(i, buf)?;
                    Ok(if i == 2 { LEN + 1 } else { LEN })
                },
                double,
                |b, y| {
                    got.push((b.index, y.to_vec()));
                    Ok(())
                },
            );
            match r {
                Err(e @ PipelineError::TooManyRows { batch: 2, rows, max_rows: LEN }) if rows == LEN + 1 => {
                    assert_eq!(e.stage(), Some(Stage::Load), "{what}");
                    assert!(e.to_string().contains("max_rows"), "{what}: {e}");
                }
                other => panic!("{what}: expected TooManyRows at batch 2, got {other:?}"),
            }
            assert_delivered(&got, 2, &what);

            // run_iter: an item of LEN + 1 rows.
            let what = format!("{pattern}, run_iter item of LEN + 1 rows");
            let items = vec![input(0), input(1), vec![0.5f32; LEN + 1], input(3)];
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run_iter(items, double, |b, y| {
                got.push((b.index, y.to_vec()));
                Ok(())
            });
            assert!(matches!(r, Err(PipelineError::TooManyRows { batch: 2, .. })), "{what}: {:?}", r.err());
            assert_delivered(&got, 2, &what);
        }
        Ok(())
    }

    fn run_iter_items_of_broken_shape_stop_the_run_at_that_batch(ctx) {
        for pattern in PATTERNS {
            // Two arrays, the second of width 2: an item whose second array is not whole
            // rows, and one whose arrays disagree on the row count.
            let two = |batches| {
                Pipeline::new(ctx, pattern)
                    .batches(batches)
                    .max_rows(LEN)
                    .input::<(f32, u32)>([1, 2])
                    .output::<f32>(1)
            };
            let good = |i: usize| (input(i), vec![i as u32; 2 * LEN]);
            for (what, bad) in [
                ("half a row", (input(2), vec![0u32; 2 * LEN - 1])),
                ("rows disagree", (input(2), vec![0u32; 2 * (LEN - 1)])),
            ] {
                let what = format!("{pattern}, {what}");
                let items = vec![good(0), good(1), bad, good(3)];
                let mut got = Vec::new();
                let r = two(4).run_iter(
                    items,
                    |s, b, (x, _), y| double(s, b, x, y),
                    |b, y| {
                        got.push((b.index, y.to_vec()));
                        Ok(())
                    },
                );
                assert_stage(r, 2, Stage::Load, &what);
                assert_delivered(&got, 2, &what);
            }
            // An iterator that ends before the last batch.
            let what = format!("{pattern}, iterator too short");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 3).run_iter(vec![input(0)], double, |b, y| {
                got.push((b.index, y.to_vec()));
                Ok(())
            });
            assert_stage(r, 1, Stage::Load, &what);
            assert_delivered(&got, 1, &what);
        }
        Ok(())
    }

    fn failing_user_stages_name_the_batch_and_stage(ctx) {
        let other = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
        let foreign = other.alloc_upload(&[7.0f32; LEN])?;
        let mut short = ctx.alloc_upload(&[-1.0f32; LEN - 1])?;
        for pattern in PATTERNS {
            // The loader fails at batch 2.
            let what = format!("{pattern}, load");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(
                |i, buf| {
                    if i == 2 {
                        return Err("no such shard".into());
                    }
                    load(i, buf)
                },
                double,
                |b, y| {
                    got.push((b.index, y.to_vec()));
                    Ok(())
                },
            );
            assert_stage(r, 2, Stage::Load, &what);
            assert_delivered(&got, 2, &what);

            // The compute stage returns a device error at batch 2: a length mismatch.
            let what = format!("{pattern}, compute length");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(
                load,
                |s, b, x, y| {
                    if b.index == 2 {
                        s.add(x, x, &mut short)?;
                    }
                    double(s, b, x, y)
                },
                |b, y| {
                    got.push((b.index, y.to_vec()));
                    Ok(())
                },
            );
            let e = assert_gpu(r, 2, Stage::Compute, &what);
            assert!(matches!(e, Error::LengthMismatch { expected: LEN, got, .. } if got == LEN - 1), "{what}: {e:?}");
            assert_delivered(&got, 2, &what);

            // The compute stage uses another context's array at batch 1.
            let what = format!("{pattern}, compute context");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 3).run(
                load,
                |s, b, x, y| {
                    if b.index == 1 {
                        s.add(x, &foreign, y)?;
                    }
                    double(s, b, x, y)
                },
                |b, y| {
                    got.push((b.index, y.to_vec()));
                    Ok(())
                },
            );
            let e = assert_gpu(r, 1, Stage::Compute, &what);
            assert!(matches!(e, Error::ContextMismatch { .. }), "{what}: {e:?}");
            assert_delivered(&got, 1, &what);

            // The compute function panics at batch 2.
            let what = format!("{pattern}, compute panics");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(
                load,
                |s, b, x, y| {
                    assert!(b.index != 2, "the model diverged at batch {}", b.index);
                    double(s, b, x, y)
                },
                |b, y| {
                    got.push((b.index, y.to_vec()));
                    Ok(())
                },
            );
            let message = assert_stage(r, 2, Stage::Compute, &what);
            assert!(message.contains("the model diverged at batch 2"), "{what}: {message}");
            assert_delivered(&got, 2, &what);

            // The sink fails at batch 2: batches 0 and 1 were delivered, nothing after 2.
            let what = format!("{pattern}, sink");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(load, double, |b, y| {
                if b.index == 2 {
                    return Err("disk full".into());
                }
                got.push((b.index, y.to_vec()));
                Ok(())
            });
            assert_stage(r, 2, Stage::Deliver, &what);
            assert_delivered(&got, 2, &what);

            // The sink panics at batch 1.
            let what = format!("{pattern}, sink panics");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(load, double, |b, y| {
                assert!(b.index != 1, "cannot write batch {}", b.index);
                got.push((b.index, y.to_vec()));
                Ok(())
            });
            let message = assert_stage(r, 1, Stage::Deliver, &what);
            assert!(message.contains("cannot write batch 1"), "{what}: {message}");
            assert_delivered(&got, 1, &what);
        }
        // The arrays the failed calls touched are unchanged, and the context works.
        assert_eq!(short.download()?, [-1.0; LEN - 1]);
        assert_eq!(foreign.download()?, [7.0; LEN]);
        let mut got = Vec::new();
        pipeline(ctx, Pattern::Triple, 3)
            .run(load, double, |b, y| {
                got.push((b.index, y.to_vec()));
                Ok(())
            })
            .map_err(gpukit::Error::from)?;
        assert_delivered(&got, 3, "after the failures");
        Ok(())
    }

    fn batch_sizes_too_large_for_memory_are_out_of_memory(ctx) {
        let too_big = (1usize << 40).max(ctx.info().total_memory as usize + 1);
        for pattern in [Pattern::Sequential, Pattern::Triple] {
            // An output larger than the device.
            let p = Pipeline::new(ctx, pattern)
                .batches(2)
                .max_rows(1)
                .input::<f32>(LEN)
                .output::<u8>(too_big);
            let r = p.run(
                |_, buf| {
                    buf.fill(1.0);
                    Ok(1)
                },
                |_, _, _, _| Ok(()),
                |_, _| panic!("delivered a batch that cannot exist"),
            );
            let e = assert_gpu(r, 0, Stage::Compute, &format!("{pattern}, output"));
            assert!(matches!(e, Error::OutOfMemory { requested, .. } if requested >= too_big), "{e:?}");
        }
        // The context is still usable.
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        Ok(())
    }

    fn short_and_empty_batches_are_valid(ctx) {
        for pattern in PATTERNS {
            // Batches of 4, 0, 1 and 3 rows: each delivered with exactly its rows.
            let rows = [LEN, 0, 1, 3];
            let mut got = Vec::new();
            let report = pipeline(ctx, pattern, rows.len())
                .run(
                    |i, buf| {
                        load(i, buf)?;
                        Ok(rows[i])
                    },
                    |s, b, x, y| {
                        assert_eq!((x.len(), y.len()), (b.rows, b.rows));
                        double(s, b, x, y)
                    },
                    |b, y| {
                        got.push((b.index, b.rows, y.to_vec()));
                        Ok(())
                    },
                )
                .map_err(gpukit::Error::from)?;
            let want: Vec<_> = rows
                .iter()
                .enumerate()
                .map(|(i, &r)| (i, r, output(i)[..r].to_vec()))
                .collect();
            assert_eq!(got, want, "{pattern}");
            assert_eq!(report.rows, rows.iter().sum::<usize>(), "{pattern}");
            assert_eq!(report.bytes_in, 4 * report.rows, "{pattern}");
        }
        Ok(())
    }
}
