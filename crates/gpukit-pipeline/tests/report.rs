//! The report's numbers against what the test knows the run did: its rows and bytes, its
//! wall time against the caller's clock, the loader's CPU time (the load function spins a
//! known amount of it), the compute function's host time (it sleeps a known time before
//! enqueueing), the uncontended costs against the timeline they were taken from, the bound's
//! source and the lanes. And the buffered patterns' early delivery: a batch reaches the sink
//! as soon as its download is done, not only when its slot is needed again.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpukit_cpu::{CpuBackend, CpuContext};
use gpukit_pipeline::{BoundSource, Lane, Pattern, Pipeline, Report, Stage};

const BATCHES: usize = 6;
const ROWS: usize = 1 << 14;
/// Widths of the two inputs (`f32`, `i32`) and of the output (`f32`).
const W_F32: usize = 3;
const W_I32: usize = 2;
/// CPU time the load function spends on each batch, ms.
const LOAD_CPU_MS: f64 = 3.0;
/// Host time the compute function sleeps before it enqueues anything, ms.
const ENQUEUE_SLEEP_MS: f64 = 6.0;
/// Device passes over the output after the copy.
const PASSES: usize = 24;
/// What the last op of each compute (a CPU kernel that sleeps) takes on the device after the
/// compute function returned, ms: the least compute cost of a batch.
const TAIL_MS: f64 = 4.0;
/// Calibration batches of the buffered patterns.
const CALIBRATION: usize = 2;

fn cpu() -> CpuContext {
    CpuContext::new(CpuBackend::new().expect("the CPU backend")).expect("a context")
}

/// This thread's CPU time, ms.
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec for the call; CLOCK_THREAD_CPUTIME_ID exists
    // on every Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Burns `ms` of this thread's CPU time.
fn spin_cpu(ms: f64) {
    let start = thread_cpu_ms();
    let mut x = 0u64;
    while thread_cpu_ms() - start < ms {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// A CPU kernel whose first thread sleeps `ms`: device work of a known length.
fn sleeper(name: &'static str, ms: f64) -> gpukit_core::KernelSpec<(gpukit_core::In<f32>,)> {
    gpukit_core::KernelSpec::<(gpukit_core::In<f32>,)>::named(name).cpu(move |t, _| {
        if t.x() == 0 {
            std::thread::sleep(Duration::from_secs_f64(ms / 1e3));
        }
    })
}

/// One run of `pattern` with the known costs; returns its report and the caller's own
/// measure of its duration, ms.
fn measured_run(ctx: &CpuContext, pattern: Pattern) -> (Report, f64) {
    let tail = ctx
        .kernel(sleeper("tail", TAIL_MS))
        .expect("the tail kernel");
    let t = Instant::now();
    let report = Pipeline::new(ctx, pattern)
        .batches(BATCHES)
        .max_rows(ROWS)
        .calibration_batches(CALIBRATION)
        .input::<(f32, i32)>([W_F32, W_I32])
        .output::<f32>(W_F32)
        .run(
            |i, (x, xi): (&mut [f32], &mut [i32])| {
                spin_cpu(LOAD_CPU_MS);
                x.iter_mut().for_each(|v| *v = i as f32);
                xi.iter_mut().for_each(|v| *v = i as i32);
                Ok((ROWS, ()))
            },
            |s, _b, (x, _xi), y| {
                std::thread::sleep(Duration::from_secs_f64(ENQUEUE_SLEEP_MS / 1e3));
                s.copy(x, y)?;
                for _ in 0..PASSES {
                    s.scale(1.0, y)?;
                }
                s.launch(&tail, gpukit_core::LaunchConfig::for_elems(1), (x,))
            },
            |b, y: &[f32]| {
                assert!(y.iter().all(|&v| v == b.index as f32), "batch {}", b.index);
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{pattern:?}: {e}"));
    (report, t.elapsed().as_secs_f64() * 1e3)
}

/// The sum of the timeline's spans of `stage`.
fn span_sum(report: &Report, stage: Stage) -> f64 {
    let spans = report.timeline.spans.iter().filter(|s| s.stage == stage);
    spans.map(|s| s.ms()).sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn the_report_counts_what_the_run_did() {
    let ctx = cpu();
    for pattern in Pattern::STANDARD {
        let (r, outer_ms) = measured_run(&ctx, pattern);
        let n = BATCHES as f64;

        assert_eq!(r.rows, BATCHES * ROWS, "{pattern:?}");
        assert_eq!(r.bytes_in, r.rows * (4 * W_F32 + 4 * W_I32), "{pattern:?}");
        assert_eq!(r.bytes_out, r.rows * 4 * W_F32, "{pattern:?}");

        // The wall time: inside the caller's measure, and at least the compute function's
        // sleeps (one after the other on the calling thread).
        assert!(
            r.wall_ms <= outer_ms && r.wall_ms >= n * ENQUEUE_SLEEP_MS,
            "{pattern:?}: wall {} ms, caller saw {outer_ms} ms",
            r.wall_ms
        );
        // The compute function's host time holds its sleep, and fits in the run.
        assert!(
            r.stages.enqueue >= n * ENQUEUE_SLEEP_MS && r.stages.enqueue <= r.wall_ms,
            "{pattern:?}: enqueue {} ms, wall {} ms",
            r.stages.enqueue,
            r.wall_ms
        );
        // The loader's CPU time: what the load function spun, at most the load spans' wall
        // time (plus the staging buffers' setup around each).
        assert!(
            r.load_cpu_ms >= n * LOAD_CPU_MS && r.load_cpu_ms <= r.stages.load + n * 1.0,
            "{pattern:?}: load CPU {} ms, load spans {} ms",
            r.load_cpu_ms,
            r.stages.load
        );

        // Stage totals are the sums of the timeline's spans.
        for (stage, total) in [
            (Stage::Load, r.stages.load),
            (Stage::Upload, r.stages.upload),
            (Stage::Compute, r.stages.compute),
            (Stage::Download, r.stages.download),
            (Stage::Deliver, r.stages.deliver),
        ] {
            assert!(
                close(total, span_sum(&r, stage)),
                "{pattern:?} {stage:?}: {total} vs spans {}",
                span_sum(&r, stage)
            );
        }

        // The lanes: the sequential pattern's one stream, or the buffered patterns' streams,
        // and every span on one of them.
        let lanes = &r.timeline.lanes;
        if pattern == Pattern::Sequential {
            assert_eq!(lanes, &[Lane::Loader, Lane::Stream(0), Lane::Host]);
        } else {
            assert_eq!(lanes[..2], [Lane::Loader, Lane::Upload], "{pattern:?}");
            assert_eq!(
                lanes[lanes.len() - 2..],
                [Lane::Download, Lane::Host],
                "{pattern:?}"
            );
            let computes = &lanes[2..lanes.len() - 2];
            assert!(!computes.is_empty(), "{pattern:?}: {lanes:?}");
            for (k, lane) in computes.iter().enumerate() {
                assert_eq!(*lane, Lane::Compute(k), "{pattern:?}");
            }
        }
        for s in &r.timeline.spans {
            assert!(
                lanes.contains(&s.lane),
                "{pattern:?}: {s:?} not on {lanes:?}"
            );
        }

        // Where the bound's costs come from, and that they are there.
        let expected = match pattern {
            Pattern::Sequential => BoundSource::Sequential,
            _ => BoundSource::Calibrated {
                batches: CALIBRATION,
            },
        };
        assert_eq!(r.bound_source, expected, "{pattern:?}");
        let u = &r.uncontended;
        for (name, v) in [
            ("load", u.load),
            ("upload", u.upload),
            ("compute", u.compute),
            ("download", u.download),
            ("enqueue", u.enqueue),
        ] {
            assert!(
                v > 0.0 && v.is_finite(),
                "{pattern:?}: uncontended {name} {v}"
            );
        }
        // Each batch's compute holds the tail kernel's sleep after its function returned.
        assert!(
            u.compute >= n * TAIL_MS * 0.95,
            "{pattern:?}: {}",
            u.compute
        );
        assert!(r.uncontended_load_cpu_ms > 0.0, "{pattern:?}");
        assert!(r.bound_ms > 0.0 && r.bound_ms.is_finite(), "{pattern:?}");
    }
}

/// The sequential pattern's uncontended costs are its own batches' costs: each host and
/// copy stage exactly its spans, compute at most its spans but at least the last op's
/// sleep, which ran after the compute function returned.
#[test]
fn sequential_costs_are_its_spans() {
    let ctx = cpu();
    let (r, _) = measured_run(&ctx, Pattern::Sequential);
    let u = &r.uncontended;
    for (name, cost, total) in [
        ("load", u.load, r.stages.load),
        ("upload", u.upload, r.stages.upload),
        ("download", u.download, r.stages.download),
        ("deliver", u.deliver, r.stages.deliver),
        ("enqueue", u.enqueue, r.stages.enqueue),
    ] {
        assert!(close(cost, total), "{name}: cost {cost} vs spans {total}");
    }
    assert!(close(r.uncontended_load_cpu_ms, r.load_cpu_ms));
    // The cost leaves out the part of each span before the function's return (the stream
    // waiting for work), so it is at most the spans; how much it leaves out is not asserted:
    // it compares the function's host times with the span's device times, whose zero points
    // differ by the start event's wake-up (under the chaos schedule on a loaded machine,
    // more than the function's 6 ms sleep). What ran after the return, the tail kernel's
    // sleep, it keeps.
    assert!(
        u.compute >= BATCHES as f64 * TAIL_MS * 0.95
            && u.compute <= r.stages.compute * (1.0 + 1e-12),
        "compute cost {} vs spans {} (each holding a {TAIL_MS} ms tail)",
        u.compute,
        r.stages.compute
    );
}

/// When each batch finished loading and when it reached the sink, ms from the start.
struct Arrivals {
    t0: Instant,
    loaded: Mutex<Vec<f64>>,
    delivered: Mutex<Vec<f64>>,
}

impl Arrivals {
    fn new(batches: usize) -> Arrivals {
        Arrivals {
            t0: Instant::now(),
            loaded: Mutex::new(vec![f64::NAN; batches]),
            delivered: Mutex::new(vec![f64::NAN; batches]),
        }
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1e3
    }

    fn loaded(&self, i: usize) {
        self.loaded.lock().unwrap()[i] = self.now();
    }

    fn delivered(&self, i: usize) {
        self.delivered.lock().unwrap()[i] = self.now();
    }

    /// Asserts that at least half of `batches` reached the sink before the next-but-one
    /// batch was loaded.
    fn assert_early(self, what: &str, batches: std::ops::Range<usize>) {
        let (loaded, delivered) = (
            self.loaded.into_inner().unwrap(),
            self.delivered.into_inner().unwrap(),
        );
        let early: Vec<usize> = batches
            .clone()
            .filter(|&i| delivered[i] < loaded[i + 2])
            .collect();
        assert!(
            early.len() * 2 >= batches.len(),
            "{what}: only batches {early:?} of {batches:?} delivered before the next-but-one \
             was loaded\nloaded    {loaded:?}\ndelivered {delivered:?}"
        );
    }
}

/// A buffered run hands a batch to the sink as soon as its download is done, checked after
/// the next batch is submitted, instead of when its slot comes round again. The loader takes
/// [`SLOW_LOAD`] per batch (the other stages take far less), so batch `i` is delivered soon
/// after batch `i + 1` was loaded, well before batch `i + 2` is; waiting for the slot would
/// deliver it after batch `i + depth` was loaded.
#[test]
fn buffered_runs_deliver_a_finished_batch_early() {
    const SLOW_LOAD: Duration = Duration::from_millis(80);
    const N: usize = 9;
    let ctx = cpu();
    for pattern in [Pattern::Double, Pattern::Triple] {
        let arrivals = Arrivals::new(N);
        Pipeline::new(&ctx, pattern)
            .batches(N)
            .max_rows(256)
            .calibration_batches(1)
            .input::<f32>(1)
            .output::<f32>(1)
            .run(
                |i, x: &mut [f32]| {
                    std::thread::sleep(SLOW_LOAD);
                    x.fill(i as f32);
                    arrivals.loaded(i);
                    Ok((256, ()))
                },
                |s, _b, x, y| s.copy(x, y),
                |b, _y: &[f32]| {
                    arrivals.delivered(b.index);
                    Ok(())
                },
            )
            .unwrap();
        // The overlapped batches whose next-but-one batch exists.
        arrivals.assert_early(&format!("{pattern:?}"), 1..N - 2);
    }
}

/// Double buffering through a slow phase and then a fast one. Batches 1 to 3 compute for
/// 40 ms (their loads are instant): the host submits batch 2 while batch 1 computes, so its
/// upload span ends before batch 1's compute ends (a host that waited for each batch right
/// after submitting it would start it after; a span drawn to the start of its compute
/// would end after), and batches 1 and 2 are delivered only when
/// their slots are needed again. Then batch 4's load waits for the slow computes to end, the
/// next loads take 80 ms and the computes nothing: each batch from 5 on is again delivered
/// early, before the next-but-one is loaded (a host that
/// lost count of the delivered batches at a slot's reuse would deliver them only at the
/// next reuse, after it).
#[test]
fn early_delivery_resumes_after_slow_batches() {
    const N: usize = 11;
    let ctx = cpu();
    let slow = ctx.kernel(sleeper("slow", 40.0)).expect("the slow kernel");
    let arrivals = Arrivals::new(N);
    let report = Pipeline::new(&ctx, Pattern::Double)
        .batches(N)
        .max_rows(256)
        .calibration_batches(1)
        .input::<f32>(1)
        .output::<f32>(1)
        .run(
            |i, x: &mut [f32]| {
                // Batch 4 waits for the slow computes to drain (one compute stream).
                match i {
                    4 => std::thread::sleep(Duration::from_millis(200)),
                    5.. => std::thread::sleep(Duration::from_millis(80)),
                    _ => {}
                }
                x.fill(i as f32);
                arrivals.loaded(i);
                Ok((256, ()))
            },
            |s, b, x, y| {
                s.copy(x, y)?;
                if (1..=3).contains(&b.index) {
                    s.launch(&slow, gpukit_core::LaunchConfig::for_elems(1), (x,))?;
                }
                Ok(())
            },
            |b, y: &[f32]| {
                assert!(y.iter().all(|&v| v == b.index as f32), "batch {}", b.index);
                arrivals.delivered(b.index);
                Ok(())
            },
        )
        .unwrap();
    let span = |batch: usize, stage: Stage| {
        let found = report
            .timeline
            .spans
            .iter()
            .find(|s| s.batch == batch && s.stage == stage);
        *found.expect("every stage of every batch has a span")
    };
    let (up2, comp1) = (span(2, Stage::Upload), span(1, Stage::Compute));
    assert!(
        up2.end_ms < comp1.end_ms,
        "batch 2's upload {up2:?} waited for (or was drawn to) batch 1's compute {comp1:?}"
    );
    arrivals.assert_early("after the slow batches", 5..N - 2);
}
