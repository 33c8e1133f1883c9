//! The indexing ops: each operand bound whole (an index may name any row).

use gpukit_core::optable::Faults;
use gpukit_core::{BufAt, Result, Shape, FAULT_WORDS};

use super::elementwise::{groups_for, Operand};
use super::pipeline::{dispatch, pipe, Bind};
use super::{u32_of, unsupported, Target};
use crate::wgsl::{self, field, WgslType};
use crate::WgpuBackend;

/// Reports the first of `len` indices that is `bound` or more.
pub(super) fn check_indices(
    at: Target<'_>,
    idx: BufAt<'_, WgpuBackend>,
    len: usize,
    bound: u64,
    faults: Faults<'_, WgpuBackend>,
) -> Result<()> {
    let Target { shared, stream, .. } = at;
    if bound > u64::from(u32::MAX) {
        // No `u32` index reaches it.
        return Ok(());
    }
    let p = pipe(shared, "check_indices".into(), 4, wgsl::check_indices)?;
    let n = len as u64;
    let (bi, oi) = Operand::of(idx, 4).whole(shared, n, "an index array")?;
    let (br, _) = Operand::of(faults.record, 4).whole(shared, FAULT_WORDS as u64, "a record")?;
    let mut imm = [0u32; field::WORDS];
    imm[field::N] = u32_of(n, "indices")?;
    imm[field::ROWS] = bound as u32;
    imm[field::FLAGS] = faults.tag;
    imm[field::OFF_IN1] = oi;
    let d = Bind::dummy(shared);
    dispatch(
        shared,
        stream,
        &p,
        &[d, bi, d, br],
        &imm,
        [groups_for(shared, n), 1, 1],
    )
}

/// Which indexing kernel runs.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Indexing {
    Gather,
    Scatter,
    OneHot,
}

/// `gather_rows`, `scatter_add_rows` or `one_hot`, with the fault record at binding 3:
/// `src` is `None` for one-hot, `shape` the table's (gather), the accumulator's (scatter) or
/// the output's (one-hot), `n` the indices (gather, scatter).
pub(super) fn indexed(
    at: Target<'_>,
    kind: Indexing,
    (src, idx, out): (
        Option<BufAt<'_, WgpuBackend>>,
        BufAt<'_, WgpuBackend>,
        BufAt<'_, WgpuBackend>,
    ),
    (shape, n): (Shape, usize),
    faults: Faults<'_, WgpuBackend>,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    if kind == Indexing::Scatter && !matches!(t, WgslType::F32 | WgslType::I32 | WgslType::U32) {
        return Err(unsupported(format!(
            "`scatter_add_rows` on {} (WGSL has 32-bit atomics only)",
            t.name()
        )));
    }
    let all = shape.rows * shape.cols;
    let (name, src_elems, out_elems, count) = match kind {
        Indexing::Gather => ("gather", all, n * shape.cols, n * shape.cols),
        Indexing::Scatter => ("scatter", n * shape.cols, all, n * shape.cols),
        Indexing::OneHot => ("one_hot", 0, all, all),
    };
    let p = pipe(shared, format!("{name}_{}", t.name()), 4, || match kind {
        Indexing::Gather => wgsl::rows_by_index(t, false),
        Indexing::Scatter => wgsl::rows_by_index(t, true),
        Indexing::OneHot => wgsl::one_hot(t),
    })?;
    let (bs, os) = match src {
        Some(s) => Operand::of(s, t.size()).whole(shared, src_elems as u64, "a table")?,
        None => (Bind::dummy(shared), 0),
    };
    let idx_len = if kind == Indexing::OneHot {
        shape.rows
    } else {
        n
    };
    let (bi, oi) = Operand::of(idx, 4).whole(shared, idx_len as u64, "an index array")?;
    let (bo, oo) = Operand::of(out, t.size()).whole(shared, out_elems as u64, "an output")?;
    let (br, _) = Operand::of(faults.record, 4).whole(shared, FAULT_WORDS as u64, "a record")?;
    let mut imm = [0u32; field::WORDS];
    imm[field::ROWS] = u32_of(shape.rows as u64, "rows")?;
    imm[field::COLS] = u32_of(shape.cols as u64, "columns")?;
    imm[field::N] = u32_of(n as u64, "indices")?;
    u32_of(count as u64, "elements")?;
    imm[field::FLAGS] = faults.tag;
    imm[field::OFF_IN0] = os;
    imm[field::OFF_IN1] = oi;
    imm[field::OFF_OUT0] = oo;
    dispatch(
        shared,
        stream,
        &p,
        &[bs, bi, bo, br],
        &imm,
        [groups_for(shared, count as u64), 1, 1],
    )
}
