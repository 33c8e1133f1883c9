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

/// An element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    BF16,
}

impl Ty {
    fn from_nccl(t: u32) -> Option<Ty> {
        Some(match t {
            0 => Ty::I8,
            1 => Ty::U8,
            2 => Ty::I32,
            3 => Ty::U32,
            4 => Ty::I64,
            5 => Ty::U64,
            6 => Ty::F16,
            7 => Ty::F32,
            8 => Ty::F64,
            9 => Ty::BF16,
            _ => return None,
        })
    }
    fn size(self) -> u64 {
        match self {
            Ty::I8 | Ty::U8 => 1,
            Ty::F16 | Ty::BF16 => 2,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }
}

/// One value, widened: floats as f64 (rounded to the type after each step), integers as
/// their 64-bit pattern.
#[derive(Clone, Copy)]
enum V {
    F(f64),
    I(i64),
    U(u64),
}

fn read(ty: Ty, p: u64, i: u64) -> V {
    // SAFETY: callers checked the ranges against live allocations.
    unsafe {
        match ty {
            Ty::I8 => V::I(i64::from(*(p as *const i8).add(i as usize))),
            Ty::U8 => V::U(u64::from(*(p as *const u8).add(i as usize))),
            Ty::I32 => V::I(i64::from(*(p as *const i32).add(i as usize))),
            Ty::U32 => V::U(u64::from(*(p as *const u32).add(i as usize))),
            Ty::I64 => V::I(*(p as *const i64).add(i as usize)),
            Ty::U64 => V::U(*(p as *const u64).add(i as usize)),
            Ty::F32 => V::F(f64::from(*(p as *const f32).add(i as usize))),
            Ty::F64 => V::F(*(p as *const f64).add(i as usize)),
            Ty::F16 => V::F(f64::from(
                half::f16::from_bits(*(p as *const u16).add(i as usize)).to_f32(),
            )),
            Ty::BF16 => V::F(f64::from(
                half::bf16::from_bits(*(p as *const u16).add(i as usize)).to_f32(),
            )),
        }
    }
}

fn write(ty: Ty, p: u64, i: u64, v: V) {
    let f = |v: V| match v {
        V::F(x) => x,
        V::I(x) => x as f64,
        V::U(x) => x as f64,
    };
    let n = |v: V| match v {
        V::F(x) => x as i64,
        V::I(x) => x,
        V::U(x) => x as i64,
    };
    // SAFETY: as in `read`.
    unsafe {
        match ty {
            Ty::I8 | Ty::U8 => *(p as *mut u8).add(i as usize) = n(v) as u8,
            Ty::I32 | Ty::U32 => *(p as *mut u32).add(i as usize) = n(v) as u32,
            Ty::I64 | Ty::U64 => *(p as *mut u64).add(i as usize) = n(v) as u64,
            Ty::F32 => *(p as *mut f32).add(i as usize) = f(v) as f32,
            Ty::F64 => *(p as *mut f64).add(i as usize) = f(v),
            Ty::F16 => {
                *(p as *mut u16).add(i as usize) = half::f16::from_f32(f(v) as f32).to_bits()
            }
            Ty::BF16 => {
                *(p as *mut u16).add(i as usize) = half::bf16::from_f32(f(v) as f32).to_bits()
            }
        }
    }
}

/// Rounds a float to the type (integers stay).
fn round(ty: Ty, v: V) -> V {
    match (ty, v) {
        (Ty::F32, V::F(x)) => V::F(f64::from(x as f32)),
        (Ty::F16, V::F(x)) => V::F(f64::from(half::f16::from_f32(x as f32).to_f32())),
        (Ty::BF16, V::F(x)) => V::F(f64::from(half::bf16::from_f32(x as f32).to_f32())),
        _ => v,
    }
}

fn combine(ty: Ty, op: u32, a: V, b: V) -> V {
    let bits = ty.size() * 8;
    let wrap_i = |x: i64| -> i64 {
        if bits == 64 {
            x
        } else {
            (x << (64 - bits)) >> (64 - bits)
        }
    };
    let wrap_u = |x: u64| -> u64 {
        if bits == 64 {
            x
        } else {
            x & ((1u64 << bits) - 1)
        }
    };
    let r = match (a, b) {
        (V::F(x), V::F(y)) => V::F(match op {
            1 => x * y,
            2 => {
                if y > x || x.is_nan() {
                    y
                } else {
                    x
                }
            }
            3 => {
                if y < x || x.is_nan() {
                    y
                } else {
                    x
                }
            }
            _ => x + y,
        }),
        (V::I(x), V::I(y)) => V::I(wrap_i(match op {
            1 => x.wrapping_mul(y),
            2 => x.max(y),
            3 => x.min(y),
            _ => x.wrapping_add(y),
        })),
        (V::U(x), V::U(y)) => V::U(wrap_u(match op {
            1 => x.wrapping_mul(y),
            2 => x.max(y),
            3 => x.min(y),
            _ => x.wrapping_add(y),
        })),
        _ => a,
    };
    round(ty, r)
}

/// The operation that combines the ranks' values: `ncclAvg` (4) sums, then divides.
fn sum_for_avg(op: u32) -> u32 {
    if op == 4 {
        0
    } else {
        op
    }
}

fn average(ty: Ty, v: V, n: usize) -> V {
    round(
        ty,
        match v {
            V::F(x) => V::F(x / n as f64),
            V::I(x) => V::I(x / n as i64),
            V::U(x) => V::U(x / n as u64),
        },
    )
}

/// What a collective does with the slots of every rank.
#[derive(Debug, Clone, Copy)]
enum Coll {
    AllReduce { count: u64, op: u32 },
    Broadcast { count: u64, root: usize },
    AllGather { count: u64 },
    ReduceScatter { count: u64, op: u32 },
}

fn compute(ty: Ty, coll: Coll, slots: &[Slot]) {
    let n = slots.len();
    let size = ty.size();
    match coll {
        Coll::AllReduce { count, op } => {
            let mut out = Vec::with_capacity(count as usize);
            for i in 0..count {
                let mut acc = read(ty, slots[0].send, i);
                for s in &slots[1..] {
                    acc = combine(ty, sum_for_avg(op), acc, read(ty, s.send, i));
                }
                if op == 4 {
                    acc = average(ty, acc, n);
                }
                out.push(acc);
            }
            for s in slots {
                for (i, v) in out.iter().enumerate() {
                    write(ty, s.recv, i as u64, *v);
                }
            }
        }
        Coll::Broadcast { count, root } => {
            let src: Vec<V> = (0..count).map(|i| read(ty, slots[root].send, i)).collect();
            for s in slots {
                for (i, v) in src.iter().enumerate() {
                    write(ty, s.recv, i as u64, *v);
                }
            }
        }
        Coll::AllGather { count } => {
            let parts: Vec<Vec<V>> = slots
                .iter()
                .map(|s| (0..count).map(|i| read(ty, s.send, i)).collect())
                .collect();
            for s in slots {
                for (r, part) in parts.iter().enumerate() {
                    for (i, v) in part.iter().enumerate() {
                        write(ty, s.recv, r as u64 * count + i as u64, *v);
                    }
                }
            }
        }
        Coll::ReduceScatter { count, op } => {
            let total = count * n as u64;
            let mut out = Vec::with_capacity(total as usize);
            for i in 0..total {
                let mut acc = read(ty, slots[0].send, i);
                for s in &slots[1..] {
                    acc = combine(ty, sum_for_avg(op), acc, read(ty, s.send, i));
                }
                if op == 4 {
                    acc = average(ty, acc, n);
                }
                out.push(acc);
            }
            for (r, s) in slots.iter().enumerate() {
                for i in 0..count {
                    write(ty, s.recv, i, out[(r as u64 * count + i) as usize]);
                }
            }
        }
    }
    let _ = size;
}

/// The collective's byte counts: (send, recv) for one rank.
fn sizes(ty: Ty, coll: Coll, n: usize) -> (u64, u64) {
    let s = ty.size();
    match coll {
        Coll::AllReduce { count, .. } | Coll::Broadcast { count, .. } => (count * s, count * s),
        Coll::AllGather { count } => (count * s, count * s * n as u64),
        Coll::ReduceScatter { count, .. } => (count * s * n as u64, count * s),
    }
}

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

/// One send or receive of a stream.
#[derive(Clone)]
struct P2p {
    send: bool,
    buf: u64,
    len: u64,
    key: (usize, usize, u64),
    clique: Arc<Clique>,
}

/// Runs a stream's sends and receives: posts every send, performs every receive (waiting
/// for its send to be posted), then waits until every send was received. One operation per
/// stream and group, so that two ranks exchanging buffers never wait for each other.
fn run_p2p(exec: &Exec<'_>, ops: &[P2p]) -> Result<Vec<Touch>, Fault> {
    let mut touches = Vec::new();
    for op in ops.iter().filter(|o| o.len > 0) {
        let kind = if op.send { Kind::Read } else { Kind::Write };
        touches.push(exec.device(op.buf, op.len, kind)?);
    }
    let start = Instant::now();
    let timeout = |what: String| Fault {
        code: cu::LAUNCH_FAILED,
        message: format!("{}: {what}", exec.what),
    };
    for op in ops.iter().filter(|o| o.send && o.len > 0) {
        lock(&op.clique.mail).insert(op.key, (op.buf, op.len, false));
        op.clique.cv.notify_all();
    }
    for op in ops.iter().filter(|o| !o.send && o.len > 0) {
        let mut mail = lock(&op.clique.mail);
        loop {
            if let Some(&(src, slen, false)) = mail.get(&op.key) {
                if slen != op.len {
                    return Err(timeout(format!(
                        "the send from rank {} has {slen} bytes, the receive {}",
                        op.key.0, op.len
                    )));
                }
                let mem = crate::memory::memory().map_err(|code| Fault {
                    code,
                    message: String::new(),
                })?;
                let _live = mem.read();
                // SAFETY: both ranges were checked against live allocations by their ranks,
                // and the sender waits until this copy is done.
                unsafe { std::ptr::copy(src as *const u8, op.buf as *mut u8, op.len as usize) };
                mail.insert(op.key, (src, slen, true));
                op.clique.cv.notify_all();
                break;
            }
            if start.elapsed() > WAIT {
                return Err(timeout(format!("rank {} never sent", op.key.0)));
            }
            mail = op
                .clique
                .cv
                .wait_timeout(mail, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    for op in ops.iter().filter(|o| o.send && o.len > 0) {
        let mut mail = lock(&op.clique.mail);
        while mail.get(&op.key).is_some_and(|m| !m.2) {
            if start.elapsed() > WAIT {
                return Err(timeout(format!("rank {} never received", op.key.1)));
            }
            mail = op
                .clique
                .cv
                .wait_timeout(mail, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        mail.remove(&op.key);
    }
    Ok(touches)
}

/// Queues a batch of sends and receives on `stream` of context `ctx`.
fn queue_p2p(ctx: u64, stream: u64, ops: Vec<P2p>) -> NcclResult {
    let saved = context::current_handle();
    if context::set_current(ctx).is_err() {
        return UNHANDLED_CUDA;
    }
    let s = crate::api::stream(stream);
    let _ = context::set_current(saved.unwrap_or(0));
    let Ok(s) = s else { return UNHANDLED_CUDA };
    let names: Vec<String> = ops
        .iter()
        .map(|o| {
            format!(
                "{} {}->{} #{}",
                if o.send { "ncclSend" } else { "ncclRecv" },
                o.key.0,
                o.key.1,
                o.key.2
            )
        })
        .collect();
    let what: Arc<str> = Arc::from(format!("{} on stream 0x{:x}", names.join(", "), s.handle));
    let call: Call = Arc::new(move |exec| run_p2p(exec, &ops));
    match s.enqueue(Work::Call(call), what, None) {
        Ok(_) => SUCCESS,
        Err(_) => UNHANDLED_CUDA,
    }
}

fn p2p(
    buf: u64,
    count: usize,
    ty: u32,
    peer: c_int,
    comm: u64,
    stream: u64,
    send: bool,
) -> NcclResult {
    guarded(|| {
        let c = comms().get(comm).ok_or(INVALID_ARGUMENT)?;
        let ty = Ty::from_nccl(ty).ok_or(INVALID_ARGUMENT)?;
        let n = c.clique.0.nranks;
        if peer < 0 || peer as usize >= n {
            return Err(INVALID_ARGUMENT);
        }
        let peer = peer as usize;
        let (from, to) = if send { (c.rank, peer) } else { (peer, c.rank) };
        // Sends and receives counted apart: a rank's n-th send to a peer meets the peer's
        // n-th receive from it, also when the peer is the rank itself.
        let seq = {
            let mut p = lock(&c.p2p);
            let k = p.entry((from, to, send)).or_insert(0);
            *k += 1;
            *k
        };
        let op = P2p {
            send,
            buf,
            len: count as u64 * ty.size(),
            key: (from, to, seq),
            clique: Arc::clone(&c.clique.0),
        };
        if in_group() {
            GROUP.with(|g| {
                let mut g = g.borrow_mut();
                match g
                    .3
                    .iter_mut()
                    .find(|(cx, st, _)| *cx == c.ctx && *st == stream)
                {
                    Some((_, _, ops)) => ops.push(op),
                    None => g.3.push((c.ctx, stream, vec![op])),
                }
            });
            Ok(())
        } else {
            match queue_p2p(c.ctx, stream, vec![op]) {
                SUCCESS => Ok(()),
                e => Err(e),
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    buf: *const c_void,
    count: usize,
    ty: u32,
    peer: c_int,
    comm: u64,
    stream: u64,
) -> NcclResult {
    p2p(buf as u64, count, ty, peer, comm, stream, true)
}

#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    buf: *mut c_void,
    count: usize,
    ty: u32,
    peer: c_int,
    comm: u64,
    stream: u64,
) -> NcclResult {
    p2p(buf as u64, count, ty, peer, comm, stream, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_wrap_and_round_like_the_types() {
        let V::I(x) = combine(Ty::I8, 0, V::I(100), V::I(100)) else {
            panic!()
        };
        assert_eq!(x, -56);
        let V::U(x) = combine(Ty::U8, 1, V::U(16), V::U(17)) else {
            panic!()
        };
        assert_eq!(x, 16);
        let V::F(x) = combine(Ty::F16, 0, V::F(2048.0), V::F(1.0)) else {
            panic!()
        };
        assert_eq!(x, 2048.0, "f16 has no 2049");
        let V::I(x) = average(Ty::I32, V::I(7), 2) else {
            panic!()
        };
        assert_eq!(x, 3);
    }
}
