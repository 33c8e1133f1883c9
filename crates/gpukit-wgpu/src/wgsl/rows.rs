//! Softmax, log-softmax and cross-entropy in WGSL: one workgroup per row.

use super::{binding, prelude, WgslType};

/// Softmax, log-softmax (`p.mode` 0 or 1) or cross-entropy (`p.mode` 2, with `p.flags & 1`
/// for the gradient) of each row of a `p.rows x p.cols` matrix: one workgroup per row.
/// Bindings: `in0` input (logits), `in1` labels (`u32`, cross-entropy), `out0` output (the
/// losses), `grad` the gradient.
pub(crate) fn softmax(t: WgslType, f64_ok: bool) -> String {
    let acc = if f64_ok { "f64" } else { "f32" };
    format!(
        "{pre}alias A = {acc};
{b0}{b1}{b2}{b3}
var<workgroup> sa: array<f32, 256>;
var<workgroup> sb: array<A, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let t = lid.x;
    for (var r = wid.x; r < p.rows; r += nwg.x) {{
        let row = p.off_in0 + r * p.cols;
        var m = get_in0(row);
        for (var j = t; j < p.cols; j += 256u) {{
            let x = get_in0(row + j);
            m = select(select(m, x, x > m), x, isnan_(m));
        }}
        sa[t] = m;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {{
            if (t < s) {{
                let a = sa[t];
                let b = sa[t + s];
                sa[t] = select(select(a, b, b > a), b, isnan_(a));
            }}
            workgroupBarrier();
        }}
        m = sa[0];
        var acc = A(0);
        for (var j = t; j < p.cols; j += 256u) {{
            acc = acc + A(exp(get_in0(row + j) - m));
        }}
        sb[t] = acc;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {{
            if (t < s) {{ sb[t] = sb[t] + sb[t + s]; }}
            workgroupBarrier();
        }}
        let total = sb[0];
        // ln(total) to f32 precision, plus the first-order correction for the part of the
        // sum below f32's (WGSL has no f64 log).
        let t32 = f32(total);
        let ln_total = A(log(t32)) + (total - A(t32)) / total;
        workgroupBarrier();
        if (p.mode < 2u) {{
            let orow = p.off_out0 + r * p.cols;
            for (var j = t; j < p.cols; j += 256u) {{
                let d = get_in0(row + j) - m;
                if (p.mode == 1u) {{
                    put_out0(orow + j, f32(A(d) - ln_total));
                }} else {{
                    put_out0(orow + j, f32(A(exp(d)) / total));
                }}
            }}
        }} else {{
            let label = get_labels(p.off_in1 + r);
            let ok = label < p.cols;
            if (t == 0u) {{
                var loss = bitcast<f32>(0x7fc00000u);
                if (ok) {{ loss = f32(ln_total - A(get_in0(row + label) - m)); }}
                put_out0(p.off_out0 + r, loss);
            }}
            if ((p.flags & 1u) == 1u) {{
                let grow = p.off_out1 + r * p.cols;
                for (var j = t; j < p.cols; j += 256u) {{
                    var g = bitcast<f32>(0x7fc00000u);
                    if (ok) {{ g = f32(A(exp(get_in0(row + j) - m)) / total - select(A(0), A(1), j == label)); }}
                    put_grad(grow + j, g);
                }}
            }}
        }}
    }}
}}
",
        pre = prelude(t),
        b0 = binding(0, "in0", t),
        b1 = binding(1, "labels", WgslType::U32),
        b2 = binding(2, "out0", t),
        b3 = binding(3, "grad", t),
    )
}
