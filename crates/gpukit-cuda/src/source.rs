//! The complete source of an element type's built-in module and its entry points. (The op
//! table's element-wise ops are gpukit-core's kernels, not this module's.)

use crate::kernels::{builtin_source, Elem};

/// An entry point of a built-in module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A kernel of the template (`builtin.cu`).
    Named(&'static str),
}

impl Entry {
    /// The entry point's name in the module.
    pub(crate) fn c_name(self) -> String {
        match self {
            Entry::Named(n) => n.to_string(),
        }
    }
}

/// Every entry point of `elem`'s module.
pub(crate) fn entries(elem: Elem) -> Vec<Entry> {
    crate::index::entries(elem)
        .into_iter()
        .map(Entry::Named)
        .collect()
}

/// The complete CUDA C source of `elem`'s module: the prelude and template, and the
/// indexing ops.
pub(crate) fn module_source(elem: Elem) -> String {
    let mut s = builtin_source(elem);
    s += &crate::index::index_source(elem);
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
