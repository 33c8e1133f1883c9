//! The backend contract: associated types for the objects a device has, and the raw
//! operations on them, statically dispatched.
//!
//! A backend works on untyped buffers and byte offsets; the element type is added once, in
//! [`crate::GpuArray`]. Everything the safe layer checks (lengths, ranges, contexts, launch
//! limits, ordering between streams) is checked before a backend method is called, so a
//! backend can assume:
//! - every buffer, stream, event and kernel passed in was created by this backend instance;
//! - every `BufAt` range lies inside its buffer and is non-empty;
//! - a buffer written by a call is not used by any other work that is not ordered against
//!   it (the safe layer inserts the waits).
//!
//! What a backend must provide in return is written on each method. The CPU backend
//! (`gpukit-cpu`) is the reference implementation of these semantics.
//!
//! ## Why the memory methods are `unsafe`
//!
//! A backend is a public type (`gpukit_cpu::CpuBackend::new()`, `ctx.backend()`), and
//! [`BufAt`] is plain data, so a safe method taking a `BufAt` and a length would let safe
//! code write past any allocation. Every method that frees memory other work may still use,
//! or reads or writes device memory at a caller-chosen place (copies, ops, kernel launches),
//! is therefore an `unsafe fn` whose `# Safety` section is the list above made precise; the
//! safe layer of gpukit-core is the one caller that discharges it. Stream and event
//! management, allocation and loading a kernel stay safe: they touch no memory a caller
//! chose.
//!
//! ```compile_fail,E0133
//! use gpukit::core::{Backend, BufAt};
//! let b = gpukit::cpu::CpuBackend::new()?;
//! let (s, buf) = (b.create_stream(0)?, b.alloc(4, true)?);
//! // A terabyte past a 4-byte buffer: refused at compile time outside `unsafe`.
//! let one = 1.0f32;
//! let past = BufAt { buf: &buf, offset: 1 << 40 };
//! b.copy_h2d(&s, (&one as *const f32).cast(), past, 4)?;
//! # Ok::<(), gpukit::Error>(())
//! ```

use crate::element::DType;
use crate::kernel::{KernelDesc, LaunchConfig};
use crate::optable::Gemm;

/// How host memory will be used; the backend picks the kind of pinning from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HostUse {
    /// Written by the host, read by the device: write-combined where the backend has it
    /// (fast to upload from, slow for the host to read).
    Upload,
    /// Written by the device, read by the host: plainly pinned.
    Download,
    /// Both directions: plainly pinned.
    #[default]
    Both,
}

/// The limits a launch configuration is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchLimits {
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most threads along each block dimension.
    pub max_block_dim: [u32; 3],
    /// Most blocks along each grid dimension.
    pub max_grid_dim: [u32; 3],
    /// Most dynamic shared memory per block, in bytes.
    pub max_shared_mem_per_block: u32,
    /// Most bytes of one array argument of a kernel (a Vulkan storage binding's limit;
    /// `u64::MAX` where an array may be as large as memory). Built-in ops over larger
    /// arrays launch their kernels over windows of them.
    pub max_array_bytes: u64,
}

impl LaunchLimits {
    /// The limits of every CUDA device of compute capability 5.0 and later (without the
    /// opt-in to more than 48 KiB of shared memory). The CPU backend uses them too, so a
    /// configuration accepted on the CPU is accepted on any such GPU.
    pub const CUDA_COMMON: LaunchLimits = LaunchLimits {
        max_threads_per_block: 1024,
        max_block_dim: [1024, 1024, 64],
        max_grid_dim: [i32::MAX as u32, 65535, 65535],
        max_shared_mem_per_block: 48 * 1024,
        max_array_bytes: u64::MAX,
    };
}

/// What a device is.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// Marketing name (`NVIDIA H100 80GB HBM3`) or the CPU's model name.
    pub name: String,
    /// Device memory in bytes (the host's memory for the CPU backend).
    pub total_memory: u64,
    /// CUDA compute capability, `None` for the CPU backend.
    pub compute_capability: Option<(u32, u32)>,
    /// Copy engines that can run transfers concurrently with compute.
    pub copy_engines: u32,
    /// Processors that run work: SMs on a GPU, cores on the CPU.
    pub multiprocessors: u32,
    /// Launch limits.
    pub limits: LaunchLimits,
    /// Stream priorities as `(least, greatest)`; numerically lower is more urgent.
    pub priority_range: (i32, i32),
    /// The element types the built-in ops run on (every type on the CPU and CUDA backends;
    /// on the wgpu backend those WGSL and the adapter have). Copies work on every type; an
    /// op on another type is [`crate::Error::Unsupported`].
    pub op_dtypes: Vec<DType>,
    /// Whether the backend runs a built-in kernel's native Rust body rather than its GPU
    /// code (the CPU backend: [`crate::KernelSpec`]'s native bodies), so that gpukit-core
    /// launches a built-in op once over its whole input rather than in parts.
    pub native_ops: bool,
    /// Elements each thread of a built-in kernel that walks an array in a grid-stride loop
    /// takes at the least (its grid is the elements over 256 times this, up to a cap): 1 on
    /// GPUs, where more blocks hide memory latency; 4 on a CPU implementation of a GPU API
    /// (lavapipe), where starting a workgroup costs about as much as its threads' work on
    /// one element each.
    pub items_per_thread: u32,
}

/// A backend's native address of device memory, for interop with code outside this
/// library (cudarc, your own cuBLAS or cuDNN calls, other CUDA libraries).
///
/// Obtained from an array or view ([`crate::DeviceRead::raw_ptr`],
/// [`crate::Stream::with_raw`]) or given to [`crate::Context::array_from_raw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RawPtr {
    /// A CUDA device address (`CUdeviceptr`), valid in the device's primary context.
    Cuda(u64),
    /// A host address: the CPU backend's device memory is host memory.
    Host(*mut u8),
    /// The backend has no address to give: a wgpu buffer is an opaque object of its API
    /// (share data with code outside this library through host memory there).
    Opaque,
}

/// A backend's native stream handle, for interop (see [`RawPtr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RawStream {
    /// A CUDA stream (`CUstream`) of the device's primary context.
    Cuda(*mut std::ffi::c_void),
    /// The backend has no native stream object: the CPU backend's streams are worker-thread
    /// queues. Raw access on such a stream happens on the calling thread, after the stream
    /// has finished its queued work ([`crate::Stream::with_raw`]).
    None,
}

/// A callback a backend calls once, from any thread ([`Backend::notify`]).
pub type Wake = Box<dyn FnOnce() + Send + 'static>;

/// A position inside a backend buffer: the buffer and a byte offset.
pub struct BufAt<'a, B: Backend> {
    /// The buffer.
    pub buf: &'a B::Buffer,
    /// Offset in bytes from the buffer's start.
    pub offset: usize,
}

impl<B: Backend> Clone for BufAt<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for BufAt<'_, B> {}

impl<B: Backend> std::fmt::Debug for BufAt<'_, B> {
    /// The offset; the buffer is the backend's opaque handle.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufAt")
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// One argument of a kernel launch, as the backend sees it.
pub enum KernelArg<'a, B: Backend> {
    /// A device range; `at` is `None` for an empty range.
    Buffer {
        /// Where the range starts (`None` when `bytes == 0`).
        at: Option<BufAt<'a, B>>,
        /// Length in bytes.
        bytes: usize,
        /// Whether the kernel may write it.
        write: bool,
    },
    /// A scalar passed by value: its bytes, little-endian as in memory.
    Scalar {
        /// The value's bytes; the first `len` are meaningful.
        bytes: [u8; 16],
        /// Size of the value.
        len: usize,
    },
}

impl<B: Backend> KernelArg<'_, B> {
    /// A scalar argument from its bytes in memory order (at most 16; more are left out).
    #[inline]
    pub fn scalar(value: &[u8]) -> Self {
        let len = value.len().min(16);
        let bytes = if len <= 8 {
            scalar_bytes(value)
        } else {
            let mut bytes = [0u8; 16];
            bytes[..len].copy_from_slice(&value[..len]);
            bytes
        };
        KernelArg::Scalar { bytes, len }
    }
}

/// A scalar's bytes (at most 8; more are left out) in the 16 an argument carries, the rest
/// zero. Built as one integer, so that the copies that carry it on read it back from one
/// store (bytes written one by one and then read as a whole wait for the stores to land:
/// about 11 ns an add on the CPU backend).
#[inline]
pub(crate) fn scalar_bytes(value: &[u8]) -> [u8; 16] {
    let mut low = [0u8; 8];
    let n = value.len().min(8);
    low[..n].copy_from_slice(&value[..n]);
    let wide = u128::from(u64::from_ne_bytes(low));
    // The first 8 of the 16 bytes in memory order: the low half on a little-endian target.
    let wide = if cfg!(target_endian = "little") {
        wide
    } else {
        wide << 64
    };
    wide.to_ne_bytes()
}

impl<B: Backend> std::fmt::Debug for KernelArg<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelArg::Buffer { at, bytes, write } => f
                .debug_struct("Buffer")
                .field("at", at)
                .field("bytes", bytes)
                .field("write", write)
                .finish(),
            KernelArg::Scalar { bytes, len } => f
                .debug_struct("Scalar")
                .field("bytes", &bytes.get(..*len).unwrap_or(bytes))
                .finish(),
        }
    }
}

/// Where [`crate::UnifiedArray::prefetch`] moves unified memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// The context's device.
    Device,
    /// Host memory.
    Host,
}

/// A compute backend: the objects a device has and the raw operations on them.
///
/// Implemented by `gpukit_cpu::CpuBackend` (the reference) and by the facade's dispatch enum;
/// the CUDA backend implements it on cudarc. All methods that enqueue work are asynchronous:
/// they return once the work is queued on the stream.
pub trait Backend: Send + Sync + Sized + 'static {
    /// Untyped device memory.
    type Buffer: Send + Sync;
    /// Host memory the backend allocated (pinned where the backend pins).
    type HostMem: Send + Sync;
    /// A registration of host memory the backend did not allocate.
    type Registration: Send + Sync;
    /// An in-order queue of work.
    type Stream: Send + Sync;
    /// A position in a stream's queue.
    type Event: Send + Sync;
    /// A loaded kernel.
    type Kernel: Send + Sync;
    /// Work captured from a stream, ready to launch any number of times.
    type Graph: Send + Sync;

    /// Short lower-case name: `cpu`, `cuda`.
    fn name(&self) -> &'static str;
    /// The device's ordinal within its backend.
    fn device_id(&self) -> usize;
    /// What the device is.
    fn info(&self) -> DeviceInfo;

    /// Allocates `bytes > 0` bytes, aligned to at least 256 bytes, zeroed when `zeroed`.
    /// Running out is [`crate::Error::OutOfMemory`].
    fn alloc(&self, bytes: usize, zeroed: bool) -> crate::Result<Self::Buffer>;
    /// Frees a buffer once the work already queued on `users` (the streams that used it)
    /// has finished, without blocking the caller where the backend can avoid it.
    ///
    /// # Safety
    ///
    /// - `users` holds every stream of this backend with queued work that uses the buffer
    ///   (the memory may be reused as soon as they have passed that work).
    unsafe fn free(&self, buf: Self::Buffer, users: &[&Self::Stream]) -> crate::Result<()>;

    /// Allocates `bytes > 0` bytes of zeroed host memory for the given use.
    fn alloc_host(&self, bytes: usize, usage: HostUse) -> crate::Result<Self::HostMem>;
    /// The start of a host allocation; valid and unchanged for the allocation's lifetime.
    fn host_ptr(&self, mem: &Self::HostMem) -> *mut u8;
    /// Frees host memory.
    ///
    /// # Safety
    ///
    /// - no queued copy uses the memory any more.
    unsafe fn free_host(&self, mem: Self::HostMem) -> crate::Result<()>;
    /// Registers existing host memory so that copies from and to it run at pinned speed.
    ///
    /// # Safety
    ///
    /// - `ptr..ptr + bytes` must be one live allocation of the caller's;
    /// - it must stay allocated until the registration is passed to `unregister_host`.
    unsafe fn register_host(&self, ptr: *mut u8, bytes: usize)
        -> crate::Result<Self::Registration>;
    /// Ends a registration.
    ///
    /// # Safety
    ///
    /// - no queued copy uses the memory any more.
    unsafe fn unregister_host(&self, reg: Self::Registration) -> crate::Result<()>;

    /// Creates a stream; `priority` lies inside [`DeviceInfo::priority_range`].
    fn create_stream(&self, priority: i32) -> crate::Result<Self::Stream>;
    /// Destroys a stream; work already queued on it still runs to completion first.
    /// Errors raised by that work and not yet reported are returned here.
    fn destroy_stream(&self, stream: Self::Stream) -> crate::Result<()>;
    /// Blocks until all work queued on the stream has finished, or can never run (after a
    /// fatal error). Returns the first error raised by that work and not yet reported.
    fn stream_sync(&self, stream: &Self::Stream) -> crate::Result<()>;
    /// Whether all work queued on the stream has finished, without blocking.
    fn stream_query(&self, stream: &Self::Stream) -> crate::Result<bool>;
    /// Marks the stream's current position; with `timing`, the event also records when
    /// the stream reached it.
    fn record_event(&self, stream: &Self::Stream, timing: bool) -> crate::Result<Self::Event>;
    /// Records `event`, an ordering event (recorded without timing) of this backend that
    /// nothing waits on any more, again at the stream's current position, as
    /// [`Backend::record_event`] would record a new one. A backend that can move an event in
    /// place saves creating one; by default it is replaced by a new one.
    fn record_event_again(
        &self,
        stream: &Self::Stream,
        event: &mut Self::Event,
    ) -> crate::Result<()> {
        *event = self.record_event(stream, false)?;
        Ok(())
    }
    /// Makes work queued later on `stream` wait until `event` has completed.
    fn stream_wait(&self, stream: &Self::Stream, event: &Self::Event) -> crate::Result<()>;
    /// Makes work queued later on `stream` wait until `event` has completed, where `event`
    /// was recorded by `peer`: the backend of another context (another device, or another
    /// context on the same one), of the same backend type. The default blocks the calling
    /// thread until the event has completed (with the guarantee of `event_sync`), which is
    /// correct for every backend; backends whose streams can wait on another context's
    /// events without the host (CUDA's `cuStreamWaitEvent`, the CPU backend's queues)
    /// override it.
    fn stream_wait_peer(
        &self,
        stream: &Self::Stream,
        peer: &Self,
        event: &Self::Event,
    ) -> crate::Result<()> {
        let _ = stream;
        peer.event_sync(event)
    }
    /// Arranges for `wake` to be called once `event` has completed (or can never complete,
    /// after a fatal error), from whatever thread sees it, without blocking the caller; it
    /// may be called before this returns, and it must not be called twice. Returns
    /// `Some(wake)` where the backend has no such callback (the default, or a failure to
    /// arrange one): gpukit-core then waits for the event on a thread of its own. The CPU
    /// backend calls it from the worker that finishes the event's position, CUDA from a
    /// host function (`cuLaunchHostFunc`) queued after the event, the Vulkan backend from its
    /// device's waiter thread (wgpu runs its submitted-work callbacks only inside a device
    /// poll, so one thread per device polls for every await).
    fn notify(&self, event: &Self::Event, wake: Wake) -> Option<Wake> {
        let _ = event;
        Some(wake)
    }

    /// Makes work queued later on `raw`, a native stream of another library (a DLPack
    /// consumer's), wait until `event` has completed. The default blocks the calling thread
    /// until then (correct for every backend, and all there is for [`RawStream::None`]);
    /// CUDA makes the foreign stream wait on the event (`cuStreamWaitEvent`).
    fn raw_stream_wait(&self, raw: RawStream, event: &Self::Event) -> crate::Result<()> {
        let _ = raw;
        self.event_sync(event)
    }

    /// Blocks until the event has completed (with the same guarantee as `stream_sync`).
    fn event_sync(&self, event: &Self::Event) -> crate::Result<()>;
    /// Whether the event has completed, without blocking.
    fn event_query(&self, event: &Self::Event) -> crate::Result<bool>;
    /// Milliseconds from `start` to `end`; both are timing events that have completed.
    fn event_elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> crate::Result<f64>;
    /// Blocks until every stream of this backend (this context) is idle. Work of other
    /// contexts on the same device is neither waited for nor disturbed (a device-wide sync
    /// would break their graph captures).
    fn synchronize(&self) -> crate::Result<()>;

    /// Copies `bytes` from host memory to the device.
    ///
    /// # Safety
    ///
    /// - `src..src + bytes` must stay readable and unmodified until the stream has passed
    ///   this copy (the caller waits on an event or syncs the stream);
    /// - `dst` and `bytes` meet the conditions of [`Backend::copy_d2d`] for a written range.
    unsafe fn copy_h2d(
        &self,
        stream: &Self::Stream,
        src: *const u8,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> crate::Result<()>;
    /// Copies `bytes` from the device to host memory.
    ///
    /// # Safety
    ///
    /// - `dst..dst + bytes` must stay writable and otherwise unaccessed until the stream
    ///   has passed this copy;
    /// - `src` and `bytes` meet the conditions of [`Backend::copy_d2d`] for a read range.
    unsafe fn copy_d2h(
        &self,
        stream: &Self::Stream,
        src: BufAt<'_, Self>,
        dst: *mut u8,
        bytes: usize,
    ) -> crate::Result<()>;
    /// Copies `bytes` between device ranges (which may be in the same buffer but do not
    /// overlap).
    ///
    /// # Safety
    ///
    /// - the stream and every buffer were created by this backend instance;
    /// - every range (a [`BufAt`] and the bytes the call covers from it) lies inside its
    ///   buffer and is aligned to the element type;
    /// - nothing else reads a range this call writes, or writes a range it reads, until the
    ///   stream has passed the call (other streams are ordered by events), and the buffers
    ///   are not freed before then (see [`Backend::free`]).
    unsafe fn copy_d2d(
        &self,
        stream: &Self::Stream,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> crate::Result<()>;

    /// Copies `bytes` from `src`, memory of `peer` (the backend of another context, of the
    /// same backend type), to `dst`, memory of this backend, queued on `stream` (one of this
    /// backend's). The default is [`crate::Error::Unsupported`], and gpukit-core then copies
    /// through host memory (synchronously); a backend with a direct path overrides it
    /// (CUDA's `cuMemcpyPeerAsync`, a `memcpy` on the CPU).
    ///
    /// # Safety
    ///
    /// - `stream` and `dst`'s buffer were created by this backend instance, `src`'s buffer
    ///   by `peer`;
    /// - both ranges meet the conditions of [`Backend::copy_d2d`] (the source range's
    ///   writers, on `peer`'s streams, have been ordered before `stream` through
    ///   [`Backend::stream_wait_peer`], and nothing writes it until `stream` has passed
    ///   the copy).
    unsafe fn copy_peer(
        &self,
        stream: &Self::Stream,
        peer: &Self,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> crate::Result<()> {
        let _ = (stream, src, dst);
        Err(crate::Error::Unsupported {
            backend: self.name(),
            what: format!(
                "a direct copy of {bytes} bytes from {} device {}",
                peer.name(),
                peer.device_id()
            ),
        })
    }

    /// Whether [`Backend::gemm`] runs gemm on `dtype` elements: a fast path, a library's
    /// (cuBLAS, `matrixmultiply`), that gpukit-core takes in place of its own gemm kernel.
    /// `false` (the default) where the backend has none.
    fn has_gemm(&self, dtype: DType) -> bool {
        let _ = dtype;
        false
    }

    /// `C = alpha * op(A) * op(B) + beta * C` for each product of the batch `g` describes,
    /// on elements of `dtype`, queued on `stream`: the fast path [`Backend::has_gemm`]
    /// announces. The default, for a backend without one, is [`crate::Error::Unsupported`].
    ///
    /// # Safety
    ///
    /// - the stream and every buffer were created by this backend instance;
    /// - each operand's range (its [`BufAt`] and the elements its batch spans,
    ///   `(batch - 1) * stride + rows * cols`) lies inside its buffer and is aligned to
    ///   `dtype`; `m`, `n`, `k` and `batch` are non-zero, and the batch's outputs do not
    ///   overlap;
    /// - nothing else reads `C` or writes `A` or `B` until the stream has passed the call
    ///   (other streams are ordered by events), and the buffers are not freed before then
    ///   (see [`Backend::free`]); `C` overlaps neither `A` nor `B`.
    unsafe fn gemm(
        &self,
        stream: &Self::Stream,
        dtype: DType,
        g: &Gemm<f64>,
        [a, b, c]: [BufAt<'_, Self>; 3],
    ) -> crate::Result<()> {
        let _ = (stream, g, a, b, c);
        Err(crate::Error::Unsupported {
            backend: self.name(),
            what: format!("a gemm of its own on {dtype}"),
        })
    }

    /// Whether a checked kernel's launch passes its arrays' lengths (the checked
    /// convention's `u64` per array, [`crate::CheckedAbi`]). A backend whose kernel code gets
    /// its arrays as slices, which carry their lengths, says no (the CPU backend), and its
    /// checked launches take the signature's arguments, the tag and the fault record.
    fn checked_lengths(&self) -> bool {
        true
    }

    /// Loads (compiles, where needed) a kernel for this device. Loading runs nothing.
    fn load_kernel(&self, desc: &KernelDesc) -> crate::Result<Self::Kernel>;
    /// Launches a kernel with a configuration already checked against the device's limits.
    ///
    /// # Safety
    ///
    /// - the kernel's code (GPU source or CPU function) takes exactly these arguments, in
    ///   this order and of these types, and touches only the ranges it is given, within
    ///   their lengths (the vouch made when its [`crate::KernelSpec`] was built);
    /// - every buffer argument meets the conditions of [`Backend::copy_d2d`], for a written
    ///   range when `write` is set and a read range otherwise;
    /// - no written range overlaps another argument's range.
    unsafe fn launch(
        &self,
        stream: &Self::Stream,
        kernel: &Self::Kernel,
        cfg: &LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> crate::Result<()>;

    /// The native address of `at` (buffer start plus offset). Returns a number: using it is
    /// what the safe layer guards (see [`crate::Stream::with_raw`]).
    fn raw_ptr(&self, at: BufAt<'_, Self>) -> RawPtr;

    /// The native handle of `stream`, or [`RawStream::None`] where the backend has none.
    fn raw_stream(&self, stream: &Self::Stream) -> RawStream;

    /// A buffer over `bytes > 0` bytes of device memory this backend did not allocate; freeing
    /// it releases nothing. A pointer of another backend's kind is
    /// [`crate::Error::Unsupported`].
    ///
    /// # Safety
    ///
    /// - `ptr` addresses `bytes` bytes of device memory of this backend's device (for CUDA,
    ///   allocated in its primary context or accessible from it), readable and writable;
    /// - the memory stays allocated, and is not used by anything outside this library in a
    ///   way that races with the work queued on the buffer, until the buffer is freed and
    ///   the work queued on it has finished.
    unsafe fn buffer_from_raw(&self, ptr: RawPtr, bytes: usize) -> crate::Result<Self::Buffer>;

    /// A stream over a native stream this backend did not create; destroying it releases
    /// nothing (it waits for the work queued on it). A handle of another kind, or
    /// [`RawStream::None`], is [`crate::Error::Unsupported`].
    ///
    /// # Safety
    ///
    /// - `raw` is a live stream of this backend's device (for CUDA, of its primary context);
    /// - it stays alive until the stream is destroyed.
    unsafe fn stream_from_raw(&self, raw: RawStream) -> crate::Result<Self::Stream>;

    /// Allocates `bytes > 0` bytes of zeroed unified (managed) memory: one range the
    /// device's work and the host can both address (the host once no queued work uses
    /// it). Running out is [`crate::Error::OutOfMemory`]; the default, for backends without
    /// unified memory, is [`crate::Error::Unsupported`]. The buffer is freed by
    /// [`Backend::free`].
    fn alloc_unified(&self, bytes: usize) -> crate::Result<Self::Buffer> {
        Err(crate::Error::Unsupported {
            backend: self.name(),
            what: format!("unified memory ({bytes} bytes asked)"),
        })
    }

    /// The host address of `at` in a buffer from [`Backend::alloc_unified`] (`None` for
    /// other buffers, or where the backend has no unified memory).
    fn unified_ptr(&self, at: BufAt<'_, Self>) -> Option<*mut u8> {
        let _ = at;
        None
    }

    /// Queues a migration of `bytes` of unified memory at `at` to `to` on `stream`: a hint
    /// that changes no contents (the default does nothing, as on backends where host and
    /// device memory are one).
    ///
    /// # Safety
    ///
    /// - `at..at + bytes` lies inside a live buffer from [`Backend::alloc_unified`] that
    ///   stays allocated until the stream has passed the prefetch.
    unsafe fn prefetch(
        &self,
        stream: &Self::Stream,
        at: BufAt<'_, Self>,
        bytes: usize,
        to: Location,
    ) -> crate::Result<()> {
        let _ = (stream, at, bytes, to);
        Ok(())
    }

    /// Starts capturing `stream`: until [`Backend::end_capture`], the work queued on it is
    /// recorded into a graph instead of run. Only copies between device buffers, ops and
    /// kernel launches are queued on a capturing stream (gpukit-core refuses the rest). A
    /// backend without graphs returns [`crate::Error::Unsupported`].
    fn begin_capture(&self, stream: &Self::Stream) -> crate::Result<()>;
    /// Ends the capture of `stream` and returns the recorded work as a launchable graph; the
    /// stream runs the work queued from now on again. Called after every successful
    /// `begin_capture`, also when the capture is abandoned.
    fn end_capture(&self, stream: &Self::Stream) -> crate::Result<Self::Graph>;
    /// Queues one run of `graph` on `stream`, as if its work were queued there again.
    ///
    /// # Safety
    ///
    /// - every buffer the graph's work uses is alive until the run has finished;
    /// - the stream has been ordered after the queued uses of those buffers that the run
    ///   must follow (as for the work itself).
    unsafe fn launch_graph(&self, graph: &Self::Graph, stream: &Self::Stream) -> crate::Result<()>;
    /// Destroys a graph; runs of it still queued finish first (the backend sees to it).
    fn destroy_graph(&self, graph: Self::Graph) -> crate::Result<()>;

    /// Opens a named range on the calling thread's profiler timeline (NVTX on CUDA, when
    /// the NVTX library is present: Nsight Systems shows it). Returns whether a range was
    /// opened; the default, for backends without such a timeline, opens none.
    fn range_push(&self, name: &str) -> bool {
        let _ = name;
        false
    }

    /// Closes the innermost range [`Backend::range_push`] opened on the calling thread.
    fn range_pop(&self) {}
}

#[cfg(test)]
mod tests {
    use super::scalar_bytes;

    #[test]
    fn a_scalars_bytes_are_its_own_in_order_then_zeros() {
        let value: Vec<u8> = (1..=8).map(|i| i * 17).collect();
        for n in 0..=8 {
            let mut want = [0u8; 16];
            want[..n].copy_from_slice(&value[..n]);
            assert_eq!(scalar_bytes(&value[..n]), want, "{n} bytes");
        }
        assert_eq!(
            scalar_bytes(&1.5f32.to_ne_bytes())[..4],
            1.5f32.to_ne_bytes()
        );
        assert_eq!(
            scalar_bytes(&(-3i64).to_ne_bytes())[..8],
            (-3i64).to_ne_bytes()
        );
    }
}
