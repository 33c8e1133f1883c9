//! The queue semantics the rest of the backend builds on, on the crate's own types.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gpukit_core::Backend;

use super::*;

fn stream() -> CpuStream {
    CpuStream::spawn(0, crate::chaos::Schedule::Default).expect("start a stream worker")
}

fn task(f: impl Fn() + Send + 'static) -> Task {
    Task::new(move || {
        f();
        Ok(())
    })
}

/// Blocks until every task queued so far on `s` has finished.
fn drain(s: &CpuStream) {
    s.queue.wait_for(s.queue.tail());
}

/// A latch a task can block on until the test opens it.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

/// Opens its gate when dropped, so that a failed assertion cannot leave a worker
/// blocked (and the stream's drop joining it forever). Declare it after the stream.
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

impl Gate {
    fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    fn wait(&self) {
        let mut open = self.0 .0.lock().unwrap();
        while !*open {
            open = self.0 .1.wait(open).unwrap();
        }
    }
}

#[test]
fn tasks_on_one_stream_run_in_queue_order() {
    let s = stream();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..200u64 {
        let log = log.clone();
        let seq = s
            .queue
            .push(task(move || log.lock().unwrap().push(i)))
            .unwrap();
        assert_eq!(seq, i + 1, "sequence numbers count the tasks queued");
    }
    assert_eq!(s.queue.tail(), 200);
    drain(&s);
    assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
    assert!(s.queue.is_done(200));
    assert!(s.queue.take_error().is_ok());
}

#[test]
fn an_event_completes_only_after_the_tasks_before_it() {
    let s = stream();
    let gate = Gate::default();
    let _open = OpenOnDrop(gate.clone());
    let ran = Arc::new(AtomicBool::new(false));
    let (g, r) = (gate.clone(), ran.clone());
    s.queue
        .push(task(move || {
            g.wait();
            r.store(true, Ordering::SeqCst);
        }))
        .unwrap();
    let plain = CpuEvent::record(&s, false).unwrap();
    let timed = CpuEvent::record(&s, true).unwrap();
    assert!(
        !plain.is_done() && !timed.is_done(),
        "the task before is blocked"
    );
    assert!(
        matches!(timed.time(), Err(CpuError::NotTiming)),
        "no time before the stream reaches the event"
    );
    gate.open();
    plain.wait();
    assert!(
        ran.load(Ordering::SeqCst),
        "event passed before the task finished"
    );
    timed.wait();
    assert!(timed.is_done() && timed.time().is_ok());
    assert!(
        matches!(plain.time(), Err(CpuError::NotTiming)),
        "an event recorded without timing never has a time"
    );

    // An event on a stream with nothing queued has completed already.
    let idle = stream();
    let e = CpuEvent::record(&idle, false).unwrap();
    assert!(e.is_done());
    e.wait();
}

#[test]
fn a_stream_waiting_on_an_event_runs_later_tasks_after_it() {
    for timing in [false, true] {
        let (a, b) = (stream(), stream());
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        a.queue
            .push(task(move || {
                std::thread::sleep(Duration::from_millis(50));
                f.store(true, Ordering::SeqCst);
            }))
            .unwrap();
        let e = CpuEvent::record(&a, timing).unwrap();
        e.wait_on(&b).unwrap();
        let seen = Arc::new(Mutex::new(None));
        let s = seen.clone();
        b.queue
            .push(task(move || {
                *s.lock().unwrap() = Some(finished.load(Ordering::SeqCst));
            }))
            .unwrap();
        drain(&b);
        assert_eq!(
            *seen.lock().unwrap(),
            Some(true),
            "B's task ran before A's event (timing: {timing})"
        );
    }
}

/// A stream whose head waits for another runs, once that one gets there, on the thread
/// that got it there (which had nothing else to do): no wake-up between them. And the
/// wait held no thread meanwhile.
#[test]
fn a_met_wait_runs_on_the_worker_that_met_it() {
    let (a, b) = (stream(), stream());
    let gate = Gate::default();
    let _open = OpenOnDrop(gate.clone());
    let threads = Arc::new(Mutex::new(Vec::new()));
    let (g, t) = (gate.clone(), threads.clone());
    a.queue
        .push(task(move || {
            g.wait();
            t.lock().unwrap().push(("a", std::thread::current().id()));
        }))
        .unwrap();
    let e = CpuEvent::record(&a, false).unwrap();
    e.wait_on(&b).unwrap();
    let t = threads.clone();
    b.queue
        .push(task(move || {
            t.lock().unwrap().push(("b", std::thread::current().id()));
        }))
        .unwrap();
    // B is set aside (its wait registered with A), not holding a worker.
    let start = Instant::now();
    while !b.queue.pending().blocked {
        assert!(start.elapsed() < Duration::from_secs(5), "B never blocked");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!b.queue.pending().owned, "a blocked queue holds no worker");
    gate.open();
    drain(&b);
    let t = threads.lock().unwrap();
    assert_eq!(t.len(), 2, "{t:?}");
    assert_eq!((t[0].0, t[1].0), ("a", "b"));
    assert_eq!(t[0].1, t[1].1, "B's task ran on another thread than A's");
}

/// Tasks that block until every one of them runs at once (more of them than cores):
/// the pool starts a worker for each stream that has work, so none waits for another.
#[test]
fn blocked_tasks_on_more_streams_than_cores_all_run_at_once() {
    let n = cores() + 3;
    let streams: Vec<CpuStream> = (0..n).map(|_| stream()).collect();
    let met = Arc::new((Mutex::new(0usize), Condvar::new()));
    let late = Arc::new(AtomicU64::new(0));
    for s in &streams {
        let (met, late) = (met.clone(), late.clone());
        s.queue
            .push(task(move || {
                let (count, cv) = &*met;
                let mut c = count.lock().unwrap();
                *c += 1;
                cv.notify_all();
                let deadline = Instant::now() + Duration::from_secs(10);
                while *c < n {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        late.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    c = cv.wait_timeout(c, left).unwrap().0;
                }
            }))
            .unwrap();
    }
    for s in &streams {
        drain(s);
    }
    assert_eq!(
        late.load(Ordering::SeqCst),
        0,
        "some tasks never ran together"
    );
}

#[test]
fn waits_that_are_already_satisfied_queue_nothing() {
    let (a, b) = (stream(), stream());
    a.queue.push(task(|| ())).unwrap();
    drain(&a);
    let passed = CpuEvent::record(&a, false).unwrap();
    passed.wait_on(&b).unwrap();
    assert_eq!(b.queue.tail(), 0, "a passed event needs no waiting task");

    // An event of the stream itself is already in order.
    let gate = Gate::default();
    let _open = OpenOnDrop(gate.clone());
    let g = gate.clone();
    b.queue.push(task(move || g.wait())).unwrap();
    let own = CpuEvent::record(&b, false).unwrap();
    own.wait_on(&b).unwrap();
    assert_eq!(
        b.queue.tail(),
        1,
        "waiting on the stream's own event queues nothing"
    );
    gate.open();
    drain(&b);
}

#[test]
fn timing_events_measure_the_work_between_them() {
    let backend = crate::CpuBackend::new().unwrap();
    let s = stream();
    let start = CpuEvent::record(&s, true).unwrap();
    s.queue
        .push(task(|| std::thread::sleep(Duration::from_millis(20))))
        .unwrap();
    let end = CpuEvent::record(&s, true).unwrap();
    end.wait();
    assert!(start.is_done());
    let ms = backend.event_elapsed_ms(&start, &end).unwrap();
    assert!(ms >= 15.0, "{ms} ms measured around a 20 ms task");
    let back = backend.event_elapsed_ms(&end, &start).unwrap();
    assert_eq!(back, -ms, "reversed events give the negative time");
}

#[test]
fn a_panicking_task_is_reported_once_and_the_worker_keeps_going() {
    let s = stream();
    s.queue
        .push(Task::new(|| -> Result<(), Error> {
            panic!("task exploded on purpose")
        }))
        .unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    s.queue
        .push(task(move || r.store(true, Ordering::SeqCst)))
        .unwrap();
    drain(&s);
    assert!(ran.load(Ordering::SeqCst), "the task after the panic ran");
    match s.queue.take_error() {
        Err(Error::KernelFailed { message, .. }) => {
            assert!(message.contains("task exploded on purpose"), "{message}")
        }
        other => panic!("expected the panic as KernelFailed, got {other:?}"),
    }
    assert!(s.queue.take_error().is_ok(), "an error is reported once");

    // Only the first unreported error is kept.
    for msg in ["first", "second"] {
        s.queue
            .push(Task::new(move || {
                Err(Error::Backend {
                    backend: "cpu",
                    call: "test",
                    message: msg.into(),
                })
            }))
            .unwrap();
    }
    drain(&s);
    match s.queue.take_error() {
        Err(Error::Backend { message, .. }) => assert_eq!(message, "first"),
        other => panic!("expected the first error, got {other:?}"),
    }
    assert!(s.queue.take_error().is_ok());

    // And the stream still works.
    let again = Arc::new(AtomicBool::new(false));
    let a = again.clone();
    s.queue
        .push(task(move || a.store(true, Ordering::SeqCst)))
        .unwrap();
    drain(&s);
    assert!(again.load(Ordering::SeqCst));
}

#[test]
fn shutdown_drains_the_queue_and_returns_the_unreported_error() {
    let mut s = stream();
    let count = Arc::new(AtomicU64::new(0));
    // A slow first task keeps everything after it queued when shutdown starts.
    s.queue
        .push(task(|| std::thread::sleep(Duration::from_millis(20))))
        .unwrap();
    for i in 0..60 {
        if i == 30 {
            s.queue
                .push(Task::new(|| {
                    Err(Error::Backend {
                        backend: "cpu",
                        call: "test",
                        message: "left unreported".into(),
                    })
                }))
                .unwrap();
        }
        let c = count.clone();
        s.queue
            .push(task(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
    }
    let r = s.shutdown();
    assert_eq!(count.load(Ordering::SeqCst), 60, "every queued task ran");
    assert!(s.queue.is_done(62));
    match r {
        Err(Error::Backend { message, .. }) => assert_eq!(message, "left unreported"),
        other => panic!("expected the unreported error, got {other:?}"),
    }

    let after = s.queue.push(task(|| ()));
    assert!(
        matches!(
            after,
            Err(Error::Backend {
                call: "enqueue",
                ..
            })
        ),
        "pushing after shutdown: {after:?}"
    );
    assert!(
        CpuEvent::record(&s, true).is_err(),
        "a timing event needs a task"
    );
    assert!(
        s.shutdown().is_ok(),
        "a second shutdown has nothing to report"
    );
}

#[test]
fn dropping_a_stream_runs_what_was_queued() {
    let count = Arc::new(AtomicU64::new(0));
    let s = stream();
    s.queue
        .push(task(|| std::thread::sleep(Duration::from_millis(10))))
        .unwrap();
    for _ in 0..20 {
        let c = count.clone();
        s.queue
            .push(task(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
    }
    drop(s);
    assert_eq!(count.load(Ordering::SeqCst), 20);
}

#[test]
fn a_wait_on_a_shut_down_stream_still_completes() {
    let mut a = stream();
    let b = stream();
    a.queue
        .push(task(|| std::thread::sleep(Duration::from_millis(10))))
        .unwrap();
    let e = CpuEvent::record(&a, false).unwrap();
    e.wait_on(&b).unwrap();
    assert!(a.shutdown().is_ok());
    drain(&b);
    assert!(e.is_done());
}
