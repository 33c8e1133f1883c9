//! One opened device: its primary context, the poison flag, deferred frees, the event pool,
//! the NVRTC that compiles its kernels and the device's description.
//!
//! The backend uses the device's *primary* context (`cuDevicePrimaryCtxRetain`), the one the
//! CUDA runtime, cuBLAS and other libraries use, so memory and streams can be shared with
//! them. Every call first makes the context current on the calling thread when it is not
//! already (`cuCtxGetCurrent` is a thread-local read), so any thread may use the backend.
//!
//! All contexts of the process on one device share one `Device` ([`Device::shared`]): they
//! share the primary context anyway, and so its modules, events and deferred frees. What
//! belongs to one context alone (its streams, and the modules of its dropped kernels) is in
//! [`crate::streams`].

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use cudarc::driver::sys::{self, CUdevice_attribute as Attr, CUresult};
use gpukit_core::{DeviceInfo, LaunchLimits};
use gpukit_cuda_sys::nvrtc::NvrtcLib;

use crate::driver::{self, DriverError};
use crate::error::{describe, is_sticky, CudaError};

/// Most idle non-timing events kept for reuse.
const EVENT_POOL_MAX: usize = 1024;

/// A raw CUDA handle (context, stream, event, module, function, host pointer).
///
/// Handles are plain pointers to driver objects; the driver API may be called on them from
/// any thread once the owning context is current there, which [`Device::bind`] ensures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw<T>(pub T);

// SAFETY: CUDA driver handles are usable from any thread (the driver is thread-safe and the
// backend makes the owning context current before each call); the pointer is never
// dereferenced by Rust code.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as above; sharing a handle only lets threads pass it to the driver.
unsafe impl<T> Sync for Raw<T> {}

/// The poison flag of device `ordinal`, one per device per process.
fn poison_flag(ordinal: usize) -> Arc<OnceLock<CudaError>> {
    static FLAGS: OnceLock<Mutex<HashMap<usize, Arc<OnceLock<CudaError>>>>> = OnceLock::new();
    let flags = FLAGS.get_or_init(|| Mutex::new(HashMap::new()));
    Arc::clone(lock(flags).entry(ordinal).or_default())
}

/// The error every call returns once `first`, a sticky error, has poisoned the device.
fn poisoned_by(first: &CudaError) -> CudaError {
    CudaError::Poisoned {
        first: Box::new(first.clone()),
    }
}

/// A free that waits for the streams that used the memory.
struct PendingFree {
    ptrs: Vec<sys::CUdeviceptr>,
    events: Vec<sys::CUevent>,
}

/// The state of one opened device.
pub(crate) struct Device {
    pub ordinal: usize,
    pub dev: sys::CUdevice,
    pub ctx: Raw<sys::CUcontext>,
    pub info: DeviceInfo,
    /// Whether the device has managed (unified) memory.
    pub managed_memory: bool,
    /// Whether the host and the device may use managed memory at once (prefetch works).
    pub concurrent_managed_access: bool,
    /// The device's poison flag, shared by every context on it in this process (a sticky
    /// error breaks the primary context they all use).
    poison: Arc<OnceLock<CudaError>>,
    frees: Mutex<Vec<Raw<PendingFree>>>,
    events: Mutex<Vec<Raw<sys::CUevent>>>,
    /// The NVRTC that compiles kernels for the device.
    pub nvrtc: &'static NvrtcLib,
    /// The devices whose memory this device's context was asked to access directly, and
    /// whether it can (peer access enabled); asked once per pair.
    peers: Mutex<Vec<(usize, bool)>>,
}

impl Device {
    /// The device `ordinal` (already checked against the probe's count): the one every
    /// live context on it shares, or a newly opened one. `nvrtc` compiles its built-in
    /// modules.
    pub fn shared(
        ordinal: usize,
        name: &str,
        total_memory: u64,
        nvrtc: &'static NvrtcLib,
    ) -> Result<Arc<Device>, CudaError> {
        static OPEN: OnceLock<Mutex<HashMap<usize, Weak<Device>>>> = OnceLock::new();
        // Held while a device opens, so that two threads opening one ordinal share it.
        let mut open = lock(OPEN.get_or_init(|| Mutex::new(HashMap::new())));
        if let Some(dev) = open.get(&ordinal).and_then(Weak::upgrade) {
            dev.alive()?;
            return Ok(dev);
        }
        let dev = Arc::new(Device::open(ordinal, name.to_owned(), total_memory, nvrtc)?);
        open.insert(ordinal, Arc::downgrade(&dev));
        Ok(dev)
    }

    /// Opens device `ordinal` (already checked against the probe's count).
    fn open(
        ordinal: usize,
        name: String,
        total_memory: u64,
        nvrtc: &'static NvrtcLib,
    ) -> Result<Device, CudaError> {
        let poison = poison_flag(ordinal);
        if let Some(first) = poison.get() {
            return Err(poisoned_by(first));
        }
        // Until the device is open its errors are plain driver errors: nothing to poison yet.
        let to_driver_error = |e: DriverError| -> CudaError {
            let (name, message) = describe(e.code);
            CudaError::Driver {
                call: e.call,
                result: e.code,
                name,
                message,
            }
        };
        // The driver is loaded and initialised (the probe ran cuInit); the ordinal is below
        // the probe's device count.
        driver::init().map_err(to_driver_error)?;
        let dev = driver::device_get(ordinal as c_int).map_err(to_driver_error)?;
        let ctx = driver::device_primary_ctx_retain(dev).map_err(to_driver_error)?;
        let mut device = Device {
            ordinal,
            dev,
            ctx: Raw(ctx),
            info: DeviceInfo {
                name,
                total_memory,
                compute_capability: None,
                copy_engines: 0,
                multiprocessors: 0,
                limits: LaunchLimits::CUDA_COMMON,
                priority_range: (0, 0),
                op_dtypes: gpukit_core::DType::ALL.to_vec(),
                native_ops: false,
                items_per_thread: 1,
            },
            managed_memory: false,
            concurrent_managed_access: false,
            poison,
            frees: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            peers: Mutex::new(Vec::new()),
            nvrtc,
        };
        // From here on `device` releases the context when dropped.
        device.bind()?;
        let attr = |a: Attr| -> Result<u32, CudaError> {
            let v = driver::device_get_attribute(a, dev).map_err(to_driver_error)?;
            Ok(u32::try_from(v).unwrap_or(0))
        };
        // The context is current (bound above).
        let (least, greatest) = driver::ctx_get_stream_priority_range().map_err(to_driver_error)?;
        device.info.compute_capability = Some((
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ));
        device.info.copy_engines = attr(Attr::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?;
        device.info.multiprocessors = attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        device.info.limits = LaunchLimits {
            max_threads_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            // At most 1024 x 1024 x 64 (every CUDA device's), which `#[kernel]`'s proofs of
            // shared-array indices assume.
            max_block_dim: [
                attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?.min(1024),
                attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?.min(1024),
                attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?.min(64),
            ],
            max_grid_dim: [
                attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_mem_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            max_array_bytes: u64::MAX,
        };
        device.info.priority_range = (least, greatest);
        device.managed_memory = attr(Attr::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0;
        device.concurrent_managed_access =
            attr(Attr::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? != 0;
        Ok(device)
    }

    /// Fails with `Poisoned` once a sticky error has happened.
    #[inline]
    pub fn alive(&self) -> Result<(), CudaError> {
        match self.poison.get() {
            None => Ok(()),
            Some(first) => Err(poisoned_by(first)),
        }
    }

    /// Makes the context current on this thread (if it is not) and checks the poison flag.
    #[inline]
    pub fn bind(&self) -> Result<(), CudaError> {
        self.alive()?;
        if driver::ctx_get_current().is_ok_and(|current| current == self.ctx.0) {
            return Ok(());
        }
        // SAFETY: `ctx` is the primary context this device retained and has not released.
        self.check(unsafe { driver::ctx_set_current(self.ctx.0) })
    }

    /// Enables this device's context to access `peer`'s memory directly (NVLink or PCIe
    /// peer-to-peer) where the devices allow it, once per pair; returns whether it can.
    /// Where it cannot, `cuMemcpyPeerAsync` still works: the driver stages the copy through
    /// host memory. The context must be current.
    pub fn enable_peer(&self, peer: &Device) -> Result<bool, CudaError> {
        if peer.dev == self.dev {
            return Ok(true);
        }
        let mut peers = lock(&self.peers);
        if let Some(&(_, can)) = peers.iter().find(|(o, _)| *o == peer.ordinal) {
            return Ok(can);
        }
        let mut enabled = self.check(driver::device_can_access_peer(self.dev, peer.dev))?;
        if enabled {
            // SAFETY: this device's context is current (the caller's contract) and `peer`'s
            // primary context is retained while `peer` lives.
            match unsafe { driver::ctx_enable_peer_access(peer.ctx.0) } {
                Ok(()) => {}
                Err(e) if e.code == CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
                Err(e) => {
                    // Not fatal: the copy goes through host memory instead.
                    tracing::warn!(
                        device = self.ordinal,
                        peer = peer.ordinal,
                        error = %self.error(e.call, e.code),
                        "peer access could not be enabled; copies are staged by the driver"
                    );
                    enabled = false;
                }
            }
        }
        peers.push((peer.ordinal, enabled));
        Ok(enabled)
    }

    /// Turns a driver wrapper's result into the crate's, naming the failed call; sticky
    /// errors poison the device.
    #[inline]
    pub fn check<T>(&self, r: Result<T, DriverError>) -> Result<T, CudaError> {
        r.map_err(|e| self.error(e.call, e.code))
    }

    /// The error for a failed call (cold path of [`Device::check`]).
    #[cold]
    pub fn error(&self, call: &'static str, r: CUresult) -> CudaError {
        let (name, message) = describe(r);
        if is_sticky(r) {
            let first = self.poison.get_or_init(|| CudaError::Driver {
                call,
                result: r,
                name: name.clone(),
                message: format!("{message} (CUDA device {})", self.ordinal),
            });
            return poisoned_by(first);
        }
        if r == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            let (free, total) = self.mem_info();
            return CudaError::OutOfMemory {
                call,
                requested: 0,
                free,
                total,
            };
        }
        CudaError::Driver {
            call,
            result: r,
            name,
            message,
        }
    }

    /// `(free, total)` device memory, or zeros when the driver will not say.
    pub fn mem_info(&self) -> (usize, usize) {
        // The context is current (every caller bound it).
        driver::mem_get_info().unwrap_or((0, 0))
    }

    // ----- events ------------------------------------------------------------------------

    /// A non-timing event from the pool, or a new one.
    pub fn take_event(&self, timing: bool) -> Result<sys::CUevent, CudaError> {
        if !timing {
            if let Some(Raw(e)) = lock(&self.events).pop() {
                return Ok(e);
            }
        }
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        // The context is current.
        self.check(driver::event_create(flags))
    }

    /// Returns an event to the pool (non-timing ones) or destroys it.
    pub fn give_event(&self, e: sys::CUevent, timing: bool) {
        if !timing {
            let mut pool = lock(&self.events);
            if pool.len() < EVENT_POOL_MAX {
                pool.push(Raw(e));
                return;
            }
        }
        if self.bind().is_ok() {
            // SAFETY: `e` is an event of this context that nothing else refers to any more.
            // Destroying it only fails for an invalid handle, which it is not.
            let _ = unsafe { driver::event_destroy(e) };
        }
    }

    // ----- deferred frees ----------------------------------------------------------------

    /// Frees `ptr` once the work queued so far on `streams` is done: at once when no stream
    /// used it, otherwise on a later call, when events recorded now have completed.
    pub fn free_after(
        &self,
        ptr: sys::CUdeviceptr,
        streams: &[sys::CUstream],
    ) -> Result<(), CudaError> {
        self.bind()?;
        if streams.is_empty() {
            return self.free_after_events(ptr, Vec::new());
        }
        let mut events = Vec::with_capacity(streams.len());
        for &s in streams {
            let recorded = self.take_event(false).and_then(|e| {
                // SAFETY: `e` is an idle event of this context and `s` a live stream of it.
                let r = unsafe { driver::event_record(e, s) };
                match self.check(r) {
                    Ok(()) => Ok(e),
                    Err(err) => {
                        self.give_event(e, false);
                        Err(err)
                    }
                }
            });
            match recorded {
                Ok(e) => events.push(e),
                Err(err) => {
                    // Could not mark the stream: wait for it instead, then free.
                    for e in events {
                        self.give_event(e, false);
                    }
                    // SAFETY: `s` is a live stream of this context.
                    let _ = unsafe { driver::stream_synchronize(s) };
                    // SAFETY: see above: the streams have passed their uses.
                    let _ = unsafe { driver::mem_free(ptr) };
                    return Err(err);
                }
            }
        }
        self.free_after_events(ptr, events)
    }

    /// Frees `ptr` once `events` (recorded events of this context, taken over by this call)
    /// have completed: at once when there are none. The context must be current.
    pub fn free_after_events(
        &self,
        ptr: sys::CUdeviceptr,
        events: Vec<sys::CUevent>,
    ) -> Result<(), CudaError> {
        self.free_all_after_events(vec![ptr], events)
    }

    /// [`Device::free_after_events`] for several buffers that the same work used.
    pub fn free_all_after_events(
        &self,
        ptrs: Vec<sys::CUdeviceptr>,
        events: Vec<sys::CUevent>,
    ) -> Result<(), CudaError> {
        if events.is_empty() {
            let mut first = Ok(());
            for ptr in ptrs {
                // SAFETY: the buffer is owned by the caller, and no queued work uses it.
                let r = self.check(unsafe { driver::mem_free(ptr) });
                if first.is_ok() {
                    first = r;
                }
            }
            return first;
        }
        lock(&self.frees).push(Raw(PendingFree { ptrs, events }));
        self.reap(false)
    }

    /// Frees the deferred buffers whose streams have passed their uses; with `wait`, waits
    /// for all of them. Returns the first error (the rest are still freed).
    pub fn reap(&self, wait: bool) -> Result<(), CudaError> {
        let mut first: Result<(), CudaError> = Ok(());
        let ready: Vec<PendingFree> = {
            let mut frees = lock(&self.frees);
            if frees.is_empty() {
                return Ok(());
            }
            let mut ready = Vec::new();
            let mut i = 0;
            while i < frees.len() {
                let done = frees[i].0.events.iter().all(|&e| {
                    // SAFETY: `e` is a live recorded event of this context.
                    let r = unsafe {
                        if wait {
                            driver::event_synchronize(e).map(|()| true)
                        } else {
                            driver::event_query(e)
                        }
                    };
                    match r {
                        Ok(done) => done,
                        // An error in the stream's work: the work will never touch the buffer
                        // again, so it can go; the error is reported (as the query's, also
                        // when it came from waiting).
                        Err(err) => {
                            if first.is_ok() {
                                first = Err(self.error("cuEventQuery", err.code));
                            }
                            true
                        }
                    }
                });
                if done {
                    ready.push(frees.swap_remove(i).0);
                } else {
                    i += 1;
                }
            }
            ready
        };
        for f in ready {
            for e in f.events {
                self.give_event(e, false);
            }
            for ptr in f.ptrs {
                // SAFETY: every stream that used the buffer has passed the event recorded
                // after its last use; nothing else refers to the memory.
                let r = unsafe { driver::mem_free(ptr) };
                if first.is_ok() {
                    first = self.check(r);
                }
            }
        }
        first
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Every context, kernel, event and graph holds the device, so none is left but the
        // deferred frees and pooled events. Errors here have nowhere to go:
        // the safe layer has already synchronised and reported them.
        if self.bind().is_ok() {
            let _ = self.reap(true);
            for Raw(e) in lock(&self.events).drain(..) {
                // SAFETY: an idle pooled event of this context.
                let _ = unsafe { driver::event_destroy(e) };
            }
        }
        // SAFETY: the device retained the primary context once, in `open`, and everything
        // that used it through the device is gone (see above).
        let _ = unsafe { driver::device_primary_ctx_release(self.dev) };
    }
}

/// Locks a mutex whose contents stay consistent even if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
