//! Initialisation, versions, devices, contexts and error strings.
//!
//! The emulated devices are H100-like (compute capability 9.0, 132 SMs unless
//! `GPUKIT_CUDA_EMU_SMS` says otherwise, 48 KiB of static shared memory per block and
//! 227 KiB opt-in, 1024 threads per block) and say in their name that they are the emulator. The driver reports CUDA 12.9.

#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::{entry, put};
use crate::context::{self, current};
use crate::errors::{cu, CuResult};

/// The CUDA version the emulated driver reports (`cuDriverGetVersion`).
pub const DRIVER_VERSION: c_int = 12090;

/// The most L2 a context may set aside for persisting accesses
/// (`CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`, the ceiling of `cuCtxSetLimit`'s
/// `CU_LIMIT_PERSISTING_L2_CACHE_SIZE`): three quarters of the L2, as on A100 and H100.
pub const MAX_PERSISTING_L2: usize = 52428800 / 4 * 3;

/// The devices' name.
pub const DEVICE_NAME: &str = "gpukit CUDA emulator (H100-like, sm_90)";

/// `CU_DEVICE_ATTRIBUTE_*` values of an emulated device; 0 for the others.
pub fn attribute(attr: u32) -> Option<c_int> {
    Some(match attr {
        1 => 1024,                               // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                           // MAX_BLOCK_DIM_X, Y
        4 => 64,                                 // MAX_BLOCK_DIM_Z
        5 => 2147483647,                         // MAX_GRID_DIM_X
        6 | 7 => 65535,                          // MAX_GRID_DIM_Y, Z
        8 => 49152,                              // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65536,                              // TOTAL_CONSTANT_MEMORY
        10 => 32,                                // WARP_SIZE
        11 => 2147483647,                        // MAX_PITCH
        12 => 65536,                             // MAX_REGISTERS_PER_BLOCK
        13 => 1980000,                           // CLOCK_RATE (kHz)
        14 => 512,                               // TEXTURE_ALIGNMENT
        15 => 1,                                 // GPU_OVERLAP
        16 => crate::config::get().sms as c_int, // MULTIPROCESSOR_COUNT
        17 => 0,                                 // KERNEL_EXEC_TIMEOUT
        18 => 0,                                 // INTEGRATED
        19 => 1,                                 // CAN_MAP_HOST_MEMORY
        20 => 0,                                 // COMPUTE_MODE: default
        30 => 512,                               // SURFACE_ALIGNMENT
        31 => 1,                                 // CONCURRENT_KERNELS
        32 => 1,                                 // ECC_ENABLED
        33 | 34 | 50 => 0,                       // PCI bus, device, domain
        35 => 0,                                 // TCC_DRIVER
        36 => 2619000,                           // MEMORY_CLOCK_RATE
        37 => 5120,                              // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52428800,                          // L2_CACHE_SIZE
        39 => 2048,                              // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2,                                 // ASYNC_ENGINE_COUNT
        41 => 1,                                 // UNIFIED_ADDRESSING
        75 => 9,                                 // COMPUTE_CAPABILITY_MAJOR
        76 => 0,                                 // COMPUTE_CAPABILITY_MINOR
        78 => 1,                                 // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1, // GLOBAL_L1_CACHE_SUPPORTED, LOCAL_L1_CACHE_SUPPORTED
        81 => 233472, // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,  // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,      // MANAGED_MEMORY
        84 | 85 => 0, // MULTI_GPU_BOARD, its group
        86 => 0,      // HOST_NATIVE_ATOMIC_SUPPORTED
        87 => 2,      // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 => 0,      // PAGEABLE_MEMORY_ACCESS
        89 => 1,      // CONCURRENT_MANAGED_ACCESS
        90 => 1,      // COMPUTE_PREEMPTION_SUPPORTED
        91 => 1,      // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        95 => 1,      // COOPERATIVE_LAUNCH
        97 => 232448, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        99 => 1,      // HOST_REGISTER_SUPPORTED
        106 => 32,    // MAX_BLOCKS_PER_MULTIPROCESSOR
        111 => 1024,  // RESERVED_SHARED_MEMORY_PER_BLOCK
        108 => MAX_PERSISTING_L2 as c_int, // MAX_PERSISTING_L2_CACHE_SIZE
        115 => 1,     // MEMORY_POOLS_SUPPORTED
        a if a < 150 => 0,
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CuResult {
    entry("cuInit", || {
        if flags != 0 {
            return Err(cu::INVALID_VALUE);
        }
        context::init().map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    // SAFETY: the caller passes a writable int (or null, refused).
    entry("cuDriverGetVersion", || unsafe {
        put(version, DRIVER_VERSION)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    entry("cuDeviceGetCount", || {
        let d = context::driver()?;
        // SAFETY: a writable int.
        unsafe { put(count, d.devices.len() as c_int) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> CuResult {
    entry("cuDeviceGet", || {
        context::device(ordinal)?;
        // SAFETY: a writable CUdevice.
        unsafe { put(device, ordinal) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CuResult {
    entry("cuDeviceGetName", || {
        context::device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(cu::INVALID_VALUE);
        }
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller's buffer has `len` bytes; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            *name.add(n) = 0;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CuResult {
    entry("cuDeviceTotalMem_v2", || {
        context::device(dev)?;
        // SAFETY: a writable size_t.
        unsafe { put(bytes, crate::config::get().memory as usize) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_uint,
    dev: c_int,
) -> CuResult {
    entry("cuDeviceGetAttribute", || {
        context::device(dev)?;
        let v = attribute(attrib).ok_or(cu::INVALID_VALUE)?;
        // SAFETY: a writable int.
        unsafe { put(pi, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: c_int,
) -> CuResult {
    entry("cuDeviceComputeCapability", || {
        context::device(dev)?;
        // SAFETY: writable ints.
        unsafe {
            put(major, 9)?;
            put(minor, 0)
        }
    })
}

/// `CUuuid`.
#[repr(C)]
#[derive(Debug)]
pub struct CuUuid {
    bytes: [c_char; 16],
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CuUuid, dev: c_int) -> CuResult {
    entry("cuDeviceGetUuid", || {
        context::device(dev)?;
        let mut bytes = [0 as c_char; 16];
        for (i, b) in b"gkemu-device-".iter().enumerate() {
            bytes[i] = *b as c_char;
        }
        bytes[15] = dev as c_char;
        // SAFETY: a writable CUuuid.
        unsafe { put(uuid, CuUuid { bytes }) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CuUuid, dev: c_int) -> CuResult {
    // SAFETY: forwarded.
    unsafe { cuDeviceGetUuid(uuid, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c_uint, out: *mut *const c_char) -> CuResult {
    if out.is_null() {
        return cu::INVALID_VALUE;
    }
    match crate::errors::describe(error) {
        Some((name, _)) => {
            // SAFETY: a writable pointer.
            unsafe { *out = name.as_ptr() };
            cu::SUCCESS
        }
        None => {
            // SAFETY: a writable pointer.
            unsafe { *out = std::ptr::null() };
            cu::INVALID_VALUE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: c_uint, out: *mut *const c_char) -> CuResult {
    if out.is_null() {
        return cu::INVALID_VALUE;
    }
    match crate::errors::describe(error) {
        Some((_, text)) => {
            // SAFETY: a writable pointer.
            unsafe { *out = text.as_ptr() };
            cu::SUCCESS
        }
        None => {
            // SAFETY: a writable pointer.
            unsafe { *out = std::ptr::null() };
            cu::INVALID_VALUE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut u64, dev: c_int) -> CuResult {
    entry("cuDevicePrimaryCtxRetain", || {
        if pctx.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let d = context::device(dev)?;
        let h = context::retain_primary(d)?;
        // SAFETY: a writable CUcontext.
        unsafe { put(pctx, h) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CuResult {
    entry("cuDevicePrimaryCtxRelease_v2", || {
        context::release_primary(context::device(dev)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: c_int) -> CuResult {
    // SAFETY: forwarded.
    unsafe { cuDevicePrimaryCtxRelease_v2(dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CuResult {
    entry("cuDevicePrimaryCtxGetState", || {
        let (f, a) = context::primary_state(context::device(dev)?);
        // SAFETY: writable out-pointers.
        unsafe {
            put(flags, f)?;
            put(active, c_int::from(a))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: c_int, _flags: c_uint) -> CuResult {
    entry("cuDevicePrimaryCtxSetFlags_v2", || {
        context::device(dev).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut u64) -> CuResult {
    entry("cuCtxGetCurrent", || {
        context::driver()?;
        let h = context::current_handle().unwrap_or(0);
        // SAFETY: a writable CUcontext.
        unsafe { put(pctx, h) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: u64) -> CuResult {
    entry("cuCtxSetCurrent", || context::set_current(ctx))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: u64) -> CuResult {
    entry("cuCtxPushCurrent_v2", || context::push_current(ctx))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut u64) -> CuResult {
    entry("cuCtxPopCurrent_v2", || {
        let h = context::pop_current()?;
        if !pctx.is_null() {
            // SAFETY: a writable CUcontext.
            unsafe { *pctx = h };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut c_int) -> CuResult {
    entry("cuCtxGetDevice", || {
        let ctx = current()?;
        // SAFETY: a writable CUdevice.
        unsafe { put(dev, ctx.device as c_int) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut u64, _flags: c_uint, dev: c_int) -> CuResult {
    entry("cuCtxCreate_v2", || {
        if pctx.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let h = context::create(context::device(dev)?)?;
        // SAFETY: a writable CUcontext.
        unsafe { put(pctx, h) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: u64) -> CuResult {
    entry("cuCtxDestroy_v2", || context::destroy_created(ctx))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(_ctx: u64, version: *mut c_uint) -> CuResult {
    entry("cuCtxGetApiVersion", || {
        context::driver()?;
        // SAFETY: a writable unsigned int.
        unsafe { put(version, 3020) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CuResult {
    entry("cuCtxGetFlags", || {
        current()?;
        // SAFETY: a writable unsigned int.
        unsafe { put(flags, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CuResult {
    entry("cuCtxSynchronize", || {
        let ctx = current()?;
        let mut streams = ctx.live_streams();
        if let Some(l) = ctx.legacy.get() {
            streams.push(std::sync::Arc::clone(l));
        }
        if streams.iter().any(|s| s.capture().is_some()) {
            for s in &streams {
                crate::capture::invalidate_stream(s);
            }
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        crate::capture::check_unsafe_call()?;
        for s in &streams {
            let (seq, vc) = s.position();
            s.wait_for(seq);
            crate::hb::host_learns(&vc);
        }
        ctx.check()
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CuResult {
    entry("cuCtxGetStreamPriorityRange", || {
        current()?;
        // SAFETY: writable ints (either may be null, which the API allows).
        unsafe {
            if !least.is_null() {
                *least = 0;
            }
            if !greatest.is_null() {
                *greatest = -5;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_uint) -> CuResult {
    entry("cuCtxGetLimit", || {
        let ctx = current()?;
        let v = *ctx
            .limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(limit as usize)
            .ok_or(cu::INVALID_VALUE)?;
        // SAFETY: a writable size_t.
        unsafe { put(value, v) }
    })
}

/// `cuCtxGetCacheConfig`: the context's preference, `CU_FUNC_CACHE_PREFER_NONE` (0) until
/// set.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_uint) -> CuResult {
    entry("cuCtxGetCacheConfig", || {
        let ctx = current()?;
        let v = ctx.cache_config.load(std::sync::atomic::Ordering::Relaxed);
        // SAFETY: a writable CUfunc_cache.
        unsafe { put(config, v) }
    })
}

/// `cuCtxSetCacheConfig`: one of `CU_FUNC_CACHE_PREFER_NONE`, `_SHARED`, `_L1`, `_EQUAL`
/// (0 to 3), kept; anything else is `CUDA_ERROR_INVALID_VALUE`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: c_uint) -> CuResult {
    entry("cuCtxSetCacheConfig", || {
        let ctx = current()?;
        if config > 3 {
            return Err(cu::INVALID_VALUE);
        }
        ctx.cache_config
            .store(config, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_uint, value: usize) -> CuResult {
    entry("cuCtxSetLimit", || {
        let ctx = current()?;
        let value = match limit {
            // The stack, FIFO, heap and pending launches take any size.
            0..=2 | 4 => value,
            // "Attempting to set this limit on devices of compute capability 9.0 or higher
            // will result in the error CUDA_ERROR_UNSUPPORTED_LIMIT."
            3 => return Err(cu::UNSUPPORTED_LIMIT),
            // A hint of 0 to 128 bytes.
            5 if value <= 128 => value,
            // At most the device's persisting L2 (CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE).
            6 if value <= MAX_PERSISTING_L2 => value,
            5 | 6 => return Err(cu::INVALID_VALUE),
            // The CIG limits are read-only outside a CIG context.
            7..=9 => return Err(cu::UNSUPPORTED_LIMIT),
            _ => return Err(cu::INVALID_VALUE),
        };
        ctx.limits.lock().unwrap_or_else(|e| e.into_inner())[limit as usize] = value;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can: *mut c_int,
    dev: c_int,
    peer: c_int,
) -> CuResult {
    entry("cuDeviceCanAccessPeer", || {
        context::device(dev)?;
        context::device(peer)?;
        // SAFETY: a writable int.
        unsafe { put(can, c_int::from(dev != peer)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer: u64, flags: c_uint) -> CuResult {
    entry("cuCtxEnablePeerAccess", || {
        let ctx = current()?;
        let d = context::driver()?;
        if flags != 0 {
            return Err(cu::INVALID_VALUE);
        }
        let other = d.contexts.get(peer).ok_or(cu::INVALID_HANDLE)?;
        if other.device == ctx.device {
            return Err(cu::INVALID_DEVICE);
        }
        let mut peers = ctx.peers.lock().unwrap_or_else(|e| e.into_inner());
        if peers.contains(&peer) {
            return Err(cu::PEER_ACCESS_ALREADY_ENABLED);
        }
        peers.push(peer);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDisablePeerAccess(peer: u64) -> CuResult {
    entry("cuCtxDisablePeerAccess", || {
        let ctx = current()?;
        let mut peers = ctx.peers.lock().unwrap_or_else(|e| e.into_inner());
        let before = peers.len();
        peers.retain(|&p| p != peer);
        if peers.len() == before {
            return Err(cu::PEER_ACCESS_NOT_ENABLED);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CuResult {
    entry("cuThreadExchangeStreamCaptureMode", || {
        context::driver()?;
        if mode.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        // SAFETY: a readable and writable mode.
        unsafe {
            let old = crate::capture::exchange_thread_mode(*mode)?;
            *mode = old;
        }
        Ok(())
    })
}

/// `cuGetProcAddress` is not offered: callers fall back to the symbols themselves.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    _symbol: *const c_char,
    pfn: *mut *mut c_void,
    _version: c_int,
    _flags: u64,
    status: *mut c_int,
) -> CuResult {
    if !pfn.is_null() {
        // SAFETY: a writable pointer.
        unsafe { *pfn = std::ptr::null_mut() };
    }
    if !status.is_null() {
        // SAFETY: a writable int: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND.
        unsafe { *status = 1 };
    }
    cu::NOT_FOUND
}
