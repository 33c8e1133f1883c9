//! A stream's unit of work: a closure stored inline, so that queuing an op or a copy
//! allocates nothing.
//!
//! Every built-in op, copy, launch and wait is a closure of a few pointers, lengths and
//! `Arc`s. [`Task`] keeps such a closure in a fixed-size, 16-byte-aligned buffer beside two
//! function pointers (call and drop) instead of a `Box<dyn Fn>`; a closure that does not fit
//! is a compile-time error, so no task can fall back to the heap unnoticed. A stream's queue
//! holds tasks by value in a reused ring buffer, so the steady state of a loop of ops makes
//! no heap allocation on the caller's thread or the worker's.

use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};

use gpukit_core::Error;

/// Bytes of closure a task holds without a heap allocation (a launch with the most
/// arguments, a bounds-checked kernel's of 12 parameters, needs this much with the byte
/// count a `u8`). A task is 512 bytes in all: every op moves it through the queue, so it
/// stays small.
pub(crate) const INLINE: usize = 496;

/// Storage for one closure of at most [`INLINE`] bytes and 16-byte alignment.
#[repr(C, align(16))]
struct Storage([MaybeUninit<u8>; INLINE]);

/// A queued piece of work: `Fn() -> Result<(), Error>`, callable any number of times
/// (graph replay runs it again), `Send` but not `Sync`.
pub(crate) struct Task {
    storage: Storage,
    /// Calls the closure in `storage` (its type erased).
    call: unsafe fn(*const u8) -> Result<(), Error>,
    /// Drops the closure in `storage` in place.
    drop: unsafe fn(*mut u8),
    /// `Send` because every closure stored is `Send`; not `Sync`, since a closure need not be.
    _send: PhantomData<Box<dyn Fn() + Send>>,
}

impl Task {
    /// A task running `f`, stored inline. A closure larger than [`INLINE`] bytes or aligned
    /// to more than 16 does not compile.
    pub(crate) fn new<F>(f: F) -> Task
    where
        F: Fn() -> Result<(), Error> + Send + 'static,
    {
        const { assert!(fits::<F>(), "a task's closure must fit its inline storage") };
        let mut storage = Storage([MaybeUninit::uninit(); INLINE]);
        // SAFETY: `fits` holds (checked at compile time above): `F` is at most INLINE bytes
        // and needs no more than the storage's 16-byte alignment, so the write stays inside
        // `storage` and is aligned.
        unsafe { storage.0.as_mut_ptr().cast::<F>().write(f) };
        Task {
            storage,
            call: call::<F>,
            drop: drop_in_place::<F>,
            _send: PhantomData,
        }
    }

    /// Runs the closure.
    pub(crate) fn call(&self) -> Result<(), Error> {
        // SAFETY: `storage` holds an initialized `F` (written by `new`, dropped only in
        // `Drop`), and `self.call` is `call::<F>` for that same `F`.
        unsafe { (self.call)(self.storage.0.as_ptr().cast()) }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // SAFETY: `storage` holds an initialized closure of the type `self.drop` was made
        // for; it is dropped exactly once, here, and never used again.
        unsafe { (self.drop)(self.storage.0.as_mut_ptr().cast()) }
    }
}

/// Whether a closure of type `F` fits a task's storage.
const fn fits<F>() -> bool {
    size_of::<F>() <= INLINE && align_of::<F>() <= align_of::<Storage>()
}

/// Calls the `F` at `p`.
///
/// # Safety
///
/// `p` points to a live, initialized `F`.
unsafe fn call<F: Fn() -> Result<(), Error>>(p: *const u8) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    let f = unsafe { &*p.cast::<F>() };
    f()
}

/// Drops the `F` at `p` in place.
///
/// # Safety
///
/// `p` points to a live, initialized `F` that is not used again.
unsafe fn drop_in_place<F>(p: *mut u8) {
    // SAFETY: forwarded from the caller.
    unsafe { p.cast::<F>().drop_in_place() }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_task_runs_at_every_call_and_returns_its_result() {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let t = Task::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        t.call().unwrap();
        t.call().unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        let t = Task::new(|| {
            Err(Error::Backend {
                backend: "cpu",
                call: "test",
                message: "no".into(),
            })
        });
        assert!(matches!(t.call(), Err(Error::Backend { call: "test", .. })));
    }

    #[test]
    fn a_closure_of_the_full_size_fits_and_is_dropped_once() {
        let held = Arc::new(());
        let h = held.clone();
        // The largest capture that fits: an Arc beside INLINE - 8 bytes.
        let pad = [5u8; INLINE - 8];
        let t = Task::new(move || {
            let _ = &h;
            assert!(pad.iter().all(|&b| b == 5), "the capture moved intact");
            Ok(())
        });
        // Moving a task moves its closure with it.
        let moved = vec![t];
        moved[0].call().unwrap();
        assert_eq!(Arc::strong_count(&held), 2);
        drop(moved);
        assert_eq!(Arc::strong_count(&held), 1, "the closure was dropped once");
    }

    #[test]
    fn the_limits_are_what_fits_says() {
        assert!(fits::<[u8; INLINE]>());
        assert!(!fits::<[u8; INLINE + 1]>());
        #[repr(align(32))]
        struct Wide;
        assert!(!fits::<Wide>());
        assert_eq!(size_of::<Task>(), INLINE + 16);
    }
}
