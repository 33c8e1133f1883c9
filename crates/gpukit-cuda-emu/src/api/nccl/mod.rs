//! The emulated NCCL (<https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html>):
//! communicators over the emulated devices of one process, and the collectives run in stream
//! order on each rank's stream.
//!
//! Rules: `ncclCommInitRank` blocks until all ranks of the id have joined, unless called
//! between `ncclGroupStart` and `ncclGroupEnd` (then `ncclGroupEnd` waits); a collective is
//! queued on its stream like a kernel, and runs when every rank's stream reaches its own call
//! of it (ranks must queue the same collectives in the same order); calls between
//! `ncclGroupStart` and `ncclGroupEnd` from one thread are queued together at the end, as one
//! operation per stream, so that sends and receives of one group do not wait for each other.
//! Reductions combine the ranks in rank order, rounding to the element type after each step
//! (`ncclAvg` divides the sum by the rank count; integers truncate). A rank whose partners
//! never arrive waits up to two minutes, then fails the launch and says which ranks are
//! missing (real NCCL hangs).
//!
//! Not emulated: ranks in different processes (`ncclCommInitRank` with an id from another
//! process waits for ranks that never join here, then fails with `ncclInvalidUsage`).

#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::context;
use crate::errors::cu;
use crate::handles::{Table, Tag};
use crate::hb::Kind;
use crate::work::{Call, Exec, Fault, Touch, Work};

/// `ncclResult_t`.
pub type NcclResult = u32;
const SUCCESS: NcclResult = 0;
const UNHANDLED_CUDA: NcclResult = 1;
const INTERNAL: NcclResult = 3;
const INVALID_ARGUMENT: NcclResult = 4;
const INVALID_USAGE: NcclResult = 5;

/// NCCL 2.24.3.
const VERSION: c_int = 22403;
const WAIT: Duration = Duration::from_secs(120);

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NcclUniqueId {
    internal: [c_char; 128],
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    send: u64,
    recv: u64,
}

struct Round {
    slots: Vec<Option<Slot>>,
    done: bool,
    failed: Option<String>,
}

/// A send's key: (from rank, to rank, the pair's send number).
type Mailbox = (usize, usize, u64);
/// A posted send: its buffer, its length, and whether it was received.
type Posted = (u64, u64, bool);

struct Clique {
    nranks: usize,
    joined: Mutex<Vec<Option<usize>>>,
    rounds: Mutex<HashMap<u64, Round>>,
    mail: Mutex<HashMap<Mailbox, Posted>>,
    cv: Condvar,
}

#[derive(Debug)]
struct Comm {
    clique: Arc<CliqueRef>,
    rank: usize,
    device: usize,
    ctx: u64,
    next: Mutex<u64>,
    p2p: Mutex<HashMap<(usize, usize, bool), u64>>,
}

struct CliqueRef(Arc<Clique>);

impl std::fmt::Debug for CliqueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clique")
            .field("nranks", &self.0.nranks)
            .finish()
    }
}

fn comms() -> &'static Table<Comm> {
    static T: OnceLock<Table<Comm>> = OnceLock::new();
    T.get_or_init(|| Table::new(Tag::Comm))
}

fn cliques() -> &'static Mutex<HashMap<[u8; 128], Arc<Clique>>> {
    static C: OnceLock<Mutex<HashMap<[u8; 128], Arc<Clique>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type Deferred = Box<dyn FnOnce() -> NcclResult>;

/// A thread's group: its depth, the collectives it deferred, the cliques it joined, and its
/// sends and receives by (context, stream).
type Group = (
    u32,
    Vec<Deferred>,
    Vec<Arc<Clique>>,
    Vec<(u64, u64, Vec<P2p>)>,
);

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new((0, Vec::new(), Vec::new(), Vec::new()));
}

fn in_group() -> bool {
    GROUP.with(|g| g.borrow().0 > 0)
}

fn guarded(f: impl FnOnce() -> Result<(), NcclResult>) -> NcclResult {
    if crate::stream::in_host_fn() {
        return INVALID_USAGE;
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(r)) => r,
        Err(_) => INTERNAL,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    if version.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a writable int.
    unsafe { *version = VERSION };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    let s: &'static str = match result {
        0 => "no error\0",
        1 => "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\0",
        2 => "unhandled system error (run with NCCL_DEBUG=INFO for details)\0",
        3 => "internal error - please report this issue to the NCCL developers\0",
        4 => "invalid argument (run with NCCL_DEBUG=WARN for details)\0",
        5 => "invalid usage (run with NCCL_DEBUG=WARN for details)\0",
        6 => "remote process exited or there was a network error\0",
        7 => "NCCL operation in progress\0",
        _ => "unknown result code\0",
    };
    s.as_ptr().cast()
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetLastError(_comm: u64) -> *const c_char {
    c"".as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut NcclUniqueId) -> NcclResult {
    guarded(|| {
        if id.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let mut bytes = [0 as c_char; 128];
        let tag = b"gkemu-nccl";
        for (i, b) in tag.iter().enumerate() {
            bytes[i] = *b as c_char;
        }
        let mut seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        seed ^= N
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9e3779b97f4a7c15);
        for b in bytes.iter_mut().skip(tag.len()).take(16) {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (seed >> 56) as c_char;
        }
        // SAFETY: a writable id.
        unsafe { (*id).internal = bytes };
        Ok(())
    })
}

fn clique_for(id: &[u8; 128], nranks: usize) -> Result<Arc<Clique>, NcclResult> {
    let mut all = lock(cliques());
    let c = all.entry(*id).or_insert_with(|| {
        Arc::new(Clique {
            nranks,
            joined: Mutex::new(vec![None; nranks]),
            rounds: Mutex::new(HashMap::new()),
            mail: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
        })
    });
    if c.nranks != nranks {
        return Err(INVALID_ARGUMENT);
    }
    Ok(Arc::clone(c))
}

fn join(clique: &Arc<Clique>, rank: usize) -> Result<u64, NcclResult> {
    let ctx = context::current().map_err(|_| UNHANDLED_CUDA)?;
    {
        let mut joined = lock(&clique.joined);
        if joined[rank].is_some() {
            return Err(INVALID_USAGE);
        }
        joined[rank] = Some(ctx.device);
    }
    clique.cv.notify_all();
    Ok(comms().insert(Arc::new(Comm {
        clique: Arc::new(CliqueRef(Arc::clone(clique))),
        rank,
        device: ctx.device,
        ctx: ctx.handle,
        next: Mutex::new(0),
        p2p: Mutex::new(HashMap::new()),
    })))
}

/// Waits until every rank of `clique` joined.
fn wait_joined(clique: &Clique) -> Result<(), NcclResult> {
    let start = Instant::now();
    let mut joined = lock(&clique.joined);
    while joined.iter().any(Option::is_none) {
        if start.elapsed() > WAIT {
            let missing: Vec<usize> = (0..clique.nranks)
                .filter(|&r| joined[r].is_none())
                .collect();
            crate::errors::diagnose(&format!(
                "ncclCommInitRank: ranks {missing:?} never joined (the emulated NCCL joins ranks of one process only)"
            ));
            return Err(INVALID_USAGE);
        }
        joined = clique
            .cv
            .wait_timeout(joined, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut u64,
    nranks: c_int,
    id: NcclUniqueId,
    rank: c_int,
) -> NcclResult {
    guarded(|| {
        if comm.is_null() || nranks < 1 || rank < 0 || rank >= nranks {
            return Err(INVALID_ARGUMENT);
        }
        let key: [u8; 128] = id.internal.map(|c| c as u8);
        let clique = clique_for(&key, nranks as usize)?;
        let h = join(&clique, rank as usize)?;
        // SAFETY: a writable ncclComm_t.
        unsafe { *comm = h };
        if in_group() {
            GROUP.with(|g| g.borrow_mut().2.push(clique));
            Ok(())
        } else {
            wait_joined(&clique)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comm: *mut u64,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    guarded(|| {
        if comm.is_null() || ndev < 1 {
            return Err(INVALID_ARGUMENT);
        }
        let d = context::driver().map_err(|_| UNHANDLED_CUDA)?;
        let mut id = [0u8; 128];
        // SAFETY: `id` is a 128-byte buffer of the layout ncclUniqueId has.
        unsafe { ncclGetUniqueId(id.as_mut_ptr().cast()) };
        let clique = clique_for(&id, ndev as usize)?;
        let saved = context::current_handle();
        for r in 0..ndev as usize {
            let dev = if devlist.is_null() {
                r as c_int
            } else {
                // SAFETY: `ndev` entries.
                unsafe { *devlist.add(r) }
            };
            let device = context::device(dev).map_err(|_| INVALID_ARGUMENT)?;
            let h = context::retain_primary(device).map_err(|_| UNHANDLED_CUDA)?;
            context::set_current(h).map_err(|_| UNHANDLED_CUDA)?;
            let c = join(&clique, r)?;
            // SAFETY: `ndev` writable entries.
            unsafe { *comm.add(r) = c };
        }
        let _ = context::set_current(saved.unwrap_or(0));
        let _ = d;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: u64) -> NcclResult {
    guarded(|| comms().remove(comm).map(|_| ()).ok_or(INVALID_ARGUMENT))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: u64) -> NcclResult {
    guarded(|| comms().remove(comm).map(|_| ()).ok_or(INVALID_ARGUMENT))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: u64, err: *mut NcclResult) -> NcclResult {
    guarded(|| {
        comms().get(comm).ok_or(INVALID_ARGUMENT)?;
        if err.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: a writable result.
        unsafe { *err = SUCCESS };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(comm: u64, count: *mut c_int) -> NcclResult {
    guarded(|| {
        let c = comms().get(comm).ok_or(INVALID_ARGUMENT)?;
        // SAFETY: a writable int.
        unsafe { *count = c.clique.0.nranks as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(comm: u64, rank: *mut c_int) -> NcclResult {
    guarded(|| {
        let c = comms().get(comm).ok_or(INVALID_ARGUMENT)?;
        // SAFETY: a writable int.
        unsafe { *rank = c.rank as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(comm: u64, device: *mut c_int) -> NcclResult {
    guarded(|| {
        let c = comms().get(comm).ok_or(INVALID_ARGUMENT)?;
        // SAFETY: a writable int.
        unsafe { *device = c.device as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    GROUP.with(|g| g.borrow_mut().0 += 1);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    let (ops, joins, p2p) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.0 == 0 {
            return (None, Vec::new(), Vec::new());
        }
        g.0 -= 1;
        if g.0 > 0 {
            return (Some(Vec::new()), Vec::new(), Vec::new());
        }
        (
            Some(std::mem::take(&mut g.1)),
            std::mem::take(&mut g.2),
            std::mem::take(&mut g.3),
        )
    });
    let Some(ops) = ops else {
        return INVALID_USAGE;
    };
    for c in joins {
        if let Err(e) = wait_joined(&c) {
            return e;
        }
    }
    let mut result = SUCCESS;
    for op in ops {
        let r = op();
        if result == SUCCESS {
            result = r;
        }
    }
    for (ctx, stream, batch) in p2p {
        let r = queue_p2p(ctx, stream, batch);
        if result == SUCCESS {
            result = r;
        }
    }
    result
}

mod p2p;
mod values;

pub use p2p::{ncclRecv, ncclSend};
use p2p::{queue_p2p, P2p};
use values::{compute, sizes, Coll, Ty};

/// Runs rank `rank`'s part of collective `seq` (on its stream's worker).
fn run_collective(
    exec: &Exec<'_>,
    clique: &Arc<Clique>,
    rank: usize,
    seq: u64,
    ty: Ty,
    coll: Coll,
    slot: Slot,
) -> Result<Vec<Touch>, Fault> {
    let n = clique.nranks;
    let (send_len, recv_len) = sizes(ty, coll, n);
    let is_root_only = matches!(coll, Coll::Broadcast { root, .. } if root != rank);
    let mut touches = Vec::new();
    let mut bad: Option<Fault> = None;
    if send_len > 0 && !is_root_only {
        match exec.device(slot.send, send_len, Kind::Read) {
            Ok(t) => touches.push(t),
            Err(f) => bad = Some(f),
        }
    }
    if recv_len > 0 && bad.is_none() {
        match exec.device(slot.recv, recv_len, Kind::Write) {
            Ok(t) => touches.push(t),
            Err(f) => bad = Some(f),
        }
    }
    let start = Instant::now();
    let mut rounds = lock(&clique.rounds);
    {
        let round = rounds.entry(seq).or_insert_with(|| Round {
            slots: vec![None; n],
            done: false,
            failed: None,
        });
        round.slots[rank] = Some(slot);
        if let Some(f) = &bad {
            round.failed.get_or_insert_with(|| f.message.clone());
        }
        if round.slots.iter().all(Option::is_some) {
            if round.failed.is_none() {
                let slots: Vec<Slot> = round.slots.iter().flatten().copied().collect();
                let mem = crate::memory::memory().map_err(|code| Fault {
                    code,
                    message: String::new(),
                })?;
                let _live = mem.read();
                compute(ty, coll, &slots);
            }
            round.done = true;
            clique.cv.notify_all();
        }
    }
    loop {
        let round = rounds.get(&seq).ok_or_else(|| Fault {
            code: cu::LAUNCH_FAILED,
            message: "internal: a collective's round vanished".into(),
        })?;
        if round.done {
            let failed = round.failed.clone();
            let left = round.slots.iter().flatten().count();
            let _ = left;
            // The last rank out removes the round.
            if let Some(r) = rounds.get_mut(&seq) {
                r.slots[rank] = None;
                if r.slots.iter().all(Option::is_none) {
                    rounds.remove(&seq);
                }
            }
            return match failed {
                Some(m) => Err(Fault {
                    code: cu::ILLEGAL_ADDRESS,
                    message: format!("{}: a rank's buffer is invalid: {m}", exec.what),
                }),
                None => Ok(touches),
            };
        }
        if start.elapsed() > WAIT {
            let missing: Vec<usize> = (0..n).filter(|&r| round.slots[r].is_none()).collect();
            return Err(Fault {
                code: cu::LAUNCH_FAILED,
                message: format!(
                    "{}: ranks {missing:?} never reached this collective (each rank must queue the same collectives in the same order)",
                    exec.what
                ),
            });
        }
        rounds = clique
            .cv
            .wait_timeout(rounds, Duration::from_millis(50))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Queues (or, inside a group, defers) `coll` on `comm`'s `stream`.
fn collective(
    comm: u64,
    stream: u64,
    ty: u32,
    coll: Coll,
    send: u64,
    recv: u64,
    name: &'static str,
) -> NcclResult {
    guarded(|| {
        let c = comms().get(comm).ok_or(INVALID_ARGUMENT)?;
        let ty = Ty::from_nccl(ty).ok_or(INVALID_ARGUMENT)?;
        if let Coll::AllReduce { op, .. } | Coll::ReduceScatter { op, .. } = coll {
            if op > 4 {
                return Err(INVALID_ARGUMENT);
            }
        }
        if let Coll::Broadcast { root, .. } = coll {
            if root >= c.clique.0.nranks {
                return Err(INVALID_ARGUMENT);
            }
        }
        let seq = {
            let mut next = lock(&c.next);
            *next += 1;
            *next
        };
        let clique = Arc::clone(&c.clique.0);
        let rank = c.rank;
        let slot = Slot { send, recv };
        let ctx = c.ctx;
        let queue = move || -> NcclResult {
            let saved = context::current_handle();
            if context::set_current(ctx).is_err() {
                return UNHANDLED_CUDA;
            }
            let s = crate::api::stream(stream);
            let _ = context::set_current(saved.unwrap_or(0));
            let Ok(s) = s else { return UNHANDLED_CUDA };
            let clique = Arc::clone(&clique);
            let call: Call =
                Arc::new(move |exec| run_collective(exec, &clique, rank, seq, ty, coll, slot));
            let what: Arc<str> = Arc::from(format!(
                "{name} #{seq} (rank {rank}) on stream 0x{:x}",
                s.handle
            ));
            match s.enqueue(Work::Call(call), what, None) {
                Ok(_) => SUCCESS,
                Err(_) => UNHANDLED_CUDA,
            }
        };
        if in_group() {
            GROUP.with(|g| g.borrow_mut().1.push(Box::new(queue)));
            Ok(())
        } else {
            match queue() {
                SUCCESS => Ok(()),
                e => Err(e),
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    ty: u32,
    op: u32,
    comm: u64,
    stream: u64,
) -> NcclResult {
    collective(
        comm,
        stream,
        ty,
        Coll::AllReduce {
            count: count as u64,
            op,
        },
        send as u64,
        recv as u64,
        "ncclAllReduce",
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    ty: u32,
    root: c_int,
    comm: u64,
    stream: u64,
) -> NcclResult {
    if root < 0 {
        return INVALID_ARGUMENT;
    }
    collective(
        comm,
        stream,
        ty,
        Coll::Broadcast {
            count: count as u64,
            root: root as usize,
        },
        send as u64,
        recv as u64,
        "ncclBroadcast",
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclBcast(
    buf: *mut c_void,
    count: usize,
    ty: u32,
    root: c_int,
    comm: u64,
    stream: u64,
) -> NcclResult {
    // SAFETY: forwarded, in place.
    unsafe { ncclBroadcast(buf, buf, count, ty, root, comm, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    ty: u32,
    comm: u64,
    stream: u64,
) -> NcclResult {
    collective(
        comm,
        stream,
        ty,
        Coll::AllGather {
            count: count as u64,
        },
        send as u64,
        recv as u64,
        "ncclAllGather",
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    ty: u32,
    op: u32,
    comm: u64,
    stream: u64,
) -> NcclResult {
    collective(
        comm,
        stream,
        ty,
        Coll::ReduceScatter {
            count: count as u64,
            op,
        },
        send as u64,
        recv as u64,
        "ncclReduceScatter",
    )
}
