//! Every built-in op against a float64 reference (floats, the 16-bit ones included) or exact
//! wrapping arithmetic (integers), on random sizes and values.

use super::*;

use gpukit::core::half::{bf16, f16};
use gpukit::cpu::reference;

/// Input ranges and element-wise tolerances of one float type against the f64 reference.
/// Reductions and gemm use the derived bounds of `tolerance.rs`.
trait FloatRef: Float {
    /// The magnitude of arithmetic inputs: small enough that the 16-bit types' sums,
    /// products and quotients stay finite.
    const SPAN: f64;
    /// The magnitude of math-function inputs (f16's `exp` overflows past 11).
    const MATH_SPAN: f64;
    /// Element-wise arithmetic, relative to the size of the terms: axpy rounds twice in
    /// the compute type (the 16-bit types compute in f32), then the 16-bit types round once
    /// more to their own precision.
    const ARITH: f64;
    /// Math functions, relative to the result: the f32 or f64 function's error, plus the
    /// rounding to 16 bits.
    const MATH: f64;
    /// Absolute slack for results near the bottom of the type's range (subnormals).
    const TINY: f64;
}

impl FloatRef for f32 {
    const SPAN: f64 = 1e3;
    const MATH_SPAN: f64 = 20.0;
    const ARITH: f64 = f32::EPSILON as f64;
    const MATH: f64 = 1e-5;
    const TINY: f64 = 1e-37;
}

impl FloatRef for f64 {
    const SPAN: f64 = 1e3;
    const MATH_SPAN: f64 = 20.0;
    const ARITH: f64 = f64::EPSILON;
    const MATH: f64 = 1e-13;
    const TINY: f64 = 1e-300;
}

/// `2^-e`.
const fn pow2_neg(e: i32) -> f64 {
    1.0 / (1u64 << e) as f64
}

impl FloatRef for f16 {
    const SPAN: f64 = 16.0;
    const MATH_SPAN: f64 = 10.0;
    const ARITH: f64 = pow2_neg(11) + pow2_neg(22);
    const MATH: f64 = pow2_neg(11) + 1e-5;
    // Half the smallest subnormal is the most a subnormal result can be off.
    const TINY: f64 = pow2_neg(24);
}

impl FloatRef for bf16 {
    const SPAN: f64 = 1e3;
    const MATH_SPAN: f64 = 20.0;
    const ARITH: f64 = pow2_neg(8) + pow2_neg(22);
    const MATH: f64 = pow2_neg(8) + 1e-5;
    const TINY: f64 = 1e-37;
}

/// Whether `got` is within `rel * scale` of `want` (NaN matches NaN, infinities match
/// exactly).
fn near(got: f64, want: f64, rel: f64, scale: f64, tiny: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= rel * scale + tiny
}

/// A value for arithmetic: up to `span`, small, zero and small integers (so that exact
/// cancellations happen).
fn value(span: f64) -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -span..span,
        2 => -1.0..1.0f64,
        1 => Just(0.0),
        2 => (-20i32..20).prop_map(f64::from),
    ]
}

/// A denominator bounded away from zero.
fn denominator() -> impl Strategy<Value = f64> {
    prop_oneof![-1e3..-0.1f64, 0.1..1e3f64]
}

#[derive(Debug, Clone)]
struct FloatCase {
    a: Vec<f64>,
    b: Vec<f64>,
    den: Vec<f64>,
    /// Inputs of the math functions, in -20..20.
    m: Vec<f64>,
    alpha: f64,
    fill: f64,
}

fn float_case<T: FloatRef>() -> impl Strategy<Value = FloatCase> {
    length(2000)
        .prop_flat_map(|n| {
            (
                vec(value(T::SPAN), n),
                vec(value(T::SPAN), n),
                vec(denominator(), n),
                vec(-T::MATH_SPAN..T::MATH_SPAN, n),
                prop_oneof![-4.0..4.0f64, Just(0.0), Just(1.0), Just(-1.0)],
                value(T::SPAN),
            )
        })
        .prop_map(|(a, b, den, m, alpha, fill)| FloatCase {
            a,
            b,
            den,
            m,
            alpha,
            fill,
        })
}

/// Compares an element-wise result with `want(i) = (reference, scale)`.
fn check_elementwise<T: FloatRef>(
    op: &str,
    got: &[T],
    n: usize,
    rel: f64,
    want: impl Fn(usize) -> (f64, f64),
) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), n, "{}: result length", op);
    for (i, g) in got.iter().enumerate() {
        let (w, scale) = want(i);
        prop_assert!(
            near(g.to_f64(), w, rel, scale, T::TINY),
            "{} [{}] of {}: got {:?}, want {} (scale {})",
            op,
            i,
            n,
            g,
            w,
            scale
        );
    }
    Ok(())
}

fn float_ops<T: FloatRef>(ctx: &gpukit::Context) -> gpukit::Result<()> {
    check(128, float_case::<T>(), |c| {
        let to_t = |v: &[f64]| v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>();
        let back = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
        let (a, b, den, m) = (to_t(&c.a), to_t(&c.b), to_t(&c.den), to_t(&c.m));
        // The reference works on exactly the values the device got.
        let (af, bf, df, mf) = (back(&a), back(&b), back(&den), back(&m));
        let alpha = T::from_f64(c.alpha);
        let al = alpha.to_f64();
        let fill = T::from_f64(c.fill);
        let n = a.len();

        let da = ctx.alloc_upload(&a).tc()?;
        let db = ctx.alloc_upload(&b).tc()?;
        let dd = ctx.alloc_upload(&den).tc()?;
        let dm = ctx.alloc_upload(&m).tc()?;
        let mut out = ctx.alloc::<T>(n).tc()?;

        ctx.fill(&mut out, fill).tc()?;
        let got = out.download().tc()?;
        prop_assert_eq!(got.len(), n);
        prop_assert!(got.iter().all(|&g| g == fill), "fill with {:?}", fill);

        let mut y = ctx.alloc_upload(&b).tc()?;
        ctx.axpy(alpha, &da, &mut y).tc()?;
        check_elementwise("axpy", &y.download().tc()?, n, T::ARITH, |i| {
            (al * af[i] + bf[i], (al * af[i]).abs() + bf[i].abs())
        })?;

        let mut x = ctx.alloc_upload(&a).tc()?;
        ctx.scale(alpha, &mut x).tc()?;
        check_elementwise("scale", &x.download().tc()?, n, T::ARITH, |i| {
            (al * af[i], (al * af[i]).abs())
        })?;

        ctx.add(&da, &db, &mut out).tc()?;
        check_elementwise("add", &out.download().tc()?, n, T::ARITH, |i| {
            (af[i] + bf[i], af[i].abs() + bf[i].abs())
        })?;
        ctx.sub(&da, &db, &mut out).tc()?;
        check_elementwise("sub", &out.download().tc()?, n, T::ARITH, |i| {
            (af[i] - bf[i], af[i].abs() + bf[i].abs())
        })?;
        ctx.mul(&da, &db, &mut out).tc()?;
        check_elementwise("mul", &out.download().tc()?, n, T::ARITH, |i| {
            (af[i] * bf[i], (af[i] * bf[i]).abs())
        })?;
        ctx.div(&da, &dd, &mut out).tc()?;
        check_elementwise("div", &out.download().tc()?, n, T::ARITH, |i| {
            (af[i] / df[i], (af[i] / df[i]).abs())
        })?;

        ctx.relu(&dm, &mut out).tc()?;
        check_elementwise("relu", &out.download().tc()?, n, 0.0, |i| {
            (mf[i].max(0.0), 0.0)
        })?;
        type Reference = fn(f64) -> f64;
        let math: [(&str, Reference); 3] = [
            ("sigmoid", |x| 1.0 / (1.0 + (-x).exp())),
            ("tanh", f64::tanh),
            ("exp", f64::exp),
        ];
        for (name, f) in math {
            if common::lacks_math(ctx, T::DTYPE) {
                if n > 0 {
                    common::assert_unsupported(ctx.exp(&dm, &mut out), name);
                }
                continue;
            }
            match name {
                "sigmoid" => ctx.sigmoid(&dm, &mut out),
                "tanh" => ctx.tanh(&dm, &mut out),
                _ => ctx.exp(&dm, &mut out),
            }
            .tc()?;
            check_elementwise(name, &out.download().tc()?, n, T::MATH, |i| {
                let w = f(mf[i]);
                (w, w.abs())
            })?;
        }

        // Sums against the test's f64 sum rounded once to T, as the backends define them:
        // within 1 ulp and the f64 reordering bound (tolerance.rs), which an accumulation
        // in T itself misses by far.
        let got = ctx.sum(&da).tc()?.to_f64();
        let exact: f64 = af.iter().sum();
        let want = T::from_f64(exact).to_f64();
        let scale: f64 = af.iter().map(|x| x.abs()).sum();
        prop_assert!(
            tolerance::sums_agree(T::DTYPE, want, got, n, scale),
            "sum of {}: got {}, want {} (f64 sum {}, tolerance {})",
            n,
            got,
            want,
            exact,
            tolerance::sum_tolerance(T::DTYPE, n, scale, want.abs())
        );

        let got = ctx.dot(&da, &db).tc()?.to_f64();
        let exact: f64 = af.iter().zip(&bf).map(|(x, y)| x * y).sum();
        let want = T::from_f64(exact).to_f64();
        let scale: f64 = af.iter().zip(&bf).map(|(x, y)| (x * y).abs()).sum();
        prop_assert!(
            tolerance::sums_agree(T::DTYPE, want, got, n, scale),
            "dot of {}: got {}, want {} (f64 dot {}, tolerance {})",
            n,
            got,
            want,
            exact,
            tolerance::sum_tolerance(T::DTYPE, n, scale, want.abs())
        );

        match ctx.max(&da) {
            Ok(got) => {
                prop_assert!(n > 0, "max of an empty array gave {:?}", got);
                let want = af.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                prop_assert_eq!(got.to_f64(), want, "max of {}", n);
            }
            Err(e) => prop_assert!(
                n == 0 && matches!(e, gpukit::Error::EmptyInput { .. }),
                "max of {}: {}",
                n,
                e
            ),
        }
        Ok(())
    })
}

#[derive(Debug, Clone)]
struct GemmCase {
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f64,
    beta: f64,
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
    /// With `beta == 0`, start C as NaN: it must be ignored.
    nan_c: bool,
}

fn gemm_case<T: FloatRef>() -> impl Strategy<Value = GemmCase> {
    (
        (0..=12usize, 0..=12usize, 0..=12usize),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        -2.0..2.0f64,
        prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64],
    )
        .prop_flat_map(|((m, n, k), (ta, tb, nan), alpha, beta)| {
            (
                Just((m, n, k, ta, tb, nan, alpha, beta)),
                vec(value(T::SPAN), m * k),
                vec(value(T::SPAN), k * n),
                vec(value(T::SPAN), m * n),
            )
        })
        .prop_map(
            |((m, n, k, trans_a, trans_b, nan_c, alpha, beta), a, b, c)| GemmCase {
                m,
                n,
                k,
                trans_a,
                trans_b,
                alpha,
                beta,
                a,
                b,
                c,
                nan_c,
            },
        )
}

fn gemm_vs_reference<T: FloatRef>(ctx: &gpukit::Context) -> gpukit::Result<()> {
    check(256, gemm_case::<T>(), |g| {
        let to_t = |v: &[f64]| v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>();
        let (a, b) = (to_t(&g.a), to_t(&g.b));
        let c0 = if g.nan_c && g.beta == 0.0 {
            vec![T::from_f64(f64::NAN); g.m * g.n]
        } else {
            to_t(&g.c)
        };
        let (alpha, beta) = (T::from_f64(g.alpha), T::from_f64(g.beta));

        let da = ctx.alloc_upload(&a).tc()?;
        let db = ctx.alloc_upload(&b).tc()?;
        let mut dc = ctx.alloc_upload(&c0).tc()?;
        let spec = Gemm::new(g.m, g.n, g.k)
            .transpose(g.trans_a, g.trans_b)
            .scaled(alpha, beta);
        ctx.gemm(spec, &da, &db, &mut dc).tc()?;
        let got = dc.download().tc()?;
        prop_assert_eq!(got.len(), g.m * g.n);

        let (m, n, k) = (g.m, g.n, g.k);
        // From the rounded inputs and scalars, in f64; C only where beta is not zero.
        let wants = reference::gemm(&spec, &a, &b, &c0).expect("the reference gets whole matrices");
        let scales = reference::gemm_magnitudes(&spec, &a, &b, &c0)
            .expect("the reference gets whole matrices");
        for i in 0..m {
            for j in 0..n {
                let (want, scale) = (wants[i * n + j], scales[i * n + j]);
                let got = got[i * n + j].to_f64();
                prop_assert!(
                    tolerance::gemm_agree(T::DTYPE, want, got, k, scale),
                    "{} C[{}][{}] of {}x{}x{} (trans {} {}): got {}, want {} (scale {})",
                    T::DTYPE,
                    i,
                    j,
                    m,
                    n,
                    k,
                    g.trans_a,
                    g.trans_b,
                    got,
                    want,
                    scale
                );
            }
        }
        Ok(())
    })
}

/// Integer types and their exact wrapping reference.
trait IntRef: Numeric + Ord {
    fn strategy() -> BoxedStrategy<Self>;
    fn w_add(self, o: Self) -> Self;
    fn w_sub(self, o: Self) -> Self;
    fn w_mul(self, o: Self) -> Self;
    /// Truncating division; 0 for a zero divisor; wraps for `MIN / -1`.
    fn w_div(self, o: Self) -> Self;
}

macro_rules! int_ref {
    ($($t:ty => $s:expr),*) => {$(
        impl IntRef for $t {
            fn strategy() -> BoxedStrategy<Self> {
                $s.boxed()
            }
            fn w_add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn w_sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn w_mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn w_div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
        }
    )*};
}

int_ref!(
    i32 => prop_oneof![
        4 => any::<i32>(),
        4 => -4i32..4,
        1 => Just(i32::MIN),
        1 => Just(i32::MAX),
        1 => Just(-1i32),
    ],
    u8 => prop_oneof![4 => any::<u8>(), 2 => 0u8..3, 1 => Just(u8::MAX)]
);

#[derive(Debug, Clone)]
struct IntCase<T> {
    a: Vec<T>,
    b: Vec<T>,
    alpha: T,
    fill: T,
}

fn int_ops<T: IntRef>(ctx: &gpukit::Context) -> gpukit::Result<()> {
    let strategy = length(2000)
        .prop_flat_map(|n| {
            (
                vec(T::strategy(), n),
                vec(T::strategy(), n),
                T::strategy(),
                T::strategy(),
            )
        })
        .prop_map(|(a, b, alpha, fill)| IntCase { a, b, alpha, fill });
    check(128, strategy, |c| {
        let (a, b, n) = (&c.a, &c.b, c.a.len());
        let da = ctx.alloc_upload(a).tc()?;
        let db = ctx.alloc_upload(b).tc()?;
        let mut out = ctx.alloc::<T>(n).tc()?;
        let zip = |f: fn(T, T) -> T| a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect::<Vec<T>>();

        ctx.fill(&mut out, c.fill).tc()?;
        prop_assert_eq!(out.download().tc()?, vec![c.fill; n], "fill");

        let mut y = ctx.alloc_upload(b).tc()?;
        ctx.axpy(c.alpha, &da, &mut y).tc()?;
        let want: Vec<T> = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| c.alpha.w_mul(x).w_add(y))
            .collect();
        prop_assert_eq!(y.download().tc()?, want, "axpy");

        let mut x = ctx.alloc_upload(a).tc()?;
        ctx.scale(c.alpha, &mut x).tc()?;
        let want: Vec<T> = a.iter().map(|&x| c.alpha.w_mul(x)).collect();
        prop_assert_eq!(x.download().tc()?, want, "scale");

        ctx.add(&da, &db, &mut out).tc()?;
        prop_assert_eq!(out.download().tc()?, zip(T::w_add), "add");
        ctx.sub(&da, &db, &mut out).tc()?;
        prop_assert_eq!(out.download().tc()?, zip(T::w_sub), "sub");
        ctx.mul(&da, &db, &mut out).tc()?;
        prop_assert_eq!(out.download().tc()?, zip(T::w_mul), "mul");
        ctx.div(&da, &db, &mut out).tc()?;
        prop_assert_eq!(out.download().tc()?, zip(T::w_div), "div");

        let want = a.iter().fold(T::ZERO, |s, &x| s.w_add(x));
        prop_assert_eq!(ctx.sum(&da).tc()?, want, "sum");
        let want = a
            .iter()
            .zip(b)
            .fold(T::ZERO, |s, (&x, &y)| s.w_add(x.w_mul(y)));
        prop_assert_eq!(ctx.dot(&da, &db).tc()?, want, "dot");
        match (ctx.max(&da), a.iter().max()) {
            (Ok(got), Some(&want)) => prop_assert_eq!(got, want, "max"),
            (Err(gpukit::Error::EmptyInput { .. }), None) => {}
            (got, want) => prop_assert!(false, "max: got {:?}, want {:?}", got, want),
        }
        Ok(())
    })
}

backend_tests! {
    fn f32_ops_match_f64_reference(ctx) {
        float_ops::<f32>(ctx)
    }

    fn f64_ops_match_f64_reference(ctx) {
        float_ops::<f64>(ctx)
    }

    fn f32_gemm_matches_f64_reference(ctx) {
        gemm_vs_reference::<f32>(ctx)
    }

    fn f64_gemm_matches_f64_reference(ctx) {
        gemm_vs_reference::<f64>(ctx)
    }

    fn f16_ops_match_f64_reference(ctx) {
        float_ops::<f16>(ctx)
    }

    fn bf16_ops_match_f64_reference(ctx) {
        float_ops::<bf16>(ctx)
    }

    fn f16_gemm_matches_f64_reference(ctx) {
        gemm_vs_reference::<f16>(ctx)
    }

    fn bf16_gemm_matches_f64_reference(ctx) {
        gemm_vs_reference::<bf16>(ctx)
    }

    fn i32_ops_wrap_exactly(ctx) {
        int_ops::<i32>(ctx)
    }

    fn u8_ops_wrap_exactly(ctx) {
        int_ops::<u8>(ctx)
    }
}
