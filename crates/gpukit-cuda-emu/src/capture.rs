//! Stream capture and graphs.
//!
//! Rules (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>,
//! `cuStreamBeginCapture`, `cuStreamEndCapture`, `cuThreadExchangeStreamCaptureMode`; the
//! programming guide's "Stream Capture" and "Cross-stream Dependencies and Events"):
//! - work queued on a capturing stream is recorded as graph nodes, not run; capture cannot
//!   begin on the legacy stream (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) or on a stream that
//!   already captures (`CUDA_ERROR_ILLEGAL_STATE`);
//! - an event recorded in a capture and waited for by another stream forks the capture into
//!   that stream; waiting in a capture for an event recorded outside it is
//!   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, joining two captures
//!   `CUDA_ERROR_STREAM_CAPTURE_MERGE`;
//! - synchronising or querying a capturing stream, or querying or synchronising an event
//!   recorded in a capture, is `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (an event:
//!   `CUDA_ERROR_CAPTURED_EVENT`), and invalidates the capture; so is a copy with pageable
//!   host memory, and the legacy stream's implicit wait on a capturing blocking stream
//!   (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`);
//! - "potentially unsafe" calls (allocations and frees that are not stream-ordered,
//!   synchronous copies, `cuCtxSynchronize`) are `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and
//!   invalidate the captures that prohibit them: a capture in global mode prohibits them on
//!   every thread whose interaction mode is global, any capture but a relaxed one on its own
//!   thread;
//! - capture ends on the stream it began on (`CUDA_ERROR_STREAM_CAPTURE_UNMATCHED`), from the
//!   same thread unless relaxed (`CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`), with every forked
//!   stream joined back (`CUDA_ERROR_STREAM_CAPTURE_UNJOINED`); an invalidated capture ends
//!   with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` and no graph;
//! - a launched graph runs after the work queued before on its stream and after the graph's
//!   previous launch, on any stream.
//!
//! A replay runs the graph's nodes on the launching stream's worker in a seeded order that
//! respects the edges; two nodes that no path of edges orders and that touch the same bytes,
//! one writing, race (reported as between streams), whichever order they ran in.
//!
//! Where the documentation leaves a rule open, the emulator's choice (a question for the
//! first real GPU run): relaxed mode allows `cuMemAlloc` and `cuMemFree` from the capturing
//! thread; `cuMemPrefetchAsync` is captured as a node that does nothing.

use std::cell::Cell;
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use crate::context::Context;
use crate::errors::{cu, CuResult};
use crate::hb::Vc;
use crate::stream::{Event, Recorded, Stream};
use crate::work::{Exec, Fault, HostSrc, Outcome, Touch, Work};

/// `CU_STREAM_CAPTURE_MODE_GLOBAL`.
pub const MODE_GLOBAL: u32 = 0;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`.
pub const MODE_THREAD_LOCAL: u32 = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const MODE_RELAXED: u32 = 2;

/// One node of a graph.
#[derive(Clone)]
#[allow(missing_debug_implementations)]
pub struct Node {
    work: Work,
    deps: Vec<usize>,
    what: Arc<str>,
}

struct SeqState {
    nodes: Vec<Node>,
    invalid: bool,
    members: Vec<Weak<Stream>>,
}

/// A capture in progress.
pub struct CaptureSeq {
    mode: u32,
    thread: ThreadId,
    origin: u64,
    state: Mutex<SeqState>,
}

impl std::fmt::Debug for CaptureSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureSeq")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// A capturing stream's place in its capture: the nodes new work depends on.
#[derive(Debug, Clone)]
pub struct CaptureLink {
    seq: Arc<CaptureSeq>,
    deps: Vec<usize>,
}

/// An event recorded in a capture: the nodes a wait on it depends on.
#[derive(Debug, Clone)]
pub struct CapturedEvent {
    seq: Arc<CaptureSeq>,
    deps: Vec<usize>,
}

fn active() -> &'static Mutex<Vec<Weak<CaptureSeq>>> {
    static ACTIVE: Mutex<Vec<Weak<CaptureSeq>>> = Mutex::new(Vec::new());
    &ACTIVE
}

thread_local! {
    static THREAD_MODE: Cell<u32> = const { Cell::new(MODE_GLOBAL) };
}

/// `cuThreadExchangeStreamCaptureMode`.
pub fn exchange_thread_mode(mode: u32) -> Result<u32, CuResult> {
    if mode > MODE_RELAXED {
        return Err(cu::INVALID_VALUE);
    }
    Ok(THREAD_MODE.replace(mode))
}

fn lock(seq: &CaptureSeq) -> std::sync::MutexGuard<'_, SeqState> {
    seq.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Before a potentially unsafe call: `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (and the
/// captures that prohibit it invalidated) when a capture prohibits it on this thread.
pub fn check_unsafe_call() -> Result<(), CuResult> {
    let me = std::thread::current().id();
    let thread_mode = THREAD_MODE.get();
    if thread_mode == MODE_RELAXED {
        return Ok(());
    }
    let mut list = active().lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    let mut prohibited = false;
    for seq in list.iter().filter_map(Weak::upgrade) {
        let mine = seq.thread == me && seq.mode != MODE_RELAXED;
        let global = seq.thread != me && seq.mode == MODE_GLOBAL && thread_mode == MODE_GLOBAL;
        if mine || global {
            lock(&seq).invalid = true;
            prohibited = true;
        }
    }
    if prohibited {
        crate::errors::diagnose(
            "a potentially unsafe call (an allocation, a free, a synchronous copy or a device synchronisation) during a stream capture that prohibits it: the capture is invalidated",
        );
        return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
    }
    Ok(())
}

/// `cuStreamBeginCapture`.
pub fn begin(stream: &Arc<Stream>, mode: u32) -> Result<(), CuResult> {
    if mode > MODE_RELAXED {
        return Err(cu::INVALID_VALUE);
    }
    if stream.kind == crate::stream::StreamKind::Legacy {
        return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
    }
    stream.ctx.check()?;
    stream.with_capture(|link| {
        if link.is_some() {
            return Err(cu::ILLEGAL_STATE);
        }
        let seq = Arc::new(CaptureSeq {
            mode,
            thread: std::thread::current().id(),
            origin: stream.handle,
            state: Mutex::new(SeqState {
                nodes: Vec::new(),
                invalid: false,
                members: vec![Arc::downgrade(stream)],
            }),
        });
        active()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&seq));
        *link = Some(CaptureLink {
            seq,
            deps: Vec::new(),
        });
        Ok(())
    })
}

/// Marks the capture `stream` is in as invalid.
pub fn invalidate_stream(stream: &Stream) {
    if let Some(link) = stream.capture() {
        lock(&link.seq).invalid = true;
    }
}

/// Adds `work` to the capture `stream` is in.
pub fn add(
    stream: &Arc<Stream>,
    work: Work,
    what: Arc<str>,
    _join: Option<&Vc>,
) -> Result<(), CuResult> {
    let Some(link) = stream.capture() else {
        return Err(cu::ILLEGAL_STATE);
    };
    if lock(&link.seq).invalid {
        return Err(cu::STREAM_CAPTURE_INVALIDATED);
    }
    let capturable = !matches!(
        &work,
        Work::HtoD {
            src: HostSrc::Staged(_),
            ..
        } | Work::Wait(_)
            | Work::WaitSeq(..)
            | Work::Record(_)
    );
    if !capturable {
        lock(&link.seq).invalid = true;
        crate::errors::diagnose(&format!(
            "{what}: not allowed while the stream captures (a copy with pageable host memory cannot be captured); the capture is invalidated"
        ));
        return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
    }
    stream.with_capture(|l| {
        let Some(l) = l.as_mut() else {
            return Err(cu::ILLEGAL_STATE);
        };
        let mut st = lock(&l.seq);
        let id = st.nodes.len();
        st.nodes.push(Node {
            work,
            deps: std::mem::take(&mut l.deps),
            what,
        });
        l.deps = vec![id];
        Ok(())
    })
}

/// `cuEventRecord` on a capturing stream.
pub fn record(event: &Event, stream: &Stream) -> Result<(), CuResult> {
    let Some(link) = stream.capture() else {
        return Err(cu::ILLEGAL_STATE);
    };
    if lock(&link.seq).invalid {
        return Err(cu::STREAM_CAPTURE_INVALIDATED);
    }
    *event.latest.lock().unwrap_or_else(|e| e.into_inner()) =
        Some(Recorded::Captured(CapturedEvent {
            seq: link.seq,
            deps: link.deps,
        }));
    Ok(())
}

/// `cuStreamWaitEvent` where the stream captures or the event was recorded in a capture:
/// `Ok(true)` when handled here.
pub fn wait(stream: &Arc<Stream>, recorded: Option<&Recorded>) -> Result<bool, CuResult> {
    let link = stream.capture();
    match (link, recorded) {
        (None, Some(Recorded::Captured(ev))) => {
            // A fork: the stream joins the capture.
            if lock(&ev.seq).invalid {
                return Err(cu::STREAM_CAPTURE_INVALIDATED);
            }
            lock(&ev.seq).members.push(Arc::downgrade(stream));
            stream.set_capture(Some(CaptureLink {
                seq: Arc::clone(&ev.seq),
                deps: ev.deps.clone(),
            }));
            Ok(true)
        }
        (Some(link), Some(Recorded::Captured(ev))) => {
            if !Arc::ptr_eq(&link.seq, &ev.seq) {
                lock(&link.seq).invalid = true;
                return Err(cu::STREAM_CAPTURE_MERGE);
            }
            stream.with_capture(|l| {
                if let Some(l) = l.as_mut() {
                    for d in &ev.deps {
                        if !l.deps.contains(d) {
                            l.deps.push(*d);
                        }
                    }
                }
            });
            Ok(true)
        }
        (Some(link), Some(Recorded::Stream(_))) => {
            lock(&link.seq).invalid = true;
            crate::errors::diagnose(
                "cuStreamWaitEvent: a capturing stream waited for an event recorded outside the capture; the capture is invalidated",
            );
            Err(cu::STREAM_CAPTURE_ISOLATION)
        }
        (Some(_), None) => Ok(true),
        (None, _) => Ok(false),
    }
}

/// A graph: nodes and their dependencies.
pub struct Graph {
    nodes: Vec<Node>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// `cuStreamEndCapture`.
pub fn end(stream: &Arc<Stream>) -> Result<Graph, CuResult> {
    let Some(link) = stream.capture() else {
        return Err(cu::ILLEGAL_STATE);
    };
    let seq = link.seq;
    if seq.origin != stream.handle {
        lock(&seq).invalid = true;
        return Err(cu::STREAM_CAPTURE_UNMATCHED);
    }
    if seq.mode != MODE_RELAXED && seq.thread != std::thread::current().id() {
        return Err(cu::STREAM_CAPTURE_WRONG_THREAD);
    }
    let mut st = lock(&seq);
    let members: Vec<Arc<Stream>> = st.members.iter().filter_map(Weak::upgrade).collect();
    // Every forked stream's last work must lead into the origin's.
    let ancestors = ancestors_of(&st.nodes, &link.deps);
    let mut unjoined = false;
    for m in &members {
        if m.handle == stream.handle {
            continue;
        }
        if let Some(l) = m.capture() {
            if l.deps.iter().any(|d| !ancestors.contains(d)) {
                unjoined = true;
            }
        }
    }
    let invalid = st.invalid;
    let nodes = std::mem::take(&mut st.nodes);
    drop(st);
    for m in &members {
        m.set_capture(None);
    }
    active()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|w| w.upgrade().is_some_and(|s| !Arc::ptr_eq(&s, &seq)));
    if invalid {
        return Err(cu::STREAM_CAPTURE_INVALIDATED);
    }
    if unjoined {
        return Err(cu::STREAM_CAPTURE_UNJOINED);
    }
    Ok(Graph { nodes })
}

/// `cuStreamIsCapturing`: 0 none, 1 active, 2 invalidated.
pub fn status(stream: &Stream) -> u32 {
    match stream.capture() {
        None => 0,
        Some(l) if lock(&l.seq).invalid => 2,
        Some(_) => 1,
    }
}

/// The nodes `tails` depend on, themselves included.
fn ancestors_of(nodes: &[Node], tails: &[usize]) -> Vec<usize> {
    let mut seen = vec![false; nodes.len()];
    let mut stack: Vec<usize> = tails.to_vec();
    while let Some(n) = stack.pop() {
        if n >= seen.len() || seen[n] {
            continue;
        }
        seen[n] = true;
        stack.extend(nodes[n].deps.iter().copied());
    }
    (0..nodes.len()).filter(|&i| seen[i]).collect()
}

/// An executable graph.
pub struct GraphExec {
    nodes: Vec<Node>,
    /// `ancestors[i][j]`: node j precedes node i.
    ancestors: Vec<Vec<bool>>,
    /// The previous launch: its stream, position and order.
    pub last: Mutex<Option<(Arc<Stream>, u64, Vc)>>,
    /// Its context.
    pub ctx: Arc<Context>,
}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphExec")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

/// `cuGraphInstantiate`.
pub fn instantiate(graph: &Graph, ctx: Arc<Context>) -> GraphExec {
    let n = graph.nodes.len();
    let mut ancestors = vec![vec![false; n]; n];
    for (node, row) in graph.nodes.iter().zip(ancestors.iter_mut()) {
        for a in ancestors_of(&graph.nodes, &node.deps) {
            row[a] = true;
        }
    }
    GraphExec {
        nodes: graph.nodes.clone(),
        ancestors,
        last: Mutex::new(None),
        ctx,
    }
}

/// Runs a launch of `g` on the worker (see the module docs).
pub fn replay(exec: &Exec<'_>, g: &GraphExec) -> Outcome {
    let n = g.nodes.len();
    let mut done = vec![false; n];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut seed = crate::config::get().seed ^ (n as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut ran: Vec<(usize, Vec<Touch>)> = Vec::with_capacity(n);
    let mut all = Vec::new();
    while order.len() < n {
        let ready: Vec<usize> = (0..n)
            .filter(|&i| !done[i] && g.nodes[i].deps.iter().all(|&d| done[d]))
            .collect();
        if ready.is_empty() {
            return Err(Fault {
                code: cu::LAUNCH_FAILED,
                message: format!("{}: the graph has a cycle", exec.what),
            });
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let i = ready[(seed % ready.len() as u64) as usize];
        let node = &g.nodes[i];
        let what = format!("{} (graph node {i}: {})", exec.what, node.what);
        let sub = Exec {
            stream: exec.stream,
            what: &what,
            stamp: exec.stamp,
        };
        let touches = crate::work::run(&sub, &node.work)?;
        for (j, earlier) in &ran {
            if g.ancestors[i][*j] || g.ancestors[*j][i] {
                continue;
            }
            if let Some(message) = conflict(&touches, earlier) {
                let message = format!(
                    "race inside a graph: nodes {j} ({}) and {i} ({}) are not ordered by any edge, and {message}",
                    g.nodes[*j].what, node.what
                );
                match crate::config::get().races {
                    crate::config::RacePolicy::Error => {
                        return Err(Fault {
                            code: cu::LAUNCH_FAILED,
                            message,
                        })
                    }
                    crate::config::RacePolicy::Warn => crate::errors::diagnose(&message),
                    crate::config::RacePolicy::Off => {}
                }
            }
        }
        all.extend(touches.iter().cloned());
        ran.push((i, touches));
        done[i] = true;
        order.push(i);
    }
    Ok(all)
}

fn conflict(a: &[Touch], b: &[Touch]) -> Option<String> {
    use crate::hb::Kind;
    for x in a {
        for y in b {
            let both_read = x.kind == Kind::Read && y.kind == Kind::Read;
            let both_atomic = x.kind == Kind::Atomic && y.kind == Kind::Atomic;
            if Arc::ptr_eq(&x.alloc, &y.alloc)
                && x.lo < y.hi
                && y.lo < x.hi
                && !both_read
                && !both_atomic
            {
                return Some(format!(
                    "both touch bytes [{}, {}) of {}, one of them writing",
                    x.lo.max(y.lo),
                    x.hi.min(y.hi),
                    x.alloc.describe()
                ));
            }
        }
    }
    None
}
