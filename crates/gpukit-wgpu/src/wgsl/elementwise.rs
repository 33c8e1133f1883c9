//! The frame of the element-wise kernels written in WGSL (the random fills): a
//! grid-stride loop over windows of their operands.

use super::{binding, WgslType};

/// An element-wise kernel: bindings `in0`, `in1` and `out0` (of `t`, or `out` for the
/// output), a grid-stride loop over `p.n` elements running `body` for index `i`.
pub(super) fn map_kernel(prelude: &str, t: WgslType, out: WgslType, body: &str) -> String {
    format!(
        "{prelude}{}{}{}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let stride = nwg.x * 256u;
    var i = gid.x;
    loop {{
        if (i >= p.n) {{ break; }}
        {body}
        if (p.n - i <= stride) {{ break; }}
        i += stride;
    }}
}}
",
        binding(0, "in0", t),
        binding(1, "in1", t),
        binding(2, "out0", out),
    )
}
