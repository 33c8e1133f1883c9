//! The CUDA backend against the CPU backend on the same random inputs.
//!
//! Each test opens both backends; without a usable CUDA device it prints
//! `SKIPPED: <reason>` and returns (and fails under `GPU_REQUIRE_CUDA=1`). What must agree:
//!
//! - element-wise ops (fill, copy, axpy, scale, add, sub, mul, div, also through offset
//!   views) bit for bit, for every element type: the CUDA kernels are compiled with
//!   `--fmad=false` and IEEE division, integers wrap and `x / 0 == 0` on both backends. NaN
//!   matches any NaN (the payloads differ between CPUs and GPUs);
//! - `relu` bit for bit; `exp` within 2 ulp (CUDA's `expf` is within 2 ulp of the exact
//!   result, glibc's within 0.5); `tanh` within 4 ulp (2 on each side); `sigmoid`, which is
//!   `1 / (1 + exp(-x))` on both, within 4 ulp: a 1-ulp difference in `exp` can move the
//!   rounding of `1 + e` by 2 ulp of `e`, which is up to 4 ulp of the quotient;
//! - `max` exactly (by value: `-0.0 == 0.0`, NaN matches NaN); integer `sum` and `dot`
//!   exactly; float `sum`, `dot` and `gemm` within `REL * sqrt(n)` of the sum of the
//!   magnitudes of the `n` terms (`1e-5` for f32, `1e-13` for f64);
//! - the same at lengths around one block and above `256 * 1024` elements (up to four
//!   million), where the element-wise grids are capped and loop, and reductions fold more
//!   than one block of partials per thread.

use super::*;

use gpu::{BinaryOp, Context, UnaryOp};

/// Runs `body` with the CPU and the CUDA context; without CUDA, prints why and returns.
fn cross(body: impl FnOnce(&Context, &Context) -> gpu::Result<()>) {
    let Some(cuda) = common::cuda() else { return };
    let Some(cpu) = common::cpu() else { return };
    if let Err(e) = body(&cpu, &cuda) {
        panic!("cpu vs cuda: {e}");
    }
    for ctx in [&cpu, &cuda] {
        if let Err(e) = ctx.sync() {
            panic!(
                "{} backend: error left after the test: {e}",
                ctx.backend_name()
            );
        }
    }
}

/// Runs `f` on the CPU and on CUDA: `(cpu's answer, cuda's answer)`.
fn both<R>(
    cpu: &Context,
    cuda: &Context,
    f: impl Fn(&Context) -> gpu::Result<R>,
) -> Result<(R, R), String> {
    let want = f(cpu).map_err(|e| format!("cpu backend: {e}"))?;
    let got = f(cuda).map_err(|e| format!("cuda backend: {e}"))?;
    Ok((want, got))
}

/// A comparison failure as a proptest failure (whose report holds the shrunk input).
fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

// ---------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------

/// What the cross-backend comparisons need of an element type.
trait Cross: Numeric {
    /// Values for element-wise ops, edge cases of the type included (for floats: NaN,
    /// infinities, signed zeros, subnormals; for integers: MIN, MAX, 0 and -1).
    fn edgy() -> BoxedStrategy<Self>;
    /// Values for reductions and gemm: for floats finite and moderate, so that the order
    /// of summation cannot turn a finite sum into an infinity.
    fn plain() -> BoxedStrategy<Self>;
    /// A deterministic value from 64 random bits, for the large-length test.
    fn from_bits64(x: u64) -> Self;
    /// Bit-for-bit equality, except that NaN matches any NaN.
    fn same(self, other: Self) -> bool;
    /// Equality by value (`-0.0 == 0.0`), NaN matching NaN: for `max`.
    fn same_value(self, other: Self) -> bool;
    /// Whether two sums (or dot products) of `n` terms whose magnitudes add up to `scale`
    /// agree: exactly for integers, within the float tolerance otherwise.
    fn sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool;
}

macro_rules! cross_int {
    ($($t:ty),*) => {$(
        impl Cross for $t {
            fn edgy() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => any::<$t>(),
                    3 => (0 as $t)..4,
                    2 => Just(0 as $t),
                    1 => Just(<$t>::MIN),
                    1 => Just(<$t>::MAX),
                    // -1 for signed types (MIN / -1 wraps), MAX for unsigned ones.
                    2 => Just((0 as $t).wrapping_sub(1)),
                ]
                .boxed()
            }
            fn plain() -> BoxedStrategy<Self> {
                Self::edgy()
            }
            fn from_bits64(x: u64) -> Self {
                // Truncation: every bit pattern of the type.
                x as $t
            }
            fn same(self, other: Self) -> bool {
                self == other
            }
            fn same_value(self, other: Self) -> bool {
                self == other
            }
            fn sums_agree(want: Self, got: Self, _n: usize, _scale: f64) -> bool {
                want == got
            }
        }
    )*};
}

cross_int!(i32, u8, i64, u32, i8, u64);

/// Floats: their ulp distance.
trait CrossFloat: Cross + Float {
    /// Units in the last place between two finite values (0 between `-0.0` and `0.0`).
    fn ulps(self, other: Self) -> u64;
}

macro_rules! cross_float {
    ($($t:ident: $bits:ty, $wide:ty, $rel:expr, $tiny:expr);*) => {$(
        impl Cross for $t {
            fn edgy() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => -1e3 as $t..1e3,
                    2 => -1.0 as $t..1.0,
                    2 => (-20i8..20).prop_map(<$t>::from),
                    // proptest's "any float": normal, subnormal, zero, infinite and NaN.
                    2 => proptest::num::$t::ANY,
                    1 => prop::sample::select(vec![
                        0.0, -0.0, 1.0, -1.0, <$t>::INFINITY, <$t>::NEG_INFINITY, <$t>::NAN,
                        <$t>::MAX, <$t>::MIN, <$t>::MIN_POSITIVE, <$t>::MIN_POSITIVE / 2.0,
                        <$t>::from_bits(1), -<$t>::from_bits(1), <$t>::EPSILON,
                    ]),
                ]
                .boxed()
            }
            fn plain() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => -1e3 as $t..1e3,
                    2 => -1.0 as $t..1.0,
                    1 => Just(0.0),
                    2 => (-20i8..20).prop_map(<$t>::from),
                ]
                .boxed()
            }
            fn from_bits64(x: u64) -> Self {
                // -1000..1000 in steps of 1/64 (exact in both types).
                ((x % 128_001) as $t - 64_000.0) / 64.0
            }
            fn same(self, other: Self) -> bool {
                (self.is_nan() && other.is_nan()) || self.to_bits() == other.to_bits()
            }
            fn same_value(self, other: Self) -> bool {
                (self.is_nan() && other.is_nan()) || self == other
            }
            fn sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool {
                let (w, g) = (f64::from(want), f64::from(got));
                if w.is_nan() || g.is_nan() {
                    return w.is_nan() && g.is_nan();
                }
                if w.is_infinite() || g.is_infinite() {
                    return w == g;
                }
                // `$rel` times sqrt(n) of the magnitudes, and `$tiny` for underflow.
                (w - g).abs() <= $rel * (n.max(1) as f64).sqrt() * scale + $tiny
            }
        }

        impl CrossFloat for $t {
            fn ulps(self, other: Self) -> u64 {
                // Sign-magnitude bits onto a line where neighbours differ by one.
                let line = |x: $t| -> $wide {
                    let b = x.to_bits();
                    let sign = b >> (<$bits>::BITS - 1);
                    let magnitude = (b & !(1 << (<$bits>::BITS - 1))) as $wide;
                    if sign == 1 { -magnitude } else { magnitude }
                };
                u64::try_from((line(self) - line(other)).unsigned_abs()).unwrap_or(u64::MAX)
            }
        }
    )*};
}

cross_float!(f32: u32, i128, 1e-5, 1e-37; f64: u64, i128, 1e-13, 1e-300);

/// Whether `got` is within `max` ulp of `want`; NaN matches NaN, infinities match exactly.
fn within_ulps<T: CrossFloat>(want: T, got: T, max: u64) -> bool {
    let (w, g) = (want.to_f64(), got.to_f64());
    if w.is_nan() || g.is_nan() {
        return w.is_nan() && g.is_nan();
    }
    if w.is_infinite() || g.is_infinite() {
        return w == g;
    }
    want.ulps(got) <= max
}

// ---------------------------------------------------------------------------------------
// The comparisons, each on both backends
// ---------------------------------------------------------------------------------------

/// Element `i` of the first mismatch between the two results, reported with the inputs.
fn same_elements<T: Cross>(
    op: &str,
    want: &[T],
    got: &[T],
    agree: impl Fn(T, T) -> bool,
    inputs: impl Fn(usize) -> String,
) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!(
            "{op} {}: cpu gave {} elements, cuda {}",
            T::DTYPE,
            want.len(),
            got.len()
        ));
    }
    match (0..want.len()).find(|&i| !agree(want[i], got[i])) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{op} {} [{i}] of {}: cpu {:?}, cuda {:?} ({})",
            T::DTYPE,
            want.len(),
            want[i],
            got[i],
            inputs(i)
        )),
    }
}

/// Every element-wise op on `a` and `b` (whose zeros are divisors): equal bit for bit.
fn elementwise<T: Cross>(
    cpu: &Context,
    cuda: &Context,
    a: &[T],
    b: &[T],
    alpha: T,
    fill: T,
) -> Result<(), String> {
    let n = a.len();
    let show = |i: usize| format!("a = {:?}, b = {:?}, alpha = {alpha:?}", a[i], b[i]);

    let (want, got) = both(cpu, cuda, |ctx| {
        let mut out = ctx.alloc::<T>(n)?;
        ctx.fill(&mut out, fill)?;
        out.download()
    })?;
    same_elements("fill", &want, &got, T::same, |_| format!("value {fill:?}"))?;

    let (want, got) = both(cpu, cuda, |ctx| {
        let x = ctx.alloc_upload(a)?;
        let mut out = ctx.alloc::<T>(n)?;
        ctx.copy(&x, &mut out)?;
        out.download()
    })?;
    same_elements("copy", &want, &got, T::same, show)?;
    // A copy moves bits: it must also equal the input itself.
    same_elements("copy (against the input)", a, &got, T::same, show)?;

    let (want, got) = both(cpu, cuda, |ctx| {
        let x = ctx.alloc_upload(a)?;
        let mut y = ctx.alloc_upload(b)?;
        ctx.axpy(alpha, &x, &mut y)?;
        y.download()
    })?;
    same_elements("axpy", &want, &got, T::same, show)?;

    let (want, got) = both(cpu, cuda, |ctx| {
        let mut x = ctx.alloc_upload(a)?;
        ctx.scale(alpha, &mut x)?;
        x.download()
    })?;
    same_elements("scale", &want, &got, T::same, show)?;

    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
        let (want, got) = both(cpu, cuda, |ctx| {
            let x = ctx.alloc_upload(a)?;
            let y = ctx.alloc_upload(b)?;
            let mut out = ctx.alloc::<T>(n)?;
            ctx.binary(op, &x, &y, &mut out)?;
            out.download()
        })?;
        same_elements(op.name(), &want, &got, T::same, show)?;
    }

    // Through views that start a few elements in (device addresses off the allocation's
    // start); the elements before the views stay zero.
    let off = n.min(3);
    let (want, got) = both(cpu, cuda, |ctx| {
        let x = ctx.alloc_upload(a)?;
        let y = ctx.alloc_upload(b)?;
        let mut out = ctx.alloc_zeros::<T>(n)?;
        {
            let mut o = out.slice_mut(off..)?;
            ctx.sub(&x.slice(off..)?, &y.slice(off..)?, &mut o)?;
        }
        out.download()
    })?;
    same_elements("sub on views", &want, &got, T::same, show)
}

/// Ulp budgets of the math functions (see the module docs).
const EXP_ULPS: u64 = 2;
const TANH_ULPS: u64 = 4;
const SIGMOID_ULPS: u64 = 4;

/// relu bit for bit; sigmoid, tanh and exp within their ulp budgets.
fn unary<T: CrossFloat>(cpu: &Context, cuda: &Context, x: &[T]) -> Result<(), String> {
    let n = x.len();
    let ops = [
        (UnaryOp::Relu, 0),
        (UnaryOp::Sigmoid, SIGMOID_ULPS),
        (UnaryOp::Tanh, TANH_ULPS),
        (UnaryOp::Exp, EXP_ULPS),
    ];
    for (op, ulps) in ops {
        let (want, got) = both(cpu, cuda, |ctx| {
            let dx = ctx.alloc_upload(x)?;
            let mut out = ctx.alloc::<T>(n)?;
            ctx.unary(op, &dx, &mut out)?;
            out.download()
        })?;
        let agree = |w: T, g: T| {
            if ulps == 0 {
                w.same(g)
            } else {
                within_ulps(w, g, ulps)
            }
        };
        let what = format!("{} (within {ulps} ulp)", op.name());
        same_elements(&what, &want, &got, agree, |i| format!("x = {:?}", x[i]))?;
    }
    Ok(())
}

/// sum, dot (within tolerance for floats, exactly for integers) and max (exactly) of
/// `a` and `b`; max also of `edgy`, which may hold NaN, infinities and signed zeros.
fn reductions<T: Cross>(
    cpu: &Context,
    cuda: &Context,
    a: &[T],
    b: &[T],
    edgy: &[T],
) -> Result<(), String> {
    let n = a.len();
    let what = T::DTYPE;

    let (want, got) = both(cpu, cuda, |ctx| ctx.sum(&ctx.alloc_upload(a)?))?;
    let scale: f64 = a.iter().map(|x| x.to_f64().abs()).sum();
    if !T::sums_agree(want, got, n, scale) {
        return Err(format!(
            "sum {what} of {n}: cpu {want:?}, cuda {got:?} (sum of magnitudes {scale})"
        ));
    }

    let (want, got) = both(cpu, cuda, |ctx| {
        ctx.dot(&ctx.alloc_upload(a)?, &ctx.alloc_upload(b)?)
    })?;
    let scale: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x.to_f64() * y.to_f64()).abs())
        .sum();
    if !T::sums_agree(want, got, n, scale) {
        return Err(format!(
            "dot {what} of {n}: cpu {want:?}, cuda {got:?} (sum of magnitudes {scale})"
        ));
    }

    for (name, x) in [("max", a), ("max of edge values", edgy)] {
        let (want, got) = both(cpu, cuda, |ctx| Ok(ctx.max(&ctx.alloc_upload(x)?)))?;
        match (want, got) {
            (Ok(w), Ok(g)) if w.same_value(g) => {}
            (Err(gpu::Error::EmptyInput { .. }), Err(gpu::Error::EmptyInput { .. }))
                if x.is_empty() => {}
            (w, g) => {
                return Err(format!(
                    "{name} {what} of {}: cpu {w:?}, cuda {g:?}",
                    x.len()
                ))
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Random cases
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Case<T> {
    /// Edge values: element-wise inputs, and `max` with NaNs and infinities.
    a: Vec<T>,
    b: Vec<T>,
    /// Plain values: reductions.
    x: Vec<T>,
    y: Vec<T>,
    alpha: T,
    fill: T,
}

fn case<T: Cross>(max_len: usize) -> impl Strategy<Value = Case<T>> {
    length(max_len)
        .prop_flat_map(|n| {
            (
                vec(T::edgy(), n),
                vec(T::edgy(), n),
                vec(T::plain(), n),
                vec(T::plain(), n),
                T::edgy(),
                T::edgy(),
            )
        })
        .prop_map(|(a, b, x, y, alpha, fill)| Case {
            a,
            b,
            x,
            y,
            alpha,
            fill,
        })
}

/// Cases per property: every case runs on both backends.
const CASES: u32 = 32;

fn random_ops<T: Cross>(cpu: &Context, cuda: &Context) -> gpu::Result<()> {
    check(CASES, case::<T>(3000), |c| {
        elementwise(cpu, cuda, &c.a, &c.b, c.alpha, c.fill).map_err(fail)?;
        reductions(cpu, cuda, &c.x, &c.y, &c.a).map_err(fail)
    })
}

/// Inputs of the math functions: mostly where the results are ordinary numbers, plus the
/// special values. Results stay out of the subnormal range, where the two libraries'
/// accuracy is not documented.
fn math_input<T: CrossFloat>() -> BoxedStrategy<T> {
    prop_oneof![
        6 => (-20.0..20.0f64).prop_map(T::from_f64),
        2 => (-80.0..80.0f64).prop_map(T::from_f64),
        1 => prop::sample::select(vec![
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            1e30,
            -1e30,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ])
        .prop_map(T::from_f64),
    ]
    .boxed()
}

fn random_math<T: CrossFloat>(cpu: &Context, cuda: &Context) -> gpu::Result<()> {
    let strategy = length(3000).prop_flat_map(|n| vec(math_input::<T>(), n));
    check(CASES, strategy, |x| unary(cpu, cuda, &x).map_err(fail))
}

#[derive(Debug, Clone)]
struct GemmCase<T> {
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: T,
    beta: T,
    a: Vec<T>,
    b: Vec<T>,
    /// NaN everywhere when `beta == 0`, which must then be ignored.
    c: Vec<T>,
}

fn gemm_case<T: CrossFloat>() -> impl Strategy<Value = GemmCase<T>> {
    (
        (1..=64usize, 1..=64usize, 1..=64usize),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        -2.0..2.0f64,
        prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64],
    )
        .prop_flat_map(|((m, n, k), (ta, tb, nan), alpha, beta)| {
            (
                Just((m, n, k, ta, tb, nan, alpha, beta)),
                vec(T::plain(), m * k),
                vec(T::plain(), k * n),
                vec(T::plain(), m * n),
            )
        })
        .prop_map(|((m, n, k, trans_a, trans_b, nan, alpha, beta), a, b, c)| {
            let c = if nan && beta == 0.0 {
                vec![T::from_f64(f64::NAN); m * n]
            } else {
                c
            };
            GemmCase {
                m,
                n,
                k,
                trans_a,
                trans_b,
                alpha: T::from_f64(alpha),
                beta: T::from_f64(beta),
                a,
                b,
                c,
            }
        })
}

fn random_gemm<T: CrossFloat>(cpu: &Context, cuda: &Context) -> gpu::Result<()> {
    check(CASES, gemm_case::<T>(), |g| {
        let spec = Gemm::new(g.m, g.n, g.k)
            .transpose(g.trans_a, g.trans_b)
            .scaled(g.alpha, g.beta);
        let (want, got) = both(cpu, cuda, |ctx| {
            let a = ctx.alloc_upload(&g.a)?;
            let b = ctx.alloc_upload(&g.b)?;
            let mut c = ctx.alloc_upload(&g.c)?;
            ctx.gemm(spec, &a, &b, &mut c)?;
            c.download()
        })
        .map_err(fail)?;
        prop_assert_eq!(want.len(), g.m * g.n);
        prop_assert_eq!(got.len(), g.m * g.n);

        let (m, n, k) = (g.m, g.n, g.k);
        let at = |i: usize, l: usize| {
            if g.trans_a {
                g.a[l * m + i]
            } else {
                g.a[i * k + l]
            }
            .to_f64()
        };
        let bt = |l: usize, j: usize| {
            if g.trans_b {
                g.b[j * k + l]
            } else {
                g.b[l * n + j]
            }
            .to_f64()
        };
        let (alpha, beta) = (g.alpha.to_f64(), g.beta.to_f64());
        for i in 0..m {
            for j in 0..n {
                let products: f64 = (0..k).map(|l| (at(i, l) * bt(l, j)).abs()).sum();
                let cv = if beta == 0.0 {
                    0.0
                } else {
                    beta * g.c[i * n + j].to_f64()
                };
                let scale = alpha.abs() * products + cv.abs();
                let (w, c) = (want[i * n + j], got[i * n + j]);
                prop_assert!(
                    T::sums_agree(w, c, k + 1, scale),
                    "gemm {} C[{}][{}] of {}x{}x{} (trans {} {}, alpha {:?}, beta {:?}): cpu {:?}, cuda {:?} (scale {})",
                    T::DTYPE,
                    i,
                    j,
                    m,
                    n,
                    k,
                    g.trans_a,
                    g.trans_b,
                    g.alpha,
                    g.beta,
                    w,
                    c,
                    scale
                );
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Large lengths
// ---------------------------------------------------------------------------------------

/// Lengths around one block of 256 threads, around one reduction's most partials
/// (1024 blocks of 256), and past the element-wise grid's cap (32 blocks of 256 per SM:
/// 1.08 million threads on a 132-SM H100), where every kernel's grid-stride loop turns.
const LARGE: [usize; 8] = [1, 255, 256, 257, 70_001, 262_145, 1_000_003, 4_000_037];

/// Deterministic values: a xorshift stream from `seed`.
fn stream<T: Cross>(seed: u64, len: usize) -> Vec<T> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            T::from_bits64(s)
        })
        .collect()
}

fn large<T: Cross>(cpu: &Context, cuda: &Context) -> Result<(), String> {
    for (i, &len) in LARGE.iter().enumerate() {
        let seed = i as u64 * 4;
        let a: Vec<T> = stream(seed, len);
        // Every seventh divisor is zero.
        let b: Vec<T> = stream::<T>(seed + 1, len)
            .into_iter()
            .enumerate()
            .map(|(j, v)| if j % 7 == 3 { T::ZERO } else { v })
            .collect();
        let [alpha, fill] = [stream::<T>(seed + 2, 1)[0], stream::<T>(seed + 3, 1)[0]];
        elementwise(cpu, cuda, &a, &b, alpha, fill)?;
        reductions(cpu, cuda, &a, &b, &b)?;
    }
    Ok(())
}

fn large_math<T: CrossFloat>(cpu: &Context, cuda: &Context) -> Result<(), String> {
    for &len in &LARGE {
        // -20..20 in steps of 1/1024.
        let x: Vec<T> = stream::<u64>(len as u64, len)
            .into_iter()
            .map(|v| T::from_f64((v % 40_961) as f64 / 1024.0 - 20.0))
            .collect();
        unary(cpu, cuda, &x)?;
    }
    Ok(())
}

/// A comparison failure outside proptest, as an error the harness reports.
fn failed(message: String) -> gpu::Error {
    gpu::Error::Backend {
        backend: "test",
        call: "cpu vs cuda",
        message,
    }
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

macro_rules! random_ops_tests {
    ($($name:ident: $t:ty),*) => {$(
        #[test]
        fn $name() {
            cross(random_ops::<$t>);
        }
    )*};
}

random_ops_tests!(
    f32_ops_equal_the_cpu: f32,
    f64_ops_equal_the_cpu: f64,
    i32_ops_equal_the_cpu: i32,
    u8_ops_equal_the_cpu: u8,
    i64_ops_equal_the_cpu: i64,
    u32_ops_equal_the_cpu: u32,
    i8_ops_equal_the_cpu: i8,
    u64_ops_equal_the_cpu: u64
);

#[test]
fn f32_math_matches_the_cpu() {
    cross(random_math::<f32>);
}

#[test]
fn f64_math_matches_the_cpu() {
    cross(random_math::<f64>);
}

#[test]
fn f32_gemm_matches_the_cpu() {
    cross(random_gemm::<f32>);
}

#[test]
fn f64_gemm_matches_the_cpu() {
    cross(random_gemm::<f64>);
}

#[test]
fn large_lengths_match_the_cpu() {
    cross(|cpu, cuda| {
        large::<f32>(cpu, cuda).map_err(failed)?;
        large::<f64>(cpu, cuda).map_err(failed)?;
        large::<i32>(cpu, cuda).map_err(failed)?;
        large::<u8>(cpu, cuda).map_err(failed)?;
        large::<i64>(cpu, cuda).map_err(failed)?;
        large::<u32>(cpu, cuda).map_err(failed)?;
        large::<i8>(cpu, cuda).map_err(failed)?;
        large::<u64>(cpu, cuda).map_err(failed)?;
        large_math::<f32>(cpu, cuda).map_err(failed)?;
        large_math::<f64>(cpu, cuda).map_err(failed)
    });
}

/// The comparisons themselves, on two CPU contexts (which must agree exactly): runs
/// everywhere, so that a broken comparison is caught without a GPU.
#[test]
fn comparisons_accept_two_cpu_contexts() {
    let (Some(one), Some(two)) = (common::cpu(), common::cpu()) else {
        return;
    };
    let run = || -> gpu::Result<()> {
        check(4, case::<f32>(300), |c| {
            elementwise(&one, &two, &c.a, &c.b, c.alpha, c.fill).map_err(fail)?;
            reductions(&one, &two, &c.x, &c.y, &c.a).map_err(fail)
        })?;
        check(4, case::<i8>(300), |c| {
            elementwise(&one, &two, &c.a, &c.b, c.alpha, c.fill).map_err(fail)?;
            reductions(&one, &two, &c.x, &c.y, &c.a).map_err(fail)
        })?;
        random_math::<f64>(&one, &two)?;
        random_gemm::<f32>(&one, &two)?;
        large_math::<f32>(&one, &two).map_err(failed)?;
        large::<u8>(&one, &two).map_err(failed)
    };
    if let Err(e) = run() {
        panic!("{e}");
    }
}

/// The ulp distance and the float comparisons on known values.
#[test]
fn ulp_distance_and_float_equality() {
    assert_eq!(1.0f32.ulps(f32::from_bits(1.0f32.to_bits() + 2)), 2);
    assert_eq!(0.0f32.ulps(-0.0), 0);
    assert_eq!(f32::from_bits(1).ulps(-f32::from_bits(1)), 2);
    assert_eq!((-1.0f64).ulps(f64::from_bits((-1.0f64).to_bits() + 3)), 3);
    assert_eq!(f64::MAX.ulps(-f64::MAX), 2 * f64::MAX.to_bits());
    assert!(within_ulps(f32::INFINITY, f32::INFINITY, 0));
    assert!(!within_ulps(f32::INFINITY, f32::MAX, 4));
    assert!(within_ulps(f64::NAN, -f64::NAN, 0));
    assert!(!within_ulps(f64::NAN, 1.0, 4));
    assert!(f32::NAN.same(f32::from_bits(0x7fff_ffff)));
    assert!(!0.0f32.same(-0.0));
    assert!(0.0f64.same_value(-0.0));
    assert!(f32::sums_agree(1.0, 1.0 + 1e-6, 4, 1.0));
    assert!(!f32::sums_agree(1.0, 1.001, 4, 1.0));
    assert!(!i64::sums_agree(1, 2, 1, 1e9));
}
