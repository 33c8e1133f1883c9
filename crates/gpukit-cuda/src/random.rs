//! The random fills in CUDA C: Philox 4x32-10 and the distributions of gpukit-core's
//! `optable::random`, in the reference's order of operations with its series' coefficients
//! (rendered as exact bit patterns), so that with `--fmad=false` and IEEE `sqrt` and
//! division the module gives the CPU's bits.
//!
//! The entry point, in every module: `random(const T *src, T *out, unsigned long long n,
//! unsigned long long seed, unsigned long long offset, int dist, T a, T b, unsigned int
//! range)`, `dist` 0 uniform, 1 normal, 2 integers, 3 dropout (reading `src`, which is `out`
//! in place).

use gpukit_core::optable::{series, Distribution, PHILOX_M, PHILOX_ROUNDS, PHILOX_W};

use crate::kernels::Elem;

/// The kernel's `dist` code of a distribution.
pub(crate) fn dist_code(d: Distribution) -> i32 {
    match d {
        Distribution::Uniform => 0,
        Distribution::Normal => 1,
        Distribution::Integers => 2,
        Distribution::Dropout => 3,
    }
}

/// An f64 constant as an exact literal of the float type (`wide`: double).
fn lit(v: f64, wide: bool) -> String {
    if wide {
        format!("__longlong_as_double(0x{:016x}LL)", v.to_bits())
    } else {
        format!("__int_as_float(0x{:08x})", (v as f32).to_bits())
    }
}

/// Horner's rule over `coeffs` (lowest degree first) at `x`, as the reference evaluates it.
fn horner(coeffs: &[f64], x: &str, wide: bool) -> String {
    let mut s = lit(coeffs[coeffs.len() - 1], wide);
    for &c in coeffs[..coeffs.len() - 1].iter().rev() {
        s = format!("(({s}) * {x} + {})", lit(c, wide));
    }
    s
}

/// Philox (`rng_philox`) and the word selection (`rng_words`), which every module has.
fn philox() -> String {
    let [m0, m1] = PHILOX_M;
    let [w0, w1] = PHILOX_W;
    format!(
        "__device__ __forceinline__ void rng_philox(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3, unsigned long long seed, unsigned int c[4]) {{
    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
    for (int r = 0; r < {PHILOX_ROUNDS}; r++) {{
        if (r > 0) {{ k0 += 0x{w0:08x}u; k1 += 0x{w1:08x}u; }}
        unsigned int hi0 = __umulhi(0x{m0:08x}u, c0), lo0 = 0x{m0:08x}u * c0;
        unsigned int hi1 = __umulhi(0x{m1:08x}u, c2), lo1 = 0x{m1:08x}u * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    }}
    c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;
}}
__device__ __forceinline__ void rng_words(unsigned long long seed, unsigned long long j, unsigned int words, unsigned int w[4]) {{
    unsigned long long per = 4ull / words, block = j / per;
    unsigned int c[4];
    rng_philox((unsigned int)block, (unsigned int)(block >> 32), 0u, 0u, seed, c);
    unsigned int first = (unsigned int)(j % per) * words;
    for (unsigned int k = 0; k < words; k++) w[k] = c[first + k];
}}
"
    )
}

/// The float helpers over `R` (float, or double for f64): the uniform of a word or two,
/// Box-Muller's `ln` and `cos(2 pi t)` and the normal sample.
fn float_helpers(wide: bool) -> String {
    let r = if wide { "double" } else { "float" };
    let s = series(wide);
    let l = |v: f64| lit(v, wide);
    let (frexp, floor, sqrt) = if wide {
        ("frexp", "floor", "sqrt")
    } else {
        ("frexpf", "floorf", "sqrtf")
    };
    let unit = if wide {
        format!(
            "(double)w[1] * {} + (double)(w[0] >> 11) * {}",
            l(1.0 / 4_294_967_296.0),
            l(2f64.powi(-53))
        )
    } else {
        format!("(float)(w[0] >> 8) * {}", l(1.0 / 16_777_216.0))
    };
    let k = if wide { 2 } else { 1 };
    format!(
        "typedef {r} R;
__device__ __forceinline__ R rng_unit(const unsigned int *w) {{ return {unit}; }}
__device__ R rng_ln(R u) {{
    int ex;
    R fr = {frexp}(u, &ex);
    R m; int e;
    if (fr * {two} > {sqrt2}) {{ m = fr; e = ex; }} else {{ m = fr * {two}; e = ex - 1; }}
    R t = (m - {one}) / (m + {one});
    R t2 = t * t;
    R p = {ln};
    return (R)e * {ln2} + (t + t) * p;
}}
__device__ R rng_cos2pi(R t) {{
    R t4 = t * {four};
    R q = {floor}(t4);
    R th = (t4 - q) * {half_pi};
    R th2 = th * th;
    R c = {cos};
    R s = th * {sin};
    int qi = (int)q;
    return qi == 0 ? c : (qi == 1 ? -s : (qi == 2 ? -c : s));
}}
__device__ R rng_normal(const unsigned int *w) {{
    R u1 = {one} - rng_unit(w);
    R u2 = rng_unit(w + {k});
    R r = {sqrt}({neg_two} * rng_ln(u1));
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

/// The `random` entry point of `elem`'s module, with its helpers.
pub(crate) fn random_source(elem: Elem) -> String {
    let mut s = String::from("\n// Random fills (gpukit-cuda, random.rs).\n");
    s += &philox();
    let head = "extern \"C\" __global__ void random(const T *src, T *out, unsigned long long n,\n    \
                unsigned long long seed, unsigned long long offset, int dist, T a, T b, unsigned int range) {\n";
    if elem.is_float() {
        let wide = elem == Elem::F64;
        let words = |d: Distribution| d.words(wide);
        s += &float_helpers(wide);
        s += head;
        s += &format!(
            "    C ca = load(a), cb = load(b);
    GRID_STRIDE(i, n) {{
        unsigned int w[4];
        unsigned long long j = offset + i;
        C v;
        if (dist == 1) {{
            rng_words(seed, j, {normal}u, w);
            v = op_add(ca, op_mul(cb, (C)rng_normal(w)));
        }} else {{
            rng_words(seed, j, {uniform}u, w);
            R u = rng_unit(w);
            if (dist == 0) {{
                v = op_add(ca, op_mul(op_sub(cb, ca), (C)u));
            }} else {{
                C x = load(src[i]);
                v = (double)u >= (double)ca ? op_mul(x, cb) : (C)0;
            }}
        }}
        out[i] = store(v);
    }}
}}
",
            normal = words(Distribution::Normal),
            uniform = words(Distribution::Uniform),
        );
    } else {
        let (_, _, u) = elem.c_types();
        s += head;
        s += &format!(
            "    GRID_STRIDE(i, n) {{
        unsigned int w[4];
        rng_words(seed, offset + i, {words}u, w);
        unsigned int q;
        if (range == 0u) {{
            q = w[1];
        }} else {{
            unsigned int th = __umulhi(w[0], range);
            unsigned int bh = __umulhi(w[1], range), bl = w[1] * range;
            unsigned int sl = bl + th;
            q = bh + (sl < bl ? 1u : 0u);
        }}
        out[i] = (T)(({u})a + ({u})q);
    }}
}}
",
            words = Distribution::Integers.words(false),
        );
    }
    s
}
