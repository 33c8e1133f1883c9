//! The ops that compare, select and index as tasks: comparisons into `u8` masks, `where`,
//! `gather`, `scatter_add` and `one_hot`, each running
//! gpukit-core's reference (`optable::index`). An index out of range is reported through the
//! context's fault record, as a checked kernel's twin reports one.
//!
//! The family functions are `unsafe` with the contract of [`super::task`], which makes the
//! tasks' `get`s sound.

use gpukit_core::optable::{self, Faults};
use gpukit_core::{BufAt, KernelFaults, Numeric, Shape};

use super::ranges::{done, Ranges};
use crate::mem::SendPtr;
use crate::queue::Task;
use crate::CpuBackend;

/// The fault record at `p`, for the op tagged `tag`.
///
/// # Safety
///
/// `p` is the context's fault record ([`gpukit_core::FAULT_WORDS`] aligned `u32`s), live for
/// the task and only ever accessed atomically.
unsafe fn record_at<'a>(p: SendPtr, tag: u32) -> KernelFaults<'a> {
    // SAFETY: this function's contract.
    unsafe { KernelFaults::from_raw(p.get(), tag) }
}

/// Rows of `src` picked by `idx`.
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn gather<T: Numeric>(
    (src, idx, out): (
        BufAt<'_, CpuBackend>,
        BufAt<'_, CpuBackend>,
        BufAt<'_, CpuBackend>,
    ),
    shape: Shape,
    n: usize,
    faults: Faults<'_, CpuBackend>,
) -> Task {
    let mut r = Ranges::default();
    let (s, i, o) = (
        r.src::<T>(src, shape.rows * shape.cols),
        r.src::<u32>(idx, n),
        r.dst::<T>(out, n * shape.cols),
    );
    let (rec, tag) = (r.hold(faults.record), faults.tag);
    done(r, move || {
        // SAFETY: as above; the record is the context's fault record.
        let (s, i, o, f) = unsafe { (s.get(), i.get(), o.get(), record_at(rec, tag)) };
        optable::gather_rows(s, shape.cols, i, o, |at, len| f.fault(0, at, len));
    })
}

/// Rows of `src` added into the rows of `out` that `idx` names.
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn scatter_add<T: Numeric>(
    (src, idx, out): (
        BufAt<'_, CpuBackend>,
        BufAt<'_, CpuBackend>,
        BufAt<'_, CpuBackend>,
    ),
    shape: Shape,
    n: usize,
    faults: Faults<'_, CpuBackend>,
) -> Task {
    let mut r = Ranges::default();
    let (s, i, o) = (
        r.src::<T>(src, n * shape.cols),
        r.src::<u32>(idx, n),
        r.dst::<T>(out, shape.rows * shape.cols),
    );
    let (rec, tag) = (r.hold(faults.record), faults.tag);
    done(r, move || {
        // SAFETY: as above.
        let (s, i, o, f) = unsafe { (s.get(), i.get(), o.get(), record_at(rec, tag)) };
        optable::scatter_add_rows(s, shape.cols, i, o, |at, len| f.fault(0, at, len));
    })
}

/// One-hot rows of `shape.cols` classes.
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn one_hot<T: Numeric>(
    idx: BufAt<'_, CpuBackend>,
    out: BufAt<'_, CpuBackend>,
    shape: Shape,
    faults: Faults<'_, CpuBackend>,
) -> Task {
    let mut r = Ranges::default();
    let (i, o) = (
        r.src::<u32>(idx, shape.rows),
        r.dst::<T>(out, shape.rows * shape.cols),
    );
    let (rec, tag) = (r.hold(faults.record), faults.tag);
    done(r, move || {
        // SAFETY: as above.
        let (i, o, f) = unsafe { (i.get(), o.get(), record_at(rec, tag)) };
        optable::one_hot_rows(i, shape.cols, o, |at, len| f.fault(0, at, len));
    })
}

/// Reports the first of `len` indices that is `bound` or more.
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn check_indices(
    idx: BufAt<'_, CpuBackend>,
    len: usize,
    bound: u64,
    faults: Faults<'_, CpuBackend>,
) -> Task {
    let mut r = Ranges::default();
    let i = r.src::<u32>(idx, len);
    let (rec, tag) = (r.hold(faults.record), faults.tag);
    done(r, move || {
        // SAFETY: as above.
        let (i, f) = unsafe { (i.get(), record_at(rec, tag)) };
        if let Some(&bad) = i.iter().find(|&&v| u64::from(v) >= bound) {
            f.fault(0, u64::from(bad), bound);
        }
    })
}
