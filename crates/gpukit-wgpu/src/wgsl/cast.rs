//! Casts in WGSL: the conversion of each element type's compute value into another's, with
//! the reference's rules (`gpukit_core::Numeric::from_wide`), rounding once into f16 and bf16.

use super::elementwise::map_kernel;
use super::{immediate_block, WgslType, HELPERS};

/// The conversion of `v0` (the compute value of an element of `from`) to the compute type
/// of `to`, with the reference's rules: floats saturate into integers (NaN to 0, truncation
/// toward zero), integers wrap into integers (two's complement; the store truncates packed
/// types), everything rounds to nearest into floats, once (see [`ODD_U32`]).
fn conversion(from: WgslType, to: WgslType) -> String {
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
        let nan = if from == WgslType::F64 {
            format!("!({v} == {v})")
        } else {
            format!("gk_nan32({v})")
        };
        let (lo, hi, min, max) = match to {
            WgslType::I8 => ("-128.0", "128.0", "-128", "127"),
            WgslType::U8 => ("0.0", "256.0", "0u", "255u"),
            WgslType::I32 => (
                "-2147483648.0",
                "2147483648.0",
                "i32(-2147483647 - 1)",
                "2147483647",
            ),
            WgslType::U32 => ("0.0", "4294967296.0", "0u", "4294967295u"),
            WgslType::I64 => (
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
fn odd_helpers(from: WgslType, to: WgslType) -> &'static [&'static str] {
    if !matches!(to, WgslType::F16 | WgslType::BF16) {
        return &[];
    }
    match from {
        WgslType::I32 | WgslType::U32 => &[ODD_U32],
        WgslType::I64 | WgslType::U64 => &[ODD_U32, ODD_U64],
        WgslType::F64 => &[ODD_F64],
        _ => &[],
    }
}

/// `out0[i] = to(in0[i])`.
pub(crate) fn cast(from: WgslType, to: WgslType) -> String {
    let enable = if from == WgslType::F16 || to == WgslType::F16 {
        "enable f16;\n"
    } else {
        ""
    };
    let odd = odd_helpers(from, to).concat();
    let pre = format!("{enable}{HELPERS}{odd}{}", immediate_block("u32"));
    let body = format!(
        "let v0 = get_in0(p.off_in0 + i); put_out0(p.off_out0 + i, {});",
        conversion(from, to)
    );
    map_kernel(&pre, from, to, &body)
}
