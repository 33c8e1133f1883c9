//! The race checker of `#[kernel]` launches on the CPU backend
//! (`CpuBackend::with_kernel_racecheck`, `GPU_KERNEL_RACECHECK=1`): two threads of a launch
//! touching one element, one writing, not both atomically, with no barrier (one block) or
//! launch boundary (two blocks) between them, fail the launch with `KernelFailed` naming
//! the kernel, the array, the index and both threads; kernels without races run as before.

use gpukit::cpu::{CpuBackend, CpuContext};
use gpukit::{kernel, LaunchConfig};

use super::faults::expect_fault;

/// A CPU context with the race checker on or off, whatever `GPU_KERNEL_RACECHECK` says.
fn cpu(racecheck: bool) -> gpukit::Result<CpuContext> {
    CpuContext::new(CpuBackend::new()?.with_kernel_racecheck(racecheck))
}

/// Every thread adds one to `hits[0]` with a plain read and write: a race on any GPU.
#[kernel]
pub(super) fn bump(hits: &mut [u32]) {
    hits[0] += 1;
}

/// The same count with an atomic add: no race.
#[kernel]
pub(super) fn bump_atomic(hits: &mut [u32]) {
    atomic_add(&mut hits[0], 1);
}

/// An inclusive scan of each block of 256 (Hillis and Steele) in shared memory: each round
/// reads a neighbour's partial sum, waits, then adds it to its own.
#[kernel]
pub(super) fn block_scan(x: &[u32], out: &mut [u32]) {
    let tile = shared::<u32, 256>();
    let t = thread_x();
    let i = global_x();
    tile[t] = if i < x.len() { x[i] } else { 0 };
    barrier();
    let mut off = 1usize;
    while off < 256 {
        let v = if t >= off { tile[t - off] } else { 0 };
        barrier();
        tile[t] += v;
        barrier();
        off *= 2;
    }
    if i < out.len() {
        out[i] = tile[t];
    }
}

/// [`block_scan`] without the barrier between the read of the neighbour's sum and the
/// write of its own: a thread may read a sum its neighbour has already updated.
#[kernel]
pub(super) fn block_scan_racy(x: &[u32], out: &mut [u32]) {
    let tile = shared::<u32, 256>();
    let t = thread_x();
    let i = global_x();
    tile[t] = if i < x.len() { x[i] } else { 0 };
    barrier();
    let mut off = 1usize;
    while off < 256 {
        let v = if t >= off { tile[t - off] } else { 0 };
        tile[t] += v;
        barrier();
        off *= 2;
    }
    if i < out.len() {
        out[i] = tile[t];
    }
}

/// Each thread writes its element, then reads the element of the thread one block on:
/// barriers cannot order threads of different blocks.
#[kernel]
pub(super) fn next_block(x: &mut [f32], out: &mut [f32]) {
    let i = global_x();
    let n = x.len();
    if i < n {
        x[i] = i as f32;
    }
    barrier();
    let j = (i + block_dim_x()) % n;
    if i < n {
        out[i] = x[j];
    }
}

fn scan_ref(x: &[u32]) -> Vec<u32> {
    x.chunks(256)
        .flat_map(|c| {
            c.iter().scan(0u32, |s, v| {
                *s = s.wrapping_add(*v);
                Some(*s)
            })
        })
        .collect()
}

#[test]
fn kernel_racecheck_reports_a_racy_increment_and_not_an_atomic_one() -> gpukit::Result<()> {
    // Without the checker the twin's one-after-another order gives a plausible answer.
    let ctx = cpu(false)?;
    let mut hits = ctx.alloc_zeros::<u32>(1)?;
    ctx.launch(
        &ctx.kernel(bump())?,
        LaunchConfig::for_elems(16384),
        (&mut hits,),
    )?;
    ctx.sync()?;
    assert_eq!(hits.download()?, [16384]);

    let ctx = cpu(true)?;
    let mut hits = ctx.alloc_zeros::<u32>(1)?;
    let s = ctx.create_stream()?;
    s.launch(
        &ctx.kernel(bump())?,
        LaunchConfig::for_elems(16384),
        (&mut hits,),
    )?;
    // Thread 0's write, then thread 1's read of the same element.
    expect_fault(
        s.sync(),
        "bump",
        "data race on `hits`[0]: thread (0, 0, 0) of block (0, 0, 0) writes it, and thread \
         (1, 0, 0) of block (0, 0, 0) reads it, with no barrier() between them",
    );
    s.sync()?; // reported once
    let atomic = ctx.kernel(bump_atomic())?;
    let mut hits = ctx.alloc_zeros::<u32>(1)?;
    ctx.launch(&atomic, LaunchConfig::for_elems(16384), (&mut hits,))?;
    ctx.sync()?;
    assert_eq!(hits.download()?, [16384]);
    Ok(())
}

#[test]
fn kernel_racecheck_reports_a_scan_missing_a_barrier_and_passes_the_correct_one(
) -> gpukit::Result<()> {
    let x: Vec<u32> = (0..4096u32)
        .map(|i| i.wrapping_mul(2654435761) % 97)
        .collect();
    let want = scan_ref(&x);
    for racecheck in [false, true] {
        let ctx = cpu(racecheck)?;
        let dx = ctx.alloc_upload(&x)?;
        let mut out = ctx.alloc_zeros::<u32>(x.len())?;
        let cfg = LaunchConfig::new([16, 1, 1], [256, 1, 1]);
        ctx.launch(&ctx.kernel(block_scan())?, cfg, (&dx, &mut out))?;
        ctx.sync()?;
        assert_eq!(out.download()?, want, "racecheck {racecheck}");

        ctx.launch(&ctx.kernel(block_scan_racy())?, cfg, (&dx, &mut out))?;
        let r = ctx.sync();
        if racecheck {
            // In the first round thread 1 reads thread 0's element after thread 0 has
            // written it, with no barrier between.
            expect_fault(
                r,
                "block_scan_racy",
                "data race on `tile`[0]: thread (0, 0, 0) of block (0, 0, 0) writes it, and \
                 thread (1, 0, 0) of block (0, 0, 0) reads it, with no barrier() between them",
            );
        } else {
            // Unchecked, the twin gives a wrong answer and says nothing.
            r?;
            assert_ne!(out.download()?, want);
        }
    }
    Ok(())
}

#[test]
fn kernel_racecheck_reports_threads_of_different_blocks() -> gpukit::Result<()> {
    let ctx = cpu(true)?;
    let mut x = ctx.alloc_zeros::<f32>(512)?;
    let mut out = ctx.alloc_zeros::<f32>(512)?;
    let cfg = LaunchConfig::new([2, 1, 1], [256, 1, 1]);
    ctx.launch(&ctx.kernel(next_block())?, cfg, (&mut x, &mut out))?;
    // Block 0's thread 0 reads x[256] before block 1 writes it.
    expect_fault(
        ctx.sync(),
        "next_block",
        "data race on `x`[256]: thread (0, 0, 0) of block (0, 0, 0) reads it, and thread \
         (0, 0, 0) of block (1, 0, 0) writes it, in different blocks",
    );
    // One block: the barrier orders the write and the read.
    let mut x = ctx.alloc_zeros::<f32>(256)?;
    let mut out = ctx.alloc_zeros::<f32>(256)?;
    ctx.launch(
        &ctx.kernel(next_block())?,
        LaunchConfig::new([1, 1, 1], [256, 1, 1]),
        (&mut x, &mut out),
    )?;
    ctx.sync()?;
    let want: Vec<f32> = (0..256).map(|i| i as f32).collect();
    assert_eq!(out.download()?, want);
    Ok(())
}

#[test]
fn kernel_racecheck_leaves_the_language_kernels_alone() -> gpukit::Result<()> {
    // Atomics of every kind from every thread, and shared memory behind barriers.
    let ctx = cpu(true)?;
    let x: Vec<i32> = (0..1000).map(|i| (i * 37 % 101) - 50).collect();
    let dx = ctx.alloc_upload(&x)?;
    let mut counts = ctx.alloc_zeros::<u32>(5)?;
    let mut ext = ctx.alloc_upload(&[i32::MAX, i32::MIN, 0])?;
    let mut winner = ctx.alloc_zeros::<u32>(1)?;
    let mut total = ctx.alloc_zeros::<f32>(1)?;
    let k = ctx.kernel(super::language::atomics())?;
    ctx.launch(
        &k,
        LaunchConfig::for_elems(x.len()),
        (&dx, &mut counts, &mut ext, &mut winner, &mut total),
    )?;
    ctx.sync()?;
    let ext = ext.download()?;
    assert_eq!(ext[0], *x.iter().min().unwrap_or(&0));
    assert_eq!(ext[1], *x.iter().max().unwrap_or(&0));
    Ok(())
}

#[test]
fn kernel_racecheck_follows_the_environment() {
    // CI runs the kernel tests once more with GPU_KERNEL_RACECHECK=1.
    let on = CpuBackend::new().map(|b| b.kernel_racecheck());
    match std::env::var("GPU_KERNEL_RACECHECK").as_deref() {
        Ok("1") => assert!(matches!(on, Ok(true))),
        Err(_) | Ok("0") => assert!(matches!(on, Ok(false))),
        Ok(_) => {}
    }
}
