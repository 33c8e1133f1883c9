//! The ops that reduce columns and index, in WGSL: each gpukit-core's
//! reference (`optable::index`, `optable::reduce_cols`) in the same order of operations.
//! A bad index claims the context's fault record (binding 3 of the indexing kernels) as a
//! checked kernel does; `p.flags` carries the op's tag.

use super::{binding, prelude, WgslType};

/// The bindings and fault helper of an indexing kernel: `src` (binding 0, `t`), `idx`
/// (binding 1, `u32`), `out` (binding 2, `t`, plain `atomic<u32>` words for `atomic`
/// scatter kernels) and the fault record (binding 3).
fn indexed_prelude(t: WgslType, atomic: bool) -> String {
    let out = if atomic {
        "@group(0) @binding(2) var<storage, read_write> out: array<atomic<u32>>;\n".to_string()
    } else {
        binding(2, "out", t)
    };
    format!(
        "{}{}{}{out}@group(0) @binding(3) var<storage, read_write> rec: array<atomic<u32>>;
fn op_fault(index: u32, len: u32) {{
    loop {{
        let r = atomicCompareExchangeWeak(&rec[0], 0u, 1u);
        if (r.exchanged) {{
            atomicStore(&rec[1], p.flags);
            atomicStore(&rec[2], 0u);
            atomicStore(&rec[3], index);
            atomicStore(&rec[4], 0u);
            atomicStore(&rec[5], len);
            atomicStore(&rec[6], 0u);
            return;
        }}
        if (r.old_value != 0u) {{ return; }}
    }}
}}
",
        prelude(t),
        binding(0, "src", t),
        binding(1, "idx", WgslType::U32),
    )
}

/// A grid-stride loop over `count` items running `body` for item `e`.
fn grid(pre: &str, count: &str, body: &str) -> String {
    format!(
        "{pre}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let stride = nwg.x * 256u;
    let count = {count};
    var e = gid.x;
    loop {{
        if (e >= count) {{ break; }}
        {body}
        if (count - e <= stride) {{ break; }}
        e += stride;
    }}
}}
"
    )
}

/// Rows of `src` (`p.rows x p.cols`) by `p.n` indices: gather (`scatter` false) or
/// scatter-add into `out` (`p.rows x p.cols`, `src` then `p.n x p.cols`).
pub(crate) fn rows_by_index(t: WgslType, scatter: bool) -> String {
    let body = if scatter {
        let add = match t {
            WgslType::F32 => "var old = atomicLoad(&out[o]);
            loop {
                let r = atomicCompareExchangeWeak(&out[o], old, bitcast<u32>(bitcast<f32>(old) + v));
                if (r.exchanged) { break; }
                old = r.old_value;
            }",
            WgslType::I32 => "atomicAdd(&out[o], bitcast<u32>(v));",
            _ => "atomicAdd(&out[o], v);",
        };
        format!(
            "let r = e / p.cols;
        let j = e % p.cols;
        let i = idx[p.off_in1 + r];
        if (i < p.rows) {{
            let o = p.off_out0 + i * p.cols + j;
            let v = get_src(p.off_in0 + e);
            {add}
        }} else if (j == 0u) {{
            op_fault(i, p.rows);
        }}"
        )
    } else {
        "let r = e / p.cols;
        let j = e % p.cols;
        let i = idx[p.off_in1 + r];
        if (i < p.rows) {
            put_out(p.off_out0 + e, get_src(p.off_in0 + i * p.cols + j));
        } else {
            put_out(p.off_out0 + e, C(0));
            if (j == 0u) { op_fault(i, p.rows); }
        }"
        .to_string()
    };
    grid(&indexed_prelude(t, scatter), "p.n * p.cols", &body)
}

/// One-hot rows: `out` is `p.rows x p.cols`, `idx` has `p.rows` indices.
pub(crate) fn one_hot(t: WgslType) -> String {
    grid(
        &indexed_prelude(t, false),
        "p.rows * p.cols",
        "let r = e / p.cols;
        let j = e % p.cols;
        let i = idx[p.off_in1 + r];
        put_out(p.off_out0 + e, select(C(0), C(1), i == j));
        if (i >= p.cols && j == 0u) { op_fault(i, p.cols); }",
    )
}

/// Reports the first of `p.n` indices that is `p.rows` or more (`u32` bounds: a larger
/// bound passes every index).
pub(crate) fn check_indices() -> String {
    grid(
        &indexed_prelude(WgslType::U32, false),
        "p.n",
        "let i = idx[p.off_in1 + e];
        if (i >= p.rows) { op_fault(i, p.rows); }",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::naga;

    fn validates(name: &str, src: &str) {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
    }

    /// Every kernel of every element type parses and validates with naga.
    #[test]
    fn every_kernel_validates() {
        let all = [
            WgslType::F32,
            WgslType::F64,
            WgslType::F16,
            WgslType::BF16,
            WgslType::I32,
            WgslType::U32,
            WgslType::I64,
            WgslType::U64,
            WgslType::U8,
            WgslType::I8,
        ];
        validates("check_indices", &check_indices());
        for t in all {
            validates(&format!("gather {t:?}"), &rows_by_index(t, false));
            validates(&format!("one_hot {t:?}"), &one_hot(t));
            if matches!(t, WgslType::F32 | WgslType::I32 | WgslType::U32) {
                validates(&format!("scatter {t:?}"), &rows_by_index(t, true));
            }
        }
    }
}
