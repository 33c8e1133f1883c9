//! Fault injection (feature `fault-injection`, off by default): make the Nth allocation,
//! copy, op or event call of a [`CpuBackend`](crate::CpuBackend) fail with a typed error, and
//! count calls and live objects so tests can check that every error surfaces where it was
//! injected and that every buffer is released afterwards.
//!
//! Without the feature none of this is compiled: the backend has no counters and its calls
//! no checks.
//!
//! ```
//! use gpukit::cpu::{CpuBackend, FaultKind, FaultPlan};
//!
//! let (backend, probe) = CpuBackend::with_faults(FaultPlan::new(FaultKind::Alloc, 2))?;
//! let ctx = gpukit::core::Context::new(backend)?;
//! let a = ctx.alloc_zeros::<f32>(128)?;                // allocation #1: fine
//! let err = ctx.alloc_zeros::<f32>(128).unwrap_err();  // allocation #2: injected
//! assert!(matches!(err, gpukit::Error::OutOfMemory { .. }));
//! assert_eq!(probe.stats().live_buffers, 1);
//! drop(a);                                             // its block stays in the pool
//! assert_eq!(probe.stats().live_buffers, 1);
//! ctx.trim()?;
//! assert_eq!(probe.stats().live_buffers, 0);
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! What counts as which kind:
//! - [`FaultKind::Alloc`]: `alloc` (device) and `alloc_host`; an injected failure is
//!   [`gpukit_core::Error::OutOfMemory`] (which gpukit-core's device pool answers by
//!   trimming its cache and, for a request smaller than its block, trying the exact size:
//!   a 128-f32 array fills a 512-byte block, so its fault surfaces);
//! - [`FaultKind::Copy`]: `copy_h2d`, `copy_d2h`, `copy_d2d`;
//! - [`FaultKind::Op`]: `Backend::gemm` and kernel `launch` (the built-in ops, all written
//!   as kernels, `fill`, `axpy`, `add`, `exp`, ..., included);
//! - [`FaultKind::Event`]: `record_event` (the safe layer's untimed ordering events
//!   included) and `stream_wait`;
//! - [`FaultKind::Any`]: every call of the four kinds above, in one count.
//!
//! Copy, op and event faults are [`gpukit_core::Error::Backend`] with `backend: "cpu"`, the
//! backend call's name as `call` and `"injected fault #N"` as the message. A failing copy or
//! op fails at the call that would have queued it: nothing is queued, and the error is
//! returned there and then (never later, from a sync). A fault is one-shot: the calls after
//! the Nth succeed again.
//!
//! A fault must never leave a stream waiting forever, so fault tests run each case through
//! [`within_limit`], which turns a hang into a test failure instead of a stalled suite.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use gpukit_core::Error;

/// The start of an injected fault's message (or, for allocations, detail).
const INJECTED: &str = "injected fault";

/// Whether `e` (or the error it wraps, see [`gpukit_core::Error::root`]) is a fault injected by
/// a [`FaultPlan`], in its typed form.
pub fn is_injected(e: &Error) -> bool {
    match e.root() {
        Error::Backend {
            backend: "cpu",
            message,
            ..
        } => message.starts_with(INJECTED),
        Error::OutOfMemory {
            backend: "cpu",
            detail,
            ..
        } => detail.starts_with(INJECTED),
        _ => false,
    }
}

/// Which calls a [`FaultPlan`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Device and host allocations.
    Alloc,
    /// Host-to-device, device-to-host and device-to-device copies.
    Copy,
    /// Built-in ops, gemm and kernel launches.
    Op,
    /// `record_event` and `stream_wait`.
    Event,
    /// All of the above, counted together.
    Any,
}

impl FaultKind {
    /// Every kind, `Any` last.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::Alloc,
        FaultKind::Copy,
        FaultKind::Op,
        FaultKind::Event,
        FaultKind::Any,
    ];

    fn code(self) -> u8 {
        match self {
            FaultKind::Alloc => 1,
            FaultKind::Copy => 2,
            FaultKind::Op => 3,
            FaultKind::Event => 4,
            FaultKind::Any => 5,
        }
    }
}

/// Fail the `nth` (1-based) call of `kind`, counted from when the plan is armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultPlan {
    /// The calls counted.
    pub kind: FaultKind,
    /// Which of them fails: 1 is the first.
    pub nth: u64,
}

impl FaultPlan {
    /// A plan failing the `nth` (1-based) call of `kind`.
    pub const fn new(kind: FaultKind, nth: u64) -> Self {
        FaultPlan { kind, nth }
    }
}

/// What a [`FaultProbe`] has counted since the backend was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Allocation calls (device and host), failed ones included.
    pub allocs: u64,
    /// Copy calls.
    pub copies: u64,
    /// Op calls (built-in ops, gemm, launches).
    pub ops: u64,
    /// Event calls (`record_event`, `stream_wait`).
    pub events: u64,
    /// Calls of all four kinds.
    pub any: u64,
    /// Faults injected so far.
    pub injected: u64,
    /// Device buffers allocated and not yet freed (freed means the memory went back to the
    /// allocator: after the array was dropped *and* the last queued task using it ran).
    pub live_buffers: u64,
    /// Host allocations not yet freed (a context's pinned pool keeps freed `HostBuffer`s
    /// until it is trimmed or the context is dropped).
    pub live_host: u64,
    /// Streams created and not yet destroyed.
    pub live_streams: u64,
}

impl FaultStats {
    /// The count of one kind.
    pub fn count(&self, kind: FaultKind) -> u64 {
        match kind {
            FaultKind::Alloc => self.allocs,
            FaultKind::Copy => self.copies,
            FaultKind::Op => self.ops,
            FaultKind::Event => self.events,
            FaultKind::Any => self.any,
        }
    }
}

/// The counters and the armed plan, shared by a backend and its probes.
#[derive(Default)]
pub(crate) struct State {
    allocs: AtomicU64,
    copies: AtomicU64,
    ops: AtomicU64,
    events: AtomicU64,
    any: AtomicU64,
    injected: AtomicU64,
    live_buffers: AtomicU64,
    live_host: AtomicU64,
    live_streams: AtomicU64,
    /// The armed kind's code (0: disarmed).
    armed: AtomicU8,
    /// The armed kind's counter when the plan was armed.
    base: AtomicU64,
    /// The value of the armed kind's counter at which the call fails.
    target: AtomicU64,
    /// The injected faults, oldest first: (kind counted, call, number).
    log: Mutex<Vec<InjectedFault>>,
}

/// One fault that was injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedFault {
    /// The kind the plan counted.
    pub kind: FaultKind,
    /// The backend call that failed (`alloc`, `copy_h2d`, `record_event`, ...).
    pub call: &'static str,
    /// Its number among the plan's calls (the plan's `nth`).
    pub nth: u64,
}

/// Which live count a [`Live`] guard holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LiveKind {
    Buffer,
    Host,
    Stream,
}

impl State {
    fn counter(&self, kind: FaultKind) -> &AtomicU64 {
        match kind {
            FaultKind::Alloc => &self.allocs,
            FaultKind::Copy => &self.copies,
            FaultKind::Op => &self.ops,
            FaultKind::Event => &self.events,
            FaultKind::Any => &self.any,
        }
    }

    fn live(&self, kind: LiveKind) -> &AtomicU64 {
        match kind {
            LiveKind::Buffer => &self.live_buffers,
            LiveKind::Host => &self.live_host,
            LiveKind::Stream => &self.live_streams,
        }
    }

    fn arm(&self, plan: Option<FaultPlan>) {
        // Disarm first so that no call matches a half-written plan.
        self.armed.store(0, Ordering::SeqCst);
        if let Some(plan) = plan {
            let base = self.counter(plan.kind).load(Ordering::SeqCst);
            self.base.store(base, Ordering::SeqCst);
            self.target
                .store(base.saturating_add(plan.nth), Ordering::SeqCst);
            self.armed.store(plan.kind.code(), Ordering::SeqCst);
        }
    }

    /// Counts one call of `kind`; if it is the armed plan's call, returns the plan's kind
    /// and the call's number among the plan's calls (its `nth`).
    fn count(&self, kind: FaultKind) -> Option<(FaultKind, u64)> {
        let n_kind = self.counter(kind).fetch_add(1, Ordering::SeqCst) + 1;
        let n_any = self.any.fetch_add(1, Ordering::SeqCst) + 1;
        let armed = self.armed.load(Ordering::SeqCst);
        let (plan_kind, n) = if armed == kind.code() {
            (kind, n_kind)
        } else if armed == FaultKind::Any.code() {
            (FaultKind::Any, n_any)
        } else {
            return None;
        };
        let target = self.target.load(Ordering::SeqCst);
        if n != target {
            return None;
        }
        // One-shot: only the call that disarms the plan fails.
        if self
            .armed
            .compare_exchange(armed, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return None;
        }
        Some((plan_kind, n - self.base.load(Ordering::SeqCst)))
    }
}

/// The backend's side: counts calls, injects the planned fault, hands out live guards.
#[derive(Clone, Default)]
pub(crate) struct Faults(Arc<State>);

impl Faults {
    pub(crate) fn new(plan: Option<FaultPlan>) -> Self {
        let f = Faults::default();
        f.0.arm(plan);
        f
    }

    pub(crate) fn probe(&self) -> FaultProbe {
        FaultProbe(self.0.clone())
    }

    /// Counts a call of `kind` named `call`; fails it if it is the planned one. `bytes` is
    /// the request's size for allocations (which fail as out of memory).
    pub(crate) fn hit(
        &self,
        kind: FaultKind,
        call: &'static str,
        bytes: usize,
    ) -> Result<(), Error> {
        let Some((plan_kind, n)) = self.0.count(kind) else {
            return Ok(());
        };
        self.0.injected.fetch_add(1, Ordering::SeqCst);
        self.0
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(InjectedFault {
                kind: plan_kind,
                call,
                nth: n,
            });
        let message = format!("{INJECTED} #{n}");
        Err(match kind {
            FaultKind::Alloc => Error::OutOfMemory {
                backend: "cpu",
                requested: bytes,
                detail: format!("{message} ({call})"),
            },
            _ => Error::Backend {
                backend: "cpu",
                call,
                message,
            },
        })
    }

    /// A guard that counts one live object of `kind` until it is dropped.
    pub(crate) fn live(&self, kind: LiveKind) -> Live {
        self.0.live(kind).fetch_add(1, Ordering::SeqCst);
        Live {
            state: self.0.clone(),
            kind,
        }
    }
}

/// Counts one live buffer, host allocation or stream while it exists.
pub(crate) struct Live {
    state: Arc<State>,
    kind: LiveKind,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.state.live(self.kind).fetch_sub(1, Ordering::SeqCst);
    }
}

/// A shared handle on a backend's fault counters and plan; it outlives the backend, so a
/// test can check the live counts after the context is dropped.
#[derive(Clone)]
pub struct FaultProbe(Arc<State>);

impl std::fmt::Debug for FaultProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FaultProbe").field(&self.stats()).finish()
    }
}

impl FaultProbe {
    /// The counters now.
    pub fn stats(&self) -> FaultStats {
        let s = &*self.0;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        FaultStats {
            allocs: get(&s.allocs),
            copies: get(&s.copies),
            ops: get(&s.ops),
            events: get(&s.events),
            any: get(&s.any),
            injected: get(&s.injected),
            live_buffers: get(&s.live_buffers),
            live_host: get(&s.live_host),
            live_streams: get(&s.live_streams),
        }
    }

    /// Arms `plan`: the `plan.nth` call of `plan.kind` from now on fails (replacing any
    /// plan armed before). Calls racing with arming on other threads may or may not count.
    pub fn arm(&self, plan: FaultPlan) {
        self.0.arm(Some(plan));
    }

    /// Disarms the plan, if one is armed.
    pub fn disarm(&self) {
        self.0.arm(None);
    }

    /// Whether a plan is armed and has not fired yet.
    pub fn is_armed(&self) -> bool {
        self.0.armed.load(Ordering::SeqCst) != 0
    }

    /// The faults injected so far, oldest first.
    pub fn injected(&self) -> Vec<InjectedFault> {
        self.0.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Why [`within_limit`] has no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// The case was still running when the limit passed: it hangs (or is far too slow).
    TimedOut(Duration),
    /// The case panicked; the panic message was printed where it happened.
    Panicked,
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overrun::TimedOut(limit) => write!(f, "did not finish within {limit:?}: it hangs"),
            Overrun::Panicked => f.write_str("panicked (its message is printed above)"),
        }
    }
}

impl std::error::Error for Overrun {}

/// Runs `case` on a thread of its own and waits at most `limit` for its result.
///
/// A test's guard against a hang: the case fails with [`Overrun::TimedOut`] rather than
/// stalling the test run. A thread that overruns is left behind (nothing can stop it), to
/// end with the test process.
///
/// ```
/// use std::time::Duration;
/// use gpukit::cpu::fault::{within_limit, Overrun};
///
/// assert_eq!(within_limit(Duration::from_secs(5), || 6 * 7), Ok(42));
/// let hang = within_limit(Duration::from_millis(10), || std::thread::sleep(Duration::from_secs(1)));
/// assert_eq!(hang, Err(Overrun::TimedOut(Duration::from_millis(10))));
/// ```
pub fn within_limit<T: Send + 'static>(
    limit: Duration,
    case: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Overrun> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The receiver is gone only after a time-out; then nobody wants the result.
        let _ = tx.send(case());
    });
    rx.recv_timeout(limit).map_err(|err| match err {
        mpsc::RecvTimeoutError::Timeout => Overrun::TimedOut(limit),
        mpsc::RecvTimeoutError::Disconnected => Overrun::Panicked,
    })
}
