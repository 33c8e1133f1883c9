//! Collectives over a group of contexts: the reduction they apply, and the in-process
//! implementation every backend runs (peer copies and the op table's binary ops, in a fixed
//! order, so that a float all-reduce gives the same bits whatever the thread timing).

use std::fmt;

/// How [`crate::Stream`]s' arrays are combined by an all-reduce or a reduce-scatter: NCCL's
/// `ncclRedOp_t` (`ncclSum`, `ncclAvg`, `ncclMax`, `ncclMin`, `ncclProd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    /// The sum over the ranks.
    Sum,
    /// The sum over the ranks divided by their number (float types only).
    Avg,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
    /// The product over the ranks.
    Prod,
}

impl CollectiveOp {
    /// Every op, in declaration order.
    pub const ALL: [CollectiveOp; 5] = [
        CollectiveOp::Sum,
        CollectiveOp::Avg,
        CollectiveOp::Max,
        CollectiveOp::Min,
        CollectiveOp::Prod,
    ];

    /// Lower-case name: `sum`, `avg`, `max`, `min`, `prod`.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::Sum => "sum",
            CollectiveOp::Avg => "avg",
            CollectiveOp::Max => "max",
            CollectiveOp::Min => "min",
            CollectiveOp::Prod => "prod",
        }
    }
}

impl fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod inprocess;

pub use inprocess::{
    all_gather_into, all_reduce, all_reduce_into, broadcast, broadcast_into, check_arrays,
    check_op, check_root, check_streams, chunk, reduce_scatter_into,
};
