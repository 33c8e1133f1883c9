//! Progress counters another thread can read while a pipeline runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Counters another thread can read while a pipeline runs.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) total: AtomicUsize,
    pub(crate) loaded: AtomicUsize,
    pub(crate) submitted: AtomicUsize,
    pub(crate) delivered: AtomicUsize,
    pub(crate) finished: AtomicBool,
}

/// A handle on a pipeline's progress: clone it, give it to another thread, and read it at
/// any time without blocking the pipeline.
#[derive(Debug, Clone, Default)]
pub struct Progress(pub(crate) Arc<Counters>);

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

    pub(crate) fn bump(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Release);
    }
}

impl Progress {
    /// Zeroes the counters for a run of `total` batches.
    pub(crate) fn start(&self, total: usize) {
        let c = &self.0;
        c.total.store(total, Ordering::Relaxed);
        for counter in [&c.loaded, &c.submitted, &c.delivered] {
            counter.store(0, Ordering::Relaxed);
        }
        c.finished.store(false, Ordering::Release);
    }

    /// Marks the run ended (its counts are final).
    pub(crate) fn end(&self) {
        self.0.finished.store(true, Ordering::Release);
    }
}
