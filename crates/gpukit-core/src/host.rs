//! Host memory for transfers: `HostBuffer<T, B>` (pinned by the backend, pooled per
//! context, or a registered `Vec`), the `HostSlice` contract, and `Pending`, the handle that
//! owns host memory while a copy uses it.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::backend::{Backend, HostUse};
use crate::element::{byte_len, Element};
use crate::error::{Error, Rejected, Result};
use crate::stream::Stream;

/// Host memory a copy may use while it is owned by a [`Pending`].
///
/// # Safety
///
/// Implementors guarantee that:
/// - `host_ptr` points to `host_len()` initialized, aligned elements, valid for reads and
///   writes;
/// - the pointer stays valid, and the memory stays where it is, when `self` is moved, until
///   `self` is dropped or used through `&mut` again;
/// - nothing else accesses that memory meanwhile.
pub unsafe trait HostSlice<T: Element>: Send + 'static {
    /// The first element.
    fn host_ptr(&mut self) -> *mut T;
    /// Number of elements.
    fn host_len(&self) -> usize;
    /// The id of the context the memory belongs to, if it belongs to one (a
    /// [`HostBuffer`] does; a `Vec` does not): a copy on another context's stream rejects
    /// it, as it rejects that context's arrays.
    fn host_context(&self) -> Option<u64> {
        None
    }
}

// SAFETY: a Vec's elements live in a heap allocation that does not move when the Vec value
// is moved, and the Vec owns it exclusively.
unsafe impl<T: Element> HostSlice<T> for Vec<T> {
    fn host_ptr(&mut self) -> *mut T {
        self.as_mut_ptr()
    }

    fn host_len(&self) -> usize {
        self.len()
    }
}

/// The pool's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostPoolStats {
    /// Buffers the backend allocated (and pinned) fresh.
    pub fresh: u64,
    /// Buffers served from the pool without a new allocation.
    pub reused: u64,
    /// Bytes of free memory the pool holds.
    pub retained_bytes: usize,
}

struct PoolInner<M> {
    free: HashMap<(HostUse, usize), Vec<M>>,
    limit: usize,
    stats: HostPoolStats,
}

/// Free pinned buffers by use and size class, so a steady-state pipeline never pins again.
pub(crate) struct HostPool<B: Backend> {
    inner: Mutex<PoolInner<B::HostMem>>,
}

/// The size class of a request: 4 KiB at least, else rounded up to a sixteenth of the next
/// power of two (under 12.5 % waste).
fn size_class(bytes: usize) -> usize {
    if bytes <= 4096 {
        return 4096;
    }
    let step = bytes.next_power_of_two() / 16;
    bytes.div_ceil(step) * step
}

impl<B: Backend> HostPool<B> {
    pub(crate) fn new() -> Self {
        HostPool {
            inner: Mutex::new(PoolInner {
                free: HashMap::new(),
                limit: 1 << 30,
                stats: HostPoolStats::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner<B::HostMem>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stats(&self) -> HostPoolStats {
        self.lock().stats
    }

    fn take(&self, class: usize, usage: HostUse) -> Option<B::HostMem> {
        let mut p = self.lock();
        let mem = p.free.get_mut(&(usage, class)).and_then(Vec::pop)?;
        p.stats.reused += 1;
        p.stats.retained_bytes -= class;
        Some(mem)
    }

    /// Keeps `mem` for reuse, or hands it back when the pool is full.
    fn put(&self, mem: B::HostMem, class: usize, usage: HostUse) -> Option<B::HostMem> {
        let mut p = self.lock();
        if p.stats.retained_bytes + class > p.limit {
            return Some(mem);
        }
        p.stats.retained_bytes += class;
        p.free.entry((usage, class)).or_default().push(mem);
        None
    }

    pub(crate) fn set_limit(&self, limit: usize) -> Vec<B::HostMem> {
        let mut p = self.lock();
        p.limit = limit;
        let mut freed = Vec::new();
        let keys: Vec<_> = p.free.keys().copied().collect();
        for key in keys {
            while p.stats.retained_bytes > limit {
                let Some(mem) = p.free.get_mut(&key).and_then(Vec::pop) else {
                    break;
                };
                p.stats.retained_bytes -= key.1;
                freed.push(mem);
            }
        }
        freed
    }

    pub(crate) fn drain(&self) -> Vec<B::HostMem> {
        let mut p = self.lock();
        p.stats.retained_bytes = 0;
        p.free.drain().flat_map(|(_, v)| v).collect()
    }
}

enum Storage<T: Element, B: Backend> {
    Empty,
    Pooled {
        mem: B::HostMem,
        class: usize,
    },
    Registered {
        vec: Vec<T>,
        /// `None` for an empty vector: there is no memory to register.
        reg: Option<B::Registration>,
    },
}

/// Host memory for fast transfers, owned like a `Vec<T>` (it dereferences to `[T]`).
///
/// Made by [`crate::Context::alloc_host`] (pinned by the backend, chosen by [`HostUse`],
/// returned to the context's pool on drop) or [`crate::Context::register_host`] (an existing
/// `Vec` registered with the device). An asynchronous copy takes the buffer by value and
/// gives it back through [`Pending::wait`], so no safe code can touch it mid-copy.
pub struct HostBuffer<T: Element, B: Backend> {
    ptr: NonNull<T>,
    len: usize,
    usage: HostUse,
    storage: Storage<T, B>,
    home: Stream<B>,
}

// SAFETY: a HostBuffer owns its memory exclusively, like a Vec<T> (T: Element is Send and
// Sync); the backend handles it holds are Send and Sync by the Backend trait's bounds.
unsafe impl<T: Element, B: Backend> Send for HostBuffer<T, B> {}
// SAFETY: shared access only reads, through `Deref`, as for `&Vec<T>`.
unsafe impl<T: Element, B: Backend> Sync for HostBuffer<T, B> {}

impl<T: Element, B: Backend> HostBuffer<T, B> {
    pub(crate) fn take(home: &Stream<B>, len: usize, usage: HostUse) -> Result<Self> {
        let bytes = byte_len::<T>("alloc_host", len)?;
        if bytes == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                len: 0,
                usage,
                storage: Storage::Empty,
                home: home.clone(),
            });
        }
        let class = size_class(bytes);
        let shared = home.shared_arc();
        let mem = match shared.pool.take(class, usage) {
            Some(mem) => mem,
            None => {
                let mem = shared.backend.alloc_host(class, usage)?;
                shared.pool.lock().stats.fresh += 1;
                mem
            }
        };
        let raw = shared.backend.host_ptr(&mem);
        let ptr = NonNull::new(raw.cast::<T>()).ok_or_else(|| Error::Backend {
            backend: shared.backend.name(),
            call: "host_ptr",
            message: "the backend returned a null host pointer".into(),
        })?;
        Ok(HostBuffer {
            ptr,
            len,
            usage,
            storage: Storage::Pooled { mem, class },
            home: home.clone(),
        })
    }

    /// The stream of the context the buffer belongs to.
    pub(crate) fn home(&self) -> &Stream<B> {
        &self.home
    }

    pub(crate) fn register(home: &Stream<B>, mut vec: Vec<T>) -> Result<Self> {
        let bytes = byte_len::<T>("register_host", vec.len())?;
        let len = vec.len();
        if bytes == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                len,
                usage: HostUse::Both,
                storage: Storage::Registered { vec, reg: None },
                home: home.clone(),
            });
        }
        let raw = vec.as_mut_ptr();
        // SAFETY: `raw..raw + bytes` is the Vec's live heap allocation; the Vec is kept in
        // this buffer, unmoved in memory, until `unregister_host` has run (in `drop` or
        // `into_vec`).
        let reg = unsafe { home.backend().register_host(raw.cast(), bytes)? };
        let ptr = NonNull::new(raw).ok_or_else(|| Error::Backend {
            backend: home.backend().name(),
            call: "register_host",
            message: "a non-empty Vec had a null pointer".into(),
        })?;
        Ok(HostBuffer {
            ptr,
            len,
            usage: HostUse::Both,
            storage: Storage::Registered {
                vec,
                reg: Some(reg),
            },
            home: home.clone(),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Shortens the buffer to its first `len` elements, like [`Vec::truncate`] (no effect
    /// when `len >= self.len()`). The memory is not given back: a pooled buffer returns to
    /// the pool whole on drop, so a short last batch reuses the same pinned memory, and a
    /// registered `Vec` comes back from [`HostBuffer::into_vec`] truncated too.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut staging = ctx.alloc_host::<f32>(1024, gpukit::HostUse::Upload)?;
    /// staging[..3].copy_from_slice(&[1.0, 2.0, 3.0]);
    /// staging.truncate(3);
    /// let mut dev = ctx.alloc::<f32>(3)?;
    /// ctx.default_stream().upload(staging, &mut dev)?.wait()?;
    /// assert_eq!(dev.download()?, [1.0, 2.0, 3.0]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// The use the buffer was allocated for.
    pub fn usage(&self) -> HostUse {
        self.usage
    }

    /// Whether the memory is a registered `Vec` rather than backend-allocated.
    pub fn is_registered(&self) -> bool {
        matches!(self.storage, Storage::Registered { .. })
    }

    /// The id of the context the buffer belongs to.
    pub fn context_id(&self) -> u64 {
        self.home.context_id()
    }

    /// The contents as a `Vec`: a registered vector is unregistered and returned as it is;
    /// pooled memory is copied out and returned to the pool.
    pub fn into_vec(mut self) -> Result<Vec<T>> {
        match std::mem::replace(&mut self.storage, Storage::Empty) {
            Storage::Registered { mut vec, reg } => {
                if let Some(reg) = reg {
                    // SAFETY: copies take the buffer by value and give it back only once they
                    // have completed, so holding `self` means no copy uses the memory.
                    unsafe { self.home.backend().unregister_host(reg) }?;
                }
                vec.truncate(self.len);
                Ok(vec)
            }
            other => {
                self.storage = other;
                Ok(self.to_vec())
            }
        }
    }
}

impl<T: Element, B: Backend> Deref for HostBuffer<T, B> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialized elements (fresh backend memory is zeroed,
        // pooled memory was initialized before, a registered Vec is initialized) owned by
        // this buffer; `&self` forbids writes for the borrow's duration.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element, B: Backend> DerefMut for HostBuffer<T, B> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element, B: Backend> std::fmt::Debug for HostBuffer<T, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("dtype", &format_args!("{}", T::DTYPE.name()))
            .field("len", &self.len)
            .field("usage", &self.usage)
            .field("registered", &self.is_registered())
            .field("context", &self.context_id())
            .finish()
    }
}

// SAFETY: the memory is owned by the buffer and does not move with it (it is backend memory
// or a Vec's heap allocation); `&mut self` gives exclusive access.
unsafe impl<T: Element, B: Backend> HostSlice<T> for HostBuffer<T, B> {
    fn host_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    fn host_len(&self) -> usize {
        self.len
    }

    fn host_context(&self) -> Option<u64> {
        Some(self.context_id())
    }
}

impl<T: Element, B: Backend> Drop for HostBuffer<T, B> {
    fn drop(&mut self) {
        let shared = self.home.shared_arc();
        match std::mem::replace(&mut self.storage, Storage::Empty) {
            Storage::Empty => {}
            Storage::Pooled { mem, class } => {
                if let Some(mem) = shared.pool.put(mem, class, self.usage) {
                    // SAFETY: a buffer is dropped only outside a copy (a `Pending` owns it
                    // until its copy has completed), so no copy uses the memory.
                    let freed = unsafe { shared.backend.free_host(mem) };
                    shared.defer("HostBuffer drop", freed);
                }
            }
            Storage::Registered { vec, reg } => {
                if let Some(reg) = reg {
                    // SAFETY: as for pooled memory above: no copy uses the buffer.
                    let ended = unsafe { shared.backend.unregister_host(reg) };
                    shared.defer("HostBuffer drop", ended);
                }
                // Only now may the memory go.
                drop(vec);
            }
        }
    }
}

/// A copy in flight that owns the host memory it uses; [`Pending::wait`] gives it back.
///
/// Dropping a `Pending` without waiting blocks until the copy is done (the memory must
/// outlive it); an error found then is kept for the context's next call.
#[must_use = "a Pending owns the host memory until the copy is done: wait() to get it back"]
pub struct Pending<H, B: Backend> {
    value: Option<H>,
    event: Option<Arc<B::Event>>,
    home: Stream<B>,
}

impl<H, B: Backend> std::fmt::Debug for Pending<H, B> {
    /// The stream and context of the copy, and whether it is done (`done: None` when the
    /// query failed; the error comes back from `wait`). Queries without blocking.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("stream", &self.home.id())
            .field("context", &self.home.context_id())
            .field("done", &self.is_ready().ok())
            .finish_non_exhaustive()
    }
}

impl<H, B: Backend> Pending<H, B> {
    pub(crate) fn new(value: H, event: Option<Arc<B::Event>>, home: Stream<B>) -> Self {
        Pending {
            value: Some(value),
            event,
            home,
        }
    }

    /// Blocks until the copy is done and returns the host memory. On error the memory is
    /// returned inside [`Rejected`] (its contents undefined for a failed download).
    pub fn wait(mut self) -> Result<H, Rejected<H>> {
        let r = match &self.event {
            Some(e) => self.home.backend().event_sync(e),
            None => Ok(()),
        };
        let value = self.take_value();
        match r {
            Ok(()) => Ok(value),
            Err(e) => Err(Rejected::new(e, value)),
        }
    }

    /// Whether the copy is done, without blocking.
    pub fn is_ready(&self) -> Result<bool> {
        match &self.event {
            Some(e) => self.home.backend().event_query(e),
            None => Ok(true),
        }
    }

    /// The event after the copy (`None`: done already).
    pub(crate) fn event(&self) -> Option<&Arc<B::Event>> {
        self.event.as_ref()
    }

    /// The stream the copy was queued on.
    pub(crate) fn home(&self) -> &Stream<B> {
        &self.home
    }

    pub(crate) fn take_value(&mut self) -> H {
        // `value` is `Some` from `new` until here, and `wait` consumes `self`.
        match self.value.take() {
            Some(v) => v,
            None => unreachable!("Pending value taken twice"),
        }
    }
}

impl<H, B: Backend> Drop for Pending<H, B> {
    fn drop(&mut self) {
        if self.value.is_some() {
            if let Some(e) = &self.event {
                let r = self.home.backend().event_sync(e);
                self.home.shared_arc().defer("Pending drop", r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_cover_the_request_with_little_waste() {
        for bytes in [
            1,
            4096,
            4097,
            5000,
            1 << 20,
            (1 << 20) + 1,
            3 << 29,
            usize::MAX >> 8,
        ] {
            let c = size_class(bytes);
            assert!(c >= bytes, "{bytes} -> {c}");
            if bytes > 4096 {
                assert!(c - bytes <= bytes / 8, "{bytes} -> {c}");
            }
            assert_eq!(size_class(c), c, "classes are fixed points");
        }
    }
}
