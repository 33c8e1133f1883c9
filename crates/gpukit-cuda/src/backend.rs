//! [`CudaBackend`] and its objects: the `gpukit_core::Backend` implementation.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use gpukit_core::{
    Backend, BufAt, DType, DeviceInfo, Error, Gemm, HostUse, KernelArg, KernelDesc, LaunchConfig,
    Location, RawPtr, RawStream, Result, Wake,
};
use gpukit_cuda_sys::ffi::cublas::cublasHandle_t;

use crate::device::{lock, Device, Raw};
use crate::driver::{self, DriverError};
use crate::error::CudaError;
use crate::graph::{CaptureScratch, CudaGraph, GraphScratch};
use crate::memory::{CudaBuffer, CudaHostMem, CudaRegistration};
use crate::streams::ContextStreams;
use crate::{blas, kernel, loader};

/// The CUDA backend: one context on one device, through the device's primary context.
pub struct CudaBackend {
    /// The streams of this context, which `synchronize` waits for (and only those). Before
    /// `dev`: dropped first, while the device's context is still retained.
    pub(crate) streams: Arc<ContextStreams>,
    pub(crate) dev: Arc<Device>,
    /// An internal stream for zeroing new allocations.
    pub(crate) util: Raw<sys::CUstream>,
    /// An internal stream that only waits for events and runs the host functions that wake
    /// their futures ([`Backend::notify`]), made on first use.
    notifier: Mutex<Option<Raw<sys::CUstream>>>,
}

/// A non-blocking CUDA stream with its cuBLAS handle and a capture's gemm workspace.
pub struct CudaStream {
    pub(crate) raw: Raw<sys::CUstream>,
    /// While the stream captures, the capture's gemm workspace (which the graph takes).
    pub(crate) scratch: CaptureScratch,
    pub(crate) blas: Mutex<Option<Raw<cublasHandle_t>>>,
    /// The workspace the cuBLAS handle was last pointed at: 0 for its default, else a
    /// capture's (see `blas::gemm`).
    pub(crate) blas_workspace: Mutex<sys::CUdeviceptr>,
    /// Whether the backend created it (a wrapped foreign stream is never destroyed here).
    owned: bool,
}

/// A CUDA event; ordering events go back to a pool when dropped.
pub struct CudaEvent {
    raw: Raw<sys::CUevent>,
    timing: bool,
    dev: Arc<Device>,
}

// Debug shows ids, sizes and states, never driver handles or addresses (the interop
// accessors hand those out explicitly).
impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.dev.ordinal)
            .field("name", &self.dev.info.name)
            .field("compute_capability", &self.dev.info.compute_capability)
            .field("nvrtc", &self.dev.nvrtc.version)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CudaStream {
    /// Whether the stream has made its cuBLAS handle (`None` while a gemm is being queued
    /// on it: never blocks).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let blas = self.blas.try_lock().ok().map(|h| h.is_some());
        f.debug_struct("CudaStream")
            .field("blas", &blas)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEvent")
            .field("device", &self.dev.ordinal)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        self.dev.give_event(self.raw.0, self.timing);
    }
}

pub use kernel::CudaKernel;

impl CudaBackend {
    /// Opens CUDA device `ordinal` (among those `CUDA_VISIBLE_DEVICES` leaves visible).
    ///
    /// Fails with [`Error::Unavailable`] and the probe's reason when CUDA cannot be used
    /// (no driver, too old, no device, no NVRTC), and with [`Error::InvalidDevice`] for an
    /// ordinal past the last device. Never panics.
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        let probe = gpukit_cuda_sys::probe().map_err(|e| CudaError::Unavailable(e.to_string()))?;
        let Some(found) = probe.devices.get(ordinal) else {
            return Err(Error::InvalidDevice {
                backend: "cuda",
                ordinal,
                count: probe.devices.len(),
            });
        };
        loader::check()?;
        // NVRTC is needed for every built-in op: a context without it would be a context
        // whose ops all fail, so its absence makes CUDA unavailable.
        let nvrtc = gpukit_cuda_sys::nvrtc::nvrtc(Some(probe.driver_version_pair().0))
            .map_err(|e| CudaError::Unavailable(e.to_string()))?;
        let dev = Device::shared(ordinal, &found.name, found.total_memory, nvrtc)?;
        dev.bind()?;
        // The context is current (bound above).
        let util = dev.check(driver::stream_create(
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING,
        ))?;
        Ok(CudaBackend {
            streams: Arc::new(ContextStreams::new()),
            dev,
            util: Raw(util),
            notifier: Mutex::new(None),
        })
    }

    /// Opens a context on CUDA device `ordinal` (see [`CudaBackend::new`]).
    pub fn context(ordinal: usize) -> Result<crate::CudaContext> {
        gpukit_core::Context::new(CudaBackend::new(ordinal)?)
    }

    /// Where NVRTC was loaded from and its version, for reports.
    pub fn nvrtc_info(&self) -> (std::path::PathBuf, (u32, u32)) {
        (self.dev.nvrtc.loaded.path.clone(), self.dev.nvrtc.version)
    }

    /// [`Device::check`], into gpukit-core's error.
    pub(crate) fn check<T>(&self, r: std::result::Result<T, DriverError>) -> Result<T> {
        Ok(self.dev.check(r)?)
    }

    pub(crate) fn bind(&self) -> Result<()> {
        Ok(self.dev.bind()?)
    }

    /// A `CudaStream` over `s`, listed among the context's streams; `owned` streams are
    /// destroyed with it.
    fn stream_over(&self, s: sys::CUstream, owned: bool) -> Result<CudaStream> {
        self.streams.add(s);
        Ok(CudaStream {
            raw: Raw(s),
            scratch: CaptureScratch::new(crate::graph::gemm_workspace_bytes(
                self.dev.info.compute_capability,
            )),
            blas: Mutex::new(None),
            blas_workspace: Mutex::new(0),
            owned,
        })
    }
}

/// The host function [`Backend::notify`] queues: calls the boxed [`Wake`] it was given.
///
/// # Safety
///
/// `data` is a `Box<Wake>` from `Box::into_raw`, passed here once.
unsafe extern "C" fn wake_host_fn(data: *mut std::ffi::c_void) {
    // SAFETY: the caller's contract: this box, once.
    let wake = unsafe { Box::from_raw(data.cast::<Wake>()) };
    // A panic must not unwind into the driver's thread.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || (*wake)()));
}

impl CudaBackend {
    /// The notifier stream, made on first use (the context is current after this).
    fn notifier_stream(&self) -> Result<sys::CUstream> {
        self.bind()?;
        let mut n = lock(&self.notifier);
        if let Some(s) = n.as_ref() {
            return Ok(s.0);
        }
        // The context is current (bound above).
        let s = self.check(driver::stream_create(
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING,
        ))?;
        *n = Some(Raw(s));
        Ok(s)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the internal stream only ever ran memsets that were synchronised.
            let _ = unsafe { driver::stream_destroy(self.util.0) };
            if let Some(n) = lock(&self.notifier).take() {
                // SAFETY: a stream of this context; the driver runs its queued host
                // functions before releasing it (each frees its own closure).
                let _ = unsafe { driver::stream_destroy(n.0) };
            }
        }
    }
}

impl Backend for CudaBackend {
    type Buffer = CudaBuffer;
    type HostMem = CudaHostMem;
    type Registration = CudaRegistration;
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Kernel = CudaKernel;
    type Graph = CudaGraph;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_id(&self) -> usize {
        self.dev.ordinal
    }

    fn info(&self) -> DeviceInfo {
        self.dev.info.clone()
    }

    fn alloc(&self, bytes: usize, zeroed: bool) -> Result<CudaBuffer> {
        self.alloc_device(bytes, zeroed)
    }

    unsafe fn free(&self, buf: CudaBuffer, users: &[&CudaStream]) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { self.free_device(buf, users) }
    }

    fn alloc_host(&self, bytes: usize, usage: HostUse) -> Result<CudaHostMem> {
        self.alloc_pinned(bytes, usage)
    }

    fn host_ptr(&self, mem: &CudaHostMem) -> *mut u8 {
        mem.ptr.0
    }

    unsafe fn free_host(&self, mem: CudaHostMem) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { self.free_pinned(mem) }
    }

    unsafe fn register_host(&self, ptr: *mut u8, bytes: usize) -> Result<CudaRegistration> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { self.register(ptr, bytes) }
    }

    unsafe fn unregister_host(&self, reg: CudaRegistration) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { self.unregister(reg) }
    }

    fn create_stream(&self, priority: i32) -> Result<CudaStream> {
        self.bind()?;
        // The context is current; the priority was range-checked.
        let s = self.check(driver::stream_create_with_priority(
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING,
            priority,
        ))?;
        self.stream_over(s, true).inspect_err(|_| {
            // SAFETY: the new stream has no work and nothing else holds it.
            let _ = unsafe { driver::stream_destroy(s) };
        })
    }

    fn destroy_stream(&self, stream: CudaStream) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream of this context.
        let synced = self.check(unsafe { driver::stream_synchronize(stream.raw.0) });
        self.streams.remove(stream.raw.0);
        if let Some(handle) = lock(&stream.blas).take() {
            blas::destroy_blas(handle);
        }
        if stream.owned {
            // SAFETY: the stream has finished its work (or failed for good); a stream this
            // backend created is destroyed once (a wrapped one belongs to its creator).
            let _ = unsafe { driver::stream_destroy(stream.raw.0) };
        }
        synced
    }

    fn stream_sync(&self, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream of this context.
        self.check(unsafe { driver::stream_synchronize(stream.raw.0) })?;
        Ok(self.dev.reap(false)?)
    }

    fn stream_query(&self, stream: &CudaStream) -> Result<bool> {
        self.bind()?;
        // SAFETY: a live stream of this context.
        self.check(unsafe { driver::stream_query(stream.raw.0) })
    }

    fn record_event(&self, stream: &CudaStream, timing: bool) -> Result<CudaEvent> {
        self.bind()?;
        let e = self.dev.take_event(timing)?;
        let event = CudaEvent {
            raw: Raw(e),
            timing,
            dev: Arc::clone(&self.dev),
        };
        // SAFETY: an idle event and a live stream, both of this context.
        self.check(unsafe { driver::event_record(e, stream.raw.0) })?;
        Ok(event)
    }

    fn record_event_again(&self, stream: &CudaStream, event: &mut CudaEvent) -> Result<()> {
        if event.timing || !Arc::ptr_eq(&event.dev, &self.dev) {
            *event = self.record_event(stream, false)?;
            return Ok(());
        }
        self.bind()?;
        // SAFETY: an event and a live stream, both of this context; waits queued on the
        // event's earlier record are not affected by recording it again (the caller's
        // contract: nothing else holds it).
        self.check(unsafe { driver::event_record(event.raw.0, stream.raw.0) })
    }

    fn stream_wait(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream and a recorded event of this context.
        self.check(unsafe { driver::stream_wait_event(stream.raw.0, event.raw.0) })
    }

    fn stream_wait_peer(
        &self,
        stream: &CudaStream,
        _peer: &CudaBackend,
        event: &CudaEvent,
    ) -> Result<()> {
        // `cuStreamWaitEvent` takes an event of another context or device.
        self.stream_wait(stream, event)
    }

    fn raw_stream_wait(&self, raw: RawStream, event: &CudaEvent) -> Result<()> {
        let RawStream::Cuda(s) = raw else {
            return self.event_sync(event);
        };
        self.bind()?;
        // SAFETY: `s` is a live CUDA stream (the `RawStream` contract of its giver) and the
        // event a recorded event of this context; waiting changes nothing else.
        self.check(unsafe { driver::stream_wait_event(s.cast(), event.raw.0) })
    }

    fn notify(&self, event: &CudaEvent, wake: Wake) -> Option<Wake> {
        let Ok(stream) = self.notifier_stream() else {
            return Some(wake);
        };
        // SAFETY: a live stream and a recorded event of this context (bound above).
        let waited = unsafe { driver::stream_wait_event(stream, event.raw.0) };
        if waited.is_err() {
            return Some(wake);
        }
        let data = Box::into_raw(Box::new(wake)).cast::<std::ffi::c_void>();
        // SAFETY: `wake_host_fn` takes back exactly this box, once, when the driver runs it
        // after the event (it calls no CUDA function: a host function must not).
        let queued = unsafe { driver::launch_host_func(stream, wake_host_fn, data) };
        if queued.is_ok() {
            return None;
        }
        // SAFETY: not queued, so the driver will not run it: the box is still ours.
        Some(*unsafe { Box::from_raw(data.cast::<Wake>()) })
    }

    fn event_sync(&self, event: &CudaEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: a recorded event of this context.
        self.check(unsafe { driver::event_synchronize(event.raw.0) })
    }

    fn event_query(&self, event: &CudaEvent) -> Result<bool> {
        self.bind()?;
        // SAFETY: a recorded event of this context.
        self.check(unsafe { driver::event_query(event.raw.0) })
    }

    fn event_elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
        self.bind()?;
        if !(start.timing && end.timing) {
            return Err(Error::Backend {
                backend: "cuda",
                call: "cuEventElapsedTime",
                message: "an event recorded without timing has no time".into(),
            });
        }
        // SAFETY: two recorded timing events of this context.
        let ms = self.check(unsafe { driver::event_elapsed_time(start.raw.0, end.raw.0) })?;
        Ok(f64::from(ms))
    }

    /// Waits for this context's streams and its internal stream, one by one: never
    /// `cuCtxSynchronize`, which would wait for every context on the device and invalidate
    /// their captures.
    fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.streams.sync_all(&self.dev)?;
        // SAFETY: the internal stream is live.
        self.check(unsafe { driver::stream_synchronize(self.util.0) })?;
        Ok(self.dev.reap(false)?)
    }

    unsafe fn copy_h2d(
        &self,
        stream: &CudaStream,
        src: *const u8,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` lies inside its buffer (gpukit-core checked it); the caller keeps `src`
        // readable and unmodified until the stream passes the copy.
        self.check(unsafe {
            driver::memcpy_htod_async(dst.buf.at(dst.offset), src.cast(), bytes, stream.raw.0)
        })
    }

    unsafe fn copy_d2h(
        &self,
        stream: &CudaStream,
        src: BufAt<'_, Self>,
        dst: *mut u8,
        bytes: usize,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: `src` lies inside its buffer; the caller keeps `dst` writable and otherwise
        // unaccessed until the stream passes the copy.
        self.check(unsafe {
            driver::memcpy_dtoh_async(dst.cast(), src.buf.at(src.offset), bytes, stream.raw.0)
        })
    }

    unsafe fn copy_d2d(
        &self,
        stream: &CudaStream,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: both ranges lie inside their buffers and do not overlap (gpukit-core checked);
        // buffers outlive queued work (freed after their users' events).
        self.check(unsafe {
            driver::memcpy_dtod_async(
                dst.buf.at(dst.offset),
                src.buf.at(src.offset),
                bytes,
                stream.raw.0,
            )
        })
    }

    unsafe fn copy_peer(
        &self,
        stream: &CudaStream,
        peer: &CudaBackend,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        self.bind()?;
        self.dev.enable_peer(&peer.dev)?;
        // SAFETY: `src` lies inside a live buffer of `peer`'s context and `dst` inside one
        // of this context, with `bytes` to copy (gpukit-core checked both); the stream was
        // made to wait for the source's writers and the buffers outlive the queued copy.
        self.check(unsafe {
            driver::memcpy_peer_async(
                dst.buf.at(dst.offset),
                self.dev.ctx.0,
                src.buf.at(src.offset),
                peer.dev.ctx.0,
                bytes,
                stream.raw.0,
            )
        })
    }

    fn has_gemm(&self, dtype: DType) -> bool {
        dtype.is_float()
    }

    unsafe fn gemm(
        &self,
        stream: &CudaStream,
        dtype: DType,
        g: &Gemm<f64>,
        ops: [BufAt<'_, Self>; 3],
    ) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { blas::gemm_batch(self, stream, dtype, g, ops) }
    }

    fn load_kernel(&self, desc: &KernelDesc) -> Result<CudaKernel> {
        kernel::load(self, desc)
    }

    unsafe fn launch(
        &self,
        stream: &CudaStream,
        k: &CudaKernel,
        cfg: &LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<()> {
        // SAFETY: forwarded; our caller upholds the same contract.
        unsafe { kernel::launch(self, stream, k, cfg, args) }
    }

    fn raw_ptr(&self, at: BufAt<'_, Self>) -> RawPtr {
        RawPtr::Cuda(at.buf.at(at.offset))
    }

    fn raw_stream(&self, stream: &CudaStream) -> RawStream {
        RawStream::Cuda(stream.raw.0.cast())
    }

    unsafe fn buffer_from_raw(&self, ptr: RawPtr, bytes: usize) -> Result<CudaBuffer> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { self.wrap_device(ptr, bytes) }
    }

    unsafe fn stream_from_raw(&self, raw: RawStream) -> Result<CudaStream> {
        let RawStream::Cuda(handle) = raw else {
            return Err(Error::Unsupported {
                backend: "cuda",
                what: format!("wrapping {raw:?} (it needs a CUstream)"),
            });
        };
        self.bind()?;
        let s: sys::CUstream = handle.cast();
        // A stream of another context would order nothing against this one's work.
        // SAFETY: the caller vouches that `s` is a live stream (stream_from_raw's contract).
        let ctx = self.check(unsafe { driver::stream_get_ctx(s) })?;
        if ctx != self.dev.ctx.0 {
            return Err(Error::Unsupported {
                backend: "cuda",
                what: format!(
                    "a stream of another CUDA context (device {} uses its primary context)",
                    self.dev.ordinal
                ),
            });
        }
        self.stream_over(s, false)
    }

    fn alloc_unified(&self, bytes: usize) -> Result<CudaBuffer> {
        self.alloc_managed(bytes)
    }

    fn unified_ptr(&self, at: BufAt<'_, Self>) -> Option<*mut u8> {
        // Managed memory has one address on the host and the device.
        at.buf
            .managed
            .then(|| at.buf.at(at.offset) as usize as *mut u8)
    }

    unsafe fn prefetch(
        &self,
        stream: &CudaStream,
        at: BufAt<'_, Self>,
        bytes: usize,
        to: Location,
    ) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        unsafe { self.prefetch_managed(stream, at, bytes, to) }
    }

    fn begin_capture(&self, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        // The capture's gemms get a cuBLAS workspace of their own, which the graph takes:
        // replays then never share the handle's workspace with the stream's later eager
        // work, and outlive the stream. Allocated before the capture, not inside it.
        let workspace = self.mem_alloc(stream.scratch.workspace_bytes())?;
        let begun = self.streams.begin_capture(|| {
            // Relaxed: other threads' unrelated driver calls (allocations, syncs of other
            // streams) must not invalidate the capture; gpukit-core refuses the calls that
            // would break it on this stream.
            // SAFETY: a live stream of this context, not capturing (gpukit-core checks).
            let r = unsafe {
                driver::stream_begin_capture(
                    stream.raw.0,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            };
            self.dev.check(r)
        });
        match begun {
            Ok(()) => {
                stream.scratch.begin_capture(workspace);
                Ok(())
            }
            Err(e) => {
                // Nothing was queued on the new workspace: it goes at once.
                let _ = self.dev.free_after_events(workspace, Vec::new());
                Err(e.into())
            }
        }
    }

    fn end_capture(&self, stream: &CudaStream) -> Result<CudaGraph> {
        let workspace = stream.scratch.end_capture();
        let ended = self.streams.end_capture(|| {
            self.dev.bind()?;
            // SAFETY: the stream is capturing (begun by `begin_capture`).
            self.dev
                .check(unsafe { driver::stream_end_capture(stream.raw.0) })
        });
        let instantiated = ended.map_err(Error::from).and_then(|graph| {
            // SAFETY: `graph` is the graph the capture made.
            let exec = unsafe { driver::graph_instantiate(graph) };
            // SAFETY: the executable graph (if any) no longer needs the template.
            let destroyed = unsafe { driver::graph_destroy(graph) };
            let exec = self.check(exec)?;
            self.check(destroyed)?;
            Ok(exec)
        });
        // A capture without gemms leaves its workspace unused: it goes at once, and the
        // graph's launches need no event to free it after.
        let (owned, unused) = match workspace {
            Some((p, true)) if instantiated.is_ok() => (vec![p], Vec::new()),
            Some((p, _)) => (Vec::new(), vec![p]),
            None => (Vec::new(), Vec::new()),
        };
        if !unused.is_empty() {
            // Nothing ran on it: the captured work was recorded, never launched, or it has
            // no gemm.
            let _ = self.dev.free_all_after_events(unused, Vec::new());
        }
        Ok(CudaGraph::new(
            instantiated?,
            GraphScratch::new(owned),
            Arc::clone(&self.dev),
        ))
    }

    unsafe fn launch_graph(&self, graph: &CudaGraph, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        // SAFETY: the caller keeps the graph's buffers alive and ordered (this function's
        // contract); the graph keeps its own scratch alive until its last launch is done.
        unsafe { graph.launch(stream.raw.0) }
    }

    fn destroy_graph(&self, graph: CudaGraph) -> Result<()> {
        self.bind()?;
        graph.destroy()
    }

    fn range_push(&self, name: &str) -> bool {
        crate::nvtx::push(name)
    }

    fn range_pop(&self) {
        crate::nvtx::pop()
    }
}
