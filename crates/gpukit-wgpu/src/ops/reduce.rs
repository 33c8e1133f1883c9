//! The reduction families: a reduction of each row (a whole array is one row) and the dot
//! product, in one pass when rows are many or short, else in parts and a second pass.

use gpukit_core::{BufAt, ReduceOp, Result, Shape};

use super::elementwise::Operand;
use super::pipeline::{dispatch, pipe, Bind};
use super::{caps, u32_of, unsupported, Target};
use crate::stream::StreamInner;
use crate::wgsl::{self, field, ReduceKind, WgslType};
use crate::{Shared, WgpuBackend};

/// A reduction of each row of the `shape` matrix `x` into `out` (`u32` indices for the
/// index reductions).
pub(super) fn reduce(
    at: Target<'_>,
    op: ReduceOp,
    x: BufAt<'_, WgpuBackend>,
    shape: Shape,
    out: BufAt<'_, WgpuBackend>,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    let out_es = if op.is_index() { 4 } else { t.size() };
    reduction(
        shared,
        stream,
        t,
        ReduceKind::Op(op),
        Operand::of(x, t.size()),
        None,
        shape.rows as u64,
        shape.cols as u64,
        Operand::of(out, out_es),
    )
}

/// The dot product of `len` elements of `x` and `y` into the one element `out`.
pub(super) fn dot(
    at: Target<'_>,
    x: BufAt<'_, WgpuBackend>,
    y: BufAt<'_, WgpuBackend>,
    len: usize,
    out: BufAt<'_, WgpuBackend>,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    let es = t.size();
    reduction(
        shared,
        stream,
        t,
        ReduceKind::Dot,
        Operand::of(x, es),
        Some(Operand::of(y, es)),
        1,
        len as u64,
        Operand::of(out, es),
    )
}

/// A reduction of each of `rows` rows of `cols` items: one pass when rows are many or
/// short, else per-part partials into a scratch buffer and a second pass over them.
#[allow(clippy::too_many_arguments)]
fn reduction(
    shared: &Shared,
    stream: &StreamInner,
    t: WgslType,
    kind: ReduceKind,
    x: Operand<'_>,
    y: Option<Operand<'_>>,
    rows: u64,
    cols: u64,
    out: Operand<'_>,
) -> Result<()> {
    let f64_ok = caps(shared).f64;
    let part_bytes = wgsl::part_bytes(wgsl::acc_type(kind, t, f64_ok));
    let n = rows * cols;
    let (bx, ox) = x.whole(shared, n, "a reduction input")?;
    let (by, oy) = match y {
        Some(y) => y.whole(shared, n, "a dot product input")?,
        None => (Bind::dummy(shared), 0),
    };
    let (bo, oo) = out.whole(shared, rows, "a reduction output")?;
    let max = u64::from(shared.limits.max_compute_workgroups_per_dimension);
    let parts = if rows >= 64 || cols <= 8192 {
        1
    } else {
        cols.div_ceil(4096).min(1024)
    };
    let tn = t.name();
    let kname = match kind {
        ReduceKind::Op(r) => r.name(),
        ReduceKind::Dot => "dot",
    };
    let mut imm = [0u32; field::WORDS];
    imm[field::ROWS] = u32_of(rows, "rows")?;
    imm[field::COLS] = u32_of(cols, "a row length")?;
    imm[field::N] = u32_of(cols, "a row length")?;
    imm[field::OFF_IN0] = ox;
    imm[field::OFF_IN1] = oy;
    imm[field::OFF_OUT0] = oo;
    let gy = rows.min(max) as u32;
    let p1 = pipe(shared, format!("reduce1_{kname}_{tn}"), 4, || {
        wgsl::reduce(kind, t, false, f64_ok)
    })?;
    if parts == 1 {
        imm[field::K] = 1;
        imm[field::FLAGS] = 1;
        return dispatch(
            shared,
            stream,
            &p1,
            &[bx, by, bo, Bind::dummy(shared)],
            &imm,
            [1, gy, 1],
        );
    }
    let scratch_bytes = rows * parts * part_bytes;
    if scratch_bytes > shared.max_binding {
        return Err(unsupported(format!(
            "a reduction needing {scratch_bytes} bytes of partials"
        )));
    }
    let scratch = shared.scoped("Device::create_buffer", || {
        shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit reduction partials"),
            size: scratch_bytes,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    })?;
    let bs = Bind {
        buf: &scratch,
        base: 0,
        size: scratch_bytes,
    };
    imm[field::K] = parts as u32;
    imm[field::FLAGS] = 0;
    dispatch(
        shared,
        stream,
        &p1,
        &[bx, by, bo, bs],
        &imm,
        [parts as u32, gy, 1],
    )?;
    let p2 = pipe(shared, format!("reduce2_{kname}_{tn}"), 4, || {
        wgsl::reduce(kind, t, true, f64_ok)
    })?;
    imm[field::COLS] = parts as u32;
    imm[field::K] = 1;
    imm[field::FLAGS] = 1;
    dispatch(shared, stream, &p2, &[bx, by, bo, bs], &imm, [1, gy, 1])
}
