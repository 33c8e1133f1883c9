//! The random fills in WGSL: Philox 4x32-10 (with a 32x32 -> 64-bit product built from
//! 16-bit halves, WGSL having no 64-bit integers) and the distributions of gpukit-core's
//! `optable::random`, in the reference's order of operations with its series' coefficients,
//! so that a driver with IEEE `+ - * /` and `sqrt` (lavapipe) gives the CPU's bits.
//!
//! Immediates: `mode` the distribution (0 uniform, 1 normal, 2 integers, 3 dropout), `k` and
//! `batch` the seed's low and high words, `stride_a` and `stride_b` the offset's, `flags`
//! the integers' range (0: `2^32`), `x0` and `x1` the parameters; `in0` is dropout's input
//! (the output in place).

use gpukit_core::optable::{series, Distribution, PHILOX_M, PHILOX_ROUNDS, PHILOX_W};

use super::elementwise::map_kernel;
use super::{prelude, WgslType};

/// The immediate `mode` of a distribution.
pub(crate) fn dist_mode(d: Distribution) -> u32 {
    match d {
        Distribution::Uniform => 0,
        Distribution::Normal => 1,
        Distribution::Integers => 2,
        Distribution::Dropout => 3,
    }
}

/// An f64 constant as an exact literal of `R` (`wide`: f64): the value rounded to `R` first,
/// so that the abstract literal converts exactly.
fn lit(v: f64, wide: bool) -> String {
    let v = if wide { v } else { f64::from(v as f32) };
    format!("R({v:?})")
}

/// Horner's rule over `coeffs` (lowest degree first) at `x`, as the reference evaluates it.
fn horner(coeffs: &[f64], x: &str, wide: bool) -> String {
    let mut s = lit(coeffs[coeffs.len() - 1], wide);
    for &c in coeffs[..coeffs.len() - 1].iter().rev() {
        s = format!("(({s}) * {x} + {})", lit(c, wide));
    }
    s
}

/// `mulhi`, Philox keyed by `p.k`, `p.batch` (`rng_philox`) and the word selection
/// (`rng_words`).
pub(super) fn philox() -> String {
    let [m0, m1] = PHILOX_M;
    let [w0, w1] = PHILOX_W;
    format!(
        "fn mulhi(a: u32, b: u32) -> u32 {{
    let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
    let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}}
fn rng_philox(x0: u32, x1: u32, x2: u32, x3: u32) -> array<u32, 4> {{
    var c0 = x0; var c1 = x1; var c2 = x2; var c3 = x3;
    var k0 = p.k; var k1 = p.batch;
    for (var r = 0u; r < {PHILOX_ROUNDS}u; r++) {{
        if (r > 0u) {{ k0 += 0x{w0:08x}u; k1 += 0x{w1:08x}u; }}
        let hi0 = mulhi(0x{m0:08x}u, c0); let lo0 = 0x{m0:08x}u * c0;
        let hi1 = mulhi(0x{m1:08x}u, c2); let lo1 = 0x{m1:08x}u * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    }}
    return array<u32, 4>(c0, c1, c2, c3);
}}
fn rng_words(jlo: u32, jhi: u32, words: u32) -> array<u32, 4> {{
    var sh = 0u;
    if (words == 1u) {{ sh = 2u; }} else if (words == 2u) {{ sh = 1u; }}
    var b0 = jlo; var b1 = jhi;
    if (sh > 0u) {{ b0 = (jlo >> sh) | (jhi << (32u - sh)); b1 = jhi >> sh; }}
    var c = rng_philox(b0, b1, 0u, 0u);
    let first = (jlo & ((1u << sh) - 1u)) * words;
    var w = array<u32, 4>(0u, 0u, 0u, 0u);
    for (var k = 0u; k < words; k++) {{ w[k] = c[first + k]; }}
    return w;
}}
"
    )
}

/// The float helpers over `R`: the uniform of one word (f32) or two (f64), Box-Muller's
/// `ln` and `cos(2 pi t)` and the normal sample.
fn float_helpers(wide: bool) -> String {
    let r = if wide { "f64" } else { "f32" };
    let s = series(wide);
    let l = |v: f64| lit(v, wide);
    let (unit, k) = if wide {
        (
            format!(
                "R(w[o + 1u]) * {} + R(w[o] >> 11u) * {}",
                l(1.0 / 4_294_967_296.0),
                l(2f64.powi(-53))
            ),
            2,
        )
    } else {
        (format!("R(w[o] >> 8u) * {}", l(1.0 / 16_777_216.0)), 1)
    };
    format!(
        "alias R = {r};
fn rng_unit(w: array<u32, 4>, o: u32) -> R {{ return {unit}; }}
fn rng_ln(u: R) -> R {{
    let f = frexp(u);
    var m: R; var e: i32;
    // naga's frexp of an f64 gives an i64 exponent.
    let ex = i32(f.exp);
    if (f.fract * {two} > {sqrt2}) {{ m = f.fract; e = ex; }} else {{ m = f.fract * {two}; e = ex - 1; }}
    let t = (m - {one}) / (m + {one});
    let t2 = t * t;
    let q = {ln};
    return R(e) * {ln2} + (t + t) * q;
}}
fn rng_cos2pi(t: R) -> R {{
    let t4 = t * {four};
    let q = floor(t4);
    let th = (t4 - q) * {half_pi};
    let th2 = th * th;
    let c = {cos};
    let s = th * {sin};
    let qi = i32(q);
    if (qi == 0) {{ return c; }}
    if (qi == 1) {{ return -s; }}
    if (qi == 2) {{ return -c; }}
    return s;
}}
fn rng_normal(w: array<u32, 4>) -> R {{
    let u1 = {one} - rng_unit(w, 0u);
    let u2 = rng_unit(w, {k}u);
    let r = sqrt({neg_two} * rng_ln(u1));
    return r * rng_cos2pi(u2);
}}
",
        two = l(2.0),
        sqrt2 = l(std::f64::consts::SQRT_2),
        one = l(1.0),
        four = l(4.0),
        neg_two = l(-2.0),
        ln2 = l(std::f64::consts::LN_2),
        half_pi = l(std::f64::consts::FRAC_PI_2),
        ln = horner(&s.ln, "t2", wide),
        cos = horner(&s.cos, "th2", wide),
        sin = horner(&s.sin, "th2", wide),
    )
}

/// The random fill kernel for elements of `t`.
pub(crate) fn random(t: WgslType) -> String {
    let mut pre = prelude(t);
    pre += &philox();
    let position = "let jlo = p.stride_a + p.base + i;
        let jhi = p.stride_b + select(0u, 1u, jlo < p.stride_a);";
    let body = if t.is_float() {
        let wide = t == WgslType::F64;
        pre += &float_helpers(wide);
        format!(
            "{position}
        var v: C;
        if (p.mode == 1u) {{
            let w = rng_words(jlo, jhi, {normal}u);
            v = p.x0 + p.x1 * C(rng_normal(w));
        }} else {{
            let w = rng_words(jlo, jhi, {uniform}u);
            let u = rng_unit(w, 0u);
            if (p.mode == 0u) {{
                v = p.x0 + (p.x1 - p.x0) * C(u);
            }} else {{
                let x = get_in0(p.off_in0 + i);
                v = select(C(0), x * p.x1, C(u) >= p.x0);
            }}
        }}
        put_out0(p.off_out0 + i, v);",
            normal = Distribution::Normal.words(wide),
            uniform = Distribution::Uniform.words(wide),
        )
    } else {
        format!(
            "{position}
        let w = rng_words(jlo, jhi, {words}u);
        var q = w[1];
        if (p.flags != 0u) {{
            let th = mulhi(w[0], p.flags);
            let bh = mulhi(w[1], p.flags);
            let bl = w[1] * p.flags;
            let sl = bl + th;
            q = bh + select(0u, 1u, sl < bl);
        }}
        put_out0(p.off_out0 + i, p.x0 + C(q));",
            words = Distribution::Integers.words(false),
        )
    };
    map_kernel(&pre, t, t, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::naga;

    /// Every element type's kernel parses and validates with naga (what wgpu runs first).
    #[test]
    fn every_kernel_validates() {
        for t in [
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
        ] {
            let src = random(t);
            let module = naga::front::wgsl::parse_str(&src)
                .unwrap_or_else(|e| panic!("{t:?}: {}", e.emit_to_string(&src)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{t:?}: {}", e.emit_to_string(&src)));
        }
    }
}
