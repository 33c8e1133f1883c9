//! Every `Communicator` call against a host reference, for 1 to 4 ranks and lengths 0, 1,
//! lengths no group size divides, and ~10 000. Floats are compared bit for bit with the
//! reduction in rank order in f32 (what the in-process implementation promises, on every
//! rank); integers exactly, wrapping.

use super::*;

use gpukit::GpuArray;

/// Array lengths: empty, one element, lengths that 2, 3 and 4 ranks do not divide (3 and
/// 7 for 2 and 4 ranks, 7 and 10 001 for 3), one that they all do (12), and ~10 000.
const LENS: [usize; 6] = [0, 1, 3, 7, 12, 10_001];

/// Every group size, each with its contexts and a communicator over their default streams.
fn groups() -> Result<Vec<(Vec<Context>, Communicator)>> {
    (1..=4)
        .map(|n| {
            let ctxs = cpus(n)?;
            let comm = communicator(&ctxs)?;
            Ok((ctxs, comm))
        })
        .collect()
}

/// `all_reduce` in place (on arrays, on `&mut` arrays, on views inside larger arrays) and
/// `all_reduce_into`, every op, every group size and length.
fn all_reduce_matches_the_reference<T: Reduce>() -> Result<()> {
    for (ctxs, comm) in groups()? {
        let n = ctxs.len();
        for len in LENS {
            for op in ops_for::<T>() {
                let what = format!("{} {op} over {n} ranks, {len} elements", T::DTYPE);
                let seed = (n * 1000 + len) as u64;
                let data: Vec<Vec<T>> = (0..n).map(|r| T::values(seed, r, len)).collect();
                let want = reference(&data, op);

                let mut bufs = upload_all(&ctxs, &data)?;
                comm.all_reduce(&mut bufs, op)?;
                for (r, got) in download_all(&bufs)?.iter().enumerate() {
                    assert_bits(got, &want, &format!("all_reduce {what}: rank {r}"));
                }

                // The same through `&mut` references.
                let mut bufs = upload_all(&ctxs, &data)?;
                let mut refs: Vec<&mut GpuArray<T>> = bufs.iter_mut().collect();
                comm.all_reduce(&mut refs, op)?;
                for (r, got) in download_all(&bufs)?.iter().enumerate() {
                    assert_bits(got, &want, &format!("all_reduce (&mut) {what}: rank {r}"));
                }

                // Views at offset 2 of arrays two elements longer at each end: the borders
                // keep their values.
                let border = T::values(seed ^ 0xb0, 0, 4);
                let padded: Vec<Vec<T>> = data
                    .iter()
                    .map(|d| [&border[..2], d, &border[2..]].concat())
                    .collect();
                let mut outer = upload_all(&ctxs, &padded)?;
                let mut views = outer
                    .iter_mut()
                    .map(|a| a.slice_mut(2..2 + len))
                    .collect::<Result<Vec<_>>>()?;
                comm.all_reduce(&mut views, op)?;
                drop(views);
                let padded_want = [&border[..2], &want, &border[2..]].concat();
                for (r, got) in download_all(&outer)?.iter().enumerate() {
                    assert_bits(
                        got,
                        &padded_want,
                        &format!("all_reduce (views) {what}: rank {r}"),
                    );
                }

                // Out of place: the sources are left as they were.
                let src = upload_all(&ctxs, &data)?;
                let mut dst = upload_all(&ctxs, &vec![T::values(7, 9, len); n])?;
                comm.all_reduce_into(&src, &mut dst, op)?;
                for (r, got) in download_all(&dst)?.iter().enumerate() {
                    assert_bits(got, &want, &format!("all_reduce_into {what}: rank {r}"));
                }
                for (r, got) in download_all(&src)?.iter().enumerate() {
                    assert_bits(got, &data[r], &format!("all_reduce_into {what}: src {r}"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn all_reduce_f32_matches_the_rank_order_reference() -> Result<()> {
    all_reduce_matches_the_reference::<f32>()
}

#[test]
fn all_reduce_i32_matches_the_wrapping_reference() -> Result<()> {
    all_reduce_matches_the_reference::<i32>()
}

/// `reduce_scatter_into`: rank `r` gets part `r` of the reduction, every op.
fn reduce_scatter_matches_the_reference<T: Reduce>() -> Result<()> {
    for (ctxs, comm) in groups()? {
        let n = ctxs.len();
        // The part each rank gets: the lengths above, and ~10 000 in all.
        for part in [0, 1, 3, 7, 10_001 / n] {
            for op in ops_for::<T>() {
                let what = format!("{} {op} over {n} ranks, parts of {part}", T::DTYPE);
                let seed = (n * 7000 + part) as u64;
                let data: Vec<Vec<T>> = (0..n).map(|r| T::values(seed, r, n * part)).collect();
                let want = reference(&data, op);
                let src = upload_all(&ctxs, &data)?;
                let mut dst = upload_all(&ctxs, &vec![T::values(8, 9, part); n])?;
                comm.reduce_scatter_into(&src, &mut dst, op)?;
                for (r, got) in download_all(&dst)?.iter().enumerate() {
                    let part_want = &want[r * part..(r + 1) * part];
                    assert_bits(
                        got,
                        part_want,
                        &format!("reduce_scatter_into {what}: rank {r}"),
                    );
                }
                for (r, got) in download_all(&src)?.iter().enumerate() {
                    assert_bits(
                        got,
                        &data[r],
                        &format!("reduce_scatter_into {what}: src {r}"),
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn reduce_scatter_f32_matches_the_rank_order_reference() -> Result<()> {
    reduce_scatter_matches_the_reference::<f32>()
}

#[test]
fn reduce_scatter_i32_matches_the_wrapping_reference() -> Result<()> {
    reduce_scatter_matches_the_reference::<i32>()
}

/// `broadcast` (in place) and `broadcast_into` from every root.
fn broadcast_copies_the_root<T: Bits>(values: impl Fn(u64, usize) -> Vec<T>) -> Result<()> {
    for (ctxs, comm) in groups()? {
        let n = ctxs.len();
        for len in LENS {
            for root in 0..n {
                let what = format!("{} from root {root} of {n}, {len} elements", T::DTYPE);
                let seed = (n * 100 + root * 10) as u64 + len as u64;
                let data: Vec<Vec<T>> = (0..n).map(|r| values(seed + r as u64, len)).collect();
                let mut bufs = upload_all(&ctxs, &data)?;
                comm.broadcast(root, &mut bufs)?;
                for (r, got) in download_all(&bufs)?.iter().enumerate() {
                    assert_bits(got, &data[root], &format!("broadcast {what}: rank {r}"));
                }

                let src = ctxs[root].alloc_upload(&data[root])?;
                let mut dst = upload_all(&ctxs, &vec![values(1, len); n])?;
                comm.broadcast_into(root, &src, &mut dst)?;
                for (r, got) in download_all(&dst)?.iter().enumerate() {
                    assert_bits(
                        got,
                        &data[root],
                        &format!("broadcast_into {what}: rank {r}"),
                    );
                }
                // From a view of the root's array, into views.
                let mut views = dst
                    .iter_mut()
                    .map(|a| a.slice_mut(len / 2..))
                    .collect::<Result<Vec<_>>>()?;
                comm.broadcast_into(root, &src.slice(..len - len / 2)?, &mut views)?;
                drop(views);
                let want = [&data[root][..len / 2], &data[root][..len - len / 2]].concat();
                for (r, got) in download_all(&dst)?.iter().enumerate() {
                    assert_bits(
                        got,
                        &want,
                        &format!("broadcast_into (views) {what}: rank {r}"),
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn broadcast_copies_the_root_to_every_rank() -> Result<()> {
    broadcast_copies_the_root(floats)?;
    broadcast_copies_the_root(|seed, len| {
        xorshift(seed)
            .take(len)
            .map(|u| u as u8)
            .collect::<Vec<u8>>()
    })?;
    broadcast_copies_the_root(|seed, len| {
        xorshift(seed)
            .take(len)
            .map(|u| f16::from_bits(u as u16))
            .collect::<Vec<f16>>()
    })
}

/// `all_gather_into`: every rank gets every rank's array, in rank order.
fn all_gather_concatenates<T: Bits>(values: impl Fn(u64, usize) -> Vec<T>) -> Result<()> {
    for (ctxs, comm) in groups()? {
        let n = ctxs.len();
        for len in [0, 1, 3, 7, 10_001 / n] {
            let what = format!("{} over {n} ranks, {len} elements each", T::DTYPE);
            let data: Vec<Vec<T>> = (0..n).map(|r| values((n * 10 + r) as u64, len)).collect();
            let want = data.concat();
            let src = upload_all(&ctxs, &data)?;
            let mut dst = upload_all(&ctxs, &vec![values(2, n * len); n])?;
            comm.all_gather_into(&src, &mut dst)?;
            for (r, got) in download_all(&dst)?.iter().enumerate() {
                assert_bits(got, &want, &format!("all_gather_into {what}: rank {r}"));
            }
        }
    }
    Ok(())
}

#[test]
fn all_gather_concatenates_in_rank_order() -> Result<()> {
    all_gather_concatenates(floats)?;
    all_gather_concatenates(ints)?;
    all_gather_concatenates(|seed, len| {
        xorshift(seed)
            .take(len)
            .map(|u| u as i8)
            .collect::<Vec<i8>>()
    })
}

#[test]
fn send_recv_copies_between_any_two_ranks() -> Result<()> {
    let ctxs = cpus(3)?;
    let comm = communicator(&ctxs)?;
    for from in 0..3 {
        for to in 0..3 {
            for len in [0, 1, 10_001] {
                let data = floats((from * 3 + to + len) as u64, len);
                let src = ctxs[from].alloc_upload(&data)?;
                let mut dst = ctxs[to].alloc_upload(&vec![-1.0f32; len + 1])?;
                comm.send_recv(from, &src, to, &mut dst.slice_mut(1..)?)?;
                let want = [&[-1.0][..], &data].concat();
                assert_bits(
                    &dst.download()?,
                    &want,
                    &format!("{from} -> {to}, {len} elements"),
                );
            }
        }
    }
    Ok(())
}

#[test]
fn avg_divides_the_rank_order_sum_by_the_ranks() -> Result<()> {
    // Values whose sum is not a multiple of the ranks, so the division rounds.
    let ctxs = cpus(3)?;
    let comm = communicator(&ctxs)?;
    let data = vec![
        vec![1.0f32, 0.1, -7.0],
        vec![1.0, 0.2, 3.0],
        vec![2.0, 0.3, 2.0],
    ];
    let mut bufs = upload_all(&ctxs, &data)?;
    comm.all_reduce(&mut bufs, CollectiveOp::Avg)?;
    let want = [4.0f32 / 3.0, ((0.1f32 + 0.2) + 0.3) / 3.0, -2.0 / 3.0];
    for (r, got) in download_all(&bufs)?.iter().enumerate() {
        assert_bits(got, &want, &format!("avg: rank {r}"));
    }
    Ok(())
}
