//! `Context<B>`: one opened device, its default stream, its deferred errors and its pinned
//! host memory pool.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::array::{GpuArray, UnifiedArray};
use crate::backend::{Backend, DeviceInfo, HostUse, RawPtr, RawStream};
use crate::element::{byte_len, Element};
use crate::error::{DeferredErrors, Error, Result};
use crate::host::{HostBuffer, HostPool, HostPoolStats};
use crate::kernel::{FaultLog, Kernel, KernelSig, KernelSpec};
use crate::pool::{DevicePool, MemoryStats};
use crate::stream::Stream;

static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

/// State shared by everything a context made: arrays, streams, events, host buffers.
pub(crate) struct Shared<B: Backend> {
    /// The built-in ops' kernels loaded so far; first, so that they go before the backend.
    pub(crate) builtins: crate::kernel::Builtins,
    pub(crate) backend: B,
    pub(crate) id: u64,
    pub(crate) info: DeviceInfo,
    pub(crate) deferred: DeferredErrors,
    pub(crate) pool: HostPool<B>,
    /// The device memory every array of the context comes from.
    pub(crate) device_pool: DevicePool<B>,
    /// How many of the context's streams are capturing a graph.
    pub(crate) captures: AtomicUsize,
    /// Set once a second stream exists; from then on every op records an ordering event so
    /// that buffers shared between streams wait exactly as long as they must.
    pub(crate) multi_stream: AtomicBool,
    /// The fault record of the context's bounds-checked kernels.
    pub(crate) faults: FaultLog<B>,
}

impl<B: Backend> Shared<B> {
    /// Returns the oldest error deferred from a `Drop`, if any.
    pub(crate) fn check(&self) -> Result<()> {
        self.deferred.take()
    }

    /// Keeps an error that has no caller to return to.
    pub(crate) fn defer(&self, origin: &'static str, result: Result<()>) {
        if let Err(e) = result {
            self.deferred.push(origin, e);
        }
    }

    /// [`Error::CaptureViolation`] for `call` while any stream of the context captures.
    pub(crate) fn not_capturing(&self, call: &'static str, reason: &'static str) -> Result<()> {
        if self.captures.load(Ordering::Acquire) > 0 {
            Err(Error::CaptureViolation { call, reason })
        } else {
            Ok(())
        }
    }

    pub(crate) fn same_context(
        &self,
        op: &'static str,
        arg: &'static str,
        other: u64,
    ) -> Result<()> {
        if other == self.id {
            Ok(())
        } else {
            Err(Error::ContextMismatch {
                op,
                arg,
                expected: self.id,
                got: other,
            })
        }
    }
}

impl<B: Backend> Drop for Shared<B> {
    fn drop(&mut self) {
        // Every stream is gone, and with them the record of which ones used the cached
        // blocks last: wait for all work before handing the blocks back.
        if !self.device_pool.is_empty() || self.faults.has_records() {
            if let Err(e) = self.backend.synchronize() {
                self.deferred.push("device pool drop", e);
            }
        }
        if let Err(e) = self.device_pool.trim(&self.backend) {
            self.deferred.push("device pool drop", e);
        }
        if let Err(e) = self.faults.free_all(&self.backend) {
            self.deferred.push("fault record drop", e);
        }
        for mem in self.pool.drain() {
            // SAFETY: pooled memory belongs to no buffer, so no copy uses it.
            if let Err(e) = unsafe { self.backend.free_host(mem) } {
                self.deferred.push("HostPool drop", e);
            }
        }
        // Nothing can return these any more: the last handle is gone. Log them at error
        // level (a library only logs; `Context::sync` before the drop returns them instead).
        for (origin, error) in self.deferred.drain() {
            tracing::error!(
                context = self.id,
                origin,
                %error,
                "error left unreported when the context was dropped"
            );
        }
    }
}

/// An opened device.
///
/// A context is also its *default stream*: it dereferences to [`Stream`], so every stream
/// operation (`ctx.add(..)`, `ctx.upload(..)`, `ctx.record_event()`) called on the context
/// runs on the default stream. Cloning a context is cheap and shares the device.
/// [`Stream`'s docs](Stream#methods) list every method a context reaches this way.
///
/// This `Deref` is a deliberate exception to the guideline that keeps `Deref` for smart
/// pointers: a context *is* a stream (its default one, as in CUDA and PyTorch), not a
/// wrapper that merely holds one, and every method of [`Stream`] means the same on it.
/// The alternatives cost every user: `ctx.stream().add(..)` in every line of every loop, or
/// a second copy of each of `Stream`'s methods on `Context`, which would have to be kept in
/// step by hand. Two methods of `Context` shadow `Stream`'s, both meaning the context:
/// [`Context::sync`] waits for all its streams (a superset of the default stream's
/// `sync`), and [`Context::id`] is the context's id (the default stream's is
/// `ctx.default_stream().id()`).
///
/// ```
/// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
/// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
/// let b = ctx.alloc_upload(&[4.0f32, 5.0, 6.0])?;
/// let mut out = ctx.alloc_zeros::<f32>(3)?;
/// ctx.add(&a, &b, &mut out)?;
/// assert_eq!(out.download()?, [5.0, 7.0, 9.0]);
/// # Ok::<(), gpukit::Error>(())
/// ```
pub struct Context<B: Backend> {
    default: Stream<B>,
}

impl<B: Backend> Clone for Context<B> {
    fn clone(&self) -> Self {
        Context {
            default: self.default.clone(),
        }
    }
}

impl<B: Backend> Deref for Context<B> {
    type Target = Stream<B>;

    fn deref(&self) -> &Stream<B> {
        &self.default
    }
}

impl<B: Backend> std::fmt::Debug for Context<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("backend", &self.backend_name())
            .field("device_id", &self.device_id())
            .field("id", &self.id())
            .finish()
    }
}

impl<B: Backend> Context<B> {
    /// Wraps an opened backend and creates its default stream (least urgent priority).
    pub fn new(backend: B) -> Result<Self> {
        let info = backend.info();
        let shared = Arc::new(Shared {
            id: NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed),
            info,
            deferred: DeferredErrors::default(),
            pool: HostPool::new(),
            device_pool: DevicePool::new(),
            captures: AtomicUsize::new(0),
            multi_stream: AtomicBool::new(false),
            faults: FaultLog::new(),
            builtins: Default::default(),
            backend,
        });
        let least = shared.info.priority_range.0;
        let default = Stream::create(shared, least)?;
        Ok(Context { default })
    }

    /// The backend, for calls the safe layer does not wrap.
    pub fn backend(&self) -> &B {
        &self.shared().backend
    }

    /// The backend's name: `cpu` or `cuda`.
    pub fn backend_name(&self) -> &'static str {
        self.shared().backend.name()
    }

    /// The device's ordinal within its backend.
    pub fn device_id(&self) -> usize {
        self.shared().backend.device_id()
    }

    /// A number unique to this context within the process.
    pub fn id(&self) -> u64 {
        self.shared().id
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.shared().info
    }

    /// The default stream (also reachable through `Deref`).
    pub fn default_stream(&self) -> &Stream<B> {
        &self.default
    }

    /// Blocks until all work on all streams of this context has finished; returns any error
    /// raised by that work or deferred from a `Drop`. Other contexts' work, on the same
    /// device too, is neither waited for nor disturbed.
    pub fn sync(&self) -> Result<()> {
        let s = self.shared();
        s.check()?;
        s.not_capturing(
            "Context::sync",
            "a stream of the context is capturing: its work is being recorded, not run",
        )?;
        s.backend.synchronize()?;
        s.faults.take_all(&s.backend, self.default.raw())?;
        s.check()
    }

    /// Returns the oldest error deferred from a `Drop` (a dropped transfer whose copy
    /// failed, say), without waiting for anything.
    pub fn check(&self) -> Result<()> {
        self.shared().check()
    }

    /// Waits for all work and returns every error still pending: the way to end a
    /// context's life without leaving an error unreported.
    pub fn close(self) -> Result<()> {
        self.sync()
    }

    /// Creates a stream with the default (least urgent) priority.
    pub fn create_stream(&self) -> Result<Stream<B>> {
        self.create_stream_with_priority(self.info().priority_range.0)
    }

    /// Creates a stream with a priority inside [`DeviceInfo::priority_range`]; numerically
    /// lower is more urgent.
    pub fn create_stream_with_priority(&self, priority: i32) -> Result<Stream<B>> {
        let s = self.shared();
        s.check()?;
        let (least, greatest) = s.info.priority_range;
        if priority > least || priority < greatest {
            return Err(Error::InvalidPriority {
                priority,
                greatest,
                least,
            });
        }
        s.multi_stream.store(true, Ordering::Release);
        Stream::create(self.default.shared_arc().clone(), priority)
    }

    /// A stream over a native stream made outside this library (a cudarc or PyTorch
    /// `CUstream`), for interop. The stream is not destroyed when the last handle goes
    /// (its queued work is waited for); ordering with the library's other streams works as
    /// for any stream. [`RawStream::None`] and handles of another backend are
    /// [`Error::Unsupported`].
    ///
    /// # Safety
    ///
    /// - `raw` is a live stream of this context's device (for CUDA, of its primary
    ///   context, which cudarc's `CudaContext` and the runtime API use);
    /// - it stays alive until every handle of the returned stream is dropped, and every
    ///   array last used on it (an array keeps the streams that last used it, to order its
    ///   later uses; the last of them waits for the stream's work, a driver call on it).
    pub unsafe fn stream_from_raw(&self, raw: RawStream) -> Result<Stream<B>> {
        let s = self.shared();
        s.check()?;
        // SAFETY: the caller's contract is the backend's.
        let wrapped = unsafe { s.backend.stream_from_raw(raw) }?;
        s.multi_stream.store(true, Ordering::Release);
        Ok(Stream::from_backend(
            self.default.shared_arc().clone(),
            wrapped,
            s.info.priority_range.0,
        ))
    }

    /// An array over `len` elements of device memory allocated outside this library (by
    /// cudarc, PyTorch, a custom allocator), for interop: ops, copies and kernels use it as
    /// any array, ordered the same way. Dropping it frees nothing.
    ///
    /// A pointer of another backend's kind is [`Error::Unsupported`]; `len * size_of::<T>()`
    /// overflowing is [`Error::SizeOverflow`].
    ///
    /// # Safety
    ///
    /// - `ptr` addresses `len` elements of `T`, aligned for `T` (the built-in ops of every
    ///   backend read whole elements), readable and writable, in this context's device
    ///   memory (for CUDA: allocated in, or accessible from, the device's primary context;
    ///   for the CPU backend: host memory);
    /// - the memory stays allocated until the array is dropped and the work queued on it
    ///   has finished ([`Context::sync`] after the drop), and nothing outside this library
    ///   accesses it meanwhile except through [`Stream::with_raw`] / [`Stream::with_raw_mut`];
    /// - no other array of this library wraps overlapping memory while this one lives;
    /// - work other code queued on the memory before this call has completed, or is ordered
    ///   before the array's first use (for CUDA: synchronise the stream that wrote it; a
    ///   synchronous `cuMemcpyHtoD` from pageable memory returns before its copy lands).
    ///   The library orders the array's uses among its own streams only.
    pub unsafe fn array_from_raw<T: Element>(
        &self,
        ptr: RawPtr,
        len: usize,
    ) -> Result<GpuArray<T, B>> {
        let s = self.shared();
        s.check()?;
        let bytes = byte_len::<T>("Context::array_from_raw", len)?;
        if bytes == 0 {
            return GpuArray::alloc(&self.default, 0, false);
        }
        // SAFETY: the caller's contract covers the backend's.
        let buf = unsafe { s.backend.buffer_from_raw(ptr, bytes) }?;
        Ok(GpuArray::from_buffer(&self.default, buf, len, bytes))
    }

    /// Allocates `len` elements whose contents are unspecified (but initialized: any
    /// bit pattern is a valid element).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<GpuArray<T, B>> {
        self.shared().check()?;
        GpuArray::alloc(&self.default, len, false)
    }

    /// Allocates `len` zeroed elements of unified (managed) memory: an array the device's
    /// work uses as any other and the host reads and writes in place
    /// ([`UnifiedArray::host_mut`]) once that work is done. On CUDA `cuMemAllocManaged`
    /// (never more than the device's free memory: asking for more is
    /// [`Error::OutOfMemory`]); on the CPU plain memory; on Vulkan [`Error::Unsupported`].
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut x = ctx.alloc_unified::<f32>(3)?;
    /// x.host_mut()?.copy_from_slice(&[1.0, -2.0, 3.0]); // no upload
    /// ctx.relu_inplace(&mut x)?;
    /// assert_eq!(x.host()?, [1.0, 0.0, 3.0]); // waits for the op; no download
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn alloc_unified<T: Element>(&self, len: usize) -> Result<UnifiedArray<T, B>> {
        self.shared().check()?;
        UnifiedArray::alloc(&self.default, len)
    }

    /// Allocates `len` zeroed elements.
    pub fn alloc_zeros<T: Element>(&self, len: usize) -> Result<GpuArray<T, B>> {
        self.shared().check()?;
        GpuArray::alloc(&self.default, len, true)
    }

    /// Allocates an array holding a copy of `data`; returns once the copy is done.
    pub fn alloc_upload<T: Element>(&self, data: &[T]) -> Result<GpuArray<T, B>> {
        let mut a = self.alloc(data.len())?;
        a.upload(data)?;
        Ok(a)
    }

    /// Takes `len` elements of host memory for the given use from the context's pool,
    /// pinning fresh memory only when the pool has none of that size. The contents are
    /// zero for fresh memory and whatever was last written for reused memory.
    pub fn alloc_host<T: Element>(&self, len: usize, usage: HostUse) -> Result<HostBuffer<T, B>> {
        self.shared().check()?;
        HostBuffer::take(&self.default, len, usage)
    }

    /// Registers an existing vector with the device so that copies from and to it run at
    /// pinned speed; [`HostBuffer::into_vec`] gives it back.
    pub fn register_host<T: Element>(&self, data: Vec<T>) -> Result<HostBuffer<T, B>> {
        self.shared().check()?;
        HostBuffer::register(&self.default, data)
    }

    /// The device memory pool's counters: bytes in use and reserved, their peaks,
    /// allocations and frees, pool hits and misses (see [`MemoryStats`]).
    ///
    /// Arrays take their memory from a stream-ordered pool: a dropped array's memory is
    /// kept for the next allocation of its size class, which reuses it without a device
    /// call or a host sync (ordered after the old array's last uses on every stream).
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// drop(ctx.alloc_zeros::<f32>(1 << 20)?);
    /// let again = ctx.alloc_zeros::<f32>(1 << 20)?; // the same block, from the pool
    /// let stats = ctx.memory_stats();
    /// assert_eq!((stats.pool_misses, stats.pool_hits), (1, 1));
    /// assert_eq!(stats.bytes_in_use, 4 << 20);
    /// drop(again);
    /// ctx.trim()?; // hand the cached block back to the device
    /// assert_eq!(ctx.memory_stats().bytes_reserved, 0);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn memory_stats(&self) -> MemoryStats {
        self.shared().device_pool.stats()
    }

    /// Hands the memory the pool caches (reserved, not in use) back to the device, each
    /// block after the work that used it; arrays in use keep theirs. Blocks only on
    /// work still using a cached block on a stream that is gone. An allocation that runs
    /// out of device memory trims by itself and tries again.
    pub fn trim(&self) -> Result<()> {
        let s = self.shared();
        s.check()?;
        s.not_capturing(
            "Context::trim",
            "freeing device memory during a capture could free memory the graph uses",
        )?;
        s.device_pool.trim(&s.backend).map(|_| ())
    }

    /// Opens a named range on the calling thread's profiler timeline until the guard is
    /// dropped: on CUDA an NVTX range (shown by Nsight Systems) when the NVTX library
    /// (`libnvToolsExt.so.1`) can be loaded, on other backends, or without the library,
    /// nothing. Ranges nest; the guard stays on the thread that opened it.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let x = ctx.alloc_upload(&[1.0f32, -2.0])?;
    /// let mut y = ctx.alloc::<f32>(2)?;
    /// {
    ///     let _step = ctx.range("forward");
    ///     ctx.relu(&x, &mut y)?;
    /// } // the range ends here
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn range(&self, name: &str) -> Range<'_, B> {
        let backend = &self.shared().backend;
        Range {
            backend,
            open: backend.range_push(name),
            _thread: std::marker::PhantomData,
        }
    }

    /// The pinned pool's counters: fresh allocations, reuses, bytes held.
    pub fn host_pool_stats(&self) -> HostPoolStats {
        self.shared().pool.stats()
    }

    /// Sets how many bytes of free host memory the pool keeps for reuse (default 1 GiB).
    pub fn set_host_pool_limit(&self, bytes: usize) {
        let freed = self.shared().pool.set_limit(bytes);
        for mem in freed {
            // SAFETY: pooled memory belongs to no buffer, so no copy uses it.
            let result = unsafe { self.shared().backend.free_host(mem) };
            self.shared().defer("HostPool trim", result);
        }
    }

    /// Loads a kernel for this device (compiling it where the backend compiles).
    pub fn kernel<S: KernelSig>(&self, spec: KernelSpec<S>) -> Result<Kernel<S, B>> {
        self.shared().check()?;
        Kernel::load(&self.default, spec)
    }

    pub(crate) fn shared(&self) -> &Shared<B> {
        self.default.shared_arc()
    }
}

/// A named range on a profiler's timeline, from [`Context::range`] until dropped.
#[must_use = "the range ends when the guard is dropped"]
pub struct Range<'a, B: Backend> {
    backend: &'a B,
    open: bool,
    /// Ranges belong to the thread that opened them: the guard is neither `Send` nor `Sync`.
    _thread: std::marker::PhantomData<*const ()>,
}

impl<B: Backend> Range<'_, B> {
    /// Whether a profiler range was opened (CUDA with the NVTX library loaded).
    pub fn is_recorded(&self) -> bool {
        self.open
    }
}

impl<B: Backend> std::fmt::Debug for Range<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("recorded", &self.open)
            .finish()
    }
}

impl<B: Backend> Drop for Range<'_, B> {
    fn drop(&mut self) {
        if self.open {
            self.backend.range_pop();
        }
    }
}
