//! The element-wise table: every unary and binary op of `UnaryOp::ALL` and `BinaryOp::ALL`
//! in each of its forms against f64 (floats, within the columns' tolerances, on inputs from
//! each op's `domain`), and exactly against the standard library's wrapping arithmetic
//! (integers); float-only ops are a typed error on integers.

use super::*;
use gpukit::core::{Domain, MathFn};
use gpukit::{BinaryOp, Error, UnaryOp};

/// Whether an op's tolerance is the driver's on `ctx`: the wgpu backend's `exp`, `log` and
/// `pow` are the Vulkan driver's (GLSL.std.450), with Vulkan's precision and no more; the
/// ops built on them inherit the bound (that backend's docs say so).
fn driver_math(ctx: &Context) -> bool {
    ctx.backend_name() == "vulkan"
}

/// How much a driver with Vulkan's precision widens an op that rests on `math`, at the
/// operand `a` (and `b`, pow's exponent), in ulps and as an absolute slack (`eps`: the compute
/// type's epsilon):
/// - `exp(arg)`: `3 + 2|arg|` ulp; `tanh` goes through `exp(2|arg|)`: `3 + 4|arg|`;
/// - `log`: 3 ulp outside `[0.5, 2]`, `2^-21` absolute inside;
/// - `pow(a, b)` is `exp2(e)` for `e = b log2 a`: exp2's `3 + 2|e|` ulp, plus log2's error
///   times `b`: 3 ulp of `log2 a` (about `3|e|` ulp of the result), or `2^-21` absolute for
///   `a` in `[0.5, 2]` (about `3|b|` ulp).
fn driver_bound(math: MathFn, a: f64, b: f64, eps: f64) -> (u32, f64) {
    match math {
        MathFn::Exp(arg) => (3 + 4 * arg(a).abs().min(1e6).ceil() as u32, 0.0),
        MathFn::Log => (3, 2f64.powi(-21) + eps),
        MathFn::Pow => {
            let (x, y) = (a.abs(), b.abs());
            let e = (y * x.log2()).abs();
            let near_one = if (0.5..=2.0).contains(&x) {
                3.0 * y
            } else {
                0.0
            };
            let bound = 3.0 + 5.0 * e + near_one;
            let ulps = if bound.is_finite() {
                bound.min(1e6).ceil() as u32
            } else {
                0
            };
            (ulps, 0.0)
        }
    }
}

/// The (ulps, absolute slack) a unary op's result of `x` may differ by on `ctx`: its table
/// contract at `x` ([`UnaryOp::ulps_at`]), widened on the driver by [`driver_bound`] for
/// finite `x`.
fn unary_bound(ctx: &Context, op: UnaryOp, x: f64, eps: f64) -> (u32, f64) {
    let ulps = op.ulps_at(x);
    match op.math() {
        Some(math) if driver_math(ctx) && x.is_finite() => {
            let (more, abs) = driver_bound(math, x, 0.0, eps);
            (ulps.saturating_add(more), abs)
        }
        _ => (ulps, 0.0),
    }
}

/// Inputs of the unary ops over the whole range of `T`: every exponent of both signs,
/// subnormals and the special values ([`Cross::edgy`]); -20..20, where the activations bend;
/// and dense around the points where the ops' formulas cancel or their domains start:
/// `0`, `1` and `-1` plus or minus `m 2^-k` for every `k` to 60 (log and log1p near their
/// zeros and poles, gelu, silu, softplus and tanh near 0), and gelu's, silu's and
/// sigmoid's negative tails, where the old forms cancelled or overflowed.
fn wide_value<T: Cross>() -> BoxedStrategy<T> {
    prop_oneof![
        4 => T::edgy(),
        3 => (-20.0..20.0f64).prop_map(T::from_f64),
        2 => (prop::sample::select(vec![0.0, 1.0, -1.0]), any::<bool>(), 1.0..2.0f64, 1..61i32)
            .prop_map(|(at, up, m, k)| {
                let d = m * 2f64.powi(-k);
                T::from_f64(if up { at + d } else { at - d })
            }),
        2 => (-120.0..-1.0f64).prop_map(T::from_f64),
    ]
    .boxed()
}

/// Whether a backend that flushes subnormals ([`flushes`]) may have read `x` as a zero of
/// its sign.
fn flushed_input<T: Numeric>(ctx: &Context, x: T) -> Option<f64> {
    let v = x.to_f64();
    (flushes(ctx) && v != 0.0 && v.abs() < min_normal::<T>()).then(|| 0.0f64.copysign(v))
}

/// What a driver with Vulkan's precision may give for `log` of a subnormal `x` ([`MathFn`]'s
/// docs): any value at or below the log of the smallest normal (lavapipe gives -87.7 for
/// f32's 4e-39, whose log is -88.3), where it does not flush `x` to zero.
fn driver_log_of_subnormal<T: CrossFloat>(ctx: &Context, op: UnaryOp, x: T, got: T) -> bool {
    matches!(op.math(), Some(MathFn::Log))
        && op != UnaryOp::Log1p
        && flushed_input(ctx, x).is_some()
        && got.to_f64() <= min_normal::<T>().ln()
}

/// The input an op is checked on: `x` inside its domain (its `domain` column): `|x|` for an
/// op defined from a bound at or below 0 (sqrt, rsqrt, log, log1p), so that most results are
/// numbers.
fn domain<T: Numeric>(op: UnaryOp, x: T) -> T {
    match op.domain() {
        Domain::AtLeast(lo) => {
            assert!(lo <= 0.0, "{op:?}: |x| is not inside a domain from {lo}");
            T::from_f64(x.to_f64().abs())
        }
        Domain::All => x,
    }
}

/// Every unary op, out of place and in place (which must agree bit for bit), against f64,
/// over [`wide_value`]s: every exponent, both signs, subnormals, special values and the ops'
/// cancellation points.
pub(super) fn unary_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let eps = compute_eps::<T>();
    check(
        16,
        length(700).prop_flat_map(|n| vec(wide_value::<T>(), n)),
        |x| {
            for &op in UnaryOp::ALL {
                let input: Vec<T> = x.iter().map(|&v| domain(op, v)).collect();
                let dx = ctx.alloc_upload(&input).tc()?;
                let mut out = ctx.alloc::<T>(input.len()).tc()?;
                if op.math().is_some() && common::lacks_math(ctx, T::DTYPE) {
                    // An empty array needs no kernel: only a non-empty one shows the gap.
                    if !input.is_empty() {
                        common::assert_unsupported(ctx.unary(op, &dx, &mut out), op.name());
                    }
                    continue;
                }
                ctx.unary(op, &dx, &mut out).tc()?;
                let mut inplace = ctx.alloc_upload(&input).tc()?;
                ctx.unary_inplace(op, &mut inplace).tc()?;
                let (got, got_in) = (out.download().tc()?, inplace.download().tc()?);
                for (i, (&v, (&g, &gi))) in input.iter().zip(got.iter().zip(&got_in)).enumerate() {
                    prop_assert!(
                        g.same(gi),
                        "{} [{i}] of {v:?}: {g:?} out of place, {gi:?} in place",
                        op.name()
                    );
                    let agrees_at = |x: f64| {
                        let want = op.apply_real::<f64>(x);
                        let (ulps, slack) = unary_bound(ctx, op, x, eps);
                        agrees_on(ctx, want, g, ulp_budget::<T>(ulps), slack)
                    };
                    prop_assert!(
                        agrees_at(v.to_f64())
                            || flushed_input(ctx, v).is_some_and(agrees_at)
                            || driver_log_of_subnormal(ctx, op, v, g),
                        "{} {} of {v:?}: got {g:?}, f64 reference {} (within {} ulp)",
                        op.name(),
                        T::DTYPE,
                        op.apply_real::<f64>(v.to_f64()),
                        ulp_budget::<T>(unary_bound(ctx, op, v.to_f64(), eps).0)
                    );
                }
            }
            Ok(())
        },
    )
}

/// The second operand of element `i` of a `shape` matrix, for each form of a binary op.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    Array,
    InPlace,
    Scalar,
    ScalarInPlace,
    Row,
    RowInPlace,
    Col,
    ColInPlace,
}

const FORMS: [Form; 8] = [
    Form::Array,
    Form::InPlace,
    Form::Scalar,
    Form::ScalarInPlace,
    Form::Row,
    Form::RowInPlace,
    Form::Col,
    Form::ColInPlace,
];

/// Runs `op` in `form` on the device: `a` against `b` (element-wise), `v` (the first
/// `cols` as the row vector, the first `rows` as the column vector) or `s`.
fn run_form<T: Numeric>(
    ctx: &Context,
    op: BinaryOp,
    form: Form,
    shape: Shape,
    (a, b, v): (&[T], &[T], &[T]),
    s: T,
) -> gpukit::Result<Vec<T>> {
    let n = a.len();
    let da = ctx.alloc_upload(a)?;
    let mut x = ctx.alloc_upload(a)?;
    let mut out = ctx.alloc_zeros::<T>(n)?;
    let db = ctx.alloc_upload(b)?;
    let row = ctx.alloc_upload(&v[..shape.cols])?;
    let col = ctx.alloc_upload(&v[..shape.rows])?;
    match form {
        Form::Array => ctx.binary(op, &da, &db, &mut out)?,
        Form::InPlace => ctx.binary_inplace(op, &mut x, &db)?,
        Form::Scalar => ctx.binary_scalar(op, &da, s, &mut out)?,
        Form::ScalarInPlace => ctx.binary_scalar_inplace(op, &mut x, s)?,
        Form::Row => ctx.binary_row(op, shape, &da, &row, &mut out)?,
        Form::RowInPlace => ctx.binary_row_inplace(op, shape, &mut x, &row)?,
        Form::Col => ctx.binary_col(op, shape, &da, &col, &mut out)?,
        Form::ColInPlace => ctx.binary_col_inplace(op, shape, &mut x, &col)?,
    }
    match form {
        Form::InPlace | Form::ScalarInPlace | Form::RowInPlace | Form::ColInPlace => x.download(),
        _ => out.download(),
    }
}

/// The second operand element `i` of `form` sees.
fn rhs<T: Copy>(form: Form, shape: Shape, (b, v): (&[T], &[T]), s: T, i: usize) -> T {
    let cols = shape.cols.max(1);
    match form {
        Form::Array | Form::InPlace => b[i],
        Form::Scalar | Form::ScalarInPlace => s,
        Form::Row | Form::RowInPlace => v[i % cols],
        Form::Col | Form::ColInPlace => v[i / cols],
    }
}

/// Every binary op in every form against f64, within its `ulps` (1 at most for the 16-bit
/// types), widened on the driver by [`driver_bound`].
pub(super) fn binary_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let eps = compute_eps::<T>();
    check(12, matrix_case::<T>(), |(shape, a, b, v, s)| {
        for &op in BinaryOp::ALL {
            if op.math().is_some() && common::lacks_math(ctx, T::DTYPE) {
                if !shape.is_empty() {
                    common::assert_unsupported(
                        run_form(ctx, op, Form::Array, shape, (&a, &b, &v), s),
                        op.name(),
                    );
                }
                continue;
            }
            for form in FORMS {
                let got = run_form(ctx, op, form, shape, (&a, &b, &v), s).tc()?;
                for (i, &g) in got.iter().enumerate() {
                    let y = rhs(form, shape, (&b, &v), s, i);
                    let want = op.apply_real::<f64>(a[i].to_f64(), y.to_f64());
                    let driver = match op.math() {
                        Some(math) if driver_math(ctx) => {
                            driver_bound(math, a[i].to_f64(), y.to_f64(), eps).0
                        }
                        _ => 0,
                    };
                    let ulps = ulp_budget::<T>(op.ulps() + driver);
                    prop_assert!(
                        agrees_on(ctx, want, g, ulps, 0.0),
                        "{} {form:?} {} [{i}] of {shape:?}: {:?} op {y:?} gave {g:?}, f64 reference {want}",
                        op.name(),
                        T::DTYPE,
                        a[i]
                    );
                }
            }
        }
        Ok(())
    })
}

/// What a driver with Vulkan's precision may give for `pow(a, b)` at the edges of the range
/// ([`MathFn`]'s docs), compared by magnitude (the sign is `a`'s for an odd integer `b`):
/// - `exp2(b log2 |a|)` with `log2` of a subnormal `a` read at or below that of the
///   smallest normal, so anything between `pow(0, b)` and `pow(smallest normal, b)`
///   (lavapipe gives 1.1e38 for `pow(5.9e-39, -1)`);
/// - an infinity where the result is within the driver's bound (`ulps` of `T`) of the
///   largest finite value (lavapipe's `pow(-3.4e38, 1)` is `-inf`);
/// - where `b log2 |a|` carries an error of a binade or more (`a` near 1 and `|b|` large:
///   `2^-21 |b|`, or 3 ulp of `log2 |a|` times `|b|`), which `exp2` turns into a factor, not
///   a count of ulps: a result within that factor of the exact one (lavapipe gives 2.2e-38
///   for `pow(-0.99999946, 146435740)`, whose value is 7.7e-35), or 0 where the factor
///   reaches below the smallest normal.
fn driver_pow_edges<T: CrossFloat>(
    ctx: &Context,
    op: BinaryOp,
    (a, b): (T, f64),
    ulps: u64,
    got: T,
) -> bool {
    if !matches!(op.math(), Some(MathFn::Pow)) || !driver_math(ctx) {
        return false;
    }
    let (x, g) = (a.to_f64().abs(), got.to_f64().abs());
    if flushed_input(ctx, a).is_some() {
        let (edge, zero) = (min_normal::<T>().powf(b), 0.0f64.powf(b));
        let (lo, hi) = if edge < zero {
            (edge, zero)
        } else {
            (zero, edge)
        };
        return g >= lo * (1.0 - 1e-3) && g <= hi * (1.0 + 1e-3);
    }
    let largest = T::from_f64(f64::MAX).to_f64();
    let largest = if largest.is_infinite() {
        max_finite::<T>()
    } else {
        largest
    };
    if g.is_infinite() && x.powf(b) * (1.0 + ulps as f64 * compute_eps::<T>()) >= largest {
        return true;
    }
    // The error of `b log2 |a|`, in binades of the result.
    let exponent_error = if (0.5..=2.0).contains(&x) {
        b.abs() * 2f64.powi(-21)
    } else {
        3.0 * compute_eps::<T>() * (b * x.log2()).abs()
    };
    let want = x.powf(b);
    if exponent_error < 1.0 || !want.is_finite() || want == 0.0 {
        return false;
    }
    let binades = exponent_error + 1.0;
    if g == 0.0 {
        return want.log2() - binades <= min_normal::<T>().log2();
    }
    g.is_finite() && (g / want).log2().abs() <= binades
}

/// The largest finite value of `T`.
fn max_finite<T: Numeric>() -> f64 {
    match T::DTYPE {
        gpukit::DType::F16 => 65504.0,
        gpukit::DType::BF16 => 3.389_531_389_251_535_5e38,
        gpukit::DType::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    }
}

/// Every binary op, element-wise, against f64 over [`wide_value`] operands (every exponent,
/// both signs, subnormals, special values): the same contract as [`binary_vs_f64`]'s, where
/// a backend that flushes subnormals may have read either operand as a zero.
pub(super) fn binary_wide_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let eps = compute_eps::<T>();
    let pairs =
        length(500).prop_flat_map(|n| (vec(wide_value::<T>(), n), vec(wide_value::<T>(), n)));
    check(12, pairs, |(a, b)| {
        let (da, db) = (ctx.alloc_upload(&a).tc()?, ctx.alloc_upload(&b).tc()?);
        for &op in BinaryOp::ALL {
            let mut out = ctx.alloc::<T>(a.len()).tc()?;
            if op.math().is_some() && common::lacks_math(ctx, T::DTYPE) {
                continue;
            }
            ctx.binary(op, &da, &db, &mut out).tc()?;
            for (i, &g) in out.download().tc()?.iter().enumerate() {
                let ulps_at = |x: f64, y: f64| {
                    let driver = match op.math() {
                        Some(math) if driver_math(ctx) => driver_bound(math, x, y, eps).0,
                        _ => 0,
                    };
                    ulp_budget::<T>(op.ulps().saturating_add(driver))
                };
                let agrees_at = |x: f64, y: f64| {
                    agrees_on(ctx, op.apply_real::<f64>(x, y), g, ulps_at(x, y), 0.0)
                };
                let (x, y) = (a[i].to_f64(), b[i].to_f64());
                let (fx, fy) = (flushed_input(ctx, a[i]), flushed_input(ctx, b[i]));
                prop_assert!(
                    agrees_at(x, y)
                        || driver_pow_edges(ctx, op, (a[i], y), ulps_at(x, y), g)
                        || fx.is_some_and(|fx| agrees_at(fx, y))
                        || fy.is_some_and(|fy| agrees_at(x, fy))
                        || fx.zip(fy).is_some_and(|(fx, fy)| agrees_at(fx, fy)),
                    "{} {} [{i}]: {:?} op {:?} gave {g:?}, f64 reference {}",
                    op.name(),
                    T::DTYPE,
                    a[i],
                    b[i],
                    op.apply_real::<f64>(x, y)
                );
            }
        }
        Ok(())
    })
}

/// Exact integer references, written with the standard library's wrapping arithmetic.
pub(super) trait IntTable: Cross + Ord {
    fn unary_ref(op: UnaryOp, x: Self) -> Self;
    fn binary_ref(op: BinaryOp, a: Self, b: Self) -> Self;
}

macro_rules! int_table {
    ($($t:ty),*) => {$(
        impl IntTable for $t {
            fn unary_ref(op: UnaryOp, x: Self) -> Self {
                match op {
                    UnaryOp::Neg => x.wrapping_neg(),
                    // |MIN| wraps to MIN; unsigned values are their own magnitude.
                    UnaryOp::Abs => (x as i128).unsigned_abs() as $t,
                    UnaryOp::Square => x.wrapping_mul(x),
                    UnaryOp::Relu => x.max(0),
                    other => panic!("{other:?} is float-only"),
                }
            }
            fn binary_ref(op: BinaryOp, a: Self, b: Self) -> Self {
                match op {
                    BinaryOp::Add => a.wrapping_add(b),
                    BinaryOp::Sub => a.wrapping_sub(b),
                    BinaryOp::Mul => a.wrapping_mul(b),
                    BinaryOp::Div => if b == 0 { 0 } else { a.wrapping_div(b) },
                    BinaryOp::Min => a.min(b),
                    BinaryOp::Max => a.max(b),
                    BinaryOp::ReluBackward => if a > 0 { b } else { 0 },
                    BinaryOp::Pow => panic!("pow is float-only"),
                }
            }
        }
    )*};
}

int_table!(i32, u8, i64, u64, i8, u32);

/// Every op integers have, in every form, exactly; float-only ops are a typed error.
pub(super) fn int_table_exact<T: IntTable>(ctx: &Context) -> gpukit::Result<()> {
    check(16, matrix_case::<T>(), |(shape, a, b, v, s)| {
        for &op in BinaryOp::ALL {
            if op.floats_only() {
                let r = run_form(ctx, op, Form::Array, shape, (&a, &b, &v), s);
                prop_assert!(
                    matches!(r, Err(Error::Unsupported { .. })),
                    "{} on {}: {r:?}",
                    op.name(),
                    T::DTYPE
                );
                continue;
            }
            for form in FORMS {
                let got = run_form(ctx, op, form, shape, (&a, &b, &v), s).tc()?;
                for (i, &g) in got.iter().enumerate() {
                    let want = T::binary_ref(op, a[i], rhs(form, shape, (&b, &v), s, i));
                    prop_assert_eq!(g, want, "{} {:?} {} [{}]", op.name(), form, T::DTYPE, i);
                }
            }
        }
        let da = ctx.alloc_upload(&a).tc()?;
        for &op in UnaryOp::ALL {
            let mut out = ctx.alloc::<T>(a.len()).tc()?;
            let r = ctx.unary(op, &da, &mut out);
            if op.floats_only() {
                prop_assert!(
                    matches!(r, Err(Error::Unsupported { .. })),
                    "{} on {}: {r:?}",
                    op.name(),
                    T::DTYPE
                );
                continue;
            }
            r.tc()?;
            let mut x = ctx.alloc_upload(&a).tc()?;
            ctx.unary_inplace(op, &mut x).tc()?;
            let want: Vec<T> = a.iter().map(|&v| T::unary_ref(op, v)).collect();
            prop_assert_eq!(&out.download().tc()?, &want, "{} {}", op.name(), T::DTYPE);
            prop_assert_eq!(
                &x.download().tc()?,
                &want,
                "{} in place {}",
                op.name(),
                T::DTYPE
            );
        }
        let (lo, hi) = (
            s.min(b.first().copied().unwrap_or(s)),
            s.max(b.first().copied().unwrap_or(s)),
        );
        let mut out = ctx.alloc::<T>(a.len()).tc()?;
        ctx.clamp(&da, lo, hi, &mut out).tc()?;
        let want: Vec<T> = a.iter().map(|&v| v.clamp(lo, hi)).collect();
        prop_assert_eq!(out.download().tc()?, want, "clamp {}", T::DTYPE);
        Ok(())
    })
}
