//! Planted ordering bugs, for tests only: switches that make the library drop one
//! dependency on purpose, so that a test can show that a schedule fuzzer (the CPU backend's
//! chaos schedule) finds the bug, and how often the default schedule does.
//!
//! Only the feature `plant-bugs` (which the workspace's test builds turn on) makes `plant`
//! exist; without it [`is_planted`] is a constant `false` and costs nothing. A switch is per
//! thread: it changes what the calling thread enqueues while the returned guard lives, and
//! nothing any other thread does, so a planted test can run beside other tests in one
//! process. A planted bug is a real data race on the memory involved (the memory stays
//! alive: only its contents are wrong); never turn one on outside a test.

/// A dependency the library can be told to drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// gpukit-core's tracker does not make a read wait for the last write of another stream
    /// (the `order_before` of a read skips the writer).
    ReadSkipsWriter,
    /// gpukit-core's `enqueue` takes its fast path (no lock, no ordering, the use recorded as
    /// a position alone) for every array, whoever used it last: the op skips the waits it
    /// needs, and its use is lost where the array's record does not name its stream.
    FastSkipsCheck,
    /// The backend accepts `stream_wait` and queues nothing: a stream overtakes the event it
    /// was told to wait for (a missing `cudaStreamWaitEvent`). The CPU backend honours it.
    StreamWaitDropped,
}

#[cfg(feature = "plant-bugs")]
thread_local! {
    static PLANTED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Whether `bug` is planted on the calling thread.
#[inline]
pub fn is_planted(bug: Bug) -> bool {
    #[cfg(feature = "plant-bugs")]
    return PLANTED.get() == Some(bug);
    #[cfg(not(feature = "plant-bugs"))]
    {
        let _ = bug;
        false
    }
}

/// Plants `bug` on the calling thread until the guard is dropped (feature `plant-bugs`).
#[cfg(feature = "plant-bugs")]
#[must_use = "the bug is planted only while the guard lives"]
pub fn plant(bug: Bug) -> Planted {
    Planted(PLANTED.replace(Some(bug)))
}

/// Keeps a bug planted ([`plant`]); dropping it restores what was planted before.
#[cfg(feature = "plant-bugs")]
#[derive(Debug)]
pub struct Planted(Option<Bug>);

#[cfg(feature = "plant-bugs")]
impl Drop for Planted {
    fn drop(&mut self) {
        PLANTED.set(self.0);
    }
}
