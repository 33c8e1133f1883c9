//! Vectorised math for the f32 float ops where the math library's one call per element is
//! the cost: `exp`, `log`, `log1p`, `tanh`, `sigmoid`, `silu`, `gelu`, `softplus`, softmax,
//! log-softmax and cross-entropy, as loops of plain arithmetic the compiler turns into SIMD
//! code (AVX2 with FMA or AVX-512 where the CPU has them, chosen at run time, else the
//! baseline build's; NEON on AArch64), 4 to 16 elements an instruction instead of one libm
//! call each; and `+ - * /`, whose loops the baseline build compiles for SSE2 alone. No
//! crate: `pulp` and `wide` were measured against the plain loop and bought nothing once the
//! loop vectorised (selects written as `if`, `max`/`min` instead of `clamp`, unchecked
//! float-to-int conversions, `mul_add` for the fused multiply-adds). Measured on this
//! project's 2-core VM (AMD EPYC, Zen 5, with AVX-512; one thread, 16 Ki elements,
//! `ops_bench`, an op and its `sync`): `exp` 0.16 ns an element, `log` 0.18, `log1p` 0.23,
//! `tanh` 0.16, `pow` to a scalar power 0.75; numpy 2.4's SIMD bodies, called from Python,
//! took 0.28, 0.35, 0.19 and 0.95-1.0 for the last four (its `tanh` looks its polynomials up
//! in a table by register permutes).
//!
//! The algorithms are the classic ones, with the polynomials of Cephes' single-precision
//! library for `ln`:
//! - `e^x`: Cody and Waite's reduction `x = n ln 2 + r` (`n` the nearest integer to
//!   `x / ln 2`, found with the 1.5 * 2^23 rounding trick, which leaves `2^n` in the bits;
//!   `ln 2` split in two so that `r` is nearly exact), `e^r - 1 = r + r^2 p(r)` with `p` of
//!   degree 4 on `|r| <= ln 2 / 2` (Chebyshev interpolation), then scaled by
//!   `2^n` in two exact steps built from the exponent bits, so a result in the subnormals is
//!   rounded once, at the last step. SiLU and GELU multiply their `x` in before that scaling
//!   (`x e^a` rounded once even where `e^a` alone would be subnormal).
//! - `ln x`: `x = m 2^e` with `m` in `[sqrt(1/2), sqrt(2))` (subnormals scaled by `2^23`
//!   first), `ln m` by a degree-9 polynomial in `m - 1`, `e ln 2` added in two parts.
//! - `log1p x`: `ln(u) - ((u - 1) - x) / u` with `u = 1 + x`, which corrects the rounding of
//!   `u` (and `x` itself where `u` rounds to 1).
//! - `log` and `log1p` run a fast form a stack block at a time, without the selects of the
//!   special values (zeros, negatives, subnormals, infinities, NaN: where `x`, or `1 + x`,
//!   is not positive, normal and finite), and the whole body only on those elements after;
//!   the bits are the whole body's.
//! - `tanh x`: `m / (m + 2)` with `m = e^2|x| - 1` (`2|x|` clamped to 20, where tanh is
//!   already 1), the sign of `x` put back; `m = (2^n - 1) + 2^n (e^r - 1)` from `exp`'s
//!   reduction and polynomial, exactly `e^r - 1` where `n = 0`, so nothing cancels near 0.
//!   A NaN goes through every step (no select for it): the result is `x`, quieted.
//! - `pow a^b`: `2^(b log2|a|)` in f64, rounded once to f32: `log2 x = k + log2 c + log2(1 +
//!   r)` with `c` from a table of 16 (`x = 2^k c (1 + r)`, `|r| <= 1/32`) and a degree-6
//!   polynomial; `2^f` on `|f| <= 1/2` by a degree-6 polynomial (both Chebyshev
//!   interpolation); both by Estrin's scheme, the loop being bound by their latency. On
//!   AVX-512 the loop is written out with intrinsics (`pow_avx512`: the same operations in
//!   the same order), which look the table up by a register permute where the compiler's
//!   vectors gather (1.9 ns an element; the division `log2` took before the table, 1.1).
//!   C's `powf` where the body does not apply (see `pow1_applies`).
//! - the activations and the row-wise ops: the table's formulas (`crate::optable`)
//!   on these.
//!
//! The polynomials and reductions use fused multiply-adds where the code says so
//! (`mul_add`: `a * b + c` rounded once, as IEEE 754 defines it), and nowhere else (Rust
//! never contracts `a * b + c` by itself). The vectorised builds require the instruction
//! (AVX2 is taken only with FMA; AVX-512F and NEON have it), and the baseline build, on a
//! CPU without it, calls the C library's `fmaf` and `fma`, which round once too: slower
//! there, the same bits. So the bits are the same on every vector width, on every core
//! count, and on every machine with IEEE arithmetic; the fused forms cut the loops'
//! instructions by about a third (`tanh` 0.29 ns an element without them, `exp` 0.26).
//!
//! Each op stays inside the table's ulp budget with room, checked by the unit tests at every
//! 509th f32 bit pattern (both signs, every exponent) plus a dense grid of the range where
//! the op is not flat, against the table's formula in f64: `exp` within 2 ulp
//! (budget 3; worst found 1), `log` and `log1p` 2 (budget 3; worst found 1), `sigmoid`,
//! `silu`, `tanh` and `softplus` 3 (budget 4; worst found for `tanh` 2), `gelu` its budget
//! at each `x` (`4 + 7|u|` below 0), `pow` 1 of f64's `pow` rounded to f32 (budget 8). A
//! test runs each op through every vector width this CPU has and compares the bits. The
//! element-wise ops take f16 and bf16 through the same f32 bodies, widened exactly and each
//! result rounded once as the table's are (within one 16-bit ulp of the table's at every
//! one of their values); `pow` and the row-wise ops on them, and everything on f64, keep
//! the table's bodies.

use crate::{BinaryOp, DType, Float, RhsSlice, UnaryOp};
use BinaryOp::{Add, Div, Mul, Pow, Sub};

/// Whether the CPU has AVX2 and FMA, which the AVX2 compilations below require.
#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// Defines `$name`, which runs `$body` compiled for the widest vectors the CPU has
/// (AVX-512, else AVX2 with FMA, chosen at run time; else the baseline build's), and `$avx2` and
/// `$avx512`, `$body` compiled for each width (the tests compare their bits); each generic
/// over one `Body` where the body is. With `by hand` after the body, `$avx512` is written
/// out with AVX-512's intrinsics elsewhere (the same operations in the same order, where
/// the compiler's vectors would be slow) and not defined here.
macro_rules! on_widest {
    (
        $(#[$doc:meta])*
        fn $name:ident $(<$g:ident: $bound:ident>)? / $avx2:ident / $avx512:ident
            ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = $body:ident
    ) => {
        on_widest! {
            @dispatch $(#[$doc])*
            fn $name $(<$g: $bound>)? / $avx2 / $avx512 ($($arg: $ty),*) -> $ret = $body
        }

        #[doc = concat!("[`", stringify!($body), "`] compiled for AVX-512 (which has FMA).")]
        ///
        /// # Safety
        ///
        /// The CPU supports AVX-512F.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512 $(<$g: $bound>)? ($($arg: $ty),*) -> $ret {
            $body $(::<$g>)? ($($arg),*)
        }
    };
    (
        $(#[$doc:meta])*
        fn $name:ident / $avx2:ident / $avx512:ident
            ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = $body:ident, by hand
    ) => {
        on_widest! {
            @dispatch $(#[$doc])*
            fn $name / $avx2 / $avx512 ($($arg: $ty),*) -> $ret = $body
        }
    };
    (
        @dispatch $(#[$doc:meta])*
        fn $name:ident $(<$g:ident: $bound:ident>)? / $avx2:ident / $avx512:ident
            ($($arg:ident: $ty:ty),*) -> $ret:ty = $body:ident
    ) => {
        $(#[$doc])*
        fn $name $(<$g: $bound>)? ($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    return unsafe { $avx512 $(::<$g>)? ($($arg),*) };
                }
                if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA, checked just above.
                    return unsafe { $avx2 $(::<$g>)? ($($arg),*) };
                }
            }
            $body $(::<$g>)? ($($arg),*)
        }

        #[doc = concat!("[`", stringify!($body), "`] compiled for AVX2 and FMA.")]
        ///
        /// # Safety
        ///
        /// The CPU supports AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2 $(<$g: $bound>)? ($($arg: $ty),*) -> $ret {
            $body $(::<$g>)? ($($arg),*)
        }
    };
}

/// Runs `op` on f32 with the vectorised code where there is one; returns whether it did
/// (else the caller runs the table's scalar body).
pub fn unary<T: Float>(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) -> bool {
    let Some(map) = unary_body(op) else {
        return false;
    };
    if matches!(T::DTYPE, DType::F16 | DType::BF16) {
        sixteen_bits(map, src, out);
        return true;
    }
    let Some((src, out)) = as_f32(src, out) else {
        return false;
    };
    map(src, out);
    true
}

/// `map` on f16 or bf16 values as the table computes them: widened to f32 (exactly), the
/// f32 body, each result rounded once to the element type (to nearest, ties to even); a
/// stack block at a time, the conversions on the values' bits.
fn sixteen_bits<T: Float>(map: Map, src: Option<&[T]>, out: &mut [T]) {
    // SAFETY: `T` is f16 or bf16 (the caller checked its dtype; each `Element` type names
    // its own dtype, an `unsafe` trait's contract): two bytes, alignment 2, and every bit
    // pattern is a valid u16, so these are the same slices typed as their bits.
    let (src, out) = unsafe {
        (
            src.map(|s| std::slice::from_raw_parts(s.as_ptr().cast::<u16>(), s.len())),
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u16>(), out.len()),
        )
    };
    match T::DTYPE {
        DType::BF16 => blocks16(map, src, out, bf16_to_f32, f32_to_bf16),
        #[cfg(feature = "half")]
        DType::F16 => {
            use crate::half::f16;
            blocks16(
                map,
                src,
                out,
                |b| f16::from_bits(b).to_f32(),
                |v| f16::from_f32(v).to_bits(),
            )
        }
        // No other 16-bit float exists; an f16 without the `half` feature cannot.
        _ => {}
    }
}

/// [`sixteen_bits`] on the bits, `widen` and `narrow` converting them.
#[inline(always)]
fn blocks16(
    map: Map,
    src: Option<&[u16]>,
    out: &mut [u16],
    widen: impl Fn(u16) -> f32,
    narrow: impl Fn(f32) -> u16,
) {
    const BLOCK: usize = 256;
    let mut buf = [0.0f32; BLOCK];
    for (k, o) in out.chunks_mut(BLOCK).enumerate() {
        let b = &mut buf[..o.len()];
        let s = match src {
            Some(s) => &s[k * BLOCK..k * BLOCK + o.len()],
            None => &*o,
        };
        for (b, &x) in b.iter_mut().zip(s) {
            *b = widen(x);
        }
        map(None, b);
        for (o, &v) in o.iter_mut().zip(b.iter()) {
            *o = narrow(v);
        }
    }
}

/// A bf16's value as f32 (exact: its bits are an f32's upper half).
#[inline(always)]
fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// An f32 rounded to bf16, to nearest with ties to even (a NaN stays a quiet NaN).
#[inline(always)]
fn f32_to_bf16(v: f32) -> u16 {
    let b = v.to_bits();
    let rounded = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    if v.is_nan() {
        (b >> 16) as u16 | 0x0040
    } else {
        rounded
    }
}

/// Whether [`unary`] runs `op` on `T` at a few times `add`'s cost per element (f32 through
/// a vectorised body; not `softplus`, two math functions, nor the 16-bit types, whose
/// conversions cost as much again): the split weight `VMATH` rather than `MATH`.
pub fn cheap<T: Float>(op: UnaryOp) -> bool {
    T::DTYPE == DType::F32 && op != UnaryOp::Softplus && unary_body(op).is_some()
}

/// An element-wise f32 loop: `out = f(src)`, in place when `src` is `None`.
type Map = fn(Option<&[f32]>, &mut [f32]);

/// The vectorised loop of `op`, where there is one.
fn unary_body(op: UnaryOp) -> Option<Map> {
    Some(match op {
        UnaryOp::Exp => map_f32::<Exp>,
        UnaryOp::Log => map_f32::<Log>,
        UnaryOp::Log1p => map_f32::<Log1p>,
        UnaryOp::Tanh => map_f32::<Tanh>,
        UnaryOp::Sigmoid => map_f32::<Sigmoid>,
        UnaryOp::Silu => map_f32::<Silu>,
        UnaryOp::Gelu => map_f32::<Gelu>,
        UnaryOp::Softplus => map_f32::<Softplus>,
        _ => return None,
    })
}

/// The slices as `f32` slices where `T` is `f32`.
fn as_f32<'a, T: Float>(
    src: Option<&'a [T]>,
    out: &'a mut [T],
) -> Option<(Option<&'a [f32]>, &'a mut [f32])> {
    let out = f32s_mut(out)?;
    // `T` is f32: so is the source.
    Some((src.and_then(f32s), out))
}

/// The slice as an `f32` slice where `T` is `f32`.
fn f32s<T: Float>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: `T::DTYPE` is F32 only for `f32` (each `Element` type names its own dtype, an
    // `unsafe` trait's contract), so this is the same slice, typed as what it is.
    (T::DTYPE == DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// The slice as a mutable `f32` slice where `T` is `f32`.
fn f32s_mut<T: Float>(s: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: as in `f32s`; the borrow is moved into the result.
    (T::DTYPE == DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
}

/// Softmax or log-softmax over rows of `cols` on f32 with the vectorised `exp`, the table's
/// semantics otherwise (`crate::softmax_rows`: the row's maximum `m` ignoring NaNs,
/// `d_j = x_j - m` in f32, `e_j = exp(d_j)`, their sum `s` in f64 (the order of a chunk's sum);
/// softmax `e_j (1 / s)` and log-softmax `d_j - ln(s)` in f64, rounded once); returns whether it
/// ran (f32 only).
pub fn softmax<T: Float>(log: bool, src: Option<&[T]>, cols: usize, out: &mut [T]) -> bool {
    let Some((src, out)) = as_f32(src, out) else {
        return false;
    };
    if cols == 0 {
        return false;
    }
    for (r, o) in out.chunks_mut(cols).enumerate() {
        let row = src.map(|s| &s[r * cols..r * cols + o.len()]);
        let m = row_max(row.unwrap_or(o));
        shift(row, m, o);
        if log {
            let ln_s = exp_sum(o, 0.0).ln();
            for o in o.iter_mut() {
                *o = (f64::from(*o) - ln_s) as f32;
            }
        } else {
            exp_f32(None, o);
            let inv = 1.0 / sum(o);
            for o in o.iter_mut() {
                *o = (f64::from(*o) * inv) as f32;
            }
        }
    }
    true
}

/// Cross-entropy over rows of `cols` f32 logits with the vectorised `exp`, the table's
/// semantics otherwise (`crate::cross_entropy_rows`: `loss = ln(s) - (x_l - m)` and
/// `grad_j = e_j (1 / s) - [j == l]` in f64, rounded once; a label `>= cols` gives NaNs); returns
/// whether it ran (f32 only).
pub fn cross_entropy<T: Float>(
    logits: &[T],
    labels: &[u32],
    cols: usize,
    loss: &mut [T],
    grad: Option<&mut [T]>,
) -> bool {
    let (Some(logits), Some(loss)) = (f32s(logits), f32s_mut(loss)) else {
        return false;
    };
    let mut grad = grad.and_then(f32s_mut); // `T` is f32: so is the gradient
    if cols == 0 {
        return false;
    }
    for (r, (l, &label)) in loss.iter_mut().zip(labels).enumerate() {
        let row = &logits[r * cols..(r + 1) * cols];
        let g = grad
            .as_deref_mut()
            .map(|g| &mut g[r * cols..(r + 1) * cols]);
        let label = label as usize;
        if label >= cols {
            *l = f32::NAN;
            if let Some(g) = g {
                g.fill(f32::NAN);
            }
            continue;
        }
        let m = row_max(row);
        let s = match g {
            Some(g) => {
                shift(Some(row), m, g);
                exp_f32(None, g);
                let (s, e_label) = (sum(g), f64::from(g[label]));
                let inv = 1.0 / s;
                for g in g.iter_mut() {
                    *g = (f64::from(*g) * inv) as f32;
                }
                g[label] = (e_label * inv - 1.0) as f32;
                s
            }
            None => exp_sum(row, m),
        };
        *l = (s.ln() - f64::from(row[label] - m)) as f32;
    }
    true
}

/// A row's maximum, NaNs ignored (as the table's).
fn row_max(row: &[f32]) -> f32 {
    row.iter().copied().reduce(f32::max).unwrap_or(0.0)
}

/// `out[j] = x[j] - m`, `x` being `src` or `out` itself.
fn shift(src: Option<&[f32]>, m: f32, out: &mut [f32]) {
    match src {
        Some(x) => {
            for (o, &x) in out.iter_mut().zip(x) {
                *o = x - m;
            }
        }
        None => {
            for o in out.iter_mut() {
                *o -= m;
            }
        }
    }
}

/// The f64 sum of a row's values in gpukit-core's order of a chunk's sum (32 interleaved
/// partials, `crate::chunk_sum_of`), whatever the row's length: the same order whether
/// the values are stored ([`sum`]) or made a buffer at a time ([`exp_sum`]).
fn sum(v: &[f32]) -> f64 {
    super::sum::chunk_sum(v)
}

/// `sum(exp(x_j - m))` in [`sum`]'s order, the exps made a stack buffer at a time (a
/// multiple of the partials' count, so each exp meets the partial it would whole).
fn exp_sum(x: &[f32], m: f32) -> f64 {
    let mut buf = [0.0f32; 8 * crate::SUM_PARTIALS];
    let mut p = [-0.0f64; crate::SUM_PARTIALS];
    for c in x.chunks(buf.len()) {
        let b = &mut buf[..c.len()];
        shift(Some(c), m, b);
        exp_f32(None, b);
        super::sum::add_partials(&mut p, b);
    }
    crate::combine_partials(p)
}

/// An element-wise f32 body the loops below vectorise.
trait Body {
    fn f(x: f32) -> f32;
    /// Whether the loop runs [`Body::fast`], and [`Body::f`] only where [`Body::common`]
    /// fails (the special values' selects out of the vectorised loop).
    const SPLIT: bool = false;
    /// Whether `fast(x)` is `f(x)`, bit for bit.
    #[inline(always)]
    fn common(_x: f32) -> bool {
        true
    }
    /// `f(x)` where `common(x)`; some number elsewhere.
    #[inline(always)]
    fn fast(x: f32) -> f32 {
        Self::f(x)
    }
}

/// `e^x` ([`exp1`]).
struct Exp;
/// `ln x` ([`ln1`]).
struct Log;
/// `ln(1 + x)` ([`log1p1`]).
struct Log1p;
/// `tanh x` ([`tanh1`]).
struct Tanh;
/// The table's sigmoid with [`exp1`]: `e = e^-|x|`, then `1 / (1 + e)` above 0 and
/// `e / (1 + e)` below.
struct Sigmoid;
/// The table's SiLU, `x sigmoid(x)`: `x / (1 + e)` above 0 and `x e / (1 + e)` below
/// (`e = e^-|x|`, `x e` rounded once: [`exp_parts`]).
struct Silu;
/// The table's GELU, `x sigmoid(2u)` with `u = sqrt(2/pi) (x + 0.044715 x^3)`: as SiLU's
/// with `e = e^-2|u|`.
struct Gelu;
/// The table's softplus, `max(x, 0) + ln(1 + e^-|x|)`.
struct Softplus;

impl Body for Exp {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        exp1(x)
    }
}

impl Body for Log {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        ln1(x)
    }
    const SPLIT: bool = true;
    #[inline(always)]
    fn common(x: f32) -> bool {
        positive_normal(x)
    }
    #[inline(always)]
    fn fast(x: f32) -> f32 {
        ln_core(x.to_bits(), 0)
    }
}

impl Body for Log1p {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        log1p1(x)
    }
    const SPLIT: bool = true;
    #[inline(always)]
    fn common(x: f32) -> bool {
        positive_normal(1.0 + x)
    }
    #[inline(always)]
    fn fast(x: f32) -> f32 {
        log1p_with(x, |u| ln_core(u.to_bits(), 0))
    }
}

impl Body for Tanh {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        tanh1(x)
    }
}

impl Body for Sigmoid {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        let e = exp1(-x.abs());
        let num = if x > 0.0 { 1.0 } else { e };
        num / (1.0 + e)
    }
}

impl Body for Silu {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        gate(x, -x.abs())
    }
}

impl Body for Gelu {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        const SCALE: f32 = crate::optable::GELU_SCALE as f32;
        const CUBIC: f32 = crate::optable::GELU_CUBIC as f32;
        // The table's rounding of `u`, step by step.
        let u = SCALE * (x + CUBIC * x * x * x);
        gate(x, -(u.abs() + u.abs()))
    }
}

impl Body for Softplus {
    #[inline(always)]
    fn f(x: f32) -> f32 {
        let pos = if x > 0.0 { x } else { 0.0 };
        pos + log1p1(exp1(-x.abs()))
    }
}

/// `x / (1 + e^a)` for `x > 0` and `x e^a / (1 + e^a)` otherwise, for `a <= 0` (NaN where
/// `x` is), `x e^a` rounded once; `-inf` gives NaN (`-inf * 0`), as the table's.
#[inline(always)]
fn gate(x: f32, a: f32) -> f32 {
    let (y, s1, s2) = exp_parts(a);
    let e = y * s1 * s2;
    let num = if x > 0.0 {
        x
    } else if a < EXP_LO {
        x * 0.0
    } else {
        x * y * s1 * s2
    };
    num / (1.0 + e)
}

/// `map_f32` for `e^x`, also used by the row-wise ops.
pub fn exp_f32(src: Option<&[f32]>, out: &mut [f32]) {
    map_f32::<Exp>(src, out);
}

on_widest! {
    /// `out[i] = B::f(src[i])` (in place when `src` is `None`), on the widest vectors the
    /// CPU has.
    fn map_f32<B: Body> / map_avx2 / map_avx512 (src: Option<&[f32]>, out: &mut [f32]) -> ()
        = map_loop
}

#[inline(always)]
fn map_loop<B: Body>(src: Option<&[f32]>, out: &mut [f32]) {
    if B::SPLIT {
        split_loop::<B>(src, out);
        return;
    }
    match src {
        Some(s) => {
            for (o, &x) in out.iter_mut().zip(s) {
                *o = B::f(x);
            }
        }
        None => {
            for o in out.iter_mut() {
                *o = B::f(*o);
            }
        }
    }
}

/// [`map_loop`] for a split body: a stack block at a time, [`Body::fast`] over the block
/// (in a buffer where in place, the inputs being needed again), then [`Body::f`] where
/// [`Body::common`] fails.
#[inline(always)]
fn split_loop<B: Body>(src: Option<&[f32]>, out: &mut [f32]) {
    const BLOCK: usize = 256;
    match src {
        Some(s) => {
            for (o, s) in out.chunks_mut(BLOCK).zip(s.chunks(BLOCK)) {
                split_block::<B>(s, o);
            }
        }
        None => {
            let mut buf = [0.0f32; BLOCK];
            for o in out.chunks_mut(BLOCK) {
                let b = &mut buf[..o.len()];
                split_block::<B>(o, b);
                o.copy_from_slice(b);
            }
        }
    }
}

/// `out[i] = B::f(src[i])` through [`Body::fast`] and the fix-ups.
#[inline(always)]
fn split_block<B: Body>(src: &[f32], out: &mut [f32]) {
    let mut common = true;
    for (o, &x) in out.iter_mut().zip(src) {
        *o = B::fast(x);
        common &= B::common(x);
    }
    if !common {
        for (o, &x) in out.iter_mut().zip(src) {
            if !B::common(x) {
                *o = B::f(x);
            }
        }
    }
}

/// Whether `x` is positive, normal and finite (NaN is not).
#[inline(always)]
fn positive_normal(x: f32) -> bool {
    x.to_bits().wrapping_sub(0x0080_0000) < 0x7f00_0000
}

/// Below this `e^x` is 0 even times any finite f32 `x` a caller multiplies in
/// ([`exp_parts`]).
const EXP_LO: f32 = -150.0;

/// `e^x` as `y * s1 * s2`, to be multiplied in that order: `y` in `[0.7, 1.42]`, `s1` and
/// `s2` normal powers of two (see the module docs). `x` is clamped to `[-150, 89]` (below,
/// `e^x` times anything up to 150 rounds to 0; above, `e^x` is infinite); a NaN comes out
/// as some number, for the caller to replace.
#[inline(always)]
fn exp_parts(x: f32) -> (f32, f32, f32) {
    // `max` and `min` (not `clamp`, which keeps a NaN: the steps below want a number in
    // range).
    #[allow(clippy::manual_clamp)]
    let x = x.max(EXP_LO).min(89.0);
    let (kn, r) = exp_reduce(x);
    let y = expm1_reduced(r) + 1.0;
    // 2^n in two factors, each a normal power of two (n is in [-217, 129]).
    let k = n_of(kn);
    let k1 = k >> 1;
    let k2 = k - k1;
    (y, pow2(k1), pow2(k2))
}

/// 1.5 * 2^23: adding and subtracting it rounds an f32 below 2^22 in magnitude to the
/// nearest integer (ties to even), which `n + ROUND`'s low mantissa bits then hold.
const ROUND_F32: f32 = 12_582_912.0;

/// Cody and Waite's reduction of `x` (at most 150 in magnitude): `(n + ROUND_F32, r)`, `n`
/// the nearest integer to `x / ln 2` and `r = x - n ln 2` (nearly exact), `|r| <= ln 2 / 2`.
#[inline(always)]
fn exp_reduce(x: f32) -> (f32, f32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO; LN2_HI has 9 significant bits, so n * LN2_HI is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let kn = x.mul_add(LOG2E, ROUND_F32);
    let n = kn - ROUND_F32;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    (kn, r)
}

/// The integer `n` of [`exp_reduce`]'s `n + ROUND_F32`, from its bits (`n` is in the low
/// mantissa bits, offset by `ROUND_F32`'s).
#[inline(always)]
fn n_of(kn: f32) -> i32 {
    (kn.to_bits() as i32).wrapping_sub(ROUND_F32.to_bits() as i32)
}

/// `2^n` for the `n + ROUND_F32` of [`exp_reduce`], `n` in `[-126, 127]`: `n`'s bits shifted
/// into the exponent (`ROUND_F32`'s own bits shift out), plus the bias.
#[inline(always)]
fn pow2_of(kn: f32) -> f32 {
    f32::from_bits((kn.to_bits() << 23).wrapping_add(127 << 23))
}

/// `e^r - 1` for `|r| <= ln 2 / 2`: `r + r^2 p(r)`, `p` of degree 4 the Chebyshev
/// interpolant of `(e^r - 1 - r) / r^2` on `[-0.3466, 0.3466]` (error 6.5e-8, so `e^r - 1`
/// is within 2.3e-8 of itself relative, and `e^r` within 8e-9).
#[inline(always)]
fn expm1_reduced(r: f32) -> f32 {
    let p = 1.392_618_2e-3f32
        .mul_add(r, 8.363_178e-3)
        .mul_add(r, 4.166_655_6e-2)
        .mul_add(r, 1.666_657_6e-1)
        .mul_add(r, 0.5);
    p.mul_add(r * r, r)
}

/// `2^k` for an integer `k` in `[-126, 127]`, from its exponent bits.
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `e^x` for one f32, branch-free (see the module docs).
#[inline(always)]
fn exp1(x: f32) -> f32 {
    let (y, s1, s2) = exp_parts(x);
    if x.is_nan() {
        x
    } else {
        y * s1 * s2
    }
}

/// `ln x` for one f32, branch-free (see the module docs): NaN below 0 and for NaN, `-inf` at
/// 0, `inf` at `inf`.
#[inline(always)]
fn ln1(x: f32) -> f32 {
    let sub = x < f32::MIN_POSITIVE;
    // Subnormals scaled by 2^23 into the normals (exact).
    let bits = if sub { x * 8_388_608.0 } else { x }.to_bits();
    let r = ln_core(bits, if sub { 23 } else { 0 });
    if x == 0.0 {
        f32::NEG_INFINITY
    } else if x < 0.0 || x.is_nan() {
        f32::NAN
    } else if x == f32::INFINITY {
        x
    } else {
        r
    }
}

/// `ln(y 2^-shift)` for the positive normal finite f32 whose bits are `bits` (some number
/// for other bits): [`ln1`] without its special values.
#[inline(always)]
fn ln_core(bits: u32, shift: i32) -> f32 {
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    // y = m 2^e with m in [0.5, 1).
    let e = ((bits >> 23) & 0xff) as i32 - 126 - shift;
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    // Then m in [sqrt(1/2), sqrt(2)), and f = m - 1 exactly.
    let low = m < SQRT_HALF;
    let e = if low { e - 1 } else { e };
    let f = if low { m + m - 1.0 } else { m - 1.0 };
    let z = f * f;
    let p = 0.070_376_836f32
        .mul_add(f, -0.115_146_1)
        .mul_add(f, 0.116_769_984)
        .mul_add(f, -0.124_201_41)
        .mul_add(f, 0.142_493_23)
        .mul_add(f, -0.166_680_57)
        .mul_add(f, 0.200_007_14)
        .mul_add(f, -0.249_999_94)
        .mul_add(f, 0.333_333_3);
    let fe = e as f32;
    let y = (p * f).mul_add(z, (-2.121_944_4e-4f32).mul_add(fe, -0.5 * z));
    0.693_359_4f32.mul_add(fe, f + y)
}

/// `ln(1 + x)` for one f32, branch-free (see the module docs).
#[inline(always)]
fn log1p1(x: f32) -> f32 {
    let u = 1.0 + x;
    let l = log1p_with(x, ln1);
    if x == f32::INFINITY {
        x
    } else if u == 0.0 {
        f32::NEG_INFINITY
    } else {
        l
    }
}

/// `ln(1 + x)` through `ln`, where `1 + x` is positive, normal and finite: `x` itself where
/// `1 + x` rounds to 1.
#[inline(always)]
fn log1p_with(x: f32, ln: impl Fn(f32) -> f32) -> f32 {
    let u = 1.0 + x;
    let l = ln(u) - ((u - 1.0) - x) / u;
    if u == 1.0 {
        x
    } else {
        l
    }
}

/// `tanh x` for one f32, branch-free (see the module docs): `m / (m + 2)` with
/// `m = e^2|x| - 1`, the sign of `x` put back.
#[inline(always)]
fn tanh1(x: f32) -> f32 {
    // Past 2|x| = 20, tanh rounds to 1 (from |x| = 9.02 on). A NaN passes the clamp and
    // every step after it: each NaN below carries x's payload (`s` is never NaN: its
    // mantissa is 0), and the sign is x's, so the result is x quieted, on every width.
    let a = x.abs() + x.abs();
    let t = if a > 20.0 { 20.0 } else { a };
    let (kn, r) = exp_reduce(t);
    // n is in [0, 29] where t is not NaN.
    let s = pow2_of(kn);
    // e^t - 1 = (2^n - 1) + 2^n (e^r - 1): exactly e^r - 1 where n = 0, so no cancellation
    // near 0; 2^n - 1 is exact up to n = 24, and beyond, the result is 1 either way.
    let m = s.mul_add(expm1_reduced(r), s - 1.0);
    // The sign of x (a zero's too).
    (m / (m + 2.0)).copysign(x)
}

/// Runs `op` on f32 with the vectorised code where there is one (`pow`); returns whether
/// it did (else the caller runs the table's scalar body). The operands as the table's
/// `map_float` takes them.
pub fn binary<T: Float>(
    op: BinaryOp,
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
) -> bool {
    if !matches!(op, Add | Sub | Mul | Div | Pow) {
        return false;
    }
    let Some((src, out)) = as_f32(src, out) else {
        return false;
    };
    // `T` is f32: so is the right-hand side.
    let rhs = match rhs {
        RhsSlice::Array(b) => f32s(b).map(RhsSlice::Array),
        RhsSlice::Row(v) => f32s(v).map(RhsSlice::Row),
        RhsSlice::Col(v) => f32s(v).map(RhsSlice::Col),
        RhsSlice::Scalar(s) => f32s(std::slice::from_ref(&s)).map(|s| RhsSlice::Scalar(s[0])),
    };
    let Some(rhs) = rhs else {
        return false;
    };
    if op != Pow {
        arith_f32(op, src, rhs, cols, out);
        return true;
    }
    let row = |r: usize, o: &[f32]| src.map(|s| &s[r * cols..r * cols + o.len()]);
    match rhs {
        RhsSlice::Array(b) => pow_f32(src, Exponents::Each(b), out),
        RhsSlice::Scalar(s) => pow_f32(src, Exponents::One(s), out),
        RhsSlice::Row(v) => {
            for (r, o) in out.chunks_mut(cols.max(1)).enumerate() {
                pow_f32(row(r, o), Exponents::Each(&v[..o.len()]), o);
            }
        }
        RhsSlice::Col(v) => {
            for (r, o) in out.chunks_mut(cols.max(1)).enumerate() {
                pow_f32(row(r, o), Exponents::One(v[r]), o);
            }
        }
    }
    true
}

on_widest! {
    /// `a + b`, `a - b`, `a * b` or `a / b` over f32 on the widest vectors the CPU has, where
    /// the baseline build's loops are SSE2's (an in-place multiply of 1 MiB, in the cache:
    /// 12.5 us that way, 8.5 with AVX-512, numpy 10.9, on this project's VM). One IEEE
    /// operation an element, as the table's body: the same bits on every width (where both
    /// operands are NaN, a NaN either way).
    fn arith_f32 / arith_avx2 / arith_avx512 (
        op: BinaryOp,
        src: Option<&[f32]>,
        rhs: RhsSlice<'_, f32>,
        cols: usize,
        out: &mut [f32]
    ) -> () = arith_loop
}

/// The table's arithmetic bodies, inlined into the caller's vector width.
#[inline(always)]
fn arith_loop(
    op: BinaryOp,
    src: Option<&[f32]>,
    rhs: RhsSlice<'_, f32>,
    cols: usize,
    out: &mut [f32],
) {
    use crate::optable::map2;
    match op {
        Add => map2(src, rhs, cols, out, |a, b| a + b),
        Sub => map2(src, rhs, cols, out, |a, b| a - b),
        Mul => map2(src, rhs, cols, out, |a, b| a * b),
        Div => map2(src, rhs, cols, out, |a, b| a / b),
        _ => op.map_float(src, rhs, cols, out),
    }
}

/// The exponents of [`pow_f32`]: one per element, or one for all.
#[derive(Clone, Copy)]
enum Exponents<'a> {
    Each(&'a [f32]),
    One(f32),
}

/// `out[i] = src[i]^b[i]` (in place when `src` is `None`), a stack block at a time: the
/// vectorised [`pow1`] over the block, then C's `powf` where [`pow1`] does not apply
/// (zeros, infinities, NaNs, a negative base with a non-integer or huge exponent). One
/// exponent for all is spread over a block's buffer: the loop over a constant measured
/// slower.
fn pow_f32(src: Option<&[f32]>, b: Exponents<'_>, out: &mut [f32]) {
    const BLOCK: usize = 256;
    let (mut a_buf, mut b_buf) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
    if let Exponents::One(s) = b {
        b_buf.fill(s);
    }
    for (k, o) in out.chunks_mut(BLOCK).enumerate() {
        let (i, n) = (k * BLOCK, o.len());
        // In place, the bases are copied out of the block before it is written.
        let a: &[f32] = match src {
            Some(s) => &s[i..i + n],
            None => {
                a_buf[..n].copy_from_slice(o);
                &a_buf[..n]
            }
        };
        let b = match b {
            Exponents::Each(b) => &b[i..i + n],
            Exponents::One(_) => &b_buf[..n],
        };
        if !pow_block(a, b, o) {
            for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
                if !pow1_applies(a, b) {
                    *o = a.powf(b);
                }
            }
        }
    }
}

on_widest! {
    /// `out[i] = pow1(a[i], b[i])` on the widest vectors the CPU has; whether [`pow1`]
    /// applies to every element.
    fn pow_block / pow_avx2 / pow_avx512 (a: &[f32], b: &[f32], out: &mut [f32]) -> bool
        = pow_loop, by hand
}

#[inline(always)]
fn pow_loop(a: &[f32], b: &[f32], out: &mut [f32]) -> bool {
    let mut all = true;
    for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
        *o = pow1(a, b);
        all &= pow1_applies(a, b);
    }
    all
}

/// Whether [`pow1`] gives `a^b`: `a` positive and finite and `b` finite, or `a` negative
/// and finite and `b` an integer below `2^22` in magnitude.
#[inline(always)]
fn pow1_applies(a: f32, b: f32) -> bool {
    let finite_b = b.abs() < f32::INFINITY;
    let integer_b = b.abs() < 4_194_304.0 && (b + ROUND_F32) - ROUND_F32 == b;
    (a > 0.0 && a < f32::INFINITY && finite_b) || (a < 0.0 && a > f32::NEG_INFINITY && integer_b)
}

/// `a^b` where [`pow1_applies`] (some number elsewhere): `2^(b log2|a|)` in f64, rounded
/// once to f32 (the f64 steps are good to about `3e-9` relative, 0.05 ulp of an f32, so
/// the result is within 1 ulp of the correctly rounded one), negated for a negative `a` and
/// an odd `b`. [`pow_avx512`] writes the same steps out in AVX-512.
#[inline(always)]
fn pow1(a: f32, b: f32) -> f32 {
    let odd = (b + ROUND_F32).to_bits() & 1 == 1;
    let t = f64::from(b) * log2_f64(f64::from(a.abs()));
    // Beyond these 2^t is 0 or infinite in f32 (and a NaN, where pow1 does not apply, is
    // some number).
    #[allow(clippy::manual_clamp)]
    let t = t.max(-160.0).min(130.0);
    let r = exp2_f64(t) as f32;
    if a < 0.0 && odd {
        -r
    } else {
        r
    }
}

/// [`log2_f64`]'s split of `x`'s bits: subtracting `OFF` (the bits of `1 - 1/64`) leaves
/// the exponent `k` in the top 12 bits and the interval `i` in the next 4, so that `x = 2^k
/// z` with `z` in `[1 - 1/64, 2 - 1/32)`: interval 0 is `[1 - 1/64, 1 + 1/32)`, interval
/// `i > 0` is `1 + i/16` give or take `1/32`.
const LOG2_OFF: u64 = 0x3fef_8000_0000_0000;
/// 1.5 * 2^52: adding it rounds an f64 to the nearest integer, left in the low mantissa
/// bits.
const ROUND_F64: f64 = 6_755_399_441_055_744.0;
/// [`ROUND_F64`]'s bits: adding a small integer to them gives the bits of 1.5 * 2^52 plus
/// it, the integer as an f64 once 1.5 * 2^52 is subtracted.
const ROUND_F64_BITS: u64 = ROUND_F64.to_bits();

/// By interval `i` of [`LOG2_OFF`]: `1 / c` rounded to f64 and `log2 c` for the rounded
/// value (`-log2` of it to 40 digits, rounded once), with `c = 1 + i/16`. Interval 0's is
/// exactly `(1, 0)`, so that near 1 the logarithm is the polynomial alone, with its
/// relative error, and nothing cancels.
const LOG2_TABLE: [(f64, f64); 16] = [
    (1.0, 0.0),
    (0.941_176_470_588_235_3, 0.087_462_841_250_339_43),
    (0.888_888_888_888_888_8, 0.169_925_001_442_312_46),
    (0.842_105_263_157_894_7, 0.247_927_513_443_585_57),
    (0.8, 0.321_928_094_887_362_3),
    (0.761_904_761_904_761_9, 0.392_317_422_778_760_36),
    (0.727_272_727_272_727_3, 0.459_431_618_637_297_2),
    (0.695_652_173_913_043_5, 0.523_561_956_057_013),
    (0.666_666_666_666_666_6, 0.584_962_500_721_156_3),
    (0.64, 0.643_856_189_774_724_7),
    (0.615_384_615_384_615_4, 0.700_439_718_141_092_1),
    (0.592_592_592_592_592_6, 0.754_887_502_163_468_7),
    (0.571_428_571_428_571_4, 0.807_354_922_057_604_2),
    (0.551_724_137_931_034_5, 0.857_980_995_127_572_1),
    (0.533_333_333_333_333_3, 0.906_890_595_608_518_6),
    (0.516_129_032_258_064_5, 0.954_196_310_386_875_2),
];

/// `log2(1 + r) = r q(r)` for `|r| <= 1/32`, `q` of degree 5: the Chebyshev interpolant of
/// `log2(1 + r) / r` (mpmath, 40 digits), coefficients from `r^0` up, relative error
/// 4.2e-12 over the interval.
const LOG2_POLY: [f64; 6] = [
    1.442_695_040_894_968_6,
    -0.721_347_520_449_736_4,
    0.480_898_236_281_306,
    -0.360_673_663_372_732_3,
    0.288_841_169_620_992_6,
    -0.240_713_571_202_399_8,
];

/// `2^f = p(f)` for `|f| <= 1/2`, `p` of degree 6: Chebyshev interpolation of `2^f` (near
/// minimax), coefficients from `f^0` up, relative error about `3e-9`.
const EXP2_POLY: [f64; 7] = [
    0.999_999_999_959_538_7,
    0.693_147_206_716_224_8,
    0.240_226_512_136_939_3,
    5.550_327_202_257_523e-2,
    9.618_025_589_966_33e-3,
    1.340_043_694_496_422e-3,
    1.546_973_612_002_724_4e-4,
];

/// `log2 x` for a positive normal f64, to about `4.2e-12` relative (the worst over every
/// 13th f32 and the f32s near 1, against the C library's `log2`): `x = 2^k z` and
/// `z = c (1 + r)` with `c` from a table of 16 ([`LOG2_OFF`], [`LOG2_TABLE`]) and
/// `|r| <= 1/32`, `log2 x = k + log2 c + r q(r)` ([`LOG2_POLY`], Estrin's scheme). No
/// division, and a short chain: the `pow` loop is bound by its latency. Branch-free; other
/// inputs give some number.
#[inline(always)]
fn log2_f64(x: f64) -> f64 {
    let bits = x.to_bits();
    let tmp = bits.wrapping_sub(LOG2_OFF);
    let (invc, logc) = LOG2_TABLE[((tmp >> 48) & 15) as usize];
    // The exponent, as an f64 through the bits of 1.5 * 2^52 plus it.
    let k = f64::from_bits(ROUND_F64_BITS.wrapping_add(((tmp as i64) >> 52) as u64)) - ROUND_F64;
    let z = f64::from_bits(bits.wrapping_sub(tmp & 0xfff0_0000_0000_0000));
    // Rounded once: z has 24 significant bits, the product is exact to 2^-53 of r.
    let r = z.mul_add(invc, -1.0);
    let c = &LOG2_POLY;
    let r2 = r * r;
    let q = c[5].mul_add(r, c[4]).mul_add(
        r2 * r2,
        c[3].mul_add(r, c[2]).mul_add(r2, c[1].mul_add(r, c[0])),
    );
    r.mul_add(q, k + logc)
}

/// `2^t` for `t` in `[-160, 130]`, to about `3e-9` relative (0.05 ulp of an f32): `t = n + f`
/// with `n` the nearest integer, `2^f` by [`EXP2_POLY`] (Estrin's scheme), times `2^n`
/// built from the exponent bits. Branch-free.
#[inline(always)]
fn exp2_f64(t: f64) -> f64 {
    let kn = t + ROUND_F64;
    let f = t - (kn - ROUND_F64);
    let c = &EXP2_POLY;
    let (f2, f4) = (f * f, (f * f) * (f * f));
    let y = c[6]
        .mul_add(f2, c[5].mul_add(f, c[4]))
        .mul_add(f4, c[3].mul_add(f, c[2]).mul_add(f2, c[1].mul_add(f, c[0])));
    // n in [-160, 130]: 2^n is a normal f64.
    let n = kn.to_bits().wrapping_sub(ROUND_F64_BITS);
    y * f64::from_bits(n.wrapping_add(1023) << 52)
}

/// [`pow_loop`] written out with AVX-512's intrinsics: the same operations in the same
/// order (the same bits, which the width test checks), with [`log2_f64`]'s table looked up
/// by a two-register permute; the compiler's vectors of `pow_loop` gather from it, slower
/// than the division the table replaces (1.9 ns an element against 1.1 here, this 0.75).
/// Sixteen elements a step, the rest through `pow_loop`.
///
/// # Safety
///
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pow_avx512(a: &[f32], b: &[f32], out: &mut [f32]) -> bool {
    use std::arch::x86_64::*;
    let splat = _mm512_set1_pd;
    let column = |pick: fn(&(f64, f64)) -> f64, half: usize| {
        let t = &LOG2_TABLE[half * 8..half * 8 + 8];
        _mm512_setr_pd(
            pick(&t[0]),
            pick(&t[1]),
            pick(&t[2]),
            pick(&t[3]),
            pick(&t[4]),
            pick(&t[5]),
            pick(&t[6]),
            pick(&t[7]),
        )
    };
    let inv = (column(|e| e.0, 0), column(|e| e.0, 1));
    let log = (column(|e| e.1, 0), column(|e| e.1, 1));
    let (l, e) = (&LOG2_POLY, &EXP2_POLY);
    let round_bits = _mm512_set1_epi64(ROUND_F64_BITS as i64);
    // `log2_f64`, eight at a time.
    let log2 = |x: __m512d| {
        let bits = _mm512_castpd_si512(x);
        let tmp = _mm512_sub_epi64(bits, _mm512_set1_epi64(LOG2_OFF as i64));
        // The permute reads the low 4 bits of each index.
        let i = _mm512_srli_epi64::<48>(tmp);
        let (invc, logc) = (
            _mm512_permutex2var_pd(inv.0, i, inv.1),
            _mm512_permutex2var_pd(log.0, i, log.1),
        );
        let k = _mm512_add_epi64(round_bits, _mm512_srai_epi64::<52>(tmp));
        let k = _mm512_sub_pd(_mm512_castsi512_pd(k), splat(ROUND_F64));
        let top = _mm512_and_si512(tmp, _mm512_set1_epi64(0xfff0_0000_0000_0000_u64 as i64));
        let z = _mm512_castsi512_pd(_mm512_sub_epi64(bits, top));
        let r = _mm512_fmadd_pd(z, invc, splat(-1.0));
        let r2 = _mm512_mul_pd(r, r);
        let low = _mm512_fmadd_pd(
            _mm512_fmadd_pd(splat(l[3]), r, splat(l[2])),
            r2,
            _mm512_fmadd_pd(splat(l[1]), r, splat(l[0])),
        );
        let high = _mm512_fmadd_pd(splat(l[5]), r, splat(l[4]));
        let q = _mm512_fmadd_pd(high, _mm512_mul_pd(r2, r2), low);
        _mm512_fmadd_pd(r, q, _mm512_add_pd(k, logc))
    };
    // `exp2_f64`, eight at a time.
    let exp2 = |t: __m512d| {
        let kn = _mm512_add_pd(t, splat(ROUND_F64));
        let f = _mm512_sub_pd(t, _mm512_sub_pd(kn, splat(ROUND_F64)));
        let f2 = _mm512_mul_pd(f, f);
        let f4 = _mm512_mul_pd(f2, f2);
        let high = _mm512_fmadd_pd(
            splat(e[6]),
            f2,
            _mm512_fmadd_pd(splat(e[5]), f, splat(e[4])),
        );
        let low = _mm512_fmadd_pd(
            _mm512_fmadd_pd(splat(e[3]), f, splat(e[2])),
            f2,
            _mm512_fmadd_pd(splat(e[1]), f, splat(e[0])),
        );
        let y = _mm512_fmadd_pd(high, f4, low);
        let n = _mm512_sub_epi64(_mm512_castpd_si512(kn), round_bits);
        let scale = _mm512_slli_epi64::<52>(_mm512_add_epi64(n, _mm512_set1_epi64(1023)));
        _mm512_mul_pd(y, _mm512_castsi512_pd(scale))
    };
    // `pow1` but its sign, on eight elements (max and min give the bound where t is NaN,
    // as Rust's do).
    let eight = |a: __m256, b: __m256| {
        let t = _mm512_mul_pd(_mm512_cvtps_pd(b), log2(_mm512_abs_pd(_mm512_cvtps_pd(a))));
        let t = _mm512_min_pd(_mm512_max_pd(t, splat(-160.0)), splat(130.0));
        _mm512_cvtpd_ps(exp2(t))
    };
    let upper = |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let (round, zero) = (_mm512_set1_ps(ROUND_F32), _mm512_setzero_ps());
    let (inf, two22) = (_mm512_set1_ps(f32::INFINITY), _mm512_set1_ps(4_194_304.0));
    let n = out.len().min(a.len()).min(b.len());
    let whole = n - n % 16;
    let mut applies: __mmask16 = 0xffff;
    for i in (0..whole).step_by(16) {
        // SAFETY: `i + 16 <= whole <= n`, within `a` and `b`.
        let (va, vb) = unsafe {
            (
                _mm512_loadu_ps(a.as_ptr().add(i)),
                _mm512_loadu_ps(b.as_ptr().add(i)),
            )
        };
        let low = eight(_mm512_castps512_ps256(va), _mm512_castps512_ps256(vb));
        let high = eight(upper(va), upper(vb));
        let r = _mm512_castpd_si512(_mm512_insertf64x4::<1>(
            _mm512_castps_pd(_mm512_castps256_ps512(low)),
            _mm256_castps_pd(high),
        ));
        let shifted = _mm512_add_ps(vb, round);
        let odd = _mm512_test_epi32_mask(_mm512_castps_si512(shifted), _mm512_set1_epi32(1));
        let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(va, zero);
        let r = _mm512_mask_xor_epi32(r, negative & odd, r, _mm512_set1_epi32(i32::MIN));
        // SAFETY: `i + 16 <= whole <= n`, within `out`.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_castsi512_ps(r)) };
        // `pow1_applies`.
        let b_abs = _mm512_abs_ps(vb);
        let finite_b = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(b_abs, inf);
        let integer_b = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(b_abs, two22)
            & _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_sub_ps(shifted, round), vb);
        let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(va, zero)
            & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(va, inf)
            & finite_b;
        let negative = negative
            & _mm512_cmp_ps_mask::<_CMP_GT_OQ>(va, _mm512_set1_ps(f32::NEG_INFINITY))
            & integer_b;
        applies &= positive | negative;
    }
    let rest = pow_loop(&a[whole..n], &b[whole..n], &mut out[whole..n]);
    applies == 0xffff && rest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bit-pattern stride of the accuracy tests: every 509th f32 (about 8.4 million);
    /// under Miri, which checks the unsafe code and not the numbers, about 256 of them.
    const STRIDE: u32 = if cfg!(miri) { 16_777_259 } else { 509 };
    /// Points of the dense grids (200 under Miri).
    const DENSE: usize = if cfg!(miri) { 200 } else { 2_000_000 };
    /// The unary ops with a vectorised body.
    const VECTORISED: [UnaryOp; 8] = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::Softplus,
    ];

    /// Distance in units in the last place between two finite or equal f32s.
    fn ulps(a: f32, b: f32) -> u64 {
        if a == b || (a.is_nan() && b.is_nan()) {
            return 0;
        }
        let key = |v: f32| {
            let bits = v.to_bits() as i64;
            if bits < 0 {
                (1i64 << 31) - 1 - bits
            } else {
                bits
            }
        };
        (key(a) - key(b)).unsigned_abs()
    }

    /// Every 509th f32 bit pattern (both signs, every exponent: about 8.4 million values)
    /// and a dense grid over the range where e^x is finite and not 0, against f64's `exp`
    /// rounded to f32.
    #[test]
    fn exp_is_within_two_ulp_over_every_f32() {
        let check = |x: f32, worst: &mut (u64, f32)| {
            let mut got = [0.0f32];
            exp_f32(Some(&[x]), &mut got);
            let want = (f64::from(x)).exp() as f32;
            let d = ulps(got[0], want);
            assert!(
                d <= 2,
                "exp({x:e}) = {:e}, expected {want:e} ({d} ulp)",
                got[0]
            );
            if d > worst.0 {
                *worst = (d, x);
            }
        };
        let mut worst = (0, 0.0);
        let mut bits = 0u32;
        loop {
            check(f32::from_bits(bits), &mut worst);
            match bits.checked_add(STRIDE) {
                Some(b) => bits = b,
                None => break,
            }
        }
        for i in 0..=DENSE {
            check(-104.0 + i as f32 * (193.0 / DENSE as f32), &mut worst);
        }
        for x in [
            0.0, -0.0, 1.0, -1.0, 88.72283, 88.72284, -87.33654, -103.97208, -103.97209,
        ] {
            check(x, &mut worst);
        }
        println!("worst: {} ulp at {:e}", worst.0, worst.1);
    }

    /// Every 509th f32 bit pattern (both signs, every exponent: about 8.4 million values)
    /// and a dense grid of `[lo, hi]`.
    fn inputs(lo: f32, hi: f32) -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX / STRIDE)
            .map(|k| f32::from_bits(k * STRIDE))
            .collect();
        let n = DENSE;
        xs.extend((0..=n).map(|i| lo + (hi - lo) * (i as f32 / n as f32)));
        xs
    }

    /// `op` through the dispatched loop within `bound(x)` ulp of the table's formula in
    /// f64, rounded to f32, over [`inputs`]; NaN exactly where the table gives NaN.
    fn holds(op: UnaryOp, (lo, hi): (f32, f32), bound: impl Fn(f32) -> u64) {
        let xs = inputs(lo, hi);
        let mut got = vec![0.0f32; xs.len()];
        assert!(
            unary::<f32>(op, Some(&xs), &mut got),
            "{op:?} is vectorised"
        );
        let mut worst = (0, 0.0f32);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = op.apply_real::<f64>(f64::from(x)) as f32;
            let d = ulps(g, want);
            let b = bound(x);
            assert!(
                d <= b && g.is_nan() == want.is_nan(),
                "{op:?}({x:e}) = {g:e}, expected {want:e} ({d} ulp, bound {b})"
            );
            if d > worst.0 {
                worst = (d, x);
            }
        }
        println!("{op:?}: worst {} ulp at {:e}", worst.0, worst.1);
    }

    /// `log` and `log1p` within 2 ulp (the table's budget is 3).
    #[test]
    fn logs_are_within_two_ulp() {
        holds(UnaryOp::Log, (0.0, 4.0), |_| 2);
        holds(UnaryOp::Log1p, (-1.0, 3.0), |_| 2);
    }

    /// The activations on the vectorised exp stay within 3 ulp (the table's budget is 4),
    /// GELU within its budget at each `x`.
    #[test]
    fn the_activations_hold_the_tables_budget_with_room() {
        holds(UnaryOp::Sigmoid, (-110.0, 20.0), |_| 3);
        holds(UnaryOp::Silu, (-110.0, 20.0), |_| 3);
        holds(UnaryOp::Tanh, (-10.0, 10.0), |_| 3);
        holds(UnaryOp::Softplus, (-110.0, 20.0), |_| 3);
        holds(UnaryOp::Gelu, (-14.0, 10.0), |x| {
            u64::from(UnaryOp::Gelu.ulps_at(f64::from(x)))
        });
    }

    /// At special inputs each vectorised op gives what the table's body gives: NaN, the
    /// same infinity, the same signed zero.
    #[test]
    // Exact bits of NaNs and of libm at subnormals: Miri randomises NaN signs and adds
    // error to the math library, by design.
    #[cfg_attr(
        miri,
        ignore = "NaN bits and libm results are nondeterministic under Miri"
    )]
    fn special_values_follow_the_table() {
        let xs = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
            1e-45,
            -1e-45,
            1e30,
            -1e30,
            f32::MAX,
            f32::MIN,
            -200.0,
            200.0,
        ];
        for op in VECTORISED {
            let mut got = [0.0f32; 15];
            assert!(unary::<f32>(op, Some(&xs), &mut got));
            for (&x, &g) in xs.iter().zip(&got) {
                let want = op.apply_real::<f32>(x);
                if want.is_nan() || want.is_infinite() || want == 0.0 {
                    assert!(
                        g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                        "{op:?}({x:e}) = {g:e}, the table gives {want:e}"
                    );
                } else {
                    assert!(ulps(g, want) <= 8, "{op:?}({x:e}) = {g:e} vs {want:e}");
                }
            }
        }
    }

    /// Softmax, log-softmax and cross-entropy with the vectorised exp are the table's
    /// within a few ulp per element (the exps differ by at most one ulp each; near 0, where
    /// `e/s - 1` or `d - ln s` cancels, within `2^-22`), NaN and infinite rows and an
    /// out-of-range label included, in place the same bits as out of place.
    #[test]
    // Exact bits of NaNs and of libm at subnormals: Miri randomises NaN signs and adds
    // error to the math library, by design.
    #[cfg_attr(
        miri,
        ignore = "NaN bits and libm results are nondeterministic under Miri"
    )]
    fn row_ops_match_the_table() {
        let cols = 37;
        let mut x: Vec<f32> = (0..cols * 9)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.05 - 25.0)
            .collect();
        x[cols] = f32::NAN;
        x[2 * cols + 3] = f32::INFINITY;
        x[3 * cols..4 * cols].fill(f32::NEG_INFINITY);
        x[4 * cols + 5] = 80.0;
        let near = |g: f32, w: f32| {
            ulps(g, w) <= 3 || (g - w).abs() <= 2.4e-7 || (g.is_nan() && w.is_nan())
        };
        for log in [false, true] {
            let mut want = vec![0.0f32; x.len()];
            crate::softmax_rows(log, Some(&x), cols, &mut want);
            let mut got = vec![0.0f32; x.len()];
            assert!(softmax(log, Some(&x), cols, &mut got));
            let mut inplace = x.clone();
            assert!(softmax::<f32>(log, None, cols, &mut inplace));
            for i in 0..x.len() {
                assert!(
                    near(got[i], want[i]),
                    "log {log} [{i}]: {} vs {}",
                    got[i],
                    want[i]
                );
                assert_eq!(inplace[i].to_bits(), got[i].to_bits(), "[{i}] in place");
            }
        }
        let rows = x.len() / cols;
        let labels: Vec<u32> = (0..rows as u32).map(|r| (r * 11) % 40).collect();
        let (mut lw, mut gw) = (vec![0.0f32; rows], vec![0.0f32; x.len()]);
        crate::cross_entropy_rows(&x, &labels, cols, &mut lw, Some(&mut gw));
        let (mut l, mut g, mut l2) = (vec![0.0f32; rows], vec![0.0f32; x.len()], vec![0.0; rows]);
        assert!(cross_entropy(&x, &labels, cols, &mut l, Some(&mut g)));
        assert!(cross_entropy(&x, &labels, cols, &mut l2, None));
        for r in 0..rows {
            assert!(near(l[r], lw[r]), "loss [{r}]: {} vs {}", l[r], lw[r]);
            assert_eq!(
                l[r].to_bits(),
                l2[r].to_bits(),
                "loss [{r}] without the gradient"
            );
        }
        for i in 0..x.len() {
            assert!(near(g[i], gw[i]), "grad [{i}]: {} vs {}", g[i], gw[i]);
        }
        assert!(l[7].is_nan() && g[7 * cols..8 * cols].iter().all(|g| g.is_nan()));
        // Long rows (the exps summed a buffer at a time without the gradient, stored with
        // it): the same sums, so the same losses, bit for bit.
        let cols = 1000;
        let x: Vec<f32> = (0..cols * 3)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.02 - 10.0)
            .collect();
        let labels = [3, 999, 500];
        let (mut l, mut l2, mut g) = ([0.0f32; 3], [0.0f32; 3], vec![0.0f32; x.len()]);
        assert!(cross_entropy(&x, &labels, cols, &mut l, Some(&mut g)));
        assert!(cross_entropy(&x, &labels, cols, &mut l2, None));
        assert_eq!(l.map(f32::to_bits), l2.map(f32::to_bits));
    }

    /// `pow`'s `log2` within its stated `4.2e-12` relative of the C library's `log2` (itself
    /// within an f64 ulp) over every 1,021st positive f32 (every exponent, the subnormals
    /// included) and the 200,000 f32s nearest 1, where `log2` is near 0; and `2^t` within
    /// its stated `3e-9` over `[-160, 130]`, against `exp2`.
    #[test]
    fn pow_steps_hold_their_stated_error() {
        let stride = if cfg!(miri) { STRIDE } else { 1021 };
        let near_one = if cfg!(miri) { 64 } else { 100_000 };
        let rel = |got: f64, want: f64| ((got - want) / want).abs();
        let worst = (1..0x7f80_0000u32 / stride)
            .map(|k| f32::from_bits(k * stride))
            .chain((1..=near_one).flat_map(|j| {
                let step = j as f32 * f32::EPSILON;
                [1.0 + step, 1.0 - step / 2.0]
            }))
            .map(|a| {
                let x = f64::from(a);
                (rel(log2_f64(x), x.log2()), a)
            })
            .fold((0.0, 0.0), |w, e| if e.0 > w.0 { e } else { w });
        assert!(
            worst.0 <= 4.2e-12,
            "log2 off by {:e} at {:e}",
            worst.0,
            worst.1
        );
        for (i, &(invc, logc)) in LOG2_TABLE.iter().enumerate() {
            assert_eq!(invc, 1.0 / (1.0 + i as f64 / 16.0), "1 / c of interval {i}");
            assert!(
                (logc + invc.log2()).abs() <= 1.2e-16,
                "log2 c of interval {i}"
            );
        }
        let steps = if cfg!(miri) { 1000 } else { 1_000_000 };
        for k in 0..=steps {
            let t = -160.0 + 290.0 * k as f64 / steps as f64;
            let e = rel(exp2_f64(t), t.exp2());
            assert!(e <= 3e-9, "2^{t} off by {e:e}");
        }
    }

    /// `pow` through the vectorised body: within 1 ulp of f64's (the budget is 8) over
    /// every 65,521st f32 bit pattern as the base (both signs, every exponent) against
    /// exponents of every kind, and bases near 1 against large exponents; where the body
    /// does not apply (zeros, infinities, NaNs, a negative base with a non-integer
    /// exponent), the bits of C's `powf`, the table's.
    #[test]
    fn pow_is_within_one_ulp() {
        let stride = if cfg!(miri) { STRIDE } else { 65_521 };
        let mut bases: Vec<f32> = (0..=u32::MAX / stride)
            .map(|k| f32::from_bits(k * stride))
            .collect();
        bases.extend((0..4096).map(|k| 1.0 + (k as f32 - 2048.0) * f32::EPSILON));
        let exps = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.0,
            3.0,
            -3.0,
            0.5,
            -0.5,
            1.5,
            7.0,
            10.25,
            -2.5,
            1e-3,
            0.1,
            33.3,
            -100.0,
            12_345.679,
            -1e5,
            4_194_303.0,
            4_194_304.0,
            1e10,
            1e-30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let mut worst = (0, 0.0f32, 0.0f32);
        for &b in &exps {
            let mut got = vec![0.0; bases.len()];
            let rhs = RhsSlice::Scalar(b);
            assert!(binary::<f32>(BinaryOp::Pow, Some(&bases), rhs, 1, &mut got));
            for (&a, &g) in bases.iter().zip(&got) {
                if pow1_applies(a, b) {
                    let want = f64::from(a).powf(f64::from(b)) as f32;
                    let d = ulps(g, want);
                    assert!(d <= 1, "pow({a:e}, {b:e}) = {g:e}, expected {want:e}");
                    if d > worst.0 {
                        worst = (d, a, b);
                    }
                } else {
                    let want = a.powf(b);
                    assert!(
                        g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                        "pow({a:e}, {b:e}) = {g:e}, powf gives {want:e}"
                    );
                }
            }
        }
        println!(
            "pow: worst {} ulp at ({:e}, {:e})",
            worst.0, worst.1, worst.2
        );
    }

    /// `pow`'s four forms and in place give, element by element, the bits of the scalar
    /// form on that element alone.
    #[test]
    fn pow_forms_agree() {
        let (rows, cols) = (7, 301);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37) % 101) as f32 * 0.1 - 3.0)
            .collect();
        let row: Vec<f32> = (0..cols).map(|j| (j % 9) as f32 * 0.5 - 2.0).collect();
        let col: Vec<f32> = (0..rows).map(|r| r as f32 - 2.5).collect();
        let b: Vec<f32> = (0..rows * cols)
            .map(|i| (i % 13) as f32 * 0.75 - 4.0)
            .collect();
        let one = |a: f32, b: f32| {
            let mut o = [0.0f32];
            assert!(binary::<f32>(
                BinaryOp::Pow,
                Some(&[a]),
                RhsSlice::Scalar(b),
                1,
                &mut o
            ));
            o[0]
        };
        for rhs in [
            RhsSlice::Array(&b[..]),
            RhsSlice::Row(&row[..]),
            RhsSlice::Col(&col[..]),
            RhsSlice::Scalar(1.75),
        ] {
            let mut got = vec![0.0f32; x.len()];
            assert!(binary::<f32>(BinaryOp::Pow, Some(&x), rhs, cols, &mut got));
            let mut inplace = x.clone();
            assert!(binary::<f32>(BinaryOp::Pow, None, rhs, cols, &mut inplace));
            for i in 0..x.len() {
                let e = match rhs {
                    RhsSlice::Array(b) => b[i],
                    RhsSlice::Row(v) => v[i % cols],
                    RhsSlice::Col(v) => v[i / cols],
                    RhsSlice::Scalar(s) => s,
                };
                let want = one(x[i], e);
                assert!(
                    got[i].to_bits() == want.to_bits() || (got[i].is_nan() && want.is_nan()),
                    "{rhs:?} [{i}]"
                );
                assert!(
                    inplace[i].to_bits() == got[i].to_bits() || got[i].is_nan(),
                    "{rhs:?} [{i}] in place"
                );
            }
        }
    }

    /// f16 and bf16 through the f32 bodies: at every one of their 65,536 bit patterns, within
    /// one 16-bit ulp of the table's scalar body (the same rounding of a result at most 3 f32
    /// ulp away), the same infinities, zeros and NaNs; in place the same bits.
    #[cfg(feature = "half")]
    #[test]
    fn sixteen_bit_floats_follow_the_table() {
        use crate::half::{bf16, f16};
        fn check<T: Float>(from_bits: impl Fn(u16) -> T, bits: impl Fn(T) -> u16) {
            let xs: Vec<T> = (0..=u16::MAX).map(&from_bits).collect();
            for op in VECTORISED {
                let mut got = xs.clone();
                assert!(unary::<T>(op, None, &mut got));
                let mut out = vec![from_bits(0); xs.len()];
                assert!(unary::<T>(op, Some(&xs), &mut out));
                let mut want = vec![from_bits(0); xs.len()];
                op.map_float(Some(&xs), &mut want);
                for i in 0..xs.len() {
                    let (g, w) = (got[i].to_f64(), want[i].to_f64());
                    assert_eq!(bits(got[i]), bits(out[i]), "{op:?} in place at {i:#x}");
                    if w.is_nan() || g.is_nan() || w.is_infinite() || w == 0.0 {
                        assert!(
                            bits(got[i]) == bits(want[i]) || (g.is_nan() && w.is_nan()),
                            "{op:?}({}) = {g}, the table gives {w}",
                            xs[i].to_f64()
                        );
                    } else {
                        // Adjacent values of one sign differ by one in their bits.
                        let d = (i32::from(bits(got[i])) - i32::from(bits(want[i]))).abs();
                        assert!(
                            d <= 1,
                            "{op:?}({}) = {g}, the table gives {w}",
                            xs[i].to_f64()
                        );
                    }
                }
            }
        }
        check(f16::from_bits, f16::to_bits);
        check(bf16::from_bits, bf16::to_bits);
    }

    /// Every vector width gives the same bits: the plain loop (SSE2 on x86-64, its fused
    /// multiply-adds the C library's) against its AVX2 and AVX-512 instantiations where this
    /// CPU has them, on every 14,327th f32 bit
    /// pattern (about 300,000, specials included) for each unary op and for `pow` (each
    /// pattern against a few exponents). Where neither is available it checks nothing more
    /// and says so.
    #[test]
    fn every_vector_width_gives_the_same_bits() {
        let stride = if cfg!(miri) { STRIDE } else { 14_327 };
        let xs: Vec<f32> = (0..=u32::MAX / stride)
            .map(|k| f32::from_bits(k * stride))
            .collect();
        let same = |what: &str, a: &[f32], b: &[f32]| {
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{what} at {:e}", xs[i]);
            }
        };
        fn widths<B: Body>(name: &str, xs: &[f32], same: &impl Fn(&str, &[f32], &[f32])) {
            let mut plain = vec![0.0f32; xs.len()];
            map_loop::<B>(Some(xs), &mut plain);
            #[cfg(target_arch = "x86_64")]
            {
                let mut got = vec![0.0f32; xs.len()];
                if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA, checked just above.
                    unsafe { map_avx2::<B>(Some(xs), &mut got) };
                    same(&format!("{name} AVX2"), &plain, &got);
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    unsafe { map_avx512::<B>(Some(xs), &mut got) };
                    same(&format!("{name} AVX-512"), &plain, &got);
                }
            }
        }
        widths::<Exp>("exp", &xs, &same);
        widths::<Log>("log", &xs, &same);
        widths::<Log1p>("log1p", &xs, &same);
        widths::<Tanh>("tanh", &xs, &same);
        widths::<Sigmoid>("sigmoid", &xs, &same);
        widths::<Silu>("silu", &xs, &same);
        widths::<Gelu>("gelu", &xs, &same);
        widths::<Softplus>("softplus", &xs, &same);
        // pow (written out by hand in AVX-512): every base against one exponent, then the
        // positive finite bases, 1 in place of the others (`pow1` applies to all, so that
        // the flag is true), against exponents that change from element to element; the
        // bits and the flag.
        let positive: Vec<f32> = xs
            .iter()
            .map(|&x| {
                if x > 0.0 && pow1_applies(x, 1.0) {
                    x
                } else {
                    1.0
                }
            })
            .collect();
        let mixed = [2.0f32, -3.0, 0.5, 1.5, -2.75, 33.3, -1e5, 7.0];
        let cases = [2.0f32, -3.0, 0.5, 1.5, -2.75, 33.3]
            .map(|b| (format!("pow(x, {b})"), xs.clone(), vec![b; xs.len()], false))
            .into_iter()
            .chain([(
                "pow(positive x, mixed)".to_string(),
                positive.clone(),
                (0..positive.len())
                    .map(|i| mixed[i % mixed.len()])
                    .collect(),
                true,
            )]);
        for (name, bases, bs, applies) in cases {
            let mut plain = vec![0.0f32; bases.len()];
            let all = pow_loop(&bases, &bs, &mut plain);
            assert_eq!(all, applies, "{name}: whether pow1 applies to all");
            #[cfg(target_arch = "x86_64")]
            {
                let mut got = vec![0.0f32; bases.len()];
                if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA, checked just above.
                    let flag = unsafe { pow_avx2(&bases, &bs, &mut got) };
                    assert_eq!(flag, all, "{name} AVX2");
                    same(&format!("{name} AVX2"), &plain, &got);
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    let flag = unsafe { pow_avx512(&bases, &bs, &mut got) };
                    assert_eq!(flag, all, "{name} AVX-512");
                    same(&format!("{name} AVX-512"), &plain, &got);
                }
            }
        }
        // The arithmetic ops against the table's body, with every form of right-hand side
        // (NaNs of different payloads on both sides included). Where both operands are NaN
        // the result is one of them, quieted, and which one is not fixed (IEEE 754 leaves it
        // open, and the compiler may swap the operands of a sum or product): there both
        // must be NaN; everywhere else, the same bits.
        let (rev, cols) = (xs.iter().rev().copied().collect::<Vec<f32>>(), 509);
        let same_arith = |what: &str, r: RhsSlice<'_, f32>, a: &[f32], b: &[f32]| {
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                let y = match r {
                    RhsSlice::Array(v) => v[i],
                    RhsSlice::Scalar(s) => s,
                    RhsSlice::Row(v) => v[i % cols],
                    RhsSlice::Col(v) => v[i / cols],
                };
                let both = xs[i].is_nan() && y.is_nan();
                assert!(
                    a.to_bits() == b.to_bits() || (both && a.is_nan() && b.is_nan()),
                    "{what} at {:e}, {y:e}: {a:e} against {b:e}",
                    xs[i]
                );
            }
        };
        let rhs = [
            RhsSlice::Array(&rev[..]),
            RhsSlice::Scalar(-2.5),
            RhsSlice::Scalar(f32::from_bits(0x7fc0_0123)),
            RhsSlice::Row(&rev[..cols]),
            RhsSlice::Col(&rev[..xs.len().div_ceil(cols)]),
        ];
        for (op, r) in [Add, Sub, Mul, Div]
            .into_iter()
            .flat_map(|op| rhs.iter().map(move |r| (op, *r)))
        {
            let mut plain = vec![0.0f32; xs.len()];
            op.map_float(Some(&xs), r, cols, &mut plain);
            #[cfg(target_arch = "x86_64")]
            {
                let mut got = vec![0.0f32; xs.len()];
                if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA, checked just above.
                    unsafe { arith_avx2(op, Some(&xs), r, cols, &mut got) };
                    same_arith(&format!("{op:?} AVX2"), r, &plain, &got);
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    unsafe { arith_avx512(op, Some(&xs), r, cols, &mut got) };
                    same_arith(&format!("{op:?} AVX-512"), r, &plain, &got);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if !has_avx2_fma() {
            println!("SKIPPED: no AVX2 with FMA or AVX-512 on this CPU, only the plain loop ran");
        }
        #[cfg(not(target_arch = "x86_64"))]
        println!("SKIPPED: one vector width on this architecture");
    }

    /// `tanh` densely across the joins of its reduction (`2|x| = (k + 1/2) ln 2`, where
    /// `n` steps) near 0, and up to where it rounds to 1 and the clamp at `2|x| = 20`.
    #[test]
    fn tanh_holds_across_its_steps() {
        let ln2 = std::f32::consts::LN_2;
        for k in 0..4 {
            let at = (k as f32 + 0.5) * ln2 / 2.0;
            holds(UnaryOp::Tanh, (at - 0.01, at + 0.01), |_| 3);
        }
        holds(UnaryOp::Tanh, (8.5, 10.5), |_| 3);
        holds(UnaryOp::Tanh, (-1e-3, 1e-3), |_| 3);
    }

    #[test]
    fn specials_and_in_place_and_simd_agree() {
        let x = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            0.5,
            -200.0,
            89.0,
        ];
        let mut out = [0.0f32; 8];
        exp_f32(Some(&x), &mut out);
        assert!(out[0].is_nan());
        assert_eq!(out[1], f32::INFINITY);
        assert_eq!(out[2], 0.0);
        assert_eq!(out[3], f32::INFINITY);
        assert_eq!(out[4], 0.0);
        assert_eq!(out[6], 0.0);
        assert_eq!(out[7], f32::INFINITY);
        // In place, and the plain loop (whatever this CPU dispatches to): the same bits.
        let mut inplace = x;
        exp_f32(None, &mut inplace);
        let mut plain = [0.0f32; 8];
        map_loop::<Exp>(Some(&x), &mut plain);
        for i in 0..8 {
            assert_eq!(inplace[i].to_bits(), out[i].to_bits(), "{i}");
            assert_eq!(plain[i].to_bits(), out[i].to_bits(), "{i}");
        }
    }
}
