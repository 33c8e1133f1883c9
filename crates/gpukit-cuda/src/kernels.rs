//! The CUDA C sources of the built-in ops, one module per element type.
//!
//! The kernels themselves are in `kernels/builtin.cu`, written once over an abstract element
//! type; [`builtin_source`] puts in front of it the prelude that fixes the type: how it is
//! stored and what arithmetic runs in. The CUDA backend compiles each
//! element type's module through NVRTC with [`BUILTIN_OPTIONS`] the first time an op on that
//! type runs. The prelude needs no header (f16 and bf16 convert with PTX `cvt` and bit
//! arithmetic), so NVRTC compiles it without a toolkit's include folder.

/// The kernel template.
pub const BUILTIN_TEMPLATE: &str = include_str!("../kernels/builtin.cu");

/// NVRTC options for the built-in modules: no fused multiply-add, so that `axpy` rounds its
/// product and its sum separately, exactly as the CPU backend does.
pub const BUILTIN_OPTIONS: &[&str] = &["--fmad=false"];

/// The element types the built-in kernels are generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    /// `float`
    F32,
    /// `double`
    F64,
    /// IEEE half, stored as `unsigned short`, computed in `float`.
    F16,
    /// bfloat16, stored as `unsigned short`, computed in `float`.
    BF16,
    /// `signed char`
    I8,
    /// `unsigned char`
    U8,
    /// `int`
    I32,
    /// `unsigned int`
    U32,
    /// `long long`
    I64,
    /// `unsigned long long`
    U64,
}

impl Elem {
    /// Every element type.
    pub const ALL: [Elem; 10] = [
        Elem::F32,
        Elem::F64,
        Elem::F16,
        Elem::BF16,
        Elem::I8,
        Elem::U8,
        Elem::I32,
        Elem::U32,
        Elem::I64,
        Elem::U64,
    ];

    /// Short name (`f32`, `bf16`, ...), used in module names.
    pub const fn name(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::I8 => "i8",
            Elem::U8 => "u8",
            Elem::I32 => "i32",
            Elem::U32 => "u32",
            Elem::I64 => "i64",
            Elem::U64 => "u64",
        }
    }

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F16 | Elem::BF16 => 2,
            Elem::I8 | Elem::U8 => 1,
        }
    }

    /// Whether this is a floating-point type (has the unary math ops).
    pub const fn is_float(self) -> bool {
        matches!(self, Elem::F32 | Elem::F64 | Elem::F16 | Elem::BF16)
    }

    /// The C types: stored and computed in.
    pub(crate) const fn c_types(self) -> (&'static str, &'static str) {
        match self {
            Elem::F32 => ("float", "float"),
            Elem::F64 => ("double", "double"),
            Elem::F16 | Elem::BF16 => ("unsigned short", "float"),
            Elem::I8 => ("signed char", "signed char"),
            Elem::U8 => ("unsigned char", "unsigned char"),
            Elem::I32 => ("int", "int"),
            Elem::U32 => ("unsigned int", "unsigned int"),
            Elem::I64 => ("long long", "long long"),
            Elem::U64 => ("unsigned long long", "unsigned long long"),
        }
    }
}

/// The CUDA C source of `elem`'s built-in module: the prelude and the template. (The CUDA
/// backend appends the indexing ops.)
pub fn builtin_source(elem: Elem) -> String {
    format!("{}\n{BUILTIN_TEMPLATE}\n", prelude(elem))
}

/// The type-specific definitions the indexing ops expect: `T`, `C`, `load` and `store`.
fn prelude(elem: Elem) -> String {
    let (t, c) = elem.c_types();
    let mut p = format!(
        "// Built-in ops for {name}.\n\
         {ptx}{half}\
         typedef {t} T;\n\
         typedef {c} C;\n",
        name = elem.name(),
        ptx = gpukit_kernel::cuda::PTX_HELPERS,
        half = gpukit_kernel::cuda::HALF_HELPERS,
    );
    let f = "__device__ __forceinline__";
    let (load, store) = match elem {
        Elem::F16 => ("gk_f16_load(x)", "gk_f16_store(x)"),
        Elem::BF16 => ("gk_bf16_load(x)", "gk_bf16_store(x)"),
        _ => ("x", "x"),
    };
    p += &format!(
        "{f} C load(T x) {{ return {load}; }}\n\
         {f} T store(C x) {{ return {store}; }}\n"
    );
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preludes_define_what_the_indexing_ops_use() {
        for elem in Elem::ALL {
            let src = builtin_source(elem);
            for needed in [" T;\n", " C;\n", "load(", "store("] {
                assert!(src.contains(needed), "{elem:?} lacks {needed}");
            }
        }
    }
}
