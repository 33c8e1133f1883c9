//! The pipeline's configuration (batches, rows, arrays, pattern, streams, calibration) and
//! its entry points, `run`, `run_with` and `run_iter`, which check it and start the engine.

use std::marker::PhantomData;

use gpukit_core::{Backend, Context, HostUse, Stream};

use crate::arrays::{Arrays, Batch, Filled};
use crate::engine;
use crate::error::{BoxError, PipelineError};
use crate::pattern::Pattern;
use crate::progress::Progress;
use crate::report::Report;
use crate::stages::{IterLoad, LoadFn, StageFns, Stateful, UserLoad};

/// A pipeline over a context: how many batches, how many rows at most, which typed arrays
/// go in and come out, and in which pattern.
///
/// Batches may be shorter than `max_rows` (a short last batch, shards of any size): the
/// loader says how many rows it filled and compute and the sink see exactly those. Staging
/// and device buffers are allocated once, at `max_rows`.
///
/// ```
/// use gpukit::{Pattern, Pipeline};
///
/// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
/// let mut out = Vec::new();
/// let report = Pipeline::new(&ctx, Pattern::Triple)
///     .batches(8)
///     .max_rows(1024)
///     .input::<f32>(1)                                  // one f32 per row
///     .output::<f32>(1)
///     .run(
///         |i, buf| { buf.fill(i as f32); Ok(buf.len()) },   // load: rows filled
///         |s, _b, x, y| s.add(x, x, y),                     // compute (enqueued)
///         |b, y| { out.push((b.index, y[0])); Ok(()) },     // deliver, in order
///     )?;
/// assert_eq!(out, (0..8).map(|i| (i, 2.0 * i as f32)).collect::<Vec<_>>());
/// println!("{}", report.summary());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Several arrays per batch, a short last batch and per-batch host data:
///
/// ```
/// use gpukit::{Pattern, Pipeline, Shape};
///
/// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
/// let rows_of = [4, 4, 3];                                  // the last batch is short
/// let mut seen = Vec::new();
/// Pipeline::new(&ctx, Pattern::Double)
///     .batches(3)
///     .max_rows(4)
///     .input::<(f32, u32)>([2, 1])                          // 2 features and a label a row
///     .output::<(f32, u32)>([1, 1])                         // a score and a label a row
///     .run(
///         |i, (x, labels)| {
///             let rows = rows_of[i];
///             x[..2 * rows].fill(i as f32);
///             labels[..rows].fill(i as u32);
///             Ok((rows, format!("shard-{i}")))              // rows, and host data
///         },
///         |s, b, (x, labels), (score, label_out)| {
///             s.row_sum(Shape::new(b.rows, 2), x, score)?;
///             s.copy(labels, label_out)
///         },
///         |b, (score, labels)| {
///             assert_eq!((score.len(), labels.len()), (b.rows, b.rows));
///             seen.push((b.meta, score[0], labels[0]));
///             Ok(())
///         },
///     )?;
/// assert_eq!(seen[2], ("shard-2".to_string(), 4.0, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pipeline<B: Backend, In = (), Out = ()> {
    pub(crate) ctx: Context<B>,
    pub(crate) pattern: Pattern,
    pub(crate) batches: usize,
    pub(crate) max_rows: usize,
    pub(crate) in_widths: Vec<usize>,
    pub(crate) out_widths: Vec<usize>,
    pub(crate) compute_streams: usize,
    pub(crate) calibration: usize,
    pub(crate) loader_reads_back: bool,
    pub(crate) progress: Progress,
    arrays: PhantomData<fn() -> (In, Out)>,
}

impl<B: Backend, In, Out> std::fmt::Debug for Pipeline<B, In, Out> {
    /// The context, the pattern, the sizes, and a snapshot of the progress of the current
    /// (or last) run; never blocks, also while the pipeline runs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("context", &self.ctx.id())
            .field("backend", &self.ctx.backend_name())
            .field("pattern", &format_args!("{}", self.pattern))
            .field("batches", &self.batches)
            .field("max_rows", &self.max_rows)
            .field("input", &std::any::type_name::<In>())
            .field("input_widths", &self.in_widths)
            .field("output", &std::any::type_name::<Out>())
            .field("output_widths", &self.out_widths)
            .field("compute_streams", &self.compute_streams)
            .field("calibration_batches", &self.calibration)
            .field("progress", &self.progress.snapshot())
            .finish()
    }
}

impl<B: Backend> Pipeline<B> {
    /// A pipeline on `ctx` in `pattern`, with no batches, rows or arrays yet: set them with
    /// [`batches`](Pipeline::batches), [`max_rows`](Pipeline::max_rows),
    /// [`input`](Pipeline::input) and [`output`](Pipeline::output) before running.
    pub fn new(ctx: &Context<B>, pattern: Pattern) -> Self {
        Pipeline {
            ctx: ctx.clone(),
            pattern,
            batches: 0,
            max_rows: 0,
            in_widths: Vec::new(),
            out_widths: Vec::new(),
            compute_streams: 1,
            calibration: 2,
            loader_reads_back: false,
            progress: Progress::default(),
            arrays: PhantomData,
        }
    }
}

impl<B: Backend, In, Out> Pipeline<B, In, Out> {
    /// Number of batches (at least 1).
    pub fn batches(mut self, n: usize) -> Self {
        self.batches = n;
        self
    }

    /// The most rows a batch may have (at least 1); buffers are allocated for this many.
    pub fn max_rows(mut self, n: usize) -> Self {
        self.max_rows = n;
        self
    }

    /// The input arrays: their element types (`f32`, or a tuple such as `(f32, u32)`) and
    /// elements per row of each (`1`, or `[64, 1]`).
    pub fn input<T: Arrays<B>>(self, widths: T::Widths) -> Pipeline<B, T, Out> {
        Pipeline {
            in_widths: T::width_list(&widths),
            ..self.retype()
        }
    }

    /// The output arrays, as for [`input`](Pipeline::input): every batch's outputs have as
    /// many rows as its inputs.
    pub fn output<T: Arrays<B>>(self, widths: T::Widths) -> Pipeline<B, In, T> {
        Pipeline {
            out_widths: T::width_list(&widths),
            ..self.retype()
        }
    }

    /// Spreads the compute stage over `k >= 1` streams, batch `i` on stream `i % k` (fan-out
    /// of independent batches; useful when one batch's kernels do not fill the device).
    pub fn compute_streams(mut self, k: usize) -> Self {
        self.compute_streams = k;
        self
    }

    /// How many batches a buffered run starts with one at a time (default 2, at least 1):
    /// their stage times, free of contention, give the report's bound
    /// ([`crate::BoundSource::Calibrated`]: each stage's least time per row among them, so a
    /// first batch slowed by warm-up, such as fresh pinned memory being faulted in, does not
    /// inflate it; with 1 it can). Those batches do not overlap, which costs a run of many
    /// batches little. The sequential pattern needs none.
    pub fn calibration_batches(mut self, k: usize) -> Self {
        self.calibration = k;
        self
    }

    /// Whether the load function reads back what it writes into its staging buffers
    /// (checksums, parsing in place). By default staging memory is write-combined where the
    /// backend has it (CUDA): fastest to upload from, but a host read of it is uncached and
    /// crawls. With `true` the staging buffers are plainly pinned: reads are fast, uploads
    /// may be a little slower.
    pub fn loader_reads_back(mut self, reads: bool) -> Self {
        self.loader_reads_back = reads;
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

    /// The same pipeline (its context, configuration and progress handle), for a run on
    /// another thread.
    pub(crate) fn same(&self) -> Self {
        Pipeline {
            ctx: self.ctx.clone(),
            pattern: self.pattern,
            batches: self.batches,
            max_rows: self.max_rows,
            in_widths: self.in_widths.clone(),
            out_widths: self.out_widths.clone(),
            compute_streams: self.compute_streams,
            calibration: self.calibration,
            loader_reads_back: self.loader_reads_back,
            progress: self.progress.clone(),
            arrays: PhantomData,
        }
    }

    /// The same configuration with other array types (their widths are set by the caller).
    fn retype<I, O>(self) -> Pipeline<B, I, O> {
        Pipeline {
            ctx: self.ctx,
            pattern: self.pattern,
            batches: self.batches,
            max_rows: self.max_rows,
            in_widths: self.in_widths,
            out_widths: self.out_widths,
            compute_streams: self.compute_streams,
            calibration: self.calibration,
            loader_reads_back: self.loader_reads_back,
            progress: self.progress,
            arrays: PhantomData,
        }
    }

    /// The staging buffers' use.
    pub(crate) fn staging_use(&self) -> HostUse {
        if self.loader_reads_back {
            HostUse::Both
        } else {
            HostUse::Upload
        }
    }

    /// Rejects a configuration that cannot run, before any work.
    fn check(&self, element_sizes: (&[usize], &[usize])) -> Result<(), PipelineError> {
        let config = |m: String| Err(PipelineError::Config(m));
        if let Pattern::Deep(0) = self.pattern {
            return config("Deep(0): a pipeline needs at least one batch in flight".into());
        }
        if self.compute_streams == 0 {
            return config("compute_streams(0): at least one compute stream is needed".into());
        }
        if self.batches == 0 {
            return config("batches(0): set how many batches to run (at least 1)".into());
        }
        if self.max_rows == 0 {
            return config(
                "max_rows is 0: set the most rows a batch may have with max_rows(n)".into(),
            );
        }
        if self.pattern != Pattern::Sequential && self.calibration == 0 {
            return config(
                "calibration_batches(0): a buffered run needs at least one batch run alone \
                 for an uncontended bound"
                    .into(),
            );
        }
        for (side, widths, sizes) in [
            ("input", &self.in_widths, element_sizes.0),
            ("output", &self.out_widths, element_sizes.1),
        ] {
            for (k, (&w, &size)) in widths.iter().zip(sizes).enumerate() {
                if w == 0 {
                    return config(format!(
                        "{side} array {k} has width 0: every array needs at least one element \
                         per row"
                    ));
                }
                let bytes = w
                    .checked_mul(self.max_rows)
                    .and_then(|n| n.checked_mul(size))
                    .filter(|&b| b <= isize::MAX as usize);
                if bytes.is_none() {
                    return config(format!(
                        "{side} array {k}: {w} elements a row times max_rows {} does not fit \
                         in memory",
                        self.max_rows
                    ));
                }
            }
        }
        Ok(())
    }
}

impl<B: Backend, In: Arrays<B>, Out: Arrays<B>> Pipeline<B, In, Out> {
    /// Runs the pipeline.
    ///
    /// - `load(i, staging)` fills batch `i`'s pinned staging arrays (`max_rows` rows each:
    ///   `&mut [T]`, or a tuple of them) and returns how many rows it filled, with the
    ///   batch's host data if it has any (`Ok(rows)` or `Ok((rows, meta))`, see
    ///   [`Filled`]). In the buffered patterns it runs on a loader thread, up to `depth`
    ///   batches ahead of the device (backpressure: it blocks when they are all taken).
    ///   Staging memory is write-combined on CUDA: write it, do not read it back, unless
    ///   [`loader_reads_back`](Pipeline::loader_reads_back) is set.
    /// - `compute(stream, batch, inputs, outputs)` enqueues the batch's device work on
    ///   `stream` (built-in ops, kernels) on views of exactly `batch.rows` rows; it must not
    ///   block on the device.
    /// - `sink(batch, outputs)` receives the batch (its index, rows and host data) and its
    ///   outputs, in order of the index, on the calling thread.
    ///
    /// A failing stage stops the run: the loader stops, queued work finishes, every batch
    /// before the failing one is delivered, every buffer is released, and the error names
    /// the batch and stage. A load function, compute function or sink that panics fails its
    /// stage the same way.
    pub fn run<M, F, L, C, S>(&self, load: L, compute: C, sink: S) -> Result<Report, PipelineError>
    where
        M: Send,
        F: Filled<M>,
        L: for<'a> FnMut(usize, In::HostMut<'a>) -> Result<F, BoxError> + Send,
        C: for<'a, 'b> FnMut(
            &Stream<B>,
            &Batch<M>,
            &In::Views<'a>,
            &mut Out::ViewsMut<'b>,
        ) -> gpukit_core::Result<()>,
        S: for<'a> FnMut(Batch<M>, Out::Host<'a>) -> Result<(), BoxError>,
    {
        // Every type named: newer compilers find the inference through the closure bounds
        // ambiguous (E0283).
        let stages = stateless::<B, In, Out, M, C, S>(compute, sink);
        self.start::<(), M, _, _>(UserLoad::new(load), stages, &mut ())
    }

    /// [`run`](Pipeline::run) with state that compute and the sink share: each gets `&mut`
    /// to it in turn (they run on the calling thread, one after the other), so the sink can
    /// read what compute updates, such as a model's parameters on the device, without a
    /// `static`, a `RefCell` or `unsafe`.
    ///
    /// The sink of batch `i` runs once `i`'s outputs are downloaded, and by then compute
    /// may have enqueued later batches (up to `depth - 1` in the buffered patterns): device
    /// state the sink reads is as the latest enqueued work leaves it, not as batch `i` did
    /// (gpukit orders the read after those writes, so it is never torn). To read the state
    /// as of batch `i`, let compute copy what the sink needs into an array of its own when it
    /// runs batch `i` (the digits example does this with each epoch's held-out predictions).
    /// The host side of the state is only ever touched by one stage at a time.
    ///
    /// ```
    /// use gpukit::{Pattern, Pipeline};
    ///
    /// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut total = ctx.alloc_zeros::<f32>(4)?;                 // state on the device
    /// let mut history = Vec::new();
    /// Pipeline::new(&ctx, Pattern::Double)
    ///     .batches(3)
    ///     .max_rows(4)
    ///     .input::<f32>(1)
    ///     .output::<f32>(1)
    ///     .run_with(
    ///         &mut total,
    ///         |_i, x| { x.fill(1.0); Ok(x.len()) },
    ///         |total, s, _b, x, y| { s.add_inplace(total, x)?; s.copy(x, y) },  // updates it
    ///         |total, b, _y| { history.push((b.index, total.download()?[0])); Ok(()) }, // reads it
    ///     )?;
    /// assert_eq!(history.last(), Some(&(2, 3.0)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_with<St, M, F, L, C, S>(
        &self,
        state: &mut St,
        load: L,
        compute: C,
        sink: S,
    ) -> Result<Report, PipelineError>
    where
        M: Send,
        F: Filled<M>,
        L: for<'a> FnMut(usize, In::HostMut<'a>) -> Result<F, BoxError> + Send,
        C: for<'a, 'b> FnMut(
            &mut St,
            &Stream<B>,
            &Batch<M>,
            &In::Views<'a>,
            &mut Out::ViewsMut<'b>,
        ) -> gpukit_core::Result<()>,
        S: for<'a> FnMut(&mut St, Batch<M>, Out::Host<'a>) -> Result<(), BoxError>,
    {
        let stages = Stateful { compute, sink };
        self.start(UserLoad::new(load), stages, state)
    }

    /// [`run`](Pipeline::run) with batches from an iterator (run on the loader thread)
    /// instead of a load function: each item is one batch as owned vectors (`Vec<T>`, or a
    /// tuple of them), whole rows of at most `max_rows`; the last may be short.
    pub fn run_iter<I, C, S>(&self, iter: I, compute: C, sink: S) -> Result<Report, PipelineError>
    where
        I: IntoIterator<Item = In::Owned>,
        I::IntoIter: Send,
        C: for<'a, 'b> FnMut(
            &Stream<B>,
            &Batch,
            &In::Views<'a>,
            &mut Out::ViewsMut<'b>,
        ) -> gpukit_core::Result<()>,
        S: for<'a> FnMut(Batch, Out::Host<'a>) -> Result<(), BoxError>,
    {
        let stages = stateless::<B, In, Out, (), C, S>(compute, sink);
        self.start::<(), (), _, _>(IterLoad::new(iter.into_iter()), stages, &mut ())
    }

    fn start<St, M, L, X>(
        &self,
        load: L,
        stages: X,
        state: &mut St,
    ) -> Result<Report, PipelineError>
    where
        M: Send,
        L: LoadFn<B, In, M>,
        X: StageFns<B, In, Out, M, St>,
    {
        let sizes = |dtypes: Vec<gpukit_core::DType>| -> Vec<usize> {
            dtypes.iter().map(|d| d.size()).collect()
        };
        self.check((&sizes(In::dtypes()), &sizes(Out::dtypes())))?;
        self.progress.start(self.batches);
        let result = engine::run(self, load, stages, state);
        self.progress.end();
        result
    }
}

/// Compute and sink closures without state, as the stateful pair over `()`.
#[allow(clippy::type_complexity)]
fn stateless<B, In, Out, M, C, S>(
    mut compute: C,
    mut sink: S,
) -> Stateful<
    impl for<'a, 'b> FnMut(
        &mut (),
        &Stream<B>,
        &Batch<M>,
        &In::Views<'a>,
        &mut Out::ViewsMut<'b>,
    ) -> gpukit_core::Result<()>,
    impl for<'a> FnMut(&mut (), Batch<M>, Out::Host<'a>) -> Result<(), BoxError>,
>
where
    B: Backend,
    In: Arrays<B>,
    Out: Arrays<B>,
    C: for<'a, 'b> FnMut(
        &Stream<B>,
        &Batch<M>,
        &In::Views<'a>,
        &mut Out::ViewsMut<'b>,
    ) -> gpukit_core::Result<()>,
    S: for<'a> FnMut(Batch<M>, Out::Host<'a>) -> Result<(), BoxError>,
{
    Stateful {
        compute: move |_: &mut (),
                       s: &Stream<B>,
                       b: &Batch<M>,
                       x: &In::Views<'_>,
                       y: &mut Out::ViewsMut<'_>| compute(s, b, x, y),
        sink: move |_: &mut (), b: Batch<M>, y: Out::Host<'_>| sink(b, y),
    }
}
