//! Streams as in-order work queues, each run by its own worker thread, and events as
//! positions in a queue.
//!
//! Every task gets a sequence number when it is queued (1, 2, ...). The worker runs tasks
//! in that order and publishes how many have finished; an event is a (queue, number) pair
//! and has completed when the queue's finished count reaches its number. A stream waiting
//! on an event queues a task that blocks its worker until then. Waits only ever point at
//! work queued before them, so waits can never form a cycle.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use gpukit_core::Error;

use crate::error::CpuError;
pub(crate) use crate::task::Task;

static NEXT_QUEUE: AtomicU64 = AtomicU64::new(1);

/// How long a worker that ran out of tasks, or a host thread waiting for one, keeps polling
/// before it parks. Handing work to a parked thread costs a wake-up (tens of microseconds on
/// a virtual machine); polling for this long covers the gap between the ops of a loop, and
/// an idle stream parks after it, costing no CPU.
const SPIN: Duration = Duration::from_micros(50);
/// Of [`SPIN`], how long to poll with the CPU's spin hint before yielding the core between
/// polls.
const SPIN_HOT: Duration = Duration::from_micros(10);

/// Threads polling right now, across all streams and contexts of the process.
static SPINNING: AtomicUsize = AtomicUsize::new(0);
/// How many threads may poll at once: one fewer than the machine's cores (at least one), so
/// that pollers never take every core from the threads doing the work (on a 2-core machine a
/// pipeline's loader, three stream workers and the host thread share two cores). 0 until
/// first read.
static MAX_SPINNING: AtomicUsize = AtomicUsize::new(0);

fn max_spinning() -> usize {
    match MAX_SPINNING.load(Ordering::Relaxed) {
        0 => {
            let n = std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1).max(1));
            MAX_SPINNING.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

/// Polls `ready` for up to [`SPIN`], if fewer than [`max_spinning`] threads poll already;
/// true as soon as it holds. False means: park.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    if SPINNING.fetch_add(1, Ordering::AcqRel) >= max_spinning() {
        SPINNING.fetch_sub(1, Ordering::AcqRel);
        return ready();
    }
    let start = Instant::now();
    let mut polls = 0u32;
    let done = loop {
        if ready() {
            break true;
        }
        polls += 1;
        // Reading the clock costs about as much as a few dozen polls.
        if polls % 32 == 0 {
            let spent = start.elapsed();
            if spent >= SPIN {
                break false;
            }
            if spent >= SPIN_HOT {
                std::thread::yield_now();
                continue;
            }
        }
        std::hint::spin_loop();
    };
    SPINNING.fetch_sub(1, Ordering::AcqRel);
    done
}

/// How many tasks a stream holds before queuing blocks until the worker takes one (as a
/// GPU's launch queue does). The queue is allocated at this size once, so queuing never
/// allocates.
pub(crate) const QUEUE_DEPTH: usize = 256;

/// Tasks queued and not yet taken by the worker.
struct Pending {
    /// At most [`QUEUE_DEPTH`], in storage allocated once.
    tasks: VecDeque<Task>,
    /// A thread waits on [`Queue::space`] for the queue to drop below [`QUEUE_DEPTH`].
    full: bool,
    /// No more tasks are accepted; the worker exits once `tasks` is empty.
    closed: bool,
    /// The worker is parked on [`Queue::work`] (a push must wake it).
    parked: bool,
    /// A task is running: taken by the worker, or run in place by the thread that queued
    /// it ([`Queue::run_or_push`]). The next task starts only after it.
    running: bool,
}

/// The shared half of a stream: what events and waiting streams look at.
pub(crate) struct Queue {
    id: u64,
    pending: Mutex<Pending>,
    /// Where the worker parks when it finds no task.
    work: Condvar,
    /// Where a thread queuing on a full queue waits for the worker to take a task.
    space: Condvar,
    /// Tasks queued so far; the last one's sequence number.
    queued: AtomicU64,
    /// Tasks taken so far (by the worker, or run in place).
    taken: AtomicU64,
    /// Tasks finished so far.
    finished: AtomicU64,
    /// The first error a task raised that nobody has been told about yet. Set before the
    /// task counts as finished, so whoever sees it finished sees its error.
    error: Mutex<Option<Error>>,
    /// Host threads parked on `changed` (a finishing task must wake them).
    waiters: AtomicUsize,
    done: Mutex<()>,
    changed: Condvar,
}

impl Queue {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a task and returns its sequence number; waits while the queue is full.
    pub(crate) fn push(&self, task: Task) -> Result<u64, Error> {
        let mut p = self.open_slot()?;
        p.tasks.push_back(task);
        let seq = self.queued.load(Ordering::Relaxed) + 1;
        self.queued.store(seq, Ordering::Release);
        let wake = p.parked;
        drop(p);
        if wake {
            self.work.notify_one();
        }
        Ok(seq)
    }

    /// Runs a short task on the calling thread when the stream is idle (nothing queued or
    /// running), else queues it. Running it in place keeps the stream's semantics: it takes
    /// the next position in the queue, the worker starts nothing until it has finished, and
    /// it finishes (error and all) exactly as if the worker had run it; the caller only
    /// returns after the task instead of before, which for a short task costs less than
    /// handing it to another thread.
    pub(crate) fn run_or_push(&self, task: Task) -> Result<u64, Error> {
        let mut p = self.open_slot()?;
        if !p.tasks.is_empty() || p.running {
            drop(p);
            return self.push(task);
        }
        p.running = true;
        let seq = self.queued.load(Ordering::Relaxed) + 1;
        self.queued.store(seq, Ordering::Release);
        // The worker counts this one as taken, so that it does not wait for it.
        self.taken.fetch_add(1, Ordering::AcqRel);
        drop(p);
        let result = run_task(&task);
        drop(task);
        self.finish(result);
        let mut p = self.pending();
        p.running = false;
        let wake = p.parked && !p.tasks.is_empty();
        drop(p);
        if wake {
            self.work.notify_one();
        }
        Ok(seq)
    }

    /// The queue locked with room for a task: waits while it is full; an error once the
    /// stream is destroyed.
    fn open_slot(&self) -> Result<MutexGuard<'_, Pending>, Error> {
        let mut p = self.pending();
        while p.tasks.len() >= QUEUE_DEPTH && !p.closed {
            p.full = true;
            p = self.space.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        if p.closed {
            return Err(Error::Backend {
                backend: "cpu",
                call: "enqueue",
                message: "the stream was destroyed".into(),
            });
        }
        Ok(p)
    }

    /// The sequence number of the last task queued so far.
    pub(crate) fn tail(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    pub(crate) fn is_done(&self, seq: u64) -> bool {
        self.finished() >= seq
    }

    /// How many tasks have finished.
    fn finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// Blocks until task `seq` has finished: polls briefly, then parks.
    pub(crate) fn wait_for(&self, seq: u64) {
        if self.is_done(seq) || spin_until(|| self.is_done(seq)) {
            return;
        }
        // Announce the wait before the last check; `finish` reads `waiters` after counting
        // (both sequentially consistent), so either this check sees the count or `finish`
        // sees the waiter and wakes it under `done`.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.done.lock().unwrap_or_else(|p| p.into_inner());
        while self.finished.load(Ordering::SeqCst) < seq {
            g = self.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Takes the unreported error, if any.
    pub(crate) fn take_error(&self) -> Result<(), Error> {
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn finish(&self, result: Result<(), Error>) {
        if let Err(e) = result {
            self.error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders the wake-up after a waiter's last check.
            drop(self.done.lock().unwrap_or_else(|p| p.into_inner()));
            self.changed.notify_all();
        }
    }

    /// The worker's next task, once the one running (if any) has finished: polls briefly
    /// when there is none, then parks; `None` once the queue is closed and drained.
    ///
    /// `ran` says the worker has just finished (and counted) the task it took last: it stops
    /// counting as running under the same lock that looks for the next one.
    fn next(&self, ran: bool) -> Option<Task> {
        let mut release = ran;
        loop {
            let mut p = self.pending();
            if std::mem::take(&mut release) {
                p.running = false;
            }
            if !p.running {
                if let Some(task) = p.tasks.pop_front() {
                    p.running = true;
                    self.taken.fetch_add(1, Ordering::AcqRel);
                    if std::mem::take(&mut p.full) {
                        self.space.notify_all();
                    }
                    return Some(task);
                }
                if p.closed {
                    return None;
                }
            }
            drop(p);
            // Something to take: queued beyond what was taken, and nothing running in
            // place (a task run in place counts as taken while it runs).
            if spin_until(|| {
                self.queued.load(Ordering::Acquire) > self.taken.load(Ordering::Acquire)
                    && self.finished.load(Ordering::Acquire) == self.taken.load(Ordering::Acquire)
            }) {
                continue;
            }
            let mut p = self.pending();
            while (p.tasks.is_empty() || p.running) && !p.closed {
                p.parked = true;
                p = self.work.wait(p).unwrap_or_else(|e| e.into_inner());
                p.parked = false;
            }
        }
    }

    /// Stops accepting tasks; the worker exits after the ones queued.
    fn close(&self) {
        let mut p = self.pending();
        p.closed = true;
        drop(p);
        self.work.notify_one();
        self.space.notify_all();
    }
}

fn run(queue: Arc<Queue>) {
    let mut ran = false;
    while let Some(task) = queue.next(ran) {
        ran = true;
        let result = run_task(&task);
        // What the task holds (the memory it used) goes before the stream reports it done,
        // so that a sync returns with it released.
        drop(task);
        // Counted (and its error recorded) before the next task may start (`next` releases
        // the queue), so that the finished count only ever covers tasks that have fully
        // finished.
        queue.finish(result);
    }
}

/// Runs one task; a panic in it becomes its error.
pub(crate) fn run_task(task: &Task) -> Result<(), Error> {
    match catch_unwind(AssertUnwindSafe(|| task.call())) {
        Ok(r) => r,
        Err(panic) => Err(Error::KernelFailed {
            kernel: "<task>".into(),
            message: panic_message(&*panic),
        }),
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}

/// A stream: a queue and the worker thread that runs it.
pub struct CpuStream {
    pub(crate) queue: Arc<Queue>,
    /// The tasks recorded while the stream captures a graph (`None`: not capturing).
    pub(crate) capture: Mutex<Option<Vec<Task>>>,
    /// Whether `capture` holds a recording (checked without the lock on every push).
    pub(crate) capturing: std::sync::atomic::AtomicBool,
    worker: Option<(JoinHandle<()>, ThreadId)>,
    priority: i32,
    /// Counts the stream as live until it is dropped (after its worker was joined).
    #[cfg(feature = "fault-injection")]
    pub(crate) live: Option<crate::fault::Live>,
}

impl CpuStream {
    pub(crate) fn spawn(priority: i32) -> Result<CpuStream, CpuError> {
        let queue = Arc::new(Queue {
            id: NEXT_QUEUE.fetch_add(1, Ordering::Relaxed),
            pending: Mutex::new(Pending {
                tasks: VecDeque::with_capacity(QUEUE_DEPTH),
                full: false,
                closed: false,
                parked: false,
                running: false,
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            queued: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            error: Mutex::new(None),
            waiters: AtomicUsize::new(0),
            done: Mutex::new(()),
            changed: Condvar::new(),
        });
        let q = queue.clone();
        // The worker says when it runs: a stream is created with its thread started (the
        // thread's own set-up, allocations included, is over), not at its first task.
        let (started, running) = std::sync::mpsc::sync_channel::<()>(1);
        let handle = std::thread::Builder::new()
            .name(format!("gpukit-cpu-stream-{}", queue.id))
            .spawn(move || {
                let _ = started.send(());
                run(q)
            })
            .map_err(|e| CpuError::Spawn(e.to_string()))?;
        // An error means the thread ended before it could say so; its join reports it.
        let _ = running.recv();
        let id = handle.thread().id();
        Ok(CpuStream {
            queue,
            capture: Mutex::new(None),
            capturing: std::sync::atomic::AtomicBool::new(false),
            worker: Some((handle, id)),
            priority,
            #[cfg(feature = "fault-injection")]
            live: None,
        })
    }

    /// The priority the stream was created with. The CPU backend records it; its worker
    /// threads all run at the operating system's normal priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// Closes the queue, lets the worker finish what was queued, and returns any error
    /// nobody was told about.
    pub(crate) fn shutdown(&mut self) -> Result<(), Error> {
        self.queue.close();
        if let Some((handle, id)) = self.worker.take() {
            // A worker cannot join itself; it exits by itself once the queue is drained.
            if std::thread::current().id() != id && handle.join().is_err() {
                return Err(Error::Backend {
                    backend: "cpu",
                    call: "join stream worker",
                    message: "the worker thread panicked outside a task".into(),
                });
            }
        }
        self.queue.take_error()
    }
}

impl std::fmt::Debug for CpuStream {
    /// The queue's id, priority, and tasks queued and finished so far (read from counters:
    /// never blocks).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuStream")
            .field("queue", &self.queue.id)
            .field("priority", &self.priority)
            .field("queued", &self.queue.tail())
            .field("finished", &self.queue.finished())
            .finish_non_exhaustive()
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        // Reached only when the stream was not destroyed through the backend (which reports
        // the error); a plain drop has nobody to report to.
        let _ = self.shutdown();
    }
}

/// A position in a queue, and when the queue reached it (timing events only).
pub struct CpuEvent {
    pub(crate) queue: Arc<Queue>,
    pub(crate) seq: u64,
    pub(crate) stamp: Option<Arc<OnceLock<Instant>>>,
}

impl std::fmt::Debug for CpuEvent {
    /// The queue and position it marks, whether it takes a time stamp, and whether the
    /// queue has passed it (never blocks).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuEvent")
            .field("queue", &self.queue.id)
            .field("seq", &self.seq)
            .field("timing", &self.stamp.is_some())
            .field("done", &self.is_done())
            .finish()
    }
}

impl CpuEvent {
    pub(crate) fn record(stream: &CpuStream, timing: bool) -> Result<CpuEvent, Error> {
        let queue = stream.queue.clone();
        if !timing {
            let seq = queue.tail();
            return Ok(CpuEvent {
                queue,
                seq,
                stamp: None,
            });
        }
        let stamp = Arc::new(OnceLock::new());
        let s = stamp.clone();
        let seq = queue.push(Task::new(move || {
            let _ = s.set(Instant::now());
            Ok(())
        }))?;
        Ok(CpuEvent {
            queue,
            seq,
            stamp: Some(stamp),
        })
    }

    pub(crate) fn is_done(&self) -> bool {
        self.queue.is_done(self.seq)
    }

    pub(crate) fn wait(&self) {
        self.queue.wait_for(self.seq)
    }

    /// Makes `stream` wait for this event.
    pub(crate) fn wait_on(&self, stream: &CpuStream) -> Result<(), Error> {
        if Arc::ptr_eq(&self.queue, &stream.queue) || self.is_done() {
            // Already in order (same queue) or already passed.
            return Ok(());
        }
        let queue = self.queue.clone();
        let seq = self.seq;
        stream.queue.push(Task::new(move || {
            queue.wait_for(seq);
            Ok(())
        }))?;
        Ok(())
    }

    pub(crate) fn time(&self) -> Result<Instant, CpuError> {
        self.stamp
            .as_ref()
            .and_then(|s| s.get().copied())
            .ok_or(CpuError::NotTiming)
    }
}

#[cfg(test)]
mod tests {
    //! The queue semantics the rest of the backend builds on, on the crate's own types.

    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use gpukit_core::Backend;

    use super::*;

    fn stream() -> CpuStream {
        CpuStream::spawn(0).expect("start a stream worker")
    }

    fn task(f: impl Fn() + Send + 'static) -> Task {
        Task::new(move || {
            f();
            Ok(())
        })
    }

    /// Blocks until every task queued so far on `s` has finished.
    fn drain(s: &CpuStream) {
        s.queue.wait_for(s.queue.tail());
    }

    /// A latch a task can block on until the test opens it.
    #[derive(Clone, Default)]
    struct Gate(Arc<(Mutex<bool>, Condvar)>);

    /// Opens its gate when dropped, so that a failed assertion cannot leave a worker
    /// blocked (and the stream's drop joining it forever). Declare it after the stream.
    struct OpenOnDrop(Gate);

    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    impl Gate {
        fn open(&self) {
            *self.0 .0.lock().unwrap() = true;
            self.0 .1.notify_all();
        }

        fn wait(&self) {
            let mut open = self.0 .0.lock().unwrap();
            while !*open {
                open = self.0 .1.wait(open).unwrap();
            }
        }
    }

    #[test]
    fn tasks_on_one_stream_run_in_queue_order() {
        let s = stream();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..200u64 {
            let log = log.clone();
            let seq = s
                .queue
                .push(task(move || log.lock().unwrap().push(i)))
                .unwrap();
            assert_eq!(seq, i + 1, "sequence numbers count the tasks queued");
        }
        assert_eq!(s.queue.tail(), 200);
        drain(&s);
        assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
        assert!(s.queue.is_done(200));
        assert!(s.queue.take_error().is_ok());
    }

    #[test]
    fn an_event_completes_only_after_the_tasks_before_it() {
        let s = stream();
        let gate = Gate::default();
        let _open = OpenOnDrop(gate.clone());
        let ran = Arc::new(AtomicBool::new(false));
        let (g, r) = (gate.clone(), ran.clone());
        s.queue
            .push(task(move || {
                g.wait();
                r.store(true, Ordering::SeqCst);
            }))
            .unwrap();
        let plain = CpuEvent::record(&s, false).unwrap();
        let timed = CpuEvent::record(&s, true).unwrap();
        assert!(
            !plain.is_done() && !timed.is_done(),
            "the task before is blocked"
        );
        assert!(
            matches!(timed.time(), Err(CpuError::NotTiming)),
            "no time before the stream reaches the event"
        );
        gate.open();
        plain.wait();
        assert!(
            ran.load(Ordering::SeqCst),
            "event passed before the task finished"
        );
        timed.wait();
        assert!(timed.is_done() && timed.time().is_ok());
        assert!(
            matches!(plain.time(), Err(CpuError::NotTiming)),
            "an event recorded without timing never has a time"
        );

        // An event on a stream with nothing queued has completed already.
        let idle = stream();
        let e = CpuEvent::record(&idle, false).unwrap();
        assert!(e.is_done());
        e.wait();
    }

    #[test]
    fn a_stream_waiting_on_an_event_runs_later_tasks_after_it() {
        for timing in [false, true] {
            let (a, b) = (stream(), stream());
            let finished = Arc::new(AtomicBool::new(false));
            let f = finished.clone();
            a.queue
                .push(task(move || {
                    std::thread::sleep(Duration::from_millis(50));
                    f.store(true, Ordering::SeqCst);
                }))
                .unwrap();
            let e = CpuEvent::record(&a, timing).unwrap();
            e.wait_on(&b).unwrap();
            let seen = Arc::new(Mutex::new(None));
            let s = seen.clone();
            b.queue
                .push(task(move || {
                    *s.lock().unwrap() = Some(finished.load(Ordering::SeqCst));
                }))
                .unwrap();
            drain(&b);
            assert_eq!(
                *seen.lock().unwrap(),
                Some(true),
                "B's task ran before A's event (timing: {timing})"
            );
        }
    }

    #[test]
    fn waits_that_are_already_satisfied_queue_nothing() {
        let (a, b) = (stream(), stream());
        a.queue.push(task(|| ())).unwrap();
        drain(&a);
        let passed = CpuEvent::record(&a, false).unwrap();
        passed.wait_on(&b).unwrap();
        assert_eq!(b.queue.tail(), 0, "a passed event needs no waiting task");

        // An event of the stream itself is already in order.
        let gate = Gate::default();
        let _open = OpenOnDrop(gate.clone());
        let g = gate.clone();
        b.queue.push(task(move || g.wait())).unwrap();
        let own = CpuEvent::record(&b, false).unwrap();
        own.wait_on(&b).unwrap();
        assert_eq!(
            b.queue.tail(),
            1,
            "waiting on the stream's own event queues nothing"
        );
        gate.open();
        drain(&b);
    }

    #[test]
    fn timing_events_measure_the_work_between_them() {
        let backend = crate::CpuBackend::new().unwrap();
        let s = stream();
        let start = CpuEvent::record(&s, true).unwrap();
        s.queue
            .push(task(|| std::thread::sleep(Duration::from_millis(20))))
            .unwrap();
        let end = CpuEvent::record(&s, true).unwrap();
        end.wait();
        assert!(start.is_done());
        let ms = backend.event_elapsed_ms(&start, &end).unwrap();
        assert!(ms >= 15.0, "{ms} ms measured around a 20 ms task");
        let back = backend.event_elapsed_ms(&end, &start).unwrap();
        assert_eq!(back, -ms, "reversed events give the negative time");
    }

    #[test]
    fn a_panicking_task_is_reported_once_and_the_worker_keeps_going() {
        let s = stream();
        s.queue
            .push(Task::new(|| -> Result<(), Error> {
                panic!("task exploded on purpose")
            }))
            .unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        s.queue
            .push(task(move || r.store(true, Ordering::SeqCst)))
            .unwrap();
        drain(&s);
        assert!(ran.load(Ordering::SeqCst), "the task after the panic ran");
        match s.queue.take_error() {
            Err(Error::KernelFailed { message, .. }) => {
                assert!(message.contains("task exploded on purpose"), "{message}")
            }
            other => panic!("expected the panic as KernelFailed, got {other:?}"),
        }
        assert!(s.queue.take_error().is_ok(), "an error is reported once");

        // Only the first unreported error is kept.
        for msg in ["first", "second"] {
            s.queue
                .push(Task::new(move || {
                    Err(Error::Backend {
                        backend: "cpu",
                        call: "test",
                        message: msg.into(),
                    })
                }))
                .unwrap();
        }
        drain(&s);
        match s.queue.take_error() {
            Err(Error::Backend { message, .. }) => assert_eq!(message, "first"),
            other => panic!("expected the first error, got {other:?}"),
        }
        assert!(s.queue.take_error().is_ok());

        // And the stream still works.
        let again = Arc::new(AtomicBool::new(false));
        let a = again.clone();
        s.queue
            .push(task(move || a.store(true, Ordering::SeqCst)))
            .unwrap();
        drain(&s);
        assert!(again.load(Ordering::SeqCst));
    }

    #[test]
    fn shutdown_drains_the_queue_and_returns_the_unreported_error() {
        let mut s = stream();
        let count = Arc::new(AtomicU64::new(0));
        // A slow first task keeps everything after it queued when shutdown starts.
        s.queue
            .push(task(|| std::thread::sleep(Duration::from_millis(20))))
            .unwrap();
        for i in 0..60 {
            if i == 30 {
                s.queue
                    .push(Task::new(|| {
                        Err(Error::Backend {
                            backend: "cpu",
                            call: "test",
                            message: "left unreported".into(),
                        })
                    }))
                    .unwrap();
            }
            let c = count.clone();
            s.queue
                .push(task(move || {
                    c.fetch_add(1, Ordering::SeqCst);
                }))
                .unwrap();
        }
        let r = s.shutdown();
        assert_eq!(count.load(Ordering::SeqCst), 60, "every queued task ran");
        assert!(s.queue.is_done(62));
        match r {
            Err(Error::Backend { message, .. }) => assert_eq!(message, "left unreported"),
            other => panic!("expected the unreported error, got {other:?}"),
        }

        let after = s.queue.push(task(|| ()));
        assert!(
            matches!(
                after,
                Err(Error::Backend {
                    call: "enqueue",
                    ..
                })
            ),
            "pushing after shutdown: {after:?}"
        );
        assert!(
            CpuEvent::record(&s, true).is_err(),
            "a timing event needs a task"
        );
        assert!(
            s.shutdown().is_ok(),
            "a second shutdown has nothing to report"
        );
    }

    #[test]
    fn dropping_a_stream_runs_what_was_queued() {
        let count = Arc::new(AtomicU64::new(0));
        let s = stream();
        s.queue
            .push(task(|| std::thread::sleep(Duration::from_millis(10))))
            .unwrap();
        for _ in 0..20 {
            let c = count.clone();
            s.queue
                .push(task(move || {
                    c.fetch_add(1, Ordering::SeqCst);
                }))
                .unwrap();
        }
        drop(s);
        assert_eq!(count.load(Ordering::SeqCst), 20);
    }

    #[test]
    fn a_wait_on_a_shut_down_stream_still_completes() {
        let mut a = stream();
        let b = stream();
        a.queue
            .push(task(|| std::thread::sleep(Duration::from_millis(10))))
            .unwrap();
        let e = CpuEvent::record(&a, false).unwrap();
        e.wait_on(&b).unwrap();
        assert!(a.shutdown().is_ok());
        drain(&b);
        assert!(e.is_done());
    }
}
