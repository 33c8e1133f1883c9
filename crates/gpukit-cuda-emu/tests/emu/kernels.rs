//! Kernels compiled by the emulated NVRTC and launched through the driver
//! (<https://docs.nvidia.com/cuda/nvrtc/index.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html>,
//! <https://docs.nvidia.com/cuda/cuda-c-programming-guide/>): shared memory and barriers,
//! warp collectives, dynamic shared memory and its 48 KiB limit, atomics, thread
//! coordinates, kernel names and linkage, compile errors and launch limits.

use gpukit_cuda_emu::api::module as md;

use crate::common::*;

/// The kernels these tests launch, in one program (compiled once per process).
const KERNELS: &str = r#"
// A block's sum by a tree in shared memory, one partial per block.
extern "C" __global__ void block_sum(const float *in, float *partial, int n) {
    __shared__ float s[256];
    unsigned int t = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + t;
    s[t] = i < (unsigned int)n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}

// A warp's sum with __shfl_down_sync, one per warp.
extern "C" __global__ void warp_sum(const int *in, int *out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31u) == 0) out[i / 32] = v;
}

// Every lane's view of three shuffles of `in`.
extern "C" __global__ void shuffles(const int *in, int *down1, int *xor5, int *from7) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    down1[i] = __shfl_down_sync(0xffffffffu, v, 1);
    xor5[i] = __shfl_xor_sync(0xffffffffu, v, 5);
    from7[i] = __shfl_sync(0xffffffffu, v, 7);
}

// Every lane's ballot, any and all of its warp's predicates.
extern "C" __global__ void votes(const int *pred, unsigned int *out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    int p = pred[i];
    unsigned int b = __ballot_sync(0xffffffffu, p);
    int any = __any_sync(0xffffffffu, p);
    int all = __all_sync(0xffffffffu, p);
    out[3 * i] = b;
    out[3 * i + 1] = (unsigned int)any;
    out[3 * i + 2] = (unsigned int)all;
}

// A block's elements reversed through dynamic shared memory (blockDim.x floats of it).
extern "C" __global__ void dyn_reverse(const float *in, float *out) {
    extern __shared__ float dyn[];
    unsigned int t = threadIdx.x, n = blockDim.x;
    dyn[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = dyn[n - 1 - t];
}

// `count` words of dynamic shared memory written, then read back in reverse; each block's
// sum of what it read into out[blockIdx.x].
extern "C" __global__ void dyn_big(unsigned int *out, unsigned int count) {
    extern __shared__ unsigned int big[];
    for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) big[k] = k * 3u + blockIdx.x;
    __syncthreads();
    unsigned int acc = 0;
    for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) acc += big[count - 1 - k];
    atomicAdd(&out[blockIdx.x], acc);
}

// Atomic counts from every thread of a 2-D grid.
extern "C" __global__ void count_atomic(unsigned int *total, unsigned int *hist,
                                        unsigned int bins, float *fsum) {
    unsigned int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    atomicAdd(total, 1u);
    atomicAdd(&hist[i % bins], 1u);
    atomicAdd(fsum, 1.0f);
}

// Each thread's linear index and packed coordinates at its linear position.
extern "C" __global__ void coords(unsigned int *out) {
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned int z = blockIdx.z * blockDim.z + threadIdx.z;
    unsigned int W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
    unsigned int idx = x + W * (y + H * z);
    out[2 * idx] = idx;
    out[2 * idx + 1] = threadIdx.x | (threadIdx.y << 5) | (threadIdx.z << 10) |
                       (blockIdx.x << 15) | (blockIdx.y << 20) | (blockIdx.z << 25);
}
"#;

fn kernels_module() -> u64 {
    module(KERNELS, "emu_kernels")
}

/// A deterministic generator (xorshift64*), independent of the emulator's.
pub fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A tree sum in `__shared__` memory with `__syncthreads` between levels, several blocks:
/// each block's partial against a CPU sum in f64 of the same f32 inputs.
///
/// Tolerance: a pairwise (tree) sum of 256 f32 values has error at most
/// γ₈·Σ|xᵢ| with γ₈ = 8u/(1-8u), u = 2⁻²⁴ (Higham, "Accuracy and Stability of Numerical
/// Algorithms", §4.2: 8 levels of additions, each rounding once); the f64 reference's own
/// error is ~2⁻²⁹ smaller and is covered by the margin. Without working barriers a thread
/// would add a neighbour's slot before it is written, an error of the size of the values
/// themselves, far beyond this bound.
#[test]
fn block_sum_with_shared_memory_and_syncthreads_matches_f64() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let f = function(kernels_module(), "block_sum");
    let n: usize = 10_000;
    let mut r = rng(7);
    let data: Vec<f32> = (0..n)
        .map(|_| ((r() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        .collect();
    let blocks = n.div_ceil(256);
    let input = upload(&data);
    let partial = alloc(blocks * 4);
    let s = stream(0);
    let n_arg = n as i32;
    // SAFETY: block_sum(const float *, float *, int): two device pointers of n and `blocks`
    // floats, and an int.
    let res = unsafe {
        launch(
            f,
            [blocks as u32, 1, 1],
            [256, 1, 1],
            0,
            s,
            &[arg(&input), arg(&partial), arg(&n_arg)],
        )
    };
    ok(res, "cuLaunchKernel(block_sum)");
    ok(sync(s), "cuStreamSynchronize");
    let got: Vec<f32> = dtoh(partial, blocks);
    let u = f64::powi(2.0, -24);
    let gamma8 = 8.0 * u / (1.0 - 8.0 * u);
    for (b, &g) in got.iter().enumerate() {
        let chunk = &data[b * 256..((b + 1) * 256).min(n)];
        let exact: f64 = chunk.iter().map(|&x| f64::from(x)).sum();
        let abs: f64 = chunk.iter().map(|&x| f64::from(x).abs()).sum();
        let tol = gamma8 * abs * 1.01;
        assert!(
            (f64::from(g) - exact).abs() <= tol,
            "block {b}: got {g}, f64 sum {exact}, tolerance {tol}"
        );
    }
    for p in [input, partial] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// `__shfl_down_sync` reduction of each warp, `__shfl_down_sync`/`__shfl_xor_sync`/
/// `__shfl_sync` lane selection (a lane shifted past 31 keeps its own value: "the value of
/// var is unchanged" for an out-of-range source of `__shfl_down_sync`), and
/// `__ballot_sync`/`__any_sync`/`__all_sync` on known predicates.
#[test]
fn warp_shuffles_and_votes_give_known_answers() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let m = kernels_module();
    let s = stream(0);
    // Shuffle reduction: 8 warps (2 blocks of 128).
    let n = 256usize;
    let mut r = rng(11);
    let data: Vec<i32> = (0..n).map(|_| (r() % 2001) as i32 - 1000).collect();
    let input = upload(&data);
    let sums = alloc(n / 32 * 4);
    let f = function(m, "warp_sum");
    // SAFETY: warp_sum(const int *, int *): n ints in, n/32 out.
    ok(
        unsafe { launch(f, [2, 1, 1], [128, 1, 1], 0, s, &[arg(&input), arg(&sums)]) },
        "cuLaunchKernel(warp_sum)",
    );
    let (down1, xor5, from7) = (alloc(n * 4), alloc(n * 4), alloc(n * 4));
    let f = function(m, "shuffles");
    // SAFETY: shuffles(const int *, int *, int *, int *): n ints each.
    ok(
        unsafe {
            launch(
                f,
                [2, 1, 1],
                [128, 1, 1],
                0,
                s,
                &[arg(&input), arg(&down1), arg(&xor5), arg(&from7)],
            )
        },
        "cuLaunchKernel(shuffles)",
    );
    // Votes: 4 warps with the predicates lane % 3 == 0, none, all, lane 31 only.
    let pred: Vec<i32> = (0..128usize)
        .map(|i| {
            let lane = i % 32;
            i32::from(match i / 32 {
                0 => lane % 3 == 0,
                1 => false,
                2 => true,
                _ => lane == 31,
            })
        })
        .collect();
    let pred_d = upload(&pred);
    let votes = alloc(128 * 3 * 4);
    let f = function(m, "votes");
    // SAFETY: votes(const int *, unsigned int *): 128 ints in, 3 * 128 words out.
    ok(
        unsafe { launch(f, [2, 1, 1], [64, 1, 1], 0, s, &[arg(&pred_d), arg(&votes)]) },
        "cuLaunchKernel(votes)",
    );
    ok(sync(s), "cuStreamSynchronize");

    let got: Vec<i32> = dtoh(sums, n / 32);
    for (w, &g) in got.iter().enumerate() {
        let want: i32 = data[w * 32..(w + 1) * 32].iter().sum();
        assert_eq!(g, want, "warp {w}'s __shfl_down_sync sum");
    }
    let (d1, x5, f7): (Vec<i32>, Vec<i32>, Vec<i32>) =
        (dtoh(down1, n), dtoh(xor5, n), dtoh(from7, n));
    for i in 0..n {
        let (warp, lane) = (i / 32 * 32, i % 32);
        let want_down = if lane < 31 { data[i + 1] } else { data[i] };
        assert_eq!(d1[i], want_down, "__shfl_down_sync(v, 1) at thread {i}");
        assert_eq!(
            x5[i],
            data[warp + (lane ^ 5)],
            "__shfl_xor_sync(v, 5) at {i}"
        );
        assert_eq!(f7[i], data[warp + 7], "__shfl_sync(v, 7) at {i}");
    }
    let v: Vec<u32> = dtoh(votes, 128 * 3);
    for i in 0..128usize {
        let w = i / 32;
        let mask: u32 = (0..32)
            .filter(|&l| pred[w * 32 + l] != 0)
            .fold(0, |m, l| m | (1 << l));
        let want = [mask, u32::from(mask != 0), u32::from(mask == u32::MAX)];
        assert_eq!(
            &v[3 * i..3 * i + 3],
            &want,
            "thread {i} (warp {w}): ballot, any, all"
        );
    }
    // The known answers themselves, spelled out.
    assert_eq!(v[0], 0x4924_9249, "lanes 0, 3, 6, ..., 30");
    assert_eq!(&v[3 * 32..3 * 32 + 3], &[0, 0, 0], "no lane");
    assert_eq!(&v[3 * 64..3 * 64 + 3], &[u32::MAX, 1, 1], "every lane");
    assert_eq!(&v[3 * 96..3 * 96 + 3], &[0x8000_0000, 1, 0], "lane 31 only");
    for p in [input, sums, down1, xor5, from7, pred_d, votes] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// `extern __shared__` memory of the launch's `sharedMemBytes`; more than 48 KiB of it is
/// `CUDA_ERROR_INVALID_VALUE` until `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` allows
/// it ("Kernels relying on shared memory allocations over 48 KB per block ... require an
/// explicit opt-in": CUDA C Programming Guide, compute capability 9.0), and works after.
#[test]
fn dynamic_shared_memory_and_its_48_kib_opt_in() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let m = kernels_module();
    let s = stream(0);
    // Reverse each block's 96 floats through dynamic shared memory.
    let (blocks, threads) = (5usize, 96usize);
    let data: Vec<f32> = (0..blocks * threads)
        .map(|i| i as f32 * 0.25 - 7.0)
        .collect();
    let input = upload(&data);
    let out = alloc(data.len() * 4);
    let f = function(m, "dyn_reverse");
    // SAFETY: dyn_reverse(const float *, float *): blocks * threads floats each.
    ok(
        unsafe {
            launch(
                f,
                [blocks as u32, 1, 1],
                [threads as u32, 1, 1],
                (threads * 4) as u32,
                s,
                &[arg(&input), arg(&out)],
            )
        },
        "cuLaunchKernel(dyn_reverse)",
    );
    ok(sync(s), "cuStreamSynchronize");
    let got: Vec<f32> = dtoh(out, data.len());
    for b in 0..blocks {
        for t in 0..threads {
            assert_eq!(
                got[b * threads + t],
                data[b * threads + threads - 1 - t],
                "block {b} thread {t}"
            );
        }
    }

    // 48 KiB exactly needs no opt-in; 64 KiB does.
    let big = function(m, "dyn_big");
    let sums = alloc(2 * 4);
    let run = |count: u32| -> u32 {
        ok(memset32(sums, 0, 2), "cuMemsetD32_v2");
        // SAFETY: dyn_big(unsigned int *, unsigned int): 2 words (one per block).
        unsafe {
            launch(
                big,
                [2, 1, 1],
                [128, 1, 1],
                count * 4,
                s,
                &[arg(&sums), arg(&count)],
            )
        }
    };
    let want = |count: u64, b: u64| -> u32 { (3 * (count * (count - 1) / 2) + count * b) as u32 };
    ok(
        run(12288),
        "a launch with exactly 48 KiB of dynamic shared memory",
    );
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(dtoh::<u32>(sums, 2), vec![want(12288, 0), want(12288, 1)]);
    expect(
        run(12289),
        INVALID_VALUE,
        "48 KiB + 4 bytes of dynamic shared memory without the attribute",
    );
    expect(
        run(16384),
        INVALID_VALUE,
        "64 KiB of dynamic shared memory without the attribute",
    );
    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8.
    // SAFETY: no pointers.
    ok(
        unsafe { md::cuFuncSetAttribute(big, 8, 64 * 1024) },
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 KiB)",
    );
    ok(run(16384), "64 KiB after opting in");
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(dtoh::<u32>(sums, 2), vec![want(16384, 0), want(16384, 1)]);
    for p in [input, out, sums] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// `atomicAdd` from every thread of a multi-block 2-D grid counts exactly, on one counter,
/// on a histogram and on a float (whole numbers below 2²⁴ are exact in f32).
#[test]
fn atomic_add_from_every_thread_counts_exactly() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let f = function(kernels_module(), "count_atomic");
    let s = stream(0);
    let (gx, gy, bx) = (13u32, 3u32, 250u32);
    let bins = 7u32;
    let total = upload(&[0u32]);
    let hist = upload(&vec![0u32; bins as usize]);
    let fsum = upload(&[0f32]);
    // SAFETY: count_atomic(unsigned int *, unsigned int *, unsigned int, float *).
    ok(
        unsafe {
            launch(
                f,
                [gx, gy, 1],
                [bx, 1, 1],
                0,
                s,
                &[arg(&total), arg(&hist), arg(&bins), arg(&fsum)],
            )
        },
        "cuLaunchKernel(count_atomic)",
    );
    ok(sync(s), "cuStreamSynchronize");
    let threads = gx * gy * bx;
    assert_eq!(dtoh::<u32>(total, 1), vec![threads]);
    let want: Vec<u32> = (0..bins)
        .map(|b| (0..threads).filter(|i| i % bins == b).count() as u32)
        .collect();
    assert_eq!(dtoh::<u32>(hist, bins as usize), want);
    assert_eq!(dtoh::<f32>(fsum, 1), vec![threads as f32]);
    for p in [total, hist, fsum] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// In 2-D and 3-D launches every thread sees its own `threadIdx`/`blockIdx` and the
/// launch's `blockDim`/`gridDim`: each writes its linear index and its coordinates at its
/// linear position, and every element is checked against the coordinates a CPU loop over
/// the grid gives (an element two threads claim, or none, keeps the 0xff fill).
#[test]
fn two_and_three_dimensional_launches_cover_every_thread_once() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let f = function(kernels_module(), "coords");
    let s = stream(0);
    for (grid, block) in [([5u32, 3, 1], [16u32, 2, 1]), ([3, 2, 4], [8, 4, 2])] {
        let (w, h, d) = (grid[0] * block[0], grid[1] * block[1], grid[2] * block[2]);
        let n = (w * h * d) as usize;
        let out = alloc(n * 8);
        // SAFETY: coords(unsigned int *): 2 words per thread.
        ok(
            unsafe { launch(f, grid, block, 0, s, &[arg(&out)]) },
            "cuLaunchKernel(coords)",
        );
        ok(sync(s), "cuStreamSynchronize");
        let got: Vec<u32> = dtoh(out, 2 * n);
        let mut want = vec![u32::MAX; 2 * n];
        for bz in 0..grid[2] {
            for by in 0..grid[1] {
                for bx in 0..grid[0] {
                    for tz in 0..block[2] {
                        for ty in 0..block[1] {
                            for tx in 0..block[0] {
                                let (x, y, z) =
                                    (bx * block[0] + tx, by * block[1] + ty, bz * block[2] + tz);
                                let idx = x + w * (y + h * z);
                                want[2 * idx as usize] = idx;
                                want[2 * idx as usize + 1] = tx
                                    | (ty << 5)
                                    | (tz << 10)
                                    | (bx << 15)
                                    | (by << 20)
                                    | (bz << 25);
                            }
                        }
                    }
                }
            }
        }
        assert!(
            want.iter().all(|&v| v != u32::MAX),
            "the reference covers all"
        );
        for i in 0..n {
            assert_eq!(
                (got[2 * i], got[2 * i + 1]),
                (want[2 * i], want[2 * i + 1]),
                "element {i} of grid {grid:?} block {block:?}"
            );
        }
        ok(free(out), "cuMemFree_v2");
    }
}

/// A kernel named like a C library function (`random`, declared by `<stdlib.h>`, which the
/// device header includes) compiles, is found under its name, and runs.
#[test]
fn kernel_named_like_a_libc_function_compiles_and_runs() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let src = r#"
#include <stdlib.h>
extern "C" __global__ void random(unsigned int *out, unsigned int seed) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = (i * 2654435761u) ^ seed;
}
"#;
    let f = function(module(src, "libc_named"), "random");
    let s = stream(0);
    let n = 200usize;
    let out = alloc(n * 4);
    let seed = 0x1234_5678u32;
    // SAFETY: random(unsigned int *, unsigned int): n words.
    ok(
        unsafe { launch(f, [2, 1, 1], [100, 1, 1], 0, s, &[arg(&out), arg(&seed)]) },
        "cuLaunchKernel(random)",
    );
    ok(sync(s), "cuStreamSynchronize");
    let want: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
        .collect();
    assert_eq!(dtoh::<u32>(out, n), want);
    ok(free(out), "cuMemFree_v2");
}

/// A `__global__` function without `extern "C"` has C++ linkage: NVRTC's output names it by
/// its mangled name, so `cuModuleGetFunction` of the plain name is `CUDA_ERROR_NOT_FOUND`
/// (NVRTC guide, "Accessing Lowered Names"), while the mangled name finds it and it runs.
#[test]
fn kernel_without_extern_c_is_not_found_by_its_plain_name() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let src = r#"
__global__ void scale_cpp(float *p, float k) { p[threadIdx.x] *= k; }
"#;
    let m = module(src, "cpp_linkage");
    assert_eq!(
        try_function(m, "scale_cpp").err(),
        Some(NOT_FOUND),
        "cuModuleGetFunction of the plain name of a C++ kernel"
    );
    // Itanium mangling of `void scale_cpp(float *, float)`.
    let f = function(m, "_Z9scale_cppPff");
    let s = stream(0);
    let p = upload(&[1.0f32, 2.0, 3.0, 4.0]);
    let k = 2.5f32;
    // SAFETY: scale_cpp(float *, float): 4 floats.
    ok(
        unsafe { launch(f, [1, 1, 1], [4, 1, 1], 0, s, &[arg(&p), arg(&k)]) },
        "cuLaunchKernel(_Z9scale_cppPff)",
    );
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(dtoh::<f32>(p, 4), vec![2.5, 5.0, 7.5, 10.0]);
    ok(free(p), "cuMemFree_v2");
}

/// A program that does not compile is `NVRTC_ERROR_COMPILATION` with a log naming the
/// problem (the undeclared identifier); an option NVRTC does not know is
/// `NVRTC_ERROR_INVALID_OPTION`.
#[test]
fn compile_errors_and_unknown_options() {
    if crate::skip_without_cxx() {
        return;
    }
    let bad = r#"
extern "C" __global__ void broken(int *p) { *p = undeclared_identifier_xyz + 1; }
"#;
    let c = compile(bad, "broken_program", &[SM_90]);
    assert_eq!(
        c.result, NVRTC_ERROR_COMPILATION,
        "nvrtcCompileProgram of a broken program; log:\n{}",
        c.log
    );
    assert!(
        c.log.contains("undeclared_identifier_xyz"),
        "the log names the undeclared identifier:\n{}",
        c.log
    );
    assert!(c.image.is_empty());
    let good = r#"extern "C" __global__ void fine(int *p) { *p = 1; }"#;
    let c = compile(
        good,
        "fine_program",
        &[SM_90, "--definitely-not-an-nvrtc-option"],
    );
    assert_eq!(
        c.result, NVRTC_ERROR_INVALID_OPTION,
        "an unknown option; log:\n{}",
        c.log
    );
    // The same program with known options compiles (the failure was the option's).
    let c = compile(good, "fine_program", &[SM_90, "-DFOO=1", "--std=c++17"]);
    assert_eq!(c.result, 0, "log:\n{}", c.log);
}

/// Launches beyond the device's limits are `CUDA_ERROR_INVALID_VALUE` when queued: more
/// than 1024 threads per block, a block dimension above its maximum, a grid's y above
/// 65535 (`CU_DEVICE_ATTRIBUTE_MAX_*`); the limits themselves launch.
#[test]
fn launches_over_the_device_limits_are_invalid_value() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let f = function(kernels_module(), "count_atomic");
    let s = stream(0);
    let total = upload(&[0u32]);
    let hist = upload(&[0u32]);
    let fsum = upload(&[0f32]);
    let bins = 1u32;
    let args = [arg(&total), arg(&hist), arg(&bins), arg(&fsum)];
    // SAFETY: (every launch below) count_atomic(unsigned int *, unsigned int *, unsigned
    // int, float *) gets its four arguments.
    let go = |grid: [u32; 3], block: [u32; 3]| unsafe { launch(f, grid, block, 0, s, &args) };
    expect(
        go([1, 1, 1], [1025, 1, 1]),
        INVALID_VALUE,
        "1025 threads per block",
    );
    expect(
        go([1, 1, 1], [32, 32, 2]),
        INVALID_VALUE,
        "32 x 32 x 2 threads",
    );
    expect(
        go([1, 1, 1], [1, 1, 65]),
        INVALID_VALUE,
        "block z of 65 (max 64)",
    );
    expect(
        go([1, 65536, 1], [1, 1, 1]),
        INVALID_VALUE,
        "grid y of 65536",
    );
    expect(
        go([1, 1, 65536], [1, 1, 1]),
        INVALID_VALUE,
        "grid z of 65536",
    );
    expect(go([0, 1, 1], [1, 1, 1]), INVALID_VALUE, "an empty grid");
    // At the limits: 1024 threads, and 1024 = 1 x 1 x 64 x 16 threads.
    ok(go([1, 1, 1], [1024, 1, 1]), "1024 threads per block");
    ok(go([1, 1, 1], [16, 1, 64]), "block z of 64");
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(
        dtoh::<u32>(total, 1),
        vec![2048],
        "only the two valid launches ran"
    );
    for p in [total, hist, fsum] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// PTX text cannot run on the emulator (it has no PTX JIT compiler):
/// `cuModuleLoadData` of it is `CUDA_ERROR_JIT_COMPILER_NOT_FOUND`, as the driver answers
/// when its JIT compiler library is missing.
#[test]
fn ptx_text_is_jit_compiler_not_found() {
    use_device(0);
    let ptx =
        b".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n\0";
    assert_eq!(
        try_load(ptx).err(),
        Some(JIT_COMPILER_NOT_FOUND),
        "cuModuleLoadData of PTX text"
    );
}

/// `cuModuleUnload` kills the module's handle and its functions' (a lookup or a new launch
/// is `CUDA_ERROR_INVALID_HANDLE`), while a launch queued before the unload still runs:
/// programs written for hardware (cudarc's examples) unload a module behind its last
/// launch.
#[test]
fn a_launch_queued_before_its_module_is_unloaded_still_runs() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let m = module(SPIN_SRC, "spin");
    let f = function(m, "spin");
    let flag = upload(&[0i32]);
    let s = stream(0);
    spin(f, s, 20, flag, 7);
    // SAFETY: a loaded module; the launch queued on it keeps nothing of the handle.
    ok(unsafe { md::cuModuleUnload(m) }, "cuModuleUnload");
    ok(sync(s), "cuStreamSynchronize after the unload");
    assert_eq!(
        dtoh::<i32>(flag, 1),
        vec![7],
        "the launch queued before the unload ran"
    );
    assert_eq!(try_function(m, "spin").err(), Some(INVALID_HANDLE));
    let (ns, null, v) = (0u64, 0u64, 0i32);
    // SAFETY: `spin(unsigned long long, int *, int)`'s arguments, the pointer null.
    let r = unsafe {
        launch(
            f,
            [1, 1, 1],
            [1, 1, 1],
            0,
            s,
            &[arg(&ns), arg(&null), arg(&v)],
        )
    };
    expect(
        r,
        INVALID_HANDLE,
        "cuLaunchKernel of an unloaded module's function",
    );
    // SAFETY: no pointers.
    expect(
        unsafe { md::cuModuleUnload(m) },
        INVALID_HANDLE,
        "a second cuModuleUnload",
    );
    ok(free(flag), "cuMemFree_v2");
}

/// `cuModuleLoad` loads the image in a file, as `cuModuleLoadData` loads it from memory; a
/// file that is not there is `CUDA_ERROR_FILE_NOT_FOUND`.
#[test]
fn module_load_reads_the_image_from_a_file() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let image = cubin(SPIN_SRC, "spin");
    let path = std::env::temp_dir().join(format!("gkemu-module-{}.cubin", std::process::id()));
    std::fs::write(&path, &image[..]).expect("a temporary file");
    let name = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).expect("no NUL");
    let mut m = 0u64;
    // SAFETY: a writable CUmodule and a NUL-terminated path.
    let loaded = unsafe { md::cuModuleLoad(&mut m, name.as_ptr()) };
    let _ = std::fs::remove_file(&path);
    ok(loaded, "cuModuleLoad");
    let f = function(m, "spin");
    let flag = upload(&[0i32]);
    let s = stream(0);
    spin(f, s, 0, flag, 3);
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(dtoh::<i32>(flag, 1), vec![3], "the file's kernel ran");
    // SAFETY: as above; the file was removed.
    expect(
        unsafe { md::cuModuleLoad(&mut m, name.as_ptr()) },
        FILE_NOT_FOUND,
        "cuModuleLoad of a file that is not there",
    );
    ok(free(flag), "cuMemFree_v2");
}

/// pow's special cases are CUDA's (CUDA Math API, `powf`, `pow`): 1 for a base of +1 and for
/// an exponent of ±0, even when the other argument is a NaN, signaling ones included (whose
/// bits a random array may hold; glibc, following IEEE 754, gives NaN there). Every
/// spelling a kernel may use: `powf`, `pow` on floats and doubles, `std::pow`, mixed types.
#[test]
fn pow_of_one_and_to_the_zero_is_one_even_with_a_signaling_nan() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let src = r#"
#include <cmath>
extern "C" __global__ void pows(float *f, double *d, unsigned int snan_bits, float one, float zero) {
    // The base and exponent come from arguments: a literal 1 or 0 the compiler would fold.
    float snan = __int_as_float((int)snan_bits);
    double dsnan = __longlong_as_double(0x7ff0000000000001LL);
    double done = one, dzero = zero;
    f[0] = powf(one, snan);
    f[1] = powf(snan, zero);
    f[2] = pow(one, snan);
    f[3] = std::pow(one, snan);
    f[4] = pow(snan, -zero);
    f[5] = powf(2.0f * one, 10.0f);
    f[6] = pow(2.0f * one, 3);
    d[0] = pow(done, dsnan);
    d[1] = pow(dsnan, dzero);
    d[2] = std::pow(done, dsnan);
    d[3] = pow(one, dsnan);
    d[4] = pow(2.0 * done, 0.5);
}
"#;
    let f = function(module(src, "pows"), "pows");
    let s = stream(0);
    let (fo, dout) = (alloc(7 * 4), alloc(5 * 8));
    let (snan, one, zero) = (0x7f80_0001u32, 1.0f32, 0.0f32);
    // SAFETY: pows(float *, double *, unsigned int, float, float): 7 floats and 5 doubles.
    ok(
        unsafe {
            launch(
                f,
                [1, 1, 1],
                [1, 1, 1],
                0,
                s,
                &[arg(&fo), arg(&dout), arg(&snan), arg(&one), arg(&zero)],
            )
        },
        "cuLaunchKernel(pows)",
    );
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(
        dtoh::<f32>(fo, 7),
        vec![1.0, 1.0, 1.0, 1.0, 1.0, 1024.0, 8.0],
        "float pows"
    );
    assert_eq!(
        dtoh::<f64>(dout, 5),
        vec![1.0, 1.0, 1.0, 1.0, 2f64.sqrt()],
        "double pows"
    );
    ok(free(fo), "cuMemFree_v2");
    ok(free(dout), "cuMemFree_v2");
}
