//! Random fills on the device (Philox 4x32-10, the same bits on every backend: see
//! [`crate::optable::Distribution`]'s module), dropout, and [`Rng`], a seed and a position
//! that advances by each fill's length, with the usual weight initialisations.

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::{Float, Numeric, Wide};
use crate::error::same_len;
use crate::error::{Error, Result};
use crate::optable::{Distribution, Op, Scalar};
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

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

impl<B: Backend> Stream<B> {
    /// One random fill of `len` elements into `out` (see [`Op::Random`]) from `src` (dropout)
    /// or in place; the parameters are checked.
    #[allow(clippy::too_many_arguments)]
    fn random_fill<T: Numeric>(
        &self,
        dist: Distribution,
        (seed, offset): (u64, u64),
        (a, b): (T, T),
        range: u32,
        src: Option<SliceRef<'_, B>>,
        out: SliceRef<'_, B>,
        len: usize,
    ) -> Result<()> {
        let name = dist.name();
        let make = |src, out| Op::Random {
            dist,
            seed,
            offset,
            a: Scalar::new(a),
            b: Scalar::new(b),
            range,
            src,
            out,
            len,
        };
        match src {
            Some(sx) => self.run_op(
                name,
                T::DTYPE,
                [("x", &sx, Access::Read), ("out", &out, Access::Write)],
                |[src, out]| make(Some(src), out),
            ),
            None => self.run_op(name, T::DTYPE, [("out", &out, Access::Write)], |[out]| {
                make(None, out)
            }),
        }
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
        self.random_fill(
            Distribution::Uniform,
            (seed, offset),
            (lo, hi),
            0,
            None,
            out.slice_ref(),
            out.len(),
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
        self.random_fill(
            Distribution::Normal,
            (seed, offset),
            (mean, std),
            0,
            None,
            out.slice_ref(),
            out.len(),
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
        self.random_fill(
            Distribution::Integers,
            (seed, offset),
            (lo, hi),
            range,
            None,
            out.slice_ref(),
            out.len(),
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
        self.random_fill(
            Distribution::Dropout,
            (seed, offset),
            (pt, scale),
            0,
            Some(x.slice_ref()),
            out.slice_ref(),
            out.len(),
        )
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
        self.random_fill(
            Distribution::Dropout,
            (seed, offset),
            (pt, scale),
            0,
            None,
            x.slice_ref(),
            x.len(),
        )
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
