//! The chaos schedule: a schedule fuzzer for the ordering of work, and a race checker.
//!
//! The default schedule runs work in one natural order: short work runs in place on the
//! calling thread, a chain of dependent work flows through one worker, and the ready list
//! is first come, first served; so a missing dependency that a GPU would expose (a copy
//! engine racing a kernel, a stream overtaking another) can pass every test. A backend
//! opened with [`Schedule::Chaos`] (or with `GPU_CPU_SCHEDULE=chaos:<seed>` in the
//! environment) gives its streams a schedule that reorders as much as the semantics permit:
//!
//! - nothing runs in place: every task goes to the pool, and a worker never takes the next
//!   queue of a chain itself; queues are put in the ready list at a random position;
//! - before each task the worker pauses for a time drawn from the seed, the stream's
//!   number (the streams the creating thread made before it, so that a test's pauses do not
//!   depend on the tests beside it) and the task's position in its queue: none (55%), a
//!   yield (25%), 20-200 us (16%) or 0.3-2 ms (4%), so work on different streams overlaps
//!   and finishes in orders the default schedule never produces. Only the order the
//!   streams' recorded dependencies impose remains: a queue runs in order and a wait is
//!   honoured.
//!
//! The same seed gives the same pauses; the threads still race, so a replay reproduces a
//! failure with high probability rather than certainty. Every chaos backend says its seed
//! on standard error once per thread that opens one, so a failing test's output names it.
//!
//! ## The race checker
//!
//! Under the chaos schedule each task declares the byte ranges it reads and writes: copies
//! their source and destination, gemm every operand (to the end of its batch),
//! kernels their buffer arguments as their signature marks them. The checker keeps a
//! vector clock per task: what the task's queue had waited for when it was queued, joined
//! with everything any host thread had seen finish (a sync, a query that said done, an
//! event that had passed when a stream was told to wait for it). When a task starts, it is
//! compared with the earlier tasks on the same bytes: where one of the two writes and the
//! earlier one is not ordered before it, that is a race. The report names both tasks and
//! the calls that queued them (the first frame outside the library of each call's stack,
//! captured when it was queued); the later task still runs and then fails with
//! `Error::Backend` (`call: "chaos race check"`), so the stream's next sync returns the
//! report, and [`take_races`] hands the reports to a test. Two unordered tasks that overlap
//! in time are always reported; unordered ones that did not overlap are reported unless a
//! host thread saw the first finish before the second started. Memory freed by the backend
//! is forgotten. A graph's launch declares what its tasks declared when they were captured
//! (on a chaos stream). The fault record of the indexing ops is not declared (it is claimed
//! atomically), nor is host code's own use of memory (a host thread reading a unified array
//! or a raw pointer is not a task).

use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gpukit_core::{Error, Result};

/// The environment variable that picks the schedule of every CPU backend opened without
/// [`crate::CpuBackend::with_schedule`]: `default`, or `chaos:<seed>`.
pub const SCHEDULE_ENV: &str = "GPU_CPU_SCHEDULE";

/// How a CPU backend's streams schedule their work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Schedule {
    /// The natural order: short work in place, chains of dependent work on one thread.
    #[default]
    Default,
    /// The chaos schedule and race checker (see the [module docs](self)), drawn from the
    /// seed.
    Chaos {
        /// What picks the pauses.
        seed: u64,
    },
}

impl Schedule {
    /// Parses `default` or `chaos:<seed>` (a decimal `u64`), ignoring surrounding white
    /// space and case; `origin` (the variable or call it came from) is named in the error.
    pub fn parse(text: &str, origin: &str) -> Result<Schedule> {
        let t = text.trim().to_ascii_lowercase();
        if t.is_empty() || t == "default" {
            return Ok(Schedule::Default);
        }
        let seed = t
            .strip_prefix("chaos:")
            .and_then(|s| s.trim().parse::<u64>().ok());
        match seed {
            Some(seed) => Ok(Schedule::Chaos { seed }),
            None => Err(Error::Config {
                path: origin.to_string(),
                message: format!(
                    "{text:?} is not a CPU schedule: expected `default` or `chaos:<seed>` \
                     (a whole number from 0 to {})",
                    u64::MAX
                ),
            }),
        }
    }

    /// The schedule `GPU_CPU_SCHEDULE` asks for ([`Schedule::Default`] when it is unset);
    /// a value that does not parse is an [`Error::Config`] naming the variable.
    pub fn from_env() -> Result<Schedule> {
        match std::env::var(SCHEDULE_ENV) {
            Ok(v) => Schedule::parse(&v, SCHEDULE_ENV),
            Err(std::env::VarError::NotPresent) => Ok(Schedule::Default),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::Config {
                path: SCHEDULE_ENV.to_string(),
                message: format!("{v:?} is not valid Unicode"),
            }),
        }
    }

    /// The seed, for a chaos schedule.
    pub fn seed(self) -> Option<u64> {
        match self {
            Schedule::Default => None,
            Schedule::Chaos { seed } => Some(seed),
        }
    }
}

impl fmt::Display for Schedule {
    /// `default` or `chaos:<seed>`, as [`Schedule::parse`] reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Default => f.write_str("default"),
            Schedule::Chaos { seed } => write!(f, "chaos:{seed}"),
        }
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a worker does before a task ([`pause_before`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pause {
    None,
    Yield,
    Sleep(Duration),
}

/// The pause before task `seq` of stream `ordinal` under `seed`.
pub(crate) fn pause_for(seed: u64, ordinal: u64, seq: u64) -> Pause {
    let r = mix(seed ^ mix(ordinal ^ mix(seq)));
    let us = |lo: u64, hi: u64| Duration::from_micros(lo + (r >> 20) % (hi - lo + 1));
    match r % 1000 {
        0..=549 => Pause::None,
        550..=799 => Pause::Yield,
        800..=959 => Pause::Sleep(us(20, 200)),
        _ => Pause::Sleep(us(300, 2000)),
    }
}

/// Pauses before task `seq` of stream `ordinal`.
pub(crate) fn pause_before(seed: u64, ordinal: u64, seq: u64) {
    match pause_for(seed, ordinal, seq) {
        Pause::None => {}
        Pause::Yield => std::thread::yield_now(),
        Pause::Sleep(d) => std::thread::sleep(d),
    }
}

/// A random position in a ready list of `len` queues (`0..=len`).
pub(crate) fn ready_position(seed: u64, len: usize) -> usize {
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let r = mix(seed ^ mix(DRAWS.fetch_add(1, Ordering::Relaxed)));
    (r % (len as u64 + 1)) as usize
}

thread_local! {
    /// Chaos streams created on this thread so far: the next one's number.
    static STREAMS_MADE: Cell<u64> = const { Cell::new(0) };
    /// Seeds already announced on this thread.
    static ANNOUNCED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// On a worker running a chaos task: that task's clock (what it follows).
    static RUNNING: RefCell<Option<Arc<Clock>>> = const { RefCell::new(None) };
}

/// Set once a chaos backend exists: freed memory is then forgotten by the checker.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Says the seed on standard error, once per thread and seed (a test's captured output).
pub(crate) fn announce(seed: u64) {
    ACTIVE.store(true, Ordering::Release);
    let new = ANNOUNCED.with(|a| {
        let mut a = a.borrow_mut();
        let new = !a.contains(&seed);
        if new {
            a.push(seed);
        }
        new
    });
    if new {
        eprintln!(
            "gpukit-cpu: chaos schedule, seed {seed} (replay with {SCHEDULE_ENV}=chaos:{seed})"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A vector clock: per queue, how many of its items are known to come before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Clock(Vec<(u64, u64)>);

impl Clock {
    fn get(&self, queue: u64) -> u64 {
        match self.0.binary_search_by_key(&queue, |&(q, _)| q) {
            Ok(i) => self.0[i].1,
            Err(_) => 0,
        }
    }

    fn raise(&mut self, queue: u64, seq: u64) {
        match self.0.binary_search_by_key(&queue, |&(q, _)| q) {
            Ok(i) => self.0[i].1 = self.0[i].1.max(seq),
            Err(i) => self.0.insert(i, (queue, seq)),
        }
    }

    fn join(&mut self, other: &Clock) {
        for &(q, s) in &other.0 {
            self.raise(q, s);
        }
    }

    fn forget(&mut self, queue: u64) {
        self.0.retain(|&(q, _)| q != queue);
    }
}

/// What every host thread has seen finish, joined: every task queued from now on follows it.
static HOST: Mutex<Clock> = Mutex::new(Clock(Vec::new()));

/// One byte range a task reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) write: bool,
}

impl Access {
    pub(crate) fn read(ptr: *const u8, len: usize) -> Access {
        Access {
            start: ptr as usize,
            len,
            write: false,
        }
    }

    pub(crate) fn write(ptr: *const u8, len: usize) -> Access {
        Access {
            start: ptr as usize,
            len,
            write: true,
        }
    }

    fn end(&self) -> usize {
        self.start.saturating_add(self.len)
    }

    fn overlaps(&self, start: usize, end: usize) -> bool {
        self.start < end && start < self.end()
    }
}

/// Where a task was queued: the stack of the call, resolved only for a report.
pub(crate) struct Site(Backtrace);

impl Site {
    fn capture() -> Site {
        Site(Backtrace::force_capture())
    }

    /// The first frame outside the library and the standard library (the user's call), and
    /// the library's outermost frame below it (the API called).
    fn describe(&self) -> String {
        // The `Debug` form names each frame's function by its full path, with its file and
        // line: `[{ fn: "path", file: "file", line: N }, ...]`.
        let text = format!("{:?}", self.0);
        let frames = frames(&text);
        let user = frames.iter().position(|(s, at)| !is_library(s, at));
        match user {
            Some(i) => {
                let (symbol, at) = &frames[i];
                let api = frames[..i]
                    .iter()
                    .rev()
                    .find(|(s, _)| s.contains("gpukit"))
                    .map(|(s, _)| format!(" (calling {s})"))
                    .unwrap_or_default();
                format!("{at}, in {symbol}{api}")
            }
            None => "a call inside the library (no frame outside it)".to_string(),
        }
    }
}

/// The frames of a backtrace's `Debug` text: (function, `file:line`).
fn frames(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for part in text.split("{ fn: \"").skip(1) {
        let Some((symbol, rest)) = part.split_once('"') else {
            continue;
        };
        let at = rest
            .strip_prefix(", file: \"")
            .and_then(|r| r.split_once("\", line: "))
            .map(|(file, line)| {
                let line: String = line.chars().take_while(char::is_ascii_digit).collect();
                format!("{file}:{line}")
            })
            .unwrap_or_else(|| "?".to_string());
        out.push((symbol.to_string(), at));
    }
    out
}

/// The library's crates: a frame in one of their `src` folders is the library's.
const LIBRARY: [&str; 4] = ["gpukit", "gpukit-core", "gpukit-cpu", "gpukit-pipeline"];

/// Whether a frame (its function, its `file:line`) is the library's or the standard
/// library's (or has no source: a shim). Decided by the file (inlined frames carry short
/// function names): a `src` folder of one of the library's crates, in this workspace or
/// unpacked from a registry (`gpukit-core-0.1.0/src`), or the standard library's sources.
fn is_library(symbol: &str, at: &str) -> bool {
    if at == "?" || at.starts_with("/rustc/") || symbol.starts_with("__rust") {
        return true;
    }
    let file = at.rsplit_once(':').map_or(at, |(f, _)| f);
    let parts: Vec<&str> = file.split(['/', '\\']).collect();
    parts.windows(2).any(|w| {
        w[1] == "src"
            && LIBRARY.iter().any(|c| {
                w[0] == *c
                    || w[0]
                        .strip_prefix(c)
                        .and_then(|v| v.strip_prefix('-'))
                        .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            })
    }) || (file.starts_with("./src/") && in_library_crate())
}

/// Whether the process runs in one of the library's crate folders (a backtrace names files
/// below the current folder as `./...`, so `./src/` is then that crate's).
fn in_library_crate() -> bool {
    std::env::current_dir().is_ok_and(|d| {
        d.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| LIBRARY.contains(&n))
    })
}

/// What a chaos task carries besides its closure: its clock, its ranges and its call site.
pub(crate) struct Declared {
    queue: u64,
    seq: u64,
    clock: Arc<Clock>,
    accesses: Vec<Access>,
    site: Arc<Site>,
}

/// A chaos stream's part: its seed and number, and its clocks.
pub(crate) struct ChaosQueue {
    pub(crate) seed: u64,
    pub(crate) ordinal: u64,
    clocks: Mutex<QueueClocks>,
}

struct QueueClocks {
    /// What the queue's next item follows (its items so far, and what they waited for).
    now: Clock,
    /// The clock of each item since `observed`: (position, clock).
    history: VecDeque<(u64, Arc<Clock>)>,
    /// Items a host thread has seen finish: their clocks are in [`HOST`].
    observed: u64,
}

impl ChaosQueue {
    /// A new chaos stream's part; numbers it among the streams the calling thread made.
    pub(crate) fn new(seed: u64) -> ChaosQueue {
        announce(seed);
        let ordinal = STREAMS_MADE.with(|n| n.replace(n.get() + 1));
        ChaosQueue {
            seed,
            ordinal,
            clocks: Mutex::new(QueueClocks {
                now: Clock::default(),
                history: VecDeque::new(),
                observed: 0,
            }),
        }
    }

    /// The clock of item `seq` of queue `id` (itself included), or what a host thread has
    /// seen of it when it is older than that.
    pub(crate) fn clock_at(&self, id: u64, seq: u64) -> Clock {
        let c = lock(&self.clocks);
        let mut clock = if seq <= c.observed {
            Clock::default()
        } else {
            let i = c.history.partition_point(|&(s, _)| s <= seq);
            match i.checked_sub(1).and_then(|i| c.history.get(i)) {
                Some((_, k)) => (**k).clone(),
                None => Clock::default(),
            }
        };
        clock.raise(id, seq);
        clock
    }

    /// A task queued at `seq` (the caller holds the queue's lock, so positions and clocks
    /// advance together): its clock follows the queue's, the host's and, on a worker, the
    /// running task's.
    pub(crate) fn declare(&self, id: u64, seq: u64, accesses: Vec<Access>) -> Box<Declared> {
        let site = Arc::new(Site::capture());
        let mut c = lock(&self.clocks);
        c.now.join(&lock(&HOST));
        RUNNING.with(|r| {
            if let Some(k) = &*r.borrow() {
                c.now.join(k);
            }
        });
        c.now.raise(id, seq);
        let clock = Arc::new(c.now.clone());
        c.history.push_back((seq, clock.clone()));
        Box::new(Declared {
            queue: id,
            seq,
            clock,
            accesses,
            site,
        })
    }

    /// A wait queued at `seq` for `other` (the clock of the item waited for, taken before
    /// the queue's lock): what follows it follows that item.
    pub(crate) fn wait(&self, id: u64, seq: u64, other: &Clock) {
        let mut c = lock(&self.clocks);
        c.now.join(other);
        c.now.raise(id, seq);
        let clock = Arc::new(c.now.clone());
        c.history.push_back((seq, clock));
    }

    /// A host thread has seen items up to `seq` finish: every later task follows them.
    pub(crate) fn observed(&self, id: u64, seq: u64) {
        if seq == 0 {
            return;
        }
        let clock = self.clock_at(id, seq);
        let mut c = lock(&self.clocks);
        if seq <= c.observed {
            return;
        }
        lock(&HOST).join(&clock);
        c.observed = seq;
        while c.history.front().is_some_and(|&(s, _)| s < seq) {
            c.history.pop_front();
        }
    }

    /// The queue is gone, its items all finished: nothing needs its clock entries.
    pub(crate) fn retire(&self, id: u64) {
        lock(&HOST).forget(id);
        lock(&SHADOW).retain(|e| e.queue != id);
    }
}

/// Marks the calling worker as running a chaos task until dropped (tasks it queues follow
/// it).
pub(crate) struct Running;

impl Running {
    pub(crate) fn enter(d: &Declared) -> Running {
        RUNNING.with(|r| *r.borrow_mut() = Some(d.clock.clone()));
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|r| *r.borrow_mut() = None);
    }
}

/// An earlier task's use of a range.
struct Entry {
    start: usize,
    end: usize,
    write: bool,
    queue: u64,
    seq: u64,
    site: Arc<Site>,
}

/// Every range used by a task no host thread has seen finish.
static SHADOW: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// Races found and not yet taken.
static RACES: Mutex<Vec<Race>> = Mutex::new(Vec::new());

/// A race the checker found: two tasks on overlapping bytes, at least one writing, with no
/// ordering between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Race {
    /// The chaos schedule's seed (of the later task's stream).
    pub seed: u64,
    /// The bytes both use, as addresses (`start..end`).
    pub bytes: std::ops::Range<usize>,
    /// The earlier task: its stream's queue number, its position, whether it writes, and the
    /// call that queued it.
    pub first: RaceSide,
    /// The task that found the race when it started.
    pub second: RaceSide,
}

/// One task of a [`Race`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaceSide {
    /// The queue (stream) it was queued on, by the backend's internal number.
    pub queue: u64,
    /// Its position in that queue.
    pub position: u64,
    /// Whether it writes the bytes.
    pub writes: bool,
    /// The call that queued it: `file:line:column, in function (calling <library API>)`.
    pub site: String,
}

impl fmt::Display for Race {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |s: &RaceSide| {
            format!(
                "{} by task {} of stream queue {}, queued at {}",
                if s.writes { "written" } else { "read" },
                s.position,
                s.queue,
                s.site
            )
        };
        write!(
            f,
            "race on {} bytes at {:#x}: {}; and {}, with no ordering between them (chaos \
             schedule, seed {}: {SCHEDULE_ENV}=chaos:{} replays it)",
            self.bytes.end - self.bytes.start,
            self.bytes.start,
            side(&self.first),
            side(&self.second),
            self.seed,
            self.seed
        )
    }
}

/// Takes the races found so far (every chaos backend of the process).
pub fn take_races() -> Vec<Race> {
    std::mem::take(&mut *lock(&RACES))
}

/// Checks a task that is about to run against the earlier uses of its ranges, records its
/// own, and returns the races found (also kept for [`take_races`]).
pub(crate) fn check(d: &Declared, seed: u64) -> Vec<Race> {
    let host = lock(&HOST).clone();
    let mut shadow = lock(&SHADOW);
    // Uses a host thread has seen finish are ordered before everything queued since.
    shadow.retain(|e| host.get(e.queue) < e.seq);
    let follows = |e: &Entry| d.clock.get(e.queue) >= e.seq;
    let mut found = Vec::new();
    for a in &d.accesses {
        if a.len == 0 {
            continue;
        }
        for e in shadow.iter() {
            if (e.write || a.write) && a.overlaps(e.start, e.end) && !follows(e) {
                found.push(Race {
                    seed,
                    bytes: a.start.max(e.start)..a.end().min(e.end),
                    first: RaceSide {
                        queue: e.queue,
                        position: e.seq,
                        writes: e.write,
                        site: e.site.describe(),
                    },
                    second: RaceSide {
                        queue: d.queue,
                        position: d.seq,
                        writes: a.write,
                        site: d.site.describe(),
                    },
                });
            }
        }
    }
    for a in &d.accesses {
        if a.len == 0 {
            continue;
        }
        // A use inside this one and ordered before it adds nothing: whatever conflicts with
        // it conflicts with this one (a write covers reads and writes, a read covers reads).
        shadow.retain(|e| {
            !(e.start >= a.start && e.end <= a.end() && follows(e) && (a.write || !e.write))
        });
        shadow.push(Entry {
            start: a.start,
            end: a.end(),
            write: a.write,
            queue: d.queue,
            seq: d.seq,
            site: d.site.clone(),
        });
    }
    drop(shadow);
    if !found.is_empty() {
        lock(&RACES).extend(found.iter().cloned());
    }
    found
}

/// The error a task that found races fails with.
pub(crate) fn race_error(races: &[Race]) -> Error {
    let mut message = String::new();
    for (i, r) in races.iter().enumerate() {
        if i > 0 {
            message.push_str("; ");
        }
        message.push_str(&r.to_string());
    }
    Error::Backend {
        backend: "cpu",
        call: "chaos race check",
        message,
    }
}

/// Memory the backend frees: earlier uses of it say nothing about its next owner.
pub(crate) fn forget(start: usize, len: usize) {
    if !ACTIVE.load(Ordering::Acquire) || len == 0 {
        return;
    }
    let end = start.saturating_add(len);
    lock(&SHADOW).retain(|e| e.end <= start || e.start >= end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_print_back() {
        for (text, want) in [
            ("", Schedule::Default),
            ("default", Schedule::Default),
            (" Chaos:7 ", Schedule::Chaos { seed: 7 }),
            (
                "chaos:18446744073709551615",
                Schedule::Chaos { seed: u64::MAX },
            ),
        ] {
            let got = Schedule::parse(text, "test").unwrap();
            assert_eq!(got, want, "{text:?}");
            assert_eq!(Schedule::parse(&got.to_string(), "test").unwrap(), got);
        }
        for bad in [
            "chaos",
            "chaos:",
            "chaos:-1",
            "chaos:1x",
            "random",
            "chaos:18446744073709551616",
        ] {
            match Schedule::parse(bad, "GPU_CPU_SCHEDULE") {
                Err(Error::Config { path, message }) => {
                    assert_eq!(path, "GPU_CPU_SCHEDULE");
                    assert!(message.contains(bad), "{message}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn pauses_follow_the_seed_and_their_stated_shares() {
        let n = 20_000u64;
        let mut counts = [0u64; 4];
        for seq in 0..n {
            let p = pause_for(42, 3, seq);
            assert_eq!(p, pause_for(42, 3, seq), "the same seed, the same pause");
            match p {
                Pause::None => counts[0] += 1,
                Pause::Yield => counts[1] += 1,
                Pause::Sleep(d) if d <= Duration::from_micros(200) => {
                    assert!(d >= Duration::from_micros(20));
                    counts[2] += 1;
                }
                Pause::Sleep(d) => {
                    assert!(d >= Duration::from_micros(300) && d <= Duration::from_millis(2));
                    counts[3] += 1;
                }
            }
        }
        let share = |c: u64| c as f64 / n as f64;
        for (c, want) in counts.iter().zip([0.55, 0.25, 0.16, 0.04]) {
            assert!((share(*c) - want).abs() < 0.015, "{counts:?}");
        }
        let differ = (0..1000)
            .filter(|&s| pause_for(1, 0, s) != pause_for(2, 0, s))
            .count();
        assert!(
            differ > 300,
            "other seeds, other pauses ({differ} of 1000 differ)"
        );
    }

    #[test]
    fn a_site_is_the_first_frame_outside_the_library() {
        let text = r#"Backtrace [{ fn: "capture", file: "/w/crates/gpukit-cpu/src/chaos.rs", line: 275 }, { fn: "push_with", file: "/h/.cargo/registry/src/x/gpukit-cpu-0.1.0/src/queue.rs", line: 9 }, { fn: "gpukit_core::stream::Stream<B>::copy", file: "/w/crates/gpukit-core/src/transfer.rs", line: 12 }, { fn: "core::ops::function::FnOnce::call_once", file: "/rustc/abc/library/core/src/ops/function.rs", line: 250 }, { fn: "shim" }, { fn: "my_app::step", file: "/w/app/src/main.rs", line: 42 }, { fn: "my_app::main", file: "/w/app/src/main.rs", line: 7 }]"#;
        let frames = frames(text);
        assert_eq!(frames.len(), 7);
        assert_eq!(frames[4], ("shim".to_string(), "?".to_string()));
        let user = frames.iter().position(|(s, at)| !is_library(s, at));
        assert_eq!(user, Some(5));
        assert_eq!(frames[5].1, "/w/app/src/main.rs:42");
        // A crate whose name only starts like the library's is the user's.
        assert!(!is_library("f", "/w/gpukit-app/src/main.rs:1"));
        assert!(!is_library("f", "/w/crates/gpukit/tests/it/main.rs:3"));
        assert!(is_library("f", "/w/crates/gpukit-pipeline/src/engine.rs:3"));
    }

    #[test]
    fn clocks_join_and_order() {
        let mut a = Clock::default();
        a.raise(5, 2);
        a.raise(1, 9);
        a.raise(5, 1);
        assert_eq!(a.0, vec![(1, 9), (5, 2)]);
        let mut b = Clock::default();
        b.raise(3, 4);
        b.raise(5, 7);
        a.join(&b);
        assert_eq!(a.0, vec![(1, 9), (3, 4), (5, 7)]);
        assert_eq!(a.get(2), 0);
        a.forget(3);
        assert_eq!(a.get(3), 0);
    }
}
