//! Batched gemm against the same products done one by one.

use super::*;

/// A batched gemm (shared `A`, padded `C`) equals its products done one by one, and leaves
/// the padding alone.
pub(super) fn batched_gemm_vs_sequential<T: CrossFloat>(ctx: &Context) -> gpukit::Result<()> {
    let case = (
        1..5usize,
        1..9usize,
        1..9usize,
        0..9usize,
        any::<bool>(),
        any::<bool>(),
    );
    check(16, case, |(batch, m, n, k, shared_a, ta)| {
        let (sa, sb, sc) = (if shared_a { 0 } else { m * k }, k * n, m * n + 3);
        let g = Gemm::new(m, n, k)
            .transpose(ta, false)
            .strided(batch, sa, sb, sc);
        let span = |size: usize, stride: usize| (batch - 1) * stride + size;
        let vals = |len: usize, seed: u32| -> Vec<T> {
            data(seed, len)
                .iter()
                .map(|&v| T::from_f64(f64::from(v)))
                .collect()
        };
        let (a, b) = (vals(span(m * k, sa), 1), vals(span(k * n, sb), 2));
        let c0 = vals(span(m * n, sc), 3);
        let (da, db) = (ctx.alloc_upload(&a).tc()?, ctx.alloc_upload(&b).tc()?);
        let mut dc = ctx.alloc_upload(&c0).tc()?;
        ctx.gemm(g, &da, &db, &mut dc).tc()?;
        let got = dc.download().tc()?;
        for i in 0..batch {
            let one = Gemm::new(m, n, k).transpose(ta, false);
            let ai = ctx.alloc_upload(&a[i * sa..i * sa + m * k]).tc()?;
            let bi = ctx.alloc_upload(&b[i * sb..i * sb + k * n]).tc()?;
            let mut ci = ctx.alloc_upload(&c0[i * sc..i * sc + m * n]).tc()?;
            ctx.gemm(one, &ai, &bi, &mut ci).tc()?;
            let want = ci.download().tc()?;
            for (j, w) in want.iter().enumerate() {
                prop_assert!(
                    w.same(got[i * sc + j]),
                    "batch {i} [{j}]: {:?} vs {w:?}",
                    got[i * sc + j]
                );
            }
            if i + 1 < batch {
                for j in m * n..sc {
                    prop_assert!(
                        got[i * sc + j].same(c0[i * sc + j]),
                        "padding of batch {i} changed"
                    );
                }
            }
        }
        Ok(())
    })
}
