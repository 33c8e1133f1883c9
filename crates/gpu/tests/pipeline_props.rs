//! Property tests of the pipeline engine, on every backend (`backend_tests!`: the CPU
//! backend always, CUDA when compiled in and present):
//!
//! - **equivalence**: random pipelines (pattern and depth, batch count, `max_rows`, each
//!   batch's row count from 0 to `max_rows`, one, two or three arrays each way of `f32`,
//!   `i32` and `u32` with random widths, compute streams, calibration batches, staging
//!   that the loader reads back, loader delays, chains of exact built-in ops) deliver, in
//!   order and exactly once each, with the loader's metadata, what the sequential pattern
//!   delivers and what a host reference computes; the report's rows, bytes, bound source
//!   and speed-up against the sequential run agree with the run;
//! - **failures**: a load error or panic, a loader reporting more rows than `max_rows`, a
//!   compute error (its own, or a device error) or panic, a sink error or panic, at a random
//!   batch, stop the run with an error naming that batch and stage, within a time limit
//!   (never a hang), after delivering exactly the batches before it; every pinned buffer
//!   goes back to the context's pool, the context syncs cleanly, and the next pipeline on it
//!   runs correctly;
//! - **progress**: a thread polling [`gpukit::Progress`] during a run sees consistent,
//!   monotone counters and, at the end, every batch delivered and the run finished.
//!
//! Every case runs on a fresh context of the backend under test, in a thread of its own
//! with a time limit. `PROPTEST_CASES=N` raises every property to at least `N` cases.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use gpukit::pipeline::BoxError;
use gpukit::{
    Batch, BoundSource, Context, DeviceSpec, Error, GpuView, GpuViewMut, HostUse, Pattern,
    Pipeline, PipelineError, ProgressSnapshot, Report, Stage, Stream,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ---------------------------------------------------------------------------------------
// Harness glue
// ---------------------------------------------------------------------------------------

/// How long one case may take before it counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(60);

/// Runs `test` on `cases` inputs (at least; `PROPTEST_CASES` may ask for more) drawn from
/// `strategy`; a failure becomes a `gpukit::Error` holding the shrunk input.
fn check<S>(
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> gpukit::Result<()>
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let cases = match std::env::var("PROPTEST_CASES") {
        Ok(v) => v.trim().parse::<u32>().map_or(cases, |n| n.max(cases)),
        Err(_) => cases,
    };
    let config = Config {
        cases,
        // Failures print their shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&strategy, test)
        .map_err(|e| Error::Backend {
            backend: "test",
            call: "proptest",
            message: e.to_string(),
        })
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
        "cpu" => DeviceSpec::Cpu,
        "cuda" => DeviceSpec::Cuda(Some(ctx.device_id())),
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
            "the case did not end within {CASE_LIMIT:?}: a hang"
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Random pipelines and their host reference
// ---------------------------------------------------------------------------------------

/// One step of the `f32` array's compute chain, `y` from `x` (same length). Scalars are
/// quarters (`k / 4`), so every result is exact in f32 and compared bit for bit.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `y = x + x`.
    Double,
    /// `y = relu(x)`.
    Relu,
    /// `y = x`.
    Copy,
    /// `y = k / 4`.
    Fill(i8),
    /// `y *= k / 4`.
    Scale(i8),
    /// `y += (k / 4) x`.
    Axpy(i8),
}

fn quarter(k: i8) -> f32 {
    f32::from(k) / 4.0
}

impl Op {
    fn apply(self, x: &[f32], y: &mut [f32]) {
        match self {
            Op::Double => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x + x),
            Op::Relu => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.max(0.0)),
            Op::Copy => y.copy_from_slice(x),
            Op::Fill(k) => y.fill(quarter(k)),
            Op::Scale(k) => y.iter_mut().for_each(|y| *y *= quarter(k)),
            Op::Axpy(k) => y.iter_mut().zip(x).for_each(|(y, &x)| *y += quarter(k) * x),
        }
    }

    fn enqueue(
        self,
        s: &Stream,
        x: &GpuView<'_, f32>,
        y: &mut GpuViewMut<'_, f32>,
    ) -> gpukit::Result<()> {
        match self {
            Op::Double => s.add(x, x, y),
            Op::Relu => s.relu(x, y),
            Op::Copy => s.copy(x, y),
            Op::Fill(k) => s.fill(y, quarter(k)),
            Op::Scale(k) => s.scale(quarter(k), y),
            Op::Axpy(k) => s.axpy(quarter(k), x, y),
        }
    }
}

/// A step that overwrites `y` whatever it held: a chain starts with one, so a batch's
/// output never depends on what its slot held before.
fn first_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Double),
        Just(Op::Relu),
        Just(Op::Copy),
        (-8i8..=8).prop_map(Op::Fill),
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
        (1usize..=5).prop_map(Pattern::Deep),
    ]
}

/// A random pipeline. Array `k` (of `arity`) has width `widths[k]` each way; array 0 is
/// `f32` (the op chain), array 1 `i32` (`2 x + k`), array 2 `u32` (`2 x + |k|`).
#[derive(Debug, Clone)]
struct Case {
    pattern: Pattern,
    max_rows: usize,
    /// Each batch's rows, `0..=max_rows`.
    rows: Vec<usize>,
    arity: usize,
    widths: [usize; 3],
    compute_streams: usize,
    calibration: usize,
    reads_back: bool,
    /// The loader sleeps up to this many microseconds per batch (varying by batch).
    max_load_us: u32,
    ops: Vec<Op>,
    k: i32,
    seed: u32,
}

fn case(batches: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Case> {
    let sizes = (1usize..=300, batches)
        .prop_flat_map(|(max_rows, n)| (Just(max_rows), vec(row_count(max_rows), n)));
    (
        pattern(),
        sizes,
        1usize..=3,
        [1usize..=5, 1usize..=3, 1usize..=2],
        1usize..=3,
        1usize..=3,
        any::<bool>(),
        0u32..=1000,
        (first_op(), vec(any_op(), 0..=2)),
        -50i32..=50,
        any::<u32>(),
    )
        .prop_map(
            |(
                pattern,
                (max_rows, rows),
                arity,
                widths,
                streams,
                calibration,
                reads_back,
                us,
                ops,
                k,
                seed,
            )| {
                let (first, rest) = ops;
                Case {
                    pattern,
                    max_rows,
                    rows,
                    arity,
                    widths,
                    compute_streams: streams,
                    calibration,
                    reads_back,
                    max_load_us: us,
                    ops: std::iter::once(first).chain(rest).collect(),
                    k,
                    seed,
                }
            },
        )
}

/// A row count: often full or empty, else anything up to `max`.
fn row_count(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(max), 1 => Just(0usize), 1 => Just(1usize), 4 => 0..=max]
}

/// A 64-bit mix of the arguments (splitmix64's finaliser).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What the sink got for a batch: index, rows, metadata, and each output array as f64.
type Delivered = (usize, usize, (usize, u64), Vec<Vec<f64>>);

impl Case {
    fn batches(&self) -> usize {
        self.rows.len()
    }

    /// Random bits of element `j` of array `a` of batch `i`.
    fn bits(&self, i: usize, a: usize, j: usize) -> u64 {
        mix(mix(u64::from(self.seed), (i * 4 + a) as u64), j as u64)
    }

    /// Batch `i`'s `f32` input: values in -10..10 with a granularity of 1/64 (exact).
    fn input0(&self, i: usize) -> Vec<f32> {
        (0..self.rows[i] * self.widths[0])
            .map(|j| ((self.bits(i, 0, j) % 1281) as f32 - 640.0) / 64.0)
            .collect()
    }

    fn input1(&self, i: usize) -> Vec<i32> {
        (0..self.rows[i] * self.widths[1])
            .map(|j| (self.bits(i, 1, j) % 2001) as i32 - 1000)
            .collect()
    }

    fn input2(&self, i: usize) -> Vec<u32> {
        (0..self.rows[i] * self.widths[2])
            .map(|j| (self.bits(i, 2, j) % 2001) as u32)
            .collect()
    }

    /// The metadata the loader sends with batch `i`.
    fn meta(&self, i: usize) -> (usize, u64) {
        (i, mix(u64::from(self.seed) ^ 0xabcd, i as u64))
    }

    /// How long the loader sleeps for batch `i`.
    fn load_delay(&self, i: usize) -> Duration {
        let us = mix(u64::from(self.seed) ^ 0x5555, i as u64) % (u64::from(self.max_load_us) + 1);
        Duration::from_micros(us)
    }

    /// The host reference of batch `i`'s outputs.
    fn reference(&self, i: usize) -> Vec<Vec<f64>> {
        let x = self.input0(i);
        let mut y = vec![0.0f32; x.len()];
        for op in &self.ops {
            op.apply(&x, &mut y);
        }
        let mut out = vec![y.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()];
        if self.arity >= 2 {
            let k = f64::from(self.k);
            out.push(
                self.input1(i)
                    .iter()
                    .map(|&v| 2.0 * f64::from(v) + k)
                    .collect(),
            );
        }
        if self.arity >= 3 {
            let k = f64::from(self.k.unsigned_abs());
            out.push(
                self.input2(i)
                    .iter()
                    .map(|&v| 2.0 * f64::from(v) + k)
                    .collect(),
            );
        }
        out
    }

    /// The bytes of one row of all arrays, one way.
    fn row_bytes(&self) -> usize {
        4 * self.widths[..self.arity].iter().sum::<usize>()
    }
}

/// Where a run is made to fail, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
enum How {
    Error,
    Panic,
    /// The loader reports `max_rows + 1` rows (load only).
    TooManyRows,
    /// An op on views of different lengths (compute only): a device error.
    LengthMismatch,
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    batch: usize,
    stage: Stage,
    how: How,
}

fn fault(batches: usize) -> impl Strategy<Value = Fault> {
    let stage_how = prop_oneof![
        Just((Stage::Load, How::Error)),
        Just((Stage::Load, How::Panic)),
        Just((Stage::Load, How::TooManyRows)),
        Just((Stage::Compute, How::Error)),
        Just((Stage::Compute, How::Panic)),
        Just((Stage::Compute, How::LengthMismatch)),
        Just((Stage::Deliver, How::Error)),
        Just((Stage::Deliver, How::Panic)),
    ];
    (0..batches, stage_how).prop_map(|(batch, (stage, how))| Fault { batch, stage, how })
}

/// What a run returned, what its sink received (in order), and its progress at the end.
type Outcome = (
    Result<Report, PipelineError>,
    Vec<Delivered>,
    ProgressSnapshot,
);

/// The loader's side of a fault: fills nothing and fails, or reports too many rows.
fn load_fault(fault: Option<Fault>, i: usize, max_rows: usize) -> Result<Option<usize>, BoxError> {
    match fault {
        Some(f) if f.stage == Stage::Load && f.batch == i => match f.how {
            How::Panic => panic!("injected load panic at batch {i}"),
            How::TooManyRows => Ok(Some(max_rows + 1)),
            _ => Err(format!("injected load failure at batch {i}").into()),
        },
        _ => Ok(None),
    }
}

/// The compute side of a fault, after the batch's valid work was enqueued.
fn compute_fault<M>(
    fault: Option<Fault>,
    ctx: &Context,
    s: &Stream,
    b: &Batch<M>,
    x: &GpuView<'_, f32>,
) -> gpukit::Result<()> {
    match fault {
        Some(f) if f.stage == Stage::Compute && f.batch == b.index => match f.how {
            How::Panic => panic!("injected compute panic at batch {}", b.index),
            How::LengthMismatch => {
                let mut longer = ctx.alloc_zeros::<f32>(x.len() + 1)?;
                s.copy(x, &mut longer)
            }
            _ => Err(Error::Backend {
                backend: "test",
                call: "compute",
                message: format!("injected compute failure at batch {}", b.index),
            }),
        },
        _ => Ok(()),
    }
}

/// The sink side of a fault.
fn sink_fault(fault: Option<Fault>, i: usize) -> Result<(), BoxError> {
    match fault {
        Some(f) if f.stage == Stage::Deliver && f.batch == i => match f.how {
            How::Panic => panic!("injected sink panic at batch {i}"),
            _ => Err(format!("injected sink failure at batch {i}").into()),
        },
        _ => Ok(()),
    }
}

/// The `f32` chain.
fn chain(
    case: &Case,
    s: &Stream,
    x: &GpuView<'_, f32>,
    y: &mut GpuViewMut<'_, f32>,
) -> gpukit::Result<()> {
    case.ops.iter().try_for_each(|op| op.enqueue(s, x, y))
}

fn to_f64<T: Copy + Into<f64>>(v: &[T]) -> Vec<f64> {
    v.iter().map(|&x| x.into()).collect()
}

/// Runs `case` in `pattern` on `ctx`, failing as `fault` says.
fn run_case(ctx: &Context, case: &Case, pattern: Pattern, fault: Option<Fault>) -> Outcome {
    let base = Pipeline::new(ctx, pattern)
        .batches(case.batches())
        .max_rows(case.max_rows)
        .compute_streams(case.compute_streams)
        .calibration_batches(case.calibration)
        .loader_reads_back(case.reads_back);
    let [w0, w1, w2] = case.widths;
    let mut delivered: Vec<Delivered> = Vec::new();
    let (result, progress) = match case.arity {
        1 => {
            let p = base.input::<f32>(w0).output::<f32>(w0);
            let r = p.run(
                |i, x| {
                    std::thread::sleep(case.load_delay(i));
                    if let Some(rows) = load_fault(fault, i, case.max_rows)? {
                        return Ok((rows, case.meta(i)));
                    }
                    x[..case.rows[i] * w0].copy_from_slice(&case.input0(i));
                    if case.reads_back {
                        std::hint::black_box(x.iter().map(|&v| f64::from(v)).sum::<f64>());
                    }
                    Ok((case.rows[i], case.meta(i)))
                },
                |s, b, x, y| {
                    chain(case, s, x, y)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, y| {
                    sink_fault(fault, b.index)?;
                    delivered.push((b.index, b.rows, b.meta, vec![to_f64(y)]));
                    Ok(())
                },
            );
            (r, p.progress().snapshot())
        }
        2 => {
            let p = base
                .input::<(f32, i32)>([w0, w1])
                .output::<(f32, i32)>([w0, w1]);
            let r = p.run(
                |i, (x, xi)| {
                    std::thread::sleep(case.load_delay(i));
                    if let Some(rows) = load_fault(fault, i, case.max_rows)? {
                        return Ok((rows, case.meta(i)));
                    }
                    let rows = case.rows[i];
                    x[..rows * w0].copy_from_slice(&case.input0(i));
                    xi[..rows * w1].copy_from_slice(&case.input1(i));
                    Ok((rows, case.meta(i)))
                },
                |s, b, (x, xi), (y, yi)| {
                    chain(case, s, x, y)?;
                    s.add(xi, xi, yi)?;
                    s.add_scalar_inplace(yi, case.k)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, (y, yi)| {
                    sink_fault(fault, b.index)?;
                    let out = vec![to_f64(y), to_f64(yi)];
                    delivered.push((b.index, b.rows, b.meta, out));
                    Ok(())
                },
            );
            (r, p.progress().snapshot())
        }
        _ => {
            let p = base
                .input::<(f32, i32, u32)>([w0, w1, w2])
                .output::<(f32, i32, u32)>([w0, w1, w2]);
            let r = p.run(
                |i, (x, xi, xu)| {
                    std::thread::sleep(case.load_delay(i));
                    if let Some(rows) = load_fault(fault, i, case.max_rows)? {
                        return Ok((rows, case.meta(i)));
                    }
                    let rows = case.rows[i];
                    x[..rows * w0].copy_from_slice(&case.input0(i));
                    xi[..rows * w1].copy_from_slice(&case.input1(i));
                    xu[..rows * w2].copy_from_slice(&case.input2(i));
                    Ok((rows, case.meta(i)))
                },
                |s, b, (x, xi, xu), (y, yi, yu)| {
                    chain(case, s, x, y)?;
                    s.add(xi, xi, yi)?;
                    s.add_scalar_inplace(yi, case.k)?;
                    s.add(xu, xu, yu)?;
                    s.add_scalar_inplace(yu, case.k.unsigned_abs())?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, (y, yi, yu)| {
                    sink_fault(fault, b.index)?;
                    let out = vec![to_f64(y), to_f64(yi), to_f64(yu)];
                    delivered.push((b.index, b.rows, b.meta, out));
                    Ok(())
                },
            );
            (r, p.progress().snapshot())
        }
    };
    (result, delivered, progress)
}

/// Checks that `got` is batches `0..n` in order, with their rows, metadata and the
/// reference contents.
fn check_delivered(case: &Case, got: &[Delivered], n: usize) -> Result<(), TestCaseError> {
    let indices: Vec<usize> = got.iter().map(|d| d.0).collect();
    prop_assert_eq!(
        indices,
        (0..n).collect::<Vec<_>>(),
        "batches delivered (each once, in order)"
    );
    for (i, rows, meta, out) in got {
        prop_assert_eq!(*rows, case.rows[*i], "rows of batch {}", i);
        prop_assert_eq!(*meta, case.meta(*i), "metadata of batch {}", i);
        prop_assert!(
            *out == case.reference(*i),
            "batch {} differs from the host reference",
            i
        );
    }
    Ok(())
}

/// gpukit-core's pinned pool rounds a request up to a size class: 4 KiB at least, else a
/// sixteenth of the next power of two (mirrored here to count the pool's free buffers).
fn size_class(bytes: usize) -> usize {
    if bytes <= 4096 {
        return 4096;
    }
    let step = bytes.next_power_of_two() / 16;
    bytes.div_ceil(step) * step
}

/// Free pinned buffers of `class` bytes for `usage` in the pool: takes buffers until the
/// pool has to allocate a fresh one (all go back when the function returns).
fn pooled(ctx: &Context, class: usize, usage: HostUse) -> Result<u64, TestCaseError> {
    let mut held = Vec::new();
    loop {
        let fresh = ctx.host_pool_stats().fresh;
        held.push(ctx.alloc_host::<u8>(class, usage).tc()?);
        if ctx.host_pool_stats().fresh != fresh {
            return Ok(held.len() as u64 - 1);
        }
    }
}

/// Checks that no pinned buffer is still checked out of `ctx`'s pool: on a context only
/// pipelines of `case`'s sizes used, every buffer ever allocated (`fresh`) is free again
/// exactly when the free buffers of the classes the run used add up to `fresh`.
fn all_returned(ctx: &Context, case: &Case) -> Result<(), TestCaseError> {
    let fresh = ctx.host_pool_stats().fresh;
    let staging = if case.reads_back {
        HostUse::Both
    } else {
        HostUse::Upload
    };
    let mut classes: Vec<(HostUse, usize)> = Vec::new();
    for &w in &case.widths[..case.arity] {
        let bytes = 4 * w * case.max_rows;
        for usage in [staging, HostUse::Download] {
            if !classes.contains(&(usage, size_class(bytes))) {
                classes.push((usage, size_class(bytes)));
            }
        }
    }
    let mut free = 0;
    for (usage, class) in classes {
        free += pooled(ctx, class, usage)?;
    }
    prop_assert_eq!(free, fresh, "pinned buffers free in the pool vs allocated");
    Ok(())
}

/// The report of a successful run agrees with the run.
fn check_report(case: &Case, r: &Report, pattern: Pattern) -> Result<(), TestCaseError> {
    let rows: usize = case.rows.iter().sum();
    prop_assert_eq!(r.pattern, pattern);
    prop_assert_eq!(r.batches, case.batches());
    prop_assert_eq!(r.rows, rows);
    prop_assert_eq!(r.bytes_in, rows * case.row_bytes());
    prop_assert_eq!(r.bytes_out, rows * case.row_bytes());
    let source = if pattern == Pattern::Sequential {
        BoundSource::Sequential
    } else {
        BoundSource::Calibrated {
            batches: case.calibration.min(case.batches()),
        }
    };
    prop_assert_eq!(r.bound_source, source);
    prop_assert!(
        r.bound_ms >= 0.0 && r.bound_ms.is_finite(),
        "bound {}",
        r.bound_ms
    );
    prop_assert!(r.wall_ms > 0.0, "wall {}", r.wall_ms);
    // Load, upload, compute, download and deliver of every batch, once each.
    let mut spans: Vec<(usize, String)> = r
        .timeline
        .spans
        .iter()
        .map(|s| (s.batch, s.stage.to_string()))
        .collect();
    prop_assert_eq!(spans.len(), 5 * case.batches());
    spans.sort();
    spans.dedup();
    prop_assert_eq!(spans.len(), 5 * case.batches());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------

backend_tests! {
    /// Every pattern delivers what the sequential pattern and the host reference give, in
    /// order, with each batch's rows and metadata; the reports agree with the runs.
    fn any_pipeline_matches_sequential_processing(ctx) {
        let device = ctx.clone();
        check(48, case(1..=10), move |case| {
            let device = device.clone();
            limited(move || {
                let ctx = fresh(&device)?;
                let (seq, seq_out, _) = run_case(&ctx, &case, Pattern::Sequential, None);
                let seq = seq.tc()?;
                let (report, out, progress) = run_case(&ctx, &case, case.pattern, None);
                let report = report.tc()?;
                let n = case.batches();
                let done = ProgressSnapshot {
                    total: n,
                    loaded: n,
                    submitted: n,
                    delivered: n,
                    finished: true,
                };
                prop_assert_eq!(progress, done);
                check_delivered(&case, &seq_out, n)?;
                check_delivered(&case, &out, n)?;
                prop_assert!(out == seq_out, "the pattern's outputs differ from sequential");
                check_report(&case, &seq, Pattern::Sequential)?;
                check_report(&case, &report, case.pattern)?;
                let judged = report.against(&seq).tc()?;
                prop_assert_eq!(judged.bound_source, BoundSource::Baseline);
                prop_assert_eq!(judged.bound_ms, seq.bound_ms);
                prop_assert_eq!(judged.speedup_vs_sequential, Some(seq.wall_ms / report.wall_ms));
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
        let strategy = (case(1..=8), pattern())
            .prop_flat_map(|(case, next)| (fault(case.batches()), Just(case), Just(next)));
        check(64, strategy, move |(fault, case, next_pattern)| {
            let device = device.clone();
            limited(move || {
                let ctx = fresh(&device)?;
                let (result, out, progress) = run_case(&ctx, &case, case.pattern, Some(fault));
                let err = match result {
                    Ok(_) => return Err(TestCaseError::fail("the run succeeded despite the fault")),
                    Err(e) => e,
                };
                prop_assert_eq!(err.batch(), Some(fault.batch), "failing batch of {}", err);
                prop_assert_eq!(err.stage(), Some(fault.stage), "failing stage of {}", err);
                match fault.how {
                    How::TooManyRows => prop_assert!(
                        matches!(err, PipelineError::TooManyRows { rows, max_rows, .. }
                            if rows == case.max_rows + 1 && max_rows == case.max_rows),
                        "{:?}", err
                    ),
                    How::LengthMismatch => prop_assert!(
                        matches!(&err, PipelineError::Gpu { source: Error::LengthMismatch { .. }, .. }),
                        "{:?}", err
                    ),
                    How::Panic => {
                        let cause = std::error::Error::source(&err).map(ToString::to_string);
                        prop_assert!(
                            cause.as_deref().is_some_and(|c| c.contains("injected") && c.contains("panic")),
                            "{}: {:?}", err, cause
                        );
                    }
                    How::Error => {}
                }
                check_delivered(&case, &out, fault.batch)?;
                prop_assert!(
                    progress.finished
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
        let strategy = (pattern(), 1usize..=10, 1usize..=2000, 200u64..=1500, 1usize..=3);
        check(16, strategy, move |(pattern, batches, rows, load_us, k)| {
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
                prop_assert_eq!(seen[0], ProgressSnapshot::default(), "a pipeline that has not run shows nothing");
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
        })
    }
}
