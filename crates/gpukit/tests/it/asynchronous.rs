//! Awaiting device work without blocking a thread: `Stream::synchronize_async`,
//! `Event::wait_async` and `.await` on a `Pending` copy, on a current-thread tokio runtime,
//! every backend. The proof that nothing blocks: while the future waits for a slow kernel
//! (`delay`, 50 ms), a second task on the same (only) thread keeps ticking; had the wait
//! blocked the thread, it could not have ticked once. A test thread descheduled for longer
//! than the kernel finds the work done at the future's first poll, which proves nothing
//! either way, so each such wait is tried again with a longer kernel ([`ticks_on_some_try`]).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use gpukit::{kernel, Error, HostUse, LaunchConfig};

use crate::common::delay_spec;

/// Doubles `x`: a bounds-checked kernel, so that on CUDA the context has a fault record,
/// which an awaited stream's result reads only where that costs no wait.
#[kernel]
fn twice(x: &mut [f32]) {
    let i = global_x();
    if i < x.len() {
        x[i] *= 2.0;
    }
}

/// Runs `fut` on a current-thread runtime beside a task that counts 1 ms ticks until `fut`
/// is done; returns `fut`'s output and the ticks.
fn with_ticker<T>(fut: impl std::future::Future<Output = T>) -> (T, u32) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("a current-thread runtime: {e}"),
    };
    let ticks = Rc::new(Cell::new(0u32));
    let done = Rc::new(Cell::new(false));
    let (t, d) = (ticks.clone(), done.clone());
    let out = rt.block_on(async move {
        let ticker = async move {
            while !d.get() {
                tokio::time::sleep(Duration::from_millis(1)).await;
                t.set(t.get() + 1);
            }
        };
        let work = async {
            let out = fut.await;
            done.set(true);
            out
        };
        tokio::join!(work, ticker).0
    });
    (out, ticks.get())
}

/// The slow kernel's delays, in µs, one per try.
const DELAYS_US: [u32; 3] = [50_000, 200_000, 800_000];

/// Runs `attempt` (which queues a `delay` of the given µs, awaits it beside the ticker and
/// returns the ticks) with ever longer delays until the ticker has run. The ticker ticks at
/// least once unless the awaited future was ready at its first poll: because that poll
/// blocked until the work was done, or because the work was done already (this thread was
/// descheduled for the whole delay). A blocking wait never ticks, whatever the delay; a
/// descheduled thread does not miss 800 ms.
fn ticks_on_some_try(
    what: &str,
    mut attempt: impl FnMut(u32) -> gpukit::Result<u32>,
) -> gpukit::Result<()> {
    for us in DELAYS_US {
        if attempt(us)? > 0 {
            return Ok(());
        }
    }
    panic!("{what} blocked the runtime's only thread: the ticker never ran, with delays of 50, 200 and 800 ms");
}

crate::backend_tests! {
    fn awaiting_a_stream_leaves_the_runtime_thread_free(ctx) {
        let delay = ctx.kernel(delay_spec())?;
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_zeros::<f32>(1024)?;
        ticks_on_some_try("awaiting a stream", |us| {
            s.launch(&delay, LaunchConfig::linear(1, 1), (us,))?;
            s.fill(&mut a, 3.0)?;
            let (r, ticks) = with_ticker(s.synchronize_async());
            r?;
            assert!(s.query()?, "synchronize_async was ready before the stream's work finished");
            Ok(ticks)
        })?;
        assert_eq!(a.download()?, vec![3.0; 1024]);
        Ok(())
    }

    fn awaiting_an_event_and_a_copy(ctx) {
        let delay = ctx.kernel(delay_spec())?;
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_zeros::<f32>(4096)?;
        let mut last = None;
        ticks_on_some_try("awaiting an event", |us| {
            s.launch(&delay, LaunchConfig::linear(1, 1), (us,))?;
            s.fill(&mut a, 5.0)?;
            let event = s.record_event()?;
            let (r, ticks) = with_ticker(event.wait_async());
            r?;
            assert!(event.query()?, "the event's wait was ready before the event");
            last = Some(event);
            Ok(ticks)
        })?;
        // A download in flight, awaited: the host buffer comes back with the data.
        ticks_on_some_try("awaiting a copy", |us| {
            s.launch(&delay, LaunchConfig::linear(1, 1), (us,))?;
            s.fill(&mut a, 7.0)?;
            let host = ctx.alloc_host::<f32>(4096, HostUse::Download)?;
            let pending = s.download(&a, host)?;
            let (back, ticks) = with_ticker(async move { pending.await });
            let back = back.map_err(|r| r.error)?;
            assert!(back.iter().all(|&x| x == 7.0));
            Ok(ticks)
        })?;
        // Already done: ready at the first poll.
        let event = last.expect("the event's try recorded one");
        let (r, _) = with_ticker(event.wait_async());
        r
    }

    // Regression tests for "`EventFuture::finish` ignores `stream_query`'s answer and
    // always reads the fault record (a device-to-host copy and a stream sync): it can block
    // the executor thread and, on a capturing stream, invalidate the capture".
    fn an_awaited_stream_does_not_wait_for_work_queued_after_the_wait(ctx) {
        let (k, delay) = (ctx.kernel(twice())?, ctx.kernel(delay_spec())?);
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_upload(&[1.0f32; 256])?;
        s.launch(&k, LaunchConfig::for_elems(256), (&mut a,))?;
        let fut = s.synchronize_async();
        s.launch(&delay, LaunchConfig::linear(1, 1), (400_000u32,))?;
        let (r, _) = with_ticker(fut);
        r?;
        // Vulkan submits a stream's queued work together, so its events pass with the later
        // work: only the other backends can show that the wait did not wait for it.
        if ctx.backend_name() != "vulkan" {
            assert!(
                !s.query()?,
                "the awaited result waited for the 400 ms of work queued after the wait"
            );
        }
        s.sync()?;
        assert_eq!(a.download()?, vec![2.0; 256]);
        Ok(())
    }

    fn a_stream_awaited_inside_its_capture_keeps_the_capture(ctx) {
        let k = ctx.kernel(twice())?;
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_upload(&[1.0f32; 256])?;
        s.launch(&k, LaunchConfig::for_elems(256), (&mut a,))?;
        let fut = s.synchronize_async();
        let graph = match s.capture(|s| {
            let (r, _) = with_ticker(fut);
            r?;
            s.launch(&k, LaunchConfig::for_elems(256), (&mut a,))
        }) {
            Err(Error::Unsupported { .. }) if ctx.backend_name() == "vulkan" => return Ok(()),
            other => other?,
        };
        graph.launch(&s)?;
        graph.launch(&s)?;
        s.sync()?;
        assert_eq!(a.download()?, vec![8.0; 256]);
        Ok(())
    }

    fn many_waits_at_once_all_complete(ctx) {
        let delay = ctx.kernel(delay_spec())?;
        let streams = (0..4).map(|_| ctx.create_stream()).collect::<gpukit::Result<Vec<_>>>()?;
        for (i, s) in streams.iter().enumerate() {
            s.launch(&delay, LaunchConfig::linear(1, 1), (10_000 * (i as u32 + 1),))?;
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(|e| {
            crate::common::harness_error("runtime", e.to_string())
        })?;
        rt.block_on(async {
            let waits: Vec<_> = streams.iter().map(|s| s.synchronize_async()).collect();
            for w in waits {
                w.await?;
            }
            Ok::<(), gpukit::Error>(())
        })?;
        for s in &streams {
            assert!(s.query()?);
        }
        Ok(())
    }
}

crate::cpu_tests! {
    fn a_failed_kernel_is_the_awaited_error(ctx) {
        let spec = gpukit::KernelSpec::<(gpukit::Out<f32>,)>::named("boom")
            .cpu(|_, _| panic!("boom on purpose"));
        let k = ctx.kernel(spec)?;
        let s = ctx.create_stream()?;
        let mut out = ctx.alloc_zeros::<f32>(1)?;
        s.launch(&k, LaunchConfig::linear(1, 1), (&mut out,))?;
        let (r, _) = with_ticker(s.synchronize_async());
        assert!(
            matches!(r, Err(gpukit::Error::KernelFailed { .. })),
            "expected KernelFailed, got {r:?}"
        );
        // The stream and context stay usable.
        let (r, _) = with_ticker(s.synchronize_async());
        r
    }
}

/// The names of this process's threads (Linux: `/proc/self/task/*/comm`, at most 15 bytes).
#[cfg(all(target_os = "linux", feature = "vulkan"))]
fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_owned())
        .collect()
}

#[cfg(all(target_os = "linux", feature = "vulkan"))]
crate::tests_on! {
    [vulkan]
    fn vulkan_awaits_share_the_devices_waiter_thread(ctx) {
        // 32 awaits pending at once: the device's one waiter thread drives them all; none
        // gets a thread of its own (gpukit-core's fallback, "gpukit-wait").
        let delay = ctx.kernel(delay_spec())?;
        let streams = (0..4).map(|_| ctx.create_stream()).collect::<gpukit::Result<Vec<_>>>()?;
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(|e| {
            crate::common::harness_error("runtime", e.to_string())
        })?;
        rt.block_on(async {
            let mut waits = Vec::new();
            for round in 0..8u32 {
                for s in &streams {
                    s.launch(&delay, LaunchConfig::linear(1, 1), (2_000 * (round + 1),))?;
                    waits.push(s.synchronize_async());
                }
            }
            // Register every wait (the first poll asks the backend to wake it).
            for w in &mut waits {
                let _ = futures_poll_once(w).await;
            }
            let names = thread_names();
            assert!(!names.iter().any(|n| n == "gpukit-wait"), "{names:?}");
            assert!(names.iter().any(|n| n.starts_with("gpukit-wgpu-wai")), "{names:?}");
            for w in waits {
                w.await?;
            }
            Ok::<(), gpukit::Error>(())
        })?;
        for s in &streams {
            assert!(s.query()?);
        }
        Ok(())
    }
}

/// Polls `f` once (registering its waker), whatever it returns.
#[cfg(all(target_os = "linux", feature = "vulkan"))]
async fn futures_poll_once<F: std::future::Future + Unpin>(
    f: &mut F,
) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx))).await
}
