//! # gpukit-wgpu
//!
//! The portable GPU backend of the `gpukit` workspace: [`gpukit_core::Backend`] on any
//! Vulkan GPU (AMD, Intel, NVIDIA, and Mesa's lavapipe on a CPU), and on Metal and DX12,
//! through [`wgpu`](https://wgpu.rs). Device spec `vulkan` or `vulkan:N`; in the facade's
//! fallback chain it comes after CUDA and before the CPU backend.
//!
//! ```no_run
//! # fn main() -> gpukit::Result<()> {
//! let ctx = gpukit::Context::new(gpukit::DeviceSpec::Vulkan(None))?; // typed error without Vulkan
//! let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
//! let mut b = ctx.alloc_zeros::<f32>(3)?;
//! ctx.add(&a, &a, &mut b)?;                                        // a WGSL kernel
//! assert_eq!(b.download()?, vec![2.0, 4.0, 6.0]);
//! # Ok(()) }
//! ```
//!
//! ## How each part maps onto wgpu
//!
//! - **Adapters** are listed once per process on the Vulkan, Metal and DX12 APIs (never
//!   OpenGL, which wgpu would otherwise pick silently on a machine with only llvmpipe), in a
//!   stable order: discrete, integrated, virtual, other, CPU, then by name. `vulkan:N` is
//!   the N-th; `vulkan` the first usable. [`probe()`] says why there is none: no loader
//!   library, a loader without a driver, or adapters without the features needed
//!   (`IMMEDIATES` for the ops' parameters, `TIMESTAMP_QUERY` for timing events). The
//!   facade's `auto` passes over CPU-type adapters such as lavapipe: the CPU backend runs the
//!   same work faster on the same cores. On Linux it does not even start Vulkan where no
//!   adapter can be a GPU (no GPU device node, or only CPU drivers' manifests, and no
//!   `VK_DRIVER_FILES`-style override): that saves `auto` the probe's tens of milliseconds.
//!   Where there is no display session, libwayland-client's log (which Mesa's device-select
//!   layer would make print `XDG_RUNTIME_DIR is invalid` twice) is dropped.
//! - **Buffers** are storage buffers (zeroed by wgpu, as WebGPU requires), sized up to a
//!   multiple of 4 bytes. An array larger than one storage binding (128 MiB on lavapipe)
//!   still works: element-wise ops and copies bind it in windows; the other ops need each
//!   operand inside one binding and say so with `Unsupported` otherwise.
//! - **Host memory** ([`gpukit_core::HostUse`] any) is page-aligned host memory: wgpu's
//!   mappable buffers cannot stay mapped while the device uses them, so every transfer goes
//!   through a staging buffer, kept in a small pool between transfers (uploads' mapped for
//!   writing again once their copy has run) so that a steady stream of copies allocates
//!   nothing new. An upload copies into a staging buffer when it is recorded (after the
//!   stream's earlier downloads have landed) and the copy to the device buffer runs in
//!   stream order; a download copies into a staging buffer in stream order, and the host
//!   half (out of the mapped staging buffer into the destination) runs when the stream is
//!   synchronised or queried past it. Registration of host memory is accepted and
//!   does nothing, as on the CPU backend.
//! - **Streams** share the device's one queue. Each records into an encoder of its own and
//!   submits it when its work is needed: at a sync or query, when another stream waits
//!   for one of its events, and at a timing event (so that the device starts the work then,
//!   and an interval between two timing events measures work rather than the host's
//!   recording: the pipeline's calibrated bound depends on it). Streams therefore run one after another on the device, in the
//!   order their work was submitted; the safe layer's automatic ordering between streams
//!   keeps working (an event is a stream position; waiting for it submits the work up to
//!   it, and the queue runs submissions in order). **Events** are positions; timing events
//!   also write a GPU timestamp (a timestamp query), so `elapsed_ms` measures device time.
//! - **Built-in ops** (the element-wise table, fill, axpy, clamp, comparisons, `select`,
//!   `cumsum`, the reductions, gather, gemm, ...) are gpukit-core's kernels, in the WGSL of
//!   the kernel language's emitter, loaded and launched as any kernel (`src/kernel.rs`); the
//!   backend's one shader of its own is the byte copy that wgpu's copy command refuses
//!   (unaligned ranges, `src/wgsl/`). An op whose table entry calls the math library (its `math` column) is
//!   `Unsupported` on f64, which WGSL on Vulkan has no `exp`, `log`, `tanh` or `pow` for.
//!   Element types: f32, i32, u32, u8, i8 and bf16 on every adapter (the 8- and 16-bit ones
//!   packed in 32-bit words, stored with atomics so that neighbouring elements never race),
//!   f16 where the adapter has `SHADER_F16`, f64 where it has `SHADER_F64`, i64 and u64
//!   where it has `SHADER_INT64`; a type the adapter lacks is `Unsupported` for ops, naming
//!   the missing feature, and copies like any bytes. Float sums, means, dots and softmax
//!   statistics accumulate in f64 where the adapter has it, as the CPU backend does (else in
//!   f32, which is not bit for bit with the CPU, and errs more the longer the sum). Integer
//!   division by zero gives 0, as on every backend.
//! - **Custom kernels** are WGSL ([`gpukit_core::KernelSpec::wgsl`], unsafe to construct
//!   like CUDA C): the i-th array argument is `@group(0) @binding(i)` storage buffer, the
//!   scalars are one `var<immediate>` struct in signature order, each field 4 bytes (8 for
//!   64-bit scalars, which WGSL sees as `vec2<u32>`), and the launch's block size must equal
//!   the entry point's `@workgroup_size`.
//!
//! ## Accuracy
//!
//! WGSL does not promise correctly rounded division or square root (2.5 ulp), nor IEEE
//! results for `exp`, `log`, `tanh` and `pow` beyond the Vulkan limits, and drivers may
//! flush subnormals. `+ - *`, comparisons and casts agree with the CPU backend bit for bit
//! on lavapipe; the property tests hold every op to its table contract, widened for an op
//! that calls `exp`, `log`, `tanh` or `pow` by the bound of Vulkan's function
//! (`gpukit_core::MathFn`, from the op's `math` column).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![warn(unsafe_op_in_unsafe_fn)]

mod device;
mod kernel;
mod ops;
mod staging;
mod stream;
mod wgsl;

use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex, Weak};

use gpukit_core::{
    Backend, BufAt, DeviceInfo, Error, HostUse, KernelArg, KernelDesc, LaunchConfig, LaunchLimits,
    RawPtr, RawStream, Result, Wake,
};

pub use device::{probe, AdapterKind, AdapterProbe, Probe, ProbeError};
pub use kernel::WgpuKernel;
pub use stream::{WgpuEvent, WgpuStream};

use device::NAME;
use stream::StreamInner;

/// A context on the wgpu backend.
pub type WgpuContext = gpukit_core::Context<WgpuBackend>;

/// Options for opening the backend (tests use them to make windows small).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WgpuOptions {
    /// Largest storage binding to use, in bytes (`None`: the adapter's limit). Arrays
    /// larger than this are bound in windows by element-wise ops and copies.
    pub max_binding: Option<u64>,
    /// Pass over CPU-type adapters when no ordinal is given (the facade's `auto`).
    pub skip_cpu_adapters: bool,
    /// Optional features to leave off even where the adapter has them (`SHADER_F64`,
    /// `SHADER_F16`, `SHADER_INT64`, `SUBGROUP`, ...): the device then runs as an adapter
    /// without them does (f64 sums accumulated in f32, subgroups through workgroup memory),
    /// which is how the tests check those paths on an adapter that has everything.
    pub without: wgpu::Features,
}

/// What every object of one opened device shares.
pub(crate) struct Shared {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) probe: AdapterProbe,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    /// Largest binding used, a multiple of `align`.
    pub(crate) max_binding: u64,
    /// Alignment of binding offsets.
    pub(crate) align: u64,
    /// A fatal error (device lost); every later call fails with it.
    fatal: Mutex<Option<Error>>,
    /// An error wgpu raised outside any call's scope, returned by the next call.
    uncaptured: Arc<Mutex<Option<String>>>,
    /// Compiled op pipelines by key.
    pub(crate) pipelines: Mutex<HashMap<String, Arc<ops::Pipe>>>,
    /// Every stream, for `synchronize`.
    streams: Mutex<Vec<Weak<StreamInner>>>,
    /// A small buffer bound where an argument is empty ([`DUMMY_BYTES`]).
    pub(crate) dummy: wgpu::Buffer,
    /// Staging buffers kept between transfers.
    pub(crate) staging: staging::StagingPool,
    /// Another, for empty read-only arguments of custom kernels (one buffer may not be bound
    /// read-only and writable in one dispatch).
    pub(crate) dummy_ro: wgpu::Buffer,
    /// The queue of the device's waiter thread, started by the first [`Backend::notify`].
    waiter: Mutex<Option<mpsc::Sender<(WgpuEvent, Wake)>>>,
}

impl Shared {
    /// Wakes `wake` once `event` has completed, from the device's waiter thread: one thread
    /// per device, started at the first call, that drives each event it is given in turn
    /// (submits its work, polls the device until it is done, runs the host halves of the
    /// downloads before it) and then wakes its waiter. wgpu calls a submission's
    /// `on_submitted_work_done` callback only from a device poll, and a download completes
    /// only once its host half has run, so a thread must drive the device in any case; one
    /// per device serves any number of awaits. The thread ends with the device. Gives
    /// `wake` back where the thread cannot be started.
    fn notify(&self, event: &WgpuEvent, wake: Wake) -> Option<Wake> {
        let mut waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner());
        if waiter.is_none() {
            let (tx, rx) = mpsc::channel::<(WgpuEvent, Wake)>();
            let started = std::thread::Builder::new()
                .name("gpukit-wgpu-waiter".into())
                .spawn(move || {
                    while let Ok((event, wake)) = rx.recv() {
                        // The waiter reads the result again (at once, the work being done).
                        let _ = event.sync();
                        drop(event);
                        wake();
                    }
                });
            if started.is_err() {
                return Some(wake);
            }
            *waiter = Some(tx);
        }
        let Some(tx) = waiter.as_ref() else {
            return Some(wake);
        };
        match tx.send((event.same(), wake)) {
            Ok(()) => None,
            Err(mpsc::SendError((_, wake))) => {
                // The thread is gone (it panicked): start another next time.
                *waiter = None;
                Some(wake)
            }
        }
    }

    /// The fatal error, or an error wgpu raised since the last call.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(e) = &*self.fatal.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(Error::Poisoned {
                first: Box::new(e.clone()),
            });
        }
        if let Some(m) = self
            .uncaptured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(Error::Backend {
                backend: NAME,
                call: "wgpu",
                message: m,
            });
        }
        Ok(())
    }

    pub(crate) fn poison(&self, e: &Error) {
        self.fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| e.clone());
    }

    /// Runs `f` inside a validation and out-of-memory error scope; an error wgpu raises
    /// inside is returned.
    pub(crate) fn scoped<R>(&self, call: &'static str, f: impl FnOnce() -> R) -> Result<R> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let v = device::block_on(val.pop());
        let o = device::block_on(oom.pop());
        if let Some(e) = o {
            return Err(Error::OutOfMemory {
                backend: NAME,
                requested: 0,
                detail: format!("{call}: {e}"),
            });
        }
        if let Some(e) = v {
            return Err(Error::Backend {
                backend: NAME,
                call,
                message: e.to_string(),
            });
        }
        Ok(r)
    }
}

/// The wgpu backend: one adapter's device and queue.
pub struct WgpuBackend {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.shared.probe.name)
            .field("ordinal", &self.shared.probe.ordinal)
            .field("api", &self.shared.probe.api)
            .finish_non_exhaustive()
    }
}

/// Device memory: a storage buffer.
pub struct WgpuBuffer {
    pub(crate) buf: wgpu::Buffer,
    /// The size asked for (the buffer is rounded up to 4 bytes).
    pub(crate) bytes: usize,
}

impl std::fmt::Debug for WgpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBuffer")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// Host memory: page-aligned, zeroed (transfers go through staging buffers).
pub struct WgpuHostMem {
    ptr: std::ptr::NonNull<u8>,
    layout: Layout,
}

// SAFETY: plain heap memory owned by this value; the safe layer orders access to it.
unsafe impl Send for WgpuHostMem {}
// SAFETY: as above; `&WgpuHostMem` only yields the pointer.
unsafe impl Sync for WgpuHostMem {}

impl Drop for WgpuHostMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc_host` with this layout, freed once here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl std::fmt::Debug for WgpuHostMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuHostMem")
            .field("bytes", &self.layout.size())
            .finish()
    }
}

/// A registration of host memory: accepted and empty (see the crate docs).
#[derive(Debug)]
pub struct WgpuRegistration;

/// Size of the buffer bound for empty arguments: larger than any one element of a bound
/// array.
pub(crate) const DUMMY_BYTES: u64 = 256;

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

impl WgpuBackend {
    /// Opens adapter `ordinal` in the probe's order (`None`: the first usable one).
    pub fn new(ordinal: Option<usize>) -> Result<WgpuBackend> {
        WgpuBackend::with_options(ordinal, WgpuOptions::default())
    }

    /// Opens an adapter with options.
    pub fn with_options(ordinal: Option<usize>, opts: WgpuOptions) -> Result<WgpuBackend> {
        let o = device::open(ordinal, opts.skip_cpu_adapters, opts.without)?;
        let align = u64::from(o.limits.min_storage_buffer_offset_alignment).max(8);
        let adapter_max = o
            .limits
            .max_storage_buffer_binding_size
            .min(o.limits.max_buffer_size);
        let max_binding = opts.max_binding.unwrap_or(adapter_max).min(adapter_max);
        let max_binding = (max_binding / align * align).max(align * 4);
        let uncaptured: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let sink = uncaptured.clone();
        o.device
            .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| e.to_string());
            }));
        let dummy = o.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit empty argument"),
            size: DUMMY_BYTES,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let dummy_ro = o.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit empty read-only argument"),
            size: DUMMY_BYTES,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let shared = Arc::new(Shared {
            device: o.device,
            queue: o.queue,
            probe: o.probe,
            limits: o.limits,
            features: o.features,
            max_binding,
            align,
            fatal: Mutex::new(None),
            uncaptured,
            pipelines: Mutex::new(HashMap::new()),
            streams: Mutex::new(Vec::new()),
            dummy,
            dummy_ro,
            staging: staging::StagingPool::default(),
            waiter: Mutex::new(None),
        });
        let weak = Arc::downgrade(&shared);
        shared
            .device
            .set_device_lost_callback(move |reason, message| {
                if let Some(s) = weak.upgrade() {
                    s.poison(&Error::Backend {
                        backend: NAME,
                        call: "device lost",
                        message: format!("{reason:?}: {message}"),
                    });
                }
            });
        Ok(WgpuBackend { shared })
    }

    /// Opens a context on adapter `ordinal` (`None`: the first usable one).
    pub fn context(ordinal: Option<usize>) -> Result<WgpuContext> {
        gpukit_core::Context::new(WgpuBackend::new(ordinal)?)
    }

    /// What the probe knows of the adapter in use.
    pub fn adapter(&self) -> &AdapterProbe {
        &self.shared.probe
    }

    /// The storage binding size the backend uses (arrays larger are bound in windows).
    pub fn max_binding(&self) -> u64 {
        self.shared.max_binding
    }
}

impl Backend for WgpuBackend {
    type Buffer = WgpuBuffer;
    type HostMem = WgpuHostMem;
    type Registration = WgpuRegistration;
    type Stream = WgpuStream;
    type Event = WgpuEvent;
    type Kernel = WgpuKernel;
    type Graph = WgpuGraph;

    fn name(&self) -> &'static str {
        NAME
    }

    fn device_id(&self) -> usize {
        self.shared.probe.ordinal
    }

    fn info(&self) -> DeviceInfo {
        let l = &self.shared.limits;
        DeviceInfo {
            name: self.shared.probe.name.clone(),
            // wgpu does not report device memory; the largest buffer is the nearest bound.
            total_memory: l.max_buffer_size,
            compute_capability: None,
            // One queue: transfers and compute share it.
            copy_engines: 0,
            multiprocessors: 1,
            limits: LaunchLimits {
                max_threads_per_block: l.max_compute_invocations_per_workgroup,
                // At most CUDA's, which `#[kernel]`'s proofs of shared-array indices
                // assume (`thread_x()` below 1024, `thread_z()` below 64).
                max_block_dim: [
                    l.max_compute_workgroup_size_x.min(1024),
                    l.max_compute_workgroup_size_y.min(1024),
                    l.max_compute_workgroup_size_z.min(64),
                ],
                max_grid_dim: [l.max_compute_workgroups_per_dimension; 3],
                // WGSL has no dynamic shared memory (workgroup arrays have fixed sizes).
                max_shared_mem_per_block: 0,
                max_array_bytes: self.shared.max_binding,
            },
            priority_range: (0, 0),
            op_dtypes: wgsl::dtypes(ops::caps(&self.shared)),
            native_ops: false,
            // Measured on lavapipe (2 cores): a workgroup of 256 invocations costs about 0.5 us
            // to start, about what its invocations' work on one element each costs; at 4
            // elements per invocation, element-wise ops on 1 MiB of f32 take 0.65-0.76x the
            // time they take at 1.
            items_per_thread: if self.shared.probe.kind == AdapterKind::Cpu {
                4
            } else {
                1
            },
        }
    }

    fn alloc(&self, bytes: usize, _zeroed: bool) -> Result<WgpuBuffer> {
        let size = round4(bytes as u64);
        if size > self.shared.limits.max_buffer_size {
            return Err(Error::OutOfMemory {
                backend: NAME,
                requested: bytes,
                detail: format!(
                    "larger than the adapter's largest buffer ({} bytes)",
                    self.shared.limits.max_buffer_size
                ),
            });
        }
        self.shared.check()?;
        let buf = self
            .shared
            .scoped("Device::create_buffer", || {
                self.shared.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpukit array"),
                    size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .map_err(|e| match e {
                Error::OutOfMemory { detail, .. } => Error::OutOfMemory {
                    backend: NAME,
                    requested: bytes,
                    detail,
                },
                e => e,
            })?;
        Ok(WgpuBuffer { buf, bytes })
    }

    unsafe fn free(&self, buf: WgpuBuffer, _users: &[&WgpuStream]) -> Result<()> {
        // wgpu keeps the memory until the submissions (and recorded encoders) that use it
        // are done with it.
        drop(buf);
        Ok(())
    }

    fn alloc_host(&self, bytes: usize, _usage: HostUse) -> Result<WgpuHostMem> {
        let oom = |detail: String| Error::OutOfMemory {
            backend: NAME,
            requested: bytes,
            detail,
        };
        let layout = Layout::from_size_align(bytes.max(1), 4096)
            .map_err(|e| oom(format!("host allocation: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(p).ok_or_else(|| oom("the host allocator refused".into()))?;
        Ok(WgpuHostMem { ptr, layout })
    }

    fn host_ptr(&self, mem: &WgpuHostMem) -> *mut u8 {
        mem.ptr.as_ptr()
    }

    unsafe fn free_host(&self, mem: WgpuHostMem) -> Result<()> {
        drop(mem);
        Ok(())
    }

    unsafe fn register_host(&self, ptr: *mut u8, _bytes: usize) -> Result<WgpuRegistration> {
        if ptr.is_null() {
            return Err(Error::Unsupported {
                backend: NAME,
                what: "registering a null host pointer".into(),
            });
        }
        Ok(WgpuRegistration)
    }

    unsafe fn unregister_host(&self, _reg: WgpuRegistration) -> Result<()> {
        Ok(())
    }

    fn create_stream(&self, _priority: i32) -> Result<WgpuStream> {
        self.shared.check()?;
        let inner = StreamInner::new(self.shared.clone());
        let mut streams = self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        streams.retain(|s| s.strong_count() > 0);
        streams.push(Arc::downgrade(&inner));
        Ok(WgpuStream { inner })
    }

    fn destroy_stream(&self, stream: WgpuStream) -> Result<()> {
        stream.inner.sync()
    }

    fn stream_sync(&self, stream: &WgpuStream) -> Result<()> {
        self.shared.check()?;
        stream.inner.sync()
    }

    fn stream_query(&self, stream: &WgpuStream) -> Result<bool> {
        self.shared.check()?;
        stream.inner.query()
    }

    fn record_event(&self, stream: &WgpuStream, timing: bool) -> Result<WgpuEvent> {
        stream.inner.record_event(timing)
    }

    fn stream_wait(&self, stream: &WgpuStream, event: &WgpuEvent) -> Result<()> {
        event.order_before(&stream.inner)
    }

    fn event_sync(&self, event: &WgpuEvent) -> Result<()> {
        event.sync()
    }

    fn notify(&self, event: &WgpuEvent, wake: Wake) -> Option<Wake> {
        self.shared.notify(event, wake)
    }

    fn event_query(&self, event: &WgpuEvent) -> Result<bool> {
        event.query()
    }

    fn event_elapsed_ms(&self, start: &WgpuEvent, end: &WgpuEvent) -> Result<f64> {
        if !start.same_device(end) {
            return Err(Error::Backend {
                backend: NAME,
                call: "event_elapsed_ms",
                message: "events of two devices".into(),
            });
        }
        let (a, b) = (start.ticks()?, end.ticks()?);
        let ns = f64::from(self.shared.queue.get_timestamp_period());
        Ok((b as f64 - a as f64) * ns / 1e6)
    }

    fn synchronize(&self) -> Result<()> {
        let streams: Vec<Arc<StreamInner>> = {
            let s = self
                .shared
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            s.iter().filter_map(Weak::upgrade).collect()
        };
        let mut first = self.shared.check();
        for s in streams {
            let r = s.sync();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    unsafe fn copy_h2d(
        &self,
        stream: &WgpuStream,
        src: *const u8,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: forwarded (Backend::copy_h2d's contract).
        unsafe { ops::upload(&self.shared, &stream.inner, src, dst, bytes) }
    }

    unsafe fn copy_d2h(
        &self,
        stream: &WgpuStream,
        src: BufAt<'_, Self>,
        dst: *mut u8,
        bytes: usize,
    ) -> Result<()> {
        let a = src.offset as u64 & !3;
        let end = round4((src.offset + bytes) as u64);
        stream.inner.record_download(
            &src.buf.buf,
            a,
            end - a,
            dst,
            src.offset - a as usize,
            bytes,
        )
    }

    unsafe fn copy_d2d(
        &self,
        stream: &WgpuStream,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        ops::copy_d2d(&self.shared, &stream.inner, src, dst, bytes)
    }

    fn load_kernel(&self, desc: &KernelDesc) -> Result<WgpuKernel> {
        kernel::load(&self.shared, desc)
    }

    unsafe fn launch(
        &self,
        stream: &WgpuStream,
        kernel: &WgpuKernel,
        cfg: &LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<()> {
        kernel::launch(&self.shared, &stream.inner, kernel, cfg, args)
    }

    fn raw_ptr(&self, _at: BufAt<'_, Self>) -> RawPtr {
        RawPtr::Opaque
    }

    fn raw_stream(&self, _stream: &WgpuStream) -> RawStream {
        RawStream::None
    }

    unsafe fn buffer_from_raw(&self, ptr: RawPtr, _bytes: usize) -> Result<WgpuBuffer> {
        Err(Error::Unsupported {
            backend: NAME,
            what: format!(
                "wrapping {ptr:?} as device memory: wgpu buffers have no address to share \
                 (interop goes through host memory)"
            ),
        })
    }

    unsafe fn stream_from_raw(&self, raw: RawStream) -> Result<WgpuStream> {
        Err(Error::Unsupported {
            backend: NAME,
            what: format!(
                "wrapping a native stream ({raw:?}): wgpu has one queue and no stream handles"
            ),
        })
    }

    fn begin_capture(&self, _stream: &WgpuStream) -> Result<()> {
        Err(graphs_unsupported())
    }

    fn end_capture(&self, _stream: &WgpuStream) -> Result<WgpuGraph> {
        Err(graphs_unsupported())
    }

    unsafe fn launch_graph(&self, graph: &WgpuGraph, _stream: &WgpuStream) -> Result<()> {
        match *graph {}
    }

    fn destroy_graph(&self, graph: WgpuGraph) -> Result<()> {
        match graph {}
    }
}

/// Graphs on wgpu: none can exist (capture is [`Error::Unsupported`]).
#[derive(Debug)]
pub enum WgpuGraph {}

fn graphs_unsupported() -> Error {
    Error::Unsupported {
        backend: NAME,
        what: "graph capture: a wgpu command buffer runs once, so recorded work cannot be \
               replayed (queue the work eagerly)"
            .into(),
    }
}
