//! The element-wise kernels in WGSL (the table's unary and binary ops)
//! as grid-stride loops over windows of their operands.
//!
//! An element-wise op added to the table (`gpukit_core::optable`) needs nothing here: its
//! body is the entry's reference body, traced into a kernel-language expression over the
//! compute type (`UnaryOp::body`) and rendered by the kernel language's WGSL emitter
//! (operand `v_x`, or `v_a` and `v_b`), in the same order of operations as the reference.
//! Whether the op exists on a type comes from its table entry (its `math` column), not from
//! here.

use gpukit_core::{BinaryOp, UnaryOp};
use gpukit_kernel::ir::Body;
use gpukit_kernel::wgsl;

use super::{binding, prelude, WgslType};

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

/// The prelude of `t` and the helpers of a body over its compute type; the body's lines and
/// value.
fn with_body(t: WgslType, body: &Body) -> (String, String, String) {
    let (lines, value) = wgsl::body(body);
    let pre = prelude(t) + &wgsl::body_helpers(t.compute_ty());
    (pre, lines, value)
}

/// `out0[i] = op(in0[i])`.
pub(crate) fn unary(op: UnaryOp, t: WgslType) -> String {
    let (pre, lines, value) = with_body(t, &op.body(t.compute_ty()));
    let body = format!(
        "let v_x = get_in0(p.off_in0 + i);\n{lines}        put_out0(p.off_out0 + i, {value});"
    );
    map_kernel(&pre, t, t, &body)
}

/// `out0[i] = op(in0[i], rhs)`; `p.mode` 0: `in1[i]`, 1: row vector `in1[(base + i) %
/// cols]`, 2: column vector `in1[(base + i) / cols]`, 3: the scalar `p.x0`.
pub(crate) fn binary(op: BinaryOp, t: WgslType) -> String {
    let (pre, lines, value) = with_body(t, &op.body(t.compute_ty()));
    let body = format!(
        "let v_a = get_in0(p.off_in0 + i);
        var v_b: C;
        switch p.mode {{
            case 0u: {{ v_b = get_in1(p.off_in1 + i); }}
            case 1u: {{ v_b = get_in1(p.off_in1 + (p.base + i) % p.cols); }}
            case 2u: {{ v_b = get_in1(p.off_in1 + (p.base + i) / p.cols); }}
            default: {{ v_b = p.x0; }}
        }}
{lines}        put_out0(p.off_out0 + i, {value});"
    );
    map_kernel(&pre, t, t, &body)
}
