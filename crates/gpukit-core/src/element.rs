//! Element types: what a device array may hold, and the arithmetic the built-in ops use.
//!
//! [`Element`] is plain data (any bit pattern valid, no padding) so bytes can move between
//! host and device without conversion. [`Numeric`] adds the scalar arithmetic that defines
//! the built-in ops' results on every backend, through its compute type ([`Arith`]);
//! [`Float`] is a numeric element whose compute type has the math functions ([`Real`]).
//!
//! Integer semantics, identical on every backend: `add`, `sub`, `mul`, `sum` and `dot` wrap;
//! `div` truncates toward zero, wraps for `MIN / -1` and gives 0 for a division by zero.

use std::fmt;

use crate::optable::{BinaryOp, RhsSlice, UnaryOp};

pub use crate::dtype::{DType, DTypeVisitor, ParseDTypeError};

/// Plain data that can live in device memory.
///
/// # Safety
///
/// Implementors must guarantee:
/// - every bit pattern of `size_of::<Self>()` bytes is a valid value;
/// - the type has no padding bytes and no interior pointers or references;
/// - `DTYPE` names the type's representation: `DType::F32` means an IEEE-754 binary32 in
///   native byte order, `DType::I32` a two's-complement 32-bit integer, and so on, so that
///   backends may treat the memory as that type (`DTYPE.size() == size_of::<Self>()`).
///
/// The workspace reinterprets device bytes as `Self` and `Self` as bytes on these grounds.
pub unsafe trait Element:
    Copy + Send + Sync + PartialEq + fmt::Debug + Default + 'static
{
    /// The runtime name of this type.
    const DTYPE: DType;
}

/// The arithmetic an element computes in: the element type itself, except f16 and bf16,
/// which compute in f32 (as CUDA's `__half` math does). The bodies of the op table
/// ([`crate::UnaryOp`], [`crate::BinaryOp`]) are written over it.
///
/// Integers wrap (`add`, `sub`, `mul`, `neg`, `abs`), divide toward zero with `x / 0 == 0`
/// and `MIN / -1 == MIN`. Floats follow IEEE-754 without fused multiply-add; `min` and
/// `max` ignore a NaN operand (C's `fmin`/`fmax`) and return the first operand when the two
/// compare equal.
pub trait Arith: Copy + PartialOrd + Send + Sync + fmt::Debug + 'static {
    /// The additive identity.
    const ZERO: Self;
    /// The multiplicative identity.
    const ONE: Self;
    /// `self + rhs`.
    fn add(self, rhs: Self) -> Self;
    /// `self - rhs`.
    fn sub(self, rhs: Self) -> Self;
    /// `self * rhs`.
    fn mul(self, rhs: Self) -> Self;
    /// `self / rhs`.
    fn div(self, rhs: Self) -> Self;
    /// `-self`.
    fn neg(self) -> Self;
    /// `|self|`.
    fn abs(self) -> Self;
    /// Whether this is a NaN (never, for integers).
    fn is_nan(self) -> bool;
    /// The smaller operand; a NaN loses to a number.
    fn min(self, rhs: Self) -> Self {
        if rhs < self || (self.is_nan() && !rhs.is_nan()) {
            rhs
        } else {
            self
        }
    }
    /// The larger operand; a NaN loses to a number.
    fn max(self, rhs: Self) -> Self {
        if rhs > self || (self.is_nan() && !rhs.is_nan()) {
            rhs
        } else {
            self
        }
    }
    /// `then` where `self > rhs`, else `otherwise` (so a NaN takes `otherwise`). The op
    /// table's bodies branch only through it: tracing a body over a symbolic value
    /// ([`UnaryOp::body`](crate::UnaryOp::body)) records the choice instead of making it.
    fn if_gt(self, rhs: Self, then: Self, otherwise: Self) -> Self {
        if self > rhs {
            then
        } else {
            otherwise
        }
    }
}

/// The math functions of float compute types (f32 and f64), through Rust's `std`.
pub trait Real: Arith {
    /// Rounds an f64 to this type.
    fn from_f64(v: f64) -> Self;
    /// Widens to f64 (exact).
    fn to_f64(self) -> f64;
    /// Square root (correctly rounded).
    fn sqrt(self) -> Self;
    /// `e^self`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// `ln(1 + self)`, accurate near 0.
    fn ln_1p(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// `self^e`.
    fn powf(self, e: Self) -> Self;
}

/// An element value widened for [`crate::Stream::cast`]: integers to i128 (exact), floats
/// to f64 (exact).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wide {
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
}

/// An element with arithmetic: the scalar semantics of every built-in op.
pub trait Numeric: Element + PartialOrd + crate::kernel::KernelNumeric {
    /// The additive identity.
    const ZERO: Self;
    /// The type arithmetic runs in ([`Arith`]).
    type Compute: Arith;
    /// Widens to the compute type (exact).
    fn load(self) -> Self::Compute;
    /// Rounds from the compute type (to nearest even for f16 and bf16).
    fn store(c: Self::Compute) -> Self;
    /// `self + rhs` (wrapping for integers).
    fn add(self, rhs: Self) -> Self {
        Self::store(self.load().add(rhs.load()))
    }
    /// `self - rhs` (wrapping for integers).
    fn sub(self, rhs: Self) -> Self {
        Self::store(self.load().sub(rhs.load()))
    }
    /// `self * rhs` (wrapping for integers).
    fn mul(self, rhs: Self) -> Self {
        Self::store(self.load().mul(rhs.load()))
    }
    /// `self / rhs`; for integers 0 when `rhs == 0` and wrapping for `MIN / -1`.
    fn div(self, rhs: Self) -> Self {
        Self::store(self.load().div(rhs.load()))
    }
    /// The larger of the two; for floats a NaN loses to a number (C's `fmax`).
    fn maximum(self, rhs: Self) -> Self {
        Self::store(self.load().max(rhs.load()))
    }
    /// The smaller of the two; for floats a NaN loses to a number (C's `fmin`).
    fn minimum(self, rhs: Self) -> Self {
        Self::store(self.load().min(rhs.load()))
    }
    /// `self * x + y`, one element of the built-in `axpy`: the product and the sum are each
    /// rounded in the compute type (no fused multiply-add), and f16 and bf16 round to 16
    /// bits once, at the end, as the CUDA kernels do.
    fn axpy(self, x: Self, y: Self) -> Self {
        Self::store(self.load().mul(x.load()).add(y.load()))
    }
    /// The sum of a slice. Floats accumulate in f64 in the order [`SUM_CHUNK`] defines and
    /// round once; integers wrap.
    fn sum(xs: &[Self]) -> Self;
    /// The dot product of two slices of equal length, accumulated as [`Numeric::sum`].
    fn dot(xs: &[Self], ys: &[Self]) -> Self;
    /// Lossy conversion to f64 (for references and tolerances).
    fn to_f64(self) -> f64;
    /// Conversion from f64: rounding for floats, saturating truncation for integers.
    fn from_f64(v: f64) -> Self;
    /// Widens exactly, for casts.
    fn to_wide(self) -> Wide;
    /// The cast of a widened value: integers wrap from integers (two's complement
    /// truncation) and saturate from floats (NaN to 0, truncation toward zero); floats round
    /// to nearest even (once, from the exact value).
    fn from_wide(w: Wide) -> Self;
    /// The CPU body of the table's unary op `op` over `out` (in place where `src` is
    /// `None`): the reference's bits, on vectors and across cores where that is faster.
    #[doc(hidden)]
    fn __unary(op: UnaryOp, src: Option<&[Self]>, out: &mut [Self]);
    /// The CPU body of the table's binary op `op` (see [`Numeric::__unary`]).
    #[doc(hidden)]
    fn __binary(
        op: BinaryOp,
        src: Option<&[Self]>,
        rhs: RhsSlice<'_, Self>,
        cols: usize,
        out: &mut [Self],
    );
}

/// Elements per partial sum of a float `sum`, `mean` or `dot` (and of any type's `mean`):
/// each chunk of this many consecutive elements is summed in f64 in [`SUM_PARTIALS`]
/// interleaved partial sums ([`chunk_sum_of`]), then the chunks' sums are added in order, left
/// to right. The order is fixed, whatever the machine and its cores, so results are
/// reproducible: it is the contract every backend's float sums are held to
/// ([`ordered_sum`]), and a backend may sum the chunks on several cores at once (the CPU
/// backend does) and get the same bits.
pub const SUM_CHUNK: usize = 1 << 16;

/// Partial sums per chunk of [`SUM_CHUNK`]: element `i` of a chunk goes to partial `i % 32`,
/// each partial adds its elements in order from `-0.0`, and the partials are then added
/// pairwise (`p[i] + p[i + 16]` for `i < 16`, then `+ p[i + 8]` for `i < 8`, ..., down to
/// one). Independent chains that vectorise (and that a core overlaps), and a smaller
/// rounding error than one chain's.
pub const SUM_PARTIALS: usize = 32;

/// The f64 sum of one chunk's elements, widened to f64, in the order [`SUM_PARTIALS`]
/// defines (`-0.0` when empty): a loop over whole rows of [`SUM_PARTIALS`] that compilers
/// vectorise.
#[inline(always)]
pub fn chunk_sum_of<T: Numeric>(xs: &[T]) -> f64 {
    let mut p = [-0.0f64; SUM_PARTIALS];
    add_to_partials(&mut p, xs);
    combine_partials(p)
}

/// Adds `xs`, widened to f64, to the partial sums `p` as [`chunk_sum_of`] does, element `i` of
/// `xs` to `p[i % SUM_PARTIALS]`: a chunk given in pieces whose lengths (all but the last)
/// are multiples of [`SUM_PARTIALS`] gets the partials it gets whole. Vectorisable.
#[inline(always)]
pub fn add_to_partials<T: Numeric>(p: &mut [f64; SUM_PARTIALS], xs: &[T]) {
    let rows = xs.chunks_exact(SUM_PARTIALS);
    let rest = rows.remainder();
    for row in rows {
        for (p, x) in p.iter_mut().zip(row) {
            *p += x.to_f64();
        }
    }
    for (p, x) in p.iter_mut().zip(rest) {
        *p += x.to_f64();
    }
}

/// [`chunk_sum_of`] of the products of two chunks' elements (their common length), widened to
/// f64, vectorisable as [`chunk_sum_of`].
#[inline(always)]
pub fn chunk_dot_of<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    let n = xs.len().min(ys.len());
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let mut p = [-0.0f64; SUM_PARTIALS];
    let rows = xs
        .chunks_exact(SUM_PARTIALS)
        .zip(ys.chunks_exact(SUM_PARTIALS));
    for (x, y) in rows {
        for ((p, x), y) in p.iter_mut().zip(x).zip(y) {
            *p += x.to_f64() * y.to_f64();
        }
    }
    let whole = n - n % SUM_PARTIALS;
    for ((p, x), y) in p.iter_mut().zip(&xs[whole..]).zip(&ys[whole..]) {
        *p += x.to_f64() * y.to_f64();
    }
    combine_partials(p)
}

/// The partials added pairwise, halving: `p[i] + p[i + w]` for `w` = 16, 8, 4, 2, 1 (the
/// end of [`chunk_sum_of`]).
#[inline(always)]
pub fn combine_partials(mut p: [f64; SUM_PARTIALS]) -> f64 {
    let mut w = SUM_PARTIALS / 2;
    while w > 0 {
        for i in 0..w {
            p[i] += p[i + w];
        }
        w /= 2;
    }
    p[0]
}

/// The f64 sum of `xs` in the order [`SUM_CHUNK`] defines: each chunk's [`chunk_sum_of`], then
/// the chunks' sums in order (`-0.0` when empty, as Rust's float `sum`). The value every
/// float `sum` and `mean` rounds; a backend that computes it its own way gives it to
/// [`crate::ReduceOp::of_sum`].
pub fn ordered_sum<T: Numeric>(xs: &[T]) -> f64 {
    add_in_order(xs.chunks(SUM_CHUNK).map(chunk_sum_of))
}

/// The f64 sum of the products of `xs` and `ys` (their common length) in the order
/// [`SUM_CHUNK`] defines (`-0.0` when empty): the value every float `dot` rounds.
pub(crate) fn ordered_dot<T: Numeric>(xs: &[T], ys: &[T]) -> f64 {
    let n = xs.len().min(ys.len());
    let chunks = xs[..n].chunks(SUM_CHUNK).zip(ys[..n].chunks(SUM_CHUNK));
    add_in_order(chunks.map(|(x, y)| chunk_dot_of(x, y)))
}

/// The chunks' sums added left to right (`-0.0` when there are none: an empty input).
fn add_in_order(sums: impl Iterator<Item = f64>) -> f64 {
    sums.reduce(|a, b| a + b).unwrap_or(-0.0)
}

/// A floating-point element: one whose compute type has the math functions ([`Real`]).
pub trait Float: Numeric<Compute: Real> + crate::kernel::KernelFloat {}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        // SAFETY: a primitive number: every bit pattern is valid, no padding, and its size
        // matches the dtype's.
        unsafe impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

element!(f32 => F32, f64 => F64, i32 => I32, u32 => U32, i64 => I64, u64 => U64, u8 => U8, i8 => I8);

macro_rules! integer {
    ($($t:ty: $abs:expr),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn add(self, rhs: Self) -> Self { self.wrapping_add(rhs) }
            fn sub(self, rhs: Self) -> Self { self.wrapping_sub(rhs) }
            fn mul(self, rhs: Self) -> Self { self.wrapping_mul(rhs) }
            fn div(self, rhs: Self) -> Self {
                if rhs == 0 { 0 } else { self.wrapping_div(rhs) }
            }
            fn neg(self) -> Self { self.wrapping_neg() }
            fn abs(self) -> Self { let f: fn(Self) -> Self = $abs; f(self) }
            fn is_nan(self) -> bool { false }
        }

        impl Numeric for $t {
            const ZERO: Self = 0;
            type Compute = $t;
            fn load(self) -> Self { self }
            fn store(c: Self) -> Self { c }
            fn sum(xs: &[Self]) -> Self { xs.iter().fold(0, |a: Self, &x| a.wrapping_add(x)) }
            fn dot(xs: &[Self], ys: &[Self]) -> Self {
                xs.iter().zip(ys).fold(0, |a: Self, (&x, &y)| a.wrapping_add(x.wrapping_mul(y)))
            }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as Self }
            fn to_wide(self) -> Wide { Wide::Int(self as i128) }
            fn from_wide(w: Wide) -> Self {
                match w { Wide::Int(v) => v as Self, Wide::Float(v) => v as Self }
            }
            fn __unary(op: UnaryOp, src: Option<&[Self]>, out: &mut [Self]) {
                crate::native::unary_ints(op, src, out)
            }
            fn __binary(op: BinaryOp, src: Option<&[Self]>, rhs: RhsSlice<'_, Self>, cols: usize, out: &mut [Self]) {
                crate::native::binary_ints(op, src, rhs, cols, out)
            }
        }
    )*};
}

integer!(
    i32: |x| x.wrapping_abs(),
    u32: |x| x,
    i64: |x| x.wrapping_abs(),
    u64: |x| x,
    u8: |x| x,
    i8: |x| x.wrapping_abs()
);

macro_rules! float {
    ($($t:ident),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn add(self, rhs: Self) -> Self { self + rhs }
            fn sub(self, rhs: Self) -> Self { self - rhs }
            fn mul(self, rhs: Self) -> Self { self * rhs }
            fn div(self, rhs: Self) -> Self { self / rhs }
            fn neg(self) -> Self { -self }
            fn abs(self) -> Self { <$t>::abs(self) }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }

        impl Real for $t {
            fn from_f64(v: f64) -> Self { v as Self }
            fn to_f64(self) -> f64 { self as f64 }
            fn sqrt(self) -> Self { <$t>::sqrt(self) }
            fn exp(self) -> Self { <$t>::exp(self) }
            fn ln(self) -> Self { <$t>::ln(self) }
            fn ln_1p(self) -> Self { <$t>::ln_1p(self) }
            fn tanh(self) -> Self { <$t>::tanh(self) }
            fn powf(self, e: Self) -> Self { <$t>::powf(self, e) }
        }

        impl Numeric for $t {
            const ZERO: Self = 0.0;
            type Compute = $t;
            fn load(self) -> Self { self }
            fn store(c: Self) -> Self { c }
            fn sum(xs: &[Self]) -> Self { ordered_sum(xs) as Self }
            fn dot(xs: &[Self], ys: &[Self]) -> Self {
                ordered_dot(xs, ys) as Self
            }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as Self }
            fn to_wide(self) -> Wide { Wide::Float(self as f64) }
            fn from_wide(w: Wide) -> Self {
                match w { Wide::Int(v) => v as Self, Wide::Float(v) => v as Self }
            }
            fn __unary(op: UnaryOp, src: Option<&[Self]>, out: &mut [Self]) {
                crate::native::unary_floats(op, src, out)
            }
            fn __binary(op: BinaryOp, src: Option<&[Self]>, rhs: RhsSlice<'_, Self>, cols: usize, out: &mut [Self]) {
                crate::native::binary_floats(op, src, rhs, cols, out)
            }
        }

        impl Float for $t {}
    )*};
}

float!(f32, f64);

#[cfg(feature = "half")]
pub(crate) mod half_types {
    //! f16 and bf16: stored as 16 bits, computed in f32 (as CUDA's `__half` math does).
    use super::*;
    use half::{bf16, f16};

    element!(f16 => F16, bf16 => BF16);

    macro_rules! half_float {
        ($($t:ty),*) => {$(
            impl Numeric for $t {
                const ZERO: Self = <$t>::ZERO;
                type Compute = f32;
                fn load(self) -> f32 { self.to_f32() }
                fn store(c: f32) -> Self { <$t>::from_f32(c) }
                fn sum(xs: &[Self]) -> Self {
                    <$t>::from_f32(odd_f32(ordered_sum(xs)))
                }
                fn dot(xs: &[Self], ys: &[Self]) -> Self {
                    <$t>::from_f32(odd_f32(ordered_dot(xs, ys)))
                }
                fn to_f64(self) -> f64 { <$t>::to_f64(self) }
                fn from_f64(v: f64) -> Self { <$t>::from_f32(odd_f32(v)) }
                fn to_wide(self) -> Wide { Wide::Float(<$t>::to_f64(self)) }
                fn from_wide(w: Wide) -> Self {
                    match w {
                        Wide::Int(v) => <$t>::from_f32(odd_f32_int(v)),
                        Wide::Float(v) => <$t>::from_f32(odd_f32(v)),
                    }
                }
                fn __unary(op: UnaryOp, src: Option<&[Self]>, out: &mut [Self]) {
                    crate::native::unary_floats(op, src, out)
                }
                fn __binary(op: BinaryOp, src: Option<&[Self]>, rhs: RhsSlice<'_, Self>, cols: usize, out: &mut [Self]) {
                    crate::native::binary_floats(op, src, rhs, cols, out)
                }
            }

            impl Float for $t {}
        )*};
    }

    half_float!(f16, bf16);

    // f16 and bf16 from wider values round correctly (once, to nearest even) on every
    // backend: first to f32 *to odd* (toward zero, then the last bit set when inexact),
    // then to 16 bits. f32 keeps more than two bits beyond either 16-bit precision, so the
    // odd bit stands for everything below it and the second rounding cannot be fooled by a
    // tie the first created. (`half`'s own `from_f64` is not correctly rounded: it drops
    // the f64's low 32 bits, or goes through `as f32`, depending on the CPU.) The
    // kernel language's `RoundOdd`, which the casts' kernels use, computes the same steps.

    /// `v` rounded to f32 to odd (the kernel language's `RoundOdd` on the CPU).
    #[doc(hidden)]
    pub fn odd_f32(v: f64) -> f32 {
        let f = v as f32; // to nearest; beyond f32's range: infinity
        if v.is_nan() || f as f64 == v {
            return f;
        }
        // Step back toward zero if rounding went away from it (never from 0).
        let toward_zero = if (f as f64).abs() > v.abs() {
            f32::from_bits(f.to_bits() - 1)
        } else {
            f
        };
        f32::from_bits(toward_zero.to_bits() | 1)
    }

    /// The integer `v` (at most 2^127 in size) rounded to f32 to odd.
    #[doc(hidden)]
    pub fn odd_f32_int(v: i128) -> f32 {
        let m = v.unsigned_abs();
        let bits = 128 - m.leading_zeros();
        let f = if bits <= 24 {
            m as f32
        } else {
            let shift = bits - 24;
            let sticky = m & ((1u128 << shift) - 1) != 0;
            let t = (m >> shift) as u32 | sticky as u32;
            // Exact: t has 24 bits and the scale is a power of two within f32's range
            // for every element type's integers (at most 2^64).
            t as f32 * 2f32.powi(shift as i32)
        };
        if v < 0 {
            -f
        } else {
            f
        }
    }
}

/// Byte length of `len` elements of `T`, or [`crate::Error::SizeOverflow`].
pub(crate) fn byte_len<T: Element>(op: &'static str, len: usize) -> crate::Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(crate::Error::SizeOverflow {
            op,
            len,
            elem_bytes: std::mem::size_of::<T>(),
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn dtype_sizes_match_rust_types() {
        assert_eq!(f32::DTYPE.size(), std::mem::size_of::<f32>());
        assert_eq!(u8::DTYPE.size(), 1);
        assert_eq!(i64::DTYPE.size(), 8);
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
        }
        let err = "F33 ".parse::<DType>().unwrap_err();
        assert_eq!(err.input, "F33 ");
        assert!(
            err.to_string().contains("expected one of f32, f64"),
            "{err}"
        );
    }

    #[test]
    fn integer_division_by_zero_is_zero_and_min_wraps() {
        assert_eq!(Numeric::div(7i32, 0), 0);
        assert_eq!(Numeric::div(i32::MIN, -1), i32::MIN);
        assert_eq!(Numeric::div(-7i32, 2), -3);
    }

    /// A xorshift64 generator from `seed`: reproducible test data without a dependency.
    pub(crate) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Values whose running sum in a narrow type drops low bits: a large term, then many
    /// small positive ones (a narrow accumulator rounds each of them).
    fn lossy(n: usize) -> Vec<f32> {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut v: Vec<f32> = (0..n).map(|_| (next() % 1001) as f32 / 4096.0).collect();
        v[0] = 65536.0;
        v
    }

    #[test]
    fn float_sum_and_dot_accumulate_in_f64_and_round_once() {
        for n in [1, 2, 100, 10_000] {
            let xs = lossy(n);
            let ys: Vec<f32> = xs.iter().rev().copied().collect();
            // The reference: the same terms, in the same order, added in f64 and rounded once.
            let sum: f64 = xs.iter().map(|&x| f64::from(x)).sum();
            let dot: f64 = xs
                .iter()
                .zip(&ys)
                .map(|(&x, &y)| f64::from(x) * f64::from(y))
                .sum();
            assert_eq!(Numeric::sum(&xs[..]), sum as f32, "sum of {n}");
            assert_eq!(Numeric::dot(&xs[..], &ys[..]), dot as f32, "dot of {n}");
            let wide: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
            assert_eq!(
                Numeric::sum(&wide[..]).to_bits(),
                sum.to_bits(),
                "f64 sum of {n}"
            );
        }
        // The data tells the two apart: a sum accumulated in f32 is another number.
        let xs = lossy(10_000);
        let in_f32 = xs.iter().fold(0.0f32, |a, &x| a + x);
        assert_ne!(in_f32, xs.iter().map(|&x| f64::from(x)).sum::<f64>() as f32);
    }

    /// [`ordered_sum`] and [`ordered_dot`] add each chunk in its 32 partials, then the chunks'
    /// sums in order: on f64 data of wide magnitudes another order is another number; signed zeros,
    /// NaN and empty inputs keep their meaning; a dot takes the common length. (The CPU
    /// backend's side-by-side and multi-core sums are checked against these.)
    #[test]
    // Arithmetic over three chunks of 2^16 terms, no unsafe code: nothing for Miri to check,
    // and more than 12 minutes interpreted.
    #[cfg_attr(miri, ignore = "pure arithmetic over 2^17 terms")]
    fn ordered_sums_follow_the_chunk_order() {
        let mut bits = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut next = move || {
            let x = bits();
            let mag = 2f64.powi((x % 80) as i32 - 40);
            if x & (1 << 40) == 0 {
                mag * (x >> 11) as f64 / (1u64 << 53) as f64
            } else {
                -mag * (x >> 13) as f64 / (1u64 << 51) as f64
            }
        };
        let c = SUM_CHUNK;
        let xs: Vec<f64> = (0..3 * c + 5).map(|_| next()).collect();
        let ys: Vec<f64> = (0..3 * c + 5).map(|_| next()).collect();
        // The definition written out: partial `i % 32` of each chunk in order, the partials
        // pairwise, the chunks' sums in order.
        let defined = |terms: &[f64]| {
            let sums: Vec<f64> = terms
                .chunks(c)
                .map(|chunk| {
                    let mut p = vec![-0.0f64; 32];
                    for (i, &t) in chunk.iter().enumerate() {
                        p[i % 32] += t;
                    }
                    while p.len() > 1 {
                        let half = p.len() / 2;
                        p = (0..half).map(|i| p[i] + p[i + half]).collect();
                    }
                    p[0]
                })
                .collect();
            sums[1..].iter().fold(sums[0], |a, &s| a + s)
        };
        assert_eq!(ordered_sum(&xs).to_bits(), defined(&xs).to_bits());
        let products: Vec<f64> = xs.iter().zip(&ys).map(|(a, b)| a * b).collect();
        assert_eq!(
            ordered_dot(&xs, &ys).to_bits(),
            defined(&products).to_bits()
        );
        // The data tells orders apart: one chain over all the terms is another number, and
        // so is each chunk in one chain.
        let one_chain: f64 = xs.iter().sum();
        assert_ne!(one_chain.to_bits(), ordered_sum(&xs).to_bits());
        let chains: f64 = xs.chunks(c).map(|k| k.iter().sum::<f64>()).sum();
        assert_ne!(chains.to_bits(), ordered_sum(&xs).to_bits());

        // Signed zeros and NaN keep their meaning.
        let (zeros, ones) = (vec![-0.0f64; 2 * c], vec![1.0f64; 2 * c]);
        assert_eq!(ordered_sum(&zeros).to_bits(), (-0.0f64).to_bits());
        assert_eq!(ordered_dot(&zeros, &ones).to_bits(), (-0.0f64).to_bits());
        assert_eq!(ordered_sum::<f64>(&[]).to_bits(), (-0.0f64).to_bits());
        let mut nan = vec![1.0f32; 2 * c];
        nan[c + 7] = f32::NAN;
        assert!(ordered_sum(&nan).is_nan());
        assert!(ordered_dot(&nan, &vec![1.0f32; 2 * c]).is_nan());
        // Unequal lengths: the dot of the common length.
        let short = ordered_dot(&xs[..c + 3], &ys[..c]);
        assert_eq!(short.to_bits(), ordered_dot(&xs[..c], &ys[..c]).to_bits());
    }

    #[cfg(feature = "half")]
    #[test]
    fn half_sum_and_dot_accumulate_in_f64_and_round_once() {
        use half::{bf16, f16};
        // Scaled into f16's range.
        let xs: Vec<f32> = lossy(10_000).iter().map(|x| x / 1024.0).collect();
        let h: Vec<f16> = xs.iter().map(|&x| f16::from_f32(x)).collect();
        let hs: f64 = h.iter().map(|x| x.to_f64()).sum();
        let hsq: f64 = h.iter().map(|x| x.to_f64() * x.to_f64()).sum();
        let once = <f16 as Numeric>::from_f64;
        assert_eq!(Numeric::sum(&h[..]), once(hs));
        assert_eq!(Numeric::dot(&h[..], &h[..]), once(hsq));
        let b: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
        let bs: f64 = b.iter().map(|x| x.to_f64()).sum();
        assert_eq!(Numeric::sum(&b[..]), <bf16 as Numeric>::from_f64(bs));
        // The data tells the two apart: a sum accumulated in 16 bits is another number.
        let in_f16 = h.iter().fold(f16::ZERO, |a, &x| Numeric::add(a, x));
        assert_ne!(in_f16, once(hs));
    }

    /// Whether `r` (the bits of a 16-bit float, sign cleared) is the correctly rounded
    /// (to nearest, ties to even) value of the non-negative `a`, by the midpoints to its
    /// neighbours (exact in f64: the neighbours have at most 11 significant bits). `val`
    /// gives a 16-bit pattern's value; `inf` is the infinity's pattern.
    #[cfg(feature = "half")]
    fn nearest_even(a: f64, r: u16, inf: u16, val: impl Fn(u16) -> f64) -> bool {
        let even = r & 1 == 0;
        let (lo, mid, hi) = if r == inf {
            // Infinity: `a` is at least halfway from the largest finite value to the next
            // power of two (a tie there rounds up, to the even "infinity").
            let max = val(inf - 1);
            let next = max + (max - val(inf - 2));
            return a >= (max + next) / 2.0;
        } else {
            let v = val(r);
            let lo = if r == 0 { -val(1) } else { val(r - 1) };
            let hi = if r + 1 == inf {
                v + (v - lo)
            } else {
                val(r + 1)
            };
            (lo, v, hi)
        };
        let (below, above) = ((lo + mid) / 2.0, (mid + hi) / 2.0);
        (a > below || (a == below && even)) && (a < above || (a == above && even))
    }

    /// The same for an integer, exact through i128, for a type of `p` significant bits (from
    /// 2^p up every candidate is an integer; below it the cast is exact).
    #[cfg(feature = "half")]
    fn nearest_even_int(a: i128, p: u32, r: u16, inf: u16, val: impl Fn(u16) -> f64) -> bool {
        if a < 1 << p {
            return val(r) == a as f64;
        }
        if r == inf {
            let max = val(inf - 1) as i128;
            let next = 2 * max - val(inf - 2) as i128;
            return 2 * a >= max + next;
        }
        let v = val(r) as i128;
        let lo = val(r - 1) as i128;
        let hi = if r + 1 == inf {
            2 * v - lo
        } else {
            val(r + 1) as i128
        };
        let even = r & 1 == 0;
        let (below, above) = (lo + v, v + hi);
        (2 * a > below || (2 * a == below && even)) && (2 * a < above || (2 * a == above && even))
    }

    /// f16 and bf16 casts from i64, u64 and f64 round once, correctly: on random values
    /// around rounding ties and on the values that showed double rounding before (through
    /// f32, or through `half`'s `from_f64`, which drops an f64's low 32 bits).
    #[cfg(feature = "half")]
    #[test]
    fn half_casts_round_once_correctly() {
        use half::{bf16, f16};
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut ints: Vec<i128> = vec![
            -7_728_177_275_992_759_802,
            (1 << 40) + (1 << 32) + 1,
            (1 << 60) + (1 << 53) + (1 << 52) - 1,
            (1 << 33) + (1 << 22) + 1,
            65519,
            65520,
            i64::MIN as i128,
            u64::MAX as i128,
        ];
        let mut floats: Vec<f64> = vec![
            1.0 + 2f64.powi(-8) + 2f64.powi(-30),
            -(1.0 + 2f64.powi(-8) + 2f64.powi(-30)),
            1.0 + 2f64.powi(-11) + 2f64.powi(-30),
            65520.0 - 2f64.powi(-30),
            65520.0,
            f64::MAX,
            2f64.powi(-25) + 2f64.powi(-60),
            2f64.powi(-133) * 1.5,
        ];
        for _ in 0..100_000 {
            let (r, s) = (next(), next());
            // Ties: a random top, then the half-ulp bit of a 16-bit type, then a sticky tail
            // (or none) k bits further down.
            let top = 64 - (s % 64) as u32;
            let p = if s & 64 == 0 { 8 } else { 11 };
            let tie = if top > p { 1u64 << (top - p - 1) } else { 0 };
            let sticky = (r >> (s % 61 + 3)) & (tie.wrapping_sub(1) >> ((s >> 8) % 8));
            let m = ((r | 1 << 63) >> (64 - top)) & !(tie.wrapping_mul(2).wrapping_sub(1))
                | tie
                | sticky;
            let v = if s & 128 == 0 {
                m as i128
            } else {
                -((m >> 1) as i128)
            };
            ints.push(v);
            let e = (s >> 16) % 300;
            floats.push(
                f64::from_bits((r & 0x800f_ffff_ffff_ffff) | (e + 1023 - 150) << 52)
                    .copysign(if s & 256 == 0 { 1.0 } else { -1.0 }),
            );
        }
        let fv = |b: u16| f16::from_bits(b).to_f64();
        let bv = |b: u16| bf16::from_bits(b).to_f64();
        for &v in &ints {
            let (h, b) = (f16::from_wide(Wide::Int(v)), bf16::from_wide(Wide::Int(v)));
            let a = v.abs();
            assert!(
                nearest_even_int(a, 11, h.to_bits() & 0x7fff, 0x7c00, fv),
                "f16 of {v}: {h}"
            );
            assert!(
                nearest_even_int(a, 8, b.to_bits() & 0x7fff, 0x7f80, bv),
                "bf16 of {v}: {b}"
            );
            assert_eq!(h.is_sign_negative(), v < 0 && h.to_bits() & 0x7fff != 0);
            assert_eq!(b.is_sign_negative(), v < 0);
        }
        for &v in &floats {
            let (h, b) = (
                f16::from_wide(Wide::Float(v)),
                bf16::from_wide(Wide::Float(v)),
            );
            let a = v.abs();
            assert!(
                nearest_even(a, h.to_bits() & 0x7fff, 0x7c00, fv),
                "f16 of {v:e}: {h}"
            );
            assert!(
                nearest_even(a, b.to_bits() & 0x7fff, 0x7f80, bv),
                "bf16 of {v:e}: {b}"
            );
            assert_eq!(h.is_sign_negative(), v.is_sign_negative(), "{v:e}");
            assert_eq!(b.is_sign_negative(), v.is_sign_negative(), "{v:e}");
        }
        // The check tells the two apart: `half`'s own `from_f64` misses it.
        let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert!(!nearest_even(v, bf16::from_f64(v).to_bits(), 0x7f80, bv));
    }

    #[test]
    fn float_maximum_ignores_nan() {
        assert_eq!(Numeric::maximum(f32::NAN, 1.0), 1.0);
        assert_eq!(Numeric::maximum(1.0, f32::NAN), 1.0);
    }
}
