//! Random pipelines and their host reference: the strategies that draw a case (pattern,
//! batches, rows, inputs, ops, faults) and what the host computes for each batch.

use super::*;

/// One step of the `f32` array's compute chain, `y` from `x` (same length). Scalars are
/// quarters (`k / 4`), so every result is exact in f32 and compared bit for bit.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
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

pub(super) fn quarter(k: i8) -> f32 {
    f32::from(k) / 4.0
}

impl Op {
    pub(super) fn apply(self, x: &[f32], y: &mut [f32]) {
        match self {
            Op::Double => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x + x),
            Op::Relu => y.iter_mut().zip(x).for_each(|(y, &x)| *y = x.max(0.0)),
            Op::Copy => y.copy_from_slice(x),
            Op::Fill(k) => y.fill(quarter(k)),
            Op::Scale(k) => y.iter_mut().for_each(|y| *y *= quarter(k)),
            Op::Axpy(k) => y.iter_mut().zip(x).for_each(|(y, &x)| *y += quarter(k) * x),
        }
    }

    pub(super) fn enqueue(
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
pub(super) fn first_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Double),
        Just(Op::Relu),
        Just(Op::Copy),
        (-8i8..=8).prop_map(Op::Fill),
    ]
}

pub(super) fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        first_op(),
        (-8i8..=8).prop_map(Op::Scale),
        (-8i8..=8).prop_map(Op::Axpy),
    ]
}

pub(super) fn pattern() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        Just(Pattern::Sequential),
        Just(Pattern::Double),
        Just(Pattern::Triple),
        (1usize..=5).prop_map(Pattern::Deep),
    ]
}

/// The metadata the loader sends with a batch.
pub(super) type Meta = (usize, u64);

/// A random pipeline.
///
/// Input array `k` (of `arity`) has width `widths[k]`: array 0 is `f32`, array 1 `i32`,
/// array 2 `u32`. The outputs are the first `out_arity` (1 or `arity`) of: the `f32` op
/// chain of input 0 (width `widths[0]`); `2 * row_sum(input 1) + k` (`i32`, width 1);
/// `2 * input 2 + |k|` (`u32`, width `widths[2]`).
#[derive(Debug, Clone)]
pub(super) struct Case {
    pub(super) pattern: Pattern,
    pub(super) max_rows: usize,
    /// Each batch's rows, `0..=max_rows`.
    pub(super) rows: Vec<usize>,
    pub(super) arity: usize,
    pub(super) out_arity: usize,
    pub(super) widths: [usize; 3],
    pub(super) compute_streams: usize,
    pub(super) calibration: usize,
    pub(super) reads_back: bool,
    /// The loader sleeps up to this many microseconds per batch (varying by batch).
    pub(super) max_load_us: u32,
    pub(super) ops: Vec<Op>,
    pub(super) k: i32,
    pub(super) seed: u32,
}

pub(super) fn case(batches: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Case> {
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
pub(super) fn row_count(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(max), 1 => Just(0usize), 1 => Just(1usize), 4 => 0..=max]
}

/// A 64-bit mix of the arguments (splitmix64's finaliser).
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What the sink got for a batch: index, rows, metadata, and each output array as f64.
pub(super) type Delivered = (usize, usize, Meta, Vec<Vec<f64>>);

impl Case {
    pub(super) fn batches(&self) -> usize {
        self.rows.len()
    }

    /// Random bits of element `j` of array `a` of batch `i`.
    pub(super) fn bits(&self, i: usize, a: usize, j: usize) -> u64 {
        mix(mix(u64::from(self.seed), (i * 4 + a) as u64), j as u64)
    }

    /// Batch `i`'s `f32` input: values in -10..10 with a granularity of 1/64 (exact).
    pub(super) fn input0(&self, i: usize) -> Vec<f32> {
        (0..self.rows[i] * self.widths[0])
            .map(|j| ((self.bits(i, 0, j) % 1281) as f32 - 640.0) / 64.0)
            .collect()
    }

    pub(super) fn input1(&self, i: usize) -> Vec<i32> {
        (0..self.rows[i] * self.widths[1])
            .map(|j| (self.bits(i, 1, j) % 2001) as i32 - 1000)
            .collect()
    }

    pub(super) fn input2(&self, i: usize) -> Vec<u32> {
        (0..self.rows[i] * self.widths[2])
            .map(|j| (self.bits(i, 2, j) % 2001) as u32)
            .collect()
    }

    /// The metadata the loader sends with batch `i`.
    pub(super) fn meta(&self, i: usize) -> Meta {
        (i, mix(u64::from(self.seed) ^ 0xabcd, i as u64))
    }

    /// How long the loader sleeps for batch `i`.
    pub(super) fn load_delay(&self, i: usize) -> Duration {
        let us = mix(u64::from(self.seed) ^ 0x5555, i as u64) % (u64::from(self.max_load_us) + 1);
        Duration::from_micros(us)
    }

    /// The host reference of batch `i`'s outputs.
    pub(super) fn reference(&self, i: usize) -> Vec<Vec<f64>> {
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

    pub(super) fn out_widths(&self) -> [usize; 3] {
        [self.widths[0], 1, self.widths[2]]
    }

    /// The bytes of one row of the input arrays (every element type is 4 bytes).
    pub(super) fn in_row_bytes(&self) -> usize {
        4 * self.widths[..self.arity].iter().sum::<usize>()
    }

    /// The bytes of one row of the output arrays.
    pub(super) fn out_row_bytes(&self) -> usize {
        4 * self.out_widths()[..self.out_arity].iter().sum::<usize>()
    }
}

/// Where a run is made to fail, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum How {
    Error,
    Panic,
    /// The loader reports `max_rows + 1` rows (load only).
    TooManyRows,
    /// An op on views of different lengths (compute only): a device error.
    LengthMismatch,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Fault {
    pub(super) batch: usize,
    pub(super) stage: Stage,
    pub(super) how: How,
}

pub(super) fn fault(batches: usize) -> impl Strategy<Value = Fault> {
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
pub(super) type Outcome = (
    Result<Report, PipelineError>,
    Vec<Delivered>,
    ProgressSnapshot,
);

/// The load function of every arity: sleeps, fails as `fault` says, else fills batch `i`'s
/// rows of the arrays it is given.
pub(super) fn load(
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
pub(super) fn chain(
    case: &Case,
    s: &Stream,
    x: &GpuView<'_, f32>,
    y: &mut GpuViewMut<'_, f32>,
) -> gpukit::Result<()> {
    case.ops.iter().try_for_each(|op| op.enqueue(s, x, y))
}

/// Output 1: `2 * row_sum(xi) + k`, one element a row.
pub(super) fn row_sums(
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
pub(super) fn doubled(
    case: &Case,
    s: &Stream,
    xu: &GpuView<'_, u32>,
    yu: &mut GpuViewMut<'_, u32>,
) -> gpukit::Result<()> {
    s.add(xu, xu, yu)?;
    s.add_scalar_inplace(yu, case.k.unsigned_abs())
}

/// The compute side of a fault, after the batch's valid work was enqueued.
pub(super) fn compute_fault(
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
pub(super) fn record(
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

pub(super) fn to_f64<T: Copy + Into<f64>>(v: &[T]) -> Vec<f64> {
    v.iter().map(|&x| x.into()).collect()
}

/// Runs `case` in `pattern` on `ctx`, failing as `fault` says.
pub(super) fn run_case(
    ctx: &Context,
    case: &Case,
    pattern: Pattern,
    fault: Option<Fault>,
) -> Outcome {
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
pub(super) fn check_delivered(
    case: &Case,
    got: &[Delivered],
    n: usize,
) -> Result<(), TestCaseError> {
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
pub(super) fn size_class(bytes: usize) -> usize {
    if bytes <= 4096 {
        return 4096;
    }
    let step = bytes.next_power_of_two() / 16;
    bytes.div_ceil(step) * step
}

/// Free pinned buffers of `class` bytes for `usage` in the pool: takes buffers until the
/// pool has to allocate a fresh one (all go back when the function returns).
pub(super) fn pooled(ctx: &Context, class: usize, usage: HostUse) -> Result<u64, TestCaseError> {
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
pub(super) fn all_returned(ctx: &Context, case: &Case) -> Result<(), TestCaseError> {
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
pub(super) fn check_report(case: &Case, r: &Report, pattern: Pattern) -> Result<(), TestCaseError> {
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
pub(super) fn consistent(s: &ProgressSnapshot) -> bool {
    s.delivered <= s.submitted && s.submitted <= s.loaded && s.loaded <= s.total
}

/// The snapshot of a run of `n` batches that delivered them all.
pub(super) fn complete(n: usize) -> ProgressSnapshot {
    ProgressSnapshot {
        total: n,
        loaded: n,
        submitted: n,
        delivered: n,
        finished: true,
    }
}
