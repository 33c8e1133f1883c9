//! Element-wise ops: fill, axpy, the table's unary and binary ops (with scalars and row
//! and column broadcasts, each also in place), clamp and casts.

use gpukit_macros::kernel;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Numeric;
use crate::error::{same_len, Result};
use crate::kernel::{Reads, Value, Writes};
use crate::optable::{Bcast, BinaryOp, Shape, UnaryOp};

use super::map::{cast_spec, Rhs2};
use crate::stream::Stream;
use crate::track::SliceRef;

use super::shape_len;

/// `out[i] = value`.
#[kernel(core = "crate")]
fn fill<T: Numeric>(out: &mut [T], value: T) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < out.len() {
        out[i] = value;
        i += stride;
    }
}

/// `y[i] = alpha * x[i] + y[i]`, the product and the sum each rounded in the compute type
/// (generated CUDA C is compiled without fused multiply-add) and f16 and bf16 rounded once,
/// by the store ([`Numeric::axpy`]).
#[kernel(core = "crate")]
fn axpy<T: Numeric>(alpha: T, x: &[T], y: &mut [T]) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < y.len() {
        y[i] = alpha * x[i] + y[i];
        i += stride;
    }
}

/// `out[i] = x[i]` clamped to `lo..=hi`: `lo` where `x[i] < lo`, else `hi` where
/// `x[i] > hi` (a NaN stays NaN).
#[kernel(core = "crate")]
fn clamp_elements<T: Numeric>(x: &[T], lo: T, hi: T, out: &mut [T]) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < out.len() {
        let v = x[i];
        if v < lo {
            out[i] = lo;
        } else if v > hi {
            out[i] = hi;
        } else {
            out[i] = v;
        }
        i += stride;
    }
}

/// [`clamp_elements`] in place.
#[kernel(core = "crate")]
fn clamp_in_place<T: Numeric>(x: &mut [T], lo: T, hi: T) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < x.len() {
        let v = x[i];
        if v < lo {
            x[i] = lo;
        } else if v > hi {
            x[i] = hi;
        }
        i += stride;
    }
}

/// The reference of [`clamp_elements`] for one element.
fn clamp_one<T: Numeric>(x: T, lo: T, hi: T) -> T {
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

impl<B: Backend> Stream<B> {
    /// Sets every element of `dst` to `value`.
    pub fn fill<T: Numeric>(&self, dst: &mut impl DeviceWrite<T, B>, value: T) -> Result<()> {
        let len = dst.len();
        self.fill_range("fill", Writes::of(dst), len, value)
    }

    /// `len` elements of `out` set to `value`, as the op `call`.
    pub(crate) fn fill_range<T: Numeric>(
        &self,
        call: &'static str,
        out: Writes<'_, T, B>,
        len: usize,
        value: T,
    ) -> Result<()> {
        self.same_contexts(call, [("dst", out.0.context_id())])?;
        let spec = || fill::<T>().native(|(out, value)| out.fill(T::__from_cpu(value)));
        for (start, n) in self.windows(len, std::mem::size_of::<T>()) {
            let args = (out.window(start, n), Value(value));
            self.launch_builtin(call, spec, self.grid_stride(n), args)?;
        }
        Ok(())
    }

    /// Zeroes a range of an allocation (a block reused for `alloc_zeros`).
    pub(crate) fn zero_bytes(&self, range: &SliceRef<'_, B>) -> Result<()> {
        self.fill_range("alloc_zeros", Writes::raw(*range), range.bytes(), 0u8)
    }

    /// `y = alpha * x + y` ([`Numeric::axpy`]: no fused multiply-add).
    pub fn axpy<T: Numeric>(
        &self,
        alpha: T,
        x: &impl DeviceRead<T, B>,
        y: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = "axpy";
        same_len(name, "y", x.len(), y.len())?;
        self.same_contexts(
            name,
            [
                ("x", x.slice_ref().context_id()),
                ("y", y.slice_ref().context_id()),
            ],
        )?;
        let (rx, wy) = (Reads::of(x), Writes::of(y));
        let spec = || {
            axpy::<T>().native(|(alpha, x, y)| {
                let alpha = T::__from_cpu(alpha);
                for (y, &x) in y.iter_mut().zip(x.iter()) {
                    *y = alpha.axpy(x, *y);
                }
            })
        };
        for (start, n) in self.windows(x.len(), std::mem::size_of::<T>()) {
            let args = (Value(alpha), rx.window(start, n), wy.window(start, n));
            self.launch_builtin(name, spec, self.grid_stride(n), args)?;
        }
        Ok(())
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
        self.same_contexts(
            name,
            [
                ("x", x.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        self.map_unary(name, op, Some(Reads::of(x)), Writes::of(out), x.len())
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
        self.same_contexts(name, [("x", x.slice_ref().context_id())])?;
        let len = x.len();
        self.map_unary(name, op, None, Writes::of(x), len)
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
        self.same_contexts(
            name,
            [
                ("a", a.slice_ref().context_id()),
                ("b", b.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        let (rhs, shape) = (Rhs2::Array(Reads::of(b)), Shape::new(1, a.len()));
        self.map_binary(name, op, Some(Reads::of(a)), rhs, shape, Writes::of(out))
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
        self.same_contexts(
            name,
            [
                ("a", a.slice_ref().context_id()),
                ("b", b.slice_ref().context_id()),
            ],
        )?;
        let (rhs, shape) = (Rhs2::Array(Reads::of(b)), Shape::new(1, a.len()));
        self.map_binary(name, op, None, rhs, shape, Writes::of(a))
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
        self.same_contexts(
            name,
            [
                ("a", a.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        let shape = Shape::new(1, a.len());
        self.map_binary(
            name,
            op,
            Some(Reads::of(a)),
            Rhs2::Scalar(s),
            shape,
            Writes::of(out),
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
        self.same_contexts(name, [("a", a.slice_ref().context_id())])?;
        let shape = Shape::new(1, a.len());
        self.map_binary(name, op, None, Rhs2::Scalar(s), shape, Writes::of(a))
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
        self.same_contexts(
            name,
            [
                ("a", a.slice_ref().context_id()),
                ("v", v.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        let rhs = match how {
            Bcast::Row => Rhs2::Row(Reads::of(v)),
            Bcast::Col => Rhs2::Col(Reads::of(v)),
        };
        self.map_binary(name, op, Some(Reads::of(a)), rhs, shape, Writes::of(out))
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
        self.same_contexts(
            name,
            [
                ("a", a.slice_ref().context_id()),
                ("v", v.slice_ref().context_id()),
            ],
        )?;
        let rhs = match how {
            Bcast::Row => Rhs2::Row(Reads::of(v)),
            Bcast::Col => Rhs2::Col(Reads::of(v)),
        };
        self.map_binary(name, op, None, rhs, shape, Writes::of(a))
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
        let name = "clamp";
        same_len(name, "out", x.len(), out.len())?;
        self.same_contexts(
            name,
            [
                ("x", x.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        let (rx, wo) = (Reads::of(x), Writes::of(out));
        let spec = || {
            clamp_elements::<T>().native(|(x, lo, hi, out)| {
                let (lo, hi) = (T::__from_cpu(lo), T::__from_cpu(hi));
                for (o, &x) in out.iter_mut().zip(x.iter()) {
                    *o = clamp_one(x, lo, hi);
                }
            })
        };
        for (start, n) in self.windows(x.len(), std::mem::size_of::<T>()) {
            let args = (
                rx.window(start, n),
                Value(lo),
                Value(hi),
                wo.window(start, n),
            );
            self.launch_builtin(name, spec, self.grid_stride(n), args)?;
        }
        Ok(())
    }

    /// In place: `x = clamp(x, lo, hi)` (see [`Stream::clamp`]).
    pub fn clamp_inplace<T: Numeric>(
        &self,
        x: &mut impl DeviceWrite<T, B>,
        lo: T,
        hi: T,
    ) -> Result<()> {
        let name = "clamp";
        self.same_contexts(name, [("x", x.slice_ref().context_id())])?;
        let len = x.len();
        let wx = Writes::of(x);
        let spec = || {
            clamp_in_place::<T>().native(|(x, lo, hi)| {
                let (lo, hi) = (T::__from_cpu(lo), T::__from_cpu(hi));
                x.iter_mut().for_each(|x| *x = clamp_one(*x, lo, hi));
            })
        };
        for (start, n) in self.windows(len, std::mem::size_of::<T>()) {
            let args = (wx.window(start, n), Value(lo), Value(hi));
            self.launch_builtin(name, spec, self.grid_stride(n), args)?;
        }
        Ok(())
    }

    /// Converts every element of `x` to `U` into `out` ([`Numeric::from_wide`]: integers
    /// wrap from integers and saturate from floats, NaN becoming 0; floats round to
    /// nearest even). A backend without `U` (or `T`) is [`crate::Error::Unsupported`].
    pub fn cast<T: Numeric, U: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<U, B>,
    ) -> Result<()> {
        let name = "cast";
        same_len(name, "out", x.len(), out.len())?;
        self.same_contexts(
            name,
            [
                ("x", x.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        let (rx, wo) = (Reads::of(x), Writes::of(out));
        let widest = std::mem::size_of::<T>().max(std::mem::size_of::<U>());
        for (start, n) in self.windows(x.len(), widest) {
            let args = (rx.window(start, n), wo.window(start, n));
            self.launch_builtin(name, cast_spec::<T, U>, self.grid_stride(n), args)?;
        }
        Ok(())
    }
}
