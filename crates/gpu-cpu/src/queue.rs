//! Streams as in-order work queues, each run by its own worker thread, and events as
//! positions in a queue.
//!
//! Every task gets a sequence number when it is queued (1, 2, ...). The worker runs tasks
//! in that order and publishes how many have finished; an event is a (queue, number) pair
//! and has completed when the queue's finished count reaches its number. A stream waiting
//! on an event queues a task that blocks its worker until then. Waits only ever point at
//! work queued before them, so waits can never form a cycle.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::Instant;

use gpu_core::Error;

use crate::error::CpuError;

pub(crate) type Task = Box<dyn FnOnce() -> Result<(), Error> + Send>;

static NEXT_QUEUE: AtomicU64 = AtomicU64::new(1);

struct Progress {
    finished: u64,
    /// The first error a task raised that nobody has been told about yet.
    error: Option<Error>,
}

/// The shared half of a stream: what events and waiting streams look at.
pub(crate) struct Queue {
    id: u64,
    sender: Mutex<Option<mpsc::Sender<Task>>>,
    queued: AtomicU64,
    progress: Mutex<Progress>,
    changed: Condvar,
}

impl Queue {
    fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a task and returns its sequence number.
    pub(crate) fn push(&self, task: Task) -> Result<u64, Error> {
        let sender = self.sender.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = sender.as_ref() else {
            return Err(Error::Backend {
                backend: "cpu",
                call: "enqueue",
                message: "the stream was destroyed".into(),
            });
        };
        let seq = self.queued.load(Ordering::Relaxed) + 1;
        tx.send(task).map_err(|_| Error::Backend {
            backend: "cpu",
            call: "enqueue",
            message: "the stream's worker thread has exited".into(),
        })?;
        self.queued.store(seq, Ordering::Release);
        Ok(seq)
    }

    /// The sequence number of the last task queued so far.
    pub(crate) fn tail(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    pub(crate) fn is_done(&self, seq: u64) -> bool {
        self.progress().finished >= seq
    }

    /// Blocks until task `seq` has finished.
    pub(crate) fn wait_for(&self, seq: u64) {
        let mut p = self.progress();
        while p.finished < seq {
            p = self.changed.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Takes the unreported error, if any.
    pub(crate) fn take_error(&self) -> Result<(), Error> {
        match self.progress().error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn finish(&self, result: Result<(), Error>) {
        let mut p = self.progress();
        p.finished += 1;
        if let Err(e) = result {
            p.error.get_or_insert(e);
        }
        drop(p);
        self.changed.notify_all();
    }
}

fn run(queue: Arc<Queue>, rx: mpsc::Receiver<Task>) {
    while let Ok(task) = rx.recv() {
        let result = match catch_unwind(AssertUnwindSafe(task)) {
            Ok(r) => r,
            Err(panic) => Err(Error::KernelFailed {
                kernel: "<task>".into(),
                message: panic_message(&*panic),
            }),
        };
        queue.finish(result);
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
    worker: Option<(JoinHandle<()>, ThreadId)>,
    priority: i32,
}

impl CpuStream {
    pub(crate) fn spawn(priority: i32) -> Result<CpuStream, CpuError> {
        let (tx, rx) = mpsc::channel::<Task>();
        let queue = Arc::new(Queue {
            id: NEXT_QUEUE.fetch_add(1, Ordering::Relaxed),
            sender: Mutex::new(Some(tx)),
            queued: AtomicU64::new(0),
            progress: Mutex::new(Progress {
                finished: 0,
                error: None,
            }),
            changed: Condvar::new(),
        });
        let q = queue.clone();
        let handle = std::thread::Builder::new()
            .name(format!("gpu-cpu-stream-{}", queue.id))
            .spawn(move || run(q, rx))
            .map_err(|e| CpuError::Spawn(e.to_string()))?;
        let id = handle.thread().id();
        Ok(CpuStream {
            queue,
            worker: Some((handle, id)),
            priority,
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
        self.queue
            .sender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
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
        let seq = queue.push(Box::new(move || {
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
        stream.queue.push(Box::new(move || {
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
