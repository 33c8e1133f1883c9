//! Graphs: executable graphs from stream captures, and the scratch memory they own.
//!
//! A whole-array reduction queues two kernels that pass partial results through a scratch
//! buffer, and a gemm may use its cuBLAS handle's workspace. Eager work uses its stream's
//! own buffer and its handle's default workspace, which is safe because a stream runs in
//! order. Captured work must not: a replay on another stream would race with the capturing
//! stream's later reductions and gemms, and a replay after that stream (and its handle) was
//! dropped would write freed memory. So each capture gets a reduction buffer and a gemm
//! workspace of its own, allocated before the capture begins ([`CaptureScratch`]), and the
//! graph owns those its work used ([`GraphScratch`]): they are freed after the graph's last
//! launch on every stream has completed. Replays of one graph never overlap each other (the
//! driver orders every launch of an executable graph after the previous one, on whatever
//! stream), so one buffer serves all of them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use gpukit_core::Result;

use crate::device::{lock, Device, Raw};
use crate::driver;

/// Bytes of the cuBLAS workspace a capture's gemms use: cuBLAS's recommended size for a
/// user-provided workspace ([`cublasSetWorkspace`](https://docs.nvidia.com/cuda/cublas/#cublassetworkspace):
/// 32 MiB on Hopper and later, 4 MiB before).
pub(crate) fn gemm_workspace_bytes(compute_capability: Option<(u32, u32)>) -> usize {
    match compute_capability {
        Some((major, _)) if major >= 9 => 32 << 20,
        _ => 4 << 20,
    }
}

/// A capture's own memory: the reduction buffer and the gemm workspace, each with whether
/// captured work used it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CaptureBuffers {
    pub(crate) reduction: (sys::CUdeviceptr, bool),
    pub(crate) workspace: (sys::CUdeviceptr, bool),
}

impl CaptureBuffers {
    /// The buffers the graph keeps (those its work used) and those that can go at once.
    pub(crate) fn split(self) -> (Vec<sys::CUdeviceptr>, Vec<sys::CUdeviceptr>) {
        let (mut kept, mut unused) = (Vec::new(), Vec::new());
        for (ptr, used) in [self.reduction, self.workspace] {
            if used {
                kept.push(ptr);
            } else {
                unused.push(ptr);
            }
        }
        (kept, unused)
    }
}

/// A stream's reduction scratch and gemm workspace: its own, and while it captures, the
/// capture's.
#[derive(Debug)]
pub(crate) struct CaptureScratch {
    own: sys::CUdeviceptr,
    /// The capture's reduction buffer; 0 while the stream does not capture.
    capture: AtomicU64,
    /// The capture's gemm workspace (of [`CaptureScratch::workspace_bytes`]).
    workspace: AtomicU64,
    workspace_bytes: usize,
    /// Whether a captured reduction took the capture's buffer, a captured gemm its workspace.
    used: AtomicBool,
    gemm_used: AtomicBool,
}

impl CaptureScratch {
    pub(crate) fn new(own: sys::CUdeviceptr, workspace_bytes: usize) -> Self {
        CaptureScratch {
            own,
            capture: AtomicU64::new(0),
            workspace: AtomicU64::new(0),
            workspace_bytes,
            used: AtomicBool::new(false),
            gemm_used: AtomicBool::new(false),
        }
    }

    /// The stream's own buffer.
    pub(crate) fn own(&self) -> sys::CUdeviceptr {
        self.own
    }

    /// Bytes of a capture's gemm workspace.
    pub(crate) fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
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

    /// The workspace a gemm queued now uses: the capture's (address and bytes) while the
    /// stream captures, `None` (the handle's default) otherwise.
    pub(crate) fn for_gemm(&self) -> Option<(sys::CUdeviceptr, usize)> {
        match self.workspace.load(Ordering::Acquire) {
            0 => None,
            p => {
                self.gemm_used.store(true, Ordering::Relaxed);
                Some((p, self.workspace_bytes))
            }
        }
    }

    /// Hands the stream a capture's reduction buffer and gemm workspace, for the work
    /// queued until [`CaptureScratch::end_capture`].
    pub(crate) fn begin_capture(&self, buffer: sys::CUdeviceptr, workspace: sys::CUdeviceptr) {
        self.used.store(false, Ordering::Relaxed);
        self.gemm_used.store(false, Ordering::Relaxed);
        self.workspace.store(workspace, Ordering::Release);
        self.capture.store(buffer, Ordering::Release);
    }

    /// Takes the capture's buffers back (`None` if there were none), with whether captured
    /// work used each: the graph takes those, the others can go at once.
    pub(crate) fn end_capture(&self) -> Option<CaptureBuffers> {
        let workspace = self.workspace.swap(0, Ordering::AcqRel);
        match self.capture.swap(0, Ordering::AcqRel) {
            0 => None,
            p => Some(CaptureBuffers {
                reduction: (p, self.used.swap(false, Ordering::Relaxed)),
                workspace: (workspace, self.gemm_used.swap(false, Ordering::Relaxed)),
            }),
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

/// A graph's own reduction scratch and gemm workspace (those its work uses) and the
/// launches that may still use them.
#[derive(Debug)]
pub(crate) struct GraphScratch {
    ptrs: Vec<sys::CUdeviceptr>,
    launches: Mutex<LastLaunches<Raw<sys::CUstream>, Raw<sys::CUevent>>>,
}

impl GraphScratch {
    /// `None` when the graph owns no memory.
    pub(crate) fn new(ptrs: Vec<sys::CUdeviceptr>) -> Option<Self> {
        (!ptrs.is_empty()).then(|| GraphScratch {
            ptrs,
            launches: Mutex::new(LastLaunches::new()),
        })
    }
}

/// An executable CUDA graph (`CUgraphExec`), instantiated from a stream capture, with the
/// scratch memory its reductions and gemms use.
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
        let r = unsafe { driver::graph_launch(self.exec.0, stream) };
        self.dev.check(r)?;
        let Some(scratch) = &self.scratch else {
            return Ok(());
        };
        let e = self.dev.take_event(false)?;
        // SAFETY: an idle event and a live stream, both of this context.
        let recorded = self.dev.check(unsafe { driver::event_record(e, stream) });
        if let Err(err) = recorded {
            self.dev.give_event(e, false);
            // Without the mark the memory could be freed under this launch: wait for it.
            // SAFETY: a live stream of this context.
            let _ = unsafe { driver::stream_synchronize(stream) };
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
            first = self.dev.check(unsafe { driver::graph_exec_destroy(exec) });
        }
        if let Some(scratch) = self.scratch.take() {
            let launches = scratch
                .launches
                .into_inner()
                .unwrap_or_else(|p| p.into_inner());
            let events = launches.into_events().into_iter().map(|Raw(e)| e).collect();
            let freed = self.dev.free_all_after_events(scratch.ptrs, events);
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

    /// Regression test for the desk-checks' "a captured reduction uses the capturing
    /// stream's scratch buffer" and "a captured gemm uses the handle's default workspace":
    /// while a stream captures, its reductions and gemms use the capture's buffers, which
    /// the graph then takes; the stream's eager work keeps its own.
    #[test]
    fn a_capture_has_scratch_of_its_own_which_the_graph_takes() {
        let stream = CaptureScratch::new(0x1000, 64);
        assert_eq!(stream.for_reduction(), 0x1000);
        assert_eq!(
            stream.for_gemm(),
            None,
            "eager gemms: the handle's default workspace"
        );
        assert_eq!(stream.end_capture(), None, "no capture, nothing to take");
        stream.begin_capture(0x2000, 0x8000);
        assert_eq!(stream.for_reduction(), 0x2000, "captured reductions");
        let taken = stream.end_capture();
        assert_eq!(
            taken,
            Some(CaptureBuffers {
                reduction: (0x2000, true),
                workspace: (0x8000, false),
            }),
            "the graph's"
        );
        assert_eq!(
            taken.map(CaptureBuffers::split),
            Some((vec![0x2000], vec![0x8000]))
        );
        assert_eq!(
            stream.for_reduction(),
            0x1000,
            "eager again: never the graph's"
        );
        assert_eq!(stream.for_gemm(), None);
        stream.begin_capture(0x3000, 0x9000);
        assert_eq!(stream.for_gemm(), Some((0x9000, 64)), "captured gemms");
        assert_eq!(
            stream.end_capture().map(CaptureBuffers::split),
            Some((vec![0x9000], vec![0x3000])),
            "each capture its own; the reduction buffer unused by a capture without reductions"
        );
        assert_eq!(stream.own(), 0x1000);
        assert_eq!(stream.workspace_bytes(), 64);
        assert_eq!(gemm_workspace_bytes(Some((9, 0))), 32 << 20);
        assert_eq!(gemm_workspace_bytes(Some((8, 6))), 4 << 20);
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
