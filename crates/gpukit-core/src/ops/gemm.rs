//! Gemm: row-major matrix products, plain, batched and strided: the backend's own where it
//! has one ([`Backend::has_gemm`]: cuBLAS, `matrixmultiply`), else [`gemm_tiles`].

use gpukit_macros::kernel;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Float;
use crate::error::{same_len, Error, Result};
use crate::kernel::{LaunchConfig, Reads, Value, Writes};
use crate::optable::{BinaryOp, Gemm, Shape};
use crate::stream::Stream;
use crate::track::Access;

use super::map::Rhs2;
use super::product;

/// `C = alpha * op(A) * op(B) + beta * C` for the matrices of a batch (`A`, `B` and `C` the
/// `m x k`, `k x n` and `m x n` row-major matrices `sa`, `sb` and `sc` elements apart; `A`
/// read transposed where `TA`, `B` where `TB`): a block of 16 x 16 threads computes a tile
/// of `C`, each thread one element, summing the products in order of `k` through tiles of
/// `op(A)` and `op(B)` in shared memory; the grid's `z` walks the batch. `C` is not read
/// where `beta` is 0 (a NaN there is overwritten, as BLAS does).
#[kernel(core = "crate")]
#[allow(clippy::too_many_arguments)]
fn gemm_tiles<T: Float, const TA: bool, const TB: bool>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    alpha: T,
    beta: T,
    m: u32,
    n: u32,
    k: u32,
    sa: u32,
    sb: u32,
    sc: u32,
) {
    let ta = shared::<T, 256>();
    let tb = shared::<T, 256>();
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let (sa, sb, sc) = (sa as usize, sb as usize, sc as usize);
    let (tx, ty) = (thread_x(), thread_y());
    let row = block_y() * 16 + ty;
    let col = block_x() * 16 + tx;
    // The batch's last output ends `sc * (batch - 1) + m * n` elements in.
    let mut batch: usize = 1;
    if sc > 0 {
        batch = (c.len() - m * n) / sc + 1;
    }
    for z in (block_z()..batch).step_by(grid_dim_z()) {
        let mut acc: T = 0;
        for k0 in (0..k).step_by(16) {
            // Element (row, k0 + tx) of op(A) and (k0 + ty, col) of op(B), zero past the edges.
            let (ka, kb) = (k0 + tx, k0 + ty);
            let ai = if TA { ka * m + row } else { row * k + ka };
            let bi = if TB { col * k + kb } else { kb * n + col };
            let mut av: T = 0;
            if row < m && ka < k {
                av = a[z * sa + ai];
            }
            let mut bv: T = 0;
            if kb < k && col < n {
                bv = b[z * sb + bi];
            }
            ta[ty * 16 + tx] = av;
            tb[ty * 16 + tx] = bv;
            barrier();
            for kk in 0..16 {
                acc = acc + ta[ty * 16 + kk] * tb[kk * 16 + tx];
            }
            barrier();
        }
        if row < m && col < n {
            let ci = z * sc + row * n + col;
            let mut v = alpha * acc;
            if beta != 0 {
                v = v + beta * c[ci];
            }
            c[ci] = v;
        }
    }
}

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
        if self.backend().has_gemm(T::DTYPE) {
            let (sa, sb, sc) = (a.slice_ref(), b.slice_ref(), c.slice_ref());
            let ge = g.erased();
            let args = [
                ("a", &sa, Access::Read),
                ("b", &sb, Access::Read),
                ("c", &sc, Access::Write),
            ];
            return self.enqueue("gemm", &args, || {
                let (Some(a), Some(b), Some(c)) = (sa.at(), sb.at(), sc.at()) else {
                    return Ok(());
                };
                // SAFETY: every range comes from a checked view of an array of this context
                // whose length was checked above to be exactly the span of its batch (so
                // inside its buffer, and aligned to `T`); m, n, k and the batch are non-zero
                // and the outputs do not overlap (checked above); `enqueue` has ordered the
                // ranges after conflicting uses on other streams and records this use, so
                // no buffer is freed before the gemm has run; `c` is a `&mut` borrow, so it
                // overlaps neither `a` nor `b`.
                unsafe { self.backend().gemm(self.raw(), T::DTYPE, &ge, [a, b, c]) }
            });
        }
        self.gemm_kernel(&g, (a, b, c))
    }

    /// [`Stream::gemm`] by [`gemm_tiles`] (arguments checked, nothing empty).
    fn gemm_kernel<T: Float>(
        &self,
        g: &Gemm<T>,
        (a, b, c): (
            &impl DeviceRead<T, B>,
            &impl DeviceRead<T, B>,
            &mut impl DeviceWrite<T, B>,
        ),
    ) -> Result<()> {
        let word = |v: usize, what: &str| {
            u32::try_from(v).map_err(|_| Error::Unsupported {
                backend: self.backend().name(),
                what: format!(
                    "`gemm` with {what} of {v} on this device (its gemm kernel takes 32-bit sizes)"
                ),
            })
        };
        let dims = [
            word(g.m, "m")?,
            word(g.n, "n")?,
            word(g.k, "k")?,
            word(g.stride_a, "a batch stride")?,
            word(g.stride_b, "a batch stride")?,
            word(g.stride_c, "a batch stride")?,
        ];
        let max = self.shared_arc().info.limits.max_grid_dim;
        let grid = [
            g.n.div_ceil(16),
            g.m.div_ceil(16),
            g.batch.min(max[2] as usize),
        ];
        if grid[0] > max[0] as usize || grid[1] > max[1] as usize {
            return Err(Error::Unsupported {
                backend: self.backend().name(),
                what: format!(
                    "a {} x {} gemm (more than {} x {} tiles of 16 x 16)",
                    g.m, g.n, max[1], max[0]
                ),
            });
        }
        let cfg = LaunchConfig {
            grid: grid.map(|d| d as u32),
            block: [16, 16, 1],
            shared_mem_bytes: 0,
        };
        let [m, n, k, sa, sb, sc] = dims;
        let args = (
            Reads::of(a),
            Reads::of(b),
            Writes::of(c),
            Value(g.alpha),
            Value(g.beta),
            m,
            n,
            k,
            sa,
            sb,
            sc,
        );
        match (g.trans_a, g.trans_b) {
            (false, false) => self.launch_builtin("gemm", gemm_tiles::<T, false, false>, cfg, args),
            (true, false) => self.launch_builtin("gemm", gemm_tiles::<T, true, false>, cfg, args),
            (false, true) => self.launch_builtin("gemm", gemm_tiles::<T, false, true>, cfg, args),
            (true, true) => self.launch_builtin("gemm", gemm_tiles::<T, true, true>, cfg, args),
        }
    }
}
