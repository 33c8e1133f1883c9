//! Graphs: executable graphs from stream captures, and the scratch memory they own.
//!
//! A whole-array reduction queues two kernels that pass partial results through a scratch
//! buffer. Eager reductions use their stream's own buffer, which is safe because a stream
//! runs in order. A captured reduction must not: a replay on another stream would race with
//! the capturing stream's later reductions, and a replay after that stream was dropped would
//! write freed memory. So each capture gets a buffer of its own, allocated before the
//! capture begins ([`CaptureScratch`]), and the graph owns it ([`GraphScratch`]): it is
//! freed after the graph's last launch on every stream has completed. Replays of one graph
//! never overlap each other (the driver orders every launch of an executable graph after the
//! previous one, on whatever stream), so one buffer serves all of them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use gpukit_core::Result;

use crate::device::{lock, Device, Raw};

/// A stream's reduction scratch: its own buffer, and while it captures, the capture's.
#[derive(Debug)]
pub(crate) struct CaptureScratch {
    own: sys::CUdeviceptr,
    /// The capture's buffer; 0 while the stream does not capture.
    capture: AtomicU64,
    /// Whether a captured reduction took the capture's buffer.
    used: AtomicBool,
}

impl CaptureScratch {
    pub(crate) fn new(own: sys::CUdeviceptr) -> Self {
        CaptureScratch {
            own,
            capture: AtomicU64::new(0),
            used: AtomicBool::new(false),
        }
    }

    /// The stream's own buffer.
    pub(crate) fn own(&self) -> sys::CUdeviceptr {
        self.own
    }

    /// The buffer a reduction queued now uses: the capture's while the stream captures.
    pub(crate) fn for_reduction(&self) -> sys::CUdeviceptr {
        match self.capture.load(Ordering::Acquire) {
            0 => self.own,
            p => {
                self.used.store(true, Ordering::Relaxed);
                p
            }
        }
    }

    /// Hands the stream a capture's buffer, for the reductions queued until
    /// [`CaptureScratch::end_capture`].
    pub(crate) fn begin_capture(&self, buffer: sys::CUdeviceptr) {
        self.used.store(false, Ordering::Relaxed);
        self.capture.store(buffer, Ordering::Release);
    }

    /// Takes the capture's buffer back (`None` if there was none), and whether a captured
    /// reduction uses it: then the graph takes it, else it can go at once.
    pub(crate) fn end_capture(&self) -> Option<(sys::CUdeviceptr, bool)> {
        match self.capture.swap(0, Ordering::AcqRel) {
            0 => None,
            p => Some((p, self.used.swap(false, Ordering::Relaxed))),
        }
    }
}

/// The last launch of a graph on each stream it was launched on, generic over the handle
/// types so that the rule can be tested without a GPU: the graph's scratch is freed once
/// every one of these has completed.
#[derive(Debug)]
pub(crate) struct LastLaunches<S, E> {
    marks: Vec<(S, E)>,
}

impl<S: PartialEq, E> LastLaunches<S, E> {
    pub(crate) fn new() -> Self {
        LastLaunches { marks: Vec::new() }
    }

    /// Records `event`, just after a launch on `stream`; returns the event it replaces (the
    /// stream's previous launch, which comes before it).
    pub(crate) fn mark(&mut self, stream: S, event: E) -> Option<E> {
        match self.marks.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, e)) => Some(std::mem::replace(e, event)),
            None => {
                self.marks.push((stream, event));
                None
            }
        }
    }

    /// Every stream's last launch, to wait for.
    pub(crate) fn into_events(self) -> Vec<E> {
        self.marks.into_iter().map(|(_, e)| e).collect()
    }
}

/// A graph's own reduction scratch and the launches that may still use it.
#[derive(Debug)]
pub(crate) struct GraphScratch {
    ptr: sys::CUdeviceptr,
    launches: Mutex<LastLaunches<Raw<sys::CUstream>, Raw<sys::CUevent>>>,
}

impl GraphScratch {
    pub(crate) fn new(ptr: sys::CUdeviceptr) -> Self {
        GraphScratch {
            ptr,
            launches: Mutex::new(LastLaunches::new()),
        }
    }
}

/// An executable CUDA graph (`CUgraphExec`), instantiated from a stream capture, with the
/// scratch memory its reductions use.
pub struct CudaGraph {
    exec: Raw<sys::CUgraphExec>,
    scratch: Option<GraphScratch>,
    dev: Arc<Device>,
}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraph")
            .field("device", &self.dev.ordinal)
            .finish_non_exhaustive()
    }
}

impl CudaGraph {
    pub(crate) fn new(
        exec: sys::CUgraphExec,
        scratch: Option<GraphScratch>,
        dev: Arc<Device>,
    ) -> Self {
        CudaGraph {
            exec: Raw(exec),
            scratch,
            dev,
        }
    }

    /// Queues one run on `stream`; with scratch memory, records an event after it, which
    /// the memory's free waits for. The context must be current.
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::launch_graph`]; `stream` is a live stream of
    /// the graph's context.
    pub(crate) unsafe fn launch(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: a live executable graph and stream of this context; the caller keeps the
        // buffers the work uses alive and ordered, and the scratch lives until the event
        // recorded below has passed.
        let r = unsafe { sys::cuGraphLaunch(self.exec.0, stream) };
        self.dev.check("cuGraphLaunch", r)?;
        let Some(scratch) = &self.scratch else {
            return Ok(());
        };
        let e = self.dev.take_event(false)?;
        // SAFETY: an idle event and a live stream, both of this context.
        let recorded = self
            .dev
            .check("cuEventRecord", unsafe { sys::cuEventRecord(e, stream) });
        if let Err(err) = recorded {
            self.dev.give_event(e, false);
            // Without the mark the memory could be freed under this launch: wait for it.
            // SAFETY: a live stream of this context.
            let _ = unsafe { sys::cuStreamSynchronize(stream) };
            return Err(err.into());
        }
        if let Some(Raw(old)) = lock(&scratch.launches).mark(Raw(stream), Raw(e)) {
            self.dev.give_event(old, false);
        }
        Ok(())
    }

    /// Destroys the executable graph, and frees its scratch once its launches are done. The
    /// context must be current.
    pub(crate) fn destroy(mut self) -> Result<()> {
        let destroyed = self.destroy_parts();
        Ok(destroyed?)
    }

    fn destroy_parts(&mut self) -> std::result::Result<(), crate::error::CudaError> {
        let exec = std::mem::replace(&mut self.exec.0, std::ptr::null_mut());
        let mut first = Ok(());
        if !exec.is_null() {
            // SAFETY: the executable graph is not used again; launches still running finish
            // first (the driver frees it when they complete).
            first = self.dev.check("cuGraphExecDestroy", unsafe {
                sys::cuGraphExecDestroy(exec)
            });
        }
        if let Some(scratch) = self.scratch.take() {
            let launches = scratch
                .launches
                .into_inner()
                .unwrap_or_else(|p| p.into_inner());
            let events = launches.into_events().into_iter().map(|Raw(e)| e).collect();
            let freed = self.dev.free_after_events(scratch.ptr, events);
            if first.is_ok() {
                first = freed;
            }
        }
        first
    }
}

impl Drop for CudaGraph {
    /// Only does anything when a graph is dropped without `destroy` (gpukit-core always
    /// destroys it through the backend): the same, ignoring errors.
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            let _ = self.destroy_parts();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression test for the desk-check's "a captured reduction uses the capturing
    /// stream's scratch buffer": while a stream captures, its reductions use the capture's
    /// buffer, which the graph then takes; the stream's eager reductions keep their own.
    #[test]
    fn a_capture_has_scratch_of_its_own_which_the_graph_takes() {
        let stream = CaptureScratch::new(0x1000);
        assert_eq!(stream.for_reduction(), 0x1000);
        assert_eq!(stream.end_capture(), None, "no capture, nothing to take");
        stream.begin_capture(0x2000);
        assert_eq!(stream.for_reduction(), 0x2000, "captured reductions");
        assert_eq!(stream.end_capture(), Some((0x2000, true)), "the graph's");
        assert_eq!(
            stream.for_reduction(),
            0x1000,
            "eager again: never the graph's"
        );
        stream.begin_capture(0x3000);
        assert_eq!(
            stream.end_capture(),
            Some((0x3000, false)),
            "each capture its own; unused by a capture without reductions"
        );
        assert_eq!(stream.own(), 0x1000);
    }

    /// The graph's scratch outlives every launch: its free waits for the last launch on
    /// each stream the graph ran on (one event per stream, the latest), also streams that
    /// are gone by then.
    #[test]
    fn the_graphs_scratch_waits_for_its_last_launch_on_every_stream() {
        let mut launches: LastLaunches<&str, u32> = LastLaunches::new();
        assert_eq!(launches.mark("s1", 1), None);
        assert_eq!(launches.mark("s2", 2), None);
        assert_eq!(
            launches.mark("s1", 3),
            Some(1),
            "s1's earlier launch comes before"
        );
        assert_eq!(launches.mark("s3", 4), None);
        let mut events = launches.into_events();
        events.sort_unstable();
        assert_eq!(events, [2, 3, 4]);
        let never: LastLaunches<&str, u32> = LastLaunches::new();
        assert!(
            never.into_events().is_empty(),
            "never launched: freed at once"
        );
    }
}
