//! Row-wise ops: softmax, log-softmax and cross-entropy (with its gradient), written as
//! `#[kernel]`s.
//!
//! A row is one block's: its threads fold the row's maximum and then its sum of
//! `exp(x - max)` (a subgroup at a time, then the subgroups' results by the block's first
//! thread through a shared array, as the reductions do) and write the outputs. The sum
//! accumulates in f64 where the device has it, as the reference does, else in f32;
//! `ln(sum)` is the element type's logarithm plus the first-order correction for the part
//! of the sum the type does not hold (exact for f64; WGSL has no f64 logarithm). One macro
//! writes the eight kernels (softmax from an input and in place, cross-entropy with and
//! without its gradient, each summing in f64 and in f32), so the row's statistics are
//! written once. The CPU backend runs each kernel's native body: gpukit-core's references
//! on vectors and across cores
//! ([`crate::native`]).

use gpukit_macros::kernel;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Float;
use crate::error::{same_len, Error, Result};
use crate::kernel::{In, KernelSpec, Out, Reads, Writes};
use crate::native::rows as native;
use crate::optable::Shape;
use crate::stream::Stream;

use super::fold::blocks;
use super::shape_len;

/// A row kernel: `$src` the array the rows are read from, `$acc` the type the sum of the
/// exponentials accumulates in, `nrows` rows (the length of `$src` a multiple of it);
/// then softmax's output (`$out`, `$log` 0 for softmax, else log-softmax), or
/// cross-entropy's (`$labels` one `u32` per row, `$loss` one element per row) and,
/// optionally, its gradient (`$grad`).
macro_rules! row_kernel {
    ($(#[$doc:meta])* $name:ident, $acc:ident, ($($params:tt)*), $src:ident, $rows:expr,
     softmax: $($out:ident $log:ident)?, entropy: $($labels:ident $loss:ident)?,
     grad: $($grad:ident)?) => {
        $(#[$doc])*
        #[kernel(core = "crate")]
        fn $name<T: Float>($($params)*) {
            let rows = $rows;
            let cols = $src.len() / rows;
            let tops = shared::<T, 256>();
            let sums = shared::<$acc, 256>();
            let zero: $acc = 0.0;
            let nan = zero / zero;
            let mut r = block_x();
            while r < rows {
                let base = r * cols;
                // The row's maximum (a NaN loses to a number).
                let mut m = $src[base];
                let mut j = thread_x();
                while j < cols {
                    m = m.max($src[base + j]);
                    j += block_dim_x();
                }
                let top = subgroup_max(m);
                if subgroup_lane() == 0 {
                    tops[subgroup_id()] = top;
                }
                barrier();
                // The subgroups' folded by one thread (every thread folding them all would
                // cost a thread per subgroup each, many where subgroups are narrow).
                if thread_x() == 0 {
                    let mut all = tops[0];
                    for k in 1..num_subgroups() {
                        all = all.max(tops[k]);
                    }
                    tops[0] = all;
                }
                barrier();
                m = tops[0];
                // The sum of exp(x - m).
                let mut acc: $acc = 0.0;
                j = thread_x();
                while j < cols {
                    acc += ($src[base + j] - m).exp() as $acc;
                    j += block_dim_x();
                }
                let part = subgroup_add(acc);
                if subgroup_lane() == 0 {
                    sums[subgroup_id()] = part;
                }
                barrier();
                if thread_x() == 0 {
                    let mut all = sums[0];
                    for k in 1..num_subgroups() {
                        all += sums[k];
                    }
                    sums[0] = all;
                }
                barrier();
                let s = sums[0];
                let held = s as T;
                let ln_s = (held.ln() as $acc) + (s - (held as $acc)) / s;
                $(
                    j = thread_x();
                    while j < cols {
                        let d = $src[base + j] - m;
                        if $log != 0 {
                            $out[base + j] = ((d as $acc) - ln_s) as T;
                        } else {
                            $out[base + j] = ((d.exp() as $acc) / s) as T;
                        }
                        j += block_dim_x();
                    }
                )?
                $(
                    let label = $labels[r] as usize;
                    if thread_x() == 0 {
                        if label < cols {
                            $loss[r] = (ln_s - (($src[base + label] - m) as $acc)) as T;
                        } else {
                            $loss[r] = nan as T;
                        }
                    }
                )?
                $(
                    j = thread_x();
                    while j < cols {
                        let mut g = nan;
                        if label < cols {
                            let mut hot: $acc = 0.0;
                            if j == label {
                                hot = 1.0;
                            }
                            g = ((($src[base + j] - m).exp() as $acc) / s) - hot;
                        }
                        $grad[base + j] = g as T;
                        j += block_dim_x();
                    }
                )?
                // The next row's statistics reuse the shared arrays.
                barrier();
                r += grid_dim_x();
            }
        }
    };
}

row_kernel!(
    /// Softmax (`log` 0) or log-softmax of each of the `nrows` rows of `x` into `out`,
    /// summing in f64.
    softmax_f64, f64, (x: &[T], log: u32, nrows: u32, out: &mut [T]), x, nrows as usize,
    softmax: out log, entropy:, grad:
);
row_kernel!(
    /// [`softmax_f64`] in place.
    softmax_inplace_f64, f64, (log: u32, nrows: u32, out: &mut [T]), out, nrows as usize,
    softmax: out log, entropy:, grad:
);
row_kernel!(
    /// [`softmax_f64`] summing in f32.
    softmax_f32, f32, (x: &[T], log: u32, nrows: u32, out: &mut [T]), x, nrows as usize,
    softmax: out log, entropy:, grad:
);
row_kernel!(
    /// [`softmax_inplace_f64`] summing in f32.
    softmax_inplace_f32, f32, (log: u32, nrows: u32, out: &mut [T]), out, nrows as usize,
    softmax: out log, entropy:, grad:
);
row_kernel!(
    /// The cross-entropy of each row of `x` against its label into `loss` (NaN for a label
    /// of the row's length or more), summing in f64.
    entropy_f64, f64, (x: &[T], labels: &[u32], loss: &mut [T]), x, labels.len(),
    softmax:, entropy: labels loss, grad:
);
row_kernel!(
    /// [`entropy_f64`] and its gradient with respect to `x` into `grad` (a NaN row for a
    /// label out of range).
    entropy_grad_f64, f64, (x: &[T], labels: &[u32], loss: &mut [T], grad: &mut [T]), x,
    labels.len(), softmax:, entropy: labels loss, grad: grad
);
row_kernel!(
    /// [`entropy_f64`] summing in f32.
    entropy_f32, f32, (x: &[T], labels: &[u32], loss: &mut [T]), x, labels.len(),
    softmax:, entropy: labels loss, grad:
);
row_kernel!(
    /// [`entropy_grad_f64`] summing in f32.
    entropy_grad_f32, f32, (x: &[T], labels: &[u32], loss: &mut [T], grad: &mut [T]), x,
    labels.len(), softmax:, entropy: labels loss, grad: grad
);

/// The signatures of the row kernels.
type Softmax<T> = (In<T>, u32, u32, Out<T>);
type SoftmaxInPlace<T> = (u32, u32, Out<T>);
type Entropy<T> = (In<T>, In<u32>, Out<T>);
type EntropyGrad<T> = (In<T>, In<u32>, Out<T>, Out<T>);

/// Softmax from an input, summing in f64 (`wide`) or f32, with [`native::softmax`] as its
/// native body.
fn softmax_spec<T: Float>(wide: bool) -> KernelSpec<Softmax<T>> {
    let spec = if wide {
        softmax_f64::<T>()
    } else {
        softmax_f32::<T>()
    };
    spec.native(|(x, log, nrows, out)| {
        let (x, cols): (&[T], usize) = (x, out.len() / (*nrows as usize).max(1));
        native::softmax(*log != 0, Some(x), cols, out);
    })
}

/// Softmax in place, summing in f64 (`wide`) or f32.
fn softmax_inplace_spec<T: Float>(wide: bool) -> KernelSpec<SoftmaxInPlace<T>> {
    let spec = match wide {
        true => softmax_inplace_f64::<T>(),
        false => softmax_inplace_f32::<T>(),
    };
    spec.native(|(log, nrows, out)| {
        let cols = out.len() / (*nrows as usize).max(1);
        native::softmax(*log != 0, None, cols, out);
    })
}

/// Cross-entropy, summing in f64 (`wide`) or f32, with [`native::cross_entropy`] as its
/// native body.
fn entropy_spec<T: Float>(wide: bool) -> KernelSpec<Entropy<T>> {
    let spec = if wide {
        entropy_f64::<T>()
    } else {
        entropy_f32::<T>()
    };
    spec.native(|(x, labels, loss)| {
        let cols = x.len() / loss.len().max(1);
        native::cross_entropy(x, labels, cols, loss, None);
    })
}

/// Cross-entropy and its gradient, summing in f64 (`wide`) or f32.
fn entropy_grad_spec<T: Float>(wide: bool) -> KernelSpec<EntropyGrad<T>> {
    let spec = match wide {
        true => entropy_grad_f64::<T>(),
        false => entropy_grad_f32::<T>(),
    };
    spec.native(|(x, labels, loss, grad)| {
        let cols = x.len() / loss.len().max(1);
        native::cross_entropy(x, labels, cols, loss, Some(grad));
    })
}

impl<B: Backend> Stream<B> {
    fn softmax_op<T: Float>(
        &self,
        log: bool,
        shape: Shape,
        x: Option<Reads<'_, T, B>>,
        xlen: usize,
        out: Writes<'_, T, B>,
        outlen: usize,
    ) -> Result<()> {
        let name = if log { "log_softmax" } else { "softmax" };
        let len = shape_len(name, shape)?;
        same_len(name, "x", len, xlen)?;
        same_len(name, "out", len, outlen)?;
        self.same_contexts(name, [("out", out.0.context_id())])?;
        if let Some(x) = x {
            self.same_contexts(name, [("x", x.0.context_id())])?;
        }
        if len == 0 {
            return Ok(());
        }
        let rows = u32::try_from(shape.rows).map_err(|_| Error::InvalidShape {
            op: name,
            arg: "shape",
            message: format!("{} rows: more than a launch counts (u32::MAX)", shape.rows),
        })?;
        let (wide, log) = (self.wide_sums(), u32::from(log));
        let key = u32::from(wide);
        match x {
            Some(x) => {
                let spec = move || softmax_spec::<T>(wide);
                self.launch_builtin_keyed(name, key, spec, blocks(shape.rows), (x, log, rows, out))
            }
            None => {
                let spec = move || softmax_inplace_spec::<T>(wide);
                self.launch_builtin_keyed(name, key, spec, blocks(shape.rows), (log, rows, out))
            }
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
        let n = out.len();
        self.softmax_op::<T>(
            false,
            shape,
            Some(Reads::of(x)),
            x.len(),
            Writes::of(out),
            n,
        )
    }

    /// In place: row-wise softmax of the `shape` matrix `x`.
    pub fn softmax_inplace<T: Float>(
        &self,
        shape: Shape,
        x: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let n = x.len();
        self.softmax_op::<T>(false, shape, None, n, Writes::of(x), n)
    }

    /// Row-wise log-softmax of the `shape` matrix `x` into `out`, numerically stable.
    pub fn log_softmax<T: Float>(
        &self,
        shape: Shape,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let n = out.len();
        self.softmax_op::<T>(true, shape, Some(Reads::of(x)), x.len(), Writes::of(out), n)
    }

    /// In place: row-wise log-softmax of the `shape` matrix `x`.
    pub fn log_softmax_inplace<T: Float>(
        &self,
        shape: Shape,
        x: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let n = x.len();
        self.softmax_op::<T>(true, shape, None, n, Writes::of(x), n)
    }

    fn cross_entropy_op<T: Float>(
        &self,
        shape: Shape,
        logits: &impl DeviceRead<T, B>,
        labels: &impl DeviceRead<u32, B>,
        loss: &mut impl DeviceWrite<T, B>,
        grad: Option<(Writes<'_, T, B>, usize)>,
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
        self.same_contexts(
            name,
            [
                ("logits", logits.slice_ref().context_id()),
                ("labels", labels.slice_ref().context_id()),
                ("loss", loss.slice_ref().context_id()),
            ],
        )?;
        if let Some((g, _)) = grad {
            self.same_contexts(name, [("grad", g.0.context_id())])?;
        }
        if shape.rows == 0 {
            return Ok(());
        }
        let (x, y, l) = (Reads::of(logits), Reads::of(labels), Writes::of(loss));
        let wide = self.wide_sums();
        let (key, cfg) = (u32::from(wide), blocks(shape.rows));
        match grad {
            None => {
                let spec = move || entropy_spec::<T>(wide);
                self.launch_builtin_keyed(name, key, spec, cfg, (x, y, l))
            }
            Some((g, _)) => {
                let spec = move || entropy_grad_spec::<T>(wide);
                self.launch_builtin_keyed(name, key, spec, cfg, (x, y, l, g))
            }
        }
    }

    /// Cross-entropy of each row of the `shape` logits against its label (`labels[r]` in
    /// `0..shape.cols`) into `loss` (`shape.rows` elements): `loss[r] = -log_softmax(x_r)[l]`.
    /// A label out of range gives a NaN loss for its row, silently
    /// ([`Stream::cross_entropy_checked`] reports it). Average with `mean` for the usual
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

    /// [`Stream::cross_entropy`] with its labels checked on the device: a label of
    /// `shape.cols` or more is [`crate::Error::KernelFailed`] at the next sync naming
    /// `cross_entropy_checked` and the label (its row's loss is NaN, as unchecked), where
    /// [`Stream::cross_entropy`] gives the NaN silently. One more small launch; the examples
    /// use this form.
    pub fn cross_entropy_checked<T: Float>(
        &self,
        shape: Shape,
        logits: &impl DeviceRead<T, B>,
        labels: &impl DeviceRead<u32, B>,
        loss: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.cross_entropy(shape, logits, labels, loss)?;
        self.check_indices_as("cross_entropy_checked", true, labels, shape.cols)
    }

    /// [`Stream::cross_entropy_grad`] with its labels checked on the device (see
    /// [`Stream::cross_entropy_checked`]).
    pub fn cross_entropy_grad_checked<T: Float>(
        &self,
        shape: Shape,
        logits: &impl DeviceRead<T, B>,
        labels: &impl DeviceRead<u32, B>,
        loss: &mut impl DeviceWrite<T, B>,
        grad: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.cross_entropy_grad(shape, logits, labels, loss, grad)?;
        self.check_indices_as("cross_entropy_grad_checked", true, labels, shape.cols)
    }

    /// [`Stream::cross_entropy`] and its gradient with respect to the logits:
    /// `grad[r][j] = softmax(x_r)[j] - [j == labels[r]]` (scale it by `1 / rows` for the
    /// gradient of the mean loss). A label out of range gives a NaN gradient row.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
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
        let n = grad.len();
        self.cross_entropy_op(shape, logits, labels, loss, Some((Writes::of(grad), n)))
    }
}
