//! Streams, events and host functions
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>,
//! `group__CUDA__EVENT`, <https://docs.nvidia.com/cuda/cuda-runtime-api/stream-sync-behavior.html>),
//! as the emulator states them in `src/stream.rs`. Tests that depend on timing or on every
//! stream of the context (the legacy default stream) run in a child process.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use gpukit_cuda_emu::api::mem;
use gpukit_cuda_emu::api::stream as st;

use crate::common::*;

fn spin_fn() -> u64 {
    function(module(SPIN_SRC, "emu_spin"), "spin")
}

/// `cuStreamQuery` is `CUDA_ERROR_NOT_READY` while a kernel (spinning ~20 ms on the device
/// timer) is queued or running, and `CUDA_SUCCESS` once `cuStreamSynchronize` returned.
#[test]
fn query_is_not_ready_until_the_spinning_kernel_is_done() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "query_is_not_ready_until_the_spinning_kernel_is_done",
        &[],
        || {
            use_device(0);
            let f = spin_fn();
            let s = stream(0);
            let flag = upload(&[0i32]);
            spin(f, s, 20, flag, 1);
            expect(
                query(s),
                NOT_READY,
                "cuStreamQuery right after queueing the spin",
            );
            ok(sync(s), "cuStreamSynchronize");
            ok(query(s), "cuStreamQuery after cuStreamSynchronize");
            assert_eq!(dtoh::<i32>(flag, 1), vec![1], "the kernel ran to its end");
        },
    );
}

/// A host read of pinned memory right after queueing an asynchronous device-to-host copy
/// into it, before any synchronisation, sees the old bytes; after `cuStreamSynchronize`,
/// the copied ones. On a GPU that holds because the copy has not run yet; here it holds
/// because of the emulator's documented delay (`src/stream.rs`: "Queued work waits
/// `GPUKIT_CUDA_EMU_DELAY_US` before it starts unless something waits for it ..., so that
/// a host that reads results before synchronising sees stale data"), set to 2 s for this
/// child: the read below happens within that of the call's return even on a loaded
/// 2-core machine that preempts the test (the default 200 µs did not always hold there),
/// and nothing waits for the copy before it. (Copies to pinned memory are fully
/// asynchronous: api-sync-behavior.)
#[test]
fn pinned_memory_holds_old_bytes_until_the_async_copy_is_synchronised() {
    crate::in_child(
        module_path!(),
        "pinned_memory_holds_old_bytes_until_the_async_copy_is_synchronised",
        &[("GPUKIT_CUDA_EMU_DELAY_US", "2000000")],
        || {
            use_device(0);
            let n = 4096usize;
            let dev = upload(&vec![0x11u8; n]);
            let mut host: *mut c_void = std::ptr::null_mut();
            // SAFETY: a writable pointer.
            ok(
                unsafe { mem::cuMemHostAlloc(&mut host, n, 0) },
                "cuMemHostAlloc",
            );
            let host = host.cast::<u8>();
            // SAFETY: `host` is n bytes of pinned memory, ours alone until the copy below.
            unsafe { std::ptr::write_bytes(host, 0x22, n) };
            let s = stream(0);
            // SAFETY: `host` has room for n bytes and stays allocated until after the sync.
            ok(
                unsafe { mem::cuMemcpyDtoHAsync_v2(host.cast(), dev, n, s) },
                "cuMemcpyDtoHAsync_v2 into pinned memory",
            );
            // SAFETY: n readable bytes; read volatile, as memory a copy engine may write.
            let before: Vec<u8> = (0..n)
                .map(|i| unsafe { std::ptr::read_volatile(host.add(i)) })
                .collect();
            ok(sync(s), "cuStreamSynchronize");
            // SAFETY: n readable bytes; the copy is done.
            let after: Vec<u8> = (0..n).map(|i| unsafe { *host.add(i) }).collect();
            assert!(
                before.iter().all(|&b| b == 0x22),
                "before the sync the pinned buffer still holds the old bytes"
            );
            assert!(
                after.iter().all(|&b| b == 0x11),
                "after the sync it holds the device's bytes"
            );
            // SAFETY: allocated by cuMemHostAlloc, no longer used.
            ok(unsafe { mem::cuMemFreeHost(host.cast()) }, "cuMemFreeHost");
        },
    );
}

fn elapsed(a: u64, b: u64) -> Result<f32, u32> {
    let mut ms = f32::NAN;
    // SAFETY: a writable float.
    match unsafe { st::cuEventElapsedTime(&mut ms, a, b) } {
        SUCCESS => Ok(ms),
        e => Err(e),
    }
}

fn event_query(e: u64) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuEventQuery(e) }
}

/// Events: the time between records around a ~20 ms spin is at least 15 ms; an event
/// never recorded queries as `CUDA_SUCCESS`; `cuEventElapsedTime` is
/// `CUDA_ERROR_NOT_READY` while a record is pending and `CUDA_ERROR_INVALID_HANDLE` for an
/// event made with `CU_EVENT_DISABLE_TIMING` or never recorded.
#[test]
fn events_time_a_spin_and_follow_the_documented_rules() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "events_time_a_spin_and_follow_the_documented_rules",
        &[],
        || {
            use_device(0);
            let f = spin_fn();
            let s = stream(0);
            let (start, end, never) = (event(0), event(0), event(0));
            let untimed = event(2); // CU_EVENT_DISABLE_TIMING
            ok(
                event_query(never),
                "cuEventQuery of an event never recorded",
            );
            // SAFETY: no pointers.
            ok(
                unsafe { st::cuEventSynchronize(never) },
                "cuEventSynchronize of an event never recorded",
            );
            assert_eq!(
                elapsed(never, never).err(),
                Some(INVALID_HANDLE),
                "elapsed time of events never recorded"
            );
            ok(record(start, s), "cuEventRecord(start)");
            spin(f, s, 20, 0, 0);
            ok(record(end, s), "cuEventRecord(end)");
            ok(record(untimed, s), "cuEventRecord(untimed)");
            expect(
                event_query(end),
                NOT_READY,
                "cuEventQuery while the spin runs",
            );
            assert_eq!(
                elapsed(start, end).err(),
                Some(NOT_READY),
                "elapsed time while the end record is pending"
            );
            ok(sync(s), "cuStreamSynchronize");
            ok(event_query(end), "cuEventQuery after the sync");
            let ms = elapsed(start, end).expect("cuEventElapsedTime");
            assert!(
                (15.0..10_000.0).contains(&ms),
                "{ms} ms between records around a 20 ms spin"
            );
            assert_eq!(
                elapsed(start, untimed).err(),
                Some(INVALID_HANDLE),
                "elapsed time to an event with timing disabled"
            );
            assert_eq!(
                elapsed(untimed, end).err(),
                Some(INVALID_HANDLE),
                "elapsed time from an event with timing disabled"
            );
        },
    );
}

/// `cuStreamWaitEvent` makes a consumer stream's later work wait for a producer's record:
/// the producer spins 30 ms and then writes 42; the consumer, told to wait for the event
/// recorded after that write, copies the value out and sees 42 (without the wait it would
/// copy the 0xff fill long before the spin ends).
#[test]
fn wait_event_orders_a_consumer_after_a_producer() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "wait_event_orders_a_consumer_after_a_producer",
        &[],
        || {
            use_device(0);
            let f = spin_fn();
            let producer = stream(NON_BLOCKING);
            let consumer = stream(NON_BLOCKING);
            let buf = alloc(4);
            let out = alloc(4);
            let e = event(0);
            spin(f, producer, 30, buf, 42);
            ok(record(e, producer), "cuEventRecord on the producer");
            ok(wait_event(consumer, e), "cuStreamWaitEvent on the consumer");
            // SAFETY: no host pointers.
            ok(
                unsafe { mem::cuMemcpyDtoDAsync_v2(out, buf, 4, consumer) },
                "cuMemcpyDtoDAsync_v2 on the consumer",
            );
            let mut got = [0i32; 1];
            // SAFETY: 4 writable bytes; a copy to pageable memory returns once done.
            ok(
                unsafe { mem::cuMemcpyDtoHAsync_v2(got.as_mut_ptr().cast(), out, 4, consumer) },
                "cuMemcpyDtoHAsync_v2 on the consumer",
            );
            ok(sync(consumer), "cuStreamSynchronize(consumer)");
            assert_eq!(got[0], 42, "the consumer read the producer's result");
            ok(sync(producer), "cuStreamSynchronize(producer)");
        },
    );
}

/// A destroyed stream's handle is `CUDA_ERROR_INVALID_HANDLE` everywhere.
#[test]
fn destroyed_stream_handle_is_invalid_handle() {
    use_device(0);
    let s = stream(0);
    let p = alloc(16);
    let e = event(0);
    ok(record(e, s), "cuEventRecord on the live stream");
    // SAFETY: no pointers.
    ok(unsafe { st::cuStreamDestroy_v2(s) }, "cuStreamDestroy_v2");
    expect(query(s), INVALID_HANDLE, "cuStreamQuery");
    expect(sync(s), INVALID_HANDLE, "cuStreamSynchronize");
    expect(record(e, s), INVALID_HANDLE, "cuEventRecord");
    let bytes = [0u8; 16];
    // SAFETY: 16 readable bytes.
    expect(
        unsafe { mem::cuMemcpyHtoDAsync_v2(p, bytes.as_ptr().cast(), 16, s) },
        INVALID_HANDLE,
        "cuMemcpyHtoDAsync_v2",
    );
    // SAFETY: no pointers.
    expect(
        unsafe { st::cuStreamDestroy_v2(s) },
        INVALID_HANDLE,
        "cuStreamDestroy_v2 twice",
    );
    ok(free(p), "cuMemFree_v2");
}

/// `cuStreamDestroy` of a stream with work still queued returns at once, and the work
/// still runs ("the function will return immediately and the resources associated with
/// hStream will be released automatically once the device has completed all work in
/// hStream"): a spin then a write, queued before the destroy, is done after
/// `cuCtxSynchronize`.
#[test]
fn destroyed_stream_still_runs_its_queued_work() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "destroyed_stream_still_runs_its_queued_work",
        &[],
        || {
            use_device(0);
            let f = spin_fn();
            let s = stream(NON_BLOCKING);
            let flag = upload(&[0i32]);
            spin(f, s, 50, flag, 5);
            // SAFETY: no pointers.
            ok(
                unsafe { st::cuStreamDestroy_v2(s) },
                "cuStreamDestroy_v2 with work queued",
            );
            expect(query(s), INVALID_HANDLE, "the handle is dead at once");
            ok(ctx_sync(), "cuCtxSynchronize");
            assert_eq!(dtoh::<i32>(flag, 1), vec![5], "the queued work ran");
        },
    );
}

/// What a host function saw.
#[derive(Debug, Default)]
struct Seen {
    ran: AtomicBool,
    query: AtomicU32,
    alloc: AtomicU32,
}

/// A host function that calls CUDA, recording the answers through its `userData`.
///
/// # Safety
///
/// `data` points at a [`Seen`] that outlives the call.
unsafe extern "C" fn calls_cuda(data: *mut c_void) {
    // SAFETY: `data` is the `Seen` the test passed, alive until the stream is synchronised.
    let seen = unsafe { &*data.cast::<Seen>() };
    // SAFETY: no pointers.
    seen.query
        .store(unsafe { st::cuStreamQuery(0) }, Ordering::SeqCst);
    let mut p = 0u64;
    // SAFETY: a writable CUdeviceptr.
    seen.alloc
        .store(unsafe { mem::cuMemAlloc_v2(&mut p, 16) }, Ordering::SeqCst);
    seen.ran.store(true, Ordering::SeqCst);
}

/// A host function (`cuLaunchHostFunc`) must not call CUDA ("The host function must not
/// make any CUDA API calls. Attempting to use a CUDA API may result in
/// CUDA_ERROR_NOT_PERMITTED"): its `cuStreamQuery` and `cuMemAlloc` get
/// `CUDA_ERROR_NOT_PERMITTED`.
#[test]
fn host_function_calling_cuda_gets_not_permitted() {
    use_device(0);
    let s = stream(NON_BLOCKING);
    let seen = Seen::default();
    seen.query.store(u32::MAX, Ordering::SeqCst);
    seen.alloc.store(u32::MAX, Ordering::SeqCst);
    // SAFETY: the function only reads `seen` through the pointer, which outlives the sync.
    ok(
        unsafe {
            st::cuLaunchHostFunc(
                s,
                Some(calls_cuda),
                (&seen as *const Seen).cast_mut().cast(),
            )
        },
        "cuLaunchHostFunc",
    );
    ok(sync(s), "cuStreamSynchronize");
    assert!(seen.ran.load(Ordering::SeqCst), "the host function ran");
    expect(
        seen.query.load(Ordering::SeqCst),
        NOT_PERMITTED,
        "cuStreamQuery inside a host function",
    );
    expect(
        seen.alloc.load(Ordering::SeqCst),
        NOT_PERMITTED,
        "cuMemAlloc_v2 inside a host function",
    );
    // Outside it, the same calls work.
    ok(query(s), "cuStreamQuery outside");
}

/// The legacy default stream (handle 0) waits for the work queued before on the context's
/// blocking streams (flags 0) and not for non-blocking ones (`CU_STREAM_NON_BLOCKING`), and
/// blocking streams wait for its earlier work, non-blocking ones not
/// (stream-sync-behavior: "The legacy default stream is an implicit stream which
/// synchronizes with all other blocking streams in the same CUcontext").
///
/// Each check can fail: a stream spins (100 ms where the wait is expected, 500 ms where it
/// is not), work is queued on the other stream and that stream is synchronised; then the
/// spinning stream is queried. Waited for: it must be done (`CUDA_SUCCESS`); not waited
/// for: it must still be spinning (`CUDA_ERROR_NOT_READY`). In a child: other tests'
/// blocking streams in this context would add waits of their own.
#[test]
fn legacy_stream_waits_for_blocking_streams_but_not_non_blocking_ones() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "legacy_stream_waits_for_blocking_streams_but_not_non_blocking_ones",
        &[],
        || {
            use_device(0);
            let f = spin_fn();
            let blocking = stream(0);
            let non_blocking = stream(NON_BLOCKING);
            let bufs: Vec<u64> = (0..4).map(|_| alloc(64)).collect();
            let memset_on = |buf: u64, s: u64| {
                // SAFETY: no host pointers.
                ok(
                    unsafe { mem::cuMemsetD32Async(buf, 7, 16, s) },
                    "cuMemsetD32Async",
                );
            };

            // The legacy stream waits for a blocking stream's earlier work.
            spin(f, blocking, 100, 0, 0);
            memset_on(bufs[0], 0);
            ok(sync(0), "cuStreamSynchronize(0)");
            ok(
                query(blocking),
                "the blocking stream's spin is done once the legacy stream's later work is",
            );

            // ... but not for a non-blocking stream's.
            spin(f, non_blocking, 500, 0, 0);
            let t = Instant::now();
            memset_on(bufs[1], 0);
            ok(sync(0), "cuStreamSynchronize(0)");
            let waited = t.elapsed();
            expect(
                query(non_blocking),
                NOT_READY,
                &format!(
                    "the non-blocking stream still spins after the legacy stream's sync ({waited:?})"
                ),
            );
            ok(sync(non_blocking), "cuStreamSynchronize(non-blocking)");

            // A blocking stream waits for the legacy stream's earlier work.
            spin(f, 0, 100, 0, 0);
            memset_on(bufs[2], blocking);
            ok(sync(blocking), "cuStreamSynchronize(blocking)");
            ok(
                query(0),
                "the legacy stream's spin is done once the blocking stream's later work is",
            );

            // A non-blocking stream does not.
            spin(f, 0, 500, 0, 0);
            memset_on(bufs[3], non_blocking);
            ok(sync(non_blocking), "cuStreamSynchronize(non-blocking)");
            expect(
                query(0),
                NOT_READY,
                "the legacy stream still spins after the non-blocking stream's sync",
            );
            ok(sync(0), "cuStreamSynchronize(0)");
            for b in bufs {
                assert_eq!(dtoh::<u32>(b, 16), vec![7; 16]);
            }
        },
    );
}
