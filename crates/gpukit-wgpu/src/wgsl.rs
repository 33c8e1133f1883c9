//! The op table in WGSL: one body per element-wise op of gpukit-core's table, and the
//! complete source of every built-in kernel.
//!
//! Adding an element-wise op to the table (`gpukit_core::optable`) means one arm in
//! [`unary_body`] or [`binary_body`]: the `match`es are exhaustive, so an op without a WGSL
//! body does not compile. A body is a WGSL expression over the compute type `C` (operand
//! `x`, or `a` and `b`), written in the same order of operations as the reference.
//!
//! Every kernel shares one immediate block (`struct P`, [`pf`]): element offsets into the
//! bound windows, lengths, and two scalars of the compute type.

use gpukit_core::{BinaryOp, DType, ReduceOp, UnaryOp};

/// An element type the WGSL kernels have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Wt {
    F32,
    I32,
    U32,
    F16,
    F64,
    I64,
    U64,
    /// Packed four to a word (WGSL has no 8-bit type); written with atomics.
    U8,
    /// Packed four to a word, sign-extended on load.
    I8,
    /// Packed two to a word, computed in f32, rounded to nearest even on store.
    BF16,
}

/// The shader features of a device that decide which element types exist.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) f16: bool,
    pub(crate) f64: bool,
    pub(crate) int64: bool,
}

impl Wt {
    /// The WGSL type of `dtype` on a device with `caps`, or why there is none.
    pub(crate) fn of(dtype: DType, caps: Caps) -> std::result::Result<Wt, String> {
        let need = |has: bool, t: Wt, feature: &str| {
            if has {
                Ok(t)
            } else {
                Err(format!("{dtype} (the adapter lacks {feature})"))
            }
        };
        match dtype {
            DType::F32 => Ok(Wt::F32),
            DType::I32 => Ok(Wt::I32),
            DType::U32 => Ok(Wt::U32),
            DType::F16 => need(caps.f16, Wt::F16, "SHADER_F16"),
            DType::F64 => need(caps.f64, Wt::F64, "SHADER_F64"),
            DType::I64 => need(caps.int64, Wt::I64, "SHADER_INT64"),
            DType::U64 => need(caps.int64, Wt::U64, "SHADER_INT64"),
            DType::U8 => Ok(Wt::U8),
            DType::I8 => Ok(Wt::I8),
            DType::BF16 => Ok(Wt::BF16),
        }
    }

    /// Every type `caps` allows, as dtypes.
    pub(crate) fn dtypes(caps: Caps) -> Vec<DType> {
        DType::ALL
            .into_iter()
            .filter(|&d| Wt::of(d, caps).is_ok())
            .collect()
    }

    pub(crate) fn size(self) -> u64 {
        match self {
            Wt::U8 | Wt::I8 => 1,
            Wt::F16 | Wt::BF16 => 2,
            Wt::F32 | Wt::I32 | Wt::U32 => 4,
            Wt::F64 | Wt::I64 | Wt::U64 => 8,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Wt::F32 => "f32",
            Wt::I32 => "i32",
            Wt::U32 => "u32",
            Wt::F16 => "f16",
            Wt::F64 => "f64",
            Wt::I64 => "i64",
            Wt::U64 => "u64",
            Wt::U8 => "u8",
            Wt::I8 => "i8",
            Wt::BF16 => "bf16",
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(self, Wt::F32 | Wt::F16 | Wt::F64 | Wt::BF16)
    }

    pub(crate) fn is_signed(self) -> bool {
        matches!(self, Wt::I32 | Wt::I64 | Wt::I8)
    }

    /// Whether elements share 32-bit words (stored through atomics).
    pub(crate) fn packed(self) -> bool {
        matches!(self, Wt::U8 | Wt::I8 | Wt::BF16)
    }

    /// Whether the compute type is 64 bits wide (scalars take two words).
    pub(crate) fn wide(self) -> bool {
        self.size() == 8
    }

    /// Whether the transcendental functions (`exp`, `log`, `tanh`, `pow`) exist: not in
    /// 64 bits (Vulkan's GLSL.std.450 has them for 16- and 32-bit floats only).
    pub(crate) fn has_math(self) -> bool {
        matches!(self, Wt::F32 | Wt::F16 | Wt::BF16)
    }

    /// The compute type.
    fn compute(self) -> &'static str {
        match self {
            Wt::F16 | Wt::BF16 => "f32",
            Wt::U8 => "u32",
            Wt::I8 => "i32",
            t => t.name(),
        }
    }

    fn enables(self) -> &'static str {
        match self {
            Wt::F16 => "enable f16;\n",
            _ => "",
        }
    }
}

/// The immediate block every kernel declares: 16 `u32`s (64 bytes), then two scalars of the
/// compute type `C` (`x0`, `x1`); 80 bytes at most.
pub(crate) const IMMEDIATE_BYTES: u32 = 80;

fn p_block(c: &str) -> String {
    format!(
        "struct P {{
    n: u32, cols: u32, base: u32, o0: u32,
    o1: u32, o2: u32, s0: u32, s1: u32,
    mode: u32, k: u32, batch: u32, sa: u32,
    sb: u32, sc: u32, flags: u32, rows: u32,
    x0: {c}, x1: {c},
}}
var<immediate> p: P;
"
    )
}

/// Field indices of the immediate block, in `u32` words.
pub(crate) mod pf {
    pub(crate) const N: usize = 0;
    pub(crate) const COLS: usize = 1;
    pub(crate) const BASE: usize = 2;
    pub(crate) const O0: usize = 3;
    pub(crate) const O1: usize = 4;
    pub(crate) const O2: usize = 5;
    pub(crate) const S0: usize = 6;
    pub(crate) const MODE: usize = 8;
    pub(crate) const K: usize = 9;
    pub(crate) const BATCH: usize = 10;
    pub(crate) const SA: usize = 11;
    pub(crate) const SB: usize = 12;
    pub(crate) const SC: usize = 13;
    pub(crate) const FLAGS: usize = 14;
    pub(crate) const ROWS: usize = 15;
    /// The first word of the scalars `x0`, `x1`.
    pub(crate) const X: usize = 16;
    /// Words in the block.
    pub(crate) const WORDS: usize = 20;
}

/// Sets scalar `which` (0: `x0`, 1: `x1`) from its bits in the compute type.
pub(crate) fn set_scalar(imm: &mut [u32; pf::WORDS], t: Wt, which: usize, bits: u64) {
    if t.wide() {
        imm[pf::X + 2 * which] = bits as u32;
        imm[pf::X + 2 * which + 1] = (bits >> 32) as u32;
    } else {
        imm[pf::X + which] = bits as u32;
    }
}

/// Helpers every kernel may use: NaN tests, `log1p`, C's `pow`.
const HELPERS: &str = "
fn nan32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn inf32() -> f32 { return bitcast<f32>(0x7f800000u); }
fn to_bf16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if (nan32(x)) { return (b >> 16u) | 0x40u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
// ln(1 + x) without the cancellation of `1 + x` (shaders may not keep `(1 + x) - 1` exact):
// for |x| < 0.5 as 2 atanh(x / (2 + x)) by its series, else ln(1 + x).
fn log1p32(x: f32) -> f32 {
    if (!(abs(x) < 0.5)) { return log(1.0 + x); }
    let s = x / (2.0 + x);
    let s2 = s * s;
    var t = 1.0 / 17.0;
    t = t * s2 + 1.0 / 15.0;
    t = t * s2 + 1.0 / 13.0;
    t = t * s2 + 1.0 / 11.0;
    t = t * s2 + 1.0 / 9.0;
    t = t * s2 + 1.0 / 7.0;
    t = t * s2 + 1.0 / 5.0;
    t = t * s2 + 1.0 / 3.0;
    return 2.0 * s * (t * s2 + 1.0);
}
// tanh without the cancellation of (e^2x - 1) near 0: the odd series for |x| < 0.55, else
// 1 - 2 / (e^2|x| + 1) with the sign of x.
fn tanh32(x: f32) -> f32 {
    let a = abs(x);
    if (nan32(x)) { return x; }
    if (a < 0.55) {
        // Taylor to x^19: the next term is below 1e-9 of the result for |x| < 0.55.
        let x2 = x * x;
        var t = -443861162.0 / 1856156927625.0;
        t = t * x2 + 6404582.0 / 10854718875.0;
        t = t * x2 - 929569.0 / 638512875.0;
        t = t * x2 + 21844.0 / 6081075.0;
        t = t * x2 - 1382.0 / 155925.0;
        t = t * x2 + 62.0 / 2835.0;
        t = t * x2 - 17.0 / 315.0;
        t = t * x2 + 2.0 / 15.0;
        t = t * x2 - 1.0 / 3.0;
        return x + x * x2 * t;
    }
    if (a > 20.0) { return sign(x); }
    return sign(x) * (1.0 - 2.0 / (exp(2.0 * a) + 1.0));
}
fn odd_int32(b: f32) -> bool {
    let h = b * 0.5;
    return abs(b) < 16777216.0 && trunc(b) == b && trunc(h) != h;
}
// C's pow, special cases included (the shader's pow is undefined for a <= 0).
fn pow32(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (nan32(a) || nan32(b)) { return a + b; }
    let inf = inf32();
    let neg = a < 0.0 || (a == 0.0 && bitcast<u32>(a) != 0u);
    let odd = odd_int32(b);
    if (abs(b) == inf) {
        if (abs(a) == 1.0) { return 1.0; }
        return select(0.0, inf, (abs(a) < 1.0) == (b < 0.0));
    }
    if (a == 0.0 || abs(a) == inf) {
        let big = (a == 0.0) == (b < 0.0);
        var r = select(0.0, inf, big);
        if (neg && odd) { r = -r; }
        return r;
    }
    if (a < 0.0 && trunc(b) != b) { return bitcast<f32>(0x7fc00000u); }
    let r = pow(abs(a), b);
    if (a < 0.0 && odd) { return -r; }
    return r;
}
";

/// The element-type prelude: `C` (the compute type), `isnan_`, the helpers and the
/// immediate block. Bindings come from [`binding`].
pub(crate) fn prelude(t: Wt) -> String {
    let c = t.compute();
    let isnan = match t {
        Wt::F32 | Wt::F16 | Wt::BF16 => "nan32(x)",
        Wt::F64 => "!(x == x)",
        _ => "false",
    };
    format!(
        "{enable}alias C = {c};\n\
         fn isnan_(x: C) -> bool {{ return {isnan}; }}\n\
         {HELPERS}{p}",
        enable = t.enables(),
        p = p_block(c),
    )
}

/// A storage binding `name` of elements of `t` at `@binding(b)`, with its accessors
/// `get_<name>(i)` (the element as its compute type) and `put_<name>(i, v)`. Packed types
/// live in words written with atomics, so that threads writing neighbouring elements of
/// one word do not race.
pub(crate) fn binding(b: u32, name: &str, t: Wt) -> String {
    let c = t.compute();
    let decl = |ty: &str| {
        format!("@group(0) @binding({b}) var<storage, read_write> {name}: array<{ty}>;\n")
    };
    if !t.packed() {
        let (get, put) = match t {
            Wt::F16 => ("f32(x)", "f16(v)"),
            _ => ("x", "v"),
        };
        return format!(
            "{}fn get_{name}(i: u32) -> {c} {{ let x = {name}[i]; return {get}; }}\n\
             fn put_{name}(i: u32, v: {c}) {{ {name}[i] = {put}; }}\n",
            decl(t.name())
        );
    }
    let (per, bits, mask) = match t {
        Wt::BF16 => (2, 16, "0xffffu"),
        _ => (4, 8, "0xffu"),
    };
    let (unpack, pack) = match t {
        Wt::U8 => ("x", "v"),
        Wt::I8 => ("i32(x << 24u) >> 24u", "u32(v)"),
        _ => ("bitcast<f32>(x << 16u)", "to_bf16(v)"),
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

/// The WGSL body of a unary op over `x: C`.
pub(crate) fn unary_body(op: UnaryOp, t: Wt) -> String {
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
    }
}

/// The WGSL body of a binary op over `a: C` and `b: C`.
pub(crate) fn binary_body(op: BinaryOp, t: Wt) -> String {
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
fn map_kernel(prelude: &str, t: Wt, out: Wt, body: &str) -> String {
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
pub(crate) fn unary(op: UnaryOp, t: Wt) -> String {
    let body = format!(
        "let x = get_in0(p.o0 + i); put_out0(p.o2 + i, {});",
        unary_body(op, t)
    );
    map_kernel(&prelude(t), t, t, &body)
}

/// `out0[i] = op(in0[i], rhs)`; `p.mode` 0: `in1[i]`, 1: row vector `in1[(base + i) %
/// cols]`, 2: column vector `in1[(base + i) / cols]`, 3: the scalar `p.x0`.
pub(crate) fn binary(op: BinaryOp, t: Wt) -> String {
    let body = format!(
        "let a = get_in0(p.o0 + i);
        var b: C;
        switch p.mode {{
            case 0u: {{ b = get_in1(p.o1 + i); }}
            case 1u: {{ b = get_in1(p.o1 + (p.base + i) % p.cols); }}
            case 2u: {{ b = get_in1(p.o1 + (p.base + i) / p.cols); }}
            default: {{ b = p.x0; }}
        }}
        put_out0(p.o2 + i, {});",
        binary_body(op, t)
    );
    map_kernel(&prelude(t), t, t, &body)
}

/// `out0[i] = x0`.
pub(crate) fn fill(t: Wt) -> String {
    map_kernel(&prelude(t), t, t, "put_out0(p.o2 + i, p.x0);")
}

/// `out0[i] = x0 * in0[i] + out0[i]`.
pub(crate) fn axpy(t: Wt) -> String {
    map_kernel(
        &prelude(t),
        t,
        t,
        "put_out0(p.o2 + i, p.x0 * get_in0(p.o0 + i) + get_out0(p.o2 + i));",
    )
}

/// `out0[i] = clamp(in0[i], x0, x1)`, NaN kept.
pub(crate) fn clamp(t: Wt) -> String {
    map_kernel(
        &prelude(t),
        t,
        t,
        "let x = get_in0(p.o0 + i); let lo = p.x0; let hi = p.x1;
        put_out0(p.o2 + i, select(select(x, hi, x > hi), lo, x < lo));",
    )
}

/// The conversion of `v0` (the compute value of an element of `from`) to the compute type
/// of `to`, with the reference's rules: floats saturate into integers (NaN to 0, truncation
/// toward zero), integers wrap into integers (two's complement; the store truncates packed
/// types), everything rounds to nearest into floats, once (see [`ODD_U32`]).
fn conversion(from: Wt, to: Wt) -> String {
    let (fc, tc) = (from.compute(), to.compute());
    let v = "v0";
    if to.is_float() {
        // Into f16 and bf16 (computed in f32, rounded by the store) from a value f32 may
        // not hold: to f32 to odd first, so that the store's rounding is the only one.
        return if odd_helpers(from, to).is_empty() {
            format!("{tc}({v})")
        } else {
            format!("odd_{}({v})", from.name())
        };
    }
    if from.is_float() {
        let nan = if from == Wt::F64 {
            format!("!({v} == {v})")
        } else {
            format!("nan32({v})")
        };
        let (lo, hi, min, max) = match to {
            Wt::I8 => ("-128.0", "128.0", "-128", "127"),
            Wt::U8 => ("0.0", "256.0", "0u", "255u"),
            Wt::I32 => (
                "-2147483648.0",
                "2147483648.0",
                "i32(-2147483647 - 1)",
                "2147483647",
            ),
            Wt::U32 => ("0.0", "4294967296.0", "0u", "4294967295u"),
            Wt::I64 => (
                "-9223372036854775808.0",
                "9223372036854775808.0",
                "(-9223372036854775807li - 1li)",
                "9223372036854775807li",
            ),
            _ => (
                "0.0",
                "18446744073709551616.0",
                "0lu",
                "18446744073709551615lu",
            ),
        };
        return format!(
            "select(select(select({tc}({v}), {max}, {v} >= {hi}), {min}, {v} < {lo}), {tc}(0), {nan})"
        );
    }
    // Integer to integer. Without 64-bit types on either side, 32 bits suffice: the source
    // is already sign- or zero-extended to 32 bits, and the store truncates.
    let wide = from.wide() || to.wide();
    if !wide {
        return if fc == tc {
            v.to_string()
        } else {
            format!("bitcast<{tc}>({v})")
        };
    }
    let as_u64 = if from.is_signed() {
        format!("bitcast<u64>(i64({v}))")
    } else {
        format!("u64({v})")
    };
    match tc {
        "u64" => as_u64,
        "i64" => format!("bitcast<i64>({as_u64})"),
        "u32" => format!("u32({as_u64} & 0xfffffffflu)"),
        _ => format!("bitcast<i32>(u32({as_u64} & 0xfffffffflu))"),
    }
}

/// Round-to-odd conversions to f32 (toward zero, then the last bit set when inexact): what
/// f16 and bf16 casts from 32- and 64-bit integers and from f64 go through, so that they
/// round once, correctly, as the CPU reference does (gpukit_core's `Numeric::from_wide`).
const ODD_U32: &str = "
fn odd_u32(m: u32) -> f32 {
    let bits = 32u - countLeadingZeros(m);
    if (bits <= 24u) { return f32(m); }
    let shift = bits - 24u;
    let t = (m >> shift) | select(0u, 1u, (m & ((1u << shift) - 1u)) != 0u);
    return ldexp(f32(t), i32(shift));
}
fn odd_i32(v: i32) -> f32 {
    let u = bitcast<u32>(v);
    let f = odd_u32(select(u, 0u - u, v < 0));
    return select(f, -f, v < 0);
}
";
const ODD_U64: &str = "
fn odd_u64(m: u64) -> f32 {
    let hi = u32(m >> 32u);
    if (hi == 0u) { return odd_u32(u32(m & 0xfffffffflu)); }
    let shift = 40u - countLeadingZeros(hi);
    let sticky = (m & ((1lu << shift) - 1lu)) != 0lu;
    let t = u32((m >> shift) & 0xfffffffflu) | select(0u, 1u, sticky);
    return ldexp(f32(t), i32(shift));
}
fn odd_i64(v: i64) -> f32 {
    let u = bitcast<u64>(v);
    let f = odd_u64(select(u, 0lu - u, v < 0li));
    return select(f, -f, v < 0li);
}
";
// `f32(x)` may round either way (WGSL lets it): a step back toward zero makes it truncation.
// Values beyond f32 are clamped to its largest, which still rounds to infinity in 16 bits.
const ODD_F64: &str = "
fn odd_f64(v: f64) -> f32 {
    if (!(v == v)) { return f32(v); }
    let f = f32(clamp(v, -3.4028234663852886e38, 3.4028234663852886e38));
    if (f64(f) == v) { return f; }
    var b = bitcast<u32>(f);
    if (abs(f64(f)) > abs(v)) { b = b - 1u; }
    return bitcast<f32>(b | 1u);
}
";

/// The round-to-odd helpers a cast from `from` to `to` goes through (defining `odd_<from>`),
/// none when f32 holds every value of `from` or the target is not a 16-bit float.
fn odd_helpers(from: Wt, to: Wt) -> &'static [&'static str] {
    if !matches!(to, Wt::F16 | Wt::BF16) {
        return &[];
    }
    match from {
        Wt::I32 | Wt::U32 => &[ODD_U32],
        Wt::I64 | Wt::U64 => &[ODD_U32, ODD_U64],
        Wt::F64 => &[ODD_F64],
        _ => &[],
    }
}

/// `out0[i] = to(in0[i])`.
pub(crate) fn cast(from: Wt, to: Wt) -> String {
    let enable = if from == Wt::F16 || to == Wt::F16 {
        "enable f16;\n"
    } else {
        ""
    };
    let odd = odd_helpers(from, to).concat();
    let pre = format!("{enable}{HELPERS}{odd}{}", p_block("u32"));
    let body = format!(
        "let v0 = get_in0(p.o0 + i); put_out0(p.o2 + i, {});",
        conversion(from, to)
    );
    map_kernel(&pre, from, to, &body)
}

/// Copies `p.n` bytes from byte `p.o0` of `in0` to byte `p.o2` of `out0` (both seen as
/// words): one thread per destination word, so no two threads write one word.
pub(crate) fn copy_bytes() -> String {
    format!(
        "{p}
@group(0) @binding(0) var<storage, read_write> in0: array<u32>;
@group(0) @binding(1) var<storage, read_write> in1: array<u32>;
@group(0) @binding(2) var<storage, read_write> out0: array<u32>;
fn src_byte(b: u32) -> u32 {{ return (in0[b / 4u] >> ((b % 4u) * 8u)) & 0xffu; }}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let first = p.o2 / 4u;
    let words = (p.o2 + p.n + 3u) / 4u - first;
    let stride = nwg.x * 256u;
    var w = gid.x;
    loop {{
        if (w >= words) {{ break; }}
        let word = first + w;
        var v = out0[word];
        for (var k = 0u; k < 4u; k++) {{
            let db = word * 4u + k;
            if (db >= p.o2 && db < p.o2 + p.n) {{
                let s = src_byte(p.o0 + (db - p.o2));
                v = (v & ~(0xffu << (k * 8u))) | (s << (k * 8u));
            }}
        }}
        out0[word] = v;
        if (words - w <= stride) {{ break; }}
        w += stride;
    }}
}}
",
        p = p_block("u32")
    )
}

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
pub(crate) fn acc_type(kind: ReduceKind, t: Wt, f64_ok: bool) -> &'static str {
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
            "return Part(A(get_in0(idx)) * A(get_in1(p.o1 + idx - p.o0)), j, 0u);".to_string(),
        ),
        ReduceKind::Op(ReduceOp::Max) | ReduceKind::Op(ReduceOp::ArgMax) => (best(true), one),
        ReduceKind::Op(ReduceOp::Min) | ReduceKind::Op(ReduceOp::ArgMin) => (best(false), one),
    }
}

/// A reduction pass over `p.rows` rows of `p.cols` items, each row split into `p.k` parts
/// (workgroup `x`), rows strided over workgroup `y`. `stage2` reads parts from `parts`
/// instead of elements from `in0`. With `p.flags & 1` the pass writes results to `out0`
/// (elements, or `u32` indices for the arg reductions; a mean divides by `p.n`), else parts.
pub(crate) fn reduce(kind: ReduceKind, t: Wt, stage2: bool, f64_ok: bool) -> String {
    let (combine, elem) = reduce_parts(kind);
    let index = matches!(
        kind,
        ReduceKind::Op(ReduceOp::ArgMax) | ReduceKind::Op(ReduceOp::ArgMin)
    );
    let out_t = if index { Wt::U32 } else { t };
    let load = if stage2 {
        "return parts[r * p.cols + j];".to_string()
    } else {
        format!("let idx = p.o0 + r * p.cols + j;\n    {elem}")
    };
    let write = match kind {
        _ if index => "put_out0(p.o2 + r, best.i);".to_string(),
        ReduceKind::Op(ReduceOp::Mean) => "put_out0(p.o2 + r, C(best.v / A(p.n)));".to_string(),
        _ => "put_out0(p.o2 + r, C(best.v));".to_string(),
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

/// Softmax, log-softmax (`p.mode` 0 or 1) or cross-entropy (`p.mode` 2, with `p.flags & 1`
/// for the gradient) of each row of a `p.rows x p.cols` matrix: one workgroup per row.
/// Bindings: `in0` input (logits), `in1` labels (`u32`, cross-entropy), `out0` output (the
/// losses), `grad` the gradient.
pub(crate) fn softmax(t: Wt, f64_ok: bool) -> String {
    let acc = if f64_ok { "f64" } else { "f32" };
    format!(
        "{pre}alias A = {acc};
{b0}{b1}{b2}{b3}
var<workgroup> sa: array<f32, 256>;
var<workgroup> sb: array<A, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let t = lid.x;
    for (var r = wid.x; r < p.rows; r += nwg.x) {{
        let row = p.o0 + r * p.cols;
        var m = get_in0(row);
        for (var j = t; j < p.cols; j += 256u) {{
            let x = get_in0(row + j);
            m = select(select(m, x, x > m), x, isnan_(m));
        }}
        sa[t] = m;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {{
            if (t < s) {{
                let a = sa[t];
                let b = sa[t + s];
                sa[t] = select(select(a, b, b > a), b, isnan_(a));
            }}
            workgroupBarrier();
        }}
        m = sa[0];
        var acc = A(0);
        for (var j = t; j < p.cols; j += 256u) {{
            acc = acc + A(exp(get_in0(row + j) - m));
        }}
        sb[t] = acc;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {{
            if (t < s) {{ sb[t] = sb[t] + sb[t + s]; }}
            workgroupBarrier();
        }}
        let total = sb[0];
        // ln(total) to f32 precision, plus the first-order correction for the part of the
        // sum below f32's (WGSL has no f64 log).
        let t32 = f32(total);
        let ln_total = A(log(t32)) + (total - A(t32)) / total;
        workgroupBarrier();
        if (p.mode < 2u) {{
            let orow = p.o2 + r * p.cols;
            for (var j = t; j < p.cols; j += 256u) {{
                let d = get_in0(row + j) - m;
                if (p.mode == 1u) {{
                    put_out0(orow + j, f32(A(d) - ln_total));
                }} else {{
                    put_out0(orow + j, f32(A(exp(d)) / total));
                }}
            }}
        }} else {{
            let label = get_labels(p.o1 + r);
            let ok = label < p.cols;
            if (t == 0u) {{
                var loss = bitcast<f32>(0x7fc00000u);
                if (ok) {{ loss = f32(ln_total - A(get_in0(row + label) - m)); }}
                put_out0(p.o2 + r, loss);
            }}
            if ((p.flags & 1u) == 1u) {{
                let grow = p.s0 + r * p.cols;
                for (var j = t; j < p.cols; j += 256u) {{
                    var g = bitcast<f32>(0x7fc00000u);
                    if (ok) {{ g = f32(A(exp(get_in0(row + j) - m)) / total - select(A(0), A(1), j == label)); }}
                    put_grad(grow + j, g);
                }}
            }}
        }}
    }}
}}
",
        pre = prelude(t),
        b0 = binding(0, "in0", t),
        b1 = binding(1, "labels", Wt::U32),
        b2 = binding(2, "out0", t),
        b3 = binding(3, "grad", t),
    )
}

/// `C = alpha op(A) op(B) + beta C` for a batch (workgroup `z`), 16 x 16 tiles.
/// `p.flags` bit 0: A transposed, bit 1: B transposed; `p.s0`, `p.s1`: alpha, beta.
pub(crate) fn gemm(t: Wt) -> String {
    format!(
        "{pre}
{b0}{b1}{b2}
var<workgroup> ta: array<array<C, 16>, 16>;
var<workgroup> tb: array<array<C, 16>, 16>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {{
    let m = p.rows;
    let n = p.cols;
    let k = p.k;
    let ta_ = (p.flags & 1u) == 1u;
    let tb_ = (p.flags & 2u) == 2u;
    let alpha = p.x0;
    let beta = p.x1;
    let row = wid.y * 16u + lid.y;
    let col = wid.x * 16u + lid.x;
    for (var z = wid.z; z < p.batch; z += nwg.z) {{
        let a0 = p.o0 + z * p.sa;
        let b0 = p.o1 + z * p.sb;
        let c0 = p.o2 + z * p.sc;
        var acc = C(0);
        for (var k0 = 0u; k0 < k; k0 += 16u) {{
            let ka = k0 + lid.x;
            var av = C(0);
            if (row < m && ka < k) {{
                av = get_am(a0 + select(row * k + ka, ka * m + row, ta_));
            }}
            ta[lid.y][lid.x] = av;
            let kb = k0 + lid.y;
            var bv = C(0);
            if (kb < k && col < n) {{
                bv = get_bm(b0 + select(kb * n + col, col * k + kb, tb_));
            }}
            tb[lid.y][lid.x] = bv;
            workgroupBarrier();
            for (var kk = 0u; kk < 16u; kk++) {{
                acc = acc + ta[lid.y][kk] * tb[kk][lid.x];
            }}
            workgroupBarrier();
        }}
        if (row < m && col < n) {{
            let ci = c0 + row * n + col;
            var v = alpha * acc;
            if (beta != C(0)) {{ v = v + beta * get_cm(ci); }}
            put_cm(ci, v);
        }}
    }}
}}
",
        pre = prelude(t),
        b0 = binding(0, "am", t),
        b1 = binding(1, "bm", t),
        b2 = binding(2, "cm", t),
    )
}
