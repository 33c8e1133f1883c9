//! Step 1 of a batch, loading, and the loader thread of the buffered patterns: staging
//! buffers from the context's pool filled by the user's load function, sent in order to the
//! engine with backpressure, and the loader's CPU time (which the CPU backend's bound needs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use gpukit_core::Backend;

use crate::arrays::{Arrays, Batch};
use crate::builder::Pipeline;
use crate::engine::{guarded, stage_error, user};
use crate::error::{PipelineError, Stage};
use crate::progress::Progress;
use crate::stages::LoadFn;

/// A loaded batch on its way from the loader.
pub(crate) struct Loaded<B: Backend, In: Arrays<B>, M> {
    pub(crate) batch: Batch<M>,
    pub(crate) staging: In::Staging,
    /// Host milliseconds since the run's start: load start and end.
    pub(crate) start_ms: f64,
    pub(crate) end_ms: f64,
}

/// What the loader sends: a batch, or the error that stopped it.
pub(crate) type LoaderMsg<B, In, M> = Result<Loaded<B, In, M>, PipelineError>;

/// Milliseconds of this thread's CPU time.
pub(crate) fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r == 0 {
        ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
    } else {
        0.0
    }
}

/// Step 1: staging buffers from the pool at `max_rows`, filled by the load function, cut to
/// the rows it filled. `now` is the run's host clock.
pub(crate) fn load_batch<B, In, Out, M, L>(
    p: &Pipeline<B, In, Out>,
    load: &mut L,
    i: usize,
    now: impl Fn() -> f64,
) -> Result<Loaded<B, In, M>, PipelineError>
where
    B: Backend,
    In: Arrays<B>,
    Out: Arrays<B>,
    L: LoadFn<B, In, M>,
{
    let start_ms = now();
    let mut staging = In::alloc_staging(&p.ctx, &p.in_widths, p.max_rows, p.staging_use())
        .map_err(stage_error(i, Stage::Load))?;
    let (rows, meta) = guarded(&p.ctx, i, Stage::Load, "load function", || {
        load.load(i, &mut staging, &p.in_widths, p.max_rows)
            .map_err(user(i, Stage::Load))
    })?;
    if rows > p.max_rows {
        return Err(PipelineError::TooManyRows {
            batch: i,
            rows,
            max_rows: p.max_rows,
        });
    }
    In::truncate(&mut staging, &p.in_widths, rows);
    Progress::bump(&p.progress.0.loaded);
    Ok(Loaded {
        batch: Batch {
            index: i,
            rows,
            meta,
        },
        staging,
        start_ms,
        end_ms: now(),
    })
}

/// The loader thread: step 1 for batches `first..`, sent in order; blocks while `depth` are
/// waiting (backpressure). Returns its CPU time in ms.
pub(crate) fn loader_loop<B, In, Out, M, L>(
    p: &Pipeline<B, In, Out>,
    first: usize,
    stop: &AtomicBool,
    host_t0: Instant,
    tx: SyncSender<LoaderMsg<B, In, M>>,
    load: &mut L,
) -> f64
where
    B: Backend,
    In: Arrays<B>,
    Out: Arrays<B>,
    M: Send,
    L: LoadFn<B, In, M>,
{
    let cpu0 = thread_cpu_ms();
    let now = || host_t0.elapsed().as_secs_f64() * 1e3;
    for i in first..p.batches {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let msg = load_batch(p, load, i, now);
        let failed = msg.is_err();
        if tx.send(msg).is_err() || failed {
            break;
        }
    }
    thread_cpu_ms() - cpu0
}
