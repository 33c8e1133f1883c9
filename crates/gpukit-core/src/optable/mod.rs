//! The op table: every built-in op described once.
//!
//! The element-wise ops are kernels that gpukit-core builds from this table (the other
//! built-in ops are `#[kernel]`s; gemm the backend's own where it has one,
//! [`Backend::has_gemm`]). The element-wise ops are listed once below, in the `unary_table!` and
//! `binary_table!` invocations: each entry gives the op's variant, its name, the names of
//! its typed methods on [`Stream`], which element types have it (`numeric`:
//! every [`Numeric`]; `float`: [`Float`] only) and its reference semantics, written over the
//! element's compute type ([`Arith`], [`Real`]), and every other fact of the op as a column:
//! its accuracy contract in ulp ([`UnaryOp::ulps`]: 0 for bit for bit), the math function
//! it rests on ([`UnaryOp::math`]) and the inputs it is meant for ([`UnaryOp::domain`]).
//! From that one entry the macros (`macros.rs`) generate the enum variant, an accessor per
//! column, the reference functions the CPU backend runs and the tests compare with, and the
//! safe, typed methods (`relu`, `relu_inplace`, `add`, `add_inplace`, `add_scalar`,
//! `add_row`, ...).
//!
//! The other ops (fill, axpy, clamp, reductions, softmax, cross-entropy, casts, random
//! fills, gemm, ...) have their reference semantics beside the table: [`ReduceOp`],
//! [`softmax_rows`], [`cross_entropy_rows`], [`cast_slice`], [`random_floats`] and
//! [`random_integers`] (Philox 4x32-10, the same bits on every backend), [`Gemm`].
//!
//! ## Adding an element-wise op
//!
//! 1. One entry in the table below; its doc comment becomes the methods' documentation:
//!
//!    ```text
//!    Variant "name" (method, method_inplace) ulps N grows N math M domain D |x| body;
//!    ```
//!
//!    Binary entries name their eight methods (plain, in place, scalar, row and column
//!    forms) and have the `ulps` and `math` columns only. The columns:
//!    - `ulps N`: the accuracy contract ([`UnaryOp::ulps`]);
//!    - `grows N`: `N` more ulp per unit of the math function's argument below 0, for an op
//!      whose result there is `x e^a` with `a` itself rounded ([`UnaryOp::ulps_at`]; 0 for
//!      most, and the entry's doc says why);
//!    - `math M`: the math function the body calls per element: `none`, `exp[arg]` (`exp`
//!      or `tanh` of `arg`, an f64 expression of `x`), `log` or `pow` ([`MathFn`]), which
//!      decides the op's cost class on the CPU backend, whether the wgpu backend has it in
//!      f64, and its accuracy on a looser driver;
//!    - `domain D`: `all`, or `from[lo]` where results below `lo` are NaN ([`Domain`]); the
//!      property tests draw the op's inputs from it.
//! 2. Nothing else: gpukit-core traces the entry's body into a kernel-language expression
//!    ([`UnaryOp::body`], [`BinaryOp::body`]) and builds the op's kernels around it
//!    (`ops/map.rs`: a grid-stride loop per form of operands, as gpukit-kernel's IR), which
//!    the kernel language's emitters turn into CUDA C and WGSL, in the same order of
//!    operations; the CPU backend runs the reference body (on vectors where
//!    `native::vmath` has the op). A body may use what [`Arith`]
//!    and [`Real`] offer and branches only through [`Arith::if_gt`] (the tracer refuses a
//!    direct comparison, and a unit test traces every entry).
//!
//! The rest follows from the entry: the variant and [`UnaryOp::ALL`], the typed methods on
//! [`Stream`] (and so on [`crate::Context`]), the CPU body (the reference) and its cost
//! class, the GPU kernels, the refusals where a target lacks a math function, and the
//! property tests, which iterate over [`UnaryOp::ALL`] and [`BinaryOp::ALL`] and take each
//! op's tolerance and inputs from its columns. A `numeric` entry also needs its exact integer result in the property
//! tests' independent integer reference (`int_table!` in the facade's
//! `tests/it/props/table/elementwise.rs`, written with the standard library's wrapping
//! arithmetic); a missing one fails those tests.
//!
//! ## Using them
//!
//! ```
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
//! use gpukit::Shape;
//! // A layer's forward pass on a batch of 2 rows of 3: bias per column, then relu, in place.
//! let shape = Shape::new(2, 3);
//! let mut h = ctx.alloc_upload(&[1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0])?;
//! let bias = ctx.alloc_upload(&[0.5f32, 0.5, 10.0])?;
//! ctx.add_row_inplace(shape, &mut h, &bias)?;
//! ctx.relu_inplace(&mut h)?;
//! assert_eq!(h.download()?, [1.5, 0.0, 13.0, 0.0, 5.5, 4.0]);
//! let mut best = ctx.alloc_zeros::<u32>(2)?;
//! ctx.row_argmax(shape, &h, &mut best)?;
//! assert_eq!(best.download()?, [2, 1]);
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! A float-only op on an integer array does not compile:
//!
//! ```compile_fail,E0277
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
//! let ints = ctx.alloc_upload(&[4i32, 9])?;
//! let mut out = ctx.alloc_zeros::<i32>(2)?;
//! ctx.sqrt(&ints, &mut out)?; // i32 is not `Float`
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! ## Bit-for-bit and within ulps
//!
//! Each entry states its accuracy as `ulps N` ([`UnaryOp::ulps`], [`BinaryOp::ulps`]), and
//! the property tests hold every backend to it. Ops built from one correctly rounded
//! `+ - * /`, comparison or `sqrt` (`ulps 0`) give the same bits on every backend (IEEE-754
//! arithmetic in the compute type, no fused multiply-add). Ops that round more than once
//! (`rsqrt`) or call `exp`, `ln`, `ln_1p`, `tanh` or `powf` (each platform's math library)
//! are within their `N` ulp, and f16/bf16 results, rounded once from f32, within one 16-bit
//! ulp. On a driver whose math functions have only Vulkan's precision, an op that calls one
//! is within what its `math` column adds ([`MathFn`]).

#[macro_use]
mod macros;
mod cmp;
mod column;
mod elementwise;
mod gemm;
mod index;
mod random;
mod reduce;
mod rows;
mod shape;
mod symbolic;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::{Arith, Float, Numeric, Real};
use crate::error::Result;
use crate::stream::Stream;

use elementwise::map1;
pub(crate) use elementwise::map2;

pub(crate) use cmp::Bcast;
pub use cmp::CmpOp;
pub use column::{Domain, MathFn};
pub use elementwise::{cast_slice, RhsSlice};
pub use gemm::Gemm;
pub use index::{
    arange_slice, compare_slice, count_eq, feistel, feistel_half_bits, gather_rows, one_hot_rows,
    permutation, scatter_add_rows, where_slice, FEISTEL_ROUNDS,
};
pub use random::{
    bounded, element_words, philox4x32_10, random_floats, random_integers, seed_key, series,
    Distribution, Series, PHILOX_M, PHILOX_ROUNDS, PHILOX_W,
};
pub use reduce::{reduce_cols, ReduceOp};
pub use rows::{cross_entropy_rows, softmax_rows};
pub use shape::Shape;

/// GELU's `sqrt(2 / pi)`, the scale of its tanh's argument.
pub const GELU_SCALE: f64 = 0.797_884_560_802_865_4;
/// GELU's cubic coefficient.
pub const GELU_CUBIC: f64 = 0.044_715;

unary_table! {
    numeric {
        /// `-x`; integers wrap (`-MIN == MIN`, and unsigned `-x == 2^N - x`).
        Neg "neg" (neg, neg_inplace) ulps 0 grows 0 math none domain all
            |x| x.neg();
        /// `|x|`; integers wrap (`|MIN| == MIN`); unsigned values are unchanged.
        Abs "abs" (abs, abs_inplace) ulps 0 grows 0 math none domain all
            |x| x.abs();
        /// `x * x` (wrapping for integers).
        Square "square" (square, square_inplace) ulps 0 grows 0 math none domain all
            |x| x.mul(x);
        /// `max(x, 0)`; a NaN gives 0.
        Relu "relu" (relu, relu_inplace) ulps 0 grows 0 math none domain all
            |x| x.if_gt(C::ZERO, x, C::ZERO);
    }
    float {
        /// `sqrt(x)`, correctly rounded (bit for bit on every backend).
        Sqrt "sqrt" (sqrt, sqrt_inplace) ulps 0 grows 0 math none domain from[0.0]
            |x| x.sqrt();
        /// `1 / sqrt(x)`, as a correctly rounded square root and division (bit for bit).
        Rsqrt "rsqrt" (rsqrt, rsqrt_inplace) ulps 1 grows 0 math none domain from[0.0]
            |x| C::ONE.div(x.sqrt());
        /// `e^x`.
        Exp "exp" (exp, exp_inplace) ulps 3 grows 0 math exp[x] domain all
            |x| x.exp();
        /// `ln(x)` (NaN below 0, `-inf` at 0).
        Log "log" (log, log_inplace) ulps 3 grows 0 math log domain from[0.0]
            |x| x.ln();
        /// `ln(1 + x)`, accurate near 0.
        Log1p "log1p" (log1p, log1p_inplace) ulps 3 grows 0 math log domain from[-1.0]
            |x| x.ln_1p();
        /// `1 / (1 + e^-x)`, computed as `e / (1 + e)` below 0 (`e = e^-|x|`) so that
        /// neither side overflows: within 4 ulp over every input, subnormal results included.
        Sigmoid "sigmoid" (sigmoid, sigmoid_inplace) ulps 4 grows 0 math exp[x] domain all
            |x| {
                let e = x.abs().neg().exp();
                x.if_gt(C::ZERO, C::ONE, e).div(C::ONE.add(e))
            };
        /// SiLU (swish, the gate of SwiGLU): `x * sigmoid(x)`, computed with `h = e^(-|x|/2)`
        /// as `x / (1 + h h)` above 0 and `(x h) h / (1 + h h)` below, so that the product
        /// never overflows and a tiny result is rounded once: within 4 ulp over every input.
        Silu "silu" (silu, silu_inplace) ulps 4 grows 0 math exp[0.5 * x] domain all
            |x| {
                let h = x.abs().mul(C::from_f64(0.5)).neg().exp();
                let num = x.if_gt(C::ZERO, x, x.mul(h).mul(h));
                num.div(C::ONE.add(h.mul(h)))
            };
        /// `tanh(x)`.
        Tanh "tanh" (tanh, tanh_inplace) ulps 4 grows 0 math exp[x] domain all
            |x| x.tanh();
        /// GELU, tanh form: `0.5 x (1 + tanh(u))`, `u = sqrt(2/pi) (x + 0.044715 x^3)`,
        /// computed without its cancellation as `x sigmoid(2u)`: with `h = e^-|u|`,
        /// `x / (1 + h h)` above 0 and `(x h) h / (1 + h h)` below. Within 4 ulp for
        /// `x >= 0`; below 0 the result is `x e^(2u)` in effect and the few-eps rounding of
        /// `u` (its constants' and its four operations') moves it by up to `7 |u|` ulp (6.2
        /// the most on the CPU backend over every f32 below 0), so there it is within
        /// `4 + 7 |u|` ulp (`|u| < 1` above -1.1, 9.2 at -5, where it is 3e-7; the bound is
        /// relative all the way down, subnormal results included). `gelu(-inf)` is NaN
        /// (`-inf * 0`), as in PyTorch.
        Gelu "gelu" (gelu, gelu_inplace) ulps 4 grows 7
            math exp[GELU_SCALE * (x + GELU_CUBIC * x * x * x)] domain all
            |x| {
                let u = C::from_f64(GELU_SCALE)
                    .mul(x.add(C::from_f64(GELU_CUBIC).mul(x).mul(x).mul(x)));
                let h = u.abs().neg().exp();
                let num = x.if_gt(C::ZERO, x, x.mul(h).mul(h));
                num.div(C::ONE.add(h.mul(h)))
            };
        /// `ln(1 + e^x)`, computed as `max(x, 0) + ln(1 + e^-|x|)` so that it neither
        /// overflows nor loses small values.
        Softplus "softplus" (softplus, softplus_inplace) ulps 4 grows 0 math exp[x] domain all
            |x| {
                let pos = x.if_gt(C::ZERO, x, C::ZERO);
                pos.add(x.abs().neg().exp().ln_1p())
            };
        /// Softsign: `x / (1 + |x|)`, a bounded activation that saturates more slowly than
        /// `tanh`; two roundings, so within 2 ulp.
        Softsign "softsign" (softsign, softsign_inplace) ulps 2 grows 0 math none domain all
            |x| x.div(C::ONE.add(x.abs()));
        /// Hard swish (MobileNetV3): `x * relu6(x + 3) / 6`, computed as
        /// `x * (min(max(x + 3, 0), 6) / 6)`: three roundings, so within 2 ulp, exact for
        /// `|x| >= 3` (`x`, or a zero of `x`'s sign) and never overflowing; `-inf` gives NaN
        /// (`-inf * 0`).
        Hardswish "hardswish" (hardswish, hardswish_inplace) ulps 2 grows 0 math none domain all
            |x| {
                let relu6 = x.add(C::from_f64(3.0)).max(C::ZERO).min(C::from_f64(6.0));
                x.mul(relu6.div(C::from_f64(6.0)))
            };
    }
}

binary_table! {
    numeric {
        /// `a + b` (wrapping for integers).
        Add "add" (add, add_inplace, add_scalar, add_scalar_inplace, add_row, add_row_inplace, add_col, add_col_inplace)
            ulps 0 math none |a, b| a.add(b);
        /// `a - b` (wrapping for integers).
        Sub "sub" (sub, sub_inplace, sub_scalar, sub_scalar_inplace, sub_row, sub_row_inplace, sub_col, sub_col_inplace)
            ulps 0 math none |a, b| a.sub(b);
        /// `a * b` (wrapping for integers).
        Mul "mul" (mul, mul_inplace, mul_scalar, mul_scalar_inplace, mul_row, mul_row_inplace, mul_col, mul_col_inplace)
            ulps 0 math none |a, b| a.mul(b);
        /// `a / b`; integers truncate toward zero, give 0 for a division by zero and wrap
        /// for `MIN / -1`.
        Div "div" (div, div_inplace, div_scalar, div_scalar_inplace, div_row, div_row_inplace, div_col, div_col_inplace)
            ulps 0 math none |a, b| a.div(b);
        /// The smaller of `a` and `b`; a NaN loses to a number (C's `fmin`).
        Min "min" (minimum, minimum_inplace, min_scalar, min_scalar_inplace, min_row, min_row_inplace, min_col, min_col_inplace)
            ulps 0 math none |a, b| a.min(b);
        /// The larger of `a` and `b`; a NaN loses to a number (C's `fmax`).
        Max "max" (maximum, maximum_inplace, max_scalar, max_scalar_inplace, max_row, max_row_inplace, max_col, max_col_inplace)
            ulps 0 math none |a, b| a.max(b);
        /// ReLU's backward pass: `b` where `a > 0`, else 0 (`a` the forward input or output,
        /// `b` the incoming gradient; a NaN `a` gives 0), the masked multiply of
        /// `relu'(a) * b` without its `0 * inf`.
        ReluBackward "relu_backward" (relu_backward, relu_backward_inplace, relu_backward_scalar, relu_backward_scalar_inplace, relu_backward_row, relu_backward_row_inplace, relu_backward_col, relu_backward_col_inplace)
            ulps 0 math none |a, b| a.if_gt(C::ZERO, b, C::ZERO);
    }
    float {
        /// `a` to the power `b` (C's `pow`).
        Pow "pow" (pow, pow_inplace, pow_scalar, pow_scalar_inplace, pow_row, pow_row_inplace, pow_col, pow_col_inplace)
            ulps 8 math pow |a, b| a.powf(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_and_out_of_place_agree() {
        let x: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
        let v: Vec<f32> = (0..4).map(|i| i as f32 + 0.5).collect();
        for &op in BinaryOp::ALL {
            for rhs in [
                RhsSlice::Row(&v[..]),
                RhsSlice::Col(&v[..3]),
                RhsSlice::Scalar(2.0),
                RhsSlice::Array(&x[..]),
            ] {
                let mut out = vec![0.0f32; 12];
                op.map_float(Some(&x), rhs, 4, &mut out);
                let mut inplace = x.clone();
                op.map_float(None, rhs, 4, &mut inplace);
                assert_eq!(
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    inplace.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{op:?} {rhs:?}"
                );
                // Row and column broadcasts index the vector by column and by row.
                let (i, r, c) = (6, 1, 2);
                let want = match rhs {
                    RhsSlice::Row(v) => op.apply_real(x[i], v[c]),
                    RhsSlice::Col(v) => op.apply_real(x[i], v[r]),
                    RhsSlice::Scalar(s) => op.apply_real(x[i], s),
                    RhsSlice::Array(b) => op.apply_real(x[i], b[i]),
                };
                assert_eq!(out[i].to_bits(), want.to_bits(), "{op:?} {rhs:?}");
            }
        }
    }

    #[test]
    fn float_only_ops_are_refused_on_integers() {
        let mut out = [0i32; 2];
        for &op in UnaryOp::ALL {
            assert_eq!(op.map_numeric(Some(&[4, -4]), &mut out), !op.floats_only());
        }
        assert!(!BinaryOp::Pow.map_numeric(Some(&[2, 3]), RhsSlice::Scalar(2), 2, &mut out));
        assert!(BinaryOp::Div.map_numeric(
            Some(&[7, i32::MIN]),
            RhsSlice::Array(&[0, -1]),
            2,
            &mut out
        ));
        assert_eq!(out, [0, i32::MIN]);
    }

    /// The distance in f32 ulps between two values (ordered by their bits; `-0 == 0`).
    fn ulps_apart(a: f32, b: f32) -> u64 {
        let key = |v: f32| {
            let b = v.to_bits() as i64;
            if b < 0x8000_0000 {
                b
            } else {
                0x8000_0000 - b
            }
        };
        key(a).abs_diff(key(b))
    }

    /// Every f32 unary body against the same body in f64 (rounded once), within the entry's
    /// `ulps` or `slack`, over inputs of every exponent and sign (a stride through the bit
    /// patterns, subnormals included), the special values, and a dense grid over
    /// `[-20, 20]` where the activations bend: the contract holds over the whole range.
    #[test]
    fn f32_budgets_hold_over_every_exponent() {
        let mut inputs: Vec<f32> = (0..=u32::MAX / 4099)
            .map(|i| f32::from_bits(i * 4099))
            .filter(|v| !v.is_nan())
            .collect();
        inputs.extend((0..=40_000).map(|i| -20.0 + i as f32 / 1000.0));
        inputs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN,
            f32::MAX,
        ]);
        for &op in UnaryOp::ALL {
            let mut worst = (0u64, 0.0f32);
            for &x in &inputs {
                let got = op.apply_real(x);
                let want64 = op.apply_real(f64::from(x));
                let want = want64 as f32;
                if want.is_nan() || got.is_nan() {
                    assert!(
                        want.is_nan() && got.is_nan(),
                        "{op:?}({x:e}): {got:e} vs {want:e}"
                    );
                    continue;
                }
                let apart = ulps_apart(got, want);
                if apart > u64::from(op.ulps_at(f64::from(x))) && apart > worst.0 {
                    worst = (apart, x);
                }
            }
            assert_eq!(worst.0, 0, "{op:?}: {} ulp at {:e}", worst.0, worst.1);
        }
    }

    /// The f64 bodies, which the property tests take as the truth, against values computed
    /// with 50 digits (mpmath) where the old forms cancelled or overflowed: gelu's tail,
    /// sigmoid and silu beyond f32's `exp` range.
    #[test]
    fn f64_references_hold_in_the_tails() {
        let cases: [(UnaryOp, f64, f64); 10] = [
            (UnaryOp::Gelu, -1.0, -0.158_808_009_391_723_3),
            (UnaryOp::Gelu, -3.0, -0.003_637_392_081_773_019),
            (UnaryOp::Gelu, -5.0, -2.291_796_196_629_506e-7),
            (UnaryOp::Gelu, -6.0, -8.439_646_700_762_297e-11),
            (UnaryOp::Gelu, -8.0, -3.107_782_937_501_111e-21),
            (UnaryOp::Gelu, -10.0, -1.204_092_348_209_810_7e-37),
            (UnaryOp::Sigmoid, -89.0, 2.227_363_561_795_743_7e-39),
            (UnaryOp::Sigmoid, -100.0, 3.720_075_976_020_836e-44),
            (UnaryOp::Silu, -89.0, -1.982_353_569_998_212e-37),
            (UnaryOp::Silu, -100.0, -3.720_075_976_020_836e-42),
        ];
        for (op, x, want) in cases {
            let got = op.apply_real(x);
            assert!(
                (got - want).abs() <= 1e-12 * want.abs(),
                "{op:?}({x}) = {got:e}, not {want:e}"
            );
            let got32 = op.apply_real(x as f32);
            let apart = ulps_apart(got32, want as f32);
            assert!(
                apart <= u64::from(op.ulps_at(x)),
                "{op:?}({x}) f32: {apart} ulp"
            );
        }
    }

    /// The columns agree with the bodies: an op with a domain gives NaN below it and a
    /// number above it; the math functions are those the bodies call.
    #[test]
    fn columns_agree_with_the_bodies() {
        for &op in UnaryOp::ALL {
            if let Domain::AtLeast(lo) = op.domain() {
                assert!(op.apply_real(lo - 1.0f64).is_nan(), "{op:?} below {lo}");
                assert!(!op.apply_real(lo + 1.0f64).is_nan(), "{op:?} above {lo}");
            }
        }
        assert!(matches!(UnaryOp::Log1p.math(), Some(MathFn::Log)));
        assert!(matches!(BinaryOp::Pow.math(), Some(MathFn::Pow)));
        assert!(UnaryOp::Relu.math().is_none() && BinaryOp::Add.math().is_none());
        match UnaryOp::Gelu.math() {
            Some(MathFn::Exp(arg)) => assert_eq!(arg(1.0), GELU_SCALE * (1.0 + GELU_CUBIC)),
            other => panic!("gelu rests on exp of u: {other:?}"),
        }
    }
}
