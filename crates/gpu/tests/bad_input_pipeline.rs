//! Bad input to pipelines: configurations that cannot run, batches of the wrong size, user
//! stages that fail, and sizes too large for memory. Each case checks the exact
//! `PipelineError` variant with its batch and stage, and that the sink saw exactly the
//! batches before the failing one, in order and correct (nothing of the failing batch or
//! later). The rows are listed in docs/BAD-INPUT.md.
//!
//! Every body runs on every backend through `backend_tests!`, with small batches and few
//! of them so the file stays fast on a 2-core CI machine.

mod common;

use gpukit::pipeline::BoxError;
use gpukit::{Error, GpuArray, Pattern, Pipeline, PipelineError, Stage, Stream};

/// Elements per batch.
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
fn double(s: &Stream, _i: usize, x: &GpuArray<f32>, y: &mut GpuArray<f32>) -> gpukit::Result<()> {
    s.copy(x, y)?;
    s.scale(2.0, y)
}

/// The load stage of every case that does not fail there.
fn load(i: usize, buf: &mut [f32]) -> Result<(), BoxError> {
    buf.copy_from_slice(&input(i));
    Ok(())
}

/// A pipeline of `batches` batches of `LEN` elements each way.
fn pipeline(ctx: &gpukit::Context, pattern: Pattern, batches: usize) -> Pipeline {
    Pipeline::new(ctx, pattern)
        .batches(batches)
        .input_len(LEN)
        .output_len(LEN)
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

/// Asserts a `PipelineError::Stage` (a user's load or sink error) at `batch` and `stage`.
#[track_caller]
fn assert_stage(r: Result<gpukit::Report, PipelineError>, batch: usize, stage: Stage, what: &str) {
    match r {
        Err(PipelineError::Stage {
            batch: b,
            stage: s,
            source,
        }) => {
            assert_eq!((b, s), (batch, stage), "{what}: {source}");
            assert!(!source.to_string().is_empty(), "{what}");
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

backend_tests! {
    fn configurations_that_cannot_run_are_rejected_before_any_work(ctx) {
        let cases = [
            ("Deep(0)", pipeline(ctx, Pattern::Deep(0), 3)),
            ("compute_streams(0), triple", pipeline(ctx, Pattern::Triple, 3).compute_streams(0)),
            ("compute_streams(0), sequential", pipeline(ctx, Pattern::Sequential, 3).compute_streams(0)),
        ];
        let loads = std::sync::atomic::AtomicUsize::new(0);
        let mut sunk = 0;
        for (what, p) in &cases {
            let r = p.run(
                |i, buf: &mut [f32]| {
                    loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    load(i, buf)
                },
                double,
                |_, _: &[f32]| {
                    sunk += 1;
                    Ok(())
                },
            );
            match r {
                Err(e @ PipelineError::Config(_)) => {
                    assert_eq!((e.batch(), e.stage()), (None, None), "{what}");
                    assert!(!e.to_string().is_empty());
                }
                Err(e) => panic!("{what}: expected Config, got {e:?}"),
                Ok(_) => panic!("{what}: the run succeeded"),
            }
            // run_iter is checked the same way.
            let r = p.run_iter((0..3).map(input), double, |_, _: &[f32]| {
                sunk += 1;
                Ok(())
            });
            assert!(matches!(r, Err(PipelineError::Config(_))), "{what}, run_iter: {:?}", r.err());
        }
        assert_eq!(loads.into_inner(), 0, "a rejected pipeline loaded batches");
        assert_eq!(sunk, 0, "a rejected pipeline delivered batches");
        Ok(())
    }

    fn run_iter_items_of_the_wrong_length_stop_the_run_at_that_batch(ctx) {
        for pattern in PATTERNS {
            for (what, bad) in [("one too many", vec![0.5f32; LEN + 1]), ("empty", vec![])] {
                let what = format!("{pattern}, {what}");
                let items = vec![input(0), input(1), bad.clone(), input(3)];
                let mut got = Vec::new();
                let r = pipeline(ctx, pattern, 4).run_iter(items, double, |i, y: &[f32]| {
                    got.push((i, y.to_vec()));
                    Ok(())
                });
                assert_stage(r, 2, Stage::Load, &what);
                assert_delivered(&got, 2, &what);
            }
            // An iterator that ends before the last batch.
            let what = format!("{pattern}, iterator too short");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 3).run_iter(vec![input(0)], double, |i, y: &[f32]| {
                got.push((i, y.to_vec()));
                Ok(())
            });
            assert_stage(r, 1, Stage::Load, &what);
            assert_delivered(&got, 1, &what);
        }
        Ok(())
    }

    fn failing_user_stages_name_the_batch_and_stage(ctx) {
        let other = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
        let foreign = other.alloc_upload(&[7.0f32; LEN])?;
        let mut short = ctx.alloc_upload(&[-1.0f32; LEN - 1])?;
        for pattern in PATTERNS {
            // The loader fails at batch 2.
            let what = format!("{pattern}, load");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(
                |i, buf: &mut [f32]| {
                    if i == 2 {
                        return Err("no such shard".into());
                    }
                    load(i, buf)
                },
                double,
                |i, y: &[f32]| {
                    got.push((i, y.to_vec()));
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
                |s: &Stream, i, x: &GpuArray<f32>, y: &mut GpuArray<f32>| {
                    if i == 2 {
                        s.add(x, x, &mut short)?;
                    }
                    double(s, i, x, y)
                },
                |i, y: &[f32]| {
                    got.push((i, y.to_vec()));
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
                |s: &Stream, i, x: &GpuArray<f32>, y: &mut GpuArray<f32>| {
                    if i == 1 {
                        s.add(x, &foreign, y)?;
                    }
                    double(s, i, x, y)
                },
                |i, y: &[f32]| {
                    got.push((i, y.to_vec()));
                    Ok(())
                },
            );
            let e = assert_gpu(r, 1, Stage::Compute, &what);
            assert!(matches!(e, Error::ContextMismatch { .. }), "{what}: {e:?}");
            assert_delivered(&got, 1, &what);

            // The sink fails at batch 2: batches 0 and 1 were delivered, nothing after 2.
            let what = format!("{pattern}, sink");
            let mut got = Vec::new();
            let r = pipeline(ctx, pattern, 4).run(load, double, |i, y: &[f32]| {
                if i == 2 {
                    return Err("disk full".into());
                }
                got.push((i, y.to_vec()));
                Ok(())
            });
            assert_stage(r, 2, Stage::Deliver, &what);
            assert_delivered(&got, 2, &what);
        }
        // The arrays the failed calls touched are unchanged.
        assert_eq!(short.download()?, [-1.0; LEN - 1]);
        assert_eq!(foreign.download()?, [7.0; LEN]);
        Ok(())
    }

    fn batch_sizes_too_large_for_memory_are_overflow_or_out_of_memory(ctx) {
        let too_big = (1usize << 40).max(ctx.info().total_memory as usize + 1);
        for pattern in [Pattern::Sequential, Pattern::Triple] {
            // 1 << 62 f32 inputs: 2^64 bytes overflow the address space.
            let p = Pipeline::new(ctx, pattern).batches(2).input_len(1 << 62).output_len(LEN);
            let r = p.run(|_, _: &mut [f32]| panic!("loaded a batch that cannot exist"), double, |_, _: &[f32]| {
                panic!("delivered a batch that cannot exist")
            });
            let e = assert_gpu(r, 0, Stage::Upload, &format!("{pattern}, input"));
            assert!(matches!(e, Error::SizeOverflow { len, elem_bytes: 4, .. } if len == 1 << 62), "{e:?}");

            // An output larger than the device.
            let p = Pipeline::new(ctx, pattern).batches(2).input_len(LEN).output_len(too_big);
            let r = p.run(load, |_: &Stream, _, _: &GpuArray<f32>, _: &mut GpuArray<u8>| Ok(()), |_, _: &[u8]| {
                panic!("delivered a batch that cannot exist")
            });
            let e = assert_gpu(r, 0, Stage::Compute, &format!("{pattern}, output"));
            assert!(matches!(e, Error::OutOfMemory { requested, .. } if requested >= too_big), "{e:?}");
        }
        // The context is still usable.
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        Ok(())
    }

    fn zero_batches_and_empty_batches_are_valid(ctx) {
        for pattern in PATTERNS {
            // No batches: nothing is loaded or delivered.
            let r = pipeline(ctx, pattern, 0).run(
                |_, _: &mut [f32]| panic!("loaded a batch of an empty run"),
                double,
                |_, _: &[f32]| panic!("delivered a batch of an empty run"),
            );
            assert!(r.is_ok(), "{pattern}, 0 batches: {:?}", r.err());

            // Batches of zero elements: every one is delivered, empty.
            let mut got = Vec::new();
            let r = Pipeline::new(ctx, pattern).batches(3).run(
                |_, buf: &mut [f32]| {
                    assert!(buf.is_empty());
                    Ok(())
                },
                double,
                |i, y: &[f32]| {
                    got.push((i, y.len()));
                    Ok(())
                },
            );
            assert!(r.is_ok(), "{pattern}, empty batches: {:?}", r.err());
            assert_eq!(got, [(0, 0), (1, 0), (2, 0)], "{pattern}");
        }
        Ok(())
    }
}
