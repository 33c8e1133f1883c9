//! The op table in CUDA C: one body per element-wise op of gpukit-core's table, and the
//! complete source of an element type's built-in module.
//!
//! An element-wise op added to the table (`gpukit_core::optable`) needs nothing here: its
//! body is the table entry's reference body, traced into a kernel-language expression over
//! the compute type (`UnaryOp::body`) and rendered by the kernel language's CUDA C emitter
//! (operand `v_x`, or `v_a` and `v_b`), in the same order of operations as the reference, so
//! that ops without transcendental functions give the same bits as the CPU backend (the
//! module is compiled without fused multiply-add); its kernels and entry points follow from
//! the table ([`entries`]).

use crate::kernels::{builtin_source, Elem, COMMON_KERNELS, FLOAT_KERNELS};
use gpukit_core::{BinaryOp, UnaryOp};
use gpukit_kernel::cuda;

/// An entry point of a built-in module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A kernel of the template (`builtin.cu`).
    Named(&'static str),
    /// `u_<name>(in, out, n)`.
    Unary(UnaryOp),
    /// `b_<name>(in, rhs, out, n, cols, mode)`: mode 0 element-wise, 1 row vector, 2 column
    /// vector.
    Binary(BinaryOp),
    /// `s_<name>(in, s, out, n)`.
    Scalar(BinaryOp),
    /// `cast_<to>(in, out, n)`.
    Cast(Elem),
}

impl Entry {
    /// The entry point's name in the module.
    pub(crate) fn c_name(self) -> String {
        match self {
            Entry::Named(n) => n.to_string(),
            Entry::Unary(op) => format!("u_{}", op.name()),
            Entry::Binary(op) => format!("b_{}", op.name()),
            Entry::Scalar(op) => format!("s_{}", op.name()),
            Entry::Cast(to) => format!("cast_{}", to.name()),
        }
    }
}

/// Every entry point of `elem`'s module.
pub(crate) fn entries(elem: Elem) -> Vec<Entry> {
    let float = elem.is_float();
    let mut v: Vec<Entry> = COMMON_KERNELS.iter().map(|&n| Entry::Named(n)).collect();
    v.push(Entry::Named("random"));
    v.extend(crate::index::entries(elem).into_iter().map(Entry::Named));
    if float {
        v.extend(FLOAT_KERNELS.iter().map(|&n| Entry::Named(n)));
    }
    v.extend(Elem::ALL.iter().map(|&e| Entry::Cast(e)));
    v.extend(
        UnaryOp::ALL
            .iter()
            .filter(|op| float || !op.floats_only())
            .map(|&op| Entry::Unary(op)),
    );
    for &op in BinaryOp::ALL.iter().filter(|op| float || !op.floats_only()) {
        v.push(Entry::Binary(op));
        v.push(Entry::Scalar(op));
    }
    v
}

/// The complete CUDA C source of `elem`'s module: gpukit-cuda-sys's prelude, template and
/// casts, then a kernel per element-wise op of the table.
pub(crate) fn module_source(elem: Elem) -> String {
    let mut s = builtin_source(elem);
    s += &crate::random::random_source(elem);
    s += &crate::index::index_source(elem);
    s += "\n// The op table's element-wise ops (gpukit-cuda, source.rs).\n";
    let c = elem.compute_ty();
    s += &cuda::body_helpers(c);
    for e in entries(elem) {
        match e {
            Entry::Unary(op) => {
                s += &format!(
                    "extern \"C\" __global__ void {}(const T *in, T *out, unsigned long long n) {{\n    \
                     GRID_STRIDE(i, n) {{ C v_x = load(in[i]); out[i] = store({}); }}\n}}\n",
                    e.c_name(),
                    cuda::body(&op.body(c))
                );
            }
            Entry::Binary(op) => {
                s += &format!(
                    "extern \"C\" __global__ void {}(const T *in, const T *rhs, T *out, unsigned long long n,\n    \
                     unsigned long long cols, int mode) {{\n    \
                     GRID_STRIDE(i, n) {{\n        \
                     C v_a = load(in[i]);\n        \
                     C v_b = load(rhs[mode == 0 ? i : (mode == 1 ? i % cols : i / cols)]);\n        \
                     out[i] = store({});\n    }}\n}}\n",
                    e.c_name(),
                    cuda::body(&op.body(c))
                );
            }
            Entry::Scalar(op) => {
                s += &format!(
                    "extern \"C\" __global__ void {}(const T *in, T s, T *out, unsigned long long n) {{\n    \
                     C v_b = load(s);\n    \
                     GRID_STRIDE(i, n) {{ C v_a = load(in[i]); out[i] = store({}); }}\n}}\n",
                    e.c_name(),
                    cuda::body(&op.body(c))
                );
            }
            Entry::Named(_) | Entry::Cast(_) => {}
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::BUILTIN_OPTIONS;
    use gpukit_cuda_sys::nvrtc::{nvrtc, Target};

    #[test]
    fn every_entry_point_is_defined_once_in_its_module() {
        for elem in Elem::ALL {
            let src = module_source(elem);
            for e in entries(elem) {
                let decl = format!("void {}(", e.c_name());
                assert_eq!(src.matches(&decl).count(), 1, "{elem:?}: {decl}");
            }
            // Integer modules have no float-only op.
            assert_eq!(src.contains("void u_sqrt("), elem.is_float(), "{elem:?}");
        }
    }

    /// Every module compiles with NVRTC, where libnvrtc can be found (a GPU is not needed):
    /// its PTX has every entry point the backend looks up, and it compiles to a cubin for a
    /// Hopper GPU (sm_90, the lent H100s and H200s) where this NVRTC knows the architecture.
    #[test]
    fn every_module_compiles_with_nvrtc() {
        let lib = match nvrtc(None) {
            Ok(lib) => lib,
            Err(e) => {
                use std::io::Write;
                let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {e}");
                return;
            }
        };
        for elem in Elem::ALL {
            let src = module_source(elem);
            let out = lib
                .compile(&src, elem.name(), Target::Ptx(8, 0), BUILTIN_OPTIONS)
                .unwrap_or_else(|e| panic!("{elem:?}: {e}"));
            let ptx = String::from_utf8_lossy(&out.image);
            for e in entries(elem) {
                let entry = format!(".entry {}(", e.c_name());
                assert!(ptx.contains(&entry), "{elem:?} lacks {entry}");
            }
            if lib.archs.contains(&90) {
                let cubin = lib
                    .compile(&src, elem.name(), Target::Sass(9, 0), BUILTIN_OPTIONS)
                    .unwrap_or_else(|e| panic!("{elem:?} for sm_90: {e}"));
                // The CUDA emulator's NVRTC (`cargo xtask cuda-emu`) gives its own module
                // images, which name their entry points as PTX does.
                let emulated = cubin.image.starts_with(b"GKEMU-MODULE");
                assert!(
                    cubin.image.starts_with(b"\x7fELF") || emulated,
                    "{elem:?}: a cubin is an ELF file, not {:?}",
                    &cubin.image[..cubin.image.len().min(4)]
                );
            }
        }
    }
}
