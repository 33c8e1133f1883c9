//! Memory management and copies
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>), and the emulator's
//! documented choices: device memory of `GPUKIT_CUDA_EMU_MEMORY` bytes, new memory filled
//! with 0xff, a copy's device range checked when it is queued.

use gpukit_cuda_emu::api::mem;

use crate::common::*;

fn mem_info() -> (usize, usize) {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: writable size_t's.
    ok(
        unsafe { mem::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo_v2",
    );
    (free, total)
}

/// `cuMemGetInfo`'s free memory drops by at least an allocation's size and comes back when
/// it is freed. In a child: other tests' allocations would move it meanwhile.
#[test]
fn get_info_free_drops_by_the_allocation_and_comes_back() {
    crate::in_child(
        module_path!(),
        "get_info_free_drops_by_the_allocation_and_comes_back",
        &[],
        || {
            use_device(0);
            let (free0, total0) = mem_info();
            assert!(total0 > 0 && free0 <= total0, "{free0} of {total0}");
            let size = 8 << 20;
            let p = alloc(size);
            let (free1, total1) = mem_info();
            assert_eq!(total1, total0, "the total does not change");
            assert!(
                free1 + size <= free0,
                "free went from {free0} to {free1} after allocating {size} bytes"
            );
            ok(free(p), "cuMemFree_v2");
            let (free2, _) = mem_info();
            assert_eq!(free2, free0, "the freed memory is free again");
        },
    );
}

/// A device has `GPUKIT_CUDA_EMU_MEMORY` bytes: more is `CUDA_ERROR_OUT_OF_MEMORY`, and
/// memory freed can be allocated again.
#[test]
fn allocation_beyond_device_memory_is_out_of_memory() {
    crate::in_child(
        module_path!(),
        "allocation_beyond_device_memory_is_out_of_memory",
        &[("GPUKIT_CUDA_EMU_MEMORY", "64M")],
        || {
            use_device(0);
            let (_, total) = mem_info();
            assert_eq!(total, 64 << 20, "cuMemGetInfo's total is the setting");
            let mut dev_total = 0usize;
            // SAFETY: a writable size_t.
            ok(
                unsafe { gpukit_cuda_emu::api::driver::cuDeviceTotalMem_v2(&mut dev_total, 0) },
                "cuDeviceTotalMem_v2",
            );
            assert_eq!(dev_total, 64 << 20, "cuDeviceTotalMem is the setting too");
            assert_eq!(
                try_alloc(65 << 20).err(),
                Some(OUT_OF_MEMORY),
                "one allocation larger than the device"
            );
            let a = alloc(40 << 20);
            assert_eq!(
                try_alloc(40 << 20).err(),
                Some(OUT_OF_MEMORY),
                "a second 40 MiB on a 64 MiB device"
            );
            // Smaller ones still fit.
            let b = alloc(1 << 20);
            ok(free(a), "cuMemFree_v2");
            let c = alloc(40 << 20);
            ok(free(b), "cuMemFree_v2");
            ok(free(c), "cuMemFree_v2");
        },
    );
}

/// `cuMemAlloc` of 0 bytes, freeing twice and freeing a pointer inside an allocation are
/// `CUDA_ERROR_INVALID_VALUE` (`cuMemFree` takes what `cuMemAlloc` returned).
#[test]
fn zero_size_double_free_and_interior_free_are_invalid_value() {
    use_device(0);
    assert_eq!(try_alloc(0).err(), Some(INVALID_VALUE), "cuMemAlloc_v2(0)");
    let p = alloc(4096);
    // "The allocated memory is suitably aligned for any kind of variable."
    assert_eq!(
        p % 256,
        0,
        "cuMemAlloc_v2's pointer 0x{p:x} is 256-byte aligned"
    );
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: writable out-pointers.
    ok(
        unsafe { mem::cuMemGetAddressRange_v2(&mut base, &mut size, p + 100) },
        "cuMemGetAddressRange_v2 of an interior pointer",
    );
    assert_eq!((base, size), (p, 4096), "the allocation holding p + 100");
    expect(
        free(p + 16),
        INVALID_VALUE,
        "cuMemFree_v2 of an interior pointer",
    );
    ok(free(p), "cuMemFree_v2");
    expect(free(p), INVALID_VALUE, "cuMemFree_v2 twice");
    ok(free(0), "cuMemFree_v2(0) frees nothing");
}

/// Bytes go to the device and come back unchanged through every kind of copy.
#[test]
fn copies_round_trip_bytes() {
    use_device(0);
    let n = 10_000usize;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 256) as u8).collect();
    let a = upload(&data);
    assert_eq!(dtoh::<u8>(a, n), data, "HtoD then DtoH");
    // DtoD (synchronous form; it does not wait, the DtoH after it on the same stream does).
    let b = alloc(n);
    // SAFETY: no host pointers.
    ok(unsafe { mem::cuMemcpyDtoD_v2(b, a, n) }, "cuMemcpyDtoD_v2");
    assert_eq!(dtoh::<u8>(b, n), data, "DtoD");
    // Asynchronous copies on a stream: pageable HtoD is staged, pageable DtoH waits.
    let s = stream(0);
    let c = alloc(n);
    // SAFETY: no host pointers.
    ok(
        unsafe { mem::cuMemcpyDtoDAsync_v2(c + 100, a, n - 100, s) },
        "cuMemcpyDtoDAsync_v2",
    );
    let mut patch = [0xabu8; 100];
    // SAFETY: `patch` holds 100 bytes; a pageable source is staged before the call returns.
    ok(
        unsafe { mem::cuMemcpyHtoDAsync_v2(c, patch.as_ptr().cast(), 100, s) },
        "cuMemcpyHtoDAsync_v2",
    );
    // "For transfers from pageable host memory to device memory, host memory is copied to a
    // staging buffer immediately" (api-sync-behavior, Asynchronous): the buffer may be
    // reused at once, and the device gets the bytes it held at the call.
    patch.fill(0);
    let mut back = vec![0u8; n];
    // SAFETY: `back` has room for n bytes; a copy to pageable memory returns once done.
    ok(
        unsafe { mem::cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), c, n, s) },
        "cuMemcpyDtoHAsync_v2",
    );
    // "For transfers from device memory to pageable host memory, the function will return
    // only once the copy has completed": the bytes are there before any synchronisation.
    let mut want = vec![0xabu8; 100];
    want.extend_from_slice(&data[..n - 100]);
    assert_eq!(
        back, want,
        "DtoD at an offset, then HtoD, then DtoH to pageable memory, in stream order, done when the DtoH returns"
    );
    ok(sync(s), "cuStreamSynchronize");
    for p in [a, b, c] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// A copy whose device range does not lie in one live allocation is
/// `CUDA_ERROR_INVALID_VALUE` when it is queued (the emulator's documented check), and
/// nothing breaks: the next copy works.
#[test]
fn copy_past_the_end_of_an_allocation_is_invalid_value_when_queued() {
    use_device(0);
    let s = stream(0);
    let p = alloc(1000);
    let host = [1u8; 64];
    let mut sink = [0u8; 64];
    // SAFETY: `host` holds 64 readable bytes (staged at the call).
    expect(
        unsafe { mem::cuMemcpyHtoDAsync_v2(p + 990, host.as_ptr().cast(), 11, s) },
        INVALID_VALUE,
        "HtoD of 11 bytes at offset 990 of 1000",
    );
    // SAFETY: `sink` has room for 64 bytes.
    expect(
        unsafe { mem::cuMemcpyDtoHAsync_v2(sink.as_mut_ptr().cast(), p + 999, 2, s) },
        INVALID_VALUE,
        "DtoH of 2 bytes at offset 999 of 1000",
    );
    let q = alloc(1000);
    // SAFETY: no host pointers.
    expect(
        unsafe { mem::cuMemcpyDtoDAsync_v2(q, p + 1, 1000, s) },
        INVALID_VALUE,
        "DtoD from offset 1 of 1000 bytes",
    );
    ok(free(q), "cuMemFree_v2");
    // SAFETY: `host` holds 64 readable bytes.
    expect(
        unsafe { mem::cuMemcpyHtoDAsync_v2(q, host.as_ptr().cast(), 8, s) },
        INVALID_VALUE,
        "HtoD into freed memory",
    );
    // The exact last bytes are fine, and the stream still works.
    // SAFETY: as above.
    ok(
        unsafe { mem::cuMemcpyHtoDAsync_v2(p + 990, host.as_ptr().cast(), 10, s) },
        "HtoD of the last 10 bytes",
    );
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(dtoh::<u8>(p + 990, 10), vec![1u8; 10]);
    ok(free(p), "cuMemFree_v2");
}

/// `cuMemHostRegister` of a range overlapping a registered one is
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`; `cuMemHostUnregister` of a pointer that
/// starts no registration is `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.
#[test]
fn host_registration_overlap_and_unknown_unregister() {
    use_device(0);
    let buf = vec![0u8; 16384];
    let other = [0u8; 64];
    let base = buf.as_ptr().cast_mut().cast::<std::ffi::c_void>();
    // SAFETY: `buf` holds 16384 bytes and outlives its registration (unregistered below).
    unsafe {
        ok(
            mem::cuMemHostRegister_v2(base, 8192, 0),
            "cuMemHostRegister_v2",
        );
        expect(
            mem::cuMemHostRegister_v2(base.add(4096), 8192, 0),
            HOST_MEMORY_ALREADY_REGISTERED,
            "registering a range overlapping a registered one",
        );
        expect(
            mem::cuMemHostRegister_v2(base, 16, 0),
            HOST_MEMORY_ALREADY_REGISTERED,
            "registering the same start again",
        );
        // Right after the registered range: no overlap.
        ok(
            mem::cuMemHostRegister_v2(base.add(8192), 4096, 0),
            "registering the adjacent range",
        );
        expect(
            mem::cuMemHostUnregister(base.add(1)),
            HOST_MEMORY_NOT_REGISTERED,
            "unregistering a pointer inside a registration",
        );
        expect(
            mem::cuMemHostUnregister(other.as_ptr().cast_mut().cast()),
            HOST_MEMORY_NOT_REGISTERED,
            "unregistering memory never registered",
        );
        ok(mem::cuMemHostUnregister(base), "cuMemHostUnregister");
        ok(
            mem::cuMemHostUnregister(base.add(8192)),
            "cuMemHostUnregister of the adjacent range",
        );
        expect(
            mem::cuMemHostUnregister(base),
            HOST_MEMORY_NOT_REGISTERED,
            "unregistering twice",
        );
    }
    drop(buf);
}

/// New device memory holds 0xff (`GPUKIT_CUDA_EMU_FILL`'s default), not zeros: read back
/// before anything wrote it.
#[test]
fn new_device_memory_is_filled_with_0xff() {
    use_device(0);
    for size in [1usize, 4096, 100_000] {
        let p = alloc(size);
        let bytes = dtoh::<u8>(p, size);
        assert!(
            bytes.iter().all(|&b| b == 0xff),
            "a new allocation of {size} bytes holds {:?}...",
            &bytes[..bytes.len().min(16)]
        );
        ok(free(p), "cuMemFree_v2");
    }
}

/// Copies from pinned memory run while another thread allocates and frees pinned memory,
/// and nothing deadlocks: a copy that read-locked the allocation table twice (its second
/// lookup queued behind the other thread's allocation, which waited for the first) hung
/// the stream and the allocating thread for good (within these five seconds here, and
/// once in a CI run of the gpukit suite). Five seconds of both, then a deadline.
#[test]
fn pinned_copies_beside_pinned_allocations_never_deadlock() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<&'static str>();
    let copier = {
        let (stop, tx) = (Arc::clone(&stop), tx.clone());
        std::thread::spawn(move || {
            use_device(0);
            let n = 64usize;
            let dst = alloc(n);
            let mut src: *mut std::ffi::c_void = std::ptr::null_mut();
            // SAFETY: a writable out-pointer.
            ok(
                unsafe { mem::cuMemHostAlloc(&mut src, n, 0) },
                "cuMemHostAlloc",
            );
            let s = stream(0);
            let mut copies = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    // SAFETY: `src` is pinned memory of `n` bytes, alive until freed below,
                    // after the stream's last copy.
                    ok(
                        unsafe { mem::cuMemcpyHtoDAsync_v2(dst, src, n, s) },
                        "cuMemcpyHtoDAsync_v2",
                    );
                }
                ok(sync(s), "cuStreamSynchronize");
                copies += 64;
            }
            // SAFETY: the stream is synchronised: no copy reads `src` any more.
            ok(unsafe { mem::cuMemFreeHost(src) }, "cuMemFreeHost");
            ok(free(dst), "cuMemFree_v2");
            assert!(copies > 0);
            let _ = tx.send("copier");
        })
    };
    let allocator = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            use_device(0);
            while !stop.load(Ordering::Relaxed) {
                let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
                // SAFETY: a writable out-pointer; the memory is freed at once, unused.
                ok(
                    unsafe { mem::cuMemHostAlloc(&mut p, 4096, 0) },
                    "cuMemHostAlloc",
                );
                // SAFETY: as above.
                ok(unsafe { mem::cuMemFreeHost(p) }, "cuMemFreeHost");
            }
            let _ = tx.send("allocator");
        })
    };
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            rx.recv_timeout(left).is_ok(),
            "a thread still runs 30 s after the stop: a pinned copy and a pinned allocation deadlocked"
        );
    }
    copier.join().expect("the copier");
    allocator.join().expect("the allocator");
}

/// `cuStreamAttachMemAsync` takes managed memory with a length of 0 or the whole
/// allocation and one of CU_MEM_ATTACH_GLOBAL, _HOST or _SINGLE (not _SINGLE on the legacy
/// default stream); anything else is `CUDA_ERROR_INVALID_VALUE`. The attachment is queued
/// in stream order and the memory works on.
#[test]
fn stream_attach_mem_takes_managed_memory_only() {
    use gpukit_cuda_emu::api::stream as st;
    use_device(0);
    let n = 256usize;
    let mut managed = 0u64;
    // SAFETY: a writable CUdeviceptr; CU_MEM_ATTACH_GLOBAL.
    ok(
        unsafe { mem::cuMemAllocManaged(&mut managed, n, 1) },
        "cuMemAllocManaged",
    );
    let device = alloc(n);
    let s = stream(0);
    let attach = |p: u64, len: usize, flags: u32, on: u64| {
        // SAFETY: no host pointers.
        unsafe { mem::cuStreamAttachMemAsync(on, p, len, flags) }
    };
    ok(attach(managed, 0, 4, s), "CU_MEM_ATTACH_SINGLE, length 0");
    ok(
        attach(managed, n, 2, s),
        "CU_MEM_ATTACH_HOST, the whole allocation",
    );
    ok(
        attach(managed, 0, 1, 0),
        "CU_MEM_ATTACH_GLOBAL on the legacy stream",
    );
    expect(
        attach(managed, 0, 4, 0),
        INVALID_VALUE,
        "_SINGLE on the legacy stream",
    );
    expect(
        attach(managed, n / 2, 1, s),
        INVALID_VALUE,
        "part of the allocation",
    );
    expect(attach(managed, 0, 3, s), INVALID_VALUE, "two flags");
    expect(attach(device, 0, 1, s), INVALID_VALUE, "device memory");
    ok(
        memset32(managed, 7, n / 4),
        "cuMemsetD32 of the managed memory",
    );
    ok(sync(s), "cuStreamSynchronize");
    // SAFETY: the stream is synchronised; no copy uses the stream any more.
    ok(unsafe { st::cuStreamDestroy_v2(s) }, "cuStreamDestroy_v2");
    assert_eq!(dtoh::<u32>(managed, n / 4), vec![7; n / 4]);
    ok(free(managed), "cuMemFree_v2 (managed)");
    ok(free(device), "cuMemFree_v2");
}
