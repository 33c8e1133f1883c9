//! Gemm in WGSL: a batch of row-major products in 16 x 16 tiles.

use super::{binding, prelude, WgslType};

/// `C = alpha op(A) op(B) + beta C` for a batch (workgroup `z`), 16 x 16 tiles.
/// `p.flags` bit 0: A transposed, bit 1: B transposed; `p.x0`, `p.x1`: alpha, beta.
pub(crate) fn gemm(t: WgslType) -> String {
    format!(
        "{pre}
{b0}{b1}{b2}
var<workgroup> ta: array<array<C, 16>, 16>;
var<workgroup> tb: array<array<C, 16>, 16>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let m = p.rows;
    let n = p.cols;
    let k = p.k;
    let ta_ = (p.flags & 1u) == 1u;
    let tb_ = (p.flags & 2u) == 2u;
    let alpha = p.x0;
    let beta = p.x1;
    let row = wid.y * 16u + lid.y;
    let col = wid.x * 16u + lid.x;
    for (var z = wid.z; z < p.batch; z += nwg.z) {{
        let a0 = p.off_in0 + z * p.stride_a;
        let b0 = p.off_in1 + z * p.stride_b;
        let c0 = p.off_out0 + z * p.stride_c;
        var acc = C(0);
        for (var k0 = 0u; k0 < k; k0 += 16u) {{
            let ka = k0 + lid.x;
            var av = C(0);
            if (row < m && ka < k) {{
                av = get_am(a0 + select(row * k + ka, ka * m + row, ta_));
            }}
            ta[lid.y][lid.x] = av;
            let kb = k0 + lid.y;
            var bv = C(0);
            if (kb < k && col < n) {{
                bv = get_bm(b0 + select(kb * n + col, col * k + kb, tb_));
            }}
            tb[lid.y][lid.x] = bv;
            workgroupBarrier();
            for (var kk = 0u; kk < 16u; kk++) {{
                acc = acc + ta[lid.y][kk] * tb[kk][lid.x];
            }}
            workgroupBarrier();
        }}
        if (row < m && col < n) {{
            let ci = c0 + row * n + col;
            var v = alpha * acc;
            if (beta != C(0)) {{ v = v + beta * get_cm(ci); }}
            put_cm(ci, v);
        }}
    }}
}}
",
        pre = prelude(t),
        b0 = binding(0, "am", t),
        b1 = binding(1, "bm", t),
        b2 = binding(2, "cm", t),
    )
}
