//! Kernel faults and sticky errors, and the emulator's fault injection, each in a child
//! process: a sticky error breaks the device for the rest of its process ("This leaves the
//! process in an inconsistent state and any further CUDA work will return the same error",
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html>), and the
//! injection settings (`src/faults.rs`) are read once per process.

use crate::common::*;

const FAULTY: &str = r#"
extern "C" __global__ void write_at(int *p, long long i, int v) { p[i] = v; }

extern "C" __global__ void copy_n(const int *src, int *dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

extern "C" __global__ void trap_if(int *p, int bad) {
    if (bad && threadIdx.x == 3) __trap();
    p[threadIdx.x] = 1;
}

extern "C" __global__ void divergent_barrier(int *p) {
    if (threadIdx.x < 16) __syncthreads();
    p[threadIdx.x] = 1;
}
"#;

const ASSERTING: &str = r#"
#include <cassert>
extern "C" __global__ void check_positive(const int *p) { assert(p[threadIdx.x] > 0); }
"#;

fn faulty() -> u64 {
    module(FAULTY, "emu_faulty")
}

/// `write_at(p, i, v)` on `s`.
fn write_at(f: u64, s: u64, p: u64, i: i64, v: i32) -> u32 {
    // SAFETY: write_at(int *, long long, int); whether `p[i]` lies in `p`'s allocation is
    // what the tests look at (the emulator checks every access).
    unsafe { launch(f, [1, 1, 1], [1, 1, 1], 0, s, &[arg(&p), arg(&i), arg(&v)]) }
}

/// A kernel's write one element past the end of its allocation is
/// `CUDA_ERROR_ILLEGAL_ADDRESS` at the next synchronisation, and sticky: every later call on
/// that device returns it too. The other device is unaffected (the emulator keeps the sticky
/// error per device).
#[test]
fn out_of_bounds_write_is_sticky_illegal_address() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "out_of_bounds_write_is_sticky_illegal_address",
        &[],
        || {
            use_device(0);
            let f = function(faulty(), "write_at");
            let s = stream(0);
            let p = alloc(64 * 4);
            ok(write_at(f, s, p, 63, 5), "cuLaunchKernel(write_at, 63)");
            ok(sync(s), "the last element is in bounds");
            assert_eq!(dtoh::<i32>(p + 63 * 4, 1), vec![5]);
            ok(write_at(f, s, p, 64, 7), "cuLaunchKernel(write_at, 64)");
            expect(
                sync(s),
                ILLEGAL_ADDRESS,
                "cuStreamSynchronize after the fault",
            );
            // Sticky: everything on the device returns it.
            expect(sync(s), ILLEGAL_ADDRESS, "cuStreamSynchronize again");
            expect(ctx_sync(), ILLEGAL_ADDRESS, "cuCtxSynchronize");
            assert_eq!(
                try_alloc(16).err(),
                Some(ILLEGAL_ADDRESS),
                "cuMemAlloc_v2 after the fault"
            );
            assert_eq!(
                try_dtoh::<i32>(p, 1).err(),
                Some(ILLEGAL_ADDRESS),
                "cuMemcpyDtoH_v2 after the fault"
            );
            expect(
                write_at(f, s, p, 0, 1),
                ILLEGAL_ADDRESS,
                "cuLaunchKernel after the fault",
            );
            // Device 1 still works.
            use_device(1);
            let q = upload(&[1i32, 2, 3]);
            assert_eq!(
                dtoh::<i32>(q, 3),
                vec![1, 2, 3],
                "device 1 after device 0's fault"
            );
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "the emulator says what happened on standard error"
        );
    }
}

/// A kernel launched after `cuMemFree` that reads the freed memory faults with
/// `CUDA_ERROR_ILLEGAL_ADDRESS` (the emulator never reuses addresses, so the read finds no
/// allocation).
#[test]
fn kernel_reading_freed_memory_is_illegal_address() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "kernel_reading_freed_memory_is_illegal_address",
        &[],
        || {
            use_device(0);
            let f = function(faulty(), "copy_n");
            let s = stream(0);
            let n = 32i32;
            let src = upload(&[3i32; 32]);
            let dst = alloc(32 * 4);
            // Control: the copy works while the source is alive.
            // SAFETY: copy_n(const int *, int *, int): 32 ints each.
            ok(
                unsafe {
                    launch(
                        f,
                        [1, 1, 1],
                        [32, 1, 1],
                        0,
                        s,
                        &[arg(&src), arg(&dst), arg(&n)],
                    )
                },
                "cuLaunchKernel(copy_n)",
            );
            ok(sync(s), "cuStreamSynchronize");
            assert_eq!(dtoh::<i32>(dst, 32), vec![3; 32]);
            ok(free(src), "cuMemFree_v2");
            // SAFETY: as above; that `src` was freed is what the test looks at.
            let r = unsafe {
                launch(
                    f,
                    [1, 1, 1],
                    [32, 1, 1],
                    0,
                    s,
                    &[arg(&src), arg(&dst), arg(&n)],
                )
            };
            // The launch itself may be refused or queued; either way the sync says 700.
            assert!(
                r == SUCCESS || r == ILLEGAL_ADDRESS,
                "cuLaunchKernel with freed memory returned {}",
                name(r)
            );
            expect(sync(s), ILLEGAL_ADDRESS, "cuStreamSynchronize");
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("freed"),
            "the diagnostic says the memory was freed"
        );
    }
}

/// `__trap()` ends the launch with `CUDA_ERROR_LAUNCH_FAILED` ("unspecified launch
/// failure"), sticky.
#[test]
fn trap_is_launch_failed() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(module_path!(), "trap_is_launch_failed", &[], || {
        use_device(0);
        let f = function(faulty(), "trap_if");
        let s = stream(0);
        let p = alloc(32 * 4);
        for bad in [0i32, 1] {
            // SAFETY: trap_if(int *, int): 32 ints.
            ok(
                unsafe { launch(f, [1, 1, 1], [32, 1, 1], 0, s, &[arg(&p), arg(&bad)]) },
                "cuLaunchKernel(trap_if)",
            );
            if bad == 0 {
                ok(sync(s), "without the trap");
                assert_eq!(dtoh::<i32>(p, 32), vec![1; 32]);
            }
        }
        expect(sync(s), LAUNCH_FAILED, "cuStreamSynchronize after __trap()");
        assert_eq!(try_alloc(16).err(), Some(LAUNCH_FAILED), "sticky");
    });
}

/// A failed device-side `assert` (`#include <cassert>`) is `CUDA_ERROR_ASSERT`, with CUDA's
/// message (`... Assertion `...` failed.`) on standard error.
#[test]
fn failed_device_assert_is_cuda_error_assert() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "failed_device_assert_is_cuda_error_assert",
        &[],
        || {
            use_device(0);
            let f = function(module(ASSERTING, "emu_asserting"), "check_positive");
            let s = stream(0);
            let good = upload(&[1i32; 32]);
            let mut values = [5i32; 32];
            values[17] = -1;
            let bad = upload(&values);
            // SAFETY: check_positive(const int *): 32 ints.
            ok(
                unsafe { launch(f, [1, 1, 1], [32, 1, 1], 0, s, &[arg(&good)]) },
                "cuLaunchKernel(check_positive, good)",
            );
            ok(sync(s), "every assertion holds");
            // SAFETY: as above.
            ok(
                unsafe { launch(f, [1, 1, 1], [32, 1, 1], 0, s, &[arg(&bad)]) },
                "cuLaunchKernel(check_positive, bad)",
            );
            expect(sync(s), ASSERT, "cuStreamSynchronize after a failed assert");
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("Assertion") && out.stderr.contains("p[threadIdx.x] > 0"),
            "CUDA's assertion message names the expression"
        );
        assert!(
            out.stderr.contains("thread: [17,0,0]"),
            "the message names the failing thread"
        );
    }
}

/// `__syncthreads()` reached by only 16 of a block's 64 threads (inside
/// `if (threadIdx.x < 16)`: undefined behaviour by the Programming Guide, "__syncthreads()
/// is allowed in conditional code but only if the conditional evaluates identically across
/// the entire thread block") is a launch failure whose diagnostic names the barrier.
#[test]
fn syncthreads_in_divergent_code_is_a_launch_failure() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "syncthreads_in_divergent_code_is_a_launch_failure",
        &[],
        || {
            use_device(0);
            let f = function(faulty(), "divergent_barrier");
            let s = stream(0);
            let p = alloc(64 * 4);
            // SAFETY: divergent_barrier(int *): 64 ints.
            ok(
                unsafe { launch(f, [1, 1, 1], [64, 1, 1], 0, s, &[arg(&p)]) },
                "cuLaunchKernel(divergent_barrier)",
            );
            expect(sync(s), LAUNCH_FAILED, "cuStreamSynchronize");
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("barrier") && out.stderr.contains("__syncthreads"),
            "the diagnostic mentions the barrier"
        );
    }
}

/// `GPUKIT_CUDA_EMU_FAIL_ALLOC=2`: the second device allocation of the process is
/// `CUDA_ERROR_OUT_OF_MEMORY`, the first and third succeed.
#[test]
fn fail_alloc_fails_only_the_second_allocation() {
    let out = crate::in_child(
        module_path!(),
        "fail_alloc_fails_only_the_second_allocation",
        &[("GPUKIT_CUDA_EMU_FAIL_ALLOC", "2")],
        || {
            use_device(0);
            let a = try_alloc(1024);
            let b = try_alloc(1024);
            let c = try_alloc(1024);
            let d = try_alloc(1024);
            assert!(a.is_ok(), "first: {a:?}");
            assert_eq!(b.err(), Some(OUT_OF_MEMORY), "second");
            assert!(c.is_ok(), "third: {c:?}");
            assert!(d.is_ok(), "fourth: {d:?}");
        },
    );
    if let Some(out) = out {
        assert!(out.stderr.contains("injected"), "the injection is said");
    }
}

/// `GPUKIT_CUDA_EMU_FAULT_KERNEL=write_at`: launches of that kernel end with
/// `CUDA_ERROR_ILLEGAL_ADDRESS` at the sync; another kernel before it runs normally.
#[test]
fn fault_kernel_makes_that_kernel_fault() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "fault_kernel_makes_that_kernel_fault",
        &[("GPUKIT_CUDA_EMU_FAULT_KERNEL", "write_at")],
        || {
            use_device(0);
            let m = faulty();
            let copy = function(m, "copy_n");
            let victim = function(m, "write_at");
            let s = stream(0);
            let n = 8i32;
            let src = upload(&[9i32; 8]);
            let dst = alloc(8 * 4);
            // SAFETY: copy_n(const int *, int *, int): 8 ints each.
            ok(
                unsafe {
                    launch(
                        copy,
                        [1, 1, 1],
                        [8, 1, 1],
                        0,
                        s,
                        &[arg(&src), arg(&dst), arg(&n)],
                    )
                },
                "cuLaunchKernel(copy_n)",
            );
            ok(sync(s), "another kernel runs normally");
            assert_eq!(dtoh::<i32>(dst, 8), vec![9; 8]);
            // An in-bounds write: only the injection can make it fault.
            ok(write_at(victim, s, dst, 0, 1), "cuLaunchKernel(write_at)");
            expect(
                sync(s),
                ILLEGAL_ADDRESS,
                "cuStreamSynchronize after write_at",
            );
        },
    );
}

/// `GPUKIT_CUDA_EMU_FAIL_CALL=cuStreamCreate:2=CUDA_ERROR_OUT_OF_MEMORY`: only the second
/// `cuStreamCreate` fails, with that code.
#[test]
fn fail_call_fails_only_the_nth_call() {
    crate::in_child(
        module_path!(),
        "fail_call_fails_only_the_nth_call",
        &[(
            "GPUKIT_CUDA_EMU_FAIL_CALL",
            "cuStreamCreate:2=CUDA_ERROR_OUT_OF_MEMORY",
        )],
        || {
            use_device(0);
            let results: Vec<u32> = (0..4)
                .map(|_| {
                    let mut h = 0u64;
                    // SAFETY: a writable CUstream.
                    unsafe { gpukit_cuda_emu::api::stream::cuStreamCreate(&mut h, 0) }
                })
                .collect();
            assert_eq!(
                results,
                vec![SUCCESS, OUT_OF_MEMORY, SUCCESS, SUCCESS],
                "four cuStreamCreate calls"
            );
            // Other calls are not affected.
            let p = alloc(16);
            ok(free(p), "cuMemFree_v2");
        },
    );
}

/// `GPUKIT_CUDA_EMU_FAIL_COMPILE=<text>`: a program whose source contains the text fails
/// with `NVRTC_ERROR_COMPILATION` and a log saying the failure was injected; another
/// program compiles.
#[test]
fn fail_compile_fails_the_matching_program() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "fail_compile_fails_the_matching_program",
        &[("GPUKIT_CUDA_EMU_FAIL_COMPILE", "poisoned_marker_7f3a")],
        || {
            let poisoned = r#"
// poisoned_marker_7f3a
extern "C" __global__ void fine(int *p) { *p = 2; }
"#;
            let c = compile(poisoned, "poisoned", &[SM_90]);
            assert_eq!(c.result, NVRTC_ERROR_COMPILATION, "log:\n{}", c.log);
            assert!(c.log.contains("injected"), "the log says so:\n{}", c.log);
            let clean = r#"
extern "C" __global__ void fine(int *p) { *p = 2; }
"#;
            let c = compile(clean, "clean", &[SM_90]);
            assert_eq!(c.result, 0, "log:\n{}", c.log);
        },
    );
}
