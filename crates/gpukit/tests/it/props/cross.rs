//! What comparing the CUDA backend with the CPU backend needs of each element type, and the
//! comparisons themselves as plain functions of two results, so that `cross_rejects.rs` can
//! show them refusing known-wrong results without a GPU.
//!
//! Also here: the CUDA backend's reduction layout (blocks of partials) and its summation
//! order replayed on the host, to place the large inputs' planted terms and to simulate
//! reductions that lose a block's partial or the last element.

use super::*;

use gpukit::core::half::{bf16, f16};
use gpukit::cpu::reference;
use gpukit::{Element, UnaryOp};

/// What the cross-backend comparisons need of an element type.
pub(super) trait Cross: Numeric {
    /// Values for element-wise ops, edge cases of the type included (for floats: NaN,
    /// infinities, signed zeros, subnormals; for integers: MIN, MAX, 0 and -1).
    fn edgy() -> BoxedStrategy<Self>;
    /// Values for reductions and gemm: for floats finite and moderate, so that the order
    /// of summation cannot turn a finite sum into an infinity.
    fn plain() -> BoxedStrategy<Self>;
    /// A deterministic ordinary value from 64 random bits, for the large-length test:
    /// always below `PEAKS[1]`.
    fn from_bits64(x: u64) -> Self;
    /// Two values above every `from_bits64` value, the larger first, planted once each in
    /// the large inputs. For floats they are larger than everything else one block of
    /// partials folds put together, so a sum that loses either, or the partial holding
    /// one, is off by far more than the tolerance. (In dot products they are the largest
    /// terms but not that dominant; `cross_rejects.rs` checks that losing them shows.)
    const PEAKS: [Self; 2];
    /// Bit-for-bit equality, except that NaN matches any NaN.
    fn same(self, other: Self) -> bool;
    /// Equality by value (`-0.0 == 0.0`), NaN matching NaN: for `max`.
    fn same_value(self, other: Self) -> bool;
    /// Whether two sums (or dot products) of `n` terms whose magnitudes add up to `scale`
    /// agree: exactly for integers, within `tolerance::sums_agree` for floats.
    fn sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool;
    /// Whether two accumulations of `n` terms made in this type, by atomic adds in any
    /// order (see `tolerance::atomic_sums_agree`), can both be right.
    fn atomic_sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool;
}

macro_rules! cross_int {
    ($($t:ty),*) => {$(
        impl Cross for $t {
            fn edgy() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => any::<$t>(),
                    3 => (0 as $t)..4,
                    2 => Just(0 as $t),
                    1 => Just(<$t>::MIN),
                    1 => Just(<$t>::MAX),
                    // -1 for signed types (MIN / -1 wraps), MAX for unsigned ones.
                    2 => Just((0 as $t).wrapping_sub(1)),
                ]
                .boxed()
            }
            fn plain() -> BoxedStrategy<Self> {
                Self::edgy()
            }
            fn from_bits64(x: u64) -> Self {
                // Truncation: every bit pattern of the type but the two peaks.
                let v = x as $t;
                if v >= <$t>::MAX - 1 { v - 2 } else { v }
            }
            // Odd and even, so that neither vanishes from a wrapping sum or product.
            const PEAKS: [Self; 2] = [<$t>::MAX, <$t>::MAX - 1];
            fn same(self, other: Self) -> bool {
                self == other
            }
            fn same_value(self, other: Self) -> bool {
                self == other
            }
            fn sums_agree(want: Self, got: Self, _n: usize, _scale: f64) -> bool {
                want == got
            }
            fn atomic_sums_agree(want: Self, got: Self, _n: usize, _scale: f64) -> bool {
                want == got
            }
        }
    )*};
}

cross_int!(i32, u8, i64, u32, i8, u64);

/// Floats: their ulp distance and the ulp budgets of the math functions.
pub(super) trait CrossFloat: Cross + Float {
    /// Units in the last place between two finite values (0 between `-0.0` and `0.0`).
    fn ulps(self, other: Self) -> u64;
    /// How many ulp CUDA's result of `op` at `x` may be from the CPU's (see
    /// `cuda_vs_cpu.rs`).
    fn ulp_budget(op: UnaryOp, x: f64) -> u64;
}

/// The 32- and 64-bit budgets: the op table's accuracy contract, [`UnaryOp::ulps`] (0 for
/// the ops built from correctly rounded IEEE operations only, which agree bit for bit; the
/// stated ulp for those that call each platform's math library: CUDA's `expf`, `logf`,
/// `tanhf` are within 1 to 2 ulp of the exact result, glibc's within 1, and the composed
/// ops add a rounding or two), at `x` ([`UnaryOp::ulps_at`]: gelu's grows below 0).
fn wide_ulp_budget(op: UnaryOp, x: f64) -> u64 {
    u64::from(op.ulps_at(x))
}

/// The 16-bit budgets: both backends compute in f32 and round to 16 bits once. Two f32
/// results within 4 f32 ulp (2^-21 relative) of each other round to the same or to
/// neighbouring 16-bit values (one 16-bit ulp is 2^13 f32 ulp or more), so 1 ulp; the
/// bit-for-bit ops bit for bit.
fn half_ulp_budget(op: UnaryOp, x: f64) -> u64 {
    u64::from(op.ulps_at(x).min(1))
}

/// Sign-magnitude bits onto a line where neighbouring floats differ by one.
macro_rules! ulp_line {
    ($bits:ty, $x:expr) => {{
        let b = $x;
        let sign = b >> (<$bits>::BITS - 1);
        let magnitude = i128::from(b & !(1 << (<$bits>::BITS - 1)));
        if sign == 1 {
            -magnitude
        } else {
            magnitude
        }
    }};
}

macro_rules! cross_float {
    ($($t:ident: $bits:ty);*) => {$(
        impl Cross for $t {
            fn edgy() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => -1e3 as $t..1e3,
                    2 => -1.0 as $t..1.0,
                    2 => (-20i8..20).prop_map(<$t>::from),
                    // proptest's "any float": normal, subnormal, zero, infinite and NaN.
                    2 => proptest::num::$t::ANY,
                    1 => prop::sample::select(vec![
                        0.0, -0.0, 1.0, -1.0, <$t>::INFINITY, <$t>::NEG_INFINITY, <$t>::NAN,
                        <$t>::MAX, <$t>::MIN, <$t>::MIN_POSITIVE, <$t>::MIN_POSITIVE / 2.0,
                        <$t>::from_bits(1), -<$t>::from_bits(1), <$t>::EPSILON,
                    ]),
                ]
                .boxed()
            }
            fn plain() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => -1e3 as $t..1e3,
                    2 => -1.0 as $t..1.0,
                    1 => Just(0.0),
                    2 => (-20i8..20).prop_map(<$t>::from),
                ]
                .boxed()
            }
            fn from_bits64(x: u64) -> Self {
                // -1000..1000 in steps of 1/64 (exact in both types).
                ((x % 128_001) as $t - 64_000.0) / 64.0
            }
            // 2^24 and 2^23: one block of partials folds at most 16 elements per thread
            // (four million elements over 1024 x 256 threads), 4096 x 1000 < 2^23 in all.
            const PEAKS: [Self; 2] = [16_777_216.0, 8_388_608.0];
            fn same(self, other: Self) -> bool {
                (self.is_nan() && other.is_nan()) || self.to_bits() == other.to_bits()
            }
            fn same_value(self, other: Self) -> bool {
                (self.is_nan() && other.is_nan()) || self == other
            }
            fn sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool {
                tolerance::sums_agree(Self::DTYPE, want.into(), got.into(), n, scale)
            }
            fn atomic_sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool {
                tolerance::atomic_sums_agree(Self::DTYPE, want.into(), got.into(), n, scale)
            }
        }

        impl CrossFloat for $t {
            fn ulps(self, other: Self) -> u64 {
                let d = ulp_line!($bits, self.to_bits()) - ulp_line!($bits, other.to_bits());
                u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX)
            }
            fn ulp_budget(op: UnaryOp, x: f64) -> u64 {
                wide_ulp_budget(op, x)
            }
        }
    )*};
}

cross_float!(f32: u32; f64: u64);

macro_rules! cross_half {
    ($($t:ident),*) => {$(
        impl Cross for $t {
            fn edgy() -> BoxedStrategy<Self> {
                prop_oneof![
                    4 => (-1e3f32..1e3).prop_map(<$t>::from_f32),
                    2 => (-1.0f32..1.0).prop_map(<$t>::from_f32),
                    2 => (-20i8..20).prop_map(|v| <$t>::from_f32(f32::from(v))),
                    // Every bit pattern: normal, subnormal, zero, infinite and NaN.
                    2 => any::<u16>().prop_map(<$t>::from_bits),
                    1 => prop::sample::select(vec![
                        <$t>::ZERO, <$t>::NEG_ZERO, <$t>::ONE, <$t>::NEG_ONE, <$t>::INFINITY,
                        <$t>::NEG_INFINITY, <$t>::NAN, <$t>::MAX, <$t>::MIN,
                        <$t>::MIN_POSITIVE, <$t>::from_bits(1), -<$t>::from_bits(1),
                        <$t>::EPSILON,
                    ]),
                ]
                .boxed()
            }
            fn plain() -> BoxedStrategy<Self> {
                // Small enough that no sum or product of a test overflows f16.
                prop_oneof![
                    4 => (-8.0f32..8.0).prop_map(<$t>::from_f32),
                    2 => (-1.0f32..1.0).prop_map(<$t>::from_f32),
                    1 => Just(<$t>::ZERO),
                    2 => (-8i8..8).prop_map(|v| <$t>::from_f32(f32::from(v))),
                ]
                .boxed()
            }
            fn from_bits64(x: u64) -> Self {
                // -1..1 in steps of 1/64 (exact in both types).
                <$t>::from_f32(((x % 129) as f32 - 64.0) / 64.0)
            }
            // One block of partials folds at most 4096 elements of magnitude 1 or less, so
            // 2^13 outweighs it; 2^14 + 2^13 plus the rest stays below f16's 65504.
            const PEAKS: [Self; 2] = [<$t>::from_f32_const(16384.0), <$t>::from_f32_const(8192.0)];
            fn same(self, other: Self) -> bool {
                (self.is_nan() && other.is_nan()) || self.to_bits() == other.to_bits()
            }
            fn same_value(self, other: Self) -> bool {
                (self.is_nan() && other.is_nan()) || self == other
            }
            fn sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool {
                tolerance::sums_agree(Self::DTYPE, want.to_f64(), got.to_f64(), n, scale)
            }
            fn atomic_sums_agree(want: Self, got: Self, n: usize, scale: f64) -> bool {
                tolerance::atomic_sums_agree(Self::DTYPE, want.to_f64(), got.to_f64(), n, scale)
            }
        }

        impl CrossFloat for $t {
            fn ulps(self, other: Self) -> u64 {
                let d = ulp_line!(u16, self.to_bits()) - ulp_line!(u16, other.to_bits());
                u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX)
            }
            fn ulp_budget(op: UnaryOp, x: f64) -> u64 {
                half_ulp_budget(op, x)
            }
        }
    )*};
}

cross_half!(f16, bf16);

/// Whether `got` is within `max` ulp of `want`; NaN matches NaN, infinities match exactly.
pub(super) fn within_ulps<T: CrossFloat>(want: T, got: T, max: u64) -> bool {
    let (w, g) = (want.to_f64(), got.to_f64());
    if w.is_nan() || g.is_nan() {
        return w.is_nan() && g.is_nan();
    }
    if w.is_infinite() || g.is_infinite() {
        return w == g;
    }
    want.ulps(got) <= max
}

// ---------------------------------------------------------------------------------------
// The comparisons: `Err` names the first disagreement, with what is needed to reproduce it
// ---------------------------------------------------------------------------------------

/// Element `i` of the first mismatch between the two results, reported with the inputs.
pub(super) fn same_elements<T: Cross>(
    op: &str,
    want: &[T],
    got: &[T],
    agree: impl Fn(T, T) -> bool,
    inputs: impl Fn(usize) -> String,
) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!(
            "{op} {}: cpu gave {} elements, cuda {}",
            T::DTYPE,
            want.len(),
            got.len()
        ));
    }
    match (0..want.len()).find(|&i| !agree(want[i], got[i])) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{op} {} [{i}] of {}: cpu {:?}, cuda {:?} ({})",
            T::DTYPE,
            want.len(),
            want[i],
            got[i],
            inputs(i)
        )),
    }
}

/// A sum or dot product (`what`) of `n` terms whose magnitudes add up to `scale`.
pub(super) fn compare_sum<T: Cross>(
    what: &str,
    n: usize,
    scale: f64,
    want: T,
    got: T,
) -> Result<(), String> {
    if T::sums_agree(want, got, n, scale) {
        return Ok(());
    }
    let bound = if T::DTYPE.is_float() {
        let magnitude = want.to_f64().abs().max(got.to_f64().abs());
        format!(
            "tolerance {}",
            tolerance::sum_tolerance(T::DTYPE, n, scale, magnitude)
        )
    } else {
        "must be equal".to_owned()
    };
    Err(format!(
        "{what} {} of {n}: cpu {want:?}, cuda {got:?} (sum of magnitudes {scale}, {bound})",
        T::DTYPE
    ))
}

/// `max` of `n` elements: equal values, or both refusing an empty input.
pub(super) fn compare_max<T: Cross>(
    what: &str,
    n: usize,
    want: gpukit::Result<T>,
    got: gpukit::Result<T>,
) -> Result<(), String> {
    match (want, got) {
        (Ok(w), Ok(g)) if w.same_value(g) => Ok(()),
        (Err(gpukit::Error::EmptyInput { .. }), Err(gpukit::Error::EmptyInput { .. }))
            if n == 0 =>
        {
            Ok(())
        }
        (w, g) => Err(format!("{what} {} of {n}: cpu {w:?}, cuda {g:?}", T::DTYPE)),
    }
}

/// A gemm problem: `C = alpha op(A) op(B) + beta C`, row-major.
#[derive(Debug, Clone)]
pub(super) struct GemmCase<T> {
    /// Shapes, transposes and scalars.
    pub spec: Gemm<T>,
    pub a: Vec<T>,
    pub b: Vec<T>,
    /// NaN everywhere when `beta == 0`, which must then be ignored.
    pub c: Vec<T>,
}

/// Two results of `g` entry by entry, within `tolerance::gemm_agree`.
pub(super) fn compare_gemm<T: CrossFloat>(
    g: &GemmCase<T>,
    want: &[T],
    got: &[T],
) -> Result<(), String> {
    let (m, n, k) = (g.spec.m, g.spec.n, g.spec.k);
    for (name, r) in [("cpu", want), ("cuda", got)] {
        if r.len() != m * n {
            return Err(format!(
                "gemm {}: {name} gave {} entries of {m}x{n}",
                T::DTYPE,
                r.len()
            ));
        }
    }
    // The scale of each entry's error bound (`C` is NaN where beta is zero, and unread).
    let scales = reference::gemm_magnitudes(&g.spec, &g.a, &g.b, &g.c)
        .expect("the reference gets whole matrices");
    for i in 0..m {
        for j in 0..n {
            let (w, c) = (want[i * n + j], got[i * n + j]);
            let scale = scales[i * n + j];
            if !tolerance::gemm_agree(T::DTYPE, w.to_f64(), c.to_f64(), k, scale) {
                return Err(format!(
                    "gemm {} C[{i}][{j}] of {m}x{n}x{k} (trans {} {}, alpha {:?}, beta {:?}): cpu {w:?}, cuda {c:?} (scale {scale})",
                    T::DTYPE,
                    g.spec.trans_a,
                    g.spec.trans_b,
                    g.spec.alpha,
                    g.spec.beta,
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The CUDA backend's reductions, replayed on the host
// ---------------------------------------------------------------------------------------

/// Threads per block and the most blocks of the CUDA backend's reductions: gpukit-cuda-sys's
/// `REDUCE_BLOCK` and `MAX_PARTIALS` (kernels.rs), which the facade does not re-export.
pub(super) const REDUCE_BLOCK: usize = 256;
pub(super) const MAX_PARTIALS: usize = 1024;

/// The blocks of partials a CUDA reduction of `n` elements uses.
pub(super) fn partial_blocks(n: usize) -> usize {
    n.div_ceil(REDUCE_BLOCK).clamp(1, MAX_PARTIALS)
}

/// The first element the last block of partials folds (its thread 0's first).
pub(super) fn last_block_start(n: usize) -> usize {
    (partial_blocks(n) - 1) * REDUCE_BLOCK
}

/// Whether element `i` of `n` is folded by the last block of partials.
pub(super) fn in_last_block(i: usize, n: usize) -> bool {
    let blocks = partial_blocks(n);
    (i % (blocks * REDUCE_BLOCK)) / REDUCE_BLOCK == blocks - 1
}

/// A broken reduction to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// None: the kernels as written.
    None,
    /// The final fold leaves out the last block's partial.
    LastPartialLost,
    /// The grid-stride loops stop one element short.
    LastElementLost,
}

/// builtin.cu's `sum_partial` + `sum_final` on `terms`, in f64 and in its order: thread `t`
/// of block `b` adds elements `b·256 + t`, then every `blocks·256`-th; each block folds its
/// 256 threads pairwise in shared memory into a partial; one block of 256 threads adds
/// every 256th partial and folds the same way. `fault` simulates a broken kernel.
pub(super) fn cuda_order_sum(terms: &[f64], fault: Fault) -> f64 {
    let n = terms.len();
    let blocks = partial_blocks(n);
    let stride = blocks * REDUCE_BLOCK;
    let used = match fault {
        Fault::LastElementLost => &terms[..n.saturating_sub(1)],
        _ => terms,
    };
    // `ACC acc = 0; acc += ...`: a sequential fold from +0.
    let serial = |xs: &mut dyn Iterator<Item = f64>| xs.fold(0.0, |acc, x| acc + x);
    let block_fold = |mut s: Vec<f64>| {
        let mut step = REDUCE_BLOCK / 2;
        while step > 0 {
            for t in 0..step {
                s[t] += s[t + step];
            }
            step /= 2;
        }
        s[0]
    };
    let partials: Vec<f64> = (0..blocks)
        .map(|b| {
            let threads = (0..REDUCE_BLOCK)
                .map(|t| {
                    serial(
                        &mut used
                            .iter()
                            .copied()
                            .skip(b * REDUCE_BLOCK + t)
                            .step_by(stride),
                    )
                })
                .collect();
            block_fold(threads)
        })
        .collect();
    let parts = match fault {
        Fault::LastPartialLost => &partials[..blocks - 1],
        _ => &partials[..],
    };
    let threads = (0..REDUCE_BLOCK)
        .map(|t| serial(&mut parts.iter().copied().skip(t).step_by(REDUCE_BLOCK)))
        .collect();
    block_fold(threads)
}
