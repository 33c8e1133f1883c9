//! Reductions: whole-array and per-row sums, means, minima, maxima and their indices, dot
//! products, into device arrays or returned to the host.

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::{Element, Float, Numeric};
use crate::error::{same_len, Error, Result};
use crate::kernel::{Reads, Writes};
use crate::optable::{ReduceOp, Shape};
use crate::stream::Stream;

use super::shape_len;

/// The whole-array (`*_into`) and per-row (`row_*`) methods of each reduction.
macro_rules! reductions {
    ($( #[doc = $what:literal] $into:ident, $row:ident, $col:ident: $bound:ident, $op:ident, $R:ty; )*) => {$(
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

        #[doc = concat!("Writes", $what, " of each column of the `shape` matrix `x` (over its rows) into `out` (`shape.cols` elements), each column folded in row order (a bias gradient: `col_sum` of the output gradient).")]
        pub fn $col<T: $bound>(
            &self,
            shape: Shape,
            x: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<$R, B>,
        ) -> Result<()> {
            self.reduce_cols(stringify!($col), ReduceOp::$op, shape, x, out)
        }
    )*};
}

impl<B: Backend> Stream<B> {
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
        self.reduce_along(call, op, (shape, false), x, out)
    }

    /// The reductions of each column of a `shape` matrix into `out` (one per column), of any
    /// result type `R`; errors name `call`.
    fn reduce_cols<T: Numeric, R: Element>(
        &self,
        call: &'static str,
        op: ReduceOp,
        shape: Shape,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<R, B>,
    ) -> Result<()> {
        self.reduce_along(call, op, (shape, true), x, out)
    }

    /// The reductions of each row (`per_col` false) or column of a `shape` matrix into
    /// `out`, one result per row or column: the checks both share, then the op.
    fn reduce_along<T: Numeric, R: Element>(
        &self,
        call: &'static str,
        op: ReduceOp,
        (shape, per_col): (Shape, bool),
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<R, B>,
    ) -> Result<()> {
        let name = call;
        // Results, and the elements each folds.
        let (results, folded, what) = if per_col {
            (shape.cols, shape.rows, "rows")
        } else {
            (shape.rows, shape.cols, "elements per row")
        };
        self.floats_only(name, op == ReduceOp::Mean, T::DTYPE)?;
        same_len(name, "x", shape_len(name, shape)?, x.len())?;
        same_len(name, "out", results, out.len())?;
        if op.is_index() && folded > 1 + u32::MAX as usize {
            return Err(Error::InvalidShape {
                op: name,
                arg: "x",
                message: format!(
                    "{folded} {what}: an index past u32::MAX does not fit the u32 result"
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
        if results > 0 && folded == 0 {
            return match op == ReduceOp::Sum && R::DTYPE == T::DTYPE {
                // A sum's result is an element of `x`'s type.
                true => {
                    self.fill_range(name, Writes::<T, B>::raw(out.slice_ref()), results, T::ZERO)
                }
                false => Err(Error::EmptyInput { op: name }),
            };
        }
        if results == 0 {
            return Ok(());
        }
        let (x, out) = (Reads::of(x), Writes::of(out));
        if per_col {
            self.fold_columns(name, op, shape.cols, x, out)
        } else {
            self.fold(name, op, (shape.rows, shape.cols), x, out)
        }
    }

    reductions! {
        /// the sum (0 for an empty `x`)
        sum_into, row_sum, col_sum: Numeric, Sum, T;
        /// the mean
        mean_into, row_mean, col_mean: Float, Mean, T;
        /// the smallest element
        min_into, row_min, col_min: Numeric, Min, T;
        /// the largest element
        max_into, row_max, col_max: Numeric, Max, T;
        /// the index of the first smallest element
        argmin_into, row_argmin, col_argmin: Numeric, ArgMin, u32;
        /// the index of the first largest element (for a classifier's logits, its predictions)
        argmax_into, row_argmax, col_argmax: Numeric, ArgMax, u32;
    }

    /// The reduction `op` of the `shape` matrix `x` along `axis`, NumPy's convention: axis
    /// 0 folds the rows (one result per column, as `col_*`), axis 1 the columns (one per row,
    /// as `row_*`). `R` is `T` for the value reductions and `u32` for the index ones; another
    /// `R`, or an axis other than 0 and 1, is [`Error::InvalidArgument`].
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// use gpukit::{ReduceOp, Shape};
    /// let x = ctx.alloc_upload(&[1.0f32, 5.0, 3.0, 2.0, 4.0, 6.0])?; // 2 x 3
    /// let mut per_col = ctx.alloc::<f32>(3)?;
    /// ctx.reduce(ReduceOp::Max, 0, Shape::new(2, 3), &x, &mut per_col)?;
    /// assert_eq!(per_col.download()?, [2.0, 5.0, 6.0]);
    /// let mut per_row = ctx.alloc::<u32>(2)?;
    /// ctx.reduce(ReduceOp::ArgMax, 1, Shape::new(2, 3), &x, &mut per_row)?;
    /// assert_eq!(per_row.download()?, [1, 2]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn reduce<T: Numeric, R: Element>(
        &self,
        op: ReduceOp,
        axis: usize,
        shape: Shape,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<R, B>,
    ) -> Result<()> {
        let want = if op.is_index() {
            crate::DType::U32
        } else {
            T::DTYPE
        };
        if R::DTYPE != want {
            return Err(Error::InvalidArgument {
                op: "reduce",
                arg: "out",
                message: format!("`{}` writes {want} results, not {}", op.name(), R::DTYPE),
            });
        }
        match axis {
            0 => self.reduce_cols("reduce", op, shape, x, out),
            1 => self.reduce_rows("reduce", op, shape, x, out),
            _ => Err(Error::InvalidArgument {
                op: "reduce",
                arg: "axis",
                message: format!(
                    "{axis} is not an axis of a matrix (0: over rows, 1: over columns)"
                ),
            }),
        }
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
        let xy = (Reads::of(x), Reads::of(y));
        self.fold_dot(call, x.len(), xy, Writes::of(out))
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
}
