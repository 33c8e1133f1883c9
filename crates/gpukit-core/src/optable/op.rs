//! [`Op`]: one built-in op as a backend receives it, untyped (byte ranges of buffers, the
//! element type beside it).

use crate::backend::{Backend, BufAt};
use crate::element::DType;
use crate::error::Result;

use super::Gemm;

/// How a binary op's second operand is laid out against a matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bcast {
    Row,
    Col,
}

/// A comparison of two elements into a `u8` mask (`Stream::compare`): IEEE's, so every
/// comparison with a NaN is false but `Ne`, which is true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CmpOp {
    /// Every comparison.
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// The method's name (`eq`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// The C and WGSL operator.
    pub const fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The reference: the comparison in the compute type.
    pub fn apply<C: PartialOrd>(self, a: C, b: C) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// One built-in op as a backend receives it (see [`Backend::op`]).
///
/// Every range holds elements of the call's element type, except the `u32` indices of the
/// indexing ops and the `u32`s of a permutation. A fill whose `src` is `None` runs in
/// place: `out` is read and written. Lengths and shapes are never zero.
pub enum Op<'a, B: Backend> {
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

/// How an [`Op`] uses one of its ranges ([`Op::ranges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeUse {
    /// Only read.
    Read,
    /// Written (and perhaps read too).
    Write,
}

impl<'a, B: Backend> Op<'a, B> {
    /// Every range the op reads or writes, with its length in bytes when run on elements of
    /// `dtype` (the type the backend is given with it), in operand order: what a backend
    /// that checks accesses declares for the op (the CPU backend's chaos schedule). A range
    /// both read and written (an in-place op's `out`, `ScatterAdd`'s and
    /// `CountEq`'s accumulators, gemm's `C`) is listed once, as written. Left out: the fault
    /// record of the indexing ops, which is claimed atomically and never ordered. A gemm's
    /// ranges span from each matrix's start to the end of the last one of its batch.
    pub fn ranges(&self, dtype: DType) -> Vec<(BufAt<'a, B>, usize, RangeUse)> {
        use RangeUse::{Read, Write};
        let el = dtype.size();
        let elems = |n: usize| n.saturating_mul(el);
        let mut out = Vec::with_capacity(4);
        let mut add = |at: Option<BufAt<'a, B>>, bytes: usize, use_: RangeUse| {
            if let Some(at) = at {
                out.push((at, bytes, use_));
            }
        };
        match *self {
            Op::Gemm { ref g, a, b, c } => {
                // The last matrix of the batch ends `stride * (batch - 1) + size` elements in.
                let span = |stride: usize, size: usize| {
                    elems(
                        stride
                            .saturating_mul(g.batch.saturating_sub(1))
                            .saturating_add(size),
                    )
                };
                add(Some(a), span(g.stride_a, g.m.saturating_mul(g.k)), Read);
                add(Some(b), span(g.stride_b, g.k.saturating_mul(g.n)), Read);
                add(Some(c), span(g.stride_c, g.m.saturating_mul(g.n)), Write);
            }
        }
        out
    }

    /// The op's name, for errors and fault injection.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Gemm { .. } => "gemm",
        }
    }

    /// Whether only float element types have the op (a backend refuses it on integers).
    pub fn floats_only(&self) -> bool {
        match self {
            Op::Gemm { .. } => true,
        }
    }

    /// The same op on another backend's ranges, each converted by `f` (how a dispatching
    /// backend forwards an op to the backend it wraps).
    pub fn try_map<'b, C: Backend>(
        &self,
        f: impl Fn(BufAt<'a, B>) -> Result<BufAt<'b, C>>,
    ) -> Result<Op<'b, C>> {
        Ok(match *self {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_name_and_spell_themselves() {
        let got = CmpOp::ALL.map(|c| (c.name(), c.symbol()));
        assert_eq!(
            got,
            [
                ("eq", "=="),
                ("ne", "!="),
                ("lt", "<"),
                ("le", "<="),
                ("gt", ">"),
                ("ge", ">="),
            ]
        );
    }
}
