//! Streams and events: in-order queues of work run asynchronously, each by a worker thread
//! of its own, and positions in them.
//!
//! Rules (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html>,
//! <https://docs.nvidia.com/cuda/cuda-runtime-api/stream-sync-behavior.html>):
//! - work on a stream runs in the order it was queued, and asynchronously: a call returns
//!   once the work is queued. Queued work waits `GPUKIT_CUDA_EMU_DELAY_US` before it starts
//!   unless something waits for it (a synchronisation, a query, another stream's wait), so
//!   that a host that reads results before synchronising sees stale data, as it would on a
//!   GPU, rather than whatever the race between two threads gives;
//! - `cuStreamQuery` is `CUDA_ERROR_NOT_READY` while work is queued or running;
//! - `cuStreamWaitEvent` makes later work wait for the event's most recent record at the
//!   time of the call, and for nothing when the event was never recorded;
//! - `cuEventQuery` of an event never recorded is `CUDA_SUCCESS`; `cuEventElapsedTime`
//!   needs two completed records of events with timing (`CUDA_ERROR_NOT_READY` while one is
//!   pending, `CUDA_ERROR_INVALID_HANDLE` for an event without timing or never recorded);
//! - the legacy default stream (`0`, `CU_STREAM_LEGACY`) waits for all work queued before on
//!   the context's blocking streams, and blocking streams wait for the legacy stream's
//!   earlier work; streams made with `CU_STREAM_NON_BLOCKING` do neither. The per-thread
//!   default stream (`CU_STREAM_PER_THREAD`) is a blocking stream of each thread;
//! - `cuStreamDestroy` returns at once; queued work still runs, and the handle is dead;
//! - a host function (`cuLaunchHostFunc`) runs on the stream's worker thread in order, and
//!   must not call CUDA: a call from one is `CUDA_ERROR_NOT_PERMITTED`.
//!
//! Every operation gets a [`Stamp`] when it is queued: the stream's own
//! order, the events it waited for and what the host had seen finish. The race checker
//! ([`crate::hb`]) compares them.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::capture::CaptureLink;
use crate::context::Context;
use crate::errors::{cu, CuResult};
use crate::hb::{self, Lane, Stamp, Vc};
use crate::work::Work;

/// `CU_STREAM_NON_BLOCKING`.
pub const NON_BLOCKING: u32 = 1;

/// Which kind of stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// Made by `cuStreamCreate`.
    Created,
    /// A context's legacy default stream.
    Legacy,
    /// A thread's per-thread default stream.
    PerThread,
}

/// One queued operation.
#[allow(missing_debug_implementations)]
pub struct Queued {
    /// Its position on the stream.
    pub seq: u64,
    /// What to do.
    pub work: Work,
    /// Its place in the happens-before order.
    pub stamp: Stamp,
    /// A description for diagnostics (`kernel `name` on stream 0x...`).
    pub what: Arc<str>,
    at: Instant,
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Queued>,
    last_seq: u64,
    completed: u64,
    demand: u64,
    closed: bool,
    worker: bool,
    clock: u64,
    vc: Vc,
    capture: Option<CaptureLink>,
}

/// A stream.
pub struct Stream {
    /// Its handle (an internal one for the legacy and per-thread streams).
    pub handle: u64,
    /// Its context.
    pub ctx: Arc<Context>,
    /// `cuStreamCreate`'s flags.
    pub flags: u32,
    /// Its priority.
    pub priority: i32,
    /// Which kind it is.
    pub kind: StreamKind,
    /// Its lane in the happens-before order.
    pub lane: Lane,
    q: Mutex<Queue>,
    wake: Condvar,
    done: Condvar,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("handle", &format_args!("0x{:x}", self.handle))
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// What `enqueue` did with an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued at this position.
    At(u64),
    /// Added to the capture in progress.
    Captured,
}

thread_local! {
    static IN_HOST_FN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is running a host function (CUDA calls are not permitted).
pub fn in_host_fn() -> bool {
    IN_HOST_FN.get()
}

impl Stream {
    /// A new stream of `ctx`.
    pub fn new(
        ctx: Arc<Context>,
        handle: u64,
        flags: u32,
        priority: i32,
        kind: StreamKind,
    ) -> Arc<Stream> {
        let s = Arc::new(Stream {
            handle,
            ctx: Arc::clone(&ctx),
            flags,
            priority,
            kind,
            lane: hb::new_lane(),
            q: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        if kind != StreamKind::Legacy {
            ctx.streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Arc::downgrade(&s));
        }
        s
    }

    /// Whether it synchronises with the legacy default stream.
    pub fn blocking(&self) -> bool {
        self.kind != StreamKind::Legacy && self.flags & NON_BLOCKING == 0
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its capture link while it captures.
    pub fn capture(&self) -> Option<CaptureLink> {
        self.lock().capture.clone()
    }

    /// Sets or clears its capture link.
    pub fn set_capture(&self, link: Option<CaptureLink>) {
        self.lock().capture = link;
    }

    /// Runs `f` on its capture link while it captures (under the stream's lock).
    pub fn with_capture<R>(&self, f: impl FnOnce(&mut Option<CaptureLink>) -> R) -> R {
        f(&mut self.lock().capture)
    }

    /// Its position and order now: the last queued operation and what it is ordered after.
    pub fn position(&self) -> (u64, Vc) {
        let q = self.lock();
        (q.last_seq, q.vc.clone())
    }

    /// Whether every operation up to `seq` has run.
    pub fn reached(&self, seq: u64) -> bool {
        self.lock().completed >= seq
    }

    /// Whether work is queued or running.
    pub fn busy(&self) -> bool {
        let q = self.lock();
        q.completed < q.last_seq
    }

    /// Asks for the work up to `seq` to start without delay.
    pub fn demand(&self, seq: u64) {
        let mut q = self.lock();
        if seq > q.demand {
            q.demand = seq;
            self.wake.notify_all();
        }
    }

    /// Waits until every operation up to `seq` has run.
    pub fn wait_for(&self, seq: u64) {
        self.demand(seq);
        let mut q = self.lock();
        while q.completed < seq {
            q = self.done.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Queues `work` (or adds it to the capture in progress), after the legacy stream's
    /// implicit waits; `join` is what it must also be ordered after (an event it waits for).
    pub fn enqueue(
        self: &Arc<Self>,
        work: Work,
        what: Arc<str>,
        join: Option<&Vc>,
    ) -> Result<Enqueued, CuResult> {
        self.enqueue_with(|_, _| work, what, join)
    }

    /// [`Stream::enqueue`] of the work `build` makes from the operation's position and order
    /// (an event record is made so, knowing where it is).
    pub fn enqueue_with(
        self: &Arc<Self>,
        build: impl FnOnce(u64, &Vc) -> Work,
        what: Arc<str>,
        join: Option<&Vc>,
    ) -> Result<Enqueued, CuResult> {
        self.ctx.check()?;
        if self.capture().is_some() {
            let work = build(0, &Vc::default());
            return crate::capture::add(self, work, what, join).map(|()| Enqueued::Captured);
        }
        let implicit = self.implicit_waits()?;
        let mut q = self.lock();
        if q.closed {
            return Err(cu::INVALID_HANDLE);
        }
        for (other, seq, vc) in implicit {
            q.vc.join(&vc);
            let what: Arc<str> = Arc::from("an implicit wait of the legacy default stream");
            self.push(&mut q, |_, _| Work::WaitSeq(other, seq), what);
        }
        if let Some(vc) = join {
            q.vc.join(vc);
        }
        let seq = self.push(&mut q, build, what);
        Ok(Enqueued::At(seq))
    }

    fn push(
        self: &Arc<Self>,
        q: &mut Queue,
        build: impl FnOnce(u64, &Vc) -> Work,
        what: Arc<str>,
    ) -> u64 {
        q.clock += 1;
        q.vc.raise(self.lane, q.clock);
        q.last_seq += 1;
        let seq = q.last_seq;
        let work = build(seq, &q.vc);
        let stamp = Stamp {
            lane: self.lane,
            clock: q.clock,
            vc: Arc::new(q.vc.clone()),
            host: hb::host_snapshot(),
        };
        q.ops.push_back(Queued {
            seq,
            work,
            stamp,
            what,
            at: Instant::now(),
        });
        if !q.worker {
            q.worker = true;
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("cuda-emu-stream-{:x}", self.handle & 0xfff_ffff))
                .spawn(move || me.work_loop());
            if spawned.is_err() {
                q.worker = false;
                crate::errors::diagnose("could not start a stream's worker thread");
            }
        }
        self.wake.notify_all();
        seq
    }

    /// The implicit waits of the legacy default stream: what this stream must wait for
    /// before new work (taken before this stream's lock, so two streams never lock each
    /// other in opposite orders).
    fn implicit_waits(&self) -> Result<Vec<(Arc<Stream>, u64, Vc)>, CuResult> {
        let mut out = Vec::new();
        match self.kind {
            StreamKind::Legacy => {
                for s in self.ctx.live_streams() {
                    if !s.blocking() {
                        continue;
                    }
                    if s.capture().is_some() {
                        crate::capture::invalidate_stream(&s);
                        return Err(cu::STREAM_CAPTURE_IMPLICIT);
                    }
                    let (seq, vc) = s.position();
                    if !s.reached(seq) {
                        out.push((s, seq, vc));
                    }
                }
            }
            _ if self.blocking() => {
                if let Some(l) = self.ctx.legacy.get() {
                    let (seq, vc) = l.position();
                    if !l.reached(seq) {
                        out.push((Arc::clone(l), seq, vc));
                    }
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// `cuStreamSynchronize`: waits for everything queued so far; the host then knows it
    /// finished. Returns the device's sticky error, if any.
    pub fn synchronize(&self) -> Result<(), CuResult> {
        if self.capture().is_some() {
            crate::capture::invalidate_stream(self);
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        let (seq, vc) = self.position();
        self.wait_for(seq);
        hb::host_learns(&vc);
        self.ctx.dev().check()
    }

    /// `cuStreamQuery`: whether everything queued so far has run.
    pub fn query(&self) -> Result<bool, CuResult> {
        if self.capture().is_some() {
            crate::capture::invalidate_stream(self);
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        self.ctx.dev().check()?;
        let (seq, vc) = self.position();
        if self.reached(seq) {
            hb::host_learns(&vc);
            return Ok(true);
        }
        self.demand(seq);
        Ok(false)
    }

    /// Stops taking work; the worker runs what is queued and ends.
    pub fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        q.demand = q.last_seq;
        self.wake.notify_all();
    }

    /// Closes it and waits for its queued work.
    pub fn close_and_drain(&self) {
        let seq = {
            let mut q = self.lock();
            q.closed = true;
            q.last_seq
        };
        self.wait_for(seq);
    }

    fn work_loop(self: Arc<Self>) {
        crate::module::worker_thread_setup();
        let delay = Duration::from_micros(crate::config::get().delay_us);
        loop {
            let op = {
                let mut q = self.lock();
                loop {
                    match q.ops.front() {
                        Some(front) => {
                            if delay.is_zero() || front.seq <= q.demand {
                                break;
                            }
                            let due = front.at + delay;
                            let now = Instant::now();
                            if now >= due {
                                break;
                            }
                            q = self
                                .wake
                                .wait_timeout(q, due - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                        None if q.closed => {
                            q.worker = false;
                            return;
                        }
                        None => q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner()),
                    }
                }
                match q.ops.pop_front() {
                    Some(op) => op,
                    None => continue,
                }
            };
            let seq = op.seq;
            crate::work::execute(&self, op);
            let mut q = self.lock();
            q.completed = seq;
            self.done.notify_all();
        }
    }

    /// Runs a host function on this thread, where CUDA calls are not permitted; the host
    /// learns what the function's stream had done.
    pub fn call_host_fn(f: unsafe extern "C" fn(*mut libc::c_void), data: usize, stamp: &Stamp) {
        hb::host_learns(&stamp.vc);
        IN_HOST_FN.set(true);
        // SAFETY: the caller of `cuLaunchHostFunc` vouched for the function and its data; a
        // panic (a Rust host function) must not unwind into the worker.
        let _ = std::panic::catch_unwind(|| unsafe { f(data as *mut libc::c_void) });
        IN_HOST_FN.set(false);
    }
}

/// A completed or pending record of an event on a stream.
#[derive(Debug)]
pub struct Record {
    /// The stream.
    pub stream: Arc<Stream>,
    /// Its position there.
    pub seq: u64,
    /// What the record is ordered after (the work before it on its stream, and more).
    pub vc: Vc,
    /// When the stream reached it.
    pub time: OnceLock<Instant>,
}

impl Record {
    /// Whether the stream has passed it.
    pub fn done(&self) -> bool {
        self.stream.reached(self.seq)
    }

    /// Waits for it.
    pub fn wait(&self) {
        self.stream.wait_for(self.seq);
    }
}

/// What an event last recorded.
#[derive(Debug, Clone)]
pub enum Recorded {
    /// A position on a stream.
    Stream(Arc<Record>),
    /// A position in a capture in progress.
    Captured(crate::capture::CapturedEvent),
}

/// An event.
#[derive(Debug)]
pub struct Event {
    /// Its handle.
    pub handle: u64,
    /// Its context.
    pub ctx: u64,
    /// `cuEventCreate`'s flags.
    pub flags: u32,
    /// Its most recent record.
    pub latest: Mutex<Option<Recorded>>,
}

/// `CU_EVENT_DISABLE_TIMING`.
pub const EVENT_DISABLE_TIMING: u32 = 2;

impl Event {
    /// Its most recent record.
    pub fn latest(&self) -> Option<Recorded> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether it keeps time.
    pub fn timing(&self) -> bool {
        self.flags & EVENT_DISABLE_TIMING == 0
    }
}
