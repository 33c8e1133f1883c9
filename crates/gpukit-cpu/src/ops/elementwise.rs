//! The random fills as tasks.
//!
//! Every function here is `unsafe` with the contract of [`super::task`] (`Backend::op`'s):
//! each range lies inside its buffer and is aligned for its type, and gpukit-core orders
//! every other access to the written ranges against the task. That is what makes each
//! [`Src::get`](super::ranges::Src::get) and [`Dst::get`](super::ranges::Dst::get) in the
//! tasks sound.

use gpukit_core::{BufAt, Distribution, Numeric, Result, Scalar};

use super::kind::Kind;
use super::ranges::{done, Ranges};
use crate::queue::Task;
use crate::CpuBackend;

/// A random fill of `len` elements into `out`, from `src` for dropout (in place when
/// `None`).
///
/// # Safety
///
/// The contract of [`super::task`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn random<T: Numeric, K: Kind<T>>(
    dist: Distribution,
    key: (u64, u64),
    ab: (T, T),
    range: u32,
    src: Option<BufAt<'_, CpuBackend>>,
    out: BufAt<'_, CpuBackend>,
    len: usize,
) -> Task {
    let mut r = Ranges::default();
    let (s, o) = (src.map(|s| r.src::<T>(s, len)), r.dst::<T>(out, len));
    done(r, move || {
        // SAFETY: the ranges meet this function's contract (live, aligned, ordered, the
        // written one overlapping nothing else).
        let (s, o) = unsafe { (s.map(|s| s.get()), o.get()) };
        K::random(dist, key, ab, range, s, o);
    })
}

/// The scalar of an op as `T`, or why it is not one.
pub(super) fn scalar<T: Numeric>(s: Scalar) -> Result<T> {
    s.get::<T>().ok_or_else(|| {
        super::unsupported(format!("a {} scalar for {} elements", s.dtype(), T::DTYPE))
    })
}
