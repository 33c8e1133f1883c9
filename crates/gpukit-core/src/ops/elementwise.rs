//! Element-wise ops: fill, axpy, the table's unary and binary ops (with scalars and row
//! and column broadcasts, each also in place), clamp and casts.

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Numeric;
use crate::error::{same_len, Result};
use crate::optable::{Bcast, BinaryOp, Op, Rhs, Scalar, Shape, UnaryOp};
use crate::stream::Stream;
use crate::track::Access;

use super::shape_len;

impl<B: Backend> Stream<B> {
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
    /// [`crate::Error::Unsupported`]. The named methods (`relu`, `sqrt`, ...) call this.
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
    /// [`crate::Error::Unsupported`]. The named methods (`add`, `pow`, ...) call this.
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
    /// nearest even). A backend without `U` (or `T`) is [`crate::Error::Unsupported`].
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
}
