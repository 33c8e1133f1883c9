//! [`share_id`]: one process, the id file, the TCP rendezvous, and what rank 0 does with
//! hellos that do not fit.

use std::fs;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use gpukit_core::{Error, Result};

use crate::launch::file::{decode_file, encode_file};
use crate::launch::tcp::{hello, read_up_to, reply_head, REPLY_HEAD_LEN, REPLY_OK, REPLY_REJECTED};
use crate::launch::{share_id, LaunchEnv, LaunchSource, ID_LEN};

const LONG: Duration = Duration::from_secs(60);

/// The `arg` and message of a `share_id` error.
fn share_err(result: Result<[u8; ID_LEN]>) -> (&'static str, String) {
    match result {
        Err(Error::InvalidArgument { op, arg, message }) => {
            assert_eq!(op, "share_id");
            (arg, message)
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn id_of(seed: u8) -> [u8; ID_LEN] {
    std::array::from_fn(|i| seed.wrapping_add(i as u8))
}

fn env(rank: usize, world_size: usize) -> LaunchEnv {
    LaunchEnv {
        rank,
        world_size,
        local_rank: rank,
        local_world_size: world_size,
        master: None,
        id_file: None,
        rendezvous_port: None,
        run_id: None,
        source: LaunchSource::Torchrun,
    }
}

fn tcp_env(rank: usize, world_size: usize, port: u16) -> LaunchEnv {
    let master = Some(("127.0.0.1".into(), 1));
    let rendezvous_port = Some(port);
    LaunchEnv {
        master,
        rendezvous_port,
        ..env(rank, world_size)
    }
}

fn file_env(rank: usize, world_size: usize, path: &Path, run: &str) -> LaunchEnv {
    let id_file = Some(path.to_path_buf());
    let run_id = Some(run.to_string());
    LaunchEnv {
        id_file,
        run_id,
        ..env(rank, world_size)
    }
}

/// A port nothing listens on (at the moment).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A fresh, empty folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let name = format!("gpukit-launch-{}-{name}", std::process::id());
    let dir = std::env::temp_dir().join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs each of `envs` on a thread of its own, rank 0's `make` giving `id`; the other
/// ranks start first. The results in rank order.
fn run_ranks(envs: Vec<LaunchEnv>, id: [u8; ID_LEN]) -> Vec<Result<[u8; ID_LEN]>> {
    let mut handles = Vec::new();
    for env in envs.into_iter().rev() {
        let rank = env.rank;
        if rank == 0 {
            // Let the others start waiting before rank 0 exists.
            thread::sleep(Duration::from_millis(50));
        }
        let make = move || {
            assert_eq!(rank, 0, "only rank 0 makes the id");
            Ok(id)
        };
        handles.push(thread::spawn(move || share_id(&env, make, LONG)));
    }
    handles
        .into_iter()
        .rev()
        .map(|h| h.join().unwrap())
        .collect()
}

fn make_fails() -> Result<[u8; ID_LEN]> {
    Err(Error::InvalidArgument {
        op: "make",
        arg: "x",
        message: String::new(),
    })
}

#[test]
fn one_process_just_makes() {
    assert_eq!(
        share_id(&env(0, 1), || Ok(id_of(3)), LONG).unwrap(),
        id_of(3)
    );
    let failed = share_id(&env(0, 1), make_fails, LONG);
    assert!(matches!(
        failed,
        Err(Error::InvalidArgument { op: "make", .. })
    ));
    // No rank 2 of 2, and no transport for 2.
    assert_eq!(
        share_err(share_id(&env(2, 2), || Ok(id_of(0)), LONG)).0,
        "env"
    );
    assert_eq!(
        share_err(share_id(&env(1, 2), || Ok(id_of(0)), LONG)).0,
        "env"
    );
}

#[test]
fn file_world_of_three_skips_an_earlier_runs_file() {
    let dir = temp_dir("file3");
    let path = dir.join("nccl.id");
    // An earlier run's file, which the waiting ranks must not take.
    fs::write(&path, encode_file("run-1", &id_of(1))).unwrap();
    let envs = (0..3)
        .map(|rank| file_env(rank, 3, &path, "run-2"))
        .collect();
    for result in run_ranks(envs, id_of(2)) {
        assert_eq!(result.unwrap(), id_of(2));
    }
    // Only the file itself is left: the temporary one was renamed.
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn file_timeout_names_the_path_and_what_was_there() {
    let dir = temp_dir("file-timeout");
    let path = dir.join("id");
    let short = Duration::from_millis(300);
    let waiting = file_env(1, 2, &path, "new");
    let (arg, message) = share_err(share_id(&waiting, || Ok(id_of(0)), short));
    assert_eq!(arg, "timeout");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("does not exist"), "{message}");
    // A file of another run is reported as such.
    fs::write(&path, encode_file("old", &id_of(1))).unwrap();
    let (arg, message) = share_err(share_id(&waiting, || Ok(id_of(0)), short));
    assert_eq!(arg, "timeout");
    assert!(message.contains("another run (\"old\""), "{message}");
    // Rank 0 cannot write into a missing folder.
    let writer = file_env(0, 2, &dir.join("missing").join("id"), "new");
    let (arg, _) = share_err(share_id(&writer, || Ok(id_of(0)), short));
    assert_eq!(arg, "GPUKIT_ID_FILE");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn id_file_format_round_trips_and_refuses_partial_files() {
    let bytes = encode_file("run", &id_of(9));
    assert_eq!(decode_file(&bytes, "run").unwrap(), id_of(9));
    let partial = decode_file(&bytes[..bytes.len() - 1], "run");
    assert!(partial.unwrap_err().contains("not a whole"));
    assert!(decode_file(&bytes, "other")
        .unwrap_err()
        .contains("another run"));
    assert!(decode_file(b"hello", "run").is_err());
}

#[test]
fn tcp_world_of_four() {
    let port = free_port();
    let envs = (0..4).map(|rank| tcp_env(rank, 4, port)).collect();
    for result in run_ranks(envs, id_of(4)) {
        assert_eq!(result.unwrap(), id_of(4));
    }
}

#[test]
fn tcp_timeout_when_rank_0_never_comes() {
    let port = free_port();
    let short = Duration::from_millis(300);
    let (arg, message) = share_err(share_id(&tcp_env(1, 2, port), || Ok(id_of(0)), short));
    assert_eq!(arg, "timeout");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
}

/// Connects to rank 0 (retrying until it listens), sends `bytes`, ends its side, and
/// returns rank 0's reply: a whole one, or what came before rank 0 closed.
fn raw_client(port: u16, bytes: &[u8]) -> Vec<u8> {
    let give_up = Instant::now() + LONG;
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) => {
                assert!(Instant::now() < give_up, "rank 0 never listened: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    };
    stream.set_read_timeout(Some(LONG)).unwrap();
    stream.write_all(bytes).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = vec![0; REPLY_HEAD_LEN];
    let got = read_up_to(&mut stream, &mut reply).unwrap();
    reply.truncate(got);
    if got == REPLY_HEAD_LEN {
        let rest = if reply[10] == REPLY_OK {
            ID_LEN
        } else {
            let mut len = [0; 2];
            assert_eq!(read_up_to(&mut stream, &mut len).unwrap(), 2);
            reply.extend_from_slice(&len);
            usize::from(u16::from_le_bytes(len))
        };
        let mut tail = vec![0; rest];
        assert_eq!(read_up_to(&mut stream, &mut tail).unwrap(), rest);
        reply.extend_from_slice(&tail);
    }
    reply
}

fn rank_0(world: usize, port: u16) -> thread::JoinHandle<Result<[u8; ID_LEN]>> {
    thread::spawn(move || share_id(&tcp_env(0, world, port), || Ok(id_of(0)), LONG))
}

fn assert_rejected(reply: &[u8], text: &str) {
    assert_eq!(reply[..REPLY_HEAD_LEN], reply_head(REPLY_REJECTED));
    let message = String::from_utf8_lossy(&reply[REPLY_HEAD_LEN + 2..]);
    assert!(message.contains(text), "{message}");
}

#[test]
fn hello_with_a_rank_out_of_range_is_rejected() {
    let port = free_port();
    let server = rank_0(3, port);
    assert_rejected(&raw_client(port, &hello(7, 3)), "rank 7");
    let (arg, message) = share_err(server.join().unwrap());
    assert_eq!(arg, "hello");
    assert!(message.contains("claims rank 7, outside 1..3"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
}

#[test]
fn hello_from_a_rank_seen_twice_is_rejected() {
    let port = free_port();
    let server = rank_0(3, port);
    let first = raw_client(port, &hello(1, 3));
    assert_eq!(first[..REPLY_HEAD_LEN], reply_head(REPLY_OK));
    assert_eq!(first[REPLY_HEAD_LEN..], id_of(0));
    assert_rejected(&raw_client(port, &hello(1, 3)), "twice");
    let (arg, message) = share_err(server.join().unwrap());
    assert_eq!(arg, "hello");
    assert!(message.contains("rank 1 asked twice"), "{message}");
}

#[test]
fn hello_with_another_world_size_is_rejected() {
    let port = free_port();
    let server = rank_0(3, port);
    assert_rejected(&raw_client(port, &hello(1, 5)), "5 processes");
    assert_eq!(share_err(server.join().unwrap()).0, "hello");
}

#[test]
fn foreign_bytes_on_the_port_fail_rank_0() {
    let port = free_port();
    let server = rank_0(2, port);
    assert!(raw_client(port, b"GET / HTTP/1.0\r\n\r\n").is_empty());
    let (arg, message) = share_err(server.join().unwrap());
    assert_eq!(arg, "GPUKIT_RENDEZVOUS_PORT");
    assert!(message.contains("not a gpukit hello"), "{message}");
}

#[test]
fn a_silent_probe_is_ignored() {
    let port = free_port();
    let server = rank_0(2, port);
    assert!(raw_client(port, &[]).is_empty());
    let asked = share_id(&tcp_env(1, 2, port), || Ok(id_of(9)), LONG);
    assert_eq!(asked.unwrap(), id_of(0));
    assert_eq!(server.join().unwrap().unwrap(), id_of(0));
}

#[test]
fn a_foreign_server_fails_the_asking_rank() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    });
    let asked = share_id(&tcp_env(1, 2, port), || Ok(id_of(0)), LONG);
    let (arg, message) = share_err(asked);
    assert_eq!(arg, "GPUKIT_RENDEZVOUS_PORT");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    server.join().unwrap();
}

#[test]
fn rank_0_returns_the_error_of_make() {
    let result = share_id(&tcp_env(0, 2, free_port()), make_fails, LONG);
    assert!(
        matches!(result, Err(Error::InvalidArgument { op: "make", .. })),
        "{result:?}"
    );
}
