//! Bad peer copies and bad collective calls: each a typed error naming the call and the
//! argument, with every array left as it was.

use super::*;

use gpukit::{Error, GpuArray};

/// Asserts that `r` is `Error::InvalidArgument` from `op` about `arg`; returns its message.
#[track_caller]
fn invalid<T: std::fmt::Debug>(r: Result<T>, op: &str, arg: &str) -> String {
    invalid_any(r, op, &[arg])
}

/// [`invalid`] where the argument at fault may go by either of `args` (a rank, or the array
/// that rank sends or receives).
#[track_caller]
fn invalid_any<T: std::fmt::Debug>(r: Result<T>, op: &str, args: &[&str]) -> String {
    match r {
        Err(Error::InvalidArgument {
            op: got_op,
            arg: got_arg,
            message,
        }) if got_op == op && args.contains(&got_arg) => {
            assert!(!message.is_empty(), "{op} `{got_arg}`: an empty message");
            message
        }
        other => panic!("expected InvalidArgument from {op} about one of {args:?}, got {other:?}"),
    }
}

/// Asserts that every array still holds `want`.
#[track_caller]
fn unchanged<T: Bits>(arrays: &[GpuArray<T>], want: &[Vec<T>], what: &str) -> Result<()> {
    for (r, (a, w)) in arrays.iter().zip(want).enumerate() {
        assert_bits(&a.download()?, w, &format!("{what}: rank {r}"));
    }
    Ok(())
}

#[test]
fn refused_peer_copies_are_typed_and_change_nothing() -> Result<()> {
    let ctxs = cpus(3)?;
    let a = ctxs[0].alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
    let mut b = ctxs[1].alloc_upload(&[7.0f32; 4])?;
    let other_on_1 = ctxs[1].alloc_upload(&[8.0f32; 4])?;
    let mut c = ctxs[2].alloc_upload(&[6.0f32; 5])?;
    let mut d = ctxs[0].alloc_upload(&[5.0f32; 5])?;
    let side = ctxs[1].create_stream()?;
    const OP: &str = "Stream::copy_peer";

    // Lengths that differ, whole arrays and views.
    let r = ctxs[1].copy_peer(&a, &mut b);
    assert_eq!(
        r,
        Err(Error::LengthMismatch {
            op: OP,
            arg: "dst",
            expected: 5,
            got: 4
        })
    );
    let r = side.copy_peer(&a.slice(..3)?, &mut b.slice_mut(1..)?.slice_mut(..2)?);
    assert_eq!(
        r,
        Err(Error::LengthMismatch {
            op: OP,
            arg: "dst",
            expected: 3,
            got: 2
        })
    );

    // A source of the stream's own context: `Stream::copy` is the call for that.
    let message = invalid(ctxs[1].copy_peer(&other_on_1, &mut b), OP, "src");
    assert!(message.contains("Stream::copy"), "{message}");
    invalid(side.copy_peer(&other_on_1.slice(..)?, &mut b), OP, "src");

    // A destination of another context than the stream's: a third one, or the source's.
    let r = ctxs[1].copy_peer(&a, &mut c);
    assert_eq!(
        r,
        Err(Error::ContextMismatch {
            op: OP,
            arg: "dst",
            expected: ctxs[1].id(),
            got: ctxs[2].id()
        })
    );
    let r = side.copy_peer(&a, &mut d);
    assert_eq!(
        r,
        Err(Error::ContextMismatch {
            op: OP,
            arg: "dst",
            expected: ctxs[1].id(),
            got: ctxs[0].id()
        })
    );

    // Nothing was written, and the source is intact.
    assert_eq!(b.download()?, [7.0; 4]);
    assert_eq!(c.download()?, [6.0; 5]);
    assert_eq!(d.download()?, [5.0; 5]);
    assert_eq!(a.download()?, [1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(other_on_1.download()?, [8.0; 4]);
    // And the streams still work.
    ctxs[1].copy_peer(&a.slice(1..)?, &mut b)?;
    assert_eq!(b.download()?, [2.0, 3.0, 4.0, 5.0]);
    Ok(())
}

#[test]
fn communicators_need_one_stream_of_its_own_context_per_rank() -> Result<()> {
    let ctxs = cpus(2)?;
    let s0 = ctxs[0].default_stream().clone();
    const NEW: &str = "Communicator::new";
    invalid(Communicator::new(Vec::new()), NEW, "streams");
    let message = invalid(
        Communicator::new(vec![s0.clone(), s0.clone()]),
        NEW,
        "streams",
    );
    assert!(message.contains("ranks 0 and 1"), "{message}");
    // Another stream of the same context is still the same device.
    let other = ctxs[0].create_stream()?;
    let three = vec![s0.clone(), ctxs[1].default_stream().clone(), other];
    let message = invalid(Communicator::new(three), NEW, "streams");
    assert!(message.contains("ranks 0 and 2"), "{message}");
    // One rank per context is fine, on any of its streams.
    let comm = Communicator::new(vec![ctxs[1].create_stream()?, s0])?;
    assert_eq!(comm.world_size(), 2);
    assert_eq!(comm.streams()[0].context_id(), ctxs[1].id());
    Ok(())
}

#[test]
fn refused_all_reduces_are_typed_and_change_nothing() -> Result<()> {
    let ctxs = cpus(3)?;
    let comm = communicator(&ctxs)?;
    let data: Vec<Vec<f32>> = (0..3).map(|r| f32::values(1, r, 5)).collect();
    let mut a = upload_all(&ctxs, &data)?;
    let mut short = ctxs[2].alloc_upload(&[3.0f32; 4])?;
    let mut dst = upload_all(&ctxs, &vec![vec![0.5f32; 5]; 3])?;
    const AR: &str = "Communicator::all_reduce";
    const ARI: &str = "Communicator::all_reduce_into";

    // Two arrays for three ranks, four for three.
    let message = invalid(comm.all_reduce(&mut a[..2], CollectiveOp::Sum), AR, "bufs");
    assert!(message.contains("2 arrays for 3 ranks"), "{message}");
    let mut four = upload_all(&cpus(4)?, &vec![vec![0.0f32; 5]; 4])?;
    invalid(comm.all_reduce(&mut four, CollectiveOp::Sum), AR, "bufs");
    // Ranks 0 and 1 swapped: each array is of the other rank's device.
    a.swap(0, 1);
    let message = invalid(comm.all_reduce(&mut a, CollectiveOp::Max), AR, "bufs");
    assert!(message.contains("bufs[0]"), "{message}");
    a.swap(0, 1);
    // A length that differs, as `&mut [&mut GpuArray]`.
    {
        let [a0, a1, _] = &mut a[..] else {
            unreachable!("three arrays")
        };
        let message = invalid(
            comm.all_reduce(&mut [&mut *a0, &mut *a1, &mut short], CollectiveOp::Sum),
            AR,
            "bufs",
        );
        assert!(
            message.contains("bufs[2] has 4 elements, expected 5"),
            "{message}"
        );
    }
    // Views whose lengths differ.
    {
        let mut views = a
            .iter_mut()
            .enumerate()
            .map(|(r, x)| x.slice_mut(r..))
            .collect::<Result<Vec<_>>>()?;
        invalid(comm.all_reduce(&mut views, CollectiveOp::Min), AR, "bufs");
    }
    // Out of place: a destination of the wrong length, too few, of the wrong device.
    invalid(
        comm.all_reduce_into(&a, &mut dst[..2], CollectiveOp::Sum),
        ARI,
        "dst",
    );
    {
        let [d0, d1, _] = &mut dst[..] else {
            unreachable!("three arrays")
        };
        invalid(
            comm.all_reduce_into(&a, &mut [&mut *d0, &mut *d1, &mut short], CollectiveOp::Sum),
            ARI,
            "dst",
        );
    }
    dst.swap(1, 2);
    invalid(
        comm.all_reduce_into(&a, &mut dst, CollectiveOp::Prod),
        ARI,
        "dst",
    );
    dst.swap(1, 2);
    invalid(
        comm.all_reduce_into(&a[1..], &mut dst, CollectiveOp::Sum),
        ARI,
        "src",
    );

    // Avg on integers.
    let idata: Vec<Vec<i32>> = (0..3).map(|r| i32::values(2, r, 5)).collect();
    let mut ia = upload_all(&ctxs, &idata)?;
    let mut idst = upload_all(&ctxs, &vec![vec![-3i32; 5]; 3])?;
    let message = invalid(comm.all_reduce(&mut ia, CollectiveOp::Avg), AR, "op");
    assert!(message.contains("i32"), "{message}");
    invalid(
        comm.all_reduce_into(&ia, &mut idst, CollectiveOp::Avg),
        ARI,
        "op",
    );

    unchanged(&a, &data, "all_reduce")?;
    unchanged(&dst, &vec![vec![0.5f32; 5]; 3], "all_reduce_into dst")?;
    unchanged(std::slice::from_ref(&short), &[vec![3.0f32; 4]], "short")?;
    unchanged(&ia, &idata, "avg on i32")?;
    unchanged(&idst, &vec![vec![-3i32; 5]; 3], "avg on i32 dst")?;
    // The communicator still works after the refusals.
    comm.all_reduce(&mut a, CollectiveOp::Sum)?;
    unchanged(
        &a,
        &vec![reference(&data, CollectiveOp::Sum); 3],
        "all_reduce after",
    )?;
    Ok(())
}

#[test]
fn refused_broadcasts_gathers_and_scatters_are_typed_and_change_nothing() -> Result<()> {
    let ctxs = cpus(3)?;
    let comm = communicator(&ctxs)?;
    let data: Vec<Vec<f32>> = (0..3).map(|r| f32::values(3, r, 6)).collect();
    let mut a = upload_all(&ctxs, &data)?;
    let mut long = upload_all(&ctxs, &vec![vec![1.0f32; 18]; 3])?;
    let mut two = upload_all(&ctxs, &vec![vec![2.0f32; 2]; 3])?;

    // Broadcast: a root out of range, a source of another rank's device than the root's.
    const BC: &str = "Communicator::broadcast";
    const BCI: &str = "Communicator::broadcast_into";
    let message = invalid(comm.broadcast(3, &mut a), BC, "root");
    assert!(message.contains("rank 3 of 3"), "{message}");
    invalid(comm.broadcast(usize::MAX, &mut a), BC, "root");
    invalid(comm.broadcast(0, &mut a[..2]), BC, "bufs");
    invalid(comm.broadcast_into(3, &two[0], &mut a), BCI, "root");
    let message = invalid(comm.broadcast_into(1, &two[0], &mut a), BCI, "src");
    assert!(message.contains("rank 1"), "{message}");
    {
        let src = ctxs[0].alloc_upload(&[0.0f32; 5])?;
        invalid(comm.broadcast_into(0, &src, &mut a), BCI, "dst");
    }

    // All-gather: destinations of n * len elements, each of its rank.
    const AG: &str = "Communicator::all_gather_into";
    let message = invalid(comm.all_gather_into(&a, &mut two), AG, "dst");
    assert!(message.contains("expected 18"), "{message}");
    invalid(comm.all_gather_into(&a[..2], &mut long), AG, "src");
    long.swap(0, 2);
    invalid(comm.all_gather_into(&a, &mut long), AG, "dst");
    long.swap(0, 2);

    // Reduce-scatter: sources of n * len elements, each of its rank; no avg on integers.
    const RS: &str = "Communicator::reduce_scatter_into";
    let message = invalid(
        comm.reduce_scatter_into(&long, &mut two, CollectiveOp::Sum),
        RS,
        "src",
    );
    assert!(
        message.contains("src[0] has 18 elements, expected 6"),
        "{message}"
    );
    invalid(
        comm.reduce_scatter_into(&a[..2], &mut two, CollectiveOp::Sum),
        RS,
        "src",
    );
    invalid(
        comm.reduce_scatter_into(&a, &mut two[1..], CollectiveOp::Sum),
        RS,
        "dst",
    );
    two.swap(0, 1);
    invalid(
        comm.reduce_scatter_into(&a, &mut two, CollectiveOp::Sum),
        RS,
        "dst",
    );
    two.swap(0, 1);
    let isrc = upload_all(&ctxs, &vec![vec![1i32; 6]; 3])?;
    let mut idst = upload_all(&ctxs, &vec![vec![-1i32; 2]; 3])?;
    invalid(
        comm.reduce_scatter_into(&isrc, &mut idst, CollectiveOp::Avg),
        RS,
        "op",
    );

    unchanged(&a, &data, "a")?;
    unchanged(&long, &vec![vec![1.0f32; 18]; 3], "long")?;
    unchanged(&two, &vec![vec![2.0f32; 2]; 3], "two")?;
    unchanged(&idst, &vec![vec![-1i32; 2]; 3], "avg on i32 dst")?;
    Ok(())
}

/// Regression: an out-of-range rank given to `send_recv` was reported as the argument
/// `root`, which `send_recv` does not have (`check_root` names `root` whatever the call).
#[test]
fn refused_send_recvs_are_typed_and_change_nothing() -> Result<()> {
    let ctxs = cpus(3)?;
    let comm = communicator(&ctxs)?;
    let data: Vec<Vec<f32>> = (0..3).map(|r| f32::values(4, r, 2)).collect();
    let mut two = upload_all(&ctxs, &data)?;
    let three = ctxs[0].alloc_upload(&[1.0f32; 3])?;
    const SR: &str = "Communicator::send_recv";
    {
        let (src, rest) = two.split_first_mut().expect("three arrays");
        // Arrays of other devices than the ranks', lengths that differ.
        invalid(comm.send_recv(1, &*src, 2, &mut rest[1]), SR, "src");
        invalid(comm.send_recv(0, &*src, 2, &mut rest[0]), SR, "dst");
        invalid(comm.send_recv(0, &three, 1, &mut rest[0]), SR, "dst");
        // Ranks out of range, named by the rank or by its array.
        invalid_any(
            comm.send_recv(3, &*src, 1, &mut rest[0]),
            SR,
            &["from", "src"],
        );
        invalid_any(
            comm.send_recv(0, &*src, 7, &mut rest[0]),
            SR,
            &["to", "dst"],
        );
    }
    unchanged(&two, &data, "send_recv")?;
    Ok(())
}
