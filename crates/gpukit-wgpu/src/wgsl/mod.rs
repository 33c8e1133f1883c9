//! The built-in kernels in WGSL, generated per op and element type: what every kernel
//! shares here (the immediate block, helpers, the element-type prelude and the typed
//! bindings), and one module per op family.
//!
//! Every kernel shares one immediate block (`struct P`, [`field`]): element offsets into the
//! bound windows, lengths, and two scalars of the compute type. The element-wise table's
//! bodies are traced from its entries and rendered by the kernel language's WGSL emitter in
//! [`elementwise`] ([`unary`], [`binary`]).

mod copy;
mod gemm;
mod types;

pub(crate) use copy::copy_bytes;

pub(crate) use gemm::gemm;
pub(crate) use types::{Caps, WgslType};

/// The immediate block every kernel declares: 16 `u32`s (64 bytes), then two scalars of the
/// compute type `C` (`x0`, `x1`); 80 bytes at most.
pub(crate) const IMMEDIATE_BYTES: u32 = 80;

pub(super) fn immediate_block(c: &str) -> String {
    format!(
        "struct P {{
    n: u32, cols: u32, unused2: u32, off_in0: u32,
    off_in1: u32, off_out0: u32, unused6: u32, unused7: u32,
    unused8: u32, k: u32, batch: u32, stride_a: u32,
    stride_b: u32, stride_c: u32, flags: u32, rows: u32,
    x0: {c}, x1: {c},
}}
var<immediate> p: P;
"
    )
}

/// Field indices of the immediate block, in `u32` words (the fields of `P`, in order).
pub(crate) mod field {
    /// Elements to process.
    pub(crate) const N: usize = 0;
    /// Elements per row.
    pub(crate) const COLS: usize = 1;
    /// Element offsets of the operands in their bindings: inputs 0 and 1, output 0 (words
    /// 2, 6, 7 and 8 are unused).
    pub(crate) const OFF_IN0: usize = 3;
    pub(crate) const OFF_IN1: usize = 4;
    pub(crate) const OFF_OUT0: usize = 5;
    /// Gemm's inner dimension and batch.
    pub(crate) const K: usize = 9;
    pub(crate) const BATCH: usize = 10;
    /// Gemm's batch strides of A, B and C, in elements.
    pub(crate) const STRIDE_A: usize = 11;
    pub(crate) const STRIDE_B: usize = 12;
    pub(crate) const STRIDE_C: usize = 13;
    /// Bit flags or a small parameter (gemm's transposes, an op's fault tag, an integer fill's range).
    pub(crate) const FLAGS: usize = 14;
    /// Rows of the matrix.
    pub(crate) const ROWS: usize = 15;
    /// The first word of the scalars `x0`, `x1`.
    pub(crate) const SCALARS: usize = 16;
    /// Words in the block.
    pub(crate) const WORDS: usize = 20;
}

/// Sets scalar `which` (0: `x0`, 1: `x1`) from its bits in the compute type.
pub(crate) fn set_scalar(imm: &mut [u32; field::WORDS], t: WgslType, which: usize, bits: u64) {
    if t.wide() {
        imm[field::SCALARS + 2 * which] = bits as u32;
        imm[field::SCALARS + 2 * which + 1] = (bits >> 32) as u32;
    } else {
        imm[field::SCALARS + which] = bits as u32;
    }
}

/// Helpers every kernel may use: the kernel language's math in WGSL (NaN tests, `log1p`,
/// `tanh`, C's `pow`, min and max) and the bf16 rounding.
pub(super) const HELPERS: &str = gpukit_kernel::wgsl::MATH;

/// The element-type prelude: `C` (the compute type), `isnan_`, the helpers and the
/// immediate block. Bindings come from [`binding`].
pub(crate) fn prelude(t: WgslType) -> String {
    let c = t.compute();
    let isnan = match t {
        WgslType::F32 | WgslType::F16 | WgslType::BF16 => "gk_nan32(x)",
        WgslType::F64 => "!(x == x)",
        _ => "false",
    };
    format!(
        "{enable}alias C = {c};\n\
         fn isnan_(x: C) -> bool {{ return {isnan}; }}\n\
         {HELPERS}{p}",
        enable = t.enables(),
        p = immediate_block(c),
    )
}

/// A storage binding `name` of elements of `t` at `@binding(b)`, with its accessors
/// `get_<name>(i)` (the element as its compute type) and `put_<name>(i, v)`. Packed types
/// live in words written with atomics, so that threads writing neighbouring elements of
/// one word do not race.
pub(crate) fn binding(b: u32, name: &str, t: WgslType) -> String {
    let c = t.compute();
    let decl = |ty: &str| {
        format!("@group(0) @binding({b}) var<storage, read_write> {name}: array<{ty}>;\n")
    };
    if !t.packed() {
        let (get, put) = match t {
            WgslType::F16 => ("f32(x)", "f16(v)"),
            _ => ("x", "v"),
        };
        return format!(
            "{}fn get_{name}(i: u32) -> {c} {{ let x = {name}[i]; return {get}; }}\n\
             fn put_{name}(i: u32, v: {c}) {{ {name}[i] = {put}; }}\n",
            decl(t.name())
        );
    }
    let (per, bits, mask) = match t {
        WgslType::BF16 => (2, 16, "0xffffu"),
        _ => (4, 8, "0xffu"),
    };
    let (unpack, pack) = match t {
        WgslType::U8 => ("x", "v"),
        WgslType::I8 => ("i32(x << 24u) >> 24u", "u32(v)"),
        _ => ("bitcast<f32>(x << 16u)", "gk_to_bf16(v)"),
    };
    format!(
        "{}fn get_{name}(i: u32) -> {c} {{
    let x = (atomicLoad(&{name}[i / {per}u]) >> ((i % {per}u) * {bits}u)) & {mask};
    return {unpack};
}}
fn put_{name}(i: u32, v: {c}) {{
    let sh = (i % {per}u) * {bits}u;
    let w = i / {per}u;
    atomicAnd(&{name}[w], ~({mask} << sh));
    atomicOr(&{name}[w], ({pack} & {mask}) << sh);
}}
",
        decl("atomic<u32>")
    )
}
