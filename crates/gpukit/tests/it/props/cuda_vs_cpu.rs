//! The CUDA backend against the CPU backend on the same random inputs.
//!
//! Each test opens both backends; without a usable CUDA device it prints
//! `SKIPPED: <reason>` and returns (and fails under `GPU_REQUIRE_CUDA=1`). What must agree,
//! for every element type (f16 and bf16 included):
//!
//! - element-wise ops (fill, copy, axpy, scale, clamp, every binary op of the table but
//!   `pow` in every form: element-wise, in place, scalar, row and column vectors; neg, abs,
//!   square and relu out of place and in place; also through offset views) bit for bit: the CUDA kernels are compiled with `--fmad=false` and IEEE
//!   division, integers wrap and `x / 0 == 0` on both backends, f16 and bf16 compute in f32
//!   and round once (axpy included: `from_f32(a * x + y)`). NaN matches any NaN (the
//!   payloads differ between CPUs and GPUs);
//! - every unary op of the table (and `pow`) within its contract at each input,
//!   [`UnaryOp::ulps_at`] (0: bit for bit; at most 1 for the 16-bit types); in place as out
//!   of place;
//! - `min`, `max` exactly (by value: `-0.0 == 0.0`, NaN matches NaN), `argmin`, `argmax`
//!   and the per-row `row_min`, `row_max`, `row_argmin`, `row_argmax` exactly; `row_sum`
//!   within the sums' tolerance; integer `sum` and `dot`
//!   exactly; float `sum` and `dot`, which both backends accumulate in f64 and round once,
//!   within 1 ulp of the result type plus the f64 reordering bound; `gemm` within the bound
//!   of its compute type (both derived in `tolerance.rs`);
//! - comparisons into masks, `select`, `arange`, column min/max (bit for bit) and sums
//!   (within the sums' tolerance), `gather_rows`, `one_hot`, `permutation`, `count_eq_into`
//!   (bit for bit) and `scatter_add_rows` (within the atomic sums' tolerance: GPUs add
//!   atomically, in the element type);
//! - the random fills (uniform, normal, dropout and integers) bit for bit, at the large
//!   lengths, from an offset where the Philox counter's low word carries;
//! - the same at lengths around one block and above `256 * 1024` elements (up to four
//!   million on an H100: sized by the device's SMs), where the element-wise grids are
//!   capped and loop, and reductions fold more
//!   than one block of partials per thread. Those inputs hold unique large terms at the
//!   last element and in the last block of partials, so that a reduction losing either
//!   fails (`cross_rejects.rs` shows the comparisons catching exactly that).

// Without the `cuda` feature only the helpers that cross_rejects shares are used.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use super::cross::*;
use super::*;

use gpukit::core::half::{bf16, f16};
use gpukit::{BinaryOp, Context, Shape, UnaryOp};

/// Runs `body` with the CPU and the CUDA context; without CUDA, prints why and returns.
fn cross(body: impl FnOnce(&Context, &Context) -> gpukit::Result<()>) {
    let Some(cuda) = common::cuda() else { return };
    let Some(cpu) = common::cpu() else { return };
    if let Err(e) = body(&cpu, &cuda) {
        panic!("cpu vs cuda: {e}");
    }
    for ctx in [&cpu, &cuda] {
        if let Err(e) = ctx.sync() {
            panic!(
                "{} backend: error left after the test: {e}",
                ctx.backend_name()
            );
        }
    }
}

/// Runs `f` on the CPU and on CUDA: `(cpu's answer, cuda's answer)`.
fn both<R>(
    cpu: &Context,
    cuda: &Context,
    f: impl Fn(&Context) -> gpukit::Result<R>,
) -> Result<(R, R), String> {
    let want = f(cpu).map_err(|e| format!("cpu backend: {e}"))?;
    let got = f(cuda).map_err(|e| format!("cuda backend: {e}"))?;
    Ok((want, got))
}

/// A comparison failure as a proptest failure (whose report holds the shrunk input).
fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

/// Every element-wise op on `a` and `b` (whose zeros are divisors): equal bit for bit.
fn elementwise<T: Cross>(
    cpu: &Context,
    cuda: &Context,
    a: &[T],
    b: &[T],
    alpha: T,
    fill: T,
) -> Result<(), String> {
    let n = a.len();
    let show = |i: usize| format!("a = {:?}, b = {:?}, alpha = {alpha:?}", a[i], b[i]);

    let (want, got) = both(cpu, cuda, |ctx| {
        let mut out = ctx.alloc::<T>(n)?;
        ctx.fill(&mut out, fill)?;
        out.download()
    })?;
    same_elements("fill", &want, &got, T::same, |_| format!("value {fill:?}"))?;

    let (want, got) = both(cpu, cuda, |ctx| {
        let x = ctx.alloc_upload(a)?;
        let mut out = ctx.alloc::<T>(n)?;
        ctx.copy(&x, &mut out)?;
        out.download()
    })?;
    same_elements("copy", &want, &got, T::same, show)?;
    // A copy moves bits: it must also equal the input itself.
    same_elements("copy (against the input)", a, &got, T::same, show)?;

    let (want, got) = both(cpu, cuda, |ctx| {
        let x = ctx.alloc_upload(a)?;
        let mut y = ctx.alloc_upload(b)?;
        ctx.axpy(alpha, &x, &mut y)?;
        y.download()
    })?;
    same_elements("axpy", &want, &got, T::same, show)?;

    let (want, got) = both(cpu, cuda, |ctx| {
        let mut x = ctx.alloc_upload(a)?;
        ctx.scale(alpha, &mut x)?;
        x.download()
    })?;
    same_elements("scale", &want, &got, T::same, show)?;

    // Every binary op of the table the type has, in all its forms: element-wise, in place,
    // with a scalar (in place too), and with a row and a column vector over a matrix.
    let (rows, cols) = if n.is_multiple_of(3) {
        (3, n / 3)
    } else {
        (1, n)
    };
    let shape = Shape::new(rows, cols);
    for &op in BinaryOp::ALL.iter().filter(|op| !op.floats_only()) {
        let (want, got) = both(cpu, cuda, |ctx| {
            let x = ctx.alloc_upload(a)?;
            let y = ctx.alloc_upload(b)?;
            let row = ctx.alloc_upload(&b[..cols])?;
            let col = ctx.alloc_upload(&b[..rows.min(n)])?;
            let mut out = ctx.alloc::<T>(n)?;
            let mut forms = Vec::new();
            ctx.binary(op, &x, &y, &mut out)?;
            forms.push(out.download()?);
            let mut inplace = ctx.alloc_upload(a)?;
            ctx.binary_inplace(op, &mut inplace, &y)?;
            forms.push(inplace.download()?);
            ctx.binary_scalar(op, &x, alpha, &mut out)?;
            forms.push(out.download()?);
            if n > 0 {
                ctx.binary_row(op, shape, &x, &row, &mut out)?;
                forms.push(out.download()?);
                ctx.binary_col(op, shape, &x, &col, &mut out)?;
                forms.push(out.download()?);
            }
            Ok(forms)
        })?;
        for (form, (w, g)) in ["", " in place", " scalar", " row", " col"]
            .iter()
            .zip(want.iter().zip(&got))
        {
            same_elements(&format!("{}{form}", op.name()), w, g, T::same, show)?;
        }
    }

    // The unary ops every numeric type has, out of place and in place; clamp.
    for &op in UnaryOp::ALL.iter().filter(|op| !op.floats_only()) {
        let (want, got) = both(cpu, cuda, |ctx| {
            let x = ctx.alloc_upload(a)?;
            let mut out = ctx.alloc::<T>(n)?;
            ctx.unary(op, &x, &mut out)?;
            let mut inplace = ctx.alloc_upload(a)?;
            ctx.unary_inplace(op, &mut inplace)?;
            Ok([out.download()?, inplace.download()?])
        })?;
        same_elements(op.name(), &want[0], &got[0], T::same, show)?;
        same_elements(op.name(), &want[1], &got[1], T::same, show)?;
    }
    let (want, got) = both(cpu, cuda, |ctx| {
        let mut x = ctx.alloc_upload(a)?;
        ctx.clamp_inplace(&mut x, alpha, fill)?;
        x.download()
    })?;
    same_elements("clamp", &want, &got, T::same, show)?;

    // Through views that start a few elements in (device addresses off the allocation's
    // start); the elements before the views stay zero.
    let off = n.min(3);
    let (want, got) = both(cpu, cuda, |ctx| {
        let x = ctx.alloc_upload(a)?;
        let y = ctx.alloc_upload(b)?;
        let mut out = ctx.alloc_zeros::<T>(n)?;
        {
            let mut o = out.slice_mut(off..)?;
            ctx.sub(&x.slice(off..)?, &y.slice(off..)?, &mut o)?;
        }
        out.download()
    })?;
    same_elements("sub on views", &want, &got, T::same, show)
}

/// Every unary op within its ulp budget at each input ([`CrossFloat::ulp_budget`]), in place as out of place, and `pow` of `|x|` to the
/// power of the reversed `x` clamped to -4..4 within [`BinaryOp::ulps`] (at most 1 for the
/// 16-bit types).
fn unary<T: CrossFloat>(cpu: &Context, cuda: &Context, x: &[T]) -> Result<(), String> {
    let n = x.len();
    for &op in UnaryOp::ALL {
        let (want, got) = both(cpu, cuda, |ctx| {
            let dx = ctx.alloc_upload(x)?;
            let mut out = ctx.alloc::<T>(n)?;
            ctx.unary(op, &dx, &mut out)?;
            let mut inplace = ctx.alloc_upload(x)?;
            ctx.unary_inplace(op, &mut inplace)?;
            Ok([out.download()?, inplace.download()?])
        })?;
        let ulps = |i: usize| T::ulp_budget(op, x[i].to_f64());
        let agree = |i: usize, w: T, g: T| match ulps(i) {
            0 => w.same(g),
            ulps => within_ulps(w, g, ulps),
        };
        for (form, (w, g)) in ["", " in place"].iter().zip(want.iter().zip(&got)) {
            if let Some(i) = (0..n).find(|&i| !agree(i, w[i], g[i])) {
                return Err(format!(
                    "{}{form} {} [{i}] of {n} (within {} ulp): cpu {:?}, cuda {:?} (x = {:?})",
                    op.name(),
                    T::DTYPE,
                    ulps(i),
                    w[i],
                    g[i],
                    x[i]
                ));
            }
        }
    }
    let base: Vec<T> = x.iter().map(|v| T::from_f64(v.to_f64().abs())).collect();
    let expo: Vec<T> = x
        .iter()
        .rev()
        .map(|v| T::from_f64(v.to_f64().clamp(-4.0, 4.0)))
        .collect();
    let (want, got) = both(cpu, cuda, |ctx| {
        let (b, e) = (ctx.alloc_upload(&base)?, ctx.alloc_upload(&expo)?);
        let mut out = ctx.alloc::<T>(n)?;
        ctx.pow(&b, &e, &mut out)?;
        out.download()
    })?;
    let ulps = u64::from(BinaryOp::Pow.ulps());
    let ulps = if T::DTYPE.size() == 2 {
        ulps.min(1)
    } else {
        ulps
    };
    same_elements(
        "pow",
        &want,
        &got,
        |w, g| within_ulps(w, g, ulps),
        |i| format!("{:?} ^ {:?}", base[i], expo[i]),
    )?;
    Ok(())
}

/// sum, dot (within tolerance for floats, exactly for integers) and max (exactly) of
/// `a` and `b`; max also of `edgy`, which may hold NaN, infinities and signed zeros.
fn reductions<T: Cross>(
    cpu: &Context,
    cuda: &Context,
    a: &[T],
    b: &[T],
    edgy: &[T],
) -> Result<(), String> {
    let n = a.len();
    let (want, got) = both(cpu, cuda, |ctx| ctx.sum(&ctx.alloc_upload(a)?))?;
    let scale: f64 = a.iter().map(|x| x.to_f64().abs()).sum();
    compare_sum("sum", n, scale, want, got)?;

    let (want, got) = both(cpu, cuda, |ctx| {
        ctx.dot(&ctx.alloc_upload(a)?, &ctx.alloc_upload(b)?)
    })?;
    compare_sum("dot", n, dot_scale(a, b), want, got)?;

    for (name, x) in [("max", a), ("max of edge values", edgy)] {
        let (want, got) = both(cpu, cuda, |ctx| Ok(ctx.max(&ctx.alloc_upload(x)?)))?;
        compare_max(name, x.len(), want, got)?;
        let (want, got) = both(cpu, cuda, |ctx| {
            let dx = ctx.alloc_upload(x)?;
            Ok((
                ctx.min(&dx).ok(),
                ctx.argmin(&dx).ok(),
                ctx.argmax(&dx).ok(),
            ))
        })?;
        let same_min = match (want.0, got.0) {
            (Some(w), Some(g)) => w.same_value(g),
            (w, g) => w.is_none() && g.is_none(),
        };
        if !same_min || want.1 != got.1 || want.2 != got.2 {
            return Err(format!(
                "{name} of {} elements: (min, argmin, argmax) cpu {want:?}, cuda {got:?}",
                x.len()
            ));
        }
    }
    // Per row: sums within the sums' tolerance, min, max and the arg reductions exactly.
    let (rows, cols) = if n.is_multiple_of(4) && n > 0 {
        (4, n / 4)
    } else {
        (1, n)
    };
    let shape = Shape::new(rows, cols);
    let (want, got) = both(cpu, cuda, |ctx| {
        let dx = ctx.alloc_upload(edgy)?;
        let (mut v, mut i) = (ctx.alloc::<T>(rows)?, ctx.alloc::<u32>(rows)?);
        let mut out = Vec::new();
        ctx.row_sum(shape, &ctx.alloc_upload(a)?, &mut v)?;
        let sums = v.download()?;
        if cols > 0 {
            ctx.row_max(shape, &dx, &mut v)?;
            out.push(v.download()?);
            ctx.row_min(shape, &dx, &mut v)?;
            out.push(v.download()?);
        }
        let mut idx = Vec::new();
        if cols > 0 {
            ctx.row_argmax(shape, &dx, &mut i)?;
            idx.push(i.download()?);
            ctx.row_argmin(shape, &dx, &mut i)?;
            idx.push(i.download()?);
        }
        Ok((sums, out, idx))
    })?;
    for r in 0..rows {
        let row = &a[r * cols..(r + 1) * cols];
        let scale: f64 = row.iter().map(|x| x.to_f64().abs()).sum();
        compare_sum("row_sum", cols, scale, want.0[r], got.0[r])?;
    }
    for (name, (w, g)) in ["row_max", "row_min"].iter().zip(want.1.iter().zip(&got.1)) {
        same_elements(name, w, g, T::same_value, |r| format!("row {r}"))?;
    }
    if want.2 != got.2 {
        return Err(format!(
            "row_argmax, row_argmin: cpu {:?}, cuda {:?}",
            want.2, got.2
        ));
    }
    Ok(())
}

/// The sum of the magnitudes of a dot product's terms, each formed as both backends form
/// it (in f64).
pub(super) fn dot_scale<T: Numeric>(a: &[T], b: &[T]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x.to_f64() * y.to_f64()).abs())
        .sum()
}

// ---------------------------------------------------------------------------------------
// Random cases
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Case<T> {
    /// Edge values: element-wise inputs, and `max` with NaNs and infinities.
    a: Vec<T>,
    b: Vec<T>,
    /// Plain values: reductions.
    x: Vec<T>,
    y: Vec<T>,
    alpha: T,
    fill: T,
}

fn case<T: Cross>(max_len: usize) -> impl Strategy<Value = Case<T>> {
    length(max_len)
        .prop_flat_map(|n| {
            (
                vec(T::edgy(), n),
                vec(T::edgy(), n),
                vec(T::plain(), n),
                vec(T::plain(), n),
                T::edgy(),
                T::edgy(),
            )
        })
        .prop_map(|(a, b, x, y, alpha, fill)| Case {
            a,
            b,
            x,
            y,
            alpha,
            fill,
        })
}

/// Cases per property: every case runs on both backends.
const CASES: u32 = 32;

fn random_ops<T: Cross>(cpu: &Context, cuda: &Context) -> gpukit::Result<()> {
    check(CASES, case::<T>(3000), |c| {
        elementwise(cpu, cuda, &c.a, &c.b, c.alpha, c.fill).map_err(fail)?;
        index_ops(cpu, cuda, &c.a, &c.b).map_err(fail)?;
        reductions(cpu, cuda, &c.x, &c.y, &c.a).map_err(fail)
    })
}

/// Inputs of the math functions: mostly where the results are ordinary numbers, the special
/// values, and a share over the whole range (`Cross::edgy`: every exponent, subnormals),
/// where the table's budgets claim to hold too ([`UnaryOp::ulps_at`]; CUDA's libdevice
/// documents its error bounds over the full range, subnormal results included, without
/// `-ftz`, which the built-in modules do not use).
fn math_input<T: CrossFloat>() -> BoxedStrategy<T> {
    prop_oneof![
        6 => (-20.0..20.0f64).prop_map(T::from_f64),
        2 => (-80.0..80.0f64).prop_map(T::from_f64),
        // The whole range: every exponent and sign, subnormals, special values.
        2 => T::edgy(),
        1 => prop::sample::select(vec![
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            1e30,
            -1e30,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ])
        .prop_map(T::from_f64),
    ]
    .boxed()
}

fn random_math<T: CrossFloat>(cpu: &Context, cuda: &Context) -> gpukit::Result<()> {
    let strategy = length(3000).prop_flat_map(|n| vec(math_input::<T>(), n));
    check(CASES, strategy, |x| unary(cpu, cuda, &x).map_err(fail))
}

fn gemm_case<T: CrossFloat>() -> impl Strategy<Value = GemmCase<T>> {
    (
        (1..=64usize, 1..=64usize, 1..=64usize),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        -2.0..2.0f64,
        prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64],
    )
        .prop_flat_map(|((m, n, k), (ta, tb, nan), alpha, beta)| {
            (
                Just((m, n, k, ta, tb, nan, alpha, beta)),
                vec(T::plain(), m * k),
                vec(T::plain(), k * n),
                vec(T::plain(), m * n),
            )
        })
        .prop_map(|((m, n, k, trans_a, trans_b, nan, alpha, beta), a, b, c)| {
            let c = if nan && beta == 0.0 {
                vec![T::from_f64(f64::NAN); m * n]
            } else {
                c
            };
            GemmCase {
                spec: Gemm::new(m, n, k)
                    .transpose(trans_a, trans_b)
                    .scaled(T::from_f64(alpha), T::from_f64(beta)),
                a,
                b,
                c,
            }
        })
}

/// Runs `g` on the CPU and on CUDA: `(cpu's C, cuda's C)`.
pub(super) fn run_gemm<T: Float>(
    cpu: &Context,
    cuda: &Context,
    g: &GemmCase<T>,
) -> Result<(Vec<T>, Vec<T>), String> {
    both(cpu, cuda, |ctx| {
        let a = ctx.alloc_upload(&g.a)?;
        let b = ctx.alloc_upload(&g.b)?;
        let mut c = ctx.alloc_upload(&g.c)?;
        ctx.gemm(g.spec, &a, &b, &mut c)?;
        c.download()
    })
}

fn random_gemm<T: CrossFloat>(cpu: &Context, cuda: &Context) -> gpukit::Result<()> {
    check(CASES, gemm_case::<T>(), |g| {
        let (want, got) = run_gemm(cpu, cuda, &g).map_err(fail)?;
        compare_gemm(&g, &want, &got).map_err(fail)
    })
}

// ---------------------------------------------------------------------------------------
// Large lengths
// ---------------------------------------------------------------------------------------

/// Lengths around one block of 256 threads, around one reduction's most partials
/// (1024 blocks of 256), and past the element-wise grid's cap on a device of
/// `multiprocessors` SMs (32 blocks of 256 per SM), where every kernel's grid-stride loop
/// turns: just past it, and 3.7 times it.
pub(super) const fn large_lengths(multiprocessors: u32) -> [usize; 8] {
    let cap = 32
        * 256
        * if multiprocessors == 0 {
            1
        } else {
            multiprocessors as usize
        };
    [
        1,
        255,
        256,
        257,
        70_001,
        262_145,
        cap + 3,
        cap * 37 / 10 + 37,
    ]
}

/// The large lengths of a 132-SM H100 (up to four million): where the CUDA device does not
/// size them (the comparisons' own tests).
pub(super) const LARGE: [usize; 8] = large_lengths(132);

/// Deterministic values: a xorshift stream from `seed`.
fn stream<T: Cross>(seed: u64, len: usize) -> Vec<T> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            T::from_bits64(s)
        })
        .collect()
}

/// The inputs of one large length.
pub(super) struct LargeInputs<T> {
    /// Sums, dots, `max` and element-wise ops: `PEAKS[0]` at the last element, `PEAKS[1]`
    /// at the start of the last block of partials (the only two, above everything else).
    pub a: Vec<T>,
    /// The other operand: every seventh element zero (divisors), and 1 where `a` has its
    /// peaks, so that dot's largest terms sit there too.
    pub b: Vec<T>,
    /// `b` with its unique maximum `PEAKS[0]` at the start of the last block of partials:
    /// `max` of `a` catches a lost last element, `max` of this a lost last block.
    pub b_peaked: Vec<T>,
    pub alpha: T,
    pub fill: T,
}

/// The large inputs of length `len`, from `seed`.
pub(super) fn large_inputs<T: Cross>(seed: u64, len: usize) -> LargeInputs<T> {
    let mut a: Vec<T> = stream(seed, len);
    let mut b: Vec<T> = stream::<T>(seed + 1, len)
        .into_iter()
        .enumerate()
        .map(|(j, v)| if j % 7 == 3 { T::ZERO } else { v })
        .collect();
    let mut b_peaked = b.clone();
    if len > 0 {
        let (last, block) = (len - 1, last_block_start(len));
        a[block] = T::PEAKS[1];
        a[last] = T::PEAKS[0];
        b[block] = T::from_f64(1.0);
        b[last] = T::from_f64(1.0);
        b_peaked[block] = T::PEAKS[0];
    }
    let [alpha, fill] = [stream::<T>(seed + 2, 1)[0], stream::<T>(seed + 3, 1)[0]];
    LargeInputs {
        a,
        b,
        b_peaked,
        alpha,
        fill,
    }
}

fn large<T: Cross>(cpu: &Context, cuda: &Context, lengths: &[usize]) -> Result<(), String> {
    for (i, &len) in lengths.iter().enumerate() {
        let x = large_inputs::<T>(i as u64 * 4, len);
        elementwise(cpu, cuda, &x.a, &x.b, x.alpha, x.fill)?;
        if len <= 262_145 {
            index_ops(cpu, cuda, &x.a, &x.b)?;
        }
        if !T::DTYPE.is_float() {
            random_ints::<T>(cpu, cuda, len)?;
        }
        reductions(cpu, cuda, &x.a, &x.b, &x.b_peaked)?;
    }
    Ok(())
}

/// The random fills of `len` floats at an offset near a Philox block's 2^32 carry, bit for
/// bit: uniform, normal and dropout.
fn random_floats<T: CrossFloat>(cpu: &Context, cuda: &Context, len: usize) -> Result<(), String> {
    let (seed, offset) = (len as u64 ^ 0xfeed_beef_dead_cafe, (1u64 << 34) - 3);
    let x: Vec<T> = stream(len as u64, len);
    let (want, got) = both(cpu, cuda, |ctx| {
        let mut u = ctx.alloc::<T>(len)?;
        ctx.random_uniform(&mut u, T::from_f64(-1.0), T::from_f64(3.0), seed, offset)?;
        let mut z = ctx.alloc::<T>(len)?;
        ctx.random_normal(&mut z, T::from_f64(0.5), T::from_f64(2.0), seed, offset)?;
        let mut d = ctx.alloc_upload(&x)?;
        ctx.dropout_inplace(&mut d, 0.4, seed, offset)?;
        Ok([u.download()?, z.download()?, d.download()?])
    })?;
    for (name, (w, g)) in ["random_uniform", "random_normal", "dropout"]
        .iter()
        .zip(want.iter().zip(&got))
    {
        same_elements(name, w, g, T::same, |i| {
            format!("position {}", offset + i as u64)
        })?;
    }
    Ok(())
}

/// Comparisons into masks, `select`, `arange`, the column reductions (a `rows x 7`
/// matrix) and `gather_rows` / `one_hot` of rows picked by `b`'s bits: bit for bit (the
/// column sums within the sums' tolerance).
fn index_ops<T: Cross>(cpu: &Context, cuda: &Context, a: &[T], b: &[T]) -> Result<(), String> {
    use gpukit::core::optable::CmpOp;
    use gpukit::ReduceOp;
    let n = a.len();
    let (masks, got) = both(cpu, cuda, |ctx| {
        let (da, db) = (ctx.alloc_upload(a)?, ctx.alloc_upload(b)?);
        let mut all = Vec::new();
        for op in CmpOp::ALL {
            let mut m = ctx.alloc::<u8>(n)?;
            ctx.compare(op, &da, &db, &mut m)?;
            all.extend(m.download()?);
        }
        Ok(all)
    })?;
    if masks != got {
        return Err(format!(
            "comparisons {}: cpu and cuda masks differ",
            T::DTYPE
        ));
    }
    let cols = 7;
    let rows = n / cols;
    let shape = Shape::new(rows, cols);
    let idx: Vec<u32> = b
        .iter()
        .map(|v| (v.to_f64().abs() as u64 % rows.max(1) as u64) as u32)
        .collect();
    let (want, got) = both(cpu, cuda, |ctx| {
        let (da, db) = (ctx.alloc_upload(a)?, ctx.alloc_upload(b)?);
        let mut m = ctx.alloc::<u8>(n)?;
        ctx.gt(&da, &db, &mut m)?;
        let mut sel = ctx.alloc::<T>(n)?;
        ctx.select(&m, &da, &db, &mut sel)?;
        let mut ar = ctx.alloc::<T>(n)?;
        ctx.arange(
            &mut ar,
            a.first().copied().unwrap_or(T::ZERO),
            T::from_f64(3.0),
        )?;
        let mut out = vec![sel.download()?, ar.download()?];
        if rows > 0 {
            let x = ctx.alloc_upload(&a[..rows * cols])?;
            for op in [ReduceOp::Min, ReduceOp::Max, ReduceOp::Sum] {
                let mut c = ctx.alloc::<T>(cols)?;
                ctx.reduce(op, 0, shape, &x, &mut c)?;
                out.push(c.download()?);
            }
            let di = ctx.alloc_upload(&idx)?;
            let mut g = ctx.alloc::<T>(n * cols)?;
            ctx.gather_rows(shape, &x, &di, &mut g)?;
            out.push(g.download()?);
            let classes: Vec<u32> = idx.iter().map(|i| i % 16).collect();
            let mut hot = ctx.alloc::<T>(n * 16)?;
            ctx.one_hot(Shape::new(n, 16), &ctx.alloc_upload(&classes)?, &mut hot)?;
            out.push(hot.download()?);
        }
        Ok(out)
    })?;
    let (perm_cpu, perm_cuda) = both(cpu, cuda, |ctx| {
        let mut p = ctx.alloc::<u32>(n)?;
        ctx.permutation(&mut p, n as u64 * 31)?;
        let mut count = ctx.alloc::<u32>(1)?;
        ctx.count_eq_into(&ctx.alloc_upload(a)?, &ctx.alloc_upload(b)?, &mut count)?;
        let mut all = p.download()?;
        all.extend(count.download()?);
        Ok(all)
    })?;
    if perm_cpu != perm_cuda {
        return Err(format!(
            "permutation of {n} or count_eq {}: cpu and cuda differ",
            T::DTYPE
        ));
    }
    if T::DTYPE.size() >= 4 && rows > 0 {
        // Scatter-add: the same sums, within the atomic sums' tolerance (GPUs add
        // atomically, in the element type, in any order).
        let (want, got) = both(cpu, cuda, |ctx| {
            let src = ctx.alloc_upload(b)?;
            let di = ctx.alloc_upload(&idx[..n / cols])?;
            let mut acc = ctx.alloc_zeros::<T>(rows * cols)?;
            ctx.scatter_add_rows(shape, &src.slice(..(n / cols) * cols)?, &di, &mut acc)?;
            acc.download()
        })?;
        // Each entry's terms: how many, and the finite ones' magnitudes.
        let (mut terms, mut scale) = (vec![1usize; rows], vec![0.0f64; rows * cols]);
        for (r, &i) in idx[..n / cols].iter().enumerate() {
            terms[i as usize] += 1;
            for c in 0..cols {
                let x = b[r * cols + c].to_f64().abs();
                if x.is_finite() {
                    scale[i as usize * cols + c] += x;
                }
            }
        }
        for (k, (w, g)) in want.iter().zip(&got).enumerate() {
            if !T::atomic_sums_agree(*w, *g, terms[k / cols], scale[k]) {
                return Err(format!(
                    "scatter_add_rows {} [{k}]: cpu {w:?}, cuda {g:?}",
                    T::DTYPE
                ));
            }
        }
    }
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        let name = [
            "select",
            "arange",
            "col_min",
            "col_max",
            "col_sum",
            "gather_rows",
            "one_hot",
        ][k];
        if name == "col_sum" {
            for j in 0..cols {
                let scale: f64 = (0..rows).map(|r| a[r * cols + j].to_f64().abs()).sum();
                if !T::sums_agree(w[j], g[j], rows, scale) {
                    return Err(format!(
                        "col_sum {} [{j}]: cpu {:?}, cuda {:?}",
                        T::DTYPE,
                        w[j],
                        g[j]
                    ));
                }
            }
            continue;
        }
        same_elements(name, w, g, T::same, |i| format!("element {i}"))?;
    }
    Ok(())
}

/// The random integers of `len` elements in a range of every width, bit for bit.
fn random_ints<T: Cross>(cpu: &Context, cuda: &Context, len: usize) -> Result<(), String> {
    let (lo, hi) = (T::from_f64(3.0), T::from_f64(100.0));
    let (want, got) = both(cpu, cuda, |ctx| {
        let mut out = ctx.alloc::<T>(len)?;
        ctx.random_integers(&mut out, lo, hi, 99, len as u64)?;
        out.download()
    })?;
    same_elements("random_integers", &want, &got, T::same, |i| {
        format!("element {i}")
    })
}

fn large_math<T: CrossFloat>(
    cpu: &Context,
    cuda: &Context,
    lengths: &[usize],
) -> Result<(), String> {
    for &len in lengths {
        random_floats::<T>(cpu, cuda, len)?;
        // -20..20 in steps of 1/1024.
        let x: Vec<T> = stream::<u64>(len as u64, len)
            .into_iter()
            .map(|v| T::from_f64((v % 40_961) as f64 / 1024.0 - 20.0))
            .collect();
        unary(cpu, cuda, &x)?;
    }
    Ok(())
}

/// A comparison failure outside proptest, as an error the harness reports.
fn failed(message: String) -> gpukit::Error {
    gpukit::Error::Backend {
        backend: "test",
        call: "cpu vs cuda",
        message,
    }
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

macro_rules! random_ops_tests {
    ($($name:ident: $t:ty),*) => {$(
        #[cfg(feature = "cuda")]
        #[test]
        fn $name() {
            cross(random_ops::<$t>);
        }
    )*};
}

random_ops_tests!(
    f32_ops_equal_the_cpu: f32,
    f64_ops_equal_the_cpu: f64,
    f16_ops_equal_the_cpu: f16,
    bf16_ops_equal_the_cpu: bf16,
    i32_ops_equal_the_cpu: i32,
    u8_ops_equal_the_cpu: u8,
    i64_ops_equal_the_cpu: i64,
    u32_ops_equal_the_cpu: u32,
    i8_ops_equal_the_cpu: i8,
    u64_ops_equal_the_cpu: u64
);

macro_rules! float_tests {
    ($($math:ident, $gemm:ident: $t:ty),*) => {$(
        #[cfg(feature = "cuda")]
        #[test]
        fn $math() {
            cross(random_math::<$t>);
        }

        #[cfg(feature = "cuda")]
        #[test]
        fn $gemm() {
            cross(random_gemm::<$t>);
        }
    )*};
}

float_tests!(
    f32_math_matches_the_cpu, f32_gemm_matches_the_cpu: f32,
    f64_math_matches_the_cpu, f64_gemm_matches_the_cpu: f64,
    f16_math_matches_the_cpu, f16_gemm_matches_the_cpu: f16,
    bf16_math_matches_the_cpu, bf16_gemm_matches_the_cpu: bf16
);

#[cfg(feature = "cuda")]
#[test]
fn large_lengths_match_the_cpu() {
    cross(|cpu, cuda| {
        // Sized by the device's grid cap: an emulated device with fewer SMs caps (and
        // loops) at fewer elements.
        let lengths = large_lengths(cuda.info().multiprocessors);
        let l = &lengths[..];
        large::<f32>(cpu, cuda, l).map_err(failed)?;
        large::<f64>(cpu, cuda, l).map_err(failed)?;
        large::<f16>(cpu, cuda, l).map_err(failed)?;
        large::<bf16>(cpu, cuda, l).map_err(failed)?;
        large::<i32>(cpu, cuda, l).map_err(failed)?;
        large::<u8>(cpu, cuda, l).map_err(failed)?;
        large::<i64>(cpu, cuda, l).map_err(failed)?;
        large::<u32>(cpu, cuda, l).map_err(failed)?;
        large::<i8>(cpu, cuda, l).map_err(failed)?;
        large::<u64>(cpu, cuda, l).map_err(failed)?;
        large_math::<f32>(cpu, cuda, l).map_err(failed)?;
        large_math::<f64>(cpu, cuda, l).map_err(failed)?;
        large_math::<f16>(cpu, cuda, l).map_err(failed)?;
        large_math::<bf16>(cpu, cuda, l).map_err(failed)
    });
}

/// The comparisons themselves, on two CPU contexts (which must agree exactly): runs
/// everywhere, so that a comparison that refuses right answers is caught without a GPU.
/// (`cross_rejects.rs` shows them refusing wrong ones.)
#[test]
fn comparisons_accept_two_cpu_contexts() {
    let (Some(one), Some(two)) = (common::cpu(), common::cpu()) else {
        return;
    };
    fn ops<T: Cross>(one: &Context, two: &Context) -> gpukit::Result<()> {
        check(4, case::<T>(300), |c| {
            elementwise(one, two, &c.a, &c.b, c.alpha, c.fill).map_err(fail)?;
            index_ops(one, two, &c.a, &c.b).map_err(fail)?;
            reductions(one, two, &c.x, &c.y, &c.a).map_err(fail)
        })
    }
    let run = || -> gpukit::Result<()> {
        ops::<f32>(&one, &two)?;
        ops::<f16>(&one, &two)?;
        ops::<bf16>(&one, &two)?;
        ops::<i8>(&one, &two)?;
        random_math::<f64>(&one, &two)?;
        random_math::<f16>(&one, &two)?;
        random_gemm::<f32>(&one, &two)?;
        random_gemm::<bf16>(&one, &two)?;
        large_math::<f32>(&one, &two, &LARGE).map_err(failed)?;
        large::<u8>(&one, &two, &LARGE).map_err(failed)?;
        large::<f16>(&one, &two, &LARGE).map_err(failed)
    };
    if let Err(e) = run() {
        panic!("{e}");
    }
}
