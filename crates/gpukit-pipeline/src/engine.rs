//! The pipeline engine: one batch's way through the stages, and the loops that drive batches
//! through them in each pattern.
//!
//! A batch goes:
//!
//! 1. [`load_batch`] (in [`crate::loader`]): pinned staging buffers from the context's pool, filled by the user's
//!    load function (on the loader thread in the buffered patterns), cut to the rows filled;
//! 2. [`Run::submit`], which enqueues without blocking: [`Run::enqueue_upload`] (staging into
//!    the slot's device inputs), [`Run::enqueue_compute`] (the user's device work, on views of
//!    the batch's rows) and [`Run::enqueue_download`] (into fresh pinned buffers), each
//!    between two events that time it and fence the slot's reuse;
//! 3. [`Run::retire`], once the batch is the oldest: [`Run::wait_copies`] (staging back to the
//!    pool, outputs in hand), [`Run::record_spans`] (the timeline) and [`Run::deliver`] (the
//!    user's sink, in batch order).
//!
//! [`Run::execute`] drives them: the sequential pattern does 1-2-3 per batch on one stream; the
//! buffered patterns first run [`Run::calibrate`] (a few batches alone, for the report's
//! bound), then a [`loader_loop`] thread (also in [`crate::loader`]) does step 1 up to `depth` batches ahead while
//! [`Run::run_buffered`] does steps 2 and 3 on the calling thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::Instant;

use gpukit_core::{Backend, Context, Event, HostUse, Stream};

use crate::arrays::{Arrays, Batch};
use crate::builder::Pipeline;
use crate::error::{BoxError, PipelineError, Stage};
use crate::loader::{load_batch, loader_loop, thread_cpu_ms, Loaded, LoaderMsg};
use crate::pattern::Pattern;
use crate::progress::Progress;
use crate::report::{self, Calibration, Measured, Report, StageTimes};
use crate::stages::{LoadFn, StageFns};
use crate::timeline::{Lane, Span};

/// A compute stage enqueued between two events, and the host window (ms since the run's
/// start) in which the compute function enqueued it.
struct Computed<B: Backend> {
    start: Event<B>,
    end: Event<B>,
    host: (f64, f64),
}

/// Copies enqueued between two events (which time them).
struct Timed<B: Backend, C> {
    start: Event<B>,
    copies: C,
    end: Event<B>,
}

/// One batch whose device work is queued.
struct InFlight<B: Backend, In: Arrays<B>, Out: Arrays<B>, M> {
    batch: Batch<M>,
    up: In::Copies,
    down: Out::Copies,
    load: (f64, f64),
    /// Upload, compute and download, each between two events.
    events: [Event<B>; 6],
    /// When the compute function ran on the host, ms since the run's start.
    enqueue: (f64, f64),
    compute_lane: usize,
}

/// The device buffers of one slot and the events that fence their reuse.
struct Slot<B: Backend, In: Arrays<B>, Out: Arrays<B>, M> {
    input: In::Device,
    output: Out::Device,
    /// End of the last compute that read `input` (the next upload into it waits).
    compute_done: Option<Event<B>>,
    /// End of the last download that read `output` (the next compute into it waits).
    download_done: Option<Event<B>>,
    inflight: Option<InFlight<B, In, Out, M>>,
}

/// The streams of a run.
struct Streams<B: Backend> {
    upload: Stream<B>,
    computes: Vec<Stream<B>>,
    download: Stream<B>,
}

/// What a batch run alone measured.
struct Alone {
    times: StageTimes,
    /// The load function's CPU time, ms.
    cpu: f64,
    rows: usize,
}

/// One run of a pipeline.
struct Run<'p, B: Backend, In, Out> {
    p: &'p Pipeline<B, In, Out>,
    streams: Streams<B>,
    /// The start event (on the upload stream) and the host instant it completed.
    t0: Event<B>,
    host_t0: Instant,
    spans: Vec<Span>,
    load_cpu_ms: f64,
    /// Rows submitted, and rows with each empty batch counted as one.
    rows: usize,
    units: usize,
    /// The costs of every retired batch (see [`Run::record_spans`]).
    busy: StageTimes,
    calibration: Calibration,
}

/// Wraps an error of the device work (on any backend) with its batch and stage.
pub(crate) fn stage_error(
    batch: usize,
    stage: Stage,
) -> impl Fn(gpukit_core::Error) -> PipelineError {
    move |source| PipelineError::Gpu {
        batch,
        stage,
        source,
    }
}

/// Runs a user function of batch `i`'s `stage`; a panic in it becomes that stage's error
/// (neither the loader thread nor the calling thread is taken down, and every pattern
/// behaves the same).
///
/// The stage runs inside a profiler range named `{stage} {batch}` (`compute 3`): an NVTX
/// range on CUDA, so Nsight Systems shows each batch's stages on their threads' rows.
pub(crate) fn guarded<B: Backend, T>(
    ctx: &Context<B>,
    i: usize,
    stage: Stage,
    what: &str,
    f: impl FnOnce() -> Result<T, PipelineError>,
) -> Result<T, PipelineError> {
    let _range = ctx.range(&format!("{stage} {i}"));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            Err(PipelineError::Stage {
                batch: i,
                stage,
                source: format!("the {what} panicked: {message}").into(),
            })
        }
    }
}

/// A user stage's error, with its batch and stage.
pub(crate) fn user(batch: usize, stage: Stage) -> impl Fn(BoxError) -> PipelineError {
    move |source| PipelineError::Stage {
        batch,
        stage,
        source,
    }
}

/// Runs `p` with the user's stages.
pub(crate) fn run<B, In, Out, M, St, L, X>(
    p: &Pipeline<B, In, Out>,
    mut load: L,
    mut stages: X,
    state: &mut St,
) -> Result<Report, PipelineError>
where
    B: Backend,
    In: Arrays<B>,
    Out: Arrays<B>,
    M: Send,
    L: LoadFn<B, In, M>,
    X: StageFns<B, In, Out, M, St>,
{
    Run::new(p)?.execute(&mut load, &mut stages, state)
}

impl<'p, B: Backend, In: Arrays<B>, Out: Arrays<B>> Run<'p, B, In, Out> {
    fn new(p: &'p Pipeline<B, In, Out>) -> Result<Self, PipelineError> {
        let setup = stage_error(0, Stage::Upload);
        let ctx = &p.ctx;
        let upload = ctx.create_stream().map_err(&setup)?;
        let (computes, download) = if p.pattern == Pattern::Sequential {
            (vec![upload.clone()], upload.clone())
        } else {
            let computes = (0..p.compute_streams)
                .map(|_| ctx.create_stream())
                .collect::<gpukit_core::Result<Vec<_>>>()
                .map_err(&setup)?;
            (computes, ctx.create_stream().map_err(&setup)?)
        };
        let t0 = upload.record_event().map_err(&setup)?;
        Ok(Run {
            p,
            streams: Streams {
                upload,
                computes,
                download,
            },
            t0,
            host_t0: Instant::now(),
            spans: Vec::new(),
            load_cpu_ms: 0.0,
            rows: 0,
            units: 0,
            busy: StageTimes::default(),
            calibration: Calibration::default(),
        })
    }

    /// Records a new start event on the upload stream, waits for it, and takes the host's
    /// start instant right after.
    fn restart_clock(&mut self) -> gpukit_core::Result<()> {
        self.p.ctx.sync()?;
        let t0 = self.streams.upload.record_event()?;
        t0.sync()?;
        self.t0 = t0;
        self.host_t0 = Instant::now();
        Ok(())
    }

    fn host_ms(&self) -> f64 {
        self.host_t0.elapsed().as_secs_f64() * 1e3
    }

    /// The slots of batches in flight, their device buffers at `max_rows`.
    fn alloc_slots<M>(&self) -> Result<Vec<Slot<B, In, Out, M>>, PipelineError> {
        let p = self.p;
        let n = p.pattern.depth().min(p.batches.max(1));
        (0..n)
            .map(|_| {
                Ok(Slot {
                    input: In::alloc_device(&p.ctx, &p.in_widths, p.max_rows)
                        .map_err(stage_error(0, Stage::Upload))?,
                    output: Out::alloc_device(&p.ctx, &p.out_widths, p.max_rows)
                        .map_err(stage_error(0, Stage::Compute))?,
                    compute_done: None,
                    download_done: None,
                    inflight: None,
                })
            })
            .collect()
    }

    /// Runs every batch: one at a time for the sequential pattern; otherwise the
    /// calibration batches alone, then the rest overlapped. Then waits for every stream
    /// and builds the report.
    fn execute<M, St, L, X>(
        &mut self,
        load: &mut L,
        stages: &mut X,
        state: &mut St,
    ) -> Result<Report, PipelineError>
    where
        M: Send,
        L: LoadFn<B, In, M>,
        X: StageFns<B, In, Out, M, St>,
    {
        let p = self.p;
        let mut slots = self.alloc_slots::<M>()?;
        // The run's clock starts now: setting up the slots is not part of the pipeline.
        self.restart_clock()
            .map_err(stage_error(0, Stage::Upload))?;
        let result = if p.pattern == Pattern::Sequential {
            (0..p.batches).try_for_each(|i| {
                self.run_batch_alone(&mut slots[0], i, load, stages, state)
                    .map(drop)
            })
        } else {
            self.calibrate(&mut slots, load, stages, state)
                .and_then(|first| self.overlapped(first, &mut slots, load, stages, state))
        };
        // Whatever happened, nothing may stay queued: wait for every stream (a failed run's
        // in-flight batches are dropped after that, releasing their buffers).
        let synced = [&self.streams.upload, &self.streams.download]
            .into_iter()
            .chain(&self.streams.computes)
            .map(|s| s.sync())
            .collect::<gpukit_core::Result<Vec<()>>>();
        drop(slots);
        result?;
        synced.map_err(stage_error(p.batches.saturating_sub(1), Stage::Download))?;
        let wall_ms = self.host_ms();
        let row_bytes = |dtypes: Vec<gpukit_core::DType>, widths: &[usize]| -> usize {
            dtypes.iter().zip(widths).map(|(d, w)| d.size() * w).sum()
        };
        Ok(report::build(
            &p.ctx,
            Measured {
                pattern: p.pattern,
                batches: p.batches,
                rows: self.rows,
                units: self.units,
                bytes_in: self.rows * row_bytes(In::dtypes(), &p.in_widths),
                bytes_out: self.rows * row_bytes(Out::dtypes(), &p.out_widths),
                lanes: self.lanes(),
                spans: std::mem::take(&mut self.spans),
                wall_ms,
                load_cpu_ms: self.load_cpu_ms,
                costs: self.busy,
                calibration: self.calibration,
            },
        ))
    }

    /// Batch `i` alone, every step on the calling thread, waiting for each: the sequential
    /// pattern's loop body and a calibration batch.
    fn run_batch_alone<M, St, L, X>(
        &mut self,
        slot: &mut Slot<B, In, Out, M>,
        i: usize,
        load: &mut L,
        stages: &mut X,
        state: &mut St,
    ) -> Result<Alone, PipelineError>
    where
        M: Send,
        L: LoadFn<B, In, M>,
        X: StageFns<B, In, Out, M, St>,
    {
        let cpu0 = thread_cpu_ms();
        let host_t0 = self.host_t0;
        let loaded = load_batch(self.p, load, i, || host_t0.elapsed().as_secs_f64() * 1e3);
        let cpu = thread_cpu_ms() - cpu0;
        self.load_cpu_ms += cpu;
        let loaded = loaded?;
        let rows = loaded.batch.rows;
        self.submit(slot, loaded, stages, state)?;
        let times = self.retire(slot, stages, state)?;
        Ok(Alone { times, cpu, rows })
    }

    /// The buffered patterns' first batches, each alone, for the report's uncontended stage
    /// costs. Returns the first batch not run.
    fn calibrate<M, St, L, X>(
        &mut self,
        slots: &mut [Slot<B, In, Out, M>],
        load: &mut L,
        stages: &mut X,
        state: &mut St,
    ) -> Result<usize, PipelineError>
    where
        M: Send,
        L: LoadFn<B, In, M>,
        X: StageFns<B, In, Out, M, St>,
    {
        let k = self.p.calibration.min(self.p.batches);
        // Every calibration batch runs in slot 0: the first pays for the slot's first touch
        // (fresh device memory can be mapped lazily, on the CPU backend by the page), the
        // next ones run warm, and the calibration keeps each stage's least cost.
        for i in 0..k {
            let a = self.run_batch_alone(&mut slots[0], i, load, stages, state)?;
            self.calibration.add(a.rows, &a.times, a.cpu);
        }
        Ok(k)
    }

    /// Batches `first..` with the loader on its own thread, up to `depth` in flight.
    fn overlapped<M, St, L, X>(
        &mut self,
        first: usize,
        slots: &mut [Slot<B, In, Out, M>],
        load: &mut L,
        stages: &mut X,
        state: &mut St,
    ) -> Result<(), PipelineError>
    where
        M: Send,
        L: LoadFn<B, In, M>,
        X: StageFns<B, In, Out, M, St>,
    {
        let p = self.p;
        if first >= p.batches {
            return Ok(());
        }
        let stop = AtomicBool::new(false);
        let (tx, rx) = sync_channel::<LoaderMsg<B, In, M>>(slots.len());
        let host_t0 = self.host_t0;
        std::thread::scope(|scope| {
            let loader = scope.spawn(|| loader_loop(p, first, &stop, host_t0, tx, load));
            let outcome = self.run_buffered(first, &rx, slots, stages, state);
            stop.store(true, Ordering::Relaxed);
            drop(rx); // a loader blocked on a full channel wakes and ends
            match loader.join() {
                Ok(cpu_ms) => self.load_cpu_ms += cpu_ms,
                Err(_) => {
                    return outcome.and(Err(PipelineError::Config(
                        "the loader thread panicked".into(),
                    )));
                }
            }
            outcome
        })
    }

    /// The buffered main loop: take batches from the loader in order, submit each into its
    /// slot, then retire the batch that used the slot before (the streams already order the
    /// slot's reuse); at the end, retire the rest in order.
    fn run_buffered<M, St, X>(
        &mut self,
        first: usize,
        rx: &Receiver<LoaderMsg<B, In, M>>,
        slots: &mut [Slot<B, In, Out, M>],
        stages: &mut X,
        state: &mut St,
    ) -> Result<(), PipelineError>
    where
        X: StageFns<B, In, Out, M, St>,
    {
        let n = slots.len();
        let mut failure = None;
        // The oldest batch not yet delivered; it is handed to the sink as soon as its
        // download is done (checked without blocking after each submit), or when its slot
        // is needed again, whichever comes first.
        let mut next = first;
        for i in first..self.p.batches {
            let msg = rx.recv().unwrap_or_else(|_| {
                Err(PipelineError::Config(
                    "the loader stopped without saying why".into(),
                ))
            });
            let slot = i % n;
            let step = msg.and_then(|loaded| {
                // Submit first, then retire the batch that used the slot before: the device
                // orders the slot's reuse by events, so the streams get this batch's work
                // without waiting for the host to wake up and deliver the older one.
                let older = slots[slot].inflight.take();
                let submitted = self.submit(&mut slots[slot], loaded, stages, state);
                if let Some(f) = older {
                    // Delivered whatever became of this batch: it comes first.
                    self.retire_batch(f, stages, state)?;
                    next += 1;
                }
                submitted?;
                while next <= i {
                    let oldest = &slots[next % n];
                    let ready = match &oldest.inflight {
                        Some(f) if f.batch.index == next => Out::is_ready(&f.down),
                        _ => false,
                    };
                    if !ready {
                        break;
                    }
                    self.retire(&mut slots[next % n], stages, state)?;
                    next += 1;
                }
                Ok(())
            });
            if let Err(e) = step {
                failure = Some(e);
                break;
            }
        }
        // Retire what is still in flight, oldest first. After a failure only the batches
        // before the failing one are delivered; a later failure among them is the one
        // reported (it is the earliest).
        let mut order: Vec<usize> = (0..n).filter(|&k| slots[k].inflight.is_some()).collect();
        order.sort_by_key(|&k| {
            slots[k]
                .inflight
                .as_ref()
                .map_or(usize::MAX, |f| f.batch.index)
        });
        for k in order {
            let batch = slots[k]
                .inflight
                .as_ref()
                .map_or(usize::MAX, |f| f.batch.index);
            if failure
                .as_ref()
                .and_then(PipelineError::batch)
                .is_some_and(|b| batch >= b)
            {
                break;
            }
            if let Err(e) = self.retire(&mut slots[k], stages, state) {
                failure = Some(e);
                break;
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Step 2: enqueues upload, compute and download of one loaded batch into `slot`.
    fn submit<M, St, X>(
        &mut self,
        slot: &mut Slot<B, In, Out, M>,
        loaded: Loaded<B, In, M>,
        stages: &mut X,
        state: &mut St,
    ) -> Result<(), PipelineError>
    where
        X: StageFns<B, In, Out, M, St>,
    {
        let Loaded {
            batch,
            staging,
            start_ms,
            end_ms,
        } = loaded;
        let lane = batch.index % self.streams.computes.len();
        let up = self.enqueue_upload(slot, batch.index, staging)?;
        let computed = self.enqueue_compute(slot, lane, &batch, &up.end, stages, state)?;
        let down = self.enqueue_download(slot, &batch, &computed.end)?;
        slot.compute_done = Some(computed.end.clone());
        slot.download_done = Some(down.end.clone());
        self.rows += batch.rows;
        self.units += batch.rows.max(1);
        slot.inflight = Some(InFlight {
            batch,
            up: up.copies,
            down: down.copies,
            load: (start_ms, end_ms),
            events: [
                up.start,
                up.end,
                computed.start,
                computed.end,
                down.start,
                down.end,
            ],
            enqueue: computed.host,
            compute_lane: lane,
        });
        Progress::bump(&self.p.progress.0.submitted);
        Ok(())
    }

    /// Staging into the first rows of the slot's inputs, after the compute that last read
    /// them, between two events on the upload stream.
    fn enqueue_upload<M>(
        &self,
        slot: &mut Slot<B, In, Out, M>,
        i: usize,
        staging: In::Staging,
    ) -> Result<Timed<B, In::Copies>, PipelineError> {
        let upload = &self.streams.upload;
        let err = stage_error(i, Stage::Upload);
        // Waiting explicitly (rather than leaving it to gpukit-core's automatic ordering)
        // keeps the wait before the start event, so the events time the copy alone.
        if let Some(e) = &slot.compute_done {
            upload.wait(e).map_err(&err)?;
        }
        let u0 = upload.record_event().map_err(&err)?;
        let copies = In::upload(upload, staging, &mut slot.input).map_err(&err)?;
        let u1 = upload.record_event().map_err(&err)?;
        Ok(Timed {
            start: u0,
            copies,
            end: u1,
        })
    }

    /// The user's device work on views of the batch's rows, after its upload and after the
    /// download that last read the slot's outputs, between two events on its compute stream.
    fn enqueue_compute<M, St, X>(
        &self,
        slot: &mut Slot<B, In, Out, M>,
        lane: usize,
        batch: &Batch<M>,
        uploaded: &Event<B>,
        stages: &mut X,
        state: &mut St,
    ) -> Result<Computed<B>, PipelineError>
    where
        X: StageFns<B, In, Out, M, St>,
    {
        let (p, i) = (self.p, batch.index);
        let cs = &self.streams.computes[lane];
        let err = stage_error(i, Stage::Compute);
        cs.wait(uploaded).map_err(&err)?;
        if let Some(e) = &slot.download_done {
            cs.wait(e).map_err(&err)?;
        }
        let c0 = cs.record_event().map_err(&err)?;
        let inputs = In::views(&slot.input, &p.in_widths, batch.rows).map_err(&err)?;
        let mut outputs =
            Out::views_mut(&mut slot.output, &p.out_widths, batch.rows).map_err(&err)?;
        let host_start = self.host_ms();
        guarded(&self.p.ctx, i, Stage::Compute, "compute function", || {
            stages
                .compute(state, cs, batch, &inputs, &mut outputs)
                .map_err(&err)
        })?;
        let host = (host_start, self.host_ms());
        let c1 = cs.record_event().map_err(&err)?;
        Ok(Computed {
            start: c0,
            end: c1,
            host,
        })
    }

    /// The first rows of the slot's outputs into pinned buffers (allocated at `max_rows`, so
    /// every batch reuses the pool's size class), after the compute, between two events on
    /// the download stream.
    fn enqueue_download<M>(
        &self,
        slot: &Slot<B, In, Out, M>,
        batch: &Batch<M>,
        computed: &Event<B>,
    ) -> Result<Timed<B, Out::Copies>, PipelineError> {
        let p = self.p;
        let download = &self.streams.download;
        let err = stage_error(batch.index, Stage::Download);
        download.wait(computed).map_err(&err)?;
        let d0 = download.record_event().map_err(&err)?;
        let mut host = Out::alloc_staging(&p.ctx, &p.out_widths, p.max_rows, HostUse::Download)
            .map_err(&err)?;
        Out::truncate(&mut host, &p.out_widths, batch.rows);
        let copies = Out::download(download, &slot.output, host).map_err(&err)?;
        let d1 = download.record_event().map_err(&err)?;
        Ok(Timed {
            start: d0,
            copies,
            end: d1,
        })
    }

    /// Step 3: waits for the batch in `slot`, records its spans and hands it to the sink.
    /// Returns its costs (see [`Run::record_spans`]).
    fn retire<M, St, X>(
        &mut self,
        slot: &mut Slot<B, In, Out, M>,
        stages: &mut X,
        state: &mut St,
    ) -> Result<StageTimes, PipelineError>
    where
        X: StageFns<B, In, Out, M, St>,
    {
        match slot.inflight.take() {
            Some(f) => self.retire_batch(f, stages, state),
            None => Ok(StageTimes::default()),
        }
    }

    /// [`Run::retire`] of a batch taken out of its slot.
    fn retire_batch<M, St, X>(
        &mut self,
        f: InFlight<B, In, Out, M>,
        stages: &mut X,
        state: &mut St,
    ) -> Result<StageTimes, PipelineError>
    where
        X: StageFns<B, In, Out, M, St>,
    {
        let outputs = self.wait_copies(f.batch.index, f.up, f.down)?;
        let mut times =
            self.record_spans(f.batch.index, f.load, &f.events, f.enqueue, f.compute_lane)?;
        times.deliver = self.deliver(f.batch, &outputs, stages, state)?;
        self.busy.add(&times);
        Ok(times)
    }

    /// Waits for the batch's copies: its staging buffers go back to the pool (for the
    /// loader), its outputs are in host memory.
    fn wait_copies(
        &self,
        i: usize,
        up: In::Copies,
        down: Out::Copies,
    ) -> Result<Out::Staging, PipelineError> {
        let staging = In::wait(up).map_err(stage_error(i, Stage::Upload))?;
        drop(staging);
        Out::wait(down).map_err(stage_error(i, Stage::Download))
    }

    /// The batch's load, upload, compute and download on the timeline. Returns their costs:
    /// the spans' lengths, except that compute counts only what the stream surely spent
    /// working. Its span also holds any wait for the compute function to enqueue the next
    /// op (a stream runs ahead of the host), which an overlapped schedule hides; those
    /// waits fit between the span's start and the end of the function's host window, so
    /// the span minus that stretch is a lower bound of the work. The function's host time
    /// is the batch's `enqueue` cost.
    fn record_spans(
        &mut self,
        i: usize,
        load: (f64, f64),
        events: &[Event<B>; 6],
        enqueue: (f64, f64),
        compute_lane: usize,
    ) -> Result<StageTimes, PipelineError> {
        let times = events
            .iter()
            .map(|e| self.t0.elapsed_ms(e))
            .collect::<gpukit_core::Result<Vec<f64>>>()
            .map_err(stage_error(i, Stage::Download))?;
        let sequential = self.p.pattern == Pattern::Sequential;
        let lane_of = |stage: Stage| -> Lane {
            match (sequential, stage) {
                (_, Stage::Load) => Lane::Loader,
                (true, _) => Lane::Stream(0),
                (false, Stage::Upload) => Lane::Upload,
                (false, Stage::Compute) => Lane::Compute(compute_lane),
                (false, _) => Lane::Download,
            }
        };
        let load_span = Span {
            lane: lane_of(Stage::Load),
            stage: Stage::Load,
            batch: i,
            start_ms: load.0,
            end_ms: load.1,
        };
        let mut t = StageTimes {
            load: load_span.ms(),
            ..StageTimes::default()
        };
        self.spans.push(load_span);
        for (k, stage) in [Stage::Upload, Stage::Compute, Stage::Download]
            .into_iter()
            .enumerate()
        {
            let span = Span {
                lane: lane_of(stage),
                stage,
                batch: i,
                start_ms: times[2 * k],
                end_ms: times[2 * k + 1].max(times[2 * k]),
            };
            match stage {
                Stage::Upload => t.upload = span.ms(),
                Stage::Compute => {
                    let waited = (enqueue.1.min(span.end_ms) - span.start_ms).max(0.0);
                    t.compute = (span.ms() - waited).max(0.0);
                }
                _ => t.download = span.ms(),
            }
            self.spans.push(span);
        }
        t.enqueue = (enqueue.1 - enqueue.0).max(0.0);
        Ok(t)
    }

    /// The user's sink, with the batch and its outputs, timed on the host lane; returns its
    /// milliseconds.
    fn deliver<M, St, X>(
        &mut self,
        batch: Batch<M>,
        outputs: &Out::Staging,
        stages: &mut X,
        state: &mut St,
    ) -> Result<f64, PipelineError>
    where
        X: StageFns<B, In, Out, M, St>,
    {
        let i = batch.index;
        let t = self.host_ms();
        guarded(&self.p.ctx, i, Stage::Deliver, "sink", || {
            stages
                .sink(state, batch, Out::host(outputs))
                .map_err(user(i, Stage::Deliver))
        })?;
        let span = Span {
            lane: Lane::Host,
            stage: Stage::Deliver,
            batch: i,
            start_ms: t,
            end_ms: self.host_ms(),
        };
        self.spans.push(span);
        Progress::bump(&self.p.progress.0.delivered);
        Ok(span.ms())
    }

    fn lanes(&self) -> Vec<Lane> {
        if self.p.pattern == Pattern::Sequential {
            vec![Lane::Loader, Lane::Stream(0), Lane::Host]
        } else {
            let mut lanes = vec![Lane::Loader, Lane::Upload];
            lanes.extend((0..self.streams.computes.len()).map(Lane::Compute));
            lanes.extend([Lane::Download, Lane::Host]);
            lanes
        }
    }
}
