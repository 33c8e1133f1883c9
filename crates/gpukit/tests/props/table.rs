//! The op table against float64 references (floats) and exact ones (integers), on every
//! backend: every unary and binary op of `UnaryOp::ALL` and `BinaryOp::ALL` in each of its
//! forms (out of place, in place, with a scalar, with a row or a column vector), clamp, the
//! reductions whole and per row, softmax and log-softmax, cross-entropy and its gradient,
//! casts, and batched gemm against the same products done one by one.
//!
//! The tolerances, per op, against the f64 result rounded once to the element type: the op
//! table's contract, `UnaryOp::ulps` and `BinaryOp::ulps`:
//! - 0, bit for bit: neg, abs, relu, square, sqrt, and the binary `+ - * /`, min and max
//!   (each one correctly rounded operation in the compute type, and f32 is wide enough that
//!   rounding it again to 16 bits gives the correctly rounded 16-bit result);
//! - a few ulp: rsqrt (two roundings) 1; exp, log and log1p 3 (CUDA's functions are within 2
//!   ulp of the exact result, the reference within half of one); tanh, sigmoid, softplus and
//!   gelu 4; pow 8; every 16-bit result at most 1 (its f32 computation is far inside one
//!   16-bit ulp);
//! - gelu, where `1 + tanh(..)` cancels, also within `8 eps |x|` (see `cross::gelu_slack`).

use super::cross::{gelu_slack, within_ulps, Cross, CrossFloat};
use super::*;

use gpukit::core::half::{bf16, f16};
use gpukit::{BinaryOp, Context, DType, Error, ReduceOp, Shape, UnaryOp};

/// The epsilon of `T`'s compute type (f32 for f32, f16 and bf16).
fn compute_eps<T: Numeric>() -> f64 {
    if T::DTYPE == DType::F64 {
        f64::EPSILON
    } else {
        f64::from(f32::EPSILON)
    }
}

/// How many ulp of `T` an op's result may be from the f64 reference rounded to `T`: the op
/// table's contract ([`UnaryOp::ulps`], [`BinaryOp::ulps`]), at most 1 for the 16-bit types.
fn ulp_budget<T: Numeric>(ulps: u32) -> u64 {
    let ulps = u64::from(ulps);
    if T::DTYPE.size() == 2 {
        ulps.min(1)
    } else {
        ulps
    }
}

/// Whether an op's tolerance is the driver's on `ctx`: the wgpu backend's `exp`, `log` and
/// `pow` are the Vulkan driver's (GLSL.std.450), whose precision Vulkan specifies as
/// `exp`: 3 + 2|x| ulp; `log`: 3 ulp outside [0.5, 2], 2^-21 absolute inside; `pow`:
/// inherited from `exp2(y log2 x)`. The ops built on them (sigmoid, silu, softplus, tanh,
/// gelu) inherit the bound; that backend's docs say so.
fn driver_math(ctx: &Context) -> bool {
    ctx.backend_name() == "vulkan"
}

/// The (ulps, absolute slack) a unary op's result of `x` may differ by on `ctx`.
fn unary_bound(ctx: &Context, op: UnaryOp, x: f64, eps: f64) -> (u32, f64) {
    let gelu = if op == UnaryOp::Gelu {
        gelu_slack(x, eps)
    } else {
        0.0
    };
    if !driver_math(ctx) || !x.is_finite() {
        return (op.ulps(), gelu);
    }
    let exp_ulps = |a: f64| 3 + 4 * a.abs().min(40.0).ceil() as u32;
    match op {
        UnaryOp::Exp | UnaryOp::Sigmoid | UnaryOp::Silu | UnaryOp::Softplus | UnaryOp::Tanh => {
            (op.ulps() + exp_ulps(x), 0.0)
        }
        UnaryOp::Gelu => {
            let arg = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
            (op.ulps() + exp_ulps(arg), gelu)
        }
        UnaryOp::Log | UnaryOp::Log1p => (op.ulps() + 3, 2f64.powi(-21) + eps),
        _ => (op.ulps(), gelu),
    }
}

/// Whether a subnormal result may read as zero on `ctx` (drivers may flush subnormals:
/// lavapipe does).
fn flushes(ctx: &Context) -> bool {
    ctx.backend_name() == "vulkan"
}

/// [`agrees`], also accepting a zero for a reference below `T`'s smallest normal on a
/// backend that flushes subnormals.
fn agrees_on<T: CrossFloat>(ctx: &Context, want: f64, got: T, ulps: u64, slack: f64) -> bool {
    agrees(want, got, ulps, slack)
        || (flushes(ctx)
            && got.to_f64() == 0.0
            && T::from_f64(want).to_f64().abs() < min_normal::<T>())
}

/// The smallest positive normal value of `T`.
fn min_normal<T: Numeric>() -> f64 {
    match T::DTYPE {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F16 => 6.103_515_625e-5,
        _ => f64::from(f32::MIN_POSITIVE),
    }
}

/// Whether an op calls `exp`, `log`, `tanh` or `pow` (which the wgpu backend lacks in f64).
fn is_math(op: UnaryOp) -> bool {
    !matches!(
        op,
        UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Square
            | UnaryOp::Relu
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
    )
}

/// Whether `got` is the reference `want` (an f64 result) within `ulps` of `T`, or within
/// `slack` of it.
fn agrees<T: CrossFloat>(want: f64, got: T, ulps: u64, slack: f64) -> bool {
    let w = T::from_f64(want);
    if ulps == 0 {
        return w.same(got) || (w.to_f64() == 0.0 && got.to_f64() == 0.0 && want == 0.0);
    }
    within_ulps(w, got, ulps) || (got.to_f64() - want).abs() <= slack
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

/// The input an op is checked on: its domain's part of `x` (|x| for sqrt, rsqrt, log and
/// log1p, so that most results are numbers; the negative side is the NaN that both give).
fn domain<T: Numeric>(op: UnaryOp, x: T) -> T {
    match op {
        UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Log | UnaryOp::Log1p => {
            T::from_f64(x.to_f64().abs())
        }
        _ => x,
    }
}

/// Every unary op, out of place and in place (which must agree bit for bit), against f64.
fn unary_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let eps = compute_eps::<T>();
    check(
        12,
        length(700).prop_flat_map(|n| vec(math_value::<T>(), n)),
        |x| {
            for &op in UnaryOp::ALL {
                let input: Vec<T> = x.iter().map(|&v| domain(op, v)).collect();
                let dx = ctx.alloc_upload(&input).tc()?;
                let mut out = ctx.alloc::<T>(input.len()).tc()?;
                if is_math(op) && common::lacks_math(ctx, T::DTYPE) {
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

/// A matrix shape (empty ones included), two matrices' worth of values, a vector of
/// `max(rows, cols)` values (its first `cols` are the row vector, its first `rows` the
/// column vector) and a scalar.
fn matrix_case<T: Cross>() -> impl Strategy<Value = (Shape, Vec<T>, Vec<T>, Vec<T>, T)> {
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

/// Every binary op in every form against f64 (pow within 8 ulp, 1 for the 16-bit types;
/// the rest bit for bit).
fn binary_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    check(12, matrix_case::<T>(), |(shape, a, b, v, s)| {
        for &op in BinaryOp::ALL {
            if op == BinaryOp::Pow && common::lacks_math(ctx, T::DTYPE) {
                if !shape.is_empty() {
                    common::assert_unsupported(
                        run_form(ctx, op, Form::Array, shape, (&a, &b, &v), s),
                        "pow",
                    );
                }
                continue;
            }
            for form in FORMS {
                let got = run_form(ctx, op, form, shape, (&a, &b, &v), s).tc()?;
                for (i, &g) in got.iter().enumerate() {
                    let y = rhs(form, shape, (&b, &v), s, i);
                    let want = op.apply_real::<f64>(a[i].to_f64(), y.to_f64());
                    // pow on the driver: exp2(e) for e = y log2 x, so exp2's 3 + 2|e| ulp,
                    // plus log2's error times y: 3 ulp of log2 x (about 3|e| ulp of the
                    // result), or 2^-21 absolute for x in [0.5, 2] (about 3|y| ulp).
                    let driver = if op == BinaryOp::Pow && driver_math(ctx) {
                        let (x, yv) = (a[i].to_f64().abs(), y.to_f64().abs());
                        let e = (yv * x.log2()).abs();
                        let near_one = if (0.5..=2.0).contains(&x) {
                            3.0 * yv
                        } else {
                            0.0
                        };
                        let b = 3.0 + 5.0 * e + near_one;
                        if b.is_finite() {
                            b.min(1e6).ceil() as u32
                        } else {
                            0
                        }
                    } else {
                        0
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
trait IntTable: Cross + Ord {
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
fn int_table_exact<T: IntTable>(ctx: &Context) -> gpukit::Result<()> {
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

/// The reference of a value reduction of one row (no NaN among floats... or NaN ignored).
fn host_minmax<T: Numeric>(max: bool, row: &[T]) -> Option<f64> {
    row.iter()
        .map(|v| v.to_f64())
        .filter(|v| !v.is_nan())
        .reduce(|m, v| {
            if (max && v > m) || (!max && v < m) {
                v
            } else {
                m
            }
        })
        .or_else(|| row.first().map(|_| f64::NAN))
}

/// The first index of the largest (smallest) element, NaNs ranking last.
fn host_arg<T: Numeric>(max: bool, row: &[T]) -> Option<u32> {
    let best = host_minmax(max, row)?;
    let i = row
        .iter()
        .position(|v| v.to_f64() == best || (best.is_nan() && v.to_f64().is_nan()))?;
    u32::try_from(i).ok()
}

/// Whole and per-row reductions: sums and means within the summation bound, min, max and
/// the arg reductions exactly (a NaN planted in some rows is ignored); empty inputs.
fn reductions_vs_reference<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    let case = (matrix_case::<T>(), any::<u8>());
    check(16, case, |((shape, mut x, _, _, _), nan_at)| {
        let (rows, cols) = (shape.rows, shape.cols);
        if T::DTYPE.is_float() && cols > 1 {
            for r in (0..rows).step_by(2) {
                x[r * cols + usize::from(nan_at) % cols] = T::from_f64(f64::NAN);
            }
        }
        let dx = ctx.alloc_upload(&x).tc()?;
        let mut v = ctx.alloc::<T>(rows).tc()?;
        let mut idx = ctx.alloc::<u32>(rows).tc()?;
        for op in ReduceOp::ALL {
            if op == ReduceOp::Mean {
                continue; // float-only: `softmax_vs_f64` checks it
            }
            let r = match op {
                ReduceOp::Sum => ctx.row_sum(shape, &dx, &mut v),
                ReduceOp::Min => ctx.row_min(shape, &dx, &mut v),
                ReduceOp::Max => ctx.row_max(shape, &dx, &mut v),
                ReduceOp::ArgMin => ctx.row_argmin(shape, &dx, &mut idx),
                ReduceOp::ArgMax => ctx.row_argmax(shape, &dx, &mut idx),
                ReduceOp::Mean => Ok(()),
            };
            if rows > 0 && cols == 0 && op != ReduceOp::Sum {
                prop_assert!(
                    matches!(r, Err(Error::EmptyInput { .. })),
                    "{} of empty rows: {r:?}",
                    op.name()
                );
                continue;
            }
            r.tc()?;
            let (vals, ids) = (v.download().tc()?, idx.download().tc()?);
            for rr in 0..rows {
                let row = &x[rr * cols..(rr + 1) * cols];
                let clean: Vec<f64> = row
                    .iter()
                    .map(|v| v.to_f64())
                    .filter(|v| !v.is_nan())
                    .collect();
                let scale: f64 = clean.iter().map(|v| v.abs()).sum();
                match op {
                    ReduceOp::Sum if T::DTYPE.is_float() => {
                        if row.iter().all(|v| !v.to_f64().is_nan()) {
                            let want = T::from_f64(clean.iter().sum()).to_f64();
                            prop_assert!(
                                tolerance::sums_agree(
                                    T::DTYPE,
                                    want,
                                    vals[rr].to_f64(),
                                    cols,
                                    scale
                                ),
                                "row_sum {} row {rr}: {:?} vs {want}",
                                T::DTYPE,
                                vals[rr]
                            );
                        } else {
                            prop_assert!(vals[rr].to_f64().is_nan(), "a NaN makes the sum NaN");
                        }
                    }
                    ReduceOp::Sum => prop_assert_eq!(vals[rr], T::sum(row), "row_sum {}", T::DTYPE),
                    ReduceOp::Mean => {}
                    ReduceOp::Min | ReduceOp::Max => {
                        let want = host_minmax(op == ReduceOp::Max, row);
                        let got = vals[rr].to_f64();
                        prop_assert!(
                            want.is_some_and(|w| w == got || (w.is_nan() && got.is_nan())),
                            "{} {} row {rr}: {got} vs {want:?}",
                            op.name(),
                            T::DTYPE
                        );
                    }
                    ReduceOp::ArgMin | ReduceOp::ArgMax => {
                        let want = host_arg(op == ReduceOp::ArgMax, row);
                        prop_assert_eq!(
                            Some(ids[rr]),
                            want,
                            "{} {} row {}",
                            op.name(),
                            T::DTYPE,
                            rr
                        );
                    }
                }
            }
        }
        // The whole array, as one row.
        if !x.is_empty() {
            prop_assert_eq!(
                ctx.argmax(&dx).tc()?,
                host_arg(true, &x).unwrap_or(0) as usize
            );
            prop_assert_eq!(
                ctx.argmin(&dx).tc()?,
                host_arg(false, &x).unwrap_or(0) as usize
            );
            let (mn, mx) = (ctx.min(&dx).tc()?.to_f64(), ctx.max(&dx).tc()?.to_f64());
            let (wn, wx) = (host_minmax(false, &x), host_minmax(true, &x));
            prop_assert!(
                wn.is_some_and(|w| w == mn || (w.is_nan() && mn.is_nan())),
                "min {mn} vs {wn:?}"
            );
            prop_assert!(
                wx.is_some_and(|w| w == mx || (w.is_nan() && mx.is_nan())),
                "max {mx} vs {wx:?}"
            );
        } else {
            let r = ctx.argmax(&dx);
            prop_assert!(
                matches!(r, Err(Error::EmptyInput { op: "argmax" })),
                "{r:?}"
            );
            let r = ctx.min(&dx);
            prop_assert!(matches!(r, Err(Error::EmptyInput { op: "min" })), "{r:?}");
        }
        Ok(())
    })
}

/// Whether `got` is within `rel` of the f64 `want` plus one ulp of `T` there (NaN matches
/// NaN).
fn close<T: Numeric>(want: f64, got: T, rel: f64) -> bool {
    let g = got.to_f64();
    if want.is_nan() || g.is_nan() {
        return want.is_nan() && g.is_nan();
    }
    (g - want).abs() <= rel + tolerance::ulp(T::DTYPE, want)
}

/// Row-wise softmax, log-softmax (both also in place), cross-entropy and its gradient, and
/// the means, against an f64 computation of the same definitions. The device computes
/// `exp(x - max)` in the compute type, so each result is within a few of its epsilons,
/// scaled by how far below its row's maximum the element lies.
fn softmax_vs_f64<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    if common::lacks_math(ctx, T::DTYPE) {
        let x = ctx.alloc_upload(&[T::from_f64(1.0); 4])?;
        let mut out = ctx.alloc_zeros::<T>(4)?;
        common::assert_unsupported(ctx.softmax(Shape::new(2, 2), &x, &mut out), "softmax");
        return Ok(());
    }
    let eps = compute_eps::<T>();
    let case = (matrix_case::<T>(), vec(any::<u16>(), 6));
    check(16, case, |((shape, x, _, _, _), picks)| {
        let (rows, cols) = (shape.rows, shape.cols);
        let xf: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
        // Labels in range, and one out of range (its row's loss and gradient are NaN).
        let labels: Vec<u32> = (0..rows)
            .map(|r| {
                let p = u32::from(picks[r % picks.len()]);
                if r == 1 {
                    cols as u32 + p % 3
                } else {
                    p % cols.max(1) as u32
                }
            })
            .collect();
        let dx = ctx.alloc_upload(&x).tc()?;
        let dl = ctx.alloc_upload(&labels).tc()?;
        let n = x.len();
        let (mut p, mut lp, mut ip) = (
            ctx.alloc::<T>(n).tc()?,
            ctx.alloc::<T>(n).tc()?,
            ctx.alloc_upload(&x).tc()?,
        );
        let mut ilp = ctx.alloc_upload(&x).tc()?;
        let (mut loss, mut grad, mut loss2) = (
            ctx.alloc::<T>(rows).tc()?,
            ctx.alloc::<T>(n).tc()?,
            ctx.alloc::<T>(rows).tc()?,
        );
        let mut mean = ctx.alloc::<T>(rows).tc()?;
        ctx.softmax(shape, &dx, &mut p).tc()?;
        ctx.log_softmax(shape, &dx, &mut lp).tc()?;
        ctx.softmax_inplace(shape, &mut ip).tc()?;
        ctx.log_softmax_inplace(shape, &mut ilp).tc()?;
        let ce = ctx.cross_entropy_grad(shape, &dx, &dl, &mut loss, &mut grad);
        if rows > 0 && cols == 0 {
            prop_assert!(matches!(ce, Err(Error::EmptyInput { .. })), "{ce:?}");
            return Ok(());
        }
        ce.tc()?;
        ctx.cross_entropy(shape, &dx, &dl, &mut loss2).tc()?;
        ctx.row_mean(shape, &dx, &mut mean).tc()?;
        let (p, lp, ip, ilp) = (
            p.download().tc()?,
            lp.download().tc()?,
            ip.download().tc()?,
            ilp.download().tc()?,
        );
        let (loss, grad, loss2, mean) = (
            loss.download().tc()?,
            grad.download().tc()?,
            loss2.download().tc()?,
            mean.download().tc()?,
        );
        for r in 0..rows {
            let row = &xf[r * cols..(r + 1) * cols];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            let l = labels[r] as usize;
            for (j, &xj) in row.iter().enumerate() {
                let i = r * cols + j;
                let d = xj - m;
                let (want_p, want_lp) = (d.exp() / s, d - s.ln());
                let lp_rel = 8.0 * eps * (d.abs() + s.ln().abs() + 1.0);
                // `x - max` rounds to within eps/2 of |d|, which exp turns into a
                // relative error of |d| eps/2: far down a row that outweighs exp's own.
                let p_rel = eps * (d.abs() + 8.0) * want_p;
                let flushed = flushes(ctx) && p[i].to_f64() == 0.0 && want_p < min_normal::<T>();
                prop_assert!(
                    close(want_p, p[i], p_rel) || flushed,
                    "softmax [{r}][{j}]: {:?} vs {want_p}",
                    p[i]
                );
                prop_assert!(
                    close(want_lp, lp[i], lp_rel),
                    "log_softmax [{r}][{j}]: {:?} vs {want_lp}",
                    lp[i]
                );
                prop_assert!(
                    p[i].same(ip[i]) && lp[i].same(ilp[i]),
                    "in place differs at [{r}][{j}]"
                );
                let want_g = if l < cols {
                    want_p - f64::from(u8::from(j == l))
                } else {
                    f64::NAN
                };
                prop_assert!(
                    close(want_g, grad[i], 8.0 * eps),
                    "grad [{r}][{j}]: {:?} vs {want_g}",
                    grad[i]
                );
            }
            let want_loss = if l < cols {
                s.ln() - (row[l] - m)
            } else {
                f64::NAN
            };
            let rel = 8.0 * eps * (want_loss.abs() + 1.0);
            prop_assert!(
                close(want_loss, loss[r], rel),
                "loss [{r}]: {:?} vs {want_loss}",
                loss[r]
            );
            prop_assert!(
                loss[r].same(loss2[r]),
                "the loss without the gradient differs at {r}"
            );
            let want_mean = T::from_f64(row.iter().sum::<f64>() / cols as f64).to_f64();
            let scale: f64 = row.iter().map(|v| v.abs()).sum::<f64>() / cols as f64;
            prop_assert!(
                tolerance::sums_agree(T::DTYPE, want_mean, mean[r].to_f64(), cols, scale),
                "row_mean [{r}]: {:?} vs {want_mean}",
                mean[r]
            );
        }
        if n > 0 {
            let want = T::from_f64(xf.iter().sum::<f64>() / n as f64).to_f64();
            let scale: f64 = xf.iter().map(|v| v.abs()).sum::<f64>() / n as f64;
            let got = ctx.mean(&dx).tc()?.to_f64();
            prop_assert!(
                tolerance::sums_agree(T::DTYPE, want, got, n, scale),
                "mean: {got} vs {want}"
            );
        } else {
            let r = ctx.mean(&dx);
            prop_assert!(matches!(r, Err(Error::EmptyInput { op: "mean" })), "{r:?}");
        }
        Ok(())
    })
}

/// Casts `x` to `U` on `ctx`: `Err` names the first element unlike `Numeric::from_wide`'s.
fn to<T: Numeric, U: Numeric + std::fmt::Debug>(
    ctx: &Context,
    x: &[T],
) -> gpukit::Result<Result<(), String>> {
    let dx = ctx.alloc_upload(x)?;
    let mut out = ctx.alloc::<U>(x.len())?;
    ctx.cast(&dx, &mut out)?;
    let got = out.download()?;
    for (i, (&v, &g)) in x.iter().zip(&got).enumerate() {
        let want = U::from_wide(v.to_wide());
        let same = want == g || (want.to_f64().is_nan() && g.to_f64().is_nan());
        if !same {
            return Ok(Err(format!(
                "cast {} -> {} [{i}] of {v:?}: {g:?}, want {want:?}",
                T::DTYPE,
                U::DTYPE
            )));
        }
    }
    Ok(Ok(()))
}

/// Casts from `T` to every element type, against `Numeric::from_wide` (Rust's `as` but for
/// f16 and bf16, which round once, correctly: gpukit-core's unit test
/// `half_casts_round_once_correctly` checks that against exact midpoints).
fn casts_from<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    check(8, length(300).prop_flat_map(|n| vec(T::edgy(), n)), |x| {
        for r in [
            to::<T, f32>(ctx, &x).tc()?,
            to::<T, f64>(ctx, &x).tc()?,
            to::<T, f16>(ctx, &x).tc()?,
            to::<T, bf16>(ctx, &x).tc()?,
            to::<T, i8>(ctx, &x).tc()?,
            to::<T, u8>(ctx, &x).tc()?,
            to::<T, i32>(ctx, &x).tc()?,
            to::<T, u32>(ctx, &x).tc()?,
            to::<T, i64>(ctx, &x).tc()?,
            to::<T, u64>(ctx, &x).tc()?,
        ] {
            r.map_err(TestCaseError::fail)?;
        }
        Ok(())
    })
}

/// Casts into f16 and bf16 from values just past a rounding tie of the 16-bit type, which
/// come out wrong when a backend rounds twice (through f64 or f32, or dropping low bits):
/// each must round once, as `Numeric::from_wide` does. (The first one failed on Vulkan.)
fn casts_round_once(ctx: &Context) -> gpukit::Result<()> {
    let ints: [i64; 6] = [
        -7_728_177_275_992_759_802,
        (1 << 40) + (1 << 32) + 1,
        (1 << 60) + (1 << 53) + (1 << 52) - 1,
        -((1 << 40) + (1 << 32) + 1),
        65519,
        i64::MIN,
    ];
    let unsigned: [u64; 3] = [
        (1 << 63) + (1 << 55) + 1,
        (1 << 40) + (1 << 32) + 1,
        u64::MAX,
    ];
    let words: [i32; 3] = [
        (1 << 30) + (1 << 22) + 1,
        -((1 << 30) + (1 << 22) + 1),
        i32::MIN,
    ];
    let tie = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
    let floats = [
        tie,
        -tie,
        1.0 + 2f64.powi(-11) + 2f64.powi(-30),
        65520.0 - 2f64.powi(-30),
    ];
    for r in [
        to::<i64, f16>(ctx, &ints)?,
        to::<i64, bf16>(ctx, &ints)?,
        to::<u64, f16>(ctx, &unsigned)?,
        to::<u64, bf16>(ctx, &unsigned)?,
        to::<i32, bf16>(ctx, &words)?,
        to::<u32, bf16>(ctx, &words.map(|w| w as u32))?,
        to::<f64, f16>(ctx, &floats)?,
        to::<f64, bf16>(ctx, &floats)?,
    ] {
        if let Err(e) = r {
            panic!("{e}");
        }
    }
    Ok(())
}

/// A batched gemm (shared `A`, padded `C`) equals its products done one by one, and leaves
/// the padding alone.
fn batched_gemm_vs_sequential<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let case = (
        1..5usize,
        1..9usize,
        1..9usize,
        0..9usize,
        any::<bool>(),
        any::<bool>(),
    );
    check(16, case, |(batch, m, n, k, shared_a, ta)| {
        let (sa, sb, sc) = (if shared_a { 0 } else { m * k }, k * n, m * n + 3);
        let g = Gemm::new(m, n, k)
            .transpose(ta, false)
            .strided(batch, sa, sb, sc);
        let span = |size: usize, stride: usize| (batch - 1) * stride + size;
        let vals = |len: usize, seed: u32| -> Vec<T> {
            data(seed, len)
                .iter()
                .map(|&v| T::from_f64(f64::from(v)))
                .collect()
        };
        let (a, b) = (vals(span(m * k, sa), 1), vals(span(k * n, sb), 2));
        let c0 = vals(span(m * n, sc), 3);
        let (da, db) = (ctx.alloc_upload(&a).tc()?, ctx.alloc_upload(&b).tc()?);
        let mut dc = ctx.alloc_upload(&c0).tc()?;
        ctx.gemm(g, &da, &db, &mut dc).tc()?;
        let got = dc.download().tc()?;
        for i in 0..batch {
            let one = Gemm::new(m, n, k).transpose(ta, false);
            let ai = ctx.alloc_upload(&a[i * sa..i * sa + m * k]).tc()?;
            let bi = ctx.alloc_upload(&b[i * sb..i * sb + k * n]).tc()?;
            let mut ci = ctx.alloc_upload(&c0[i * sc..i * sc + m * n]).tc()?;
            ctx.gemm(one, &ai, &bi, &mut ci).tc()?;
            let want = ci.download().tc()?;
            for (j, w) in want.iter().enumerate() {
                prop_assert!(
                    w.same(got[i * sc + j]),
                    "batch {i} [{j}]: {:?} vs {w:?}",
                    got[i * sc + j]
                );
            }
            if i + 1 < batch {
                for j in m * n..sc {
                    prop_assert!(
                        got[i * sc + j].same(c0[i * sc + j]),
                        "padding of batch {i} changed"
                    );
                }
            }
        }
        Ok(())
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
}
