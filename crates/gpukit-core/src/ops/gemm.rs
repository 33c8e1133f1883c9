//! Gemm: row-major matrix products, plain, batched and strided.

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Float;
use crate::error::{same_len, Error, Result};
use crate::kernel::Writes;
use crate::optable::{BinaryOp, Gemm, Op, Shape};
use crate::stream::Stream;
use crate::track::Access;

use super::map::Rhs2;
use super::product;

impl<B: Backend> Stream<B> {
    /// Row-major `C = alpha * op(A) * op(B) + beta * C` (see [`Gemm`] for the shapes), or a
    /// batch of such products in one call ([`Gemm::batched`], [`Gemm::strided`]). Each
    /// operand's length must be exactly the span its batch covers,
    /// `(batch - 1) * stride + rows * cols`; outputs may not overlap.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
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
        if g.k == 0 {
            // An empty product: C = beta * C, matrix by matrix (a strided batch leaves the
            // gaps alone), with beta = 0 clearing NaNs as BLAS does.
            let wc = Writes::of(c);
            for i in 0..g.batch {
                let m = wc.window(i * g.stride_c, c_size);
                if g.beta == T::ZERO {
                    self.fill_range("gemm", m, c_size, T::ZERO)?;
                } else {
                    let (beta, shape) = (Rhs2::Scalar(g.beta), Shape::new(1, c_size));
                    self.map_binary("gemm", BinaryOp::Mul, None, beta, shape, m)?;
                }
            }
            return Ok(());
        }
        let (sa, sb, sc) = (a.slice_ref(), b.slice_ref(), c.slice_ref());
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
