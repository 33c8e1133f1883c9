// The CUDA emulator's device header: put in front of every program its NVRTC compiles (with
// `-include`), it gives CUDA C what a GPU gives it, on the CPU:
//
// - the device API (types, math, intrinsics, atomics, 16-bit floats): gkemu_api.h;
// - thread coordinates: every GPU thread runs on a stack slot of its own (GKEMU_STACK_SIZE,
//   aligned to it), whose top holds the thread's record, so `threadIdx` and friends
//   are a mask of the stack pointer away;
// - `__shared__` memory as thread-local statics: the threads of a block all run on one OS
//   thread, one block at a time, so a thread-local is exactly one block's copy;
// - barriers and warp collectives (`__syncthreads`, `__shfl_*_sync`, `__ballot_sync`, ...)
//   through the runtime (gkemu_rt.cpp), which switches between the block's threads;
// - `__trap`, `assert` and the helpers the library's CUDA C calls instead of inline PTX
//   (`gk_globaltimer`, `gk_cvt_f32_f16`, `gk_cvt_rn_f16_f32`).
#pragma once

#include "gkemu_abi.h"
#include "gkemu_api.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

// `__global__` marks nothing for the compiler; the emulated NVRTC's preprocessing pass
// (GKEMU_SCAN) keeps the token, to find the kernels that survive the preprocessor.
#undef __global__
#ifdef GKEMU_SCAN
#define __global__ __global__
#else
#define __global__
#endif
#define __shared__ static thread_local

// The part of a thread's record that kernel code reads (the runtime's record starts so).
struct gkemu_fiber_pub {
    gkemu_launch *launch;
    void *block;
    uint3 thread_idx;
    uint3 block_idx;
    uint3 block_dim;
    uint3 grid_dim;
    unsigned int linear;
    unsigned int lane;
    void *dyn_smem;
};

// The calling GPU thread's record: the base of the stack slot it runs on.
static __forceinline__ gkemu_fiber_pub *gkemu_self() {
    uintptr_t sp;
#if defined(__x86_64__)
    __asm__("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
    __asm__("mov %0, sp" : "=r"(sp));
#else
    sp = (uintptr_t)__builtin_frame_address(0);
#endif
    return (gkemu_fiber_pub *)GKEMU_RECORD_AT(sp & ~(uintptr_t)(GKEMU_STACK_SIZE - 1));
}

// Reads of the thread's record go through inline assembly, which the instrumentation does
// not see (they are not device memory) and the compiler may hoist (a record does not change
// while its thread runs).
static __forceinline__ unsigned int gkemu_ld32(const void *p) {
    unsigned int v;
#if defined(__x86_64__)
    __asm__("movl (%1), %0" : "=r"(v) : "r"(p));
#elif defined(__aarch64__)
    __asm__("ldr %w0, [%1]" : "=r"(v) : "r"(p));
#else
    v = *(const volatile unsigned int *)p;
#endif
    return v;
}
static __forceinline__ void *gkemu_ldptr(void *const *p) {
    void *v;
#if defined(__x86_64__)
    __asm__("movq (%1), %0" : "=r"(v) : "r"(p));
#elif defined(__aarch64__)
    __asm__("ldr %0, [%1]" : "=r"(v) : "r"(p));
#else
    v = *(void *const volatile *)p;
#endif
    return v;
}
static __forceinline__ uint3 gkemu_uint3_at(const uint3 *p) {
    uint3 r = {gkemu_ld32(&p->x), gkemu_ld32(&p->y), gkemu_ld32(&p->z)};
    return r;
}
static __forceinline__ unsigned int gkemu_lane() { return gkemu_ld32(&gkemu_self()->lane); }

#define threadIdx (gkemu_uint3_at(&gkemu_self()->thread_idx))
#define blockIdx (gkemu_uint3_at(&gkemu_self()->block_idx))
#define blockDim (gkemu_uint3_at(&gkemu_self()->block_dim))
#define gridDim (gkemu_uint3_at(&gkemu_self()->grid_dim))
#define warpSize 32

extern "C" {
// Barrier of the whole block: op 0 plain, 1 count, 2 and, 3 or of `pred`.
__attribute__((visibility("hidden"))) int gkemu_rt_barrier(int op, int pred);
// Warp rendezvous of the lanes in `mask`: every lane's `value` into `all` (lanes outside
// the mask: 0).
__attribute__((visibility("hidden"))) void gkemu_rt_warp(unsigned int mask,
                                                         unsigned long long value,
                                                         unsigned long long *all);
__attribute__((visibility("hidden"))) unsigned int gkemu_rt_activemask(void);
__attribute__((visibility("hidden"), noreturn)) void gkemu_rt_fail(int code, const char *what);
// The module table's entry points (gkemu_abi.h).
__attribute__((visibility("hidden"))) int32_t gkemu_rt_launch(gkemu_launch *l,
                                                              const gkemu_kernel_info *kernels,
                                                              uint32_t nkernels);
__attribute__((visibility("hidden"))) void gkemu_rt_escape(gkemu_launch *l, int32_t code,
                                                           uint64_t addr, const char *what);
}

// Dynamic shared memory: `extern __shared__ T name[];` becomes `gkemu_dyn_shared<T> name;`
// (the emulated NVRTC rewrites the declaration), which reads as a `T*` to the launch's
// dynamic shared memory.
template <typename T> struct gkemu_dyn_shared {
    __forceinline__ operator T *() const { return (T *)gkemu_ldptr(&gkemu_self()->dyn_smem); }
    template <typename I> __forceinline__ T &operator[](I i) const {
        return ((T *)gkemu_ldptr(&gkemu_self()->dyn_smem))[i];
    }
};

static __forceinline__ void __syncthreads() { gkemu_rt_barrier(0, 0); }
static __forceinline__ int __syncthreads_count(int p) { return gkemu_rt_barrier(1, p); }
static __forceinline__ int __syncthreads_and(int p) { return gkemu_rt_barrier(2, p); }
static __forceinline__ int __syncthreads_or(int p) { return gkemu_rt_barrier(3, p); }

static __forceinline__ unsigned int __activemask() { return gkemu_rt_activemask(); }
static __forceinline__ void __syncwarp(unsigned int mask = 0xffffffffu) {
    unsigned long long all[32];
    gkemu_rt_warp(mask, 0, all);
}

template <typename T> static __forceinline__ unsigned long long gkemu_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp collectives move at most 8 bytes per lane");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T> static __forceinline__ T gkemu_from_bits(unsigned long long b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

// PTX `shfl.sync`'s lane selection (PTX ISA, "shfl.sync"): mode 0 up, 1 down, 2 bfly, 3 idx;
// CUDA's width w gives c = ((32 - w) << 8) | (up ? 0 : 31).
template <typename T>
static __forceinline__ T gkemu_shfl(unsigned int mask, T var, int mode, int b, int width) {
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
        gkemu_rt_fail(719, "__shfl_*_sync with a width that is not a power of two up to 32");
    unsigned long long all[32];
    gkemu_rt_warp(mask, gkemu_bits(var), all);
    unsigned int lane = gkemu_lane();
    unsigned int c = ((32u - (unsigned int)width) << 8) | (mode == 0 ? 0u : 31u);
    unsigned int segmask = (c >> 8) & 31u, cval = c & 31u;
    unsigned int bval = (unsigned int)b & 31u;
    unsigned int max_lane = (lane & segmask) | (cval & ~segmask);
    unsigned int min_lane = lane & segmask;
    int j = (int)lane;
    bool ok;
    switch (mode) {
    case 0:
        j = (int)lane - (int)bval;
        ok = j >= (int)max_lane;
        break;
    case 1:
        j = (int)(lane + bval);
        ok = j <= (int)max_lane;
        break;
    case 2:
        j = (int)(lane ^ bval);
        ok = j <= (int)max_lane;
        break;
    default:
        j = (int)(min_lane | (bval & ~segmask));
        ok = j <= (int)max_lane;
        break;
    }
    if (!ok || j < 0 || j > 31) j = (int)lane;
    // A source lane outside the mask gives an undefined value: the lane's own here.
    if (!((mask >> j) & 1u)) j = (int)lane;
    return gkemu_from_bits<T>(all[j]);
}

template <typename T>
static __forceinline__ T __shfl_sync(unsigned int mask, T var, int src, int width = 32) {
    return gkemu_shfl(mask, var, 3, src, width);
}
template <typename T>
static __forceinline__ T __shfl_up_sync(unsigned int mask, T var, unsigned int d, int width = 32) {
    return gkemu_shfl(mask, var, 0, (int)d, width);
}
template <typename T>
static __forceinline__ T __shfl_down_sync(unsigned int mask, T var, unsigned int d,
                                          int width = 32) {
    return gkemu_shfl(mask, var, 1, (int)d, width);
}
template <typename T>
static __forceinline__ T __shfl_xor_sync(unsigned int mask, T var, int lane_mask,
                                         int width = 32) {
    return gkemu_shfl(mask, var, 2, lane_mask, width);
}

static __forceinline__ unsigned int __ballot_sync(unsigned int mask, int pred) {
    unsigned long long all[32];
    gkemu_rt_warp(mask, pred != 0, all);
    unsigned int r = 0;
    for (int i = 0; i < 32; i++)
        if (((mask >> i) & 1u) && all[i]) r |= 1u << i;
    return r;
}
static __forceinline__ int __any_sync(unsigned int mask, int pred) {
    return __ballot_sync(mask, pred) != 0;
}
static __forceinline__ int __all_sync(unsigned int mask, int pred) {
    return __ballot_sync(mask, pred) == mask;
}
template <typename T> static __forceinline__ unsigned int __match_any_sync(unsigned int mask, T v) {
    unsigned long long all[32];
    unsigned long long mine = gkemu_bits(v);
    gkemu_rt_warp(mask, mine, all);
    unsigned int r = 0;
    for (int i = 0; i < 32; i++)
        if (((mask >> i) & 1u) && all[i] == mine) r |= 1u << i;
    return r;
}
template <typename T>
static __forceinline__ unsigned int __match_all_sync(unsigned int mask, T v, int *pred) {
    unsigned long long all[32];
    unsigned long long mine = gkemu_bits(v);
    gkemu_rt_warp(mask, mine, all);
    for (int i = 0; i < 32; i++)
        if (((mask >> i) & 1u) && all[i] != mine) {
            *pred = 0;
            return 0;
        }
    *pred = 1;
    return mask;
}
#define GKEMU_WARP_REDUCE(name, type, init, combine)                                        \
    static __forceinline__ type name(unsigned int mask, type v) {                           \
        unsigned long long all[32];                                                         \
        gkemu_rt_warp(mask, gkemu_bits(v), all);                                            \
        type r = init;                                                                      \
        for (int i = 0; i < 32; i++)                                                        \
            if ((mask >> i) & 1u) {                                                         \
                type x = gkemu_from_bits<type>(all[i]);                                     \
                r = combine;                                                                \
            }                                                                               \
        return r;                                                                           \
    }
GKEMU_WARP_REDUCE(__reduce_add_sync, unsigned int, 0u, r + x)
GKEMU_WARP_REDUCE(__reduce_add_sync, int, 0, (int)((unsigned int)r + (unsigned int)x))
GKEMU_WARP_REDUCE(__reduce_min_sync, unsigned int, 0xffffffffu, (x < r ? x : r))
GKEMU_WARP_REDUCE(__reduce_min_sync, int, 0x7fffffff, (x < r ? x : r))
GKEMU_WARP_REDUCE(__reduce_max_sync, unsigned int, 0u, (x > r ? x : r))
GKEMU_WARP_REDUCE(__reduce_max_sync, int, (-0x7fffffff - 1), (x > r ? x : r))
GKEMU_WARP_REDUCE(__reduce_and_sync, unsigned int, 0xffffffffu, r & x)
GKEMU_WARP_REDUCE(__reduce_or_sync, unsigned int, 0u, r | x)
GKEMU_WARP_REDUCE(__reduce_xor_sync, unsigned int, 0u, r ^ x)
#undef GKEMU_WARP_REDUCE

// Ends the launch with "unspecified launch failure", as a trap instruction does.
static __forceinline__ void __trap() { gkemu_rt_fail(719, "__trap() was called"); }
static __forceinline__ void __brkpt() { gkemu_rt_fail(719, "__brkpt() was called"); }

// A device-side assertion: the message CUDA prints, then CUDA_ERROR_ASSERT.
static __attribute__((noinline)) void gkemu_assert_fail(const char *expr, const char *file,
                                                        int line, const char *func) {
    uint3 b = blockIdx, t = threadIdx;
    char what[512];
    snprintf(what, sizeof what,
             "%s:%d: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.", file,
             line, func, b.x, b.y, b.z, t.x, t.y, t.z, expr);
    fprintf(stderr, "%s\n", what);
    gkemu_rt_fail(710, what);
}
#define GKEMU_ASSERT_DEFINED 1
#undef assert
#define assert(e) ((e) ? (void)0 : gkemu_assert_fail(#e, __FILE__, __LINE__, __func__))

// The helpers the library's CUDA C calls instead of reading hardware registers with inline
// PTX: the global timer in nanoseconds (`%globaltimer`).
static __forceinline__ unsigned long long gk_globaltimer() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
static __forceinline__ long long clock64() { return (long long)gk_globaltimer(); }
static __forceinline__ void __nanosleep(unsigned int ns) {
    unsigned long long end = gk_globaltimer() + ns;
    while (gk_globaltimer() < end) {
    }
}
static __forceinline__ void __prof_trigger(int) {}
