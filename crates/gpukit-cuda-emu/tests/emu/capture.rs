//! Stream capture and graphs
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html#group__CUDA__STREAM_1g767167da0bbf07157dc20b6c258a2143>,
//! `group__CUDA__GRAPH`, CUDA C Programming Guide "Stream Capture"), as `src/capture.rs`
//! states them. Every test runs in a child process: a global-mode capture prohibits
//! potentially unsafe calls (`cuMemAlloc`, ...) from every thread of the process, which
//! would fail other tests running beside it.

use std::thread;

use gpukit_cuda_emu::api::stream as st;

use crate::common::*;

const GRAPH_KERNELS: &str = r#"
extern "C" __global__ void inc(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

extern "C" __global__ void fill(int *p, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = k * i;
}

extern "C" __global__ void add(const int *a, const int *b, int *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"#;

/// `CU_STREAM_CAPTURE_MODE_GLOBAL` and `_RELAXED`.
const GLOBAL: u32 = 0;
const RELAXED: u32 = 2;

const N: i32 = 64;

struct K {
    inc: u64,
    fill: u64,
    add: u64,
}

fn kernels() -> K {
    let m = module(GRAPH_KERNELS, "emu_graph_kernels");
    K {
        inc: function(m, "inc"),
        fill: function(m, "fill"),
        add: function(m, "add"),
    }
}

fn inc(k: &K, s: u64, p: u64) -> u32 {
    // SAFETY: inc(int *, int): N ints.
    unsafe {
        launch(
            k.inc,
            [1, 1, 1],
            [N as u32, 1, 1],
            0,
            s,
            &[arg(&p), arg(&N)],
        )
    }
}

fn fill(k: &K, s: u64, p: u64, factor: i32) -> u32 {
    // SAFETY: fill(int *, int, int): N ints.
    unsafe {
        launch(
            k.fill,
            [1, 1, 1],
            [N as u32, 1, 1],
            0,
            s,
            &[arg(&p), arg(&N), arg(&factor)],
        )
    }
}

fn add(k: &K, s: u64, a: u64, b: u64, c: u64) -> u32 {
    // SAFETY: add(const int *, const int *, int *, int): N ints each.
    unsafe {
        launch(
            k.add,
            [1, 1, 1],
            [N as u32, 1, 1],
            0,
            s,
            &[arg(&a), arg(&b), arg(&c), arg(&N)],
        )
    }
}

fn begin(s: u64, mode: u32) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuStreamBeginCapture_v2(s, mode) }
}

/// `cuStreamEndCapture`: its result and the graph (0 on failure).
fn end(s: u64) -> (u32, u64) {
    let mut g = u64::MAX;
    // SAFETY: a writable CUgraph.
    let r = unsafe { st::cuStreamEndCapture(s, &mut g) };
    (r, g)
}

fn capturing(s: u64) -> u32 {
    let mut status = u32::MAX;
    // SAFETY: a writable CUstreamCaptureStatus.
    ok(
        unsafe { st::cuStreamIsCapturing(s, &mut status) },
        "cuStreamIsCapturing",
    );
    status
}

fn instantiate(g: u64) -> u64 {
    let mut exec = 0u64;
    // SAFETY: a writable CUgraphExec.
    ok(
        unsafe { st::cuGraphInstantiateWithFlags(&mut exec, g, 0) },
        "cuGraphInstantiateWithFlags",
    );
    exec
}

fn graph_launch(exec: u64, s: u64) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuGraphLaunch(exec, s) }
}

fn zeros() -> u64 {
    upload(&[0i32; N as usize])
}

/// Work captured into a graph does not run while captured, and runs once per
/// `cuGraphLaunch`: two captured increments, the graph launched twice, give 4.
#[test]
fn captured_work_runs_once_per_graph_launch() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "captured_work_runs_once_per_graph_launch",
        &[],
        || {
            use_device(0);
            let k = kernels();
            let s = stream(NON_BLOCKING);
            let buf = zeros();
            ok(begin(s, GLOBAL), "cuStreamBeginCapture_v2");
            assert_eq!(capturing(s), 1, "CU_STREAM_CAPTURE_STATUS_ACTIVE");
            ok(inc(&k, s, buf), "captured inc #1");
            ok(inc(&k, s, buf), "captured inc #2");
            let (r, g) = end(s);
            ok(r, "cuStreamEndCapture");
            assert_ne!(g, 0, "a graph");
            assert_eq!(capturing(s), 0, "the capture ended");
            ok(sync(s), "cuStreamSynchronize");
            assert_eq!(
                dtoh::<i32>(buf, N as usize),
                vec![0; N as usize],
                "nothing ran yet"
            );
            let exec = instantiate(g);
            ok(graph_launch(exec, s), "cuGraphLaunch #1");
            ok(graph_launch(exec, s), "cuGraphLaunch #2");
            ok(sync(s), "cuStreamSynchronize");
            assert_eq!(dtoh::<i32>(buf, N as usize), vec![4; N as usize]);
        },
    );
}

/// `cuStreamSynchronize` of a capturing stream is `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`
/// and invalidates the capture, whose end is then `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
/// with no graph; the stream works normally afterwards, and the captured work never ran.
#[test]
fn sync_of_a_capturing_stream_is_unsupported_and_invalidates_it() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "sync_of_a_capturing_stream_is_unsupported_and_invalidates_it",
        &[],
        || {
            use_device(0);
            let k = kernels();
            let s = stream(NON_BLOCKING);
            let buf = zeros();
            ok(begin(s, GLOBAL), "cuStreamBeginCapture_v2");
            ok(inc(&k, s, buf), "captured inc");
            expect(
                sync(s),
                STREAM_CAPTURE_UNSUPPORTED,
                "cuStreamSynchronize while capturing",
            );
            assert_eq!(capturing(s), 2, "CU_STREAM_CAPTURE_STATUS_INVALIDATED");
            let (r, g) = end(s);
            expect(r, STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture");
            assert_eq!(g, 0, "no graph");
            ok(inc(&k, s, buf), "inc after the capture");
            ok(sync(s), "cuStreamSynchronize");
            assert_eq!(
                dtoh::<i32>(buf, N as usize),
                vec![1; N as usize],
                "only the uncaptured inc ran"
            );
        },
    );
}

/// A capture forked to a second stream through an event and joined back through another
/// records both branches and the join: the replay computes c = a + b = i + 2i after both
/// branches ran (without the join edge the add could run before a branch, on the 0xff
/// fill).
#[test]
fn fork_join_capture_across_two_streams_replays_correctly() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "fork_join_capture_across_two_streams_replays_correctly",
        &[],
        || {
            use_device(0);
            let k = kernels();
            let (s1, s2) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
            let (a, b, c) = (
                alloc(N as usize * 4),
                alloc(N as usize * 4),
                alloc(N as usize * 4),
            );
            let (fork, join) = (event(0), event(0));
            ok(begin(s1, GLOBAL), "cuStreamBeginCapture_v2");
            ok(record(fork, s1), "cuEventRecord(fork)");
            ok(wait_event(s2, fork), "cuStreamWaitEvent(s2, fork)");
            assert_eq!(capturing(s2), 1, "s2 joined the capture");
            ok(fill(&k, s1, a, 1), "fill a on s1");
            ok(fill(&k, s2, b, 2), "fill b on s2");
            ok(record(join, s2), "cuEventRecord(join)");
            ok(wait_event(s1, join), "cuStreamWaitEvent(s1, join)");
            ok(add(&k, s1, a, b, c), "add on s1");
            let (r, g) = end(s1);
            ok(r, "cuStreamEndCapture");
            assert_eq!(capturing(s2), 0, "s2 left the capture");
            let exec = instantiate(g);
            for round in 0..2 {
                ok(memset32(c, 0, N as usize), "cuMemsetD32_v2");
                ok(graph_launch(exec, s1), "cuGraphLaunch");
                ok(sync(s1), "cuStreamSynchronize");
                let want: Vec<i32> = (0..N).map(|i| 3 * i).collect();
                assert_eq!(dtoh::<i32>(c, N as usize), want, "replay {round}");
            }
        },
    );
}

/// A capture forked to a second stream that is never joined back cannot end:
/// `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`.
#[test]
fn fork_not_joined_back_is_unjoined() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "fork_not_joined_back_is_unjoined",
        &[],
        || {
            use_device(0);
            let k = kernels();
            let (s1, s2) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
            let buf = zeros();
            let other = zeros();
            let fork = event(0);
            ok(begin(s1, GLOBAL), "cuStreamBeginCapture_v2");
            ok(inc(&k, s1, buf), "inc on s1");
            ok(record(fork, s1), "cuEventRecord(fork)");
            ok(wait_event(s2, fork), "cuStreamWaitEvent(s2, fork)");
            ok(inc(&k, s2, other), "inc on s2, never joined");
            let (r, g) = end(s1);
            expect(r, STREAM_CAPTURE_UNJOINED, "cuStreamEndCapture");
            assert_eq!(g, 0, "no graph");
        },
    );
}

/// A global-mode capture must be ended by the thread that began it: from another thread
/// `cuStreamEndCapture` is `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` ("If the mode argument
/// to cuStreamBeginCapture was not CU_STREAM_CAPTURE_MODE_RELAXED, this call must be from
/// the same thread as cuStreamBeginCapture"); the right thread can still end it.
#[test]
fn global_capture_ended_from_another_thread_is_wrong_thread() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "global_capture_ended_from_another_thread_is_wrong_thread",
        &[],
        || {
            let ctx = use_device(0);
            let k = kernels();
            let s = stream(NON_BLOCKING);
            let buf = zeros();
            ok(begin(s, GLOBAL), "cuStreamBeginCapture_v2");
            ok(inc(&k, s, buf), "captured inc");
            let (r, g) = thread::spawn(move || {
                // SAFETY: no pointers.
                ok(
                    unsafe { gpukit_cuda_emu::api::driver::cuCtxSetCurrent(ctx) },
                    "cuCtxSetCurrent",
                );
                end(s)
            })
            .join()
            .expect("the other thread");
            expect(
                r,
                STREAM_CAPTURE_WRONG_THREAD,
                "cuStreamEndCapture from another thread",
            );
            assert_eq!(g, 0, "no graph");
            let (r, g) = end(s);
            ok(r, "cuStreamEndCapture from the capturing thread");
            let exec = instantiate(g);
            ok(graph_launch(exec, s), "cuGraphLaunch");
            ok(sync(s), "cuStreamSynchronize");
            assert_eq!(dtoh::<i32>(buf, N as usize), vec![1; N as usize]);
        },
    );
}

/// `cuMemAlloc` on the capturing thread during a global-mode capture is a potentially
/// unsafe call: `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and the capture is invalidated;
/// in relaxed mode it is allowed and the capture ends normally.
#[test]
fn alloc_during_global_capture_is_unsupported_but_relaxed_allows_it() {
    if crate::skip_without_cxx() {
        return;
    }
    crate::in_child(
        module_path!(),
        "alloc_during_global_capture_is_unsupported_but_relaxed_allows_it",
        &[],
        || {
            use_device(0);
            let k = kernels();
            let s = stream(NON_BLOCKING);
            let buf = zeros();
            ok(begin(s, GLOBAL), "cuStreamBeginCapture_v2(global)");
            ok(inc(&k, s, buf), "captured inc");
            assert_eq!(
                try_alloc(16).err(),
                Some(STREAM_CAPTURE_UNSUPPORTED),
                "cuMemAlloc_v2 during a global capture"
            );
            let (r, g) = end(s);
            expect(
                r,
                STREAM_CAPTURE_INVALIDATED,
                "cuStreamEndCapture after the alloc",
            );
            assert_eq!(g, 0);

            ok(begin(s, RELAXED), "cuStreamBeginCapture_v2(relaxed)");
            ok(inc(&k, s, buf), "captured inc");
            let p = try_alloc(16).expect("cuMemAlloc_v2 during a relaxed capture");
            let (r, g) = end(s);
            ok(r, "cuStreamEndCapture of the relaxed capture");
            ok(free(p), "cuMemFree_v2");
            let exec = instantiate(g);
            ok(graph_launch(exec, s), "cuGraphLaunch");
            ok(sync(s), "cuStreamSynchronize");
            assert_eq!(
                dtoh::<i32>(buf, N as usize),
                vec![1; N as usize],
                "only the relaxed capture's inc ran"
            );
        },
    );
}

/// The legacy default stream cannot capture: `cuStreamBeginCapture` of stream 0 (and of
/// `CU_STREAM_LEGACY`) is `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
#[test]
fn capture_on_the_legacy_stream_is_unsupported() {
    crate::in_child(
        module_path!(),
        "capture_on_the_legacy_stream_is_unsupported",
        &[],
        || {
            use_device(0);
            expect(
                begin(0, GLOBAL),
                STREAM_CAPTURE_UNSUPPORTED,
                "capture on stream 0",
            );
            expect(
                begin(1, GLOBAL),
                STREAM_CAPTURE_UNSUPPORTED,
                "capture on CU_STREAM_LEGACY",
            );
            assert_eq!(capturing(0), 0, "stream 0 is not capturing");
            // Nothing was left capturing: an allocation is not prohibited.
            let p = alloc(16);
            ok(free(p), "cuMemFree_v2");
        },
    );
}

/// A graph whose two forked branches write the same bytes with no edge between them races:
/// its launch fails with `CUDA_ERROR_LAUNCH_FAILED` and standard error says so.
#[test]
fn graph_branches_writing_the_same_bytes_race() {
    if crate::skip_without_cxx() {
        return;
    }
    let out = crate::in_child(
        module_path!(),
        "graph_branches_writing_the_same_bytes_race",
        &[],
        || {
            use_device(0);
            let k = kernels();
            let (s1, s2) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
            let buf = zeros();
            let (fork, join) = (event(0), event(0));
            ok(begin(s1, GLOBAL), "cuStreamBeginCapture_v2");
            ok(record(fork, s1), "cuEventRecord(fork)");
            ok(wait_event(s2, fork), "cuStreamWaitEvent(s2, fork)");
            ok(fill(&k, s1, buf, 1), "fill on s1");
            ok(fill(&k, s2, buf, 2), "fill of the same bytes on s2");
            ok(record(join, s2), "cuEventRecord(join)");
            ok(wait_event(s1, join), "cuStreamWaitEvent(s1, join)");
            let (r, g) = end(s1);
            ok(r, "cuStreamEndCapture (the graph is well formed)");
            let exec = instantiate(g);
            ok(graph_launch(exec, s1), "cuGraphLaunch");
            expect(
                sync(s1),
                LAUNCH_FAILED,
                "cuStreamSynchronize of the racy graph",
            );
        },
    );
    if let Some(out) = out {
        assert!(
            out.stderr.contains("race inside a graph"),
            "the diagnostic says race"
        );
    }
}

/// `cuGraphInstantiateWithFlags` takes AUTO_FREE_ON_LAUNCH (1), DEVICE_LAUNCH (4) and
/// USE_NODE_PRIORITY (8), but not DEVICE_LAUNCH with AUTO_FREE_ON_LAUNCH ("cannot be used
/// in conjunction", the graph API's documentation) nor UPLOAD (2, a flag of
/// `cuGraphInstantiateWithParams`): `CUDA_ERROR_INVALID_VALUE`.
#[test]
fn graph_instantiate_flags_are_checked() {
    if crate::skip_without_cxx() {
        return;
    }
    use_device(0);
    let k = kernels();
    let s = stream(NON_BLOCKING);
    let buf = zeros();
    ok(begin(s, GLOBAL), "cuStreamBeginCapture_v2");
    ok(inc(&k, s, buf), "captured inc");
    let (r, g) = end(s);
    ok(r, "cuStreamEndCapture");
    let with = |flags: u64| {
        let mut exec = 0u64;
        // SAFETY: a writable CUgraphExec.
        unsafe { st::cuGraphInstantiateWithFlags(&mut exec, g, flags) }
    };
    expect(
        with(1 | 4),
        INVALID_VALUE,
        "AUTO_FREE_ON_LAUNCH | DEVICE_LAUNCH",
    );
    expect(with(2), INVALID_VALUE, "UPLOAD");
    expect(with(16), INVALID_VALUE, "an unknown flag");
    for flags in [0, 1, 8, 1 | 8] {
        ok(
            with(flags),
            &format!("cuGraphInstantiateWithFlags({flags})"),
        );
    }
    ok(free(buf), "cuMemFree_v2");
}
