//! Property tests of the pipeline engine, on every backend (`backend_tests!`: the CPU
//! backend always, CUDA when compiled in and present):
//!
//! - **equivalence**: random pipelines deliver, in order and exactly once each, with the
//!   loader's metadata (a `(usize, u64)` from the batch index and the case's seed), what the
//!   sequential pattern delivers and what a host reference computes, bit for bit. Drawn per
//!   case: the pattern (sequential, double, triple, `Deep(1..=5)`), 1 to 12 batches,
//!   `max_rows`, each batch's rows from 0 to `max_rows` (full, short and empty batches),
//!   one, two or three input arrays (`f32`, `(f32, i32)`, `(f32, i32, u32)`) with random
//!   widths and one output array or as many as the inputs (the `i32` output is a row sum, so
//!   its width, 1, differs from its input's), compute streams (1 to 3), calibration batches
//!   (1 to 4, so sometimes all of them), staging that the loader reads back, loader delays,
//!   and a chain of exact built-in ops (quarters, so f32 results are exact);
//! - **reports**: rows, batches and bytes each way agree with the run, the bound is positive
//!   when there was work and comes from the sequential run or from `min(calibration,
//!   batches)` calibrated batches, efficiency is bound over wall time, and
//!   `Report::against(&sequential)` shares the sequential bound and gives the speed-up;
//! - **failures**: a load error or panic, a loader reporting more rows than `max_rows`
//!   (`TooManyRows`), a compute error (its own, or a device error) or panic, a sink error or
//!   panic, at a random batch, stop the run with an error naming that batch and stage,
//!   after delivering exactly the batches before it, intact and in order; every pinned
//!   buffer goes back to the context's pool, the context syncs cleanly, and the next
//!   pipeline on it (another pattern, no fault) runs correctly;
//! - **progress**: a thread polling [`gpukit::Progress`] during a run sees consistent
//!   (`delivered <= submitted <= loaded <= total`), monotone counters and, at the end, every
//!   batch delivered and the run finished.
//!
//! Only built-in ops (no CPU closures), so every property runs on CUDA too. Every case runs
//! on a fresh context of the backend under test, in a thread of its own with a time limit:
//! a case that hangs fails (and is reported as it is, without shrinking) rather than hang the
//! suite.
//!
//! Case counts: each property has a default sized for CI on two cores (the file takes a few
//! seconds on the CPU backend in a debug build); `PROPTEST_CASES=N` raises every property to
//! at least `N` cases and never lowers one; a value that is not a number fails the tests.

mod cases;

use crate::{backend_tests, common};

use cases::*;

use std::cell::Cell;
use std::sync::mpsc;
use std::time::Duration;

use common::{cases, harness_error};

use gpukit::pipeline::BoxError;
use gpukit::{
    Batch, BoundSource, Context, DeviceSpec, Error, GpuView, GpuViewMut, HostUse, Pattern,
    Pipeline, PipelineError, ProgressSnapshot, Report, Shape, Stage, Stream,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ---------------------------------------------------------------------------------------
// Harness glue
// ---------------------------------------------------------------------------------------

/// How long one case may take before it counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(60);

/// How a hung case's failure starts (see [`check`]).
const HANG: &str = "hang:";

/// Runs `test` on `default_cases` inputs (or more: see [`cases`]) drawn from `strategy`; a
/// failure becomes a `gpukit::Error` holding the shrunk input.
///
/// After a case hangs no further case runs (each passes at once), so proptest reports the
/// hanging input as found instead of shrinking it one [`CASE_LIMIT`] at a time.
fn check<S>(
    default_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> gpukit::Result<()>
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases: cases(default_cases)?,
        // Failures print their shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    let hung = Cell::new(false);
    TestRunner::new(config)
        .run(&strategy, |value| {
            if hung.get() {
                return Ok(());
            }
            let result = test(value);
            if let Err(TestCaseError::Fail(reason)) = &result {
                hung.set(reason.message().starts_with(HANG));
            }
            result
        })
        .map_err(|e| harness_error("proptest", e.to_string()))
}

/// Turns an error into a test-case failure.
trait OrFail<T> {
    fn tc(self) -> Result<T, TestCaseError>;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn tc(self) -> Result<T, TestCaseError> {
        self.map_err(|e| TestCaseError::fail(e.to_string()))
    }
}

/// A fresh context on the device `ctx` runs on.
fn fresh(ctx: &Context) -> Result<Context, TestCaseError> {
    let spec = match ctx.backend_name() {
        "cpu" => DeviceSpec::Cpu(None),
        "cuda" => DeviceSpec::Cuda(Some(ctx.device_id())),
        "vulkan" => DeviceSpec::Vulkan(Some(ctx.device_id())),
        other => return Err(TestCaseError::fail(format!("unknown backend {other}"))),
    };
    Context::new(spec).tc()
}

/// Runs `case` on a thread of its own: a case still running after [`CASE_LIMIT`] (a hang)
/// or one that panics fails. A hung thread is left behind; the test fails anyway.
fn limited<T: Send + 'static>(
    case: impl FnOnce() -> Result<T, TestCaseError> + Send + 'static,
) -> Result<T, TestCaseError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(CASE_LIMIT) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(TestCaseError::fail("the case panicked")),
        Err(_) => Err(TestCaseError::fail(format!(
            "{HANG} the case did not end within {CASE_LIMIT:?}"
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------

backend_tests! {
    /// Every pattern delivers what the sequential pattern and the host reference give, in
    /// order, with each batch's rows and metadata; the reports agree with the runs.
    fn any_pipeline_matches_sequential_processing(ctx) {
        let device = ctx.clone();
        check(96, case(1..=12), move |case| {
            let device = device.clone();
            limited(move || {
                let ctx = fresh(&device)?;
                let (seq, seq_out, _) = run_case(&ctx, &case, Pattern::Sequential, None);
                let seq = seq.tc()?;
                let (report, out, progress) = run_case(&ctx, &case, case.pattern, None);
                let report = report.tc()?;
                let n = case.batches();
                prop_assert_eq!(progress, complete(n));
                check_delivered(&case, &seq_out, n)?;
                check_delivered(&case, &out, n)?;
                prop_assert!(out == seq_out, "the pattern's outputs differ from sequential");
                check_report(&case, &seq, Pattern::Sequential)?;
                check_report(&case, &report, case.pattern)?;
                let judged = report.against(&seq).tc()?;
                prop_assert_eq!(judged.bound_source, BoundSource::Baseline);
                prop_assert_eq!(judged.bound_ms, seq.bound_ms);
                prop_assert_eq!(judged.efficiency, seq.bound_ms / report.wall_ms);
                prop_assert_eq!(judged.speedup_vs_sequential, Some(seq.wall_ms / report.wall_ms));
                let itself = seq.against(&seq).tc()?;
                prop_assert_eq!(itself.speedup_vs_sequential, Some(1.0));
                ctx.sync().tc()?;
                all_returned(&ctx, &case)
            })
        })
    }

    /// A failing stage stops the run cleanly: the error names the batch and stage, exactly
    /// the batches before it are delivered, nothing hangs, nothing leaks, and the context
    /// works on.
    fn a_failing_stage_stops_the_run_cleanly(ctx) {
        let device = ctx.clone();
        let strategy = (case(1..=12), pattern())
            .prop_flat_map(|(case, next)| (fault(case.batches()), Just(case), Just(next)));
        check(128, strategy, move |(fault, case, next_pattern)| {
            let device = device.clone();
            limited(move || {
                let ctx = fresh(&device)?;
                let (result, out, progress) = run_case(&ctx, &case, case.pattern, Some(fault));
                let err = match result {
                    Ok(_) => {
                        return Err(TestCaseError::fail("the run succeeded despite the fault"))
                    }
                    Err(e) => e,
                };
                prop_assert_eq!(err.batch(), Some(fault.batch), "failing batch of {}", err);
                prop_assert_eq!(err.stage(), Some(fault.stage), "failing stage of {}", err);
                let text = gpukit::error_chain(&err);
                match fault.how {
                    How::TooManyRows => prop_assert!(
                        matches!(err, PipelineError::TooManyRows { rows, max_rows, .. }
                            if rows == case.max_rows + 1 && max_rows == case.max_rows),
                        "{:?}", err
                    ),
                    How::LengthMismatch => prop_assert!(
                        matches!(
                            &err,
                            PipelineError::Gpu { source: Error::LengthMismatch { .. }, .. }
                        ),
                        "{:?}", err
                    ),
                    How::Panic => prop_assert!(
                        text.contains("injected") && text.contains("panic"),
                        "{}", text
                    ),
                    How::Error => prop_assert!(
                        text.contains("injected") && text.contains("failure"),
                        "{}", text
                    ),
                }
                check_delivered(&case, &out, fault.batch)?;
                prop_assert!(
                    consistent(&progress)
                        && progress.finished
                        && progress.total == case.batches()
                        && progress.delivered == fault.batch,
                    "progress after the failure: {:?}",
                    progress
                );
                ctx.sync().tc()?;
                all_returned(&ctx, &case)?;

                // The context works on: the same sizes in another pattern, without the fault.
                let (result, out, _) = run_case(&ctx, &case, next_pattern, None);
                result.tc()?;
                check_delivered(&case, &out, case.batches())?;
                ctx.sync().tc()?;
                all_returned(&ctx, &case)
            })
        })
    }

    /// A thread polling the progress handle sees consistent, monotone counters, and the end.
    fn progress_is_monotone_and_ends_complete(ctx) {
        let device = ctx.clone();
        let strategy = (pattern(), 1usize..=12, 1usize..=2000, 200u64..=1500, 1usize..=3);
        check(32, strategy, move |(pattern, batches, rows, load_us, k)| {
            let device = device.clone();
            limited(move || {
                let ctx = fresh(&device)?;
                let pipeline = Pipeline::new(&ctx, pattern)
                    .batches(batches)
                    .max_rows(rows)
                    .input::<f32>(1)
                    .output::<f32>(1)
                    .compute_streams(k);
                let progress = pipeline.progress();
                let first = progress.snapshot();
                let (stop_tx, stop_rx) = mpsc::channel::<()>();
                let poller = std::thread::spawn(move || {
                    let mut seen = vec![first];
                    loop {
                        let s = progress.snapshot();
                        seen.push(s);
                        if s.finished || stop_rx.try_recv().is_ok() {
                            return seen;
                        }
                        std::thread::yield_now();
                    }
                });
                let mut delivered = 0;
                let result = pipeline.run(
                    |_, buf| {
                        std::thread::sleep(Duration::from_micros(load_us));
                        buf.fill(1.0);
                        Ok(buf.len())
                    },
                    |s, _, x, y| s.add(x, x, y),
                    |_, y| {
                        if y.iter().any(|&v| v != 2.0) {
                            return Err("wrong output".into());
                        }
                        delivered += 1;
                        Ok(())
                    },
                );
                let _ = stop_tx.send(());
                let seen = poller
                    .join()
                    .map_err(|_| TestCaseError::fail("the poller panicked"))?;
                result.tc()?;
                prop_assert_eq!(delivered, batches);
                prop_assert_eq!(
                    seen[0],
                    ProgressSnapshot::default(),
                    "a pipeline that has not run shows nothing"
                );
                for w in seen.windows(2) {
                    let (a, b) = (w[0], w[1]);
                    prop_assert!(
                        a.total <= b.total
                            && a.loaded <= b.loaded
                            && a.submitted <= b.submitted
                            && a.delivered <= b.delivered
                            && (!a.finished || b.finished),
                        "counters went back: {:?} then {:?}",
                        a,
                        b
                    );
                }
                for s in &seen {
                    prop_assert!(consistent(s), "inconsistent snapshot {:?}", s);
                    prop_assert!(s.total == 0 || s.total == batches, "total {:?}", s);
                }
                let last = seen[seen.len() - 1];
                if last.finished {
                    prop_assert_eq!(last, complete(batches), "the snapshot that saw the end");
                }
                prop_assert_eq!(pipeline.progress().snapshot(), complete(batches), "after the run");
                Ok(())
            })
        })
    }
}
