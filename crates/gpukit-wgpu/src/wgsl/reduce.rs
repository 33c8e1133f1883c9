//! Reductions in WGSL: sum, mean, min, max, argmin, argmax and dot, per row, in one pass or
//! in parts and a second pass over them, folding (value, index) parts under one order.

use gpukit_core::ReduceOp;

use super::{binding, prelude, WgslType};

/// What a reduction kernel reads (see [`reduce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReduceKind {
    /// A reduction of the table.
    Op(ReduceOp),
    /// The dot product of `in0` and `in1`.
    Dot,
}

/// A partial result: the accumulated value (type `A`), the index of the best element, and
/// whether it is empty; and the (value, index) order of min, max and the arg reductions:
/// NaN ranked last, ties to the smaller index.
const PART: &str = "
struct Part { v: A, i: u32, e: u32 }
fn empty() -> Part { return Part(A(0), 0u, 1u); }
fn better(b: Part, a: Part, want_max: bool) -> bool {
    let bn = isnan_(C(b.v));
    let an = isnan_(C(a.v));
    if (bn != an) { return an; }
    if (bn || b.v == a.v) { return b.i < a.i; }
    return select((b.v < a.v), (b.v > a.v), want_max);
}
";

/// Bytes of one `Part` with accumulation type `a`.
pub(crate) fn part_bytes(a: &str) -> u64 {
    match a {
        "f64" | "i64" | "u64" => 16,
        _ => 12,
    }
}

/// Whether a reduction accumulates (sum, mean, dot) rather than selects.
fn accumulates(kind: ReduceKind) -> bool {
    matches!(
        kind,
        ReduceKind::Dot | ReduceKind::Op(ReduceOp::Sum) | ReduceKind::Op(ReduceOp::Mean)
    )
}

/// The accumulation type of a reduction: f64 for float sums where the device has it (the
/// reference accumulates in f64; shaders may reassociate, so compensated f32 sums are not
/// an option), else the compute type.
pub(crate) fn acc_type(kind: ReduceKind, t: WgslType, f64_ok: bool) -> &'static str {
    if accumulates(kind) && t.is_float() && f64_ok {
        "f64"
    } else {
        t.compute()
    }
}

/// The combine function and the element-to-part conversion of a reduction.
fn reduce_parts(kind: ReduceKind) -> (String, String) {
    let sum = "fn combine(a: Part, b: Part) -> Part {
    if (a.e == 1u) { return b; }
    if (b.e == 1u) { return a; }
    return Part(a.v + b.v, 0u, 0u);
}"
    .to_string();
    let best = |max: bool| {
        format!(
            "fn combine(a: Part, b: Part) -> Part {{
    if (a.e == 1u) {{ return b; }}
    if (b.e == 1u) {{ return a; }}
    if (better(b, a, {max})) {{ return b; }}
    return a;
}}"
        )
    };
    let one = "return Part(A(get_in0(idx)), j, 0u);".to_string();
    match kind {
        ReduceKind::Op(ReduceOp::Sum) | ReduceKind::Op(ReduceOp::Mean) => (sum, one),
        ReduceKind::Dot => (
            sum,
            "return Part(A(get_in0(idx)) * A(get_in1(p.off_in1 + idx - p.off_in0)), j, 0u);"
                .to_string(),
        ),
        ReduceKind::Op(ReduceOp::Max) | ReduceKind::Op(ReduceOp::ArgMax) => (best(true), one),
        ReduceKind::Op(ReduceOp::Min) | ReduceKind::Op(ReduceOp::ArgMin) => (best(false), one),
    }
}

/// A reduction pass over `p.rows` rows of `p.cols` items, each row split into `p.k` parts
/// (workgroup `x`), rows strided over workgroup `y`. `stage2` reads parts from `parts`
/// instead of elements from `in0`. With `p.flags & 1` the pass writes results to `out0`
/// (elements, or `u32` indices for the arg reductions; a mean divides by `p.n`), else parts.
pub(crate) fn reduce(kind: ReduceKind, t: WgslType, stage2: bool, f64_ok: bool) -> String {
    let (combine, elem) = reduce_parts(kind);
    let index = matches!(
        kind,
        ReduceKind::Op(ReduceOp::ArgMax) | ReduceKind::Op(ReduceOp::ArgMin)
    );
    let out_t = if index { WgslType::U32 } else { t };
    let load = if stage2 {
        "return parts[r * p.cols + j];".to_string()
    } else {
        format!("let idx = p.off_in0 + r * p.cols + j;\n    {elem}")
    };
    let write = match kind {
        _ if index => "put_out0(p.off_out0 + r, best.i);".to_string(),
        ReduceKind::Op(ReduceOp::Mean) => {
            "put_out0(p.off_out0 + r, C(best.v / A(p.n)));".to_string()
        }
        _ => "put_out0(p.off_out0 + r, C(best.v));".to_string(),
    };
    let split = format!("alias A = {};\n", acc_type(kind, t, f64_ok));
    format!(
        "{pre}{split}{PART}{combine}
{b0}{b1}{b2}@group(0) @binding(3) var<storage, read_write> parts: array<Part>;
var<workgroup> sh: array<Part, 256>;
fn item(r: u32, j: u32) -> Part {{
    {load}
}}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let t = lid.x;
    let chunk = (p.cols + p.k - 1u) / p.k;
    let start = wid.x * chunk;
    let end = min(start + chunk, p.cols);
    for (var r = wid.y; r < p.rows; r += nwg.y) {{
        var acc = empty();
        for (var j = start + t; j < end; j += 256u) {{
            acc = combine(acc, item(r, j));
        }}
        sh[t] = acc;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {{
            if (t < s) {{ sh[t] = combine(sh[t], sh[t + s]); }}
            workgroupBarrier();
        }}
        if (t == 0u) {{
            let best = sh[0];
            if ((p.flags & 1u) == 1u) {{
                {write}
            }} else {{
                parts[r * p.k + wid.x] = best;
            }}
        }}
        workgroupBarrier();
    }}
}}
",
        pre = prelude(t),
        b0 = binding(0, "in0", t),
        b1 = binding(1, "in1", t),
        b2 = binding(2, "out0", out_t),
    )
}
