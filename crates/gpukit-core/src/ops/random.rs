//! Random fills on the device (Philox 4x32-10, the same bits on every backend: see
//! [`crate::optable::Distribution`]'s module), dropout, and [`Rng`], a seed and a position
//! that advances by each fill's length, with the usual weight initialisations.

use gpukit_macros::kernel;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::{DType, Float, Numeric, Wide};
use crate::error::same_len;
use crate::error::{Error, Result};
use crate::kernel::{In, KernelSpec, Out, Reads, Value, Writes};
use crate::native::split::{part, pieces, MATH};
use crate::optable::{self, Distribution};
use crate::stream::Stream;

fn invalid(op: &'static str, arg: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, arg, message }
}

/// `Ok` when `v` is a finite number.
fn finite<T: Numeric>(op: &'static str, arg: &'static str, v: T) -> Result<()> {
    let f = v.to_f64();
    if f.is_finite() {
        Ok(())
    } else {
        Err(invalid(op, arg, format!("{f} is not a finite number")))
    }
}

/// Codes of the float fills' `dist` parameter.
const UNIFORM: u32 = 0;
const NORMAL: u32 = 1;
const DROPOUT: u32 = 3;

/// The uniform `u` in `[0, 1)` of one word in f32: its top 24 bits times `2^-24` (the
/// second word is unused).
#[kernel(device, core = "crate")]
fn unit32(w0: u32, _w1: u32) -> f32 {
    ((w0 >> 8) as f32) * 0.000000059604645
}

/// The uniform `u` in `[0, 1)` of two words in f64: 53 bits times `2^-53`.
#[kernel(device, core = "crate")]
fn unit64(w0: u32, w1: u32) -> f64 {
    (w1 as f64) * 0.00000000023283064365386963
        + ((w0 >> 11) as f64) * 0.00000000000000011102230246251565
}

/// Box-Muller's `ln(u)` and `cos(2 pi t)` in one float type (see
/// [`crate::optable::Distribution`]'s module: the same operations in the same order as the
/// reference, the series' coefficients listed from the highest degree).
macro_rules! box_muller {
    ($ln:ident, $cos:ident, $f:ident, $sqrt2:literal, $ln2:literal, $pi2:literal,
     ln: [$l0:literal $(, $l:literal)*], cos: [$c0:literal $(, $c:literal)*],
     sin: [$s0:literal $(, $s:literal)*]) => {
        /// `ln(u)` for `u` in `(0, 1]`: `e ln2 + 2 atanh(s)`, `frexp` by exact scalings.
        #[kernel(device, core = "crate")]
        fn $ln(u: $f) -> $f {
            let mut fr = u;
            let mut ex: i32 = 0;
            while fr >= 1.0 {
                fr = fr * 0.5;
                ex += 1;
            }
            while fr < 0.5 {
                fr = fr * 2.0;
                ex -= 1;
            }
            let mut m = fr * 2.0;
            let mut e = ex - 1;
            if fr * 2.0 > $sqrt2 {
                m = fr;
                e = ex;
            }
            let t = (m - 1.0) / (m + 1.0);
            let x = t * t;
            let mut p: $f = $l0;
            $(p = p * x + $l;)*
            (e as $f) * $ln2 + (t + t) * p
        }

        /// `cos(2 pi t)` for `t` in `[0, 1)`: the quadrant, then the series in `[0, pi/2)`.
        #[kernel(device, core = "crate")]
        fn $cos(t: $f) -> $f {
            let t4 = t * 4.0;
            let q = t4.floor();
            let th = (t4 - q) * $pi2;
            let th2 = th * th;
            let mut c: $f = $c0;
            $(c = c * th2 + $c;)*
            let mut s: $f = $s0;
            $(s = s * th2 + $s;)*
            let sn = th * s;
            let quadrant = q as u32;
            let mut r = sn;
            if quadrant == 0 {
                r = c;
            } else if quadrant == 1 {
                r = -sn;
            } else if quadrant == 2 {
                r = -c;
            }
            r
        }
    };
}

box_muller!(
    ln32, cos32, f32, 1.4142135, 0.6931472, 1.5707964,
    ln: [0.11111111, 0.14285715, 0.2, 0.33333334, 1.0],
    cos: [4.7794773e-14, -1.1470745e-11, 2.0876756e-09, -2.755732e-07, 2.4801588e-05,
          -0.0013888889, 0.041666668, -0.5, 1.0],
    sin: [2.8114574e-15, -7.6471636e-13, 1.6059044e-10, -2.5052108e-08, 2.7557319e-06,
          -0.0001984127, 0.008333334, -0.16666667, 1.0]
);
box_muller!(
    ln64, cos64, f64, 1.4142135623730951, 0.6931471805599453, 1.5707963267948966,
    ln: [0.043478260869565216, 0.047619047619047616, 0.05263157894736842,
         0.058823529411764705, 0.06666666666666667, 0.07692307692307693, 0.09090909090909091,
         0.1111111111111111, 0.14285714285714285, 0.2, 0.3333333333333333, 1.0],
    cos: [1.6117375710961184e-24, -8.896791392450574e-22, 4.110317623312165e-19,
          -1.5619206968586225e-16, 4.779477332387385e-14, -1.1470745597729725e-11,
          2.08767569878681e-09, -2.755731922398589e-07, 2.48015873015873e-05,
          -0.001388888888888889, 0.041666666666666664, -0.5, 1.0],
    sin: [6.446950284384474e-26, -3.8681701706306835e-23, 1.9572941063391263e-20,
          -8.22063524662433e-18, 2.8114572543455206e-15, -7.647163731819816e-13,
          1.6059043836821613e-10, -2.505210838544172e-08, 2.7557319223985893e-06,
          -0.0001984126984126984, 0.008333333333333333, -0.16666666666666666, 1.0]
);

/// `floor(w r / 2^64)` for the 64 bits `w = (w1 << 32) | w0` and `r` (0: `2^32`), in
/// 32-bit words ([`crate::optable::bounded`]).
#[kernel(device, core = "crate")]
fn bounded32(w0: u32, w1: u32, r: u32) -> u32 {
    if r == 0 {
        return w1;
    }
    let low = w0.mul_hi(r);
    let s = w1 * r + low;
    let mut carry: u32 = 0;
    if s < low {
        carry = 1;
    }
    w1.mul_hi(r) + carry
}

/// A kernel of Philox 4x32-10 blocks: after `$pre`, while `i` (from `global_x()`) is below
/// `out.len()`, `$counter` sets the counter `ctr0`..`ctr3`, the block under the key `k0`,
/// `k1` is computed into `c0`..`c3`, and `$body` uses it and advances `i` when it is done
/// with the element (the random fills take one block per element, the permutation one per
/// round of its Feistel network).
macro_rules! philox_kernel {
    ($(#[$doc:meta])* $vis:vis $name:ident $(<$t:ident: $bound:ident>)?, ($($params:tt)*),
     { $($pre:tt)* }, { $($counter:tt)* }, { $($body:tt)* }) => {
        $(#[$doc])*
        #[kernel(core = "crate")]
        $vis fn $name$(<$t: $bound>)?($($params)*) {
            $($pre)*
            let stride = grid_dim_x() * block_dim_x();
            let mut i = global_x();
            while i < out.len() {
                $($counter)*
                let mut c0 = ctr0;
                let mut c1 = ctr1;
                let mut c2 = ctr2;
                let mut c3 = ctr3;
                let mut q0 = k0;
                let mut q1 = k1;
                for round in 0..10 {
                    if round > 0 {
                        q0 += 2654435769;
                        q1 += 3144134277;
                    }
                    let hi0 = c0.mul_hi(3528531795);
                    let lo0 = c0 * 3528531795;
                    let hi1 = c2.mul_hi(3449720151);
                    let lo1 = c2 * 3449720151;
                    c0 = hi1 ^ c1 ^ q0;
                    c1 = lo1;
                    c2 = hi0 ^ c3 ^ q1;
                    c3 = lo0;
                }
                $($body)*
            }
        }
    };
}

/// A fill kernel: after `$pre` (which sets `words`), each element `i` of `out` takes the
/// words of stream position `offset + i` (`offset` in two words, `off_lo` and `off_hi`,
/// `words` words to a position: `4 / words` positions to a Philox block keyed by `k0`,
/// `k1`) and runs `$body`, `w0`..`w3` its words.
macro_rules! fill_kernel {
    ($(#[$doc:meta])* $name:ident<$t:ident: $bound:ident>, ($($params:tt)*),
     { $($pre:tt)* }, { $($body:tt)* }) => {
        philox_kernel!(
            $(#[$doc])* $name<$t: $bound>, ($($params)*),
            {
                $($pre)*
                let per = 4 / words;
                let shift = per >> 1;
            },
            {
                // The position `offset + i` (below 2^32 elements to a launch), its block
                // and its first word there.
                let lo = off_lo + i as u32;
                let mut hi = off_hi;
                if lo < off_lo {
                    hi += 1;
                }
                let mut ctr0 = lo;
                if shift > 0 {
                    ctr0 = (lo >> shift) | (hi << (32 - shift));
                }
                let ctr1 = hi >> shift;
                let ctr2: u32 = 0;
                let ctr3: u32 = 0;
                let first = (lo & (per - 1)) * words;
            },
            {
                let mut w0 = c0;
                let mut w1 = c1;
                let w2 = c2;
                let w3 = c3;
                if first == 1 {
                    w0 = c1;
                    w1 = c2;
                } else if first == 2 {
                    w0 = c2;
                    w1 = c3;
                } else if first == 3 {
                    w0 = c3;
                }
                $($body)*
                i += stride;
            }
        );
    };
}

philox_kernel!(
    /// Positions `base..base + out.len()` of the random permutation of `0..=last` keyed by
    /// `(k0, k1)` ([`optable::permutation`]): each position walks its cycle of the keyed
    /// Feistel network of half width `h` (4 rounds, each `F` the first word of the Philox
    /// block of `(r, round, 0, 0)`, masked to `h` bits) until a value of `last` or less; one
    /// round per block.
    pub(super) permute,
    (out: &mut [u32], k0: u32, k1: u32, h: u32, last: u32, base: u32),
    {
        let mask = (1u32 << h) - 1;
        let mut v = base + global_x() as u32;
        let mut l = v >> h;
        let mut r = v & mask;
        let mut step: u32 = 0;
    },
    {
        let ctr0 = r;
        let ctr1 = step;
        let ctr2: u32 = 0;
        let ctr3: u32 = 0;
    },
    {
        let t = l ^ (c0 & mask);
        l = r;
        r = t;
        step += 1;
        if step == 4 {
            v = (l << h) | r;
            step = 0;
            if v <= last {
                out[i] = v;
                i += stride;
                v = base + i as u32;
            }
            l = v >> h;
            r = v & mask;
        }
    }
);

/// The float fills of one uniform type: `$unit`, `$ln` and `$cos` its functions, `$wide`
/// whether it is f64 (two words to a uniform), the input `$src` (dropout from an array) or
/// `$own` (dropout in place).
macro_rules! float_fill {
    ($(#[$doc:meta])* $name:ident, $unit:ident, $ln:ident, $cos:ident, $f:ident, $wide:literal,
     $per_unit:literal, src: $($src:ident)?, own: $($own:ident $code:ident)?) => {
        fill_kernel!(
            $(#[$doc])* $name<T: Float>,
            ($($src: &[T],)? out: &mut [T], $($code: u32,)? k0: u32, k1: u32, off_lo: u32,
             off_hi: u32, a: T, b: T),
            {
                let mut mode: u32 = 3;
                $(mode = $code;)?
                let mut words: u32 = $per_unit;
                if mode == 1 {
                    words = 2 * $per_unit;
                }
            },
            {
                let mut v: T = 0.0;
                if mode == 0 {
                    let u: $f = $unit(w0, w1);
                    v = a + (b - a) * (u as T);
                } else if mode == 1 {
                    let first: $f = $unit(w0, w1);
                    let u1 = 1.0 - first;
                    let mut u2: $f = $unit(w1, w2);
                    if $wide {
                        u2 = $unit(w2, w3);
                    }
                    let l: $f = $ln(u1);
                    let r = (-2.0 * l).sqrt();
                    let c: $f = $cos(u2);
                    let z = r * c;
                    v = a + b * (z as T);
                } else {
                    let mut held: T = 0.0;
                    $(held = $src[i];)?
                    $(held = $own[i];)?
                    let u: $f = $unit(w0, w1);
                    if u >= (a as $f) {
                        v = held * b;
                    }
                }
                out[i] = v;
            }
        );
    };
}

float_fill!(
    /// Uniform (`code` [`UNIFORM`]) or normal ([`NORMAL`]) floats in `[a, b)` or of mean
    /// `a` and deviation `b`, or dropout in place ([`DROPOUT`]: kept where the uniform is `a`
    /// or more, scaled by `b`), from f32 uniforms: the fills of f32, f16 and bf16.
    fill32, unit32, ln32, cos32, f32, false, 1, src:, own: out code
);
float_fill!(
    /// Dropout of `x` into `out` ([`fill32`]'s).
    dropout32, unit32, ln32, cos32, f32, false, 1, src: x, own:
);
float_fill!(
    /// [`fill32`] from f64 uniforms: the fills of f64.
    fill64, unit64, ln64, cos64, f64, true, 2, src:, own: out code
);
float_fill!(
    /// [`dropout32`] from f64 uniforms.
    dropout64, unit64, ln64, cos64, f64, true, 2, src: x, own:
);
fill_kernel!(
    /// Integers `a + bounded(w, range)`: uniform in `[a, a + range)` (`range` 0: `2^32`),
    /// wrapping in `T`.
    fill_ints<T: Numeric>,
    (out: &mut [T], range: u32, k0: u32, k1: u32, off_lo: u32, off_hi: u32, a: T),
    {
        let words: u32 = 2;
    },
    {
        out[i] = a + (bounded32(w0, w1, range) as T);
    }
);

/// The signature of the fill kernels writing `out` only, and of dropout from `x`.
type Fill<T> = (Out<T>, u32, u32, u32, u32, u32, T, T);
type Dropout<T> = (In<T>, Out<T>, u32, u32, u32, u32, T, T);
type Ints<T> = (Out<T>, u32, u32, u32, u32, u32, T);

/// The 64-bit value of the words `lo` and `hi` (a seed or an offset passed to a kernel as
/// two `u32`s, as [`optable::seed_key`] splits a seed).
pub(super) fn join(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// The distribution of a float fill's `code`.
fn float_dist(code: u32) -> Distribution {
    match code {
        UNIFORM => Distribution::Uniform,
        NORMAL => Distribution::Normal,
        _ => Distribution::Dropout,
    }
}

/// The reference fill ([`optable::random_floats`]) of `out` from `src` (dropout), split
/// across the cores at element offsets (the bits of the whole fill): the float fills'
/// native body.
fn native_floats<T: Float>(
    code: u32,
    (k0, k1, lo, hi): (u32, u32, u32, u32),
    (a, b): (T, T),
    src: Option<&[T]>,
    out: &mut [T],
) {
    let (seed, offset) = (join(k0, k1), join(lo, hi));
    pieces(out, 1, MATH, |start, o| {
        let at = (seed, offset.wrapping_add(start as u64));
        optable::random_floats(float_dist(code), at, (a, b), part(src, start, o.len()), o);
    });
}

/// Whether `T`'s fills draw f64 uniforms (two words to a uniform): f64's.
fn wide<T: Float>() -> bool {
    T::DTYPE == DType::F64
}

/// [`fill64`] on f64, else [`fill32`], with its native body.
fn fill_spec<T: Float>() -> KernelSpec<Fill<T>> {
    let spec = if wide::<T>() {
        fill64::<T>()
    } else {
        fill32::<T>()
    };
    spec.native(|(out, code, k0, k1, lo, hi, a, b)| {
        let ab = (T::__from_cpu(a), T::__from_cpu(b));
        native_floats(*code, (*k0, *k1, *lo, *hi), ab, None, out);
    })
}

/// [`dropout64`] on f64, else [`dropout32`], with its native body.
fn dropout_spec<T: Float>() -> KernelSpec<Dropout<T>> {
    let spec = match wide::<T>() {
        true => dropout64::<T>(),
        false => dropout32::<T>(),
    };
    spec.native(|(x, out, k0, k1, lo, hi, a, b)| {
        let ab = (T::__from_cpu(a), T::__from_cpu(b));
        native_floats(DROPOUT, (*k0, *k1, *lo, *hi), ab, Some(x), out);
    })
}

/// [`fill_ints`] on `T`, with the reference ([`optable::random_integers`]) split across the
/// cores as its native body.
fn ints_spec<T: Numeric>() -> KernelSpec<Ints<T>> {
    fill_ints::<T>().native(|(out, range, k0, k1, lo, hi, a)| {
        let (seed, offset) = (join(*k0, *k1), join(*lo, *hi));
        let first = T::__from_cpu(a);
        pieces(out, 1, MATH, |start, o| {
            let at = (seed, offset.wrapping_add(start as u64));
            optable::random_integers(at, first, *range, o);
        });
    })
}

impl<B: Backend> Stream<B> {
    /// Launches `launch(first, n, [k0, k1, lo, hi])` on each window of `n` elements from
    /// `first` of a fill of `len` elements of `elem_bytes` bytes, keyed by `seed` at
    /// `offset` (`lo`, `hi` the words of the window's offset).
    fn fill_windows(
        &self,
        (seed, offset): (u64, u64),
        len: usize,
        elem_bytes: usize,
        mut launch: impl FnMut(usize, usize, [u32; 4]) -> Result<()>,
    ) -> Result<()> {
        let key = optable::seed_key(seed);
        for (first, n) in self.windows(len, elem_bytes) {
            let at = offset.wrapping_add(first as u64);
            launch(first, n, [key[0], key[1], at as u32, (at >> 32) as u32])?;
        }
        Ok(())
    }

    /// One float fill (uniform, normal or dropout) of `out` from `src` (dropout) or in
    /// place, at `(seed, offset)`; the parameters are checked.
    fn float_fill<T: Float>(
        &self,
        dist: Distribution,
        at: (u64, u64),
        (a, b): (T, T),
        (src, out): (Option<Reads<'_, T, B>>, Writes<'_, T, B>),
        len: usize,
    ) -> Result<()> {
        let name = dist.name();
        self.same_contexts(name, [("out", out.0.context_id())])?;
        if let Some(x) = src {
            self.same_contexts(name, [("x", x.0.context_id())])?;
        }
        if len == 0 {
            return Ok(());
        }
        let code = match dist {
            Distribution::Uniform => UNIFORM,
            Distribution::Normal => NORMAL,
            _ => DROPOUT,
        };
        let (a, b) = (Value(a), Value(b));
        self.fill_windows(
            at,
            len,
            std::mem::size_of::<T>(),
            |first, n, [k0, k1, lo, hi]| {
                let (o, cfg) = (out.window(first, n), self.grid_stride(n));
                match src {
                    None => {
                        let args = (o, code, k0, k1, lo, hi, a, b);
                        self.launch_builtin(name, fill_spec::<T>, cfg, args)
                    }
                    Some(x) => {
                        let args = (x.window(first, n), o, k0, k1, lo, hi, a, b);
                        self.launch_builtin(name, dropout_spec::<T>, cfg, args)
                    }
                }
            },
        )
    }

    /// Fills `out` with floats uniform in `[lo, hi)` from the Philox stream keyed by `seed`,
    /// element `i` at position `offset + i`: the same bits on every backend, and a fill
    /// split in parts (each at its own offset) equals the whole. `hi` itself appears only
    /// where `lo + (hi - lo) u` rounds up to it. `lo` and `hi` must be finite with
    /// `lo <= hi` ([`Error::InvalidArgument`]). [`Rng`] keeps the offset for you.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut x = ctx.alloc::<f32>(1000)?;
    /// ctx.random_uniform(&mut x, -1.0, 1.0, 42, 0)?;
    /// let v = x.download()?;
    /// assert!(v.iter().all(|&x| (-1.0..1.0).contains(&x)));
    /// // The first 10 elements of the same stream, drawn on their own, are the same bits.
    /// let mut head = ctx.alloc::<f32>(10)?;
    /// ctx.random_uniform(&mut head, -1.0, 1.0, 42, 0)?;
    /// assert_eq!(head.download()?, v[..10]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn random_uniform<T: Float>(
        &self,
        out: &mut impl DeviceWrite<T, B>,
        lo: T,
        hi: T,
        seed: u64,
        offset: u64,
    ) -> Result<()> {
        let op = Distribution::Uniform.name();
        finite(op, "lo", lo)?;
        finite(op, "hi", hi)?;
        if lo.to_f64() > hi.to_f64() {
            return Err(invalid(op, "hi", format!("{hi:?} is below lo = {lo:?}")));
        }
        let n = out.len();
        let at = (seed, offset);
        self.float_fill(
            Distribution::Uniform,
            at,
            (lo, hi),
            (None, Writes::of(out)),
            n,
        )
    }

    /// Fills `out` with normal samples of mean `mean` and standard deviation `std`
    /// (Box-Muller with `ln` and `cos` evaluated the same way on every backend, so the same
    /// bits everywhere; see [`Stream::random_uniform`] for seeds and offsets). `mean` must be
    /// finite and `std` finite and not negative ([`Error::InvalidArgument`]).
    pub fn random_normal<T: Float>(
        &self,
        out: &mut impl DeviceWrite<T, B>,
        mean: T,
        std: T,
        seed: u64,
        offset: u64,
    ) -> Result<()> {
        let op = Distribution::Normal.name();
        finite(op, "mean", mean)?;
        finite(op, "std", std)?;
        if std.to_f64() < 0.0 {
            return Err(invalid(op, "std", format!("{std:?} is negative")));
        }
        let n = out.len();
        let at = (seed, offset);
        self.float_fill(
            Distribution::Normal,
            at,
            (mean, std),
            (None, Writes::of(out)),
            n,
        )
    }

    /// Fills `out` with integers uniform in `[lo, hi)` (within `(hi - lo) / 2^64` of
    /// uniform; see [`Stream::random_uniform`] for seeds and offsets). `lo < hi` with
    /// `hi - lo <= 2^32`, on an integer type ([`Error::InvalidArgument`]).
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut dice = ctx.alloc::<u8>(600)?;
    /// ctx.random_integers(&mut dice, 1, 7, 3, 0)?;
    /// assert!(dice.download()?.iter().all(|d| (1..=6).contains(d)));
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn random_integers<T: Numeric>(
        &self,
        out: &mut impl DeviceWrite<T, B>,
        lo: T,
        hi: T,
        seed: u64,
        offset: u64,
    ) -> Result<()> {
        let op = Distribution::Integers.name();
        let (Wide::Int(l), Wide::Int(h)) = (lo.to_wide(), hi.to_wide()) else {
            return Err(invalid(
                op,
                "out",
                format!(
                    "{} is not an integer type (random_uniform fills floats)",
                    T::DTYPE
                ),
            ));
        };
        if l >= h || h - l > 1 << 32 {
            return Err(invalid(
                op,
                "hi",
                format!("[{l}, {h}) is not a range of 1 to 2^32 integers"),
            ));
        }
        // 2^32 wraps to 0, which the kernels read as 2^32.
        let range = (h - l) as u64 as u32;
        self.same_contexts(op, [("out", out.slice_ref().context_id())])?;
        let (len, o) = (out.len(), Writes::of(out));
        let lo = Value(lo);
        let at = (seed, offset);
        self.fill_windows(
            at,
            len,
            std::mem::size_of::<T>(),
            |first, n, [k0, k1, l, h]| {
                let args = (o.window(first, n), range, k0, k1, l, h, lo);
                self.launch_builtin(op, ints_spec::<T>, self.grid_stride(n), args)
            },
        )
    }

    /// Dropout: `out[i] = x[i] / (1 - p)` where the uniform `u` of position `offset + i` is
    /// at least `p`, else 0 (the scale `1 / (1 - p)` rounded once to `T`). Running it on the
    /// gradient with the same `seed` and `offset` is the backward pass: the same elements
    /// are kept, no mask is stored. `p` in `[0, 1)` ([`Error::InvalidArgument`]).
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let x = ctx.alloc_upload(&[1.0f32; 8])?;
    /// let mut y = ctx.alloc::<f32>(8)?;
    /// ctx.dropout(&x, 0.5, 7, 0, &mut y)?;
    /// assert!(y.download()?.iter().all(|&v| v == 0.0 || v == 2.0));
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn dropout<T: Float>(
        &self,
        x: &impl DeviceRead<T, B>,
        p: f64,
        seed: u64,
        offset: u64,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let (pt, scale) = dropout_params::<T>(p)?;
        same_len("dropout", "out", x.len(), out.len())?;
        let n = out.len();
        let io = (Some(Reads::of(x)), Writes::of(out));
        self.float_fill(Distribution::Dropout, (seed, offset), (pt, scale), io, n)
    }

    /// In place: `x = dropout(x)` (see [`Stream::dropout`]).
    pub fn dropout_inplace<T: Float>(
        &self,
        x: &mut impl DeviceWrite<T, B>,
        p: f64,
        seed: u64,
        offset: u64,
    ) -> Result<()> {
        let (pt, scale) = dropout_params::<T>(p)?;
        let n = x.len();
        let io = (None, Writes::of(x));
        self.float_fill(Distribution::Dropout, (seed, offset), (pt, scale), io, n)
    }
}

/// Dropout's `p` and scale in `T`, or why `p` is refused.
fn dropout_params<T: Float>(p: f64) -> Result<(T, T)> {
    if !(0.0..1.0).contains(&p) {
        return Err(invalid(
            "dropout",
            "p",
            format!("{p} is not a probability in [0, 1)"),
        ));
    }
    Ok((T::from_f64(p), T::from_f64(1.0 / (1.0 - p))))
}

/// A position in a Philox stream: a seed and the offset of the next fill, which each fill
/// advances by its length, so that successive fills draw fresh numbers and a run replays
/// exactly from the same seed (on any backend: the bits are the same).
///
/// ```
/// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
/// use gpukit::Rng;
/// let mut rng = Rng::new(2026);
/// let mut w = ctx.alloc::<f32>(64 * 32)?;
/// rng.kaiming_normal(&ctx, &mut w, 64)?; // std sqrt(2 / 64)
/// let mut h = ctx.alloc_upload(&[1.0f32; 32])?;
/// let at = rng.dropout_inplace(&ctx, &mut h, 0.25)?; // the backward pass reuses `at`
/// assert_eq!(rng.offset(), 64 * 32 + 32);
/// assert_eq!(at, 64 * 32);
/// # Ok::<(), gpukit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rng {
    seed: u64,
    offset: u64,
}

impl Rng {
    /// The stream keyed by `seed`, at its start.
    pub const fn new(seed: u64) -> Rng {
        Rng { seed, offset: 0 }
    }

    /// The stream keyed by `seed` at `offset` (to resume a run).
    pub const fn at(seed: u64, offset: u64) -> Rng {
        Rng { seed, offset }
    }

    /// The key.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// The position of the next fill's first element.
    pub const fn offset(&self) -> u64 {
        self.offset
    }

    /// Reserves `n` positions: returns the offset of the first and advances past them.
    pub fn take(&mut self, n: usize) -> u64 {
        let at = self.offset;
        self.offset = self.offset.wrapping_add(n as u64);
        at
    }

    /// [`Stream::random_uniform`] at the next positions.
    pub fn uniform<T: Float, B: Backend>(
        &mut self,
        s: &Stream<B>,
        out: &mut impl DeviceWrite<T, B>,
        lo: T,
        hi: T,
    ) -> Result<()> {
        s.random_uniform(out, lo, hi, self.seed, self.offset)?;
        self.take(out.len());
        Ok(())
    }

    /// [`Stream::random_normal`] at the next positions.
    pub fn normal<T: Float, B: Backend>(
        &mut self,
        s: &Stream<B>,
        out: &mut impl DeviceWrite<T, B>,
        mean: T,
        std: T,
    ) -> Result<()> {
        s.random_normal(out, mean, std, self.seed, self.offset)?;
        self.take(out.len());
        Ok(())
    }

    /// [`Stream::random_integers`] at the next positions.
    pub fn integers<T: Numeric, B: Backend>(
        &mut self,
        s: &Stream<B>,
        out: &mut impl DeviceWrite<T, B>,
        lo: T,
        hi: T,
    ) -> Result<()> {
        s.random_integers(out, lo, hi, self.seed, self.offset)?;
        self.take(out.len());
        Ok(())
    }

    /// [`Stream::dropout`] at the next positions; returns their offset, which the
    /// backward pass passes to [`Stream::dropout`] with this seed.
    pub fn dropout<T: Float, B: Backend>(
        &mut self,
        s: &Stream<B>,
        x: &impl DeviceRead<T, B>,
        p: f64,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<u64> {
        s.dropout(x, p, self.seed, self.offset, out)?;
        Ok(self.take(out.len()))
    }

    /// [`Stream::dropout_inplace`] at the next positions; returns their offset.
    pub fn dropout_inplace<T: Float, B: Backend>(
        &mut self,
        s: &Stream<B>,
        x: &mut impl DeviceWrite<T, B>,
        p: f64,
    ) -> Result<u64> {
        s.dropout_inplace(x, p, self.seed, self.offset)?;
        Ok(self.take(x.len()))
    }

    /// [`Stream::permutation`] keyed by the next position's draw: a fresh shuffle of
    /// `0..out.len()` each call (an epoch's order), the same on every backend. Advances by 1.
    pub fn permutation<B: Backend>(
        &mut self,
        s: &Stream<B>,
        out: &mut impl DeviceWrite<u32, B>,
    ) -> Result<()> {
        let w = crate::optable::element_words(self.seed, self.offset, 2);
        let key = (u64::from(w[1]) << 32) | u64::from(w[0]);
        s.permutation(out, key)?;
        self.take(1);
        Ok(())
    }

    /// Kaiming (He) initialisation for a layer followed by ReLU: normal with mean 0 and
    /// standard deviation `sqrt(2 / fan_in)` (PyTorch's `kaiming_normal_`, fan-in mode).
    pub fn kaiming_normal<T: Float, B: Backend>(
        &mut self,
        s: &Stream<B>,
        w: &mut impl DeviceWrite<T, B>,
        fan_in: usize,
    ) -> Result<()> {
        let std = (2.0 / fan(fan_in, "kaiming_normal", "fan_in")?).sqrt();
        self.normal(s, w, T::from_f64(0.0), T::from_f64(std))
    }

    /// Xavier (Glorot) uniform initialisation: uniform in `[-a, a)`,
    /// `a = sqrt(6 / (fan_in + fan_out))` (PyTorch's `xavier_uniform_`).
    pub fn xavier_uniform<T: Float, B: Backend>(
        &mut self,
        s: &Stream<B>,
        w: &mut impl DeviceWrite<T, B>,
        fan_in: usize,
        fan_out: usize,
    ) -> Result<()> {
        let sum = fan_in.saturating_add(fan_out);
        let a = (6.0 / fan(sum, "xavier_uniform", "fan_in + fan_out")?).sqrt();
        self.uniform(s, w, T::from_f64(-a), T::from_f64(a))
    }
}

/// A layer's fan as f64, refused when 0.
fn fan(n: usize, op: &'static str, arg: &'static str) -> Result<f64> {
    if n == 0 {
        return Err(invalid(op, arg, "is 0".into()));
    }
    Ok(n as f64)
}
