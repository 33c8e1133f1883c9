//! The op table in WGSL: one body per element-wise op of gpukit-core's table
//! ([`unary_body`], [`binary_body`]), and the element-wise kernels (fill, axpy, the table's
//! unary and binary ops, clamp) as grid-stride loops over windows of their operands.
//!
//! An element-wise op added to the table (`gpukit_core::optable`) needs nothing here: its
//! body is the entry's reference body, traced into an expression
//! ([`gpukit_core::optable::OpExpr`]) and rendered as WGSL over the compute type `C`
//! (operand `x`, or `a` and `b`) in the same order of operations as the reference. Whether
//! the op exists on a type comes from its table entry (its `math` column), not from here.

use gpukit_core::optable::{Fn1, Fn2, OpExpr};
use gpukit_core::{BinaryOp, UnaryOp};

use super::{binding, prelude, WgslType};

/// The WGSL body of a unary op over `x: C`: its table entry's expression, rendered.
pub(crate) fn unary_body(op: UnaryOp, t: WgslType) -> String {
    render(&op.expr(), t)
}

/// The WGSL body of a binary op over `a: C` and `b: C`: its table entry's expression,
/// rendered.
pub(crate) fn binary_body(op: BinaryOp, t: WgslType) -> String {
    render(&op.expr(), t)
}

/// An op's expression as WGSL over the compute type `C` of `t`, in the expression's order
/// of operations. Integers wrap in WGSL as in the reference; the rest of the reference's
/// rules are spelled out: division by zero gives 0 and `MIN / -1` wraps without reaching the
/// hardware's division, `min`/`max` let a NaN lose, and `log1p`, `tanh` and `pow` are the
/// prelude's f32 versions (the shader's have neither the accuracy nor C's special cases).
fn render(e: &OpExpr, t: WgslType) -> String {
    let float = t.is_float();
    match e {
        OpExpr::Operand(name) => (*name).to_owned(),
        OpExpr::Const(v) if float => format!("C({v:?})"),
        OpExpr::Const(v) => format!("C({})", *v as i64),
        OpExpr::Call1(f, a) => {
            let a = render(a, t);
            match f {
                Fn1::Neg if float => format!("(-{a})"),
                Fn1::Neg => format!("(C(0) - {a})"),
                Fn1::Abs if float => format!("abs({a})"),
                Fn1::Abs if t.is_signed() => format!("select({a}, C(0) - {a}, {a} < C(0))"),
                Fn1::Abs => a,
                Fn1::Sqrt => format!("sqrt({a})"),
                Fn1::Exp => format!("exp({a})"),
                Fn1::Ln => format!("log({a})"),
                Fn1::Ln1p => format!("log1p32({a})"),
                Fn1::Tanh => format!("tanh32({a})"),
            }
        }
        OpExpr::Call2(f, a, b) => {
            let (a, b) = (render(a, t), render(b, t));
            match f {
                Fn2::Add => format!("({a} + {b})"),
                Fn2::Sub => format!("({a} - {b})"),
                Fn2::Mul => format!("({a} * {b})"),
                Fn2::Div if float => format!("({a} / {b})"),
                Fn2::Div if t.is_signed() => format!(
                    "select(select({a} / select({b}, C(1), {b} == C(0) || {b} == C(-1)), C(0) - {a}, {b} == C(-1)), C(0), {b} == C(0))"
                ),
                Fn2::Div => format!("select({a} / select({b}, C(1), {b} == C(0)), C(0), {b} == C(0))"),
                Fn2::Min => format!("select(select({a}, {b}, {b} < {a}), {b}, isnan_({a}))"),
                Fn2::Max => format!("select(select({a}, {b}, {b} > {a}), {b}, isnan_({a}))"),
                Fn2::Powf => format!("pow32({a}, {b})"),
            }
        }
        OpExpr::IfGt {
            lhs,
            rhs,
            then,
            otherwise,
        } => format!(
            "select({}, {}, {} > {})",
            render(otherwise, t),
            render(then, t),
            render(lhs, t),
            render(rhs, t)
        ),
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
