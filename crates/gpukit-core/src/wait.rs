//! Awaiting device work without blocking a thread: [`Event::wait_async`],
//! [`Stream::synchronize_async`] and `.await` on a [`Pending`] copy, for async programs
//! (a tokio service doing inference, say). Runtime-agnostic: the futures are woken by the
//! backend ([`Backend::notify`]: the CPU backend's worker that finishes the position, a CUDA
//! host function queued after the event, the Vulkan backend's waiter thread, one per device,
//! which polls wgpu), or for a backend without any of these by a thread of gpukit-core's
//! that waits for the event; no runtime thread ever blocks.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};

use crate::backend::{Backend, Wake};
use crate::error::{Error, Rejected, Result};
use crate::host::Pending;
use crate::stream::{Event, Stream};

/// What a woken wait records: whether the event has completed, and whom to wake.
#[derive(Default)]
struct Waiting {
    done: bool,
    waker: Option<Waker>,
}

fn lock(w: &Mutex<Waiting>) -> MutexGuard<'_, Waiting> {
    // Plain assignments only: a panic elsewhere leaves it consistent.
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// The future of [`Event::wait_async`] and [`Stream::synchronize_async`]: ready once the
/// event has completed, with the error the work raised, if any.
#[must_use = "futures do nothing unless awaited"]
pub struct EventFuture<B: Backend> {
    /// The event; `None` once a call failed before there was one (`error`).
    event: Option<Arc<B::Event>>,
    /// An error to return at the first poll.
    error: Option<Error>,
    stream: Stream<B>,
    /// Set once the backend (or a thread) has been asked to wake this future.
    waiting: Option<Arc<Mutex<Waiting>>>,
    /// [`Stream::synchronize_async`]'s: also report the stream's errors, deferred ones and
    /// faults of bounds-checked kernels, as [`Stream::sync`] does.
    stream_errors: bool,
}

impl<B: Backend> std::fmt::Debug for EventFuture<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFuture")
            .field("stream", &self.stream.id())
            .field("registered", &self.waiting.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> EventFuture<B> {
    pub(crate) fn new(event: Arc<B::Event>, stream: Stream<B>, stream_errors: bool) -> Self {
        EventFuture {
            event: Some(event),
            error: None,
            stream,
            waiting: None,
            stream_errors,
        }
    }

    /// A future ready at once with `error`.
    fn failed(error: Error, stream: Stream<B>) -> Self {
        EventFuture {
            event: None,
            error: Some(error),
            stream,
            waiting: None,
            stream_errors: false,
        }
    }

    /// Asks the backend to wake this future once the event has completed (or a thread of
    /// ours, where the backend cannot); returns whether it already has.
    fn register(&mut self, event: &Arc<B::Event>, waker: &Waker) -> Result<bool> {
        let waiting = Arc::new(Mutex::new(Waiting {
            done: false,
            waker: Some(waker.clone()),
        }));
        let w = waiting.clone();
        let wake: Wake = Box::new(move || {
            let waker = {
                let mut g = lock(&w);
                g.done = true;
                g.waker.take()
            };
            if let Some(k) = waker {
                k.wake();
            }
        });
        self.waiting = Some(waiting.clone());
        if let Some(wake) = self.stream.backend().notify(event, wake) {
            let shared = self.stream.shared_arc().clone();
            let event = event.clone();
            std::thread::Builder::new()
                .name("gpukit-wait".into())
                .spawn(move || {
                    // The result is read again by the future (event_sync returns at once).
                    let _ = shared.backend.event_sync(&event);
                    wake();
                })
                .map_err(|e| Error::Backend {
                    backend: self.stream.backend().name(),
                    call: "spawn the thread that waits for an event",
                    message: e.to_string(),
                })?;
        }
        let done = lock(&waiting).done;
        Ok(done)
    }

    /// The result once the event has completed: the work's error, and for a stream's wait
    /// the stream's other errors too. Blocks on nothing (the event has completed): the fault
    /// record of bounds-checked kernels is read only when the stream has no later work and
    /// does not capture (reading it queues a copy and waits for it, which would wait for the
    /// later work, or break the capture); otherwise the next sync or query reports it.
    fn finish(&self, event: &B::Event) -> Result<()> {
        let backend = self.stream.backend();
        backend.event_sync(event)?;
        if self.stream_errors {
            let shared = self.stream.shared_arc();
            shared.check()?;
            if self.stream.is_capturing() {
                return Ok(());
            }
            if backend.stream_query(self.stream.raw())? {
                self.stream.take_faults()?;
            }
        }
        Ok(())
    }
}

impl<B: Backend> Future for EventFuture<B> {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        if let Some(e) = this.error.take() {
            return Poll::Ready(Err(e));
        }
        let Some(event) = this.event.clone() else {
            return Poll::Ready(Ok(()));
        };
        match &this.waiting {
            Some(w) => {
                let mut g = lock(w);
                if !g.done {
                    match &g.waker {
                        Some(k) if k.will_wake(cx.waker()) => {}
                        _ => g.waker = Some(cx.waker().clone()),
                    }
                    return Poll::Pending;
                }
            }
            None => {
                let done = match this.stream.backend().event_query(&event) {
                    Ok(true) => true,
                    Ok(false) => match this.register(&event, cx.waker()) {
                        Ok(done) => done,
                        Err(e) => return Poll::Ready(Err(e)),
                    },
                    Err(e) => return Poll::Ready(Err(e)),
                };
                if !done {
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(this.finish(&event))
    }
}

/// The future of `.await` on a [`Pending`] copy: ready once the copy is done, with the
/// host memory back (inside [`Rejected`] on error, as [`Pending::wait`] gives it).
#[must_use = "futures do nothing unless awaited"]
pub struct PendingFuture<H, B: Backend> {
    pending: Option<Pending<H, B>>,
    wait: Option<EventFuture<B>>,
}

// Nothing here is pinned structurally: the host memory moves out by value when ready.
impl<H, B: Backend> Unpin for PendingFuture<H, B> {}

impl<H, B: Backend> std::fmt::Debug for PendingFuture<H, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingFuture")
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl<H, B: Backend> IntoFuture for Pending<H, B> {
    type Output = std::result::Result<H, Rejected<H>>;
    type IntoFuture = PendingFuture<H, B>;

    /// `.await` on a copy in flight: [`Pending::wait`] without blocking a thread. Dropping
    /// the future before it is ready drops the `Pending`, which waits for the copy (the
    /// memory must outlive it).
    fn into_future(self) -> PendingFuture<H, B> {
        let wait = self
            .event()
            .map(|e| EventFuture::new(e.clone(), self.home().clone(), false));
        PendingFuture {
            pending: Some(self),
            wait,
        }
    }
}

impl<H, B: Backend> Future for PendingFuture<H, B> {
    type Output = std::result::Result<H, Rejected<H>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let result = match &mut this.wait {
            Some(w) => match Pin::new(w).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            },
            None => Ok(()),
        };
        let Some(mut pending) = this.pending.take() else {
            unreachable!("a PendingFuture polled after it was ready");
        };
        let value = pending.take_value();
        Poll::Ready(match result {
            Ok(()) => Ok(value),
            Err(e) => Err(Rejected::new(e, value)),
        })
    }
}

impl<B: Backend> Event<B> {
    /// A future ready once the stream has passed this event, with the error its work
    /// raised, if any: [`Event::sync`] without blocking a thread.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut a = ctx.alloc_zeros::<f32>(1 << 20)?;
    /// ctx.fill(&mut a, 2.0)?;
    /// let done = ctx.record_event()?;
    /// // In an async function: `done.wait_async().await?;`
    /// # let fut = done.wait_async(); drop(fut);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn wait_async(&self) -> EventFuture<B> {
        EventFuture::new(self.raw_arc().clone(), self.stream().clone(), false)
    }
}

impl<B: Backend> Stream<B> {
    /// A future ready once the work queued on this stream so far has finished, with the
    /// errors [`Stream::sync`] returns: `sync` without blocking a thread (later work does
    /// not delay it). On CUDA, where the context has loaded a bounds-checked kernel, its
    /// fault record is read at the end when the stream has no later work and does not
    /// capture (the read is a copy on this stream); otherwise the next [`Stream::sync`] or
    /// [`Stream::query`] reports a fault.
    pub fn synchronize_async(&self) -> EventFuture<B> {
        let event = self
            .inner
            .shared
            .check()
            .and_then(|()| {
                self.not_capturing(
                    "Stream::synchronize_async",
                    "the work queued since the capture began is being recorded, not run",
                )
            })
            .and_then(|()| self.mark());
        match event {
            Ok(e) => EventFuture::new(e, self.clone(), true),
            Err(e) => EventFuture::failed(e, self.clone()),
        }
    }
}
