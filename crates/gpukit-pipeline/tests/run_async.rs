//! `Pipeline::run_async`: an async sink awaited on a current-thread tokio runtime. Every
//! pattern delivers the same batches, in order, as `run` does; the runtime's one thread
//! stays free while the pipeline works (a second task keeps ticking); a sink error is the
//! `Deliver` error of its batch; a dropped future stops the run without a hang, and the
//! context runs the pipeline again afterwards.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use gpukit_cpu::{CpuBackend, CpuContext};
use gpukit_pipeline::{Batch, Pattern, Pipeline, PipelineError, Stage};

const BATCHES: usize = 7;
const ROWS: usize = 256;

fn cpu() -> CpuContext {
    CpuContext::new(CpuBackend::new().expect("the CPU backend")).expect("a context")
}

fn pipeline(ctx: &CpuContext, pattern: Pattern) -> Pipeline<CpuBackend, f32, f32> {
    Pipeline::new(ctx, pattern)
        .batches(BATCHES)
        .max_rows(ROWS)
        .input::<f32>(2)
        .output::<f32>(2)
}

/// Batch `i`: row `r` holds `(i * 1000 + r, -r)`; the last batch is short.
fn load(i: usize, x: &mut [f32]) -> Result<(usize, usize), gpukit_pipeline::BoxError> {
    let rows = if i + 1 == BATCHES { ROWS / 3 } else { ROWS };
    for r in 0..rows {
        x[2 * r] = (i * 1000 + r) as f32;
        x[2 * r + 1] = -(r as f32);
    }
    Ok((rows, i * 10))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

type Delivered = Vec<(usize, usize, usize, Vec<f32>)>;

/// What `run` delivers: (index, rows, meta, outputs).
fn delivered_by_run(ctx: &CpuContext, pattern: Pattern) -> Delivered {
    let mut got = Vec::new();
    pipeline(ctx, pattern)
        .run(
            load,
            |s, _b, x, y| {
                s.copy(x, y)?;
                s.scale(3.0, y)
            },
            |b: Batch<usize>, y: &[f32]| {
                got.push((b.index, b.rows, b.meta, y.to_vec()));
                Ok(())
            },
        )
        .expect("run");
    got
}

#[test]
fn every_pattern_delivers_what_run_delivers_and_the_thread_stays_free() {
    for pattern in [
        Pattern::Sequential,
        Pattern::Double,
        Pattern::Triple,
        Pattern::Deep(4),
    ] {
        let ctx = cpu();
        let expected = delivered_by_run(&ctx, pattern);
        let rt = runtime();
        let ticks = Rc::new(Cell::new(0u32));
        let done = Rc::new(Cell::new(false));
        let mut got: Delivered = Vec::new();
        let (t, d) = (ticks.clone(), done.clone());
        let p = pipeline(&ctx, pattern);
        let report = rt.block_on(async {
            let ticker = async move {
                while !d.get() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    t.set(t.get() + 1);
                }
            };
            let work = async {
                let r = p
                    .run_async(
                        load,
                        |s, _b, x, y| {
                            s.copy(x, y)?;
                            s.scale(3.0, y)
                        },
                        async |b: Batch<usize>, y: Vec<f32>| {
                            // The sink awaits the runtime's own timer.
                            tokio::time::sleep(Duration::from_millis(3)).await;
                            got.push((b.index, b.rows, b.meta, y));
                            Ok(())
                        },
                    )
                    .await;
                done.set(true);
                r
            };
            tokio::join!(work, ticker).0
        });
        let report = report.expect("run_async");
        assert_eq!(report.batches, BATCHES, "{pattern}");
        assert_eq!(got, expected, "{pattern}");
        // 7 sinks of 3 ms each: the ticker ran meanwhile on the same, only, thread.
        assert!(ticks.get() >= 5, "{pattern}: {} ticks", ticks.get());
        assert!(p.progress().snapshot().finished);
    }
}

#[test]
fn a_sink_error_is_the_deliver_error_of_its_batch() {
    let ctx = cpu();
    let mut seen = Vec::new();
    let result = runtime().block_on(pipeline(&ctx, Pattern::Triple).run_async(
        load,
        |s, _b, x, y| s.copy(x, y),
        async |b: Batch<usize>, _y: Vec<f32>| {
            seen.push(b.index);
            if b.index == 2 {
                return Err("the sink refused batch 2".into());
            }
            Ok(())
        },
    ));
    match result {
        Err(PipelineError::Stage {
            batch: 2,
            stage: Stage::Deliver,
            source,
        }) => assert_eq!(source.to_string(), "the sink refused batch 2"),
        other => panic!("expected the sink's error at batch 2, got {other:?}"),
    }
    assert_eq!(seen, [0, 1, 2]);
    // The context is usable, and a new run complete.
    assert_eq!(delivered_by_run(&ctx, Pattern::Triple).len(), BATCHES);
}

/// Waits (up to 30 s) until the pipeline's progress says its run ended.
fn wait_finished(p: &Pipeline<CpuBackend, f32, f32>) {
    let start = Instant::now();
    while !p.progress().snapshot().finished {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pipeline's thread did not stop"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_dropped_future_stops_the_run() {
    let ctx = cpu();
    // Dropped while the sink awaits batch 1.
    let p = pipeline(&ctx, Pattern::Double);
    let mut seen = Vec::new();
    let cut = runtime().block_on(async {
        tokio::time::timeout(
            Duration::from_millis(100),
            p.run_async(
                load,
                |s, _b, x, y| s.copy(x, y),
                async |b: Batch<usize>, _y: Vec<f32>| {
                    seen.push(b.index);
                    if b.index == 1 {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    Ok(())
                },
            ),
        )
        .await
    });
    assert!(cut.is_err(), "the timeout dropped the future");
    assert_eq!(seen, [0, 1]);
    wait_finished(&p);
    assert_eq!(p.progress().snapshot().delivered, 1);
    // Dropped before it was ever polled: the thread stops at its first delivery.
    let q = pipeline(&ctx, Pattern::Triple);
    drop(q.run_async(
        load,
        |s, _b, x, y| s.copy(x, y),
        async |_b: Batch<usize>, _y: Vec<f32>| Ok(()),
    ));
    wait_finished(&q);
    assert_eq!(q.progress().snapshot().delivered, 0);
    ctx.sync().expect("the context is usable");
    assert_eq!(delivered_by_run(&ctx, Pattern::Triple).len(), BATCHES);
}
