//! [`Op`]: one built-in op as a backend receives it, untyped (byte ranges of buffers, the
//! element type beside it), and the second operand of a binary op ([`Rhs`]).

use crate::backend::{Backend, BufAt};
use crate::element::DType;
use crate::error::Result;

use super::{BinaryOp, Distribution, Gemm, ReduceOp, Scalar, Shape, UnaryOp};

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
    /// `y[i] = alpha * x[i] + y[i]` over `len` elements ([`Numeric::axpy`](crate::Numeric::axpy)).
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
    /// Row-wise softmax or log-softmax ([`softmax_rows`](super::softmax_rows)); in place when `src` is `None`.
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
    /// Cross-entropy of logits against `u32` labels ([`cross_entropy_rows`](super::cross_entropy_rows)).
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
    /// `out[i] = src[i]` converted to `to` ([`Numeric::from_wide`](crate::Numeric::from_wide)).
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
    /// A random fill of `len` elements from the Philox stream keyed by `seed`, at `offset`
    /// ([`Distribution`]; the reference is [`random_floats`](super::random_floats) and
    /// [`random_integers`](super::random_integers)). `a` and `b` are the element type's
    /// scalars: `lo` and `hi`, `mean` and `std`, `lo` (and `range`, 0 meaning `2^32`, for
    /// integers), or `p` and the scale (dropout, which reads `src`, or `out` in place).
    Random {
        /// What to draw.
        dist: Distribution,
        /// The generator's key.
        seed: u64,
        /// The stream position of element 0.
        offset: u64,
        /// First parameter.
        a: Scalar,
        /// Second parameter.
        b: Scalar,
        /// The integers' range (`hi - lo`, 0 meaning `2^32`); 0 for the others.
        range: u32,
        /// Dropout's input; `None`: in place (or no input).
        src: Option<BufAt<'a, B>>,
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
            Op::Random { dist, .. } => dist.name(),
            Op::Gemm { .. } => "gemm",
        }
    }

    /// Whether only float element types have the op (a backend refuses it on integers).
    pub fn floats_only(&self) -> bool {
        match self {
            Op::Unary { op, .. } => op.floats_only(),
            Op::Binary { op, .. } => op.floats_only(),
            Op::Reduce { op, .. } => *op == ReduceOp::Mean,
            Op::Random { dist, .. } => *dist != Distribution::Integers,
            Op::Softmax { .. } | Op::CrossEntropy { .. } | Op::Gemm { .. } => true,
            Op::Fill { .. }
            | Op::Axpy { .. }
            | Op::Clamp { .. }
            | Op::Dot { .. }
            | Op::Cast { .. } => false,
        }
    }

    /// Whether the op calls the platform's math functions (`exp`, `log`, `tanh`, `pow`) per
    /// element: the table's `math` column for the element-wise ops ([`UnaryOp::math`],
    /// [`BinaryOp::math`]); softmax and cross-entropy always. What such an op costs, and where
    /// it exists, follow from it (see [`super::MathFn`]).
    pub fn calls_math(&self) -> bool {
        match self {
            Op::Unary { op, .. } => op.math().is_some(),
            Op::Binary { op, .. } => op.math().is_some(),
            Op::Softmax { .. } | Op::CrossEntropy { .. } => true,
            Op::Fill { .. }
            | Op::Axpy { .. }
            | Op::Clamp { .. }
            | Op::Reduce { .. }
            | Op::Dot { .. }
            | Op::Cast { .. }
            | Op::Random { .. }
            | Op::Gemm { .. } => false,
        }
    }

    /// Whether only integer element types have the op (a backend refuses it on floats).
    pub fn ints_only(&self) -> bool {
        matches!(
            self,
            Op::Random {
                dist: Distribution::Integers,
                ..
            }
        )
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
            Op::Random {
                dist,
                seed,
                offset,
                a,
                b,
                range,
                src,
                out,
                len,
            } => Op::Random {
                dist,
                seed,
                offset,
                a,
                b,
                range,
                src: opt(src)?,
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
