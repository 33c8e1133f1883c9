//! Built-in ops, queued on a stream: fill, axpy, the element-wise table (unary, binary,
//! scalar, row and column broadcasts, each also in place), clamp, reductions (whole and per
//! row), softmax, cross-entropy, casts and gemm (plain and batched).
//!
//! Every op checks lengths, shapes, element types and contexts before anything is queued,
//! so a rejected call changes nothing. Empty inputs are valid: element-wise ops on them do
//! nothing, `sum` and `dot` give zero; `mean`, `min`, `max`, `argmin` and `argmax` of
//! nothing are [`Error::EmptyInput`]. The typed methods of the element-wise table (`relu`,
//! `add_row_inplace`, ...) are generated in `optable/`; this file has what they share.

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::{Backend, BufAt};
use crate::element::{DType, Element, Float, Numeric};
use crate::error::{same_len, Error, Result};
use crate::optable::{Bcast, BinaryOp, Gemm, Op, ReduceOp, Rhs, Scalar, Shape, UnaryOp};
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

fn product(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow {
        op,
        len: a,
        elem_bytes: b,
    })
}

/// `Some` of every element when none is `None`.
fn all_some<T: Copy, const N: usize>(xs: [Option<T>; N]) -> Option<[T; N]> {
    let first = xs.first().copied().flatten()?;
    if xs.iter().any(Option::is_none) {
        return None;
    }
    Some(xs.map(|x| x.unwrap_or(first)))
}

/// The elements of a `shape` matrix.
fn shape_len(op: &'static str, shape: Shape) -> Result<usize> {
    product(op, shape.rows, shape.cols)
}

/// The whole-array (`*_into`) and per-row (`row_*`) methods of each reduction.
macro_rules! reductions {
    ($( #[doc = $what:literal] $into:ident, $row:ident: $bound:ident, $op:ident, $R:ty; )*) => {$(
        #[doc = concat!("Writes", $what, " of `x` into the one-element `out`.")]
        pub fn $into<T: $bound>(
            &self,
            x: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<$R, B>,
        ) -> Result<()> {
            self.reduce_rows(stringify!($into), ReduceOp::$op, Shape::new(1, x.len()), x, out)
        }

        #[doc = concat!("Writes", $what, " of each row of the `shape` matrix `x` into `out` (`shape.rows` elements).")]
        pub fn $row<T: $bound>(
            &self,
            shape: Shape,
            x: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<$R, B>,
        ) -> Result<()> {
            self.reduce_rows(stringify!($row), ReduceOp::$op, shape, x, out)
        }
    )*};
}

impl<B: Backend> Stream<B> {
    /// Checks that every argument belongs to this stream's context, for the shortcuts that
    /// return before `enqueue` (which checks them otherwise).
    fn same_contexts<const N: usize>(
        &self,
        op: &'static str,
        args: [(&'static str, u64); N],
    ) -> Result<()> {
        for (arg, id) in args {
            self.shared_arc().same_context(op, arg, id)?;
        }
        Ok(())
    }

    /// A float-only op asked of an integer type, through the untyped entry points.
    fn floats_only(&self, name: &'static str, floats_only: bool, dtype: DType) -> Result<()> {
        if floats_only && !dtype.is_float() {
            return Err(Error::Unsupported {
                backend: self.backend().name(),
                what: format!("`{name}` on {dtype} (a float-only op)"),
            });
        }
        Ok(())
    }

    /// Queues one op of the table on `args` (read or written as marked): the one place the
    /// safe layer calls [`Backend::op`]. Does nothing when a range is empty.
    fn run_op<'s, const N: usize>(
        &self,
        name: &'static str,
        dtype: DType,
        args: [(&'static str, &SliceRef<'s, B>, Access); N],
        make: impl FnOnce([BufAt<'s, B>; N]) -> Op<'s, B>,
    ) -> Result<()> {
        self.enqueue(name, &args, || {
            let Some(ats) = all_some(args.map(|(_, s, _)| s.at())) else {
                return Ok(());
            };
            let op = make(ats);
            // SAFETY: every range comes from a checked view of an array of this context (in
            // bounds, aligned, of the element type the op reads there) whose length the
            // caller checked against the op's shape; `enqueue` has ordered the ranges after
            // conflicting uses on other streams and records this use, so no buffer is freed
            // before the op has run; a written range is a `&mut` borrow, so it overlaps no
            // other argument (in-place ops pass it once, as `out`).
            unsafe { self.backend().op(self.raw(), dtype, &op) }
        })
    }

    /// Zeroes a range of an allocation (a block reused for `alloc_zeros`).
    pub(crate) fn zero_bytes(&self, range: &SliceRef<'_, B>) -> Result<()> {
        let len = range.bytes();
        self.run_op(
            "alloc_zeros",
            DType::U8,
            [("dst", range, Access::Write)],
            |[out]| Op::Fill {
                out,
                len,
                value: Scalar::new(0u8),
            },
        )
    }

    /// Sets every element of `dst` to `value`.
    pub fn fill<T: Numeric>(&self, dst: &mut impl DeviceWrite<T, B>, value: T) -> Result<()> {
        let (d, len) = (dst.slice_ref(), dst.len());
        self.run_op("fill", T::DTYPE, [("dst", &d, Access::Write)], |[out]| {
            Op::Fill {
                out,
                len,
                value: Scalar::new(value),
            }
        })
    }

    /// `y = alpha * x + y` ([`Numeric::axpy`]: no fused multiply-add).
    pub fn axpy<T: Numeric>(
        &self,
        alpha: T,
        x: &impl DeviceRead<T, B>,
        y: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("axpy", "y", x.len(), y.len())?;
        let (xs, ys, len) = (x.slice_ref(), y.slice_ref(), x.len());
        self.run_op(
            "axpy",
            T::DTYPE,
            [("x", &xs, Access::Read), ("y", &ys, Access::Write)],
            |[x, y]| Op::Axpy {
                alpha: Scalar::new(alpha),
                x,
                y,
                len,
            },
        )
    }

    /// `x = alpha * x` (the same as [`Stream::mul_scalar_inplace`]).
    pub fn scale<T: Numeric>(&self, alpha: T, x: &mut impl DeviceWrite<T, B>) -> Result<()> {
        self.binary_scalar_inplace_as("scale", BinaryOp::Mul, x, alpha)
    }

    /// `out = op(x)` element-wise; a float-only op on an integer type is
    /// [`Error::Unsupported`]. The named methods (`relu`, `sqrt`, ...) call this.
    pub fn unary<T: Numeric>(
        &self,
        op: UnaryOp,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.unary_as(op.name(), op, x, out)
    }

    /// [`Stream::unary`], its errors naming `call`.
    pub(crate) fn unary_as<T: Numeric>(
        &self,
        call: &'static str,
        op: UnaryOp,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        same_len(name, "out", x.len(), out.len())?;
        let (sx, so, len) = (x.slice_ref(), out.slice_ref(), x.len());
        self.run_op(
            name,
            T::DTYPE,
            [("x", &sx, Access::Read), ("out", &so, Access::Write)],
            |[src, out]| Op::Unary {
                op,
                src: Some(src),
                out,
                len,
            },
        )
    }

    /// `x = op(x)` element-wise (see [`Stream::unary`]).
    pub fn unary_inplace<T: Numeric>(
        &self,
        op: UnaryOp,
        x: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.unary_inplace_as(op.name(), op, x)
    }

    /// [`Stream::unary_inplace`], its errors naming `call`.
    pub(crate) fn unary_inplace_as<T: Numeric>(
        &self,
        call: &'static str,
        op: UnaryOp,
        x: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        let (sx, len) = (x.slice_ref(), x.len());
        self.run_op(name, T::DTYPE, [("x", &sx, Access::Write)], |[out]| {
            Op::Unary {
                op,
                src: None,
                out,
                len,
            }
        })
    }

    /// `out = a op b` element-wise; a float-only op on an integer type is
    /// [`Error::Unsupported`]. The named methods (`add`, `pow`, ...) call this.
    pub fn binary<T: Numeric>(
        &self,
        op: BinaryOp,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.binary_as(op.name(), op, a, b, out)
    }

    /// [`Stream::binary`], its errors naming `call`.
    pub(crate) fn binary_as<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        same_len(name, "b", a.len(), b.len())?;
        same_len(name, "out", a.len(), out.len())?;
        let (sa, sb, so) = (a.slice_ref(), b.slice_ref(), out.slice_ref());
        let shape = Shape::new(1, a.len());
        self.run_op(
            name,
            T::DTYPE,
            [
                ("a", &sa, Access::Read),
                ("b", &sb, Access::Read),
                ("out", &so, Access::Write),
            ],
            |[a, b, out]| Op::Binary {
                op,
                src: Some(a),
                rhs: Rhs::Array(b),
                out,
                shape,
            },
        )
    }

    /// `a = a op b` element-wise (see [`Stream::binary`]).
    pub fn binary_inplace<T: Numeric>(
        &self,
        op: BinaryOp,
        a: &mut impl DeviceWrite<T, B>,
        b: &impl DeviceRead<T, B>,
    ) -> Result<()> {
        self.binary_inplace_as(op.name(), op, a, b)
    }

    /// [`Stream::binary_inplace`], its errors naming `call`.
    pub(crate) fn binary_inplace_as<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        a: &mut impl DeviceWrite<T, B>,
        b: &impl DeviceRead<T, B>,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        same_len(name, "b", a.len(), b.len())?;
        let (sa, sb) = (a.slice_ref(), b.slice_ref());
        let shape = Shape::new(1, a.len());
        self.run_op(
            name,
            T::DTYPE,
            [("a", &sa, Access::Write), ("b", &sb, Access::Read)],
            |[out, b]| Op::Binary {
                op,
                src: None,
                rhs: Rhs::Array(b),
                out,
                shape,
            },
        )
    }

    /// `out = a op s` for one scalar `s` (see [`Stream::binary`]).
    pub fn binary_scalar<T: Numeric>(
        &self,
        op: BinaryOp,
        a: &impl DeviceRead<T, B>,
        s: T,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.binary_scalar_as(op.name(), op, a, s, out)
    }

    /// [`Stream::binary_scalar`], its errors naming `call`.
    pub(crate) fn binary_scalar_as<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        a: &impl DeviceRead<T, B>,
        s: T,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        same_len(name, "out", a.len(), out.len())?;
        let (sa, so) = (a.slice_ref(), out.slice_ref());
        let shape = Shape::new(1, a.len());
        self.run_op(
            name,
            T::DTYPE,
            [("a", &sa, Access::Read), ("out", &so, Access::Write)],
            |[a, out]| Op::Binary {
                op,
                src: Some(a),
                rhs: Rhs::Scalar(Scalar::new(s)),
                out,
                shape,
            },
        )
    }

    /// `a = a op s` for one scalar `s` (see [`Stream::binary`]).
    pub fn binary_scalar_inplace<T: Numeric>(
        &self,
        op: BinaryOp,
        a: &mut impl DeviceWrite<T, B>,
        s: T,
    ) -> Result<()> {
        self.binary_scalar_inplace_as(op.name(), op, a, s)
    }

    /// [`Stream::binary_scalar_inplace`], its errors naming `call`.
    pub(crate) fn binary_scalar_inplace_as<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        a: &mut impl DeviceWrite<T, B>,
        s: T,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        let sa = a.slice_ref();
        let shape = Shape::new(1, a.len());
        self.run_op(name, T::DTYPE, [("a", &sa, Access::Write)], |[out]| {
            Op::Binary {
                op,
                src: None,
                rhs: Rhs::Scalar(Scalar::new(s)),
                out,
                shape,
            }
        })
    }

    /// `out[r][j] = a[r][j] op v[j]`: the row vector `v` (`shape.cols` elements) over every
    /// row of the `shape` matrix `a` (see [`Stream::binary`]; `add_row`, ... call this).
    pub fn binary_row<T: Numeric>(
        &self,
        op: BinaryOp,
        shape: Shape,
        a: &impl DeviceRead<T, B>,
        v: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.binary_bcast(op.name(), op, shape, Bcast::Row, a, v, out)
    }

    /// In place: `a[r][j] = a[r][j] op v[j]` (see [`Stream::binary_row`]).
    pub fn binary_row_inplace<T: Numeric>(
        &self,
        op: BinaryOp,
        shape: Shape,
        a: &mut impl DeviceWrite<T, B>,
        v: &impl DeviceRead<T, B>,
    ) -> Result<()> {
        self.binary_bcast_inplace(op.name(), op, shape, Bcast::Row, a, v)
    }

    /// `out[r][j] = a[r][j] op v[r]`: the column vector `v` (`shape.rows` elements) over
    /// every column of the `shape` matrix `a`.
    pub fn binary_col<T: Numeric>(
        &self,
        op: BinaryOp,
        shape: Shape,
        a: &impl DeviceRead<T, B>,
        v: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.binary_bcast(op.name(), op, shape, Bcast::Col, a, v, out)
    }

    /// In place: `a[r][j] = a[r][j] op v[r]` (see [`Stream::binary_col`]).
    pub fn binary_col_inplace<T: Numeric>(
        &self,
        op: BinaryOp,
        shape: Shape,
        a: &mut impl DeviceWrite<T, B>,
        v: &impl DeviceRead<T, B>,
    ) -> Result<()> {
        self.binary_bcast_inplace(op.name(), op, shape, Bcast::Col, a, v)
    }

    /// Checks a broadcast's matrix and vector lengths; errors name `call`.
    fn check_bcast<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        shape: Shape,
        how: Bcast,
        a: usize,
        v: usize,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op.floats_only(), T::DTYPE)?;
        same_len(name, "a", shape_len(name, shape)?, a)?;
        match how {
            Bcast::Row => same_len(name, "v", shape.cols, v),
            Bcast::Col => same_len(name, "v", shape.rows, v),
        }
    }

    /// `out = a op v` with the vector `v` broadcast over the rows or columns of `a`.
    // Eight arguments: the generated methods' name and op, and the operands of a broadcast.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn binary_bcast<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        shape: Shape,
        how: Bcast,
        a: &impl DeviceRead<T, B>,
        v: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = call;
        self.check_bcast::<T>(call, op, shape, how, a.len(), v.len())?;
        same_len(name, "out", a.len(), out.len())?;
        let (sa, sv, so) = (a.slice_ref(), v.slice_ref(), out.slice_ref());
        self.run_op(
            name,
            T::DTYPE,
            [
                ("a", &sa, Access::Read),
                ("v", &sv, Access::Read),
                ("out", &so, Access::Write),
            ],
            |[a, v, out]| Op::Binary {
                op,
                src: Some(a),
                rhs: match how {
                    Bcast::Row => Rhs::Row(v),
                    Bcast::Col => Rhs::Col(v),
                },
                out,
                shape,
            },
        )
    }

    /// `a = a op v` with the vector `v` broadcast over the rows or columns of `a`.
    pub(crate) fn binary_bcast_inplace<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        shape: Shape,
        how: Bcast,
        a: &mut impl DeviceWrite<T, B>,
        v: &impl DeviceRead<T, B>,
    ) -> Result<()> {
        let name = call;
        self.check_bcast::<T>(call, op, shape, how, a.len(), v.len())?;
        let (sa, sv) = (a.slice_ref(), v.slice_ref());
        self.run_op(
            name,
            T::DTYPE,
            [("a", &sa, Access::Write), ("v", &sv, Access::Read)],
            |[out, v]| Op::Binary {
                op,
                src: None,
                rhs: match how {
                    Bcast::Row => Rhs::Row(v),
                    Bcast::Col => Rhs::Col(v),
                },
                out,
                shape,
            },
        )
    }

    /// `out = clamp(x, lo, hi)`: `lo` below `lo`, `hi` above `hi`, `x` otherwise (a NaN
    /// stays NaN; with `lo > hi` every element becomes `hi`... or `lo`: the first test that
    /// holds, `x < lo`, wins).
    pub fn clamp<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        lo: T,
        hi: T,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("clamp", "out", x.len(), out.len())?;
        let (sx, so, len) = (x.slice_ref(), out.slice_ref(), x.len());
        self.run_op(
            "clamp",
            T::DTYPE,
            [("x", &sx, Access::Read), ("out", &so, Access::Write)],
            |[src, out]| Op::Clamp {
                lo: Scalar::new(lo),
                hi: Scalar::new(hi),
                src: Some(src),
                out,
                len,
            },
        )
    }

    /// In place: `x = clamp(x, lo, hi)` (see [`Stream::clamp`]).
    pub fn clamp_inplace<T: Numeric>(
        &self,
        x: &mut impl DeviceWrite<T, B>,
        lo: T,
        hi: T,
    ) -> Result<()> {
        let (sx, len) = (x.slice_ref(), x.len());
        self.run_op("clamp", T::DTYPE, [("x", &sx, Access::Write)], |[out]| {
            Op::Clamp {
                lo: Scalar::new(lo),
                hi: Scalar::new(hi),
                src: None,
                out,
                len,
            }
        })
    }

    /// Converts every element of `x` to `U` into `out` ([`Numeric::from_wide`]: integers
    /// wrap from integers and saturate from floats, NaN becoming 0; floats round to
    /// nearest even). A backend without `U` (or `T`) is [`Error::Unsupported`].
    pub fn cast<T: Numeric, U: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<U, B>,
    ) -> Result<()> {
        same_len("cast", "out", x.len(), out.len())?;
        let (sx, so, len) = (x.slice_ref(), out.slice_ref(), x.len());
        self.run_op(
            "cast",
            T::DTYPE,
            [("x", &sx, Access::Read), ("out", &so, Access::Write)],
            |[src, out]| Op::Cast {
                to: U::DTYPE,
                src,
                out,
                len,
            },
        )
    }

    /// The reductions of each row of a `shape` matrix into `out` (one per row), of any
    /// result type `R` (the element type, or `u32` for the index reductions); errors name
    /// `call`, the method the user called.
    fn reduce_rows<T: Numeric, R: Element>(
        &self,
        call: &'static str,
        op: ReduceOp,
        shape: Shape,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<R, B>,
    ) -> Result<()> {
        let name = call;
        self.floats_only(name, op == ReduceOp::Mean, T::DTYPE)?;
        same_len(name, "x", shape_len(name, shape)?, x.len())?;
        same_len(name, "out", shape.rows, out.len())?;
        if op.is_index() && shape.cols > 1 + u32::MAX as usize {
            return Err(Error::InvalidShape {
                op: name,
                arg: "x",
                message: format!(
                    "{} elements per row: an index past u32::MAX does not fit the u32 result",
                    shape.cols
                ),
            });
        }
        self.same_contexts(
            name,
            [
                ("x", x.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if shape.rows > 0 && shape.cols == 0 {
            return match (op, Scalar::new(T::ZERO).get::<R>()) {
                (ReduceOp::Sum, Some(zero)) => self.fill_any(out, zero),
                _ => Err(Error::EmptyInput { op: name }),
            };
        }
        let (sx, so) = (x.slice_ref(), out.slice_ref());
        self.run_op(
            name,
            T::DTYPE,
            [("x", &sx, Access::Read), ("out", &so, Access::Write)],
            |[x, out]| Op::Reduce { op, x, shape, out },
        )
    }

    /// `fill` for an element type known only as `Element` (the zero of an empty sum).
    fn fill_any<R: Element>(&self, dst: &mut impl DeviceWrite<R, B>, value: R) -> Result<()> {
        let (d, len) = (dst.slice_ref(), dst.len());
        self.run_op("fill", R::DTYPE, [("dst", &d, Access::Write)], |[out]| {
            Op::Fill {
                out,
                len,
                value: Scalar::new(value),
            }
        })
    }

    reductions! {
        /// the sum (0 for an empty `x`)
        sum_into, row_sum: Numeric, Sum, T;
        /// the mean
        mean_into, row_mean: Float, Mean, T;
        /// the smallest element
        min_into, row_min: Numeric, Min, T;
        /// the largest element
        max_into, row_max: Numeric, Max, T;
        /// the index of the first smallest element
        argmin_into, row_argmin: Numeric, ArgMin, u32;
        /// the index of the first largest element (for a classifier's logits, its predictions)
        argmax_into, row_argmax: Numeric, ArgMax, u32;
    }

    /// Writes the dot product of `x` and `y` into the one-element `out` (0 when empty).
    pub fn dot_into<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        y: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.dot_as("dot_into", x, y, out)
    }

    /// [`Stream::dot_into`], its errors naming `call`.
    fn dot_as<T: Numeric>(
        &self,
        call: &'static str,
        x: &impl DeviceRead<T, B>,
        y: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len(call, "y", x.len(), y.len())?;
        same_len(call, "out", 1, out.len())?;
        self.same_contexts(
            call,
            [
                ("x", x.slice_ref().context_id()),
                ("y", y.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if x.is_empty() {
            return self.fill(out, T::ZERO);
        }
        let (sx, sy, so, len) = (x.slice_ref(), y.slice_ref(), out.slice_ref(), x.len());
        self.run_op(
            call,
            T::DTYPE,
            [
                ("x", &sx, Access::Read),
                ("y", &sy, Access::Read),
                ("out", &so, Access::Write),
            ],
            |[x, y, out]| Op::Dot { x, y, len, out },
        )
    }

    /// The sum of `x`; waits for the result.
    pub fn sum<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<T> {
        self.host_reduce("sum", ReduceOp::Sum, x)
    }

    /// The mean of `x` ([`Error::EmptyInput`] when empty); waits for the result.
    pub fn mean<T: Float>(&self, x: &impl DeviceRead<T, B>) -> Result<T> {
        self.host_reduce("mean", ReduceOp::Mean, x)
    }

    /// The smallest element of `x` ([`Error::EmptyInput`] when empty); waits for the result.
    pub fn min<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<T> {
        self.host_reduce("min", ReduceOp::Min, x)
    }

    /// The largest element of `x` ([`Error::EmptyInput`] when empty); waits for the result.
    pub fn max<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<T> {
        self.host_reduce("max", ReduceOp::Max, x)
    }

    /// The index of the first smallest element of `x` (NaNs rank last;
    /// [`Error::EmptyInput`] when empty); waits for the result.
    pub fn argmin<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<usize> {
        self.host_reduce::<T, u32>("argmin", ReduceOp::ArgMin, x)
            .map(|i| i as usize)
    }

    /// The index of the first largest element of `x` (NaNs rank last;
    /// [`Error::EmptyInput`] when empty); waits for the result.
    pub fn argmax<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<usize> {
        self.host_reduce::<T, u32>("argmax", ReduceOp::ArgMax, x)
            .map(|i| i as usize)
    }

    /// The dot product of `x` and `y`; waits for the result.
    pub fn dot<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        y: &impl DeviceRead<T, B>,
    ) -> Result<T> {
        self.host_result("dot", |s, out| s.dot_as("dot", x, y, out))
    }

    /// The whole-array reduction `op` of `x`, downloaded; errors name `call`.
    fn host_reduce<T: Numeric, R: Element>(
        &self,
        call: &'static str,
        op: ReduceOp,
        x: &impl DeviceRead<T, B>,
    ) -> Result<R> {
        self.host_result(call, |s, out| {
            s.reduce_rows(call, op, Shape::new(1, x.len()), x, out)
        })
    }

    /// Runs `f` into a fresh one-element array and downloads the element. Refused during
    /// any capture of the context, naming `call`: the result needs an allocation and a
    /// blocking read, neither of which a graph can hold.
    fn host_result<R: Element>(
        &self,
        call: &'static str,
        f: impl FnOnce(&Self, &mut crate::GpuArray<R, B>) -> Result<()>,
    ) -> Result<R> {
        self.shared_arc().not_capturing(
            call,
            "a result returned to the host needs an allocation and a blocking read, which a \
             capture cannot hold (reduce into a device array with the `_into` form instead)",
        )?;
        let mut out = crate::GpuArray::<R, B>::alloc(self, 1, false)?;
        f(self, &mut out)?;
        let mut v = [R::default()];
        self.download_blocking(&out, &mut v)?;
        Ok(v[0])
    }

    fn softmax_op<T: Float>(
        &self,
        log: bool,
        shape: Shape,
        x: Option<&SliceRef<'_, B>>,
        xlen: usize,
        out: &SliceRef<'_, B>,
        outlen: usize,
    ) -> Result<()> {
        let name = if log { "log_softmax" } else { "softmax" };
        let len = shape_len(name, shape)?;
        same_len(name, "x", len, xlen)?;
        same_len(name, "out", len, outlen)?;
        match x {
            Some(sx) => self.run_op(
                name,
                T::DTYPE,
                [("x", sx, Access::Read), ("out", out, Access::Write)],
                |[src, out]| Op::Softmax {
                    log,
                    src: Some(src),
                    out,
                    shape,
                },
            ),
            None => self.run_op(name, T::DTYPE, [("x", out, Access::Write)], |[out]| {
                Op::Softmax {
                    log,
                    src: None,
                    out,
                    shape,
                }
            }),
        }
    }

    /// Row-wise softmax of the `shape` matrix `x` into `out`, numerically stable (each row
    /// shifted by its maximum; see [`crate::optable::softmax_rows`] for the exact
    /// semantics).
    pub fn softmax<T: Float>(
        &self,
        shape: Shape,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let (sx, so) = (x.slice_ref(), out.slice_ref());
        self.softmax_op::<T>(false, shape, Some(&sx), x.len(), &so, out.len())
    }

    /// In place: row-wise softmax of the `shape` matrix `x`.
    pub fn softmax_inplace<T: Float>(
        &self,
        shape: Shape,
        x: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let sx = x.slice_ref();
        self.softmax_op::<T>(false, shape, None, x.len(), &sx, x.len())
    }

    /// Row-wise log-softmax of the `shape` matrix `x` into `out`, numerically stable.
    pub fn log_softmax<T: Float>(
        &self,
        shape: Shape,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let (sx, so) = (x.slice_ref(), out.slice_ref());
        self.softmax_op::<T>(true, shape, Some(&sx), x.len(), &so, out.len())
    }

    /// In place: row-wise log-softmax of the `shape` matrix `x`.
    pub fn log_softmax_inplace<T: Float>(
        &self,
        shape: Shape,
        x: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let sx = x.slice_ref();
        self.softmax_op::<T>(true, shape, None, x.len(), &sx, x.len())
    }

    fn cross_entropy_op<T: Float>(
        &self,
        shape: Shape,
        logits: &impl DeviceRead<T, B>,
        labels: &impl DeviceRead<u32, B>,
        loss: &mut impl DeviceWrite<T, B>,
        grad: Option<(&SliceRef<'_, B>, usize)>,
    ) -> Result<()> {
        let name = "cross_entropy";
        let len = shape_len(name, shape)?;
        same_len(name, "logits", len, logits.len())?;
        same_len(name, "labels", shape.rows, labels.len())?;
        same_len(name, "loss", shape.rows, loss.len())?;
        if let Some((_, n)) = grad {
            same_len(name, "grad", len, n)?;
        }
        if shape.rows > 0 && shape.cols == 0 {
            return Err(Error::EmptyInput { op: name });
        }
        let (sl, sy, so) = (logits.slice_ref(), labels.slice_ref(), loss.slice_ref());
        let reads = [
            ("logits", &sl, Access::Read),
            ("labels", &sy, Access::Read),
            ("loss", &so, Access::Write),
        ];
        match grad {
            None => self.run_op(name, T::DTYPE, reads, |[logits, labels, loss]| {
                Op::CrossEntropy {
                    logits,
                    labels,
                    loss,
                    grad: None,
                    shape,
                }
            }),
            Some((sg, _)) => {
                let [a, b, c] = reads;
                self.run_op(
                    name,
                    T::DTYPE,
                    [a, b, c, ("grad", sg, Access::Write)],
                    |[logits, labels, loss, grad]| Op::CrossEntropy {
                        logits,
                        labels,
                        loss,
                        grad: Some(grad),
                        shape,
                    },
                )
            }
        }
    }

    /// Cross-entropy of each row of the `shape` logits against its label (`labels[r]` in
    /// `0..shape.cols`) into `loss` (`shape.rows` elements): `loss[r] = -log_softmax(x_r)[l]`.
    /// A label out of range gives a NaN loss for its row. Average with `mean` for the usual
    /// batch loss.
    pub fn cross_entropy<T: Float>(
        &self,
        shape: Shape,
        logits: &impl DeviceRead<T, B>,
        labels: &impl DeviceRead<u32, B>,
        loss: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.cross_entropy_op(shape, logits, labels, loss, None)
    }

    /// [`Stream::cross_entropy`] and its gradient with respect to the logits:
    /// `grad[r][j] = softmax(x_r)[j] - [j == labels[r]]` (scale it by `1 / rows` for the
    /// gradient of the mean loss). A label out of range gives a NaN gradient row.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
    /// use gpukit::Shape;
    /// let logits = ctx.alloc_upload(&[2.0f32, 0.0, 0.0, 0.0, 0.0, 3.0])?; // 2 x 3
    /// let labels = ctx.alloc_upload(&[0u32, 2])?;
    /// let (mut loss, mut grad) = (ctx.alloc_zeros::<f32>(2)?, ctx.alloc_zeros::<f32>(6)?);
    /// ctx.cross_entropy_grad(Shape::new(2, 3), &logits, &labels, &mut loss, &mut grad)?;
    /// let loss = loss.download()?;
    /// assert!((loss[0] - (2.0f32.exp() + 2.0).ln() + 2.0).abs() < 1e-6);
    /// assert!(grad.download()?[0] < 0.0); // raising the right logit lowers the loss
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn cross_entropy_grad<T: Float>(
        &self,
        shape: Shape,
        logits: &impl DeviceRead<T, B>,
        labels: &impl DeviceRead<u32, B>,
        loss: &mut impl DeviceWrite<T, B>,
        grad: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let sg = grad.slice_ref();
        self.cross_entropy_op(shape, logits, labels, loss, Some((&sg, grad.len())))
    }

    /// Row-major `C = alpha * op(A) * op(B) + beta * C` (see [`Gemm`] for the shapes), or a
    /// batch of such products in one call ([`Gemm::batched`], [`Gemm::strided`]). Each
    /// operand's length must be exactly the span its batch covers,
    /// `(batch - 1) * stride + rows * cols`; outputs may not overlap.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
    /// use gpukit::Gemm;
    /// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?; // 2 x 3
    /// let b = ctx.alloc_upload(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0])?; // 3 x 2
    /// let mut c = ctx.alloc_zeros::<f32>(4)?;                          // 2 x 2
    /// ctx.gemm(Gemm::new(2, 2, 3), &a, &b, &mut c)?;
    /// assert_eq!(c.download()?, [4.0, 5.0, 10.0, 11.0]);
    ///
    /// // Two products sharing B (stride 0): A is 2 matrices of 1 x 3.
    /// let mut c2 = ctx.alloc_zeros::<f32>(4)?;
    /// ctx.gemm(Gemm::new(1, 2, 3).strided(2, 3, 0, 2), &a, &b, &mut c2)?;
    /// assert_eq!(c2.download()?, [4.0, 5.0, 10.0, 11.0]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn gemm<T: Float>(
        &self,
        g: Gemm<T>,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        c: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let span = |arg: &'static str, rows: usize, cols: usize, stride: usize| {
            let size = product("gemm", rows, cols)?;
            g.span(size, stride)
                .ok_or(Error::SizeOverflow {
                    op: "gemm",
                    len: stride,
                    elem_bytes: g.batch,
                })
                .map(|n| (arg, n, size))
        };
        let sizes = [
            span("a", g.m, g.k, g.stride_a)?,
            span("b", g.k, g.n, g.stride_b)?,
            span("c", g.m, g.n, g.stride_c)?,
        ];
        let lens = [a.len(), b.len(), c.len()];
        for ((arg, want, _), got) in sizes.iter().zip(lens) {
            same_len("gemm", arg, *want, got)?;
        }
        let c_size = sizes[2].2;
        if g.batch > 1 && c_size > 0 && g.stride_c < c_size {
            return Err(Error::InvalidShape {
                op: "gemm",
                arg: "c",
                message: format!(
                    "batch stride {} is less than one {} x {} output ({} elements): the batch's outputs would overlap",
                    g.stride_c, g.m, g.n, c_size
                ),
            });
        }
        self.same_contexts(
            "gemm",
            [
                ("a", a.slice_ref().context_id()),
                ("b", b.slice_ref().context_id()),
                ("c", c.slice_ref().context_id()),
            ],
        )?;
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(());
        }
        let (sa, sb, sc) = (a.slice_ref(), b.slice_ref(), c.slice_ref());
        if g.k == 0 {
            // An empty product: C = beta * C, with beta = 0 clearing NaNs as BLAS does,
            // matrix by matrix (a strided batch leaves the gaps alone).
            let elem = std::mem::size_of::<T>();
            return self.enqueue("gemm", &[("c", &sc, Access::Write)], || {
                let Some(c) = sc.at() else { return Ok(()) };
                for i in 0..g.batch {
                    let out = BufAt {
                        buf: c.buf,
                        offset: c.offset + i * g.stride_c * elem,
                    };
                    let op = if g.beta == T::ZERO {
                        Op::Fill {
                            out,
                            len: c_size,
                            value: Scalar::new(T::ZERO),
                        }
                    } else {
                        Op::Binary {
                            op: BinaryOp::Mul,
                            src: None,
                            rhs: Rhs::Scalar(Scalar::new(g.beta)),
                            out,
                            shape: Shape::new(1, c_size),
                        }
                    };
                    // SAFETY: matrix `i` starts at `i * stride_c` elements and holds `c_size`,
                    // inside the span `(batch - 1) * stride_c + c_size` that `c`'s checked length
                    // equals; the rest is `run_op`'s argument: `c` is ordered and recorded by
                    // this `enqueue`, and written by nothing else.
                    unsafe { self.backend().op(self.raw(), T::DTYPE, &op) }?;
                }
                Ok(())
            });
        }
        let ge = g.erased();
        self.run_op(
            "gemm",
            T::DTYPE,
            [
                ("a", &sa, Access::Read),
                ("b", &sb, Access::Read),
                ("c", &sc, Access::Write),
            ],
            |[a, b, c]| Op::Gemm { g: ge, a, b, c },
        )
    }
}
