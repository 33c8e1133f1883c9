// The CUDA emulator's per-module runtime: runs a launch's grid on the calling thread, the
// threads of a block as fibers with barriers and warp collectives between them, and checks
// every access the kernel makes to the emulator's memory.
//
// Compiled once (not instrumented, every symbol hidden) and linked into each module, whose
// kernel code is compiled with `-fsanitize=thread` instrumentation but without the
// ThreadSanitizer runtime: the `__tsan_*` functions the instrumentation calls on every load,
// store and atomic operation are defined here, and they do the emulator's work instead:
// bounds and liveness of the memory touched (an access outside a live allocation ends the
// launch with CUDA_ERROR_ILLEGAL_ADDRESS, as on hardware) and the byte ranges each
// allocation was read, written and updated atomically over (the emulator's race checker
// compares them between streams).
//
// Scheduling: blocks run one after another in a seeded order; a block's threads start in a
// seeded order and each runs until it exits or waits at a barrier or warp collective; once
// every thread the barrier needs has arrived, the waiting threads go on in a seeded order.
// Modules without barriers or collectives run each thread as a plain call. A barrier that
// some threads of the block never reach (they exited), a warp collective whose lanes do not
// agree on the mask, and a block whose threads all wait on each other end the launch with
// CUDA_ERROR_LAUNCH_FAILED and say why: undefined behaviour on hardware (a hang or garbage).
#include "gkemu_abi.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN __attribute__((visibility("hidden")))

namespace {

struct uint3r {
    unsigned int x, y, z;
};

struct Rt;

// Must start as gkemu_fiber_pub (gkemu.h) does; lives at the top of the thread's stack slot
// (GKEMU_RECORD_AT).
struct Fiber {
    gkemu_launch *launch;
    void *block;
    uint3r thread_idx;
    uint3r block_idx;
    uint3r block_dim;
    uint3r grid_dim;
    unsigned int linear;
    unsigned int lane;
    void *dyn_smem;
    // Runtime only.
    Rt *rt;
    unsigned int wait_gen;
};
static_assert(sizeof(Fiber) <= GKEMU_RECORD_SIZE, "the thread record outgrew its space");

enum { RUNNING = 0, READY = 1, WAIT_BAR = 2, WAIT_WARP = 3, EXITED = 4 };

struct Warp {
    unsigned int pending; // the mask of the collective in progress; 0: none
    unsigned int arrived;
    unsigned int gen;
    unsigned int lanes; // lanes the block has in this warp
    unsigned long long values[2][32];
};

struct Block {
    gkemu_launch *L;
    const gkemu_kernel_info *k;
    unsigned int n;
    // Whether the block's threads are fibers now. A block starts in plain mode (one thread
    // after another on one stack) and becomes fibers when a thread reaches a barrier or a
    // warp collective; once one block did, the launch's later blocks start as fibers.
    bool fibers;
    bool launch_needs_fibers;
    unsigned int plain_index;
    uint3r block_idx;
    Rt *rt;
    void **slots;             // the stack slots this block took
    unsigned int nslots;
    void *sched_sp;
    uint3r *coords;           // each linear index's thread coordinates
    Fiber **by_linear;        // started threads' records (null: not started)
    // Each thread's saved stack pointer and state, by linear index: what the scheduler reads
    // and writes for threads other than the running one lives here, packed, and not in the
    // threads' records (one cache line per thread, each in a stack slot of its own).
    void **sps;
    unsigned char *states;
    unsigned int *order;      // start order
    unsigned int next_start;
    unsigned int *ready;      // ring of linear indices
    unsigned int ready_head, ready_len;
    unsigned int *waiting;    // threads at the barrier, in arrival order
    unsigned int exited;
    unsigned int bar_arrived, bar_gen;
    int bar_acc;
    int bar_result[2];
    Warp warps[32];
    unsigned long long rng;
};

// What one kind of access has recorded of the view it last touched: [lo, hi) in addresses,
// inside which a new access of that kind records nothing new.
struct Cov {
    uint64_t lo, hi;
};

struct Rt {
    sigjmp_buf env;
    Cov cov[3];
    gkemu_view *recent[2];
    void **slots; // slots taken during the launch
    unsigned int nslots, capslots;
    void **free_slots;
    unsigned int nfree;
    void *dyn;
    Block *block;
};

HIDDEN uint64_t g_region_base = 0;
HIDDEN uint64_t g_region_size = 0;

inline unsigned long long splitmix(unsigned long long &s) {
    unsigned long long z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A cheap generator for shuffles (xorshift64*), never zero.
inline unsigned long long next_rand(unsigned long long &s) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
}

// A uniform index below `bound` (Lemire's multiply-shift).
inline unsigned int below(unsigned long long &s, unsigned int bound) {
    return (unsigned int)(((next_rand(s) >> 32) * (unsigned long long)bound) >> 32);
}

inline void shuffle(unsigned long long &s, unsigned int *v, unsigned int count) {
    for (unsigned int i = count; i > 1; i--) {
        unsigned int j = below(s, i);
        unsigned int t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

inline Fiber *self() {
    uintptr_t sp;
#if defined(__x86_64__)
    __asm__("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
    __asm__("mov %0, sp" : "=r"(sp));
#else
    sp = (uintptr_t)__builtin_frame_address(0);
#endif
    return (Fiber *)GKEMU_RECORD_AT(sp & ~(uintptr_t)(GKEMU_STACK_SIZE - 1));
}

} // namespace

// ---- context switch -------------------------------------------------------------------
// gkemu_switch(save, to): saves the callee-saved registers on the current stack, stores its
// pointer in *save and resumes the stack `to` (made by gkemu_switch or by new_context).
extern "C" HIDDEN void gkemu_switch(void **save, void *to);
#if defined(__x86_64__)
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden gkemu_switch\n"
        ".globl gkemu_switch\n"
        ".type gkemu_switch,@function\n"
        "gkemu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size gkemu_switch, .-gkemu_switch\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden gkemu_switch\n"
        ".globl gkemu_switch\n"
        ".type gkemu_switch,%function\n"
        "gkemu_switch:\n"
        "  sub sp, sp, #176\n"
        "  stp x19, x20, [sp, #0]\n"
        "  stp x21, x22, [sp, #16]\n"
        "  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n"
        "  stp x27, x28, [sp, #64]\n"
        "  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mov x2, sp\n"
        "  str x2, [x0]\n"
        "  mov sp, x1\n"
        "  ldp x19, x20, [sp, #0]\n"
        "  ldp x21, x22, [sp, #16]\n"
        "  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n"
        "  ldp x27, x28, [sp, #64]\n"
        "  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #176\n"
        "  ret\n"
        ".size gkemu_switch, .-gkemu_switch\n");
#else
#error "the CUDA emulator's runtime switches stacks on x86-64 and AArch64 only"
#endif

namespace {

// A fresh stack at the end of `slot` whose first switch enters `entry`.
void *new_context(void *slot, void (*entry)()) {
    uintptr_t top = GKEMU_RECORD_AT(slot); // the stack grows down from the record
#if defined(__x86_64__)
    uintptr_t x = (top - 16) & ~(uintptr_t)15; // entry's slot, 16-aligned
    uintptr_t *p = (uintptr_t *)x;
    p[1] = 0;                 // entry's (fake) return address
    p[0] = (uintptr_t)entry;  // popped by `ret`
    uintptr_t sp = x - 6 * sizeof(uintptr_t);
    memset((void *)sp, 0, 6 * sizeof(uintptr_t));
    return (void *)sp;
#else
    uintptr_t sp = (top - 176) & ~(uintptr_t)15;
    memset((void *)sp, 0, 176);
    ((uintptr_t *)sp)[11] = (uintptr_t)entry; // x30
    return (void *)sp;
#endif
}

[[noreturn]] void fail_at(gkemu_launch *L, Fiber *f, int code, int kind, uint64_t addr,
                          uint32_t size, const char *what) {
    gkemu_fault &ft = L->fault;
    if (ft.code == 0) {
        ft.code = code;
        ft.kind = kind;
        ft.addr = addr;
        ft.size = size;
        if (f) {
            ft.block[0] = f->block_idx.x;
            ft.block[1] = f->block_idx.y;
            ft.block[2] = f->block_idx.z;
            ft.thread[0] = f->thread_idx.x;
            ft.thread[1] = f->thread_idx.y;
            ft.thread[2] = f->thread_idx.z;
        }
        snprintf(ft.message, sizeof ft.message, "%s", what ? what : "");
    }
    siglongjmp(((Rt *)L->rt)->env, 1);
}

void *take_slot(Rt *rt, gkemu_launch *L) {
    if (rt->nfree > 0) return rt->free_slots[--rt->nfree];
    void *s = L->take_stack(L->host);
    if (!s) fail_at(L, nullptr, 2, 0, 0, 0, "the emulator could not map a thread's stack");
    if (rt->nslots == rt->capslots) {
        unsigned int cap = rt->capslots ? rt->capslots * 2 : 64;
        rt->slots = (void **)realloc(rt->slots, cap * sizeof(void *));
        rt->free_slots = (void **)realloc(rt->free_slots, cap * sizeof(void *));
        rt->capslots = cap;
    }
    rt->slots[rt->nslots++] = s;
    return s;
}

void give_slot(Rt *rt, void *s) { rt->free_slots[rt->nfree++] = s; }

// The thread record of a stack slot.
inline Fiber *record_of(void *slot) { return (Fiber *)GKEMU_RECORD_AT(slot); }

void init_fiber(Fiber *f, Block *B, unsigned int linear) {
    gkemu_launch *L = B->L;
    f->launch = L;
    f->block = B;
    f->rt = (Rt *)L->rt;
    f->block_dim = {L->block[0], L->block[1], L->block[2]};
    f->grid_dim = {L->grid[0], L->grid[1], L->grid[2]};
    f->thread_idx = B->coords[linear];
    f->linear = linear;
    f->lane = linear & 31u;
    f->dyn_smem = f->rt->dyn;
    B->states[linear] = RUNNING;
}

int next_thread(Block *B);

// Hands the worker to the next thread: a ready one, else one not started yet, else the
// scheduler (the block is done, or its threads all wait). Threads switch to each other
// directly, so a barrier costs one switch per thread, not two.
void switch_from(Block *B, Fiber *f) {
    int g = next_thread(B);
    unsigned int me = f->linear;
    if (g == (int)me) {
        B->states[me] = RUNNING;
        return;
    }
    void *to = B->sched_sp;
    if (g >= 0) {
        B->states[g] = RUNNING;
        to = B->sps[g];
    }
    gkemu_switch(&B->sps[me], to);
}

void fiber_main() {
    Fiber *f = self();
    Block *B = (Block *)f->block;
    B->k->entry(B->L->params);
    B->states[f->linear] = EXITED;
    B->exited++;
    switch_from(B, f);
    __builtin_unreachable();
}

// Plain mode: every thread of the block, one call after another, on one stack. When a
// thread reaches a barrier, the block becomes fibers (`to_fibers`) and this stack is that
// thread's from then on: it ends when the thread does.
void plain_main() {
    Fiber *f = self();
    Block *B = (Block *)f->block;
    void (*entry)(void **) = B->k->entry;
    void **params = B->L->params;
    for (unsigned int i = 0; i < B->n; i++) {
        unsigned int linear = B->order[i];
        B->plain_index = i;
        f->thread_idx = B->coords[linear];
        f->linear = linear;
        f->lane = linear & 31u;
        entry(params);
        if (B->fibers) {
            B->states[f->linear] = EXITED;
            B->exited++;
            switch_from(B, f);
            __builtin_unreachable();
        }
    }
    B->states[f->linear] = EXITED;
    gkemu_switch(&B->sps[f->linear], B->sched_sp);
    __builtin_unreachable();
}

// A thread running in plain mode reached a barrier or a warp collective: the block becomes
// fibers. The threads before it have exited; it is the started thread `plain_index`.
void to_fibers(Block *B, Fiber *f) {
    B->fibers = true;
    B->launch_needs_fibers = true;
    B->exited = B->plain_index;
    B->next_start = B->plain_index + 1;
    B->by_linear[B->order[0]] = nullptr;
    B->by_linear[f->linear] = f;
}

// A new thread of the block, on a stack slot of its own.
Fiber *start_fiber(Block *B, unsigned int linear, void (*main)()) {
    void *slot = take_slot(B->rt, B->L);
    B->slots[B->nslots++] = slot;
    Fiber *f = record_of(slot);
    init_fiber(f, B, linear);
    f->block_idx = B->block_idx;
    B->sps[linear] = new_context(slot, main);
    B->by_linear[linear] = f;
    return f;
}

// The linear index of the next thread to run: a ready one, else one not started yet
// (started now); -1 when there is none.
int next_thread(Block *B) {
    if (B->ready_len > 0) {
        unsigned int l = B->ready[B->ready_head];
        B->ready_head = B->ready_head + 1 == B->n ? 0 : B->ready_head + 1;
        B->ready_len--;
        return (int)l;
    }
    if (B->next_start < B->n) {
        unsigned int l = B->order[B->next_start++];
        start_fiber(B, l, fiber_main);
        return (int)l;
    }
    return -1;
}

void push_ready(Block *B, unsigned int linear) {
    B->states[linear] = READY;
    unsigned int cap = B->n;
    unsigned int at = B->ready_head + B->ready_len;
    B->ready[at >= cap ? at - cap : at] = linear;
    B->ready_len++;
}

// Makes the waiting threads in `which` ready, in a seeded order.
void release(Block *B, unsigned int *which, unsigned int count) {
    shuffle(B->rng, which, count);
    for (unsigned int i = 0; i < count; i++) push_ready(B, which[i]);
}

[[noreturn]] void deadlock(Block *B) {
    char what[400];
    Fiber *some = nullptr;
    unsigned int at_bar = 0, at_warp = 0;
    for (unsigned int i = 0; i < B->n; i++) {
        Fiber *f = B->by_linear[i];
        if (!f) continue;
        if (B->states[i] == WAIT_BAR) at_bar++, some = some ? some : f;
        if (B->states[i] == WAIT_WARP) at_warp++, some = some ? some : f;
    }
    if (at_warp == 0 && B->exited > 0)
        snprintf(what, sizeof what,
                 "__syncthreads() reached by %u of the block's %u threads; the other %u exited "
                 "without reaching it (a barrier in divergent code: undefined behaviour, a "
                 "hang or a corrupt block on a GPU)",
                 at_bar, B->n, B->exited);
    else if (at_warp > 0 && at_bar == 0)
        snprintf(what, sizeof what,
                 "a warp collective (__shfl_*_sync, __ballot_sync, __syncwarp, ...) waits for "
                 "lanes of its mask that exited or never call it (%u lanes waiting, %u threads "
                 "exited)",
                 at_warp, B->exited);
    else
        snprintf(what, sizeof what,
                 "the block's threads wait on each other: %u at __syncthreads(), %u at a warp "
                 "collective, %u exited",
                 at_bar, at_warp, B->exited);
    fail_at(B->L, some, 719, 0, 0, 0, what);
}

// The order a block's threads start in: its warps in a seeded order, each warp's lanes in
// order from a seeded lane on (wrapping). Neighbouring lanes stay neighbours, so a warp's
// accesses stay as local as a GPU's coalesced ones, while which warp and which lane go first
// changes with the seed.
void thread_order(Block *B) {
    unsigned int nwarps = (B->n + 31u) / 32u;
    unsigned int warps[32];
    for (unsigned int w = 0; w < nwarps; w++) warps[w] = w;
    shuffle(B->rng, warps, nwarps);
    unsigned int at = 0;
    for (unsigned int k = 0; k < nwarps; k++) {
        unsigned int w = warps[k];
        unsigned int first = w * 32u;
        unsigned int lanes = B->n - first < 32u ? B->n - first : 32u;
        unsigned int start = below(B->rng, lanes);
        for (unsigned int l = 0; l < lanes; l++) {
            unsigned int lane = start + l;
            if (lane >= lanes) lane -= lanes;
            B->order[at++] = first + lane;
        }
    }
}

void run_block(Block *B, Rt *rt, unsigned int bx, unsigned int by, unsigned int bz) {
    gkemu_launch *L = B->L;
    B->next_start = 0;
    B->ready_head = B->ready_len = 0;
    B->exited = 0;
    B->bar_arrived = 0;
    B->bar_acc = 0;
    for (unsigned int i = 0; i < B->n; i++) B->by_linear[i] = nullptr;
    thread_order(B);
    for (unsigned int w = 0; w < 32; w++) {
        Warp &W = B->warps[w];
        W.pending = W.arrived = 0;
        unsigned int first = w * 32u;
        W.lanes = first >= B->n ? 0 : (B->n - first >= 32 ? 32 : B->n - first);
    }
    B->fibers = B->launch_needs_fibers && B->n > 1;
    B->block_idx = {bx, by, bz};
    B->rt = rt;
    B->nslots = 0;
    if (!B->fibers) {
        start_fiber(B, B->order[0], plain_main);
        B->next_start = 1;
        gkemu_switch(&B->sched_sp, B->sps[B->order[0]]);
    } else {
        int first = next_thread(B);
        B->states[first] = RUNNING;
        gkemu_switch(&B->sched_sp, B->sps[first]);
    }
    // Back when the threads are done, or all wait (a deadlock: reported).
    if (B->fibers && B->exited != B->n) deadlock(B);
    for (unsigned int i = 0; i < B->nslots; i++) give_slot(rt, B->slots[i]);
}

// ---- access checks ----------------------------------------------------------------------

const char *const KIND_NAME[3] = {"read", "write", "atomic"};

__attribute__((noinline)) gkemu_view *find_view(gkemu_launch *L, Rt *rt, uint64_t a, uint32_t n,
                                                int kind) {
    for (uint32_t i = 0; i < L->nviews; i++) {
        gkemu_view *v = &L->views[i];
        if (a >= v->base && a - v->base < v->size) {
            if (a + n > v->base + v->size) break;
            rt->recent[1] = rt->recent[0];
            rt->recent[0] = v;
            return v;
        }
    }
    gkemu_view tmp;
    memset(&tmp, 0, sizeof tmp);
    char why[256];
    why[0] = 0;
    if (!L->lookup(L->host, a, n, &tmp, why, sizeof why)) {
        char what[400];
        snprintf(what, sizeof what, "%s of %u bytes at 0x%llx: %s", KIND_NAME[kind], n,
                 (unsigned long long)a, why);
        fail_at(L, self(), 700, kind, a, n, what);
    }
    tmp.lo[0] = tmp.lo[1] = tmp.lo[2] = ~0ull;
    tmp.hi[0] = tmp.hi[1] = tmp.hi[2] = 0;
    if (L->nviews < GKEMU_MAX_VIEWS) {
        L->views[L->nviews] = tmp;
        gkemu_view *v = &L->views[L->nviews++];
        rt->recent[1] = rt->recent[0];
        rt->recent[0] = v;
        return v;
    }
    // More allocations than the launch records: checked, not recorded.
    return nullptr;
}

inline bool inside(const gkemu_view *v, uint64_t a, uint32_t n) {
    return v && a - v->base < v->size && v->size - (a - v->base) >= n;
}

__attribute__((noinline)) void access_slow(Fiber *f, uint64_t a, uint32_t n, int kind);

inline void access(const volatile void *p, uint32_t n, int kind) {
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (a - g_region_base >= g_region_size) return;
    Fiber *f = self();
    const Cov &c = f->rt->cov[kind];
    // Inside what this kind already recorded (which lies inside a live allocation): done.
    if (__builtin_expect(a >= c.lo && a + n <= c.hi, 1)) return;
    access_slow(f, a, n, kind);
}

void access_slow(Fiber *f, uint64_t a, uint32_t n, int kind) {
    Rt *rt = f->rt;
    gkemu_view *v = rt->recent[0];
    if (__builtin_expect(!inside(v, a, n), 0)) {
        gkemu_launch *L = f->launch;
        gkemu_view *end = L->views + L->nviews;
        for (v = L->views; v != end && !inside(v, a, n); v++) {
        }
        if (v != end) {
            rt->recent[0] = v;
        } else {
            v = find_view(L, rt, a, n, kind);
            if (!v) return;
        }
    }
    uint64_t off = a - v->base;
    if (off < v->lo[kind]) v->lo[kind] = off;
    if (off + n > v->hi[kind]) v->hi[kind] = off + n;
    rt->cov[kind].lo = v->base + v->lo[kind];
    rt->cov[kind].hi = v->base + v->hi[kind];
}

} // namespace

// ---- the runtime's entry points -----------------------------------------------------------

extern "C" HIDDEN int gkemu_rt_barrier(int op, int pred) {
    Fiber *f = self();
    Block *B = (Block *)f->block;
    if (!B->fibers) {
        if (B->n == 1) return op == 1 ? (pred != 0) : (pred != 0 || op == 0);
        to_fibers(B, f);
    }
    if (B->bar_arrived == 0) B->bar_acc = op == 2 ? 1 : 0;
    if (op == 1) B->bar_acc += pred != 0;
    if (op == 2) B->bar_acc = B->bar_acc && pred;
    if (op == 3) B->bar_acc = B->bar_acc || pred;
    B->waiting[B->bar_arrived++] = f->linear;
    B->states[f->linear] = WAIT_BAR;
    f->wait_gen = B->bar_gen;
    if (B->bar_arrived == B->n) {
        B->bar_result[B->bar_gen & 1] = B->bar_acc;
        unsigned int count = B->bar_arrived;
        B->bar_arrived = 0;
        B->bar_gen++;
        release(B, B->waiting, count);
    }
    switch_from(B, f);
    return B->bar_result[f->wait_gen & 1];
}

extern "C" HIDDEN void gkemu_rt_warp(unsigned int mask, unsigned long long value,
                                     unsigned long long *all) {
    Fiber *f = self();
    Block *B = (Block *)f->block;
    unsigned int lane = f->lane;
    if (!((mask >> lane) & 1u)) {
        char what[200];
        snprintf(what, sizeof what,
                 "lane %u called a warp collective with mask 0x%08x, which leaves it out "
                 "(undefined behaviour)",
                 lane, mask);
        fail_at(B->L, f, 719, 0, 0, 0, what);
    }
    Warp &W = B->warps[f->linear / 32u];
    unsigned int have = W.lanes == 32 ? 0xffffffffu : ((1u << W.lanes) - 1u);
    if (mask & ~have) {
        char what[200];
        snprintf(what, sizeof what,
                 "a warp collective's mask 0x%08x names lanes the block does not have (its "
                 "last warp has %u lanes)",
                 mask, W.lanes);
        fail_at(B->L, f, 719, 0, 0, 0, what);
    }
    if (!B->fibers) {
        if (B->n == 1) {
            // One thread per block: the only lane.
            memset(all, 0, 32 * sizeof *all);
            all[lane] = value;
            return;
        }
        to_fibers(B, f);
    }
    if (W.pending == 0) {
        W.pending = mask;
        W.arrived = 0;
    } else if (W.pending != mask) {
        char what[200];
        snprintf(what, sizeof what,
                 "lanes of warp %u are in warp collectives with different masks (0x%08x and "
                 "0x%08x): undefined behaviour",
                 f->linear / 32u, W.pending, mask);
        fail_at(B->L, f, 719, 0, 0, 0, what);
    }
    unsigned int gen = W.gen;
    W.values[gen & 1][lane] = value;
    W.arrived |= 1u << lane;
    B->states[f->linear] = WAIT_WARP;
    f->wait_gen = gen;
    if (W.arrived == W.pending) {
        unsigned int which[32];
        unsigned int count = 0;
        unsigned int base = (f->linear / 32u) * 32u;
        for (unsigned int i = 0; i < 32; i++)
            if ((W.pending >> i) & 1u) which[count++] = base + i;
        W.pending = 0;
        W.gen++;
        release(B, which, count);
    }
    switch_from(B, f);
    for (unsigned int i = 0; i < 32; i++) all[i] = ((mask >> i) & 1u) ? W.values[gen & 1][i] : 0;
}

extern "C" HIDDEN unsigned int gkemu_rt_activemask(void) {
    Fiber *f = self();
    Block *B = (Block *)f->block;
    unsigned int base = (f->linear / 32u) * 32u;
    Warp &W = B->warps[f->linear / 32u];
    unsigned int m = 0;
    for (unsigned int i = 0; i < W.lanes; i++) {
        Fiber *g = B->fibers ? B->by_linear[base + i] : nullptr;
        if (!B->fibers || !g || B->states[base + i] != EXITED) m |= 1u << i;
    }
    return m;
}

extern "C" HIDDEN void gkemu_rt_fail(int code, const char *what) {
    Fiber *f = self();
    fail_at(f->launch, f, code, 0, 0, 0, what);
}

// Called from the emulator's signal handler while `L` runs on this thread.
extern "C" HIDDEN void gkemu_rt_escape(gkemu_launch *L, int32_t code, uint64_t addr,
                                       const char *what) {
    gkemu_fault &ft = L->fault;
    if (ft.code == 0) {
        ft.code = code;
        ft.addr = addr;
        snprintf(ft.message, sizeof ft.message, "%s", what ? what : "");
    }
    siglongjmp(((Rt *)L->rt)->env, 1);
}

// Runs the whole grid of `L` on the calling thread.
extern "C" HIDDEN int32_t gkemu_rt_launch(gkemu_launch *L, const gkemu_kernel_info *kernels,
                                          uint32_t nkernels) {
    if (L->abi != GKEMU_ABI_VERSION || L->kernel >= nkernels) return 1; // invalid value
    g_region_base = L->region_base;
    g_region_size = L->region_size;
    Rt *volatile rt = (Rt *)calloc(1, sizeof(Rt));
    Block *volatile B = (Block *)calloc(1, sizeof(Block));
    if (!rt || !B) {
        free(rt);
        free(B);
        return 2; // out of memory
    }
    unsigned int n = L->block[0] * L->block[1] * L->block[2];
    B->L = L;
    B->k = &kernels[L->kernel];
    B->n = n;
    B->launch_needs_fibers = false;
    B->by_linear = (Fiber **)calloc(n, sizeof(Fiber *));
    B->sps = (void **)calloc(n, sizeof(void *));
    B->states = (unsigned char *)calloc(n, 1);
    B->order = (unsigned int *)calloc(n, sizeof(unsigned int));
    B->ready = (unsigned int *)calloc(n, sizeof(unsigned int));
    B->waiting = (unsigned int *)calloc(n, sizeof(unsigned int));
    B->coords = (uint3r *)calloc(n, sizeof(uint3r));
    B->slots = (void **)calloc(n, sizeof(void *));
    if (B->coords) {
        unsigned int i = 0;
        for (unsigned int z = 0; z < L->block[2]; z++)
            for (unsigned int y = 0; y < L->block[1]; y++)
                for (unsigned int x = 0; x < L->block[0]; x++) B->coords[i++] = {x, y, z};
    }
    {
        unsigned long long s0 = L->seed;
        B->rng = splitmix(s0) | 1ull;
    }
    if (L->dyn_smem) rt->dyn = aligned_alloc(256, ((size_t)L->dyn_smem + 255) & ~(size_t)255);
    L->rt = rt;
    rt->block = B;
    int32_t result = 0;
    if (!B->by_linear || !B->sps || !B->states || !B->order || !B->ready || !B->waiting || !B->coords || !B->slots ||
        (L->dyn_smem && !rt->dyn)) {
        result = 2;
    } else if (sigsetjmp(rt->env, 1) == 0) {
        // Blocks in a seeded order: from a seeded block on, forward or backward, wrapping
        // (i -> a * i + c mod total with a = +-1): which block runs first and which next
        // changes with the seed, while consecutive blocks stay neighbours in memory.
        unsigned long long gx = L->grid[0], gy = L->grid[1], gz = L->grid[2];
        unsigned long long total = gx * gy * gz;
        unsigned long long s = L->seed ^ 0x5851f42d4c957f2dull;
        unsigned long long a = (splitmix(s) & 1ull) || total == 1 ? 1 : total - 1;
        unsigned long long c = splitmix(s) % total;
        unsigned long long i = 0;
        unsigned __int128 idx = c;
        for (; i < total; i++) {
            unsigned long long b = (unsigned long long)idx;
            idx = (idx + a) % total;
            run_block(B, rt, (unsigned int)(b % gx), (unsigned int)((b / gx) % gy),
                      (unsigned int)(b / (gx * gy)));
        }
    } else {
        result = L->fault.code ? L->fault.code : 719;
    }
    for (unsigned int i = 0; i < rt->nslots; i++) L->give_stack(L->host, rt->slots[i]);
    free(rt->slots);
    free(rt->free_slots);
    free(rt->dyn);
    free(B->by_linear);
    free(B->sps);
    free(B->states);
    free(B->order);
    free(B->ready);
    free(B->waiting);
    free(B->coords);
    free(B->slots);
    free(B);
    free(rt);
    L->rt = nullptr;
    return result;
}

// ---- the instrumentation's hooks ------------------------------------------------------------
// The calls `-fsanitize=thread` puts around every memory access of the kernels' code.

#define RD(n)                                                                                  \
    extern "C" HIDDEN void __tsan_read##n(void *p) { access(p, n, GKEMU_READ); }              \
    extern "C" HIDDEN void __tsan_unaligned_read##n(void *p) { access(p, n, GKEMU_READ); }    \
    extern "C" HIDDEN void __tsan_volatile_read##n(void *p) { access(p, n, GKEMU_READ); }     \
    extern "C" HIDDEN void __tsan_unaligned_volatile_read##n(void *p) {                       \
        access(p, n, GKEMU_READ);                                                               \
    }                                                                                          \
    extern "C" HIDDEN void __tsan_write##n(void *p) { access(p, n, GKEMU_WRITE); }            \
    extern "C" HIDDEN void __tsan_unaligned_write##n(void *p) { access(p, n, GKEMU_WRITE); }  \
    extern "C" HIDDEN void __tsan_volatile_write##n(void *p) { access(p, n, GKEMU_WRITE); }   \
    extern "C" HIDDEN void __tsan_unaligned_volatile_write##n(void *p) {                      \
        access(p, n, GKEMU_WRITE);                                                              \
    }                                                                                          \
    extern "C" HIDDEN void __tsan_read##n##_pc(void *p, void *) { access(p, n, GKEMU_READ); } \
    extern "C" HIDDEN void __tsan_write##n##_pc(void *p, void *) { access(p, n, GKEMU_WRITE); }
RD(1)
RD(2)
RD(4)
RD(8)
RD(16)
#undef RD

extern "C" HIDDEN void __tsan_read_range(void *p, unsigned long n) {
    if (n) access(p, (uint32_t)n, GKEMU_READ);
}
extern "C" HIDDEN void __tsan_write_range(void *p, unsigned long n) {
    if (n) access(p, (uint32_t)n, GKEMU_WRITE);
}
extern "C" HIDDEN void __tsan_init(void) {}
extern "C" HIDDEN void __tsan_func_entry(void *) {}
extern "C" HIDDEN void __tsan_func_exit(void) {}
extern "C" HIDDEN void __tsan_ignore_thread_begin(void) {}
extern "C" HIDDEN void __tsan_ignore_thread_end(void) {}
extern "C" HIDDEN void __tsan_vptr_update(void **, void *) {}
extern "C" HIDDEN void __tsan_vptr_read(void **) {}
extern "C" HIDDEN void *__tsan_memcpy(void *d, const void *s, unsigned long n) {
    if (n) {
        access(s, (uint32_t)n, GKEMU_READ);
        access(d, (uint32_t)n, GKEMU_WRITE);
    }
    return memcpy(d, s, n);
}
extern "C" HIDDEN void *__tsan_memmove(void *d, const void *s, unsigned long n) {
    if (n) {
        access(s, (uint32_t)n, GKEMU_READ);
        access(d, (uint32_t)n, GKEMU_WRITE);
    }
    return memmove(d, s, n);
}
extern "C" HIDDEN void *__tsan_memset(void *d, int c, unsigned long n) {
    if (n) access(d, (uint32_t)n, GKEMU_WRITE);
    return memset(d, c, n);
}

// Atomic operations: done for real (other streams' kernels may touch the same memory at the
// same time), sequentially consistent whatever order was asked.
#define SC __ATOMIC_SEQ_CST
#define ATOMICS(bits, T)                                                                       \
    extern "C" HIDDEN T __tsan_atomic##bits##_load(const volatile T *a, int) {                 \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_load_n(a, SC);                                                         \
    }                                                                                          \
    extern "C" HIDDEN void __tsan_atomic##bits##_store(volatile T *a, T v, int) {              \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        __atomic_store_n(a, v, SC);                                                            \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_exchange(volatile T *a, T v, int) {              \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_exchange_n(a, v, SC);                                                  \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int) {             \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_fetch_add(a, v, SC);                                                   \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int) {             \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_fetch_sub(a, v, SC);                                                   \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_fetch_and(volatile T *a, T v, int) {             \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_fetch_and(a, v, SC);                                                   \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_fetch_or(volatile T *a, T v, int) {              \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_fetch_or(a, v, SC);                                                    \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_fetch_xor(volatile T *a, T v, int) {             \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_fetch_xor(a, v, SC);                                                   \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_fetch_nand(volatile T *a, T v, int) {            \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_fetch_nand(a, v, SC);                                                  \
    }                                                                                          \
    extern "C" HIDDEN int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c,   \
                                                                        T v, int, int) {       \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_compare_exchange_n(a, c, v, false, SC, SC);                            \
    }                                                                                          \
    extern "C" HIDDEN int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c,     \
                                                                      T v, int, int) {         \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        return __atomic_compare_exchange_n(a, c, v, false, SC, SC);                            \
    }                                                                                          \
    extern "C" HIDDEN T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v,    \
                                                                   int, int) {                 \
        access(a, sizeof(T), GKEMU_ATOMIC);                                                    \
        __atomic_compare_exchange_n(a, &c, v, false, SC, SC);                                  \
        return c;                                                                              \
    }
ATOMICS(8, unsigned char)
ATOMICS(16, unsigned short)
ATOMICS(32, unsigned int)
ATOMICS(64, unsigned long long)
#undef ATOMICS
extern "C" HIDDEN void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(SC); }
extern "C" HIDDEN void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(SC); }
