//! The id by TCP: rank 0 listens on the rendezvous port and answers one hello per other
//! rank with the id; the others connect, retrying until rank 0 listens.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use gpukit_core::{Error, Result};

use super::{back_off, left, LaunchEnv, ID_LEN, MAGIC, OP_SHARE, VERSION};

/// Magic, version, rank (u32), world size (u32).
const HELLO_LEN: usize = 8 + 2 + 4 + 4;
/// Magic, version, status byte.
pub(super) const REPLY_HEAD_LEN: usize = 8 + 2 + 1;
pub(super) const REPLY_OK: u8 = 0;
pub(super) const REPLY_REJECTED: u8 = 1;

/// `host:port`, with brackets around an IPv6 address.
fn address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the name resolves to no address",
        ));
    }
    Ok(addrs)
}

pub(super) fn via_tcp(
    env: &LaunchEnv,
    host: &str,
    port: u16,
    make: impl FnOnce() -> Result<[u8; ID_LEN]>,
    deadline: Instant,
    timeout: Duration,
) -> Result<[u8; ID_LEN]> {
    let world = u32::try_from(env.world_size).map_err(|_| {
        invalid!(
            OP_SHARE,
            "env",
            "a world of {} processes is too large",
            env.world_size
        )
    })?;
    let target = address(host, port);
    if env.rank == 0 {
        serve(env, host, port, &target, world, make, deadline, timeout)
    } else {
        // `rank < world_size <= u32::MAX`.
        let rank = env.rank as u32;
        ask(rank, world, host, port, &target, deadline, timeout)
    }
}

pub(super) fn hello(rank: u32, world: u32) -> [u8; HELLO_LEN] {
    let mut bytes = [0; HELLO_LEN];
    bytes[..8].copy_from_slice(&MAGIC);
    bytes[8..10].copy_from_slice(&VERSION.to_le_bytes());
    bytes[10..14].copy_from_slice(&rank.to_le_bytes());
    bytes[14..18].copy_from_slice(&world.to_le_bytes());
    bytes
}

pub(super) fn reply_head(status: u8) -> [u8; REPLY_HEAD_LEN] {
    let mut bytes = [0; REPLY_HEAD_LEN];
    bytes[..8].copy_from_slice(&MAGIC);
    bytes[8..10].copy_from_slice(&VERSION.to_le_bytes());
    bytes[10] = status;
    bytes
}

/// Reads until `buf` is full or the stream ends; how many bytes came.
pub(super) fn read_up_to(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Sets both timeouts of `stream` to the time left (errors if there is none).
fn set_timeouts(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left =
        left(deadline).ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "the time is up"))?;
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))
}

/// Rank 0: listen, make the id, answer one hello per other rank.
#[allow(clippy::too_many_arguments)]
fn serve(
    env: &LaunchEnv,
    host: &str,
    port: u16,
    target: &str,
    world: u32,
    make: impl FnOnce() -> Result<[u8; ID_LEN]>,
    deadline: Instant,
    timeout: Duration,
) -> Result<[u8; ID_LEN]> {
    // Every interface of `host`'s family: the others reach rank 0 at whatever address
    // `host` resolves to for them.
    let any = match resolve(host, port) {
        Ok(addrs) if addrs.iter().all(SocketAddr::is_ipv6) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let listen = SocketAddr::new(any, port);
    let listener = bind(listen, target, deadline, timeout)?;
    let id = make()?;
    let io_error = |what: &str, e: io::Error| {
        invalid!(
            OP_SHARE,
            "GPUKIT_RENDEZVOUS_PORT",
            "rank 0 listening on {listen} for {target}: {what}: {e}"
        )
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| io_error("set_nonblocking", e))?;

    let mut peers: Vec<Option<SocketAddr>> = vec![None; env.world_size];
    let mut answered = Vec::with_capacity(env.world_size - 1);
    let mut pause = Duration::from_millis(1);
    while answered.len() < env.world_size - 1 {
        match listener.accept() {
            Ok((stream, peer)) => {
                pause = Duration::from_millis(1);
                if let Some(stream) =
                    answer(stream, peer, world, &mut peers, &id, target, deadline)?
                {
                    answered.push(stream);
                }
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if left(deadline).is_none() {
                    let missing: Vec<String> = (1..env.world_size)
                        .filter(|&r| peers[r].is_none())
                        .take(16)
                        .map(|r| r.to_string())
                        .collect();
                    return Err(invalid!(
                        OP_SHARE,
                        "timeout",
                        "rank 0 listening on {listen} for {target}: after {timeout:?}, {} of \
                         {} ranks have not asked (among them {}); check that they run and \
                         that MASTER_ADDR names this host for them",
                        env.world_size - 1 - answered.len(),
                        env.world_size - 1,
                        missing.join(", ")
                    ));
                }
                back_off(&mut pause, deadline);
            }
            // A connection that went away before it was accepted.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => return Err(io_error("accept", e)),
        }
    }
    // Wait (briefly) for each peer to close first, so that the TIME_WAIT of the connections
    // lands on the peers' ports, not on the rendezvous port a next run binds.
    let now = Instant::now();
    let drain_until = now
        .checked_add(Duration::from_secs(1))
        .map_or(deadline, |t| t.min(deadline));
    for mut stream in answered {
        let Some(left) = left(drain_until) else { break };
        let _ = stream.set_read_timeout(Some(left));
        let _ = stream.read(&mut [0; 1]);
    }
    Ok(id)
}

/// Binds `listen`, retrying while the port is in use until `deadline` (a previous run's
/// listener or connections may still hold it).
fn bind(
    listen: SocketAddr,
    target: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpListener> {
    let mut pause = Duration::from_millis(10);
    let mut warned = false;
    loop {
        match TcpListener::bind(listen) {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                if left(deadline).is_none() {
                    return Err(invalid!(
                        OP_SHARE,
                        "GPUKIT_RENDEZVOUS_PORT",
                        "rank 0 cannot listen on {listen} for {target}: the port is still in \
                         use after {timeout:?}: choose another with GPUKIT_RENDEZVOUS_PORT"
                    ));
                }
                if !warned {
                    tracing::warn!(%listen, "rendezvous port in use; retrying until the timeout");
                    warned = true;
                }
                back_off(&mut pause, deadline);
            }
            Err(e) => {
                return Err(invalid!(
                    OP_SHARE,
                    "GPUKIT_RENDEZVOUS_PORT",
                    "rank 0 cannot listen on {listen} for {target}: {e}"
                ))
            }
        }
    }
}

/// Reads one hello and answers it; the stream, once its rank has the id, else `None` (a
/// connection that closed without a word, or went away before the answer).
fn answer(
    mut stream: TcpStream,
    peer: SocketAddr,
    world: u32,
    peers: &mut [Option<SocketAddr>],
    id: &[u8; ID_LEN],
    target: &str,
    deadline: Instant,
) -> Result<Option<TcpStream>> {
    let timed_out = || {
        invalid!(
            OP_SHARE,
            "timeout",
            "rank 0 at {target}: {peer} connected but sent no whole hello before the timeout"
        )
    };
    let io_error = |e: io::Error| {
        invalid!(
            OP_SHARE,
            "GPUKIT_RENDEZVOUS_PORT",
            "rank 0 at {target}, connection from {peer}: {e}"
        )
    };
    stream.set_nonblocking(false).map_err(io_error)?;
    set_timeouts(&stream, deadline).map_err(|_| timed_out())?;
    let mut hello = [0; HELLO_LEN];
    let got = match read_up_to(&mut stream, &mut hello) {
        Ok(got) => got,
        Err(e) if is_timeout(&e) => return Err(timed_out()),
        Err(e) => {
            tracing::debug!(%peer, error = %e, "rendezvous connection failed before its hello");
            return Ok(None);
        }
    };
    if got == 0 {
        tracing::debug!(%peer, "rendezvous connection closed without a hello");
        return Ok(None);
    }
    if got < HELLO_LEN || hello[..8] != MAGIC {
        return Err(invalid!(
            OP_SHARE,
            "GPUKIT_RENDEZVOUS_PORT",
            "rank 0 at {target}: {peer} sent {got} bytes that are not a gpukit hello: is \
             another program using the port? choose another with GPUKIT_RENDEZVOUS_PORT"
        ));
    }
    let version = u16::from_le_bytes([hello[8], hello[9]]);
    let rank = u32::from_le_bytes([hello[10], hello[11], hello[12], hello[13]]);
    let their_world = u32::from_le_bytes([hello[14], hello[15], hello[16], hello[17]]);
    let slot = usize::try_from(rank)
        .ok()
        .filter(|&r| r > 0 && r < peers.len());
    let refusal = if version != VERSION {
        Some(format!(
            "{peer} speaks rendezvous version {version}, rank 0 version {VERSION}: mixed \
             gpukit versions"
        ))
    } else if their_world != world {
        Some(format!(
            "rank {rank} at {peer} says the world has {their_world} processes, rank 0 says {world}"
        ))
    } else {
        match slot {
            None => Some(format!(
                "a hello from {peer} claims rank {rank}, outside 1..{world}"
            )),
            Some(r) => peers[r]
                .map(|first| format!("rank {rank} asked twice: from {first}, then from {peer}")),
        }
    };
    if let Some(refusal) = refusal {
        // Tell the peer why, so that it fails now rather than at its timeout.
        let text = refusal.as_bytes();
        let text = &text[..text.len().min(usize::from(u16::MAX))];
        let mut reply = reply_head(REPLY_REJECTED).to_vec();
        reply.extend_from_slice(&(text.len() as u16).to_le_bytes());
        reply.extend_from_slice(text);
        let _ = stream.write_all(&reply);
        return Err(invalid!(OP_SHARE, "hello", "rank 0 at {target}: {refusal}"));
    }
    let mut reply = reply_head(REPLY_OK).to_vec();
    reply.extend_from_slice(id);
    match stream.write_all(&reply) {
        Ok(()) => {
            if let Some(r) = slot {
                peers[r] = Some(peer);
            }
            Ok(Some(stream))
        }
        Err(e) => {
            // The peer went away; it asks again if it is still there.
            tracing::debug!(%peer, error = %e, "rendezvous answer not delivered");
            Ok(None)
        }
    }
}

/// Why one attempt of a non-zero rank failed.
enum Attempt {
    /// Worth another try (rank 0 not listening yet, a connection closed early).
    Retry(String),
    /// Final.
    Fail(Error),
}

/// A non-zero rank: ask rank 0 until it answers or the time is up.
fn ask(
    rank: u32,
    world: u32,
    host: &str,
    port: u16,
    target: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<[u8; ID_LEN]> {
    let mut pause = Duration::from_millis(10);
    loop {
        let last = match ask_once(rank, world, host, port, target, deadline) {
            Ok(id) => return Ok(id),
            Err(Attempt::Fail(e)) => return Err(e),
            Err(Attempt::Retry(why)) => why,
        };
        if left(deadline).is_none() {
            return Err(invalid!(
                OP_SHARE,
                "timeout",
                "rank {rank}: no id from rank 0 at {target} after {timeout:?} (last attempt: \
                 {last}); check that rank 0 runs and reaches share_id, and that MASTER_ADDR \
                 names its host"
            ));
        }
        back_off(&mut pause, deadline);
    }
}

fn ask_once(
    rank: u32,
    world: u32,
    host: &str,
    port: u16,
    target: &str,
    deadline: Instant,
) -> std::result::Result<[u8; ID_LEN], Attempt> {
    let addrs =
        resolve(host, port).map_err(|e| Attempt::Retry(format!("cannot resolve {host:?}: {e}")))?;
    let mut last = String::new();
    let mut stream = None;
    for addr in addrs {
        let Some(left) = left(deadline) else { break };
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("connect to {addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        Attempt::Retry(if last.is_empty() {
            "the time is up".into()
        } else {
            last
        })
    })?;
    let retry = |what: &str, e: io::Error| Attempt::Retry(format!("{what}: {e}"));
    set_timeouts(&stream, deadline).map_err(|e| retry("connected", e))?;
    stream
        .write_all(&hello(rank, world))
        .map_err(|e| retry("sending the hello", e))?;

    let no_answer = |got: usize| {
        Attempt::Retry(format!(
            "connected, but the connection closed after {got} bytes of an answer"
        ))
    };
    let read = |stream: &mut TcpStream, buf: &mut [u8]| -> std::result::Result<(), Attempt> {
        match read_up_to(stream, buf) {
            Ok(got) if got == buf.len() => Ok(()),
            Ok(got) => Err(no_answer(got)),
            Err(e) if is_timeout(&e) => Err(Attempt::Retry(
                "connected, but no answer came: is the port another program's (torchrun's \
                 store listens on MASTER_PORT)?"
                    .into(),
            )),
            Err(e) => Err(retry("waiting for the answer", e)),
        }
    };
    let mut head = [0; REPLY_HEAD_LEN];
    read(&mut stream, &mut head)?;
    if head[..8] != MAGIC {
        return Err(Attempt::Fail(invalid!(
            OP_SHARE,
            "GPUKIT_RENDEZVOUS_PORT",
            "rank {rank}: {target} answered with bytes that are not gpukit's rendezvous: is \
             another program using the port? choose another with GPUKIT_RENDEZVOUS_PORT"
        )));
    }
    let version = u16::from_le_bytes([head[8], head[9]]);
    let mismatch = |message: String| {
        Attempt::Fail(invalid!(
            OP_SHARE,
            "hello",
            "rank {rank}: rank 0 at {target} {message}"
        ))
    };
    if version != VERSION {
        return Err(mismatch(format!(
            "speaks rendezvous version {version}, this process version {VERSION}: mixed \
             gpukit versions"
        )));
    }
    match head[10] {
        REPLY_OK => {
            let mut id = [0; ID_LEN];
            read(&mut stream, &mut id)?;
            // Close first (see `serve`).
            drop(stream);
            Ok(id)
        }
        REPLY_REJECTED => {
            let mut len = [0; 2];
            read(&mut stream, &mut len)?;
            let mut text = vec![0; usize::from(u16::from_le_bytes(len))];
            read(&mut stream, &mut text)?;
            Err(mismatch(format!(
                "rejected this rank: {}",
                String::from_utf8_lossy(&text)
            )))
        }
        status => Err(mismatch(format!("answered with unknown status {status}"))),
    }
}
