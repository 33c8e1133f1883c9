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

mod common;

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
        "cpu" => DeviceSpec::Cpu,
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

/// The metadata the loader sends with a batch.
type Meta = (usize, u64);

/// A random pipeline.
///
/// Input array `k` (of `arity`) has width `widths[k]`: array 0 is `f32`, array 1 `i32`,
/// array 2 `u32`. The outputs are the first `out_arity` (1 or `arity`) of: the `f32` op
/// chain of input 0 (width `widths[0]`); `2 * row_sum(input 1) + k` (`i32`, width 1);
/// `2 * input 2 + |k|` (`u32`, width `widths[2]`).
#[derive(Debug, Clone)]
struct Case {
    pattern: Pattern,
    max_rows: usize,
    /// Each batch's rows, `0..=max_rows`.
    rows: Vec<usize>,
    arity: usize,
    out_arity: usize,
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
    let arrays = (
        1usize..=3,
        any::<bool>(),
        [1usize..=5, 1usize..=3, 1usize..=2],
    );
    (
        pattern(),
        sizes,
        arrays,
        (1usize..=3, 1usize..=4, any::<bool>()),
        0u32..=1000,
        (first_op(), vec(any_op(), 0..=2)),
        -50i32..=50,
        any::<u32>(),
    )
        .prop_map(
            |(
                pattern,
                (max_rows, rows),
                (arity, one_output, widths),
                (compute_streams, calibration, reads_back),
                max_load_us,
                (first, rest),
                k,
                seed,
            )| Case {
                pattern,
                max_rows,
                rows,
                arity,
                out_arity: if one_output { 1 } else { arity },
                widths,
                compute_streams,
                calibration,
                reads_back,
                max_load_us,
                ops: std::iter::once(first).chain(rest).collect(),
                k,
                seed,
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
type Delivered = (usize, usize, Meta, Vec<Vec<f64>>);

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
    fn meta(&self, i: usize) -> Meta {
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
        if self.out_arity >= 2 {
            let k = f64::from(self.k);
            let sums = self.input1(i);
            let sums = sums
                .chunks(self.widths[1])
                .map(|row| 2.0 * row.iter().map(|&v| f64::from(v)).sum::<f64>() + k);
            out.push(sums.collect());
        }
        if self.out_arity >= 3 {
            let k = f64::from(self.k.unsigned_abs());
            let xu = self.input2(i);
            out.push(xu.iter().map(|&v| 2.0 * f64::from(v) + k).collect());
        }
        out
    }

    fn out_widths(&self) -> [usize; 3] {
        [self.widths[0], 1, self.widths[2]]
    }

    /// The bytes of one row of the input arrays (every element type is 4 bytes).
    fn in_row_bytes(&self) -> usize {
        4 * self.widths[..self.arity].iter().sum::<usize>()
    }

    /// The bytes of one row of the output arrays.
    fn out_row_bytes(&self) -> usize {
        4 * self.out_widths()[..self.out_arity].iter().sum::<usize>()
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

/// The load function of every arity: sleeps, fails as `fault` says, else fills batch `i`'s
/// rows of the arrays it is given.
fn load(
    case: &Case,
    fault: Option<Fault>,
    i: usize,
    x: &mut [f32],
    xi: Option<&mut [i32]>,
    xu: Option<&mut [u32]>,
) -> Result<(usize, Meta), BoxError> {
    std::thread::sleep(case.load_delay(i));
    match fault {
        Some(f) if f.stage == Stage::Load && f.batch == i => match f.how {
            How::Panic => panic!("injected load panic at batch {i}"),
            How::TooManyRows => return Ok((case.max_rows + 1, case.meta(i))),
            _ => return Err(format!("injected load failure at batch {i}").into()),
        },
        _ => {}
    }
    let (rows, [w0, w1, w2]) = (case.rows[i], case.widths);
    x[..rows * w0].copy_from_slice(&case.input0(i));
    if case.reads_back {
        std::hint::black_box(x.iter().map(|&v| f64::from(v)).sum::<f64>());
    }
    if let Some(xi) = xi {
        xi[..rows * w1].copy_from_slice(&case.input1(i));
    }
    if let Some(xu) = xu {
        xu[..rows * w2].copy_from_slice(&case.input2(i));
    }
    Ok((rows, case.meta(i)))
}

/// Output 0: the `f32` chain.
fn chain(
    case: &Case,
    s: &Stream,
    x: &GpuView<'_, f32>,
    y: &mut GpuViewMut<'_, f32>,
) -> gpukit::Result<()> {
    case.ops.iter().try_for_each(|op| op.enqueue(s, x, y))
}

/// Output 1: `2 * row_sum(xi) + k`, one element a row.
fn row_sums(
    case: &Case,
    s: &Stream,
    b: &Batch<Meta>,
    xi: &GpuView<'_, i32>,
    yi: &mut GpuViewMut<'_, i32>,
) -> gpukit::Result<()> {
    s.row_sum(Shape::new(b.rows, case.widths[1]), xi, yi)?;
    s.scale(2, yi)?;
    s.add_scalar_inplace(yi, case.k)
}

/// Output 2: `2 xu + |k|`.
fn doubled(
    case: &Case,
    s: &Stream,
    xu: &GpuView<'_, u32>,
    yu: &mut GpuViewMut<'_, u32>,
) -> gpukit::Result<()> {
    s.add(xu, xu, yu)?;
    s.add_scalar_inplace(yu, case.k.unsigned_abs())
}

/// The compute side of a fault, after the batch's valid work was enqueued.
fn compute_fault(
    fault: Option<Fault>,
    ctx: &Context,
    s: &Stream,
    b: &Batch<Meta>,
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

/// The sink of every arity: fails as `fault` says, else records the batch and its outputs.
fn record(
    fault: Option<Fault>,
    delivered: &mut Vec<Delivered>,
    b: Batch<Meta>,
    outputs: Vec<Vec<f64>>,
) -> Result<(), BoxError> {
    match fault {
        Some(f) if f.stage == Stage::Deliver && f.batch == b.index => match f.how {
            How::Panic => panic!("injected sink panic at batch {}", b.index),
            _ => Err(format!("injected sink failure at batch {}", b.index).into()),
        },
        _ => {
            delivered.push((b.index, b.rows, b.meta, outputs));
            Ok(())
        }
    }
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
    let mut got: Vec<Delivered> = Vec::new();
    let delivered = &mut got;
    let (result, progress) = match (case.arity, case.out_arity) {
        (1, _) => {
            let p = base.input::<f32>(w0).output::<f32>(w0);
            let r = p.run(
                |i, x| load(case, fault, i, x, None, None),
                |s, b, x, y| {
                    chain(case, s, x, y)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, y| record(fault, delivered, b, vec![to_f64(y)]),
            );
            (r, p.progress().snapshot())
        }
        (2, 1) => {
            let p = base.input::<(f32, i32)>([w0, w1]).output::<f32>(w0);
            let r = p.run(
                |i, (x, xi)| load(case, fault, i, x, Some(xi), None),
                |s, b, (x, _), y| {
                    chain(case, s, x, y)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, y| record(fault, delivered, b, vec![to_f64(y)]),
            );
            (r, p.progress().snapshot())
        }
        (2, _) => {
            let p = base
                .input::<(f32, i32)>([w0, w1])
                .output::<(f32, i32)>([w0, 1]);
            let r = p.run(
                |i, (x, xi)| load(case, fault, i, x, Some(xi), None),
                |s, b, (x, xi), (y, yi)| {
                    chain(case, s, x, y)?;
                    row_sums(case, s, b, xi, yi)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, (y, yi)| record(fault, delivered, b, vec![to_f64(y), to_f64(yi)]),
            );
            (r, p.progress().snapshot())
        }
        (_, 1) => {
            let p = base
                .input::<(f32, i32, u32)>([w0, w1, w2])
                .output::<f32>(w0);
            let r = p.run(
                |i, (x, xi, xu)| load(case, fault, i, x, Some(xi), Some(xu)),
                |s, b, (x, _, _), y| {
                    chain(case, s, x, y)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, y| record(fault, delivered, b, vec![to_f64(y)]),
            );
            (r, p.progress().snapshot())
        }
        _ => {
            let p = base
                .input::<(f32, i32, u32)>([w0, w1, w2])
                .output::<(f32, i32, u32)>([w0, 1, w2]);
            let r = p.run(
                |i, (x, xi, xu)| load(case, fault, i, x, Some(xi), Some(xu)),
                |s, b, (x, xi, xu), (y, yi, yu)| {
                    chain(case, s, x, y)?;
                    row_sums(case, s, b, xi, yi)?;
                    doubled(case, s, xu, yu)?;
                    compute_fault(fault, ctx, s, b, x)
                },
                |b, (y, yi, yu)| {
                    let outputs = vec![to_f64(y), to_f64(yi), to_f64(yu)];
                    record(fault, delivered, b, outputs)
                },
            );
            (r, p.progress().snapshot())
        }
    };
    (result, got, progress)
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
/// exactly when the free buffers of the classes the runs used add up to `fresh`. Staging
/// and output buffers are allocated at `max_rows`, whatever a batch's rows.
fn all_returned(ctx: &Context, case: &Case) -> Result<(), TestCaseError> {
    let fresh = ctx.host_pool_stats().fresh;
    let staging = if case.reads_back {
        HostUse::Both
    } else {
        HostUse::Upload
    };
    let inputs = case.widths[..case.arity].iter().map(|&w| (staging, w));
    let outputs = case.out_widths()[..case.out_arity]
        .iter()
        .map(|&w| (HostUse::Download, w))
        .collect::<Vec<_>>();
    let mut classes: Vec<(HostUse, usize)> = Vec::new();
    for (usage, w) in inputs.chain(outputs) {
        let class = size_class(4 * w * case.max_rows);
        if !classes.contains(&(usage, class)) {
            classes.push((usage, class));
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
    prop_assert_eq!(r.bytes_in, rows * case.in_row_bytes());
    prop_assert_eq!(r.bytes_out, rows * case.out_row_bytes());
    let source = if pattern == Pattern::Sequential {
        BoundSource::Sequential
    } else {
        BoundSource::Calibrated {
            batches: case.calibration.min(case.batches()),
        }
    };
    prop_assert_eq!(r.bound_source, source);
    prop_assert!(r.wall_ms > 0.0, "wall {}", r.wall_ms);
    prop_assert!(
        r.bound_ms.is_finite() && (r.bound_ms > 0.0 || (rows == 0 && r.bound_ms == 0.0)),
        "bound {} for {} rows",
        r.bound_ms,
        rows
    );
    prop_assert_eq!(r.efficiency, r.bound_ms / r.wall_ms);
    prop_assert_eq!(r.speedup_vs_sequential, None);
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

/// A progress snapshot's counters are consistent.
fn consistent(s: &ProgressSnapshot) -> bool {
    s.delivered <= s.submitted && s.submitted <= s.loaded && s.loaded <= s.total
}

/// The snapshot of a run of `n` batches that delivered them all.
fn complete(n: usize) -> ProgressSnapshot {
    ProgressSnapshot {
        total: n,
        loaded: n,
        submitted: n,
        delivered: n,
        finished: true,
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
