//! Every raw CUDA driver call of the backend: one wrapper per entry point, each returning
//! `Result` with its outputs as values, in the manner of cudarc's `driver::result`.
//!
//! No other module calls a `cudarc::driver::sys` function (they use its types and
//! constants); the unit tests of `loader` check that each entry point is called here, once,
//! and that `loader::DRIVER_SYMBOLS`, which the backend checks before its first call, lists
//! exactly these.
//!
//! A failed call is a [`DriverError`]: the call's name as errors show it (`cuMemFree`, no
//! `_v2` suffix) and its `CUresult`. It is not yet the crate's error:
//! [`Device::check`](crate::device::Device::check) turns it into one, so that a sticky error
//! poisons the device; teardown paths that have nowhere to report ignore it.
//!
//! A wrapper is `unsafe` where a handle or pointer it takes must be valid, and its `# Safety`
//! section says what the caller vouches for; the wrappers that take only values the driver
//! checks itself (ordinals, attributes, flags, sizes) are safe. Each links the section of
//! NVIDIA's Driver API reference that documents its call.

use std::ffi::{c_int, c_void, CStr};

use cudarc::driver::sys::{self, CUresult};

/// A driver call that did not return `CUDA_SUCCESS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DriverError {
    /// The call, as errors name it: the entry point without a `_v2` suffix (`cuMemFree`).
    pub call: &'static str,
    /// What the driver returned.
    pub code: CUresult,
}

/// `Ok` for `CUDA_SUCCESS`, else the error of `call`.
#[inline]
fn result(call: &'static str, code: CUresult) -> Result<(), DriverError> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(DriverError { call, code }),
    }
}

/// `Ok(true)` for `CUDA_SUCCESS`, `Ok(false)` for `CUDA_ERROR_NOT_READY`, else the error of
/// `call`: the answer of a query.
#[inline]
fn ready(call: &'static str, code: CUresult) -> Result<bool, DriverError> {
    match code {
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => result(call, code).map(|()| true),
    }
}

// ----- context and device -----------------------------------------------------------------

/// [`cuInit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html) with
/// no flags (the only ones there are).
pub(crate) fn init() -> Result<(), DriverError> {
    // SAFETY: takes no pointer or handle; initialising again is allowed and does nothing.
    result("cuInit", unsafe { sys::cuInit(0) })
}

/// [`cuDeviceGet`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html):
/// the device of `ordinal`.
pub(crate) fn device_get(ordinal: c_int) -> Result<sys::CUdevice, DriverError> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a live out-pointer; the driver checks the ordinal.
    result("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

/// [`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html).
pub(crate) fn device_get_attribute(
    attribute: sys::CUdevice_attribute,
    dev: sys::CUdevice,
) -> Result<c_int, DriverError> {
    let mut v: c_int = 0;
    // SAFETY: a live out-pointer; a device is an ordinal, which the driver checks.
    result("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attribute, dev)
    })?;
    Ok(v)
}

/// [`cuDevicePrimaryCtxRetain`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html):
/// the device's primary context, retained once more.
pub(crate) fn device_primary_ctx_retain(dev: sys::CUdevice) -> Result<sys::CUcontext, DriverError> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a live out-pointer; the driver checks the device. A retain that is never
    // released only keeps the context alive.
    result("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
    })?;
    Ok(ctx)
}

/// [`cuDevicePrimaryCtxRelease`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html).
///
/// # Safety
///
/// - the caller retained `dev`'s primary context and releases that retain, once;
/// - nothing of the caller's uses the context afterwards (the last release destroys it).
pub(crate) unsafe fn device_primary_ctx_release(dev: sys::CUdevice) -> Result<(), DriverError> {
    // SAFETY: the caller's contract: its own retain, released once, and no use after.
    result("cuDevicePrimaryCtxRelease", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(dev)
    })
}

/// [`cuDeviceCanAccessPeer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html):
/// whether `dev` can access `peer`'s memory directly.
pub(crate) fn device_can_access_peer(
    dev: sys::CUdevice,
    peer: sys::CUdevice,
) -> Result<bool, DriverError> {
    let mut can: c_int = 0;
    // SAFETY: a live out-pointer; devices are ordinals, which the driver checks.
    result("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, dev, peer)
    })?;
    Ok(can != 0)
}

/// [`cuCtxGetCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html):
/// the calling thread's current context (null for none).
pub(crate) fn ctx_get_current() -> Result<sys::CUcontext, DriverError> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a live out-pointer; reading the current context has no other effect.
    result("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) })?;
    Ok(ctx)
}

/// [`cuCtxSetCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html).
///
/// # Safety
///
/// - `ctx` is a live context (retained by the caller).
pub(crate) unsafe fn ctx_set_current(ctx: sys::CUcontext) -> Result<(), DriverError> {
    // SAFETY: `ctx` is live (the caller's contract).
    result("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// [`cuCtxGetStreamPriorityRange`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html):
/// `(least, greatest)` stream priority of the current context.
pub(crate) fn ctx_get_stream_priority_range() -> Result<(c_int, c_int), DriverError> {
    let (mut least, mut greatest): (c_int, c_int) = (0, 0);
    // SAFETY: live out-pointers; without a current context the driver returns an error.
    result("cuCtxGetStreamPriorityRange", unsafe {
        sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
    })?;
    Ok((least, greatest))
}

/// [`cuCtxEnablePeerAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)
/// from the current context to `peer` (no flags: there are none yet).
///
/// # Safety
///
/// - `peer` is a live context (retained by the caller).
pub(crate) unsafe fn ctx_enable_peer_access(peer: sys::CUcontext) -> Result<(), DriverError> {
    // SAFETY: `peer` is live (the caller's contract); the flags must be 0.
    result("cuCtxEnablePeerAccess", unsafe {
        sys::cuCtxEnablePeerAccess(peer, 0)
    })
}

// ----- device memory ------------------------------------------------------------------------

/// [`cuMemGetInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// `(free, total)` bytes of the current context's device.
pub(crate) fn mem_get_info() -> Result<(usize, usize), DriverError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: live out-pointers; without a current context the driver returns an error.
    result("cuMemGetInfo", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}

/// [`cuMemAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html) in the
/// current context.
pub(crate) fn mem_alloc(bytes: usize) -> Result<sys::CUdeviceptr, DriverError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: a live out-pointer; an allocation never freed only leaks.
    result("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
    Ok(ptr)
}

/// [`cuMemAllocManaged`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
/// in the current context.
pub(crate) fn mem_alloc_managed(
    bytes: usize,
    flags: sys::CUmemAttach_flags,
) -> Result<sys::CUdeviceptr, DriverError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: a live out-pointer; an allocation never freed only leaks.
    result("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(&mut ptr, bytes, flags as u32)
    })?;
    Ok(ptr)
}

/// [`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
///
/// # Safety
///
/// - `ptr` came from `cuMemAlloc` or `cuMemAllocManaged` in the current context and is freed
///   once;
/// - no queued or running work uses the memory, and nothing uses it afterwards.
pub(crate) unsafe fn mem_free(ptr: sys::CUdeviceptr) -> Result<(), DriverError> {
    // SAFETY: an allocation of this context that nothing uses any more (the caller's
    // contract).
    result("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
}

/// [`cuMemsetD8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// queues setting `bytes` bytes at `ptr` to `value` on `stream`.
///
/// # Safety
///
/// - `ptr..ptr + bytes` lies in device memory that stays allocated until the stream has
///   passed the memset, and no other work touches it meanwhile;
/// - `stream` is a live stream of the current context.
pub(crate) unsafe fn memset_d8_async(
    ptr: sys::CUdeviceptr,
    value: u8,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: a valid range and a live stream (the caller's contract).
    result("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, value, bytes, stream)
    })
}

/// [`cuMemPrefetchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html):
/// queues moving managed memory to `dst` (a device, or `CU_DEVICE_CPU`) on `stream`.
///
/// # Safety
///
/// - `ptr..ptr + bytes` lies in managed memory that stays allocated until the stream has
///   passed the prefetch;
/// - `stream` is a live stream of the current context.
pub(crate) unsafe fn mem_prefetch_async(
    ptr: sys::CUdeviceptr,
    bytes: usize,
    dst: sys::CUdevice,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: a valid managed range and a live stream (the caller's contract).
    result("cuMemPrefetchAsync", unsafe {
        sys::cuMemPrefetchAsync(ptr, bytes, dst, stream)
    })
}

/// [`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// queues a copy of `bytes` bytes from host `src` to device `dst` on `stream`.
///
/// # Safety
///
/// - `dst..dst + bytes` lies in device memory that stays allocated until the stream has
///   passed the copy;
/// - `src` is readable for `bytes` bytes and unmodified until the stream has passed the
///   copy;
/// - `stream` is a live stream of the current context.
pub(crate) unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: valid ranges on both sides and a live stream (the caller's contract).
    result("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src, bytes, stream)
    })
}

/// [`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// queues a copy of `bytes` bytes from device `src` to host `dst` on `stream`.
///
/// # Safety
///
/// - `src..src + bytes` lies in device memory that stays allocated until the stream has
///   passed the copy;
/// - `dst` is writable for `bytes` bytes and otherwise unaccessed until the stream has
///   passed the copy;
/// - `stream` is a live stream of the current context.
pub(crate) unsafe fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: valid ranges on both sides and a live stream (the caller's contract).
    result("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst, src, bytes, stream)
    })
}

/// [`cuMemcpyDtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// queues a copy of `bytes` bytes between device ranges on `stream`.
///
/// # Safety
///
/// - `src..src + bytes` and `dst..dst + bytes` lie in device memory that stays allocated
///   until the stream has passed the copy, and do not overlap;
/// - `stream` is a live stream of the current context.
pub(crate) unsafe fn memcpy_dtod_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: valid, disjoint ranges and a live stream (the caller's contract).
    result("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream)
    })
}

/// [`cuMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// queues a copy of `bytes` bytes from `src` in `src_ctx` to `dst` in `dst_ctx` on `stream`.
///
/// # Safety
///
/// - `dst_ctx` and `src_ctx` are live contexts;
/// - `src..src + bytes` lies in memory of `src_ctx`, `dst..dst + bytes` in memory of
///   `dst_ctx`, both allocated until the stream has passed the copy;
/// - `stream` is a live stream of the current context.
pub(crate) unsafe fn memcpy_peer_async(
    dst: sys::CUdeviceptr,
    dst_ctx: sys::CUcontext,
    src: sys::CUdeviceptr,
    src_ctx: sys::CUcontext,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: live contexts, valid ranges in them and a live stream (the caller's contract).
    result("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, bytes, stream)
    })
}

// ----- streams ------------------------------------------------------------------------------

/// [`cuStreamCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)
/// in the current context.
pub(crate) fn stream_create(flags: sys::CUstream_flags) -> Result<sys::CUstream, DriverError> {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: a live out-pointer; a stream never destroyed only leaks.
    result("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut s, flags as u32)
    })?;
    Ok(s)
}

/// [`cuStreamCreateWithPriority`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)
/// in the current context.
pub(crate) fn stream_create_with_priority(
    flags: sys::CUstream_flags,
    priority: c_int,
) -> Result<sys::CUstream, DriverError> {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: a live out-pointer; the driver clamps the priority; a stream never destroyed
    // only leaks.
    result("cuStreamCreateWithPriority", unsafe {
        sys::cuStreamCreateWithPriority(&mut s, flags as u32, priority)
    })?;
    Ok(s)
}

/// [`cuStreamDestroy`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html).
///
/// # Safety
///
/// - `stream` is a live stream of the current context, destroyed once, and not used
///   afterwards (work queued on it still runs).
pub(crate) unsafe fn stream_destroy(stream: sys::CUstream) -> Result<(), DriverError> {
    // SAFETY: a live stream, destroyed once (the caller's contract).
    result("cuStreamDestroy", unsafe {
        sys::cuStreamDestroy_v2(stream)
    })
}

/// [`cuStreamSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html):
/// waits for the work queued on `stream`.
///
/// # Safety
///
/// - `stream` is a live stream.
pub(crate) unsafe fn stream_synchronize(stream: sys::CUstream) -> Result<(), DriverError> {
    // SAFETY: a live stream (the caller's contract).
    result("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream)
    })
}

/// [`cuStreamQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html):
/// whether `stream` has finished its queued work.
///
/// # Safety
///
/// - `stream` is a live stream.
pub(crate) unsafe fn stream_query(stream: sys::CUstream) -> Result<bool, DriverError> {
    // SAFETY: a live stream (the caller's contract).
    ready("cuStreamQuery", unsafe { sys::cuStreamQuery(stream) })
}

/// [`cuStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html):
/// makes later work on `stream` wait for `event` (no flags).
///
/// # Safety
///
/// - `stream` is a live stream and `event` a live event (of any context).
pub(crate) unsafe fn stream_wait_event(
    stream: sys::CUstream,
    event: sys::CUevent,
) -> Result<(), DriverError> {
    // SAFETY: a live stream and event (the caller's contract).
    result("cuStreamWaitEvent", unsafe {
        sys::cuStreamWaitEvent(stream, event, 0)
    })
}

/// [`cuStreamGetCtx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html):
/// the context `stream` belongs to.
///
/// # Safety
///
/// - `stream` is a live stream.
pub(crate) unsafe fn stream_get_ctx(stream: sys::CUstream) -> Result<sys::CUcontext, DriverError> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a live stream (the caller's contract); a live out-pointer.
    result("cuStreamGetCtx", unsafe {
        sys::cuStreamGetCtx(stream, &mut ctx)
    })?;
    Ok(ctx)
}

/// [`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html):
/// queues `f(data)` on `stream`, run by a driver thread once the work before it is done.
///
/// # Safety
///
/// - `stream` is a live stream of the current context;
/// - `f` may be called with `data` on another thread, once, after this returns `Ok`, and
///   calls no CUDA function; where this returns an error it is never called.
pub(crate) unsafe fn launch_host_func(
    stream: sys::CUstream,
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
) -> Result<(), DriverError> {
    // SAFETY: a live stream, and a function that may run on `data` (the caller's contract).
    result("cuLaunchHostFunc", unsafe {
        sys::cuLaunchHostFunc(stream, Some(f), data)
    })
}

// ----- events -------------------------------------------------------------------------------

/// [`cuEventCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)
/// in the current context.
pub(crate) fn event_create(flags: sys::CUevent_flags) -> Result<sys::CUevent, DriverError> {
    let mut e: sys::CUevent = std::ptr::null_mut();
    // SAFETY: a live out-pointer; an event never destroyed only leaks.
    result("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, flags as u32)
    })?;
    Ok(e)
}

/// [`cuEventRecord`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html):
/// records `event` after the work queued so far on `stream`.
///
/// # Safety
///
/// - `event` is a live event and `stream` a live stream, of the same context.
pub(crate) unsafe fn event_record(
    event: sys::CUevent,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: a live event and stream (the caller's contract).
    result("cuEventRecord", unsafe {
        sys::cuEventRecord(event, stream)
    })
}

/// [`cuEventSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html):
/// waits for `event`'s work.
///
/// # Safety
///
/// - `event` is a live event.
pub(crate) unsafe fn event_synchronize(event: sys::CUevent) -> Result<(), DriverError> {
    // SAFETY: a live event (the caller's contract).
    result("cuEventSynchronize", unsafe {
        sys::cuEventSynchronize(event)
    })
}

/// [`cuEventQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html):
/// whether `event`'s work is done.
///
/// # Safety
///
/// - `event` is a live event.
pub(crate) unsafe fn event_query(event: sys::CUevent) -> Result<bool, DriverError> {
    // SAFETY: a live event (the caller's contract).
    ready("cuEventQuery", unsafe { sys::cuEventQuery(event) })
}

/// [`cuEventElapsedTime`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html):
/// milliseconds from `start` to `end`.
///
/// # Safety
///
/// - `start` and `end` are live events.
pub(crate) unsafe fn event_elapsed_time(
    start: sys::CUevent,
    end: sys::CUevent,
) -> Result<f32, DriverError> {
    let mut ms = 0f32;
    // SAFETY: live events (the caller's contract); a live out-pointer.
    result("cuEventElapsedTime", unsafe {
        sys::cuEventElapsedTime(&mut ms, start, end)
    })?;
    Ok(ms)
}

/// [`cuEventDestroy`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html).
///
/// # Safety
///
/// - `event` is a live event, destroyed once, and nothing refers to it afterwards.
pub(crate) unsafe fn event_destroy(event: sys::CUevent) -> Result<(), DriverError> {
    // SAFETY: a live event, destroyed once (the caller's contract).
    result("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(event) })
}

// ----- modules, functions and launches ------------------------------------------------------

/// [`cuModuleLoadData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html):
/// loads a module into the current context.
///
/// # Safety
///
/// - `image` is a whole cubin, fatbin or NUL-terminated PTX (the driver reads as far as the
///   image's contents say, not `image.len()`).
pub(crate) unsafe fn module_load_data(image: &[u8]) -> Result<sys::CUmodule, DriverError> {
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: a complete image that lives across the call (the caller's contract); a live
    // out-pointer.
    result("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut module, image.as_ptr().cast())
    })?;
    Ok(module)
}

/// [`cuModuleGetFunction`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html):
/// the kernel `name` of `module`.
///
/// # Safety
///
/// - `module` is a loaded module.
pub(crate) unsafe fn module_get_function(
    module: sys::CUmodule,
    name: &CStr,
) -> Result<sys::CUfunction, DriverError> {
    let mut f: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: a loaded module (the caller's contract); a NUL-terminated name; a live
    // out-pointer.
    result("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut f, module, name.as_ptr())
    })?;
    Ok(f)
}

/// [`cuModuleUnload`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html).
///
/// # Safety
///
/// - `module` is a loaded module of the current context, unloaded once;
/// - no launch of its functions is queued or running, and none is made afterwards.
pub(crate) unsafe fn module_unload(module: sys::CUmodule) -> Result<(), DriverError> {
    // SAFETY: a loaded module that nothing runs or will run (the caller's contract).
    result("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
}

/// [`cuFuncGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html).
///
/// # Safety
///
/// - `f` is a function of a loaded module.
pub(crate) unsafe fn func_get_attribute(
    attribute: sys::CUfunction_attribute,
    f: sys::CUfunction,
) -> Result<c_int, DriverError> {
    let mut v: c_int = 0;
    // SAFETY: a live function (the caller's contract); a live out-pointer.
    result("cuFuncGetAttribute", unsafe {
        sys::cuFuncGetAttribute(&mut v, attribute, f)
    })?;
    Ok(v)
}

/// [`cuLaunchKernel`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html):
/// queues `f` on `stream` over `grid` blocks of `block` threads.
///
/// # Safety
///
/// - `f` is a function of a loaded module of the current context, and `stream` a live
///   stream of it;
/// - `params` begins with one pointer per parameter of `f`, in order, each at a value of
///   that parameter's type, alive for the call (the driver reads no further);
/// - the device memory the kernel reaches through them stays allocated until the stream
///   has passed the launch, and the kernel stays inside it.
pub(crate) unsafe fn launch_kernel(
    f: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    let [gx, gy, gz] = grid;
    let [bx, by, bz] = block;
    // SAFETY: a live function and stream, and parameters that match the kernel and the
    // memory it uses (the caller's contract); no `extra` options.
    result("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            shared_mem_bytes,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

// ----- stream capture and graphs ------------------------------------------------------------

/// [`cuStreamBeginCapture`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html):
/// starts recording `stream`'s work into a graph instead of running it.
///
/// # Safety
///
/// - `stream` is a live stream of the current context that is not capturing.
pub(crate) unsafe fn stream_begin_capture(
    stream: sys::CUstream,
    mode: sys::CUstreamCaptureMode,
) -> Result<(), DriverError> {
    // SAFETY: a live stream, not capturing (the caller's contract).
    result("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(stream, mode)
    })
}

/// [`cuStreamEndCapture`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html):
/// the graph `stream` captured.
///
/// # Safety
///
/// - `stream` is a live stream capturing since [`stream_begin_capture`].
pub(crate) unsafe fn stream_end_capture(
    stream: sys::CUstream,
) -> Result<sys::CUgraph, DriverError> {
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: a capturing stream (the caller's contract); a live out-pointer.
    result("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(stream, &mut graph)
    })?;
    Ok(graph)
}

/// [`cuGraphInstantiateWithFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)
/// with no flags: an executable graph of `graph`.
///
/// # Safety
///
/// - `graph` is a live graph.
pub(crate) unsafe fn graph_instantiate(
    graph: sys::CUgraph,
) -> Result<sys::CUgraphExec, DriverError> {
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: a live graph (the caller's contract); a live out-pointer.
    result("cuGraphInstantiateWithFlags", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
    })?;
    Ok(exec)
}

/// [`cuGraphDestroy`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
///
/// # Safety
///
/// - `graph` is a live graph, destroyed once, and not used afterwards (executable graphs
///   made from it stay valid).
pub(crate) unsafe fn graph_destroy(graph: sys::CUgraph) -> Result<(), DriverError> {
    // SAFETY: a live graph, destroyed once (the caller's contract).
    result("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph) })
}

/// [`cuGraphLaunch`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html):
/// queues a run of `exec` on `stream`.
///
/// # Safety
///
/// - `exec` is a live executable graph and `stream` a live stream, of the current context;
/// - the memory the graph's work uses stays allocated until the stream has passed the run.
pub(crate) unsafe fn graph_launch(
    exec: sys::CUgraphExec,
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // SAFETY: a live executable graph and stream whose memory outlives the run (the
    // caller's contract).
    result("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, stream) })
}

/// [`cuGraphExecDestroy`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html).
///
/// # Safety
///
/// - `exec` is a live executable graph, destroyed once, and not launched afterwards (runs
///   already queued complete first).
pub(crate) unsafe fn graph_exec_destroy(exec: sys::CUgraphExec) -> Result<(), DriverError> {
    // SAFETY: a live executable graph, destroyed once (the caller's contract).
    result("cuGraphExecDestroy", unsafe {
        sys::cuGraphExecDestroy(exec)
    })
}

// ----- host memory --------------------------------------------------------------------------

/// [`cuMemHostAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// `bytes` bytes of pinned host memory (`flags`: `CU_MEMHOSTALLOC_*`).
pub(crate) fn mem_host_alloc(bytes: usize, flags: u32) -> Result<*mut c_void, DriverError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live out-pointer; an allocation never freed only leaks.
    result("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut p, bytes, flags)
    })?;
    Ok(p)
}

/// [`cuMemFreeHost`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
///
/// # Safety
///
/// - `p` came from `cuMemHostAlloc` and is freed once;
/// - no queued or running work uses the memory, and nothing uses it afterwards.
pub(crate) unsafe fn mem_free_host(p: *mut c_void) -> Result<(), DriverError> {
    // SAFETY: a pinned allocation that nothing uses any more (the caller's contract).
    result("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p) })
}

/// [`cuMemHostRegister`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// pins existing host memory (`flags`: `CU_MEMHOSTREGISTER_*`).
///
/// # Safety
///
/// - `p..p + bytes` is one live allocation that stays allocated until it is unregistered.
pub(crate) unsafe fn mem_host_register(
    p: *mut c_void,
    bytes: usize,
    flags: u32,
) -> Result<(), DriverError> {
    // SAFETY: a live allocation that outlives the registration (the caller's contract).
    result("cuMemHostRegister", unsafe {
        sys::cuMemHostRegister_v2(p, bytes, flags)
    })
}

/// [`cuMemHostUnregister`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
///
/// # Safety
///
/// - `p` is the start of a live registration, unregistered once;
/// - no queued or running work uses the memory through the registration.
pub(crate) unsafe fn mem_host_unregister(p: *mut c_void) -> Result<(), DriverError> {
    // SAFETY: a live registration that no work uses (the caller's contract).
    result("cuMemHostUnregister", unsafe {
        sys::cuMemHostUnregister(p)
    })
}
