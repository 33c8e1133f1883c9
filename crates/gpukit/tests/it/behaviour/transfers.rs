//! Asynchronous copies safe by ownership, the pinned pool, and dropping arrays with queued work.

use super::*;

backend_tests! {
    fn async_copies_with_pinned_buffers(ctx) {
        let n = 10_000;
        let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let s = ctx.create_stream()?;
        for usage in [HostUse::Upload, HostUse::Download, HostUse::Both] {
            let mut host = ctx.alloc_host::<f32>(n, usage)?;
            assert_eq!((host.len(), host.usage()), (n, usage));
            assert!(!host.is_registered());
            assert_eq!(host.context_id(), ctx.id());
            host.copy_from_slice(&data);
            let mut dev = ctx.alloc_zeros::<f32>(n)?;
            let pending = s.upload(host, &mut dev)?;
            let host = pending.wait()?;
            assert_eq!(&host[..], &data[..], "{usage:?}: the buffer comes back intact");
            assert_eq!(dev.download()?, data, "{usage:?}: upload");
            s.scale(2.0, &mut dev)?;
            let back = ctx.alloc_host::<f32>(n, usage)?;
            let back = s.download(&dev, back)?.wait()?;
            let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
            assert_eq!(&back[..], &want[..], "{usage:?}: download");
            assert_eq!(back.into_vec()?, want);
        }
        Ok(())
    }

    fn async_copies_with_vecs_and_registered_memory(ctx) {
        let n = 5000;
        let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let s = ctx.create_stream()?;
        let mut dev = ctx.alloc_zeros::<u32>(n)?;
        // A plain Vec moves in and comes back.
        let v = s.upload(data.clone(), &mut dev)?.wait()?;
        assert_eq!(v, data);
        let back = s.download(&dev, vec![0u32; n])?.wait()?;
        assert_eq!(back, data);
        // A registered Vec: copies both ways, then the Vec itself comes back.
        let reg = ctx.register_host(data.iter().map(|v| v ^ 1).collect::<Vec<_>>())?;
        assert!(reg.is_registered());
        assert_eq!(reg.len(), n);
        let reg = s.upload(reg, &mut dev)?.wait()?;
        assert_eq!(dev.download()?, data.iter().map(|v| v ^ 1).collect::<Vec<_>>());
        s.fill(&mut dev, 77)?;
        let reg = s.download(&dev, reg)?.wait()?;
        assert_eq!(reg.into_vec()?, vec![77; n]);
        let empty = ctx.register_host(Vec::<u32>::new())?;
        assert!(empty.into_vec()?.is_empty());
        Ok(())
    }

    fn pending_becomes_ready_and_dropping_it_completes_the_copy(ctx) {
        let s = ctx.create_stream()?;
        let data: Vec<f32> = (0..BIG).map(|i| (i % 1000) as f32).collect();
        let mut dev = ctx.alloc_zeros::<f32>(BIG)?;
        let mut delay = ctx.alloc_zeros::<f32>(BIG)?;
        let p = s.upload(data.clone(), &mut dev)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !p.is_ready()? {
            assert!(std::time::Instant::now() < deadline, "the upload never finished");
            std::thread::yield_now();
        }
        assert_eq!(p.wait()?, data);

        // Dropped upload: the drop waits for the copy, so the stream is idle afterwards and
        // the device holds the data.
        for _ in 0..4 {
            s.scale(1.5, &mut delay)?;
        }
        let doubled: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        let p = s.upload(doubled.clone(), &mut dev)?;
        drop(p);
        assert!(s.query()?, "dropping a Pending returned before its copy was done");
        assert_eq!(dev.download()?, doubled);

        // Dropped download: likewise.
        for _ in 0..4 {
            s.scale(1.5, &mut delay)?;
        }
        let p = s.download(&dev, vec![0.0f32; BIG])?;
        drop(p);
        assert!(s.query()?, "dropping a download Pending returned before its copy was done");
        ctx.check()?;
        Ok(())
    }

    fn pinned_pool_reuses_freed_buffers(ctx) {
        let before = ctx.host_pool_stats();
        let h = ctx.alloc_host::<f32>(1000, HostUse::Upload)?;
        let one = ctx.host_pool_stats();
        assert_eq!(one.fresh, before.fresh + 1);
        assert_eq!(one.reused, before.reused);
        drop(h);
        let kept = ctx.host_pool_stats();
        assert!(kept.retained_bytes >= before.retained_bytes + 4000, "{kept:?}");
        let h = ctx.alloc_host::<f32>(1000, HostUse::Upload)?;
        let again = ctx.host_pool_stats();
        assert_eq!(again.fresh, one.fresh, "same size again must not allocate");
        assert_eq!(again.reused, one.reused + 1);
        assert_eq!(again.retained_bytes, before.retained_bytes);
        drop(h);

        // A steady-state upload loop pins exactly once.
        let s = ctx.create_stream()?;
        let n = 1 << 16;
        let mut dev = ctx.alloc_zeros::<f32>(n)?;
        let start = ctx.host_pool_stats();
        for i in 0..10 {
            let mut host = ctx.alloc_host::<f32>(n, HostUse::Upload)?;
            host.fill(i as f32);
            let host = s.upload(host, &mut dev)?.wait()?;
            drop(host);
            s.scale(2.0, &mut dev)?;
            assert_eq!(dev.slice(n - 1..)?.download()?, [2.0 * i as f32]);
        }
        let end = ctx.host_pool_stats();
        assert_eq!(end.fresh - start.fresh, 1, "{start:?} -> {end:?}");
        assert_eq!(end.reused - start.reused, 9, "{start:?} -> {end:?}");
        Ok(())
    }

    fn dropping_an_array_with_queued_work_is_safe(ctx) {
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_zeros::<f32>(BIG)?;
        let mut b = ctx.alloc_zeros::<f32>(BIG)?;
        s.fill(&mut a, 1.0)?;
        for _ in 0..8 {
            s.scale(2.0, &mut a)?;
        }
        s.copy(&a, &mut b)?;
        for _ in 0..2 {
            s.scale(0.5, &mut a)?;
        }
        drop(a); // work on `a` is still queued on s
        s.sync()?;
        ctx.check()?;
        assert!(b.download()?.iter().all(|&v| v == 256.0));
        // Also when the queued work is on the default stream and the reader is elsewhere.
        let mut c = ctx.alloc_upload(&vec![3.0f32; BIG])?;
        s.scale(3.0, &mut c)?;
        let mut d = ctx.alloc_zeros::<f32>(BIG)?;
        ctx.copy(&c, &mut d)?;
        drop(c);
        assert!(d.download()?.iter().all(|&v| v == 9.0));
        Ok(())
    }
}
