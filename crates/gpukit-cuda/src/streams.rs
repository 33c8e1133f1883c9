//! The streams of one context, so that its `synchronize` waits for them and nothing else.
//!
//! Every context on a device shares the device's primary context, so `cuCtxSynchronize`
//! would wait for every context's work, and, worse, would invalidate a stream capture that
//! another thread is running on any of them (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`; the
//! same call breaks a PyTorch capture in the same process). The backend never calls it:
//! [`ContextStreams::sync_all`] synchronises the streams this context created or wrapped,
//! one by one, and never while one of them captures.
//!
//! Modules of dropped custom kernels wait here too: their launches were queued on this
//! context's streams only (gpukit-core refuses kernels of another context), so they are
//! unloaded once all of those streams have been synchronised, outside any capture.

use std::sync::Mutex;

use cudarc::driver::sys;

use crate::device::{lock, Device, Raw};
use crate::driver;
use crate::error::CudaError;

/// Most retired modules kept before they are unloaded at the cost of a synchronisation.
const RETIRED_MAX: usize = 64;

/// A context's live streams, its open captures and its retired modules, generic over the
/// handle types so that the rules can be tested without a GPU.
#[derive(Debug)]
pub(crate) struct StreamSet<S, M> {
    /// Every stream of the context, in creation order.
    live: Vec<S>,
    /// How many of them capture: while any does, nothing here synchronises.
    capturing: usize,
    /// Modules waiting for the streams that may still run them.
    retired: Vec<M>,
}

impl<S: Copy + PartialEq, M> StreamSet<S, M> {
    pub(crate) fn new() -> Self {
        StreamSet {
            live: Vec::new(),
            capturing: 0,
            retired: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, s: S) {
        self.live.push(s);
    }

    pub(crate) fn remove(&mut self, s: S) {
        self.live.retain(|&x| x != s);
    }

    pub(crate) fn begin_capture(&mut self) {
        self.capturing += 1;
    }

    pub(crate) fn end_capture(&mut self) {
        self.capturing = self.capturing.saturating_sub(1);
    }

    /// Synchronises every live stream with `sync` (all of them, even after one fails) and,
    /// when all succeeded, unloads the retired modules with `unload`. Returns the first
    /// error. Outside captures only: a capture in progress is reported by the caller.
    pub(crate) fn sync_all<E>(
        &mut self,
        mut sync: impl FnMut(S) -> Result<(), E>,
        unload: impl FnMut(M),
    ) -> Result<(), E> {
        let mut first = Ok(());
        for &s in &self.live {
            let r = sync(s);
            if first.is_ok() {
                first = r;
            }
        }
        if first.is_ok() {
            self.retired.drain(..).for_each(unload);
        }
        first
    }

    /// Takes a module of a dropped kernel; once [`RETIRED_MAX`] have piled up and no
    /// capture is open, synchronises the streams and unloads them (a program that keeps
    /// loading and dropping kernels without ever synchronising would otherwise keep every
    /// module loaded).
    pub(crate) fn retire<E>(
        &mut self,
        module: M,
        sync: impl FnMut(S) -> Result<(), E>,
        unload: impl FnMut(M),
    ) {
        self.retired.push(module);
        if self.retired.len() >= RETIRED_MAX && self.capturing == 0 {
            let _ = self.sync_all(sync, unload);
        }
    }
}

/// The streams of one CUDA context (one `CudaBackend`), shared with its kernels.
#[derive(Debug)]
pub(crate) struct ContextStreams {
    set: Mutex<StreamSet<Raw<sys::CUstream>, Raw<sys::CUmodule>>>,
}

impl ContextStreams {
    pub(crate) fn new() -> Self {
        ContextStreams {
            set: Mutex::new(StreamSet::new()),
        }
    }

    pub(crate) fn add(&self, s: sys::CUstream) {
        lock(&self.set).add(Raw(s));
    }

    pub(crate) fn remove(&self, s: sys::CUstream) {
        lock(&self.set).remove(Raw(s));
    }

    /// Counts a capture as open from now on; the set's lock keeps a synchronisation from
    /// running at the same time (it would break the capture).
    pub(crate) fn begin_capture<R>(
        &self,
        begin: impl FnOnce() -> Result<R, CudaError>,
    ) -> Result<R, CudaError> {
        let mut set = lock(&self.set);
        let r = begin()?;
        set.begin_capture();
        Ok(r)
    }

    /// Ends a capture with `end` (which runs under the set's lock, as `begin_capture`'s
    /// `begin` does) and counts it closed, whatever `end` returns.
    pub(crate) fn end_capture<R>(
        &self,
        end: impl FnOnce() -> Result<R, CudaError>,
    ) -> Result<R, CudaError> {
        let mut set = lock(&self.set);
        let r = end();
        set.end_capture();
        r
    }

    /// Synchronises every stream of the context (`cuStreamSynchronize` each), then unloads
    /// the retired modules. The context must be current, and no stream of it may capture
    /// (gpukit-core refuses a context's sync while one does).
    pub(crate) fn sync_all(&self, dev: &Device) -> Result<(), CudaError> {
        lock(&self.set).sync_all(|s| sync_stream(dev, s), unload_module)
    }

    /// Takes the module of a dropped kernel (see [`StreamSet::retire`]).
    pub(crate) fn retire(&self, dev: &Device, module: sys::CUmodule) {
        let bound = dev.bind().is_ok();
        let mut set = lock(&self.set);
        if bound {
            set.retire(Raw(module), |s| sync_stream(dev, s), unload_module);
        } else {
            // A poisoned device: keep the module; the device's end unloads what it can.
            set.retired.push(Raw(module));
        }
    }
}

impl Drop for ContextStreams {
    fn drop(&mut self) {
        // Every stream was destroyed (synchronised) before the last holder went away, so
        // nothing can run the retired modules. The context is current: the backend binds it
        // in its own drop, and a kernel's drop binds it before retiring.
        let set = self.set.get_mut().unwrap_or_else(|p| p.into_inner());
        set.retired.drain(..).for_each(unload_module);
    }
}

fn sync_stream(dev: &Device, s: Raw<sys::CUstream>) -> Result<(), CudaError> {
    // SAFETY: a live stream of this context (streams leave the set before they are
    // destroyed, under the set's lock).
    dev.check(unsafe { driver::stream_synchronize(s.0) })
}

fn unload_module(m: Raw<sys::CUmodule>) {
    // SAFETY: the module's kernel was dropped, so no launch of it can be queued, and every
    // stream that could have run one has just been synchronised (or destroyed).
    // Unloading a loaded module fails only for a context that is gone, and then the
    // module went with it.
    let _ = unsafe { driver::module_unload(m.0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression test for the desk-check's "`synchronize()` is `cuCtxSynchronize`": every
    /// context on a device shares its primary context, so a device-wide sync reached the
    /// streams of other contexts and invalidated their captures. A context's sync touches
    /// its own streams only.
    #[test]
    fn a_sync_reaches_only_the_contexts_own_streams() {
        let mut a: StreamSet<u32, &str> = StreamSet::new();
        let mut b: StreamSet<u32, &str> = StreamSet::new();
        for s in [1, 2, 3] {
            a.add(s);
        }
        for s in [10, 11] {
            b.add(s);
        }
        b.begin_capture(); // another context captures on stream 10
        a.remove(2);
        let mut synced = Vec::new();
        a.sync_all(
            |s| -> Result<(), ()> {
                synced.push(s);
                Ok(())
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(
            synced,
            [1, 3],
            "its live streams, nothing of the other context"
        );
    }

    #[test]
    fn retired_modules_wait_for_a_sync_outside_captures() {
        let mut set: StreamSet<u32, usize> = StreamSet::new();
        set.add(7);
        let mut unloaded = Vec::new();
        let mut syncs = 0;
        set.begin_capture();
        for m in 0..RETIRED_MAX + 5 {
            set.retire(
                m,
                |_| -> Result<(), ()> {
                    syncs += 1;
                    Ok(())
                },
                |m| unloaded.push(m),
            );
        }
        assert_eq!((syncs, unloaded.len()), (0, 0), "never during a capture");
        set.end_capture();
        set.retire(
            999,
            |_| -> Result<(), ()> {
                syncs += 1;
                Ok(())
            },
            |m| unloaded.push(m),
        );
        assert_eq!(syncs, 1);
        assert_eq!(
            unloaded.len(),
            RETIRED_MAX + 6,
            "all of them after one sync"
        );
        // A failed sync unloads nothing: the stream may still be running the module.
        set.retire(1000, |_| Err(()), |m| unloaded.push(m));
        assert_eq!(
            set.sync_all(|_| Err("sticky"), |m| unloaded.push(m)),
            Err("sticky")
        );
        assert_eq!(unloaded.len(), RETIRED_MAX + 6);
        set.sync_all(|_| Ok::<(), ()>(()), |m| unloaded.push(m))
            .unwrap();
        assert_eq!(unloaded.last(), Some(&1000));
    }
}
