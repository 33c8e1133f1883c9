//! Property tests, one body per property, run on every backend through `backend_tests!`:
//!
//! - every built-in op against a float64 reference (floats) or exact wrapping arithmetic
//!   (integers), on random sizes (empty included) and random values;
//! - random programs of fills, ops, copies, asynchronous transfers and events over one to
//!   four streams, run with no synchronisation beyond what the program itself says, against
//!   the same program interpreted sequentially on the host: the automatic cross-stream
//!   ordering at work;
//! - the laws of views: nested slicing against host slicing, out-of-range requests, writes
//!   through mutable views and `split_at_mut`.
//!
//! Each body drives proptest's [`TestRunner`] itself (rather than the `proptest!` macro) so
//! that the same body serves every backend. A failure reports the shrunk input.

mod common;

use std::ops::Bound;

use gpu::{Float, Gemm, GpuArray, Numeric};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ---------------------------------------------------------------------------------------
// Harness glue
// ---------------------------------------------------------------------------------------

/// Runs `test` on `cases` inputs drawn from `strategy`; a failure becomes a `gpu::Error`
/// whose message holds the shrunk input.
fn check<S>(
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> gpu::Result<()>
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases,
        // Failures print their shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&strategy, test)
        .map_err(|e| gpu::Error::Backend {
            backend: "test",
            call: "proptest",
            message: e.to_string(),
        })
}

/// Turns a library error into a test-case failure.
trait OrFail<T> {
    fn tc(self) -> Result<T, TestCaseError>;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn tc(self) -> Result<T, TestCaseError> {
        self.map_err(|e| TestCaseError::fail(e.to_string()))
    }
}

/// An array length: empty and tiny lengths are drawn often, the rest up to `max`.
fn length(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 1 => 1..=8usize, 8 => 0..=max]
}

/// Deterministic pseudo-random values in -10..10 with a granularity of 1/64 (exact in f32).
fn data(seed: u32, len: usize) -> Vec<f32> {
    let mut x = u64::from(seed) ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % 1281) as f32 - 640.0) / 64.0
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Ops against references
// ---------------------------------------------------------------------------------------

/// Tolerances of one float type against the f64 reference.
trait FloatRef: Float {
    /// Element-wise arithmetic, relative to the size of the terms.
    const ARITH: f64;
    /// Math functions, relative to the result.
    const MATH: f64;
    /// Reductions and gemm, times sqrt(n), relative to the sum of the terms' magnitudes.
    const REDUCE: f64;
    /// Absolute slack for results near the bottom of the type's range.
    const TINY: f64;
}

impl FloatRef for f32 {
    const ARITH: f64 = 1e-6;
    const MATH: f64 = 1e-5;
    const REDUCE: f64 = 1e-5;
    const TINY: f64 = 1e-37;
}

impl FloatRef for f64 {
    const ARITH: f64 = 1e-14;
    const MATH: f64 = 1e-13;
    const REDUCE: f64 = 1e-12;
    const TINY: f64 = 1e-300;
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

/// A value for arithmetic: wide, small, zero and small integers (so that exact
/// cancellations happen).
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -1e3..1e3f64,
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

fn float_case() -> impl Strategy<Value = FloatCase> {
    length(2000)
        .prop_flat_map(|n| {
            (
                vec(value(), n),
                vec(value(), n),
                vec(denominator(), n),
                vec(-20.0..20.0f64, n),
                prop_oneof![-4.0..4.0f64, Just(0.0), Just(1.0), Just(-1.0)],
                value(),
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

fn float_ops<T: FloatRef>(ctx: &gpu::Context) -> gpu::Result<()> {
    check(128, float_case(), |c| {
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

        let red = T::REDUCE * (n.max(1) as f64).sqrt();
        let got = ctx.sum(&da).tc()?.to_f64();
        let want: f64 = af.iter().sum();
        let scale: f64 = af.iter().map(|x| x.abs()).sum();
        prop_assert!(
            near(got, want, red, scale, T::TINY),
            "sum of {}: got {}, want {}",
            n,
            got,
            want
        );

        let got = ctx.dot(&da, &db).tc()?.to_f64();
        let want: f64 = af.iter().zip(&bf).map(|(x, y)| x * y).sum();
        let scale: f64 = af.iter().zip(&bf).map(|(x, y)| (x * y).abs()).sum();
        prop_assert!(
            near(got, want, red, scale, T::TINY),
            "dot of {}: got {}, want {}",
            n,
            got,
            want
        );

        match ctx.max(&da) {
            Ok(got) => {
                prop_assert!(n > 0, "max of an empty array gave {:?}", got);
                let want = af.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                prop_assert_eq!(got.to_f64(), want, "max of {}", n);
            }
            Err(e) => prop_assert!(
                n == 0 && matches!(e, gpu::Error::EmptyInput { .. }),
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

fn gemm_case() -> impl Strategy<Value = GemmCase> {
    (
        (0..=12usize, 0..=12usize, 0..=12usize),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        -2.0..2.0f64,
        prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64],
    )
        .prop_flat_map(|((m, n, k), (ta, tb, nan), alpha, beta)| {
            (
                Just((m, n, k, ta, tb, nan, alpha, beta)),
                vec(value(), m * k),
                vec(value(), k * n),
                vec(value(), m * n),
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

fn gemm_vs_reference<T: FloatRef>(ctx: &gpu::Context) -> gpu::Result<()> {
    check(256, gemm_case(), |g| {
        let to_t = |v: &[f64]| v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>();
        let (a, b) = (to_t(&g.a), to_t(&g.b));
        let c0 = if g.nan_c && g.beta == 0.0 {
            vec![T::from_f64(f64::NAN); g.m * g.n]
        } else {
            to_t(&g.c)
        };
        let (alpha, beta) = (T::from_f64(g.alpha), T::from_f64(g.beta));
        let (al, be) = (alpha.to_f64(), beta.to_f64());

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
        let at = |i: usize, l: usize| {
            if g.trans_a {
                a[l * m + i]
            } else {
                a[i * k + l]
            }
            .to_f64()
        };
        let bt = |l: usize, j: usize| {
            if g.trans_b {
                b[j * k + l]
            } else {
                b[l * n + j]
            }
            .to_f64()
        };
        let rel = T::REDUCE * ((k + 1) as f64).sqrt();
        for i in 0..m {
            for j in 0..n {
                let (mut acc, mut mag) = (0.0f64, 0.0f64);
                for l in 0..k {
                    acc += at(i, l) * bt(l, j);
                    mag += (at(i, l) * bt(l, j)).abs();
                }
                let cv = if be == 0.0 {
                    0.0
                } else {
                    be * c0[i * n + j].to_f64()
                };
                let want = al * acc + cv;
                let scale = al.abs() * mag + cv.abs();
                let got = got[i * n + j].to_f64();
                prop_assert!(
                    near(got, want, rel, scale, T::TINY),
                    "C[{}][{}] of {}x{}x{}: got {}, want {} (scale {})",
                    i,
                    j,
                    m,
                    n,
                    k,
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

fn int_ops<T: IntRef>(ctx: &gpu::Context) -> gpu::Result<()> {
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
            (Err(gpu::Error::EmptyInput { .. }), None) => {}
            (got, want) => prop_assert!(false, "max: got {:?}, want {:?}", got, want),
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Random multi-stream programs against a sequential interpreter
// ---------------------------------------------------------------------------------------

/// The size of the pool of arrays a program works on.
const ARRAYS: usize = 4;

/// One instruction; `s` is the stream it is queued on. Every instruction that writes one
/// array while reading another names two different arrays.
#[derive(Debug, Clone)]
enum Instr {
    Fill {
        s: usize,
        dst: usize,
        v: f32,
    },
    Scale {
        s: usize,
        alpha: f32,
        x: usize,
    },
    Axpy {
        s: usize,
        alpha: f32,
        x: usize,
        y: usize,
    },
    Add {
        s: usize,
        a: usize,
        b: usize,
        out: usize,
    },
    Mul {
        s: usize,
        a: usize,
        b: usize,
        out: usize,
    },
    Copy {
        s: usize,
        src: usize,
        dst: usize,
    },
    /// Copies `src[start..end]` into `dst[start..end]` through views.
    CopyRange {
        s: usize,
        src: usize,
        dst: usize,
        start: usize,
        end: usize,
    },
    /// An asynchronous upload of `data(seed)` that the program waits for only at the end.
    Upload {
        s: usize,
        dst: usize,
        seed: u32,
    },
    /// An asynchronous download, waited for only at the end: it must see the array as it
    /// was at this point of the program.
    Download {
        s: usize,
        src: usize,
    },
    /// `to` waits for an event recorded on `from`.
    Event {
        from: usize,
        to: usize,
    },
    /// A kernel that only takes time, so that the streams' work interleaves differently.
    Delay {
        s: usize,
        us: u32,
    },
}

#[derive(Debug, Clone)]
struct Program {
    streams: usize,
    len: usize,
    /// Stream 0 is the context's default stream (else a created one).
    default_first: bool,
    /// Run on a fresh context whose arrays are uploaded before any second stream exists.
    fresh: bool,
    seed: u32,
    instrs: Vec<Instr>,
}

fn instr(streams: usize, len: usize) -> impl Strategy<Value = Instr> {
    let s = 0..streams;
    let arr = 0..ARRAYS;
    // An offset that makes a second index differ from the first: (i + o) % ARRAYS.
    let off = 1..ARRAYS;
    let alpha = || prop_oneof![-2.0f32..2.0, Just(1.0f32), Just(-1.0f32), Just(0.5f32)];
    let three = |s: std::ops::Range<usize>| {
        (s, 0..ARRAYS, 0..ARRAYS - 1, 0..ARRAYS - 1).prop_map(|(s, out, i, j)| {
            // `a` and `b` (possibly equal) are both different from `out`.
            (s, (out + 1 + i) % ARRAYS, (out + 1 + j) % ARRAYS, out)
        })
    };
    prop_oneof![
        2 => (s.clone(), arr.clone(), -4.0f32..4.0)
            .prop_map(|(s, dst, v)| Instr::Fill { s, dst, v }),
        2 => (s.clone(), alpha(), arr.clone()).prop_map(|(s, alpha, x)| Instr::Scale { s, alpha, x }),
        3 => (s.clone(), alpha(), arr.clone(), off.clone())
            .prop_map(|(s, alpha, x, o)| Instr::Axpy { s, alpha, x, y: (x + o) % ARRAYS }),
        3 => three(s.clone()).prop_map(|(s, a, b, out)| Instr::Add { s, a, b, out }),
        1 => three(s.clone()).prop_map(|(s, a, b, out)| Instr::Mul { s, a, b, out }),
        3 => (s.clone(), arr.clone(), off.clone())
            .prop_map(|(s, src, o)| Instr::Copy { s, src, dst: (src + o) % ARRAYS }),
        2 => (s.clone(), arr.clone(), off, 0..=len, 0..=len).prop_map(|(s, src, o, p, q)| {
            Instr::CopyRange { s, src, dst: (src + o) % ARRAYS, start: p.min(q), end: p.max(q) }
        }),
        1 => (s.clone(), arr.clone(), any::<u32>())
            .prop_map(|(s, dst, seed)| Instr::Upload { s, dst, seed }),
        2 => (s.clone(), arr).prop_map(|(s, src)| Instr::Download { s, src }),
        2 => (s.clone(), s.clone()).prop_map(|(from, to)| Instr::Event { from, to }),
        2 => (s, 0..1500u32).prop_map(|(s, us)| Instr::Delay { s, us }),
    ]
}

fn program() -> impl Strategy<Value = Program> {
    (
        1..=4usize,
        length(3000),
        any::<bool>(),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_flat_map(|(streams, len, default_first, fresh, seed)| {
            (
                Just((streams, len, default_first, fresh, seed)),
                vec(instr(streams, len), 1..=30),
            )
        })
        .prop_map(
            |((streams, len, default_first, fresh, seed), instrs)| Program {
                streams,
                len,
                default_first,
                fresh,
                seed,
                instrs,
            },
        )
}

/// The arrays after the program and every `Download`'s snapshot, in program order.
type Outcome = (Vec<Vec<f32>>, Vec<Vec<f32>>);

fn initial(p: &Program) -> Vec<Vec<f32>> {
    (0..ARRAYS as u32)
        .map(|i| data(p.seed.wrapping_add(i), p.len))
        .collect()
}

/// The program run one instruction after the other on the host, in plain f32 arithmetic
/// (`alpha * x + y` rounds twice, like the built-in axpy).
fn interpret(p: &Program) -> Outcome {
    let mut arrs = initial(p);
    let mut snaps = Vec::new();
    for ins in &p.instrs {
        match *ins {
            Instr::Fill { dst, v, .. } => arrs[dst].fill(v),
            Instr::Scale { alpha, x, .. } => arrs[x].iter_mut().for_each(|v| *v *= alpha),
            Instr::Axpy { alpha, x, y, .. } => {
                let xs = arrs[x].clone();
                for (y, x) in arrs[y].iter_mut().zip(xs) {
                    // `alpha * x` rounded, then added: no fused multiply-add.
                    *y += alpha * x;
                }
            }
            Instr::Add { a, b, out, .. } => {
                arrs[out] = (0..p.len).map(|i| arrs[a][i] + arrs[b][i]).collect()
            }
            Instr::Mul { a, b, out, .. } => {
                arrs[out] = (0..p.len).map(|i| arrs[a][i] * arrs[b][i]).collect()
            }
            Instr::Copy { src, dst, .. } => arrs[dst] = arrs[src].clone(),
            Instr::CopyRange {
                src,
                dst,
                start,
                end,
                ..
            } => {
                let part = arrs[src][start..end].to_vec();
                arrs[dst][start..end].copy_from_slice(&part);
            }
            Instr::Upload { dst, seed, .. } => arrs[dst] = data(seed, p.len),
            Instr::Download { src, .. } => snaps.push(arrs[src].clone()),
            Instr::Event { .. } | Instr::Delay { .. } => {}
        }
    }
    (arrs, snaps)
}

/// The arrays other than `dst`, shared, beside `dst` itself, mutable: a `get_many_mut`
/// for one writer and any number of readers, built on `split_at_mut`.
struct Others<'a, T> {
    below: &'a [T],
    above: &'a [T],
    dst: usize,
}

impl<'a, T> Others<'a, T> {
    fn get(&self, i: usize) -> &'a T {
        assert_ne!(i, self.dst, "an instruction read the array it writes");
        if i < self.dst {
            &self.below[i]
        } else {
            &self.above[i - self.dst - 1]
        }
    }
}

fn split_dst<T>(arrs: &mut [T], dst: usize) -> (Others<'_, T>, &mut T) {
    let (below, rest) = arrs.split_at_mut(dst);
    let (d, above) = rest.split_first_mut().expect("dst is inside the pool");
    (Others { below, above, dst }, d)
}

const DELAY_SRC: &str = r#"
extern "C" __global__ void props_delay(unsigned int us) {
    long long start = clock64();
    while (clock64() - start < (long long)us * 1000) { }
}"#;

/// A one-thread kernel that spends about `us` microseconds.
fn delay_kernel() -> gpu::KernelSpec<(u32,)> {
    gpu::KernelSpec::cuda(DELAY_SRC, "props_delay")
        .cpu(|_, (us,)| std::thread::sleep(std::time::Duration::from_micros(u64::from(*us))))
}

/// The program run on `ctx`'s streams, with no synchronisation but what it says; the
/// final downloads rely on the automatic ordering alone.
fn execute(ctx: &gpu::Context, p: &Program) -> Result<Outcome, TestCaseError> {
    let delay = if p.fresh || p.instrs.iter().any(|i| matches!(i, Instr::Delay { .. })) {
        Some(ctx.kernel(delay_kernel()).tc()?)
    } else {
        None
    };
    let mut uploads = Vec::new();
    let mut arrs: Vec<GpuArray<f32>> = Vec::with_capacity(ARRAYS);
    if let (true, Some(k)) = (p.fresh, &delay) {
        // A single-stream context records no ordering events. Leave its default stream
        // busy with the arrays' initial contents when the other streams are created: their
        // first uses of the arrays must still wait for that work. Odd arrays get theirs
        // from an op (`2 * (v / 2)`, exact), even ones from an asynchronous upload.
        let init = initial(p);
        let halves: Vec<GpuArray<f32>> = init
            .iter()
            .map(|v| ctx.alloc_upload(&v.iter().map(|x| x / 2.0).collect::<Vec<f32>>()))
            .collect::<gpu::Result<_>>()
            .tc()?;
        ctx.launch(k, gpu::LaunchConfig::linear(1, 1), (2000u32,))
            .tc()?;
        for (i, (v, mut half)) in init.into_iter().zip(halves).enumerate() {
            if i % 2 == 1 {
                ctx.scale(2.0f32, &mut half).tc()?;
            } else {
                uploads.push(ctx.upload(v, &mut half).tc()?);
            }
            arrs.push(half);
        }
    } else {
        for v in initial(p) {
            arrs.push(ctx.alloc_upload(&v).tc()?);
        }
    }
    let mut streams = Vec::with_capacity(p.streams);
    for k in 0..p.streams {
        streams.push(if k == 0 && p.default_first {
            gpu::Stream::clone(ctx)
        } else {
            ctx.create_stream().tc()?
        });
    }
    let mut downloads = Vec::new();
    for ins in &p.instrs {
        match *ins {
            Instr::Fill { s, dst, v } => streams[s].fill(&mut arrs[dst], v).tc()?,
            Instr::Scale { s, alpha, x } => streams[s].scale(alpha, &mut arrs[x]).tc()?,
            Instr::Axpy { s, alpha, x, y } => {
                let (others, y) = split_dst(&mut arrs, y);
                streams[s].axpy(alpha, others.get(x), y).tc()?
            }
            Instr::Add { s, a, b, out } => {
                let (others, out) = split_dst(&mut arrs, out);
                streams[s].add(others.get(a), others.get(b), out).tc()?
            }
            Instr::Mul { s, a, b, out } => {
                let (others, out) = split_dst(&mut arrs, out);
                streams[s].mul(others.get(a), others.get(b), out).tc()?
            }
            Instr::Copy { s, src, dst } => {
                let (others, dst) = split_dst(&mut arrs, dst);
                streams[s].copy(others.get(src), dst).tc()?
            }
            Instr::CopyRange {
                s,
                src,
                dst,
                start,
                end,
            } => {
                let (others, dst) = split_dst(&mut arrs, dst);
                let from = others.get(src).slice(start..end).tc()?;
                let mut to = dst.slice_mut(start..end).tc()?;
                streams[s].copy(&from, &mut to).tc()?
            }
            Instr::Upload { s, dst, seed } => {
                uploads.push(streams[s].upload(data(seed, p.len), &mut arrs[dst]).tc()?)
            }
            Instr::Download { s, src } => {
                downloads.push(streams[s].download(&arrs[src], vec![0.0f32; p.len]).tc()?)
            }
            Instr::Event { from, to } => {
                let e = streams[from].record_event().tc()?;
                streams[to].wait(&e).tc()?
            }
            Instr::Delay { s, us } => {
                let k = delay.as_ref().expect("loaded when the program has delays");
                streams[s]
                    .launch(k, gpu::LaunchConfig::linear(1, 1), (us,))
                    .tc()?
            }
        }
    }
    let finals = arrs
        .iter()
        .map(|a| a.download())
        .collect::<gpu::Result<Vec<_>>>()
        .tc()?;
    for u in uploads {
        u.wait().tc()?;
    }
    let snaps = downloads
        .into_iter()
        .map(|d| d.wait())
        .collect::<Result<Vec<_>, _>>()
        .tc()?;
    for s in &streams {
        s.sync().tc()?;
    }
    Ok((finals, snaps))
}

/// Bitwise equality, except that any NaN matches any NaN (payloads may differ between
/// backends and between vectorised and scalar code).
fn same_bits(got: &[f32], want: &[f32]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()))
}

fn programs_match_sequential(ctx: &gpu::Context) -> gpu::Result<()> {
    check(384, program(), |p| {
        let (want, want_snaps) = interpret(&p);
        let (got, got_snaps) = if p.fresh {
            let fresh = gpu::Context::new(ctx.selection().requested).tc()?;
            let r = execute(&fresh, &p);
            fresh.close().tc()?;
            r?
        } else {
            execute(ctx, &p)?
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if let Some(at) = same_bits(g, w) {
                prop_assert!(
                    false,
                    "array {} differs at [{}] of {}: got {:?}, want {:?}",
                    i,
                    at,
                    p.len,
                    g.get(at),
                    w.get(at)
                );
            }
        }
        prop_assert_eq!(got_snaps.len(), want_snaps.len());
        for (i, (g, w)) in got_snaps.iter().zip(&want_snaps).enumerate() {
            if let Some(at) = same_bits(g, w) {
                prop_assert!(
                    false,
                    "download #{} differs at [{}] of {}: got {:?}, want {:?}",
                    i,
                    at,
                    p.len,
                    g.get(at),
                    w.get(at)
                );
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Laws of views
// ---------------------------------------------------------------------------------------

type Range = (Bound<usize>, Bound<usize>);

/// A bound inside, at or just past the end of a length-`len` array, or absurdly far.
fn bound(len: usize) -> impl Strategy<Value = Bound<usize>> {
    prop_oneof![
        2 => Just(Bound::Unbounded),
        4 => (0..=len + 2).prop_map(Bound::Included),
        4 => (0..=len + 2).prop_map(Bound::Excluded),
        1 => Just(Bound::Included(usize::MAX)),
        1 => Just(Bound::Excluded(usize::MAX)),
    ]
}

#[derive(Debug, Clone)]
struct ViewCase {
    len: usize,
    outer: Range,
    inner: Range,
    write: Range,
    mid: usize,
    left_to_right: bool,
    seed: u32,
}

fn view_case() -> impl Strategy<Value = ViewCase> {
    length(300)
        .prop_flat_map(|len| {
            (
                Just(len),
                (bound(len), bound(len)),
                (bound(len), bound(len / 2 + 1)),
                (bound(len), bound(len)),
                0..=len + 2,
                any::<bool>(),
                any::<u32>(),
            )
        })
        .prop_map(
            |(len, outer, inner, write, mid, left_to_right, seed)| ViewCase {
                len,
                outer,
                inner,
                write,
                mid,
                left_to_right,
                seed,
            },
        )
}

/// `start..end` of a range over `len` elements, as std's slicing resolves it.
fn resolve(r: Range, len: usize) -> Option<(usize, usize)> {
    let host: Vec<u8> = vec![0; len];
    let part = host.get(r)?;
    let start = part.as_ptr() as usize - host.as_ptr() as usize;
    Some((start, start + part.len()))
}

fn out_of_range<T>(r: gpu::Result<T>, len: usize) -> Result<(), TestCaseError> {
    match r {
        Err(gpu::Error::OutOfRange { len: l, .. }) if l == len => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!(
            "expected OutOfRange for length {len}, got {e}"
        ))),
        Ok(_) => Err(TestCaseError::fail(format!(
            "expected OutOfRange for length {len}, got a view"
        ))),
    }
}

fn view_laws(ctx: &gpu::Context) -> gpu::Result<()> {
    check(512, view_case(), |c| {
        let to_i = |v: Vec<f32>| {
            v.into_iter()
                .map(|x| (x * 64.0) as i32)
                .collect::<Vec<i32>>()
        };
        let mut host = to_i(data(c.seed, c.len));
        let mut a = ctx.alloc_upload(&host).tc()?;

        // Whole-array views.
        prop_assert_eq!(a.slice(..).tc()?.download().tc()?, host.clone());
        prop_assert_eq!(a.as_view_mut().download().tc()?, host.clone());

        // Nested read-only slicing equals host slicing; out of range is an error.
        match host.get(c.outer) {
            Some(h1) => {
                let v1 = a.slice(c.outer).tc()?;
                let (start, _) = resolve(c.outer, c.len).expect("std accepted it");
                prop_assert_eq!(v1.len(), h1.len());
                prop_assert_eq!(v1.offset(), start);
                prop_assert_eq!(v1.download().tc()?, h1.to_vec());
                match h1.get(c.inner) {
                    Some(h2) => {
                        let v2 = v1.slice(c.inner).tc()?;
                        prop_assert_eq!(v2.len(), h2.len());
                        prop_assert_eq!(v2.download().tc()?, h2.to_vec());
                        prop_assert_eq!(v2.slice(..).tc()?.download().tc()?, h2.to_vec());
                    }
                    None => out_of_range(v1.slice(c.inner), h1.len())?,
                }
            }
            None => {
                out_of_range(a.slice(c.outer), c.len)?;
                out_of_range(a.slice_mut(c.outer), c.len)?;
            }
        }

        // Writing through a mutable view changes exactly its range; nested mutable views
        // and ops on views too.
        match resolve(c.write, c.len) {
            Some((s, e)) => {
                let new = to_i(data(c.seed ^ 0x5555, e - s));
                let mut w = a.slice_mut(c.write).tc()?;
                prop_assert_eq!(w.len(), e - s);
                prop_assert_eq!(w.offset(), s);
                w.upload(&new).tc()?;
                host[s..e].copy_from_slice(&new);
                match resolve(c.inner, e - s) {
                    Some((s2, e2)) => {
                        let mut inner = w.slice_mut(c.inner).tc()?;
                        prop_assert_eq!(inner.offset(), s + s2);
                        ctx.fill(&mut inner, -7).tc()?;
                        host[s + s2..s + e2].fill(-7);
                        prop_assert_eq!(inner.download().tc()?, host[s + s2..s + e2].to_vec());
                    }
                    None => out_of_range(w.slice_mut(c.inner), e - s)?,
                }
                prop_assert_eq!(a.download().tc()?, host.clone());

                // Splitting a view: halves at the right offsets, with the right contents.
                out_of_range(a.slice_mut(c.write).tc()?.into_split_at(e - s + 1), e - s)?;
                let w = a.slice_mut(c.write).tc()?;
                let m = c.mid % (e - s + 1);
                let (l, r) = w.into_split_at(m).tc()?;
                prop_assert_eq!((l.offset(), r.offset()), (s, s + m));
                prop_assert_eq!(l.download().tc()?, host[s..s + m].to_vec());
                prop_assert_eq!(r.download().tc()?, host[s + m..e].to_vec());
            }
            None => {
                out_of_range(a.slice_mut(c.write), c.len)?;
                prop_assert_eq!(a.download().tc()?, host.clone(), "a rejected view wrote");
            }
        }

        // split_at_mut: lengths, contents, and copies between the halves.
        if c.mid > c.len {
            prop_assert!(
                matches!(a.split_at_mut(c.mid), Err(gpu::Error::OutOfRange { .. })),
                "split_at_mut({}) of {}",
                c.mid,
                c.len
            );
        } else {
            let mid = c.mid;
            let (mut l, mut r) = a.split_at_mut(mid).tc()?;
            prop_assert_eq!((l.len(), r.len()), (mid, c.len - mid));
            prop_assert_eq!((l.offset(), r.offset()), (0, mid));
            let mut both = l.download().tc()?;
            both.extend(r.download().tc()?);
            prop_assert_eq!(&both, &host);
            let k = mid.min(c.len - mid);
            if c.left_to_right {
                // The last k of the left half into the first k of the right half.
                let from = l.as_view().slice(mid - k..).tc()?;
                ctx.copy(&from, &mut r.slice_mut(..k).tc()?).tc()?;
                host.copy_within(mid - k..mid, mid);
            } else {
                // The last k of the right half into the first k of the left half.
                let from = r.as_view().slice(c.len - mid - k..).tc()?;
                ctx.copy(&from, &mut l.slice_mut(..k).tc()?).tc()?;
                host.copy_within(c.len - k.., 0);
            }
            prop_assert_eq!(a.download().tc()?, host);
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

    fn i32_ops_wrap_exactly(ctx) {
        int_ops::<i32>(ctx)
    }

    fn u8_ops_wrap_exactly(ctx) {
        int_ops::<u8>(ctx)
    }

    fn multi_stream_programs_match_sequential_runs(ctx) {
        programs_match_sequential(ctx)
    }

    fn views_follow_slice_laws(ctx) {
        view_laws(ctx)
    }
}
