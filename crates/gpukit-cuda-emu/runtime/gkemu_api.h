// gkemu_api.h: the device API surface of the CUDA emulator (CUDA C run on the CPU, compiled
// by the host's g++ or clang++ with this header put in front of it).
//
// Pure C++17, no knowledge of threads or blocks (the core, gkemu.h, adds thread coordinates,
// barriers, warp collectives and shared memory). What is here:
//
//   1. qualifier and version macros (__device__, __forceinline__, __CUDA_ARCH__, ...);
//   2. the vector types (char1 .. double4, dim3) and their make_* functions;
//   3. integer intrinsics (__popc, __clz, __byte_perm, __funnelshift_*, __mulhi, ...);
//   4. float intrinsics: bit casts, arithmetic in a chosen rounding mode (__fadd_rz, ...),
//      conversions with CUDA's saturation and NaN rules (__float2int_rn, ...), fast-math
//      intrinsics (__expf, __fdividef, ...);
//   5. math functions of the CUDA Math API that the C library lacks (rsqrtf, sinpi, erfinv,
//      normcdf, ...), float overloads at global scope, CUDA's min/max overload set;
//   6. 16-bit floats: __half, __half2, __nv_bfloat16, __nv_bfloat162 and their functions;
//   7. atomics (atomicAdd, atomicCAS, ... and the _block/_system variants), fences, cache
//      hinted loads and stores (__ldg, __stcg, ...);
//   8. the helpers the library's CUDA C calls instead of inline PTX (gk_cvt_f32_f16,
//      gk_cvt_rn_f16_f32; gk_globaltimer is the core's).
//
// Semantics follow NVIDIA's "CUDA Math API Reference" (integer intrinsics, single and double
// precision intrinsics, type casting intrinsics, half and bfloat16 precision intrinsics) and
// the PTX ISA ("cvt", "atom"); where the two documents or the hardware differ, the comment at
// the definition says which one is followed.
//
// Kernels are compiled with -fsanitize=thread (the core uses the instrumentation's hooks as
// memory access checks): everything here uses only plain loads and stores and 1, 2, 4 and
// 8 byte __atomic builtins, which the core's runtime implements.
#pragma once

#include <cfenv>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
// libstdc++'s <math.h> puts the float and long double overloads of <cmath> (sqrt(float),
// isnan, signbit, ...) into the global namespace, where CUDA code calls them.
#include <math.h>

// `__noinline__` (below) is a macro, as in CUDA; libstdc++'s <bits/shared_ptr_base.h> (from
// <memory>, <future>, <regex>, ...) spells an attribute `__attribute__((__noinline__))`,
// which the macro breaks. Define GKEMU_PREINCLUDE_MEMORY to include <memory> before the macro
// exists (it costs about 0.1 s of compile time, so it is not the default).
#if defined(GKEMU_PREINCLUDE_MEMORY)
#include <memory>
#endif

// ============================================================================================
// 1. Qualifiers and version macros
// ============================================================================================

#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
#ifndef __restrict__
#define __restrict__ __restrict
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
#ifndef __builtin_align__
#define __builtin_align__(n) __attribute__((aligned(n)))
#endif
#ifndef __CUDA_ALIGN__
#define __CUDA_ALIGN__(n) __attribute__((aligned(n)))
#endif
#ifndef __constant__
#define __constant__
#endif
#ifndef __managed__
#define __managed__
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif
#ifndef __device_builtin__
#define __device_builtin__
#endif
#ifndef __cudart_builtin__
#define __cudart_builtin__
#endif

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#ifndef __CUDACC_RTC__
#define __CUDACC_RTC__ 1
#endif
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif
#ifndef __CUDACC_VER_MAJOR__
#define __CUDACC_VER_MAJOR__ 12
#endif
#ifndef __CUDACC_VER_MINOR__
#define __CUDACC_VER_MINOR__ 9
#endif
#ifndef __CUDACC_VER_BUILD__
#define __CUDACC_VER_BUILD__ 0
#endif
#ifndef CUDART_VERSION
#define CUDART_VERSION 12090
#endif
#ifndef CUDA_VERSION
#define CUDA_VERSION 12090
#endif
#ifndef __CUDA_FP16_TYPES_EXIST__
#define __CUDA_FP16_TYPES_EXIST__ 1
#endif
#ifndef __CUDA_BF16_TYPES_EXIST__
#define __CUDA_BF16_TYPES_EXIST__ 1
#endif

// ============================================================================================
// Internal helpers: bit casts, exact rounding to any binary format, saturating conversions
// ============================================================================================

namespace gkemu_detail {

enum : int { RN = 0, RZ = 1, RU = 2, RD = 3 };

template <class To, class From> constexpr inline To bit_cast(const From &v) noexcept {
    static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
    return __builtin_bit_cast(To, v);
}

// Hides a value from the optimizer, so that no multiply and add around it are contracted into
// a fused multiply-add (CUDA's __fmul_rn, __fadd_rn, ... are never contracted).
template <class T> static inline void opaque(T &v) noexcept {
#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE2__))
    __asm__("" : "+x"(v));
#elif defined(__aarch64__)
    __asm__("" : "+w"(v));
#else
    __asm__("" : "+m"(v));
#endif
}

// A value as (-1)^neg * m * 2^e, with its class: 0 finite nonzero, 1 zero, 2 infinity, 3 NaN.
struct parts {
    bool neg;
    int cls;
    uint64_t m;
    int e;
};

constexpr inline parts parts_of_f32(float f) noexcept {
    const uint32_t u = bit_cast<uint32_t>(f);
    const bool neg = (u >> 31) != 0;
    const uint32_t ex = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (ex == 0xffu) return parts{neg, man ? 3 : 2, 0, 0};
    if (ex == 0) return man ? parts{neg, 0, man, -149} : parts{neg, 1, 0, 0};
    return parts{neg, 0, (uint64_t)(man | 0x800000u), (int)ex - 150};
}

constexpr inline parts parts_of_f64(double d) noexcept {
    const uint64_t u = bit_cast<uint64_t>(d);
    const bool neg = (u >> 63) != 0;
    const uint32_t ex = (uint32_t)(u >> 52) & 0x7ffu;
    const uint64_t man = u & 0xfffffffffffffull;
    if (ex == 0x7ffu) return parts{neg, man ? 3 : 2, 0, 0};
    if (ex == 0) return man ? parts{neg, 0, man, -1074} : parts{neg, 1, 0, 0};
    return parts{neg, 0, man | 0x10000000000000ull, (int)ex - 1075};
}

constexpr inline parts parts_of_u64(bool neg, uint64_t m) noexcept {
    return m ? parts{neg, 0, m, 0} : parts{neg, 1, 0, 0};
}
constexpr inline parts parts_of_i64(long long v) noexcept {
    return parts_of_u64(v < 0, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v);
}

// Rounds m * 2^e (m != 0) to the binary floating-point format with `mant` stored mantissa
// bits, smallest normal exponent `emin` and largest exponent `emax`, in mode `mode`; returns
// the encoding of the magnitude (no sign bit). Exact: one rounding, subnormals and overflow
// (to infinity or to the largest finite value, as the mode says) included.
constexpr inline uint64_t round_mag(bool neg, uint64_t m, int e, int mant, int emin, int emax,
                                    int mode) noexcept {
    const int top = 63 - __builtin_clzll(m);
    const int E = top + e;                       // exponent of the leading bit
    const int q = (E < emin ? emin : E) - mant;  // exponent of the result's last bit
    const int sh = q - e;                        // low bits of m that go
    uint64_t kept = 0;
    bool rbit = false, sticky = false;
    if (sh <= 0) {
        kept = m << (-sh);
    } else if (sh > 64) {
        sticky = true;
    } else {
        kept = sh == 64 ? 0 : (m >> sh);
        rbit = ((m >> (sh - 1)) & 1u) != 0;
        sticky = (m & (((uint64_t)1 << (sh - 1)) - 1)) != 0;
    }
    bool up = false;
    switch (mode) {
    case RN: up = rbit && (sticky || (kept & 1u)); break;
    case RZ: up = false; break;
    case RU: up = !neg && (rbit || sticky); break;
    default: up = neg && (rbit || sticky); break;
    }
    kept += up ? 1u : 0u;
    // kept counts units of 2^q: a subnormal has q == emin - mant and its encoding is kept; a
    // normal's encoding is ((E - emin + 1) << mant) + kept - 2^mant. A carry out of the
    // mantissa moves into the exponent by itself.
    const uint64_t bits = ((uint64_t)(q + mant - emin) << mant) + kept;
    const uint64_t inf = (uint64_t)(emax - emin + 2) << mant;
    if (bits >= inf) {
        const bool to_inf = mode == RN || (mode == RU && !neg) || (mode == RD && neg);
        return to_inf ? inf : inf - 1;
    }
    return bits;
}

template <int MANT, int EMIN, int EMAX, int BITS>
constexpr inline uint64_t encode(parts p, int mode, uint64_t nan_bits) noexcept {
    const uint64_t sign = p.neg ? (uint64_t)1 << (BITS - 1) : 0;
    if (p.cls == 3) return nan_bits;
    if (p.cls == 2) return sign | ((uint64_t)(EMAX - EMIN + 2) << MANT);
    if (p.cls == 1) return sign;
    return sign | round_mag(p.neg, p.m, p.e, MANT, EMIN, EMAX, mode);
}

// NVIDIA's canonical NaNs.
constexpr uint32_t F32_CANONICAL_NAN = 0x7fffffffu;
constexpr uint64_t F64_CANONICAL_NAN = 0x7fffffffffffffffull;
constexpr uint16_t F16_CANONICAL_NAN = 0x7fffu;

constexpr inline float to_f32(parts p, int mode) noexcept {
    return bit_cast<float>((uint32_t)encode<23, -126, 127, 32>(p, mode, F32_CANONICAL_NAN));
}
constexpr inline double to_f64(parts p, int mode) noexcept {
    return bit_cast<double>(encode<52, -1022, 1023, 64>(p, mode, F64_CANONICAL_NAN));
}
constexpr inline uint16_t to_f16(parts p, int mode) noexcept {
    return (uint16_t)encode<10, -14, 15, 16>(p, mode, F16_CANONICAL_NAN);
}
constexpr inline uint16_t to_bf16(parts p, int mode, uint16_t nan_bits) noexcept {
    return (uint16_t)encode<7, -126, 127, 16>(p, mode, nan_bits);
}

// float -> IEEE binary16, round to nearest even (PTX cvt.rn.f16.f32): subnormals kept,
// overflow to infinity, any NaN to the canonical NaN 0x7fff.
constexpr inline uint16_t f32_to_f16_rn(float f) noexcept {
    const uint32_t u = bit_cast<uint32_t>(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return F16_CANONICAL_NAN;
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // |f| >= 65520: infinity
    if (a >= 0x38800000u) {                                   // |f| >= 2^-14: a normal
        const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a <= 0x33000000u) return (uint16_t)sign;  // |f| <= 2^-25: zero (2^-25 ties to even)
    const uint32_t ex = a >> 23;                  // 102 ..= 112: a subnormal
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t sh = 126u - ex;  // 14 ..= 24
    uint32_t q = m >> sh;
    const uint32_t rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

// IEEE binary16 -> float, exact (PTX cvt.f32.f16). A NaN stays a NaN: sign and payload kept,
// the quiet bit set (as x86's vcvtph2ps does).
constexpr inline float f16_to_f32(uint16_t h) noexcept {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (ex == 0x1fu)
        return bit_cast<float>(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
    if (ex != 0) return bit_cast<float>(sign | ((ex + 112u) << 23) | (man << 13));
    if (man == 0) return bit_cast<float>(sign);
    const int sh = __builtin_clz(man) - 21;  // moves the leading one to bit 10
    const uint32_t m = (man << sh) & 0x3ffu;
    return bit_cast<float>(sign | ((uint32_t)(113 - sh) << 23) | (m << 13));
}

// The bfloat16 NaN kept a NaN: the top of the float's payload with the quiet bit set.
constexpr inline uint16_t bf16_nan_of_f32_bits(uint32_t u) noexcept {
    return (uint16_t)((u >> 16) | 0x40u);
}
constexpr inline uint16_t bf16_nan_of_f64_bits(uint64_t u) noexcept {
    return (uint16_t)(((u >> 48) & 0x8000u) | 0x7fc0u | ((u >> 45) & 0x7fu));
}

// float -> bfloat16, round to nearest even; overflow to infinity; a NaN stays a NaN.
constexpr inline uint16_t f32_to_bf16_rn(float f) noexcept {
    uint32_t u = bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_nan_of_f32_bits(u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
constexpr inline float bf16_to_f32(uint16_t b) noexcept {
    return bit_cast<float>((uint32_t)b << 16);
}

constexpr inline uint16_t f32_to_f16(float f, int mode) noexcept {
    return mode == RN ? f32_to_f16_rn(f) : to_f16(parts_of_f32(f), mode);
}
constexpr inline uint16_t f64_to_f16(double d, int mode) noexcept {
    return to_f16(parts_of_f64(d), mode);
}
constexpr inline uint16_t f32_to_bf16(float f, int mode) noexcept {
    return mode == RN ? f32_to_bf16_rn(f)
                      : to_bf16(parts_of_f32(f), mode, bf16_nan_of_f32_bits(bit_cast<uint32_t>(f)));
}
constexpr inline uint16_t f64_to_bf16(double d, int mode) noexcept {
    return to_bf16(parts_of_f64(d), mode, bf16_nan_of_f64_bits(bit_cast<uint64_t>(d)));
}

// Round to an integral value, ties to even, whatever the current rounding mode.
static inline double rint_even(double x) noexcept {
    const double t = std::trunc(x);
    const double ad = std::fabs(x - t);  // exact
    if (ad > 0.5 || (ad == 0.5 && std::fmod(t, 2.0) != 0.0)) return t + (x < 0 ? -1.0 : 1.0);
    return t;
}
static inline double round_integral(double x, int mode) noexcept {
    switch (mode) {
    case RN: return rint_even(x);
    case RZ: return std::trunc(x);
    case RU: return std::ceil(x);
    default: return std::floor(x);
    }
}

// Float to integer as PTX cvt does it ("cvt", Integer Notes): rounded in the given mode, then
// clamped to the destination's range; a NaN gives `nan_value` (0, except 1 << (bits - 1)
// when the source is f64 or the destination 64 bits wide).
template <class I> static inline I f2i(double x, int mode, I nan_value) noexcept {
    using U = typename std::make_unsigned<I>::type;
    constexpr bool is_signed = std::is_signed<I>::value;
    constexpr int bits = (int)sizeof(I) * 8;
    constexpr U umax = (U)~(U)0;
    constexpr I imax = is_signed ? (I)(umax >> 1) : (I)umax;
    constexpr I imin = is_signed ? (I)(-(I)(umax >> 1) - 1) : (I)0;
    if (x != x) return nan_value;
    const double r = round_integral(x, mode);
    // 2^(bits-1) for a signed type, 2^bits for an unsigned one: exact doubles.
    const double hi = is_signed ? (double)((U)1 << (bits - 1)) : 2.0 * (double)((U)1 << (bits - 1));
    if (r >= hi) return imax;
    if (is_signed ? r <= -hi : r <= 0.0) return imin;
    return (I)r;
}

// Arithmetic in a directed rounding mode: the operands go through volatile storage so that
// the operation can be neither folded at compile time nor moved across the mode switches.
template <int M, class T, class Op> static inline T rnd_apply(Op op, T a, T b, T c) noexcept {
    if (M == RN) {
        opaque(a);
        opaque(b);
        opaque(c);
        T r = op(a, b, c);
        opaque(r);
        return r;
    }
    volatile T va = a, vb = b, vc = c;
    const int old = fegetround();
    fesetround(M == RZ ? FE_TOWARDZERO : M == RU ? FE_UPWARD : FE_DOWNWARD);
    volatile T r = op(va, vb, vc);
    fesetround(old);
    return r;
}
struct op_add {
    template <class T> T operator()(T a, T b, T) const noexcept { return a + b; }
};
struct op_sub {
    template <class T> T operator()(T a, T b, T) const noexcept { return a - b; }
};
struct op_mul {
    template <class T> T operator()(T a, T b, T) const noexcept { return a * b; }
};
struct op_div {
    template <class T> T operator()(T a, T b, T) const noexcept { return a / b; }
};
struct op_rcp {
    template <class T> T operator()(T a, T, T) const noexcept { return (T)1 / a; }
};
struct op_sqrt {
    float operator()(float a, float, float) const noexcept { return std::sqrt(a); }
    double operator()(double a, double, double) const noexcept { return std::sqrt(a); }
};
struct op_fma {
    float operator()(float a, float b, float c) const noexcept { return std::fma(a, b, c); }
    double operator()(double a, double b, double c) const noexcept { return std::fma(a, b, c); }
};

// 64 x 64 -> high 64 bits of the 128-bit product.
static inline uint64_t umul64hi(uint64_t a, uint64_t b) noexcept {
    const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    const uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    const uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

} // namespace gkemu_detail

// ============================================================================================
// 2. Vector types (CUDA's vector_types.h: the same members, sizes and alignments)
// ============================================================================================

#define GKEMU_VEC1(name, T) struct name { T x; };
#define GKEMU_VEC2(name, T, al) struct __attribute__((aligned(al))) name { T x, y; };
#define GKEMU_VEC3(name, T) struct name { T x, y, z; };
#define GKEMU_VEC4(name, T, al) struct __attribute__((aligned(al))) name { T x, y, z, w; };

GKEMU_VEC1(char1, signed char)
GKEMU_VEC1(uchar1, unsigned char)
GKEMU_VEC2(char2, signed char, 2)
GKEMU_VEC2(uchar2, unsigned char, 2)
GKEMU_VEC3(char3, signed char)
GKEMU_VEC3(uchar3, unsigned char)
GKEMU_VEC4(char4, signed char, 4)
GKEMU_VEC4(uchar4, unsigned char, 4)
GKEMU_VEC1(short1, short)
GKEMU_VEC1(ushort1, unsigned short)
GKEMU_VEC2(short2, short, 4)
GKEMU_VEC2(ushort2, unsigned short, 4)
GKEMU_VEC3(short3, short)
GKEMU_VEC3(ushort3, unsigned short)
GKEMU_VEC4(short4, short, 8)
GKEMU_VEC4(ushort4, unsigned short, 8)
GKEMU_VEC1(int1, int)
GKEMU_VEC1(uint1, unsigned int)
GKEMU_VEC2(int2, int, 8)
GKEMU_VEC2(uint2, unsigned int, 8)
GKEMU_VEC3(int3, int)
GKEMU_VEC3(uint3, unsigned int)
GKEMU_VEC4(int4, int, 16)
GKEMU_VEC4(uint4, unsigned int, 16)
GKEMU_VEC1(long1, long)
GKEMU_VEC1(ulong1, unsigned long)
GKEMU_VEC2(long2, long, 2 * sizeof(long))
GKEMU_VEC2(ulong2, unsigned long, 2 * sizeof(unsigned long))
GKEMU_VEC3(long3, long)
GKEMU_VEC3(ulong3, unsigned long)
GKEMU_VEC4(long4, long, 16)
GKEMU_VEC4(ulong4, unsigned long, 16)
GKEMU_VEC1(float1, float)
GKEMU_VEC2(float2, float, 8)
GKEMU_VEC3(float3, float)
GKEMU_VEC4(float4, float, 16)
GKEMU_VEC1(longlong1, long long)
GKEMU_VEC1(ulonglong1, unsigned long long)
GKEMU_VEC2(longlong2, long long, 16)
GKEMU_VEC2(ulonglong2, unsigned long long, 16)
GKEMU_VEC3(longlong3, long long)
GKEMU_VEC3(ulonglong3, unsigned long long)
GKEMU_VEC4(longlong4, long long, 16)
GKEMU_VEC4(ulonglong4, unsigned long long, 16)
GKEMU_VEC1(double1, double)
GKEMU_VEC2(double2, double, 16)
GKEMU_VEC3(double3, double)
GKEMU_VEC4(double4, double, 16)
// CUDA 13's explicitly aligned 32-byte vectors.
GKEMU_VEC4(long4_16a, long, 16)
GKEMU_VEC4(long4_32a, long, 32)
GKEMU_VEC4(ulong4_16a, unsigned long, 16)
GKEMU_VEC4(ulong4_32a, unsigned long, 32)
GKEMU_VEC4(longlong4_16a, long long, 16)
GKEMU_VEC4(longlong4_32a, long long, 32)
GKEMU_VEC4(ulonglong4_16a, unsigned long long, 16)
GKEMU_VEC4(ulonglong4_32a, unsigned long long, 32)
GKEMU_VEC4(double4_16a, double, 16)
GKEMU_VEC4(double4_32a, double, 32)

#undef GKEMU_VEC1
#undef GKEMU_VEC2
#undef GKEMU_VEC3
#undef GKEMU_VEC4

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) noexcept
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) noexcept : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const noexcept { return uint3{x, y, z}; }
};

#define GKEMU_MAKE1(name, T)                                                                  \
    static constexpr inline name make_##name(T x) noexcept { return name{x}; }
#define GKEMU_MAKE2(name, T)                                                                  \
    static constexpr inline name make_##name(T x, T y) noexcept { return name{x, y}; }
#define GKEMU_MAKE3(name, T)                                                                  \
    static constexpr inline name make_##name(T x, T y, T z) noexcept { return name{x, y, z}; }
#define GKEMU_MAKE4(name, T)                                                                  \
    static constexpr inline name make_##name(T x, T y, T z, T w) noexcept {                    \
        return name{x, y, z, w};                                                              \
    }
#define GKEMU_MAKE_ALL(prefix, T)                                                             \
    GKEMU_MAKE1(prefix##1, T) GKEMU_MAKE2(prefix##2, T) GKEMU_MAKE3(prefix##3, T)              \
        GKEMU_MAKE4(prefix##4, T)
GKEMU_MAKE_ALL(char, signed char)
GKEMU_MAKE_ALL(uchar, unsigned char)
GKEMU_MAKE_ALL(short, short)
GKEMU_MAKE_ALL(ushort, unsigned short)
GKEMU_MAKE_ALL(int, int)
GKEMU_MAKE_ALL(uint, unsigned int)
GKEMU_MAKE_ALL(long, long)
GKEMU_MAKE_ALL(ulong, unsigned long)
GKEMU_MAKE_ALL(longlong, long long)
GKEMU_MAKE_ALL(ulonglong, unsigned long long)
GKEMU_MAKE_ALL(float, float)
GKEMU_MAKE_ALL(double, double)
GKEMU_MAKE4(long4_16a, long)
GKEMU_MAKE4(long4_32a, long)
GKEMU_MAKE4(ulong4_16a, unsigned long)
GKEMU_MAKE4(ulong4_32a, unsigned long)
GKEMU_MAKE4(longlong4_16a, long long)
GKEMU_MAKE4(longlong4_32a, long long)
GKEMU_MAKE4(ulonglong4_16a, unsigned long long)
GKEMU_MAKE4(ulonglong4_32a, unsigned long long)
GKEMU_MAKE4(double4_16a, double)
GKEMU_MAKE4(double4_32a, double)
#undef GKEMU_MAKE_ALL
#undef GKEMU_MAKE1
#undef GKEMU_MAKE2
#undef GKEMU_MAKE3
#undef GKEMU_MAKE4

// ============================================================================================
// 3. Integer intrinsics (CUDA Math API, "Integer Intrinsics")
// ============================================================================================

static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
static inline int __clzll(long long x) {
    return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
// Position (1-based) of the least significant set bit; 0 for 0.
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }

static inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x) {
    x = ((x >> 1) & 0x5555555555555555ull) | ((x & 0x5555555555555555ull) << 1);
    x = ((x >> 2) & 0x3333333333333333ull) | ((x & 0x3333333333333333ull) << 2);
    x = ((x >> 4) & 0x0f0f0f0f0f0f0f0full) | ((x & 0x0f0f0f0f0f0f0f0full) << 4);
    return __builtin_bswap64(x);
}

// Result byte n is input byte s<4n+2:4n> of {y, x} (bytes 0..3 of x, then 4..7 of y). As the
// Math API documents it, only the low three bits of each selector nibble count (PTX prmt's
// generic mode would also sign-replicate when a nibble's bit 3 is set).
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned int r = 0;
    for (int n = 0; n < 4; n++) {
        const unsigned int sel = (s >> (4 * n)) & 7u;
        r |= (unsigned int)((v >> (8 * sel)) & 0xffu) << (8 * n);
    }
    return r;
}

// hi:lo shifted left by shift & 31 (the _lc form: by min(shift, 32)); the high 32 bits.
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned int)((v << (shift & 31u)) >> 32);
}
static inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned int)((v << (shift < 32u ? shift : 32u)) >> 32);
}
// hi:lo shifted right by shift & 31 (the _rc form: by min(shift, 32)); the low 32 bits.
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned int)(v >> (shift & 31u));
}
static inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned int)(v >> (shift < 32u ? shift : 32u));
}

// The low 32 bits of the product of the low 24 bits of x and y (signed: bit 23 is the sign,
// as PTX mul24.lo.s32 reads it; the high 8 bits are ignored).
static inline int __mul24(int x, int y) {
    const long long a = (long long)((int)((unsigned int)x << 8) >> 8);
    const long long b = (long long)((int)((unsigned int)y << 8) >> 8);
    return (int)(unsigned int)(unsigned long long)(a * b);
}
static inline unsigned int __umul24(unsigned int x, unsigned int y) {
    return (unsigned int)((unsigned long long)(x & 0xffffffu) * (y & 0xffffffu));
}
static inline int __mulhi(int x, int y) { return (int)(((long long)x * (long long)y) >> 32); }
static inline unsigned int __umulhi(unsigned int x, unsigned int y) {
    return (unsigned int)(((unsigned long long)x * (unsigned long long)y) >> 32);
}
static inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return gkemu_detail::umul64hi(x, y);
}
static inline long long __mul64hi(long long x, long long y) {
    // The signed high half from the unsigned one: subtract y (x) when x (y) is negative.
    unsigned long long h = gkemu_detail::umul64hi((unsigned long long)x, (unsigned long long)y);
    if (x < 0) h -= (unsigned long long)y;
    if (y < 0) h -= (unsigned long long)x;
    return (long long)h;
}

// Averages without overflow: (x + y) >> 1 and (x + y + 1) >> 1 in wide arithmetic.
static inline int __hadd(int x, int y) { return (int)(((long long)x + y) >> 1); }
static inline int __rhadd(int x, int y) { return (int)(((long long)x + y + 1) >> 1); }
static inline unsigned int __uhadd(unsigned int x, unsigned int y) {
    return (unsigned int)(((unsigned long long)x + y) >> 1);
}
static inline unsigned int __urhadd(unsigned int x, unsigned int y) {
    return (unsigned int)(((unsigned long long)x + y + 1) >> 1);
}

// |x - y| + z.
static inline unsigned int __sad(int x, int y, unsigned int z) {
    const long long d = (long long)x - (long long)y;
    return (unsigned int)(d < 0 ? -d : d) + z;
}
static inline unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) {
    return (x > y ? x - y : y - x) + z;
}

// Four-way byte dot product plus c; two-way 16 x 8 bit dot product plus c (_lo: bytes 0, 1
// of b; _hi: bytes 2, 3).
static inline int __dp4a(int a, int b, int c) {
    int r = c;
    for (int i = 0; i < 4; i++)
        r += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return r;
}
static inline unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) {
    unsigned int r = c;
    for (int i = 0; i < 4; i++) r += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    return r;
}
static inline int __dp4a(char4 a, char4 b, int c) {
    return c + a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
static inline unsigned int __dp4a(uchar4 a, uchar4 b, unsigned int c) {
    return c + (unsigned int)(a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w);
}
static inline int __dp2a_lo(int a, int b, int c) {
    return c + (int)(short)a * (int)(signed char)b + (int)(short)(a >> 16) * (int)(signed char)(b >> 8);
}
static inline int __dp2a_hi(int a, int b, int c) {
    return c + (int)(short)a * (int)(signed char)(b >> 16) +
           (int)(short)(a >> 16) * (int)(signed char)(b >> 24);
}
static inline unsigned int __dp2a_lo(unsigned int a, unsigned int b, unsigned int c) {
    return c + (a & 0xffffu) * (b & 0xffu) + (a >> 16) * ((b >> 8) & 0xffu);
}
static inline unsigned int __dp2a_hi(unsigned int a, unsigned int b, unsigned int c) {
    return c + (a & 0xffffu) * ((b >> 16) & 0xffu) + (a >> 16) * (b >> 24);
}

// The n-th set bit of mask counting from bit `base` (up for offset > 0, down for offset < 0;
// offset 0: base itself if set); 0xffffffff if none (PTX fns).
static inline unsigned int __fns(unsigned int mask, unsigned int base, int offset) {
    if (offset == 0) return (base < 32u && ((mask >> base) & 1u)) ? base : 0xffffffffu;
    const int inc = offset > 0 ? 1 : -1;
    long long count = offset > 0 ? (long long)offset - 1 : -(long long)offset - 1;
    for (int pos = (int)base; pos >= 0 && pos < 32; pos += inc) {
        if ((mask >> pos) & 1u) {
            if (count == 0) return (unsigned int)pos;
            count--;
        }
    }
    return 0xffffffffu;
}

// ============================================================================================
// 4. Float intrinsics (CUDA Math API, "Single/Double Precision Intrinsics", "Type Casting
//    Intrinsics")
// ============================================================================================

static constexpr inline float __int_as_float(int x) { return gkemu_detail::bit_cast<float>(x); }
static constexpr inline int __float_as_int(float x) { return gkemu_detail::bit_cast<int>(x); }
static constexpr inline float __uint_as_float(unsigned int x) {
    return gkemu_detail::bit_cast<float>(x);
}
static constexpr inline unsigned int __float_as_uint(float x) {
    return gkemu_detail::bit_cast<unsigned int>(x);
}
static constexpr inline long long __double_as_longlong(double x) {
    return gkemu_detail::bit_cast<long long>(x);
}
static constexpr inline double __longlong_as_double(long long x) {
    return gkemu_detail::bit_cast<double>(x);
}
static constexpr inline double __hiloint2double(int hi, int lo) {
    return gkemu_detail::bit_cast<double>(((unsigned long long)(unsigned int)hi << 32) |
                                          (unsigned int)lo);
}
static constexpr inline int __double2hiint(double x) {
    return (int)(unsigned int)(gkemu_detail::bit_cast<unsigned long long>(x) >> 32);
}
static constexpr inline int __double2loint(double x) {
    return (int)(unsigned int)gkemu_detail::bit_cast<unsigned long long>(x);
}

// Arithmetic in a rounding mode: _rn round to nearest even, _rz toward zero, _ru toward +inf,
// _rd toward -inf. None of these is ever contracted into a fused multiply-add.
#define GKEMU_RND_ARITH(sfx, M)                                                                \
    static inline float __fadd_##sfx(float a, float b) {                                      \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_add{}, a, b, 0.0f);          \
    }                                                                                          \
    static inline float __fsub_##sfx(float a, float b) {                                      \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_sub{}, a, b, 0.0f);          \
    }                                                                                          \
    static inline float __fmul_##sfx(float a, float b) {                                      \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_mul{}, a, b, 0.0f);          \
    }                                                                                          \
    static inline float __fdiv_##sfx(float a, float b) {                                      \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_div{}, a, b, 0.0f);          \
    }                                                                                          \
    static inline float __frcp_##sfx(float a) {                                               \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_rcp{}, a, 0.0f, 0.0f);       \
    }                                                                                          \
    static inline float __fsqrt_##sfx(float a) {                                              \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_sqrt{}, a, 0.0f, 0.0f);      \
    }                                                                                          \
    static inline float __fmaf_##sfx(float a, float b, float c) {                             \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_fma{}, a, b, c);             \
    }                                                                                          \
    static inline float __fmaf_ieee_##sfx(float a, float b, float c) {                        \
        return gkemu_detail::rnd_apply<M, float>(gkemu_detail::op_fma{}, a, b, c);             \
    }                                                                                          \
    static inline double __dadd_##sfx(double a, double b) {                                   \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_add{}, a, b, 0.0);          \
    }                                                                                          \
    static inline double __dsub_##sfx(double a, double b) {                                   \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_sub{}, a, b, 0.0);          \
    }                                                                                          \
    static inline double __dmul_##sfx(double a, double b) {                                   \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_mul{}, a, b, 0.0);          \
    }                                                                                          \
    static inline double __ddiv_##sfx(double a, double b) {                                   \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_div{}, a, b, 0.0);          \
    }                                                                                          \
    static inline double __drcp_##sfx(double a) {                                             \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_rcp{}, a, 0.0, 0.0);        \
    }                                                                                          \
    static inline double __dsqrt_##sfx(double a) {                                            \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_sqrt{}, a, 0.0, 0.0);       \
    }                                                                                          \
    static inline double __fma_##sfx(double a, double b, double c) {                          \
        return gkemu_detail::rnd_apply<M, double>(gkemu_detail::op_fma{}, a, b, c);            \
    }
GKEMU_RND_ARITH(rn, gkemu_detail::RN)
GKEMU_RND_ARITH(rz, gkemu_detail::RZ)
GKEMU_RND_ARITH(ru, gkemu_detail::RU)
GKEMU_RND_ARITH(rd, gkemu_detail::RD)
#undef GKEMU_RND_ARITH

// Float to integer: rounded in the mode, saturated to the range; NaN as PTX cvt gives it
// (0 from f32 to 32-bit integers; 1 << 31 from f64 to 32-bit integers; 1 << 63 to 64-bit).
#define GKEMU_F2I(sfx, M)                                                                      \
    static inline int __float2int_##sfx(float x) { return gkemu_detail::f2i<int>(x, M, 0); }   \
    static inline unsigned int __float2uint_##sfx(float x) {                                  \
        return gkemu_detail::f2i<unsigned int>(x, M, 0u);                                      \
    }                                                                                          \
    static inline long long __float2ll_##sfx(float x) {                                       \
        return gkemu_detail::f2i<long long>(x, M, LLONG_MIN);                                  \
    }                                                                                          \
    static inline unsigned long long __float2ull_##sfx(float x) {                             \
        return gkemu_detail::f2i<unsigned long long>(x, M, 0x8000000000000000ull);             \
    }                                                                                          \
    static inline int __double2int_##sfx(double x) {                                          \
        return gkemu_detail::f2i<int>(x, M, INT_MIN);                                          \
    }                                                                                          \
    static inline unsigned int __double2uint_##sfx(double x) {                                \
        return gkemu_detail::f2i<unsigned int>(x, M, 0x80000000u);                             \
    }                                                                                          \
    static inline long long __double2ll_##sfx(double x) {                                     \
        return gkemu_detail::f2i<long long>(x, M, LLONG_MIN);                                  \
    }                                                                                          \
    static inline unsigned long long __double2ull_##sfx(double x) {                           \
        return gkemu_detail::f2i<unsigned long long>(x, M, 0x8000000000000000ull);             \
    }
GKEMU_F2I(rn, gkemu_detail::RN)
GKEMU_F2I(rz, gkemu_detail::RZ)
GKEMU_F2I(ru, gkemu_detail::RU)
GKEMU_F2I(rd, gkemu_detail::RD)
#undef GKEMU_F2I

// Integer to float and double to float, correctly rounded in the mode.
#define GKEMU_I2F(sfx, M)                                                                      \
    static inline float __int2float_##sfx(int x) {                                            \
        return gkemu_detail::to_f32(gkemu_detail::parts_of_i64(x), M);                         \
    }                                                                                          \
    static inline float __uint2float_##sfx(unsigned int x) {                                  \
        return gkemu_detail::to_f32(gkemu_detail::parts_of_u64(false, x), M);                  \
    }                                                                                          \
    static inline float __ll2float_##sfx(long long x) {                                       \
        return gkemu_detail::to_f32(gkemu_detail::parts_of_i64(x), M);                         \
    }                                                                                          \
    static inline float __ull2float_##sfx(unsigned long long x) {                             \
        return gkemu_detail::to_f32(gkemu_detail::parts_of_u64(false, x), M);                  \
    }                                                                                          \
    static inline double __ll2double_##sfx(long long x) {                                     \
        return gkemu_detail::to_f64(gkemu_detail::parts_of_i64(x), M);                         \
    }                                                                                          \
    static inline double __ull2double_##sfx(unsigned long long x) {                           \
        return gkemu_detail::to_f64(gkemu_detail::parts_of_u64(false, x), M);                  \
    }                                                                                          \
    static inline float __double2float_##sfx(double x) {                                      \
        return gkemu_detail::to_f32(gkemu_detail::parts_of_f64(x), M);                         \
    }
GKEMU_I2F(rn, gkemu_detail::RN)
GKEMU_I2F(rz, gkemu_detail::RZ)
GKEMU_I2F(ru, gkemu_detail::RU)
GKEMU_I2F(rd, gkemu_detail::RD)
#undef GKEMU_I2F
static inline double __int2double_rn(int x) { return (double)x; }
static inline double __uint2double_rn(unsigned int x) { return (double)x; }

// Fast-math intrinsics, computed accurately (CUDA's hardware approximations are not
// reproduced). __fdividef keeps the documented special case: for 2^126 < |y| < 2^128 it gives
// 0 (NaN when x is infinite).
static inline float __fdividef(float x, float y) {
    const float ay = std::fabs(y);
    if (ay > 0x1p126f && ay < INFINITY) return std::isinf(x) ? NAN : 0.0f * x * y;
    return x / y;
}
static inline float fdividef(float x, float y) { return __fdividef(x, y); }
// Clamp to [+0, 1]; NaN gives +0.
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
static inline float __frsqrt_rn(float x) { return (float)(1.0 / std::sqrt((double)x)); }

// glibc declares __expf, __sinf, ... (its internal names, the same as CUDA's intrinsics) in
// <math.h> but does not export them: the CUDA names are macros over functions of ours.
static inline float gkemu_fast_expf(float x) { return expf(x); }
static inline float gkemu_fast_exp10f(float x) { return (float)std::pow(10.0, (double)x); }
static inline float gkemu_fast_logf(float x) { return logf(x); }
static inline float gkemu_fast_log2f(float x) { return log2f(x); }
static inline float gkemu_fast_log10f(float x) { return log10f(x); }
static inline float gkemu_fast_sinf(float x) { return sinf(x); }
static inline float gkemu_fast_cosf(float x) { return cosf(x); }
static inline float gkemu_fast_tanf(float x) { return tanf(x); }
static inline float gkemu_fast_powf(float x, float y) { return powf(x, y); }
static inline float gkemu_fast_tanhf(float x) { return tanhf(x); }
static inline float gkemu_fast_exp2f(float x) { return exp2f(x); }
static inline void gkemu_fast_sincosf(float x, float *s, float *c) {
    *s = sinf(x);
    *c = cosf(x);
}
#undef __expf
#undef __exp10f
#undef __logf
#undef __log2f
#undef __log10f
#undef __sinf
#undef __cosf
#undef __tanf
#undef __powf
#undef __sincosf
#undef __tanhf
#undef __exp2f
#define __expf(x) gkemu_fast_expf(x)
#define __exp10f(x) gkemu_fast_exp10f(x)
#define __logf(x) gkemu_fast_logf(x)
#define __log2f(x) gkemu_fast_log2f(x)
#define __log10f(x) gkemu_fast_log10f(x)
#define __sinf(x) gkemu_fast_sinf(x)
#define __cosf(x) gkemu_fast_cosf(x)
#define __tanf(x) gkemu_fast_tanf(x)
#define __powf(x, y) gkemu_fast_powf(x, y)
#define __sincosf(x, s, c) gkemu_fast_sincosf(x, s, c)
#define __tanhf(x) gkemu_fast_tanhf(x)
#define __exp2f(x) gkemu_fast_exp2f(x)

// ============================================================================================
// 5. Math functions of the CUDA Math API that the C library lacks
// ============================================================================================

namespace gkemu_detail {

constexpr double PI = 3.141592653589793238462643383279502884;
constexpr double SQRT_PI = 1.772453850905516027298167483341145183;
constexpr double TWO_OVER_SQRT_PI = 1.128379167095512573896158903121545172;
constexpr double SQRT2 = 1.414213562373095048801688724209698079;
constexpr double SQRT1_2 = 0.707106781186547524400844362104849039;
// sqrt(1/2) - (double)sqrt(1/2) (the double is above the true value), for an extra-precise
// product.
constexpr double SQRT1_2_LO = -4.8336466567264567e-17;

// sin(pi x) and cos(pi x), with the reduction done exactly (IEEE 754 sinPi/cosPi: sinpi(n)
// is +0 for integral n >= 0 and -0 for n < 0; cospi(n + 1/2) is +0).
static inline double sinpi(double x) {
    if (std::isnan(x) || std::isinf(x)) return x - x;
    const double t = std::fabs(x);
    const double r = std::fmod(t, 2.0);  // exact
    double y;
    if (r <= 0.25) y = std::sin(PI * r);
    else if (r <= 0.75) y = std::cos(PI * (0.5 - r));
    else if (r <= 1.25) y = std::sin(PI * (1.0 - r));
    else if (r <= 1.75) y = -std::cos(PI * (1.5 - r));
    else y = -std::sin(PI * (2.0 - r));
    if (y == 0.0) y = 0.0;
    return std::signbit(x) ? -y : y;
}
static inline double cospi(double x) {
    if (std::isnan(x) || std::isinf(x)) return x - x;
    const double r = std::fmod(std::fabs(x), 2.0);  // exact
    double y;
    if (r <= 0.25) y = std::cos(PI * r);
    else if (r <= 0.75) y = std::sin(PI * (0.5 - r));
    else if (r <= 1.25) y = -std::cos(PI * (1.0 - r));
    else if (r <= 1.75) y = std::sin(PI * (r - 1.5));
    else y = std::cos(PI * (2.0 - r));
    if (y == 0.0) y = 0.0;
    return y;
}

// exp(x^2) erfc(x).
static inline double erfcx(double x) {
    if (std::isnan(x)) return x;
    if (x < 0) {
        if (x < -26.7) return INFINITY;
        const double hi = x * x, lo = std::fma(x, x, -hi);
        return std::exp(hi) * (1.0 + lo) * std::erfc(x);
    }
    if (x < 12.0) {
        const double hi = x * x, lo = std::fma(x, x, -hi);
        return std::exp(hi) * (1.0 + lo) * std::erfc(x);
    }
    if (std::isinf(x)) return 0.0;
    // Asymptotic series: 1/(x sqrt(pi)) * sum (-1)^k (2k-1)!! / (2x^2)^k.
    const double inv = 1.0 / (2.0 * x * x);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 40; k++) {
        term *= -(2.0 * k - 1.0) * inv;
        sum += term;
        if (std::fabs(term) < 1e-17 * std::fabs(sum)) break;
    }
    return sum / (x * SQRT_PI);
}

// The inverse of erf on [-1/2, 1/2]: Halley's iteration on erf from its Taylor series start.
static inline double erfinv_small(double t) {
    const double t2 = t * t;
    double x = 0.5 * SQRT_PI * t *
               (1.0 + t2 * (PI / 12.0 + t2 * (7.0 * PI * PI / 480.0 +
                                               t2 * (127.0 * PI * PI * PI / 40320.0))));
    for (int i = 0; i < 6; i++) {
        const double f = std::erf(x) - t;
        const double d = TWO_OVER_SQRT_PI * std::exp(-x * x);
        const double u = f / d;
        const double nx = x - u / (1.0 + x * u);
        if (nx == x) break;
        x = nx;
    }
    return x;
}

// The inverse of erfc on (0, 1/2): Newton's iteration on log(erfc(x)) = -x^2 +
// log(erfcx(x)), which is close to a quadratic; the start is the asymptotic inverse.
static inline double erfcinv_small(double y) {
    const double ly = std::log(y);
    double x = std::sqrt(-ly);
    x = std::sqrt(-ly - std::log(x * SQRT_PI));
    for (int i = 0; i < 20; i++) {
        const double cx = erfcx(x);
        const double hi = x * x, lo = std::fma(x, x, -hi);
        const double g = ((-hi - ly) - lo) + std::log(cx);
        const double nx = x + g * (0.5 * SQRT_PI * cx);
        if (std::fabs(nx - x) <= 1e-16 * x) {
            x = nx;
            break;
        }
        x = nx;
    }
    return x;
}

static inline double erfcinv(double y) {
    if (std::isnan(y) || y < 0.0 || y > 2.0) return NAN;
    if (y == 0.0) return INFINITY;
    if (y == 2.0) return -INFINITY;
    if (y < 0.5) return erfcinv_small(y);
    if (y <= 1.5) return erfinv_small(1.0 - y);  // 1 - y exact
    return -erfcinv_small(2.0 - y);              // 2 - y exact
}

static inline double erfinv(double t) {
    if (std::isnan(t) || t < -1.0 || t > 1.0) return NAN;
    if (t == 1.0) return INFINITY;
    if (t == -1.0) return -INFINITY;
    if (t == 0.0) return t;
    const double a = std::fabs(t);
    const double x = a <= 0.5 ? erfinv_small(a) : erfcinv_small(1.0 - a);  // 1 - a exact
    return t < 0 ? -x : x;
}

// The standard normal CDF, 0.5 erfc(-x / sqrt 2), with -x / sqrt 2 carried in two parts.
static inline double normcdf(double x) {
    if (std::isnan(x)) return x;
    if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
    const double zh = -x * SQRT1_2;
    const double zl = std::fma(-x, SQRT1_2, -zh) - x * SQRT1_2_LO;
    const double e = std::erfc(zh);
    return 0.5 * (e - zl * TWO_OVER_SQRT_PI * std::exp(-zh * zh));
}
static inline double normcdfinv(double p) {
    if (std::isnan(p) || p < 0.0 || p > 1.0) return NAN;
    return -SQRT2 * erfcinv(2.0 * p);
}

// Modified Bessel functions of the first kind, orders 0 and 1.
static inline double bessel_i(int nu, double x) {
    const double ax = std::fabs(x);
    double r;
    if (std::isnan(x)) return x;
    if (ax <= 30.0) {
        // sum (x/2)^(2k + nu) / (k! (k + nu)!)
        const double q = 0.25 * ax * ax;
        double term = nu == 0 ? 1.0 : 0.5 * ax, sum = term;
        for (int k = 1; k < 500; k++) {
            term *= q / ((double)k * (double)(k + nu));
            sum += term;
            if (term < 1e-17 * sum) break;
        }
        r = sum;
    } else if (std::isinf(ax)) {
        r = INFINITY;
    } else {
        // e^x / sqrt(2 pi x) * sum_k (-1)^k prod_{j<=k} (mu - (2j-1)^2) / (k! (8x)^k)
        const double mu = 4.0 * nu * nu;
        double term = 1.0, sum = 1.0;
        for (int k = 1; k < 60; k++) {
            term *= -(mu - (2.0 * k - 1.0) * (2.0 * k - 1.0)) / (k * 8.0 * ax);
            sum += term;
            if (std::fabs(term) < 1e-17 * std::fabs(sum)) break;
        }
        // e^x split in two factors so that it overflows only where the result does.
        const double h = std::exp(0.5 * ax);
        r = h * (sum / std::sqrt(2.0 * PI * ax)) * h;
    }
    return (nu == 1 && x < 0) ? -r : r;
}

} // namespace gkemu_detail

// Each function below is a template (with a defaulted, unused parameter) so that it yields to
// a C library that declares the same name (glibc's sincos, exp10 with _GNU_SOURCE; C23's
// rsqrt, sinpi, cospi in newer ones): an unqualified call then picks the library's
// non-template declaration, and the header compiles either way.
#define GKEMU_MATH_TEMPLATE template <class GkemuUnused_ = void> static inline

GKEMU_MATH_TEMPLATE double rsqrt(double x) { return 1.0 / std::sqrt(x); }
GKEMU_MATH_TEMPLATE float rsqrtf(float x) { return (float)(1.0 / std::sqrt((double)x)); }
GKEMU_MATH_TEMPLATE double rcbrt(double x) { return 1.0 / std::cbrt(x); }
GKEMU_MATH_TEMPLATE float rcbrtf(float x) { return (float)(1.0 / std::cbrt((double)x)); }
GKEMU_MATH_TEMPLATE double sinpi(double x) { return gkemu_detail::sinpi(x); }
GKEMU_MATH_TEMPLATE float sinpif(float x) { return (float)gkemu_detail::sinpi(x); }
GKEMU_MATH_TEMPLATE double cospi(double x) { return gkemu_detail::cospi(x); }
GKEMU_MATH_TEMPLATE float cospif(float x) { return (float)gkemu_detail::cospi(x); }
GKEMU_MATH_TEMPLATE void sincospi(double x, double *s, double *c) {
    *s = gkemu_detail::sinpi(x);
    *c = gkemu_detail::cospi(x);
}
GKEMU_MATH_TEMPLATE void sincospif(float x, float *s, float *c) {
    *s = (float)gkemu_detail::sinpi(x);
    *c = (float)gkemu_detail::cospi(x);
}
GKEMU_MATH_TEMPLATE void sincos(double x, double *s, double *c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
GKEMU_MATH_TEMPLATE void sincosf(float x, float *s, float *c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
GKEMU_MATH_TEMPLATE double exp10(double x) { return std::pow(10.0, x); }
GKEMU_MATH_TEMPLATE float exp10f(float x) { return (float)std::pow(10.0, (double)x); }
GKEMU_MATH_TEMPLATE double normcdf(double x) { return gkemu_detail::normcdf(x); }
GKEMU_MATH_TEMPLATE float normcdff(float x) { return (float)gkemu_detail::normcdf(x); }
GKEMU_MATH_TEMPLATE double normcdfinv(double x) { return gkemu_detail::normcdfinv(x); }
GKEMU_MATH_TEMPLATE float normcdfinvf(float x) { return (float)gkemu_detail::normcdfinv(x); }
GKEMU_MATH_TEMPLATE double erfinv(double x) { return gkemu_detail::erfinv(x); }
GKEMU_MATH_TEMPLATE float erfinvf(float x) { return (float)gkemu_detail::erfinv(x); }
GKEMU_MATH_TEMPLATE double erfcinv(double x) { return gkemu_detail::erfcinv(x); }
GKEMU_MATH_TEMPLATE float erfcinvf(float x) { return (float)gkemu_detail::erfcinv(x); }
GKEMU_MATH_TEMPLATE double erfcx(double x) { return gkemu_detail::erfcx(x); }
GKEMU_MATH_TEMPLATE float erfcxf(float x) { return (float)gkemu_detail::erfcx(x); }
GKEMU_MATH_TEMPLATE double cyl_bessel_i0(double x) { return gkemu_detail::bessel_i(0, x); }
GKEMU_MATH_TEMPLATE float cyl_bessel_i0f(float x) { return (float)gkemu_detail::bessel_i(0, x); }
GKEMU_MATH_TEMPLATE double cyl_bessel_i1(double x) { return gkemu_detail::bessel_i(1, x); }
GKEMU_MATH_TEMPLATE float cyl_bessel_i1f(float x) { return (float)gkemu_detail::bessel_i(1, x); }
GKEMU_MATH_TEMPLATE double rhypot(double x, double y) { return 1.0 / std::hypot(x, y); }
GKEMU_MATH_TEMPLATE float rhypotf(float x, float y) {
    return (float)(1.0 / std::hypot((double)x, (double)y));
}
GKEMU_MATH_TEMPLATE double norm3d(double a, double b, double c) {
    return std::hypot(std::hypot(a, b), c);
}
GKEMU_MATH_TEMPLATE float norm3df(float a, float b, float c) {
    return (float)std::sqrt((double)a * a + (double)b * b + (double)c * c);
}
GKEMU_MATH_TEMPLATE double rnorm3d(double a, double b, double c) {
    return 1.0 / std::hypot(std::hypot(a, b), c);
}
GKEMU_MATH_TEMPLATE float rnorm3df(float a, float b, float c) {
    return (float)(1.0 / std::sqrt((double)a * a + (double)b * b + (double)c * c));
}
GKEMU_MATH_TEMPLATE double norm4d(double a, double b, double c, double d) {
    return std::hypot(std::hypot(a, b), std::hypot(c, d));
}
GKEMU_MATH_TEMPLATE float norm4df(float a, float b, float c, float d) {
    return (float)std::sqrt((double)a * a + (double)b * b + (double)c * c + (double)d * d);
}
GKEMU_MATH_TEMPLATE double rnorm4d(double a, double b, double c, double d) {
    return 1.0 / std::hypot(std::hypot(a, b), std::hypot(c, d));
}
GKEMU_MATH_TEMPLATE float rnorm4df(float a, float b, float c, float d) {
    return (float)(1.0 / std::sqrt((double)a * a + (double)b * b + (double)c * c + (double)d * d));
}
GKEMU_MATH_TEMPLATE double norm(int dim, const double *p) {
    double r = 0.0;
    for (int i = 0; i < dim; i++) r = std::hypot(r, p[i]);
    return r;
}
GKEMU_MATH_TEMPLATE float normf(int dim, const float *p) {
    double s = 0.0;
    for (int i = 0; i < dim; i++) s += (double)p[i] * p[i];
    return (float)std::sqrt(s);
}
GKEMU_MATH_TEMPLATE double rnorm(int dim, const double *p) { return 1.0 / norm(dim, p); }
GKEMU_MATH_TEMPLATE float rnormf(int dim, const float *p) {
    double s = 0.0;
    for (int i = 0; i < dim; i++) s += (double)p[i] * p[i];
    return (float)(1.0 / std::sqrt(s));
}

// CUDA's float overloads of these (math_functions.hpp), returning float.
GKEMU_MATH_TEMPLATE float exp10(float x) { return exp10f(x); }
GKEMU_MATH_TEMPLATE float rsqrt(float x) { return rsqrtf(x); }
GKEMU_MATH_TEMPLATE float rcbrt(float x) { return rcbrtf(x); }
GKEMU_MATH_TEMPLATE float sinpi(float x) { return sinpif(x); }
GKEMU_MATH_TEMPLATE float cospi(float x) { return cospif(x); }
GKEMU_MATH_TEMPLATE void sincospi(float x, float *s, float *c) { sincospif(x, s, c); }
GKEMU_MATH_TEMPLATE void sincos(float x, float *s, float *c) { sincosf(x, s, c); }
GKEMU_MATH_TEMPLATE float erfinv(float x) { return erfinvf(x); }
GKEMU_MATH_TEMPLATE float erfcinv(float x) { return erfcinvf(x); }
GKEMU_MATH_TEMPLATE float normcdfinv(float x) { return normcdfinvf(x); }
GKEMU_MATH_TEMPLATE float normcdf(float x) { return normcdff(x); }
GKEMU_MATH_TEMPLATE float erfcx(float x) { return erfcxf(x); }
GKEMU_MATH_TEMPLATE float cyl_bessel_i0(float x) { return cyl_bessel_i0f(x); }
GKEMU_MATH_TEMPLATE float cyl_bessel_i1(float x) { return cyl_bessel_i1f(x); }
// Bessel functions of the first and second kind: glibc's j0f ... ynf (declared with
// _DEFAULT_SOURCE or _GNU_SOURCE, which g++ defines); CUDA's float overloads over them.
#if defined(__USE_MISC)
GKEMU_MATH_TEMPLATE float j0(float x) { return j0f(x); }
GKEMU_MATH_TEMPLATE float j1(float x) { return j1f(x); }
GKEMU_MATH_TEMPLATE float jn(int n, float x) { return jnf(n, x); }
GKEMU_MATH_TEMPLATE float y0(float x) { return y0f(x); }
GKEMU_MATH_TEMPLATE float y1(float x) { return y1f(x); }
GKEMU_MATH_TEMPLATE float yn(int n, float x) { return ynf(n, x); }
#endif
#undef GKEMU_MATH_TEMPLATE

// pow with an int exponent returns float for a float base in CUDA (C++11's std::pow would
// promote to double).
static inline float pow(float a, int b) { return (float)std::pow((double)a, (double)b); }
static inline double pow(double a, int b) { return std::pow(a, (double)b); }

// CUDA's global min and max (math_functions.hpp): mixed signed/unsigned arguments compare as
// unsigned, float uses fminf/fmaxf, a float with a double gives a double.
static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) {
    return a < b ? a : b;
}
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}
static inline unsigned int min(unsigned int a, unsigned int b) { return umin(a, b); }
static inline unsigned int min(int a, unsigned int b) { return umin((unsigned int)a, b); }
static inline unsigned int min(unsigned int a, int b) { return umin(a, (unsigned int)b); }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long min(long a, unsigned long b) {
    return min((unsigned long)a, b);
}
static inline unsigned long min(unsigned long a, long b) {
    return min(a, (unsigned long)b);
}
static inline long long min(long long a, long long b) { return llmin(a, b); }
static inline unsigned long long min(unsigned long long a, unsigned long long b) {
    return ullmin(a, b);
}
static inline unsigned long long min(long long a, unsigned long long b) {
    return ullmin((unsigned long long)a, b);
}
static inline unsigned long long min(unsigned long long a, long long b) {
    return ullmin(a, (unsigned long long)b);
}
static inline float min(float a, float b) { return fminf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double min(float a, double b) { return fmin((double)a, b); }
static inline double min(double a, float b) { return fmin(a, (double)b); }
static inline unsigned int max(unsigned int a, unsigned int b) { return umax(a, b); }
static inline unsigned int max(int a, unsigned int b) { return umax((unsigned int)a, b); }
static inline unsigned int max(unsigned int a, int b) { return umax(a, (unsigned int)b); }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline unsigned long max(long a, unsigned long b) {
    return max((unsigned long)a, b);
}
static inline unsigned long max(unsigned long a, long b) {
    return max(a, (unsigned long)b);
}
static inline long long max(long long a, long long b) { return llmax(a, b); }
static inline unsigned long long max(unsigned long long a, unsigned long long b) {
    return ullmax(a, b);
}
static inline unsigned long long max(long long a, unsigned long long b) {
    return ullmax((unsigned long long)a, b);
}
static inline unsigned long long max(unsigned long long a, long long b) {
    return ullmax(a, (unsigned long long)b);
}
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double max(float a, double b) { return fmax((double)a, b); }
static inline double max(double a, float b) { return fmax(a, (double)b); }

// ============================================================================================
// 6. 16-bit floats (cuda_fp16.h, cuda_bf16.h)
// ============================================================================================

struct __half_raw {
    unsigned short x;
};
struct __attribute__((aligned(4))) __half2_raw {
    unsigned short x;
    unsigned short y;
};
struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __attribute__((aligned(4))) __nv_bfloat162_raw {
    unsigned short x;
    unsigned short y;
};

namespace gkemu_detail {
// 16-bit float -> integer, rounded in the mode, saturated; NaN per PTX cvt (see f2i).
template <class I> static inline I h2i(float f, int mode) noexcept {
    return f2i<I>((double)f, mode, sizeof(I) == 8 ? (I)((unsigned long long)1 << 63) : (I)0);
}
} // namespace gkemu_detail

// The members a CUDA __half / __nv_bfloat16 has: construction from and conversion to the
// arithmetic types (to integers: round toward zero, saturated, as __half2int_rz etc.).
#define GKEMU_HALF_CONVERSIONS(T, FROM_F32, FROM_F64, TO_F32, FROM_INT)                        \
    constexpr T(float f) noexcept : __x(FROM_F32(f)) {}                                        \
    constexpr T(double d) noexcept : __x(FROM_F64(d)) {}                                       \
    constexpr T(short v) noexcept : __x(FROM_INT(v)) {}                                        \
    constexpr T(unsigned short v) noexcept : __x(FROM_INT(v)) {}                               \
    constexpr T(int v) noexcept : __x(FROM_INT(v)) {}                                          \
    constexpr T(unsigned int v) noexcept : __x(FROM_INT(v)) {}                                 \
    constexpr T(long v) noexcept : __x(FROM_INT(v)) {}                                         \
    constexpr T(unsigned long v) noexcept : __x(FROM_INT(v)) {}                                \
    constexpr T(long long v) noexcept : __x(FROM_INT(v)) {}                                    \
    constexpr T(unsigned long long v) noexcept : __x(FROM_INT(v)) {}                           \
    constexpr operator float() const noexcept { return TO_F32(__x); }                          \
    T &operator=(float f) noexcept { __x = FROM_F32(f); return *this; }                        \
    T &operator=(double d) noexcept { __x = FROM_F64(d); return *this; }                       \
    T &operator=(short v) noexcept { __x = FROM_INT(v); return *this; }                        \
    T &operator=(unsigned short v) noexcept { __x = FROM_INT(v); return *this; }               \
    T &operator=(int v) noexcept { __x = FROM_INT(v); return *this; }                          \
    T &operator=(unsigned int v) noexcept { __x = FROM_INT(v); return *this; }                 \
    T &operator=(long v) noexcept { __x = FROM_INT(v); return *this; }                         \
    T &operator=(unsigned long v) noexcept { __x = FROM_INT(v); return *this; }                \
    T &operator=(long long v) noexcept { __x = FROM_INT(v); return *this; }                    \
    T &operator=(unsigned long long v) noexcept { __x = FROM_INT(v); return *this; }           \
    operator signed char() const noexcept {                                                    \
        return gkemu_detail::h2i<signed char>(TO_F32(__x), gkemu_detail::RZ);                  \
    }                                                                                          \
    operator unsigned char() const noexcept {                                                  \
        return gkemu_detail::h2i<unsigned char>(TO_F32(__x), gkemu_detail::RZ);                \
    }                                                                                          \
    operator char() const noexcept {                                                           \
        return (char)gkemu_detail::h2i<std::conditional<CHAR_MIN == 0, unsigned char,          \
                                                        signed char>::type>(TO_F32(__x),       \
                                                                            gkemu_detail::RZ); \
    }                                                                                          \
    operator short() const noexcept {                                                          \
        return gkemu_detail::h2i<short>(TO_F32(__x), gkemu_detail::RZ);                        \
    }                                                                                          \
    operator unsigned short() const noexcept {                                                 \
        return gkemu_detail::h2i<unsigned short>(TO_F32(__x), gkemu_detail::RZ);               \
    }                                                                                          \
    operator int() const noexcept { return gkemu_detail::h2i<int>(TO_F32(__x), gkemu_detail::RZ); } \
    operator unsigned int() const noexcept {                                                   \
        return gkemu_detail::h2i<unsigned int>(TO_F32(__x), gkemu_detail::RZ);                 \
    }                                                                                          \
    operator long() const noexcept {                                                           \
        return gkemu_detail::h2i<long>(TO_F32(__x), gkemu_detail::RZ);                         \
    }                                                                                          \
    operator unsigned long() const noexcept {                                                  \
        return gkemu_detail::h2i<unsigned long>(TO_F32(__x), gkemu_detail::RZ);                \
    }                                                                                          \
    operator long long() const noexcept {                                                      \
        return gkemu_detail::h2i<long long>(TO_F32(__x), gkemu_detail::RZ);                    \
    }                                                                                          \
    operator unsigned long long() const noexcept {                                             \
        return gkemu_detail::h2i<unsigned long long>(TO_F32(__x), gkemu_detail::RZ);           \
    }                                                                                          \
    constexpr operator bool() const noexcept { return (__x & 0x7fffu) != 0; }

namespace gkemu_detail {
template <class I> constexpr inline uint16_t int_to_f16_rn(I v) noexcept {
    return std::is_signed<I>::value ? to_f16(parts_of_i64((long long)v), RN)
                                    : to_f16(parts_of_u64(false, (unsigned long long)v), RN);
}
template <class I> constexpr inline uint16_t int_to_bf16_rn(I v) noexcept {
    return std::is_signed<I>::value
               ? to_bf16(parts_of_i64((long long)v), RN, 0x7fffu)
               : to_bf16(parts_of_u64(false, (unsigned long long)v), RN, 0x7fffu);
}
constexpr inline uint16_t f32_to_f16_rn_(float f) noexcept { return f32_to_f16_rn(f); }
constexpr inline uint16_t f64_to_f16_rn_(double d) noexcept { return f64_to_f16(d, RN); }
constexpr inline uint16_t f64_to_bf16_rn_(double d) noexcept { return f64_to_bf16(d, RN); }
} // namespace gkemu_detail

struct __attribute__((aligned(2))) __half {
    unsigned short __x;
    __half() = default;
    constexpr __half(const __half_raw &r) noexcept : __x(r.x) {}
    __half &operator=(const __half_raw &r) noexcept {
        __x = r.x;
        return *this;
    }
    constexpr operator __half_raw() const noexcept { return __half_raw{__x}; }
#if !defined(__CUDA_NO_HALF_CONVERSIONS__)
    GKEMU_HALF_CONVERSIONS(__half, gkemu_detail::f32_to_f16_rn_, gkemu_detail::f64_to_f16_rn_,
                           gkemu_detail::f16_to_f32, gkemu_detail::int_to_f16_rn)
#endif
};

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(const __nv_bfloat16_raw &r) noexcept : __x(r.x) {}
    __nv_bfloat16 &operator=(const __nv_bfloat16_raw &r) noexcept {
        __x = r.x;
        return *this;
    }
    constexpr operator __nv_bfloat16_raw() const noexcept { return __nv_bfloat16_raw{__x}; }
#if !defined(__CUDA_NO_BFLOAT16_CONVERSIONS__)
    GKEMU_HALF_CONVERSIONS(__nv_bfloat16, gkemu_detail::f32_to_bf16_rn,
                           gkemu_detail::f64_to_bf16_rn_, gkemu_detail::bf16_to_f32,
                           gkemu_detail::int_to_bf16_rn)
#endif
};
#undef GKEMU_HALF_CONVERSIONS

struct __attribute__((aligned(4))) __half2 {
    __half x;
    __half y;
    __half2() = default;
    constexpr __half2(const __half &a, const __half &b) noexcept : x(a), y(b) {}
    constexpr __half2(const __half2_raw &r) noexcept : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
    __half2 &operator=(const __half2_raw &r) noexcept {
        x = __half_raw{r.x};
        y = __half_raw{r.y};
        return *this;
    }
    constexpr operator __half2_raw() const noexcept { return __half2_raw{x.__x, y.__x}; }
};

struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x;
    __nv_bfloat16 y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16 &a, const __nv_bfloat16 &b) noexcept
        : x(a), y(b) {}
    constexpr __nv_bfloat162(const __nv_bfloat162_raw &r) noexcept
        : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
    __nv_bfloat162 &operator=(const __nv_bfloat162_raw &r) noexcept {
        x = __nv_bfloat16_raw{r.x};
        y = __nv_bfloat16_raw{r.y};
        return *this;
    }
    constexpr operator __nv_bfloat162_raw() const noexcept {
        return __nv_bfloat162_raw{x.__x, y.__x};
    }
};

typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// ---- bit reinterpretation and construction ------------------------------------------------

static constexpr inline __half gkemu_mk_half(unsigned short b) noexcept {
    return __half(__half_raw{b});
}
static constexpr inline __nv_bfloat16 gkemu_mk_bf16(unsigned short b) noexcept {
    return __nv_bfloat16(__nv_bfloat16_raw{b});
}
static constexpr inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static constexpr inline short __half_as_short(__half h) { return (short)h.__x; }
static constexpr inline __half __ushort_as_half(unsigned short b) { return gkemu_mk_half(b); }
static constexpr inline __half __short_as_half(short b) {
    return gkemu_mk_half((unsigned short)b);
}
static constexpr inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static constexpr inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static constexpr inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) {
    return gkemu_mk_bf16(b);
}
static constexpr inline __nv_bfloat16 __short_as_bfloat16(short b) {
    return gkemu_mk_bf16((unsigned short)b);
}

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7c00u)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7fffu)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001u)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7bffu)
#define CUDART_NEG_ZERO_FP16 __ushort_as_half((unsigned short)0x8000u)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000u)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3c00u)
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7f80u)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7fffu)
#define CUDART_MIN_DENORM_BF16 __ushort_as_bfloat16((unsigned short)0x0001u)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7f7fu)
#define CUDART_NEG_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x8000u)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000u)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3f80u)

// ---- conversions: float, double ------------------------------------------------------------

static constexpr inline float __half2float(__half h) { return gkemu_detail::f16_to_f32(h.__x); }
static constexpr inline __half __float2half(float f) {
    return gkemu_mk_half(gkemu_detail::f32_to_f16_rn(f));
}
static constexpr inline __half __float2half_rn(float f) {
    return gkemu_mk_half(gkemu_detail::f32_to_f16_rn(f));
}
static constexpr inline __half __float2half_rz(float f) {
    return gkemu_mk_half(gkemu_detail::f32_to_f16(f, gkemu_detail::RZ));
}
static constexpr inline __half __float2half_ru(float f) {
    return gkemu_mk_half(gkemu_detail::f32_to_f16(f, gkemu_detail::RU));
}
static constexpr inline __half __float2half_rd(float f) {
    return gkemu_mk_half(gkemu_detail::f32_to_f16(f, gkemu_detail::RD));
}
// Directly from double, rounded once.
static constexpr inline __half __double2half(double d) {
    return gkemu_mk_half(gkemu_detail::f64_to_f16(d, gkemu_detail::RN));
}

static constexpr inline float __bfloat162float(__nv_bfloat16 h) {
    return gkemu_detail::bf16_to_f32(h.__x);
}
static constexpr inline __nv_bfloat16 __float2bfloat16(float f) {
    return gkemu_mk_bf16(gkemu_detail::f32_to_bf16_rn(f));
}
static constexpr inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    return gkemu_mk_bf16(gkemu_detail::f32_to_bf16_rn(f));
}
static constexpr inline __nv_bfloat16 __float2bfloat16_rz(float f) {
    return gkemu_mk_bf16(gkemu_detail::f32_to_bf16(f, gkemu_detail::RZ));
}
static constexpr inline __nv_bfloat16 __float2bfloat16_ru(float f) {
    return gkemu_mk_bf16(gkemu_detail::f32_to_bf16(f, gkemu_detail::RU));
}
static constexpr inline __nv_bfloat16 __float2bfloat16_rd(float f) {
    return gkemu_mk_bf16(gkemu_detail::f32_to_bf16(f, gkemu_detail::RD));
}
static constexpr inline __nv_bfloat16 __double2bfloat16(double d) {
    return gkemu_mk_bf16(gkemu_detail::f64_to_bf16(d, gkemu_detail::RN));
}
static constexpr inline double __bfloat162double(__nv_bfloat16 h) { return __bfloat162float(h); }

// ---- conversions: integers -----------------------------------------------------------------

// Integer -> 16-bit float in the four modes; 16-bit float -> integer in the four modes
// (saturated; NaN -> 0, or 1 << 63 for the 64-bit results, as PTX cvt).
#define GKEMU_H_INT(sfx, M)                                                                    \
    static inline __half __int2half_##sfx(int v) {                                            \
        return gkemu_mk_half(gkemu_detail::to_f16(gkemu_detail::parts_of_i64(v), M));          \
    }                                                                                          \
    static inline __half __uint2half_##sfx(unsigned int v) {                                  \
        return gkemu_mk_half(gkemu_detail::to_f16(gkemu_detail::parts_of_u64(false, v), M));   \
    }                                                                                          \
    static inline __half __short2half_##sfx(short v) {                                        \
        return gkemu_mk_half(gkemu_detail::to_f16(gkemu_detail::parts_of_i64(v), M));          \
    }                                                                                          \
    static inline __half __ushort2half_##sfx(unsigned short v) {                              \
        return gkemu_mk_half(gkemu_detail::to_f16(gkemu_detail::parts_of_u64(false, v), M));   \
    }                                                                                          \
    static inline __half __ll2half_##sfx(long long v) {                                       \
        return gkemu_mk_half(gkemu_detail::to_f16(gkemu_detail::parts_of_i64(v), M));          \
    }                                                                                          \
    static inline __half __ull2half_##sfx(unsigned long long v) {                             \
        return gkemu_mk_half(gkemu_detail::to_f16(gkemu_detail::parts_of_u64(false, v), M));   \
    }                                                                                          \
    static inline int __half2int_##sfx(__half h) {                                            \
        return gkemu_detail::h2i<int>(__half2float(h), M);                                     \
    }                                                                                          \
    static inline unsigned int __half2uint_##sfx(__half h) {                                  \
        return gkemu_detail::h2i<unsigned int>(__half2float(h), M);                            \
    }                                                                                          \
    static inline short __half2short_##sfx(__half h) {                                        \
        return gkemu_detail::h2i<short>(__half2float(h), M);                                   \
    }                                                                                          \
    static inline unsigned short __half2ushort_##sfx(__half h) {                              \
        return gkemu_detail::h2i<unsigned short>(__half2float(h), M);                          \
    }                                                                                          \
    static inline long long __half2ll_##sfx(__half h) {                                       \
        return gkemu_detail::h2i<long long>(__half2float(h), M);                               \
    }                                                                                          \
    static inline unsigned long long __half2ull_##sfx(__half h) {                             \
        return gkemu_detail::h2i<unsigned long long>(__half2float(h), M);                      \
    }                                                                                          \
    static inline __nv_bfloat16 __int2bfloat16_##sfx(int v) {                                 \
        return gkemu_mk_bf16(gkemu_detail::to_bf16(gkemu_detail::parts_of_i64(v), M, 0x7fffu)); \
    }                                                                                          \
    static inline __nv_bfloat16 __uint2bfloat16_##sfx(unsigned int v) {                       \
        return gkemu_mk_bf16(                                                                  \
            gkemu_detail::to_bf16(gkemu_detail::parts_of_u64(false, v), M, 0x7fffu));          \
    }                                                                                          \
    static inline __nv_bfloat16 __short2bfloat16_##sfx(short v) {                             \
        return gkemu_mk_bf16(gkemu_detail::to_bf16(gkemu_detail::parts_of_i64(v), M, 0x7fffu)); \
    }                                                                                          \
    static inline __nv_bfloat16 __ushort2bfloat16_##sfx(unsigned short v) {                   \
        return gkemu_mk_bf16(                                                                  \
            gkemu_detail::to_bf16(gkemu_detail::parts_of_u64(false, v), M, 0x7fffu));          \
    }                                                                                          \
    static inline __nv_bfloat16 __ll2bfloat16_##sfx(long long v) {                            \
        return gkemu_mk_bf16(gkemu_detail::to_bf16(gkemu_detail::parts_of_i64(v), M, 0x7fffu)); \
    }                                                                                          \
    static inline __nv_bfloat16 __ull2bfloat16_##sfx(unsigned long long v) {                  \
        return gkemu_mk_bf16(                                                                  \
            gkemu_detail::to_bf16(gkemu_detail::parts_of_u64(false, v), M, 0x7fffu));          \
    }                                                                                          \
    static inline int __bfloat162int_##sfx(__nv_bfloat16 h) {                                 \
        return gkemu_detail::h2i<int>(__bfloat162float(h), M);                                 \
    }                                                                                          \
    static inline unsigned int __bfloat162uint_##sfx(__nv_bfloat16 h) {                       \
        return gkemu_detail::h2i<unsigned int>(__bfloat162float(h), M);                        \
    }                                                                                          \
    static inline short __bfloat162short_##sfx(__nv_bfloat16 h) {                             \
        return gkemu_detail::h2i<short>(__bfloat162float(h), M);                               \
    }                                                                                          \
    static inline unsigned short __bfloat162ushort_##sfx(__nv_bfloat16 h) {                   \
        return gkemu_detail::h2i<unsigned short>(__bfloat162float(h), M);                      \
    }                                                                                          \
    static inline long long __bfloat162ll_##sfx(__nv_bfloat16 h) {                            \
        return gkemu_detail::h2i<long long>(__bfloat162float(h), M);                           \
    }                                                                                          \
    static inline unsigned long long __bfloat162ull_##sfx(__nv_bfloat16 h) {                  \
        return gkemu_detail::h2i<unsigned long long>(__bfloat162float(h), M);                  \
    }
GKEMU_H_INT(rn, gkemu_detail::RN)
GKEMU_H_INT(rz, gkemu_detail::RZ)
GKEMU_H_INT(ru, gkemu_detail::RU)
GKEMU_H_INT(rd, gkemu_detail::RD)
#undef GKEMU_H_INT
static inline signed char __half2char_rz(__half h) {
    return gkemu_detail::h2i<signed char>(__half2float(h), gkemu_detail::RZ);
}
static inline unsigned char __half2uchar_rz(__half h) {
    return gkemu_detail::h2i<unsigned char>(__half2float(h), gkemu_detail::RZ);
}
static inline signed char __bfloat162char_rz(__nv_bfloat16 h) {
    return gkemu_detail::h2i<signed char>(__bfloat162float(h), gkemu_detail::RZ);
}
static inline unsigned char __bfloat162uchar_rz(__nv_bfloat16 h) {
    return gkemu_detail::h2i<unsigned char>(__bfloat162float(h), gkemu_detail::RZ);
}

// ---- pairs ---------------------------------------------------------------------------------

static constexpr inline __half2 make_half2(__half x, __half y) { return __half2(x, y); }
static constexpr inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) {
    return __nv_bfloat162(x, y);
}
static constexpr inline __half2 __halves2half2(__half lo, __half hi) { return __half2(lo, hi); }
static constexpr inline __half2 __half2half2(__half a) { return __half2(a, a); }
static constexpr inline __half __low2half(__half2 a) { return a.x; }
static constexpr inline __half __high2half(__half2 a) { return a.y; }
static constexpr inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static constexpr inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
static constexpr inline __half2 __low2half2(__half2 a) { return __half2(a.x, a.x); }
static constexpr inline __half2 __high2half2(__half2 a) { return __half2(a.y, a.y); }
static constexpr inline __half2 __lowhigh2highlow(__half2 a) { return __half2(a.y, a.x); }
static constexpr inline float __low2float(__half2 a) { return __half2float(a.x); }
static constexpr inline float __high2float(__half2 a) { return __half2float(a.y); }
static constexpr inline __half2 __float2half2_rn(float f) {
    return __half2(__float2half_rn(f), __float2half_rn(f));
}
static constexpr inline __half2 __floats2half2_rn(float lo, float hi) {
    return __half2(__float2half_rn(lo), __float2half_rn(hi));
}
static constexpr inline __half2 __float22half2_rn(float2 f) {
    return __half2(__float2half_rn(f.x), __float2half_rn(f.y));
}
static constexpr inline float2 __half22float2(__half2 h) {
    return float2{__half2float(h.x), __half2float(h.y)};
}

static constexpr inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return __nv_bfloat162(lo, hi);
}
static constexpr inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) {
    return __nv_bfloat162(a, a);
}
static constexpr inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) { return a.x; }
static constexpr inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) { return a.y; }
static constexpr inline __nv_bfloat162 __lows2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) {
    return __nv_bfloat162(a.x, b.x);
}
static constexpr inline __nv_bfloat162 __highs2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) {
    return __nv_bfloat162(a.y, b.y);
}
static constexpr inline __nv_bfloat162 __low2bfloat162(__nv_bfloat162 a) {
    return __nv_bfloat162(a.x, a.x);
}
static constexpr inline __nv_bfloat162 __high2bfloat162(__nv_bfloat162 a) {
    return __nv_bfloat162(a.y, a.y);
}
static constexpr inline __nv_bfloat162 __lowhigh2highlow(__nv_bfloat162 a) {
    return __nv_bfloat162(a.y, a.x);
}
static constexpr inline float __low2float(__nv_bfloat162 a) { return __bfloat162float(a.x); }
static constexpr inline float __high2float(__nv_bfloat162 a) { return __bfloat162float(a.y); }
static constexpr inline __nv_bfloat162 __float2bfloat162_rn(float f) {
    return __nv_bfloat162(__float2bfloat16_rn(f), __float2bfloat16_rn(f));
}
static constexpr inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return __nv_bfloat162(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
}
static constexpr inline __nv_bfloat162 __float22bfloat162_rn(float2 f) {
    return __nv_bfloat162(__float2bfloat16_rn(f.x), __float2bfloat16_rn(f.y));
}
static constexpr inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    return float2{__bfloat162float(h.x), __bfloat162float(h.y)};
}

// ---- arithmetic, comparisons and math on one value ------------------------------------------
// Computed in float and rounded back once: for + - * / that is the correctly rounded result
// (float has 24 >= 2 * 11 + 2 bits, so the double rounding is innocuous); the fused
// multiply-add is computed exactly (in double, with round-to-odd) and rounded once.

namespace gkemu_detail {
// a * b + c for 16-bit operands: the product is exact in double; the sum is made
// round-to-odd with its exact error, so that the final rounding to 16 bits is correct.
static inline double fma_odd(float a, float b, float c) noexcept {
    const double p = (double)a * (double)b;
    const double s = p + (double)c;
    if (std::isinf(s) || std::isnan(s)) return s;
    const double bb = s - p;
    const double err = (p - (s - bb)) + ((double)c - bb);  // TwoSum: p + c == s + err
    if (err != 0.0) {
        const uint64_t u = bit_cast<uint64_t>(s);
        if ((u & 1u) == 0) {
            const bool toward_larger_mag = (err > 0) == (s > 0);
            return bit_cast<double>(toward_larger_mag ? u + 1 : u - 1);
        }
    }
    return s;
}
static inline float sat01(float f) noexcept { return f > 0.0f ? (f < 1.0f ? f : 1.0f) : 0.0f; }
// max/min as PTX max/min: a NaN operand gives the other (both NaN: a NaN); +0 > -0.
template <class F> static inline F fmax_ptx(F a, F b) noexcept {
    if (a != a) return b;
    if (b != b) return a;
    if (a == b) return std::signbit(a) ? b : a;
    return a > b ? a : b;
}
template <class F> static inline F fmin_ptx(F a, F b) noexcept {
    if (a != a) return b;
    if (b != b) return a;
    if (a == b) return std::signbit(a) ? a : b;
    return a < b ? a : b;
}
} // namespace gkemu_detail

#define GKEMU_H_SCALAR(T, TOF, FROMF, FROMD, NANV)                                              \
    static inline T __hadd(T a, T b) { return FROMF(TOF(a) + TOF(b)); }                         \
    static inline T __hsub(T a, T b) { return FROMF(TOF(a) - TOF(b)); }                         \
    static inline T __hmul(T a, T b) { return FROMF(TOF(a) * TOF(b)); }                         \
    static inline T __hdiv(T a, T b) { return FROMF(TOF(a) / TOF(b)); }                         \
    static inline T __hadd_rn(T a, T b) { return __hadd(a, b); }                                \
    static inline T __hsub_rn(T a, T b) { return __hsub(a, b); }                                \
    static inline T __hmul_rn(T a, T b) { return __hmul(a, b); }                                \
    static inline T __hfma(T a, T b, T c) {                                                     \
        return FROMD(gkemu_detail::fma_odd(TOF(a), TOF(b), TOF(c)));                            \
    }                                                                                           \
    static inline T __hadd_sat(T a, T b) { return FROMF(gkemu_detail::sat01(TOF(__hadd(a, b)))); } \
    static inline T __hsub_sat(T a, T b) { return FROMF(gkemu_detail::sat01(TOF(__hsub(a, b)))); } \
    static inline T __hmul_sat(T a, T b) { return FROMF(gkemu_detail::sat01(TOF(__hmul(a, b)))); } \
    static inline T __hfma_sat(T a, T b, T c) {                                                 \
        return FROMF(gkemu_detail::sat01(TOF(__hfma(a, b, c))));                                \
    }                                                                                           \
    static inline T __hfma_relu(T a, T b, T c) {                                                \
        const T r = __hfma(a, b, c);                                                            \
        const float f = TOF(r);                                                                 \
        return f != f ? NANV : (f < 0.0f ? FROMF(0.0f) : r);                                    \
    }                                                                                           \
    static inline T __hneg(T a) {                                                               \
        T r = a;                                                                                \
        r.__x = (unsigned short)(a.__x ^ 0x8000u);                                              \
        return r;                                                                               \
    }                                                                                           \
    static inline T __habs(T a) {                                                               \
        T r = a;                                                                                \
        r.__x = (unsigned short)(a.__x & 0x7fffu);                                              \
        return r;                                                                               \
    }                                                                                           \
    static inline bool __hisnan(T a) { return TOF(a) != TOF(a); }                               \
    static inline int __hisinf(T a) {                                                           \
        const float f = TOF(a);                                                                 \
        return std::isinf(f) ? (f < 0 ? -1 : 1) : 0;                                            \
    }                                                                                           \
    static inline bool __heq(T a, T b) { return TOF(a) == TOF(b); }                             \
    static inline bool __hne(T a, T b) { return TOF(a) < TOF(b) || TOF(a) > TOF(b); }           \
    static inline bool __hlt(T a, T b) { return TOF(a) < TOF(b); }                              \
    static inline bool __hle(T a, T b) { return TOF(a) <= TOF(b); }                             \
    static inline bool __hgt(T a, T b) { return TOF(a) > TOF(b); }                              \
    static inline bool __hge(T a, T b) { return TOF(a) >= TOF(b); }                             \
    static inline bool __hequ(T a, T b) { return !(TOF(a) < TOF(b) || TOF(a) > TOF(b)); }       \
    static inline bool __hneu(T a, T b) { return !(TOF(a) == TOF(b)); }                         \
    static inline bool __hltu(T a, T b) { return !(TOF(a) >= TOF(b)); }                         \
    static inline bool __hleu(T a, T b) { return !(TOF(a) > TOF(b)); }                          \
    static inline bool __hgtu(T a, T b) { return !(TOF(a) <= TOF(b)); }                         \
    static inline bool __hgeu(T a, T b) { return !(TOF(a) < TOF(b)); }                          \
    static inline T __hmax(T a, T b) {                                                          \
        if (__hisnan(a) && __hisnan(b)) return NANV;                                            \
        return FROMF(gkemu_detail::fmax_ptx(TOF(a), TOF(b)));                                   \
    }                                                                                           \
    static inline T __hmin(T a, T b) {                                                          \
        if (__hisnan(a) && __hisnan(b)) return NANV;                                            \
        return FROMF(gkemu_detail::fmin_ptx(TOF(a), TOF(b)));                                   \
    }                                                                                           \
    static inline T __hmax_nan(T a, T b) {                                                      \
        if (__hisnan(a) || __hisnan(b)) return NANV;                                            \
        return __hmax(a, b);                                                                    \
    }                                                                                           \
    static inline T __hmin_nan(T a, T b) {                                                      \
        if (__hisnan(a) || __hisnan(b)) return NANV;                                            \
        return __hmin(a, b);                                                                    \
    }                                                                                           \
    static inline T hsqrt(T a) { return FROMF(std::sqrt(TOF(a))); }                             \
    static inline T hrsqrt(T a) { return FROMD(1.0 / std::sqrt((double)TOF(a))); }              \
    static inline T hrcp(T a) { return FROMD(1.0 / (double)TOF(a)); }                            \
    static inline T hexp(T a) { return FROMF(std::exp(TOF(a))); }                               \
    static inline T hexp2(T a) { return FROMF(std::exp2(TOF(a))); }                             \
    static inline T hexp10(T a) { return FROMD(std::pow(10.0, (double)TOF(a))); }               \
    static inline T hlog(T a) { return FROMF(std::log(TOF(a))); }                               \
    static inline T hlog2(T a) { return FROMF(std::log2(TOF(a))); }                             \
    static inline T hlog10(T a) { return FROMF(std::log10(TOF(a))); }                           \
    static inline T hsin(T a) { return FROMF(std::sin(TOF(a))); }                               \
    static inline T hcos(T a) { return FROMF(std::cos(TOF(a))); }                               \
    static inline T htanh(T a) { return FROMF(std::tanh(TOF(a))); }                             \
    static inline T htanh_approx(T a) { return htanh(a); }                                      \
    static inline T hceil(T a) { return FROMF(std::ceil(TOF(a))); }                             \
    static inline T hfloor(T a) { return FROMF(std::floor(TOF(a))); }                           \
    static inline T htrunc(T a) { return FROMF(std::trunc(TOF(a))); }                           \
    static inline T hrint(T a) { return FROMF((float)gkemu_detail::rint_even(TOF(a))); }

GKEMU_H_SCALAR(__half, __half2float, __float2half_rn, __double2half, CUDART_NAN_FP16)
GKEMU_H_SCALAR(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn, __double2bfloat16,
               CUDART_NAN_BF16)
#undef GKEMU_H_SCALAR

// ---- the same on pairs ---------------------------------------------------------------------

#define GKEMU_H_PAIR(T2, T, BOOLV)                                                              \
    static inline T2 __hadd2(T2 a, T2 b) { return T2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }     \
    static inline T2 __hsub2(T2 a, T2 b) { return T2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }     \
    static inline T2 __hmul2(T2 a, T2 b) { return T2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }     \
    static inline T2 __h2div(T2 a, T2 b) { return T2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }     \
    static inline T2 __hadd2_rn(T2 a, T2 b) { return __hadd2(a, b); }                          \
    static inline T2 __hsub2_rn(T2 a, T2 b) { return __hsub2(a, b); }                          \
    static inline T2 __hmul2_rn(T2 a, T2 b) { return __hmul2(a, b); }                          \
    static inline T2 __hadd2_sat(T2 a, T2 b) {                                                  \
        return T2(__hadd_sat(a.x, b.x), __hadd_sat(a.y, b.y));                                  \
    }                                                                                           \
    static inline T2 __hsub2_sat(T2 a, T2 b) {                                                  \
        return T2(__hsub_sat(a.x, b.x), __hsub_sat(a.y, b.y));                                  \
    }                                                                                           \
    static inline T2 __hmul2_sat(T2 a, T2 b) {                                                  \
        return T2(__hmul_sat(a.x, b.x), __hmul_sat(a.y, b.y));                                  \
    }                                                                                           \
    static inline T2 __hfma2(T2 a, T2 b, T2 c) {                                                \
        return T2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));                                \
    }                                                                                           \
    static inline T2 __hfma2_sat(T2 a, T2 b, T2 c) {                                            \
        return T2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));                        \
    }                                                                                           \
    static inline T2 __hfma2_relu(T2 a, T2 b, T2 c) {                                           \
        return T2(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y));                      \
    }                                                                                           \
    static inline T2 __hneg2(T2 a) { return T2(__hneg(a.x), __hneg(a.y)); }                     \
    static inline T2 __habs2(T2 a) { return T2(__habs(a.x), __habs(a.y)); }                     \
    static inline T2 __hmax2(T2 a, T2 b) { return T2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }     \
    static inline T2 __hmin2(T2 a, T2 b) { return T2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }     \
    static inline T2 __hmax2_nan(T2 a, T2 b) {                                                  \
        return T2(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y));                                  \
    }                                                                                           \
    static inline T2 __hmin2_nan(T2 a, T2 b) {                                                  \
        return T2(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y));                                  \
    }                                                                                           \
    static inline T2 __hisnan2(T2 a) { return T2(BOOLV(__hisnan(a.x)), BOOLV(__hisnan(a.y))); } \
    static inline T2 __heq2(T2 a, T2 b) { return T2(BOOLV(__heq(a.x, b.x)), BOOLV(__heq(a.y, b.y))); } \
    static inline T2 __hne2(T2 a, T2 b) { return T2(BOOLV(__hne(a.x, b.x)), BOOLV(__hne(a.y, b.y))); } \
    static inline T2 __hlt2(T2 a, T2 b) { return T2(BOOLV(__hlt(a.x, b.x)), BOOLV(__hlt(a.y, b.y))); } \
    static inline T2 __hle2(T2 a, T2 b) { return T2(BOOLV(__hle(a.x, b.x)), BOOLV(__hle(a.y, b.y))); } \
    static inline T2 __hgt2(T2 a, T2 b) { return T2(BOOLV(__hgt(a.x, b.x)), BOOLV(__hgt(a.y, b.y))); } \
    static inline T2 __hge2(T2 a, T2 b) { return T2(BOOLV(__hge(a.x, b.x)), BOOLV(__hge(a.y, b.y))); } \
    static inline T2 __hequ2(T2 a, T2 b) { return T2(BOOLV(__hequ(a.x, b.x)), BOOLV(__hequ(a.y, b.y))); } \
    static inline T2 __hneu2(T2 a, T2 b) { return T2(BOOLV(__hneu(a.x, b.x)), BOOLV(__hneu(a.y, b.y))); } \
    static inline T2 __hltu2(T2 a, T2 b) { return T2(BOOLV(__hltu(a.x, b.x)), BOOLV(__hltu(a.y, b.y))); } \
    static inline T2 __hleu2(T2 a, T2 b) { return T2(BOOLV(__hleu(a.x, b.x)), BOOLV(__hleu(a.y, b.y))); } \
    static inline T2 __hgtu2(T2 a, T2 b) { return T2(BOOLV(__hgtu(a.x, b.x)), BOOLV(__hgtu(a.y, b.y))); } \
    static inline T2 __hgeu2(T2 a, T2 b) { return T2(BOOLV(__hgeu(a.x, b.x)), BOOLV(__hgeu(a.y, b.y))); } \
    static inline bool __hbeq2(T2 a, T2 b) { return __heq(a.x, b.x) && __heq(a.y, b.y); }       \
    static inline bool __hbne2(T2 a, T2 b) { return __hne(a.x, b.x) && __hne(a.y, b.y); }       \
    static inline bool __hblt2(T2 a, T2 b) { return __hlt(a.x, b.x) && __hlt(a.y, b.y); }       \
    static inline bool __hble2(T2 a, T2 b) { return __hle(a.x, b.x) && __hle(a.y, b.y); }       \
    static inline bool __hbgt2(T2 a, T2 b) { return __hgt(a.x, b.x) && __hgt(a.y, b.y); }       \
    static inline bool __hbge2(T2 a, T2 b) { return __hge(a.x, b.x) && __hge(a.y, b.y); }       \
    static inline bool __hbequ2(T2 a, T2 b) { return __hequ(a.x, b.x) && __hequ(a.y, b.y); }    \
    static inline bool __hbneu2(T2 a, T2 b) { return __hneu(a.x, b.x) && __hneu(a.y, b.y); }    \
    static inline bool __hbltu2(T2 a, T2 b) { return __hltu(a.x, b.x) && __hltu(a.y, b.y); }    \
    static inline bool __hbleu2(T2 a, T2 b) { return __hleu(a.x, b.x) && __hleu(a.y, b.y); }    \
    static inline bool __hbgtu2(T2 a, T2 b) { return __hgtu(a.x, b.x) && __hgtu(a.y, b.y); }    \
    static inline bool __hbgeu2(T2 a, T2 b) { return __hgeu(a.x, b.x) && __hgeu(a.y, b.y); }    \
    static inline unsigned __heq2_mask(T2 a, T2 b) { return GKEMU_MASK2(__heq); }                \
    static inline unsigned __hne2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hne); }                \
    static inline unsigned __hlt2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hlt); }                \
    static inline unsigned __hle2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hle); }                \
    static inline unsigned __hgt2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hgt); }                \
    static inline unsigned __hge2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hge); }                \
    static inline unsigned __hequ2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hequ); }              \
    static inline unsigned __hneu2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hneu); }              \
    static inline unsigned __hltu2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hltu); }              \
    static inline unsigned __hleu2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hleu); }              \
    static inline unsigned __hgtu2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hgtu); }              \
    static inline unsigned __hgeu2_mask(T2 a, T2 b) { return GKEMU_MASK2(__hgeu); }              \
    static inline T2 h2sqrt(T2 a) { return T2(hsqrt(a.x), hsqrt(a.y)); }                        \
    static inline T2 h2rsqrt(T2 a) { return T2(hrsqrt(a.x), hrsqrt(a.y)); }                     \
    static inline T2 h2rcp(T2 a) { return T2(hrcp(a.x), hrcp(a.y)); }                           \
    static inline T2 h2exp(T2 a) { return T2(hexp(a.x), hexp(a.y)); }                           \
    static inline T2 h2exp2(T2 a) { return T2(hexp2(a.x), hexp2(a.y)); }                        \
    static inline T2 h2exp10(T2 a) { return T2(hexp10(a.x), hexp10(a.y)); }                     \
    static inline T2 h2log(T2 a) { return T2(hlog(a.x), hlog(a.y)); }                           \
    static inline T2 h2log2(T2 a) { return T2(hlog2(a.x), hlog2(a.y)); }                        \
    static inline T2 h2log10(T2 a) { return T2(hlog10(a.x), hlog10(a.y)); }                     \
    static inline T2 h2sin(T2 a) { return T2(hsin(a.x), hsin(a.y)); }                           \
    static inline T2 h2cos(T2 a) { return T2(hcos(a.x), hcos(a.y)); }                           \
    static inline T2 h2tanh(T2 a) { return T2(htanh(a.x), htanh(a.y)); }                        \
    static inline T2 h2ceil(T2 a) { return T2(hceil(a.x), hceil(a.y)); }                        \
    static inline T2 h2floor(T2 a) { return T2(hfloor(a.x), hfloor(a.y)); }                     \
    static inline T2 h2trunc(T2 a) { return T2(htrunc(a.x), htrunc(a.y)); }                     \
    static inline T2 h2rint(T2 a) { return T2(hrint(a.x), hrint(a.y)); }

// The _mask comparisons: 0xffff in the half of the result where the comparison holds.
#define GKEMU_MASK2(cmp) ((cmp(a.x, b.x) ? 0x0000ffffu : 0u) | (cmp(a.y, b.y) ? 0xffff0000u : 0u))
#define GKEMU_HALF_BOOL(b) ((b) ? CUDART_ONE_FP16 : CUDART_ZERO_FP16)
#define GKEMU_BF16_BOOL(b) ((b) ? CUDART_ONE_BF16 : CUDART_ZERO_BF16)
GKEMU_H_PAIR(__half2, __half, GKEMU_HALF_BOOL)
GKEMU_H_PAIR(__nv_bfloat162, __nv_bfloat16, GKEMU_BF16_BOOL)
#undef GKEMU_HALF_BOOL
#undef GKEMU_BF16_BOOL
#undef GKEMU_MASK2
#undef GKEMU_H_PAIR

// ---- operators (cuda_fp16.hpp / cuda_bf16.hpp, unless __CUDA_NO_*_OPERATORS__) -------------

#define GKEMU_H_OPS(T)                                                                          \
    static inline T operator+(const T &a, const T &b) { return __hadd(a, b); }                  \
    static inline T operator-(const T &a, const T &b) { return __hsub(a, b); }                  \
    static inline T operator*(const T &a, const T &b) { return __hmul(a, b); }                  \
    static inline T operator/(const T &a, const T &b) { return __hdiv(a, b); }                  \
    static inline T &operator+=(T &a, const T &b) { return a = __hadd(a, b); }                  \
    static inline T &operator-=(T &a, const T &b) { return a = __hsub(a, b); }                  \
    static inline T &operator*=(T &a, const T &b) { return a = __hmul(a, b); }                  \
    static inline T &operator/=(T &a, const T &b) { return a = __hdiv(a, b); }                  \
    static inline T operator+(const T &a) { return a; }                                         \
    static inline T operator-(const T &a) { return __hneg(a); }                                 \
    static inline T &operator++(T &a) { return a = __hadd(a, T(1.0f)); }                        \
    static inline T &operator--(T &a) { return a = __hsub(a, T(1.0f)); }                        \
    static inline T operator++(T &a, int) {                                                     \
        T r = a;                                                                                \
        a = __hadd(a, T(1.0f));                                                                 \
        return r;                                                                               \
    }                                                                                           \
    static inline T operator--(T &a, int) {                                                     \
        T r = a;                                                                                \
        a = __hsub(a, T(1.0f));                                                                 \
        return r;                                                                               \
    }                                                                                           \
    static inline bool operator==(const T &a, const T &b) { return __heq(a, b); }               \
    static inline bool operator!=(const T &a, const T &b) { return __hneu(a, b); }              \
    static inline bool operator<(const T &a, const T &b) { return __hlt(a, b); }                \
    static inline bool operator<=(const T &a, const T &b) { return __hle(a, b); }               \
    static inline bool operator>(const T &a, const T &b) { return __hgt(a, b); }                \
    static inline bool operator>=(const T &a, const T &b) { return __hge(a, b); }

#define GKEMU_H2_OPS(T2, T)                                                                     \
    static inline T2 operator+(const T2 &a, const T2 &b) { return __hadd2(a, b); }              \
    static inline T2 operator-(const T2 &a, const T2 &b) { return __hsub2(a, b); }              \
    static inline T2 operator*(const T2 &a, const T2 &b) { return __hmul2(a, b); }              \
    static inline T2 operator/(const T2 &a, const T2 &b) { return __h2div(a, b); }              \
    static inline T2 &operator+=(T2 &a, const T2 &b) { return a = __hadd2(a, b); }              \
    static inline T2 &operator-=(T2 &a, const T2 &b) { return a = __hsub2(a, b); }              \
    static inline T2 &operator*=(T2 &a, const T2 &b) { return a = __hmul2(a, b); }              \
    static inline T2 &operator/=(T2 &a, const T2 &b) { return a = __h2div(a, b); }              \
    static inline T2 operator+(const T2 &a) { return a; }                                       \
    static inline T2 operator-(const T2 &a) { return __hneg2(a); }                              \
    static inline T2 &operator++(T2 &a) { return a = __hadd2(a, T2(T(1.0f), T(1.0f))); }        \
    static inline T2 &operator--(T2 &a) { return a = __hsub2(a, T2(T(1.0f), T(1.0f))); }        \
    static inline T2 operator++(T2 &a, int) {                                                   \
        T2 r = a;                                                                               \
        a = __hadd2(a, T2(T(1.0f), T(1.0f)));                                                   \
        return r;                                                                               \
    }                                                                                           \
    static inline T2 operator--(T2 &a, int) {                                                   \
        T2 r = a;                                                                               \
        a = __hsub2(a, T2(T(1.0f), T(1.0f)));                                                   \
        return r;                                                                               \
    }                                                                                           \
    static inline bool operator==(const T2 &a, const T2 &b) { return __hbeq2(a, b); }           \
    static inline bool operator!=(const T2 &a, const T2 &b) { return __hbneu2(a, b); }          \
    static inline bool operator<(const T2 &a, const T2 &b) { return __hblt2(a, b); }            \
    static inline bool operator<=(const T2 &a, const T2 &b) { return __hble2(a, b); }           \
    static inline bool operator>(const T2 &a, const T2 &b) { return __hbgt2(a, b); }            \
    static inline bool operator>=(const T2 &a, const T2 &b) { return __hbge2(a, b); }

#if !defined(__CUDA_NO_HALF_OPERATORS__)
GKEMU_H_OPS(__half)
#endif
#if !defined(__CUDA_NO_HALF2_OPERATORS__)
GKEMU_H2_OPS(__half2, __half)
#endif
#if !defined(__CUDA_NO_BFLOAT16_OPERATORS__)
GKEMU_H_OPS(__nv_bfloat16)
#endif
#if !defined(__CUDA_NO_BFLOAT162_OPERATORS__)
GKEMU_H2_OPS(__nv_bfloat162, __nv_bfloat16)
#endif
#undef GKEMU_H_OPS
#undef GKEMU_H2_OPS

// ============================================================================================
// 7. Atomics, fences, cache-hinted loads and stores
// ============================================================================================
// Relaxed atomic read-modify-writes on the pointed-to object (GCC __atomic builtins);
// floating-point ones are compare-and-swap loops on the bits. Each returns the old value.
// The _block and _system variants are the same operations.

namespace gkemu_detail {
template <class T> static inline T atomic_load(T *p) noexcept {
    T v;
    __atomic_load(p, &v, __ATOMIC_RELAXED);
    return v;
}
// Replaces *p by f(*p) atomically; returns the old value.
template <class T, class F> static inline T atomic_update(T *p, F f) noexcept {
    T old = atomic_load(p);
    for (;;) {
        T nv = f(old);
        if (__atomic_compare_exchange(p, &old, &nv, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old;
    }
}
} // namespace gkemu_detail

#define GKEMU_ATOMIC_DEFS(SFX)                                                                  \
    static inline int atomicAdd##SFX(int *p, int v) {                                          \
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned int atomicAdd##SFX(unsigned int *p, unsigned int v) {               \
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned long long atomicAdd##SFX(unsigned long long *p, unsigned long long v) { \
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline float atomicAdd##SFX(float *p, float v) {                                    \
        return gkemu_detail::atomic_update(p, [v](float o) { return o + v; });                  \
    }                                                                                           \
    static inline double atomicAdd##SFX(double *p, double v) {                                 \
        return gkemu_detail::atomic_update(p, [v](double o) { return o + v; });                 \
    }                                                                                           \
    static inline __half atomicAdd##SFX(__half *p, __half v) {                                 \
        return gkemu_detail::atomic_update(p, [v](__half o) { return __hadd(o, v); });          \
    }                                                                                           \
    static inline __half2 atomicAdd##SFX(__half2 *p, __half2 v) {                              \
        return gkemu_detail::atomic_update(p, [v](__half2 o) { return __hadd2(o, v); });        \
    }                                                                                           \
    static inline __nv_bfloat16 atomicAdd##SFX(__nv_bfloat16 *p, __nv_bfloat16 v) {            \
        return gkemu_detail::atomic_update(p, [v](__nv_bfloat16 o) { return __hadd(o, v); });   \
    }                                                                                           \
    static inline __nv_bfloat162 atomicAdd##SFX(__nv_bfloat162 *p, __nv_bfloat162 v) {         \
        return gkemu_detail::atomic_update(p, [v](__nv_bfloat162 o) { return __hadd2(o, v); }); \
    }                                                                                           \
    /* float2 / float4 (sm_90): atomic per element, as CUDA guarantees. */                      \
    static inline float2 atomicAdd##SFX(float2 *p, float2 v) {                                 \
        float2 r;                                                                               \
        r.x = atomicAdd##SFX(&p->x, v.x);                                                       \
        r.y = atomicAdd##SFX(&p->y, v.y);                                                       \
        return r;                                                                               \
    }                                                                                           \
    static inline float4 atomicAdd##SFX(float4 *p, float4 v) {                                 \
        float4 r;                                                                               \
        r.x = atomicAdd##SFX(&p->x, v.x);                                                       \
        r.y = atomicAdd##SFX(&p->y, v.y);                                                       \
        r.z = atomicAdd##SFX(&p->z, v.z);                                                       \
        r.w = atomicAdd##SFX(&p->w, v.w);                                                       \
        return r;                                                                               \
    }                                                                                           \
    static inline int atomicSub##SFX(int *p, int v) {                                          \
        return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned int atomicSub##SFX(unsigned int *p, unsigned int v) {               \
        return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline int atomicExch##SFX(int *p, int v) {                                         \
        return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                     \
    }                                                                                           \
    static inline unsigned int atomicExch##SFX(unsigned int *p, unsigned int v) {              \
        return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                     \
    }                                                                                           \
    static inline unsigned long long atomicExch##SFX(unsigned long long *p, unsigned long long v) { \
        return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                     \
    }                                                                                           \
    static inline float atomicExch##SFX(float *p, float v) {                                   \
        float r;                                                                                \
        __atomic_exchange(p, &v, &r, __ATOMIC_RELAXED);                                         \
        return r;                                                                               \
    }                                                                                           \
    static inline int atomicMin##SFX(int *p, int v) {                                          \
        return gkemu_detail::atomic_update(p, [v](int o) { return o < v ? o : v; });            \
    }                                                                                           \
    static inline unsigned int atomicMin##SFX(unsigned int *p, unsigned int v) {               \
        return gkemu_detail::atomic_update(p, [v](unsigned int o) { return o < v ? o : v; });   \
    }                                                                                           \
    static inline long long atomicMin##SFX(long long *p, long long v) {                        \
        return gkemu_detail::atomic_update(p, [v](long long o) { return o < v ? o : v; });      \
    }                                                                                           \
    static inline unsigned long long atomicMin##SFX(unsigned long long *p, unsigned long long v) { \
        return gkemu_detail::atomic_update(p,                                                   \
                                           [v](unsigned long long o) { return o < v ? o : v; }); \
    }                                                                                           \
    static inline float atomicMin##SFX(float *p, float v) {                                    \
        return gkemu_detail::atomic_update(p, [v](float o) { return gkemu_detail::fmin_ptx(o, v); }); \
    }                                                                                           \
    static inline double atomicMin##SFX(double *p, double v) {                                 \
        return gkemu_detail::atomic_update(p, [v](double o) { return gkemu_detail::fmin_ptx(o, v); }); \
    }                                                                                           \
    static inline int atomicMax##SFX(int *p, int v) {                                          \
        return gkemu_detail::atomic_update(p, [v](int o) { return o > v ? o : v; });            \
    }                                                                                           \
    static inline unsigned int atomicMax##SFX(unsigned int *p, unsigned int v) {               \
        return gkemu_detail::atomic_update(p, [v](unsigned int o) { return o > v ? o : v; });   \
    }                                                                                           \
    static inline long long atomicMax##SFX(long long *p, long long v) {                        \
        return gkemu_detail::atomic_update(p, [v](long long o) { return o > v ? o : v; });      \
    }                                                                                           \
    static inline unsigned long long atomicMax##SFX(unsigned long long *p, unsigned long long v) { \
        return gkemu_detail::atomic_update(p,                                                   \
                                           [v](unsigned long long o) { return o > v ? o : v; }); \
    }                                                                                           \
    static inline float atomicMax##SFX(float *p, float v) {                                    \
        return gkemu_detail::atomic_update(p, [v](float o) { return gkemu_detail::fmax_ptx(o, v); }); \
    }                                                                                           \
    static inline double atomicMax##SFX(double *p, double v) {                                 \
        return gkemu_detail::atomic_update(p, [v](double o) { return gkemu_detail::fmax_ptx(o, v); }); \
    }                                                                                           \
    /* ((old >= val) ? 0 : (old + 1)) */                                                        \
    static inline unsigned int atomicInc##SFX(unsigned int *p, unsigned int v) {               \
        return gkemu_detail::atomic_update(p,                                                   \
                                           [v](unsigned int o) { return o >= v ? 0u : o + 1u; }); \
    }                                                                                           \
    /* (((old == 0) || (old > val)) ? val : (old - 1)) */                                       \
    static inline unsigned int atomicDec##SFX(unsigned int *p, unsigned int v) {               \
        return gkemu_detail::atomic_update(                                                     \
            p, [v](unsigned int o) { return (o == 0u || o > v) ? v : o - 1u; });                \
    }                                                                                           \
    static inline int atomicCAS##SFX(int *p, int cmp, int v) {                                 \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);     \
        return cmp;                                                                             \
    }                                                                                           \
    static inline unsigned int atomicCAS##SFX(unsigned int *p, unsigned int cmp, unsigned int v) { \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);     \
        return cmp;                                                                             \
    }                                                                                           \
    static inline unsigned long long atomicCAS##SFX(unsigned long long *p, unsigned long long cmp, \
                                                    unsigned long long v) {                    \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);     \
        return cmp;                                                                             \
    }                                                                                           \
    static inline unsigned short atomicCAS##SFX(unsigned short *p, unsigned short cmp,        \
                                                unsigned short v) {                            \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);     \
        return cmp;                                                                             \
    }                                                                                           \
    static inline int atomicAnd##SFX(int *p, int v) {                                          \
        return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned int atomicAnd##SFX(unsigned int *p, unsigned int v) {               \
        return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned long long atomicAnd##SFX(unsigned long long *p, unsigned long long v) { \
        return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline int atomicOr##SFX(int *p, int v) {                                           \
        return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);                                       \
    }                                                                                           \
    static inline unsigned int atomicOr##SFX(unsigned int *p, unsigned int v) {                \
        return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);                                       \
    }                                                                                           \
    static inline unsigned long long atomicOr##SFX(unsigned long long *p, unsigned long long v) { \
        return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);                                       \
    }                                                                                           \
    static inline int atomicXor##SFX(int *p, int v) {                                          \
        return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned int atomicXor##SFX(unsigned int *p, unsigned int v) {               \
        return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);                                      \
    }                                                                                           \
    static inline unsigned long long atomicXor##SFX(unsigned long long *p, unsigned long long v) { \
        return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);                                      \
    }

GKEMU_ATOMIC_DEFS()
GKEMU_ATOMIC_DEFS(_block)
GKEMU_ATOMIC_DEFS(_system)
#undef GKEMU_ATOMIC_DEFS

// (GCC warns that ThreadSanitizer does not model fences; the kernels' instrumentation is the
// core's access checker, which implements __tsan_atomic_thread_fence as a real fence.)
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic pop
#endif

// Loads and stores with cache hints: plain loads and stores here. (The stores take the value
// as a non-deduced T, so that it converts as with CUDA's per-type overloads.)
namespace gkemu_detail {
template <class T> struct identity {
    typedef T type;
};
} // namespace gkemu_detail
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline T __ldca(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldlu(const T *p) { return *p; }
template <class T> static inline T __ldcv(const T *p) { return *p; }
template <class T> static inline void __stcg(T *p, typename gkemu_detail::identity<T>::type v) { *p = v; }
template <class T> static inline void __stcs(T *p, typename gkemu_detail::identity<T>::type v) { *p = v; }
template <class T> static inline void __stwb(T *p, typename gkemu_detail::identity<T>::type v) { *p = v; }
template <class T> static inline void __stwt(T *p, typename gkemu_detail::identity<T>::type v) { *p = v; }

// ============================================================================================
// 8. The helpers the library's CUDA C calls instead of inline PTX (its prelude defines them
//    with `asm` unless GK_PTX_HELPERS_DEFINED; gk_globaltimer is the core's, in gkemu.h)
// ============================================================================================

#define GK_PTX_HELPERS_DEFINED 1
// PTX cvt.f32.f16: exact widening.
static inline float gk_cvt_f32_f16(unsigned short h) { return gkemu_detail::f16_to_f32(h); }
// PTX cvt.rn.f16.f32: round to nearest even, overflow to infinity, NaN to 0x7fff.
static inline unsigned short gk_cvt_rn_f16_f32(float f) { return gkemu_detail::f32_to_f16_rn(f); }

// ============================================================================================
// 9. pow's special cases as CUDA's math library gives them (CUDA Math API, powf and pow):
//    "returns 1 for x = +1 and any y, even a NaN" and "returns 1 for y = ±0 and any x, even a
//    NaN". glibc gives NaN for a signaling NaN in either place (IEEE 754's rule, which a GPU
//    does not follow), and a NaN element's bits are whatever the data held. Macros, last,
//    so that every call a kernel writes (`pow`, `powf`, `::pow`, `std::pow`) goes through
//    them and nothing above does.
// ============================================================================================

static inline double gkemu_pow_d(double x, double y) {
    if (x == 1.0 || y == 0.0) return 1.0;
    return ::pow(x, y);
}
static inline float gkemu_powf(float x, float y) {
    if (x == 1.0f || y == 0.0f) return 1.0f;
    return ::powf(x, y);
}
static inline float gkemu_pow(float x, float y) { return gkemu_powf(x, y); }
static inline double gkemu_pow(double x, double y) { return gkemu_pow_d(x, y); }
// An int exponent keeps a float base float, as CUDA's overload does.
static inline float gkemu_pow(float x, int y) { return (float)gkemu_pow_d((double)x, (double)y); }
static inline double gkemu_pow(double x, int y) { return gkemu_pow_d(x, (double)y); }
// Other arithmetic mixes compute in double.
template <class A, class B> static inline double gkemu_pow(A x, B y) {
    return gkemu_pow_d((double)x, (double)y);
}
namespace std {
using ::gkemu_pow;
using ::gkemu_powf;
}
#define pow(x, y) gkemu_pow(x, y)
#define powf(x, y) gkemu_powf(x, y)
