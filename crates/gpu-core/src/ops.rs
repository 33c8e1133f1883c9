//! Built-in ops, queued on a stream: fill, axpy, scale, element-wise arithmetic and math,
//! reductions and gemm.
//!
//! Every op checks lengths and contexts before anything is queued, so a rejected call
//! changes nothing. Empty inputs are valid: element-wise ops on them do nothing, `sum` and
//! `dot` give zero, `max` is [`Error::EmptyInput`].

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::{Backend, BinaryOp, Gemm, ReduceOp, UnaryOp};
use crate::element::{Element, Float, Numeric};
use crate::error::{same_len, Error, Result};
use crate::stream::Stream;
use crate::track::Access;

fn product(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow {
        op,
        len: a,
        elem_bytes: b,
    })
}

macro_rules! binary_ops {
    ($($name:ident => $op:ident),*) => {$(
        #[doc = concat!("`out = a ", stringify!($name), " b` element-wise (see [`BinaryOp::", stringify!($op), "`]).")]
        pub fn $name<T: Numeric>(
            &self,
            a: &impl DeviceRead<T, B>,
            b: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary(BinaryOp::$op, a, b, out)
        }
    )*};
}

macro_rules! unary_ops {
    ($($name:ident => $op:ident),*) => {$(
        #[doc = concat!("`out = ", stringify!($name), "(x)` element-wise.")]
        pub fn $name<T: Float>(
            &self,
            x: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.unary(UnaryOp::$op, x, out)
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

    /// Sets every element of `dst` to `value`.
    pub fn fill<T: Numeric>(&self, dst: &mut impl DeviceWrite<T, B>, value: T) -> Result<()> {
        let d = dst.slice_ref();
        self.enqueue("fill", &[("dst", &d, Access::Write)], || match d.at() {
            Some(at) => {
                // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                // streams and records this use, so no buffer is freed before the op has run; the
                // written range is a `&mut` borrow, so it overlaps no other argument.
                unsafe { self.backend().fill(self.raw(), at, dst.len(), value) }
            }
            None => Ok(()),
        })
    }

    /// `y = alpha * x + y`.
    pub fn axpy<T: Numeric>(
        &self,
        alpha: T,
        x: &impl DeviceRead<T, B>,
        y: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("axpy", "y", x.len(), y.len())?;
        let (xs, ys) = (x.slice_ref(), y.slice_ref());
        let len = x.len();
        self.enqueue(
            "axpy",
            &[("x", &xs, Access::Read), ("y", &ys, Access::Write)],
            || match (xs.at(), ys.at()) {
                (Some(a), Some(b)) => {
                    // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                    // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                    // streams and records this use, so no buffer is freed before the op has run; the
                    // written range is a `&mut` borrow, so it overlaps no other argument.
                    unsafe { self.backend().axpy(self.raw(), alpha, a, b, len) }
                }
                _ => Ok(()),
            },
        )
    }

    /// `x = alpha * x`.
    pub fn scale<T: Numeric>(&self, alpha: T, x: &mut impl DeviceWrite<T, B>) -> Result<()> {
        let xs = x.slice_ref();
        let len = x.len();
        self.enqueue("scale", &[("x", &xs, Access::Write)], || match xs.at() {
            Some(at) => {
                // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                // streams and records this use, so no buffer is freed before the op has run; the
                // written range is a `&mut` borrow, so it overlaps no other argument.
                unsafe { self.backend().scale(self.raw(), alpha, at, len) }
            }
            None => Ok(()),
        })
    }

    /// `out = a op b` element-wise.
    pub fn binary<T: Numeric>(
        &self,
        op: BinaryOp,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = op.name();
        same_len(name, "b", a.len(), b.len())?;
        same_len(name, "out", a.len(), out.len())?;
        let (sa, sb, so) = (a.slice_ref(), b.slice_ref(), out.slice_ref());
        let len = a.len();
        self.enqueue(
            name,
            &[
                ("a", &sa, Access::Read),
                ("b", &sb, Access::Read),
                ("out", &so, Access::Write),
            ],
            || match (sa.at(), sb.at(), so.at()) {
                (Some(x), Some(y), Some(z)) => {
                    // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                    // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                    // streams and records this use, so no buffer is freed before the op has run; the
                    // written range is a `&mut` borrow, so it overlaps no other argument.
                    unsafe { self.backend().binary::<T>(self.raw(), op, x, y, z, len) }
                }
                _ => Ok(()),
            },
        )
    }

    binary_ops!(add => Add, sub => Sub, mul => Mul, div => Div);

    /// `out = op(x)` element-wise.
    pub fn unary<T: Float>(
        &self,
        op: UnaryOp,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = op.name();
        same_len(name, "out", x.len(), out.len())?;
        let (sx, so) = (x.slice_ref(), out.slice_ref());
        let len = x.len();
        self.enqueue(
            name,
            &[("x", &sx, Access::Read), ("out", &so, Access::Write)],
            || match (sx.at(), so.at()) {
                (Some(a), Some(b)) => {
                    // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                    // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                    // streams and records this use, so no buffer is freed before the op has run; the
                    // written range is a `&mut` borrow, so it overlaps no other argument.
                    unsafe { self.backend().unary::<T>(self.raw(), op, a, b, len) }
                }
                _ => Ok(()),
            },
        )
    }

    unary_ops!(relu => Relu, sigmoid => Sigmoid, tanh => Tanh, exp => Exp);

    /// Writes the sum of `x` into the one-element `out` (0 for an empty `x`).
    pub fn sum_into<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.reduce_into(ReduceOp::Sum, x, out)
    }

    /// Writes the largest element of `x` into the one-element `out`.
    pub fn max_into<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.reduce_into(ReduceOp::Max, x, out)
    }

    fn reduce_into<T: Numeric>(
        &self,
        op: ReduceOp,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = match op {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
        };
        same_len(name, "out", 1, out.len())?;
        self.same_contexts(
            name,
            [
                ("x", x.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if x.is_empty() {
            return match op {
                ReduceOp::Sum => self.fill(out, T::ZERO),
                ReduceOp::Max => Err(Error::EmptyInput { op: name }),
            };
        }
        let (sx, so) = (x.slice_ref(), out.slice_ref());
        let len = x.len();
        self.enqueue(
            name,
            &[("x", &sx, Access::Read), ("out", &so, Access::Write)],
            || match (sx.at(), so.at()) {
                (Some(a), Some(b)) => {
                    // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                    // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                    // streams and records this use, so no buffer is freed before the op has run; the
                    // written range is a `&mut` borrow, so it overlaps no other argument.
                    unsafe { self.backend().reduce::<T>(self.raw(), op, a, len, b) }
                }
                _ => Ok(()),
            },
        )
    }

    /// Writes the dot product of `x` and `y` into the one-element `out` (0 when empty).
    pub fn dot_into<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        y: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("dot", "y", x.len(), y.len())?;
        same_len("dot", "out", 1, out.len())?;
        self.same_contexts(
            "dot",
            [
                ("x", x.slice_ref().context_id()),
                ("y", y.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if x.is_empty() {
            return self.fill(out, T::ZERO);
        }
        let (sx, sy, so) = (x.slice_ref(), y.slice_ref(), out.slice_ref());
        let len = x.len();
        self.enqueue(
            "dot",
            &[
                ("x", &sx, Access::Read),
                ("y", &sy, Access::Read),
                ("out", &so, Access::Write),
            ],
            || match (sx.at(), sy.at(), so.at()) {
                (Some(a), Some(b), Some(c)) => {
                    // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                    // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                    // streams and records this use, so no buffer is freed before the op has run; the
                    // written range is a `&mut` borrow, so it overlaps no other argument.
                    unsafe { self.backend().dot::<T>(self.raw(), a, b, len, c) }
                }
                _ => Ok(()),
            },
        )
    }

    /// The sum of `x`; waits for the result.
    pub fn sum<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<T> {
        let mut out = crate::GpuArray::<T, B>::alloc(self, 1, false)?;
        self.sum_into(x, &mut out)?;
        self.scalar(&out)
    }

    /// The largest element of `x` ([`Error::EmptyInput`] when empty); waits for the result.
    pub fn max<T: Numeric>(&self, x: &impl DeviceRead<T, B>) -> Result<T> {
        let mut out = crate::GpuArray::<T, B>::alloc(self, 1, false)?;
        self.max_into(x, &mut out)?;
        self.scalar(&out)
    }

    /// The dot product of `x` and `y`; waits for the result.
    pub fn dot<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        y: &impl DeviceRead<T, B>,
    ) -> Result<T> {
        let mut out = crate::GpuArray::<T, B>::alloc(self, 1, false)?;
        self.dot_into(x, y, &mut out)?;
        self.scalar(&out)
    }

    fn scalar<T: Element>(&self, out: &crate::GpuArray<T, B>) -> Result<T> {
        let mut v = [T::default()];
        self.download_blocking(out, &mut v)?;
        Ok(v[0])
    }

    /// Row-major `C = alpha * op(A) * op(B) + beta * C` (see [`Gemm`] for the shapes).
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
    /// use gpukit::Gemm;
    /// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?; // 2 x 3
    /// let b = ctx.alloc_upload(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0])?; // 3 x 2
    /// let mut c = ctx.alloc_zeros::<f32>(4)?;                          // 2 x 2
    /// ctx.gemm(Gemm::new(2, 2, 3), &a, &b, &mut c)?;
    /// assert_eq!(c.download()?, [4.0, 5.0, 10.0, 11.0]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn gemm<T: Float>(
        &self,
        g: Gemm<T>,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        c: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("gemm", "a", product("gemm", g.m, g.k)?, a.len())?;
        same_len("gemm", "b", product("gemm", g.k, g.n)?, b.len())?;
        same_len("gemm", "c", product("gemm", g.m, g.n)?, c.len())?;
        self.same_contexts(
            "gemm",
            [
                ("a", a.slice_ref().context_id()),
                ("b", b.slice_ref().context_id()),
                ("c", c.slice_ref().context_id()),
            ],
        )?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        if g.k == 0 {
            // An empty product: C = beta * C, with beta = 0 clearing NaNs as BLAS does.
            return if g.beta == T::ZERO {
                self.fill(c, T::ZERO)
            } else {
                self.scale(g.beta, c)
            };
        }
        let (sa, sb, sc) = (a.slice_ref(), b.slice_ref(), c.slice_ref());
        self.enqueue(
            "gemm",
            &[
                ("a", &sa, Access::Read),
                ("b", &sb, Access::Read),
                ("c", &sc, Access::Write),
            ],
            || match (sa.at(), sb.at(), sc.at()) {
                (Some(x), Some(y), Some(z)) => {
                    // SAFETY: the ranges come from checked views of `T` arrays of this context (in
                    // bounds and aligned); `enqueue` has ordered them after conflicting uses on other
                    // streams and records this use, so no buffer is freed before the op has run; the
                    // written range is a `&mut` borrow, so it overlaps no other argument.
                    unsafe { self.backend().gemm::<T>(self.raw(), &g, x, y, z) }
                }
                _ => Ok(()),
            },
        )
    }
}
