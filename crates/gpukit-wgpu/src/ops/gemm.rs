//! The gemm family: a batch of row-major products in one dispatch of 16 x 16 tiles (batch
//! along the grid's `z`), every operand inside one binding.

use gpukit_core::{BufAt, Gemm, Result};

use super::elementwise::Operand;
use super::pipeline::{dispatch, pipe};
use super::{u32_of, unsupported, Target};
use crate::wgsl::{self, field, set_scalar, WgslType};
use crate::WgpuBackend;

/// `C = alpha op(A) op(B) + beta C` for each product of the batch `g` describes.
pub(super) fn gemm(
    at: Target<'_>,
    g: Gemm<f64>,
    a: BufAt<'_, WgpuBackend>,
    b: BufAt<'_, WgpuBackend>,
    c: BufAt<'_, WgpuBackend>,
) -> Result<()> {
    let Target { shared, stream, t } = at;
    let es = t.size();
    let span = |size: usize, stride: usize| g.span(size, stride).unwrap_or(usize::MAX) as u64;
    let (ba, oa) =
        Operand::of(a, es).whole(shared, span(g.m * g.k, g.stride_a), "a gemm operand A")?;
    let (bb, ob) =
        Operand::of(b, es).whole(shared, span(g.k * g.n, g.stride_b), "a gemm operand B")?;
    let (bc, oc) =
        Operand::of(c, es).whole(shared, span(g.m * g.n, g.stride_c), "a gemm operand C")?;
    let max = shared.limits.max_compute_workgroups_per_dimension;
    let gx = u32_of((g.n as u64).div_ceil(16), "gemm columns")?;
    let gy = u32_of((g.m as u64).div_ceil(16), "gemm rows")?;
    if gx > max || gy > max {
        return Err(unsupported(format!(
            "a {} x {} gemm (more than {} tiles of 16 along a side)",
            g.m, g.n, max
        )));
    }
    let p = pipe(shared, format!("gemm_{}", t.name()), 3, || wgsl::gemm(t))?;
    let mut imm = [0u32; field::WORDS];
    imm[field::ROWS] = u32_of(g.m as u64, "gemm rows")?;
    imm[field::COLS] = u32_of(g.n as u64, "gemm columns")?;
    imm[field::K] = u32_of(g.k as u64, "gemm depth")?;
    imm[field::BATCH] = u32_of(g.batch as u64, "a gemm batch")?;
    imm[field::STRIDE_A] = u32_of(g.stride_a as u64, "a gemm stride")?;
    imm[field::STRIDE_B] = u32_of(g.stride_b as u64, "a gemm stride")?;
    imm[field::STRIDE_C] = u32_of(g.stride_c as u64, "a gemm stride")?;
    imm[field::FLAGS] = u32::from(g.trans_a) | (u32::from(g.trans_b) << 1);
    let bits = |v: f64| {
        if t == WgslType::F64 {
            v.to_bits()
        } else {
            u64::from((v as f32).to_bits())
        }
    };
    set_scalar(&mut imm, t, 0, bits(g.alpha));
    set_scalar(&mut imm, t, 1, bits(g.beta));
    imm[field::OFF_IN0] = oa;
    imm[field::OFF_IN1] = ob;
    imm[field::OFF_OUT0] = oc;
    let gz = (g.batch as u32).min(max);
    dispatch(shared, stream, &p, &[ba, bb, bc], &imm, [gx, gy, gz])
}
