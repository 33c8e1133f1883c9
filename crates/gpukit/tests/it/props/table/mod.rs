//! The op table against float64 references (floats) and exact ones (integers), on every
//! backend: every unary and binary op of `UnaryOp::ALL` and `BinaryOp::ALL` in each of its
//! forms (out of place, in place, with a scalar, with a row or a column vector), clamp, the
//! reductions whole and per row, softmax and log-softmax, cross-entropy and its gradient,
//! casts, and batched gemm against the same products done one by one.
//!
//! The tolerances, per op, against the f64 result rounded once to the element type, all from
//! the op's table entry: its `ulps` (`UnaryOp::ulps`, `BinaryOp::ulps`; 0 is bit for bit, one
//! correctly rounded operation in the compute type, and f32 is wide enough that rounding it
//! again to 16 bits gives the correctly rounded 16-bit result), at most 1 ulp for every
//! 16-bit result (its f32 computation is far inside one 16-bit ulp), its `slack` where its
//! formula cancels (`UnaryOp::slack`: gelu), and on Vulkan what its `math` column adds
//! ([`driver_bound`]). The inputs of each unary op come from its `domain` column.

mod casts;
mod elementwise;
mod gemm;
mod index;
mod random;
mod reductions;
mod rows;

use super::cross::{within_ulps, Cross, CrossFloat};
use super::*;

use gpukit::core::half::{bf16, f16};
use gpukit::{Context, DType, Shape};

use casts::{casts_from, casts_round_once};
use elementwise::{binary_vs_f64, binary_wide_vs_f64, int_table_exact, unary_vs_f64};
use gemm::batched_gemm_vs_sequential;
use index::{
    arange_and_permutation, bad_indices_are_typed_errors, columns_vs_reference, compare_and_select,
    indexing_vs_reference, new_ops_can_be_captured,
};
use random::{
    bad_parameters_are_refused, floats_match_reference, integers_match_reference,
    samples_follow_their_distributions,
};
use reductions::reductions_vs_reference;
use rows::softmax_vs_f64;

/// The epsilon of `T`'s compute type (f32 for f32, f16 and bf16).
pub(super) fn compute_eps<T: Numeric>() -> f64 {
    if T::DTYPE == DType::F64 {
        f64::EPSILON
    } else {
        f64::from(f32::EPSILON)
    }
}

/// How many ulp of `T` an op's result may be from the f64 reference rounded to `T`: the op
/// table's contract ([`UnaryOp::ulps`], [`BinaryOp::ulps`]), at most 1 for the 16-bit types.
pub(super) fn ulp_budget<T: Numeric>(ulps: u32) -> u64 {
    let ulps = u64::from(ulps);
    if T::DTYPE.size() == 2 {
        ulps.min(1)
    } else {
        ulps
    }
}

/// Whether a subnormal result may read as zero on `ctx` (drivers may flush subnormals:
/// lavapipe does).
pub(super) fn flushes(ctx: &Context) -> bool {
    ctx.backend_name() == "vulkan"
}

/// [`agrees`], also accepting a zero for a reference below `T`'s smallest normal on a
/// backend that flushes subnormals.
pub(super) fn agrees_on<T: CrossFloat>(
    ctx: &Context,
    want: f64,
    got: T,
    ulps: u64,
    slack: f64,
) -> bool {
    agrees(want, got, ulps, slack)
        || (flushes(ctx)
            && got.to_f64() == 0.0
            && T::from_f64(want).to_f64().abs() < min_normal::<T>())
}

/// The smallest positive normal value of `T`.
pub(super) fn min_normal<T: Numeric>() -> f64 {
    match T::DTYPE {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F16 => 6.103_515_625e-5,
        _ => f64::from(f32::MIN_POSITIVE),
    }
}

/// Whether `got` is the reference `want` (an f64 result) within `ulps` of `T`, or within
/// `slack` of it.
pub(super) fn agrees<T: CrossFloat>(want: f64, got: T, ulps: u64, slack: f64) -> bool {
    let w = T::from_f64(want);
    if ulps == 0 {
        return w.same(got) || (w.to_f64() == 0.0 && got.to_f64() == 0.0 && want == 0.0);
    }
    within_ulps(w, got, ulps) || (got.to_f64() - want).abs() <= slack
}

/// A matrix shape (empty ones included), two matrices' worth of values, a vector of
/// `max(rows, cols)` values (its first `cols` are the row vector, its first `rows` the
/// column vector) and a scalar.
pub(super) fn matrix_case<T: Cross>() -> impl Strategy<Value = (Shape, Vec<T>, Vec<T>, Vec<T>, T)> {
    (0..6usize, 0..40usize).prop_flat_map(|(r, c)| {
        (
            Just(Shape::new(r, c)),
            vec(T::plain(), r * c),
            vec(T::plain(), r * c),
            vec(T::plain(), r.max(c)),
            T::plain(),
        )
    })
}

backend_tests! {
    fn f32_unary_table_matches_f64(ctx) { unary_vs_f64::<f32>(ctx) }
    fn f64_unary_table_matches_f64(ctx) { unary_vs_f64::<f64>(ctx) }
    fn f16_unary_table_matches_f64(ctx) { unary_vs_f64::<f16>(ctx) }
    fn bf16_unary_table_matches_f64(ctx) { unary_vs_f64::<bf16>(ctx) }
    fn f32_binary_table_matches_f64(ctx) { binary_vs_f64::<f32>(ctx) }
    fn f64_binary_table_matches_f64(ctx) { binary_vs_f64::<f64>(ctx) }
    fn f16_binary_table_matches_f64(ctx) { binary_vs_f64::<f16>(ctx) }
    fn bf16_binary_table_matches_f64(ctx) { binary_vs_f64::<bf16>(ctx) }
    fn f32_binary_table_holds_over_every_exponent(ctx) { binary_wide_vs_f64::<f32>(ctx) }
    fn f64_binary_table_holds_over_every_exponent(ctx) { binary_wide_vs_f64::<f64>(ctx) }
    fn f16_binary_table_holds_over_every_exponent(ctx) { binary_wide_vs_f64::<f16>(ctx) }
    fn bf16_binary_table_holds_over_every_exponent(ctx) { binary_wide_vs_f64::<bf16>(ctx) }
    fn i32_table_is_exact(ctx) { int_table_exact::<i32>(ctx) }
    fn u8_table_is_exact(ctx) { int_table_exact::<u8>(ctx) }
    fn i64_table_is_exact(ctx) { int_table_exact::<i64>(ctx) }
    fn u64_table_is_exact(ctx) { int_table_exact::<u64>(ctx) }
    fn f32_reductions_match_reference(ctx) { reductions_vs_reference::<f32>(ctx) }
    fn f16_reductions_match_reference(ctx) { reductions_vs_reference::<f16>(ctx) }
    fn i32_reductions_match_reference(ctx) { reductions_vs_reference::<i32>(ctx) }
    fn u8_reductions_match_reference(ctx) { reductions_vs_reference::<u8>(ctx) }
    fn f32_softmax_and_cross_entropy_match_f64(ctx) { softmax_vs_f64::<f32>(ctx) }
    fn f64_softmax_and_cross_entropy_match_f64(ctx) { softmax_vs_f64::<f64>(ctx) }
    fn bf16_softmax_and_cross_entropy_match_f64(ctx) { softmax_vs_f64::<bf16>(ctx) }
    fn casts_from_f32(ctx) { casts_from::<f32>(ctx) }
    fn casts_from_f64(ctx) { casts_from::<f64>(ctx) }
    fn casts_from_f16(ctx) { casts_from::<f16>(ctx) }
    fn casts_from_i64(ctx) { casts_from::<i64>(ctx) }
    fn casts_from_u8(ctx) { casts_from::<u8>(ctx) }
    fn casts_from_i8(ctx) { casts_from::<i8>(ctx) }
    fn casts_into_16_bits_round_once(ctx) { casts_round_once(ctx) }
    fn f32_batched_gemm_matches_sequential(ctx) { batched_gemm_vs_sequential::<f32>(ctx) }
    fn f64_batched_gemm_matches_sequential(ctx) { batched_gemm_vs_sequential::<f64>(ctx) }
    fn f16_batched_gemm_matches_sequential(ctx) { batched_gemm_vs_sequential::<f16>(ctx) }
    fn f32_random_fills_match_reference(ctx) { floats_match_reference::<f32>(ctx) }
    fn f64_random_fills_match_reference(ctx) { floats_match_reference::<f64>(ctx) }
    fn f16_random_fills_match_reference(ctx) { floats_match_reference::<f16>(ctx) }
    fn bf16_random_fills_match_reference(ctx) { floats_match_reference::<bf16>(ctx) }
    fn i32_random_integers_match_reference(ctx) { integers_match_reference::<i32>(ctx) }
    fn u8_random_integers_match_reference(ctx) { integers_match_reference::<u8>(ctx) }
    fn i64_random_integers_match_reference(ctx) { integers_match_reference::<i64>(ctx) }
    fn u32_random_integers_match_reference(ctx) { integers_match_reference::<u32>(ctx) }
    fn i8_random_integers_match_reference(ctx) { integers_match_reference::<i8>(ctx) }
    fn random_samples_follow_their_distributions(ctx) { samples_follow_their_distributions(ctx) }
    fn random_bad_parameters_are_refused(ctx) { bad_parameters_are_refused(ctx) }
    fn f32_compare_and_select(ctx) { compare_and_select::<f32>(ctx) }
    fn f16_compare_and_select(ctx) { compare_and_select::<f16>(ctx) }
    fn i32_compare_and_select(ctx) { compare_and_select::<i32>(ctx) }
    fn u8_compare_and_select(ctx) { compare_and_select::<u8>(ctx) }
    fn u32_compare_and_select(ctx) { compare_and_select::<u32>(ctx) }
    fn f32_columns_match_reference(ctx) { columns_vs_reference::<f32>(ctx) }
    fn f64_columns_match_reference(ctx) { columns_vs_reference::<f64>(ctx) }
    fn bf16_columns_match_reference(ctx) { columns_vs_reference::<bf16>(ctx) }
    fn i32_columns_match_reference(ctx) { columns_vs_reference::<i32>(ctx) }
    fn u8_columns_match_reference(ctx) { columns_vs_reference::<u8>(ctx) }
    fn f32_indexing_matches_reference(ctx) { indexing_vs_reference::<f32>(ctx) }
    fn f64_indexing_matches_reference(ctx) { indexing_vs_reference::<f64>(ctx) }
    fn i32_indexing_matches_reference(ctx) { indexing_vs_reference::<i32>(ctx) }
    fn u8_indexing_matches_reference(ctx) { indexing_vs_reference::<u8>(ctx) }
    fn f16_indexing_matches_reference(ctx) { indexing_vs_reference::<f16>(ctx) }
    fn bad_indices_are_kernel_failures(ctx) { bad_indices_are_typed_errors(ctx) }
    fn training_ops_can_be_captured(ctx) { new_ops_can_be_captured(ctx) }
    fn f32_arange_and_permutation(ctx) { arange_and_permutation::<f32>(ctx) }
    fn i32_arange_and_permutation(ctx) { arange_and_permutation::<i32>(ctx) }
    fn u8_arange_and_permutation(ctx) { arange_and_permutation::<u8>(ctx) }
}
