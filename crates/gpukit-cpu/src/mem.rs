//! Aligned, zeroed heap memory: the CPU backend's "device" buffers and its host buffers.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::CpuError;

/// Alignment of device buffers, as CUDA's allocator gives.
pub(crate) const DEVICE_ALIGN: usize = 256;
/// Alignment of host buffers: a page, as pinned memory is.
pub(crate) const HOST_ALIGN: usize = 4096;

/// One zeroed heap allocation, freed on drop; or memory the caller owns (wrapped for
/// interop), which is never freed here.
pub(crate) struct Mem {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Whether `ptr` came from `alloc_zeroed` with `layout` and is freed on drop.
    owned: bool,
    /// Counts the allocation as live until it is freed (dropped after `drop` deallocates).
    #[cfg(feature = "fault-injection")]
    pub(crate) live: Option<crate::fault::Live>,
}

// SAFETY: `Mem` owns its allocation; access to the bytes goes through raw pointers whose
// synchronisation the stream ordering of gpukit-core guarantees (no write overlaps any other
// access to the same bytes). Moving or sharing the owner itself is harmless.
unsafe impl Send for Mem {}
// SAFETY: as for `Send`: `&Mem` only hands out the pointer.
unsafe impl Sync for Mem {}

impl Mem {
    /// Allocates `bytes > 0` zeroed bytes. Zeroing makes every byte initialized, so any
    /// element type may be read from the memory; for large sizes the allocator gets zero
    /// pages from the OS lazily, so it costs little.
    pub(crate) fn new(bytes: usize, align: usize, limit: u64) -> Result<Mem, CpuError> {
        if bytes as u64 > limit {
            return Err(CpuError::OutOfMemory {
                requested: bytes,
                detail: format!("the machine has {limit} bytes of memory"),
            });
        }
        let layout =
            Layout::from_size_align(bytes.max(1), align).map_err(|e| CpuError::OutOfMemory {
                requested: bytes,
                detail: e.to_string(),
            })?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| CpuError::OutOfMemory {
            requested: bytes,
            detail: "the system allocator returned null".into(),
        })?;
        Ok(Mem {
            ptr,
            layout,
            owned: true,
            #[cfg(feature = "fault-injection")]
            live: None,
        })
    }

    /// `bytes > 0` bytes at `ptr` that the caller owns: never freed here.
    ///
    /// # Safety
    ///
    /// `ptr` addresses `bytes` readable and writable bytes that stay allocated while this
    /// `Mem` (and every task holding it) lives.
    pub(crate) unsafe fn foreign(ptr: NonNull<u8>, bytes: usize) -> Result<Mem, CpuError> {
        let layout = Layout::from_size_align(bytes, 1).map_err(|e| CpuError::OutOfMemory {
            requested: bytes,
            detail: e.to_string(),
        })?;
        Ok(Mem {
            ptr,
            layout,
            owned: false,
            #[cfg(feature = "fault-injection")]
            live: None,
        })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The allocation's size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        crate::chaos::forget(self.ptr.as_ptr() as usize, self.layout.size());
        if self.owned {
            // SAFETY: an owned `ptr` came from `alloc_zeroed` with this very layout and is
            // freed once, here.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }
}

/// Device memory: shared with the queued tasks that use it, so that the memory outlives
/// them even when the array is dropped first.
#[derive(Clone)]
pub struct CpuBuffer {
    pub(crate) mem: Arc<Mem>,
}

impl CpuBuffer {
    /// Start of the range at `offset` bytes.
    pub(crate) fn at(&self, offset: usize) -> SendPtr {
        // SAFETY: gpukit-core only passes offsets inside the buffer (Backend contract).
        SendPtr(unsafe { self.mem.ptr().add(offset) })
    }
}

/// Host memory allocated by the CPU backend (page-aligned; nothing to pin on a CPU).
pub struct CpuHostMem {
    pub(crate) mem: Mem,
}

impl std::fmt::Debug for CpuBuffer {
    /// The size; the address is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBuffer")
            .field("bytes", &self.mem.bytes())
            .finish()
    }
}

impl std::fmt::Debug for CpuHostMem {
    /// The size; the address is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuHostMem")
            .field("bytes", &self.mem.bytes())
            .finish()
    }
}

/// A registration of caller-owned host memory: a CPU has nothing to pin, so it holds
/// nothing; it exists for the contract's shape.
#[derive(Debug)]
pub struct CpuRegistration;

/// A raw pointer that a task may carry to its worker thread.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut u8);

// SAFETY: the pointer is only dereferenced by tasks whose access gpukit-core orders against
// every other access to the same memory, while an `Arc<Mem>` or the caller's contract keeps
// the memory alive.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The pointer. A method (not the field) so that closures capture the whole `SendPtr`.
    pub(crate) fn get(self) -> *mut u8 {
        self.0
    }
}
