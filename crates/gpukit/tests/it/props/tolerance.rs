//! How far two float reductions may differ and both be right: shared by the f64-reference
//! properties (`ops.rs`) and the CUDA-against-CPU ones (`cuda_vs_cpu.rs`).
//!
//! **Sums and dot products** ([`sums_agree`]). Both backends add the terms (for dot, the
//! products, which both form identically in f64) in f64 and round the total to the result
//! type once: the CPU in sequence, CUDA per thread, per block and over the blocks' partials
//! (builtin.cu). Any order of the `n - 1` additions of `n` terms lands within
//! `γ(n-1) · Σ|x|` of the exact sum, `γ(k) = k·u / (1 - k·u)`, `u = 2^-53`; so two orders
//! differ by at most `δ = 2·γ(n)·Σ|x|` (`γ(n)` rather than `γ(n-1)` also covers the
//! rounding of the test's own `Σ|x|`). Rounding to the result type is monotone and moves
//! each by at most half an ulp there, so the two results differ by at most
//! `δ + 1 ulp` of the result type at the larger of them. For f32, f16 and bf16 results `δ`
//! is far below one ulp unless the sum cancels heavily: the bound is 1 ulp in practice. For
//! f64 results `δ ≈ n·ε·Σ|x|` is the bound (the ulp is slack for underflow). Either way it is
//! far smaller than any term of the data the tests drop on purpose (see `cuda_vs_cpu.rs`),
//! so a sum that loses an element or a block's partials fails.
//!
//! **Atomic sums** ([`atomic_sums_agree`]): scatter-add accumulates in the element type by
//! atomic adds, in whatever order the threads run (on a GPU, a different one each run), so
//! the bound is the sums' with the element type's unit roundoff in place of f64's.
//!
//! **Gemm** ([`gemm_agree`]). Each entry is `k` products accumulated in the compute type
//! (f32 for f32, f16 and bf16; f64 for f64), in an order and with fused multiply-adds
//! that differ between matrixmultiply and cuBLAS, plus the `alpha` and `beta` terms: each
//! backend is within `γ(k+2) · scale` of the exact value, `scale = |alpha|·Σ|a·b| +
//! |beta·c|`, with `u` taken as the compute type's whole epsilon rather than half of it
//! (tensor cores truncate where IEEE arithmetic rounds). Two backends differ by at most
//! twice that, plus 1 ulp of the result type for the rounding to 16 bits.

use gpukit::DType;

/// `2^e` for any exponent an f64 can hold, subnormal ones included.
fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074).max(0))
    }
}

/// The significand bits (the implicit one included) and the exponent of the smallest
/// subnormal of a float type.
fn format(dtype: DType) -> (i32, i32) {
    match dtype {
        DType::F64 => (53, -1074),
        DType::F32 => (24, -149),
        DType::F16 => (11, -24),
        DType::BF16 => (8, -133),
        other => panic!("{other} is not a float type"),
    }
}

/// One ulp of `dtype` at magnitude `x`: the spacing of the type's values there (the
/// smallest subnormal at and near 0).
pub fn ulp(dtype: DType, x: f64) -> f64 {
    let (bits, min_exp) = format(dtype);
    let x = x.abs();
    if x == 0.0 || !x.is_finite() {
        return pow2(min_exp);
    }
    // floor(log2 x), exactly, from the f64's own exponent (or its leading zeros when subnormal).
    let raw = x.to_bits();
    let biased = (raw >> 52) as i32;
    let exp = if biased == 0 {
        -1074 + (63 - raw.leading_zeros() as i32)
    } else {
        biased - 1023
    };
    pow2((exp - (bits - 1)).max(min_exp))
}

/// The unit roundoff of the f64 accumulator.
const U64: f64 = f64::EPSILON / 2.0;

/// `γ(k) = k·u / (1 - k·u)`: the relative error bound of `k` roundings with unit `u`.
fn gamma(k: usize, u: f64) -> f64 {
    let ku = k as f64 * u;
    ku / (1.0 - ku)
}

/// NaN matches NaN, an infinity only itself; `None` when both are finite.
fn specials(want: f64, got: f64) -> Option<bool> {
    if want.is_nan() || got.is_nan() {
        return Some(want.is_nan() && got.is_nan());
    }
    if want.is_infinite() || got.is_infinite() {
        return Some(want == got);
    }
    None
}

/// The most two `dtype` sums (or dot products) of `n` terms whose magnitudes add up to
/// `scale` may differ, at results of magnitude up to `magnitude` (see the module docs).
pub fn sum_tolerance(dtype: DType, n: usize, scale: f64, magnitude: f64) -> f64 {
    2.0 * gamma(n, U64) * scale + ulp(dtype, magnitude)
}

/// Whether two `dtype` sums or dot products of `n` terms (magnitudes adding up to `scale`)
/// can both be right: within [`sum_tolerance`].
pub fn sums_agree(dtype: DType, want: f64, got: f64, n: usize, scale: f64) -> bool {
    specials(want, got).unwrap_or_else(|| {
        (want - got).abs() <= sum_tolerance(dtype, n, scale, want.abs().max(got.abs()))
    })
}

/// Whether two `dtype` accumulations of `n` terms (the finite ones' magnitudes adding up to
/// `scale`) made in the element type itself, in any order, can both be right: atomic adds
/// (scatter-add), whose order differs between backends and between runs of a GPU. Each
/// order is within `γ(n) · scale` of the exact sum with `u` the type's unit roundoff, so two
/// differ by at most twice that, plus 1 ulp for the last rounding. Infinities and NaN must
/// match, unless a partial sum can overflow (`scale · (1 + γ(n))` reaches the type's
/// largest value): then one order may reach an infinity, or meet an infinite term with an
/// overflowed partial of the other sign, where another does not.
pub fn atomic_sums_agree(dtype: DType, want: f64, got: f64, n: usize, scale: f64) -> bool {
    let (bits, min_exp) = format(dtype);
    let u = pow2(-bits);
    let largest = (2.0 - pow2(1 - bits)) * pow2(2 - min_exp - bits);
    match specials(want, got) {
        Some(same) => same || scale * (1.0 + gamma(n, u)) >= largest,
        None => {
            (want - got).abs() <= 2.0 * gamma(n, u) * scale + ulp(dtype, want.abs().max(got.abs()))
        }
    }
}

/// Whether two `dtype` gemm entries with inner dimension `k` (see the module docs for
/// `scale`) can both be right.
pub fn gemm_agree(dtype: DType, want: f64, got: f64, k: usize, scale: f64) -> bool {
    let compute_eps = if dtype == DType::F64 {
        f64::EPSILON
    } else {
        f64::from(f32::EPSILON)
    };
    specials(want, got).unwrap_or_else(|| {
        let tolerance =
            2.0 * gamma(k + 2, compute_eps) * scale + ulp(dtype, want.abs().max(got.abs()));
        (want - got).abs() <= tolerance
    })
}

#[test]
fn atomic_sums_tell_overflow_from_a_lost_infinity() {
    // -inf among terms whose other magnitudes cannot overflow: every order gives -inf.
    assert!(!atomic_sums_agree(
        DType::F64,
        f64::NEG_INFINITY,
        f64::NAN,
        3,
        10.0
    ));
    // Finite terms adding up past f64::MAX: an order that overflows first meets -inf with +inf.
    assert!(atomic_sums_agree(
        DType::F64,
        f64::NEG_INFINITY,
        f64::NAN,
        3,
        f64::MAX * 1.5
    ));
    // f32 limits are the f32's, not the f64's.
    assert!(atomic_sums_agree(
        DType::F32,
        f64::INFINITY,
        3.0e38,
        3,
        4.0e38
    ));
    assert!(!atomic_sums_agree(
        DType::F32,
        f64::INFINITY,
        3.0e38,
        3,
        3.0e38
    ));
    assert!(!atomic_sums_agree(DType::F32, 1.0, 1.5, 3, 1.0));
    assert!(atomic_sums_agree(DType::F32, 1.0, 1.0 + 1e-7, 3, 1.0));
}

#[test]
fn ulp_is_the_spacing_of_each_type() {
    // Against the types' own neighbours, computed from their bit patterns.
    for x in [1.0f32, 1.5, 3.0e-3, 7.0e5, f32::MIN_POSITIVE, 1.0e38] {
        let next = f32::from_bits(x.to_bits() + 1);
        let below = f32::from_bits(x.to_bits() - 1);
        assert_eq!(
            ulp(DType::F32, f64::from(x)),
            f64::from(next) - f64::from(x),
            "{x}"
        );
        assert_eq!(
            ulp(DType::F32, f64::from(below)),
            f64::from(x) - f64::from(below),
            "below {x}"
        );
    }
    for x in [1.0f64, 0.1, 123456.789, 1e-310, f64::MIN_POSITIVE] {
        assert_eq!(
            ulp(DType::F64, x),
            f64::from_bits(x.to_bits() + 1) - x,
            "{x}"
        );
    }
    use gpukit::core::half::{bf16, f16};
    for x in [1.0f64, 0.3, 1000.0, 6.0e-5, 1.0e-7] {
        let h = f16::from_f64(x);
        let next = f16::from_bits(h.to_bits() + 1);
        assert_eq!(
            ulp(DType::F16, h.to_f64()),
            next.to_f64() - h.to_f64(),
            "f16 {x}"
        );
        let b = bf16::from_f64(x);
        let next = bf16::from_bits(b.to_bits() + 1);
        assert_eq!(
            ulp(DType::BF16, b.to_f64()),
            next.to_f64() - b.to_f64(),
            "bf16 {x}"
        );
    }
    assert_eq!(ulp(DType::F32, 0.0), f64::from(f32::from_bits(1)));
    assert_eq!(ulp(DType::F64, 0.0), f64::from_bits(1));
}

#[test]
fn tolerances_hold_one_ulp_and_no_more_where_the_orders_cannot_differ() {
    // One term: no addition, so only the rounding to the type is allowed.
    let x = 1.0e3f64;
    let one = ulp(DType::F32, x);
    assert!(sums_agree(DType::F32, x, x + one, 1, x));
    assert!(!sums_agree(DType::F32, x, x + 2.0 * one, 1, x));
    assert!(!sums_agree(DType::F32, x, f64::NAN, 1, x));
    assert!(sums_agree(DType::F32, f64::NAN, f64::NAN, 1, x));
    assert!(!sums_agree(
        DType::F32,
        f64::INFINITY,
        f64::from(f32::MAX),
        1,
        x
    ));
    // f64: the reordering bound n·ε·Σ|x|; even for four million terms of magnitude 1000
    // all of one sign it stays below any one of those terms.
    let n = 4_000_000;
    let scale = 1000.0 * n as f64;
    let tol = sum_tolerance(DType::F64, n, scale, scale);
    assert!(tol >= n as f64 * f64::EPSILON * scale, "{tol}");
    assert!(tol < 1000.0, "{tol}");
    // Gemm: k products in f32, far tighter than a 1e-5 relative error.
    assert!(gemm_agree(DType::F32, 1.0, 1.0 + 1e-6, 64, 1.0));
    assert!(!gemm_agree(DType::F32, 1.0, 1.0 + 1e-4, 64, 1.0));
    assert!(!gemm_agree(
        DType::F16,
        1.0,
        1.0 + 2.0 * ulp(DType::F16, 1.0),
        4,
        1.0
    ));
}
