//! Graphs: executable graphs from stream captures, and the scratch memory they own.
//!
//! A gemm may use its cuBLAS handle's workspace. Eager work uses its handle's default
//! workspace, which is safe because a stream runs in order. Captured work must not: a
//! replay on another stream would race with the capturing stream's later gemms, and a
//! replay after that stream (and its handle) was dropped would write freed memory. So each
//! capture gets a gemm workspace of its own, allocated before the capture begins
//! ([`CaptureScratch`]), and the graph owns it if its work used it ([`GraphScratch`]): it is
//! freed after the graph's last launch on every stream has completed. Replays of one graph
//! never overlap each other (the driver orders every launch of an executable graph after
//! the previous one, on whatever stream), so one workspace serves all of them. (The
//! built-in ops' scratch arrays are gpukit-core's, which a graph keeps the same way.)

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

/// A stream's gemm workspace while it captures: the capture's own.
#[derive(Debug)]
pub(crate) struct CaptureScratch {
    /// The capture's gemm workspace (of [`CaptureScratch::workspace_bytes`]); 0 while the
    /// stream does not capture.
    workspace: AtomicU64,
    workspace_bytes: usize,
    /// Whether a captured gemm used the workspace.
    used: AtomicBool,
}

impl CaptureScratch {
    pub(crate) fn new(workspace_bytes: usize) -> Self {
        CaptureScratch {
            workspace: AtomicU64::new(0),
            workspace_bytes,
            used: AtomicBool::new(false),
        }
    }

    /// Bytes of a capture's gemm workspace.
    pub(crate) fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
    }

    /// The workspace a gemm queued now uses: the capture's (address and bytes) while the
    /// stream captures, `None` (the handle's default) otherwise.
    pub(crate) fn for_gemm(&self) -> Option<(sys::CUdeviceptr, usize)> {
        match self.workspace.load(Ordering::Acquire) {
            0 => None,
            p => {
                self.used.store(true, Ordering::Relaxed);
                Some((p, self.workspace_bytes))
            }
        }
    }

    /// Hands the stream a capture's gemm workspace, for the work queued until
    /// [`CaptureScratch::end_capture`].
    pub(crate) fn begin_capture(&self, workspace: sys::CUdeviceptr) {
        self.used.store(false, Ordering::Relaxed);
        self.workspace.store(workspace, Ordering::Release);
    }

    /// Takes the capture's workspace back (`None` if there was none), with whether captured
    /// work used it: the graph takes it if so, else it can go at once.
    pub(crate) fn end_capture(&self) -> Option<(sys::CUdeviceptr, bool)> {
        match self.workspace.swap(0, Ordering::AcqRel) {
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

    /// Regression test for the desk-check "a captured gemm uses the handle's default
    /// workspace": while a stream captures, its gemms use the capture's workspace, which the
    /// graph then takes; the stream's eager gemms keep the handle's default.
    #[test]
    fn a_capture_has_a_workspace_of_its_own_which_the_graph_takes() {
        let stream = CaptureScratch::new(64);
        assert_eq!(
            stream.for_gemm(),
            None,
            "eager gemms: the handle's default workspace"
        );
        assert_eq!(stream.end_capture(), None, "no capture, nothing to take");
        stream.begin_capture(0x8000);
        assert_eq!(
            stream.end_capture(),
            Some((0x8000, false)),
            "unused: it goes"
        );
        assert_eq!(stream.for_gemm(), None);
        stream.begin_capture(0x9000);
        assert_eq!(stream.for_gemm(), Some((0x9000, 64)), "captured gemms");
        assert_eq!(stream.end_capture(), Some((0x9000, true)), "the graph's");
        assert_eq!(stream.for_gemm(), None, "eager again: never the graph's");
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
