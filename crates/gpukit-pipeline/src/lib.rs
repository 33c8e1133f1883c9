//! # gpukit-pipeline
//!
//! Overlapped upload, compute and download on any backend of the `gpukit` workspace: the
//! pattern a PyTorch `DataLoader` with pinned memory and `non_blocking` copies gives, safe
//! and measured.
//!
//! A [`Pipeline`] moves batches through five stages: **load** (a user function fills pinned
//! staging buffers and says how many rows it filled), **upload**, **compute** (user device
//! work, enqueued on a stream), **download** and **deliver** (a user sink, in batch order).
//! A batch carries one typed array or a tuple of them ([`Arrays`]: `f32`, `(f32, u32)`...),
//! each with its own number of elements per row, holds any number of rows up to
//! `max_rows` (the last batch may be short), and may carry host data from the loader to the
//! sink ([`Batch::meta`]). Compute and the sink can share state ([`Pipeline::run_with`]);
//! an async program gives an async sink, awaited in its own task ([`Pipeline::run_async`]).
//!
//! In the [`Pattern::Sequential`] baseline one batch goes through every stage before the
//! next starts. In the buffered patterns ([`Pattern::Double`], [`Pattern::Triple`],
//! [`Pattern::Deep`]) up to `depth` batches are in flight:
//!
//! - a loader thread fills staging buffers taken from the context's pinned pool, at most
//!   `depth` batches ahead (a bounded channel: it blocks when the device falls behind);
//! - each batch has a slot of device buffers, allocated once at `max_rows`; upload, compute
//!   and download run on three streams (compute on `k` streams with
//!   [`Pipeline::compute_streams`]) ordered by events: compute waits for its upload,
//!   download for its compute, and a slot's next upload for the compute that last read it,
//!   its next compute for the download that last read its output;
//! - results reach the sink in order, on the calling thread, while later batches run;
//! - [`Pipeline::progress`] gives a handle another thread can poll without blocking.
//!
//! Every stage of every batch is timed (device stages by events, host stages by the host
//! clock) into a [`Report`]: per-stage totals, the max-stage bound ([`report::bound_ms`])
//! built from uncontended stage costs ([`BoundSource`]: the sequential run's own, a buffered
//! run's first batches run alone, or a sequential baseline given to [`Report::against`]),
//! overlap efficiency = bound / measured time, the speed-up over sequential, device idle
//! fraction, throughput, and the [`Timeline`], which exports as Chrome trace JSON (Perfetto
//! opens it) and as an SVG picture with one lane per stream.
//!
//! A failing stage (the loader, the compute function, a copy, the sink; a panic in a user
//! function included) stops the run: the loader is told to stop, queued work is waited for,
//! every batch before the failing one is delivered, every buffer goes back, and the
//! [`PipelineError`] names the batch and stage. A loader that reports more rows than
//! `max_rows` is [`PipelineError::TooManyRows`]. Besides [`Pipeline::run`] and
//! [`Pipeline::run_with`], [`Pipeline::run_iter`] takes batches from an iterator of owned
//! vectors. Staging memory for uploads is write-combined on CUDA: fast to upload from, slow
//! for the host to read; a loader that reads back what it wrote (checksums, parsing in place)
//! sets [`Pipeline::loader_reads_back`] to stage through plainly pinned memory instead.
//!
//! ## What bounds the CPU backend's figures
//!
//! On the CPU backend, upload and download are `memcpy`s on worker threads and compute runs
//! on the same cores, so on a small machine a pipeline is bound by the cores as much as by
//! any stage (with two cores, compute and both copies of each batch share them), and a batch
//! whose buffers, times the pattern's depth, no longer fit the last-level cache copies at
//! one core's memory bandwidth; small batches add the hand-off between threads. The report's
//! bound counts all stages' CPU work over the cores for this reason. The `pipeline_bench`
//! program measures the machine's own bound in the same run (each stage alone, the copies as
//! plain `memcpy`s with the pattern's footprint, alone and overlapped, and all the work over
//! the cores) and reports each pattern as a fraction of it; the workspace's
//! `docs/BENCHMARKS.md` has the figures.
//!
//! The crate depends on gpukit-core only (the layering is `gpukit-core <- gpukit-pipeline`):
//! it runs on the CPU backend, the CUDA backend, or the facade's `AnyBackend`. `libc` gives
//! the loader's CPU time, which the CPU backend's bound needs (a loader waiting on I/O uses
//! no core).
//!
//! The engine is in `engine.rs`, named by the steps a batch takes (`load_batch`, in
//! `loader.rs` with the loader thread; `submit`: `enqueue_upload`, `enqueue_compute`,
//! `enqueue_download`; `retire`: `wait_copies`, `record_spans`, `deliver`); the user's stages
//! as the engine calls them in `stages.rs`; the configuration in `builder.rs`; what a batch carries in
//! `arrays.rs`; the report and its bound in `report.rs`; pictures in `timeline.rs`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod arrays;
mod asynchronous;
mod builder;
mod engine;
mod error;
mod loader;
mod pattern;
mod progress;
pub mod report;
mod stages;
mod timeline;

pub use arrays::{Arrays, Batch, Filled};
pub use builder::Pipeline;
pub use error::{BoxError, PipelineError, Stage};
pub use pattern::Pattern;
pub use progress::{Progress, ProgressSnapshot};
pub use report::{BoundSource, Report, Resources, StageTimes};
pub use timeline::{GroupTimeline, Lane, Span, Timeline};
