//! Graph capture and replay, on every backend: replay against eager execution bit for bit
//! over random op programs, each rule of the capture guard (host reads of arrays an open
//! capture wrote included), the lifetime of captured arrays and of what captured
//! reductions use, the ordering of launches against eager work on other streams, and a
//! pipeline compute stage that launches a captured step. The Vulkan
//! backend has no graphs: there each test checks that capture is `Error::Unsupported`.

use crate::{backend_tests, common};

use common::{cases, delay_spec, harness_error};
use gpukit::{Context, Error, GpuArray, HostUse, LaunchConfig, Stream};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Whether the backend has graphs; on one without, checks that capture says so.
fn graphs(ctx: &Context) -> gpukit::Result<bool> {
    if ctx.backend_name() != "vulkan" {
        return Ok(true);
    }
    match ctx.capture(|_| Ok(())) {
        Err(Error::Unsupported { .. }) => Ok(false),
        other => panic!("vulkan capture: expected Unsupported, got {other:?}"),
    }
}

/// Asserts that `r` is a capture violation naming `call`.
#[track_caller]
fn violation<T: std::fmt::Debug>(r: gpukit::Result<T>, call: &str) {
    match r {
        Err(Error::CaptureViolation { call: c, .. }) if c == call => {}
        other => panic!("expected a capture violation of {call}, got {other:?}"),
    }
}

/// One step of a program over three arrays.
#[derive(Debug, Clone, Copy)]
enum Step {
    Relu(usize, usize),
    Scale(i8, usize),
    AddInplace(usize, usize),
    AddScalar(i8, usize),
    Mul(usize, usize, usize),
    Copy(usize, usize),
    Fill(i8, usize),
}

fn step() -> impl Strategy<Value = Step> {
    let i = 0usize..3;
    let k = -8i8..=8;
    prop_oneof![
        (i.clone(), i.clone()).prop_map(|(a, b)| Step::Relu(a, b)),
        (k.clone(), i.clone()).prop_map(|(k, a)| Step::Scale(k, a)),
        (i.clone(), i.clone()).prop_map(|(a, b)| Step::AddInplace(a, b)),
        (k.clone(), i.clone()).prop_map(|(k, a)| Step::AddScalar(k, a)),
        (i.clone(), i.clone(), i.clone()).prop_map(|(a, b, c)| Step::Mul(a, b, c)),
        (i.clone(), i.clone()).prop_map(|(a, b)| Step::Copy(a, b)),
        (k, i).prop_map(|(k, a)| Step::Fill(k, a)),
    ]
}

/// The two arrays at `src` and `dst` (distinct), the second mutably.
fn pair(a: &mut [GpuArray<f32>], src: usize, dst: usize) -> (&GpuArray<f32>, &mut GpuArray<f32>) {
    if src < dst {
        let (lo, hi) = a.split_at_mut(dst);
        (&lo[src], &mut hi[0])
    } else {
        let (lo, hi) = a.split_at_mut(src);
        (&hi[0], &mut lo[dst])
    }
}

/// Queues the program on `s`. Steps whose operands coincide run in place where the op has
/// an in-place form, and are skipped otherwise.
fn queue(s: &Stream, a: &mut [GpuArray<f32>], steps: &[Step]) -> gpukit::Result<()> {
    for &st in steps {
        let quarter = |k: i8| f32::from(k) * 0.25;
        match st {
            Step::Relu(x, y) if x == y => s.relu_inplace(&mut a[x])?,
            Step::Relu(x, y) => {
                let (x, y) = pair(a, x, y);
                s.relu(x, y)?
            }
            Step::Scale(k, x) => s.scale(quarter(k), &mut a[x])?,
            Step::AddInplace(x, y) if x == y => s.scale(2.0f32, &mut a[x])?,
            Step::AddInplace(x, y) => {
                let (y, x) = pair(a, y, x);
                s.add_inplace(x, y)?
            }
            Step::AddScalar(k, x) => s.add_scalar_inplace(&mut a[x], quarter(k))?,
            Step::Mul(x, y, z) if x != z && y != z => {
                let (lo, rest) = a.split_at_mut(z);
                let (out, hi) = rest.split_first_mut().expect("z is in range");
                let get = |i: usize| if i < z { &lo[i] } else { &hi[i - z - 1] };
                s.mul(get(x), get(y), out)?
            }
            Step::Mul(..) => {}
            Step::Copy(x, y) if x == y => {}
            Step::Copy(x, y) => {
                let (x, y) = pair(a, x, y);
                s.copy(x, y)?
            }
            Step::Fill(k, x) => s.fill(&mut a[x], quarter(k))?,
        }
    }
    Ok(())
}

fn arrays(ctx: &Context, init: &[Vec<f32>]) -> gpukit::Result<Vec<GpuArray<f32>>> {
    init.iter().map(|v| ctx.alloc_upload(v)).collect()
}

fn contents(a: &[GpuArray<f32>]) -> gpukit::Result<Vec<Vec<u32>>> {
    a.iter()
        .map(|x| Ok(x.download()?.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

/// Runs the program `runs` times eagerly and as `runs` launches of one graph, from the same
/// initial values, and compares the results bit for bit.
fn replay_matches_eager(
    ctx: &Context,
    init: &[Vec<f32>],
    steps: &[Step],
    runs: usize,
) -> Result<(), TestCaseError> {
    let err = |e: Error| TestCaseError::fail(e.to_string());
    let s = ctx.create_stream().map_err(err)?;
    let mut eager = arrays(ctx, init).map_err(err)?;
    for _ in 0..runs {
        queue(&s, &mut eager, steps).map_err(err)?;
    }
    s.sync().map_err(err)?;
    let want = contents(&eager).map_err(err)?;

    let mut replayed = arrays(ctx, init).map_err(err)?;
    let graph = s.capture(|s| queue(s, &mut replayed, steps)).map_err(err)?;
    for _ in 0..runs {
        graph.launch(&s).map_err(err)?;
    }
    s.sync().map_err(err)?;
    drop(graph);
    let got = contents(&replayed).map_err(err)?;
    prop_assert_eq!(got, want, "{:?} x{}", steps, runs);
    Ok(())
}

backend_tests! {
    fn replay_equals_eager_execution_bit_for_bit(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let config = Config {
            cases: cases(24)?,
            failure_persistence: None,
            ..Config::default()
        };
        let strategy = (1usize..300).prop_flat_map(|n| {
            (
                prop::collection::vec(prop::collection::vec(-4.0f32..4.0, n), 3),
                prop::collection::vec(step(), 0..12),
                1usize..4,
            )
        });
        TestRunner::new(config)
            .run(&strategy, |(init, steps, runs)| {
                replay_matches_eager(ctx, &init, &steps, runs)
            })
            .map_err(|e| harness_error("proptest", e.to_string()))
    }

    fn a_graph_keeps_its_arrays_alive_and_counts_its_work(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let x = ctx.alloc_upload(&[1.0f32, -2.0, 3.0])?;
        let mut y = ctx.alloc_zeros::<f32>(3)?;
        let mut out = ctx.alloc_zeros::<f32>(3)?;
        let graph = s.capture(|s| {
            s.relu(&x, &mut y)?;
            s.add(&x, &y, &mut out)
        })?;
        assert_eq!(graph.len(), 2);
        // The graph still owns x's and y's memory: nothing may reuse it.
        drop((x, y));
        let other = ctx.alloc_upload(&[9.0f32; 3])?;
        graph.launch(&s)?;
        s.sync()?;
        assert_eq!(out.download()?, [2.0, -2.0, 6.0]);
        assert_eq!(other.download()?, [9.0; 3]);
        // Dropped with the graph, the memory goes back to the pool.
        let in_use = ctx.memory_stats().bytes_in_use;
        drop(graph);
        assert!(ctx.memory_stats().bytes_in_use < in_use);
        Ok(())
    }

    fn launches_are_ordered_against_eager_work_on_other_streams(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let n = 1 << 14;
        let (s1, s2) = (ctx.create_stream()?, ctx.create_stream()?);
        let delay = ctx.kernel(delay_spec())?;
        let mut x = ctx.alloc_zeros::<f32>(n)?;
        let graph = s1.capture(|s| s.fill(&mut x, 5.0))?;
        // The launch waits behind a delay; a reader on s2 must wait for the launch.
        s1.launch(&delay, LaunchConfig::linear(1, 1), (30_000u32,))?;
        graph.launch(&s1)?;
        let mut y = ctx.alloc_zeros::<f32>(n)?;
        s2.copy(&x, &mut y)?;
        s2.sync()?;
        assert!(y.download()?.iter().all(|&v| v == 5.0));
        // And an eager write on s2 before a launch on s1 is waited for by the launch.
        let mut z = ctx.alloc_zeros::<f32>(n)?;
        let add = s1.capture(|s| s.add_scalar_inplace(&mut z, 1.0f32))?;
        s2.launch(&delay, LaunchConfig::linear(1, 1), (30_000u32,))?;
        s2.fill(&mut z, 10.0)?;
        add.launch(&s1)?;
        s1.sync()?;
        assert!(z.download()?.iter().all(|&v| v == 11.0));
        Ok(())
    }

    fn the_capture_guard_refuses_what_would_break_a_capture(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let other = ctx.create_stream()?;
        let mut x = ctx.alloc_upload(&[1.0f32, 2.0])?;
        let mut host = ctx.alloc_host::<f32>(2, HostUse::Both)?;
        host.copy_from_slice(&[7.0, 8.0]);
        let mut host = Some(host);
        let mut w = ctx.alloc_upload(&[1.0f32])?;
        let mut buf = vec![0.0f32; 2];
        let finished = other.record_event()?;
        other.sync()?;
        let graph = s.capture(|s| {
            violation(s.sync(), "Stream::sync");
            violation(s.query(), "Stream::query");
            violation(s.record_event(), "Stream::record_event");
            violation(ctx.sync(), "Context::sync");
            violation(ctx.alloc::<f32>(4), "Context::alloc");
            violation(ctx.alloc_zeros::<f32>(4), "Context::alloc");
            violation(ctx.trim(), "Context::trim");
            violation(s.download_blocking(&x, &mut buf), "download");
            violation(s.upload_blocking(&[3.0, 4.0], &mut x), "upload");
            violation(s.sum(&x), "sum");
            // The default stream is not capturing: it downloads as usual.
            assert_eq!(x.download()?, [1.0, 2.0]);
            match s.upload(host.take().expect("host buffer"), &mut x) {
                Err(r) => {
                    assert!(matches!(r.error, Error::CaptureViolation { call: "Stream::upload", .. }), "{:?}", r.error);
                    host = Some(r.value);
                }
                Ok(p) => panic!("an upload in a capture was queued: {p:?}"),
            }
            // SAFETY: never called: the guard refuses raw access in a capture.
            violation(unsafe { s.with_raw(&x, |_, _| ()) }, "Stream::with_raw");
            // A finished event orders nothing and is allowed.
            s.wait(&finished)?;
            // Work on other streams runs as usual.
            other.scale(3.0f32, &mut w)?;
            other.sync()?;
            s.scale(2.0f32, &mut x)
        })?;
        assert_eq!(graph.len(), 1, "only the scale was captured");
        // The stream works normally again.
        assert_eq!(x.download()?, [1.0, 2.0]);
        graph.launch(&s)?;
        s.sync()?;
        assert_eq!(x.download()?, [2.0, 4.0]);
        let host = host.expect("the rejected upload gave the buffer back");
        assert_eq!(&host[..], [7.0, 8.0]);
        assert_eq!(w.download()?, [3.0]);
        Ok(())
    }

    fn work_that_must_wait_for_another_stream_is_refused_in_a_capture(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let (s, other) = (ctx.create_stream()?, ctx.create_stream()?);
        let delay = ctx.kernel(delay_spec())?;
        let mut x = ctx.alloc_zeros::<f32>(4)?;
        let mut y = ctx.alloc_zeros::<f32>(4)?;
        other.launch(&delay, LaunchConfig::linear(1, 1), (200_000u32,))?;
        other.fill(&mut x, 1.0)?;
        let pending = other.record_event()?;
        let r = s.capture(|s| {
            violation(s.copy(&x, &mut y), "copy");
            violation(s.wait(&pending), "Stream::wait");
            // A nested capture and a launch inside a capture are refused too.
            violation(s.capture(|_| Ok(())), "Stream::capture");
            Err(Error::CaptureViolation { call: "test", reason: "ends the capture" })
        });
        violation(r, "test");
        other.sync()?;
        // After the capture, the same copy is ordered as usual.
        s.copy(&x, &mut y)?;
        assert_eq!(y.download()?, [1.0; 4]);
        Ok(())
    }

    fn a_panic_in_a_capture_leaves_the_stream_usable(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(2)?;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = s.capture(|s| {
                s.fill(&mut x, 1.0)?;
                panic!("in the capture");
            });
        }));
        assert!(caught.is_err());
        assert!(!s.is_capturing());
        s.fill(&mut x, 3.0)?;
        s.sync()?;
        assert_eq!(x.download()?, [3.0, 3.0]);
        Ok(())
    }
}

backend_tests! {
    // Regression: captured work records no uses of the arrays it writes (it has not run), so
    // a download, peek or async download of such an array on another stream, or on the
    // default stream, was accepted during the capture and silently returned the array as it
    // was before the capture. Host reads of an array an open capture wrote are refused now.
    fn host_reads_of_an_array_an_open_capture_wrote_are_refused(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let (s, other, third) = (ctx.create_stream()?, ctx.create_stream()?, ctx.create_stream()?);
        let before = [1.0f32, 2.0, 3.0, 4.0];
        let mut y = ctx.alloc_upload(&before)?;
        let mut x = ctx.alloc_upload(&[10.0f32, 20.0, 30.0, 40.0])?;
        let mut seen = ctx.alloc_zeros::<f32>(4)?;
        let mut host = ctx.alloc_host::<f32>(4, HostUse::Download)?;
        host.copy_from_slice(&[-1.0; 4]);
        let mut host = Some(host);
        let graph = s.capture(|s| {
            // Until the capture writes y, the host reads it as usual.
            assert_eq!(y.download()?, before);
            assert_eq!(other.peek(&y, 2)?, [1.0, 2.0]);
            s.add_inplace(&mut y, &x)?;
            // Now every host read of y, on any stream, is refused, naming the call.
            let mut buf = [0.0f32; 4];
            violation(y.download(), "download");
            violation(y.download_into(&mut buf), "download");
            violation(y.slice(2..)?.download(), "download");
            violation(ctx.peek(&y, 2), "peek");
            violation(other.peek(&y, 2), "peek");
            violation(ctx.download_blocking(&y, &mut buf), "download");
            violation(third.download_blocking(&y.slice(1..3)?, &mut buf[..2]), "download");
            assert_eq!(buf, [0.0; 4], "a refused download copied nothing");
            match third.download(&y, host.take().expect("host buffer")) {
                Err(r) => {
                    violation::<()>(Err(r.error), "Stream::download");
                    host = Some(r.value);
                }
                Ok(p) => panic!("an async download of a captured array was queued: {p:?}"),
            }
            match ctx.download(&y, vec![-2.0f32; 4]) {
                Err(r) => {
                    violation::<()>(Err(r.error), "Stream::download");
                    assert_eq!(r.value, [-2.0; 4], "the vector comes back untouched");
                }
                Ok(p) => panic!("an async download of a captured array was queued: {p:?}"),
            }
            // A reduction to the host is refused too, naming its call (its result would
            // need an allocation and a blocking read).
            violation(other.sum(&y), "sum");
            // Device work on another stream reads y as it is: the graph has not run.
            other.copy(&y, &mut seen)?;
            other.sync()?;
            // Host writes into arrays the capture reads or writes are accepted: the graph
            // runs later, at each launch, on what they wrote.
            x.upload(&[100.0, 200.0, 300.0, 400.0])?;
            y.upload(&[5.0, 6.0, 7.0, 8.0])?;
            // Arrays the capture has not written are read as usual.
            assert_eq!(x.download()?, [100.0, 200.0, 300.0, 400.0]);
            Ok(())
        })?;
        // Nothing was lost: the capture holds the one add, and y holds the host's write.
        assert_eq!(graph.len(), 1);
        let host = host.expect("the rejected download gave the buffer back");
        assert_eq!(&host[..], [-1.0; 4]);
        assert_eq!(seen.download()?, before, "the other stream read y before any launch");
        // Once the capture has ended, host reads are allowed again: before the launch they
        // return what the host wrote, after it the graph's result, on any stream.
        assert_eq!(y.download()?, [5.0, 6.0, 7.0, 8.0]);
        assert_eq!(other.peek(&y, 4)?, [5.0, 6.0, 7.0, 8.0]);
        graph.launch(&s)?;
        let want = [105.0f32, 206.0, 307.0, 408.0];
        assert_eq!(ctx.peek(&y, 4)?, want);
        let mut buf = [0.0f32; 4];
        y.download_into(&mut buf)?;
        assert_eq!(buf, want);
        let pending = third.download(&y, host).map_err(|r| r.error)?;
        assert_eq!(&pending.wait().map_err(|r| r.error)?[..], want);
        assert_eq!(other.sum(&y)?, 1026.0);
        Ok(())
    }

    fn a_failed_or_panicking_capture_allows_host_reads_again(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let mut y = ctx.alloc_upload(&[1.0f32, 2.0])?;
        let mut z = ctx.alloc_zeros::<f32>(2)?;
        let r = s.capture(|s| {
            // Read first, then written: refused from the write on.
            s.copy(&y, &mut z)?;
            assert_eq!(y.download()?, [1.0, 2.0]);
            s.scale(3.0f32, &mut y)?;
            violation(y.download(), "download");
            Err(Error::CaptureViolation { call: "test", reason: "ends the capture" })
        });
        violation(r, "test");
        assert_eq!(y.download()?, [1.0, 2.0], "the discarded capture ran nothing");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = s.capture(|s| {
                s.fill(&mut y, 9.0)?;
                panic!("in the capture");
            });
        }));
        assert!(caught.is_err());
        assert_eq!(y.download()?, [1.0, 2.0]);
        // A capture that only reads y leaves host reads of it alone throughout.
        let graph = s.capture(|s| {
            s.copy(&y, &mut z)?;
            assert_eq!(y.download()?, [1.0, 2.0]);
            Ok(())
        })?;
        graph.launch(&s)?;
        assert_eq!(z.download()?, [1.0, 2.0]);
        Ok(())
    }

    fn unified_host_access_to_an_array_an_open_capture_wrote_is_refused(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let s = ctx.create_stream()?;
        let mut u = ctx.alloc_unified::<f32>(3)?;
        u.host_mut()?.copy_from_slice(&[1.0, -2.0, 3.0]);
        let mut read_only = ctx.alloc_unified::<f32>(3)?;
        read_only.host_mut()?.copy_from_slice(&[4.0, 5.0, 6.0]);
        let graph = s.capture(|s| {
            s.add_inplace(&mut u, &read_only)?;
            violation(u.host(), "UnifiedArray::host");
            violation(u.host_mut(), "UnifiedArray::host_mut");
            violation(u.download(), "download");
            // An array the capture only reads is the host's to read and write meanwhile.
            assert_eq!(read_only.host()?, [4.0, 5.0, 6.0]);
            read_only.host_mut()?.copy_from_slice(&[10.0, 20.0, 30.0]);
            Ok(())
        })?;
        assert_eq!(graph.len(), 1);
        assert_eq!(u.host()?, [1.0, -2.0, 3.0], "nothing ran before the launch");
        graph.launch(&s)?;
        assert_eq!(u.host()?, [11.0, 18.0, 33.0]);
        u.host_mut()?[0] = 0.0;
        assert_eq!(u.host()?, [0.0, 18.0, 33.0]);
        Ok(())
    }
}

/// Elements of the reduction tests' inputs: enough for several blocks of partials on a GPU.
const REDUCED: usize = 1 << 20;

/// `n` values in [-2, 2] that are not all equal (each repeats about `n / 4001` times, so
/// argmin and argmax pick the first of several), different for each `seed`.
fn wavy(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (i ^ (seed << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            (h % 4001) as f32 / 1000.0 - 2.0
        })
        .collect()
}

/// The one-element outputs of every whole-array reduction gpukit writes to device memory:
/// sum, mean, min, max and dot product in `vals`, argmin and argmax in `idx`.
struct Reductions {
    vals: GpuArray<f32>,
    idx: GpuArray<u32>,
}

impl Reductions {
    fn new(ctx: &Context) -> gpukit::Result<Self> {
        Ok(Reductions {
            vals: ctx.alloc_upload(&[f32::NAN; 5])?,
            idx: ctx.alloc_upload(&[u32::MAX; 2])?,
        })
    }

    /// Queues the reductions of `x` (and `x . y`) on `s`.
    fn queue(&mut self, s: &Stream, x: &GpuArray<f32>, y: &GpuArray<f32>) -> gpukit::Result<()> {
        s.sum_into(x, &mut self.vals.slice_mut(0..1)?)?;
        s.mean_into(x, &mut self.vals.slice_mut(1..2)?)?;
        s.min_into(x, &mut self.vals.slice_mut(2..3)?)?;
        s.max_into(x, &mut self.vals.slice_mut(3..4)?)?;
        s.dot_into(x, y, &mut self.vals.slice_mut(4..5)?)?;
        s.argmin_into(x, &mut self.idx.slice_mut(0..1)?)?;
        s.argmax_into(x, &mut self.idx.slice_mut(1..2)?)
    }

    /// Overwrites the outputs on `s` with values no reduction gives.
    fn clear(&mut self, s: &Stream) -> gpukit::Result<()> {
        s.fill(&mut self.vals, f32::NAN)?;
        s.fill(&mut self.idx, u32::MAX)
    }

    /// The outputs: the floats' bits, then the indices.
    fn read(&self) -> gpukit::Result<Vec<u32>> {
        let mut out: Vec<u32> = self.vals.download()?.iter().map(|v| v.to_bits()).collect();
        out.extend(self.idx.download()?);
        Ok(out)
    }
}

/// The eager reductions of `x` and `y` (on the default stream): the reference the graphs'
/// results must equal bit for bit (same backend, same kernels). Its exact parts (min, max,
/// argmin, argmax) are checked against the host, so that the reference is not itself broken.
fn eager_reductions(ctx: &Context, xv: &[f32], yv: &[f32]) -> gpukit::Result<Vec<u32>> {
    let (x, y) = (ctx.alloc_upload(xv)?, ctx.alloc_upload(yv)?);
    let mut r = Reductions::new(ctx)?;
    r.queue(ctx, &x, &y)?;
    let got = r.read()?;
    let min = xv.iter().copied().fold(f32::INFINITY, f32::min);
    let max = xv.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let first = |v: f32| xv.iter().position(|&e| e == v).map(|i| i as u32);
    assert_eq!(f32::from_bits(got[2]), min);
    assert_eq!(f32::from_bits(got[3]), max);
    assert_eq!(Some(got[5]), first(min));
    assert_eq!(Some(got[6]), first(max));
    let sum: f64 = xv.iter().map(|&v| f64::from(v)).sum();
    assert!(
        common::close(f64::from(f32::from_bits(got[0])), sum, 1e-5),
        "sum {sum}"
    );
    Ok(got)
}

backend_tests! {
    // A graph must keep alive every buffer its work uses, its reductions' scratch memory
    // included (on CUDA a captured whole-array reduction once used the capturing stream's
    // scratch buffer for its partials, which went with the stream, and which the stream's
    // own reductions overwrite meanwhile: see the next test).
    fn captured_reductions_replay_after_their_capture_stream_is_dropped(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let (xv, yv) = (wavy(REDUCED, 1), wavy(REDUCED, 2));
        let want = eager_reductions(ctx, &xv, &yv)?;
        let (x, y) = (ctx.alloc_upload(&xv)?, ctx.alloc_upload(&yv)?);
        let mut got = Reductions::new(ctx)?;
        let s1 = ctx.create_stream()?;
        let graph = s1.capture(|s| got.queue(s, &x, &y))?;
        // Each of the seven reductions of 2^20 elements is two launches on a GPU: its parts
        // into scratch memory (which the graph keeps), then the parts folded; one on the CPU.
        let launches = if ctx.info().native_ops { 7 } else { 14 };
        assert_eq!(graph.len(), launches);
        drop(s1);
        // A new stream (whose own buffers may take the dropped stream's memory) reduces
        // other data, then launches the graph. Writing the inputs s1 last read lets go of
        // their uses of it: with them the stream and its own scratch are gone.
        let (mut x, mut y) = (x, y);
        let s2 = ctx.create_stream()?;
        s2.upload_blocking(&xv, &mut x)?;
        s2.upload_blocking(&yv, &mut y)?;
        let (av, bv) = (wavy(REDUCED, 3), wavy(REDUCED, 4));
        let (a, b) = (ctx.alloc_upload(&av)?, ctx.alloc_upload(&bv)?);
        let mut theirs = Reductions::new(ctx)?;
        for round in 0..3 {
            theirs.queue(&s2, &a, &b)?;
            got.clear(&s2)?;
            graph.launch(&s2)?;
            s2.sync()?;
            assert_eq!(got.read()?, want, "launch {round}");
        }
        assert_eq!(theirs.read()?, eager_reductions(ctx, &av, &bv)?);
        Ok(())
    }

    // The graph's scratch (its captured reductions' partials) lives until its last launch
    // has run: a graph dropped while that launch waits behind a slow kernel does not free
    // the scratch under it (on CUDA, each launch records an event the free waits for).
    fn a_graph_dropped_behind_its_queued_launch_keeps_its_scratch(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let (xv, yv) = (wavy(REDUCED, 9), wavy(REDUCED, 10));
        let want = eager_reductions(ctx, &xv, &yv)?;
        let (x, y) = (ctx.alloc_upload(&xv)?, ctx.alloc_upload(&yv)?);
        let mut got = Reductions::new(ctx)?;
        let delay = ctx.kernel(delay_spec())?;
        let s = ctx.create_stream()?;
        let graph = s.capture(|s| got.queue(s, &x, &y))?;
        got.clear(&s)?;
        s.launch(&delay, LaunchConfig::linear(1, 1), (100_000u32,))?;
        graph.launch(&s)?;
        drop(graph);
        s.sync()?;
        assert_eq!(got.read()?, want, "the launch queued before the graph was dropped");
        Ok(())
    }

    fn captured_reductions_replay_beside_eager_reductions_on_their_capture_stream(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        let rounds = 6;
        let (xv, yv) = (wavy(REDUCED, 5), wavy(REDUCED, 6));
        let (av, bv) = (wavy(REDUCED, 7), wavy(REDUCED, 8));
        let want = eager_reductions(ctx, &xv, &yv)?;
        let want_theirs = eager_reductions(ctx, &av, &bv)?;
        let (x, y) = (ctx.alloc_upload(&xv)?, ctx.alloc_upload(&yv)?);
        let (a, b) = (ctx.alloc_upload(&av)?, ctx.alloc_upload(&bv)?);
        let (s1, s2) = (ctx.create_stream()?, ctx.create_stream()?);
        let mut got = Reductions::new(ctx)?;
        let graph = s1.capture(|s| got.queue(s, &x, &y))?;
        // Each launch's results are copied aside on s2 before the next launch overwrites
        // them; s1 meanwhile reduces other arrays into outputs of its own, every round.
        let mut launched: Vec<Reductions> =
            (0..rounds).map(|_| Reductions::new(ctx)).collect::<gpukit::Result<_>>()?;
        let mut theirs: Vec<Reductions> =
            (0..rounds).map(|_| Reductions::new(ctx)).collect::<gpukit::Result<_>>()?;
        for (kept, eager) in launched.iter_mut().zip(&mut theirs) {
            graph.launch(&s2)?;
            eager.queue(&s1, &a, &b)?;
            s2.copy(&got.vals, &mut kept.vals)?;
            s2.copy(&got.idx, &mut kept.idx)?;
        }
        s1.sync()?;
        s2.sync()?;
        for (round, (kept, eager)) in launched.iter().zip(&theirs).enumerate() {
            assert_eq!(kept.read()?, want, "the graph's launch {round}");
            assert_eq!(eager.read()?, want_theirs, "s1's eager round {round}");
        }
        Ok(())
    }
}

/// The model of `a_pipeline_compute_stage_launches_a_captured_step`: parameters on the
/// device and the captured update step.
struct Model {
    w: GpuArray<f32>,
    step: Option<gpukit::Graph>,
}

backend_tests! {
    fn a_pipeline_compute_stage_launches_a_captured_step(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        for pattern in [gpukit::Pattern::Sequential, gpukit::Pattern::Triple] {
            let batches = 7;
            let mut model = Model { w: ctx.alloc_zeros::<f32>(16)?, step: None };
            let mut seen = Vec::new();
            gpukit::Pipeline::new(ctx, pattern)
                .batches(batches)
                .max_rows(8)
                .input::<f32>(1)
                .output::<f32>(1)
                .run_with(
                    &mut model,
                    |i, x| {
                        x.fill(i as f32);
                        Ok(x.len())
                    },
                    |m, s, _b, x, y| {
                        // The update step is captured on the first batch's stream, then
                        // launched on whichever compute stream each batch gets.
                        if m.step.is_none() {
                            let w = &mut m.w;
                            m.step = Some(s.capture(|s| {
                                s.scale(0.5f32, w)?;
                                s.add_scalar_inplace(w, 1.0f32)
                            })?);
                        }
                        if let Some(step) = &m.step {
                            step.launch(s)?;
                        }
                        s.copy(x, y)
                    },
                    |_m, b, y| {
                        seen.push((b.index, y[0]));
                        Ok(())
                    },
                )
                .map_err(|e| harness_error("pipeline", e.to_string()))?;
            let want_seen: Vec<(usize, f32)> = (0..batches).map(|i| (i, i as f32)).collect();
            assert_eq!(seen, want_seen, "{pattern:?}");
            // w <- w / 2 + 1, once per batch, in some order of streams but never at once.
            let want = (0..batches).fold(0.0f32, |w, _| w * 0.5 + 1.0);
            drop(model.step.take());
            assert_eq!(model.w.download()?, vec![want; 16], "{pattern:?}");
        }
        Ok(())
    }
}

backend_tests! {
    fn a_captured_gemm_replays_like_the_eager_one(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        // C = 0.5 A B + C, twice: the second run reads the first's C. On CUDA this is
        // cuBLAS inside a capture.
        let (m, n, k) = (5, 7, 3);
        let av: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let bv: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
        let g = gpukit::Gemm::new(m, n, k).scaled(0.5f32, 1.0);
        let s = ctx.create_stream()?;
        let (a, b) = (ctx.alloc_upload(&av)?, ctx.alloc_upload(&bv)?);
        let mut eager = ctx.alloc_zeros::<f32>(m * n)?;
        s.gemm(g, &a, &b, &mut eager)?;
        s.gemm(g, &a, &b, &mut eager)?;
        let mut replayed = ctx.alloc_zeros::<f32>(m * n)?;
        let graph = s.capture(|s| s.gemm(g, &a, &b, &mut replayed))?;
        graph.launch(&s)?;
        graph.launch(&s)?;
        s.sync()?;
        let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(replayed.download()?), bits(eager.download()?));
        Ok(())
    }

    fn a_captured_gemm_replays_after_its_capture_stream_is_dropped(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        // On CUDA the graph must own the workspace its gemm uses: the capture stream's
        // cuBLAS handle, and its default workspace, go with the stream.
        let (m, n, k) = (9, 6, 17);
        let av: Vec<f32> = (0..m * k).map(|i| (i % 11) as f32 - 5.0).collect();
        let bv: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32 * 0.25).collect();
        let g = gpukit::Gemm::new(m, n, k);
        let (a, b) = (ctx.alloc_upload(&av)?, ctx.alloc_upload(&bv)?);
        let mut want = ctx.alloc_zeros::<f32>(m * n)?;
        ctx.gemm(g, &a, &b, &mut want)?;
        let want = want.download()?;
        let mut got = ctx.alloc_zeros::<f32>(m * n)?;
        let s1 = ctx.create_stream()?;
        s1.gemm(g, &a, &b, &mut got)?; // the handle exists before the capture
        let graph = s1.capture(|s| s.gemm(g, &a, &b, &mut got))?;
        drop(s1);
        // Writing the arrays s1 last read lets go of their uses of it: with them the stream,
        // its cuBLAS handle and that handle's workspace are gone.
        let (mut a, mut b) = (a, b);
        let s2 = ctx.create_stream()?;
        s2.upload_blocking(&av, &mut a)?;
        s2.upload_blocking(&bv, &mut b)?;
        for round in 0..2 {
            s2.fill(&mut got, 0.0)?;
            graph.launch(&s2)?;
            s2.sync()?;
            assert_eq!(got.download()?, want, "launch {round}");
        }
        Ok(())
    }

    fn a_captured_gemm_replays_beside_eager_gemms_on_its_capture_stream(ctx) {
        if !graphs(ctx)? {
            return Ok(());
        }
        // The graph's gemm on s2 and s1's eager gemms run at the same time: they must not
        // share a workspace.
        let (m, n, k) = (8, 8, 8);
        let av: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32).collect();
        let bv: Vec<f32> = (0..k * n).map(|i| (i % 4) as f32 - 1.5).collect();
        let g = gpukit::Gemm::new(m, n, k);
        let (a, b) = (ctx.alloc_upload(&av)?, ctx.alloc_upload(&bv)?);
        let mut want = ctx.alloc_zeros::<f32>(m * n)?;
        ctx.gemm(g, &a, &b, &mut want)?;
        let want = want.download()?;
        let (s1, s2) = (ctx.create_stream()?, ctx.create_stream()?);
        let mut got = ctx.alloc_zeros::<f32>(m * n)?;
        let graph = s1.capture(|s| s.gemm(g, &a, &b, &mut got))?;
        let mut theirs: Vec<GpuArray<f32>> =
            (0..3).map(|_| ctx.alloc_zeros::<f32>(m * n)).collect::<gpukit::Result<_>>()?;
        for eager in &mut theirs {
            graph.launch(&s2)?;
            s1.gemm(g, &a, &b, eager)?;
        }
        s1.sync()?;
        s2.sync()?;
        assert_eq!(got.download()?, want);
        for eager in &theirs {
            assert_eq!(eager.download()?, want);
        }
        Ok(())
    }
}
