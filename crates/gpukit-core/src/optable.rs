//! The op table: every built-in op described once.
//!
//! A backend runs built-in ops through one method, [`Backend::op`],
//! which receives an [`Op`] (what to compute, on which ranges, with which scalars) and the
//! element type. The element-wise ops are listed once below, in the `unary_table!` and
//! `binary_table!` invocations: each entry gives the op's variant, its name, the names of
//! its typed methods on [`Stream`], which element types have it (`numeric`:
//! every [`Numeric`]; `float`: [`Float`] only) and its reference semantics, written over the
//! element's compute type ([`Arith`], [`Real`]), and its accuracy contract in ulp
//! ([`UnaryOp::ulps`]: 0 for bit for bit). From that one entry the macros generate the
//! enum variant, [`UnaryOp::name`], the reference functions the CPU backend runs and the
//! tests compare with, and the safe, typed methods (`relu`, `relu_inplace`, `add`,
//! `add_inplace`, `add_scalar`, `add_row`, ...).
//!
//! ## Adding an element-wise op
//!
//! 1. One entry in the table below (its doc comment becomes the method's documentation):
//!    `Variant "name" ulps N (method, method_inplace) |x| body;`.
//! 2. Its CUDA C body in `gpukit-cuda` (`src/source.rs`: `unary_body` / `binary_body`, an
//!    exhaustive `match`, so a missing body does not compile).
//!
//! The CPU backend runs the reference semantics directly, so it needs nothing more. The
//! property tests iterate over [`UnaryOp::ALL`] and [`BinaryOp::ALL`].
//!
//! ## Using them
//!
//! ```
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
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
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
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
//! arithmetic in the compute type, no fused multiply-add). Ops that call `exp`, `ln`,
//! `ln_1p`, `tanh` or `powf` use each platform's math library, and `rsqrt` rounds twice: they
//! are within their `N` ulp, and f16/bf16 results, rounded once from f32, within one 16-bit
//! ulp.

use std::any::TypeId;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::{Backend, BufAt};
use crate::element::{Arith, DType, Element, Float, Numeric, Real};
use crate::error::Result;
use crate::stream::Stream;

/// A scalar operand of an op (the value of `fill`, the `alpha` of `axpy`, the operand of
/// `add_scalar`, the bounds of `clamp`), kept as the bits of its element type.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scalar {
    dtype: DType,
    bits: u64,
}

impl Scalar {
    /// The scalar `v`.
    pub fn new<T: Element>(v: T) -> Scalar {
        let mut bits = 0u64;
        let n = std::mem::size_of::<T>().min(8);
        // SAFETY: `T: Element` is plain data of `DTYPE.size() <= 8` bytes with no padding, so
        // its first `n` bytes are initialized and may be copied into the u64's bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&v as *const T).cast::<u8>(),
                (&mut bits as *mut u64).cast::<u8>(),
                n,
            );
        }
        Scalar {
            dtype: T::DTYPE,
            bits,
        }
    }

    /// The value, if `T` is the scalar's element type.
    pub fn get<T: Element>(self) -> Option<T> {
        if T::DTYPE != self.dtype || std::mem::size_of::<T>() > 8 {
            return None;
        }
        let mut v = T::default();
        // SAFETY: `T` is the type the bits were taken from (same dtype, so same size and
        // representation, by `Element`'s contract), and any bit pattern of it is valid.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&self.bits as *const u64).cast::<u8>(),
                (&mut v as *mut T).cast::<u8>(),
                std::mem::size_of::<T>(),
            );
        }
        Some(v)
    }

    /// The element type.
    pub fn dtype(self) -> DType {
        self.dtype
    }

    /// The value's bytes in native order (`dtype().size()` of them).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a u64 is 8 initialized bytes; the slice borrows `self`.
        let all = unsafe { std::slice::from_raw_parts((&self.bits as *const u64).cast(), 8) };
        &all[..self.dtype.size().min(8)]
    }
}

impl std::fmt::Debug for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scalar({}: {:#x})", self.dtype, self.bits)
    }
}

/// The shape of a dense row-major matrix: `rows` rows of `cols` elements each, stored one
/// row after another. The row/column broadcasts, the per-row reductions, softmax and
/// cross-entropy take one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Number of rows.
    pub rows: usize,
    /// Elements per row (also the leading dimension: rows are contiguous).
    pub cols: usize,
}

impl Shape {
    /// A `rows x cols` matrix.
    pub const fn new(rows: usize, cols: usize) -> Shape {
        Shape { rows, cols }
    }

    /// `rows * cols`, or `None` when it overflows.
    pub const fn len(self) -> Option<usize> {
        self.rows.checked_mul(self.cols)
    }

    /// Whether the matrix has no elements.
    pub const fn is_empty(self) -> bool {
        self.rows == 0 || self.cols == 0
    }
}

/// Applies `f` to each element of `src` (or, in place, of `out`) into `out`.
#[inline(always)]
fn map1<T: Numeric>(src: Option<&[T]>, out: &mut [T], f: impl Fn(T::Compute) -> T::Compute) {
    match src {
        Some(src) => {
            for (o, &x) in out.iter_mut().zip(src) {
                *o = T::store(f(x.load()));
            }
        }
        None => {
            for o in out.iter_mut() {
                *o = T::store(f(o.load()));
            }
        }
    }
}

/// `out[i] = f(src[i], other[i])` (in place when `src` is `None`).
#[inline(always)]
fn zip2<T: Numeric>(
    src: Option<&[T]>,
    other: &[T],
    out: &mut [T],
    f: &impl Fn(T::Compute, T::Compute) -> T::Compute,
) {
    match src {
        Some(src) => {
            for ((o, &x), &y) in out.iter_mut().zip(src).zip(other) {
                *o = T::store(f(x.load(), y.load()));
            }
        }
        None => {
            for (o, &y) in out.iter_mut().zip(other) {
                *o = T::store(f(o.load(), y.load()));
            }
        }
    }
}

/// The second operand of a binary op on slices (see [`Rhs`]).
#[derive(Debug, Clone, Copy)]
pub enum RhsSlice<'a, T> {
    /// An array of the output's length.
    Array(&'a [T]),
    /// A row vector of `cols` elements, added (...) to every row.
    Row(&'a [T]),
    /// A column vector of `rows` elements: row `r` uses element `r`.
    Col(&'a [T]),
    /// One value for every element.
    Scalar(T),
}

/// Applies `f(x, rhs)` over a `shape` matrix (in place when `src` is `None`).
#[inline(always)]
fn map2<T: Numeric>(
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
    f: impl Fn(T::Compute, T::Compute) -> T::Compute,
) {
    let cols = cols.max(1);
    match rhs {
        RhsSlice::Array(b) => zip2(src, b, out, &f),
        RhsSlice::Scalar(s) => {
            let s = s.load();
            map1(src, out, |x| f(x, s));
        }
        RhsSlice::Row(v) => {
            for (r, o) in out.chunks_mut(cols).enumerate() {
                let s = src.map(|s| &s[r * cols..r * cols + o.len()]);
                zip2(s, v, o, &f);
            }
        }
        RhsSlice::Col(v) => {
            for ((r, o), &c) in out.chunks_mut(cols).enumerate().zip(v) {
                let s = src.map(|s| &s[r * cols..r * cols + o.len()]);
                let c = c.load();
                map1(s, o, |x| f(x, c));
            }
        }
    }
}

/// The `numeric` entries' and `float` entries' variants, their methods and reference code.
macro_rules! unary_table {
    (
        numeric { $( $(#[$nd:meta])* $NV:ident $nname:literal ulps $nulps:literal ($nm:ident, $nmi:ident) |$nx:ident| $nbody:expr; )* }
        float { $( $(#[$fd:meta])* $FV:ident $fname:literal ulps $fulps:literal ($fm:ident, $fmi:ident) |$fx:ident| $fbody:expr; )* }
    ) => {
        /// Element-wise functions of one operand (the op table's unary entries).
        // Not `non_exhaustive`: a backend's `match` over the ops must fail to compile when
        // the table grows, so that no op lacks a body.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum UnaryOp {
            $( $(#[$nd])* $NV, )*
            $( $(#[$fd])* $FV, )*
        }

        impl UnaryOp {
            /// Every unary op, in table order.
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$NV,)* $(UnaryOp::$FV,)*];

            /// Lower-case name (also the name of its method on [`Stream`]).
            pub const fn name(self) -> &'static str {
                match self { $(UnaryOp::$NV => $nname,)* $(UnaryOp::$FV => $fname,)* }
            }

            /// Whether only float element types have the op.
            pub const fn floats_only(self) -> bool {
                match self { $(UnaryOp::$NV => false,)* $(UnaryOp::$FV => true,)* }
            }

            /// The op's accuracy contract, in ulp of an f32 or f64 result: on every backend
            /// the result is within this many ulp of the exact result rounded to the type,
            /// and the backends within this many of each other. 0: correctly rounded, so bit
            /// for bit on every backend (bodies of `+ - * /`, comparisons and `sqrt` only).
            /// f16 and bf16 results, computed in f32 and rounded once, are within
            /// `min(ulps, 1)` of theirs. The property tests check it.
            pub const fn ulps(self) -> u32 {
                match self { $(UnaryOp::$NV => $nulps,)* $(UnaryOp::$FV => $fulps,)* }
            }


            /// The reference semantics on one value of a float compute type.
            pub fn apply_real<C: Real>(self, x: C) -> C {
                match self {
                    $(UnaryOp::$NV => { let $nx = x; $nbody })*
                    $(UnaryOp::$FV => { let $fx = x; $fbody })*
                }
            }

            /// The reference semantics on one value of any compute type; `None` for a
            /// float-only op.
            pub fn apply_numeric<C: Arith>(self, x: C) -> Option<C> {
                match self {
                    $(UnaryOp::$NV => { let $nx = x; Some($nbody) })*
                    _ => None,
                }
            }

            /// Runs the op over slices with the reference semantics: `out[i] = op(src[i])`,
            /// or `out[i] = op(out[i])` when `src` is `None`. Returns `false` (and changes
            /// nothing) for a float-only op; [`UnaryOp::map_float`] has them all.
            pub fn map_numeric<T: Numeric<Compute = C>, C: Arith>(
                self,
                src: Option<&[T]>,
                out: &mut [T],
            ) -> bool {
                match self {
                    $(UnaryOp::$NV => { map1(src, out, |$nx: C| $nbody); true })*
                    _ => false,
                }
            }

            /// [`UnaryOp::map_numeric`] for float elements, which have every op.
            pub fn map_float<T: Numeric<Compute = C>, C: Real>(self, src: Option<&[T]>, out: &mut [T]) {
                match self {
                    $(UnaryOp::$NV => map1(src, out, |$nx: C| $nbody),)*
                    $(UnaryOp::$FV => map1(src, out, |$fx: C| $fbody),)*
                }
            }
        }

        impl<B: Backend> Stream<B> {
            $(
                $(#[$nd])*
                ///
                #[doc = concat!("Writes `", $nname, "(x)` into `out`, element by element.")]
                pub fn $nm<T: Numeric>(&self, x: &impl DeviceRead<T, B>, out: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary(UnaryOp::$NV, x, out)
                }
                #[doc = concat!("In place: `x = ", $nname, "(x)`, element by element (see [`Stream::", stringify!($nm), "`]).")]
                pub fn $nmi<T: Numeric>(&self, x: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary_inplace(UnaryOp::$NV, x)
                }
            )*
            $(
                $(#[$fd])*
                ///
                #[doc = concat!("Writes `", $fname, "(x)` into `out`, element by element.")]
                pub fn $fm<T: Float>(&self, x: &impl DeviceRead<T, B>, out: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary(UnaryOp::$FV, x, out)
                }
                #[doc = concat!("In place: `x = ", $fname, "(x)`, element by element (see [`Stream::", stringify!($fm), "`]).")]
                pub fn $fmi<T: Float>(&self, x: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary_inplace(UnaryOp::$FV, x)
                }
            )*
        }
    };
}

unary_table! {
    numeric {
        /// `-x`; integers wrap (`-MIN == MIN`, and unsigned `-x == 2^N - x`).
        Neg "neg" ulps 0 (neg, neg_inplace) |x| x.neg();
        /// `|x|`; integers wrap (`|MIN| == MIN`); unsigned values are unchanged.
        Abs "abs" ulps 0 (abs, abs_inplace) |x| x.abs();
        /// `x * x` (wrapping for integers).
        Square "square" ulps 0 (square, square_inplace) |x| x.mul(x);
        /// `max(x, 0)`; a NaN gives 0.
        Relu "relu" ulps 0 (relu, relu_inplace) |x| if x > C::ZERO { x } else { C::ZERO };
    }
    float {
        /// `sqrt(x)`, correctly rounded (bit for bit on every backend).
        Sqrt "sqrt" ulps 0 (sqrt, sqrt_inplace) |x| x.sqrt();
        /// `1 / sqrt(x)`, as a correctly rounded square root and division (bit for bit).
        Rsqrt "rsqrt" ulps 1 (rsqrt, rsqrt_inplace) |x| C::ONE.div(x.sqrt());
        /// `e^x`.
        Exp "exp" ulps 3 (exp, exp_inplace) |x| x.exp();
        /// `ln(x)` (NaN below 0, `-inf` at 0).
        Log "log" ulps 3 (log, log_inplace) |x| x.ln();
        /// `ln(1 + x)`, accurate near 0.
        Log1p "log1p" ulps 3 (log1p, log1p_inplace) |x| x.ln_1p();
        /// `1 / (1 + e^-x)`.
        Sigmoid "sigmoid" ulps 4 (sigmoid, sigmoid_inplace) |x| C::ONE.div(C::ONE.add(x.neg().exp()));
        /// SiLU (swish, the gate of SwiGLU): `x * sigmoid(x)`, computed as `x / (1 + e^-x)`.
        Silu "silu" ulps 4 (silu, silu_inplace) |x| x.div(C::ONE.add(x.neg().exp()));
        /// `tanh(x)`.
        Tanh "tanh" ulps 4 (tanh, tanh_inplace) |x| x.tanh();
        /// GELU, tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
        Gelu "gelu" ulps 4 (gelu, gelu_inplace) |x| {
            let inner = C::from_f64(0.797_884_560_802_865_4)
                .mul(x.add(C::from_f64(0.044_715).mul(x).mul(x).mul(x)));
            C::from_f64(0.5).mul(x).mul(C::ONE.add(inner.tanh()))
        };
        /// `ln(1 + e^x)`, computed as `max(x, 0) + ln(1 + e^-|x|)` so that it neither
        /// overflows nor loses small values.
        Softplus "softplus" ulps 4 (softplus, softplus_inplace) |x| {
            let pos = if x > C::ZERO { x } else { C::ZERO };
            pos.add(x.abs().neg().exp().ln_1p())
        };
    }
}

/// The `numeric` and `float` entries of the binary table.
macro_rules! binary_table {
    (
        numeric { $( $(#[$nd:meta])* $NV:ident $nname:literal ulps $nulps:literal ($($nm:ident),*) |$na:ident, $nb:ident| $nbody:expr; )* }
        float { $( $(#[$fd:meta])* $FV:ident $fname:literal ulps $fulps:literal ($($fm:ident),*) |$fa:ident, $fb:ident| $fbody:expr; )* }
    ) => {
        /// Element-wise functions of two operands (the op table's binary entries).
        // Not `non_exhaustive`, as `UnaryOp`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum BinaryOp {
            $( $(#[$nd])* $NV, )*
            $( $(#[$fd])* $FV, )*
        }

        impl BinaryOp {
            /// Every binary op, in table order.
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$NV,)* $(BinaryOp::$FV,)*];

            /// Lower-case name (also the name of its method on [`Stream`]).
            pub const fn name(self) -> &'static str {
                match self { $(BinaryOp::$NV => $nname,)* $(BinaryOp::$FV => $fname,)* }
            }

            /// Whether only float element types have the op.
            pub const fn floats_only(self) -> bool {
                match self { $(BinaryOp::$NV => false,)* $(BinaryOp::$FV => true,)* }
            }

            /// The op's accuracy contract, in ulp of an f32 or f64 result: on every backend
            /// the result is within this many ulp of the exact result rounded to the type,
            /// and the backends within this many of each other. 0: correctly rounded, so bit
            /// for bit on every backend (bodies of `+ - * /`, comparisons and `sqrt` only).
            /// f16 and bf16 results, computed in f32 and rounded once, are within
            /// `min(ulps, 1)` of theirs. The property tests check it.
            pub const fn ulps(self) -> u32 {
                match self { $(BinaryOp::$NV => $nulps,)* $(BinaryOp::$FV => $fulps,)* }
            }


            /// The reference semantics on values of a float compute type.
            pub fn apply_real<C: Real>(self, a: C, b: C) -> C {
                match self {
                    $(BinaryOp::$NV => { let ($na, $nb) = (a, b); $nbody })*
                    $(BinaryOp::$FV => { let ($fa, $fb) = (a, b); $fbody })*
                }
            }

            /// The reference semantics on values of any compute type; `None` for a
            /// float-only op.
            pub fn apply_numeric<C: Arith>(self, a: C, b: C) -> Option<C> {
                match self {
                    $(BinaryOp::$NV => { let ($na, $nb) = (a, b); Some($nbody) })*
                    _ => None,
                }
            }

            /// Runs the op over slices with the reference semantics: `out = op(src, rhs)`
            /// over a matrix of rows of `cols` elements (`cols` matters only for
            /// [`RhsSlice::Row`] and [`RhsSlice::Col`]), in place when `src` is `None`.
            /// Returns `false` (and changes nothing) for a float-only op.
            pub fn map_numeric<T: Numeric<Compute = C>, C: Arith>(
                self,
                src: Option<&[T]>,
                rhs: RhsSlice<'_, T>,
                cols: usize,
                out: &mut [T],
            ) -> bool {
                match self {
                    $(BinaryOp::$NV => { map2(src, rhs, cols, out, |$na: C, $nb: C| $nbody); true })*
                    _ => false,
                }
            }

            /// [`BinaryOp::map_numeric`] for float elements, which have every op.
            pub fn map_float<T: Numeric<Compute = C>, C: Real>(
                self,
                src: Option<&[T]>,
                rhs: RhsSlice<'_, T>,
                cols: usize,
                out: &mut [T],
            ) {
                match self {
                    $(BinaryOp::$NV => map2(src, rhs, cols, out, |$na: C, $nb: C| $nbody),)*
                    $(BinaryOp::$FV => map2(src, rhs, cols, out, |$fa: C, $fb: C| $fbody),)*
                }
            }
        }

        impl<B: Backend> Stream<B> {
            $( binary_table!(@methods Numeric, $NV, $nname, [$(#[$nd])*], $($nm),*); )*
            $( binary_table!(@methods Float, $FV, $fname, [$(#[$fd])*], $($fm),*); )*
        }
    };
    (@methods $bound:ident, $V:ident, $name:literal, [$(#[$d:meta])*],
        $plain:ident, $inplace:ident, $scalar:ident, $scalar_inplace:ident,
        $row:ident, $row_inplace:ident, $col:ident, $col_inplace:ident) => {
        $(#[$d])*
        ///
        #[doc = concat!("Writes `a ", $name, " b` into `out`, element by element.")]
        pub fn $plain<T: $bound>(
            &self,
            a: &impl DeviceRead<T, B>,
            b: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary(BinaryOp::$V, a, b, out)
        }
        #[doc = concat!("In place: `a = a ", $name, " b`, element by element.")]
        pub fn $inplace<T: $bound>(&self, a: &mut impl DeviceWrite<T, B>, b: &impl DeviceRead<T, B>) -> Result<()> {
            self.binary_inplace(BinaryOp::$V, a, b)
        }
        #[doc = concat!("Writes `a ", $name, " s` for one scalar `s` into `out`.")]
        pub fn $scalar<T: $bound>(&self, a: &impl DeviceRead<T, B>, s: T, out: &mut impl DeviceWrite<T, B>) -> Result<()> {
            self.binary_scalar(BinaryOp::$V, a, s, out)
        }
        #[doc = concat!("In place: `a = a ", $name, " s` for one scalar `s`.")]
        pub fn $scalar_inplace<T: $bound>(&self, a: &mut impl DeviceWrite<T, B>, s: T) -> Result<()> {
            self.binary_scalar_inplace(BinaryOp::$V, a, s)
        }
        #[doc = concat!("Writes `a[r][j] ", $name, " v[j]` into `out`: the row vector `v` (`shape.cols` elements) applied to every row of the `shape` matrix `a` (a bias).")]
        pub fn $row<T: $bound>(
            &self,
            shape: Shape,
            a: &impl DeviceRead<T, B>,
            v: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary_row(BinaryOp::$V, shape, a, v, out)
        }
        #[doc = concat!("In place: `a[r][j] = a[r][j] ", $name, " v[j]` for the row vector `v` (`shape.cols` elements).")]
        pub fn $row_inplace<T: $bound>(&self, shape: Shape, a: &mut impl DeviceWrite<T, B>, v: &impl DeviceRead<T, B>) -> Result<()> {
            self.binary_row_inplace(BinaryOp::$V, shape, a, v)
        }
        #[doc = concat!("Writes `a[r][j] ", $name, " v[r]` into `out`: the column vector `v` (`shape.rows` elements) applied to every column of the `shape` matrix `a`.")]
        pub fn $col<T: $bound>(
            &self,
            shape: Shape,
            a: &impl DeviceRead<T, B>,
            v: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary_col(BinaryOp::$V, shape, a, v, out)
        }
        #[doc = concat!("In place: `a[r][j] = a[r][j] ", $name, " v[r]` for the column vector `v` (`shape.rows` elements).")]
        pub fn $col_inplace<T: $bound>(&self, shape: Shape, a: &mut impl DeviceWrite<T, B>, v: &impl DeviceRead<T, B>) -> Result<()> {
            self.binary_col_inplace(BinaryOp::$V, shape, a, v)
        }
    };
}

binary_table! {
    numeric {
        /// `a + b` (wrapping for integers).
        Add "add" ulps 0 (add, add_inplace, add_scalar, add_scalar_inplace, add_row, add_row_inplace, add_col, add_col_inplace)
            |a, b| a.add(b);
        /// `a - b` (wrapping for integers).
        Sub "sub" ulps 0 (sub, sub_inplace, sub_scalar, sub_scalar_inplace, sub_row, sub_row_inplace, sub_col, sub_col_inplace)
            |a, b| a.sub(b);
        /// `a * b` (wrapping for integers).
        Mul "mul" ulps 0 (mul, mul_inplace, mul_scalar, mul_scalar_inplace, mul_row, mul_row_inplace, mul_col, mul_col_inplace)
            |a, b| a.mul(b);
        /// `a / b`; integers truncate toward zero, give 0 for a division by zero and wrap
        /// for `MIN / -1`.
        Div "div" ulps 0 (div, div_inplace, div_scalar, div_scalar_inplace, div_row, div_row_inplace, div_col, div_col_inplace)
            |a, b| a.div(b);
        /// The smaller of `a` and `b`; a NaN loses to a number (C's `fmin`).
        Min "min" ulps 0 (minimum, minimum_inplace, min_scalar, min_scalar_inplace, min_row, min_row_inplace, min_col, min_col_inplace)
            |a, b| a.min(b);
        /// The larger of `a` and `b`; a NaN loses to a number (C's `fmax`).
        Max "max" ulps 0 (maximum, maximum_inplace, max_scalar, max_scalar_inplace, max_row, max_row_inplace, max_col, max_col_inplace)
            |a, b| a.max(b);
    }
    float {
        /// `a` to the power `b` (C's `pow`).
        Pow "pow" ulps 8 (pow, pow_inplace, pow_scalar, pow_scalar_inplace, pow_row, pow_row_inplace, pow_col, pow_col_inplace)
            |a, b| a.powf(b);
    }
}

/// How a binary op's second operand is laid out against a matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bcast {
    Row,
    Col,
}

/// The second operand of a binary [`Op`].
pub enum Rhs<'a, B: Backend> {
    /// An array of the output's length.
    Array(BufAt<'a, B>),
    /// A row vector of `shape.cols` elements, applied to every row.
    Row(BufAt<'a, B>),
    /// A column vector of `shape.rows` elements: row `r` uses element `r`.
    Col(BufAt<'a, B>),
    /// One value.
    Scalar(Scalar),
}

/// Reductions, of a whole array (one result) or of each row of a matrix (one per row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum ([`Numeric::sum`]: floats accumulate in f64, integers wrap).
    Sum,
    /// The mean: the sum accumulated in f64 (in the order of [`crate::SUM_CHUNK`]), divided
    /// by the count, rounded once (floats).
    Mean,
    /// The smallest element (NaNs ignored unless all are NaN).
    Min,
    /// The largest element (NaNs ignored unless all are NaN).
    Max,
    /// The index (`u32`) of the first smallest element; NaNs rank above every number, so
    /// an all-NaN input gives 0.
    ArgMin,
    /// The index (`u32`) of the first largest element; NaNs rank below every number, so an
    /// all-NaN input gives 0.
    ArgMax,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::ArgMin,
        ReduceOp::ArgMax,
    ];

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::ArgMax => "argmax",
        }
    }

    /// Whether the result is an index (`u32`) rather than an element.
    pub const fn is_index(self) -> bool {
        matches!(self, ReduceOp::ArgMin | ReduceOp::ArgMax)
    }

    /// Whether an empty input has a result (only the sum does: 0).
    pub const fn has_identity(self) -> bool {
        matches!(self, ReduceOp::Sum)
    }

    /// The reference result of a value reduction (`Sum`, `Mean`, `Min`, `Max`) of a
    /// non-empty slice; `None` for the index reductions.
    pub fn value<T: Numeric>(self, x: &[T]) -> Option<T> {
        let first = x.first()?.load();
        Some(match self {
            ReduceOp::Sum => T::sum(x),
            ReduceOp::Mean => return self.of_sum(crate::ordered_sum(x), x.len()),
            ReduceOp::Min => T::store(x.iter().fold(first, |m, v| m.min(v.load()))),
            ReduceOp::Max => T::store(x.iter().fold(first, |m, v| m.max(v.load()))),
            ReduceOp::ArgMin | ReduceOp::ArgMax => return None,
        })
    }

    /// The `Mean` of `len` elements, or a float's `Sum`, from their f64 sum in the order
    /// [`crate::SUM_CHUNK`] defines ([`crate::ordered_sum`]): what [`ReduceOp::value`]
    /// gives, for a backend that computes the sum its own way. `None` for the other
    /// reductions (an integer `Sum` wraps instead: [`Numeric::sum`]).
    pub fn of_sum<T: Numeric>(self, sum: f64, len: usize) -> Option<T> {
        match self {
            ReduceOp::Sum => Some(T::from_f64(sum)),
            ReduceOp::Mean => Some(T::from_f64(sum / len as f64)),
            _ => None,
        }
    }

    /// The reference result of an index reduction of a non-empty slice; `None` for the
    /// value reductions.
    pub fn index<T: Numeric>(self, x: &[T]) -> Option<u32> {
        let max = match self {
            ReduceOp::ArgMax => true,
            ReduceOp::ArgMin => false,
            _ => return None,
        };
        let mut best = 0usize;
        let mut bv = x.first()?.load();
        for (i, v) in x.iter().enumerate().skip(1) {
            let v = v.load();
            if arg_better(max, v, bv) {
                best = i;
                bv = v;
            }
        }
        u32::try_from(best).ok()
    }
}

/// Whether `v` (at a later index) displaces `best` in an argmax (`max`) or argmin: strictly
/// better, or a number where `best` is a NaN.
pub fn arg_better<C: Arith>(max: bool, v: C, best: C) -> bool {
    if v.is_nan() {
        return false;
    }
    best.is_nan() || if max { v > best } else { v < best }
}

/// Row-wise softmax (or log-softmax) of a `rows x cols` matrix with the reference semantics:
/// per row, `m = max(x)` (NaNs ignored), `e_j = exp(x_j - m)` in the compute type, `s = sum e_j`
/// in f64; softmax `e_j / s` and log-softmax `(x_j - m) - ln(s)`, both in f64, rounded once.
/// A row holding a NaN or an infinity gives NaNs. In place when `src` is `None`.
pub fn softmax_rows<T: Numeric<Compute = C>, C: Real>(
    log: bool,
    src: Option<&[T]>,
    cols: usize,
    out: &mut [T],
) {
    if cols == 0 {
        return;
    }
    for (r, o) in out.chunks_mut(cols).enumerate() {
        let row = src.map(|s| &s[r * cols..r * cols + o.len()]);
        if stores_exactly::<T, C>() && !log {
            let (_, s) = stored_exps(row, o);
            for o in o.iter_mut() {
                *o = T::from_f64(o.load().to_f64() / s);
            }
            continue;
        }
        // Each output depends on its own input and the row's statistics only, so in place
        // the row is read for the statistics and then overwritten element by element (no
        // copy of the row: the op allocates nothing).
        let (m, s) = match row {
            Some(x) => softmax_stats(x.iter().map(|v| v.load())),
            None => softmax_stats(o.iter().map(|v| v.load())),
        };
        for (j, o) in o.iter_mut().enumerate() {
            let x: C = row.map_or_else(|| o.load(), |x| x[j].load());
            let d = x.sub(m);
            *o = if log {
                T::from_f64(d.to_f64() - s.ln())
            } else {
                T::from_f64(d.exp().to_f64() / s)
            };
        }
    }
}

/// Whether `T` is its own compute type (f32, f64): then `e_j` stored in an output row is
/// exact, and softmax and cross-entropy store it in the sum pass and divide it in the output
/// pass, one exp per element instead of two, with the same bits.
fn stores_exactly<T: 'static, C: 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<C>()
}

/// The softmax statistics of [`softmax_stats`] for a row read from `src` (from `out` when
/// `None`: in place), storing each `e_j = exp(x_j - m)` in `out` as it is summed. Only for
/// an element that [`stores_exactly`].
fn stored_exps<T: Numeric<Compute = C>, C: Real>(src: Option<&[T]>, out: &mut [T]) -> (C, f64) {
    let m = match src {
        Some(x) => row_max(x.iter().map(|v| v.load())),
        None => row_max(out.iter().map(|v| v.load())),
    };
    let mut s = -0.0f64; // where Rust's f64 `sum` starts, as in `softmax_stats`
    for (j, o) in out.iter_mut().enumerate() {
        let x: C = src.map_or_else(|| o.load(), |x| x[j].load());
        let e = x.sub(m).exp();
        s += e.to_f64();
        *o = T::store(e);
    }
    (m, s)
}

/// A row's maximum, NaNs ignored (`0` for an empty row, which is never passed).
fn row_max<C: Real>(row: impl Iterator<Item = C>) -> C {
    row.reduce(|m, v| m.max(v)).unwrap_or(C::ZERO)
}

/// A row's maximum (NaNs ignored) and `sum exp(x - max)` accumulated in f64; the row is
/// read twice. An empty row is never passed (`cols > 0`).
fn softmax_stats<C: Real>(row: impl Iterator<Item = C> + Clone) -> (C, f64) {
    let m = row_max(row.clone());
    let s = row.map(|x| x.sub(m).exp().to_f64()).sum::<f64>();
    (m, s)
}

/// Cross-entropy of each row of `rows x cols` logits against its label, with the reference
/// semantics: `loss_r = ln(s) - (x_l - m)` (the softmax statistics of [`softmax_rows`], in
/// f64, rounded once) and, when `grad` is given, `grad_rj = e_j / s - [j == l]`, the
/// gradient of `loss_r` with respect to the logits. A label `>= cols` gives a NaN loss and a
/// NaN gradient row.
pub fn cross_entropy_rows<T: Numeric<Compute = C>, C: Real>(
    logits: &[T],
    labels: &[u32],
    cols: usize,
    loss: &mut [T],
    mut grad: Option<&mut [T]>,
) {
    if cols == 0 {
        return;
    }
    for (r, (l, &label)) in loss.iter_mut().zip(labels).enumerate() {
        let row = &logits[r * cols..(r + 1) * cols];
        let label = label as usize;
        let g = grad
            .as_deref_mut()
            .map(|g| &mut g[r * cols..(r + 1) * cols]);
        if label >= cols {
            *l = T::from_f64(f64::NAN);
            if let Some(g) = g {
                g.fill(T::from_f64(f64::NAN));
            }
            continue;
        }
        let hot = |j: usize| if j == label { 1.0 } else { 0.0 };
        match g {
            Some(g) if stores_exactly::<T, C>() => {
                let (m, s) = stored_exps(Some(row), g);
                for (j, g) in g.iter_mut().enumerate() {
                    *g = T::from_f64(g.load().to_f64() / s - hot(j));
                }
                *l = T::from_f64(s.ln() - row[label].load().sub(m).to_f64());
            }
            g => {
                let (m, s) = softmax_stats(row.iter().map(|v| v.load()));
                *l = T::from_f64(s.ln() - row[label].load().sub(m).to_f64());
                for (j, (g, x)) in g.into_iter().flatten().zip(row).enumerate() {
                    *g = T::from_f64(x.load().sub(m).exp().to_f64() / s - hot(j));
                }
            }
        }
    }
}

/// Casts a slice with the reference semantics of [`Numeric::from_wide`].
pub fn cast_slice<T: Numeric, U: Numeric>(src: &[T], out: &mut [U]) {
    for (o, &x) in out.iter_mut().zip(src) {
        *o = U::from_wide(x.to_wide());
    }
}

/// A row-major matrix product `C = alpha * op(A) * op(B) + beta * C`, or a batch of them.
///
/// `op(A)` is `m x k`: `A` is stored `m x k`, or `k x m` when `trans_a`. `op(B)` is `k x n`:
/// `B` is stored `k x n`, or `n x k` when `trans_b`. `C` is `m x n`. All dense, row-major.
/// A batch of `batch` products reads matrix `i` of `A` at element `i * stride_a` (likewise
/// `B`, `C`): strides equal to the matrix sizes lay the batch out one matrix after another,
/// a stride of 0 for `A` or `B` uses one matrix for the whole batch. The outputs may not
/// overlap (`stride_c >= m * n`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm<T> {
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Whether `A` is stored transposed.
    pub trans_a: bool,
    /// Whether `B` is stored transposed.
    pub trans_b: bool,
    /// Scale of the product.
    pub alpha: T,
    /// Scale of `C`'s previous contents (0 ignores them, NaNs included).
    pub beta: T,
    /// Number of products (1 for a plain gemm).
    pub batch: usize,
    /// Elements from one `A` matrix to the next.
    pub stride_a: usize,
    /// Elements from one `B` matrix to the next.
    pub stride_b: usize,
    /// Elements from one `C` matrix to the next.
    pub stride_c: usize,
}

impl<T: Numeric> Gemm<T> {
    /// `C = A * B` for `A: m x k`, `B: k x n`, no transposes, `alpha = 1`, `beta = 0`.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Gemm {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            alpha: T::from_f64(1.0),
            beta: T::ZERO,
            batch: 1,
            stride_a: m.saturating_mul(k),
            stride_b: k.saturating_mul(n),
            stride_c: m.saturating_mul(n),
        }
    }

    /// Sets whether `A` and `B` are stored transposed.
    pub fn transpose(mut self, a: bool, b: bool) -> Self {
        self.trans_a = a;
        self.trans_b = b;
        self
    }

    /// Sets `alpha` and `beta`.
    pub fn scaled(mut self, alpha: T, beta: T) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// A batch of `batch` products of matrices stored one after another.
    pub fn batched(mut self, batch: usize) -> Self {
        self.batch = batch;
        self.stride_a = self.m.saturating_mul(self.k);
        self.stride_b = self.k.saturating_mul(self.n);
        self.stride_c = self.m.saturating_mul(self.n);
        self
    }

    /// A batch of `batch` products with the given strides, in elements.
    pub fn strided(
        mut self,
        batch: usize,
        stride_a: usize,
        stride_b: usize,
        stride_c: usize,
    ) -> Self {
        self.batch = batch;
        self.stride_a = stride_a;
        self.stride_b = stride_b;
        self.stride_c = stride_c;
        self
    }

    /// The same shape with `alpha` and `beta` widened to f64 (exactly: gemm's element types
    /// are floats), as backends receive it.
    pub fn erased(&self) -> Gemm<f64> {
        Gemm {
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            alpha: self.alpha.to_f64(),
            beta: self.beta.to_f64(),
            batch: self.batch,
            stride_a: self.stride_a,
            stride_b: self.stride_b,
            stride_c: self.stride_c,
        }
    }
}

impl<T> Gemm<T> {
    /// Elements one operand's batch spans: `(batch - 1) * stride + size` (0 for an empty
    /// batch), or `None` on overflow.
    pub fn span(&self, size: usize, stride: usize) -> Option<usize> {
        if self.batch == 0 {
            return Some(0);
        }
        (self.batch - 1).checked_mul(stride)?.checked_add(size)
    }
}

/// One built-in op as a backend receives it (see [`Backend::op`]).
///
/// Every range holds elements of the call's element type, except the `u32` labels of
/// [`Op::CrossEntropy`], the `u32` results of the index reductions and the output of
/// [`Op::Cast`]. Element-wise ops whose `src` is `None` run in place: `out` is read and
/// written. Lengths and shapes are never zero.
pub enum Op<'a, B: Backend> {
    /// `out[i] = value` over `len` elements.
    Fill {
        /// The output.
        out: BufAt<'a, B>,
        /// Elements.
        len: usize,
        /// The value.
        value: Scalar,
    },
    /// `y[i] = alpha * x[i] + y[i]` over `len` elements ([`Numeric::axpy`]).
    Axpy {
        /// The scale.
        alpha: Scalar,
        /// The input.
        x: BufAt<'a, B>,
        /// The input and output.
        y: BufAt<'a, B>,
        /// Elements.
        len: usize,
    },
    /// `out[i] = op(src[i])` over `len` elements.
    Unary {
        /// The function.
        op: UnaryOp,
        /// The input; `None`: in place.
        src: Option<BufAt<'a, B>>,
        /// The output.
        out: BufAt<'a, B>,
        /// Elements.
        len: usize,
    },
    /// `out = op(src, rhs)` over a `shape` matrix (`1 x len` unless `rhs` is a row or column
    /// vector).
    Binary {
        /// The function.
        op: BinaryOp,
        /// The first operand; `None`: in place.
        src: Option<BufAt<'a, B>>,
        /// The second operand.
        rhs: Rhs<'a, B>,
        /// The output.
        out: BufAt<'a, B>,
        /// The matrix.
        shape: Shape,
    },
    /// `out[i] = src[i] < lo ? lo : src[i] > hi ? hi : src[i]` (a NaN stays NaN).
    Clamp {
        /// Lower bound.
        lo: Scalar,
        /// Upper bound.
        hi: Scalar,
        /// The input; `None`: in place.
        src: Option<BufAt<'a, B>>,
        /// The output.
        out: BufAt<'a, B>,
        /// Elements.
        len: usize,
    },
    /// A reduction of each row of the `shape` matrix `x` into `out[row]` (an element, or a
    /// `u32` index for the index reductions); a whole array is one row.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// The input.
        x: BufAt<'a, B>,
        /// The matrix.
        shape: Shape,
        /// `shape.rows` results.
        out: BufAt<'a, B>,
    },
    /// The dot product of `len` elements of `x` and `y` into the one element `out`.
    Dot {
        /// First input.
        x: BufAt<'a, B>,
        /// Second input.
        y: BufAt<'a, B>,
        /// Elements.
        len: usize,
        /// The result.
        out: BufAt<'a, B>,
    },
    /// Row-wise softmax or log-softmax ([`softmax_rows`]); in place when `src` is `None`.
    Softmax {
        /// Log-softmax rather than softmax.
        log: bool,
        /// The input; `None`: in place.
        src: Option<BufAt<'a, B>>,
        /// The output.
        out: BufAt<'a, B>,
        /// The matrix.
        shape: Shape,
    },
    /// Cross-entropy of logits against `u32` labels ([`cross_entropy_rows`]).
    CrossEntropy {
        /// `shape` logits.
        logits: BufAt<'a, B>,
        /// `shape.rows` labels (`u32`).
        labels: BufAt<'a, B>,
        /// `shape.rows` losses.
        loss: BufAt<'a, B>,
        /// The `shape` gradient, if wanted.
        grad: Option<BufAt<'a, B>>,
        /// The matrix.
        shape: Shape,
    },
    /// `out[i] = src[i]` converted to `to` ([`Numeric::from_wide`]).
    Cast {
        /// The output's element type.
        to: DType,
        /// The input.
        src: BufAt<'a, B>,
        /// The output.
        out: BufAt<'a, B>,
        /// Elements.
        len: usize,
    },
    /// A matrix product or a batch of them ([`Gemm`]; `m`, `n`, `k` and `batch` non-zero).
    Gemm {
        /// The shapes, strides and scalars (`alpha` and `beta` exact in f64).
        g: Gemm<f64>,
        /// `A`.
        a: BufAt<'a, B>,
        /// `B`.
        b: BufAt<'a, B>,
        /// `C`.
        c: BufAt<'a, B>,
    },
}

impl<'a, B: Backend> Op<'a, B> {
    /// The op's name, for errors and fault injection.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Fill { .. } => "fill",
            Op::Axpy { .. } => "axpy",
            Op::Unary { op, .. } => op.name(),
            Op::Binary { op, .. } => op.name(),
            Op::Clamp { .. } => "clamp",
            Op::Reduce { op, .. } => op.name(),
            Op::Dot { .. } => "dot",
            Op::Softmax { log: false, .. } => "softmax",
            Op::Softmax { log: true, .. } => "log_softmax",
            Op::CrossEntropy { .. } => "cross_entropy",
            Op::Cast { .. } => "cast",
            Op::Gemm { .. } => "gemm",
        }
    }

    /// Whether only float element types have the op (a backend refuses it on integers).
    pub fn floats_only(&self) -> bool {
        match self {
            Op::Unary { op, .. } => op.floats_only(),
            Op::Binary { op, .. } => op.floats_only(),
            Op::Reduce { op, .. } => *op == ReduceOp::Mean,
            Op::Softmax { .. } | Op::CrossEntropy { .. } | Op::Gemm { .. } => true,
            Op::Fill { .. }
            | Op::Axpy { .. }
            | Op::Clamp { .. }
            | Op::Dot { .. }
            | Op::Cast { .. } => false,
        }
    }

    /// The same op on another backend's ranges, each converted by `f` (how a dispatching
    /// backend forwards an op to the backend it wraps).
    pub fn try_map<'b, C: Backend>(
        &self,
        f: impl Fn(BufAt<'a, B>) -> Result<BufAt<'b, C>>,
    ) -> Result<Op<'b, C>> {
        let opt = |x: Option<BufAt<'a, B>>| x.map(&f).transpose();
        Ok(match *self {
            Op::Fill { out, len, value } => Op::Fill {
                out: f(out)?,
                len,
                value,
            },
            Op::Axpy { alpha, x, y, len } => Op::Axpy {
                alpha,
                x: f(x)?,
                y: f(y)?,
                len,
            },
            Op::Unary { op, src, out, len } => Op::Unary {
                op,
                src: opt(src)?,
                out: f(out)?,
                len,
            },
            Op::Binary {
                op,
                src,
                ref rhs,
                out,
                shape,
            } => Op::Binary {
                op,
                src: opt(src)?,
                rhs: match *rhs {
                    Rhs::Array(x) => Rhs::Array(f(x)?),
                    Rhs::Row(x) => Rhs::Row(f(x)?),
                    Rhs::Col(x) => Rhs::Col(f(x)?),
                    Rhs::Scalar(s) => Rhs::Scalar(s),
                },
                out: f(out)?,
                shape,
            },
            Op::Clamp {
                lo,
                hi,
                src,
                out,
                len,
            } => Op::Clamp {
                lo,
                hi,
                src: opt(src)?,
                out: f(out)?,
                len,
            },
            Op::Reduce { op, x, shape, out } => Op::Reduce {
                op,
                x: f(x)?,
                shape,
                out: f(out)?,
            },
            Op::Dot { x, y, len, out } => Op::Dot {
                x: f(x)?,
                y: f(y)?,
                len,
                out: f(out)?,
            },
            Op::Softmax {
                log,
                src,
                out,
                shape,
            } => Op::Softmax {
                log,
                src: opt(src)?,
                out: f(out)?,
                shape,
            },
            Op::CrossEntropy {
                logits,
                labels,
                loss,
                grad,
                shape,
            } => Op::CrossEntropy {
                logits: f(logits)?,
                labels: f(labels)?,
                loss: f(loss)?,
                grad: opt(grad)?,
                shape,
            },
            Op::Cast { to, src, out, len } => Op::Cast {
                to,
                src: f(src)?,
                out: f(out)?,
                len,
            },
            Op::Gemm { g, a, b, c } => Op::Gemm {
                g,
                a: f(a)?,
                b: f(b)?,
                c: f(c)?,
            },
        })
    }
}

impl<B: Backend> std::fmt::Debug for Op<'_, B> {
    /// The op's name; ranges are opaque backend handles.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Op")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> std::fmt::Debug for Rhs<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rhs::Array(_) => f.write_str("Rhs::Array"),
            Rhs::Row(_) => f.write_str("Rhs::Row"),
            Rhs::Col(_) => f.write_str("Rhs::Col"),
            Rhs::Scalar(s) => write!(f, "Rhs::Scalar({s:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_round_trip_and_refuse_other_types() {
        let s = Scalar::new(-3i8);
        assert_eq!(s.get::<i8>(), Some(-3));
        assert_eq!(s.get::<u8>(), None);
        assert_eq!(s.bytes(), &[0xfd]);
        assert_eq!(Scalar::new(1.5f64).get::<f64>(), Some(1.5));
    }

    #[test]
    fn min_and_max_ignore_nan_and_keep_the_first_of_equals() {
        assert_eq!(Arith::max(f32::NAN, 1.0), 1.0);
        assert_eq!(Arith::max(1.0, f32::NAN), 1.0);
        assert!(Arith::max(f32::NAN, f32::NAN).is_nan());
        assert_eq!(Arith::min(2.0f32, -1.0), -1.0);
        assert!(Arith::max(-0.0f32, 0.0).is_sign_negative());
        assert!(Arith::min(0.0f32, -0.0).is_sign_positive());
    }

    #[test]
    fn arg_reductions_rank_nan_last_and_take_the_first_of_ties() {
        let x = [f32::NAN, 1.0, 3.0, 3.0, -2.0, f32::NAN];
        assert_eq!(ReduceOp::ArgMax.index(&x), Some(2));
        assert_eq!(ReduceOp::ArgMin.index(&x), Some(4));
        assert_eq!(ReduceOp::ArgMax.index(&[f32::NAN, f32::NAN]), Some(0));
        assert_eq!(ReduceOp::ArgMax.index::<f32>(&[]), None);
        assert_eq!(ReduceOp::Sum.index(&x), None);
    }

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

    #[test]
    fn softmax_rows_sum_to_one_and_cross_entropy_matches_log_softmax() {
        let x = [1.0f32, 2.0, 3.0, -1.0, 0.0, 1000.0];
        let mut p = [0.0f32; 6];
        softmax_rows(false, Some(&x), 3, &mut p);
        for row in p.chunks(3) {
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-6, "{row:?}");
        }
        assert_eq!(p[5], 1.0);
        let mut lp = [0.0f32; 6];
        softmax_rows(true, Some(&x), 3, &mut lp);
        let (mut loss, mut grad) = ([0.0f32; 2], [0.0f32; 6]);
        cross_entropy_rows(&x, &[2, 7], 3, &mut loss, Some(&mut grad));
        assert_eq!(loss[0], -lp[2]);
        assert!((grad[2] - (p[2] - 1.0)).abs() < 1e-7 && grad[0] == p[0]);
        assert!(loss[1].is_nan() && grad[3..].iter().all(|g| g.is_nan()));
    }

    /// Softmax and cross-entropy with the definitions written out plainly (two exps per
    /// element), against `softmax_rows` and `cross_entropy_rows` (one exp where the element
    /// is its own compute type), softmax from a source and in place, for f32 and f64, with
    /// NaN and infinite rows, rows of one element and an out-of-range label.
    #[test]
    fn softmax_and_cross_entropy_follow_the_definition_bit_for_bit() {
        fn check<T: Numeric<Compute = C>, C: Real>(x: &[T], cols: usize) {
            let mut want = vec![T::ZERO; x.len()];
            for (row, w) in x.chunks(cols).zip(want.chunks_mut(cols)) {
                let m = row.iter().map(|v| v.load()).reduce(|m, v| m.max(v));
                let m = m.unwrap_or(C::ZERO);
                let e = |v: &T| v.load().sub(m).exp().to_f64();
                let s: f64 = row.iter().map(e).sum();
                for (w, v) in w.iter_mut().zip(row) {
                    *w = T::from_f64(e(v) / s);
                }
            }
            // A NaN's sign and payload are not defined (Rust's float semantics): any NaN.
            let bits = |v: &[T]| {
                let bits = |v: f64| {
                    if v.is_nan() {
                        f64::NAN.to_bits()
                    } else {
                        v.to_bits()
                    }
                };
                v.iter()
                    .map(|v| bits(v.load().to_f64()))
                    .collect::<Vec<_>>()
            };
            let mut out = vec![T::ZERO; x.len()];
            softmax_rows(false, Some(x), cols, &mut out);
            assert_eq!(bits(&out), bits(&want), "{cols} columns");
            let mut inplace = x.to_vec();
            softmax_rows(false, None, cols, &mut inplace);
            assert_eq!(bits(&inplace), bits(&want), "{cols} columns, in place");
            // Cross-entropy: loss ln(s) - (x_l - m), gradient e_j / s - [j == l]; the last
            // row's label is out of range (NaNs).
            let rows = x.len() / cols;
            let labels: Vec<u32> = (0..rows)
                .map(|r| if r + 1 == rows { cols } else { (r * 7) % cols } as u32)
                .collect();
            let (mut want_loss, mut want_grad) = (vec![T::ZERO; rows], vec![T::ZERO; rows * cols]);
            for (r, row) in x.chunks_exact(cols).enumerate() {
                let (label, g) = (labels[r] as usize, &mut want_grad[r * cols..][..cols]);
                if label >= cols {
                    want_loss[r] = T::from_f64(f64::NAN);
                    g.fill(T::from_f64(f64::NAN));
                    continue;
                }
                let m = row.iter().map(|v| v.load()).reduce(|m, v| m.max(v));
                let m = m.unwrap_or(C::ZERO);
                let e = |v: &T| v.load().sub(m).exp().to_f64();
                let s: f64 = row.iter().map(e).sum();
                want_loss[r] = T::from_f64(s.ln() - row[label].load().sub(m).to_f64());
                for (j, (g, v)) in g.iter_mut().zip(row).enumerate() {
                    *g = T::from_f64(e(v) / s - if j == label { 1.0 } else { 0.0 });
                }
            }
            let x = &x[..rows * cols];
            let (mut loss, mut grad) = (vec![T::ZERO; rows], vec![T::ZERO; rows * cols]);
            cross_entropy_rows(x, &labels, cols, &mut loss, Some(&mut grad));
            assert_eq!(bits(&loss), bits(&want_loss), "{cols} columns: loss");
            assert_eq!(bits(&grad), bits(&want_grad), "{cols} columns: grad");
            let mut alone = vec![T::ZERO; rows];
            cross_entropy_rows(x, &labels, cols, &mut alone, None);
            assert_eq!(bits(&alone), bits(&want_loss), "{cols} columns: loss alone");
        }
        let mut next = crate::element::tests::xorshift(0x2545_f491_4f6c_dd1d);
        let mut xs: Vec<f64> = (0..4096)
            .map(|_| (next() % 20_001) as f64 / 1000.0 - 10.0)
            .collect();
        xs[5] = f64::NAN;
        xs[70] = f64::INFINITY;
        xs[200] = f64::NEG_INFINITY;
        for cols in [1, 3, 64, 1000] {
            check(&xs, cols);
            check(&xs.iter().map(|&x| x as f32).collect::<Vec<_>>(), cols);
        }
    }

    #[test]
    fn casts_saturate_floats_and_wrap_integers() {
        let mut i = [0i32; 5];
        cast_slice(&[f32::NAN, 3.9, -3.9, 1e20, -1e20], &mut i);
        assert_eq!(i, [0, 3, -3, i32::MAX, i32::MIN]);
        let mut u = [0u8; 3];
        cast_slice(&[-1i32, 256, 300], &mut u);
        assert_eq!(u, [255, 0, 44]);
        let mut f = [0f32; 1];
        cast_slice(&[u64::MAX], &mut f);
        assert_eq!(f[0], u64::MAX as f32);
    }
}
