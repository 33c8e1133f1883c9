//! What a stream runs: the operations, how each one runs on the worker, and what happens
//! after (the race checker over the memory it touched, a sticky error when it faulted).
//!
//! Copies check their device ranges against the live allocations when they run (work queued
//! before a `cuMemFree` finds the memory gone): outside one live allocation is a sticky
//! `CUDA_ERROR_ILLEGAL_ADDRESS` with the reason on standard error. Host memory is the
//! caller's: a copy reads or writes it when it runs, and pageable memory was staged or
//! waited for when the copy was queued ([`crate::api::mem`]).

use std::sync::Arc;
use std::time::Instant;

use crate::capture::GraphExec;
use crate::config::RacePolicy;
use crate::context::Device;
use crate::errors::{cu, CuResult};
use crate::hb::{Kind, Stamp};
use crate::memory::{self, Allocation};
use crate::module::Launch;
use crate::stream::{Queued, Record, Stream};

/// A host function and its argument.
pub type HostFn = unsafe extern "C" fn(*mut libc::c_void);

/// Where a host-to-device copy reads.
#[derive(Debug, Clone)]
pub enum HostSrc {
    /// Pinned memory, read when the copy runs.
    Pinned(u64),
    /// Pageable memory, copied aside when the copy was queued.
    Staged(Arc<Vec<u8>>),
}

/// Work done on the CPU in stream order by a library (cuBLAS, NCCL).
pub type Call = Arc<dyn Fn(&Exec<'_>) -> Outcome + Send + Sync>;

/// One operation.
#[derive(Clone)]
#[allow(missing_debug_implementations)]
pub enum Work {
    /// A kernel launch.
    Kernel(Arc<Launch>),
    /// `cuMemcpyHtoDAsync`.
    HtoD {
        /// Destination (device).
        dst: u64,
        /// Source.
        src: HostSrc,
        /// Bytes.
        len: u64,
    },
    /// `cuMemcpyDtoHAsync`.
    DtoH {
        /// Destination (host).
        dst: u64,
        /// Source (device).
        src: u64,
        /// Bytes.
        len: u64,
    },
    /// `cuMemcpyDtoDAsync`, `cuMemcpyPeerAsync`.
    DtoD {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        len: u64,
    },
    /// `cuMemsetD8Async` and its wider forms.
    Memset {
        /// Destination.
        dst: u64,
        /// The value, `elem` bytes of it.
        value: u32,
        /// 1, 2 or 4.
        elem: u8,
        /// Elements.
        count: u64,
    },
    /// `cuLaunchHostFunc`.
    HostFn {
        /// The function.
        f: HostFn,
        /// Its argument.
        data: usize,
    },
    /// `cuEventRecord`.
    Record(Arc<Record>),
    /// `cuStreamWaitEvent`.
    Wait(Arc<Record>),
    /// An implicit wait for another stream's position (the legacy default stream's rules,
    /// a graph's previous launch).
    WaitSeq(Arc<Stream>, u64),
    /// `cuGraphLaunch`.
    Graph(Arc<GraphExec>),
    /// A library's work.
    Call(Call),
    /// Nothing (a prefetch: the emulator's memory is equally near everything).
    Nop,
}

/// A fault: the sticky error an operation ends with, and why.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The `CUresult`.
    pub code: CuResult,
    /// What happened.
    pub message: String,
}

impl Fault {
    /// An illegal address: `what` touched bytes outside every live allocation.
    pub fn illegal(what: &str, addr: u64, len: u64) -> Fault {
        let why = memory::memory()
            .map(|m| m.explain_miss(addr, len))
            .unwrap_or_default();
        Fault {
            code: cu::ILLEGAL_ADDRESS,
            message: format!("{what}: {why}"),
        }
    }
}

/// Memory an operation touched.
#[derive(Debug, Clone)]
pub struct Touch {
    /// The allocation.
    pub alloc: Arc<Allocation>,
    /// How.
    pub kind: Kind,
    /// Bytes from its base.
    pub lo: u64,
    /// End (exclusive).
    pub hi: u64,
}

/// What an operation did: the memory it touched, or the fault it ended with.
pub type Outcome = Result<Vec<Touch>, Fault>;

/// What an operation runs with.
#[allow(missing_debug_implementations)]
pub struct Exec<'a> {
    /// The stream it runs on.
    pub stream: &'a Arc<Stream>,
    /// Its description.
    pub what: &'a str,
    /// Its stamp.
    pub stamp: &'a Stamp,
}

impl Exec<'_> {
    /// The live allocation holding device bytes `[addr, addr + len)`, as a touch of `kind`.
    pub fn device(&self, addr: u64, len: u64, kind: Kind) -> Result<Touch, Fault> {
        let mem = memory::memory().map_err(|code| Fault {
            code,
            message: "no memory".into(),
        })?;
        match mem.find(addr) {
            Some(a) if a.contains(addr, len.max(1)) => Ok(Touch {
                lo: addr - a.base,
                hi: addr - a.base + len,
                alloc: a,
                kind,
            }),
            _ => Err(Fault::illegal(self.what, addr, len.max(1))),
        }
    }

    /// Host memory `[addr, addr + len)` as a touch when it is the emulator's (pinned or
    /// managed), checked to be live; `None` for the caller's own memory.
    pub fn host(&self, addr: u64, len: u64, kind: Kind) -> Result<Option<Touch>, Fault> {
        let mem = memory::memory().map_err(|code| Fault {
            code,
            message: "no memory".into(),
        })?;
        if !mem.in_region(addr) {
            return Ok(None);
        }
        self.device(addr, len, kind).map(Some)
    }
}

/// Runs `op` on `stream`'s worker, then checks what it touched and records its fault.
pub fn execute(stream: &Arc<Stream>, op: Queued) {
    let dev = stream.ctx.dev();
    if dev.check().is_err() || !stream.ctx.is_live() {
        return;
    }
    let exec = Exec {
        stream,
        what: &op.what,
        stamp: &op.stamp,
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&exec, &op.work)))
        .unwrap_or_else(|_| {
            Err(Fault {
                code: cu::LAUNCH_FAILED,
                message: format!("{}: the emulator panicked running it", op.what),
            })
        });
    finish(dev, &op.stamp, &op.what, outcome);
}

/// Checks an operation's touches for races and records its fault on `dev`.
pub fn finish(dev: &Device, stamp: &Stamp, what: &Arc<str>, outcome: Outcome) {
    match outcome {
        Ok(touches) => check_races(dev, stamp, what, &touches),
        Err(fault) => dev.fail(fault.code, &fault.message),
    }
}

/// Records `touches` in their allocations' shadows and reports the first race.
pub fn check_races(dev: &Device, stamp: &Stamp, what: &Arc<str>, touches: &[Touch]) {
    let policy = crate::config::get().races;
    if policy == RacePolicy::Off {
        return;
    }
    for t in touches {
        let race = t
            .alloc
            .shadow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .access(stamp, t.kind, t.lo, t.hi, what);
        if let Some(race) = race {
            let message = format!(
                "race between streams on {}:\n  {}\n  {}\nand nothing orders them (a missing cuStreamWaitEvent, an event recorded too early, or a graph edge missing)",
                t.alloc.describe(),
                race.now,
                race.before
            );
            match policy {
                RacePolicy::Error => dev.fail(cu::LAUNCH_FAILED, &message),
                _ => crate::errors::diagnose(&message),
            }
            return;
        }
    }
}

pub(crate) fn run(exec: &Exec<'_>, work: &Work) -> Outcome {
    match work {
        Work::Kernel(launch) => crate::module::run_launch(exec, launch),
        Work::HtoD { dst, src, len } => {
            let mut touches = vec![exec.device(*dst, *len, Kind::Write)?];
            // Looked up before the read lock is taken: a second read of the table on this
            // thread would wait behind a writer queued in between (std's lock lets no new
            // reader past a waiting writer), which waits for the first read: a deadlock.
            if let HostSrc::Pinned(p) = src {
                if let Some(t) = exec.host(*p, *len, Kind::Read)? {
                    touches.push(t);
                }
            }
            let mem = memory::memory().map_err(|code| Fault {
                code,
                message: String::new(),
            })?;
            let _live = mem.read();
            match src {
                HostSrc::Pinned(p) => {
                    // SAFETY: the destination is inside a live allocation (checked above,
                    // and the read lock keeps it mapped); the source is pinned memory the
                    // caller keeps valid until the stream passes the copy (the API's
                    // contract).
                    unsafe { std::ptr::copy(*p as *const u8, *dst as *mut u8, *len as usize) };
                }
                HostSrc::Staged(bytes) => {
                    // SAFETY: as above; the staged bytes are ours.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), *dst as *mut u8, bytes.len())
                    };
                }
            }
            Ok(touches)
        }
        Work::DtoH { dst, src, len } => {
            let mut touches = vec![exec.device(*src, *len, Kind::Read)?];
            if let Some(t) = exec.host(*dst, *len, Kind::Write)? {
                touches.push(t);
            }
            let mem = memory::memory().map_err(|code| Fault {
                code,
                message: String::new(),
            })?;
            let _live = mem.read();
            // SAFETY: the source is inside a live allocation kept mapped by the read lock;
            // the destination is host memory the caller keeps valid and unused until the
            // stream passes the copy (the API's contract).
            unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len as usize) };
            Ok(touches)
        }
        Work::DtoD { dst, src, len } => {
            let touches = vec![
                exec.device(*src, *len, Kind::Read)?,
                exec.device(*dst, *len, Kind::Write)?,
            ];
            let mem = memory::memory().map_err(|code| Fault {
                code,
                message: String::new(),
            })?;
            let _live = mem.read();
            // SAFETY: both ranges are inside live allocations, kept mapped by the read lock.
            unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len as usize) };
            Ok(touches)
        }
        Work::Memset {
            dst,
            value,
            elem,
            count,
        } => {
            let len = count * u64::from(*elem);
            let touches = vec![exec.device(*dst, len, Kind::Write)?];
            let mem = memory::memory().map_err(|code| Fault {
                code,
                message: String::new(),
            })?;
            let _live = mem.read();
            // SAFETY: the range is inside a live allocation kept mapped by the read lock, and
            // aligned for the element size (checked when queued).
            unsafe {
                match elem {
                    1 => std::ptr::write_bytes(*dst as *mut u8, *value as u8, *count as usize),
                    2 => std::slice::from_raw_parts_mut(*dst as *mut u16, *count as usize)
                        .fill(*value as u16),
                    _ => std::slice::from_raw_parts_mut(*dst as *mut u32, *count as usize)
                        .fill(*value),
                }
            }
            Ok(touches)
        }
        Work::HostFn { f, data } => {
            Stream::call_host_fn(*f, *data, exec.stamp);
            Ok(Vec::new())
        }
        Work::Record(r) => {
            let _ = r.time.set(Instant::now());
            Ok(Vec::new())
        }
        Work::Wait(r) => {
            r.wait();
            Ok(Vec::new())
        }
        Work::WaitSeq(s, seq) => {
            s.wait_for(*seq);
            Ok(Vec::new())
        }
        Work::Graph(g) => crate::capture::replay(exec, g),
        Work::Call(f) => f(exec),
        Work::Nop => Ok(Vec::new()),
    }
}
