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

/// Threads per block of softmax and cross-entropy (a power of two; the template's shared
/// arrays have this size).
pub const REDUCE_BLOCK: u32 = 256;

/// NVRTC options for the built-in modules: no fused multiply-add, so that `axpy` rounds its
/// product and its sum separately, exactly as the CPU backend does.
pub const BUILTIN_OPTIONS: &[&str] = &["--fmad=false"];

/// Entry points of the template that only floating-point modules have.
pub const FLOAT_KERNELS: &[&str] = &["softmax_rows", "cross_entropy_rows"];

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

    /// The C types: stored, computed in, and the unsigned type of the same width (integers).
    pub(crate) const fn c_types(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Elem::F32 => ("float", "float", ""),
            Elem::F64 => ("double", "double", ""),
            Elem::F16 | Elem::BF16 => ("unsigned short", "float", "unsigned short"),
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

/// The CUDA C source of `elem`'s built-in module: the prelude and the template. (The CUDA
/// backend appends the random fills and the indexing ops.)
pub fn builtin_source(elem: Elem) -> String {
    format!("{}\n{BUILTIN_TEMPLATE}\n", prelude(elem))
}

/// The 16-bit float results of reductions, from their f64 accumulator: through f32 rounded
/// to odd (the kernel language's `gk_odd_f64`, which [`prelude`] puts in front), so that
/// the second rounding gives the correctly rounded 16-bit value, as the CPU computes it
/// (gpukit_core's `Numeric::from_f64`).
const HALF_HELPERS: &str = r#"__device__ __forceinline__ unsigned short f16_from_double(double x) { return gk_f16_store(gk_odd_f64(x)); }
__device__ __forceinline__ unsigned short bf16_from_double(double x) { return gk_bf16_store(gk_odd_f64(x)); }
"#;

/// The type-specific definitions the template expects.
fn prelude(elem: Elem) -> String {
    let (t, c, u) = elem.c_types();
    let mut p = format!(
        "// Built-in ops for {name}.\n\
         #define REDUCE_BLOCK {REDUCE_BLOCK}\n\
         #define IS_FLOAT {float}\n\
         {ptx}{half}{odd}{HALF_HELPERS}\
         typedef {t} T;\n\
         typedef {c} C;\n",
        name = elem.name(),
        float = u8::from(elem.is_float()),
        ptx = gpukit_kernel::cuda::PTX_HELPERS,
        half = gpukit_kernel::cuda::HALF_HELPERS,
        odd = gpukit_kernel::cuda::ROUND_ODD,
    );
    let f = "__device__ __forceinline__";
    match elem {
        Elem::F32 | Elem::F64 => {
            let (nan, abs) = if elem == Elem::F32 {
                ("__int_as_float(0x7fc00000)", "fabsf")
            } else {
                ("__longlong_as_double(0x7ff8000000000000LL)", "fabs")
            };
            p += &format!(
                "typedef double ACC;\n\
                 {f} C load(T x) {{ return x; }}\n\
                 {f} T store(C x) {{ return x; }}\n\
                 {f} ACC to_acc(C x) {{ return (ACC)x; }}\n\
                 {f} T from_acc(ACC x) {{ return (T)x; }}\n\
                 {f} C op_abs(C a) {{ return {abs}(a); }}\n\
                 #define C_LOWEST ({nan})\n\
                 #define C_HIGHEST ({nan})\n"
            );
        }
        Elem::F16 | Elem::BF16 => {
            let h = if elem == Elem::F16 { "f16" } else { "bf16" };
            p += &format!(
                "typedef double ACC;\n\
                 {f} C load(T x) {{ return gk_{h}_load(x); }}\n\
                 {f} T store(C x) {{ return gk_{h}_store(x); }}\n\
                 {f} ACC to_acc(C x) {{ return (ACC)x; }}\n\
                 {f} T from_acc(ACC x) {{ return {h}_from_double(x); }}\n\
                 {f} C op_abs(C a) {{ return fabsf(a); }}\n\
                 #define C_LOWEST (__int_as_float(0x7fc00000))\n\
                 #define C_HIGHEST (__int_as_float(0x7fc00000))\n"
            );
        }
        _ => {
            // Integers: wrapping arithmetic through the unsigned type of the same width.
            let (lowest, highest) = if elem.is_signed_int() {
                (
                    format!("((C)(({u})1 << (sizeof(C) * 8 - 1)))"),
                    format!("((C)((({u})1 << (sizeof(C) * 8 - 1)) - 1))"),
                )
            } else {
                ("((C)0)".to_string(), format!("((C)~({u})0)"))
            };
            let div = if elem.is_signed_int() {
                format!("if (b == 0) return 0; if (b == (C)-1) return (C)(({u})0 - ({u})a); return a / b;")
            } else {
                "if (b == 0) return 0; return a / b;".to_string()
            };
            let (to_acc, abs) = if elem.is_signed_int() {
                (
                    "(ACC)(long long)x",
                    format!("return a < 0 ? (C)(({u})0 - ({u})a) : a;"),
                )
            } else {
                ("(ACC)x", "return a;".to_string())
            };
            p += &format!(
                "typedef unsigned long long ACC;\n\
                 {f} C load(T x) {{ return x; }}\n\
                 {f} T store(C x) {{ return x; }}\n\
                 {f} ACC to_acc(C x) {{ return {to_acc}; }}\n\
                 {f} T from_acc(ACC x) {{ return (T)({u})x; }}\n\
                 {f} C op_div(C a, C b) {{ {div} }}\n\
                 {f} C op_abs(C a) {{ {abs} }}\n\
                 #define C_LOWEST {lowest}\n\
                 #define C_HIGHEST {highest}\n"
            );
        }
    }
    if elem.is_float() {
        p += &format!(
            "{f} C op_add(C a, C b) {{ return a + b; }}\n\
             {f} C op_sub(C a, C b) {{ return a - b; }}\n\
             {f} C op_mul(C a, C b) {{ return a * b; }}\n\
             {f} C op_div(C a, C b) {{ return a / b; }}\n\
             {f} C op_neg(C a) {{ return -a; }}\n"
        );
    } else {
        p += &format!(
            "{f} C op_add(C a, C b) {{ return (C)(({u})a + ({u})b); }}\n\
             {f} C op_sub(C a, C b) {{ return (C)(({u})a - ({u})b); }}\n\
             {f} C op_mul(C a, C b) {{ return (C)(({u})a * ({u})b); }}\n\
             {f} C op_neg(C a) {{ return (C)(({u})0 - ({u})a); }}\n"
        );
    }
    // min and max as gpukit_core::Arith defines them (a NaN loses to a number, and of two
    // equal operands, 0.0 and -0.0 included, the first wins): the kernel language's.
    p += gpukit_kernel::cuda::MIN_MAX;
    p
}

/// The entry points of the template that `elem`'s module has.
pub fn kernel_names(elem: Elem) -> Vec<String> {
    if elem.is_float() {
        FLOAT_KERNELS.iter().map(|s| s.to_string()).collect()
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_is_in_the_template() {
        for elem in Elem::ALL {
            let src = builtin_source(elem);
            for name in kernel_names(elem) {
                let decl = format!("void {name}(");
                assert!(src.contains(&decl), "{name} is not defined for {elem:?}");
            }
        }
    }

    #[test]
    fn preludes_define_what_the_template_uses() {
        for elem in Elem::ALL {
            let src = builtin_source(elem);
            for needed in [
                "typedef",
                "load(",
                "store(",
                "op_div(",
                "op_neg(",
                "op_abs(",
                "gk_min(",
                "gk_max(",
                "C_LOWEST",
                "C_HIGHEST",
                "to_acc(",
            ] {
                assert!(src.contains(needed), "{elem:?} lacks {needed}");
            }
            assert_eq!(src.contains("#define IS_FLOAT 1"), elem.is_float());
        }
    }
}
