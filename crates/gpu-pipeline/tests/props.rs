//! Property tests of the pipeline engine on the CPU backend (the reference backend):
//!
//! - **equivalence**: random pipelines (pattern, batch count, input and output sizes, compute
//!   streams, loader delays, chains of built-in ops and a spinning CPU kernel) deliver, in
//!   order and exactly once each, what the sequential pattern delivers and what a host
//!   reference computes;
//! - **fault injection**: a load, compute or sink failure at a random batch stops the run
//!   with an error naming that batch and stage, within a time limit (never a hang), after
//!   delivering exactly the batches before it; every pinned buffer goes back to the
//!   context's pool, the context syncs cleanly, and the next pipeline on it runs correctly;
//! - **progress**: a thread polling [`gpukit_pipeline::Progress`] during a run sees consistent,
//!   monotone counters and, at the end, every batch delivered and the run finished.
//!
//! Each test drives proptest's [`TestRunner`] itself with a modest number of cases (the
//! suite stays fast on a two-core machine); a failure reports the shrunk input. Every case
//! runs on a fresh context, in a thread of its own with a time limit.

use std::hint::black_box;
use std::sync::mpsc;
use std::time::Duration;

use gpukit_core::{Error, GpuArray, HostUse, In, Kernel, KernelSpec, LaunchConfig, Out, Stream};
use gpukit_cpu::fault::within_limit;
use gpukit_cpu::{CpuBackend, CpuContext};
use gpukit_pipeline::{BoxError, Pattern, Pipeline, PipelineError, ProgressSnapshot, Stage};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ---------------------------------------------------------------------------------------
// Harness glue
// ---------------------------------------------------------------------------------------

/// How long one case may take before it counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(30);

/// Runs `test` on `cases` inputs drawn from `strategy` (or as many as `PROPTEST_CASES` says,
/// for a longer run), panicking with the shrunk input on failure.
fn check<S>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        // Failures print their shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    if let Err(e) = TestRunner::new(config).run(&strategy, test) {
        panic!("{e}");
    }
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

/// Runs `case` with gpukit-cpu's [`within_limit`]: a hang (a case still running after
/// [`CASE_LIMIT`]) or a panic fails the case. A hung thread is left behind; the test fails
/// anyway.
fn limited<T: Send + 'static>(
    case: impl FnOnce() -> Result<T, TestCaseError> + Send + 'static,
) -> Result<T, TestCaseError> {
    within_limit(CASE_LIMIT, case)
        .map_err(|overrun| TestCaseError::fail(format!("the case {overrun}")))?
}

// ---------------------------------------------------------------------------------------
// Random pipelines and their host reference
// ---------------------------------------------------------------------------------------

/// One step of a batch's compute chain, on `y = output[..m]` from `x = input[..m]` where
/// `m = min(input_len, output_len)`. Scalars are quarters (`k / 4`), so every result is exact
/// in f32 and the host reference can be compared bit for bit.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `y = x + x` (built-in `add`).
    Double,
    /// `y = relu(x)`.
    Relu,
    /// `y = x` (a device-to-device copy).
    Copy,
    /// `y = k / 4`.
    Fill(i8),
    /// `y = x / 2 - 1` by a CPU kernel closure whose thread 0 spins this many iterations.
    Kernel(u32),
    /// `y *= k / 4`.
    Scale(i8),
    /// `y += (k / 4) x`.
    Axpy(i8),
}

impl Op {
    /// The host reference of this step.
    fn apply(self, x: &[f32], y: &mut [f32]) {
        match self {
            Op::Double => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x + x),
            Op::Relu => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.max(0.0)),
            Op::Copy => y.copy_from_slice(x),
            Op::Fill(k) => y.fill(quarter(k)),
            Op::Kernel(_) => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x * 0.5 - 1.0),
            Op::Scale(k) => y.iter_mut().for_each(|y| *y *= quarter(k)),
            Op::Axpy(k) => y.iter_mut().zip(x).for_each(|(y, &x)| *y += quarter(k) * x),
        }
    }
}

fn quarter(k: i8) -> f32 {
    f32::from(k) / 4.0
}

/// A step that overwrites `y` whatever it held: a chain starts with one, so a batch's output
/// never depends on what its slot's buffer held before.
fn first_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Double),
        Just(Op::Relu),
        Just(Op::Copy),
        (-8i8..=8).prop_map(Op::Fill),
        (0u32..=20_000).prop_map(Op::Kernel),
    ]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        first_op(),
        (-8i8..=8).prop_map(Op::Scale),
        (-8i8..=8).prop_map(Op::Axpy),
    ]
}

fn pattern() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        Just(Pattern::Sequential),
        Just(Pattern::Double),
        Just(Pattern::Triple),
        (1usize..=6).prop_map(Pattern::Deep),
    ]
}

/// A batch size in elements: empty and tiny sizes often, the rest up to 3000.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 1 => 1usize..=8, 6 => 0usize..=3000]
}

/// A random pipeline.
#[derive(Debug, Clone)]
struct Case {
    pattern: Pattern,
    batches: usize,
    input_len: usize,
    output_len: usize,
    compute_streams: usize,
    /// The loader sleeps up to this many microseconds per batch (varying by batch).
    max_load_us: u32,
    /// The compute chain, the same for every batch.
    ops: Vec<Op>,
    /// Seeds the input data.
    seed: u32,
}

fn case(batches: impl Strategy<Value = usize>) -> impl Strategy<Value = Case> {
    (
        pattern(),
        batches,
        length(),
        length(),
        1usize..=3,
        0u32..=2000,
        (first_op(), vec(any_op(), 0..=2)),
        any::<u32>(),
    )
        .prop_map(
            |(pattern, batches, input_len, output_len, compute_streams, max_load_us, ops, seed)| {
                let (first, rest) = ops;
                Case {
                    pattern,
                    batches,
                    input_len,
                    output_len,
                    compute_streams,
                    max_load_us,
                    ops: std::iter::once(first).chain(rest).collect(),
                    seed,
                }
            },
        )
}

/// A 64-bit mix of the arguments (splitmix64's finaliser).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Case {
    /// Batch `i`'s input: values in -10..10 with a granularity of 1/64 (exact in f32).
    fn input(&self, i: usize) -> Vec<f32> {
        let base = mix(u64::from(self.seed), i as u64);
        (0..self.input_len)
            .map(|j| ((mix(base, j as u64) % 1281) as f32 - 640.0) / 64.0)
            .collect()
    }

    /// How long the loader sleeps for batch `i`.
    fn load_delay(&self, i: usize) -> Duration {
        let us = mix(u64::from(self.seed) ^ 0x5555, i as u64) % (u64::from(self.max_load_us) + 1);
        Duration::from_micros(us)
    }

    /// What output elements past the input's length are set to, for batch `i`.
    fn tail_value(i: usize) -> f32 {
        i as f32 + 0.25
    }

    /// The host reference of batch `i`'s output.
    fn reference(&self, i: usize) -> Vec<f32> {
        let x = self.input(i);
        let m = self.input_len.min(self.output_len);
        let mut y = vec![0.0f32; self.output_len];
        for op in &self.ops {
            op.apply(&x[..m], &mut y[..m]);
        }
        y[m..].fill(Self::tail_value(i));
        y
    }
}

/// The spinning kernel's signature: input, output, element count, spin iterations.
type SpinSig = (In<f32>, Out<f32>, u64, u64);

fn spin_kernel(ctx: &CpuContext) -> gpukit_core::Result<Kernel<SpinSig, CpuBackend>> {
    ctx.kernel(
        KernelSpec::<SpinSig>::named("half_minus_one").cpu(|t, (x, y, n, spin)| {
            let i = t.x();
            if i == 0 {
                let mut acc = 0u64;
                for k in 0..*spin {
                    acc = black_box(acc.wrapping_add(k));
                }
                black_box(acc);
            }
            if (i as u64) < *n {
                y[i] = x[i] * 0.5 - 1.0;
            }
        }),
    )
}

/// Enqueues batch `i`'s compute chain on `s`.
fn enqueue(
    s: &Stream<CpuBackend>,
    kernel: &Kernel<SpinSig, CpuBackend>,
    ops: &[Op],
    i: usize,
    x: &GpuArray<f32, CpuBackend>,
    y: &mut GpuArray<f32, CpuBackend>,
) -> gpukit_core::Result<()> {
    let m = x.len().min(y.len());
    let xv = x.slice(..m)?;
    let (mut yv, mut tail) = y.split_at_mut(m)?;
    for op in ops {
        match *op {
            Op::Double => s.add(&xv, &xv, &mut yv)?,
            Op::Relu => s.relu(&xv, &mut yv)?,
            Op::Copy => s.copy(&xv, &mut yv)?,
            Op::Fill(k) => s.fill(&mut yv, quarter(k))?,
            Op::Kernel(spin) => s.launch(
                kernel,
                LaunchConfig::for_elems(m),
                (xv, &mut yv, m as u64, u64::from(spin)),
            )?,
            Op::Scale(k) => s.scale(quarter(k), &mut yv)?,
            Op::Axpy(k) => s.axpy(quarter(k), &xv, &mut yv)?,
        }
    }
    s.fill(&mut tail, Case::tail_value(i))
}

/// How a compute failure is produced.
#[derive(Debug, Clone, Copy)]
enum ComputeFault {
    /// A view past the end of the input (an out-of-range request).
    OutOfRange,
    /// An op on arrays of different lengths.
    LengthMismatch,
    /// The compute function returns its own error after enqueuing its chain.
    Custom,
}

/// Where a run is made to fail.
#[derive(Debug, Clone, Copy)]
struct Fault {
    batch: usize,
    stage: Stage,
    how: ComputeFault,
}

/// What a run returned, what its sink received (in order), and its progress at the end.
type Outcome = (
    Result<gpukit_pipeline::Report, PipelineError>,
    Vec<(usize, Vec<f32>)>,
    ProgressSnapshot,
);

/// Runs `case` in `pattern` on `ctx`, failing as `fault` says.
fn run_case(
    ctx: &CpuContext,
    case: &Case,
    pattern: Pattern,
    fault: Option<Fault>,
) -> Result<Outcome, TestCaseError> {
    let kernel = spin_kernel(ctx).tc()?;
    let fails_at = |stage: Stage, i: usize| fault.is_some_and(|f| f.stage == stage && f.batch == i);
    let mut delivered = Vec::new();
    let pipeline = Pipeline::new(ctx, pattern)
        .batches(case.batches)
        .input_len(case.input_len)
        .output_len(case.output_len)
        .compute_streams(case.compute_streams);
    let result = pipeline.run(
        |i, buf: &mut [f32]| -> Result<(), BoxError> {
            std::thread::sleep(case.load_delay(i));
            if fails_at(Stage::Load, i) {
                return Err(format!("injected load failure at batch {i}").into());
            }
            buf.copy_from_slice(&case.input(i));
            Ok(())
        },
        |s, i, x, y| {
            if !fails_at(Stage::Compute, i) {
                return enqueue(s, &kernel, &case.ops, i, x, y);
            }
            match fault.map(|f| f.how) {
                Some(ComputeFault::OutOfRange) => {
                    // Some valid work first, then the bad request.
                    enqueue(s, &kernel, &case.ops, i, x, y)?;
                    let _ = x.slice(..x.len() + 1)?;
                }
                Some(ComputeFault::LengthMismatch) => {
                    let mut longer = ctx.alloc_zeros::<f32>(x.len() + 1)?;
                    s.copy(x, &mut longer)?;
                }
                _ => {
                    enqueue(s, &kernel, &case.ops, i, x, y)?;
                    return Err(Error::Backend {
                        backend: "test",
                        call: "compute",
                        message: format!("injected compute failure at batch {i}"),
                    });
                }
            }
            Err(Error::Backend {
                backend: "test",
                call: "compute",
                message: "the injected failure did not fail".into(),
            })
        },
        |i, out: &[f32]| -> Result<(), BoxError> {
            if fails_at(Stage::Deliver, i) {
                return Err(format!("injected sink failure at batch {i}").into());
            }
            delivered.push((i, out.to_vec()));
            Ok(())
        },
    );
    Ok((result, delivered, pipeline.progress().snapshot()))
}

/// Checks that `got` is batches `0..n` in order with the reference contents.
fn check_delivered(case: &Case, got: &[(usize, Vec<f32>)], n: usize) -> Result<(), TestCaseError> {
    let indices: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    prop_assert_eq!(
        indices,
        (0..n).collect::<Vec<_>>(),
        "batches delivered (each once, in order)"
    );
    for (i, out) in got {
        prop_assert!(
            *out == case.reference(*i),
            "batch {} differs from the host reference",
            i
        );
    }
    Ok(())
}

/// Pinned buffers of `len` f32 for `usage` free in the context's pool: takes buffers until
/// the pool has to allocate a fresh one (all go back when the function returns).
fn pooled(ctx: &CpuContext, len: usize, usage: HostUse) -> Result<u64, TestCaseError> {
    if len == 0 {
        return Ok(0); // empty buffers are not pooled
    }
    let mut held = Vec::new();
    loop {
        let fresh = ctx.host_pool_stats().fresh;
        held.push(ctx.alloc_host::<f32>(len, usage).tc()?);
        if ctx.host_pool_stats().fresh != fresh {
            return Ok(held.len() as u64 - 1);
        }
    }
}

/// Checks that no pinned buffer is still checked out of `ctx`'s pool. The pool counts the
/// buffers it allocated (`fresh`) but not those in use, so this counts the free ones: on a
/// context only pipelines of `case`'s sizes used, and with the pool far below its limit (it
/// frees nothing), every buffer ever allocated is free again exactly when the free
/// staging (upload) and result (download) buffers add up to `fresh`.
fn all_returned(ctx: &CpuContext, case: &Case) -> Result<(), TestCaseError> {
    let fresh = ctx.host_pool_stats().fresh;
    let free_in = pooled(ctx, case.input_len, HostUse::Upload)?;
    let free_out = pooled(ctx, case.output_len, HostUse::Download)?;
    prop_assert_eq!(
        free_in + free_out,
        fresh,
        "pinned buffers allocated vs free in the pool (staging {} + results {})",
        free_in,
        free_out
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------

/// Every pattern delivers what the sequential pattern and the host reference give, in order.
#[test]
fn any_pipeline_matches_sequential_processing() {
    check(160, case(0usize..=12), |case| {
        limited(move || {
            let ctx = CpuBackend::context().tc()?;
            let (seq, seq_out, _) = run_case(&ctx, &case, Pattern::Sequential, None)?;
            let seq = seq.tc()?;
            let (report, out, progress) = run_case(&ctx, &case, case.pattern, None)?;
            let report = report.tc()?;
            let n = case.batches;
            let done = ProgressSnapshot {
                total: n,
                loaded: n,
                submitted: n,
                delivered: n,
                finished: true,
            };
            prop_assert_eq!(progress, done);
            check_delivered(&case, &seq_out, case.batches)?;
            check_delivered(&case, &out, case.batches)?;
            prop_assert!(
                out == seq_out,
                "the pattern's outputs differ from sequential"
            );
            for r in [&seq, &report] {
                prop_assert_eq!(r.batches, case.batches);
                // Load, upload, compute, download and deliver of every batch, once each.
                let mut spans: Vec<(usize, String)> = r
                    .timeline
                    .spans
                    .iter()
                    .map(|s| (s.batch, s.stage.to_string()))
                    .collect();
                spans.sort();
                spans.dedup();
                prop_assert_eq!(spans.len(), 5 * case.batches);
                prop_assert_eq!(r.timeline.spans.len(), 5 * case.batches);
            }
            prop_assert_eq!(report.pattern, case.pattern);
            ctx.sync().tc()?;
            all_returned(&ctx, &case)
        })
    });
}

fn fault(batches: usize) -> impl Strategy<Value = Fault> {
    (
        0..batches,
        prop_oneof![
            Just(Stage::Load),
            Just(Stage::Compute),
            Just(Stage::Deliver)
        ],
        prop_oneof![
            Just(ComputeFault::OutOfRange),
            Just(ComputeFault::LengthMismatch),
            Just(ComputeFault::Custom),
        ],
    )
        .prop_map(|(batch, stage, how)| Fault { batch, stage, how })
}

/// A failing stage stops the run cleanly: the error names the batch and stage, exactly the
/// batches before it are delivered, nothing hangs, nothing leaks, and the context works on.
#[test]
fn a_failing_stage_stops_the_run_cleanly() {
    let strategy = (case(1usize..=12), pattern())
        .prop_flat_map(|(case, next)| (fault(case.batches), Just(case), Just(next)));
    check(200, strategy, |(fault, case, next_pattern)| {
        limited(move || {
            let ctx = CpuBackend::context().tc()?;
            let (result, out, progress) = run_case(&ctx, &case, case.pattern, Some(fault))?;
            let err = match result {
                Ok(_) => return Err(TestCaseError::fail("the run succeeded despite the fault")),
                Err(e) => e,
            };
            prop_assert_eq!(err.batch(), Some(fault.batch), "failing batch of {}", err);
            prop_assert_eq!(err.stage(), Some(fault.stage), "failing stage of {}", err);
            check_delivered(&case, &out, fault.batch)?;
            prop_assert!(
                progress.finished
                    && progress.total == case.batches
                    && progress.delivered == fault.batch,
                "progress after the failure: {:?}",
                progress
            );
            ctx.sync().tc()?;
            all_returned(&ctx, &case)?;

            // The context works on: the same sizes in another pattern, without the fault.
            let (result, out, _) = run_case(&ctx, &case, next_pattern, None)?;
            result.tc()?;
            check_delivered(&case, &out, case.batches)?;
            ctx.sync().tc()?;
            all_returned(&ctx, &case)
        })
    });
}

/// A thread polling the progress handle sees consistent, monotone counters, and the end.
#[test]
fn progress_is_monotone_and_ends_complete() {
    let strategy = (
        pattern(),
        1usize..=12,
        0usize..=2000,
        200u64..=1500,
        1usize..=3,
    );
    check(40, strategy, |(pattern, batches, len, load_us, k)| {
        limited(move || {
            let ctx = CpuBackend::context().tc()?;
            let pipeline = Pipeline::new(&ctx, pattern)
                .batches(batches)
                .input_len(len)
                .output_len(len)
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
                |_, buf: &mut [f32]| -> Result<(), BoxError> {
                    std::thread::sleep(Duration::from_micros(load_us));
                    buf.fill(1.0);
                    Ok(())
                },
                |s, _, x, y| s.add(x, x, y),
                |_, y: &[f32]| -> Result<(), BoxError> {
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

            let before = ProgressSnapshot::default();
            prop_assert_eq!(seen[0], before, "a pipeline that has not run shows nothing");
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
                // A snapshot is consistent: nothing delivered before it was submitted, nothing
                // submitted before it was loaded.
                prop_assert!(
                    s.delivered <= s.submitted && s.submitted <= s.loaded && s.loaded <= s.total,
                    "inconsistent snapshot {:?}",
                    s
                );
                prop_assert!(s.total == 0 || s.total == batches, "total {:?}", s);
            }
            let done = ProgressSnapshot {
                total: batches,
                loaded: batches,
                submitted: batches,
                delivered: batches,
                finished: true,
            };
            let last = seen[seen.len() - 1];
            if last.finished {
                prop_assert_eq!(last, done, "the snapshot that saw the end");
            }
            prop_assert_eq!(pipeline.progress().snapshot(), done, "after the run");
            Ok(())
        })
    });
}
