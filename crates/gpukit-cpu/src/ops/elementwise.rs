//! The element-wise families as tasks: the table's unary and binary ops, random fills
//! and casts.
//!
//! Every function here is `unsafe` with the contract of [`super::task`] (`Backend::op`'s):
//! each range lies inside its buffer and is aligned for its type, and gpukit-core orders
//! every other access to the written ranges against the task. That is what makes each
//! [`Src::get`](super::ranges::Src::get) and [`Dst::get`](super::ranges::Dst::get) in the
//! tasks sound.

use gpukit_core::{
    BinaryOp, BufAt, DType, DTypeVisitor, Distribution, Float, Numeric, Result, Rhs, RhsSlice,
    Scalar, Shape, UnaryOp,
};

use super::kind::Kind;
use super::ranges::{done, Dst, Ranges, Src};
use crate::mem::SendPtr;
use crate::queue::Task;
use crate::CpuBackend;

/// `out[i] = op(src[i])` over `len` elements (in place when `src` is `None`).
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn unary<T: Numeric, K: Kind<T>>(
    op: UnaryOp,
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
        K::unary(op, s, o);
    })
}

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

/// The second operand of a binary op as a task captures it.
#[derive(Clone, Copy)]
enum RhsRange<T> {
    /// An array of the output's length.
    Array(Src<T>),
    /// A row vector of `shape.cols` elements.
    Row(Src<T>),
    /// A column vector of `shape.rows` elements.
    Col(Src<T>),
    /// One value.
    Scalar(T),
}

/// `out = op(src, rhs)` over a `shape` matrix (in place when `src` is `None`).
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn binary<T: Numeric, K: Kind<T>>(
    op: BinaryOp,
    src: Option<BufAt<'_, CpuBackend>>,
    rhs: &Rhs<'_, CpuBackend>,
    out: BufAt<'_, CpuBackend>,
    shape: Shape,
) -> Result<Task> {
    let len = shape.rows * shape.cols;
    let mut r = Ranges::default();
    let (s, o) = (src.map(|s| r.src::<T>(s, len)), r.dst::<T>(out, len));
    let rhs = match *rhs {
        Rhs::Array(b) => RhsRange::Array(r.src::<T>(b, len)),
        Rhs::Row(v) => RhsRange::Row(r.src::<T>(v, shape.cols)),
        Rhs::Col(v) => RhsRange::Col(r.src::<T>(v, shape.rows)),
        Rhs::Scalar(v) => RhsRange::Scalar(scalar(v)?),
    };
    Ok(done(r, move || {
        // SAFETY: the ranges meet this function's contract (live, aligned, ordered, the
        // written one overlapping nothing else).
        let (s, o, rhs) = unsafe {
            let rhs = match rhs {
                RhsRange::Array(b) => RhsSlice::Array(b.get()),
                RhsRange::Row(v) => RhsSlice::Row(v.get()),
                RhsRange::Col(v) => RhsSlice::Col(v.get()),
                RhsRange::Scalar(v) => RhsSlice::Scalar(v),
            };
            (s.map(|s| s.get()), o.get(), rhs)
        };
        K::binary(op, s, rhs, shape.cols, o);
    }))
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
