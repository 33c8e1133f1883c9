//! The happens-before record between streams, and the race checker built on it.
//!
//! CUDA orders work on one stream; between streams only what the program asks for
//! (`cuStreamWaitEvent`, the legacy stream's implicit waits, a graph's edges) and what the
//! host saw finish before it queued more (`cuStreamSynchronize`, `cuEventSynchronize`, a
//! query that answered "done", a host function that ran). Two streams touching the same
//! bytes, one of them writing, with neither ordered before the other, race: on a GPU the
//! result depends on timing, and a missing wait shows only when the hardware happens to run
//! the two in the wrong order. Here every operation carries a vector clock of what it is
//! ordered after, and every allocation the accesses made to it ([`Shadow`]); an access that
//! conflicts with an earlier one it is not ordered after is reported whatever order the
//! two happened to run in, so a missing wait fails every run.
//!
//! A *lane* is a sequence of operations in program order: a stream, or one branch of a
//! graph's launch. Clocks count a lane's operations. The host's knowledge is one process-wide
//! clock (any host thread that saw work finish counts for all of them): the checker never
//! reports what a host-side handshake between threads could have ordered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A lane's id; never reused.
pub type Lane = u64;

/// A new lane id.
pub fn new_lane() -> Lane {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A vector clock: for each lane, the last operation of it that is ordered before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vc(Vec<(Lane, u64)>);

impl Vc {
    /// The clock of `lane`, 0 when nothing of it is ordered before.
    pub fn get(&self, lane: Lane) -> u64 {
        match self.0.binary_search_by_key(&lane, |e| e.0) {
            Ok(i) => self.0[i].1,
            Err(_) => 0,
        }
    }

    /// Raises `lane`'s clock to `clock`.
    pub fn raise(&mut self, lane: Lane, clock: u64) {
        match self.0.binary_search_by_key(&lane, |e| e.0) {
            Ok(i) => self.0[i].1 = self.0[i].1.max(clock),
            Err(i) => self.0.insert(i, (lane, clock)),
        }
    }

    /// Everything `other` is ordered after, this is now ordered after too.
    pub fn join(&mut self, other: &Vc) {
        for &(lane, clock) in &other.0 {
            self.raise(lane, clock);
        }
    }
}

/// The host's knowledge, and its version (so that a snapshot is only replaced when it grew).
fn host() -> &'static Mutex<Arc<Vc>> {
    static HOST: OnceLock<Mutex<Arc<Vc>>> = OnceLock::new();
    HOST.get_or_init(|| Mutex::new(Arc::new(Vc::default())))
}

/// What the host has seen finish, now.
pub fn host_snapshot() -> Arc<Vc> {
    Arc::clone(&host().lock().unwrap_or_else(|e| e.into_inner()))
}

/// The host saw everything `vc` is ordered after finish.
pub fn host_learns(vc: &Vc) {
    let mut h = host().lock().unwrap_or_else(|e| e.into_inner());
    if vc.0.iter().all(|&(l, c)| h.get(l) >= c) {
        return;
    }
    let mut grown = (**h).clone();
    grown.join(vc);
    *h = Arc::new(grown);
}

/// An operation's place in the order: its lane and clock, what it is ordered after, and what
/// the host had seen finish when it was queued.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The operation's lane.
    pub lane: Lane,
    /// Its clock on the lane.
    pub clock: u64,
    /// What it is ordered after (its own lane included).
    pub vc: Arc<Vc>,
    /// The host's knowledge when it was queued.
    pub host: Arc<Vc>,
}

impl Stamp {
    /// Whether the operation is ordered after operation `clock` of `lane`.
    pub fn after(&self, lane: Lane, clock: u64) -> bool {
        self.vc.get(lane) >= clock || self.host.get(lane) >= clock
    }
}

/// How an operation touched memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Read.
    Read,
    /// Written.
    Write,
    /// Updated by atomic operations (which do not race with each other).
    Atomic,
}

impl Kind {
    fn conflicts(self, other: Kind) -> bool {
        !matches!(
            (self, other),
            (Kind::Read, Kind::Read) | (Kind::Atomic, Kind::Atomic)
        )
    }

    fn verb(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "wrote",
            Kind::Atomic => "updated atomically",
        }
    }

    /// Whether an access of this kind covers one of `other`'s kind for the checker (a later
    /// write on the lane stands for an earlier read of the same bytes).
    fn covers(self, other: Kind) -> bool {
        self == other || self == Kind::Write
    }
}

/// One operation's access to an allocation: bytes `lo..hi` from its base.
#[derive(Debug, Clone)]
pub struct Access {
    lane: Lane,
    clock: u64,
    kind: Kind,
    lo: u64,
    hi: u64,
    what: Arc<str>,
}

/// Most accesses remembered per allocation; older ones are forgotten (a race with them may
/// go unreported, a race is never invented).
const SHADOW_MAX: usize = 64;

/// The accesses made to one allocation.
#[derive(Debug, Default)]
pub struct Shadow {
    entries: Vec<Access>,
}

/// Two unordered conflicting accesses.
#[derive(Debug, Clone)]
pub struct Race {
    /// The access that found the race, described.
    pub now: String,
    /// The earlier one, described.
    pub before: String,
}

impl Shadow {
    /// Records an access by the operation `stamp` (described by `what`) and returns the first
    /// earlier access it races with.
    pub fn access(
        &mut self,
        stamp: &Stamp,
        kind: Kind,
        lo: u64,
        hi: u64,
        what: &Arc<str>,
    ) -> Option<Race> {
        if lo >= hi {
            return None;
        }
        let mut race = None;
        for e in &self.entries {
            if e.lane == stamp.lane || e.hi <= lo || hi <= e.lo || !kind.conflicts(e.kind) {
                continue;
            }
            if !stamp.after(e.lane, e.clock) {
                race = Some(Race {
                    now: format!("{what} {} bytes [{lo}, {hi})", kind.verb()),
                    before: format!("{} {} bytes [{}, {})", e.what, e.kind.verb(), e.lo, e.hi),
                });
                break;
            }
        }
        // Earlier accesses of the lane that this one covers say nothing more.
        self.entries
            .retain(|e| !(e.lane == stamp.lane && kind.covers(e.kind) && lo <= e.lo && e.hi <= hi));
        if self.entries.len() >= SHADOW_MAX {
            self.entries.remove(0);
        }
        self.entries.push(Access {
            lane: stamp.lane,
            clock: stamp.clock,
            kind,
            lo,
            hi,
            what: Arc::clone(what),
        });
        race
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(lane: Lane, clock: u64, after: &[(Lane, u64)]) -> Stamp {
        let mut vc = Vc::default();
        vc.raise(lane, clock);
        for &(l, c) in after {
            vc.raise(l, c);
        }
        Stamp {
            lane,
            clock,
            vc: Arc::new(vc),
            host: Arc::new(Vc::default()),
        }
    }

    #[test]
    fn unordered_conflicting_accesses_race_in_either_order() {
        let what: Arc<str> = Arc::from("op");
        let mut s = Shadow::default();
        assert!(s
            .access(&stamp(1, 1, &[]), Kind::Write, 0, 16, &what)
            .is_none());
        // Another lane reads without waiting: a race, whichever ran first.
        assert!(s
            .access(&stamp(2, 1, &[]), Kind::Read, 8, 12, &what)
            .is_some());
        let mut s = Shadow::default();
        assert!(s
            .access(&stamp(2, 1, &[]), Kind::Read, 8, 12, &what)
            .is_none());
        assert!(s
            .access(&stamp(1, 1, &[]), Kind::Write, 0, 16, &what)
            .is_some());
    }

    #[test]
    fn ordered_disjoint_and_compatible_accesses_do_not_race() {
        let what: Arc<str> = Arc::from("op");
        let mut s = Shadow::default();
        s.access(&stamp(1, 1, &[]), Kind::Write, 0, 16, &what);
        // Waited for lane 1's first operation.
        assert!(s
            .access(&stamp(2, 1, &[(1, 1)]), Kind::Read, 0, 16, &what)
            .is_none());
        // Disjoint bytes.
        assert!(s
            .access(&stamp(3, 1, &[]), Kind::Write, 16, 32, &what)
            .is_none());
        // Reads do not race with reads, atomics not with atomics.
        assert!(s
            .access(&stamp(4, 1, &[(1, 1)]), Kind::Read, 0, 8, &what)
            .is_none());
        let mut a = Shadow::default();
        a.access(&stamp(1, 1, &[]), Kind::Atomic, 0, 4, &what);
        assert!(a
            .access(&stamp(2, 1, &[]), Kind::Atomic, 0, 4, &what)
            .is_none());
        assert!(a
            .access(&stamp(3, 1, &[]), Kind::Read, 0, 4, &what)
            .is_some());
    }

    #[test]
    fn the_host_orders_what_it_saw_finish() {
        let what: Arc<str> = Arc::from("op");
        let mut s = Shadow::default();
        s.access(&stamp(7, 3, &[]), Kind::Write, 0, 4, &what);
        let mut host = Vc::default();
        host.raise(7, 3);
        let later = Stamp {
            host: Arc::new(host),
            ..stamp(8, 1, &[])
        };
        assert!(s.access(&later, Kind::Write, 0, 4, &what).is_none());
    }
}
