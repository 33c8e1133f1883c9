//! Streams and events, and the automatic ordering of arrays used from several streams.

use super::*;

use common::delay_spec;

/// The delay between the timed events, in microseconds: long enough that the clock the
/// delay spins on cannot cut it short by more than the 1 ms the test allows (see
/// `events_sync_query_and_time_real_work`).
const DELAY_US: u32 = 20_000;

backend_tests! {
    fn streams_with_priorities_sync_and_query(ctx) {
        let (least, greatest) = ctx.info().priority_range;
        assert!(greatest <= least, "greatest is numerically lower: {greatest} vs {least}");
        assert_eq!(ctx.create_stream()?.priority(), least);
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        for p in greatest..=least {
            let s = ctx.create_stream_with_priority(p)?;
            assert_eq!(s.priority(), p);
            assert_eq!(s.context_id(), ctx.id());
            s.fill(&mut x, p as f32)?;
            s.scale(2.0, &mut x)?;
            s.sync()?;
            assert!(s.query()?, "query after sync");
            assert_eq!(x.slice(BIG - 2..)?.download()?, [2.0 * p as f32; 2]);
        }
        let a = ctx.create_stream()?;
        let b = ctx.create_stream()?;
        assert_ne!(a.id(), b.id());
        ctx.sync()?;
        assert!(ctx.query()?);
        Ok(())
    }

    fn events_sync_query_and_time_real_work(ctx) {
        let s = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        let delay = ctx.kernel(delay_spec())?;
        let start = s.record_event()?;
        // Work of a known least duration between the events, so that a timer that always
        // says 0 (or counts in the wrong unit) fails.
        s.launch(&delay, LaunchConfig::linear(1, 1), (DELAY_US,))?;
        s.fill(&mut x, 1.0)?;
        for _ in 0..4 {
            s.scale(1.5, &mut x)?;
        }
        let end = s.record_event()?;
        assert_eq!(end.stream().id(), s.id());
        end.sync()?;
        assert!(end.query()?);
        assert!(start.query()?, "an earlier event is passed once a later one is");
        let ms = start.elapsed_ms(&end)?;
        let delay_ms = f64::from(DELAY_US) / 1000.0;
        // At least the delay less 1 ms; far below the 1000x that microseconds read as
        // milliseconds would give. The 1 ms is the delay's own clock: the CUDA delay spins
        // on `%globaltimer`, which ticks in steps of up to 1 us on bare GPUs and as coarse
        // as about 1 ms under virtualisation, so a start read just before a tick ends the
        // spin up to one tick early. The events' resolution (CUDA: about 0.5 us) is far
        // below that. With 20 ms asked, one tick can never fail the test, where 5% of a
        // 2 ms delay (0.1 ms) could. The CPU delay sleeps at least `us`; the WGSL one runs
        // at least 200 atomics of over 5 ns per microsecond.
        assert!(
            ms >= delay_ms - 1.0 && ms < 500.0 * delay_ms,
            "{ms} ms elapsed around a {delay_ms} ms delay"
        );
        let back = end.elapsed_ms(&start)?;
        assert!(back <= 0.0 && (back + ms).abs() <= 0.01 + 1e-3 * ms, "{back} vs {ms}");
        // The work before `end` is done: the data is final without another sync.
        assert_eq!(x.slice(..3)?.download()?, [5.0625; 3]);
        s.sync()?;
        assert!(s.query()?);
        Ok(())
    }

    fn stream_wait_orders_work_across_streams(ctx) {
        let s1 = ctx.create_stream()?;
        let s2 = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        let mut y = ctx.alloc_zeros::<f32>(BIG)?;
        s1.fill(&mut x, 3.0)?;
        for _ in 0..4 {
            s1.scale(2.0, &mut x)?;
        }
        let ev = s1.record_event()?;
        s2.wait(&ev)?;
        let after = s2.record_event()?;
        s2.copy(&x, &mut y)?;
        // s2 passed `after` only once `ev` was done.
        after.sync()?;
        assert!(ev.query()?, "s2 ran past its wait before s1 reached the event");
        s2.sync()?;
        assert!(y.download()?.iter().all(|&v| v == 48.0));
        Ok(())
    }

    fn cross_stream_read_after_write_is_ordered_automatically(ctx) {
        let s1 = ctx.create_stream()?;
        let s2 = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        let mut y = ctx.alloc_zeros::<f32>(BIG)?;
        s1.fill(&mut x, 1.0)?;
        for _ in 0..6 {
            s1.scale(2.0, &mut x)?;
        }
        s2.copy(&x, &mut y)?; // no explicit wait
        s2.sync()?;
        let got = y.download()?;
        let bad = got.iter().filter(|&&v| v != 64.0).count();
        assert_eq!(bad, 0, "s2 read x before s1 finished writing it: {:?}", &got[..4]);
        // A kernel launch is ordered like an op.
        let k = ctx.kernel(vector_add_spec())?;
        let mut z = ctx.alloc_zeros::<f32>(BIG)?;
        s1.fill(&mut x, 1.0)?;
        for _ in 0..4 {
            s1.scale(3.0, &mut x)?;
        }
        s2.launch(&k, LaunchConfig::for_elems(BIG), (&x, &y, &mut z, BIG as u64))?;
        assert!(z.download()?.iter().all(|&v| v == 81.0 + 64.0));
        Ok(())
    }

    fn cross_stream_write_after_read_and_write_are_ordered(ctx) {
        let s1 = ctx.create_stream()?;
        let s2 = ctx.create_stream()?;
        let mut x = ctx.alloc_upload(&vec![5.0f32; BIG])?;
        let mut y = ctx.alloc_zeros::<f32>(BIG)?;
        let mut delay = ctx.alloc_zeros::<f32>(BIG)?;
        // Keep s1 busy, then have it read x; s2 overwrites x right away.
        for _ in 0..6 {
            s1.scale(1.5, &mut delay)?;
        }
        s1.copy(&x, &mut y)?;
        s2.fill(&mut x, 9.0)?;
        assert!(y.download()?.iter().all(|&v| v == 5.0), "s2 overwrote x before s1 read it");
        assert!(x.download()?.iter().all(|&v| v == 9.0));
        // Write after write: the later write wins.
        s1.fill(&mut x, 1.0)?;
        for _ in 0..6 {
            s1.scale(2.0, &mut x)?;
        }
        s2.fill(&mut x, 3.0)?;
        assert!(x.download()?.iter().all(|&v| v == 3.0), "s1's writes landed after s2's");
        // Disjoint views of one array written from two streams.
        {
            let (mut l, mut r) = x.split_at_mut(BIG / 2)?;
            s1.fill(&mut l, 7.0)?;
            s2.fill(&mut r, 8.0)?;
        }
        let got = x.download()?;
        assert!(got[..BIG / 2].iter().all(|&v| v == 7.0));
        assert!(got[BIG / 2..].iter().all(|&v| v == 8.0));
        Ok(())
    }

    fn views_written_from_two_threads_are_both_ordered(ctx) {
        // Thread 1 makes a blocking upload into the left half on s1 (queued behind a delay,
        // so it stays inside the call); meanwhile thread 2 fills the right half on s2
        // (queued behind a longer delay). A third stream then reads the whole array: it must
        // wait for both writers, whichever thread recorded its use last.
        let n = 1 << 18;
        let (s1, s2, s3) = (ctx.create_stream()?, ctx.create_stream()?, ctx.create_stream()?);
        let mut d1 = ctx.alloc_zeros::<f32>(BIG)?;
        let mut d2 = ctx.alloc_zeros::<f32>(BIG)?;
        let mut x = ctx.alloc_zeros::<f32>(2 * n)?;
        let mut y = ctx.alloc_zeros::<f32>(2 * n)?;
        for _ in 0..8 {
            s1.scale(1.0, &mut d1)?;
        }
        for _ in 0..40 {
            s2.scale(1.0, &mut d2)?;
        }
        let data = vec![1.0f32; n];
        {
            let (mut left, mut right) = x.split_at_mut(n)?;
            // A panic in either thread propagates out of `scope`.
            let (r1, r2) = std::thread::scope(|sc| {
                let t1 = sc.spawn(|| s1.upload_blocking(&data, &mut left));
                let t2 = sc.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    s2.fill(&mut right, 2.0)
                });
                let wait = |t: std::thread::ScopedJoinHandle<'_, gpukit::Result<()>>| {
                    t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
                };
                (wait(t1), wait(t2))
            });
            r1?;
            r2?;
        }
        s3.copy(&x, &mut y)?;
        s3.sync()?;
        let got = y.download()?;
        assert!(got[..n].iter().all(|&v| v == 1.0), "left half");
        let stale = got[n..].iter().filter(|&&v| v != 2.0).count();
        assert_eq!(stale, 0, "s3 read the right half before s2 wrote it");
        Ok(())
    }
}
