//! A pipeline run with a fault injected at every backend call in turn (gpukit-cpu's
//! `fault-injection` feature, which this crate's dev-dependency turns on).
//!
//! The pipeline carries what a training loop carries: two input arrays (features, `f32`,
//! and labels, `u32`) and two outputs, batches of up to `ROWS` rows with a short last one,
//! and metadata from the loader to the sink. A run without faults counts the calls of each
//! kind; then, for every kind and every `k` up to that count (plus a margin: the pinned
//! pool's reuse depends on timing, so a run may make a few more host allocations), a fresh
//! context fails the `k`-th call. Each such run must end (in a thread with a time limit),
//! return the injected error in its typed form (or succeed completely when the run made
//! fewer calls than `k`), have delivered exactly the batches before the one the error
//! names, correct, in order and with their metadata, and release every device buffer, host
//! allocation and stream it made; the context must then run the pipeline again correctly.

use std::time::Duration;

use gpukit_cpu::fault::{is_injected, within_limit};
use gpukit_cpu::{CpuBackend, CpuContext, FaultKind, FaultPlan, FaultProbe};
use gpukit_pipeline::{Pattern, Pipeline, PipelineError};

/// How long one case may take before it counts as a hang (see [`within_limit`]).
const CASE_LIMIT: Duration = Duration::from_secs(30);
const BATCHES: usize = 6;
/// Rows per batch at most, and features per row.
const ROWS: usize = 64;
const FEATURES: usize = 4;

/// Batch `i`'s rows: the last batch is short.
fn rows(i: usize) -> usize {
    if i + 1 == BATCHES {
        ROWS / 2 + 3
    } else {
        ROWS
    }
}

fn feature(i: usize, j: usize) -> f32 {
    (i * 1000 + j) as f32
}

fn label(i: usize, r: usize) -> u32 {
    (i * 7 + r) as u32 % 10
}

/// What the sink gets for batch `i`: per row, `3 x` summed over the row's features, and
/// the label plus one; and the loader's metadata.
fn expected(i: usize) -> (Vec<f32>, Vec<u32>, String) {
    let sums = (0..rows(i))
        .map(|r| {
            (0..FEATURES)
                .map(|f| 3.0 * feature(i, r * FEATURES + f))
                .sum()
        })
        .collect();
    let labels = (0..rows(i)).map(|r| label(i, r) + 1).collect();
    (sums, labels, format!("shard-{i}"))
}

/// The batches a run delivered, in the order it delivered them.
type Delivered = Vec<(usize, (Vec<f32>, Vec<u32>, String))>;

/// Runs the pipeline with `streams` compute streams; returns the delivered batches and the
/// result.
fn run(
    ctx: &CpuContext,
    pattern: Pattern,
    streams: usize,
) -> (Delivered, Result<(), PipelineError>) {
    let mut delivered = Vec::new();
    let r = Pipeline::new(ctx, pattern)
        .batches(BATCHES)
        .compute_streams(streams)
        .max_rows(ROWS)
        .input::<(f32, u32)>([FEATURES, 1])
        .output::<(f32, u32)>([1, 1])
        .run(
            |i, (x, labels)| {
                for (j, v) in x[..rows(i) * FEATURES].iter_mut().enumerate() {
                    *v = feature(i, j);
                }
                for (r, l) in labels[..rows(i)].iter_mut().enumerate() {
                    *l = label(i, r);
                }
                Ok((rows(i), format!("shard-{i}")))
            },
            |s, b, (x, labels), (sums, labels_out)| {
                s.row_sum(gpukit_core::Shape::new(b.rows, FEATURES), x, sums)?;
                s.scale(3.0, sums)?;
                s.add_scalar(labels, 1, labels_out)
            },
            |b, (sums, labels)| {
                delivered.push((b.index, (sums.to_vec(), labels.to_vec(), b.meta)));
                Ok(())
            },
        )
        .map(drop);
    (delivered, r)
}

fn check_delivered(what: &str, delivered: &Delivered, count: usize) {
    assert_eq!(delivered.len(), count, "{what}: batches delivered");
    for (k, (i, y)) in delivered.iter().enumerate() {
        assert_eq!(*i, k, "{what}: delivered out of order");
        assert!(
            *y == expected(k),
            "{what}: batch {k} delivered wrong values or metadata"
        );
    }
}

/// What a faulty run did.
struct Case {
    /// Whether the fault fired.
    injected: bool,
    /// The error, in words, when the run failed.
    error: Option<String>,
}

/// One run on a fresh context with `plan` armed just before the run.
fn case(pattern: Pattern, streams: usize, plan: Option<FaultPlan>) -> (Case, FaultProbe) {
    let what = format!("{pattern}, {streams} compute streams, {plan:?}");
    let (backend, probe) = CpuBackend::with_faults(FaultPlan::new(FaultKind::Any, u64::MAX))
        .expect("open the CPU backend");
    probe.disarm();
    let ctx = gpukit_core::Context::new(backend).expect("open a context");
    // The context's fault record, which lives from its first kernel (a built-in op is one)
    // to its end, made before the count starts.
    let mut warm = ctx.alloc::<u8>(4).expect("4 bytes");
    ctx.fill(&mut warm, 0).expect("a fill");
    drop(warm);
    ctx.sync().expect("synced");
    ctx.trim().expect("trimmed");
    let before = probe.stats();
    if let Some(plan) = plan {
        probe.arm(plan);
    }
    let (delivered, r) = run(&ctx, pattern, streams);
    probe.disarm();
    let injected = probe.stats().injected == 1;
    let error = match r {
        Ok(()) => {
            // An injected fault may be absorbed only when it hit an ordering event recorded
            // after queued work (gpukit-core then waits for the work) or the device pool's
            // allocation of a block larger than the request (it then allocates the exact
            // size); the call succeeds.
            if injected {
                let last = probe.injected().last().map(|f| f.call);
                assert!(
                    matches!(last, Some("record_event" | "alloc")),
                    "{what}: the run succeeded despite the fault at {last:?}"
                );
            }
            check_delivered(&what, &delivered, BATCHES);
            None
        }
        Err(e) => {
            assert!(injected, "{what}: failed without a fault: {e}");
            let source = match &e {
                PipelineError::Gpu { source, .. } => source,
                other => panic!("{what}: the error is not the device's: {other}"),
            };
            assert!(is_injected(source), "{what}: untyped error {source:?}");
            let batch = e.batch().unwrap_or(0);
            check_delivered(&what, &delivered, batch);
            Some(e.to_string())
        }
    };
    // Every buffer goes back: device buffers and streams at once, host memory to the pool
    // (and to the allocator once the pool is trimmed).
    ctx.sync()
        .unwrap_or_else(|e| panic!("{what}: sync after the run: {e}"));
    // The device pool caches the run's dropped buffers: hand them back first.
    ctx.trim()
        .unwrap_or_else(|e| panic!("{what}: trim after the run: {e}"));
    let after = probe.stats();
    assert_eq!(
        after.live_buffers, before.live_buffers,
        "{what}: device buffers leaked"
    );
    assert_eq!(
        after.live_streams, before.live_streams,
        "{what}: streams leaked"
    );
    ctx.set_host_pool_limit(0);
    assert_eq!(
        probe.stats().live_host,
        before.live_host,
        "{what}: host buffers leaked"
    );
    ctx.set_host_pool_limit(1 << 30);
    // The context still works.
    let (again, r) = run(&ctx, pattern, streams);
    r.unwrap_or_else(|e| panic!("{what}: the next run failed: {e}"));
    check_delivered(&format!("{what}, next run"), &again, BATCHES);
    drop(ctx);
    let end = probe.stats();
    assert_eq!(
        (end.live_buffers, end.live_host, end.live_streams),
        (0, 0, 0),
        "{what}: the context did not release everything"
    );
    (Case { injected, error }, probe)
}

fn every_call(pattern: Pattern, streams: usize) {
    let (_, dry) = within_limit(CASE_LIMIT, move || case(pattern, streams, None))
        .unwrap_or_else(|e| panic!("{pattern} dry run {e}"));
    let counts = dry.stats();
    let mut cases = 0;
    let mut fired = 0;
    let mut errors = std::collections::BTreeSet::new();
    for kind in FaultKind::ALL {
        // The dry run's count covers both of its runs; the faulty run is the first one.
        let n = counts.count(kind) / 2 + 2;
        for k in 1..=n {
            let plan = FaultPlan::new(kind, k);
            let (c, _) = within_limit(CASE_LIMIT, move || case(pattern, streams, Some(plan)))
                .unwrap_or_else(|e| panic!("{pattern} {plan:?} {e}"));
            cases += 1;
            fired += u32::from(c.injected);
            if let Some(e) = c.error {
                // The stage and call, without the numbers.
                errors.insert(e.split(':').take(3).collect::<String>());
            }
        }
    }
    eprintln!(
        "{pattern}, {streams} compute streams: {cases} fault cases, {fired} fired (calls per \
         run: {} alloc, {} copy, {} op, {} event); {} distinct (batch, stage, call) errors",
        counts.allocs / 2,
        counts.copies / 2,
        counts.ops / 2,
        counts.events / 2,
        errors.len()
    );
    assert!(fired > 0);
}

#[test]
fn a_fault_at_every_call_of_a_triple_buffered_run() {
    every_call(Pattern::Triple, 1);
}

#[test]
fn a_fault_at_every_call_of_a_sequential_run() {
    every_call(Pattern::Sequential, 1);
}

/// Batches on alternating compute streams, each waiting on the shared upload and download
/// streams' events.
#[test]
fn a_fault_at_every_call_of_a_double_buffered_run_on_two_compute_streams() {
    every_call(Pattern::Double, 2);
}
