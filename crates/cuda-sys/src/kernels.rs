//! The CUDA C sources of the built-in ops, one module per element type.
//!
//! The kernels themselves are in `kernels/builtin.cu`, written once over an abstract element
//! type; [`builtin_source`] puts in front of it the prelude that fixes the type: how it is
//! stored, what arithmetic runs in, how sums accumulate. The CUDA backend compiles each
//! element type's module through NVRTC with [`BUILTIN_OPTIONS`] the first time an op on that
//! type runs. The prelude needs no header (f16 and bf16 convert with PTX `cvt` and bit
//! arithmetic), so NVRTC compiles it without a toolkit's include folder.

/// The kernel template.
pub const BUILTIN_TEMPLATE: &str = include_str!("../kernels/builtin.cu");

/// Threads per block of the reduction kernels (a power of two; the template's shared
/// arrays have this size).
pub const REDUCE_BLOCK: u32 = 256;

/// The most blocks a reduction's first launch uses, so its partials fit a fixed scratch
/// buffer of `MAX_PARTIALS * 8` bytes per stream.
pub const MAX_PARTIALS: u32 = 1024;

/// NVRTC options for the built-in modules: no fused multiply-add, so that `axpy` rounds its
/// product and its sum separately, exactly as the CPU backend does.
pub const BUILTIN_OPTIONS: &[&str] = &["--fmad=false"];

/// Entry points of every built-in module.
pub const COMMON_KERNELS: &[&str] = &[
    "fill",
    "axpy",
    "scale",
    "add_op",
    "sub_op",
    "mul_op",
    "div_op",
    "sum_partial",
    "dot_partial",
    "sum_final",
    "max_partial",
    "max_final",
];

/// Entry points only floating-point modules have.
pub const FLOAT_KERNELS: &[&str] = &["relu", "sigmoid", "tanh_op", "exp_op"];

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

    /// Whether this is a floating-point type (has the unary math ops).
    pub const fn is_float(self) -> bool {
        matches!(self, Elem::F32 | Elem::F64 | Elem::F16 | Elem::BF16)
    }

    /// The C types: stored, computed in, and the unsigned type of the same width (integers).
    const fn c_types(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Elem::F32 => ("float", "float", ""),
            Elem::F64 => ("double", "double", ""),
            Elem::F16 | Elem::BF16 => ("unsigned short", "float", ""),
            Elem::I8 => ("signed char", "signed char", "unsigned char"),
            Elem::U8 => ("unsigned char", "unsigned char", "unsigned char"),
            Elem::I32 => ("int", "int", "unsigned int"),
            Elem::U32 => ("unsigned int", "unsigned int", "unsigned int"),
            Elem::I64 => ("long long", "long long", "unsigned long long"),
            Elem::U64 => (
                "unsigned long long",
                "unsigned long long",
                "unsigned long long",
            ),
        }
    }

    const fn is_signed_int(self) -> bool {
        matches!(self, Elem::I8 | Elem::I32 | Elem::I64)
    }
}

/// The complete CUDA C source of `elem`'s built-in module.
pub fn builtin_source(elem: Elem) -> String {
    format!("{}\n{BUILTIN_TEMPLATE}", prelude(elem))
}

/// The type-specific definitions the template expects.
fn prelude(elem: Elem) -> String {
    let (t, c, u) = elem.c_types();
    let mut p = format!(
        "// Built-in ops for {name}.\n\
         #define REDUCE_BLOCK {REDUCE_BLOCK}\n\
         #define IS_FLOAT {float}\n\
         typedef {t} T;\n\
         typedef {c} C;\n",
        name = elem.name(),
        float = u8::from(elem.is_float()),
    );
    let f = "__device__ __forceinline__";
    match elem {
        Elem::F32 | Elem::F64 => {
            let max = if elem == Elem::F32 { "fmaxf" } else { "fmax" };
            let nan = if elem == Elem::F32 {
                "__int_as_float(0x7fc00000)"
            } else {
                "__longlong_as_double(0x7ff8000000000000LL)"
            };
            p += &format!(
                "typedef double ACC;\n\
                 {f} C load(T x) {{ return x; }}\n\
                 {f} T store(C x) {{ return x; }}\n\
                 {f} ACC to_acc(C x) {{ return (ACC)x; }}\n\
                 {f} T from_acc(ACC x) {{ return (T)x; }}\n\
                 {f} C cmax(C a, C b) {{ return {max}(a, b); }}\n\
                 #define C_LOWEST ({nan})\n"
            );
        }
        Elem::F16 | Elem::BF16 => {
            let (load, store) = if elem == Elem::F16 {
                (
                    "float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); return f;",
                    "unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x)); return h;",
                )
            } else {
                (
                    "return __uint_as_float(((unsigned int)x) << 16);",
                    // Round to nearest even; a NaN stays a NaN (quiet bit set), as in `half`.
                    "unsigned int u = __float_as_uint(x); \
                     if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); \
                     u += 0x7fffu + ((u >> 16) & 1u); return (unsigned short)(u >> 16);",
                )
            };
            // f64 -> f32 rounds to odd (toward zero, then the last bit set when inexact), so
            // that the second rounding, f32 -> 16 bits, gives the correctly rounded result of
            // f64 -> 16 bits, as the CPU computes it.
            let from_acc = "float f = __double2float_rz(x); \
                 if ((double)f != x) f = __uint_as_float(__float_as_uint(f) | 1u); return store(f);";
            p += &format!(
                "typedef double ACC;\n\
                 {f} C load(T x) {{ {load} }}\n\
                 {f} T store(C x) {{ {store} }}\n\
                 {f} ACC to_acc(C x) {{ return (ACC)x; }}\n\
                 {f} T from_acc(ACC x) {{ {from_acc} }}\n\
                 {f} C cmax(C a, C b) {{ return fmaxf(a, b); }}\n\
                 #define C_LOWEST (__int_as_float(0x7fc00000))\n"
            );
        }
        _ => {
            // Integers: wrapping arithmetic through the unsigned type of the same width.
            let lowest = if elem.is_signed_int() {
                format!("((C)(({u})1 << (sizeof(C) * 8 - 1)))")
            } else {
                "((C)0)".to_string()
            };
            let div = if elem.is_signed_int() {
                format!("if (b == 0) return 0; if (b == (C)-1) return (C)(({u})0 - ({u})a); return a / b;")
            } else {
                "if (b == 0) return 0; return a / b;".to_string()
            };
            let to_acc = if elem.is_signed_int() {
                "(ACC)(long long)x"
            } else {
                "(ACC)x"
            };
            p += &format!(
                "typedef unsigned long long ACC;\n\
                 {f} C load(T x) {{ return x; }}\n\
                 {f} T store(C x) {{ return x; }}\n\
                 {f} ACC to_acc(C x) {{ return {to_acc}; }}\n\
                 {f} T from_acc(ACC x) {{ return (T)({u})x; }}\n\
                 {f} C cmax(C a, C b) {{ return a > b ? a : b; }}\n\
                 {f} C op_div(C a, C b) {{ {div} }}\n\
                 #define C_LOWEST {lowest}\n"
            );
        }
    }
    if elem.is_float() {
        p += &format!(
            "{f} C op_add(C a, C b) {{ return a + b; }}\n\
             {f} C op_sub(C a, C b) {{ return a - b; }}\n\
             {f} C op_mul(C a, C b) {{ return a * b; }}\n\
             {f} C op_div(C a, C b) {{ return a / b; }}\n"
        );
    } else {
        p += &format!(
            "{f} C op_add(C a, C b) {{ return (C)(({u})a + ({u})b); }}\n\
             {f} C op_sub(C a, C b) {{ return (C)(({u})a - ({u})b); }}\n\
             {f} C op_mul(C a, C b) {{ return (C)(({u})a * ({u})b); }}\n"
        );
    }
    p
}

/// The entry points `elem`'s module has.
pub fn kernel_names(elem: Elem) -> Vec<&'static str> {
    let mut names = COMMON_KERNELS.to_vec();
    if elem.is_float() {
        names.extend_from_slice(FLOAT_KERNELS);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_is_in_the_template() {
        for name in COMMON_KERNELS.iter().chain(FLOAT_KERNELS) {
            let decl = format!("void {name}(");
            let by_macro = format!("({name}, ");
            assert!(
                BUILTIN_TEMPLATE.contains(&decl) || BUILTIN_TEMPLATE.contains(&by_macro),
                "{name} is not defined in builtin.cu"
            );
        }
    }

    #[test]
    fn preludes_define_what_the_template_uses() {
        for elem in Elem::ALL {
            let src = builtin_source(elem);
            for needed in [
                "typedef", "load(", "store(", "op_div(", "cmax(", "C_LOWEST", "to_acc(",
            ] {
                assert!(src.contains(needed), "{elem:?} lacks {needed}");
            }
            assert_eq!(src.contains("#define IS_FLOAT 1"), elem.is_float());
        }
    }
}
