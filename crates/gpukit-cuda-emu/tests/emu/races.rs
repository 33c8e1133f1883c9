//! The race checker between streams (`src/hb.rs`): two streams touching the same bytes, one
//! writing, with nothing ordering them (CUDA orders work between streams only through
//! events, the legacy stream's implicit waits and what the host saw finish:
//! <https://docs.nvidia.com/cuda/cuda-c-programming-guide/#streams>) are reported whatever
//! order they ran in, as a sticky `CUDA_ERROR_LAUNCH_FAILED` by default
//! (`GPUKIT_CUDA_EMU_RACES=error`), or only said with `warn`. Each test in a child process.

use crate::common::*;

const RW: &str = r#"
extern "C" __global__ void fill(int *p, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

extern "C" __global__ void sum_into(const int *p, int n, int *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int s = 0;
        for (int i = 0; i < n; i++) s += p[i];
        *out = s;
    }
}
"#;

const N: i32 = 256;

struct Rw {
    fill: u64,
    sum: u64,
}

fn rw() -> Rw {
    let m = module(RW, "emu_races");
    Rw {
        fill: function(m, "fill"),
        sum: function(m, "sum_into"),
    }
}

fn fill(k: &Rw, s: u64, p: u64, v: i32) {
    // SAFETY: fill(int *, int, int): N ints.
    let r = unsafe {
        launch(
            k.fill,
            [1, 1, 1],
            [N as u32, 1, 1],
            0,
            s,
            &[arg(&p), arg(&N), arg(&v)],
        )
    };
    ok(r, "cuLaunchKernel(fill)");
}

fn sum_into(k: &Rw, s: u64, p: u64, out: u64) {
    // SAFETY: sum_into(const int *, int, int *): N ints in, one out.
    let r = unsafe {
        launch(
            k.sum,
            [1, 1, 1],
            [32, 1, 1],
            0,
            s,
            &[arg(&p), arg(&N), arg(&out)],
        )
    };
    ok(r, "cuLaunchKernel(sum_into)");
}

/// The sum `fill(p, N, v)` leaves.
fn filled_sum(v: i32) -> i32 {
    (0..N).map(|i| v + i).sum()
}

/// The racy program: a kernel on stream A writes a buffer, a kernel on stream B reads it,
/// nothing orders them. Returns the result of `cuCtxSynchronize`.
fn racy_program() -> u32 {
    use_device(0);
    let k = rw();
    let (a, b) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
    let buf = upload(&[0i32; N as usize]);
    let out = alloc(4);
    fill(&k, a, buf, 1);
    sum_into(&k, b, buf, out);
    ctx_sync()
}

/// A write on one stream and a read of the same bytes on another with no wait between
/// them: the sync reports `CUDA_ERROR_LAUNCH_FAILED`, and standard error says "race".
#[test]
fn unordered_write_and_read_on_two_streams_is_a_race() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "unordered_write_and_read_on_two_streams_is_a_race",
        &[],
        || {
            expect(
                racy_program(),
                LAUNCH_FAILED,
                "cuCtxSynchronize of the racy program",
            );
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("race between streams"),
            "the diagnostic says race"
        );
    }
}

/// The same program with `cuStreamWaitEvent` between the write and the read: no race, and
/// the reader sees the writer's values.
#[test]
fn write_and_read_ordered_by_an_event_do_not_race() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "write_and_read_ordered_by_an_event_do_not_race",
        &[],
        || {
            use_device(0);
            let k = rw();
            let (a, b) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
            let buf = upload(&[0i32; N as usize]);
            let out = alloc(4);
            let e = event(0);
            fill(&k, a, buf, 3);
            ok(record(e, a), "cuEventRecord");
            ok(wait_event(b, e), "cuStreamWaitEvent");
            sum_into(&k, b, buf, out);
            ok(ctx_sync(), "cuCtxSynchronize");
            assert_eq!(dtoh::<i32>(out, 1), vec![filled_sum(3)]);
        },
    );
    if let Some(out) = out {
        assert!(
            !out.stderr.contains("race between streams"),
            "no race is reported"
        );
    }
}

/// Two kernels reading the same buffer on two streams without any order: reads do not race.
#[test]
fn two_readers_on_two_streams_do_not_race() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "two_readers_on_two_streams_do_not_race",
        &[],
        || {
            use_device(0);
            let k = rw();
            let (a, b) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
            let data: Vec<i32> = (0..N).map(|i| i * 3 - 100).collect();
            let buf = upload(&data);
            let (out_a, out_b) = (alloc(4), alloc(4));
            sum_into(&k, a, buf, out_a);
            sum_into(&k, b, buf, out_b);
            ok(ctx_sync(), "cuCtxSynchronize");
            let want: i32 = data.iter().sum();
            assert_eq!(dtoh::<i32>(out_a, 1), vec![want]);
            assert_eq!(dtoh::<i32>(out_b, 1), vec![want]);
        },
    );
    if let Some(out) = out {
        assert!(
            !out.stderr.contains("race between streams"),
            "no race is reported"
        );
    }
}

/// With `GPUKIT_CUDA_EMU_RACES=warn` the racy program succeeds, and standard error still
/// reports the race.
#[test]
fn races_warn_reports_without_failing() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "races_warn_reports_without_failing",
        &[("GPUKIT_CUDA_EMU_RACES", "warn")],
        || {
            ok(
                racy_program(),
                "cuCtxSynchronize of the racy program under warn",
            );
            // The device is not broken.
            let p = alloc(4);
            ok(free(p), "cuMemFree_v2");
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("race between streams"),
            "the race is reported"
        );
    }
}

/// The synchronous `cuMemsetD32` on device memory does not order anything on the host:
/// "The synchronous memset functions are asynchronous with respect to the host except when
/// the target is pinned host memory or a Unified Memory region"
/// (<https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>, Memset). A
/// kernel on a non-blocking stream (which does not synchronise with the legacy stream the
/// memset runs on) reading the memset's bytes right after it, with no wait, races with it on
/// a GPU, and the checker must report it as it reports any unordered pair.
#[test]
fn sync_memset_then_non_blocking_reader_without_a_wait_is_a_race() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "sync_memset_then_non_blocking_reader_without_a_wait_is_a_race",
        &[],
        || {
            use_device(0);
            let k = rw();
            let s = stream(NON_BLOCKING);
            let buf = alloc(N as usize * 4);
            let out = alloc(4);
            // The raw call: `memset32` would synchronise after it.
            // SAFETY: no host pointers.
            ok(
                unsafe { gpukit_cuda_emu::api::mem::cuMemsetD32_v2(buf, 1, N as usize) },
                "cuMemsetD32_v2",
            );
            sum_into(&k, s, buf, out);
            expect(
                ctx_sync(),
                LAUNCH_FAILED,
                "cuCtxSynchronize after an unordered memset and read",
            );
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("race between streams"),
            "the race is reported"
        );
    }
}

/// The synchronous `cuMemcpyHtoD` from pageable memory returns "once the pageable buffer has
/// been copied to the staging memory for DMA transfer to device memory, but the DMA to final
/// destination may not have completed" (api-sync-behavior, Memcpy, Synchronous, rule 2): a
/// kernel on a non-blocking stream reading the destination right after, with no wait, races
/// with the copy on a GPU, and the checker must report it.
#[test]
fn sync_pageable_htod_then_non_blocking_reader_without_a_wait_is_a_race() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "sync_pageable_htod_then_non_blocking_reader_without_a_wait_is_a_race",
        &[],
        || {
            use_device(0);
            let k = rw();
            let s = stream(NON_BLOCKING);
            let buf = alloc(N as usize * 4);
            let out = alloc(4);
            ok(
                htod(buf, &[1i32; N as usize]),
                "cuMemcpyHtoD_v2 from pageable memory",
            );
            sum_into(&k, s, buf, out);
            expect(
                ctx_sync(),
                LAUNCH_FAILED,
                "cuCtxSynchronize after an unordered copy and read",
            );
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("race between streams"),
            "the race is reported"
        );
    }
}
