//! The row-wise families: softmax (and log-softmax) and cross-entropy, one kernel that
//! gives each row a workgroup; every operand inside one binding.

use gpukit_core::{BufAt, Result, Shape};

use super::elementwise::Operand;
use super::pipeline::{dispatch, pipe, Bind};
use super::{caps, u32_of, Target};
use crate::stream::StreamInner;
use crate::wgsl::{self, field, WgslType};
use crate::{Shared, WgpuBackend};

/// Row-wise softmax or log-softmax of the `shape` matrix (in place when `src` is `None`).
pub(super) fn softmax(
    at: Target<'_>,
    log: bool,
    src: Option<BufAt<'_, WgpuBackend>>,
    out: BufAt<'_, WgpuBackend>,
    shape: Shape,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    let out = Operand::of(out, t.size());
    let src = src.map(|s| Operand::of(s, t.size())).unwrap_or(out);
    let n = shape.rows as u64 * shape.cols as u64;
    let mut imm = [0u32; field::WORDS];
    imm[field::MODE] = u32::from(log);
    let (bi, oi) = src.whole(shared, n, "a softmax input")?;
    let (bo, oo) = out.whole(shared, n, "a softmax output")?;
    row_kernel(
        shared,
        stream,
        t,
        [bi, Bind::dummy(shared), bo, Bind::dummy(shared)],
        [oi, 0, oo, 0],
        shape.rows as u64,
        shape.cols as u64,
        imm,
    )
}

/// Cross-entropy of the `shape` logits against `u32` labels into `loss`, and its gradient
/// into `grad` when given.
pub(super) fn cross_entropy(
    at: Target<'_>,
    (logits, labels): (BufAt<'_, WgpuBackend>, BufAt<'_, WgpuBackend>),
    loss: BufAt<'_, WgpuBackend>,
    grad: Option<BufAt<'_, WgpuBackend>>,
    shape: Shape,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    let es = t.size();
    let n = shape.rows as u64 * shape.cols as u64;
    let (bi, oi) = Operand::of(logits, es).whole(shared, n, "cross-entropy logits")?;
    let (bl, ol) =
        Operand::of(labels, 4).whole(shared, shape.rows as u64, "cross-entropy labels")?;
    let (bo, oo) =
        Operand::of(loss, es).whole(shared, shape.rows as u64, "cross-entropy losses")?;
    let (bg, og) = match grad {
        Some(g) => Operand::of(g, es).whole(shared, n, "a cross-entropy gradient")?,
        None => (Bind::dummy(shared), 0),
    };
    let mut imm = [0u32; field::WORDS];
    imm[field::MODE] = 2;
    imm[field::FLAGS] = u32::from(grad.is_some());
    row_kernel(
        shared,
        stream,
        t,
        [bi, bl, bo, bg],
        [oi, ol, oo, og],
        shape.rows as u64,
        shape.cols as u64,
        imm,
    )
}

/// Softmax or cross-entropy: one workgroup per row.
#[allow(clippy::too_many_arguments)]
fn row_kernel(
    shared: &Shared,
    stream: &StreamInner,
    t: WgslType,
    binds: [Bind<'_>; 4],
    offs: [u32; 4],
    rows: u64,
    cols: u64,
    mut imm: [u32; field::WORDS],
) -> Result<()> {
    let f64_ok = caps(shared).f64;
    let p = pipe(shared, format!("softmax_{}", t.name()), 4, || {
        wgsl::softmax(t, f64_ok)
    })?;
    imm[field::ROWS] = u32_of(rows, "rows")?;
    imm[field::COLS] = u32_of(cols, "a row length")?;
    imm[field::OFF_IN0] = offs[0];
    imm[field::OFF_IN1] = offs[1];
    imm[field::OFF_OUT0] = offs[2];
    imm[field::OFF_OUT1] = offs[3];
    let g = (rows as u32).min(shared.limits.max_compute_workgroups_per_dimension);
    dispatch(shared, stream, &p, &binds, &imm, [g, 1, 1])
}
