//! Row-wise ops: softmax, log-softmax and cross-entropy (with its gradient).

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Float;
use crate::error::{same_len, Error, Result};
use crate::optable::{Op, Shape};
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

use super::shape_len;

impl<B: Backend> Stream<B> {
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
        self.check_indices_as("cross_entropy_checked", "labels", labels, shape.cols)
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
        self.check_indices_as("cross_entropy_grad_checked", "labels", labels, shape.cols)
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
        let sg = grad.slice_ref();
        self.cross_entropy_op(shape, logits, labels, loss, Some((&sg, grad.len())))
    }
}
