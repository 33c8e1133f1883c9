//! Streams (in-order queues of work) and events (positions in them).

use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::{Backend, RawPtr, RawStream};
use crate::context::Shared;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::graph::Capture;
use crate::kernel::{FaultRecord, MAX_KERNEL_ARGS};
use crate::lock;
use crate::track::{Access, SliceRef, Use, Uses};
use smallvec::SmallVec;

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct StreamInner<B: Backend> {
    raw: ManuallyDrop<B::Stream>,
    pub(crate) id: u64,
    priority: i32,
    pub(crate) shared: Arc<Shared<B>>,
    /// Set while [`Stream::capture`] records this stream's work.
    pub(crate) capturing: AtomicBool,
    /// What the capture in progress has recorded.
    pub(crate) capture: Mutex<Option<Capture<B>>>,
    /// Where the ops queued on it stand, and its recent ordering events: held while an op
    /// is queued, so that positions follow the queue's order.
    timeline: Mutex<Timeline<B>>,
    /// On a context's default stream: the stream that stands for other contexts' reads of
    /// this context's arrays ([`Stream::copy_peer`]). It holds only waits on their events,
    /// so that the arrays' trackers record uses of this context's streams alone.
    lane: Mutex<Option<Stream<B>>>,
    /// Where its checked launches report faults (allocated at the first).
    faults: OnceLock<Arc<FaultRecord<B>>>,
    /// The fault records of the graphs launched on it since its last sync, which its next
    /// sync reads.
    graph_faults: Mutex<Vec<Arc<FaultRecord<B>>>>,
}

/// How many ordering events a stream keeps for reuse.
const RECENT_EVENTS: usize = 32;

impl<B: Backend> StreamInner<B> {
    pub(crate) fn raw(&self) -> &B::Stream {
        &self.raw
    }

    /// The stream's timeline, locked.
    pub(crate) fn timeline(&self) -> std::sync::MutexGuard<'_, Timeline<B>> {
        lock(&self.timeline)
    }

    /// An ordering (not timing) event at the current end of the stream's queue, after the op
    /// at `tl.last`: once the timeline keeps [`RECENT_EVENTS`], the oldest of them that
    /// nobody else holds, recorded again (so that ops ordered across streams allocate no
    /// event handles in a steady loop), else a new one.
    pub(crate) fn ordering_event(&self, tl: &mut Timeline<B>) -> Result<Arc<B::Event>> {
        self.record_ordering(tl).map(Arc::clone)
    }

    /// [`StreamInner::ordering_event`], the timeline's own handle on it (cloned only by a
    /// caller that keeps it).
    fn record_ordering<'t>(&self, tl: &'t mut Timeline<B>) -> Result<&'t Arc<B::Event>> {
        let backend = &self.shared.backend;
        let mut event = None;
        if tl.recent.len() >= RECENT_EVENTS {
            // A count of one is the timeline's handle alone (no `Weak` is ever made of
            // these, and only a holder can clone one): a plain load per entry, where
            // `Arc::get_mut` is a locked instruction; the one found is taken with it below.
            let free = tl
                .recent
                .iter()
                .position(|(_, e)| Arc::strong_count(e) == 1);
            match free.and_then(|i| tl.recent.remove(i)) {
                Some((_, mut e)) => {
                    // Still unshared: the timeline's handle was the only one, and it is ours
                    // now (else its holders keep it, and a new one is recorded).
                    if let Some(inner) = Arc::get_mut(&mut e) {
                        backend.record_event_again(&self.raw, inner)?;
                        event = Some(e);
                    }
                }
                // All still some use's events: leave the oldest to its holders.
                None => drop(tl.recent.pop_front()),
            }
        }
        let event = match event {
            Some(e) => e,
            None => Arc::new(backend.record_event(&self.raw, false)?),
        };
        tl.recent.push_back((tl.last, event));
        let newest = tl.recent.len() - 1;
        Ok(&tl.recent[newest].1)
    }

    /// The earliest event the timeline keeps that was recorded after the op at `position`
    /// (it covers that op, and maybe later ones); `None` if it keeps none.
    pub(crate) fn recorded_after(&self, tl: &Timeline<B>, position: u64) -> Option<Arc<B::Event>> {
        let i = tl.recent.partition_point(|(p, _)| *p < position);
        tl.recent.get(i).map(|(_, e)| e.clone())
    }
}

/// The ops a stream has queued, counted, and the ordering events recorded after them.
///
/// A use of an array is recorded as its stream and its op's position; the event that
/// orders another stream after it is the earliest one recorded after that position
/// ([`StreamInner::recorded_after`]), or one recorded when the order is needed (which
/// follows every op queued until then). Every op takes its position under the timeline's
/// lock while it is queued, so positions follow the queue's order.
pub(crate) struct Timeline<B: Backend> {
    /// The position of the last op queued through [`Stream::enqueue_with`] (numbered from
    /// 1; 0 before the first).
    pub(crate) last: u64,
    /// Ordering events recorded lately, oldest first, each with the position of the last op
    /// queued before it (at most [`RECENT_EVENTS`]).
    recent: VecDeque<(u64, Arc<B::Event>)>,
}

impl<B: Backend> Drop for StreamInner<B> {
    fn drop(&mut self) {
        // SAFETY: `raw` is taken exactly once, here, and `self` is never used again.
        let raw = unsafe { ManuallyDrop::take(&mut self.raw) };
        if let Some(record) = self.faults.take() {
            let r = self
                .shared
                .faults
                .retire(&self.shared.backend, &raw, record);
            self.shared.defer("Stream drop", r);
        }
        let r = self.shared.backend.destroy_stream(raw);
        self.shared.defer("Stream drop", r);
    }
}

/// An in-order queue of work on a device.
///
/// Work on one stream runs in the order it was queued; work on different streams may
/// overlap. Every call returns once the work is queued. Arrays used from several streams
/// are ordered automatically: a stream that reads an array waits for its last writer, and a
/// stream that writes it waits for its readers and writer, whichever streams they ran on.
/// Cloning a stream gives another handle to the same queue.
///
/// # Methods
///
/// Every call that queues work is a method of `Stream`, and a [`Context`](crate::Context)
/// is its default stream (it dereferences to one), so `ctx.add(..)` and `stream.add(..)`
/// are the same method. They come in families, each defined in one file:
///
/// | family | methods | where |
/// |---|---|---|
/// | transfers | `upload`, `download`, `copy`, `peek`, `upload_blocking`, `download_blocking` | `transfer.rs` |
/// | ordering | `sync`, `query`, `record_event`, `wait`, `is_capturing` | `stream.rs` |
/// | async | `synchronize_async` (and `Event::wait_async`, `.await` on a [`Pending`](crate::Pending)) | `wait.rs` |
/// | between devices | `copy_peer` | `peer.rs` |
/// | fill, axpy, clamp, cast | `fill`, `axpy`, `scale`, `clamp`, `clamp_inplace`, `cast` | `ops/elementwise.rs` |
/// | element-wise table, generic | `unary`, `binary`, `binary_scalar`, `binary_row`, `binary_col` (each also `_inplace`), taking a [`UnaryOp`](crate::UnaryOp) or [`BinaryOp`](crate::BinaryOp) | `ops/elementwise.rs` |
/// | element-wise table, typed | one method per op and form, named in the op's table entry: `relu`/`relu_inplace`, ...; `add`, `add_inplace`, `add_scalar`, `add_row`, `add_col`, ... (`minimum`/`maximum` for `min`/`max`, whose names are the reductions') | generated by `optable/macros.rs` from the entries in `optable/mod.rs` |
/// | reductions | `sum`, `mean`, `min`, `max`, `argmin`, `argmax`, `dot` (to the host), `sum_into`, ..., `dot_into` (to a device array), `row_sum`, `row_mean`, `row_min`, `row_max`, `row_argmin`, `row_argmax` | `ops/reduce.rs` |
/// | rows | `softmax`, `log_softmax` (each also `_inplace`), `cross_entropy`, `cross_entropy_grad` | `ops/rows.rs` |
/// | gemm | `gemm` (plain and batched, through [`Gemm`](crate::Gemm)) | `ops/gemm.rs` |
/// | kernels | `launch` | `kernel/launch.rs` |
///
/// The context's own methods (allocation, streams, kernels, graphs, memory statistics) are
/// on [`Context`](crate::Context).
pub struct Stream<B: Backend> {
    pub(crate) inner: Arc<StreamInner<B>>,
}

impl<B: Backend> Clone for Stream<B> {
    fn clone(&self) -> Self {
        Stream {
            inner: self.inner.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Stream<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.inner.id)
            .field("priority", &self.inner.priority)
            .field("context", &self.inner.shared.id)
            .finish()
    }
}

impl<B: Backend> Stream<B> {
    pub(crate) fn create(shared: Arc<Shared<B>>, priority: i32) -> Result<Self> {
        let raw = shared.backend.create_stream(priority)?;
        Ok(Self::from_backend(shared, raw, priority))
    }

    /// A stream over a backend stream (created here or wrapped from a native handle).
    pub(crate) fn from_backend(shared: Arc<Shared<B>>, raw: B::Stream, priority: i32) -> Self {
        Stream {
            inner: Arc::new(StreamInner {
                raw: ManuallyDrop::new(raw),
                id: NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed),
                priority,
                shared,
                capturing: AtomicBool::new(false),
                capture: Mutex::new(None),
                timeline: Mutex::new(Timeline {
                    last: 0,
                    recent: VecDeque::with_capacity(RECENT_EVENTS),
                }),
                lane: Mutex::new(None),
                faults: OnceLock::new(),
                graph_faults: Mutex::new(Vec::new()),
            }),
        }
    }

    pub(crate) fn shared_arc(&self) -> &Arc<Shared<B>> {
        &self.inner.shared
    }

    /// The backend of the stream's context (as [`crate::Context::backend`]).
    pub fn backend(&self) -> &B {
        &self.inner.shared.backend
    }

    pub(crate) fn raw(&self) -> &B::Stream {
        self.inner.raw()
    }

    /// A number unique to this stream within the process.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The stream's priority (numerically lower is more urgent).
    pub fn priority(&self) -> i32 {
        self.inner.priority
    }

    /// The id of the context the stream belongs to.
    pub fn context_id(&self) -> u64 {
        self.inner.shared.id
    }

    /// Blocks until all work queued on this stream has finished; returns the first error
    /// that work raised (or one deferred from a `Drop`), or the first out-of-bounds access
    /// of a bounds-checked (`#[kernel]`) launch on this stream (or of a graph launched on
    /// it), once.
    pub fn sync(&self) -> Result<()> {
        self.inner.shared.check()?;
        self.not_capturing("Stream::sync", SYNC_IN_CAPTURE)?;
        self.backend().stream_sync(self.raw())?;
        self.take_faults()
    }

    /// Reads the fault records of this stream's finished work: its own, and those of the
    /// graphs launched on it since the last read; returns the first fault found (once).
    pub(crate) fn take_faults(&self) -> Result<()> {
        let (shared, backend) = (&self.inner.shared, self.backend());
        if let Some(record) = self.inner.faults.get() {
            shared.faults.take(backend, self.raw(), record)?;
        }
        let mut graphs = std::mem::take(&mut *lock(&self.inner.graph_faults));
        while let Some(record) = graphs.pop() {
            if let Err(e) = shared.faults.take(backend, self.raw(), &record) {
                // The others are read at the next sync.
                lock(&self.inner.graph_faults).append(&mut graphs);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The record this stream's checked launches report to (allocated at the first).
    #[inline]
    pub(crate) fn fault_record(&self) -> Result<&FaultRecord<B>> {
        match self.inner.faults.get() {
            Some(record) => Ok(record),
            None => self.new_fault_record(),
        }
    }

    /// [`Stream::fault_record`] at the stream's first checked launch.
    #[cold]
    #[inline(never)]
    fn new_fault_record(&self) -> Result<&FaultRecord<B>> {
        let shared = &self.inner.shared;
        let record = shared.faults.new_record(&shared.backend)?;
        if let Err(spare) = self.inner.faults.set(record) {
            // Another thread's launch made one first: give this one back (never used).
            shared.faults.retire(&shared.backend, self.raw(), spare)?;
        }
        self.inner
            .faults
            .get()
            .map(|r| &**r)
            .ok_or_else(|| Error::Unsupported {
                backend: self.backend().name(),
                what: "a stream without its fault record".into(),
            })
    }

    /// The record the checked launches of the capture in progress report to: the graph's
    /// (allocated at the first), which its replays write.
    pub(crate) fn capture_fault_record(&self) -> Result<Arc<FaultRecord<B>>> {
        let shared = &self.inner.shared;
        let mut capture = lock(&self.inner.capture);
        let Some(capture) = capture.as_mut() else {
            return Err(Error::Unsupported {
                backend: self.backend().name(),
                what: "a capture's fault record outside the capture".into(),
            });
        };
        if let Some(record) = &capture.record {
            return Ok(Arc::clone(record));
        }
        let record = shared.faults.new_record(&shared.backend)?;
        capture.record = Some(Arc::clone(&record));
        Ok(record)
    }

    /// Notes that a graph whose checked kernels report to `record` was launched on this
    /// stream: its next sync reads the record.
    pub(crate) fn replays(&self, record: &Arc<FaultRecord<B>>) {
        let mut graphs = lock(&self.inner.graph_faults);
        if !graphs.iter().any(|r| Arc::ptr_eq(r, record)) {
            graphs.push(Arc::clone(record));
        }
    }

    /// Whether all work queued on this stream has finished, without blocking. Once it has,
    /// errors are returned as by [`Stream::sync`].
    pub fn query(&self) -> Result<bool> {
        self.inner.shared.check()?;
        self.not_capturing("Stream::query", SYNC_IN_CAPTURE)?;
        let idle = self.backend().stream_query(self.raw())?;
        if idle {
            self.take_faults()?;
        }
        Ok(idle)
    }

    /// Whether [`Stream::capture`] is recording this stream's work.
    pub fn is_capturing(&self) -> bool {
        self.inner.capturing.load(Ordering::Acquire)
    }

    /// [`Error::CaptureViolation`] for `call` while this stream captures.
    pub(crate) fn not_capturing(&self, call: &'static str, reason: &'static str) -> Result<()> {
        if self.is_capturing() {
            Err(Error::CaptureViolation { call, reason })
        } else {
            Ok(())
        }
    }

    /// Marks the stream's current position with a timing event.
    pub fn record_event(&self) -> Result<Event<B>> {
        self.inner.shared.check()?;
        self.not_capturing(
            "Stream::record_event",
            "an event recorded in a capture would belong to the graph, and waiting on it \
             outside would wait on nothing (record events around `Graph::launch` instead)",
        )?;
        let raw = self.backend().record_event(self.raw(), true)?;
        Ok(Event {
            raw: Arc::new(raw),
            stream: self.clone(),
        })
    }

    /// Makes all work queued on this stream from now on wait until `event` has completed.
    pub fn wait(&self, event: &Event<B>) -> Result<()> {
        let shared = &self.inner.shared;
        shared.check()?;
        shared.same_context("Stream::wait", "event", event.stream.context_id())?;
        if self.is_capturing() {
            // A finished event orders nothing; waiting on an unfinished one would tie the
            // graph to work outside it.
            if self.backend().event_query(&event.raw)? {
                return Ok(());
            }
            return Err(other_stream_in_capture("Stream::wait"));
        }
        self.backend().stream_wait(self.raw(), &event.raw)
    }

    /// Runs `f` with the native address of `a` (`None` when empty) and this stream's native
    /// handle, ordered as a read of `a` on this stream, for interop with code outside this
    /// library: `f` enqueues its own work (a `cuLaunchKernel`, a cuBLAS call, a cudarc copy)
    /// on the raw stream, and the library orders it like one of its own ops: after the work
    /// queued on `a` that it must follow (on any stream), and before later writes of `a`.
    ///
    /// On a backend without native streams ([`RawStream::None`], the CPU backend) the
    /// stream finishes its queued work before `f` runs, and `f` does its access on the
    /// calling thread before it returns.
    ///
    /// ```
    /// use gpukit::{Context, DeviceSpec, RawPtr};
    ///
    /// let ctx = Context::new(DeviceSpec::Cpu(None))?;
    /// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
    /// // SAFETY: on the CPU backend the address is host memory holding `a.len()` f32s, and
    /// // the closure reads it before returning.
    /// let sum = unsafe {
    ///     ctx.with_raw(&a, |ptr, _stream| match ptr {
    ///         Some(RawPtr::Host(p)) => std::slice::from_raw_parts(p.cast::<f32>(), 3).iter().sum(),
    ///         _ => f32::NAN,
    ///     })
    /// }?;
    /// assert_eq!(sum, 6.0);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// The caller vouches that `f` and the work it enqueues:
    /// - only read `a`, at most `a.len()` elements from the address given;
    /// - enqueue device work on the stream given and no other (or order it after that
    ///   stream themselves, and before anything later queued on it);
    /// - on [`RawStream::None`], finish every access before `f` returns.
    pub unsafe fn with_raw<T: Element, R>(
        &self,
        a: &impl DeviceRead<T, B>,
        f: impl FnOnce(Option<RawPtr>, RawStream) -> R,
    ) -> Result<R> {
        self.not_capturing("Stream::with_raw", RAW_IN_CAPTURE)?;
        let s = a.slice_ref();
        self.enqueue("Stream::with_raw", &[("a", &s, Access::Read)], || {
            self.raw_access(s.raw_ptr(), f)
        })
    }

    /// [`Stream::with_raw`] for writing: `f` and the work it enqueues may read and write `a`,
    /// and the library orders it as a write (after every queued read and write of `a`,
    /// before every later access).
    ///
    /// # Safety
    ///
    /// As for [`Stream::with_raw`], except that `f` and its work may also write the
    /// `a.len()` elements at the address given (and nothing outside them).
    pub unsafe fn with_raw_mut<T: Element, R>(
        &self,
        a: &mut impl DeviceWrite<T, B>,
        f: impl FnOnce(Option<RawPtr>, RawStream) -> R,
    ) -> Result<R> {
        self.not_capturing("Stream::with_raw_mut", RAW_IN_CAPTURE)?;
        let s = a.slice_ref();
        self.enqueue("Stream::with_raw_mut", &[("a", &s, Access::Write)], || {
            self.raw_access(s.raw_ptr(), f)
        })
    }

    /// [`Stream::with_raw`] and [`Stream::with_raw_mut`] for several ranges at once (the
    /// send and receive buffers of a collective library's call): `f` gets the native
    /// address of each of `reads` and of each of `writes`, in order (`None` for an empty
    /// one), and this stream's native handle, once the stream is ordered after the work each
    /// access must follow; the accesses are recorded (reads as reads, writes as writes) when
    /// `f` returns, so the work `f` has enqueued by then is what later work waits for.
    ///
    /// # Safety
    ///
    /// As for [`Stream::with_raw_mut`], for each range: `f` and the work it enqueues touch
    /// only these ranges, at most their lengths from the addresses given, write only the
    /// `writes`, and enqueue device work on the stream given only (and all of it before `f`
    /// returns); every range of `writes` comes from an exclusive borrow (`&mut` array or
    /// view) the caller holds for the call, and no range of `reads` overlaps one of
    /// `writes` unless `f` allows in-place use.
    pub unsafe fn with_raw_parts<R>(
        &self,
        reads: &[SliceRef<'_, B>],
        writes: &[SliceRef<'_, B>],
        f: impl FnOnce(&[Option<RawPtr>], &[Option<RawPtr>], RawStream) -> R,
    ) -> Result<R> {
        const CALL: &str = "Stream::with_raw_parts";
        self.not_capturing(CALL, RAW_IN_CAPTURE)?;
        let accesses: SmallVec<[(&'static str, &SliceRef<'_, B>, Access); MAX_KERNEL_ARGS]> = reads
            .iter()
            .map(|s| ("reads", s, Access::Read))
            .chain(writes.iter().map(|s| ("writes", s, Access::Write)))
            .collect();
        self.enqueue(CALL, &accesses, || {
            let r: SmallVec<[Option<RawPtr>; MAX_KERNEL_ARGS]> =
                reads.iter().map(SliceRef::raw_ptr).collect();
            let w: SmallVec<[Option<RawPtr>; MAX_KERNEL_ARGS]> =
                writes.iter().map(SliceRef::raw_ptr).collect();
            let raw = self.ordered_raw_stream()?;
            Ok(f(&r, &w, raw))
        })
    }

    /// This stream's native handle once the stream is ordered: on a backend without native
    /// streams, after the stream has finished its queued work.
    fn ordered_raw_stream(&self) -> Result<RawStream> {
        let raw = self.backend().raw_stream(self.raw());
        if raw == RawStream::None {
            self.backend().stream_sync(self.raw())?;
        }
        Ok(raw)
    }

    /// Runs a raw access once the stream is ordered: on a backend without native streams,
    /// after the stream has finished its queued work.
    fn raw_access<R>(
        &self,
        ptr: Option<RawPtr>,
        f: impl FnOnce(Option<RawPtr>, RawStream) -> R,
    ) -> Result<R> {
        Ok(f(ptr, self.ordered_raw_stream()?))
    }

    /// This stream's native handle ([`RawStream::None`] on the CPU backend), for interop.
    ///
    /// # Safety
    ///
    /// The handle is valid while this stream (or a clone) lives. The caller vouches that
    /// work it enqueues on the handle touches no memory of this library's arrays except
    /// through [`Stream::with_raw`] / [`Stream::with_raw_mut`], and that it does not
    /// destroy the stream.
    pub unsafe fn raw_handle(&self) -> RawStream {
        self.backend().raw_stream(self.raw())
    }

    /// Queues `f` (which enqueues backend work on this stream) after making the stream wait
    /// for whatever must come before the given accesses, then records the accesses.
    pub(crate) fn enqueue<R>(
        &self,
        op: &'static str,
        accesses: &[(&'static str, &SliceRef<'_, B>, Access)],
        f: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        self.enqueue_marked(op, accesses, false, f).map(|(r, _)| r)
    }

    /// [`Stream::enqueue`], also returning an event just after the work when `marked` (or
    /// when the context has several streams and records one anyway).
    pub(crate) fn enqueue_marked<R>(
        &self,
        op: &'static str,
        accesses: &[(&'static str, &SliceRef<'_, B>, Access)],
        marked: bool,
        f: impl FnOnce() -> Result<R>,
    ) -> Result<(R, Option<Arc<B::Event>>)> {
        self.enqueue_with(op, accesses, marked, false, f)
    }

    /// [`Stream::enqueue_marked`]; with `peer`, the first access is a read of another
    /// context's memory ([`Stream::copy_peer`]): this stream waits for its writer through
    /// the other context's events, and the read is recorded as a use by that context's
    /// lane, which waits for this stream's event, so that every tracker holds uses of its
    /// own context's streams only.
    pub(crate) fn enqueue_with<R>(
        &self,
        op: &'static str,
        accesses: &[(&'static str, &SliceRef<'_, B>, Access)],
        marked: bool,
        peer: bool,
        f: impl FnOnce() -> Result<R>,
    ) -> Result<(R, Option<Arc<B::Event>>)> {
        let shared = &self.inner.shared;
        shared.check()?;
        let is_peer = |i: usize| peer && i == 0;
        for (i, (arg, slice, _)) in accesses.iter().enumerate() {
            if !is_peer(i) {
                shared.same_context(op, arg, slice.context_id())?;
            }
        }
        let capturing = self.is_capturing();
        let several = || shared.multi_stream.load(Ordering::Acquire);
        // The fast path: uses that need no ordering (arrays this stream alone has used, and
        // reads of arrays whose writer it has already waited for) are recorded as this op's
        // position alone (`Alloc`'s `fast`), without the arrays' locks. The timeline's lock
        // orders it against another stream that takes an array over, which clears `fast`
        // first and then reads the positions under this lock.
        if !(marked || peer || capturing) {
            let mut tl = self.inner.timeline();
            let id = self.inner.id;
            if accesses.iter().all(|(_, s, access)| {
                s.is_fast(id, *access)
                    || crate::plant::is_planted(crate::plant::Bug::FastSkipsCheck)
            }) {
                let r = f()?;
                tl.last += 1;
                let position = tl.last;
                for (_, slice, access) in accesses {
                    slice.fast_use(*access, position);
                }
                // An event for other streams to wait on, kept by the timeline alone (the
                // caller asked for none: `marked` takes the locks).
                if several() && self.inner.record_ordering(&mut tl).is_err() {
                    drop(tl);
                    self.backend().stream_sync(self.raw())?;
                }
                return Ok((r, None));
            }
        }
        if capturing && peer {
            return Err(other_stream_in_capture(op));
        }
        if capturing && marked {
            return Err(Error::CaptureViolation {
                call: op,
                reason: "a graph would replay the copy from or to the same host memory, which \
                         the caller gets back after the capture (transfer outside the capture)",
            });
        }
        // Lock each allocation once, in address order (no lock-order cycles between
        // threads), and hold the locks from ordering to recording. On the stack: no op or
        // launch has more operands than a kernel has parameters.
        let mut keys: SmallVec<[usize; MAX_KERNEL_ARGS]> =
            accesses.iter().map(|(_, s, _)| s.alloc_key()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut locked: SmallVec<[Uses<'_, B>; MAX_KERNEL_ARGS]> = keys
            .iter()
            .filter_map(|k| accesses.iter().find(|(_, s, _)| s.alloc_key() == *k))
            .map(|(_, s, _)| s.lock())
            .collect();
        let slot = |slice: &SliceRef<'_, B>| keys.binary_search(&slice.alloc_key()).unwrap_or(0);
        for (_, slice, access) in accesses {
            if capturing {
                locked[slot(slice)].check_captured(self, *access, op)?;
            } else {
                locked[slot(slice)].order_before(self, *access)?;
            }
        }
        let mut tl = self.inner.timeline();
        let r = f()?;
        if capturing {
            drop(tl);
            // The work runs at each launch of the graph, which orders and records its uses
            // then: nothing is recorded now, and no event is (it would belong to the graph).
            let mut capture = self.inner.capture.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = capture.as_mut() {
                c.record(accesses.iter().map(|(_, slice, access)| (*slice, *access)));
            }
            return Ok((r, None));
        }
        tl.last += 1;
        let position = tl.last;
        let event = self.ordering_event_or_sync(&mut tl, marked || peer || several())?;
        drop(tl);
        for (i, (_, slice, access)) in accesses.iter().enumerate() {
            if !is_peer(i) {
                locked[slot(slice)].record(&self.inner, &event, position, *access);
                continue;
            }
            // Without an event the work has been waited for: nothing to record.
            let Some(e) = &event else { continue };
            let standin = slice
                .home()
                .lane()
                .and_then(|lane| Ok((lane.mark_wait(shared, e)?, lane)));
            match standin {
                Ok(((mark, at), lane)) => {
                    locked[slot(slice)].record(&lane.inner, &Some(mark), at, *access)
                }
                // No stand-in can be queued: wait for the work instead, as above.
                Err(_) => shared.backend.stream_sync(self.raw())?,
            }
        }
        Ok((r, event))
    }

    /// After an op queued at `tl.last`: an ordering event just after it where `wanted`, or,
    /// where none can be recorded, a wait for the op instead (once it is done it needs no
    /// event, and the call has succeeded; if the wait fails, the work failed: that error is
    /// returned, and the outputs are undefined).
    fn ordering_event_or_sync(
        &self,
        tl: &mut Timeline<B>,
        wanted: bool,
    ) -> Result<Option<Arc<B::Event>>> {
        if !wanted {
            return Ok(None);
        }
        match self.inner.ordering_event(tl) {
            Ok(e) => Ok(Some(e)),
            Err(_) => {
                self.backend().stream_sync(self.raw())?;
                Ok(None)
            }
        }
    }

    /// Makes this stream wait for a use of a buffer by (possibly) another stream, of this
    /// context or (for [`Stream::copy_peer`]) another.
    pub(crate) fn wait_for_use(&self, u: &Use<B>) -> Result<()> {
        if u.stream.id == self.inner.id {
            return Ok(());
        }
        let owner = &u.stream.shared;
        match &u.event {
            Some(e) => self.wait_event(owner, e),
            None => {
                // A use recorded without an event (before the context had a second stream,
                // or, on the fast path, as a position alone): the earliest event recorded
                // after it, else one recorded now, which follows all of that stream's work
                // so far (a superset of the use).
                let e = {
                    let mut tl = u.stream.timeline();
                    match u.stream.recorded_after(&tl, u.position) {
                        Some(e) => e,
                        None => u.stream.ordering_event(&mut tl)?,
                    }
                };
                self.wait_event(owner, &e)
            }
        }
    }

    /// Makes this stream wait for `event`, recorded on a stream of the context `owner`:
    /// this one, or another (through [`Backend::stream_wait_peer`]).
    pub(crate) fn wait_event(&self, owner: &Shared<B>, event: &B::Event) -> Result<()> {
        let backend = self.backend();
        if owner.id == self.inner.shared.id {
            backend.stream_wait(self.raw(), event)
        } else {
            backend.stream_wait_peer(self.raw(), &owner.backend, event)
        }
    }

    /// The stream that stands for other contexts' reads of the arrays whose home is this
    /// (default) stream, created on first use.
    pub(crate) fn lane(&self) -> Result<Stream<B>> {
        let mut lane = self.inner.lane.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = lane.as_ref() {
            return Ok(l.clone());
        }
        let shared = self.shared_arc();
        let l = Stream::create(shared.clone(), shared.info.priority_range.0)?;
        shared.multi_stream.store(true, Ordering::Release);
        *lane = Some(l.clone());
        Ok(l)
    }

    /// A fresh ordering event at the end of this stream's queue.
    pub(crate) fn mark(&self) -> Result<Arc<B::Event>> {
        let mut tl = self.inner.timeline();
        self.inner.ordering_event(&mut tl)
    }

    /// Queues a wait for `event` (of a stream of the context `owner`) as an op of this
    /// stream, and returns an ordering event after it and the op's position.
    pub(crate) fn mark_wait(
        &self,
        owner: &Shared<B>,
        event: &B::Event,
    ) -> Result<(Arc<B::Event>, u64)> {
        let mut tl = self.inner.timeline();
        self.wait_event(owner, event)?;
        tl.last += 1;
        let at = tl.last;
        Ok((self.inner.ordering_event(&mut tl)?, at))
    }
}

/// Why a host sync or query cannot happen during a capture.
const SYNC_IN_CAPTURE: &str = "the work queued since the capture began is being recorded, not \
                               run: there is nothing to wait for until the graph is launched";
/// [`Error::CaptureViolation`] for `call`, which would have to wait for another stream.
pub(crate) fn other_stream_in_capture(call: &'static str) -> Error {
    Error::CaptureViolation {
        call,
        reason: "it would have to wait for unfinished work on another stream, which a graph \
                 cannot contain (sync that stream, or wait for it, before capturing)",
    }
}
/// Why raw access is refused during a capture.
const RAW_IN_CAPTURE: &str = "work queued on the raw stream is not tracked by the graph, and on \
                              the CPU the access would run at capture time, not at launch";

/// A position in a stream's queue, with the time the stream reached it.
pub struct Event<B: Backend> {
    raw: Arc<B::Event>,
    stream: Stream<B>,
}

impl<B: Backend> Clone for Event<B> {
    fn clone(&self) -> Self {
        Event {
            raw: self.raw.clone(),
            stream: self.stream.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Event<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("stream", &self.stream.id())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Event<B> {
    /// Blocks until the stream has passed this event.
    pub fn sync(&self) -> Result<()> {
        self.stream.inner.shared.check()?;
        self.stream.backend().event_sync(&self.raw)
    }

    /// Whether the stream has passed this event, without blocking.
    pub fn query(&self) -> Result<bool> {
        self.stream.inner.shared.check()?;
        self.stream.backend().event_query(&self.raw)
    }

    /// Milliseconds from this event to `end`, after waiting for both. Negative when `end`
    /// was reached first (on another stream).
    pub fn elapsed_ms(&self, end: &Event<B>) -> Result<f64> {
        let shared = &self.stream.inner.shared;
        shared.check()?;
        shared.same_context("Event::elapsed_ms", "end", end.stream.context_id())?;
        let backend = self.stream.backend();
        backend.event_sync(&self.raw)?;
        backend.event_sync(&end.raw)?;
        backend.event_elapsed_ms(&self.raw, &end.raw)
    }

    /// The stream the event was recorded on.
    pub fn stream(&self) -> &Stream<B> {
        &self.stream
    }

    /// The backend's event.
    pub(crate) fn raw_arc(&self) -> &Arc<B::Event> {
        &self.raw
    }
}
