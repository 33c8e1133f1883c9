//! Memory: allocation, registration, copies and memsets.
//!
//! Copy rules (<https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>): an
//! asynchronous copy from pageable host memory is staged before the call returns (the host
//! may reuse its buffer at once); one to pageable host memory returns only once the copy is
//! done; copies with pinned memory (allocated by `cuMemHostAlloc`, or registered) are fully
//! asynchronous. The synchronous copies run on the legacy default stream: device-to-host
//! ones and host-to-device ones from pinned memory return once done; host-to-device ones from
//! pageable memory once the buffer is staged (the copy may still be running), and
//! device-to-device ones do not wait. The synchronous memsets do not wait either, unless
//! they set managed memory. A copy's device
//! range must lie in one live allocation (`CUDA_ERROR_INVALID_VALUE` when queued; a copy that
//! finds its memory freed when it runs is an illegal address). Copies between devices need
//! no peer access (the driver stages them).

#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use super::{entry, put, stream};
use crate::context::{self, current};
use crate::errors::{cu, CuResult};
use crate::memory::{memory, MemKind};
use crate::stream::{Enqueued, Stream, StreamKind};
use crate::work::{HostSrc, Work};

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    entry("cuMemGetInfo_v2", || {
        let ctx = current()?;
        let total_bytes = crate::config::get().memory;
        let used = memory()?.used(ctx.device);
        // SAFETY: writable size_t's.
        unsafe {
            put(free, total_bytes.saturating_sub(used) as usize)?;
            put(total, total_bytes as usize)
        }
    })
}

fn alloc(kind: MemKind, bytes: usize) -> Result<u64, CuResult> {
    let ctx = current()?;
    crate::capture::check_unsafe_call()?;
    if kind != MemKind::Pinned && crate::faults::alloc_fails() {
        return Err(cu::OUT_OF_MEMORY);
    }
    let a = memory()?.alloc(kind, ctx.device, ctx.handle, bytes as u64)?;
    Ok(a.base)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> CuResult {
    entry("cuMemAlloc_v2", || {
        if dptr.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let p = alloc(MemKind::Device, bytes)?;
        // SAFETY: a writable CUdeviceptr.
        unsafe { put(dptr, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut u64,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    entry("cuMemAllocManaged", || {
        // CU_MEM_ATTACH_GLOBAL (1) or CU_MEM_ATTACH_HOST (2).
        if dptr.is_null() || !(flags == 1 || flags == 2) {
            return Err(cu::INVALID_VALUE);
        }
        let p = alloc(MemKind::Managed, bytes)?;
        // SAFETY: a writable CUdeviceptr.
        unsafe { put(dptr, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> CuResult {
    entry("cuMemFree_v2", || {
        current()?;
        crate::capture::check_unsafe_call()?;
        if dptr == 0 {
            return Ok(());
        }
        memory()?
            .free(dptr, &[MemKind::Device, MemKind::Managed])
            .map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, bytes: usize, h: u64) -> CuResult {
    entry("cuMemAllocAsync", || {
        let s = stream(h)?;
        if s.capture().is_some() {
            crate::capture::invalidate_stream(&s);
            crate::errors::diagnose("cuMemAllocAsync: allocation nodes in captured graphs are not emulated; the capture is invalidated");
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        if dptr.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        if crate::faults::alloc_fails() {
            return Err(cu::OUT_OF_MEMORY);
        }
        let a = memory()?.alloc(MemKind::Device, s.ctx.device, s.ctx.handle, bytes as u64)?;
        // SAFETY: a writable CUdeviceptr.
        unsafe { put(dptr, a.base) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: u64, h: u64) -> CuResult {
    entry("cuMemFreeAsync", || {
        let s = stream(h)?;
        if s.capture().is_some() {
            crate::capture::invalidate_stream(&s);
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        let mem = memory()?;
        if mem.find(dptr).is_none_or(|a| a.base != dptr) {
            return Err(cu::INVALID_VALUE);
        }
        let call: crate::work::Call = Arc::new(move |_| {
            let _ = memory().map(|m| m.free(dptr, &[MemKind::Device, MemKind::Managed]));
            Ok(Vec::new())
        });
        s.enqueue(Work::Call(call), describe("cuMemFreeAsync", &s), None)
            .map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CuResult {
    entry("cuMemHostAlloc", || {
        if pp.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let p = alloc(MemKind::Pinned, bytes)?;
        // SAFETY: a writable pointer.
        unsafe { put(pp, p as *mut c_void) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) -> CuResult {
    // SAFETY: forwarded.
    unsafe { cuMemHostAlloc(pp, bytes, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CuResult {
    entry("cuMemFreeHost", || {
        context::driver()?;
        crate::capture::check_unsafe_call()?;
        memory()?.free(p as u64, &[MemKind::Pinned]).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CuResult {
    entry("cuMemHostRegister_v2", || {
        current()?;
        crate::capture::check_unsafe_call()?;
        memory()?.register(p as u64, bytes as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    entry("cuMemHostUnregister", || {
        current()?;
        crate::capture::check_unsafe_call()?;
        memory()?.unregister(p as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut u64,
    p: *mut c_void,
    flags: c_uint,
) -> CuResult {
    entry("cuMemHostGetDevicePointer_v2", || {
        current()?;
        if flags != 0 || !memory()?.is_pinned(p as u64, 1) {
            return Err(cu::INVALID_VALUE);
        }
        // Unified addressing: the same address.
        // SAFETY: a writable CUdeviceptr.
        unsafe { put(pdptr, p as u64) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut u64,
    size: *mut usize,
    dptr: u64,
) -> CuResult {
    entry("cuMemGetAddressRange_v2", || {
        context::driver()?;
        let a = memory()?.find(dptr).ok_or(cu::NOT_FOUND)?;
        // SAFETY: out-pointers, each may be null.
        unsafe {
            if !base.is_null() {
                *base = a.base;
            }
            if !size.is_null() {
                *size = a.size as usize;
            }
        }
        Ok(())
    })
}

/// `CU_POINTER_ATTRIBUTE_*`: CONTEXT 1, MEMORY_TYPE 2, DEVICE_POINTER 3, HOST_POINTER 4,
/// IS_MANAGED 8, DEVICE_ORDINAL 9.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_uint,
    ptr: u64,
) -> CuResult {
    entry("cuPointerGetAttribute", || {
        context::driver()?;
        if data.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let a = memory()?.find(ptr).ok_or(cu::INVALID_VALUE)?;
        // SAFETY: `data` has room for the attribute's type (the API's contract).
        unsafe {
            match attribute {
                1 => *data.cast::<u64>() = a.ctx,
                // CU_MEMORYTYPE_HOST 1, DEVICE 2 (managed memory reports DEVICE).
                2 => *data.cast::<c_uint>() = if a.kind == MemKind::Pinned { 1 } else { 2 },
                3 | 4 => *data.cast::<u64>() = ptr,
                8 => *data.cast::<c_uint>() = c_uint::from(a.kind == MemKind::Managed),
                9 => *data.cast::<i32>() = a.device as i32,
                _ => return Err(cu::INVALID_VALUE),
            }
        }
        Ok(())
    })
}

fn describe(what: &str, s: &Stream) -> Arc<str> {
    Arc::from(format!("{what} on stream 0x{:x}", s.handle))
}

/// Checks that device bytes `[p, p + len)` lie in one live allocation.
fn check_device(p: u64, len: usize) -> Result<(), CuResult> {
    let mem = memory()?;
    match mem.find(p) {
        Some(a) if a.contains(p, len as u64) => Ok(()),
        _ => {
            crate::errors::diagnose(&format!(
                "a copy or memset names device memory outside every live allocation: {}",
                mem.explain_miss(p, len as u64)
            ));
            Err(cu::INVALID_VALUE)
        }
    }
}

/// Queues a host-to-device copy on `s`; `wait`: the synchronous form.
unsafe fn htod(
    dst: u64,
    src: *const c_void,
    len: usize,
    s: &Arc<Stream>,
    sync: bool,
) -> Result<(), CuResult> {
    if len == 0 {
        return Ok(());
    }
    if src.is_null() {
        return Err(cu::INVALID_VALUE);
    }
    check_device(dst, len)?;
    let pinned = memory()?.is_pinned(src as u64, len as u64);
    let source = if pinned {
        HostSrc::Pinned(src as u64)
    } else {
        if s.capture().is_some() {
            crate::capture::invalidate_stream(s);
            crate::errors::diagnose("cuMemcpyHtoDAsync from pageable host memory while the stream captures: the capture is invalidated");
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        // SAFETY: the caller's buffer holds `len` readable bytes (the API's contract).
        HostSrc::Staged(Arc::new(
            unsafe { std::slice::from_raw_parts(src.cast::<u8>(), len) }.to_vec(),
        ))
    };
    let what = describe(&format!("memcpy HtoD of {len} bytes"), s);
    let q = s.enqueue(
        Work::HtoD {
            dst,
            src: source,
            len: len as u64,
        },
        what,
        None,
    )?;
    // The synchronous form waits for the copy only from pinned memory: from pageable memory
    // it returns once the buffer is staged, "but the DMA to final destination may not have
    // completed", so the host (and the streams it orders) learn nothing.
    if sync && pinned {
        finish(s, q)?;
    } else if sync {
        s.ctx.dev().check()?;
    }
    Ok(())
}

/// Waits for a queued copy (the synchronous and pageable forms); the host learns it ran.
fn finish(s: &Arc<Stream>, q: Enqueued) -> Result<(), CuResult> {
    if let Enqueued::At(seq) = q {
        let (_, vc) = s.position();
        s.wait_for(seq);
        crate::hb::host_learns(&vc);
    }
    s.ctx.dev().check()
}

unsafe fn dtoh(
    dst: *mut c_void,
    src: u64,
    len: usize,
    s: &Arc<Stream>,
    sync: bool,
) -> Result<(), CuResult> {
    if len == 0 {
        return Ok(());
    }
    if dst.is_null() {
        return Err(cu::INVALID_VALUE);
    }
    check_device(src, len)?;
    let pinned = memory()?.is_pinned(dst as u64, len as u64);
    if !pinned && s.capture().is_some() {
        crate::capture::invalidate_stream(s);
        crate::errors::diagnose("cuMemcpyDtoHAsync to pageable host memory while the stream captures: the capture is invalidated");
        return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
    }
    let what = describe(&format!("memcpy DtoH of {len} bytes"), s);
    let q = s.enqueue(
        Work::DtoH {
            dst: dst as u64,
            src,
            len: len as u64,
        },
        what,
        None,
    )?;
    if sync || !pinned {
        finish(s, q)?;
    }
    Ok(())
}

fn dtod(dst: u64, src: u64, len: usize, s: &Arc<Stream>, what: &str) -> Result<(), CuResult> {
    if len == 0 {
        return Ok(());
    }
    check_device(src, len)?;
    check_device(dst, len)?;
    let what = describe(&format!("{what} of {len} bytes"), s);
    s.enqueue(
        Work::DtoD {
            dst,
            src,
            len: len as u64,
        },
        what,
        None,
    )
    .map(|_| ())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    len: usize,
    h: u64,
) -> CuResult {
    // SAFETY: the caller's contract: `src` holds `len` bytes until the copy has run.
    entry("cuMemcpyHtoDAsync_v2", || unsafe {
        htod(dst, src, len, &stream(h)?, false)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    len: usize,
    h: u64,
) -> CuResult {
    // SAFETY: the caller's contract: `dst` has room for `len` bytes until the copy has run.
    entry("cuMemcpyDtoHAsync_v2", || unsafe {
        dtoh(dst, src, len, &stream(h)?, false)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, h: u64) -> CuResult {
    entry("cuMemcpyDtoDAsync_v2", || {
        dtod(dst, src, len, &stream(h)?, "memcpy DtoD")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(dst: u64, src: u64, len: usize, h: u64) -> CuResult {
    entry("cuMemcpyAsync", || {
        let s = stream(h)?;
        let mem = memory()?;
        let dev_src = mem.find(src).is_some_and(|a| a.kind != MemKind::Pinned);
        let dev_dst = mem.find(dst).is_some_and(|a| a.kind != MemKind::Pinned);
        // SAFETY: the caller's contract for host memory.
        unsafe {
            match (dev_dst, dev_src) {
                (true, true) => dtod(dst, src, len, &s, "memcpy"),
                (true, false) => htod(dst, src as *const c_void, len, &s, false),
                (false, true) => dtoh(dst as *mut c_void, src, len, &s, false),
                (false, false) => Err(cu::INVALID_VALUE),
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeerAsync(
    dst: u64,
    dst_ctx: u64,
    src: u64,
    src_ctx: u64,
    len: usize,
    h: u64,
) -> CuResult {
    entry("cuMemcpyPeerAsync", || {
        let s = stream(h)?;
        let d = context::driver()?;
        let mem = memory()?;
        d.contexts.get(dst_ctx).ok_or(cu::INVALID_CONTEXT)?;
        d.contexts.get(src_ctx).ok_or(cu::INVALID_CONTEXT)?;
        if len > 0 {
            let owner = |p: u64| mem.find(p).map(|a| a.ctx);
            if owner(dst) != Some(dst_ctx) || owner(src) != Some(src_ctx) {
                crate::errors::diagnose(
                    "cuMemcpyPeerAsync: a pointer does not belong to the context given with it",
                );
                return Err(cu::INVALID_VALUE);
            }
        }
        dtod(dst, src, len, &s, "memcpy peer")
    })
}

fn sync_stream() -> Result<Arc<Stream>, CuResult> {
    crate::capture::check_unsafe_call()?;
    stream(0)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, len: usize) -> CuResult {
    // SAFETY: the caller's contract.
    entry("cuMemcpyHtoD_v2", || unsafe {
        htod(dst, src, len, &sync_stream()?, true)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, len: usize) -> CuResult {
    // SAFETY: the caller's contract.
    entry("cuMemcpyDtoH_v2", || unsafe {
        dtoh(dst, src, len, &sync_stream()?, true)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, len: usize) -> CuResult {
    entry("cuMemcpyDtoD_v2", || {
        dtod(dst, src, len, &sync_stream()?, "memcpy DtoD")
    })
}

fn memset(
    dst: u64,
    value: u32,
    elem: u8,
    count: usize,
    s: &Arc<Stream>,
) -> Result<Enqueued, CuResult> {
    if count == 0 {
        return Ok(Enqueued::Captured);
    }
    if !dst.is_multiple_of(u64::from(elem)) {
        return Err(cu::INVALID_VALUE);
    }
    check_device(dst, count * elem as usize)?;
    let what = describe(&format!("memset of {} bytes", count * elem as usize), s);
    s.enqueue(
        Work::Memset {
            dst,
            value,
            elem,
            count: count as u64,
        },
        what,
        None,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(dst: u64, v: u8, n: usize, h: u64) -> CuResult {
    entry("cuMemsetD8Async", || {
        memset(dst, u32::from(v), 1, n, &stream(h)?).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(dst: u64, v: u16, n: usize, h: u64) -> CuResult {
    entry("cuMemsetD16Async", || {
        memset(dst, u32::from(v), 2, n, &stream(h)?).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(dst: u64, v: u32, n: usize, h: u64) -> CuResult {
    entry("cuMemsetD32Async", || {
        memset(dst, v, 4, n, &stream(h)?).map(|_| ())
    })
}

/// A synchronous memset: on the legacy stream, "asynchronous with respect to the host
/// except when the target is pinned host memory or a Unified Memory region, in which case
/// they are fully synchronous".
fn memset_sync(dst: u64, value: u32, elem: u8, count: usize) -> Result<(), CuResult> {
    let s = sync_stream()?;
    let q = memset(dst, value, elem, count, &s)?;
    let managed = memory()?
        .find(dst)
        .is_some_and(|a| a.kind == MemKind::Managed);
    if managed {
        finish(&s, q)
    } else {
        s.ctx.dev().check()
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: u64, v: u8, n: usize) -> CuResult {
    entry("cuMemsetD8_v2", || memset_sync(dst, u32::from(v), 1, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: u64, v: u32, n: usize) -> CuResult {
    entry("cuMemsetD32_v2", || memset_sync(dst, v, 4, n))
}

/// `cuStreamAttachMemAsync`: checked as the documentation says
/// (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>: managed memory
/// only; for `cuMemAllocManaged` memory a length of 0 or the whole allocation; one of
/// `CU_MEM_ATTACH_GLOBAL`, `_HOST`, `_SINGLE`, and `_SINGLE` not on the legacy default
/// stream) and queued in stream order. The emulator's managed memory is one host mapping
/// that the host and every stream may use at any time, so the attachment changes nothing
/// else.
#[no_mangle]
pub unsafe extern "C" fn cuStreamAttachMemAsync(
    h: u64,
    dptr: u64,
    len: usize,
    flags: c_uint,
) -> CuResult {
    entry("cuStreamAttachMemAsync", || {
        let s = stream(h)?;
        if !matches!(flags, 1 | 2 | 4) || (flags == 4 && s.kind == StreamKind::Legacy) {
            return Err(cu::INVALID_VALUE);
        }
        match memory()?.find(dptr) {
            Some(a)
                if a.kind == MemKind::Managed
                    && (len == 0 || (a.base == dptr && len as u64 == a.size)) => {}
            _ => return Err(cu::INVALID_VALUE),
        }
        s.enqueue(Work::Nop, describe("cuStreamAttachMemAsync", &s), None)
            .map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPrefetchAsync(
    ptr: u64,
    len: usize,
    dst_device: i32,
    h: u64,
) -> CuResult {
    entry("cuMemPrefetchAsync", || {
        let s = stream(h)?;
        let mem = memory()?;
        // CU_DEVICE_CPU is -1.
        if dst_device != -1 {
            context::device(dst_device)?;
        }
        match mem.find(ptr) {
            Some(a) if a.kind == MemKind::Managed && a.contains(ptr, len as u64) => {}
            _ => return Err(cu::INVALID_VALUE),
        }
        s.enqueue(Work::Nop, describe("cuMemPrefetchAsync", &s), None)
            .map(|_| ())
    })
}
