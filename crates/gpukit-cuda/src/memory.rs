//! Memory of the CUDA backend: device memory (`cuMemAlloc`, freed after the events of the
//! streams that used it), pinned host memory (`cuMemHostAlloc`, write-combined for uploads),
//! registrations (`cuMemHostRegister`), managed memory (`cuMemAllocManaged`) and its
//! prefetch, and foreign device addresses wrapped without ownership.

use cudarc::driver::sys::{self, CUresult};
use gpukit_core::{BufAt, Error, HostUse, Location, RawPtr, Result};

use crate::backend::{CudaBackend, CudaStream};
use crate::device::Raw;
use crate::driver::{self, DriverError};
use crate::error::CudaError;

/// Device memory: `cuMemAlloc`'d bytes.
pub struct CudaBuffer {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) bytes: usize,
    /// Whether the backend allocated it (a wrapped foreign allocation is never freed here).
    pub(crate) owned: bool,
    /// Whether it is managed memory (`cuMemAllocManaged`), addressable from the host.
    pub(crate) managed: bool,
}

impl CudaBuffer {
    /// The device address of byte `offset`.
    pub(crate) fn at(&self, offset: usize) -> sys::CUdeviceptr {
        self.ptr + offset as u64
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Pinned host memory from `cuMemHostAlloc`.
pub struct CudaHostMem {
    pub(crate) ptr: Raw<*mut u8>,
    bytes: usize,
}

/// A `cuMemHostRegister` registration.
pub struct CudaRegistration {
    ptr: Raw<*mut u8>,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBuffer")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CudaHostMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaHostMem")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CudaRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaRegistration").finish_non_exhaustive()
    }
}

/// The device ordinal that means the host in `cuMemPrefetchAsync` (`CU_DEVICE_CPU`).
const CU_DEVICE_CPU: sys::CUdevice = -1;

/// Whether a driver call failed for want of memory.
fn out_of_memory<T>(r: &std::result::Result<T, DriverError>) -> bool {
    matches!(r, Err(e) if e.code == CUresult::CUDA_ERROR_OUT_OF_MEMORY)
}

impl CudaBackend {
    /// Zeroes a new buffer on the internal stream and waits for it; frees the buffer if
    /// that fails.
    pub(crate) fn zeroed(&self, buf: CudaBuffer) -> Result<CudaBuffer> {
        // SAFETY: the buffer is new and used by nothing else; the internal stream is live.
        let r = unsafe { driver::memset_d8_async(buf.ptr, 0, buf.bytes, self.util.0) }
            // SAFETY: the internal stream is live.
            .and_then(|()| unsafe { driver::stream_synchronize(self.util.0) })
            // The wait is part of zeroing: its failure is reported as the memset's.
            .map_err(|e| DriverError {
                call: "cuMemsetD8Async",
                ..e
            });
        if let Err(e) = self.check(r) {
            // SAFETY: the memset is the buffer's only use, and it either was not queued or
            // has ended (the synchronize returned), so no stream needs waiting for. Its
            // error is secondary to the memset's, which is returned.
            let _ = unsafe { self.free_device(buf, &[]) };
            return Err(e);
        }
        Ok(buf)
    }

    /// `cuMemAlloc`, retried once after waiting for deferred frees.
    pub(crate) fn mem_alloc(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        // The context is current.
        let mut r = driver::mem_alloc(bytes);
        if out_of_memory(&r) {
            self.dev.reap(true)?;
            r = driver::mem_alloc(bytes);
        }
        if out_of_memory(&r) {
            let (free, total) = self.dev.mem_info();
            return Err(CudaError::OutOfMemory {
                call: "cuMemAlloc",
                requested: bytes,
                free,
                total,
            }
            .into());
        }
        self.check(r)
    }

    /// Device memory of `bytes` bytes, zeroed on the internal stream when asked
    /// ([`gpukit_core::Backend::alloc`]).
    pub(crate) fn alloc_device(&self, bytes: usize, zeroed: bool) -> Result<CudaBuffer> {
        self.bind()?;
        self.dev.reap(false)?;
        let ptr = self.mem_alloc(bytes)?;
        let buf = CudaBuffer {
            ptr,
            bytes,
            owned: true,
            managed: false,
        };
        if zeroed {
            return self.zeroed(buf);
        }
        Ok(buf)
    }

    /// Frees `buf` after the queued work of `users`: [`gpukit_core::Backend::free`].
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::free`].
    pub(crate) unsafe fn free_device(&self, buf: CudaBuffer, users: &[&CudaStream]) -> Result<()> {
        if !buf.owned {
            // A foreign allocation: its owner frees it (after the work queued on it, by the
            // contract of `buffer_from_raw`).
            return Ok(());
        }
        let mut streams = [std::ptr::null_mut(); 8];
        if users.len() <= streams.len() {
            for (slot, s) in streams.iter_mut().zip(users) {
                *slot = s.raw.0;
            }
            Ok(self.dev.free_after(buf.ptr, &streams[..users.len()])?)
        } else {
            let streams: Vec<_> = users.iter().map(|s| s.raw.0).collect();
            Ok(self.dev.free_after(buf.ptr, &streams)?)
        }
    }

    /// Pinned host memory, write-combined for uploads: [`gpukit_core::Backend::alloc_host`].
    pub(crate) fn alloc_pinned(&self, bytes: usize, usage: HostUse) -> Result<CudaHostMem> {
        self.bind()?;
        let flags = match usage {
            HostUse::Upload => sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            HostUse::Download | HostUse::Both => sys::CU_MEMHOSTALLOC_PORTABLE,
        };
        // The context is current.
        let r = driver::mem_host_alloc(bytes, flags);
        if out_of_memory(&r) {
            return Err(Error::OutOfMemory {
                backend: "cuda",
                requested: bytes,
                detail: "cuMemHostAlloc: the host could not pin that much memory".into(),
            });
        }
        let p = self.check(r)?.cast::<u8>();
        // SAFETY: `p` is a fresh allocation of `bytes` bytes that nothing else uses yet.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        Ok(CudaHostMem { ptr: Raw(p), bytes })
    }

    /// [`gpukit_core::Backend::free_host`].
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::free_host`].
    pub(crate) unsafe fn free_pinned(&self, mem: CudaHostMem) -> Result<()> {
        self.bind()?;
        let _ = mem.bytes;
        // SAFETY: the memory came from cuMemHostAlloc and no queued work uses it (contract).
        self.check(unsafe { driver::mem_free_host(mem.ptr.0.cast()) })
    }

    /// [`gpukit_core::Backend::register_host`].
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::register_host`].
    pub(crate) unsafe fn register(&self, ptr: *mut u8, bytes: usize) -> Result<CudaRegistration> {
        self.bind()?;
        // SAFETY: the caller promises `ptr..ptr + bytes` is one live allocation that stays
        // allocated until it is unregistered.
        let r = unsafe {
            driver::mem_host_register(ptr.cast(), bytes, sys::CU_MEMHOSTREGISTER_PORTABLE)
        };
        self.check(r)?;
        Ok(CudaRegistration { ptr: Raw(ptr) })
    }

    /// [`gpukit_core::Backend::unregister_host`].
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::unregister_host`].
    pub(crate) unsafe fn unregister(&self, reg: CudaRegistration) -> Result<()> {
        self.bind()?;
        // SAFETY: `reg` is a live registration and no queued work uses the memory (contract).
        self.check(unsafe { driver::mem_host_unregister(reg.ptr.0.cast()) })
    }

    /// Managed memory, refused beyond the device's free memory
    /// ([`gpukit_core::Backend::alloc_unified`]).
    pub(crate) fn alloc_managed(&self, bytes: usize) -> Result<CudaBuffer> {
        self.bind()?;
        if !self.dev.managed_memory {
            return Err(Error::Unsupported {
                backend: "cuda",
                what: format!(
                    "unified memory on device {} (no managed memory)",
                    self.dev.ordinal
                ),
            });
        }
        // Asking for more managed memory than the device has free can stall the GPU
        // (oversubscription pages it in and out): refuse it up front.
        let (free, total) = self.dev.mem_info();
        let refused = || -> Error {
            CudaError::OutOfMemory {
                call: "cuMemAllocManaged",
                requested: bytes,
                free,
                total,
            }
            .into()
        };
        if bytes > free {
            return Err(refused());
        }
        // The context is current.
        let r = driver::mem_alloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL);
        if out_of_memory(&r) {
            return Err(refused());
        }
        let ptr = self.check(r)?;
        let buf = CudaBuffer {
            ptr,
            bytes,
            owned: true,
            managed: true,
        };
        // Waited for, so that the host may read it at once.
        self.zeroed(buf)
    }

    /// [`gpukit_core::Backend::prefetch`].
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::prefetch`].
    pub(crate) unsafe fn prefetch_managed(
        &self,
        stream: &CudaStream,
        at: BufAt<'_, Self>,
        bytes: usize,
        to: Location,
    ) -> Result<()> {
        if !at.buf.managed || !self.dev.concurrent_managed_access {
            // Without concurrent access the driver migrates on launch and sync itself.
            return Ok(());
        }
        self.bind()?;
        let dst = match to {
            Location::Device => self.dev.dev,
            Location::Host => CU_DEVICE_CPU,
        };
        // SAFETY: the caller's contract: the range lies in a live managed buffer that
        // outlives the prefetch; the stream is live.
        let r =
            unsafe { driver::mem_prefetch_async(at.buf.at(at.offset), bytes, dst, stream.raw.0) };
        self.check(r)
    }

    /// A foreign device address as a buffer this backend never frees
    /// ([`gpukit_core::Backend::buffer_from_raw`]).
    ///
    /// # Safety
    ///
    /// The contract of [`gpukit_core::Backend::buffer_from_raw`].
    pub(crate) unsafe fn wrap_device(&self, ptr: RawPtr, bytes: usize) -> Result<CudaBuffer> {
        match ptr {
            RawPtr::Cuda(0) => Err(Error::Unsupported {
                backend: "cuda",
                what: "a null device address as device memory".into(),
            }),
            RawPtr::Cuda(p) => Ok(CudaBuffer {
                ptr: p,
                bytes,
                owned: false,
                managed: false,
            }),
            other => Err(Error::Unsupported {
                backend: "cuda",
                what: format!("{other:?} as device memory (it needs a CUDA device address)"),
            }),
        }
    }
}
