//! The element-wise families as tasks: the table's unary and binary ops, random fills
//! and casts.
//!
//! Every function here is `unsafe` with the contract of [`super::task`] (`Backend::op`'s):
//! each range lies inside its buffer and is aligned for its type, and gpukit-core orders
//! every other access to the written ranges against the task. That is what makes each
//! [`Src::get`](super::ranges::Src::get) and [`Dst::get`](super::ranges::Dst::get) in the
//! tasks sound.

use gpukit_core::{BufAt, DType, DTypeVisitor, Distribution, Float, Numeric, Result, Scalar};

use super::kind::Kind;
use super::ranges::{done, Dst, Ranges, Src};
use crate::mem::SendPtr;
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

/// `out[i] = src[i]` converted to `to` (`gpukit_core::cast_slice`); `None` when this build
/// lacks `to`.
///
/// # Safety
///
/// The contract of [`super::task`]; `out` holds `len` elements of `to`.
pub(super) unsafe fn cast<T: Numeric>(
    to: DType,
    src: BufAt<'_, CpuBackend>,
    out: BufAt<'_, CpuBackend>,
    len: usize,
) -> Option<Task> {
    let mut keep = Ranges::default();
    let src = keep.src::<T>(src, len);
    let out = keep.hold(out);
    to.visit(CastTo {
        src,
        out,
        len,
        keep,
    })
}

/// The task of a cast from `T`: converts into the target type the visit names.
struct CastTo<T> {
    src: Src<T>,
    out: SendPtr,
    len: usize,
    keep: Ranges,
}

impl<T: Numeric> CastTo<T> {
    fn to<U: Numeric>(self) -> Task {
        let CastTo {
            src,
            out,
            len,
            keep,
        } = self;
        let out = Dst::<U>::new(out, len);
        done(keep, move || {
            // SAFETY: the contract of `cast`, which alone builds a `CastTo`: live, aligned,
            // ordered ranges; `out` holds `len` elements of the target type.
            let (s, o) = unsafe { (src.get(), out.get()) };
            gpukit_core::cast_slice(s, o);
        })
    }
}

impl<T: Numeric> DTypeVisitor for CastTo<T> {
    type Output = Task;
    fn integer<U: Numeric>(self) -> Task {
        self.to::<U>()
    }
    fn float<U: Float>(self) -> Task {
        self.to::<U>()
    }
}

/// The scalar of an op as `T`, or why it is not one.
pub(super) fn scalar<T: Numeric>(s: Scalar) -> Result<T> {
    s.get::<T>().ok_or_else(|| {
        super::unsupported(format!("a {} scalar for {} elements", s.dtype(), T::DTYPE))
    })
}
