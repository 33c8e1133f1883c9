//! # gpukit-pipeline
//!
//! Overlapped upload, compute and download on any backend of the `gpukit` workspace: the
//! pattern a PyTorch `DataLoader` with pinned memory and `non_blocking` copies gives, safe
//! and measured.
//!
//! A [`Pipeline`] moves fixed-size batches through five stages: **load** (a user function
//! fills a pinned staging buffer), **upload**, **compute** (user device work, enqueued on a
//! stream), **download** and **deliver** (a user sink, in batch order). In the
//! [`Pattern::Sequential`] baseline one batch goes through every stage before the next
//! starts. In the buffered patterns ([`Pattern::Double`], [`Pattern::Triple`],
//! [`Pattern::Deep`]) up to `depth` batches are in flight:
//!
//! - a loader thread fills staging buffers taken from the context's pinned pool, at most
//!   `depth` batches ahead (a bounded channel: it blocks when the device falls behind);
//! - each batch has a slot of device buffers; upload, compute and download run on three
//!   streams (compute on `k` streams with [`Pipeline::compute_streams`]) ordered by events:
//!   compute waits for its upload, download for its compute, and a slot's next upload for the
//!   compute that last read it, its next compute for the download that last read its output;
//! - results reach the sink in order, on the calling thread, while later batches run;
//! - [`Pipeline::progress`] gives a handle another thread can poll without blocking.
//!
//! Every stage of every batch is timed (device stages by events, host stages by the host
//! clock) into a [`Report`]: per-stage totals, the max-stage bound ([`report::bound_ms`]),
//! overlap efficiency = bound / measured time, device idle fraction, throughput, and the
//! [`Timeline`], which exports as Chrome trace JSON (Perfetto opens it) and as an SVG picture
//! with one lane per stream.
//!
//! A failing stage (the loader, the compute function, a copy, the sink) stops the run: the
//! loader is told to stop, queued work is waited for, every batch before the failing one is
//! delivered, every buffer goes back, and the [`PipelineError`] names the batch and stage.
//!
//! The crate depends on gpukit-core only (the layering is `gpukit-core <- gpukit-pipeline`): it runs on
//! the CPU backend, the CUDA backend, or the facade's `AnyBackend`. `libc` gives the loader's
//! CPU time, which the CPU backend's bound needs (a loader waiting on I/O uses no core).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod error;
mod pipeline;
pub mod report;

pub use error::{BoxError, PipelineError, Stage};
pub use pipeline::{Pattern, Pipeline, Progress, ProgressSnapshot};
pub use report::{Lane, Report, Span, StageTimes, Timeline};
