//! The op table in WGSL: one body per element-wise op of gpukit-core's table
//! ([`unary_body`], [`binary_body`]), and the element-wise kernels (fill, axpy, the table's
//! unary and binary ops, clamp) as grid-stride loops over windows of their operands.
//!
//! Adding an element-wise op to the table (`gpukit_core::optable`) means one arm in
//! [`unary_body`] or [`binary_body`]: the `match`es are exhaustive, so an op without a WGSL
//! body does not compile. A body is a WGSL expression over the compute type `C` (operand
//! `x`, or `a` and `b`), written in the same order of operations as the reference. Whether
//! the op exists on a type comes from its table entry (its `math` column), not from here.

use gpukit_core::{BinaryOp, UnaryOp};

use super::{binding, prelude, WgslType};

/// The WGSL body of a unary op over `x: C`.
pub(crate) fn unary_body(op: UnaryOp, t: WgslType) -> String {
    let float = t.is_float();
    match op {
        UnaryOp::Neg if float => "-x".into(),
        UnaryOp::Neg => "C(0) - x".into(),
        UnaryOp::Abs if !t.is_signed() && !float => "x".into(),
        UnaryOp::Abs if !float => "select(x, C(0) - x, x < C(0))".into(),
        UnaryOp::Abs => "abs(x)".into(),
        UnaryOp::Square => "x * x".into(),
        UnaryOp::Relu => "select(C(0), x, x > C(0))".into(),
        UnaryOp::Sqrt => "sqrt(x)".into(),
        UnaryOp::Rsqrt => "1.0 / sqrt(x)".into(),
        UnaryOp::Exp => "exp(x)".into(),
        UnaryOp::Log => "log(x)".into(),
        UnaryOp::Log1p => "log1p32(x)".into(),
        UnaryOp::Sigmoid => "1.0 / (1.0 + exp(-x))".into(),
        UnaryOp::Silu => "x / (1.0 + exp(-x))".into(),
        UnaryOp::Tanh => "tanh32(x)".into(),
        UnaryOp::Gelu => {
            "(0.5 * x) * (1.0 + tanh32(0.7978845608028654 * (x + ((0.044715 * x) * x) * x)))".into()
        }
        UnaryOp::Softplus => "select(0.0, x, x > 0.0) + log1p32(exp(-abs(x)))".into(),
        UnaryOp::Hardswish => "x * (min(max(x + 3.0, 0.0), 6.0) / 6.0)".into(),
    }
}

/// The WGSL body of a binary op over `a: C` and `b: C`.
pub(crate) fn binary_body(op: BinaryOp, t: WgslType) -> String {
    let float = t.is_float();
    match op {
        BinaryOp::Add => "a + b".into(),
        BinaryOp::Sub => "a - b".into(),
        BinaryOp::Mul => "a * b".into(),
        BinaryOp::Div if float => "a / b".into(),
        // Division by zero gives 0 and `MIN / -1` wraps to `MIN`, as the reference does;
        // neither reaches the hardware's division.
        BinaryOp::Div if t.is_signed() => {
            "select(select(a / select(b, C(1), b == C(0) || b == C(-1)), C(0) - a, b == C(-1)), C(0), b == C(0))".into()
        }
        BinaryOp::Div => "select(a / select(b, C(1), b == C(0)), C(0), b == C(0))".into(),
        BinaryOp::Min => "select(select(a, b, b < a), b, isnan_(a))".into(),
        BinaryOp::Max => "select(select(a, b, b > a), b, isnan_(a))".into(),
        BinaryOp::Pow => "pow32(a, b)".into(),
    }
}

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

/// `out0[i] = op(in0[i])`.
pub(crate) fn unary(op: UnaryOp, t: WgslType) -> String {
    let body = format!(
        "let x = get_in0(p.off_in0 + i); put_out0(p.off_out0 + i, {});",
        unary_body(op, t)
    );
    map_kernel(&prelude(t), t, t, &body)
}

/// `out0[i] = op(in0[i], rhs)`; `p.mode` 0: `in1[i]`, 1: row vector `in1[(base + i) %
/// cols]`, 2: column vector `in1[(base + i) / cols]`, 3: the scalar `p.x0`.
pub(crate) fn binary(op: BinaryOp, t: WgslType) -> String {
    let body = format!(
        "let a = get_in0(p.off_in0 + i);
        var b: C;
        switch p.mode {{
            case 0u: {{ b = get_in1(p.off_in1 + i); }}
            case 1u: {{ b = get_in1(p.off_in1 + (p.base + i) % p.cols); }}
            case 2u: {{ b = get_in1(p.off_in1 + (p.base + i) / p.cols); }}
            default: {{ b = p.x0; }}
        }}
        put_out0(p.off_out0 + i, {});",
        binary_body(op, t)
    );
    map_kernel(&prelude(t), t, t, &body)
}

/// `out0[i] = x0`.
pub(crate) fn fill(t: WgslType) -> String {
    map_kernel(&prelude(t), t, t, "put_out0(p.off_out0 + i, p.x0);")
}

/// `out0[i] = x0 * in0[i] + out0[i]`.
pub(crate) fn axpy(t: WgslType) -> String {
    map_kernel(
        &prelude(t),
        t,
        t,
        "put_out0(p.off_out0 + i, p.x0 * get_in0(p.off_in0 + i) + get_out0(p.off_out0 + i));",
    )
}

/// `out0[i] = clamp(in0[i], x0, x1)`, NaN kept.
pub(crate) fn clamp(t: WgslType) -> String {
    map_kernel(
        &prelude(t),
        t,
        t,
        "let x = get_in0(p.off_in0 + i); let lo = p.x0; let hi = p.x1;
        put_out0(p.off_out0 + i, select(select(x, hi, x > hi), lo, x < lo));",
    )
}
