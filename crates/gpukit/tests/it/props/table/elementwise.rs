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
        MathFn::Exp(arg) => (3 + 4 * arg(a).abs().min(40.0).ceil() as u32, 0.0),
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
/// contract ([`UnaryOp::ulps`], [`UnaryOp::slack`]), widened on the driver by
/// [`driver_bound`] for finite `x`.
fn unary_bound(ctx: &Context, op: UnaryOp, x: f64, eps: f64) -> (u32, f64) {
    let (ulps, slack) = (op.ulps(), op.slack(x, eps));
    match op.math() {
        Some(math) if driver_math(ctx) && x.is_finite() => {
            let (more, abs) = driver_bound(math, x, 0.0, eps);
            (ulps + more, slack + abs)
        }
        _ => (ulps, slack),
    }
}

/// Inputs of the math functions: -20..20, where every result is an ordinary number, and the
/// special values.
fn math_value<T: Cross>() -> BoxedStrategy<T> {
    prop_oneof![
        8 => (-20.0..20.0f64).prop_map(T::from_f64),
        1 => prop::sample::select(vec![0.0, -0.0, 1.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN])
            .prop_map(T::from_f64),
    ]
    .boxed()
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

/// Every unary op, out of place and in place (which must agree bit for bit), against f64.
pub(super) fn unary_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let eps = compute_eps::<T>();
    check(
        12,
        length(700).prop_flat_map(|n| vec(math_value::<T>(), n)),
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
                    let want = op.apply_real::<f64>(v.to_f64());
                    let (ulps, slack) = unary_bound(ctx, op, v.to_f64(), eps);
                    let ulps = ulp_budget::<T>(ulps);
                    prop_assert!(
                        agrees_on(ctx, want, g, ulps, slack),
                        "{} {} of {v:?}: got {g:?}, f64 reference {want} (within {ulps} ulp)",
                        op.name(),
                        T::DTYPE
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
