//! Streams as in-order work queues run by a shared pool of worker threads, and events as
//! positions in a queue.
//!
//! Every item gets a sequence number when it is queued (1, 2, ...). The items of a queue
//! run one at a time, in that order, and the queue publishes how many have finished; an
//! event is a (queue, number) pair and has completed when the queue's finished count
//! reaches its number. A stream waiting on an event queues a wait item, which needs no
//! thread: a worker that finds it unmet sets the queue aside, and the other queue lists it
//! again when it gets there. Waits only ever point at work queued before them, so waits
//! can never form a cycle.
//!
//! The [`Pool`] schedules queues the way a GPU schedules streams: a queue with work is
//! listed until a worker takes it. A worker that finishes an item another queue waited for
//! runs that queue next when its own has nothing left, so a chain of dependent work on
//! several streams (upload, compute, download) flows through one thread with no wake-up,
//! while other workers take the other ready queues.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use gpukit_core::{Error, Wake};

use crate::chaos::{self, Access, ChaosQueue, Declared};
use crate::error::CpuError;
pub(crate) use crate::task::Task;

static NEXT_QUEUE: AtomicU64 = AtomicU64::new(1);

/// How long an idle worker, or a host thread waiting for a task, keeps polling before it
/// parks. Handing work to a parked thread costs a wake-up (tens of microseconds on a virtual
/// machine); polling for this long covers the gap between the ops of a loop, and an idle
/// pool parks after it, costing no CPU.
const SPIN: Duration = Duration::from_micros(50);
/// Of [`SPIN`], how long to poll with the CPU's spin hint before yielding the core between
/// polls.
const SPIN_HOT: Duration = Duration::from_micros(10);

/// Threads polling right now, across all streams and contexts of the process.
static SPINNING: AtomicUsize = AtomicUsize::new(0);
/// How many threads may poll at once: one fewer than the machine's cores (at least one), so
/// that pollers never take every core from the threads doing the work (on a 2-core machine a
/// pipeline's loader, the workers and the host thread share two cores). 0 until first read.
static MAX_SPINNING: AtomicUsize = AtomicUsize::new(0);

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn max_spinning() -> usize {
    match MAX_SPINNING.load(Ordering::Relaxed) {
        0 => {
            let n = cores().saturating_sub(1).max(1);
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
        if polls.is_multiple_of(32) {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many items a stream holds before queuing blocks until a worker takes one (as a
/// GPU's launch queue does). The queue is allocated at this size once, so queuing never
/// allocates.
pub(crate) const QUEUE_DEPTH: usize = 256;

/// What a queue holds: work, or a wait for another queue to reach a position.
// Items live by value in a ring allocated once per stream; boxing the task would put an
// allocation on every enqueue, which is what storing it inline avoids.
#[allow(clippy::large_enum_variant)]
enum Item {
    /// A task, and under the chaos schedule what it declared.
    Run(Task, Option<Box<Declared>>),
    /// Needs no thread: a worker that finds it unmet at the head sets the queue aside, and
    /// the other queue lists it again once it gets there.
    Wait(Arc<Queue>, u64),
}

/// Items queued and not yet taken, and who may take them.
struct Pending {
    /// At most [`QUEUE_DEPTH`], in storage allocated once.
    items: VecDeque<Item>,
    /// A thread waits on [`Queue::space`] for the queue to drop below [`QUEUE_DEPTH`].
    full: bool,
    /// No more items are accepted.
    closed: bool,
    /// A thread runs the queue's items right now (a pool worker, or the caller of
    /// [`Queue::run_or_push`] for one short task); only it takes items, so they run one at
    /// a time, in order.
    owned: bool,
    /// The queue is in the pool's ready list (or handed to a worker to run next).
    listed: bool,
    /// The head is a wait the other queue has not reached; that queue lists this one when
    /// it does.
    blocked: bool,
}

/// A stream's queue: what events and waiting streams look at. The pool's workers run it.
pub(crate) struct Queue {
    id: u64,
    pending: Mutex<Pending>,
    /// Where a thread queuing on a full queue waits for a worker to take an item.
    space: Condvar,
    /// Items queued so far; the last one's sequence number.
    queued: AtomicU64,
    /// Items finished so far.
    finished: AtomicU64,
    /// The first error a task raised that nobody has been told about yet. Set before the
    /// task counts as finished, so whoever sees it finished sees its error.
    error: Mutex<Option<Error>>,
    /// Host threads parked on `changed` (a finishing task must wake them).
    waiters: AtomicUsize,
    done: Mutex<()>,
    changed: Condvar,
    /// Who waits for this queue to finish a number of items.
    dependents: Mutex<Dependents>,
    /// The chaos schedule's part ([`crate::chaos`]); `None` under the default schedule.
    chaos: Option<ChaosQueue>,
}

/// What waits for a queue to reach a position.
struct Dependents {
    /// Queues whose head waits: (queue, number of items).
    queues: Vec<(Arc<Queue>, u64)>,
    /// Callbacks ([`Queue::notify`]): (number of items, callback).
    wakes: Vec<(u64, Wake)>,
}

/// What a finished item releases next.
enum Released {
    Queue(Arc<Queue>),
    Wake(Wake),
}

thread_local! {
    /// The queue whose item this thread is running (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// On a pool worker: a queue one of its items just unblocked, which the worker runs
    /// next if its own queue has nothing left (no other thread needs waking for it).
    static HANDOFF: RefCell<Option<Arc<Queue>>> = const { RefCell::new(None) };
    /// Whether this thread is a pool worker.
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as running `queue`'s items until dropped.
struct Running(u64);

impl Running {
    fn enter(queue: u64) -> Running {
        Running(CURRENT.replace(queue))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        CURRENT.set(self.0);
    }
}

impl Queue {
    fn new(chaos: Option<ChaosQueue>) -> Arc<Queue> {
        Arc::new(Queue {
            id: NEXT_QUEUE.fetch_add(1, Ordering::Relaxed),
            pending: Mutex::new(Pending {
                items: VecDeque::with_capacity(QUEUE_DEPTH),
                full: false,
                closed: false,
                owned: false,
                listed: false,
                blocked: false,
            }),
            space: Condvar::new(),
            queued: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            error: Mutex::new(None),
            waiters: AtomicUsize::new(0),
            done: Mutex::new(()),
            changed: Condvar::new(),
            dependents: Mutex::new(Dependents {
                queues: Vec::with_capacity(4),
                wakes: Vec::new(),
            }),
            chaos,
        })
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        lock(&self.pending)
    }

    /// Queues a task and returns its sequence number; waits while the queue is full.
    /// `accesses` says what the task reads and writes (asked only under the chaos
    /// schedule).
    pub(crate) fn push_with(
        self: &Arc<Self>,
        task: Task,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<u64, Error> {
        self.push_item(Item::Run(task, None), accesses)
    }

    /// [`Queue::push_with`] a task that declares no memory (a time stamp, a test's task).
    pub(crate) fn push(self: &Arc<Self>, task: Task) -> Result<u64, Error> {
        self.push_with(task, Vec::new)
    }

    fn push_item(
        self: &Arc<Self>,
        item: Item,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<u64, Error> {
        // The clock of the item a wait waits for, taken before this queue's lock (two
        // queues waiting on each other's items never hold both clocks).
        let waited = match (&self.chaos, &item) {
            (Some(_), Item::Wait(other, n)) => {
                other.chaos.as_ref().map(|c| c.clock_at(other.id, *n))
            }
            _ => None,
        };
        let p = self.open_slot()?;
        self.push_locked(p, item, waited, accesses)
    }

    /// [`Queue::push_item`] with the queue locked by [`Queue::open_slot`] (and the clock of
    /// the item a wait waits for, under the chaos schedule, taken before the lock).
    fn push_locked(
        self: &Arc<Self>,
        mut p: MutexGuard<'_, Pending>,
        mut item: Item,
        waited: Option<crate::chaos::Clock>,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<u64, Error> {
        let seq = self.queued.load(Ordering::Relaxed) + 1;
        if let Some(c) = &self.chaos {
            match &mut item {
                Item::Run(_, declared) => *declared = Some(c.declare(self.id, seq, accesses())),
                Item::Wait(..) => c.wait(self.id, seq, &waited.unwrap_or_default()),
            }
        }
        p.items.push_back(item);
        self.queued.store(seq, Ordering::Release);
        // An owner runs it after what it runs now; a blocked queue is listed when unblocked.
        let list = !(p.owned || p.listed || p.blocked);
        p.listed |= list;
        drop(p);
        if list {
            pool().ready(self.clone());
        }
        Ok(seq)
    }

    /// Runs a short task on the calling thread when the stream is idle (nothing queued or
    /// running), else queues it. Running it in place keeps the stream's semantics: it takes
    /// the next position in the queue, nothing queued after it starts until it has
    /// finished, and it finishes (error and all) exactly as if a worker had run it; the
    /// caller only returns after the task instead of before, which for a short task costs
    /// less than handing it to another thread.
    /// The chaos schedule runs nothing in place.
    pub(crate) fn run_or_push(
        self: &Arc<Self>,
        task: Task,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<u64, Error> {
        // The task is dropped once run, before the item finishes (as a worker drops it).
        match self.run_here(task, |task| run_task(&task)) {
            Ok(done) => done,
            Err(task) => self.push_with(task, accesses),
        }
    }

    /// [`Queue::run_here`], or when the stream is not idle, queues the task `task(item)`
    /// builds, deciding under one lock of the queue.
    pub(crate) fn run_here_or_push<T>(
        self: &Arc<Self>,
        item: T,
        run: impl FnOnce(T) -> Result<(), Error>,
        task: impl FnOnce(T) -> Task,
        accesses: impl FnOnce() -> Vec<Access>,
    ) -> Result<u64, Error> {
        let p = self.open_slot()?;
        if self.chaos.is_some() || !p.items.is_empty() || p.owned || p.listed || p.blocked {
            return self.push_locked(p, Item::Run(task(item), None), None, accesses);
        }
        self.run_owned(p, item, run)
    }

    /// Runs `run(item)` as the stream's next item, on the calling thread, when the stream is
    /// idle (as [`Queue::run_or_push`] runs a task, `run` catching its own panics); gives
    /// `item` back, not run, when it is not (or under the chaos schedule): the caller queues
    /// the work instead.
    pub(crate) fn run_here<T>(
        self: &Arc<Self>,
        item: T,
        run: impl FnOnce(T) -> Result<(), Error>,
    ) -> Result<Result<u64, Error>, T> {
        if self.chaos.is_some() {
            return Err(item);
        }
        let p = match self.open_slot() {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        if !p.items.is_empty() || p.owned || p.listed || p.blocked {
            return Err(item);
        }
        Ok(self.run_owned(p, item, run))
    }

    /// Runs `run(item)` on the calling thread as the next item of the idle queue `p` locks.
    fn run_owned<T>(
        self: &Arc<Self>,
        mut p: MutexGuard<'_, Pending>,
        item: T,
        run: impl FnOnce(T) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        p.owned = true;
        let seq = self.queued.load(Ordering::Relaxed) + 1;
        self.queued.store(seq, Ordering::Release);
        drop(p);
        let result = {
            let _running = Running::enter(self.id);
            run(item)
        };
        self.finish(result);
        // What was queued meanwhile goes to the pool.
        let mut p = self.pending();
        p.owned = false;
        let list = !p.items.is_empty() && !p.blocked && !p.listed;
        p.listed |= list;
        drop(p);
        if list {
            pool().ready(self.clone());
        }
        Ok(seq)
    }

    /// The queue locked with room for an item: waits while it is full; an error once the
    /// stream is destroyed.
    fn open_slot(&self) -> Result<MutexGuard<'_, Pending>, Error> {
        let mut p = self.pending();
        while p.items.len() >= QUEUE_DEPTH && !p.closed {
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

    /// The sequence number of the last item queued so far.
    pub(crate) fn tail(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    pub(crate) fn is_done(&self, seq: u64) -> bool {
        self.finished() >= seq
    }

    /// [`Queue::is_done`] asked by a host thread (a query, or a wait found met): under the
    /// chaos schedule, what it saw finish is ordered before all it queues next.
    pub(crate) fn seen_done(&self, seq: u64) -> bool {
        let done = self.is_done(seq);
        if done {
            self.seen(seq);
        }
        done
    }

    /// A host thread has seen items up to `seq` finish (chaos schedule only).
    fn seen(&self, seq: u64) {
        if let Some(c) = &self.chaos {
            c.observed(self.id, seq);
        }
    }

    /// How many items have finished.
    fn finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// Blocks until item `seq` has finished: polls briefly, then parks.
    pub(crate) fn wait_for(&self, seq: u64) {
        self.wait_until(seq);
        self.seen(seq);
    }

    fn wait_until(&self, seq: u64) {
        if self.is_done(seq) || spin_until(|| self.is_done(seq)) {
            return;
        }
        // Announce the wait before the last check; `finish` reads `waiters` after counting
        // (both sequentially consistent), so either this check sees the count or `finish`
        // sees the waiter and wakes it under `done`.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.done);
        while self.finished.load(Ordering::SeqCst) < seq {
            g = self.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Takes the unreported error, if any.
    pub(crate) fn take_error(&self) -> Result<(), Error> {
        match lock(&self.error).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Counts one more item finished (after recording its error), then wakes the host
    /// threads and lists the queues waiting for that.
    fn finish(&self, result: Result<(), Error>) {
        if let Err(e) = result {
            lock(&self.error).get_or_insert(e);
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders the wake-up after a waiter's last check.
            drop(lock(&self.done));
            self.changed.notify_all();
        }
        loop {
            // One at a time, so that no other queue's lock is taken, and no callback runs,
            // under this one.
            let next = {
                let mut d = lock(&self.dependents);
                let done = self.finished();
                if let Some(i) = d.wakes.iter().position(|(seq, _)| *seq <= done) {
                    Released::Wake(d.wakes.swap_remove(i).1)
                } else {
                    match d.queues.iter().position(|&(_, seq)| seq <= done) {
                        Some(i) => Released::Queue(d.queues.swap_remove(i).0),
                        None => break,
                    }
                }
            };
            match next {
                Released::Queue(q) => q.unblock(),
                Released::Wake(wake) => wake(),
            }
        }
    }

    /// Calls `wake` once the queue has finished `seq` items: on the thread that finishes
    /// the last of them, or at once (on the calling thread) if it has.
    pub(crate) fn notify(&self, seq: u64, wake: Wake) {
        let mut d = lock(&self.dependents);
        // Checked under the lock `finish` takes after counting (as in `register`).
        if self.is_done(seq) {
            drop(d);
            wake();
            return;
        }
        d.wakes.push((seq, wake));
    }

    /// Registers `waiter` to be listed once this queue has finished `seq` items; false
    /// (nothing registered) if it has already.
    fn register(&self, waiter: &Arc<Queue>, seq: u64) -> bool {
        let mut d = lock(&self.dependents);
        // Checked under the lock that `finish` takes after counting: either this sees the
        // count, or `finish` sees the registration.
        if self.is_done(seq) {
            return false;
        }
        d.queues.push((waiter.clone(), seq));
        true
    }

    /// The wait at the head is met: lists the queue, or hands it to the calling worker.
    fn unblock(self: Arc<Self>) {
        let mut p = self.pending();
        p.blocked = false;
        let list = !p.owned && !p.listed;
        p.listed |= list;
        drop(p);
        if !list {
            return;
        }
        let this = Some(self);
        // The chaos schedule hands nothing over: the queue goes to the ready list.
        let rest = if WORKER.get() && this.as_ref().is_some_and(|q| q.chaos.is_none()) {
            HANDOFF.with(|h| {
                let mut h = h.borrow_mut();
                if h.is_none() {
                    *h = this;
                    None
                } else {
                    this
                }
            })
        } else {
            this
        };
        if let Some(q) = rest {
            pool().ready(q);
        }
    }

    /// Runs the queue's items in order on the calling worker, which owns it (taken from
    /// the ready list). Returns when the queue is empty or its head waits on another queue,
    /// with the queue this thread should run next, if one was handed to it.
    fn drive(self: &Arc<Self>) -> Option<Arc<Queue>> {
        let _running = Running::enter(self.id);
        let mut p = self.pending();
        p.listed = false;
        p.owned = true;
        drop(p);
        loop {
            let mut p = self.pending();
            let task = match p.items.pop_front() {
                None => {
                    p.owned = false;
                    return HANDOFF.with(|h| h.borrow_mut().take());
                }
                Some(Item::Wait(other, seq)) => {
                    if other.register(self, seq) {
                        p.items.push_front(Item::Wait(other, seq));
                        p.blocked = true;
                        p.owned = false;
                        return HANDOFF.with(|h| h.borrow_mut().take());
                    }
                    None
                }
                Some(Item::Run(task, declared)) => Some((task, declared)),
            };
            if std::mem::take(&mut p.full) {
                self.space.notify_all();
            }
            drop(p);
            let result = match &task {
                Some((task, declared)) => self.run_item(task, declared.as_deref()),
                None => Ok(()),
            };
            drop(task);
            // Counted (and its error recorded) before the next item may start, so that the
            // finished count only ever covers items that have fully finished.
            self.finish(result);
            // A queue this item unblocked: run it next if this one has nothing left, else
            // give it to another worker.
            if let Some(next) = HANDOFF.with(|h| h.borrow_mut().take()) {
                let mut p = self.pending();
                if p.items.is_empty() {
                    p.owned = false;
                    return Some(next);
                }
                drop(p);
                pool().ready(next);
            }
        }
    }

    /// Runs a task taken from the queue; under the chaos schedule, after its pause and the
    /// race check (a race found fails the task once it has run).
    fn run_item(&self, task: &Task, declared: Option<&Declared>) -> Result<(), Error> {
        let Some(c) = &self.chaos else {
            return run_task(task);
        };
        let seq = self.finished() + 1;
        chaos::pause_before(c.seed, c.ordinal, seq);
        let Some(d) = declared else {
            return run_task(task);
        };
        let races = chaos::check(d, c.seed);
        let result = {
            let _running = chaos::Running::enter(d);
            run_task(task)
        };
        match result {
            Ok(()) if !races.is_empty() => Err(chaos::race_error(&races)),
            r => r,
        }
    }

    /// Stops accepting items; those queued still run.
    fn close(&self) {
        let mut p = self.pending();
        p.closed = true;
        drop(p);
        self.space.notify_all();
    }
}

/// The worker threads every stream of the process shares, like a GPU's schedulers: a
/// queue with work is in the ready list until a worker takes it and runs its items in
/// order. A worker that finishes an item another queue was waiting for runs that queue
/// next when its own is done, so a chain of dependent work (upload, compute, download)
/// flows through one thread without a wake-up. Workers are started as needed, at most one
/// per live stream (so every stream with work can always have one, whatever the others'
/// tasks block on), eagerly up to the number of cores; idle ones poll briefly, then park,
/// and end when there are more of them than streams.
struct Pool {
    state: Mutex<PoolState>,
    /// Where idle workers park.
    work: Condvar,
    /// The ready list's length, read without the lock by polling workers.
    listed: AtomicUsize,
}

struct PoolState {
    ready: VecDeque<Arc<Queue>>,
    workers: usize,
    /// Workers without a queue: polling or parked (a worker being started counts).
    idle: usize,
    /// Workers parked and not yet woken.
    parked: usize,
    /// Wake-ups given and not yet taken by a parked worker (one each: a spurious wake-up
    /// finds none and parks again).
    wakeups: usize,
    /// Live streams: the most workers that can be busy at once.
    streams: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState {
            ready: VecDeque::with_capacity(64),
            workers: 0,
            idle: 0,
            parked: 0,
            wakeups: 0,
            streams: 0,
        }),
        work: Condvar::new(),
        listed: AtomicUsize::new(0),
    })
}

impl Drop for Queue {
    fn drop(&mut self) {
        if let Some(c) = &self.chaos {
            c.retire(self.id);
        }
    }
}

impl Pool {
    /// Puts `queue` (marked listed) on the ready list and makes sure a worker will take
    /// it: one polling already, a parked one woken, or a new one. A chaos queue goes in at
    /// a random position.
    fn ready(&'static self, queue: Arc<Queue>) {
        let mut s = lock(&self.state);
        match &queue.chaos {
            None => s.ready.push_back(queue),
            Some(c) => {
                let at = chaos::ready_position(c.seed, s.ready.len());
                s.ready.insert(at, queue);
            }
        }
        self.listed.fetch_add(1, Ordering::Release);
        // Idle workers not parked (polling, or woken already) take from the list.
        let polling = s.idle - s.parked;
        let short = s.ready.len() > polling;
        let wake = short && s.parked > 0;
        let start = short && !wake && s.workers < s.streams;
        if wake {
            s.parked -= 1;
            s.wakeups += 1;
        }
        if start {
            s.workers += 1;
            s.idle += 1;
        }
        drop(s);
        if wake {
            self.work.notify_one();
        }
        // Without a new worker the queue waits for a busy one to finish.
        if start && self.start_worker().is_err() {
            let mut s = lock(&self.state);
            s.workers -= 1;
            s.idle -= 1;
        }
    }

    /// A new stream: one more worker may be needed; started now while there are fewer
    /// than the cores, so that the stream's first work finds one.
    fn add_stream(&'static self) -> Result<(), CpuError> {
        let mut s = lock(&self.state);
        s.streams += 1;
        let start = s.workers < s.streams.min(cores());
        if start {
            s.workers += 1;
            s.idle += 1;
        }
        drop(s);
        if start {
            if let Err(e) = self.start_worker() {
                let mut s = lock(&self.state);
                s.workers -= 1;
                s.idle -= 1;
                s.streams -= 1;
                return Err(e);
            }
        }
        Ok(())
    }

    /// A stream gone: parked workers beyond the streams left end.
    fn remove_stream(&self) {
        let mut s = lock(&self.state);
        s.streams -= 1;
        let excess = (s.workers.saturating_sub(s.streams)).min(s.parked);
        s.parked -= excess;
        s.wakeups += excess;
        drop(s);
        if excess > 0 {
            self.work.notify_all();
        }
    }

    /// Starts a worker (already counted, as idle) and returns once it runs.
    fn start_worker(&'static self) -> Result<(), CpuError> {
        let (started, running) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("gpukit-cpu-worker".into())
            .spawn(move || {
                WORKER.set(true);
                let _ = started.send(());
                self.work_loop();
            })
            .map_err(|e| CpuError::Spawn(e.to_string()))?;
        // An error means the thread ended before it could say so.
        let _ = running.recv();
        Ok(())
    }

    fn work_loop(&'static self) {
        // A new worker is counted idle already.
        let mut counted = true;
        let mut next = None;
        loop {
            let queue = match next.take() {
                Some(q) => q,
                None => match self.take(std::mem::take(&mut counted)) {
                    Some(q) => q,
                    None => return,
                },
            };
            next = queue.drive();
        }
    }

    /// The next ready queue, for the calling worker to run; `None` when the worker should
    /// end. `counted`: the worker is counted idle already.
    fn take(&self, counted: bool) -> Option<Arc<Queue>> {
        let mut s = lock(&self.state);
        if !counted {
            s.idle += 1;
        }
        loop {
            if let Some(q) = s.ready.pop_front() {
                self.listed.fetch_sub(1, Ordering::Release);
                s.idle -= 1;
                return Some(q);
            }
            if s.workers > s.streams {
                s.workers -= 1;
                s.idle -= 1;
                return None;
            }
            drop(s);
            let seen = spin_until(|| self.listed.load(Ordering::Acquire) > 0);
            s = lock(&self.state);
            if seen || !s.ready.is_empty() {
                continue;
            }
            // Whoever wakes this worker takes it off `parked` and leaves a wake-up.
            s.parked += 1;
            loop {
                s = self.work.wait(s).unwrap_or_else(|e| e.into_inner());
                if s.wakeups > 0 {
                    s.wakeups -= 1;
                    break;
                }
            }
        }
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

/// A stream: a queue the pool's workers run.
pub struct CpuStream {
    pub(crate) queue: Arc<Queue>,
    /// The tasks recorded while the stream captures a graph (`None`: not capturing), and
    /// under the chaos schedule the ranges they declared (the graph's launch declares them).
    pub(crate) capture: Mutex<Option<(Vec<Task>, Vec<Access>)>>,
    /// Whether `capture` holds a recording (checked without the lock on every push).
    pub(crate) capturing: std::sync::atomic::AtomicBool,
    /// Counted among the pool's streams (until shut down).
    counted: bool,
    priority: i32,
    /// Counts the stream as live until it is dropped (after its queue was drained).
    #[cfg(feature = "fault-injection")]
    pub(crate) live: Option<crate::fault::Live>,
}

impl CpuStream {
    pub(crate) fn spawn(priority: i32, schedule: chaos::Schedule) -> Result<CpuStream, CpuError> {
        pool().add_stream()?;
        Ok(CpuStream {
            queue: Queue::new(schedule.seed().map(ChaosQueue::new)),
            capture: Mutex::new(None),
            capturing: std::sync::atomic::AtomicBool::new(false),
            counted: true,
            priority,
            #[cfg(feature = "fault-injection")]
            live: None,
        })
    }

    /// Whether the stream runs the chaos schedule (its tasks declare their ranges).
    pub(crate) fn is_chaos(&self) -> bool {
        self.queue.chaos.is_some()
    }

    /// The priority the stream was created with. The CPU backend records it; its worker
    /// threads all run at the operating system's normal priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// Closes the queue, waits for what was queued to run, and returns any error nobody
    /// was told about.
    pub(crate) fn shutdown(&mut self) -> Result<(), Error> {
        self.queue.close();
        // A task of this very stream may drop it: the items after it still run, later.
        if CURRENT.get() != self.queue.id {
            self.queue.wait_for(self.queue.tail());
        }
        if std::mem::take(&mut self.counted) {
            pool().remove_stream();
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
            .field("done", &self.queue.is_done(self.seq))
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

    /// [`CpuEvent::record`] without timing, into this event: its position moves to the
    /// stream's current end (a new event where it was recorded on another stream, or with
    /// timing).
    pub(crate) fn record_again(&mut self, stream: &CpuStream) -> Result<(), Error> {
        if self.stamp.is_none() && Arc::ptr_eq(&self.queue, &stream.queue) {
            self.seq = self.queue.tail();
            return Ok(());
        }
        *self = Self::record(stream, false)?;
        Ok(())
    }

    pub(crate) fn is_done(&self) -> bool {
        self.queue.seen_done(self.seq)
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
        if gpukit_core::plant::is_planted(gpukit_core::plant::Bug::StreamWaitDropped) {
            return Ok(());
        }
        stream
            .queue
            .push_item(Item::Wait(self.queue.clone(), self.seq), Vec::new)?;
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
mod tests;
