//! Streams and events from Python: `ctx.stream()` makes a stream, `with s:` makes it the
//! current stream of its context for the calling thread (ops of that context queue there
//! unless given `stream=`), `s.record()` an event another stream can `wait` for.

use std::cell::RefCell;
use std::ops::Deref;
use std::sync::Arc;

use gpukit::{AnyBackend, Element, GpuArray};
use pyo3::prelude::*;

use crate::error::{py_err, value_err};

/// The library's stream.
pub(crate) type CoreStream = gpukit::core::Stream<AnyBackend>;

/// Where an op runs: the stream its work is queued on (which the op methods deref to) and
/// the context that allocates its results.
pub(crate) struct On<'a> {
    ctx: &'a gpukit::Context,
    s: &'a CoreStream,
}

impl<'a> On<'a> {
    pub(crate) fn new(ctx: &'a gpukit::Context, s: &'a CoreStream) -> On<'a> {
        On { ctx, s }
    }

    /// A new array of the context's (uninitialised: every op that makes one writes it).
    pub(crate) fn alloc<T: Element>(&self, len: usize) -> gpukit::Result<GpuArray<T>> {
        self.ctx.alloc::<T>(len)
    }
}

impl Deref for On<'_> {
    type Target = CoreStream;

    fn deref(&self) -> &CoreStream {
        self.s
    }
}

thread_local! {
    /// The streams `with` has made current on this thread, innermost last.
    static CURRENT: RefCell<Vec<CoreStream>> = const { RefCell::new(Vec::new()) };
}

/// The stream an op of `ctx` queues on: `stream` where given (of `ctx`, else `ValueError`
/// raised by `call`), else the innermost `with` stream of `ctx` on this thread, else the
/// context's default stream.
pub(crate) fn queue(
    call: &str,
    ctx: &gpukit::Context,
    stream: Option<&Stream>,
) -> PyResult<CoreStream> {
    if let Some(s) = stream {
        if s.s.context_id() != ctx.id() {
            return Err(value_err(
                call,
                "`stream` is a stream of another gpukit.Context (each op runs on its arrays' \
                 context)",
            ));
        }
        return Ok(s.s.clone());
    }
    let current = CURRENT.with(|c| {
        c.borrow()
            .iter()
            .rev()
            .find(|s| s.context_id() == ctx.id())
            .cloned()
    });
    Ok(current.unwrap_or_else(|| ctx.default_stream().clone()))
}

/// A stream of a context: an in-order queue of work, run concurrently with other streams'.
/// Ops take one as `stream=`, or use the stream made current by `with s:` on the calling
/// thread. gpukit orders work on arrays across streams (a read after another stream's
/// write waits for it), as in the Rust library.
#[pyclass(module = "gpukit", name = "Stream", frozen)]
#[derive(Debug)]
pub struct Stream {
    pub(crate) ctx: gpukit::Context,
    pub(crate) s: CoreStream,
}

impl Stream {
    pub(crate) fn new(ctx: &gpukit::Context, s: CoreStream) -> Stream {
        Stream {
            ctx: ctx.clone(),
            s,
        }
    }
}

#[pymethods]
impl Stream {
    /// Waits (the GIL released) until the work queued on this stream has finished; raises
    /// the first error that work raised.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.s.sync())
            .map_err(|e| py_err("Stream.synchronize", e))
    }

    /// Whether the work queued so far has finished (without waiting).
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.s.query())
            .map_err(|e| py_err("Stream.query", e))
    }

    /// An event at the current end of this stream's queue: done once the work queued so far
    /// is.
    fn record(&self, py: Python<'_>) -> PyResult<Event> {
        let e = py
            .detach(|| self.s.record_event())
            .map_err(|e| py_err("Stream.record", e))?;
        Ok(Event { e: Arc::new(e) })
    }

    /// Makes this stream's later work wait for `event` (on the device: the host does not
    /// wait).
    fn wait(&self, py: Python<'_>, event: &Event) -> PyResult<()> {
        py.detach(|| self.s.wait(&event.e))
            .map_err(|e| py_err("Stream.wait", e))
    }

    /// Makes this the current stream of its context on this thread until the block ends.
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        let s = slf.get().s.clone();
        CURRENT.with(|c| c.borrow_mut().push(s));
        slf
    }

    /// Ends the block: the stream current before it is current again (the block's work
    /// stays queued; `synchronize` waits for it).
    fn __exit__(
        &self,
        _kind: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            if let Some(i) = c.iter().rposition(|s| s.id() == self.s.id()) {
                c.remove(i);
            }
        });
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "gpukit.Stream({}:{}, #{})",
            self.ctx.backend_name(),
            self.ctx.device_id(),
            self.s.id()
        )
    }
}

/// A point in a stream's queue (`Stream.record`): another stream can wait for it, the host
/// can wait for it or ask whether it has passed.
#[pyclass(module = "gpukit", name = "Event", frozen)]
#[derive(Debug)]
pub struct Event {
    e: Arc<gpukit::core::Event<AnyBackend>>,
}

#[pymethods]
impl Event {
    /// Waits (the GIL released) until the work before the event has finished.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.e.sync())
            .map_err(|e| py_err("Event.synchronize", e))
    }

    /// Whether the work before the event has finished (without waiting).
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.e.query())
            .map_err(|e| py_err("Event.query", e))
    }
}
