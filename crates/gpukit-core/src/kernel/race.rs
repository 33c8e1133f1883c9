//! The race checker of `#[kernel]` launches on the CPU backend: which threads of one launch
//! read and wrote each element, between which barriers.
//!
//! A GPU orders two accesses of one launch to the same element only by a `barrier()`
//! between them (threads of one block) or not at all (threads of different blocks: only
//! the launch boundary orders those). Two accesses of different threads to one element,
//! at least one a write and not both atomic, with no such ordering between them, are a
//! data race: the result depends on the hardware's schedule. The CPU twin runs every
//! thread one after another and would give one plausible answer; under the checker it
//! records, per element, the threads that touched it, and the launch fails with
//! [`crate::Error::KernelFailed`] naming the kernel, the array, the index and the two
//! threads.
//!
//! The twin runs the blocks one after another, and within a block the code between two
//! barriers for every thread before any passes the barrier. So an element needs, per kind
//! of access (read, write, atomic), only:
//! - the first thread of the launch that made one: an access by another block races with
//!   it exactly when some earlier block made one (the first is then in an earlier block);
//! - up to two threads that made one since the block's last barrier: an access by a thread
//!   of the same block races with one of them exactly when one is another thread.
//!
//! That is 56 bytes per element of each array a launch touches (allocated when the launch
//! first touches the array, freed when it ends), whatever the launch's size.

use std::cell::{Cell, RefCell};

use super::LaunchConfig;

/// What an access does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Access {
    /// A plain read.
    Read = 0,
    /// A plain write (a compound assignment is a read and a write).
    Write = 1,
    /// An atomic read-modify-write.
    Atomic = 2,
}

impl Access {
    /// The kinds an access of this kind races with.
    fn conflicts(self) -> &'static [Access] {
        match self {
            Access::Read => &[Access::Write, Access::Atomic],
            Access::Write => &[Access::Read, Access::Write, Access::Atomic],
            Access::Atomic => &[Access::Read, Access::Write],
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Access::Read => "reads",
            Access::Write => "writes",
            Access::Atomic => "updates (atomically)",
        }
    }
}

const NONE32: u32 = u32::MAX;
const NONE64: u64 = u64::MAX;

/// What the checker keeps of one element.
#[derive(Clone, Copy)]
struct Shadow {
    /// Per kind, the first thread of the launch (block * threads per block + thread) that
    /// made such an access.
    first: [u64; 3],
    /// The barrier interval `recent` belongs to.
    epoch: u64,
    /// Per kind, up to two threads of the block (their index in it) that made such an
    /// access in `epoch`.
    recent: [[u32; 2]; 3],
}

const FRESH: Shadow = Shadow {
    first: [NONE64; 3],
    epoch: 0,
    recent: [[NONE32; 2]; 3],
};

/// One launch's race checker: the twin calls it at each block's start, at each barrier and
/// at each access of an array element.
#[doc(hidden)]
pub struct RaceCheck {
    grid: [u64; 3],
    block: [u64; 3],
    threads: u64,
    /// The current barrier interval: a new one at each block's start and each barrier.
    epoch: Cell<u64>,
    /// The current block, linear.
    current: Cell<u64>,
    /// Per array number, its shadow (empty until the launch touches it).
    shadows: RefCell<Vec<Vec<Shadow>>>,
    /// The first race found.
    found: RefCell<Option<Race>>,
}

impl std::fmt::Debug for RaceCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaceCheck")
            .field("grid", &self.grid)
            .field("block", &self.block)
            .field("found", &self.found.borrow().is_some())
            .finish_non_exhaustive()
    }
}

/// A race: the array's number and index, and the two accesses (thread, kind).
struct Race {
    array: u32,
    index: usize,
    first: (u64, Access),
    second: (u64, Access),
    same_block: bool,
}

impl RaceCheck {
    /// The checker for a launch of geometry `cfg`.
    pub(crate) fn new(cfg: &LaunchConfig) -> RaceCheck {
        let [gx, gy, gz] = cfg.grid.map(u64::from);
        let [bx, by, bz] = cfg.block.map(u64::from);
        RaceCheck {
            grid: [gx, gy, gz],
            block: [bx, by, bz],
            threads: (bx * by * bz).max(1),
            epoch: Cell::new(0),
            current: Cell::new(0),
            shadows: RefCell::new(Vec::new()),
            found: RefCell::new(None),
        }
    }

    /// The twin starts block `linear` (blocks by z, y, x).
    pub fn block(&self, linear: usize) {
        self.current.set(linear as u64);
        self.epoch.set(self.epoch.get() + 1);
    }

    /// The block's threads meet at a barrier.
    pub fn barrier(&self) {
        self.epoch.set(self.epoch.get() + 1);
    }

    /// Thread `tid` of the current block makes an access of kind `kind` to element `index`
    /// of array number `array` (of `len` elements, in bounds); `shared`: a shared array,
    /// which only the block's threads see.
    pub fn access(
        &self,
        array: u32,
        shared: bool,
        index: usize,
        len: usize,
        tid: usize,
        kind: Access,
    ) {
        if self.found.borrow().is_some() {
            return;
        }
        let mut shadows = self.shadows.borrow_mut();
        let a = array as usize;
        if shadows.len() <= a {
            shadows.resize_with(a + 1, Vec::new);
        }
        let shadow = &mut shadows[a];
        if shadow.len() < len {
            shadow.resize(len, FRESH);
        }
        let Some(s) = shadow.get_mut(index) else {
            return;
        };
        let (epoch, block, t) = (self.epoch.get(), self.current.get(), tid as u32);
        let me = block * self.threads + tid as u64;
        if s.epoch != epoch {
            s.epoch = epoch;
            s.recent = [[NONE32; 2]; 3];
        }
        for &other in kind.conflicts() {
            let k = other as usize;
            let [p, q] = s.recent[k];
            let partner = [p, q].into_iter().find(|&r| r != NONE32 && r != t);
            let race = match partner {
                Some(r) => Some((block * self.threads + u64::from(r), true)),
                // Shared arrays are the block's: earlier blocks had their own.
                None if shared => None,
                None => {
                    let f = s.first[k];
                    (f != NONE64 && f / self.threads != block).then_some((f, false))
                }
            };
            if let Some((thread, same_block)) = race {
                *self.found.borrow_mut() = Some(Race {
                    array,
                    index,
                    first: (thread, other),
                    second: (me, kind),
                    same_block,
                });
                return;
            }
        }
        let k = kind as usize;
        let r = &mut s.recent[k];
        if r[0] == NONE32 {
            r[0] = t;
        } else if r[0] != t && r[1] == NONE32 {
            r[1] = t;
        }
        if s.first[k] == NONE64 {
            s.first[k] = me;
        }
    }

    /// The race found, described with the arrays' names (`arrays`, by number).
    pub(crate) fn report(&self, arrays: &[String]) -> Option<String> {
        let found = self.found.borrow();
        let race = found.as_ref()?;
        let array = arrays
            .get(race.array as usize)
            .map_or_else(|| format!("array {}", race.array), |a| format!("`{a}`"));
        let who =
            |(thread, kind): (u64, Access)| format!("{} {} it", self.thread(thread), kind.verb());
        let between = if race.same_block {
            "with no barrier() between them (threads of one block are ordered only by a barrier)"
        } else {
            "in different blocks (nothing orders the threads of different blocks within a \
             launch: split the work into two launches, or use atomics)"
        };
        Some(format!(
            "data race on {array}[{}]: {}, and {}, {between}; the launch's outputs are \
             undefined (found by the race checker, GPU_KERNEL_RACECHECK)",
            race.index,
            who(race.first),
            who(race.second),
        ))
    }

    /// Thread number `linear` of the launch, as CUDA's coordinates.
    fn thread(&self, linear: u64) -> String {
        let (block, tid) = (linear / self.threads, linear % self.threads);
        let [bx, by, _] = self.block;
        let [gx, gy, _] = self.grid;
        let t = [
            tid % bx.max(1),
            tid / bx.max(1) % by.max(1),
            tid / (bx.max(1) * by.max(1)),
        ];
        let b = [
            block % gx.max(1),
            block / gx.max(1) % gy.max(1),
            block / (gx.max(1) * gy.max(1)),
        ];
        format!(
            "thread ({}, {}, {}) of block ({}, {}, {})",
            t[0], t[1], t[2], b[0], b[1], b[2]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(block: u32, grid: u32) -> RaceCheck {
        RaceCheck::new(&LaunchConfig::new([grid, 1, 1], [block, 1, 1]))
    }

    #[test]
    fn two_threads_writing_one_element_between_barriers_race() {
        let rc = check(4, 1);
        rc.block(0);
        rc.access(0, false, 3, 8, 0, Access::Write);
        assert!(rc.report(&["out".into()]).is_none());
        rc.access(0, false, 3, 8, 2, Access::Write);
        let msg = rc.report(&["out".into()]).expect("a race");
        assert!(msg.contains("`out`[3]"), "{msg}");
        assert!(
            msg.contains("thread (0, 0, 0) of block (0, 0, 0) writes it"),
            "{msg}"
        );
        assert!(
            msg.contains("thread (2, 0, 0) of block (0, 0, 0) writes it"),
            "{msg}"
        );
        assert!(msg.contains("barrier"), "{msg}");
    }

    #[test]
    fn a_barrier_orders_a_write_and_a_later_read_of_another_thread() {
        let rc = check(4, 1);
        rc.block(0);
        rc.access(0, true, 1, 4, 1, Access::Write);
        rc.barrier();
        rc.access(0, true, 1, 4, 0, Access::Read);
        rc.access(0, true, 1, 4, 3, Access::Read);
        assert!(rc.report(&[]).is_none());
        // ... but not a write after those reads without another barrier.
        rc.access(0, true, 1, 4, 3, Access::Write);
        let msg = rc.report(&[]).expect("a race");
        assert!(
            msg.contains("thread (0, 0, 0) of block (0, 0, 0) reads it"),
            "{msg}"
        );
    }

    #[test]
    fn one_thread_never_races_with_itself_and_atomics_never_with_atomics() {
        let rc = check(8, 2);
        rc.block(0);
        for t in 0..8 {
            rc.access(0, false, t, 8, t, Access::Read);
            rc.access(0, false, t, 8, t, Access::Write);
            rc.access(0, false, t, 8, t, Access::Read);
            rc.access(1, false, 0, 1, t, Access::Atomic);
        }
        rc.block(1);
        for t in 0..8 {
            rc.access(1, false, 0, 1, t, Access::Atomic);
        }
        assert!(rc.report(&[]).is_none());
    }

    #[test]
    fn blocks_race_on_global_arrays_whatever_the_barriers_but_not_on_shared_ones() {
        let rc = check(2, 3);
        rc.block(0);
        rc.access(0, true, 0, 1, 0, Access::Write);
        rc.access(1, false, 0, 1, 1, Access::Read);
        rc.barrier();
        rc.block(1);
        rc.access(0, true, 0, 1, 1, Access::Write);
        assert!(
            rc.report(&[]).is_none(),
            "each block has its own shared array"
        );
        rc.barrier();
        rc.access(1, false, 0, 1, 0, Access::Atomic);
        let msg = rc.report(&["s".into(), "g".into()]).expect("a race");
        assert!(msg.contains("`g`[0]"), "{msg}");
        assert!(
            msg.contains("thread (1, 0, 0) of block (0, 0, 0) reads it"),
            "{msg}"
        );
        assert!(
            msg.contains("thread (0, 0, 0) of block (1, 0, 0) updates"),
            "{msg}"
        );
        assert!(msg.contains("different blocks"), "{msg}");
    }

    #[test]
    fn a_plain_write_and_an_atomic_of_another_thread_race() {
        let rc = check(4, 1);
        rc.block(0);
        rc.access(0, false, 0, 1, 0, Access::Write);
        rc.access(0, false, 0, 1, 0, Access::Atomic);
        rc.access(0, false, 0, 1, 1, Access::Atomic);
        assert!(
            rc.report(&[]).is_some(),
            "thread 0's plain write against thread 1's atomic"
        );
    }
}
