// The interface between the CUDA emulator (Rust, src/kernel/abi.rs mirrors it field for
// field) and a compiled module: what a launch hands the module's runtime, and what the
// module exports. Plain C, shared by the runtime (gkemu_rt.cpp) and the kernels' header.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define GKEMU_ABI_VERSION 1u
// Every GPU thread runs on a stack slot of this size, aligned to it: the slot's first page
// is a guard, the thread's record (gkemu_fiber_pub) sits near its end, and the stack grows
// down from the record. Kernel code finds its record from its stack pointer
// (GKEMU_RECORD_AT of the slot). The record's distance from the slot's end is one of 256
// multiples of 64 bytes, a permutation of consecutive slots: the slots are 64 KiB apart, so
// at one fixed place the records and stack tops of a block's threads (which a barrier visits
// one after another) would share a handful of cache sets and evict each other on every
// switch; spread over 16 KiB they use every set of the first-level cache and 256 of the
// second's.
#define GKEMU_STACK_SIZE (64u * 1024u)
#define GKEMU_RECORD_SIZE 512u
#define GKEMU_PAGE 4096u
#define GKEMU_COLOR(slot) (((((uintptr_t)(slot)) >> 16) * 37u) & 255u)
#define GKEMU_RECORD_AT(slot)                                                                   \
    ((uintptr_t)(slot) + GKEMU_STACK_SIZE - GKEMU_RECORD_SIZE - GKEMU_COLOR(slot) * 64u)
// Distinct allocations whose touched ranges one launch records (more are still checked).
#define GKEMU_MAX_VIEWS 64u

// Access kinds, as indices into gkemu_view's ranges.
#define GKEMU_READ 0
#define GKEMU_WRITE 1
#define GKEMU_ATOMIC 2

#ifdef __cplusplus
extern "C" {
#endif

// One allocation a launch touched: its exact extent and the byte ranges read, written and
// updated atomically (lo > hi: none), relative to the allocation's base, hi exclusive.
typedef struct gkemu_view {
    uint64_t base;
    uint64_t size;
    uint64_t id;
    uint64_t lo[3];
    uint64_t hi[3];
} gkemu_view;

// Why a launch stopped early; code is the CUresult the emulator reports.
typedef struct gkemu_fault {
    int32_t code;
    int32_t kind;
    uint64_t addr;
    uint32_t size;
    uint32_t block[3];
    uint32_t thread[3];
    char message[512];
} gkemu_fault;

typedef struct gkemu_launch gkemu_launch;
struct gkemu_launch {
    uint32_t abi;
    uint32_t kernel;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t dyn_smem;
    uint32_t nviews;
    // Whether to run a block's threads as fibers (the module has barriers or warp
    // collectives) or each as a plain call.
    uint32_t fibers;
    uint32_t reserved;
    void **params;
    uint64_t seed;
    // The emulator's address range (device, managed and pinned host memory): accesses
    // outside it (stacks, shared memory, host memory) are not checked.
    uint64_t region_base;
    uint64_t region_size;
    void *host;
    // Finds the allocation holding [addr, addr + size) that the launching device may
    // access: fills `out` (base, size, id) and returns 1, or writes why not and returns 0.
    int (*lookup)(void *host, uint64_t addr, uint64_t size, gkemu_view *out, char *why,
                  size_t why_len);
    // A stack slot (see GKEMU_STACK_SIZE: its first page unmapped, the rest readable and
    // writable), and its return.
    void *(*take_stack)(void *host);
    void (*give_stack)(void *host, void *slot);
    gkemu_view views[GKEMU_MAX_VIEWS];
    gkemu_fault fault;
    // The runtime's own state for this launch.
    void *rt;
};

// A kernel of a module: its name, the trampoline that calls it with the parameter values
// `params[i]` points at, and its parameters' sizes and alignments.
typedef struct gkemu_kernel_info {
    const char *name;
    void (*entry)(void **params);
    uint32_t nparams;
    const uint32_t *param_size;
    const uint32_t *param_align;
} gkemu_kernel_info;

// Every module exports one of these as `gkemu_module`.
typedef struct gkemu_module_info {
    uint32_t abi;
    uint32_t nkernels;
    const gkemu_kernel_info *kernels;
    // Runs the whole grid on the calling thread; 0, or the CUresult of the fault recorded
    // in `fault`.
    int32_t (*launch)(gkemu_launch *l);
    // Called from a signal handler while `l` runs on this thread: records the fault and
    // abandons the launch (never returns).
    void (*escape)(gkemu_launch *l, int32_t code, uint64_t addr, const char *what);
} gkemu_module_info;

#ifdef __cplusplus
}
#endif
