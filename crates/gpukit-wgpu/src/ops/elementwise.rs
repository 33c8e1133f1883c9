//! The element-wise families: the table's unary and binary ops (with scalar, row
//! and column operands) and random fills, each one kernel run over windows of its operands
//! so that an array larger than one binding still works.

use gpukit_core::{BufAt, Distribution, Result, Scalar};

use super::pipeline::{dispatch, pipe, Bind, Pipe};
use super::{u32_of, unsupported, Target};
use crate::stream::StreamInner;
use crate::wgsl::{self, field, set_scalar, WgslType};
use crate::{round4, Shared, WgpuBackend, WgpuBuffer};

/// Threads per workgroup of the element-wise kernels.
const WG: u64 = 256;

/// One operand of an element-wise op: a buffer, the byte offset of element 0, the element
/// size.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    buf: &'a WgpuBuffer,
    off: u64,
    es: u64,
}

impl<'a> Operand<'a> {
    pub(super) fn of(at: BufAt<'a, WgpuBackend>, es: u64) -> Operand<'a> {
        Operand {
            buf: at.buf,
            off: at.offset as u64,
            es,
        }
    }

    /// The window over elements `start..start + len`, and the element offset of `start`
    /// inside it.
    pub(super) fn window(&self, shared: &Shared, start: u64, len: u64) -> (Bind<'a>, u32) {
        let first = self.off + start * self.es;
        let base = first / shared.align * shared.align;
        let end = round4(first + len * self.es).min(self.buf.buf.size());
        (
            Bind {
                buf: &self.buf.buf,
                base,
                size: (end - base).max(4),
            },
            ((first - base) / self.es) as u32,
        )
    }

    /// The whole range of `len` elements as one window, or `Unsupported`.
    pub(super) fn whole(&self, shared: &Shared, len: u64, what: &str) -> Result<(Bind<'a>, u32)> {
        let (b, o) = self.window(shared, 0, len);
        if b.size > shared.max_binding {
            return Err(unsupported(format!(
                "{what} of {} bytes in one binding (the adapter binds at most {} bytes)",
                len * self.es,
                shared.max_binding
            )));
        }
        Ok((b, o))
    }
}

/// Workgroups for a grid-stride loop over `n` items.
pub(super) fn groups_for(shared: &Shared, n: u64) -> u32 {
    let max = u64::from(shared.limits.max_compute_workgroups_per_dimension);
    n.div_ceil(WG).clamp(1, max) as u32
}

/// Runs an element-wise kernel over `len` elements in chunks that keep every window
/// within one binding. `ops[0..3]` are bound as `in0`, `in1`, `out0` (`None`: nothing);
/// `vector` replaces `in1` by a whole vector; `imm` holds the immediates but `n`, `base` and
/// the offsets, which are set here.
#[allow(clippy::too_many_arguments)]
pub(super) fn elementwise(
    shared: &Shared,
    stream: &StreamInner,
    pipe: &Pipe,
    ops: [Option<Operand<'_>>; 3],
    vector: Option<(Operand<'_>, u64)>,
    len: u64,
    mut imm: [u32; field::WORDS],
) -> Result<()> {
    let max_es = ops.iter().flatten().map(|o| o.es).max().unwrap_or(4);
    let chunk = ((shared.max_binding - shared.align - 8) / max_es).max(1);
    let vec_bind = match vector {
        Some((v, n)) => Some(v.whole(shared, n, "a broadcast vector")?),
        None => None,
    };
    let mut start = 0u64;
    while start < len {
        let n = chunk.min(len - start);
        let mut binds = [Bind::dummy(shared); 3];
        for (slot, (o, field)) in ops
            .iter()
            .zip([field::OFF_IN0, field::OFF_IN1, field::OFF_OUT0])
            .enumerate()
        {
            if let Some(o) = o {
                let (b, off) = o.window(shared, start, n);
                binds[slot] = b;
                imm[field] = off;
            }
        }
        if let Some((b, off)) = vec_bind {
            binds[1] = b;
            imm[field::OFF_IN1] = off;
        }
        imm[field::N] = u32_of(n, "a chunk")?;
        imm[field::BASE] = u32_of(start, "an element index")?;
        dispatch(
            shared,
            stream,
            pipe,
            &binds,
            &imm,
            [groups_for(shared, n), 1, 1],
        )?;
        start += n;
    }
    Ok(())
}

/// A scalar as the bits of the compute type of `t` (f16 widened to f32).
pub(super) fn scalar_bits(s: Scalar, t: WgslType) -> u64 {
    let bytes = s.bytes();
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    let raw = u64::from_le_bytes(b);
    match t {
        WgslType::F16 => f16_to_f32_bits(raw as u16),
        WgslType::BF16 => (raw & 0xffff) << 16,
        WgslType::I8 => u64::from(raw as u8 as i8 as i32 as u32),
        _ => raw,
    }
}

/// The f32 bits of the f16 with bits `h` (exact: every f16 is an f32).
fn f16_to_f32_bits(h: u16) -> u64 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let shift = m.leading_zeros() - 21;
            let m = (m << shift) & 0x3ff;
            sign | ((127 - 15 - shift + 1) << 23) | (m << 13)
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    u64::from(bits)
}

/// A random fill of `len` elements (`crate::wgsl::random`), from `src` for dropout (in
/// place when `None`).
pub(super) fn random(
    at: Target<'_>,
    (dist, seed, offset): (Distribution, u64, u64),
    (a, b, range): (Scalar, Scalar, u32),
    src: Option<BufAt<'_, WgpuBackend>>,
    out: BufAt<'_, WgpuBackend>,
    len: usize,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    let p = pipe(shared, format!("random_{}", t.name()), 3, || {
        wgsl::random(t)
    })?;
    let mut imm = [0u32; field::WORDS];
    imm[field::MODE] = wgsl::dist_mode(dist);
    imm[field::K] = seed as u32;
    imm[field::BATCH] = (seed >> 32) as u32;
    imm[field::STRIDE_A] = offset as u32;
    imm[field::STRIDE_B] = (offset >> 32) as u32;
    imm[field::FLAGS] = range;
    set_scalar(&mut imm, t, 0, scalar_bits(a, t));
    set_scalar(&mut imm, t, 1, scalar_bits(b, t));
    let out = Operand::of(out, t.size());
    let src = src.map(|s| Operand::of(s, t.size())).unwrap_or(out);
    elementwise(
        shared,
        stream,
        &p,
        [Some(src), None, Some(out)],
        None,
        len as u64,
        imm,
    )
}
