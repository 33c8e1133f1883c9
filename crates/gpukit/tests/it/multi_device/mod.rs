//! Several devices in one process, on logical CPU devices (every machine has as many as a
//! test asks for, each with its own context, memory pool and streams):
//!
//! - `peer`: `Stream::copy_peer` of every element type, views, empty copies, a source whose
//!   `Context` handle was dropped;
//! - `misuse`: bad peer copies and bad collective calls are typed errors that leave every
//!   array as it was;
//! - `collectives`: every `Communicator` call against a host reference, exact (floats
//!   reduced in rank order in f32, as the in-process implementation promises; integers
//!   wrapping), for 1 to 4 ranks and lengths 0, 1, not divisible by the ranks, ~10 000;
//! - `ordering`: collectives and peer copies ordered after work queued on other streams of
//!   the ranks' contexts, and before later writes, with a slow op in front so that a missing
//!   wait shows;
//! - `random`: random group sizes, lengths and ops against the host reference;
//! - `group`: `DeviceGroup` and `DeviceSet::Auto`;
//! - `gpu`: the same on CUDA contexts (two on one device, and across devices) and between a
//!   Vulkan adapter and a CPU device (host staging between two backends).

use gpukit::core::half::{bf16, f16};
use gpukit::{CollectiveOp, Communicator, Context, DeviceSpec, Element, Numeric, Result};

mod collectives;
// Only with a GPU backend compiled in.
#[cfg(any(feature = "cuda", feature = "vulkan"))]
mod gpu;
mod group;
mod misuse;
mod ordering;
mod peer;
mod random;

/// `n` logical CPU devices, one context each: rank `r` is device `r`.
fn cpus(n: usize) -> Result<Vec<Context>> {
    (0..n)
        .map(|r| Context::new(DeviceSpec::Cpu(Some(r))))
        .collect()
}

/// A communicator over the default streams of `ctxs`, rank order.
fn communicator(ctxs: &[Context]) -> Result<Communicator> {
    Communicator::new(ctxs.iter().map(|c| c.default_stream().clone()).collect())
}

/// An element compared by its bits: NaN equals the same NaN, `-0.0` differs from `0.0`.
trait Bits: Element {
    fn bits(self) -> u64;
}

macro_rules! bits {
    (int: $($t:ty),*; float: $($f:ty),*) => {
        $(impl Bits for $t {
            fn bits(self) -> u64 {
                // Sign-extended for the signed types: still one value per bit pattern.
                self as u64
            }
        })*
        $(impl Bits for $f {
            fn bits(self) -> u64 {
                u64::from(self.to_bits())
            }
        })*
    };
}

bits!(int: i8, u8, i32, u32, i64, u64; float: f16, bf16, f32, f64);

/// Asserts that `got` holds exactly the bits of `want`, naming the first element that
/// differs.
#[track_caller]
fn assert_bits<T: Bits>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].bits() != want[i].bits()) {
        panic!(
            "{what}: element {i} of {} is {:?}, expected {:?}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// A deterministic xorshift stream of 64-bit values.
fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// `len` f32 values in -10..10 with 24 significant bits, none zero: their sums and
/// products round, so the order of a reduction shows in the bits, and no signed zero can
/// make `max`/`min` ambiguous.
fn floats(seed: u64, len: usize) -> Vec<f32> {
    xorshift(seed)
        .take(len)
        .map(|u| {
            let v = ((u >> 40) as f32 / (1u32 << 24) as f32 - 0.5) * 20.0;
            if v == 0.0 {
                1.0
            } else {
                v
            }
        })
        .collect()
}

/// `len` i32 values: small ones (|x| <= 1000) and full-range ones alternately, so that sums
/// and products wrap.
fn ints(seed: u64, len: usize) -> Vec<i32> {
    xorshift(seed)
        .take(len)
        .enumerate()
        .map(|(i, u)| match i % 2 {
            0 => (u % 2001) as i32 - 1000,
            _ => (u >> 32) as u32 as i32,
        })
        .collect()
}

/// The elements the collective tests reduce, with the host reference of each op.
trait Reduce: Numeric + Bits {
    /// `len` test values for rank `rank`.
    fn values(seed: u64, rank: usize, len: usize) -> Vec<Self>;
    /// `a op b` (`Avg` adds: the division comes once, at the end).
    fn combine(op: CollectiveOp, a: Self, b: Self) -> Self;
    /// The sum of `n` ranks divided by `n` (floats only).
    fn average(sum: Self, n: usize) -> Self;
}

impl Reduce for f32 {
    fn values(seed: u64, rank: usize, len: usize) -> Vec<f32> {
        floats(seed.wrapping_mul(31).wrapping_add(rank as u64), len)
    }

    fn combine(op: CollectiveOp, a: f32, b: f32) -> f32 {
        match op {
            CollectiveOp::Sum | CollectiveOp::Avg => a + b,
            CollectiveOp::Prod => a * b,
            // No NaN and no zero in the data: the plain comparison is the whole story.
            CollectiveOp::Max => {
                if b > a {
                    b
                } else {
                    a
                }
            }
            CollectiveOp::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
        }
    }

    fn average(sum: f32, n: usize) -> f32 {
        sum / n as f32
    }
}

impl Reduce for i32 {
    fn values(seed: u64, rank: usize, len: usize) -> Vec<i32> {
        ints(seed.wrapping_mul(31).wrapping_add(rank as u64), len)
    }

    fn combine(op: CollectiveOp, a: i32, b: i32) -> i32 {
        match op {
            CollectiveOp::Sum => a.wrapping_add(b),
            CollectiveOp::Prod => a.wrapping_mul(b),
            CollectiveOp::Max => a.max(b),
            CollectiveOp::Min => a.min(b),
            CollectiveOp::Avg => unreachable!("avg is refused for integers"),
        }
    }

    fn average(_: i32, _: usize) -> i32 {
        unreachable!("avg is refused for integers")
    }
}

/// The host reference of a reduction over the ranks' `inputs`: element-wise
/// `((x0 op x1) op x2) ...`, in rank order, in the element type; `Avg` divides that sum by
/// the number of ranks.
fn reference<T: Reduce>(inputs: &[Vec<T>], op: CollectiveOp) -> Vec<T> {
    let Some((first, rest)) = inputs.split_first() else {
        return Vec::new();
    };
    let mut acc = first.clone();
    for x in rest {
        for (a, &b) in acc.iter_mut().zip(x) {
            *a = T::combine(op, *a, b);
        }
    }
    if op == CollectiveOp::Avg {
        for a in &mut acc {
            *a = T::average(*a, inputs.len());
        }
    }
    acc
}

/// The ops a collective accepts for `T`: every op for floats, all but `Avg` for integers.
fn ops_for<T: Element>() -> impl Iterator<Item = CollectiveOp> {
    CollectiveOp::ALL
        .into_iter()
        .filter(|&op| op != CollectiveOp::Avg || T::DTYPE.is_float())
}

/// Downloads every array of `arrays`.
fn download_all<T: Element>(arrays: &[gpukit::GpuArray<T>]) -> Result<Vec<Vec<T>>> {
    arrays.iter().map(|a| a.download()).collect()
}

/// Uploads `data[r]` to `ctxs[r]`.
fn upload_all<T: Element>(ctxs: &[Context], data: &[Vec<T>]) -> Result<Vec<gpukit::GpuArray<T>>> {
    ctxs.iter()
        .zip(data)
        .map(|(c, d)| c.alloc_upload(d))
        .collect()
}

#[test]
fn the_host_reference_reduces_in_rank_order() {
    // The reference itself: an order that is not left to right gives other bits here.
    let xs = [vec![1.0e8f32], vec![-1.0e8], vec![0.5]];
    assert_bits(&reference(&xs, CollectiveOp::Sum), &[0.5], "sum");
    assert_bits(&reference(&xs, CollectiveOp::Avg), &[0.5 / 3.0], "avg");
    assert_bits(&reference(&xs, CollectiveOp::Max), &[1.0e8], "max");
    assert_bits(&reference(&xs, CollectiveOp::Min), &[-1.0e8], "min");
    let is = [vec![i32::MAX], vec![1], vec![3]];
    assert_eq!(reference(&is, CollectiveOp::Sum), [i32::MIN + 3]);
    assert_eq!(
        reference(&is, CollectiveOp::Prod),
        [i32::MAX.wrapping_mul(3)]
    );
}
