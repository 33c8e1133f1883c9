//! The pipeline engine: patterns, the loader thread, the slots of batches in flight, and the
//! in-order delivery.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Instant;

use gpukit_core::{
    Backend, Context, Element, Event, GpuArray, HostBuffer, HostUse, Pending, Stream,
};

use crate::error::{BoxError, PipelineError, Stage};
use crate::report::{self, Lane, Report, Span};

/// How batches move through the stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// The baseline: load, upload, compute, download and deliver one batch, then the next,
    /// all on one stream and the calling thread. Nothing overlaps.
    Sequential,
    /// Two batches in flight (`Deep(2)`).
    Double,
    /// Three batches in flight (`Deep(3)`): with balanced stages, upload, compute and
    /// download of three consecutive batches run at once.
    Triple,
    /// `n >= 1` batches in flight: a loader thread prefetches into pinned staging buffers,
    /// and upload, compute and download run on their own streams, ordered by events.
    Deep(usize),
}

impl Pattern {
    /// The patterns the examples and benchmarks compare.
    pub const STANDARD: [Pattern; 4] = [
        Pattern::Sequential,
        Pattern::Double,
        Pattern::Triple,
        Pattern::Deep(4),
    ];

    /// Batches in flight at once (1 for `Sequential`).
    pub fn depth(self) -> usize {
        match self {
            Pattern::Sequential => 1,
            Pattern::Double => 2,
            Pattern::Triple => 3,
            Pattern::Deep(n) => n,
        }
    }

    /// A short name: `sequential`, `double`, `triple`, `deep-4`.
    pub fn name(self) -> String {
        match self {
            Pattern::Sequential => "sequential".into(),
            Pattern::Double => "double".into(),
            Pattern::Triple => "triple".into(),
            Pattern::Deep(n) => format!("deep-{n}"),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Counters another thread can read while a pipeline runs.
#[derive(Debug, Default)]
struct Counters {
    total: AtomicUsize,
    loaded: AtomicUsize,
    submitted: AtomicUsize,
    delivered: AtomicUsize,
    finished: AtomicBool,
}

/// A handle on a pipeline's progress: clone it, give it to another thread, and read it at
/// any time without blocking the pipeline.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Counters>);

/// What a [`Progress`] handle read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgressSnapshot {
    /// Batches the run will process.
    pub total: usize,
    /// Batches the loader has filled.
    pub loaded: usize,
    /// Batches whose device work has been enqueued.
    pub submitted: usize,
    /// Batches handed to the sink.
    pub delivered: usize,
    /// Whether the run has ended (successfully or not).
    pub finished: bool,
}

impl Progress {
    /// The counters now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let c = &self.0;
        // `finished` first: once it reads true, the counts read after it are the run's final
        // ones. Then the counts from the last stage to the first, each an acquire of the
        // releasing bumps: a batch is bumped loaded, then submitted, then delivered, so the
        // snapshot never shows more delivered than submitted or more submitted than loaded.
        let finished = c.finished.load(Ordering::Acquire);
        let delivered = c.delivered.load(Ordering::Acquire);
        let submitted = c.submitted.load(Ordering::Acquire);
        let loaded = c.loaded.load(Ordering::Acquire);
        let total = c.total.load(Ordering::Acquire);
        ProgressSnapshot {
            total,
            loaded,
            submitted,
            delivered,
            finished,
        }
    }

    fn bump(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Release);
    }
}

/// A pipeline over a context: how many batches, how large, in which pattern.
///
/// ```
/// use gpukit::{Pattern, Pipeline};
///
/// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
/// let mut out = Vec::new();
/// let report = Pipeline::new(&ctx, Pattern::Triple)
///     .batches(8)
///     .input_len(1024)
///     .output_len(1024)
///     .run(
///         |i, buf: &mut [f32]| { buf.fill(i as f32); Ok(()) },       // load (loader thread)
///         |s, _i, x, y| s.add(x, x, y),                              // compute (enqueued)
///         |i, y: &[f32]| { out.push((i, y[0])); Ok(()) },            // deliver, in order
///     )?;
/// assert_eq!(out, (0..8).map(|i| (i, 2.0 * i as f32)).collect::<Vec<_>>());
/// println!("{:.2} of the max-stage bound", report.efficiency);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pipeline<B: Backend> {
    ctx: Context<B>,
    pattern: Pattern,
    batches: usize,
    input_len: usize,
    output_len: usize,
    compute_streams: usize,
    progress: Progress,
}

impl<B: Backend> std::fmt::Debug for Pipeline<B> {
    /// The context, the pattern, the sizes, and a snapshot of the progress of the current
    /// (or last) run; never blocks, also while the pipeline runs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("context", &self.ctx.id())
            .field("backend", &self.ctx.backend_name())
            .field("pattern", &format_args!("{}", self.pattern))
            .field("batches", &self.batches)
            .field("input_len", &self.input_len)
            .field("output_len", &self.output_len)
            .field("compute_streams", &self.compute_streams)
            .field("progress", &self.progress.snapshot())
            .finish()
    }
}

/// A loaded batch on its way from the loader thread.
struct Loaded<In: Element, B: Backend> {
    batch: usize,
    buf: HostBuffer<In, B>,
    /// Host milliseconds since the run's start: load start, load end, and CPU time used.
    start_ms: f64,
    end_ms: f64,
}

/// What the loader sends: a batch, or the error that stopped it.
type LoaderMsg<In, B> = Result<Loaded<In, B>, PipelineError>;

/// One batch whose device work is queued.
struct InFlight<In: Element, Out: Element, B: Backend> {
    batch: usize,
    up: Pending<HostBuffer<In, B>, B>,
    down: Pending<HostBuffer<Out, B>, B>,
    load: (f64, f64),
    events: [Event<B>; 6],
    compute_lane: usize,
}

/// The device buffers of one slot and the events that fence their reuse.
struct Slot<In: Element, Out: Element, B: Backend> {
    input: GpuArray<In, B>,
    output: GpuArray<Out, B>,
    /// End of the last compute that read `input` (the next upload into it waits).
    compute_done: Option<Event<B>>,
    /// End of the last download that read `output` (the next compute into it waits).
    download_done: Option<Event<B>>,
    inflight: Option<InFlight<In, Out, B>>,
}

/// The streams of a run.
struct Streams<B: Backend> {
    upload: Stream<B>,
    computes: Vec<Stream<B>>,
    download: Stream<B>,
}

impl<B: Backend> Pipeline<B> {
    /// A pipeline on `ctx` in `pattern`; by default 1 batch of 0 elements each way and one
    /// compute stream. Set the sizes before running.
    pub fn new(ctx: &Context<B>, pattern: Pattern) -> Self {
        Pipeline {
            ctx: ctx.clone(),
            pattern,
            batches: 1,
            input_len: 0,
            output_len: 0,
            compute_streams: 1,
            progress: Progress::default(),
        }
    }

    /// Number of batches.
    pub fn batches(mut self, n: usize) -> Self {
        self.batches = n;
        self
    }

    /// Elements of input per batch.
    pub fn input_len(mut self, n: usize) -> Self {
        self.input_len = n;
        self
    }

    /// Elements of output per batch.
    pub fn output_len(mut self, n: usize) -> Self {
        self.output_len = n;
        self
    }

    /// Spreads the compute stage over `k >= 1` streams, batch `i` on stream `i % k` (fan-out
    /// of independent batches; useful when one batch's kernels do not fill the device).
    pub fn compute_streams(mut self, k: usize) -> Self {
        self.compute_streams = k;
        self
    }

    /// The pattern.
    pub fn pattern(&self) -> Pattern {
        self.pattern
    }

    /// A handle to read the progress of this pipeline's runs from another thread.
    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    /// Runs the pipeline.
    ///
    /// - `load(i, buf)` fills batch `i`'s pinned staging buffer (`input_len` elements). In
    ///   the buffered patterns it runs on a loader thread, up to `depth` batches ahead of the
    ///   device (backpressure: it blocks when they are all taken).
    /// - `compute(stream, i, input, output)` enqueues batch `i`'s device work on `stream`
    ///   (built-in ops, kernels); it must not block on the device.
    /// - `sink(i, out)` receives batch `i`'s output (`output_len` elements), in order of `i`,
    ///   on the calling thread.
    ///
    /// A failing stage stops the run: the loader stops, queued work finishes, every batch
    /// before the failing one is delivered, every buffer is released, and the error names
    /// the batch and stage.
    pub fn run<In, Out, L, C, S>(
        &self,
        load: L,
        compute: C,
        sink: S,
    ) -> Result<Report, PipelineError>
    where
        In: Element,
        Out: Element,
        L: FnMut(usize, &mut [In]) -> Result<(), BoxError> + Send,
        C: FnMut(
            &Stream<B>,
            usize,
            &GpuArray<In, B>,
            &mut GpuArray<Out, B>,
        ) -> gpukit_core::Result<()>,
        S: FnMut(usize, &[Out]) -> Result<(), BoxError>,
    {
        if let Pattern::Deep(0) = self.pattern {
            return Err(PipelineError::Config(
                "Deep(0): a pipeline needs at least one batch in flight".into(),
            ));
        }
        if self.compute_streams == 0 {
            return Err(PipelineError::Config(
                "compute_streams(0): at least one compute stream is needed".into(),
            ));
        }
        let c = &self.progress.0;
        c.total.store(self.batches, Ordering::Relaxed);
        for counter in [&c.loaded, &c.submitted, &c.delivered] {
            counter.store(0, Ordering::Relaxed);
        }
        c.finished.store(false, Ordering::Release);
        let result = Run::new(self).and_then(|mut run| run.go(load, compute, sink));
        c.finished.store(true, Ordering::Release);
        result
    }

    /// [`Pipeline::run`] with batches from an iterator (run on the loader thread) instead of
    /// a load function: each item must have `input_len` elements.
    pub fn run_iter<In, Out, I, C, S>(
        &self,
        iter: I,
        compute: C,
        sink: S,
    ) -> Result<Report, PipelineError>
    where
        In: Element,
        Out: Element,
        I: IntoIterator<Item = Vec<In>>,
        I::IntoIter: Send,
        C: FnMut(
            &Stream<B>,
            usize,
            &GpuArray<In, B>,
            &mut GpuArray<Out, B>,
        ) -> gpukit_core::Result<()>,
        S: FnMut(usize, &[Out]) -> Result<(), BoxError>,
    {
        let mut items = iter.into_iter();
        let load = move |i: usize, buf: &mut [In]| -> Result<(), BoxError> {
            let item = items
                .next()
                .ok_or_else(|| format!("the iterator ended before batch {i}"))?;
            if item.len() != buf.len() {
                return Err(format!(
                    "batch {i} has {} elements, the pipeline's input_len is {}",
                    item.len(),
                    buf.len()
                )
                .into());
            }
            buf.copy_from_slice(&item);
            Ok(())
        };
        self.run(load, compute, sink)
    }
}

/// The compute stage's function (the bound of [`Pipeline::run`]'s `compute`), named once
/// for the engine's internal functions.
trait ComputeFn<B: Backend, In: Element, Out: Element>:
    FnMut(&Stream<B>, usize, &GpuArray<In, B>, &mut GpuArray<Out, B>) -> gpukit_core::Result<()>
{
}

impl<B, In, Out, F> ComputeFn<B, In, Out> for F
where
    B: Backend,
    In: Element,
    Out: Element,
    F: FnMut(&Stream<B>, usize, &GpuArray<In, B>, &mut GpuArray<Out, B>) -> gpukit_core::Result<()>,
{
}

/// The sink's function (the bound of [`Pipeline::run`]'s `sink`).
trait SinkFn<Out>: FnMut(usize, &[Out]) -> Result<(), BoxError> {}

impl<Out, F: FnMut(usize, &[Out]) -> Result<(), BoxError>> SinkFn<Out> for F {}

/// The state of one run.
struct Run<'p, B: Backend> {
    p: &'p Pipeline<B>,
    streams: Streams<B>,
    /// The start event (on the upload stream) and the host instant it completed.
    t0: Event<B>,
    host_t0: Instant,
    spans: Vec<Span>,
    load_cpu_ms: f64,
}

/// Wraps a device error with its batch and stage.
fn gpu(batch: usize, stage: Stage) -> impl Fn(gpukit_core::Error) -> PipelineError {
    move |source| PipelineError::Gpu {
        batch,
        stage,
        source,
    }
}

/// Milliseconds of this thread's CPU time.
fn thread_cpu_ms() -> f64 {
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

impl<'p, B: Backend> Run<'p, B> {
    fn new(p: &'p Pipeline<B>) -> Result<Self, PipelineError> {
        let setup = gpu(0, Stage::Upload);
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
        ctx.sync().map_err(&setup)?;
        let t0 = upload.record_event().map_err(&setup)?;
        t0.sync().map_err(&setup)?;
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

    fn go<In, Out, L, C, S>(
        &mut self,
        mut load: L,
        mut compute: C,
        mut sink: S,
    ) -> Result<Report, PipelineError>
    where
        In: Element,
        Out: Element,
        L: FnMut(usize, &mut [In]) -> Result<(), BoxError> + Send,
        C: ComputeFn<B, In, Out>,
        S: SinkFn<Out>,
    {
        let p = self.p;
        let depth = p.pattern.depth();
        let mut slots = Vec::with_capacity(depth);
        for _ in 0..depth.min(p.batches.max(1)) {
            slots.push(Slot {
                input: p
                    .ctx
                    .alloc_zeros::<In>(p.input_len)
                    .map_err(gpu(0, Stage::Upload))?,
                output: p
                    .ctx
                    .alloc_zeros::<Out>(p.output_len)
                    .map_err(gpu(0, Stage::Compute))?,
                compute_done: None,
                download_done: None,
                inflight: None,
            });
        }
        // The run's clock starts now: setting up the slots is not part of the pipeline.
        self.restart_clock().map_err(gpu(0, Stage::Upload))?;
        let counters = &p.progress.0;
        let result = if p.pattern == Pattern::Sequential {
            let mut outcome = Ok(());
            for i in 0..p.batches {
                let start_ms = self.host_ms();
                let cpu0 = thread_cpu_ms();
                let loaded = p
                    .ctx
                    .alloc_host::<In>(p.input_len, HostUse::Upload)
                    .map_err(gpu(i, Stage::Load))
                    .and_then(|mut buf| {
                        call_load(&mut load, i, &mut buf)?;
                        Ok(buf)
                    });
                self.load_cpu_ms += thread_cpu_ms() - cpu0;
                let step = loaded.and_then(|buf| {
                    Progress::bump(&counters.loaded);
                    let l = Loaded {
                        batch: i,
                        buf,
                        start_ms,
                        end_ms: self.host_ms(),
                    };
                    self.submit(&mut slots[0], l, &mut compute)?;
                    self.finish(&mut slots[0], &mut sink)
                });
                if let Err(e) = step {
                    outcome = Err(e);
                    break;
                }
            }
            outcome
        } else {
            let stop = AtomicBool::new(false);
            let (tx, rx) = sync_channel::<LoaderMsg<In, B>>(depth);
            let host_t0 = self.host_t0;
            std::thread::scope(|scope| {
                let loader = scope.spawn(|| loader_loop(p, &stop, host_t0, tx, &mut load));
                let outcome = self.pump(&rx, &mut slots, &mut compute, &mut sink);
                stop.store(true, Ordering::Relaxed);
                drop(rx); // a loader blocked on a full channel wakes and ends
                match loader.join() {
                    Ok(cpu_ms) => self.load_cpu_ms = cpu_ms,
                    Err(_) => {
                        return outcome.and(Err(PipelineError::Config(
                            "the loader thread panicked".into(),
                        )));
                    }
                }
                outcome
            })
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
        synced.map_err(gpu(p.batches.saturating_sub(1), Stage::Download))?;
        let wall_ms = self.host_ms();
        Ok(report::build(
            &p.ctx,
            p.pattern,
            p.batches,
            p.input_len * std::mem::size_of::<In>(),
            p.output_len * std::mem::size_of::<Out>(),
            self.lanes(),
            std::mem::take(&mut self.spans),
            wall_ms,
            self.load_cpu_ms,
        ))
    }

    /// The buffered main loop: take batches from the loader in order, retire the batch that
    /// last used the slot, submit the new one; at the end, retire the rest in order.
    fn pump<In, Out, C, S>(
        &mut self,
        rx: &Receiver<LoaderMsg<In, B>>,
        slots: &mut [Slot<In, Out, B>],
        compute: &mut C,
        sink: &mut S,
    ) -> Result<(), PipelineError>
    where
        In: Element,
        Out: Element,
        C: ComputeFn<B, In, Out>,
        S: SinkFn<Out>,
    {
        let n = slots.len();
        let mut failure = None;
        // The oldest batch not yet delivered; it is handed to the sink as soon as its
        // download is done (checked without blocking after each submit), or when its slot
        // is needed again, whichever comes first.
        let mut next = 0usize;
        for i in 0..self.p.batches {
            let msg = rx.recv().unwrap_or_else(|_| {
                Err(PipelineError::Config(
                    "the loader stopped without saying why".into(),
                ))
            });
            let slot = i % n;
            let step = msg.and_then(|loaded| {
                if slots[slot].inflight.is_some() {
                    self.finish(&mut slots[slot], sink)?;
                    next += 1;
                }
                self.submit(&mut slots[slot], loaded, compute)?;
                while next <= i {
                    let oldest = &slots[next % n];
                    let ready = match &oldest.inflight {
                        Some(f) if f.batch == next => f.down.is_ready().unwrap_or(true),
                        _ => false,
                    };
                    if !ready {
                        break;
                    }
                    self.finish(&mut slots[next % n], sink)?;
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
        order.sort_by_key(|&k| slots[k].inflight.as_ref().map_or(usize::MAX, |f| f.batch));
        for k in order {
            let batch = slots[k].inflight.as_ref().map_or(usize::MAX, |f| f.batch);
            if failure
                .as_ref()
                .and_then(PipelineError::batch)
                .is_some_and(|b| batch >= b)
            {
                break;
            }
            if let Err(e) = self.finish(&mut slots[k], sink) {
                failure = Some(e);
                break;
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Enqueues upload, compute and download of one loaded batch into `slot`.
    fn submit<In, Out, C>(
        &mut self,
        slot: &mut Slot<In, Out, B>,
        loaded: Loaded<In, B>,
        compute: &mut C,
    ) -> Result<(), PipelineError>
    where
        In: Element,
        Out: Element,
        C: ComputeFn<B, In, Out>,
    {
        let i = loaded.batch;
        let lane = i % self.streams.computes.len();
        let Streams {
            upload,
            computes,
            download,
        } = &self.streams;
        let cs = &computes[lane];
        let up_err = gpu(i, Stage::Upload);
        // The copy into `input` waits for the compute that last read it; waiting explicitly
        // (rather than leaving it to gpukit-core's automatic ordering) keeps the wait before
        // the start event, so the events time the copy alone.
        if let Some(e) = &slot.compute_done {
            upload.wait(e).map_err(&up_err)?;
        }
        let u0 = upload.record_event().map_err(&up_err)?;
        let up = upload
            .upload(loaded.buf, &mut slot.input)
            .map_err(|r| up_err(r.error))?;
        let u1 = upload.record_event().map_err(&up_err)?;

        let c_err = gpu(i, Stage::Compute);
        cs.wait(&u1).map_err(&c_err)?;
        if let Some(e) = &slot.download_done {
            cs.wait(e).map_err(&c_err)?;
        }
        let c0 = cs.record_event().map_err(&c_err)?;
        compute(cs, i, &slot.input, &mut slot.output).map_err(&c_err)?;
        let c1 = cs.record_event().map_err(&c_err)?;

        let d_err = gpu(i, Stage::Download);
        download.wait(&c1).map_err(&d_err)?;
        let d0 = download.record_event().map_err(&d_err)?;
        let host_out = self
            .p
            .ctx
            .alloc_host::<Out>(self.p.output_len, HostUse::Download)
            .map_err(&d_err)?;
        let down = download
            .download(&slot.output, host_out)
            .map_err(|r| d_err(r.error))?;
        let d1 = download.record_event().map_err(&d_err)?;

        slot.compute_done = Some(c1.clone());
        slot.download_done = Some(d1.clone());
        slot.inflight = Some(InFlight {
            batch: i,
            up,
            down,
            load: (loaded.start_ms, loaded.end_ms),
            events: [u0, u1, c0, c1, d0, d1],
            compute_lane: lane,
        });
        Progress::bump(&self.p.progress.0.submitted);
        Ok(())
    }

    /// Waits for the batch in `slot`, records its spans and hands its output to the sink.
    fn finish<In, Out, S>(
        &mut self,
        slot: &mut Slot<In, Out, B>,
        sink: &mut S,
    ) -> Result<(), PipelineError>
    where
        In: Element,
        Out: Element,
        S: SinkFn<Out>,
    {
        let Some(f) = slot.inflight.take() else {
            return Ok(());
        };
        let i = f.batch;
        let staging = f.up.wait().map_err(|r| gpu(i, Stage::Upload)(r.error))?;
        drop(staging); // back to the context's pinned pool, for the loader
        let out = f
            .down
            .wait()
            .map_err(|r| gpu(i, Stage::Download)(r.error))?;
        let ms = |e: &Event<B>| self.t0.elapsed_ms(e);
        let times = f
            .events
            .iter()
            .map(ms)
            .collect::<gpukit_core::Result<Vec<f64>>>()
            .map_err(gpu(i, Stage::Download))?;
        let sequential = self.p.pattern == Pattern::Sequential;
        let lane_of = |stage: Stage| -> Lane {
            match (sequential, stage) {
                (_, Stage::Load) => Lane::Loader,
                (true, _) => Lane::Stream(0),
                (false, Stage::Upload) => Lane::Upload,
                (false, Stage::Compute) => Lane::Compute(f.compute_lane),
                (false, _) => Lane::Download,
            }
        };
        self.spans.push(Span {
            lane: lane_of(Stage::Load),
            stage: Stage::Load,
            batch: i,
            start_ms: f.load.0,
            end_ms: f.load.1,
        });
        for (k, stage) in [Stage::Upload, Stage::Compute, Stage::Download]
            .into_iter()
            .enumerate()
        {
            self.spans.push(Span {
                lane: lane_of(stage),
                stage,
                batch: i,
                start_ms: times[2 * k],
                end_ms: times[2 * k + 1].max(times[2 * k]),
            });
        }
        let t = self.host_ms();
        sink(i, &out).map_err(|source| PipelineError::Stage {
            batch: i,
            stage: Stage::Deliver,
            source,
        })?;
        self.spans.push(Span {
            lane: Lane::Host,
            stage: Stage::Deliver,
            batch: i,
            start_ms: t,
            end_ms: self.host_ms(),
        });
        Progress::bump(&self.p.progress.0.delivered);
        Ok(())
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

/// Calls the user's load function for batch `i`. A panic in it becomes the batch's load
/// error (the loader thread must not take the run down, and the sequential pattern behaves
/// the same).
fn call_load<In, L>(load: &mut L, i: usize, buf: &mut [In]) -> Result<(), PipelineError>
where
    L: FnMut(usize, &mut [In]) -> Result<(), BoxError>,
{
    let stage = |source: BoxError| PipelineError::Stage {
        batch: i,
        stage: Stage::Load,
        source,
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(i, buf))) {
        Ok(r) => r.map_err(stage),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            Err(stage(
                format!("the load function panicked: {message}").into(),
            ))
        }
    }
}

/// The loader thread: fills staging buffers from the context's pinned pool and sends them in
/// batch order; blocks while `depth` are waiting (backpressure). Returns its CPU time in ms.
fn loader_loop<B, In, L>(
    p: &Pipeline<B>,
    stop: &AtomicBool,
    host_t0: Instant,
    tx: SyncSender<LoaderMsg<In, B>>,
    load: &mut L,
) -> f64
where
    B: Backend,
    In: Element,
    L: FnMut(usize, &mut [In]) -> Result<(), BoxError>,
{
    let cpu0 = thread_cpu_ms();
    let now = || host_t0.elapsed().as_secs_f64() * 1e3;
    for i in 0..p.batches {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let start_ms = now();
        let msg = p
            .ctx
            .alloc_host::<In>(p.input_len, HostUse::Upload)
            .map_err(gpu(i, Stage::Load))
            .and_then(|mut buf| {
                call_load(load, i, &mut buf)?;
                Ok(Loaded {
                    batch: i,
                    buf,
                    start_ms,
                    end_ms: now(),
                })
            });
        let failed = msg.is_err();
        if msg.is_ok() {
            Progress::bump(&p.progress.0.loaded);
        }
        if tx.send(msg).is_err() || failed {
            break;
        }
    }
    thread_cpu_ms() - cpu0
}
