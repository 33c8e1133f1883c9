//! Counter-based random numbers: Philox 4x32-10 ([`philox4x32_10`], the generator cuRAND,
//! PyTorch and JAX use) keyed by a seed, and the reference fills of the random fills
//! (`crate::Stream::random_uniform` and its siblings, whose kernels are in
//! `ops/random.rs`): uniform and normal floats, bounded integers and dropout.
//!
//! ## The same bits on every backend
//!
//! Element `i` of a fill at `offset` is a function of `(seed, offset + i)` only: position
//! `j = offset + i` takes `w` words ([`Distribution::words`]) of the Philox block
//! `j / (4 / w)` (the block number is the counter's low 64 bits, the seed the key), starting
//! at word `(j % (4 / w)) * w`. So a fill split in two at any point, the second part at
//! `offset + len1`, gives the bits of the whole fill, and every backend computes every
//! element alone.
//!
//! From the words, the floats use only operations that round the same on every IEEE
//! machine (`+ - * /`, `sqrt`, `floor`, `frexp`, integer-to-float conversions of at most 24
//! or 53 bits), in one order, without fused multiply-add: no platform `log` or `cos`.
//! Box-Muller's `ln` and `cos` are polynomials given here ([`series`]), which each backend
//! evaluates in that order with the coefficients rounded to the compute type. The CPU, CUDA
//! (compiled with `--fmad=false`) and WGSL versions of the kernels therefore give the same bits; a Vulkan
//! driver whose `sqrt` or division is not correctly rounded (WGSL allows 2.5 ulp) may not.
//!
//! - **Uniform** in the compute type `C` (f32 for f32, f16 and bf16; f64 for f64):
//!   `u = k 2^-24` from the top 24 bits of one word (f32), or `k 2^-53` from 53 bits of two
//!   (f64), so `u` is in `[0, 1)` with every value equally likely; the result is
//!   `lo + (hi - lo) u`, rounded (it may round up to `hi` itself).
//! - **Normal** (Box-Muller): `u1 = 1 - u` (in `(0, 1]`, never 0) and `u2 = u` from the
//!   next words; `z = sqrt(-2 ln u1) cos(2 pi u2)`, the result `mean + std z`. `ln` is
//!   `e ln2 + 2 atanh(s)` with `frexp` and the atanh series of `s = (m - 1) / (m + 1)`;
//!   `cos(2 pi t)` reduces `t` to a quadrant and a Taylor series of `theta` in
//!   `[0, pi/2)`. Both are within a few ulp of the exact functions (the tests compare with
//!   f64's), and the samples follow the normal distribution (the tests check its moments
//!   and its CDF).
//! - **Integers** in `[lo, hi)` with `hi - lo <= 2^32`: `lo + floor(w r / 2^64)`, `w` the
//!   64 bits of two words and `r = hi - lo`: within `r / 2^64` (below `2^-32`) of uniform.
//! - **Dropout** with probability `p`: `u` as for uniform; the element is kept, scaled by
//!   `scale` (`1 / (1 - p)`, rounded to the element type by the caller), where `u >= p`,
//!   else 0. The same seed and offset on the gradient give the backward pass.

use crate::element::{Arith, Float, Numeric, Wide};
use crate::DType;

/// Philox's multipliers.
pub const PHILOX_M: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
/// Philox's key increments (the golden ratio and `sqrt(3) - 1`).
pub const PHILOX_W: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
/// Philox's rounds.
pub const PHILOX_ROUNDS: u32 = 10;

/// The high and low words of `a * b`.
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// Philox 4x32 with 10 rounds (Salmon et al., SC'11) of counter `ctr` under `key`.
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..PHILOX_ROUNDS {
        if round > 0 {
            key[0] = key[0].wrapping_add(PHILOX_W[0]);
            key[1] = key[1].wrapping_add(PHILOX_W[1]);
        }
        let (hi0, lo0) = mulhilo(PHILOX_M[0], ctr[0]);
        let (hi1, lo1) = mulhilo(PHILOX_M[1], ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
    }
    ctr
}

/// What a random fill produces ([`crate::Stream::random_uniform`] and its siblings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Floats uniform in `[a, b)` (`b` itself by rounding only).
    Uniform,
    /// Floats normal with mean `a` and standard deviation `b`.
    Normal,
    /// Integers uniform in `[lo, lo + range)` (`range` 0 meaning `2^32`).
    Integers,
    /// The source's elements kept with probability `1 - a` and scaled by `b`, else 0.
    Dropout,
}

impl Distribution {
    /// Lower-case name, for errors.
    pub const fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "random_uniform",
            Distribution::Normal => "random_normal",
            Distribution::Integers => "random_integers",
            Distribution::Dropout => "dropout",
        }
    }

    /// The Philox words one element takes, in a compute type of 64 bits (`wide`) or 32.
    pub const fn words(self, wide: bool) -> u32 {
        match (self, wide) {
            (Distribution::Uniform | Distribution::Dropout, false) => 1,
            (Distribution::Uniform | Distribution::Dropout, true) => 2,
            (Distribution::Normal, false) | (Distribution::Integers, _) => 2,
            (Distribution::Normal, true) => 4,
        }
    }
}

/// Philox's key of a seed: its low and high words.
pub fn seed_key(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// The `words` words (1, 2 or 4) of position `index` of the stream keyed by `seed`.
pub fn element_words(seed: u64, index: u64, words: u32) -> [u32; 4] {
    let per = u64::from(4 / words);
    let block = index / per;
    let out = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], seed_key(seed));
    let first = ((index % per) as u32 * words) as usize;
    let mut w = [0; 4];
    w[..words as usize].copy_from_slice(&out[first..first + words as usize]);
    w
}

/// The polynomial coefficients of Box-Muller's `ln` and `cos` for a compute type of 64 bits
/// (`wide`) or 32, as exact f64 values, lowest degree first; a backend rounds each to the
/// compute type and evaluates by Horner's rule from the highest.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `1 / (2k + 1)`: `atanh(s) = s (1 + s^2/3 + s^4/5 + ...)`.
    pub ln: Vec<f64>,
    /// `(-1)^k / (2k)!`: `cos(t)` in powers of `t^2`.
    pub cos: Vec<f64>,
    /// `(-1)^k / (2k + 1)!`: `sin(t) / t` in powers of `t^2`.
    pub sin: Vec<f64>,
}

/// Box-Muller's series for the compute type: 5 atanh terms and 9 of cos and sin in f32
/// (the first term left out is below `1e-9` relative), 12 and 13 in f64 (below `1e-18`).
pub fn series(wide: bool) -> Series {
    let (ln, trig) = if wide { (12, 13) } else { (5, 9) };
    let mut fact = 1.0f64;
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for k in 0..trig {
        // fact = (2k)! here.
        if k > 0 {
            fact *= (2 * k - 1) as f64 * (2 * k) as f64;
        }
        let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
        cos.push(sign / fact);
        sin.push(sign / (fact * (2 * k + 1) as f64));
    }
    Series {
        ln: (0..ln).map(|k| 1.0 / (2 * k + 1) as f64).collect(),
        cos,
        sin,
    }
}

/// The f32 and f64 operations the fills use beyond [`Arith`]: each exact or correctly
/// rounded, so the same on every backend.
trait Unit: Arith {
    const WIDE: bool;
    fn of(v: f64) -> Self;
    fn from_i32(v: i32) -> Self;
    fn sqrt(self) -> Self;
    fn floor(self) -> Self;
    /// `(fr, e)` with `self = fr 2^e`, `fr` in `[0.5, 1)` (positive normal `self`).
    fn frexp(self) -> (Self, i32);
    /// `u` in `[0, 1)` from the first one (f32) or two (f64) words.
    fn unit(w: &[u32]) -> Self;
    fn to64(self) -> f64;
}

impl Unit for f32 {
    const WIDE: bool = false;
    fn of(v: f64) -> f32 {
        v as f32
    }
    fn from_i32(v: i32) -> f32 {
        v as f32
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    fn floor(self) -> f32 {
        f32::floor(self)
    }
    fn frexp(self) -> (f32, i32) {
        let b = self.to_bits();
        let e = ((b >> 23) & 0xff) as i32 - 126;
        (f32::from_bits((b & 0x807f_ffff) | 0x3f00_0000), e)
    }
    fn unit(w: &[u32]) -> f32 {
        (w[0] >> 8) as f32 * (1.0 / 16_777_216.0)
    }
    fn to64(self) -> f64 {
        f64::from(self)
    }
}

impl Unit for f64 {
    const WIDE: bool = true;
    fn of(v: f64) -> f64 {
        v
    }
    fn from_i32(v: i32) -> f64 {
        f64::from(v)
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn floor(self) -> f64 {
        f64::floor(self)
    }
    fn frexp(self) -> (f64, i32) {
        let b = self.to_bits();
        let e = ((b >> 52) & 0x7ff) as i32 - 1022;
        (
            f64::from_bits((b & 0x800f_ffff_ffff_ffff) | 0x3fe0_0000_0000_0000),
            e,
        )
    }
    fn unit(w: &[u32]) -> f64 {
        f64::from(w[1]) * (1.0 / 4_294_967_296.0) + f64::from(w[0] >> 11) * 2f64.powi(-53)
    }
    fn to64(self) -> f64 {
        self
    }
}

/// `c[0] + x (c[1] + x (c[2] + ...))`, each coefficient rounded to `F`.
fn horner<F: Unit>(c: &[f64], x: F) -> F {
    let mut acc = F::of(c[c.len() - 1]);
    for &k in c[..c.len() - 1].iter().rev() {
        acc = acc.mul(x).add(F::of(k));
    }
    acc
}

/// `ln(u)` for `u` in `(0, 1]` (see the module docs): `e ln2 + 2 s atanh_series(s^2)`.
fn ln_unit<F: Unit>(u: F, s: &Series) -> F {
    let (fr, ex) = u.frexp();
    let (m, e) = if fr.mul(F::of(2.0)) > F::of(std::f64::consts::SQRT_2) {
        (fr, ex)
    } else {
        (fr.mul(F::of(2.0)), ex - 1)
    };
    let t = m.sub(F::ONE).div(m.add(F::ONE));
    let p = horner(&s.ln, t.mul(t));
    F::from_i32(e)
        .mul(F::of(std::f64::consts::LN_2))
        .add(t.add(t).mul(p))
}

/// `cos(2 pi t)` for `t` in `[0, 1)` (see the module docs).
fn cos_2pi<F: Unit>(t: F, s: &Series) -> F {
    let t4 = t.mul(F::of(4.0));
    let q = t4.floor();
    let th = t4.sub(q).mul(F::of(std::f64::consts::FRAC_PI_2));
    let th2 = th.mul(th);
    let c = horner(&s.cos, th2);
    let sn = th.mul(horner(&s.sin, th2));
    match q.to64() as u32 {
        0 => c,
        1 => sn.neg(),
        2 => c.neg(),
        _ => sn,
    }
}

/// A standard normal sample from `2 * k` words, `k` per uniform.
fn normal<F: Unit>(w: &[u32], s: &Series) -> F {
    let k = if F::WIDE { 2 } else { 1 };
    let u1 = F::ONE.sub(F::unit(&w[..k]));
    let u2 = F::unit(&w[k..2 * k]);
    let r = F::of(-2.0).mul(ln_unit(u1, s)).sqrt();
    r.mul(cos_2pi(u2, s))
}

/// The reference of a float fill: [`Distribution::Uniform`], [`Distribution::Normal`] or
/// [`Distribution::Dropout`] (with `src`) of `out.len()` elements at `offset` (see the
/// module docs). `Integers` leaves `out` as it is (floats have none).
pub fn random_floats<T: Float>(
    dist: Distribution,
    (seed, offset): (u64, u64),
    (a, b): (T, T),
    src: Option<&[T]>,
    out: &mut [T],
) {
    if T::DTYPE == DType::F64 {
        fill_floats::<T, f64>(dist, (seed, offset), (a, b), src, out);
    } else {
        fill_floats::<T, f32>(dist, (seed, offset), (a, b), src, out);
    }
}

fn fill_floats<T: Float, F: Unit>(
    dist: Distribution,
    (seed, offset): (u64, u64),
    (a, b): (T, T),
    src: Option<&[T]>,
    out: &mut [T],
) {
    use crate::element::Real;
    let words = dist.words(F::WIDE);
    let s = series(F::WIDE);
    let (ca, cb) = (a.load(), b.load());
    for (i, o) in out.iter_mut().enumerate() {
        let w = element_words(seed, offset.wrapping_add(i as u64), words);
        let v = match dist {
            Distribution::Uniform => {
                let u = T::Compute::from_f64(F::unit(&w).to64());
                ca.add(cb.sub(ca).mul(u))
            }
            Distribution::Normal => {
                let z = T::Compute::from_f64(normal::<F>(&w, &s).to64());
                ca.add(cb.mul(z))
            }
            Distribution::Dropout => {
                let x = src.map_or(o.load(), |s| s[i].load());
                if F::unit(&w).to64() >= ca.to_f64() {
                    x.mul(cb)
                } else {
                    T::Compute::ZERO
                }
            }
            Distribution::Integers => continue,
        };
        *o = T::store(v);
    }
}

/// `floor(w r / 2^64)` for the 64 bits `w = (w[1] << 32) | w[0]` and `r` (0: `2^32`).
pub fn bounded(w: [u32; 2], r: u32) -> u32 {
    if r == 0 {
        return w[1];
    }
    let v = (u64::from(w[1]) << 32) | u64::from(w[0]);
    ((u128::from(v) * u128::from(r)) >> 64) as u32
}

/// The reference of an integer fill: `lo + bounded(words, range)` for each element (see the
/// module docs), in `T`'s wrapping arithmetic.
pub fn random_integers<T: Numeric>((seed, offset): (u64, u64), lo: T, range: u32, out: &mut [T]) {
    let lo = match lo.to_wide() {
        Wide::Int(v) => v,
        Wide::Float(v) => v as i128,
    };
    let words = Distribution::Integers.words(false);
    for (i, o) in out.iter_mut().enumerate() {
        let w = element_words(seed, offset.wrapping_add(i as u64), words);
        *o = T::from_wide(Wide::Int(lo + i128::from(bounded([w[0], w[1]], range))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for Philox 4x32-10.
    #[test]
    fn philox_matches_random123() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    /// The polynomial `ln` and `cos` against f64's, over their whole input ranges.
    #[test]
    fn ln_and_cos_are_within_a_few_ulp() {
        for wide in [false, true] {
            let s = series(wide);
            for k in 0..=100_000u32 {
                let t = f64::from(k) / 100_001.0;
                let u = 1.0 - t;
                if wide {
                    let (l, c) = (ln_unit(u, &s), cos_2pi(t, &s));
                    assert!((l - u.ln()).abs() <= 4.0 * f64::EPSILON * u.ln().abs().max(1.0));
                    let want = (2.0 * std::f64::consts::PI * t).cos();
                    assert!(
                        (c - want).abs() <= 4.0 * f64::EPSILON,
                        "cos 2pi {t}: {c} {want}"
                    );
                } else {
                    let (u32_, t32) = (u as f32, t as f32);
                    let l = ln_unit(u32_, &s);
                    let want = f64::from(u32_).ln();
                    assert!(
                        (f64::from(l) - want).abs() <= 4e-7 * want.abs().max(1.0),
                        "ln {u32_}"
                    );
                    let c = cos_2pi(t32, &s);
                    let want = (2.0 * std::f64::consts::PI * f64::from(t32)).cos();
                    assert!(
                        (f64::from(c) - want).abs() <= 4e-7,
                        "cos 2pi {t32}: {c} {want}"
                    );
                }
            }
            // The smallest u1 each width can draw.
            let tiny = if wide { 2f64.powi(-53) } else { 2f64.powi(-24) };
            let l = if wide {
                ln_unit(tiny, &s)
            } else {
                f64::from(ln_unit(tiny as f32, &s))
            };
            assert!((l - tiny.ln()).abs() < 1e-5, "{l}");
        }
    }

    /// A fill split at any point gives the bits of the whole fill.
    #[test]
    fn fills_split_anywhere_equal_the_whole() {
        for dist in [Distribution::Uniform, Distribution::Normal] {
            let mut whole = vec![0f32; 37];
            random_floats(dist, (7, 5), (0.0, 1.0), None, &mut whole);
            for cut in [1, 2, 3, 4, 17] {
                let mut parts = vec![0f32; 37];
                let (a, b) = parts.split_at_mut(cut);
                random_floats(dist, (7, 5), (0.0, 1.0), None, a);
                random_floats(dist, (7, 5 + cut as u64), (0.0, 1.0), None, b);
                assert_eq!(parts, whole, "{dist:?} cut at {cut}");
            }
        }
    }

    /// Where `ln`'s mantissa reduction switches: at exactly the rounded `sqrt(2)` it keeps
    /// `m = 2 fr` (the CUDA and WGSL versions compare with `>` too); the other choice is also
    /// `ln(u)` but one ulp off in both widths, which would break the same-bits promise.
    #[test]
    fn ln_reduces_at_sqrt2_like_the_device_versions() {
        let u = std::f32::consts::SQRT_2 / 2.0;
        assert_eq!(ln_unit(u, &series(false)).to_bits(), 0xbeb1_7218);
        let u = std::f64::consts::SQRT_2 / 2.0;
        assert_eq!(ln_unit(u, &series(true)).to_bits(), 0xbfd6_2e42_fefa_39ed);
    }

    /// Position `j` of a stream taking `w` words per element: words `(j % (4 / w)) * w ..`
    /// of block `j / (4 / w)`, the block number in the counter's low 64 bits.
    #[test]
    fn elements_take_their_words_from_their_block() {
        let want = |seed: u64, j: u64, w: u64| -> Vec<u32> {
            let (block, first) = (j / (4 / w), (j % (4 / w) * w) as usize);
            let out = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], seed_key(seed));
            out[first..first + w as usize].to_vec()
        };
        for (seed, j) in [(0, 0), (3, 5), (1 << 40 | 7, 11), (9, (1 << 34) + 6)] {
            for w in [1u32, 2, 4] {
                let got = element_words(seed, j, w);
                assert_eq!(
                    got[..w as usize],
                    want(seed, j, u64::from(w)),
                    "{seed} {j} {w}"
                );
                assert!(got[w as usize..].iter().all(|&x| x == 0));
            }
        }
        assert_eq!(seed_key(0x1234_5678_9abc_def0), [0x9abc_def0, 0x1234_5678]);
        use Distribution::*;
        let words = [Uniform, Dropout, Normal, Integers].map(|d| [d.words(false), d.words(true)]);
        assert_eq!(words, [[1, 2], [1, 2], [2, 4], [2, 2]]);
        let names = [Uniform, Normal, Integers, Dropout].map(Distribution::name);
        assert_eq!(
            names,
            [
                "random_uniform",
                "random_normal",
                "random_integers",
                "dropout"
            ]
        );
    }

    /// The series' coefficients: `1 / (2k + 1)`, `(-1)^k / (2k)!` and `(-1)^k / (2k + 1)!`.
    #[test]
    fn the_series_hold_their_terms() {
        for (wide, ln, trig) in [(false, 5, 9), (true, 12, 13)] {
            let s = series(wide);
            assert_eq!((s.ln.len(), s.cos.len(), s.sin.len()), (ln, trig, trig));
            let mut fact = 1.0f64;
            for k in 0..trig {
                if k > 0 {
                    fact *= (2 * k * (2 * k - 1)) as f64;
                }
                let sign = if k % 2 == 1 { -1.0 } else { 1.0 };
                assert_eq!(s.cos[k], sign / fact, "cos {k}");
                assert_eq!(s.sin[k], sign / (fact * (2 * k + 1) as f64), "sin {k}");
            }
            for k in 0..ln {
                assert_eq!(s.ln[k], 1.0 / (2 * k + 1) as f64, "ln {k}");
            }
        }
    }

    /// f32 uniform: the top 24 bits of the element's word over `2^24`; f64: 53 bits of two
    /// words over `2^53`; then `lo + (hi - lo) u` in the compute type.
    fn unit32(w: u32) -> f64 {
        f64::from(w >> 8) / 16_777_216.0
    }
    fn unit64(w: [u32; 2]) -> f64 {
        ((u64::from(w[1]) << 21) | u64::from(w[0] >> 11)) as f64 / 9_007_199_254_740_992.0
    }

    #[test]
    fn uniform_and_dropout_follow_their_words() {
        let (seed, offset) = (42, 3);
        let mut f = vec![0f32; 64];
        random_floats(
            Distribution::Uniform,
            (seed, offset),
            (2.0, 5.0),
            None,
            &mut f,
        );
        let mut d = vec![0f64; 64];
        random_floats(
            Distribution::Uniform,
            (seed, offset),
            (-1.0, 1.0),
            None,
            &mut d,
        );
        for i in 0..64 {
            let j = offset + i as u64;
            let u = unit32(element_words(seed, j, 1)[0]);
            assert_eq!(f[i], 2.0 + 3.0 * u as f32, "f32 {i}");
            let w = element_words(seed, j, 2);
            assert_eq!(d[i], -1.0 + 2.0 * unit64([w[0], w[1]]), "f64 {i}");
        }
        let src: Vec<f32> = (0..64).map(|i| i as f32 + 1.0).collect();
        let mut out = vec![9f32; 64];
        random_floats(
            Distribution::Dropout,
            (seed, offset),
            (0.3, 2.0),
            Some(&src),
            &mut out,
        );
        let mut in_place = src.clone();
        random_floats(
            Distribution::Dropout,
            (seed, offset),
            (0.3, 2.0),
            None,
            &mut in_place,
        );
        assert_eq!(in_place, out, "in place");
        let mut kept = 0;
        for i in 0..64 {
            let u = unit32(element_words(seed, offset + i as u64, 1)[0]);
            let want = if u >= 0.3 { src[i] * 2.0 } else { 0.0 };
            assert_eq!(out[i], want, "dropout {i} (u = {u})");
            kept += usize::from(u >= 0.3);
        }
        assert!((30..64).contains(&kept), "{kept} of 64 kept");
        // A dropout probability that is exactly some element's u keeps that element.
        let u0 = unit32(element_words(seed, offset, 1)[0]) as f32;
        let mut one = [1.0f32];
        random_floats(
            Distribution::Dropout,
            (seed, offset),
            (u0, 1.0),
            None,
            &mut one,
        );
        assert_eq!(one, [1.0]);
        let mut ints = [7f32; 3];
        random_floats(
            Distribution::Integers,
            (seed, offset),
            (0.0, 1.0),
            None,
            &mut ints,
        );
        assert_eq!(ints, [7.0; 3], "floats have no integer fill");
    }

    /// Normal samples against Box-Muller computed in f64 with the platform's `ln` and `cos`
    /// from the same words, and their first two moments.
    #[test]
    fn normal_samples_are_box_muller() {
        let n = 20_000;
        let (seed, offset) = (5, 1);
        let mut f = vec![0f32; n];
        random_floats(
            Distribution::Normal,
            (seed, offset),
            (1.0, 2.0),
            None,
            &mut f,
        );
        let mut d = vec![0f64; n];
        random_floats(
            Distribution::Normal,
            (seed, offset),
            (0.0, 1.0),
            None,
            &mut d,
        );
        let box_muller =
            |u1: f64, u2: f64| (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let (mut sum, mut sq) = (0.0, 0.0);
        for i in 0..n {
            let j = offset + i as u64;
            let w = element_words(seed, j, 2);
            let z = box_muller(1.0 - unit32(w[0]), unit32(w[1]));
            let got = (f64::from(f[i]) - 1.0) / 2.0;
            assert!(
                (got - z).abs() <= 1e-5 * z.abs().max(1.0),
                "f32 {i}: {got} vs {z}"
            );
            let w = element_words(seed, j, 4);
            let z = box_muller(1.0 - unit64([w[0], w[1]]), unit64([w[2], w[3]]));
            assert!(
                (d[i] - z).abs() <= 1e-12 * z.abs().max(1.0),
                "f64 {i}: {} vs {z}",
                d[i]
            );
            sum += d[i];
            sq += d[i] * d[i];
        }
        let mean = sum / n as f64;
        let var = sq / n as f64 - mean * mean;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }

    #[test]
    fn bounded_integers_cover_the_range() {
        assert_eq!(bounded([0, 0], 10), 0);
        assert_eq!(bounded([u32::MAX, u32::MAX], 10), 9);
        assert_eq!(bounded([5, 123], 0), 123);
        let mut out = vec![0i32; 10_000];
        random_integers((1, 0), -3, 7, &mut out);
        for v in -3..4 {
            let n = out.iter().filter(|&&x| x == v).count();
            assert!((1_200..1_650).contains(&n), "{v}: {n} of 10000");
        }
        assert!(out.iter().all(|&x| (-3..4).contains(&x)));
        // Element by element: `lo + bounded(words)`, wrapping in the element type.
        let mut u = [0u8; 8];
        random_integers((2, 9), 250u8, 10, &mut u);
        for (i, &v) in u.iter().enumerate() {
            let w = element_words(2, 9 + i as u64, 2);
            assert_eq!(
                v,
                250u8.wrapping_add(bounded([w[0], w[1]], 10) as u8),
                "{i}"
            );
        }
        assert_eq!(bounded([0, 1 << 31], 10), 5);
        assert_eq!(bounded([0, 1 << 31], 0), 1 << 31);
    }
}
