//! gpukit-core's ordering tracker under the chaos schedule: each way one use of memory must
//! wait for another (a read after a write on another stream, a write after reads, a write
//! after a write, memory reused from the pool by another stream, a host read after device
//! work, disjoint and overlapping views, a copy between two logical devices) gives the
//! sequential program's results with no race reported, under several seeds. A tracker that
//! dropped any of these waits would give wrong results here or be reported by the race
//! checker (this file is what `cargo xtask mutants --area tracker` runs).

use std::sync::Mutex;

use gpukit::cpu::chaos::take_races;
use gpukit::cpu::{CpuBackend, CpuContext, Schedule};
use gpukit_core::{Result, Stream};

const SEEDS: u64 = 4;
const N: usize = 3000;

/// Race reports are process-wide: these tests take turns.
static TURN: Mutex<()> = Mutex::new(());

fn context(seed: u64) -> CpuContext {
    let backend = CpuBackend::new()
        .expect("the CPU backend")
        .with_schedule(Schedule::Chaos { seed });
    CpuContext::new(backend).expect("a context")
}

/// Runs `scenario` on a chaos context with two extra streams under each seed; it returns
/// the values it read back, which must equal `want`, and no race may be reported.
fn under_chaos(
    name: &str,
    want: &[f32],
    scenario: impl Fn(&CpuContext, &Stream<CpuBackend>, &Stream<CpuBackend>) -> Result<Vec<f32>>,
) {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let ctx = context(seed);
        let (s1, s2) = (ctx.create_stream().unwrap(), ctx.create_stream().unwrap());
        let got = scenario(&ctx, &s1, &s2);
        let synced = ctx.sync();
        let races = take_races();
        assert!(races.is_empty(), "{name}, seed {seed}: {}", races[0]);
        let got = got.unwrap_or_else(|e| panic!("{name}, seed {seed}: {e}"));
        synced.unwrap_or_else(|e| panic!("{name}, seed {seed}: {e}"));
        assert_eq!(got.len(), want.len(), "{name}, seed {seed}");
        let wrong = got.iter().zip(want).filter(|(a, b)| a != b).count();
        assert_eq!(wrong, 0, "{name}, seed {seed}: {wrong} wrong elements");
    }
}

fn filled(v: f32) -> Vec<f32> {
    vec![v; N]
}

#[test]
fn a_read_waits_for_a_write_on_another_stream() {
    under_chaos("read after write", &filled(3.0), |ctx, s1, s2| {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        let mut b = ctx.alloc_zeros::<f32>(N)?;
        s1.fill(&mut a, 1.0)?;
        s1.add_scalar_inplace(&mut a, 2.0)?;
        s2.copy(&a, &mut b)?;
        b.download()
    });
}

#[test]
fn a_write_waits_for_reads_on_other_streams() {
    under_chaos("write after reads", &filled(1.0), |ctx, s1, s2| {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        let mut b = ctx.alloc_zeros::<f32>(N)?;
        let mut c = ctx.alloc_zeros::<f32>(N)?;
        s1.fill(&mut a, 1.0)?;
        s1.sync()?;
        // Two reads of `a` on two streams, then a write of it on a third.
        s1.copy(&a, &mut b)?;
        s2.copy(&a, &mut c)?;
        ctx.default_stream().fill(&mut a, 9.0)?;
        let (b, c) = (b.download()?, c.download()?);
        assert_eq!(b, c, "both reads saw the same data");
        Ok(b)
    });
}

#[test]
fn a_write_waits_for_a_write_on_another_stream() {
    under_chaos("write after write", &filled(5.0), |ctx, s1, s2| {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        s1.fill(&mut a, 1.0)?;
        s2.fill(&mut a, 5.0)?;
        a.download()
    });
}

#[test]
fn memory_reused_from_the_pool_waits_for_its_last_owner() {
    under_chaos("pool reuse", &filled(7.0), |ctx, s1, s2| {
        let mut out = ctx.alloc_zeros::<f32>(N)?;
        {
            let mut a = ctx.alloc_zeros::<f32>(N)?;
            s1.fill(&mut a, 2.0)?;
            s1.copy(&a, &mut out)?;
            // Dropped while its uses may still be queued: its block goes back to the pool.
        }
        // Likely the same block, written on another stream.
        let mut b = ctx.alloc::<f32>(N)?;
        s2.fill(&mut b, 5.0)?;
        s2.add_inplace(&mut b, &out)?;
        b.download()
    });
}

#[test]
fn a_host_read_waits_for_device_work_on_any_stream() {
    under_chaos("host read", &filled(4.0), |ctx, s1, _| {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        s1.fill(&mut a, 2.0)?;
        s1.scale(2.0, &mut a)?;
        // Read through the default stream's download, not s1's.
        a.download()
    });
}

#[test]
fn disjoint_views_go_ahead_and_overlapping_ones_wait() {
    let mut want = vec![1.0; N / 2];
    want.extend(vec![2.0; N - N / 2]);
    under_chaos("views", &want, |ctx, s1, s2| {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        {
            let (mut lo, mut hi) = a.split_at_mut(N / 2)?;
            s1.fill(&mut lo, 1.0)?;
            s2.fill(&mut hi, 7.0)?;
        }
        // Overlaps the upper half, written on s2 just before.
        let mut upper = a.slice_mut(N / 2..)?;
        s1.add_scalar_inplace(&mut upper, -5.0)?;
        a.download()
    });
}

#[test]
fn a_copy_between_logical_devices_waits_for_the_source_and_the_destination() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let dev = |n| {
            let backend = CpuBackend::device(n)
                .expect("a logical device")
                .with_schedule(Schedule::Chaos { seed });
            CpuContext::new(backend).expect("a context")
        };
        let (c0, c1) = (dev(0), dev(1));
        let s0 = c0.create_stream().unwrap();
        let s1 = c1.create_stream().unwrap();
        let mut a = c0.alloc_zeros::<f32>(N).unwrap();
        let mut b = c1.alloc_zeros::<f32>(N).unwrap();
        s0.fill(&mut a, 3.0).unwrap();
        s1.fill(&mut b, 8.0).unwrap();
        a.copy_to_peer(&mut b).unwrap();
        s1.scale(2.0, &mut b).unwrap();
        let got = b.download().unwrap();
        let races = take_races();
        assert!(races.is_empty(), "seed {seed}: {}", races[0]);
        assert!(got.iter().all(|&x| x == 6.0), "seed {seed}");
    }
}

/// A CPU kernel that writes `out` once `GATE` opens: work on a stream that stays
/// unfinished until the test says.
static GATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn gated() -> gpukit_core::KernelSpec<(gpukit_core::Out<f32>,)> {
    gpukit_core::KernelSpec::<(gpukit_core::Out<f32>,)>::named("gated").cpu(|t, (out,)| {
        while !GATE.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::yield_now();
        }
        if t.x() < out.len() {
            out[t.x()] = 1.0;
        }
    })
}

#[test]
fn a_capture_refuses_to_wait_for_other_streams_and_accepts_its_own_or_finished_work() {
    use std::sync::atomic::Ordering::Release;
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let ctx = context(seed);
        let (s1, s2) = (ctx.create_stream().unwrap(), ctx.create_stream().unwrap());
        let gate = ctx.kernel(gated()).unwrap();
        let mut a = ctx.alloc_zeros::<f32>(N).unwrap();
        let mut b = ctx.alloc_zeros::<f32>(N).unwrap();
        GATE.store(false, Release);
        s1.launch(&gate, gpukit_core::LaunchConfig::for_elems(N), (&mut a,))
            .unwrap();
        // Reading `a` would have to wait for s1's unfinished write: refused.
        let r = s2.capture(|s| s.copy(&a, &mut b));
        // Opened before any assertion, so a failure cannot leave s1 blocked.
        GATE.store(true, Release);
        assert!(
            matches!(r, Err(gpukit_core::Error::CaptureViolation { .. })),
            "seed {seed}: {r:?}"
        );
        // Work of the capturing stream itself, unfinished, is in order: accepted.
        s2.fill(&mut b, 2.0).unwrap();
        let g = s2.capture(|s| s.scale(3.0, &mut b)).unwrap();
        // Once s1's write has finished, reading `a` needs no wait: accepted.
        s1.sync().unwrap();
        let h = s2.capture(|s| s.add_inplace(&mut b, &a)).unwrap();
        g.launch(&s2).unwrap();
        h.launch(&s2).unwrap();
        s2.sync().unwrap();
        let got = b.download().unwrap();
        assert!(got.iter().all(|&x| x == 7.0), "seed {seed}");
        assert!(take_races().is_empty(), "seed {seed}");
    }
}

#[test]
fn host_reads_of_an_array_a_capture_wrote_are_refused_until_it_ends() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    let ctx = context(0);
    let s = ctx.create_stream().unwrap();
    let mut a = ctx.alloc_zeros::<f32>(N).unwrap();
    let mut during = None;
    let graph = s
        .capture(|s| {
            s.fill(&mut a, 4.0)?;
            during = Some(a.download());
            Ok(())
        })
        .unwrap();
    assert!(
        matches!(
            during,
            Some(Err(gpukit_core::Error::CaptureViolation { .. }))
        ),
        "{during:?}"
    );
    // The capture has ended: host reads are allowed again (of what ran: nothing yet).
    assert!(a.download().unwrap().iter().all(|&x| x == 0.0));
    graph.launch(&s).unwrap();
    assert!(a.download().unwrap().iter().all(|&x| x == 4.0));
    assert!(take_races().is_empty());
}

#[test]
fn unified_memory_on_the_host_waits_for_device_work_on_any_stream() {
    under_chaos("unified host access", &filled(12.0), |ctx, s1, s2| {
        let mut u = ctx.alloc_unified::<f32>(N)?;
        s1.fill(&mut u, 3.0)?;
        s1.scale(2.0, &mut u)?;
        let seen = u.host()?.to_vec();
        assert!(
            seen.iter().all(|&x| x == 6.0),
            "host() waited for s1's writes"
        );
        let mut b = ctx.alloc_zeros::<f32>(N)?;
        s2.copy(&u, &mut b)?;
        // Writing on the host must wait for s2's read of it.
        u.host_mut()?.iter_mut().for_each(|x| *x = 100.0);
        let copied = b.download()?;
        assert!(
            copied.iter().all(|&x| x == 6.0),
            "s2 read before the host wrote"
        );
        s1.fill(&mut u, 12.0)?;
        Ok(u.host()?.to_vec())
    });
}

#[test]
fn memory_read_on_two_streams_is_reused_only_after_both_reads() {
    let mut want = filled(2.0);
    want.extend(filled(2.0));
    under_chaos(
        "pool reuse after reads on two streams",
        &want,
        |ctx, s1, s2| {
            let mut b = ctx.alloc_zeros::<f32>(N)?;
            let mut c = ctx.alloc_zeros::<f32>(N)?;
            {
                let mut a = ctx.alloc_zeros::<f32>(N)?;
                s1.fill(&mut a, 2.0)?;
                s1.sync()?;
                // Read on two streams, then dropped: its block's next owner waits for both.
                s2.copy(&a, &mut b)?;
                ctx.default_stream().copy(&a, &mut c)?;
            }
            let mut x = ctx.alloc::<f32>(N)?;
            s1.fill(&mut x, 9.0)?;
            let mut got = b.download()?;
            got.extend(c.download()?);
            Ok(got)
        },
    );
}

#[test]
fn dropped_arrays_give_their_memory_back_to_the_pool() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let ctx = context(0);
    let s = ctx.create_stream().unwrap();
    let before = ctx.memory_stats();
    for _ in 0..3 {
        let mut a = ctx.alloc_zeros::<f32>(N).unwrap();
        s.fill(&mut a, 1.0).unwrap();
    }
    ctx.sync().unwrap();
    let after = ctx.memory_stats();
    assert_eq!(after.bytes_in_use, before.bytes_in_use, "{after:?}");
    assert_eq!(after.frees - before.frees, 3, "{after:?}");
    assert!(
        after.pool_hits > before.pool_hits,
        "the block was reused: {after:?}"
    );
    take_races();
}

#[test]
fn raw_access_gets_the_address_after_the_queued_work() {
    under_chaos("raw access", &filled(5.0), |ctx, s1, s2| {
        let mut a = ctx.alloc_zeros::<f32>(N)?;
        s1.fill(&mut a, 2.0)?;
        // SAFETY: the closure reads and writes the array's N elements at the address it is
        // given, on the host, before it returns (the CPU backend's raw stream is `None`).
        unsafe {
            s2.with_raw_mut(&mut a, |ptr, _stream| {
                let Some(gpukit_core::RawPtr::Host(p)) = ptr else {
                    panic!("no host address: {ptr:?}");
                };
                let p = p.cast::<f32>();
                for i in 0..N {
                    *p.add(i) += 3.0;
                }
            })
        }?;
        a.download()
    });
}

#[test]
fn a_gather_across_logical_devices_fills_each_part_after_its_source() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let ctxs: Vec<CpuContext> = (0..3)
            .map(|r| {
                let backend = CpuBackend::device(r)
                    .unwrap()
                    .with_schedule(Schedule::Chaos { seed });
                CpuContext::new(backend).unwrap()
            })
            .collect();
        let streams: Vec<_> = ctxs.iter().map(|c| c.create_stream().unwrap()).collect();
        let mut src = Vec::new();
        for (r, (c, s)) in ctxs.iter().zip(&streams).enumerate() {
            let mut a = c.alloc_zeros::<f32>(N).unwrap();
            s.fill(&mut a, r as f32 + 1.0).unwrap();
            src.push(a);
        }
        let mut dst: Vec<_> = ctxs
            .iter()
            .map(|c| c.alloc_zeros::<f32>(3 * N).unwrap())
            .collect();
        gpukit_core::collective::all_gather_into(&streams, &src, &mut dst).unwrap();
        for d in &dst {
            let got = d.download().unwrap();
            for (k, part) in got.chunks(N).enumerate() {
                assert!(
                    part.iter().all(|&x| x == k as f32 + 1.0),
                    "seed {seed}, part {k}"
                );
            }
        }
        assert!(take_races().is_empty(), "seed {seed}");
    }
}

#[test]
fn memory_passed_through_an_unused_owner_keeps_its_earlier_uses() {
    let mut want = filled(1.0);
    want.extend(filled(1.0));
    want.extend(filled(5.0));
    under_chaos(
        "pool reuse through an unused owner",
        &want,
        |ctx, s1, s2| {
            let mut b = ctx.alloc_zeros::<f32>(N)?;
            let mut c = ctx.alloc_zeros::<f32>(N)?;
            {
                let mut a = ctx.alloc_zeros::<f32>(N)?;
                s1.fill(&mut a, 1.0)?;
                s1.sync()?;
                s2.copy(&a, &mut b)?;
                ctx.default_stream().copy(&a, &mut c)?;
            }
            // The block's next owner never uses it: its uses pass on to the owner after.
            drop(ctx.alloc::<f32>(N)?);
            let mut x = ctx.alloc::<f32>(N)?;
            s1.fill(&mut x, 5.0)?;
            let mut got = b.download()?;
            got.extend(c.download()?);
            got.extend(x.download()?);
            Ok(got)
        },
    );
}

#[test]
fn an_import_keeps_its_producer_until_the_work_on_it_is_done() {
    under_chaos("a DLPack import", &filled(1.0), |ctx, _, s2| {
        let a = ctx.alloc_upload(&filled(1.0))?;
        let tensor = ctx.default_stream().to_dlpack(&a, &[N], false)?;
        drop(a);
        // SAFETY: our own export, live, handed over once.
        let imported = unsafe { ctx.from_dlpack::<f32>(tensor.into_raw()) }?;
        let mut out = ctx.alloc_zeros::<f32>(N)?;
        s2.copy(imported.array(), &mut out)?;
        drop(imported);
        // Memory freed too early would be this array's: the copy above would read it.
        let mut reuse = ctx.alloc::<f32>(N)?;
        s2.fill(&mut reuse, 8.0)?;
        out.download()
    });
}

#[test]
fn a_capture_accepts_reused_memory_whose_earlier_owner_has_finished() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let ctx = context(seed);
        let (s1, s2) = (ctx.create_stream().unwrap(), ctx.create_stream().unwrap());
        {
            let mut a = ctx.alloc_zeros::<f32>(N).unwrap();
            s1.fill(&mut a, 1.0).unwrap();
        }
        ctx.sync().unwrap();
        // Likely the same block: its earlier owner's use on s1 has finished, so a capture on
        // s2 may use it without waiting for anything.
        let mut b = ctx.alloc::<f32>(N).unwrap();
        let graph = s2.capture(|s| s.fill(&mut b, 4.0));
        assert!(graph.is_ok(), "seed {seed}: {graph:?}");
        graph.unwrap().launch(&s2).unwrap();
        assert!(
            b.download().unwrap().iter().all(|&x| x == 4.0),
            "seed {seed}"
        );
        assert!(take_races().is_empty(), "seed {seed}");
    }
}
