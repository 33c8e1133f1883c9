//! Device allocations and the record of which streams use them.
//!
//! Each allocation remembers its last writer and the readers since that write, each as a
//! stream, the position of the use's op on that stream ([`crate::stream::Timeline`]) and,
//! where one was recorded, an event just after it. Before a stream reads an allocation it
//! waits for the last writer; before it writes, it waits for the writer and all readers. Uses
//! on the stream itself need no wait: a stream is in order. A wait for a use without an event
//! goes through the earliest event its stream recorded after the use's position, or one
//! recorded then (which follows all of that stream's work so far).
//!
//! **The fast path.** Where an op's every access needs no ordering (the allocation's uses are
//! all its stream's, the last a write; or it reads, and a read by its stream is recorded since
//! the last write, so that stream has waited for the writer), `enqueue` takes no allocation's
//! lock: under its stream's timeline lock it stores the op's position in the allocation's
//! `fast_write`/`fast_last`. Whoever locks the record next swaps `fast` to 0 first and then,
//! under that stream's timeline lock (so every fast-path use that saw `fast` set has stored
//! its position), reads the positions into the record; unlocking sets `fast` again where the
//! record allows it. A poisoned lock, a capture, a transfer that returns an event and a peer
//! copy always take the locks.
//! When the allocation is dropped, its block goes back to the context's pool
//! ([`crate::pool`]) with that record, which the block's next owner inherits as *prior*
//! uses: its first access on any stream waits for them, and its first write ends them.
//! Memory wrapped from outside the library is never pooled: the backend frees (forgets) it
//! after the streams that used it.
//!
//! Work captured into a graph records no uses (it has not run; [`crate::Graph::launch`]
//! records them). Instead each allocation counts the open captures that have written it,
//! and host reads of it are refused while that count is not zero: they would return the
//! memory as it was before the capture, not what the captured work will write.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{Backend, BufAt, RawPtr};
use crate::error::{Error, Result};
use crate::pool::{self, Cached, Prior};
use crate::stream::{other_stream_in_capture, Stream, StreamInner, Timeline};

/// How an op uses a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// One use of an allocation by a stream.
pub(crate) struct Use<B: Backend> {
    pub(crate) stream: Arc<StreamInner<B>>,
    /// An event recorded just after the use; `None` before the context had a second stream,
    /// or where the use was recorded as its position alone (the stream's timeline finds or
    /// records one when another stream must wait for it).
    pub(crate) event: Option<Arc<B::Event>>,
    /// The position of the use's op on its stream ([`crate::stream::Timeline`]).
    pub(crate) position: u64,
}

impl<B: Backend> Use<B> {
    /// Whether `stream` may go ahead without waiting for this use: it is `stream`'s own,
    /// or it has finished (its event has passed; without an event, its stream is idle).
    pub(crate) fn finished_for(&self, stream: &Stream<B>) -> Result<bool> {
        if self.stream.id == stream.id() {
            return Ok(true);
        }
        let backend = stream.backend();
        match &self.event {
            Some(e) => backend.event_query(e),
            None => backend.stream_query(self.stream.raw()),
        }
    }
}

impl<B: Backend> Clone for Use<B> {
    fn clone(&self) -> Self {
        Use {
            stream: self.stream.clone(),
            event: self.event.clone(),
            position: self.position,
        }
    }
}

impl<B: Backend> Use<B> {
    /// The use with an event, for a record that outlives the allocation (a pool block's
    /// prior uses, which may outlive the stream): the earliest its stream's timeline keeps
    /// after it, else one recorded now. Where none can be recorded, the stream is waited for
    /// instead, and the use, finished, keeps no event (a failed wait is the context's
    /// deferred error).
    fn settled(&self) -> Use<B> {
        if self.event.is_some() {
            return self.clone();
        }
        let s = &self.stream;
        let event = {
            let mut tl = s.timeline();
            match s.recorded_after(&tl, self.position) {
                Some(e) => Ok(e),
                None => s.ordering_event(&mut tl),
            }
        };
        let event = match event {
            Ok(e) => Some(e),
            Err(_) => {
                let r = s.shared.backend.stream_sync(s.raw());
                s.shared.defer("GpuArray drop", r);
                None
            }
        };
        Use {
            stream: s.clone(),
            event,
            position: self.position,
        }
    }
}

/// Whether two optional events are the same handle.
fn same_event<E>(a: &Option<Arc<E>>, b: &Option<Arc<E>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

struct Tracker<B: Backend> {
    writer: Option<Use<B>>,
    readers: Vec<Use<B>>,
    /// Uses of the memory by the block's previous owners that no write has been ordered
    /// after yet.
    prior: Vec<Prior<B>>,
}

impl<B: Backend> Tracker<B> {
    fn new(prior: Vec<Prior<B>>) -> Self {
        Tracker {
            writer: None,
            readers: Vec::new(),
            prior,
        }
    }

    /// The uses of this owner an access of this kind must follow: the last write, and for
    /// a write the reads since.
    fn must_follow(&self, access: Access) -> impl Iterator<Item = &Use<B>> {
        let readers = match access {
            Access::Read => &[][..],
            Access::Write => &self.readers[..],
        };
        self.writer.iter().chain(readers)
    }

    /// The stream that may use the allocation next without its lock ([`Alloc`]'s `fast`),
    /// and the positions `fast_write` and `fast_last` start from. With no prior use: the
    /// stream of the writer, if every reader is on it too (it may read and write: it is in
    /// order with all the uses); else `reader`, the stream of the read just recorded (it may
    /// read: a reader was ordered after the writer, and the next write clears it).
    fn fast(&self, reader: Option<u64>) -> Option<(u64, u64, u64)> {
        if !self.prior.is_empty() {
            return None;
        }
        if let Some(w) = &self.writer {
            if self.readers.iter().all(|r| r.stream.id == w.stream.id) {
                let last = self
                    .readers
                    .iter()
                    .map(|r| r.position)
                    .fold(w.position, u64::max);
                return Some((w.stream.id << 1 | 1, w.position, last));
            }
        }
        let r = self.readers.iter().find(|r| Some(r.stream.id) == reader)?;
        Some((r.stream.id << 1, 0, r.position))
    }

    /// The record as the positions say that uses without the lock left (`fast` was
    /// `stream`'s, as [`Tracker::fast`] chose it, and the caller holds its timeline, so no
    /// such use is still being recorded): where the stream may write, its write at `write`
    /// and a read since at `last` where later; where it may only read, its read at `last`.
    /// An event the record holds for that position is kept; else the earliest the timeline
    /// keeps after it, if any (without one, a wait finds or records it then).
    fn materialize(
        &mut self,
        stream: &StreamInner<B>,
        tl: &Timeline<B>,
        fast: u64,
        pos: (u64, u64),
    ) {
        let (write, last) = pos;
        let at = |u: &mut Use<B>, position: u64| {
            if u.position != position {
                u.event = stream.recorded_after(tl, position);
                u.position = position;
            }
        };
        if fast & 1 == 0 {
            if let Some(r) = self.readers.iter_mut().find(|r| r.stream.id == stream.id) {
                at(r, last);
            }
            return;
        }
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        at(w, write);
        if last == write {
            self.readers.clear();
            return;
        }
        let reader = w.stream.clone();
        self.readers.truncate(1);
        match self.readers.first_mut() {
            Some(r) => at(r, last),
            None => self.readers.push(Use {
                stream: reader,
                event: stream.recorded_after(tl, last),
                position: last,
            }),
        }
    }

    /// A use without an event on a stream other than the context's default one (`home`,
    /// which lives as long as anything can allocate) is given one: the stream may be gone
    /// when the block's next owner orders after it.
    fn last_uses(&self, home: u64) -> Vec<Prior<B>> {
        let mut out: Vec<Prior<B>> = Vec::with_capacity(1 + self.readers.len() + self.prior.len());
        for u in self.readers.iter().chain(&self.writer) {
            if !out.iter().any(|p| p.stream_id == u.stream.id) {
                out.push(if u.stream.id == home {
                    Prior::of(u)
                } else {
                    Prior::of(&u.settled())
                });
            }
        }
        for p in &self.prior {
            if !out.iter().any(|q| q.stream_id == p.stream_id) {
                out.push(p.clone());
            }
        }
        out
    }
}

/// Where an allocation's memory came from, and where it goes when dropped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A block of the pool, of this many bytes; it goes back to the pool.
    Pooled(usize),
    /// A backend allocation of exactly this many bytes (a block size was refused); it goes
    /// back to the pool, under its own size.
    Exact(usize),
    /// Memory from outside the library, or none (an empty array): not counted.
    Foreign,
    /// Unified memory ([`crate::Context::alloc_unified`]): outside the pool, freed by the
    /// backend after its uses.
    Unified,
    /// An allocation of exactly this many bytes while the pool's caching is off
    /// ([`crate::pool_caching`]): counted by the pool, freed by the backend after its uses.
    Own(usize),
}

/// A device allocation: the backend buffer (none when empty), its context's default stream
/// and the record of its uses.
pub(crate) struct Alloc<B: Backend> {
    buf: Option<B::Buffer>,
    pub(crate) bytes: usize,
    pub(crate) home: Stream<B>,
    /// The id of `home`'s context, kept here: every op checks it, and reaching it through
    /// `home` is two more dependent loads.
    context: u64,
    origin: Origin,
    track: Mutex<Tracker<B>>,
    /// The stream that may use the allocation without the tracker's lock, if any (else 0),
    /// as its id shifted left once, plus 1 where it may also write ([`Tracker::fast`]): its
    /// use needs no ordering, and `enqueue` records it as its position alone, in
    /// `fast_write` and `fast_last`, under that stream's timeline lock
    /// ([`SliceRef::fast_use`]). Set when the tracker is unlocked with such a record; cleared
    /// when it is locked, which then reads the positions into the record under the stream's
    /// timeline lock ([`Tracker::materialize`]).
    fast: AtomicU64,
    /// The position of the fast stream's last write.
    fast_write: AtomicU64,
    /// The position of the fast stream's last use.
    fast_last: AtomicU64,
    /// How many open captures have recorded a write of the allocation (each counts once,
    /// from its first such write until it ends, however it ends).
    captured_writes: AtomicUsize,
    /// What keeps foreign memory valid (a DLPack producer's tensor): dropped last, once the
    /// work queued on the allocation has finished and the buffer is freed.
    keeper: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl<B: Backend> Alloc<B> {
    /// The id of the context the memory belongs to.
    #[inline]
    pub(crate) fn context_id(&self) -> u64 {
        self.context
    }

    fn build(
        home: &Stream<B>,
        buf: Option<B::Buffer>,
        bytes: usize,
        origin: Origin,
        prior: Vec<Prior<B>>,
    ) -> Self {
        Alloc {
            buf,
            bytes,
            home: home.clone(),
            context: home.context_id(),
            origin,
            track: Mutex::new(Tracker::new(prior)),
            fast: AtomicU64::new(0),
            fast_write: AtomicU64::new(0),
            fast_last: AtomicU64::new(0),
            captured_writes: AtomicUsize::new(0),
            keeper: None,
        }
    }

    /// Keeps `keeper` alive until this allocation is dropped and the work queued on it has
    /// finished (the host waits for it then): the owner of foreign memory may free it as
    /// soon as `keeper` is dropped.
    pub(crate) fn keep_until_freed(&mut self, keeper: Box<dyn std::any::Any + Send + Sync>) {
        self.keeper = Some(keeper);
    }

    /// A built-in op's scratch memory: allocated as any array's, but also while the stream
    /// captures a graph, fresh from the backend (not from the pool, whose blocks wait on
    /// work outside the capture): the graph keeps it, and each launch reuses it.
    pub(crate) fn scratch(home: &Stream<B>, bytes: usize) -> Result<Arc<Self>> {
        let shared = home.shared_arc();
        if bytes == 0 || shared.captures.load(std::sync::atomic::Ordering::Acquire) == 0 {
            return Self::new(home, bytes, false);
        }
        Self::fresh(home, bytes, false)
    }

    /// `bytes` fresh from the backend, outside the pool.
    fn fresh(home: &Stream<B>, bytes: usize, zeroed: bool) -> Result<Arc<Self>> {
        let shared = home.shared_arc();
        let buf = shared.backend.alloc(bytes, zeroed)?;
        shared.device_pool.reserved(bytes);
        Ok(Arc::new(Self::build(
            home,
            Some(buf),
            bytes,
            Origin::Own(bytes),
            Vec::new(),
        )))
    }

    /// An allocation of `bytes` from the context's pool; zeroed (on `home`) when `zeroed`.
    pub(crate) fn new(home: &Stream<B>, bytes: usize, zeroed: bool) -> Result<Arc<Self>> {
        if bytes == 0 {
            return Ok(Arc::new(Self::with_buffer(home, None, 0)));
        }
        let shared = home.shared_arc();
        shared.not_capturing(
            "Context::alloc",
            "a graph's arrays are allocated before it is captured (an allocation in a capture \
             would happen once, not at each launch)",
        )?;
        if !pool::caching() {
            return Self::fresh(home, bytes, zeroed);
        }
        let Some(block) = pool::block_size(bytes) else {
            return Self::exact(home, bytes, zeroed).map(Arc::new);
        };
        if let Some(Cached { buf, prior }) = shared.device_pool.take(block) {
            let alloc = Arc::new(Self::build(
                home,
                Some(buf),
                bytes,
                Origin::Pooled(block),
                prior,
            ));
            if zeroed {
                // On error the allocation drops, and its block goes back to the pool.
                home.zero_bytes(&alloc.slice(0, bytes))?;
            }
            return Ok(alloc);
        }
        let backend = &shared.backend;
        let mut result = backend.alloc(block, zeroed);
        if let Err(Error::OutOfMemory { .. }) = &result {
            if shared.device_pool.trim(backend)? > 0 {
                result = backend.alloc(block, zeroed);
            }
        }
        match result {
            Ok(buf) => {
                shared.device_pool.reserved(block);
                Ok(Arc::new(Self::build(
                    home,
                    Some(buf),
                    bytes,
                    Origin::Pooled(block),
                    Vec::new(),
                )))
            }
            // The rounding may be what the device refused (a buffer-size limit just above
            // the request): the exact size may still fit.
            Err(_) if block > bytes => Self::exact(home, bytes, zeroed).map(Arc::new),
            Err(e) => Err(e),
        }
    }

    /// A backend allocation of exactly `bytes`, outside the pool's block sizes.
    fn exact(home: &Stream<B>, bytes: usize, zeroed: bool) -> Result<Self> {
        let shared = home.shared_arc();
        let buf = shared.backend.alloc(bytes, zeroed)?;
        shared.device_pool.reserved(bytes);
        Ok(Self::build(
            home,
            Some(buf),
            bytes,
            Origin::Exact(bytes),
            Vec::new(),
        ))
    }

    /// An allocation of `bytes > 0` bytes of unified memory.
    pub(crate) fn unified(home: &Stream<B>, bytes: usize) -> Result<Arc<Self>> {
        let shared = home.shared_arc();
        shared.not_capturing(
            "Context::alloc_unified",
            "a graph's arrays are allocated before it is captured",
        )?;
        let buf = shared.backend.alloc_unified(bytes)?;
        Ok(Arc::new(Self::build(
            home,
            Some(buf),
            bytes,
            Origin::Unified,
            Vec::new(),
        )))
    }

    /// Counts one more open capture that writes the allocation; [`Alloc::end_captured_write`]
    /// when that capture ends.
    pub(crate) fn begin_captured_write(&self) {
        self.captured_writes.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts one capture fewer: a capture that [`Alloc::begin_captured_write`] counted has
    /// ended.
    pub(crate) fn end_captured_write(&self) {
        self.captured_writes.fetch_sub(1, Ordering::AcqRel);
    }

    /// Checks that a host read (`call`, which reads the memory on the host once the work
    /// queued on it has run) can see what it asks for: [`Error::CaptureViolation`] while an
    /// open capture has written the allocation (any part of it), whose work has not run and
    /// records no use a read could wait for. One atomic load.
    pub(crate) fn host_readable(&self, call: &'static str) -> Result<()> {
        if self.captured_writes.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        Err(Error::CaptureViolation {
            call,
            reason: "an open capture writes this array: its work is recorded, not run, so the \
                     host would read the array as it was before the capture (read it after \
                     the capture, and after `Graph::launch` for the graph's results)",
        })
    }

    /// Blocks until the queued uses a host access of this kind must follow have finished:
    /// the last write (and, for a host write, the reads since). Returns the error the work
    /// raised, if any.
    pub(crate) fn wait_for_host(&self, access: Access) -> Result<()> {
        let t = self.tracker();
        let backend = self.home.backend();
        for u in t.must_follow(access) {
            match &u.event {
                Some(e) => backend.event_sync(e)?,
                None => backend.stream_sync(u.stream.raw())?,
            }
        }
        Ok(())
    }

    /// An allocation of `bytes` over `buf` (none when empty) that the pool does not own:
    /// a wrapped foreign one, or an empty one. It has no uses yet.
    pub(crate) fn with_buffer(home: &Stream<B>, buf: Option<B::Buffer>, bytes: usize) -> Self {
        Self::build(home, buf, bytes, Origin::Foreign, Vec::new())
    }

    /// The record of uses, locked, with the uses recorded as positions alone read in.
    fn tracker(&self) -> MutexGuard<'_, Tracker<B>> {
        // A poisoned lock only means a panic elsewhere; the record itself stays consistent
        // because it is updated by plain assignments.
        let mut t = self.track.lock().unwrap_or_else(|p| p.into_inner());
        // Cleared before the positions are read: a use queued on the fast path after this
        // sees `fast` cleared and takes the lock.
        let fast = self.fast.swap(0, Ordering::SeqCst);
        if fast != 0 {
            let id = fast >> 1;
            let stream = t
                .writer
                .iter()
                .chain(&t.readers)
                .find(|u| u.stream.id == id)
                .map(|u| u.stream.clone());
            if let Some(stream) = stream {
                // Taken after the clear: every fast-path use that saw `fast` set has been
                // recorded once the lock is ours.
                let tl = stream.timeline();
                let pos = (
                    self.fast_write.load(Ordering::Relaxed),
                    self.fast_last.load(Ordering::Relaxed),
                );
                t.materialize(&stream, &tl, fast, pos);
            }
        }
        t
    }

    pub(crate) fn slice(self: &Arc<Self>, offset: usize, bytes: usize) -> SliceRef<'_, B> {
        SliceRef {
            alloc: self,
            offset,
            bytes,
        }
    }
}

impl<B: Backend> Drop for Alloc<B> {
    fn drop(&mut self) {
        // Declared first, so dropped last, on every path below.
        let keeper = self.keeper.take();
        if keeper.is_some() {
            // Its owner may free the memory at once: the work queued on it first.
            if let Err(e) = self.wait_for_host(Access::Write) {
                self.home.shared_arc().defer("GpuArray drop", Err(e));
            }
        }
        let Some(buf) = self.buf.take() else { return };
        let t = self.tracker();
        let shared = self.home.shared_arc();
        if let Origin::Pooled(block) | Origin::Exact(block) = self.origin {
            // An exact-size block serves only a request of that block size; a trim (or the
            // next allocation that runs out) frees it, after its uses.
            let prior = t.last_uses(self.home.id());
            shared.device_pool.put(block, Cached { buf, prior });
            return;
        }
        let mut users: Vec<&StreamInner<B>> = Vec::with_capacity(1 + t.readers.len());
        for u in t.writer.iter().chain(&t.readers) {
            if !users.iter().any(|s| s.id == u.stream.id) {
                users.push(&u.stream);
            }
        }
        let raws: Vec<&B::Stream> = users.iter().map(|s| s.raw()).collect();
        // SAFETY: every use of the buffer was recorded in the tracker when it was queued
        // (`enqueue` holds the lock from ordering to recording), and a write clears only
        // readers it was ordered after, so `raws` holds every stream with queued work on it
        // (a foreign buffer never had a previous owner).
        let freed = unsafe { shared.backend.free(buf, &raws) };
        if let Origin::Own(bytes) = self.origin {
            shared.device_pool.released(bytes);
        }
        shared.defer("GpuArray drop", freed);
    }
}

/// An untyped range of device memory, taken from an array or a view; what ops and kernel
/// launches are given.
pub struct SliceRef<'a, B: Backend> {
    alloc: &'a Arc<Alloc<B>>,
    offset: usize,
    bytes: usize,
}

impl<B: Backend> Clone for SliceRef<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for SliceRef<'_, B> {}

impl<B: Backend> std::fmt::Debug for SliceRef<'_, B> {
    /// The context, and the range in bytes within its allocation.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceRef")
            .field("context", &self.context_id())
            .field("offset", &self.offset)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl<'a, B: Backend> SliceRef<'a, B> {
    /// Length in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The id of the context the memory belongs to.
    #[inline]
    pub fn context_id(&self) -> u64 {
        self.alloc.context_id()
    }

    /// `bytes` bytes from `offset` bytes into the range (clamped to it).
    pub(crate) fn sub(&self, offset: usize, bytes: usize) -> SliceRef<'a, B> {
        let offset = offset.min(self.bytes);
        SliceRef {
            alloc: self.alloc,
            offset: self.offset + offset,
            bytes: bytes.min(self.bytes - offset),
        }
    }

    /// The first `bytes` bytes of the range (all of it when it is shorter).
    pub(crate) fn prefix(&self, bytes: usize) -> SliceRef<'a, B> {
        SliceRef {
            alloc: self.alloc,
            offset: self.offset,
            bytes: bytes.min(self.bytes),
        }
    }

    /// The native address of the range's first byte; `None` when it is empty.
    pub(crate) fn raw_ptr(&self) -> Option<RawPtr> {
        self.at().map(|at| self.alloc.home.backend().raw_ptr(at))
    }

    /// Where the range starts; `None` when it is empty.
    pub(crate) fn at(&self) -> Option<BufAt<'a, B>> {
        if self.bytes == 0 {
            return None;
        }
        self.alloc.buf.as_ref().map(|buf| BufAt {
            buf,
            offset: self.offset,
        })
    }

    /// The allocation itself, to keep alive (a graph holds what its work uses).
    pub(crate) fn alloc_arc(&self) -> &'a Arc<Alloc<B>> {
        self.alloc
    }

    /// The allocation's identity: `enqueue` locks each allocation once, in this order.
    pub(crate) fn alloc_key(&self) -> usize {
        Arc::as_ptr(self.alloc) as usize
    }

    /// [`Alloc::host_readable`] of the range's allocation.
    pub(crate) fn host_readable(&self, call: &'static str) -> Result<()> {
        self.alloc.host_readable(call)
    }

    /// Locks the allocation's record of uses.
    pub(crate) fn lock(&self) -> Uses<'a, B> {
        Uses {
            record: self.alloc.tracker(),
            alloc: self.alloc,
            reader: None,
        }
    }

    /// Whether `stream` may use the range this way without the allocation's lock (see
    /// [`Alloc`]'s `fast`): it needs no ordering, and [`SliceRef::fast_use`] records it. One
    /// atomic load.
    pub(crate) fn is_fast(&self, stream: u64, access: Access) -> bool {
        let fast = self.alloc.fast.load(Ordering::SeqCst);
        fast >> 1 == stream && (access == Access::Read || fast & 1 == 1)
    }

    /// Records a use of this kind as the position of its op, on the stream
    /// [`SliceRef::is_fast`] said may use it so; the caller holds that stream's timeline
    /// lock.
    pub(crate) fn fast_use(&self, access: Access, position: u64) {
        if access == Access::Write {
            self.alloc.fast_write.store(position, Ordering::Relaxed);
        }
        self.alloc.fast_last.store(position, Ordering::Relaxed);
    }

    /// The default stream of the context the memory belongs to.
    pub(crate) fn home(&self) -> &'a Stream<B> {
        &self.alloc.home
    }
}

/// The locked record of an allocation's uses. `enqueue` holds it from ordering a new use
/// to recording it, so that two threads using disjoint views of one allocation cannot both
/// order before either records (the later record would drop the earlier writer).
/// The allocation's home (default) stream says which context the uses are of.
pub(crate) struct Uses<'a, B: Backend> {
    record: MutexGuard<'a, Tracker<B>>,
    alloc: &'a Alloc<B>,
    /// The stream of the read recorded last, if the last record was a read.
    reader: Option<u64>,
}

impl<B: Backend> Drop for Uses<'_, B> {
    /// Publishes the stream that may use the allocation next without the lock, if one may
    /// ([`Tracker::fast`]), while the lock is still held (the guard is dropped after this).
    fn drop(&mut self) {
        if let Some((fast, write, last)) = self.record.fast(self.reader) {
            self.alloc.fast_write.store(write, Ordering::Relaxed);
            self.alloc.fast_last.store(last, Ordering::Relaxed);
            self.alloc.fast.store(fast, Ordering::SeqCst);
        }
    }
}

impl<B: Backend> Uses<'_, B> {
    /// Makes `stream` wait for the uses an access of this kind must come after.
    pub(crate) fn order_before(&self, stream: &Stream<B>, access: Access) -> Result<()> {
        // A read of memory a previous owner may still be writing could see its writes land:
        // every access waits for the prior uses, not only writes.
        let owner = self.alloc.home.shared_arc();
        for p in &self.record.prior {
            p.order_before(stream, owner)?;
        }
        for u in self.record.must_follow(access) {
            if access == Access::Read
                && crate::plant::is_planted(crate::plant::Bug::ReadSkipsWriter)
            {
                continue;
            }
            stream.wait_for_use(u)?;
        }
        Ok(())
    }

    /// During a capture on `stream`: checks that an access of this kind needs no wait for
    /// another stream (the uses it must follow are on `stream` itself, or finished), since
    /// a graph cannot wait for work outside it. [`Error::CaptureViolation`] naming `call`
    /// otherwise.
    pub(crate) fn check_captured(
        &self,
        stream: &Stream<B>,
        access: Access,
        call: &'static str,
    ) -> Result<()> {
        let t = &*self.record;
        for u in t.must_follow(access) {
            if !u.finished_for(stream)? {
                return Err(other_stream_in_capture(call));
            }
        }
        for p in &t.prior {
            if !p.finished_for(stream)? {
                return Err(other_stream_in_capture(call));
            }
        }
        Ok(())
    }

    /// Records a use by `stream` that has just been queued, marked by `event`. A use that
    /// replaces one by the same stream keeps that record's stream handle and swaps only the
    /// event (no reference counting at all when there is none: one stream, no events).
    pub(crate) fn record(
        &mut self,
        stream: &Arc<StreamInner<B>>,
        event: &Option<Arc<B::Event>>,
        position: u64,
        access: Access,
    ) {
        self.reader = (access == Access::Read).then_some(stream.id);
        let t = &mut *self.record;
        let same = |u: &Use<B>| u.stream.id == stream.id;
        let slot = match access {
            Access::Read => t.readers.iter_mut().find(|r| same(r)),
            Access::Write => {
                t.readers.clear();
                t.prior.clear();
                t.writer.as_mut().filter(|w| same(w))
            }
        };
        match slot {
            Some(u) => {
                if !same_event(&u.event, event) {
                    u.event.clone_from(event);
                }
                u.position = position;
            }
            None => {
                let u = Use {
                    stream: stream.clone(),
                    event: event.clone(),
                    position,
                };
                match access {
                    Access::Read => t.readers.push(u),
                    Access::Write => t.writer = Some(u),
                }
            }
        }
    }
}
