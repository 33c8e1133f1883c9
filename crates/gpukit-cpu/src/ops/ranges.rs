//! The typed ranges an op's task captures ([`Src`], [`Dst`]) and the buffers it keeps alive
//! until it has run ([`Ranges`], [`done`]).

use std::sync::Arc;

use gpukit_core::{BufAt, Element};

use crate::mem::{Mem, SendPtr};
use crate::queue::Task;
use crate::CpuBackend;

/// A typed read-only range captured by a task.
#[derive(Clone, Copy)]
pub(crate) struct Src<T> {
    ptr: SendPtr,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

/// A typed writable range captured by a task.
#[derive(Clone, Copy)]
pub(crate) struct Dst<T> {
    ptr: SendPtr,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> Src<T> {
    fn new(ptr: SendPtr, len: usize) -> Self {
        Src {
            ptr,
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// # Safety
    ///
    /// - the range is live, aligned for `T` and not written while the slice is used (the
    ///   task holds the buffer's `Arc` and gpukit-core orders every writer against it).
    pub(crate) unsafe fn get<'a>(self) -> &'a [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts(self.ptr.get().cast::<T>(), self.len) }
    }
}

impl<T: Element> Dst<T> {
    pub(crate) fn new(ptr: SendPtr, len: usize) -> Self {
        Dst {
            ptr,
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// # Safety
    ///
    /// - the range is live, aligned for `T`, and accessed by nothing else while the slice is
    ///   used (gpukit-core orders every other access against this write, and `&mut` borrows at
    ///   the call site keep a write from overlapping the op's other arguments).
    pub(crate) unsafe fn get<'a>(self) -> &'a mut [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.get().cast::<T>(), self.len) }
    }
}

/// The ranges a task touches: the buffers it keeps alive.
type Keep = [Option<Arc<Mem>>; 4];

/// Collects a task's ranges, keeping each buffer alive until the task has run.
#[derive(Default)]
pub(crate) struct Ranges {
    keep: Keep,
    n: usize,
}

impl Ranges {
    /// The address of `at`, its buffer kept alive with the task.
    pub(crate) fn hold(&mut self, at: BufAt<'_, CpuBackend>) -> SendPtr {
        if let Some(slot) = self.keep.get_mut(self.n) {
            *slot = Some(at.buf.mem.clone());
            self.n += 1;
        }
        at.buf.at(at.offset)
    }

    /// `len` elements of `T` at `at`, to read.
    pub(crate) fn src<T: Element>(&mut self, at: BufAt<'_, CpuBackend>, len: usize) -> Src<T> {
        Src::new(self.hold(at), len)
    }

    /// `len` elements of `T` at `at`, to write.
    pub(crate) fn dst<T: Element>(&mut self, at: BufAt<'_, CpuBackend>, len: usize) -> Dst<T> {
        Dst::new(self.hold(at), len)
    }
}

/// The task running `f`, holding the buffers of `keep` until it is dropped.
pub(crate) fn done(keep: Ranges, f: impl Fn() + Send + 'static) -> Task {
    Task::new(move || {
        let _keep = &keep;
        f();
        Ok(())
    })
}
