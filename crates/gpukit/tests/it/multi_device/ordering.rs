//! Collectives and peer copies ordered with the rest of each context's work: after writes
//! queued on other streams of the ranks' contexts, and before later writes, with nothing
//! but the library's own tracking in between. A stream is kept busy by a kernel that
//! sleeps in front of the work that must be waited for (or that must not be overtaken),
//! and each test runs a few dozen rounds, so that a missing wait shows as a wrong value.

use super::*;

use crate::common::delay_spec;
use gpukit::{GpuArray, Kernel, LaunchConfig, Stream};

/// How long the kernel in front sleeps, in microseconds: far longer than queuing the rest
/// of a round takes, short enough that the rounds stay fast.
const DELAY_US: u32 = 2_000;
/// Rounds per test.
const ROUNDS: usize = 30;
/// Elements per array: past one chunk per rank, and not divisible by 3.
const LEN: usize = 4099;

/// Each context's `delay` kernel, and a stream of its own besides the default one.
struct Rank {
    ctx: Context,
    side: Stream,
    delay: Kernel<(u32,)>,
}

fn ranks(n: usize) -> Result<Vec<Rank>> {
    cpus(n)?
        .into_iter()
        .map(|ctx| {
            Ok(Rank {
                side: ctx.create_stream()?,
                delay: ctx.kernel(delay_spec())?,
                ctx,
            })
        })
        .collect()
}

impl Rank {
    /// Keeps `stream` (of this rank's context) busy for [`DELAY_US`].
    fn stall(&self, stream: &Stream) -> Result<()> {
        stream.launch(&self.delay, LaunchConfig::linear(1, 1), (DELAY_US,))
    }
}

fn contexts(ranks: &[Rank]) -> Vec<Context> {
    ranks.iter().map(|r| r.ctx.clone()).collect()
}

/// An array of `len` zeros on each rank.
fn zeros(ranks: &[Rank], len: usize) -> Result<Vec<GpuArray<f32>>> {
    ranks
        .iter()
        .map(|r| r.ctx.alloc_zeros::<f32>(len))
        .collect()
}

/// Asserts that every element of every array is `want`.
#[track_caller]
fn all_equal(arrays: &[GpuArray<f32>], want: f32, what: &str) -> Result<()> {
    for (r, a) in arrays.iter().enumerate() {
        let got = a.download()?;
        if let Some(i) = got.iter().position(|&x| x != want) {
            panic!(
                "{what}: rank {r} element {i} is {}, expected {want}",
                got[i]
            );
        }
    }
    Ok(())
}

#[test]
fn a_collective_waits_for_writes_on_other_streams() -> Result<()> {
    let ranks = ranks(3)?;
    let comm = communicator(&contexts(&ranks))?;
    let mut a = zeros(&ranks, LEN)?;
    let mut dst = zeros(&ranks, LEN)?;
    // Reduce-scatter parts: three of them fill all but the last element of `a`.
    let part = LEN / 3;
    let mut parts = zeros(&ranks, part)?;
    for round in 0..ROUNDS {
        // Each rank's value, written on its side stream behind a sleep on one rank (a
        // different one each round).
        for (r, (rank, x)) in ranks.iter().zip(&mut a).enumerate() {
            if r == round % 3 {
                rank.stall(&rank.side)?;
            }
            rank.side.fill(x, (round + r + 1) as f32)?;
        }
        let sum = (3 * round + 6) as f32;
        let what = format!("round {round}");
        match round % 3 {
            0 => {
                comm.all_reduce(&mut a, CollectiveOp::Sum)?;
                all_equal(&a, sum, &format!("all_reduce, {what}"))?;
            }
            1 => {
                comm.all_reduce_into(&a, &mut dst, CollectiveOp::Sum)?;
                all_equal(&dst, sum, &format!("all_reduce_into, {what}"))?;
            }
            _ => {
                let src = a
                    .iter()
                    .map(|x| x.slice(..3 * part))
                    .collect::<Result<Vec<_>>>()?;
                comm.reduce_scatter_into(&src, &mut parts, CollectiveOp::Sum)?;
                all_equal(&parts, sum, &format!("reduce_scatter_into, {what}"))?;
            }
        }
    }
    Ok(())
}

#[test]
fn broadcast_and_gather_wait_for_writes_on_other_streams() -> Result<()> {
    let ranks = ranks(3)?;
    let comm = communicator(&contexts(&ranks))?;
    let mut a = zeros(&ranks, LEN)?;
    let mut gathered = zeros(&ranks, 3 * LEN)?;
    for round in 0..ROUNDS {
        let root = round % 3;
        for (r, (rank, x)) in ranks.iter().zip(&mut a).enumerate() {
            if r == root {
                rank.stall(&rank.side)?;
            }
            rank.side.fill(x, (round * 10 + r) as f32)?;
        }
        if round % 2 == 0 {
            comm.broadcast(root, &mut a)?;
            all_equal(
                &a,
                (round * 10 + root) as f32,
                &format!("broadcast, round {round}"),
            )?;
        } else {
            comm.all_gather_into(&a, &mut gathered)?;
            let want: Vec<f32> = (0..3)
                .flat_map(|r| std::iter::repeat_n((round * 10 + r) as f32, LEN))
                .collect();
            for (r, g) in gathered.iter().enumerate() {
                assert_eq!(
                    g.download()?,
                    want,
                    "all_gather_into, round {round}: rank {r}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn later_writes_on_other_streams_wait_for_a_collective() -> Result<()> {
    let ranks = ranks(3)?;
    let comm = communicator(&contexts(&ranks))?;
    let mut src = zeros(&ranks, LEN)?;
    let mut dst = zeros(&ranks, LEN)?;
    for round in 0..ROUNDS {
        for (r, (rank, x)) in ranks.iter().zip(&mut src).enumerate() {
            rank.ctx.fill(x, (round + r) as f32)?;
        }
        // The collective's reads (peer copies by every rank) queue behind a sleep on every
        // default stream; the sources are overwritten at once on the side streams.
        for rank in &ranks {
            rank.stall(rank.ctx.default_stream())?;
        }
        comm.all_reduce_into(&src, &mut dst, CollectiveOp::Sum)?;
        for (rank, x) in ranks.iter().zip(&mut src) {
            rank.side.fill(x, 9.0)?;
        }
        all_equal(&dst, (3 * round + 3) as f32, &format!("round {round}"))?;
        all_equal(&src, 9.0, &format!("round {round}: the sources"))?;
    }
    Ok(())
}

#[test]
fn a_peer_copy_waits_for_writes_on_other_streams() -> Result<()> {
    let ranks = ranks(2)?;
    let (from, to) = (&ranks[0], &ranks[1]);
    let mut src = from.ctx.alloc_zeros::<f32>(LEN)?;
    let mut dst = to.ctx.alloc_zeros::<f32>(LEN)?;
    for round in 0..ROUNDS {
        // The source written on its context's side stream behind a sleep.
        from.stall(&from.side)?;
        from.side.fill(&mut src, round as f32)?;
        to.ctx.copy_peer(&src, &mut dst)?;
        assert!(
            dst.download()?.iter().all(|&x| x == round as f32),
            "src, round {round}"
        );
        // The destination written on its context's side stream behind a sleep: the copy
        // comes after it.
        from.ctx.fill(&mut src, -(round as f32))?;
        to.stall(&to.side)?;
        to.side.fill(&mut dst, 0.5)?;
        to.ctx.copy_peer(&src, &mut dst)?;
        assert!(
            dst.download()?.iter().all(|&x| x == -(round as f32)),
            "dst, round {round}"
        );
    }
    Ok(())
}

#[test]
fn a_write_after_a_peer_copy_does_not_overtake_it() -> Result<()> {
    let ranks = ranks(3)?;
    let (from, to, third) = (&ranks[0], &ranks[1], &ranks[2]);
    let mut src = from.ctx.alloc_zeros::<f32>(LEN)?;
    let mut dst = to.ctx.alloc_zeros::<f32>(LEN)?;
    let mut onward = third.ctx.alloc_zeros::<f32>(LEN)?;
    for round in 0..ROUNDS {
        let old = round as f32;
        from.ctx.fill(&mut src, old)?;
        // The copy waits behind a sleep on the destination's stream; the source is
        // overwritten at once, on its default stream or on its side stream.
        to.stall(to.ctx.default_stream())?;
        to.ctx.copy_peer(&src, &mut dst)?;
        // And onward to a third device, from the copy still in flight.
        third.ctx.copy_peer(&dst, &mut onward)?;
        if round % 2 == 0 {
            from.ctx.fill(&mut src, 9.0)?;
        } else {
            from.side.fill(&mut src, 9.0)?;
        }
        // A write of the destination on its side stream comes after the onward copy's
        // read of it.
        to.side.fill(&mut dst, -1.0)?;
        assert!(
            onward.download()?.iter().all(|&x| x == old),
            "onward, round {round}"
        );
        assert!(
            dst.download()?.iter().all(|&x| x == -1.0),
            "dst, round {round}"
        );
        assert!(
            src.download()?.iter().all(|&x| x == 9.0),
            "src, round {round}"
        );
    }
    Ok(())
}

#[test]
fn a_peer_copy_sees_a_write_queued_before_its_context_handle_was_dropped() -> Result<()> {
    let ranks = ranks(1)?;
    let to = &ranks[0];
    for round in 0..ROUNDS / 3 {
        let owner = Context::new(DeviceSpec::Cpu(Some(1)))?;
        let delay = owner.kernel(delay_spec())?;
        let mut src = owner.alloc_zeros::<f32>(LEN)?;
        owner.launch(&delay, LaunchConfig::linear(1, 1), (DELAY_US,))?;
        owner.fill(&mut src, round as f32 + 0.5)?;
        drop(delay);
        drop(owner);
        let mut dst = to.ctx.alloc_zeros::<f32>(LEN)?;
        to.ctx.copy_peer(&src, &mut dst)?;
        assert!(
            dst.download()?.iter().all(|&x| x == round as f32 + 0.5),
            "round {round}"
        );
    }
    Ok(())
}

#[test]
fn a_source_freed_during_a_peer_copy_is_not_reused_before_it() -> Result<()> {
    let ranks = ranks(2)?;
    let (from, to) = (&ranks[0], &ranks[1]);
    let mut dst = to.ctx.alloc_zeros::<f32>(LEN)?;
    for round in 0..ROUNDS {
        let src = from.ctx.alloc_upload(&vec![round as f32; LEN])?;
        to.stall(to.ctx.default_stream())?;
        to.ctx.copy_peer(&src, &mut dst)?;
        // The source's block goes back to its context's pool while the copy waits, and the
        // next array of its size there takes it and is overwritten at once, on one stream
        // or the other.
        drop(src);
        let hits = from.ctx.memory_stats().pool_hits;
        let mut reuse = from.ctx.alloc::<f32>(LEN)?;
        assert_eq!(
            from.ctx.memory_stats().pool_hits,
            hits + 1,
            "the block is reused"
        );
        let stream = if round % 2 == 0 {
            from.ctx.default_stream()
        } else {
            &from.side
        };
        stream.fill(&mut reuse, -7.0)?;
        all_equal(
            std::slice::from_ref(&dst),
            round as f32,
            &format!("round {round}"),
        )?;
    }
    Ok(())
}

#[test]
fn a_collectives_temporaries_are_not_reused_before_its_copies_ran() -> Result<()> {
    let ranks = ranks(2)?;
    let comm = communicator(&contexts(&ranks))?;
    let mut bufs = zeros(&ranks, LEN)?;
    // The part of the arrays rank 0 reduces, into a temporary of its own (and a second one
    // for the other rank's part, copied over).
    let part = LEN.div_ceil(2);
    for round in 0..ROUNDS {
        for (r, (rank, x)) in ranks.iter().zip(&mut bufs).enumerate() {
            rank.ctx.fill(x, (round + r) as f32)?;
        }
        // Rank 1's copies of rank 0's reduced part wait behind a sleep; the temporaries
        // are dropped when the call returns, and rank 0 takes their blocks at once.
        ranks[1].stall(ranks[1].ctx.default_stream())?;
        comm.all_reduce(&mut bufs, CollectiveOp::Sum)?;
        let ctx0 = &ranks[0].ctx;
        let hits = ctx0.memory_stats().pool_hits;
        let mut reuse = [ctx0.alloc::<f32>(part)?, ctx0.alloc::<f32>(part)?];
        assert_eq!(
            ctx0.memory_stats().pool_hits,
            hits + 2,
            "the blocks are reused"
        );
        ctx0.fill(&mut reuse[0], -7.0)?;
        ranks[0].side.fill(&mut reuse[1], -7.0)?;
        all_equal(&bufs, (2 * round + 1) as f32, &format!("round {round}"))?;
    }
    Ok(())
}

#[test]
fn a_communicator_on_other_streams_orders_with_the_default_streams() -> Result<()> {
    // The ranks run on their side streams; the inputs are written on the default streams
    // behind a sleep, and overwritten there at once after the call.
    let ranks = ranks(3)?;
    let comm = Communicator::new(ranks.iter().map(|r| r.side.clone()).collect())?;
    let mut src = zeros(&ranks, LEN)?;
    let mut dst = zeros(&ranks, LEN)?;
    for round in 0..ROUNDS {
        for (r, (rank, x)) in ranks.iter().zip(&mut src).enumerate() {
            if r == round % 3 {
                rank.stall(rank.ctx.default_stream())?;
            }
            rank.ctx.fill(x, (round + 2 * r) as f32)?;
        }
        comm.all_reduce_into(&src, &mut dst, CollectiveOp::Max)?;
        for (rank, x) in ranks.iter().zip(&mut src) {
            rank.ctx.fill(x, -1.0)?;
        }
        all_equal(&dst, (round + 4) as f32, &format!("round {round}"))?;
    }
    Ok(())
}
