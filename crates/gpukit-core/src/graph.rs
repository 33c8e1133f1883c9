//! Graph capture and replay ([`Stream::capture`], [`Graph`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::backend::Backend;
use crate::context::Shared;
use crate::error::{Error, Result};
use crate::kernel::FaultRecord;
use crate::stream::Stream;
use crate::track::{Access, Alloc, SliceRef};

/// The allocations a graph's work uses (each kept alive), as written if any piece writes it.
type GraphUses<B> = Vec<(Arc<Alloc<B>>, Access)>;

/// What a capture in progress has recorded: the allocations its work uses, and how.
///
/// Each allocation it writes counts the capture as open ([`Alloc::begin_captured_write`])
/// from the first write recorded until the record is finished or dropped: on success, on
/// error and on unwind alike, so that host reads of the allocation are refused exactly
/// while the capture is open.
pub(crate) struct Capture<B: Backend> {
    uses: GraphUses<B>,
    ops: usize,
    /// Where its checked kernels report faults (allocated at the first).
    pub(crate) record: Option<Arc<FaultRecord<B>>>,
}

impl<B: Backend> Capture<B> {
    fn new() -> Self {
        Capture {
            uses: Vec::new(),
            ops: 0,
            record: None,
        }
    }

    /// Records one queued piece of work and the ranges it accesses.
    pub(crate) fn record<'s, 'a: 's>(
        &mut self,
        accesses: impl Iterator<Item = (&'s SliceRef<'a, B>, Access)>,
    ) {
        self.ops += 1;
        for (slice, access) in accesses {
            let alloc = slice.alloc_arc();
            match self.uses.iter_mut().find(|(a, _)| Arc::ptr_eq(a, alloc)) {
                Some((a, recorded)) => {
                    if access == Access::Write && *recorded == Access::Read {
                        a.begin_captured_write();
                        *recorded = Access::Write;
                    }
                }
                None => {
                    if access == Access::Write {
                        alloc.begin_captured_write();
                    }
                    self.uses.push((alloc.clone(), access));
                }
            }
        }
    }

    /// Ends the count of every allocation the capture writes.
    fn release(&mut self) {
        for (alloc, access) in &self.uses {
            if *access == Access::Write {
                alloc.end_captured_write();
            }
        }
    }

    /// The record of a capture that has ended: what its work uses, how many pieces, and
    /// where its checked kernels report faults.
    fn finish(mut self) -> (GraphUses<B>, usize, Option<Arc<FaultRecord<B>>>) {
        self.release();
        (std::mem::take(&mut self.uses), self.ops, self.record.take())
    }
}

impl<B: Backend> Drop for Capture<B> {
    /// A record dropped unfinished (the capture failed or unwound) ends its counts too.
    fn drop(&mut self) {
        self.release();
    }
}

/// Ends a capture however the closure leaves it (returning or unwinding): clears the
/// stream's capture state and ends the backend's capture.
struct Capturing<'s, B: Backend> {
    stream: &'s Stream<B>,
    /// The backend's capture is still open.
    open: bool,
}

impl<B: Backend> Capturing<'_, B> {
    /// Ends the backend's capture: the graph, if it could be made.
    fn end(&mut self) -> Result<B::Graph> {
        self.open = false;
        self.stream.backend().end_capture(self.stream.raw())
    }
}

impl<B: Backend> Drop for Capturing<'_, B> {
    fn drop(&mut self) {
        let inner = &self.stream.inner;
        if self.open {
            // Unwinding out of the closure: end the capture and discard what it made.
            let shared = &inner.shared;
            let ended = self.end().and_then(|g| shared.backend.destroy_graph(g));
            shared.defer("Stream::capture", ended);
        }
        inner.capturing.store(false, Ordering::Release);
        inner.shared.captures.fetch_sub(1, Ordering::AcqRel);
        *inner.capture.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl<B: Backend> Stream<B> {
    /// Records the work `f` queues on this stream (ops, copies between arrays, kernel
    /// launches) into a [`Graph`] instead of running it; [`Graph::launch`] then runs all of
    /// it at the cost of one enqueue, as often as wanted. Calls that would break the capture
    /// return [`Error::CaptureViolation`] (see [`Graph`] for the rules). The arrays the work uses stay alive as long as the graph.
    ///
    /// `f` gets the capturing stream; work `f` queues on other streams runs as usual, but
    /// host reads of an array the capture has written are refused on every stream until the
    /// capture ends (its work has not run; see [`Graph`]). When `f` returns an error the
    /// capture is discarded and the error returned; the stream runs work normally again
    /// either way.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let s = ctx.create_stream()?;
    /// let x = ctx.alloc_upload(&[1.0f32, -2.0, 3.0])?;
    /// let mut y = ctx.alloc_zeros::<f32>(3)?;
    /// let step = s.capture(|s| {
    ///     s.relu(&x, &mut y)?;
    ///     s.scale(2.0f32, &mut y)?;
    ///     s.add_inplace(&mut y, &x)
    /// })?;
    /// for _ in 0..3 {
    ///     step.launch(&s)?; // y = 2 relu(x) + x, three ops for one enqueue
    /// }
    /// s.sync()?;
    /// drop(step);
    /// assert_eq!(y.download()?, [3.0, -2.0, 9.0]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn capture(&self, f: impl FnOnce(&Stream<B>) -> Result<()>) -> Result<Graph<B>> {
        let inner = &self.inner;
        let shared = &inner.shared;
        shared.check()?;
        if inner
            .capturing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::CaptureViolation {
                call: "Stream::capture",
                reason: "the stream is already capturing (captures do not nest)",
            });
        }
        shared.captures.fetch_add(1, Ordering::AcqRel);
        *inner.capture.lock().unwrap_or_else(|p| p.into_inner()) = Some(Capture::new());
        let mut capturing = Capturing {
            stream: self,
            open: false,
        };
        shared.backend.begin_capture(self.raw())?;
        capturing.open = true;
        let body = f(self);
        let graph = capturing.end();
        // The capture has ended: host reads of the arrays it wrote are allowed again.
        let (uses, ops, record) = inner
            .capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map_or((Vec::new(), 0, None), Capture::finish);
        drop(capturing);
        let graph = match (body, graph) {
            (Ok(()), Ok(g)) => g,
            (Err(e), Ok(g)) => {
                shared.defer("Stream::capture", shared.backend.destroy_graph(g));
                return Err(e);
            }
            (Ok(()), Err(e)) | (Err(e), Err(_)) => return Err(e),
        };
        Ok(Graph {
            raw: Some(graph),
            uses,
            ops,
            record,
            shared: shared.clone(),
        })
    }
}

/// Work captured from a stream by [`Stream::capture`]: [`Graph::launch`] queues it again, whole,
/// on any stream of the context, as often as wanted, for the cost of one enqueue.
///
/// # The capture guard
///
/// While a stream captures, its work is recorded, not run, so some calls cannot mean what
/// they say. They return [`Error::CaptureViolation`] naming the call, queue nothing and
/// leave the capture going (on every backend alike, so a program that captures on the CPU
/// captures on CUDA):
///
/// - host syncs and queries of the capturing stream, and `Context::sync` while any stream of
///   the context captures (including the blocking helpers that sync: `download`, `sum` to
///   the host, `peek`);
/// - `record_event` on the capturing stream, and `wait` on an event that has not finished
///   (an event recorded in a capture would belong to the graph; waiting on it outside would
///   wait on nothing. This is the trap of cudarc's issue #590);
/// - allocation (`alloc*`, `alloc_upload`) and `trim` while any stream of the context
///   captures: a graph's arrays are allocated before its capture;
/// - asynchronous uploads and downloads on the capturing stream (a replay would copy the
///   same host memory again after the caller has it back);
/// - raw access (`with_raw`, `with_raw_mut`);
/// - work that would have to wait for unfinished work of another stream: the automatic
///   cross-stream ordering cannot put a wait into a graph, so an array last used by another
///   stream must be finished (sync or wait for that stream before capturing);
/// - host reads, on any stream (the default one included), of an array the capture has
///   written: `download`, `download_into`, `peek`, `Stream::download` and
///   `UnifiedArray::host`/`host_mut` (the reductions to the host, `sum` and the like,
///   allocate and are refused for that already). The written work has not run and records
///   no use a read could wait for, so the read would return the array as it was before the
///   capture. The rule is per array: a write of any part (a view) counts for all of it, from
///   the capture's first write of it until the capture ends, however it ends. Device work
///   on other streams that reads the array, and host writes into it (`upload`), are not
///   refused: they use the array as it is, before any launch.
///
/// # Ordering
///
/// Captured work records no uses of the arrays it touches (it has not run); instead the
/// graph keeps each of them alive and, at every [`Graph::launch`], orders the launch like
/// one op over all of them: it waits for the uses it must follow, on any stream, and is
/// recorded as their new reader or writer. So arrays shared between eager work and graph
/// launches are ordered as usual, and no event made during the capture ever escapes it.
/// Once the capture has ended, host reads are allowed again; until the first launch they
/// see none of the captured work, which has not run.
pub struct Graph<B: Backend> {
    raw: Option<B::Graph>,
    uses: GraphUses<B>,
    ops: usize,
    /// Where its checked kernels report faults: read by the sync of each stream it is
    /// launched on.
    record: Option<Arc<FaultRecord<B>>>,
    shared: Arc<Shared<B>>,
}

impl<B: Backend> std::fmt::Debug for Graph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("context", &self.shared.id)
            .field("ops", &self.ops)
            .field("arrays", &self.uses.len())
            .finish()
    }
}

impl<B: Backend> Graph<B> {
    /// Queues one run of the captured work on `stream`, ordered like one op that reads and
    /// writes what the work reads and writes (after the uses it must follow, on any
    /// stream).
    pub fn launch(&self, stream: &Stream<B>) -> Result<()> {
        self.shared
            .same_context("Graph::launch", "stream", stream.context_id())?;
        stream.not_capturing(
            "Graph::launch",
            "graphs are launched outside captures (captures do not nest)",
        )?;
        let Some(raw) = &self.raw else {
            return Ok(());
        };
        let slices: Vec<SliceRef<'_, B>> = self
            .uses
            .iter()
            .map(|(alloc, _)| alloc.slice(0, alloc.bytes))
            .collect();
        let accesses: Vec<(&'static str, &SliceRef<'_, B>, Access)> = slices
            .iter()
            .zip(&self.uses)
            .map(|(slice, (_, access))| ("graph array", slice, *access))
            .collect();
        stream.enqueue("Graph::launch", &accesses, || {
            // SAFETY: the graph holds every allocation its work uses, so they outlive the run
            // (an allocation is freed only after the uses recorded on it, which will include
            // this launch); `enqueue` has ordered the stream after the uses the run must
            // follow and records the run as their new use. Its fault record lives in the
            // context's log until the context's sync after the graph's end.
            unsafe { stream.backend().launch_graph(raw, stream.raw()) }
        })?;
        if let Some(record) = &self.record {
            stream.replays(record);
        }
        Ok(())
    }

    /// How many ops, copies and kernel launches the graph holds.
    pub fn len(&self) -> usize {
        self.ops
    }

    /// Whether the capture queued nothing.
    pub fn is_empty(&self) -> bool {
        self.ops == 0
    }

    /// The id of the context the graph belongs to.
    pub fn context_id(&self) -> u64 {
        self.shared.id
    }
}

impl<B: Backend> Drop for Graph<B> {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            let destroyed = self.shared.backend.destroy_graph(raw);
            self.shared.defer("Graph drop", destroyed);
        }
    }
}
