//! The emulated NCCL's point-to-point calls (`ncclSend`, `ncclRecv`): a rank's sends and
//! receives of one group run as one operation on its stream, matched with the peer's by
//! their order.

use super::*;

/// One send or receive of a stream.
#[derive(Clone)]
pub(super) struct P2p {
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
pub(super) fn queue_p2p(ctx: u64, stream: u64, ops: Vec<P2p>) -> NcclResult {
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
