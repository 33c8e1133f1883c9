//! Initialisation, devices, error names and contexts
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html>,
//! `group__CUDA__DEVICE`, `group__CUDA__PRIMARY__CTX`, `group__CUDA__CTX`,
//! `group__CUDA__ERROR`).

use std::ffi::{c_char, c_int, CStr};

use gpukit_cuda_emu::api::driver as drv;

use crate::common::*;

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`.
const CC_MAJOR: u32 = 75;
const CC_MINOR: u32 = 76;

fn device_count() -> (u32, c_int) {
    let mut n: c_int = -1;
    // SAFETY: a writable int.
    let r = unsafe { drv::cuDeviceGetCount(&mut n) };
    (r, n)
}

fn current_ctx() -> u64 {
    let mut c = u64::MAX;
    // SAFETY: a writable CUcontext.
    ok(unsafe { drv::cuCtxGetCurrent(&mut c) }, "cuCtxGetCurrent");
    c
}

/// Before `cuInit` every call but the version and error-string ones is
/// `CUDA_ERROR_NOT_INITIALIZED` ("If cuInit() has not been called, any function from the
/// driver API will return CUDA_ERROR_NOT_INITIALIZED"); after it, the devices, their names,
/// attributes and primary contexts are as the emulator documents them (2 H100-like
/// devices, compute capability 9.0), an ordinal past the last device is
/// `CUDA_ERROR_INVALID_DEVICE`, and an allocation without a current context is
/// `CUDA_ERROR_INVALID_CONTEXT`.
#[test]
fn init_devices_error_names_and_primary_contexts() {
    crate::in_child(
        module_path!(),
        "init_devices_error_names_and_primary_contexts",
        &[],
        || {
            crate::setup();
            // Before cuInit.
            let (r, _) = device_count();
            expect(r, NOT_INITIALIZED, "cuDeviceGetCount before cuInit");
            assert_eq!(
                try_alloc(256).err(),
                Some(NOT_INITIALIZED),
                "cuMemAlloc_v2 before cuInit"
            );
            let mut version: c_int = 0;
            // SAFETY: a writable int.
            ok(
                unsafe { drv::cuDriverGetVersion(&mut version) },
                "cuDriverGetVersion before cuInit",
            );
            assert!(
                version >= 12000,
                "the driver reports CUDA 12 or later (1000 * major + 10 * minor): {version}"
            );
            // cuGetErrorName needs no cuInit either.
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: a writable pointer.
            ok(
                unsafe { drv::cuGetErrorName(ILLEGAL_ADDRESS, &mut p) },
                "cuGetErrorName(700)",
            );
            // SAFETY: cuGetErrorName succeeded: a static NUL-terminated name.
            let n = unsafe { CStr::from_ptr(p) }.to_str().expect("ASCII");
            assert_eq!(n, "CUDA_ERROR_ILLEGAL_ADDRESS");
            // A code the driver does not know: CUDA_ERROR_INVALID_VALUE.
            // SAFETY: a writable pointer.
            expect(
                unsafe { drv::cuGetErrorName(123_456, &mut p) },
                INVALID_VALUE,
                "cuGetErrorName of an unknown code",
            );

            // SAFETY: no pointers.
            ok(unsafe { drv::cuInit(0) }, "cuInit(0)");
            let (r, n) = device_count();
            ok(r, "cuDeviceGetCount");
            assert_eq!(n, 2, "the default is 2 devices");
            for ordinal in 0..n {
                let mut dev: c_int = -1;
                // SAFETY: a writable CUdevice.
                ok(
                    unsafe { drv::cuDeviceGet(&mut dev, ordinal) },
                    "cuDeviceGet",
                );
                assert_eq!(dev, ordinal);
                let mut buf = [0 as c_char; 256];
                // SAFETY: a 256-byte buffer.
                ok(
                    unsafe { drv::cuDeviceGetName(buf.as_mut_ptr(), 256, dev) },
                    "cuDeviceGetName",
                );
                // SAFETY: NUL-terminated by cuDeviceGetName, inside the buffer.
                let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
                assert!(
                    name.contains("CUDA emulator"),
                    "device {dev} is named {name:?}"
                );
                let (mut major, mut minor): (c_int, c_int) = (-1, -1);
                // SAFETY: writable ints.
                ok(
                    unsafe { drv::cuDeviceGetAttribute(&mut major, CC_MAJOR, dev) },
                    "cuDeviceGetAttribute(MAJOR)",
                );
                // SAFETY: writable ints.
                ok(
                    unsafe { drv::cuDeviceGetAttribute(&mut minor, CC_MINOR, dev) },
                    "cuDeviceGetAttribute(MINOR)",
                );
                assert_eq!((major, minor), (9, 0), "compute capability of device {dev}");
            }
            let mut dev: c_int = -1;
            // SAFETY: a writable CUdevice.
            expect(
                unsafe { drv::cuDeviceGet(&mut dev, 2) },
                INVALID_DEVICE,
                "cuDeviceGet(2) with 2 devices",
            );
            // SAFETY: a writable CUdevice.
            expect(
                unsafe { drv::cuDeviceGet(&mut dev, -1) },
                INVALID_DEVICE,
                "cuDeviceGet(-1)",
            );

            // No context is current on a fresh thread: allocations need one.
            assert_eq!(current_ctx(), 0, "no context is current before one is set");
            assert_eq!(
                try_alloc(256).err(),
                Some(INVALID_CONTEXT),
                "cuMemAlloc_v2 without a current context"
            );

            // Primary contexts: one per device, the same handle on every retain.
            let (mut c0, mut c0_again, mut c1) = (0u64, 0u64, 0u64);
            // SAFETY: writable CUcontexts.
            unsafe {
                ok(drv::cuDevicePrimaryCtxRetain(&mut c0, 0), "retain 0");
                ok(
                    drv::cuDevicePrimaryCtxRetain(&mut c0_again, 0),
                    "retain 0 again",
                );
                ok(drv::cuDevicePrimaryCtxRetain(&mut c1, 1), "retain 1");
            }
            assert_ne!(c0, 0);
            assert_eq!(c0, c0_again, "a device has one primary context");
            assert_ne!(c0, c1, "each device its own primary context");
            let mut active: c_int = 0;
            let mut flags: u32 = 99;
            // SAFETY: writable out-pointers.
            ok(
                unsafe { drv::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active) },
                "cuDevicePrimaryCtxGetState",
            );
            assert_eq!(active, 1, "a retained primary context is active");

            // SAFETY: no pointers.
            ok(unsafe { drv::cuCtxSetCurrent(c1) }, "cuCtxSetCurrent(c1)");
            assert_eq!(current_ctx(), c1);
            let mut d: c_int = -1;
            // SAFETY: a writable CUdevice.
            ok(unsafe { drv::cuCtxGetDevice(&mut d) }, "cuCtxGetDevice");
            assert_eq!(d, 1, "the current context is device 1's");
            // The current context is the calling thread's: another thread has none.
            let other = std::thread::spawn(|| (current_ctx(), try_alloc(16).err()))
                .join()
                .expect("thread");
            assert_eq!(
                other,
                (0, Some(INVALID_CONTEXT)),
                "a new thread has no current context"
            );

            // SAFETY: no pointers.
            ok(unsafe { drv::cuCtxSetCurrent(c0) }, "cuCtxSetCurrent(c0)");
            assert_eq!(current_ctx(), c0);
            // SAFETY: a writable CUdevice.
            ok(unsafe { drv::cuCtxGetDevice(&mut d) }, "cuCtxGetDevice");
            assert_eq!(d, 0);
            let p = alloc(256);
            ok(free(p), "cuMemFree_v2");
            // SAFETY: no pointers.
            expect(
                unsafe { drv::cuCtxSetCurrent(0xdead_beef) },
                INVALID_CONTEXT,
                "cuCtxSetCurrent of a handle that is no context",
            );
        },
    );
}

/// Context limits (`cuCtxGetLimit`, `cuCtxSetLimit`): every `CUlimit` reads, at its default
/// where the documentation gives one; a set value reads back; the device runtime's sync
/// depth cannot be set on compute capability 9.0 (`CUDA_ERROR_UNSUPPORTED_LIMIT`); out of
/// range values and limits are `CUDA_ERROR_INVALID_VALUE`. The L1/shared preference reads
/// back too. Device 1's context: no other test sets either there.
#[test]
fn context_limits_read_defaults_and_keep_what_is_set() {
    use_device(1);
    let get = |limit: u32| {
        let mut v = usize::MAX;
        // SAFETY: a writable size_t.
        let r = unsafe { drv::cuCtxGetLimit(&mut v, limit) };
        (r, v)
    };
    let set = |limit: u32, v: usize| {
        // SAFETY: no pointers.
        unsafe { drv::cuCtxSetLimit(limit, v) }
    };
    // CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH and _PENDING_LAUNCH_COUNT: 2 and 2048 by default.
    assert_eq!(get(3), (SUCCESS, 2));
    assert_eq!(get(4), (SUCCESS, 2048));
    for limit in 0..10 {
        assert_eq!(get(limit).0, SUCCESS, "cuCtxGetLimit({limit})");
    }
    expect(
        get(10).0,
        INVALID_VALUE,
        "cuCtxGetLimit of an unknown limit",
    );
    let stack = get(0).1;
    ok(set(0, stack * 2), "cuCtxSetLimit(CU_LIMIT_STACK_SIZE)");
    assert_eq!(get(0), (SUCCESS, stack * 2), "the stack size set");
    ok(set(0, stack), "cuCtxSetLimit(CU_LIMIT_STACK_SIZE) back");
    expect(set(3, 4), UNSUPPORTED_LIMIT, "the sync depth on sm_90");
    expect(
        set(5, 256),
        INVALID_VALUE,
        "an L2 fetch granularity over 128",
    );
    expect(
        set(10, 1),
        INVALID_VALUE,
        "cuCtxSetLimit of an unknown limit",
    );
    // The cache preference: none until set, then what was set; 4 is no CUfunc_cache.
    let cache = || {
        let mut c = u32::MAX;
        // SAFETY: a writable CUfunc_cache.
        ok(
            unsafe { drv::cuCtxGetCacheConfig(&mut c) },
            "cuCtxGetCacheConfig",
        );
        c
    };
    assert_eq!(cache(), 0, "CU_FUNC_CACHE_PREFER_NONE");
    // SAFETY: no pointers.
    ok(
        unsafe { drv::cuCtxSetCacheConfig(2) },
        "cuCtxSetCacheConfig(PREFER_L1)",
    );
    assert_eq!(cache(), 2);
    // SAFETY: no pointers.
    expect(
        unsafe { drv::cuCtxSetCacheConfig(4) },
        INVALID_VALUE,
        "cuCtxSetCacheConfig(4)",
    );
    // SAFETY: no pointers.
    ok(
        unsafe { drv::cuCtxSetCacheConfig(0) },
        "cuCtxSetCacheConfig back",
    );
}
