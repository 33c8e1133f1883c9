//! Streams, events, host functions, stream capture and graphs.

#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use super::{entry, put, stream};
use crate::capture;
use crate::context::{self, current};
use crate::errors::{cu, CuResult};
use crate::stream::{Enqueued, Event, Record, Recorded, Stream, StreamKind, NON_BLOCKING};
use crate::work::Work;

fn create(ph: *mut u64, flags: c_uint, priority: c_int) -> Result<(), CuResult> {
    if ph.is_null() || flags & !NON_BLOCKING != 0 {
        return Err(cu::INVALID_VALUE);
    }
    let ctx = current()?;
    let d = context::driver()?;
    let h = d.streams.reserve();
    // Priorities are clamped to the range (0 least, -5 greatest), as the driver does.
    let s = Stream::new(ctx, h, flags, priority.clamp(-5, 0), StreamKind::Created);
    d.streams.insert_at(h, s);
    // SAFETY: a writable CUstream.
    unsafe { put(ph, h) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut u64, flags: c_uint) -> CuResult {
    entry("cuStreamCreate", || create(ph, flags, 0))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut u64,
    flags: c_uint,
    priority: c_int,
) -> CuResult {
    entry("cuStreamCreateWithPriority", || create(ph, flags, priority))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(h: u64) -> CuResult {
    entry("cuStreamDestroy_v2", || {
        let d = context::driver()?;
        if h == 0 || h == super::STREAM_LEGACY || h == super::STREAM_PER_THREAD {
            return Err(cu::INVALID_HANDLE);
        }
        let s = d.streams.remove(h).ok_or(cu::INVALID_HANDLE)?;
        if s.capture().is_some() {
            capture::invalidate_stream(&s);
        }
        s.close();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(h: u64) -> CuResult {
    entry("cuStreamSynchronize", || stream(h)?.synchronize())
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(h: u64) -> CuResult {
    entry("cuStreamQuery", || {
        if stream(h)?.query()? {
            Ok(())
        } else {
            Err(cu::NOT_READY)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(h: u64, pctx: *mut u64) -> CuResult {
    entry("cuStreamGetCtx", || {
        let s = stream(h)?;
        // SAFETY: a writable CUcontext.
        unsafe { put(pctx, s.ctx.handle) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(h: u64, p: *mut c_int) -> CuResult {
    entry("cuStreamGetPriority", || {
        let s = stream(h)?;
        // SAFETY: a writable int.
        unsafe { put(p, s.priority) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(h: u64, p: *mut c_uint) -> CuResult {
    entry("cuStreamGetFlags", || {
        let s = stream(h)?;
        // SAFETY: a writable unsigned int.
        unsafe { put(p, s.flags) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(h: u64, e: u64, flags: c_uint) -> CuResult {
    entry("cuStreamWaitEvent", || {
        let s = stream(h)?;
        let d = context::driver()?;
        let ev = d.events.get(e).ok_or(cu::INVALID_HANDLE)?;
        if flags != 0 {
            return Err(cu::INVALID_VALUE);
        }
        let latest = ev.latest();
        if capture::wait(&s, latest.as_ref())? {
            return Ok(());
        }
        match latest {
            None => Ok(()),
            Some(Recorded::Captured(_)) => Err(cu::STREAM_CAPTURE_ISOLATION),
            Some(Recorded::Stream(r)) => {
                if r.done() {
                    // Already passed: nothing to wait for, but the order still holds.
                    let what: Arc<str> = Arc::from("a wait for a completed event");
                    return s.enqueue(Work::Nop, what, Some(&r.vc)).map(|_| ());
                }
                let what: Arc<str> = Arc::from(format!(
                    "cuStreamWaitEvent on stream 0x{:x} for event 0x{e:x}",
                    s.handle
                ));
                let vc = r.vc.clone();
                s.enqueue(Work::Wait(r), what, Some(&vc)).map(|_| ())
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    h: u64,
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
) -> CuResult {
    entry("cuLaunchHostFunc", || {
        let s = stream(h)?;
        let f = f.ok_or(cu::INVALID_VALUE)?;
        let what: Arc<str> = Arc::from(format!("a host function on stream 0x{:x}", s.handle));
        s.enqueue(
            Work::HostFn {
                f,
                data: data as usize,
            },
            what,
            None,
        )
        .map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ph: *mut u64, flags: c_uint) -> CuResult {
    entry("cuEventCreate", || {
        // DEFAULT 0, BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (needs 2).
        if ph.is_null() || flags & !7 != 0 || (flags & 4 != 0 && flags & 2 == 0) {
            return Err(cu::INVALID_VALUE);
        }
        let ctx = current()?;
        let d = context::driver()?;
        let h = d.events.reserve();
        d.events.insert_at(
            h,
            Arc::new(Event {
                handle: h,
                ctx: ctx.handle,
                flags,
                latest: Mutex::new(None),
            }),
        );
        // SAFETY: a writable CUevent.
        unsafe { put(ph, h) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(e: u64) -> CuResult {
    entry("cuEventDestroy_v2", || {
        context::driver()?
            .events
            .remove(e)
            .map(|_| ())
            .ok_or(cu::INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(e: u64, h: u64) -> CuResult {
    entry("cuEventRecord", || {
        let d = context::driver()?;
        let ev = d.events.get(e).ok_or(cu::INVALID_HANDLE)?;
        let s = stream(h)?;
        if s.capture().is_some() {
            return capture::record(&ev, &s);
        }
        // The record is an operation of the stream: its position and order are its own.
        let mut made: Option<Arc<Record>> = None;
        let what: Arc<str> = Arc::from(format!("cuEventRecord on stream 0x{:x}", s.handle));
        s.enqueue_with(
            |seq, vc| {
                let r = Arc::new(Record {
                    stream: Arc::clone(&s),
                    seq,
                    vc: vc.clone(),
                    time: OnceLock::new(),
                });
                made = Some(Arc::clone(&r));
                Work::Record(r)
            },
            what,
            None,
        )?;
        if let Some(r) = made {
            *ev.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(Recorded::Stream(r));
        }
        Ok(())
    })
}

fn event_stream_record(e: u64) -> Result<Option<Recorded>, CuResult> {
    let d = context::driver()?;
    let ev = d.events.get(e).ok_or(cu::INVALID_HANDLE)?;
    Ok(ev.latest())
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(e: u64) -> CuResult {
    entry("cuEventQuery", || match event_stream_record(e)? {
        None => Ok(()),
        Some(Recorded::Captured(_)) => Err(cu::CAPTURED_EVENT),
        Some(Recorded::Stream(r)) => {
            r.stream.ctx.dev().check()?;
            if r.done() {
                crate::hb::host_learns(&r.vc);
                Ok(())
            } else {
                r.stream.demand(r.seq);
                Err(cu::NOT_READY)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(e: u64) -> CuResult {
    entry("cuEventSynchronize", || match event_stream_record(e)? {
        None => Ok(()),
        Some(Recorded::Captured(_)) => Err(cu::CAPTURED_EVENT),
        Some(Recorded::Stream(r)) => {
            r.wait();
            crate::hb::host_learns(&r.vc);
            r.stream.ctx.dev().check()
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: u64, end: u64) -> CuResult {
    entry("cuEventElapsedTime", || {
        let d = context::driver()?;
        let a = d.events.get(start).ok_or(cu::INVALID_HANDLE)?;
        let b = d.events.get(end).ok_or(cu::INVALID_HANDLE)?;
        if ms.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        if !a.timing() || !b.timing() {
            return Err(cu::INVALID_HANDLE);
        }
        let (Some(Recorded::Stream(ra)), Some(Recorded::Stream(rb))) = (a.latest(), b.latest())
        else {
            return Err(cu::INVALID_HANDLE);
        };
        if !ra.done() || !rb.done() {
            return Err(cu::NOT_READY);
        }
        let (Some(ta), Some(tb)) = (ra.time.get().copied(), rb.time.get().copied()) else {
            // A record skipped after a sticky error has no time.
            return Err(ra.stream.ctx.dev().check().err().unwrap_or(cu::NOT_READY));
        };
        let v = if tb >= ta {
            (tb - ta).as_secs_f64() * 1e3
        } else {
            -((ta - tb).as_secs_f64() * 1e3)
        };
        // SAFETY: a writable float.
        unsafe { put(ms, v as f32) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(h: u64, mode: c_uint) -> CuResult {
    entry("cuStreamBeginCapture_v2", || {
        if h == 0 || h == super::STREAM_LEGACY {
            return Err(cu::STREAM_CAPTURE_UNSUPPORTED);
        }
        capture::begin(&stream(h)?, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture(h: u64) -> CuResult {
    // SAFETY: forwarded (the unversioned form is global mode).
    unsafe { cuStreamBeginCapture_v2(h, capture::MODE_GLOBAL) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(h: u64, graph: *mut u64) -> CuResult {
    entry("cuStreamEndCapture", || {
        if graph.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let s = stream(h)?;
        // SAFETY: a writable CUgraph (null on failure, as the driver leaves it).
        unsafe { *graph = 0 };
        let g = capture::end(&s)?;
        let handle = context::driver()?.graphs.insert(Arc::new(g));
        // SAFETY: as above.
        unsafe { put(graph, handle) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(h: u64, status: *mut c_uint) -> CuResult {
    entry("cuStreamIsCapturing", || {
        let s = stream(h)?;
        // SAFETY: a writable CUstreamCaptureStatus.
        unsafe { put(status, capture::status(&s)) }
    })
}

fn instantiate(pexec: *mut u64, graph: u64) -> Result<(), CuResult> {
    let d = context::driver()?;
    let ctx = current()?;
    let g = d.graphs.get(graph).ok_or(cu::INVALID_HANDLE)?;
    if pexec.is_null() {
        return Err(cu::INVALID_VALUE);
    }
    let exec = Arc::new(capture::instantiate(&g, ctx));
    let h = d.execs.insert(exec);
    // SAFETY: a writable CUgraphExec.
    unsafe { put(pexec, h) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    pexec: *mut u64,
    graph: u64,
    flags: u64,
) -> CuResult {
    entry("cuGraphInstantiateWithFlags", || {
        // The flags this call takes: AUTO_FREE_ON_LAUNCH (1), DEVICE_LAUNCH (4) and
        // USE_NODE_PRIORITY (8); UPLOAD (2) is cuGraphInstantiateWithParams's. A graph for
        // device launch "cannot be used in conjunction with
        // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH"
        // (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html>).
        if flags & !(1 | 4 | 8) != 0 || flags & (1 | 4) == (1 | 4) {
            return Err(cu::INVALID_VALUE);
        }
        instantiate(pexec, graph)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    pexec: *mut u64,
    graph: u64,
    _error_node: *mut u64,
    _log: *mut std::ffi::c_char,
    _log_size: usize,
) -> CuResult {
    entry("cuGraphInstantiate_v2", || instantiate(pexec, graph))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: u64) -> CuResult {
    entry("cuGraphDestroy", || {
        context::driver()?
            .graphs
            .remove(graph)
            .map(|_| ())
            .ok_or(cu::INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: u64) -> CuResult {
    entry("cuGraphExecDestroy", || {
        context::driver()?
            .execs
            .remove(exec)
            .map(|_| ())
            .ok_or(cu::INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: u64, h: u64) -> CuResult {
    entry("cuGraphLaunch", || {
        let d = context::driver()?;
        let g = d.execs.get(exec).ok_or(cu::INVALID_HANDLE)?;
        let s = stream(h)?;
        if s.ctx.handle != g.ctx.handle {
            return Err(cu::INVALID_CONTEXT);
        }
        let what: Arc<str> = Arc::from(format!("graph 0x{exec:x} on stream 0x{:x}", s.handle));
        if s.capture().is_some() {
            return s.enqueue(Work::Graph(g), what, None).map(|_| ());
        }
        // After the graph's previous launch, on whatever stream.
        let mut last = g.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((prev, seq, vc)) = last.as_ref() {
            if !prev.reached(*seq) {
                let wait: Arc<str> = Arc::from("a wait for the graph's previous launch");
                s.enqueue(Work::WaitSeq(Arc::clone(prev), *seq), wait, Some(vc))?;
            } else {
                s.enqueue(
                    Work::Nop,
                    Arc::from("order after the graph's previous launch"),
                    Some(vc),
                )?;
            }
        }
        if let Enqueued::At(seq) = s.enqueue(Work::Graph(Arc::clone(&g)), what, None)? {
            let (_, vc) = s.position();
            *last = Some((Arc::clone(&s), seq, vc));
        }
        Ok(())
    })
}
