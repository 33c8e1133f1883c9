// Tests of gkemu_api.h, the CUDA emulator's device API surface. A standalone program: prints
// every failed check and returns 1, or prints a summary and returns 0.
//
//   g++ -std=c++17 -O1 -w -I crates/gpukit-cuda-emu/runtime \
//       -I crates/gpukit-cuda-emu/runtime/include \
//       crates/gpukit-cuda-emu/runtime/tests/api_test.cpp -o /tmp/api_test && /tmp/api_test
//
// The expected values are worked out independently of the header: by hand (the known
// answers), or by other means (x87 long double and __float128 arithmetic, the hardware's
// conversions under fesetround, GCC's _Float16, libstdc++'s special functions), never by
// calling the header's own helpers.

// The stub headers must lead to the same header (and may be included in any order, twice).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <vector_types.h>
#include <cuda.h>
#include "gkemu_api.h"

#include <cfenv>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__shared__)
#error "gkemu_api.h must not define __shared__"
#endif
#if !defined(GK_PTX_HELPERS_DEFINED)
#error "GK_PTX_HELPERS_DEFINED is not defined"
#endif

// gk_globaltimer is the core's: the API header must leave the name free.
static unsigned long long gk_globaltimer() { return 42; }

static int g_checks = 0, g_failures = 0;
static int g_group_failures = 0;  // printed failures of the current dense loop (capped)

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        ++g_checks;                                                                            \
        if (!(cond)) {                                                                         \
            ++g_failures;                                                                      \
            std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                      \
    } while (0)

// A check inside a dense loop: counts every failure, prints the first few of each loop.
#define DCHECK(cond, ...)                                                                      \
    do {                                                                                       \
        ++g_checks;                                                                            \
        if (!(cond)) {                                                                         \
            ++g_failures;                                                                      \
            if (g_group_failures++ < 8) {                                                      \
                std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
                std::printf(__VA_ARGS__);                                                      \
                std::printf("\n");                                                             \
            }                                                                                  \
        }                                                                                      \
    } while (0)

static uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static uint64_t dbits(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
}
static double bitsd(uint64_t u) {
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}
static bool same_float(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || fbits(a) == fbits(b);
}
static bool same_double(double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || dbits(a) == dbits(b);
}
static bool close_rel(double got, double want, double rel) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(got - want) <= rel * std::fabs(want);
}

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    uint32_t u32() { return (uint32_t)next(); }
};

static const int MODES[4] = {FE_TONEAREST, FE_TOWARDZERO, FE_UPWARD, FE_DOWNWARD};
static const char *const MODE_NAME[4] = {"rn", "rz", "ru", "rd"};

// ---- references ---------------------------------------------------------------------------

// The correctly rounded value of `exact` in F (float or double) in mode m (0 rn, 1 rz, 2 ru,
// 3 rd): the conversion in the default mode, then one step to the neighbour when it went the
// wrong way (X is long double or __float128, holding `exact` exactly).
template <class F, class X> static F ref_round(X exact, int m) {
    F r = (F)exact;
    if (r != r) return r;
    const X v = (X)r;
    if (v == exact) return r;
    const bool want_down = m == 3 || (m == 1 && exact > 0);
    const bool want_up = m == 2 || (m == 1 && exact < 0);
    if (want_down && v > exact) r = std::nextafter(r, -(F)INFINITY);
    if (want_up && v < exact) r = std::nextafter(r, (F)INFINITY);
    return r;
}

// The value of x rounded to a binary format with `mant` stored mantissa bits, smallest normal
// exponent emin and largest emax, in mode m: scaled by a power of two (exact), rounded to an
// integer by the x87 in that mode, scaled back. Overflow gives +-inf or +-max as the mode says.
static long double ref_small(long double x, int mant, int emin, int emax, int m) {
    if (x != x || std::isinf(x) || x == 0) return x;
    int e = std::ilogb(x);
    if (e < emin) e = emin;
    const long double q = std::ldexp(x, mant - e);
    std::fesetround(MODES[m]);
    volatile long double vq = q;
    long double r = std::nearbyint((long double)vq);
    std::fesetround(FE_TONEAREST);
    long double v = std::ldexp(r, e - mant);
    if (v == 0) return std::copysign(0.0L, x);
    const long double maxv = std::ldexp((long double)((1 << (mant + 1)) - 1), emax - mant);
    if (std::fabs(v) > maxv) {
        const bool to_inf = m == 0 || (m == 2 && x > 0) || (m == 3 && x < 0);
        return to_inf ? std::copysign((long double)INFINITY, x) : std::copysign(maxv, x);
    }
    return v;
}

#if defined(__FLT16_MAX__)
#define HAVE_FLOAT16 1
static uint16_t f16_bits_of(_Float16 h) {
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
static _Float16 f16_of_bits(uint16_t b) {
    _Float16 h;
    std::memcpy(&h, &b, 2);
    return h;
}
// f16 bits of a value that is exactly a binary16 value (or +-inf).
static uint16_t f16_exact_bits(long double v) { return f16_bits_of((_Float16)(float)v); }
#endif

// bf16 bits of a value that is exactly a bfloat16 value (or +-inf).
static uint16_t bf16_exact_bits(long double v) { return (uint16_t)(fbits((float)v) >> 16); }
static uint16_t ref_bf16(long double x, int m) {
    return bf16_exact_bits(ref_small(x, 7, -126, 127, m));
}
static uint16_t ref_f16_small(long double x, int m) {
#if defined(HAVE_FLOAT16)
    return f16_exact_bits(ref_small(x, 10, -14, 15, m));
#else
    (void)x;
    (void)m;
    return 0;
#endif
}

// Float to integer as PTX cvt: x87 rounding in the mode, clamping, NaN -> nan_value.
template <class I> static I ref_f2i(long double x, int m, I nan_value) {
    if (x != x) return nan_value;
    std::fesetround(MODES[m]);
    volatile long double vx = x;
    long double r = std::nearbyint((long double)vx);
    std::fesetround(FE_TONEAREST);
    const long double lo = (long double)std::numeric_limits<I>::min();
    const long double hi = (long double)std::numeric_limits<I>::max();
    if (r <= lo) return std::numeric_limits<I>::min();
    if (r >= hi) return std::numeric_limits<I>::max();
    return (I)r;
}

// A float with random sign and mantissa and the given biased exponent.
static float rand_float_exp(Rng &g, uint32_t bexp) {
    return bitsf((g.u32() & 0x807fffffu) | (bexp << 23));
}

// ============================================================================================
// 1. Qualifiers and macros
// ============================================================================================

struct __align__(16) Aligned16 {
    float a;
};
static_assert(alignof(Aligned16) == 16, "__align__");
__constant__ float c_table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__managed__ int m_counter = 0;

__device__ __forceinline__ float fi_square(float x) { return x * x; }
__device__ __noinline__ float ni_cube(float x) { return x * x * x; }
__host__ __device__ inline int hd_twice(int x) { return 2 * x; }
__global__ void __launch_bounds__(256, 2) g_kernel(float *__restrict__ out,
                                                   const __grid_constant__ int n) {
    for (int i = 0; i < n; i++) out[i] = fi_square((float)i) + ni_cube(1.0f) + c_table[i & 3];
}

static void test_macros() {
    CHECK(__CUDA_ARCH__ == 900);
    CHECK(__CUDACC_VER_MAJOR__ == 12);
    CHECK(__CUDACC_VER_MINOR__ == 9);
    CHECK(CUDART_VERSION == 12090);
#if !defined(__CUDACC__) || !defined(__CUDACC_RTC__)
    CHECK(false && "__CUDACC__ / __CUDACC_RTC__");
#endif
    float out[4];
    g_kernel(out, 4);
    CHECK(out[0] == 0.0f + 1.0f + 1.0f);
    CHECK(out[3] == 9.0f + 1.0f + 4.0f);
    CHECK(hd_twice(21) == 42);
    m_counter++;
    CHECK(m_counter == 1);
    CHECK(gk_globaltimer() == 42);
}

// ============================================================================================
// 2. Vector types
// ============================================================================================

#define SA(T, size, align)                                                                    \
    static_assert(sizeof(T) == (size) && alignof(T) == (align), #T);                          \
    static_assert(std::is_trivial<T>::value && std::is_standard_layout<T>::value, #T);
SA(char1, 1, 1) SA(uchar1, 1, 1) SA(char2, 2, 2) SA(uchar2, 2, 2) SA(char3, 3, 1)
SA(uchar3, 3, 1) SA(char4, 4, 4) SA(uchar4, 4, 4)
SA(short1, 2, 2) SA(ushort1, 2, 2) SA(short2, 4, 4) SA(ushort2, 4, 4) SA(short3, 6, 2)
SA(ushort3, 6, 2) SA(short4, 8, 8) SA(ushort4, 8, 8)
SA(int1, 4, 4) SA(uint1, 4, 4) SA(int2, 8, 8) SA(uint2, 8, 8) SA(int3, 12, 4) SA(uint3, 12, 4)
SA(int4, 16, 16) SA(uint4, 16, 16)
SA(long1, sizeof(long), alignof(long)) SA(ulong1, sizeof(long), alignof(long))
SA(long2, 2 * sizeof(long), 2 * sizeof(long)) SA(ulong2, 2 * sizeof(long), 2 * sizeof(long))
SA(long3, 3 * sizeof(long), alignof(long)) SA(long4, 4 * sizeof(long), 16)
SA(ulong4, 4 * sizeof(long), 16)
SA(float1, 4, 4) SA(float2, 8, 8) SA(float3, 12, 4) SA(float4, 16, 16)
SA(longlong1, 8, 8) SA(ulonglong1, 8, 8) SA(longlong2, 16, 16) SA(ulonglong2, 16, 16)
SA(longlong3, 24, 8) SA(ulonglong3, 24, 8) SA(longlong4, 32, 16) SA(ulonglong4, 32, 16)
SA(double1, 8, 8) SA(double2, 16, 16) SA(double3, 24, 8) SA(double4, 32, 16)
SA(double4_32a, 32, 32) SA(longlong4_16a, 32, 16)
#undef SA
static_assert(std::is_aggregate<uint3>::value, "uint3 is a plain aggregate");
static_assert(sizeof(dim3) == 12, "dim3");
static_assert(sizeof(__half) == 2 && alignof(__half) == 2, "__half");
static_assert(sizeof(__half2) == 4 && alignof(__half2) == 4, "__half2");
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4, "bf16");
static_assert(std::is_trivially_copyable<__half>::value &&
                  std::is_trivially_default_constructible<__half>::value,
              "__half is trivial to copy and to default-construct");
static_assert(std::is_trivially_copyable<__nv_bfloat162>::value, "__nv_bfloat162");
static_assert(std::is_same<half, __half>::value && std::is_same<nv_bfloat16, __nv_bfloat16>::value,
              "typedefs");
// dim3 at namespace scope needs no dynamic initialization.
constexpr dim3 k_dim(4, 2);

static void test_vectors() {
    dim3 d;
    CHECK(d.x == 1 && d.y == 1 && d.z == 1);
    dim3 d2(5);
    CHECK(d2.x == 5 && d2.y == 1 && d2.z == 1);
    CHECK(k_dim.x == 4 && k_dim.y == 2 && k_dim.z == 1);
    uint3 u = {7, 8, 9};
    dim3 d3 = u;
    CHECK(d3.x == 7 && d3.y == 8 && d3.z == 9);
    uint3 u2 = dim3(3, 4, 5);
    CHECK(u2.x == 3 && u2.y == 4 && u2.z == 5);
    float4 f = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
    CHECK(f.x == 1.0f && f.y == 2.0f && f.z == 3.0f && f.w == 4.0f);
    int2 i2 = make_int2(-1, 2);
    CHECK(i2.x == -1 && i2.y == 2);
    uchar4 c4 = make_uchar4(1, 2, 3, 255);
    CHECK(c4.w == 255);
    double3 d3v = make_double3(0.5, 1.5, 2.5);
    CHECK(d3v.z == 2.5);
    ulonglong2 ull = make_ulonglong2(1ull << 63, 3);
    CHECK(ull.x == 1ull << 63 && ull.y == 3);
    short3 s3 = make_short3(-1, -2, -3);
    CHECK(s3.z == -3);
    long1 l1 = make_long1(-5);
    CHECK(l1.x == -5);
    char2 ch = make_char2(-128, 127);
    CHECK(ch.x == -128 && ch.y == 127);
}

// ============================================================================================
// 3. Integer intrinsics
// ============================================================================================

static void test_integer() {
    CHECK(__popc(0u) == 0 && __popc(0xffffffffu) == 32 && __popc(0x80000001u) == 2);
    CHECK(__popcll(~0ull) == 64 && __popcll(1ull << 63) == 1);
    CHECK(__clz(0) == 32 && __clz(1) == 31 && __clz(-1) == 0 && __clz(0x00010000) == 15);
    CHECK(__clzll(0) == 64 && __clzll(1) == 63 && __clzll(-1) == 0);
    CHECK(__ffs(0) == 0 && __ffs(1) == 1 && __ffs(8) == 4 && __ffs(INT_MIN) == 32);
    CHECK(__ffsll(0) == 0 && __ffsll(1ll << 40) == 41 && __ffsll(LLONG_MIN) == 64);
    CHECK(__brev(1u) == 0x80000000u && __brev(0x12345678u) == 0x1e6a2c48u);
    CHECK(__brev(0xf0000000u) == 0x0000000fu);
    CHECK(__brevll(1ull) == 1ull << 63 && __brevll(0x0123456789abcdefull) == 0xf7b3d591e6a2c480ull);
    for (uint32_t i = 0; i < 32; i++) CHECK(__brev(1u << i) == 1u << (31 - i));

    // __byte_perm: identity, the other operand, byte reversal, CUB's PRMT example, and the
    // documented selector (only s<2:0> of each nibble; the upper 16 bits unused).
    const unsigned x = 0x03020100u, y = 0x07060504u;
    CHECK(__byte_perm(x, y, 0x3210) == x);
    CHECK(__byte_perm(x, y, 0x7654) == y);
    CHECK(__byte_perm(0x11223344u, 0, 0x0123) == 0x44332211u);
    CHECK(__byte_perm(x, y, 0x7531) == 0x07050301u);
    CHECK(__byte_perm(x, y, 0x0000) == 0x00000000u);
    CHECK(__byte_perm(x, y, 0x4444) == 0x04040404u);
    CHECK(__byte_perm(x, y, 0xb9a8) == __byte_perm(x, y, 0x3120));
    CHECK(__byte_perm(x, y, 0xffff3210u) == x);
    CHECK(__byte_perm(0x8f7f6f5fu, 0, 0x0003) == 0x5f5f5f8fu);
    for (unsigned s = 0; s < 0x10000; s += 0x123) {
        unsigned want = 0;
        const unsigned char in[8] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
        for (int n = 0; n < 4; n++) want |= (unsigned)in[(s >> (4 * n)) & 7] << (8 * n);
        CHECK(__byte_perm(x, y, s) == want);
    }

    // __funnelshift: hi:lo = 0x01234567:89abcdef.
    const unsigned lo = 0x89abcdefu, hi = 0x01234567u;
    CHECK(__funnelshift_l(lo, hi, 0) == hi);
    CHECK(__funnelshift_l(lo, hi, 4) == 0x12345678u);
    CHECK(__funnelshift_l(lo, hi, 36) == 0x12345678u);  // shift & 31
    CHECK(__funnelshift_lc(lo, hi, 36) == lo);          // min(shift, 32)
    CHECK(__funnelshift_lc(lo, hi, 32) == lo);
    CHECK(__funnelshift_lc(lo, hi, 8) == 0x23456789u);
    CHECK(__funnelshift_r(lo, hi, 4) == 0x789abcdeu);
    CHECK(__funnelshift_r(lo, hi, 36) == 0x789abcdeu);
    CHECK(__funnelshift_r(lo, hi, 0) == lo);
    CHECK(__funnelshift_rc(lo, hi, 40) == hi);
    CHECK(__funnelshift_rc(lo, hi, 32) == hi);
    CHECK(__funnelshift_rc(lo, hi, 8) == 0x6789abcdu);
    CHECK(__funnelshift_l(0u, 1u, 31) == 0x80000000u);  // a rotate: both words the same
    CHECK(__funnelshift_l(0x80000001u, 0x80000001u, 1) == 0x00000003u);

    // 24-bit multiplies: bit 23 is the sign for __mul24; the high 8 bits are ignored.
    CHECK(__mul24(0x00800000, 2) == (int)0xff000000u);
    CHECK(__mul24(0x7fffff, 0x7fffff) == (int)0xff000001u);
    CHECK(__mul24((int)0xff000003u, 5) == 15);
    CHECK(__mul24(-3, 7) == -21);
    CHECK(__umul24(0xffffffu, 0xffffffu) == 0xfe000001u);
    CHECK(__umul24(0xff000003u, 5u) == 15u);
    CHECK(__mulhi(INT_MIN, INT_MIN) == 0x40000000);
    CHECK(__mulhi(-1, 1) == -1);
    CHECK(__umulhi(0xffffffffu, 0xffffffffu) == 0xfffffffeu);
    Rng g(1);
    for (int i = 0; i < 200000; i++) {
        const uint64_t a = g.next() >> (g.next() & 63), b = g.next() >> (g.next() & 63);
        DCHECK(__umul64hi(a, b) == (uint64_t)(((unsigned __int128)a * b) >> 64), "%llx %llx",
               (unsigned long long)a, (unsigned long long)b);
        const long long sa = (long long)a * ((g.next() & 1) ? -1 : 1);
        const long long sb = (long long)b * ((g.next() & 1) ? -1 : 1);
        DCHECK(__mul64hi(sa, sb) == (long long)(((__int128)sa * sb) >> 64), "%lld %lld", sa, sb);
        const int ia = (int)g.u32(), ib = (int)g.u32();
        DCHECK(__mulhi(ia, ib) == (int)(((long long)ia * ib) >> 32), "%d %d", ia, ib);
    }
    const long long edges[] = {0, 1, -1, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1, 1ll << 32, -(1ll << 32)};
    for (long long a : edges)
        for (long long b : edges) {
            CHECK(__mul64hi(a, b) == (long long)(((__int128)a * b) >> 64));
            CHECK(__umul64hi((uint64_t)a, (uint64_t)b) ==
                  (uint64_t)(((unsigned __int128)(uint64_t)a * (uint64_t)b) >> 64));
        }

    // Averages (floor for __hadd, +1 then floor for __rhadd), without overflow.
    CHECK(__hadd(INT_MAX, INT_MAX) == INT_MAX && __hadd(INT_MIN, INT_MIN) == INT_MIN);
    CHECK(__hadd(-3, 0) == -2 && __hadd(3, 0) == 1 && __hadd(INT_MAX, INT_MIN) == -1);
    CHECK(__rhadd(-3, 0) == -1 && __rhadd(1, 2) == 2 && __rhadd(INT_MAX, INT_MAX) == INT_MAX);
    CHECK(__uhadd(UINT_MAX, UINT_MAX) == UINT_MAX && __uhadd(UINT_MAX, 0) == 0x7fffffffu);
    CHECK(__urhadd(UINT_MAX, 0) == 0x80000000u && __urhadd(UINT_MAX, UINT_MAX) == UINT_MAX);
    CHECK(__sad(-5, 10, 1) == 16u && __sad(10, -5, 0) == 15u);
    CHECK(__sad(INT_MIN, INT_MAX, 0) == 0xffffffffu);
    CHECK(__usad(3, 10, 5) == 12u && __usad(10, 3, 0) == 7u && __usad(0, UINT_MAX, 0) == UINT_MAX);

    CHECK(__dp4a(0x01020304, 0x01010101, 10) == 20);
    CHECK(__dp4a((int)0xffffffffu, 0x01010101, 0) == -4);
    CHECK(__dp4a(0xffffffffu, 0x01010101u, 0u) == 1020u);
    CHECK(__dp4a(make_char4(-1, 2, -3, 4), make_char4(5, 6, 7, 8), 1) == -5 + 12 - 21 + 32 + 1);
    CHECK(__dp2a_lo((int)0xfffe0003u, 0x00000205, 0) == 3 * 5 + (-2) * 2);
    CHECK(__dp2a_hi((int)0xfffe0003u, 0x02050000, 1) == 3 * 5 + (-2) * 2 + 1);

    // __fns on mask 0b1011 (bits 0, 1, 3).
    CHECK(__fns(0xbu, 0, 1) == 0u && __fns(0xbu, 0, 2) == 1u && __fns(0xbu, 0, 3) == 3u);
    CHECK(__fns(0xbu, 0, 4) == 0xffffffffu);
    CHECK(__fns(0xbu, 2, 0) == 0xffffffffu && __fns(0xbu, 3, 0) == 3u);
    CHECK(__fns(0xbu, 3, -2) == 1u && __fns(0xbu, 2, -1) == 1u && __fns(0xbu, 31, -3) == 0u);
    CHECK(__fns(0x80000000u, 0, 1) == 31u);
}

// ============================================================================================
// 4. Float intrinsics: bit casts, rounding modes, conversions, fast math
// ============================================================================================

static void test_bitcasts() {
    CHECK(__int_as_float(0x3f800000) == 1.0f);
    CHECK(__uint_as_float(0xbf800000u) == -1.0f);
    CHECK(__float_as_int(2.0f) == 0x40000000);
    CHECK(__float_as_uint(-0.0f) == 0x80000000u);
    CHECK(__double_as_longlong(1.0) == 0x3ff0000000000000ll);
    CHECK(__longlong_as_double(0x4000000000000000ll) == 2.0);
    CHECK(__hiloint2double(0x3ff00000, 0) == 1.0);
    CHECK(__double2hiint(-2.0) == (int)0xc0000000u);
    CHECK(__double2loint(__longlong_as_double(0x123456789abcdef0ll)) == (int)0x9abcdef0u);
    CHECK(__double2hiint(__longlong_as_double(0x123456789abcdef0ll)) == 0x12345678);
    static_assert(__float_as_uint(1.0f) == 0x3f800000u, "constexpr bit casts");
}

static void test_rounding_arith() {
    const float one = 1.0f, up1 = std::nextafter(1.0f, 2.0f), dn1 = std::nextafter(1.0f, 0.0f);
    CHECK(__fadd_rn(1.0f, 1e-8f) == one);
    CHECK(__fadd_rz(1.0f, 1e-8f) == one);
    CHECK(__fadd_ru(1.0f, 1e-8f) == up1);
    CHECK(__fadd_rd(1.0f, 1e-8f) == one);
    CHECK(__fadd_rd(1.0f, -1e-8f) == dn1);
    CHECK(__fadd_rz(1.0f, -1e-8f) == dn1);
    CHECK(__fadd_ru(1.0f, -1e-8f) == one);
    CHECK(__fadd_rz(-1.0f, -1e-8f) == -one);
    CHECK(__fadd_rd(-1.0f, -1e-8f) == -up1);
    CHECK(__fsub_ru(1.0f, 1e-8f) == one);
    CHECK(__fsub_rd(1.0f, 1e-8f) == dn1);
    CHECK(__fsub_rz(1.0f, 1e-8f) == dn1);
    CHECK(__fsub_rn(1.0f, 1e-8f) == one);
    const float a = 1.0f + 0x1p-23f;  // a * a = 1 + 2^-22 + 2^-46
    CHECK(__fmul_rn(a, a) == 1.0f + 0x1p-22f);
    CHECK(__fmul_rz(a, a) == 1.0f + 0x1p-22f);
    CHECK(__fmul_rd(a, a) == 1.0f + 0x1p-22f);
    CHECK(__fmul_ru(a, a) == 1.0f + 0x1p-22f + 0x1p-23f);
    CHECK(fbits(__fdiv_rn(1.0f, 3.0f)) == 0x3eaaaaabu);
    CHECK(fbits(__fdiv_rz(1.0f, 3.0f)) == 0x3eaaaaaau);
    CHECK(fbits(__fdiv_ru(1.0f, 3.0f)) == 0x3eaaaaabu);
    CHECK(fbits(__fdiv_rd(1.0f, 3.0f)) == 0x3eaaaaaau);
    CHECK(fbits(__fdiv_rd(-1.0f, 3.0f)) == 0xbeaaaaabu);
    CHECK(fbits(__frcp_rz(3.0f)) == 0x3eaaaaaau && fbits(__frcp_ru(3.0f)) == 0x3eaaaaabu);
    CHECK(fbits(__frcp_rn(3.0f)) == 0x3eaaaaabu && fbits(__frcp_rd(3.0f)) == 0x3eaaaaaau);
    // sqrt(2) = 1.41421356237...: 0x3fb504f3 = 1.41421353816..., 0x3fb504f4 = 1.41421365737...
    CHECK(fbits(__fsqrt_rn(2.0f)) == 0x3fb504f3u && fbits(__fsqrt_rz(2.0f)) == 0x3fb504f3u);
    CHECK(fbits(__fsqrt_ru(2.0f)) == 0x3fb504f4u && fbits(__fsqrt_rd(2.0f)) == 0x3fb504f3u);
    CHECK(__frsqrt_rn(4.0f) == 0.5f && __frsqrt_rn(0.25f) == 2.0f);
    // A fused multiply-add rounds once: (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly.
    const float b = 1.0f + 0x1p-12f;
    CHECK(__fmaf_rn(b, b, -1.0f) == 0x1p-11f + 0x1p-24f);
    CHECK(__fmaf_ieee_rn(b, b, -1.0f) == 0x1p-11f + 0x1p-24f);
    CHECK(__fadd_rn(__fmul_rn(b, b), -1.0f) == 0x1p-11f);  // never contracted
    CHECK(__fmaf_ru(1.0f, 1.0f, 1e-30f) == up1 && __fmaf_rz(1.0f, 1.0f, 1e-30f) == one);
    CHECK(__fmaf_rd(1.0f, 1.0f, -1e-30f) == dn1 && __fmaf_rn(1.0f, 1.0f, -1e-30f) == one);
    // Overflow: to infinity or to the largest finite value, as the mode says.
    CHECK(__fmul_rz(FLT_MAX, 2.0f) == FLT_MAX && __fmul_ru(FLT_MAX, 2.0f) == INFINITY);
    CHECK(__fmul_rd(FLT_MAX, 2.0f) == FLT_MAX && __fmul_rd(-FLT_MAX, 2.0f) == -INFINITY);
    // Subnormal results.
    CHECK(__fmul_ru(0x1p-149f, 0.5f) == 0x1p-149f && __fmul_rz(0x1p-149f, 0.5f) == 0.0f);
    CHECK(std::signbit(__fmul_rd(-0x1p-149f, 0.5f)) && __fmul_rd(-0x1p-149f, 0.5f) == -0x1p-149f);

    const double dup1 = std::nextafter(1.0, 2.0), ddn1 = std::nextafter(1.0, 0.0);
    CHECK(__dadd_rn(1.0, 1e-20) == 1.0 && __dadd_rz(1.0, 1e-20) == 1.0);
    CHECK(__dadd_ru(1.0, 1e-20) == dup1 && __dadd_rd(1.0, -1e-20) == ddn1);
    CHECK(__dsub_rz(1.0, 1e-20) == ddn1 && __dsub_ru(1.0, 1e-20) == 1.0);
    CHECK(__dmul_ru(1.0 + 0x1p-52, 1.0 + 0x1p-52) == 1.0 + 0x1p-51 + 0x1p-52);
    CHECK(__dmul_rz(1.0 + 0x1p-52, 1.0 + 0x1p-52) == 1.0 + 0x1p-51);
    CHECK(__ddiv_rz(1.0, 3.0) == __ddiv_rd(1.0, 3.0) && __ddiv_ru(1.0, 3.0) == std::nextafter(__ddiv_rd(1.0, 3.0), 1.0));
    CHECK(__ddiv_rn(1.0, 3.0) == 1.0 / 3.0 && __drcp_rn(3.0) == 1.0 / 3.0);
    CHECK(__drcp_rd(3.0) == __ddiv_rd(1.0, 3.0) && __drcp_ru(3.0) == __ddiv_ru(1.0, 3.0));
    CHECK(__dsqrt_rn(4.0) == 2.0 && __dsqrt_rz(2.0) == __dsqrt_rd(2.0));
    CHECK(__dsqrt_ru(2.0) == std::nextafter(__dsqrt_rd(2.0), 3.0));
    CHECK(__dsqrt_rd(2.0) * (long double)__dsqrt_rd(2.0) < 2.0L);
    CHECK(__dsqrt_ru(2.0) * (long double)__dsqrt_ru(2.0) > 2.0L);
    CHECK(__fma_ru(1.0, 1.0, 1e-300) == dup1 && __fma_rd(1.0, 1.0, -1e-300) == ddn1);
    CHECK(__fma_rz(1.0, 1.0, -1e-300) == ddn1 && __fma_rn(1.0, 1.0, 1e-300) == 1.0);
    const double c = 1.0 + 0x1p-27;
    CHECK(__fma_rn(c, c, -1.0) == 0x1p-26 + 0x1p-54);
    CHECK(__dadd_rn(__dmul_rn(c, c), -1.0) == 0x1p-26);
    CHECK(std::fegetround() == FE_TONEAREST);  // the mode is restored

    // Dense: against the exact result (x87 long double for float operands, __float128 for
    // double operands), rounded by ref_round.
    Rng g(7);
    g_group_failures = 0;
    for (int i = 0; i < 60000; i++) {
        const uint32_t e = 100 + (g.u32() % 60);
        const float x = rand_float_exp(g, e), y = rand_float_exp(g, e - 10 + g.u32() % 21);
        const float z = rand_float_exp(g, e + ((fbits(y) >> 23) & 0xff) - 127 - 5 + g.u32() % 11);
        const long double X = x, Y = y, Z = z;
        for (int m = 0; m < 4; m++) {
            float got_add, got_sub, got_mul, got_fma;
            switch (m) {
            case 0: got_add = __fadd_rn(x, y); got_sub = __fsub_rn(x, y); got_mul = __fmul_rn(x, y); got_fma = __fmaf_rn(x, y, z); break;
            case 1: got_add = __fadd_rz(x, y); got_sub = __fsub_rz(x, y); got_mul = __fmul_rz(x, y); got_fma = __fmaf_rz(x, y, z); break;
            case 2: got_add = __fadd_ru(x, y); got_sub = __fsub_ru(x, y); got_mul = __fmul_ru(x, y); got_fma = __fmaf_ru(x, y, z); break;
            default: got_add = __fadd_rd(x, y); got_sub = __fsub_rd(x, y); got_mul = __fmul_rd(x, y); got_fma = __fmaf_rd(x, y, z); break;
            }
            DCHECK(same_float(got_add, ref_round<float>(X + Y, m)), "%a + %a %s", x, y, MODE_NAME[m]);
            DCHECK(same_float(got_sub, ref_round<float>(X - Y, m)), "%a - %a %s", x, y, MODE_NAME[m]);
            DCHECK(same_float(got_mul, ref_round<float>(X * Y, m)), "%a * %a %s", x, y, MODE_NAME[m]);
            DCHECK(same_float(got_fma, ref_round<float>(X * Y + Z, m)), "fma %a %a %a %s", x, y, z, MODE_NAME[m]);
        }
    }
#if defined(__SIZEOF_FLOAT128__)
    for (int i = 0; i < 30000; i++) {
        const double x = bitsd((g.next() & 0x800fffffffffffffull) | ((uint64_t)(900 + g.u32() % 200) << 52));
        const double y = bitsd((g.next() & 0x800fffffffffffffull) | ((uint64_t)(((dbits(x) >> 52) & 0x7ff) - 20 + g.u32() % 41) << 52));
        const __float128 X = x, Y = y;
        for (int m = 0; m < 4; m++) {
            double got_add, got_mul, got_div;
            switch (m) {
            case 0: got_add = __dadd_rn(x, y); got_mul = __dmul_rn(x, y); got_div = __ddiv_rn(x, y); break;
            case 1: got_add = __dadd_rz(x, y); got_mul = __dmul_rz(x, y); got_div = __ddiv_rz(x, y); break;
            case 2: got_add = __dadd_ru(x, y); got_mul = __dmul_ru(x, y); got_div = __ddiv_ru(x, y); break;
            default: got_add = __dadd_rd(x, y); got_mul = __dmul_rd(x, y); got_div = __ddiv_rd(x, y); break;
            }
            DCHECK(same_double(got_add, ref_round<double>(X + Y, m)), "%a + %a %s", x, y, MODE_NAME[m]);
            DCHECK(same_double(got_mul, ref_round<double>(X * Y, m)), "%a * %a %s", x, y, MODE_NAME[m]);
            // The quotient's direction: got_div is on the mode's side of x / y and its
            // neighbour on that side is past it. cmp(c) is the sign of c - x / y.
            const auto cmp = [&](double c) {
                const __float128 t = (__float128)c * Y - X;  // exact
                return t == 0 ? 0 : ((t > 0) == (y > 0) ? 1 : -1);
            };
            const bool q_pos = (x > 0) == (y > 0);
            const bool up = m == 2 || (m == 1 && !q_pos);  // the result is >= x / y
            if (m != 0) {
                const double beyond = std::nextafter(got_div, up ? -INFINITY : INFINITY);
                DCHECK(up ? (cmp(got_div) >= 0 && cmp(beyond) < 0) : (cmp(got_div) <= 0 && cmp(beyond) > 0),
                       "%a / %a = %a %s", x, y, got_div, MODE_NAME[m]);
            }
        }
    }
#endif
    CHECK(std::fegetround() == FE_TONEAREST);
}

static void test_conversions() {
    const float nanf_ = NAN;
    // Float -> int: round in the mode, saturate, NaN per PTX cvt.
    CHECK(__float2int_rn(2.5f) == 2 && __float2int_rn(3.5f) == 4 && __float2int_rn(-2.5f) == -2);
    CHECK(__float2int_rn(-0.5f) == 0 && __float2int_rn(0.5000001f) == 1);
    CHECK(__float2int_rz(-2.7f) == -2 && __float2int_ru(-2.7f) == -2 && __float2int_rd(-2.3f) == -3);
    CHECK(__float2int_ru(2.3f) == 3 && __float2int_rd(2.7f) == 2 && __float2int_rz(2.7f) == 2);
    CHECK(__float2int_rn(nanf_) == 0 && __float2int_rz(nanf_) == 0 && __float2int_ru(-nanf_) == 0);
    CHECK(__float2int_rn(INFINITY) == INT_MAX && __float2int_rz(-INFINITY) == INT_MIN);
    CHECK(__float2int_rn(3e9f) == INT_MAX && __float2int_rd(-3e9f) == INT_MIN);
    CHECK(__float2int_rz(2147483520.0f) == 2147483520 && __float2int_rz(-2147483648.0f) == INT_MIN);
    CHECK(__float2int_rn(2147483648.0f) == INT_MAX);
    CHECK(__float2uint_rn(-0.4f) == 0u && __float2uint_rn(-1.0f) == 0u && __float2uint_rd(-0.1f) == 0u);
    CHECK(__float2uint_rn(5e9f) == UINT_MAX && __float2uint_rz(4294967040.0f) == 4294967040u);
    CHECK(__float2uint_rn(nanf_) == 0u && __float2uint_ru(INFINITY) == UINT_MAX);
    CHECK(__float2uint_rn(2.5f) == 2u && __float2uint_rn(3.5f) == 4u);
    CHECK(__float2ll_rn(nanf_) == LLONG_MIN && __float2ll_rz(1e19f) == LLONG_MAX);
    CHECK(__float2ll_rz(-1e19f) == LLONG_MIN && __float2ll_rn(-9.3e18f) == LLONG_MIN);
    CHECK(__float2ll_ru(1.5f) == 2 && __float2ll_rd(-1.5f) == -2 && __float2ll_rn(-1.5f) == -2);
    CHECK(__float2ll_rz(0x1p62f) == (1ll << 62));
    CHECK(__float2ull_rz(nanf_) == 0x8000000000000000ull && __float2ull_rn(2e19f) == ULLONG_MAX);
    CHECK(__float2ull_rn(-5.0f) == 0ull && __float2ull_rz(0x1p63f) == 0x8000000000000000ull);
    CHECK(__double2int_rn(NAN) == INT_MIN && __double2uint_rn(NAN) == 0x80000000u);
    CHECK(__double2ll_rz(NAN) == LLONG_MIN && __double2ull_rz(NAN) == 0x8000000000000000ull);
    CHECK(__double2int_rn(2147483647.4) == INT_MAX && __double2int_rn(2147483646.5) == 2147483646);
    CHECK(__double2int_rn(2147483647.5) == INT_MAX && __double2int_rd(-2147483648.5) == INT_MIN);
    CHECK(__double2int_rz(-2147483648.9) == INT_MIN && __double2int_ru(-2147483648.9) == INT_MIN);
    CHECK(__double2int_rn(0.5) == 0 && __double2int_rn(1.5) == 2 && __double2int_rn(-1.5) == -2);
    CHECK(__double2int_rn(2.5) == 2 && __double2int_rn(-2.5) == -2 && __double2int_ru(2.000001) == 3);
    CHECK(__double2uint_ru(4294967295.2) == UINT_MAX && __double2uint_rz(4294967295.9) == UINT_MAX);
    CHECK(__double2uint_rn(-0.5) == 0u && __double2uint_rd(-1e-300) == 0u);
    CHECK(__double2ll_rn(9.3e18) == LLONG_MAX && __double2ll_rn(-9223372036854775808.0) == LLONG_MIN);
    CHECK(__double2ll_rz(9223372036854774784.0) == 9223372036854774784ll);
    CHECK(__double2ull_rn(18446744073709551616.0) == ULLONG_MAX);
    CHECK(__double2ull_rn(18446744073709549568.0) == 18446744073709549568ull);
    CHECK(__double2ull_ru(0.25) == 1ull && __double2ull_rd(0.75) == 0ull);

    // Int -> float in the four modes.
    CHECK(__int2float_rn(16777217) == 16777216.0f && __int2float_rn(16777219) == 16777220.0f);
    CHECK(__int2float_rz(16777219) == 16777218.0f && __int2float_ru(16777217) == 16777218.0f);
    CHECK(__int2float_rd(-16777217) == -16777218.0f && __int2float_rz(-16777217) == -16777216.0f);
    CHECK(__int2float_rn(INT_MIN) == -2147483648.0f && __int2float_rd(INT_MAX) == 2147483520.0f);
    CHECK(__uint2float_ru(0xffffffffu) == 4294967296.0f && __uint2float_rz(0xffffffffu) == 4294967040.0f);
    CHECK(__ull2float_rd(ULLONG_MAX) == 18446742974197923840.0f && __ull2float_ru(ULLONG_MAX) == 0x1p64f);
    CHECK(__ll2float_rn(LLONG_MIN) == -0x1p63f && __ll2float_rz(LLONG_MAX) == 0x1.fffffep62f);
    CHECK(__ll2double_rn((1ll << 53) + 1) == 0x1p53 && __ll2double_ru((1ll << 53) + 1) == 0x1p53 + 2);
    CHECK(__ll2double_rd(-(1ll << 53) - 1) == -0x1p53 - 2 && __ll2double_rz(-(1ll << 53) - 1) == -0x1p53);
    CHECK(__ull2double_rz(ULLONG_MAX) == 0x1p64 - 2048 && __ull2double_ru(ULLONG_MAX) == 0x1p64);
    CHECK(__ull2double_rn(ULLONG_MAX) == 0x1p64);
    CHECK(__int2double_rn(INT_MIN) == -2147483648.0 && __uint2double_rn(UINT_MAX) == 4294967295.0);
    CHECK(__int2float_rz(0) == 0.0f && !std::signbit(__int2float_rd(0)));

    // Double -> float.
    CHECK(__double2float_rz(1.0 + 0x1p-30) == 1.0f && __double2float_ru(1.0 + 0x1p-30) == 1.0f + 0x1p-23f);
    CHECK(__double2float_rd(-1.0 - 0x1p-30) == -1.0f - 0x1p-23f && __double2float_rn(1.0 + 0x1p-30) == 1.0f);
    CHECK(__double2float_rn(DBL_MAX) == INFINITY && __double2float_rz(DBL_MAX) == FLT_MAX);
    CHECK(__double2float_ru(-DBL_MAX) == -FLT_MAX && __double2float_rd(-DBL_MAX) == -INFINITY);
    CHECK(__double2float_rn(1e-46) == 0.0f && __double2float_ru(1e-46) == 0x1p-149f);
    CHECK(std::isnan(__double2float_rn(NAN)) && __double2float_rz(-INFINITY) == -INFINITY);
    CHECK(std::signbit(__double2float_rn(-1e-300)) && __double2float_rn(-1e-300) == 0.0f);

    // Dense: the integer and double conversions against the hardware's own conversions under
    // fesetround, the float -> integer ones against x87 rounding.
    Rng g(11);
    g_group_failures = 0;
    for (int i = 0; i < 40000; i++) {
        const long long v = (long long)(g.next() >> (g.next() % 64)) * ((g.next() & 1) ? -1 : 1);
        const unsigned long long uv = g.next() >> (g.next() % 64);
        const int iv = (int)g.u32() >> (g.u32() % 32);
        const unsigned int uiv = g.u32() >> (g.u32() % 32);
        const double dv = bitsd((g.next() & 0x800fffffffffffffull) | ((uint64_t)(1023 - 160 + g.u32() % 320) << 52));
        for (int m = 0; m < 4; m++) {
            std::fesetround(MODES[m]);
            volatile long long vv = v;
            volatile unsigned long long vuv = uv;
            volatile int viv = iv;
            volatile unsigned int vuiv = uiv;
            volatile double vdv = dv;
            const float rf_ll = (float)vv, rf_ull = (float)vuv, rf_i = (float)viv, rf_u = (float)vuiv;
            const double rd_ll = (double)vv, rd_ull = (double)vuv;
            const float rf_d = (float)vdv;
            std::fesetround(FE_TONEAREST);
            float gf_ll, gf_ull, gf_i, gf_u, gf_d;
            double gd_ll, gd_ull;
            switch (m) {
            case 0: gf_ll = __ll2float_rn(v); gf_ull = __ull2float_rn(uv); gf_i = __int2float_rn(iv); gf_u = __uint2float_rn(uiv); gd_ll = __ll2double_rn(v); gd_ull = __ull2double_rn(uv); gf_d = __double2float_rn(dv); break;
            case 1: gf_ll = __ll2float_rz(v); gf_ull = __ull2float_rz(uv); gf_i = __int2float_rz(iv); gf_u = __uint2float_rz(uiv); gd_ll = __ll2double_rz(v); gd_ull = __ull2double_rz(uv); gf_d = __double2float_rz(dv); break;
            case 2: gf_ll = __ll2float_ru(v); gf_ull = __ull2float_ru(uv); gf_i = __int2float_ru(iv); gf_u = __uint2float_ru(uiv); gd_ll = __ll2double_ru(v); gd_ull = __ull2double_ru(uv); gf_d = __double2float_ru(dv); break;
            default: gf_ll = __ll2float_rd(v); gf_ull = __ull2float_rd(uv); gf_i = __int2float_rd(iv); gf_u = __uint2float_rd(uiv); gd_ll = __ll2double_rd(v); gd_ull = __ull2double_rd(uv); gf_d = __double2float_rd(dv); break;
            }
            DCHECK(same_float(gf_ll, rf_ll), "ll2float %lld %s", v, MODE_NAME[m]);
            DCHECK(same_float(gf_ull, rf_ull), "ull2float %llu %s", uv, MODE_NAME[m]);
            DCHECK(same_float(gf_i, rf_i), "int2float %d %s", iv, MODE_NAME[m]);
            DCHECK(same_float(gf_u, rf_u), "uint2float %u %s", uiv, MODE_NAME[m]);
            DCHECK(same_double(gd_ll, rd_ll), "ll2double %lld %s", v, MODE_NAME[m]);
            DCHECK(same_double(gd_ull, rd_ull), "ull2double %llu %s", uv, MODE_NAME[m]);
            DCHECK(same_float(gf_d, rf_d), "double2float %a %s", dv, MODE_NAME[m]);
        }
    }
    for (int i = 0; i < 40000; i++) {
        // Around the integer ranges and around halves.
        float f;
        const uint32_t kind = g.u32() % 4;
        if (kind == 0) f = rand_float_exp(g, 120 + g.u32() % 70);
        else if (kind == 1) f = (float)((int)(g.u32() % 2001) - 1000) + 0.5f;
        else if (kind == 2) f = bitsf((g.u32() & 0x80000000u) | (0x4f000000u + (g.u32() % 64) - 32));
        else f = bitsf((g.u32() & 0x80000000u) | (0x5f000000u + (g.u32() % 64) - 32));
        const double d = kind == 0 ? (double)f * (1.0 + (double)(g.u32() % 1000) * 1e-12) : (double)f;
        for (int m = 0; m < 4; m++) {
            int gi; unsigned gu; long long gl; unsigned long long gul; int di; unsigned du; long long dl; unsigned long long dul;
            switch (m) {
            case 0: gi = __float2int_rn(f); gu = __float2uint_rn(f); gl = __float2ll_rn(f); gul = __float2ull_rn(f); di = __double2int_rn(d); du = __double2uint_rn(d); dl = __double2ll_rn(d); dul = __double2ull_rn(d); break;
            case 1: gi = __float2int_rz(f); gu = __float2uint_rz(f); gl = __float2ll_rz(f); gul = __float2ull_rz(f); di = __double2int_rz(d); du = __double2uint_rz(d); dl = __double2ll_rz(d); dul = __double2ull_rz(d); break;
            case 2: gi = __float2int_ru(f); gu = __float2uint_ru(f); gl = __float2ll_ru(f); gul = __float2ull_ru(f); di = __double2int_ru(d); du = __double2uint_ru(d); dl = __double2ll_ru(d); dul = __double2ull_ru(d); break;
            default: gi = __float2int_rd(f); gu = __float2uint_rd(f); gl = __float2ll_rd(f); gul = __float2ull_rd(f); di = __double2int_rd(d); du = __double2uint_rd(d); dl = __double2ll_rd(d); dul = __double2ull_rd(d); break;
            }
            DCHECK(gi == ref_f2i<int>(f, m, 0), "float2int %a %s", f, MODE_NAME[m]);
            DCHECK(gu == ref_f2i<unsigned>(f, m, 0u), "float2uint %a %s", f, MODE_NAME[m]);
            DCHECK(gl == ref_f2i<long long>(f, m, LLONG_MIN), "float2ll %a %s", f, MODE_NAME[m]);
            DCHECK(gul == ref_f2i<unsigned long long>(f, m, 1ull << 63), "float2ull %a %s", f, MODE_NAME[m]);
            DCHECK(di == ref_f2i<int>(d, m, INT_MIN), "double2int %a %s", d, MODE_NAME[m]);
            DCHECK(du == ref_f2i<unsigned>(d, m, 1u << 31), "double2uint %a %s", d, MODE_NAME[m]);
            DCHECK(dl == ref_f2i<long long>(d, m, LLONG_MIN), "double2ll %a %s", d, MODE_NAME[m]);
            DCHECK(dul == ref_f2i<unsigned long long>(d, m, 1ull << 63), "double2ull %a %s", d, MODE_NAME[m]);
        }
    }
    CHECK(std::fegetround() == FE_TONEAREST);
}

static void test_fast_math() {
    CHECK(__fdividef(1.0f, 4.0f) == 0.25f && fdividef(3.0f, 2.0f) == 1.5f);
    CHECK(__fdividef(1.0f, 0x1p127f) == 0.0f && __fdividef(-1.0f, 0x1.8p126f) == 0.0f);
    CHECK(std::isnan(__fdividef(INFINITY, 0x1p127f)) && __fdividef(1.0f, 0x1p126f) == 0x1p-126f);
    CHECK(__saturatef(-1.0f) == 0.0f && __saturatef(2.0f) == 1.0f && __saturatef(0.5f) == 0.5f);
    CHECK(__saturatef(NAN) == 0.0f && !std::signbit(__saturatef(NAN)) && __saturatef(1.0f) == 1.0f);
    CHECK(!std::signbit(__saturatef(-0.0f)) && __saturatef(INFINITY) == 1.0f);
    CHECK(close_rel(__expf(1.0f), 2.718281828459045, 1e-6) && __exp10f(2.0f) == 100.0f);
    CHECK(__logf(1.0f) == 0.0f && __log2f(8.0f) == 3.0f && __log10f(1000.0f) == 3.0f);
    CHECK(close_rel(__sinf(0.5f), std::sin(0.5), 1e-6) && close_rel(__cosf(0.5f), std::cos(0.5), 1e-6));
    CHECK(close_rel(__tanf(0.5f), std::tan(0.5), 1e-6) && __powf(2.0f, 10.0f) == 1024.0f);
    CHECK(close_rel(__tanhf(0.5f), std::tanh(0.5), 1e-6) && __exp2f(3.0f) == 8.0f);
    float s, c;
    __sincosf(0.25f, &s, &c);
    CHECK(close_rel(s, std::sin(0.25), 1e-6) && close_rel(c, std::cos(0.25), 1e-6));
}

// ============================================================================================
// 5. Math functions, global overloads, min/max
// ============================================================================================

static void test_math() {
    CHECK(rsqrtf(4.0f) == 0.5f && rsqrt(0.25) == 2.0 && rsqrt(4.0f) == 0.5f);
    CHECK(rsqrt(0.0) == INFINITY && rsqrt(-0.0) == -INFINITY && std::isnan(rsqrt(-1.0)));
    CHECK(rsqrt(INFINITY) == 0.0 && rsqrtf(0.0f) == INFINITY);
    CHECK(rcbrtf(8.0f) == 0.5f && close_rel(rcbrt(-27.0), -1.0 / 3.0, 1e-15) && rcbrt(0.0) == INFINITY);
    CHECK(sinpi(1.0) == 0.0 && !std::signbit(sinpi(1.0)) && std::signbit(sinpi(-1.0)));
    CHECK(!std::signbit(sinpi(2.0)) && std::signbit(sinpi(-0.0)) && std::signbit(sinpi(-4.0)));
    CHECK(sinpi(0.5) == 1.0 && sinpi(1.5) == -1.0 && sinpi(-0.5) == -1.0 && sinpi(1e300) == 0.0);
    CHECK(close_rel(sinpi(0.25), 0.70710678118654752, 1e-15) && close_rel(sinpi(1.0 / 6.0), 0.5, 1e-15));
    CHECK(close_rel(sinpi(2.75), 0.70710678118654752, 1e-15) && close_rel(sinpi(-1.25), 0.70710678118654752, 1e-15));
    CHECK(std::isnan(sinpi(INFINITY)) && std::isnan(cospi(-INFINITY)) && std::isnan(sinpi(NAN)));
    CHECK(cospi(0.5) == 0.0 && !std::signbit(cospi(0.5)) && !std::signbit(cospi(-1.5)));
    CHECK(cospi(1.0) == -1.0 && cospi(-2.0) == 1.0 && cospi(1e20) == 1.0 && cospi(0.0) == 1.0);
    CHECK(close_rel(cospi(1.0 / 3.0), 0.5, 1e-15) && close_rel(cospi(0.75), -0.70710678118654752, 1e-15));
    CHECK(sinpif(0.5f) == 1.0f && cospif(1.0f) == -1.0f && close_rel(sinpif(1.0f / 6.0f), 0.5, 1e-6));
    CHECK(sinpi(0.5f) == 1.0f && cospi(2.0f) == 1.0f);
    for (int k = -40; k <= 40; k++) {
        const double x = k * 0.0625;
        CHECK(close_rel(sinpi(x), std::sin(M_PI * x), 1e-14) || std::fabs(sinpi(x) - std::sin(M_PI * x)) < 1e-15);
        CHECK(close_rel(cospi(x), std::cos(M_PI * x), 1e-14) || std::fabs(cospi(x) - std::cos(M_PI * x)) < 1e-15);
    }
    double ds, dc;
    sincospi(0.25, &ds, &dc);
    CHECK(close_rel(ds, 0.70710678118654752, 1e-15) && close_rel(dc, 0.70710678118654752, 1e-15));
    float fs, fc;
    sincospif(1.0f, &fs, &fc);
    CHECK(fs == 0.0f && fc == -1.0f);
    sincosf(0.5f, &fs, &fc);
    CHECK(close_rel(fs, std::sin(0.5), 1e-6) && close_rel(fc, std::cos(0.5), 1e-6));
    sincos(0.5, &ds, &dc);
    CHECK(ds == std::sin(0.5) && dc == std::cos(0.5));
    sincos(0.5f, &fs, &fc);
    CHECK(close_rel(fs, std::sin(0.5), 1e-6));
    CHECK(close_rel(exp10(3.0), 1000.0, 2.3e-16) && close_rel(exp10f(2.0f), 100.0, 1.2e-7));
    CHECK(close_rel(exp10(-1.0f), 0.1, 1.2e-7));
    static_assert(std::is_same<decltype(exp10(1.0f)), float>::value, "exp10(float)");

    // Normal distribution and error function inverses.
    CHECK(normcdf(0.0) == 0.5 && close_rel(normcdf(1.96), 0.9750021048517795, 1e-14));
    CHECK(close_rel(normcdf(-1.96), 0.024997895148220435, 1e-13));
    CHECK(close_rel(normcdf(-10.0), 7.619853024160527e-24, 1e-12));
    CHECK(normcdf(40.0) == 1.0 && normcdf(-40.0) == 0.0 && normcdf(INFINITY) == 1.0);
    CHECK(close_rel(normcdff(1.0f), 0.8413447460685429, 1e-6) && close_rel(normcdf(1.0f), 0.8413447f, 1e-6));
    CHECK(close_rel(normcdfinv(0.975), 1.959963984540054, 1e-14) && normcdfinv(0.5) == 0.0);
    CHECK(normcdfinv(0.0) == -INFINITY && normcdfinv(1.0) == INFINITY && std::isnan(normcdfinv(1.5)));
    CHECK(close_rel(normcdfinvf(0.975f), 1.959963984540054, 1e-6));
    CHECK(close_rel(erfinv(0.5), 0.4769362762044699, 1e-15) && close_rel(erfinv(-0.5), -0.4769362762044699, 1e-15));
    CHECK(erfinv(1.0) == INFINITY && erfinv(-1.0) == -INFINITY && erfinv(0.0) == 0.0);
    CHECK(std::signbit(erfinv(-0.0)) && std::isnan(erfinv(1.5)) && std::isnan(erfinv(NAN)));
    CHECK(close_rel(erfinvf(0.5f), 0.4769362762044699, 1e-6) && close_rel(erfinv(0.5f), 0.47693628f, 1e-6));
    CHECK(erfcinv(1.0) == 0.0 && erfcinv(0.0) == INFINITY && erfcinv(2.0) == -INFINITY);
    CHECK(std::isnan(erfcinv(-0.1)) && std::isnan(erfcinv(2.1)));
    CHECK(close_rel(erfcinv(0.5), 0.4769362762044699, 1e-15) && close_rel(erfcinv(1.5), -0.4769362762044699, 1e-15));
    CHECK(close_rel(erfcinvf(0.5f), 0.4769362762044699, 1e-6));
    g_group_failures = 0;
    for (int i = 1; i < 2000; i++) {
        const double y = -1.0 + i / 1000.0;  // (-1, 1)
        const double x = erfinv(y);
        DCHECK(close_rel(std::erf(x), y, 4e-16) || std::fabs(std::erf(x) - y) < 3e-16, "erfinv(%a) = %a", y, x);
    }
    for (int k = 1; k <= 320; k++) {
        const double y = std::pow(10.0, -k * 0.99);  // down to ~1e-317 (subnormal)
        const double x = erfcinv(y);
        // erfc's condition number at x is about 2 x^2: allow a few ulps of x through it.
        DCHECK(close_rel(std::erfc(x), y, std::fmax(1e-13, 8.0 * x * x * DBL_EPSILON)),
               "erfcinv(%a) = %a: erfc = %a", y, x, std::erfc(x));
        const double y2 = 2.0 - y, y1 = 2.0 - y2;  // y1: the y that 2 - y2 is, exactly
        const double z = erfcinv(y2);
        DCHECK(y1 == 0.0 || close_rel(z, -erfcinv(y1), 1e-15), "erfcinv(%a) = %a", y2, z);
        const double p = y / 2.0, q = normcdfinv(p);
        DCHECK(close_rel(normcdf(q), p, 1e-12), "normcdfinv(%a) = %a", p, q);
    }
    // erfcx against long double exp(x^2) erfc(x).
    for (int i = -50; i <= 600; i++) {
        const double x = i * 0.0625;
        const long double X = x;
        const double want = (double)(std::exp(X * X) * std::erfc(X));
        DCHECK(close_rel(erfcx(x), want, 2e-14), "erfcx(%a) = %a, want %a", x, erfcx(x), want);
    }
    CHECK(erfcx(0.0) == 1.0 && close_rel(erfcx(1.0), 0.42758357615580705, 1e-15));
    CHECK(close_rel(erfcx(1e6), 1.0 / (1e6 * std::sqrt(M_PI)), 1e-12) && erfcx(INFINITY) == 0.0);
    CHECK(erfcx(-30.0) == INFINITY && close_rel(erfcxf(2.0f), 0.2553956763105057, 1e-6));
    // Bessel I0, I1 against libstdc++'s std::cyl_bessel_i (x >= 0) and by symmetry.
    for (int i = 0; i <= 400; i++) {
        const double x = i * 0.25;
        DCHECK(close_rel(cyl_bessel_i0(x), std::cyl_bessel_i(0.0, x), 1e-13), "i0(%g)", x);
        DCHECK(close_rel(cyl_bessel_i1(x), std::cyl_bessel_i(1.0, x), 1e-13) || x == 0, "i1(%g)", x);
        DCHECK(cyl_bessel_i0(-x) == cyl_bessel_i0(x) && cyl_bessel_i1(-x) == -cyl_bessel_i1(x), "sym %g", x);
    }
    CHECK(close_rel(cyl_bessel_i0f(1.0f), 1.2660658777520082, 1e-6) && close_rel(cyl_bessel_i1f(1.0f), 0.5651591039924851, 1e-6));
    CHECK(cyl_bessel_i1(0.0) == 0.0 && cyl_bessel_i0(0.0) == 1.0 && cyl_bessel_i0(800.0) == INFINITY);
#if defined(__USE_MISC)
    static_assert(std::is_same<decltype(j0(1.0f)), float>::value && std::is_same<decltype(j0(1.0)), double>::value, "j0");
    CHECK(j0(1.0f) == j0f(1.0f) && j1(1.0f) == j1f(1.0f) && jn(2, 1.0f) == jnf(2, 1.0f) && y0(1.0f) == y0f(1.0f));
    CHECK(y1(1.0f) == y1f(1.0f) && yn(2, 1.0f) == ynf(2, 1.0f) && close_rel(j0(1.0), 0.7651976865579666, 1e-15));
#endif
    CHECK(norm3df(3.0f, 4.0f, 12.0f) == 13.0f && rnorm3df(3.0f, 4.0f, 12.0f) == 1.0f / 13.0f);
    CHECK(norm3d(3.0, 4.0, 12.0) == 13.0 && close_rel(rnorm3d(3.0, 4.0, 12.0), 1.0 / 13.0, 1e-16));
    CHECK(norm4df(1.0f, 2.0f, 2.0f, 4.0f) == 5.0f && norm4d(1.0, 2.0, 2.0, 4.0) == 5.0);
    CHECK(rnorm4df(1.0f, 2.0f, 2.0f, 4.0f) == 0.2f && rnorm4d(1.0, 2.0, 2.0, 4.0) == 0.2);
    const float fv[3] = {2.0f, 3.0f, 6.0f};
    const double dv[4] = {1.0, 2.0, 2.0, 4.0};
    CHECK(normf(3, fv) == 7.0f && rnormf(3, fv) == 1.0f / 7.0f && norm(4, dv) == 5.0 && rnorm(4, dv) == 0.2);
    CHECK(rhypotf(3.0f, 4.0f) == 0.2f && rhypot(3.0, 4.0) == 0.2 && norm3d(1e300, 1e300, 0) == 1e300 * std::sqrt(2.0));

    // The float overloads at global scope, as CUDA code calls them.
    static_assert(std::is_same<decltype(sqrt(2.0f)), float>::value, "sqrt(float)");
    static_assert(std::is_same<decltype(exp(2.0f)), float>::value, "exp(float)");
    static_assert(std::is_same<decltype(fabs(2.0f)), float>::value, "fabs(float)");
    static_assert(std::is_same<decltype(pow(2.0f, 3)), float>::value, "pow(float, int)");
    static_assert(std::is_same<decltype(pow(2.0f, 3.0f)), float>::value, "pow(float, float)");
    static_assert(std::is_same<decltype(abs(2.0f)), float>::value, "abs(float)");
    static_assert(std::is_same<decltype(rsqrt(2.0f)), float>::value, "rsqrt(float)");
    static_assert(std::is_same<decltype(erfinv(0.5f)), float>::value, "erfinv(float)");
    CHECK(sqrt(2.0f) == sqrtf(2.0f) && pow(2.0f, 3) == 8.0f && pow(2.0, 3) == 8.0);
    CHECK(abs(-2.5f) == 2.5f && fabs(-1.5) == 1.5 && fminf(1.0f, NAN) == 1.0f && fmaxf(-1.0f, 2.0f) == 2.0f);
    CHECK(copysignf(1.0f, -0.0f) == -1.0f && expf(0.0f) == 1.0f);
    CHECK(isnan(NAN) && isnan((double)NAN) && !isnan(1.0f) && isinf(-INFINITY) && isinf((double)INFINITY));
    CHECK(isfinite(1.0f) && !isfinite(INFINITY) && signbit(-0.0f) && signbit(-1.0) && !signbit(0.0));
}

static void test_minmax() {
    static_assert(std::is_same<decltype(min(1, 2)), int>::value, "");
    static_assert(std::is_same<decltype(min(1, 2u)), unsigned>::value, "");
    static_assert(std::is_same<decltype(min(1u, 2)), unsigned>::value, "");
    static_assert(std::is_same<decltype(min(1u, 2u)), unsigned>::value, "");
    static_assert(std::is_same<decltype(min(1l, 2l)), long>::value, "");
    static_assert(std::is_same<decltype(min(1l, 2ul)), unsigned long>::value, "");
    static_assert(std::is_same<decltype(min(1ul, 2l)), unsigned long>::value, "");
    static_assert(std::is_same<decltype(min(1ll, 2ll)), long long>::value, "");
    static_assert(std::is_same<decltype(min(1ll, 2ull)), unsigned long long>::value, "");
    static_assert(std::is_same<decltype(min(1ull, 2ll)), unsigned long long>::value, "");
    static_assert(std::is_same<decltype(min(1.0f, 2.0f)), float>::value, "");
    static_assert(std::is_same<decltype(min(1.0, 2.0)), double>::value, "");
    static_assert(std::is_same<decltype(min(1.0f, 2.0)), double>::value, "");
    static_assert(std::is_same<decltype(min(1.0, 2.0f)), double>::value, "");
    static_assert(std::is_same<decltype(max(1, 2u)), unsigned>::value, "");
    static_assert(std::is_same<decltype(max(1ull, 2ll)), unsigned long long>::value, "");
    static_assert(std::is_same<decltype(max(1.0f, 2.0)), double>::value, "");
    static_assert(std::is_same<decltype(max((short)1, (short)2)), int>::value, "promoted");
    static_assert(std::is_same<decltype(max((unsigned char)1, 2)), int>::value, "promoted");
    static_assert(std::is_same<decltype(min((size_t)1, (size_t)2)), unsigned long>::value, "");
    CHECK(min(-1, 1) == -1 && max(-1, 1) == 1);
    CHECK(min(-1, 1u) == 1u && max(-1, 1u) == 0xffffffffu);  // compared as unsigned
    CHECK(min(-1ll, 1ull) == 1ull && max(-1l, 1ul) == ~0ul);
    CHECK(min(1.5f, -2.0f) == -2.0f && max(1.5, 2.0f) == 2.0 && min(NAN, 1.0f) == 1.0f);
    CHECK(umin(3u, 4u) == 3u && umax(3u, 4u) == 4u && llmin(-5, 3) == -5 && llmax(-5, 3) == 3);
    CHECK(ullmin(1ull << 63, 5) == 5 && ullmax(1ull << 63, 5) == 1ull << 63);
    CHECK(min((size_t)3, (size_t)4) == 3 && max(7l, 9l) == 9l);
}

// ============================================================================================
// 6. 16-bit floats
// ============================================================================================

// constexpr: tables of halves need no dynamic initialization.
constexpr __half k_h = __float2half(1.5f);
static_assert(__half_as_ushort(k_h) == 0x3e00, "constexpr __float2half");
constexpr __half k_h2(2.0f);
static_assert(k_h2.__x == 0x4000, "constexpr __half(float)");
constexpr __nv_bfloat16 k_b = __float2bfloat16(-2.0f);
static_assert(__bfloat16_as_ushort(k_b) == 0xc000, "constexpr __float2bfloat16");
__constant__ __half k_table[3] = {__float2half(0.5f), __half(1.0f), CUDART_INF_FP16};

static void test_half_conversions() {
    g_group_failures = 0;
#if defined(HAVE_FLOAT16)
    // Every binary16 value: widened exactly (as _Float16 widens it), and back to the same bits.
    for (uint32_t b = 0; b < 0x10000; b++) {
        const __half h = __ushort_as_half((unsigned short)b);
        const float f = __half2float(h);
        const float want = (float)f16_of_bits((uint16_t)b);
        DCHECK(same_float(f, want), "half2float(%04x) = %a, want %a", b, f, want);
        DCHECK(gk_cvt_f32_f16((unsigned short)b) == f || (std::isnan(f) && std::isnan(gk_cvt_f32_f16((unsigned short)b))), "gk_cvt_f32_f16(%04x)", b);
        DCHECK(same_float((float)h, f), "operator float %04x", b);
        const bool is_nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0;
        const unsigned short back = __half_as_ushort(__float2half(f));
        if (is_nan) {
            DCHECK(std::isnan(f) && back == 0x7fff, "NaN %04x -> %a -> %04x", b, f, back);
            DCHECK((fbits(f) & 0x400000u) && (fbits(f) >> 31) == (b >> 15), "NaN %04x: quiet, sign kept", b);
        } else {
            DCHECK(back == b, "round trip %04x -> %a -> %04x", b, f, back);
            DCHECK(__half_as_ushort(__double2half((double)f)) == b, "double round trip %04x", b);
            for (int m = 1; m < 4; m++) {
                const unsigned short r = __half_as_ushort(m == 1 ? __float2half_rz(f) : m == 2 ? __float2half_ru(f) : __float2half_rd(f));
                DCHECK(r == b, "exact %04x %s -> %04x", b, MODE_NAME[m], r);
            }
        }
    }
    // float -> half: every exponent, both signs, random mantissas and the patterns around
    // every possible rounding position (exact ties, just below, just above).
    Rng g(3);
    for (uint32_t be = 0; be < 256; be++) {
        for (int i = 0; i < 2200; i++) {
            uint32_t man;
            if (i < 1024) {
                man = g.u32() & 0x7fffffu;
            } else {
                const int k = (i - 1024) % 23;
                const uint32_t tie = 1u << k;
                const uint32_t high = g.u32() & ~((tie << 1) - 1u) & 0x7fffffu;
                const int d = (int)((i - 1024) / 23) % 3 - 1;
                man = (high | tie) + (uint32_t)d;
                man &= 0x7fffffu;
            }
            const float f = bitsf(((g.u32() & 1u) << 31) | (be << 23) | man);
            const unsigned short got = __half_as_ushort(__float2half(f));
            const unsigned short want = f16_bits_of((_Float16)f);
            if (std::isnan(f)) {
                DCHECK(got == 0x7fff, "float2half(NaN %08x) = %04x", fbits(f), got);
                DCHECK(gk_cvt_rn_f16_f32(f) == 0x7fff, "gk_cvt_rn_f16_f32 NaN");
                continue;
            }
            DCHECK(got == want, "float2half(%a) = %04x, want %04x", f, got, want);
            DCHECK(gk_cvt_rn_f16_f32(f) == want, "gk_cvt_rn_f16_f32(%a)", f);
            DCHECK(__half_as_ushort(__float2half_rn(f)) == want && __half_as_ushort(__half(f)) == want, "rn %a", f);
            DCHECK(__half_as_ushort(__double2half((double)f)) == want, "double2half(%a)", f);
            for (int m = 0; m < 4; m++) {
                const unsigned short r = __half_as_ushort(m == 0 ? __float2half_rn(f) : m == 1 ? __float2half_rz(f) : m == 2 ? __float2half_ru(f) : __float2half_rd(f));
                const unsigned short w = ref_f16_small(f, m);
                DCHECK(r == w, "float2half_%s(%a) = %04x, want %04x", MODE_NAME[m], f, r, w);
            }
        }
    }
    // double -> half directly (one rounding), against _Float16's own conversion from double.
    for (int i = 0; i < 200000; i++) {
        const uint64_t be = 1023 - 30 + g.u32() % 50;
        uint64_t man = g.next() & 0xfffffffffffffull;
        if (i & 1) man = (man & ~((1ull << 42) - 1)) | (1ull << 41) | (g.u32() % 3 == 0 ? 0 : (g.next() & 1));  // near ties
        const double d = bitsd(((g.next() & 1) << 63) | (be << 52) | man);
        const unsigned short got = __half_as_ushort(__double2half(d));
        const unsigned short want = f16_bits_of((_Float16)d);
        DCHECK(got == want, "double2half(%a) = %04x, want %04x", d, got, want);
        DCHECK(__half_as_ushort(__half(d)) == want, "__half(double %a)", d);
    }
    // A double that rounds to a float tie must not be rounded twice: 1 + 2^-11 + 2^-40.
    CHECK(__half_as_ushort(__double2half(1.0 + 0x1p-11 + 0x1p-40)) == 0x3c01);
    CHECK(__half_as_ushort(__float2half((float)(1.0 + 0x1p-11 + 0x1p-40))) == 0x3c00);
#endif
    // Known answers.
    CHECK(__half_as_ushort(__float2half(1.0f)) == 0x3c00 && __half_as_ushort(__float2half(-2.0f)) == 0xc000);
    CHECK(__half_as_ushort(__float2half(65504.0f)) == 0x7bff && __half_as_ushort(__float2half(65519.99f)) == 0x7bff);
    CHECK(__half_as_ushort(__float2half(65520.0f)) == 0x7c00 && __half_as_ushort(__float2half(-1e9f)) == 0xfc00);
    CHECK(__half_as_ushort(__float2half_rz(65520.0f)) == 0x7bff && __half_as_ushort(__float2half_rz(INFINITY)) == 0x7c00);
    CHECK(__half_as_ushort(__float2half_ru(65504.5f)) == 0x7c00 && __half_as_ushort(__float2half_rd(-65504.5f)) == 0xfc00);
    CHECK(__half_as_ushort(__float2half_rd(65504.5f)) == 0x7bff && __half_as_ushort(__float2half_ru(-1e9f)) == 0xfbff);
    CHECK(__half_as_ushort(__float2half(0x1p-24f)) == 0x0001 && __half_as_ushort(__float2half(0x1p-25f)) == 0x0000);
    CHECK(__half_as_ushort(__float2half(0x1.000002p-25f)) == 0x0001 && __half_as_ushort(__float2half(-0x1p-26f)) == 0x8000);
    CHECK(__half_as_ushort(__float2half(0x1.8p-24f)) == 0x0002 && __half_as_ushort(__float2half(0x1.4p-23f)) == 0x0002);
    // 0x1.ff8p-15 = 1023 * 2^-24; 0x1.ffcp-15 = 1023.5 * 2^-24 ties to the even 1024 (the
    // smallest normal, 0x0400).
    CHECK(__half_as_ushort(__float2half(0x1.ff8p-15f)) == 0x03ff && __half_as_ushort(__float2half(0x1.ffap-15f)) == 0x03ff);
    CHECK(__half_as_ushort(__float2half(0x1.ffcp-15f)) == 0x0400 && __half_as_ushort(__float2half(0x1.ffep-15f)) == 0x0400);
    CHECK(__half_as_ushort(__float2half_ru(1e-30f)) == 0x0001 && __half_as_ushort(__float2half_rd(-1e-30f)) == 0x8001);
    CHECK(__half_as_ushort(__float2half_rz(-1e-30f)) == 0x8000 && __half_as_ushort(__float2half_rd(1e-30f)) == 0x0000);
    CHECK(__half_as_ushort(__float2half(NAN)) == 0x7fff && __half_as_ushort(__float2half(-NAN)) == 0x7fff);
    CHECK(__half_as_ushort(__float2half(bitsf(0x7f800001u))) == 0x7fff && __half_as_ushort(__double2half(-NAN)) == 0x7fff);
    CHECK(__half2float(__ushort_as_half(0x3555)) == 0x1.554p-2f && __half2float(__ushort_as_half(0x0001)) == 0x1p-24f);
    CHECK(__half2float(CUDART_MAX_NORMAL_FP16) == 65504.0f && __half2float(CUDART_INF_FP16) == INFINITY);
    CHECK(std::isnan(__half2float(CUDART_NAN_FP16)) && std::signbit(__half2float(CUDART_NEG_ZERO_FP16)));
    CHECK(__half2float(k_table[0]) == 0.5f && __half2float(k_table[1]) == 1.0f && std::isinf(__half2float(k_table[2])));
    CHECK(__half_as_short(__short_as_half(-1)) == -1 && __half_as_ushort(CUDART_ONE_FP16) == 0x3c00);

    // Integers -> half in four modes (every short and unsigned short; sampled ints and 64-bit
    // values), against ref_small.
    g_group_failures = 0;
#if defined(HAVE_FLOAT16)
    for (int v = -32768; v < 65536; v++) {
        for (int m = 0; m < 4; m++) {
            const unsigned short w = ref_f16_small((long double)v, m);
            if (v < 32768) {
                const short s = (short)v;
                const unsigned short r = __half_as_ushort(m == 0 ? __short2half_rn(s) : m == 1 ? __short2half_rz(s) : m == 2 ? __short2half_ru(s) : __short2half_rd(s));
                DCHECK(r == w, "short2half_%s(%d) = %04x, want %04x", MODE_NAME[m], v, r, w);
            }
            if (v >= 0) {
                const unsigned short u = (unsigned short)v;
                const unsigned short r = __half_as_ushort(m == 0 ? __ushort2half_rn(u) : m == 1 ? __ushort2half_rz(u) : m == 2 ? __ushort2half_ru(u) : __ushort2half_rd(u));
                DCHECK(r == w, "ushort2half_%s(%d) = %04x, want %04x", MODE_NAME[m], v, r, w);
            }
            const unsigned short ri = __half_as_ushort(m == 0 ? __int2half_rn(v) : m == 1 ? __int2half_rz(v) : m == 2 ? __int2half_ru(v) : __int2half_rd(v));
            DCHECK(ri == w, "int2half_%s(%d) = %04x, want %04x", MODE_NAME[m], v, ri, w);
        }
    }
    for (int i = 0; i < 20000; i++) {
        const long long v = (long long)(g.next() >> (g.next() % 64)) * ((g.next() & 1) ? -1 : 1);
        const unsigned long long u = g.next() >> (g.next() % 64);
        for (int m = 0; m < 4; m++) {
            const unsigned short rl = __half_as_ushort(m == 0 ? __ll2half_rn(v) : m == 1 ? __ll2half_rz(v) : m == 2 ? __ll2half_ru(v) : __ll2half_rd(v));
            const unsigned short ru = __half_as_ushort(m == 0 ? __ull2half_rn(u) : m == 1 ? __ull2half_rz(u) : m == 2 ? __ull2half_ru(u) : __ull2half_rd(u));
            DCHECK(rl == ref_f16_small((long double)v, m), "ll2half_%s(%lld)", MODE_NAME[m], v);
            DCHECK(ru == ref_f16_small((long double)u, m), "ull2half_%s(%llu)", MODE_NAME[m], u);
            const int iv = (int)(v >> 32);
            const unsigned int uv = (unsigned int)u;
            DCHECK(__half_as_ushort(m == 0 ? __int2half_rn(iv) : m == 1 ? __int2half_rz(iv) : m == 2 ? __int2half_ru(iv) : __int2half_rd(iv)) == ref_f16_small((long double)iv, m), "int2half %d", iv);
            DCHECK(__half_as_ushort(m == 0 ? __uint2half_rn(uv) : m == 1 ? __uint2half_rz(uv) : m == 2 ? __uint2half_ru(uv) : __uint2half_rd(uv)) == ref_f16_small((long double)uv, m), "uint2half %u", uv);
        }
    }
#endif
    CHECK(__half_as_ushort(__int2half_rn(2049)) == 0x6800 && __half_as_ushort(__int2half_ru(2049)) == 0x6801);
    CHECK(__half_as_ushort(__ll2half_rn(65520)) == 0x7c00 && __half_as_ushort(__ll2half_rz(LLONG_MAX)) == 0x7bff);
    CHECK(__half_as_ushort(__ll2half_ru(LLONG_MIN)) == 0xfbff && __half_as_ushort(__ll2half_rd(LLONG_MIN)) == 0xfc00);
    CHECK(__half_as_ushort(__ull2half_rn(ULLONG_MAX)) == 0x7c00 && __half_as_ushort(__half(70000)) == 0x7c00);
    CHECK(__half_as_ushort(__half(3)) == 0x4200 && __half_as_ushort(__half(-3ll)) == 0xc200 && __half_as_ushort(__half(7u)) == 0x4700);

    // Half -> integers in four modes, for every half, against x87 rounding.
    g_group_failures = 0;
    for (uint32_t b = 0; b < 0x10000; b++) {
        const __half h = __ushort_as_half((unsigned short)b);
        const long double x = __half2float(h);
        for (int m = 0; m < 4; m++) {
            int ri; unsigned ru; short rs; unsigned short rus; long long rl; unsigned long long rul;
            switch (m) {
            case 0: ri = __half2int_rn(h); ru = __half2uint_rn(h); rs = __half2short_rn(h); rus = __half2ushort_rn(h); rl = __half2ll_rn(h); rul = __half2ull_rn(h); break;
            case 1: ri = __half2int_rz(h); ru = __half2uint_rz(h); rs = __half2short_rz(h); rus = __half2ushort_rz(h); rl = __half2ll_rz(h); rul = __half2ull_rz(h); break;
            case 2: ri = __half2int_ru(h); ru = __half2uint_ru(h); rs = __half2short_ru(h); rus = __half2ushort_ru(h); rl = __half2ll_ru(h); rul = __half2ull_ru(h); break;
            default: ri = __half2int_rd(h); ru = __half2uint_rd(h); rs = __half2short_rd(h); rus = __half2ushort_rd(h); rl = __half2ll_rd(h); rul = __half2ull_rd(h); break;
            }
            DCHECK(ri == ref_f2i<int>(x, m, 0), "half2int_%s(%04x) = %d", MODE_NAME[m], b, ri);
            DCHECK(ru == ref_f2i<unsigned>(x, m, 0u), "half2uint_%s(%04x) = %u", MODE_NAME[m], b, ru);
            DCHECK(rs == ref_f2i<short>(x, m, (short)0), "half2short_%s(%04x) = %d", MODE_NAME[m], b, rs);
            DCHECK(rus == ref_f2i<unsigned short>(x, m, (unsigned short)0), "half2ushort_%s(%04x) = %u", MODE_NAME[m], b, rus);
            DCHECK(rl == ref_f2i<long long>(x, m, LLONG_MIN), "half2ll_%s(%04x) = %lld", MODE_NAME[m], b, rl);
            DCHECK(rul == ref_f2i<unsigned long long>(x, m, 1ull << 63), "half2ull_%s(%04x) = %llu", MODE_NAME[m], b, rul);
        }
        DCHECK(__half2char_rz(h) == ref_f2i<signed char>(x, 1, (signed char)0), "half2char_rz(%04x)", b);
        DCHECK(__half2uchar_rz(h) == ref_f2i<unsigned char>(x, 1, (unsigned char)0), "half2uchar_rz(%04x)", b);
        DCHECK((int)h == __half2int_rz(h) && (long long)h == __half2ll_rz(h) && (unsigned short)h == __half2ushort_rz(h), "operators %04x", b);
        DCHECK((bool)h == ((b & 0x7fff) != 0), "operator bool %04x", b);
    }
    CHECK(__half2int_rz(__float2half(-2.75f)) == -2 && __half2int_rn(__float2half(2.5f)) == 2);
    CHECK(__half2short_rz(CUDART_INF_FP16) == SHRT_MAX && __half2uint_rz(__float2half(-5.0f)) == 0u);
    CHECK(__half2int_rn(CUDART_NAN_FP16) == 0 && __half2ll_rn(CUDART_NAN_FP16) == LLONG_MIN && __half2ull_rz(CUDART_NAN_FP16) == 1ull << 63);
    CHECK((unsigned char)__float2half(300.0f) == 255 && (signed char)__float2half(-300.0f) == -128);
    CHECK(!(bool)__float2half(-0.0f) && (bool)__float2half(0.001f));
    const int as_int = __float2half(-7.9f);
    CHECK(as_int == -7);

    // Pairs.
    const __half2 p = __floats2half2_rn(1.0f, 2.5f);
    CHECK(__low2float(p) == 1.0f && __high2float(p) == 2.5f);
    const float2 pf = __half22float2(p);
    CHECK(pf.x == 1.0f && pf.y == 2.5f);
    CHECK(__half2float(__low2half(p)) == 1.0f && __half2float(__high2half(p)) == 2.5f);
    const __half2 sw = __lowhigh2highlow(p);
    CHECK(__low2float(sw) == 2.5f && __high2float(sw) == 1.0f);
    CHECK(__low2float(__float2half2_rn(3.0f)) == 3.0f && __high2float(__float2half2_rn(3.0f)) == 3.0f);
    const __half2 q = __float22half2_rn(make_float2(-1.0f, 4.0f));
    CHECK(__low2float(__lows2half2(p, q)) == 1.0f && __high2float(__lows2half2(p, q)) == -1.0f);
    CHECK(__low2float(__highs2half2(p, q)) == 2.5f && __high2float(__highs2half2(p, q)) == 4.0f);
    CHECK(__high2float(__low2half2(p)) == 1.0f && __low2float(__high2half2(p)) == 2.5f);
    CHECK(__high2float(__halves2half2(__float2half(5.0f), __float2half(6.0f))) == 6.0f);
    CHECK(__low2float(__half2half2(__float2half(7.0f))) == 7.0f && __low2float(make_half2(__float2half(8.0f), __float2half(9.0f))) == 8.0f);
    const __half2_raw raw = p;
    CHECK(raw.x == 0x3c00 && raw.y == 0x4100);
}

static void test_half_arith() {
    const __half one = __float2half(1.0f), two = __float2half(2.0f), three = __float2half(3.0f);
    CHECK(__half2float(__hadd(one, two)) == 3.0f && __half2float(__hsub(one, two)) == -1.0f);
    CHECK(__half2float(__hmul(two, three)) == 6.0f && __half_as_ushort(__hdiv(one, three)) == 0x3555);
    CHECK(__half2float(__hfma(two, three, one)) == 7.0f && __half2float(__hneg(two)) == -2.0f);
    CHECK(__half2float(__habs(__float2half(-2.0f))) == 2.0f && __half_as_ushort(__habs(__ushort_as_half(0xfc00))) == 0x7c00);
    CHECK(__half2float(__hadd_sat(one, two)) == 1.0f && __half2float(__hsub_sat(one, two)) == 0.0f);
    CHECK(__half2float(__hmul_sat(__float2half(0.5f), __float2half(0.5f))) == 0.25f && __half_as_ushort(__hadd_sat(CUDART_NAN_FP16, one)) == 0);
    CHECK(__half2float(__hfma_relu(two, __float2half(-3.0f), one)) == 0.0f && __half_as_ushort(__hfma_relu(CUDART_NAN_FP16, one, one)) == 0x7fff);
    CHECK(__half2float(__hfma_sat(two, three, one)) == 1.0f);
    // A fused multiply-add rounds once: 45 * 91 = 4095 is a tie between 4094 and 4096.
    CHECK(__half2float(__hfma(__float2half(45.0f), __float2half(91.0f), __float2half(0.0f))) == 4096.0f);
    CHECK(__half2float(__hfma(__float2half(45.0f), __float2half(91.0f), __ushort_as_half(0x8001))) == 4094.0f);
    CHECK(__half2float(__hfma(__float2half(45.0f), __float2half(91.0f), __ushort_as_half(0x0001))) == 4096.0f);
    CHECK(__hisnan(CUDART_NAN_FP16) && !__hisnan(CUDART_INF_FP16) && __hisinf(__ushort_as_half(0xfc00)) == -1);
    CHECK(__hisinf(CUDART_INF_FP16) == 1 && __hisinf(one) == 0 && __hisinf(CUDART_NAN_FP16) == 0);
    const __half nan = CUDART_NAN_FP16;
    CHECK(__heq(one, one) && !__heq(nan, nan) && __hne(one, two) && !__hne(nan, one));
    CHECK(__hneu(nan, one) && __hequ(nan, one) && __hltu(nan, one) && !__hlt(nan, one));
    CHECK(__hlt(one, two) && __hle(one, one) && __hgt(two, one) && __hge(two, two) && !__hgeu(one, two));
    CHECK(__half2float(__hmax(one, two)) == 2.0f && __half2float(__hmin(one, two)) == 1.0f);
    CHECK(__half2float(__hmax(nan, one)) == 1.0f && __half2float(__hmin(one, nan)) == 1.0f);
    CHECK(__half_as_ushort(__hmax(nan, nan)) == 0x7fff && __hisnan(__hmax_nan(nan, one)) && __hisnan(__hmin_nan(one, nan)));
    CHECK(__half_as_ushort(__hmax(CUDART_NEG_ZERO_FP16, CUDART_ZERO_FP16)) == 0x0000);
    CHECK(__half_as_ushort(__hmin(CUDART_ZERO_FP16, CUDART_NEG_ZERO_FP16)) == 0x8000);
    CHECK(__half2float(hsqrt(__float2half(4.0f))) == 2.0f && __half2float(hrsqrt(__float2half(4.0f))) == 0.5f);
    CHECK(__half2float(hrcp(two)) == 0.5f && __half2float(hexp(__float2half(0.0f))) == 1.0f);
    CHECK(__half2float(hexp2(three)) == 8.0f && __half2float(hexp10(two)) == 100.0f);
    CHECK(__half2float(hlog(one)) == 0.0f && __half2float(hlog2(__float2half(8.0f))) == 3.0f && __half2float(hlog10(__float2half(100.0f))) == 2.0f);
    CHECK(__half_as_ushort(hexp(__float2half(1.0f))) == __half_as_ushort(__float2half(2.718281828f)));
    CHECK(__half2float(hceil(__float2half(1.25f))) == 2.0f && __half2float(hfloor(__float2half(-1.25f))) == -2.0f);
    CHECK(__half2float(htrunc(__float2half(-1.75f))) == -1.0f && __half2float(hrint(__float2half(2.5f))) == 2.0f);
    CHECK(__half2float(hrint(__float2half(3.5f))) == 4.0f && __half2float(hsin(__float2half(0.0f))) == 0.0f && __half2float(hcos(__float2half(0.0f))) == 1.0f);

    // Operators.
    __half h = one + two * three - one / two;  // 1 + 6 - 0.5
    CHECK(__half2float(h) == 6.5f);
    h += one;
    h -= two;
    h *= two;
    h /= __float2half(4.0f);
    CHECK(__half2float(h) == 2.75f);
    CHECK(__half2float(-h) == -2.75f && __half2float(+h) == 2.75f);
    __half c = one;
    CHECK(__half2float(c++) == 1.0f && __half2float(c) == 2.0f && __half2float(++c) == 3.0f);
    CHECK(__half2float(c--) == 3.0f && __half2float(--c) == 1.0f);
    CHECK(one == one && one != two && one < two && two > one && one <= one && two >= one && nan != nan && !(nan == nan));
    const float f = h;  // operator float
    CHECK(f == 2.75f);
    __half asg;
    asg = 1.5f;
    CHECK(__half_as_ushort(asg) == 0x3e00);
    asg = 2.0;
    CHECK(__half_as_ushort(asg) == 0x4000);
    asg = 3;
    CHECK(__half_as_ushort(asg) == 0x4200);
    asg = 5l;
    CHECK(__half_as_ushort(asg) == 0x4500);
    asg = 6ul;
    CHECK(__half_as_ushort(asg) == 0x4600);
    const double widened = asg;  // operator float, then float -> double
    CHECK(widened == 6.0);

    // Pairs.
    const __half2 a2 = __floats2half2_rn(1.0f, 2.0f), b2 = __floats2half2_rn(3.0f, 0.5f);
    CHECK(__low2float(__hadd2(a2, b2)) == 4.0f && __high2float(__hadd2(a2, b2)) == 2.5f);
    CHECK(__low2float(__hsub2(a2, b2)) == -2.0f && __high2float(__hmul2(a2, b2)) == 1.0f);
    CHECK(__high2float(__h2div(a2, b2)) == 4.0f && __low2float(__hfma2(a2, b2, a2)) == 4.0f);
    CHECK(__low2float(__hneg2(a2)) == -1.0f && __high2float(__habs2(__hneg2(a2))) == 2.0f);
    CHECK(__low2float(__hmax2(a2, b2)) == 3.0f && __high2float(__hmin2(a2, b2)) == 0.5f);
    CHECK(__low2float(__heq2(a2, a2)) == 1.0f && __high2float(__hlt2(a2, b2)) == 0.0f && __low2float(__hlt2(a2, b2)) == 1.0f);
    CHECK(__hbeq2(a2, a2) && !__hbeq2(a2, b2) && !__hblt2(a2, b2) && __hbne2(a2, b2));
    CHECK(__heq2_mask(a2, a2) == 0xffffffffu && __hlt2_mask(a2, b2) == 0x0000ffffu && __hgt2_mask(a2, b2) == 0xffff0000u);
    CHECK(__hneu2_mask(__halves2half2(nan, one), __halves2half2(nan, one)) == 0x0000ffffu && __hne2_mask(a2, a2) == 0u);
    CHECK(__low2float(__hadd2_sat(a2, b2)) == 1.0f && __low2float(h2sqrt(__floats2half2_rn(4.0f, 9.0f))) == 2.0f);
    CHECK(__high2float(h2sqrt(__floats2half2_rn(4.0f, 9.0f))) == 3.0f && __low2float(h2exp2(a2)) == 2.0f);
    CHECK(__low2float(__hisnan2(__halves2half2(nan, one))) == 1.0f && __high2float(__hisnan2(__halves2half2(nan, one))) == 0.0f);
    __half2 s2 = a2 + b2 * a2 - a2 / b2;  // (1 + 3 - 1/3, 2 + 1 - 4)
    CHECK(__low2float(s2) == __half2float(__hsub(__float2half(4.0f), __hdiv(one, three))) && __high2float(s2) == -1.0f);
    s2 += a2;
    s2 *= b2;
    CHECK(__high2float(s2) == 0.5f && a2 == a2 && a2 != b2 && __high2float(-a2) == -2.0f);
    ++s2;
    CHECK(__high2float(s2) == 1.5f);

    // Dense: + - * / fma against exact (x87, __float128) arithmetic rounded by _Float16.
#if defined(HAVE_FLOAT16) && defined(__SIZEOF_FLOAT128__)
    Rng g(5);
    g_group_failures = 0;
    for (int i = 0; i < 300000; i++) {
        uint16_t ab = (uint16_t)g.u32(), bb = (uint16_t)g.u32(), cb = (uint16_t)g.u32();
        if (i & 1) {  // similar magnitudes, where the interesting roundings are
            bb = (uint16_t)((bb & 0x83ff) | (ab & 0x7c00));
            cb = (uint16_t)((cb & 0x83ff) | (((ab & 0x7c00) + 0x0400 * (g.u32() % 3)) & 0x7c00));
        }
        const __half a = __ushort_as_half(ab), b = __ushort_as_half(bb), c = __ushort_as_half(cb);
        const long double A = __half2float(a), B = __half2float(b);
        const __float128 QA = __half2float(a), QB = __half2float(b), QC = __half2float(c);
        const auto ref = [](long double v) { return std::isnan(v) ? (uint16_t)0x7fff : ref_f16_small(v, 0); };
        const auto refq = [](__float128 v) {
            // The exact value (binary16 products and sums fit in __float128's 113 bits), when
            // long double holds it too; otherwise 0 (not compared).
            if (v != v) return (uint16_t)0x7fff;
            if ((__float128)(long double)v != v) return (uint16_t)0;
            return ref_f16_small((long double)v, 0);
        };
        DCHECK(__half_as_ushort(__hadd(a, b)) == ref(A + B), "%04x + %04x", ab, bb);
        DCHECK(__half_as_ushort(__hsub(a, b)) == ref(A - B), "%04x - %04x", ab, bb);
        DCHECK(__half_as_ushort(__hmul(a, b)) == ref(A * B), "%04x * %04x", ab, bb);
        DCHECK(__half_as_ushort(__hdiv(a, b)) == ref(A / B), "%04x / %04x", ab, bb);
        const uint16_t want_fma = refq(QA * QB + QC);
        if (want_fma) DCHECK(__half_as_ushort(__hfma(a, b, c)) == want_fma, "fma %04x %04x %04x", ab, bb, cb);
    }
#endif
}

static void test_bf16() {
    g_group_failures = 0;
    // Every bfloat16 value: widened exactly, back to the same bits (NaN: NaN, quiet).
    for (uint32_t b = 0; b < 0x10000; b++) {
        const __nv_bfloat16 h = __ushort_as_bfloat16((unsigned short)b);
        const float f = __bfloat162float(h);
        DCHECK(fbits(f) == b << 16, "bfloat162float(%04x)", b);
        const unsigned short back = __bfloat16_as_ushort(__float2bfloat16(f));
        const bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
        if (is_nan) DCHECK(back == (b | 0x40), "NaN %04x -> %04x", b, back);
        else DCHECK(back == b && __bfloat16_as_ushort(__double2bfloat16((double)f)) == b, "round trip %04x -> %04x", b, back);
        if (!is_nan)
            for (int m = 1; m < 4; m++) {
                const unsigned short r = __bfloat16_as_ushort(m == 1 ? __float2bfloat16_rz(f) : m == 2 ? __float2bfloat16_ru(f) : __float2bfloat16_rd(f));
                DCHECK(r == b, "exact %04x %s", b, MODE_NAME[m]);
            }
    }
    // float -> bfloat16 in four modes: every exponent, random mantissas and near-ties.
    Rng g(9);
    for (uint32_t be = 0; be < 256; be++) {
        for (int i = 0; i < 1200; i++) {
            uint32_t man = g.u32() & 0x7fffffu;
            if (i & 1) man = (man & ~0xffffu) | 0x8000u | (uint32_t)(g.u32() % 3 == 0 ? 0 : (g.u32() % 3 == 0 ? 1 : 0xffffffffu)) ;
            man &= 0x7fffffu;
            const float f = bitsf(((g.u32() & 1u) << 31) | (be << 23) | man);
            if (std::isnan(f)) {
                DCHECK(__bfloat16_as_ushort(__float2bfloat16(f)) == ((fbits(f) >> 16) | 0x40), "NaN %08x", fbits(f));
                DCHECK(__hisnan(__float2bfloat16_rz(f)) && __hisnan(__float2bfloat16_ru(f)), "NaN modes %08x", fbits(f));
                continue;
            }
            for (int m = 0; m < 4; m++) {
                const unsigned short r = __bfloat16_as_ushort(m == 0 ? __float2bfloat16_rn(f) : m == 1 ? __float2bfloat16_rz(f) : m == 2 ? __float2bfloat16_ru(f) : __float2bfloat16_rd(f));
                const unsigned short w = ref_bf16(f, m);
                DCHECK(r == w, "float2bfloat16_%s(%a) = %04x, want %04x", MODE_NAME[m], f, r, w);
            }
            DCHECK(__bfloat16_as_ushort(__float2bfloat16(f)) == ref_bf16(f, 0) && __bfloat16_as_ushort(__nv_bfloat16(f)) == ref_bf16(f, 0), "rn %a", f);
        }
    }
    // double -> bfloat16, one rounding.
    for (int i = 0; i < 200000; i++) {
        const uint64_t be = 1023 - 140 + g.u32() % 280;
        uint64_t man = g.next() & 0xfffffffffffffull;
        if (i & 1) man = (man & ~((1ull << 45) - 1)) | (1ull << 44) | (g.u32() % 3 == 0 ? 0 : (g.next() & 1));
        const double d = bitsd(((g.next() & 1) << 63) | (be << 52) | man);
        DCHECK(__bfloat16_as_ushort(__double2bfloat16(d)) == ref_bf16(d, 0), "double2bfloat16(%a)", d);
    }
    CHECK(__bfloat16_as_ushort(__double2bfloat16(1.0 + 0x1p-8 + 0x1p-40)) == 0x3f81);  // no double rounding
    // Integers -> bfloat16, against ref_small on exact long doubles.
    for (int i = 0; i < 30000; i++) {
        const long long v = (long long)(g.next() >> (g.next() % 64)) * ((g.next() & 1) ? -1 : 1);
        const unsigned long long u = g.next() >> (g.next() % 64);
        for (int m = 0; m < 4; m++) {
            DCHECK(__bfloat16_as_ushort(m == 0 ? __ll2bfloat16_rn(v) : m == 1 ? __ll2bfloat16_rz(v) : m == 2 ? __ll2bfloat16_ru(v) : __ll2bfloat16_rd(v)) == ref_bf16((long double)v, m), "ll2bfloat16_%s(%lld)", MODE_NAME[m], v);
            DCHECK(__bfloat16_as_ushort(m == 0 ? __ull2bfloat16_rn(u) : m == 1 ? __ull2bfloat16_rz(u) : m == 2 ? __ull2bfloat16_ru(u) : __ull2bfloat16_rd(u)) == ref_bf16((long double)u, m), "ull2bfloat16_%s(%llu)", MODE_NAME[m], u);
            const int iv = (int)(v >> 32);
            DCHECK(__bfloat16_as_ushort(m == 0 ? __int2bfloat16_rn(iv) : m == 1 ? __int2bfloat16_rz(iv) : m == 2 ? __int2bfloat16_ru(iv) : __int2bfloat16_rd(iv)) == ref_bf16((long double)iv, m), "int2bfloat16 %d", iv);
        }
    }
    // bfloat16 -> integers, every value.
    for (uint32_t b = 0; b < 0x10000; b++) {
        const __nv_bfloat16 h = __ushort_as_bfloat16((unsigned short)b);
        const long double x = __bfloat162float(h);
        DCHECK(__bfloat162int_rn(h) == ref_f2i<int>(x, 0, 0), "bf2int_rn %04x", b);
        DCHECK(__bfloat162int_rz(h) == ref_f2i<int>(x, 1, 0), "bf2int_rz %04x", b);
        DCHECK(__bfloat162uint_ru(h) == ref_f2i<unsigned>(x, 2, 0u), "bf2uint_ru %04x", b);
        DCHECK(__bfloat162ll_rd(h) == ref_f2i<long long>(x, 3, LLONG_MIN), "bf2ll_rd %04x", b);
        DCHECK(__bfloat162ull_rn(h) == ref_f2i<unsigned long long>(x, 0, 1ull << 63), "bf2ull_rn %04x", b);
        DCHECK(__bfloat162short_rz(h) == ref_f2i<short>(x, 1, (short)0), "bf2short_rz %04x", b);
        DCHECK((int)h == __bfloat162int_rz(h), "operator int %04x", b);
    }
    // Known answers.
    CHECK(__bfloat16_as_ushort(__float2bfloat16(1.0f)) == 0x3f80 && __bfloat16_as_ushort(__float2bfloat16(bitsf(0x3f808000u))) == 0x3f80);
    CHECK(__bfloat16_as_ushort(__float2bfloat16(bitsf(0x3f818000u))) == 0x3f82 && __bfloat16_as_ushort(__float2bfloat16(bitsf(0x3f808001u))) == 0x3f81);
    CHECK(__bfloat16_as_ushort(__float2bfloat16(FLT_MAX)) == 0x7f80 && __bfloat16_as_ushort(__float2bfloat16_rz(FLT_MAX)) == 0x7f7f);
    CHECK(__bfloat16_as_ushort(__float2bfloat16_rz(bitsf(0x3f80ffffu))) == 0x3f80 && __bfloat16_as_ushort(__float2bfloat16_ru(bitsf(0x3f800001u))) == 0x3f81);
    CHECK(__bfloat16_as_ushort(__float2bfloat16_rd(bitsf(0xbf800001u))) == 0xbf81 && __bfloat16_as_ushort(__float2bfloat16_ru(bitsf(0xbf80ffffu))) == 0xbf80);
    CHECK(__bfloat16_as_ushort(__float2bfloat16(bitsf(0x7f800001u))) == 0x7fc0 && __bfloat16_as_ushort(__float2bfloat16(bitsf(0xffa00000u))) == 0xffe0);
    CHECK(__bfloat16_as_ushort(__float2bfloat16(bitsf(0x00008000u))) == 0x0000 && __bfloat16_as_ushort(__float2bfloat16(bitsf(0x00018000u))) == 0x0002);
    CHECK(__bfloat16_as_ushort(__double2bfloat16(1e300)) == 0x7f80 && __bfloat16_as_ushort(__double2bfloat16(1e-300)) == 0x0000);
    CHECK(__hisnan(__double2bfloat16(NAN)) && __bfloat162float(__float2bfloat16(3.0f)) == 3.0f);
    CHECK(__bfloat16_as_ushort(__int2bfloat16_rn(257)) == 0x4380 && __bfloat16_as_ushort(__int2bfloat16_ru(257)) == 0x4381);
    CHECK(__bfloat162float(CUDART_ONE_BF16) == 1.0f && __bfloat162float(CUDART_MAX_NORMAL_BF16) == 0x1.fep127f);

    // Arithmetic, operators, pairs.
    const __nv_bfloat16 one = __float2bfloat16(1.0f), two = __float2bfloat16(2.0f), three = __float2bfloat16(3.0f);
    CHECK(__bfloat162float(__hadd(one, two)) == 3.0f && __bfloat162float(__hmul(two, three)) == 6.0f);
    CHECK(__bfloat16_as_ushort(__hdiv(one, three)) == 0x3eab && __bfloat162float(__hsub(one, two)) == -1.0f);
    // fma rounds once: 7 * 37 = 259, a tie between 258 and 260 in 8 bits.
    const __nv_bfloat16 b7 = __float2bfloat16(7.0f), b37 = __float2bfloat16(37.0f);
    CHECK(__bfloat162float(__hfma(b7, b37, __float2bfloat16(0.0f))) == 260.0f);
    CHECK(__bfloat162float(__hfma(b7, b37, __float2bfloat16(-1e-30f))) == 258.0f);
    CHECK(__bfloat162float(__hfma(b7, b37, __float2bfloat16(1e-30f))) == 260.0f);
    CHECK(__bfloat162float(__hfma(__float2bfloat16(-7.0f), b37, __float2bfloat16(1e-30f))) == -258.0f);
    CHECK(__bfloat162float(__hmax(one, two)) == 2.0f && __bfloat162float(__hmin(CUDART_NAN_BF16, two)) == 2.0f);
    CHECK(__heq(one, one) && !__heq(CUDART_NAN_BF16, CUDART_NAN_BF16) && __hlt(one, two) && __hisinf(CUDART_INF_BF16) == 1);
    CHECK(__bfloat162float(hsqrt(__float2bfloat16(4.0f))) == 2.0f && __bfloat162float(hexp2(three)) == 8.0f);
    CHECK(__bfloat162float(__hneg(one)) == -1.0f && __bfloat162float(__habs(__float2bfloat16(-3.0f))) == 3.0f);
    __nv_bfloat16 h = one + two * three;
    h -= one;
    h /= two;
    CHECK(__bfloat162float(h) == 3.0f && one < two && two != one && !(one == two) && __bfloat162float(-one) == -1.0f);
    const __nv_bfloat162 p = __floats2bfloat162_rn(1.0f, 2.0f), q = __float2bfloat162_rn(3.0f);
    CHECK(__low2float(p) == 1.0f && __high2float(p) == 2.0f && __high2float(q) == 3.0f);
    CHECK(__low2float(__hadd2(p, q)) == 4.0f && __high2float(__hmul2(p, q)) == 6.0f && __low2float(__lowhigh2highlow(p)) == 2.0f);
    const float2 pf = __bfloat1622float2(p + q);
    CHECK(pf.x == 4.0f && pf.y == 5.0f && __bfloat162float(__low2bfloat16(p)) == 1.0f && __bfloat162float(__high2bfloat16(p)) == 2.0f);
    CHECK(__hbeq2(p, p) && __low2float(__heq2(p, q)) == 0.0f && __high2float(__halves2bfloat162(one, three)) == 3.0f);

#if defined(__SIZEOF_FLOAT128__)
    g_group_failures = 0;
    for (int i = 0; i < 200000; i++) {
        uint16_t ab = (uint16_t)g.u32(), bb = (uint16_t)g.u32(), cb = (uint16_t)g.u32();
        if (i & 1) {
            bb = (uint16_t)((bb & 0x807f) | (((ab & 0x7f80) + 0x0080 * (g.u32() % 5)) & 0x7f80));
            cb = (uint16_t)((cb & 0x807f) | (((ab & 0x7f80) + (bb & 0x7f80) - 0x3f80 + 0x0080 * (g.u32() % 7)) & 0x7f80));
        }
        const __nv_bfloat16 a = __ushort_as_bfloat16(ab), b = __ushort_as_bfloat16(bb), c = __ushort_as_bfloat16(cb);
        const __float128 A = __bfloat162float(a), B = __bfloat162float(b), C = __bfloat162float(c);
        // Rounded once to 113 bits, then to 8: innocuous for + - * /. For fma, only where the
        // __float128 sum is exact (the operands' exponents are close).
        const auto ref = [](__float128 v, const __nv_bfloat16 &got) {
            if (v != v) return __hisnan(got);
            return __bfloat16_as_ushort(got) == ref_bf16((long double)v, 0);
        };
        DCHECK(ref(A + B, __hadd(a, b)), "%04x + %04x", ab, bb);
        DCHECK(ref(A * B, __hmul(a, b)), "%04x * %04x", ab, bb);
        DCHECK(ref(A / B, __hdiv(a, b)), "%04x / %04x", ab, bb);
        // fma: only where the sum is exact in __float128 and in long double (no second
        // rounding that could land on a tie).
        const __float128 F = A * B + C;
        const bool exact = F - A * B == C && F - C == A * B && (__float128)(long double)F == F;
        if (F != F || exact) DCHECK(ref(F, __hfma(a, b, c)), "fma %04x %04x %04x", ab, bb, cb);
    }
#endif
}

// ============================================================================================
// 7. Atomics, fences, loads and stores
// ============================================================================================

static void test_atomics() {
    int i = 10;
    CHECK(atomicAdd(&i, 5) == 10 && i == 15);
    CHECK(atomicSub(&i, 20) == 15 && i == -5);
    CHECK(atomicExch(&i, 7) == -5 && i == 7);
    CHECK(atomicMin(&i, -3) == 7 && i == -3 && atomicMax(&i, 4) == -3 && i == 4);
    CHECK(atomicAnd(&i, 6) == 4 && i == 4 && atomicOr(&i, 3) == 4 && i == 7 && atomicXor(&i, 5) == 7 && i == 2);
    CHECK(atomicCAS(&i, 3, 9) == 2 && i == 2 && atomicCAS(&i, 2, 9) == 2 && i == 9);
    unsigned u = 0xfffffff0u;
    CHECK(atomicAdd(&u, 0x20u) == 0xfffffff0u && u == 0x10u);
    CHECK(atomicSub(&u, 0x11u) == 0x10u && u == 0xffffffffu);
    CHECK(atomicMin(&u, 5u) == 0xffffffffu && u == 5u && atomicMax(&u, 0x80000000u) == 5u && u == 0x80000000u);
    CHECK(atomicExch(&u, 3u) == 0x80000000u && atomicCAS(&u, 3u, 4u) == 3u && u == 4u);
    CHECK(atomicAnd(&u, 0xcu) == 4u && atomicOr(&u, 1u) == 4u && atomicXor(&u, 0xffu) == 5u && u == 0xfau);
    // atomicInc: ((old >= val) ? 0 : old + 1); atomicDec: ((old == 0 || old > val) ? val : old - 1).
    unsigned w = 5;
    CHECK(atomicInc(&w, 5u) == 5u && w == 0u);
    w = 3;
    CHECK(atomicInc(&w, 5u) == 3u && w == 4u);
    w = 9;
    CHECK(atomicInc(&w, 5u) == 9u && w == 0u);
    w = 0;
    CHECK(atomicInc(&w, 0u) == 0u && w == 0u);
    w = 7;
    CHECK(atomicInc(&w, 0xffffffffu) == 7u && w == 8u);
    w = 0;
    CHECK(atomicDec(&w, 5u) == 0u && w == 5u);
    w = 7;
    CHECK(atomicDec(&w, 5u) == 7u && w == 5u);
    w = 3;
    CHECK(atomicDec(&w, 5u) == 3u && w == 2u);
    w = 5;
    CHECK(atomicDec(&w, 5u) == 5u && w == 4u);
    w = 1;
    CHECK(atomicDec(&w, 0u) == 1u && w == 0u);
    unsigned long long ull = 1ull << 40;
    CHECK(atomicAdd(&ull, 1ull << 40) == 1ull << 40 && ull == 1ull << 41);
    CHECK(atomicExch(&ull, 5ull) == 1ull << 41 && atomicCAS(&ull, 5ull, ~0ull) == 5ull && ull == ~0ull);
    CHECK(atomicMin(&ull, 9ull) == ~0ull && ull == 9ull && atomicMax(&ull, 1ull << 63) == 9ull && ull == 1ull << 63);
    CHECK(atomicAnd(&ull, ~0ull) == 1ull << 63 && atomicOr(&ull, 1ull) == 1ull << 63 && atomicXor(&ull, 1ull << 63) == (1ull << 63 | 1ull) && ull == 1ull);
    long long ll = -5;
    CHECK(atomicMin(&ll, -10ll) == -5 && ll == -10 && atomicMax(&ll, 3ll) == -10 && ll == 3);
    unsigned short us = 7;
    CHECK(atomicCAS(&us, (unsigned short)8, (unsigned short)1) == 7 && us == 7);
    CHECK(atomicCAS(&us, (unsigned short)7, (unsigned short)0xffff) == 7 && us == 0xffff);
    float f = 1.5f;
    CHECK(atomicAdd(&f, 2.25f) == 1.5f && f == 3.75f);
    CHECK(atomicExch(&f, -1.0f) == 3.75f && f == -1.0f);
    CHECK(atomicMax(&f, 2.0f) == -1.0f && f == 2.0f && atomicMin(&f, -4.0f) == 2.0f && f == -4.0f);
    CHECK(atomicMax(&f, NAN) == -4.0f && f == -4.0f);
    CHECK(atomicAdd(&f, 0x1p-140f) == -4.0f && f == -4.0f);
    double d = 0.5;
    CHECK(atomicAdd(&d, 0.25) == 0.5 && d == 0.75 && atomicAdd(&d, 1e-17) == 0.75);
    CHECK(atomicMax(&d, 8.0) == 0.75 && d == 8.0 && atomicMin(&d, -1.0) == 8.0 && d == -1.0);
    d = -0.0;
    CHECK(atomicMax(&d, 0.0) == 0.0 && !std::signbit(d) && atomicMin(&d, -0.0) == 0.0 && std::signbit(d));
    CHECK(atomicMin(&d, NAN) == 0.0 && std::signbit(d) && !std::isnan(d));
    __half h = __float2half(1.0f);
    CHECK(__half2float(atomicAdd(&h, __float2half(0.5f))) == 1.0f && __half2float(h) == 1.5f);
    __half2 h2 = __floats2half2_rn(1.0f, 2.0f);
    const __half2 old2 = atomicAdd(&h2, __floats2half2_rn(0.5f, -1.0f));
    CHECK(__low2float(old2) == 1.0f && __low2float(h2) == 1.5f && __high2float(h2) == 1.0f);
    __nv_bfloat16 bf = __float2bfloat16(2.0f);
    CHECK(__bfloat162float(atomicAdd(&bf, __float2bfloat16(1.0f))) == 2.0f && __bfloat162float(bf) == 3.0f);
    __nv_bfloat162 bf2 = __floats2bfloat162_rn(1.0f, 1.0f);
    atomicAdd(&bf2, __floats2bfloat162_rn(1.0f, 2.0f));
    CHECK(__low2float(bf2) == 2.0f && __high2float(bf2) == 3.0f);
    float2 v2 = make_float2(1.0f, 2.0f);
    const float2 o2 = atomicAdd(&v2, make_float2(0.5f, 0.5f));
    CHECK(o2.x == 1.0f && o2.y == 2.0f && v2.x == 1.5f && v2.y == 2.5f);
    float4 v4 = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
    const float4 o4 = atomicAdd(&v4, make_float4(1.0f, 1.0f, 1.0f, 1.0f));
    CHECK(o4.w == 4.0f && v4.x == 2.0f && v4.w == 5.0f);
    // The scoped variants.
    int bi = 1;
    CHECK(atomicAdd_block(&bi, 2) == 1 && atomicAdd_system(&bi, 3) == 3 && bi == 6);
    CHECK(atomicCAS_block(&bi, 6, 1) == 6 && atomicExch_system(&bi, 2) == 1 && atomicMax_block(&bi, 9) == 2 && bi == 9);
    unsigned bu = 5;
    CHECK(atomicInc_system(&bu, 5u) == 5u && bu == 0u && atomicDec_block(&bu, 3u) == 0u && bu == 3u);
    float bff = 1.0f;
    CHECK(atomicAdd_block(&bff, 1.0f) == 1.0f && atomicAdd_system(&bff, 1.0f) == 2.0f && bff == 3.0f);
    double bd = 1.0;
    CHECK(atomicAdd_system(&bd, 1.0) == 1.0 && bd == 2.0);
    __threadfence();
    __threadfence_block();
    __threadfence_system();

    // Contention: real threads on the same words.
    int ci = 0;
    unsigned cu = 0;
    float cf = 0.0f;
    double cd = 0.0;
    __half ch = __float2half(0.0f);
    unsigned long long cmax = 0;
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&, t] {
            for (int k = 0; k < 20000; k++) {
                atomicAdd(&ci, 1);
                atomicInc(&cu, 999u);
                atomicAdd(&cf, 1.0f);
                atomicAdd(&cd, 0.5);
                if (k < 256) atomicAdd(&ch, __float2half(1.0f));
                atomicMax(&cmax, (unsigned long long)(t * 100000 + k));
            }
        });
    for (auto &t : ts) t.join();
    CHECK(ci == 80000 && cu == 80000u % 1000u && cf == 80000.0f && cd == 40000.0);
    CHECK(__half2float(ch) == 1024.0f && cmax == 319999ull);

    // Loads and stores with cache hints.
    const float4 src = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
    const float4 ld = __ldg(&src);
    CHECK(ld.y == 2.0f && __ldcg(&src.z) == 3.0f && __ldca(&src.w) == 4.0f && __ldcs(&src.x) == 1.0f);
    const int ival = 5;
    CHECK(__ldlu(&ival) == 5 && __ldcv(&ival) == 5);
    const __half hv = __float2half(2.0f);
    CHECK(__half2float(__ldg(&hv)) == 2.0f);
    float st = 0.0f;
    __stcg(&st, 1.0);  // converts, like CUDA's float overload
    CHECK(st == 1.0f);
    __stcs(&st, 2.0f);
    __stwb(&st, 3);
    CHECK(st == 3.0f);
    int4 si;
    __stwt(&si, make_int4(1, 2, 3, 4));
    CHECK(si.w == 4);
}

// ============================================================================================
// 8. Typical kernel code
// ============================================================================================

__device__ __forceinline__ float4 scale4(const float4 *__restrict__ p, float s) {
    const float4 v = __ldg(p);
    return make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
}

__global__ void __launch_bounds__(128) snippet_kernel(const float4 *__restrict__ in,
                                                      float4 *__restrict__ out, float *fsum,
                                                      double *dsum, __half *hbuf, int n) {
    for (int i = 0; i < n; i++) {
        const float4 v = scale4(in + i, 2.0f);
        out[i] = v;
        atomicAdd(fsum, v.x + v.y + v.z + v.w);
        atomicAdd(dsum, (double)v.x);
        const __half h = __float2half(v.x);
        hbuf[i] = h * h + __float2half(1.0f);
        __stcg(&out[i].w, __fmul_rn(v.w, 0.5f));
        const float m = max(v.x, v.y) + min(v.z, 0.0f) + fminf(v.w, 1e9f) + rsqrtf(4.0f);
        hbuf[i] += __float2half(m - m);
    }
}

static void test_snippet() {
    float4 in[3] = {make_float4(1, 2, 3, 4), make_float4(0.5f, 0.5f, 0.5f, 0.5f), make_float4(-1, 0, 1, 2)};
    float4 out[3];
    float fsum = 0.0f;
    double dsum = 0.0;
    __half hbuf[3];
    snippet_kernel(in, out, &fsum, &dsum, hbuf, 3);
    CHECK(out[0].x == 2.0f && out[0].w == 4.0f && out[2].z == 2.0f);
    CHECK(fsum == 20.0f + 4.0f + 4.0f && dsum == 2.0 + 1.0 - 2.0);
    CHECK(__half2float(hbuf[0]) == 5.0f && __half2float(hbuf[1]) == 2.0f && __half2float(hbuf[2]) == 5.0f);
}

// ============================================================================================
// 9. math_constants.h
// ============================================================================================

static void test_constants() {
    CHECK(CUDART_PI == M_PI && CUDART_PI_F == (float)M_PI && CUDART_PIO2 == M_PI_2 && CUDART_PIO4 == M_PI_4);
    CHECK(CUDART_PIO2_F == (float)M_PI_2 && CUDART_PIO4_F == (float)M_PI_4);
    CHECK(CUDART_SQRT_TWO == M_SQRT2 && CUDART_SQRT_HALF == M_SQRT1_2 && CUDART_SQRT_HALF_F == (float)M_SQRT1_2);
    // Within an ulp of the values computed from the rounded pi (the literals are the
    // correctly rounded true values).
    CHECK(close_rel(CUDART_SQRT_2PI, std::sqrt(2.0 * M_PI), 2.3e-16) && CUDART_SQRT_2PI == 2.5066282746310007);
    CHECK(close_rel(CUDART_SQRT_PI, std::sqrt(M_PI), 2.3e-16) && close_rel(CUDART_SQRT_PIO2, std::sqrt(M_PI_2), 2.3e-16));
    CHECK(CUDART_L2E == M_LOG2E && CUDART_L2T == std::log2(10.0) && CUDART_LN2 == M_LN2 && CUDART_LNT == M_LN10);
    CHECK(CUDART_LG2 == std::log10(2.0) && CUDART_LGE == M_LOG10E && CUDART_L2E_F == (float)M_LOG2E && CUDART_LN2_F == (float)M_LN2);
    CHECK(CUDART_2_OVER_PI == M_2_PI && CUDART_2_OVER_PI_F == (float)M_2_PI && CUDART_3PIO4 == 3.0 * M_PI_4);
    CHECK(close_rel(CUDART_SQRT_2_OVER_PI, std::sqrt(M_2_PI), 1.2e-16) && CUDART_SQRT_2_OVER_PI_F == (float)std::sqrt(M_2_PI));
    CHECK(CUDART_THIRD == 1.0 / 3.0 && CUDART_THIRD_F == 1.0f / 3.0f && CUDART_TWOTHIRD == 2.0 / 3.0);
    CHECK(CUDART_INF == INFINITY && CUDART_INF_F == INFINITY && std::isnan(CUDART_NAN) && std::isnan(CUDART_NAN_F));
    CHECK(fbits(CUDART_NAN_F) == 0x7fffffffu && fbits(CUDART_NEG_ZERO_F) == 0x80000000u && CUDART_ZERO_F == 0.0f && CUDART_ONE_F == 1.0f);
    CHECK(CUDART_MIN_DENORM_F == 0x1p-149f && CUDART_MAX_NORMAL_F == FLT_MAX && CUDART_MIN_DENORM == 0x1p-1074);
    CHECK(dbits(CUDART_NEG_ZERO) == 0x8000000000000000ull && CUDART_ZERO == 0.0 && CUDART_ONE == 1.0);
    CHECK(CUDART_TWO_TO_23_F == 8388608.0f && CUDART_TWO_TO_24_F == 16777216.0f && CUDART_TWO_TO_31_F == 2147483648.0f);
    CHECK(CUDART_TWO_TO_52 == 0x1p52 && CUDART_TWO_TO_53 == 0x1p53 && CUDART_TWO_TO_54 == 0x1p54 && CUDART_TWO_TO_M54 == 0x1p-54);
    CHECK(CUDART_TWO_TO_M1022 == DBL_MIN && CUDART_TWO_TO_M126_F == FLT_MIN && CUDART_TWO_TO_126_F == 0x1p126f);
    CHECK(CUDART_PI_HI + CUDART_PI_LO == M_PI && CUDART_PI_LO != 0.0);
    CHECK(CUDART_LNPI == std::log(M_PI) || close_rel(CUDART_LNPI, std::log(M_PI), 1.2e-16));
}

int main() {
    test_macros();
    test_vectors();
    test_integer();
    test_bitcasts();
    test_rounding_arith();
    test_conversions();
    test_fast_math();
    test_math();
    test_minmax();
    test_half_conversions();
    test_half_arith();
    test_bf16();
    test_atomics();
    test_snippet();
    test_constants();
    if (g_failures) {
        std::printf("api_test: %d of %d checks FAILED\n", g_failures, g_checks);
        return 1;
    }
    std::printf("api_test: all %d checks passed\n", g_checks);
    return 0;
}
