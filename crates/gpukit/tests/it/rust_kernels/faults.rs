//! The bounds-check contract of `#[kernel]`s: an access outside an array (a parameter, a
//! view of a larger array, a shared array) touches no memory and is `KernelFailed`, naming
//! the kernel and the array, at the next synchronization, on every backend; the context
//! stays usable and the fault is reported once.

use gpukit::{kernel, Error, LaunchConfig};

/// Reads `src` at the indices in `idx`.
#[kernel]
pub(super) fn gather(src: &[f32], idx: &[u32], out: &mut [f32]) {
    let i = global_x();
    if i < out.len() {
        out[i] = src[idx[i] as usize] + 1.0;
    }
}

/// Writes one element past its own: the last thread's write falls outside `out`.
#[kernel]
pub(super) fn shifted(out: &mut [f32]) {
    let i = global_x();
    if i < out.len() {
        out[i + 1] = i as f32;
    }
}

/// Indexes a shared array of 64 past its end from the last threads of a block of 64.
#[kernel]
pub(super) fn shared_over(out: &mut [u32]) {
    let tile = shared::<u32, 64>();
    let t = thread_x();
    tile[t] = t as u32;
    barrier();
    let v = tile[t + 4];
    if t < out.len() {
        out[t] = v;
    }
}

pub(super) fn expect_fault(r: gpukit::Result<()>, kernel: &str, needle: &str) {
    expect_fault_of(r, kernel, &[needle]);
}

/// As [`expect_fault`], where any of `needles` may be the one reported: lanes that fault in
/// the same instant race for the record, and which of them lands first is the machine's
/// choice.
pub(super) fn expect_fault_of(r: gpukit::Result<()>, kernel: &str, needles: &[&str]) {
    match r {
        Err(Error::KernelFailed { kernel: k, message }) => {
            assert_eq!(k, kernel, "{message}");
            assert!(
                needles.iter().any(|n| message.contains(n)),
                "{message}\n  want one of: {needles:?}"
            );
        }
        other => panic!("expected KernelFailed from `{kernel}`, got {other:?}"),
    }
}

crate::backend_tests! {
    fn kernel_read_out_of_bounds_is_a_typed_error_and_skipped(ctx) {
        let src: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let idx: Vec<u32> = vec![3, 100, 9, 0];
        let k = ctx.kernel(gather())?;
        let (ds, di) = (ctx.alloc_upload(&src)?, ctx.alloc_upload(&idx)?);
        let mut out = ctx.alloc_upload(&[-5.0f32; 4])?;
        let s = ctx.create_stream()?;
        s.launch(&k, LaunchConfig::for_elems(4), (&ds, &di, &mut out))?; // queued: Ok
        expect_fault(s.sync(), "gather", "index 100 is out of bounds for `src` (length 10)");
        s.sync()?; // reported once
        // The faulting read gave zero; the other threads ran.
        assert_eq!(out.download()?, [4.0, 1.0, 10.0, 1.0]);
        // The context goes on: a good launch, a clean sync.
        let di = ctx.alloc_upload(&[1u32, 2, 3, 4])?;
        ctx.launch(&k, LaunchConfig::for_elems(4), (&ds, &di, &mut out))?;
        ctx.sync()?;
        assert_eq!(out.download()?, [2.0, 3.0, 4.0, 5.0]);
        Ok(())
    }

    fn kernel_write_past_a_view_touches_nothing(ctx) {
        let mut whole = ctx.alloc_upload(&[7.0f32; 20])?;
        let k = ctx.kernel(shifted())?;
        {
            let view = whole.slice_mut(0..10)?;
            ctx.launch(&k, LaunchConfig::for_elems(10), (view,))?;
        }
        expect_fault(ctx.sync(), "shifted", "index 10 is out of bounds for `out` (length 10)");
        let got = whole.download()?;
        let mut want = vec![7.0f32; 20];
        for (i, w) in want.iter_mut().enumerate().take(10).skip(1) {
            *w = (i - 1) as f32;
        }
        assert_eq!(got, want, "the element after the view keeps its value");
        Ok(())
    }

    fn kernel_shared_array_out_of_bounds_is_a_typed_error(ctx) {
        let k = ctx.kernel(shared_over())?;
        let mut out = ctx.alloc_zeros::<u32>(64)?;
        ctx.launch(&k, LaunchConfig::linear(1, 64), (&mut out,))?;
        // Threads 60..64 read past the end together: any of them may be the one reported.
        let faults: Vec<String> = (64..68)
            .map(|i| format!("index {i} is out of bounds for `tile` (length 64)"))
            .collect();
        let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
        expect_fault_of(ctx.sync(), "shared_over", &faults);
        let got = out.download()?;
        assert_eq!(got[..60], (4..64).collect::<Vec<u32>>()[..]);
        assert_eq!(got[60..], [0; 4], "reads past the end give zero");
        Ok(())
    }

    fn kernel_made_unchecked_computes_the_same(ctx) {
        let src: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let idx: Vec<u32> = vec![9, 0, 4, 4];
        let checked = gather();
        assert!(checked.is_checked());
        // SAFETY: every index passed below is within `src` (10 elements), every thread's
        // `i` within `out`.
        let unchecked = unsafe { gather().unchecked() };
        assert!(!unchecked.is_checked());
        assert_ne!(checked.cuda_source(), unchecked.cuda_source());
        let (kc, ku) = (ctx.kernel(checked)?, ctx.kernel(unchecked)?);
        assert!(kc.is_checked() && !ku.is_checked());
        let (ds, di) = (ctx.alloc_upload(&src)?, ctx.alloc_upload(&idx)?);
        let (mut a, mut b) = (ctx.alloc_zeros::<f32>(4)?, ctx.alloc_zeros::<f32>(4)?);
        ctx.launch(&kc, LaunchConfig::for_elems(4), (&ds, &di, &mut a))?;
        ctx.launch(&ku, LaunchConfig::for_elems(4), (&ds, &di, &mut b))?;
        ctx.sync()?;
        assert_eq!(a.download()?, [10.0, 1.0, 5.0, 5.0]);
        assert_eq!(b.download()?, [10.0, 1.0, 5.0, 5.0]);
        Ok(())
    }

    fn kernel_fault_is_seen_by_query(ctx) {
        let k = ctx.kernel(shifted())?;
        let mut out = ctx.alloc_zeros::<f32>(3)?;
        let s = ctx.create_stream()?;
        s.launch(&k, LaunchConfig::for_elems(3), (&mut out,))?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match s.query() {
                Ok(false) if std::time::Instant::now() < deadline => std::thread::yield_now(),
                r => return {
                    expect_fault(r.map(|_| ()), "shifted", "index 3 is out of bounds for `out`");
                    Ok(())
                },
            }
        }
    }
}

// Each stream has its own fault record: a fault is reported to the stream whose launch
// made it (or to the context's sync, which reads every stream's), whole, once.
crate::backend_tests! {
    fn kernel_fault_is_reported_to_its_own_stream(ctx) {
        let k = ctx.kernel(gather())?;
        let src = ctx.alloc_upload(&[1.0f32; 10])?;
        let (a, b, clean) = (ctx.create_stream()?, ctx.create_stream()?, ctx.create_stream()?);
        let ia = ctx.alloc_upload(&[0u32, 20])?;
        let ib = ctx.alloc_upload(&[30u32, 0])?;
        let ok = ctx.alloc_upload(&[0u32, 1])?;
        let mut oa = ctx.alloc_zeros::<f32>(2)?;
        let mut ob = ctx.alloc_zeros::<f32>(2)?;
        let mut oc = ctx.alloc_zeros::<f32>(2)?;
        a.launch(&k, LaunchConfig::for_elems(2), (&src, &ia, &mut oa))?;
        b.launch(&k, LaunchConfig::for_elems(2), (&src, &ib, &mut ob))?;
        clean.launch(&k, LaunchConfig::for_elems(2), (&src, &ok, &mut oc))?;
        // The clean stream waits for the others' work: their faults have happened.
        clean.wait(&a.record_event()?)?;
        clean.wait(&b.record_event()?)?;
        // Nothing of them reaches the clean stream's sync, or the default stream's...
        clean.sync()?;
        ctx.default_stream().sync()?;
        // ... they are the faulting streams' own.
        expect_fault(a.sync(), "gather", "index 20 is out of bounds for `src` (length 10)");
        expect_fault(b.sync(), "gather", "index 30 is out of bounds for `src` (length 10)");
        Ok(())
    }

    fn kernel_faults_go_to_the_streams_that_made_them(ctx) {
        let k = ctx.kernel(gather())?;
        let src = ctx.alloc_upload(&[1.0f32; 10])?;
        let (a, b) = (ctx.create_stream()?, ctx.create_stream()?);
        let ia = ctx.alloc_upload(&[0u32, 20])?;
        let ib = ctx.alloc_upload(&[30u32, 0])?;
        let mut oa = ctx.alloc_zeros::<f32>(2)?;
        let mut ob = ctx.alloc_zeros::<f32>(2)?;
        a.launch(&k, LaunchConfig::for_elems(2), (&src, &ia, &mut oa))?;
        b.launch(&k, LaunchConfig::for_elems(2), (&src, &ib, &mut ob))?;
        // ... and each faulting stream gets its own, whichever syncs first, once.
        expect_fault(b.sync(), "gather", "index 30 is out of bounds for `src` (length 10)");
        expect_fault(a.sync(), "gather", "index 20 is out of bounds for `src` (length 10)");
        a.sync()?;
        b.sync()?;
        ctx.sync()?;
        Ok(())
    }

    fn kernel_faults_of_two_streams_are_both_reported_once(ctx) {
        let k = ctx.kernel(gather())?;
        let src = ctx.alloc_upload(&[1.0f32; 10])?;
        let (a, b) = (ctx.create_stream()?, ctx.create_stream()?);
        let (ia, ib) = (ctx.alloc_upload(&[11u32])?, ctx.alloc_upload(&[12u32])?);
        let (mut oa, mut ob) = (ctx.alloc_zeros::<f32>(1)?, ctx.alloc_zeros::<f32>(1)?);
        a.launch(&k, LaunchConfig::for_elems(1), (&src, &ia, &mut oa))?;
        b.launch(&k, LaunchConfig::for_elems(1), (&src, &ib, &mut ob))?;
        // The context's sync reports one of them, the next the other, then none.
        let mut seen = Vec::new();
        for _ in 0..2 {
            match ctx.sync() {
                Err(Error::KernelFailed { message, .. }) => seen.push(message),
                other => panic!("expected a fault, got {other:?}"),
            }
        }
        ctx.sync()?;
        a.sync()?;
        b.sync()?;
        seen.sort();
        assert!(seen[0].contains("index 11 is out of bounds"), "{seen:?}");
        assert!(seen[1].contains("index 12 is out of bounds"), "{seen:?}");
        Ok(())
    }

    fn kernel_fault_of_a_dropped_stream_reaches_the_context(ctx) {
        let k = ctx.kernel(gather())?;
        let src = ctx.alloc_upload(&[1.0f32; 10])?;
        let idx = ctx.alloc_upload(&[13u32])?;
        let mut out = ctx.alloc_zeros::<f32>(1)?;
        {
            let s = ctx.create_stream()?;
            s.launch(&k, LaunchConfig::for_elems(1), (&src, &idx, &mut out))?;
        }
        expect_fault(ctx.sync(), "gather", "index 13 is out of bounds for `src`");
        ctx.sync()?;
        Ok(())
    }

    fn kernel_fault_in_a_graph_is_reported_to_the_stream_that_launched_it(ctx) {
        let k = ctx.kernel(gather())?;
        let src = ctx.alloc_upload(&[1.0f32; 10])?;
        let idx = ctx.alloc_upload(&[14u32])?;
        let mut out = ctx.alloc_zeros::<f32>(1)?;
        let (s, t) = (ctx.create_stream()?, ctx.create_stream()?);
        let graph = match s.capture(|s| s.launch(&k, LaunchConfig::for_elems(1), (&src, &idx, &mut out))) {
            Err(Error::Unsupported { .. }) if ctx.backend_name() == "vulkan" => return Ok(()),
            other => other?,
        };
        s.sync()?; // the capture ran nothing
        graph.launch(&t)?;
        s.sync()?;
        expect_fault(t.sync(), "gather", "index 14 is out of bounds for `src`");
        t.sync()?;
        // Once more, after the graph is gone.
        graph.launch(&s)?;
        drop(graph);
        expect_fault(s.sync(), "gather", "index 14 is out of bounds for `src`");
        ctx.sync()?;
        Ok(())
    }
}

/// An f64 kernel calling `exp`: no WGSL (Vulkan has the math functions in 16 and 32 bits
/// only), every other backend runs it.
#[kernel]
pub(super) fn exp64(x: &mut [f64]) {
    let i = global_x();
    if i < x.len() {
        x[i] = x[i].exp() * 0.5;
    }
}

crate::backend_tests! {
    fn kernel_with_f64_math_is_unavailable_on_vulkan_only(ctx) {
        match (ctx.backend_name(), ctx.kernel(exp64())) {
            ("vulkan", Err(Error::KernelUnavailable { kernel, backend, hint })) => {
                assert_eq!((kernel.as_str(), backend), ("exp64", "vulkan"));
                assert!(hint.contains("f64"), "{hint}");
            }
            ("vulkan", other) => panic!("expected KernelUnavailable on Vulkan, got {other:?}"),
            (_, k) => {
                let k = k?;
                let mut x = ctx.alloc_upload(&[0.0f64, 3.0, -5.0])?;
                ctx.launch(&k, LaunchConfig::for_elems(3), (&mut x,))?;
                let want: Vec<f64> = [0.0f64, 3.0, -5.0].iter().map(|v| v.exp() * 0.5).collect();
                for (g, w) in x.download()?.iter().zip(&want) {
                    assert!((g - w).abs() <= w.abs() * 1e-15, "{g} vs {w}");
                }
            }
        }
        Ok(())
    }
}

/// Rows of the `cols`-wide table `src` picked by `idx`, each row number checked by the
/// kernel itself: a bad one leaves its row zero and is reported against the table's rows
/// (`src` itself has `rows * cols` elements).
#[kernel]
pub(super) fn picked_rows(src: &[f32], idx: &[u32], cols: u32, out: &mut [f32]) {
    let e = global_x();
    let (c, rows) = (cols as usize, src.len() / cols as usize);
    if e < out.len() {
        let r = idx[e / c] as usize;
        if r < rows {
            out[e] = src[r * c + e % c];
        } else {
            out[e] = 0.0;
            if e % c == 0 {
                report_out_of_bounds("rows", r, rows);
            }
        }
    }
}

/// 64-bit atomic adds from every thread: the sums of `x` as i64, u64 and f64.
#[kernel]
pub(super) fn sums64(x: &[i64], si: &mut [i64], su: &mut [u64], sf: &mut [f64]) {
    let i = global_x();
    if i < x.len() {
        atomic_add(&mut si[0], x[i]);
        atomic_add(&mut su[(i % 2) as usize], x[i] as u64);
        atomic_add(&mut sf[0], ((x[i] >> 33) % 64) as f64 * 0.5);
    }
}

crate::backend_tests! {
    fn kernel_reports_its_own_index_checks_checked_or_not(ctx) {
        let src: Vec<f32> = (0..12).map(|i| i as f32).collect(); // 4 rows of 3
        let idx = [3u32, 9, 0, 4];
        let (ds, di) = (ctx.alloc_upload(&src)?, ctx.alloc_upload(&idx)?);
        // SAFETY: every access the kernel makes is behind its own check: `idx[e / c]` with
        // `e < out.len() == idx.len() * c`, `src[r * c + e % c]` with `r < rows`.
        // Unchecked first: its reports alone make the context read its fault record.
        let specs = [unsafe { picked_rows().unchecked() }, picked_rows()];
        for spec in specs {
            let k = ctx.kernel(spec)?;
            let mut out = ctx.alloc_upload(&[-1.0f32; 12])?;
            ctx.launch(&k, LaunchConfig::for_elems(12), (&ds, &di, 3u32, &mut out))?;
            // Two bad rows: whichever lands first is reported, once.
            expect_fault_of(
                ctx.sync(),
                "picked_rows",
                &[
                    "index 9 is out of bounds for `rows` (length 4)",
                    "index 4 is out of bounds for `rows` (length 4)",
                ],
            );
            ctx.sync()?;
            let want = [9.0f32, 10.0, 11.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0];
            assert_eq!(out.download()?, want);
        }
        Ok(())
    }

    fn kernel_atomic_adds_of_64_bits_on_the_cpu_and_cuda(ctx) {
        match (ctx.backend_name(), ctx.kernel(sums64())) {
            ("vulkan", Err(Error::KernelUnavailable { hint, .. })) => {
                assert!(hint.contains("64-bit"), "{hint}");
            }
            ("vulkan", other) => panic!("expected KernelUnavailable on Vulkan, got {other:?}"),
            (_, k) => {
                let k = k?;
                let x: Vec<i64> = (0..5000i64).map(|i| (i * 7919 % 4001 - 2000) << 33).collect();
                let dx = ctx.alloc_upload(&x)?;
                let (mut si, mut su, mut sf) =
                    (ctx.alloc_zeros::<i64>(1)?, ctx.alloc_zeros::<u64>(2)?, ctx.alloc_zeros::<f64>(1)?);
                ctx.launch(&k, LaunchConfig::for_elems(x.len()), (&dx, &mut si, &mut su, &mut sf))?;
                let want_i = x.iter().fold(0i64, |a, &v| a.wrapping_add(v));
                let mut want_u = [0u64; 2];
                for (i, &v) in x.iter().enumerate() {
                    want_u[i % 2] = want_u[i % 2].wrapping_add(v as u64);
                }
                // Multiples of 0.5 add exactly in any order.
                let want_f: f64 = x.iter().map(|v| ((v >> 33) % 64) as f64 * 0.5).sum();
                assert_eq!(si.download()?, [want_i]);
                assert_eq!(su.download()?, want_u);
                assert_eq!(sf.download()?, [want_f]);
            }
        }
        Ok(())
    }
}
