//! The emulated NCCL over the two emulated devices of this process
//! (<https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html>): communicators
//! from `ncclCommInitAll`, collectives queued on each rank's stream from one thread between
//! `ncclGroupStart`/`ncclGroupEnd` ("when managing multiple GPUs from a single thread ...
//! group semantics"), and point-to-point sends and receives.

use std::ffi::c_void;

use gpukit_cuda_emu::api::driver as drv;
use gpukit_cuda_emu::api::nccl;

use crate::common::*;

/// `ncclFloat32`, `ncclSum`, `ncclAvg`.
const NCCL_FLOAT32: u32 = 7;
const NCCL_SUM: u32 = 0;
const NCCL_AVG: u32 = 4;

/// One rank: its device's context, a stream there, and its communicator.
struct Rank {
    ctx: u64,
    stream: u64,
    comm: u64,
}

fn set_current(ctx: u64) {
    // SAFETY: no pointers.
    ok(unsafe { drv::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent");
}

/// Communicators over devices 0 and 1, and a non-blocking stream on each.
fn ranks() -> Vec<Rank> {
    let ctxs = [use_device(0), use_device(1)];
    let mut comms = [0u64; 2];
    let devs = [0i32, 1];
    // SAFETY: room for 2 communicators, a list of 2 devices.
    let r = unsafe { nccl::ncclCommInitAll(comms.as_mut_ptr(), 2, devs.as_ptr()) };
    assert_eq!(r, 0, "ncclCommInitAll");
    (0..2)
        .map(|i| {
            set_current(ctxs[i]);
            let mut rank = -1;
            // SAFETY: a writable int.
            assert_eq!(unsafe { nccl::ncclCommUserRank(comms[i], &mut rank) }, 0);
            assert_eq!(rank, i as i32, "ncclCommInitAll gives rank i to devlist[i]");
            Rank {
                ctx: ctxs[i],
                stream: stream(NON_BLOCKING),
                comm: comms[i],
            }
        })
        .collect()
}

/// `f(rank index)` for every rank between `ncclGroupStart` and `ncclGroupEnd`, each with its
/// context current.
fn group(ranks: &[Rank], mut f: impl FnMut(usize, &Rank) -> u32) {
    // SAFETY: no pointers.
    assert_eq!(unsafe { nccl::ncclGroupStart() }, 0, "ncclGroupStart");
    for (i, r) in ranks.iter().enumerate() {
        set_current(r.ctx);
        assert_eq!(f(i, r), 0, "the call for rank {i}");
    }
    // SAFETY: no pointers.
    assert_eq!(unsafe { nccl::ncclGroupEnd() }, 0, "ncclGroupEnd");
    for r in ranks {
        set_current(r.ctx);
        ok(sync(r.stream), "cuStreamSynchronize");
    }
}

/// Per-rank data: `n` floats, distinct per rank, exact in f32 and their sums too.
fn data(rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (i as f32) * 0.5 + (rank as f32) * 1000.0 - 17.0)
        .collect()
}

fn upload_on(r: &Rank, v: &[f32]) -> u64 {
    set_current(r.ctx);
    upload(v)
}

fn download_on(r: &Rank, p: u64, n: usize) -> Vec<f32> {
    set_current(r.ctx);
    dtoh(p, n)
}

fn alloc_on(r: &Rank, bytes: usize) -> u64 {
    set_current(r.ctx);
    alloc(bytes)
}

/// `ncclAllReduce` (sum, f32) on both devices' streams in one group: both receive the
/// element-wise sum; `ncclBroadcast` from rank 1: both receive rank 1's data;
/// `ncclAllGather`: both receive rank 0's then rank 1's data.
#[test]
fn all_reduce_broadcast_and_all_gather_over_two_devices() {
    let ranks = ranks();
    let n = 1000usize;
    let inputs: Vec<Vec<f32>> = (0..2).map(|r| data(r, n)).collect();
    let send: Vec<u64> = ranks
        .iter()
        .zip(&inputs)
        .map(|(r, v)| upload_on(r, v))
        .collect();

    // AllReduce.
    let recv: Vec<u64> = ranks.iter().map(|r| alloc_on(r, n * 4)).collect();
    group(&ranks, |i, r| {
        // SAFETY: n floats in each device buffer.
        unsafe {
            nccl::ncclAllReduce(
                send[i] as *const c_void,
                recv[i] as *mut c_void,
                n,
                NCCL_FLOAT32,
                NCCL_SUM,
                r.comm,
                r.stream,
            )
        }
    });
    let want: Vec<f32> = (0..n).map(|j| inputs[0][j] + inputs[1][j]).collect();
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(
            download_on(r, recv[i], n),
            want,
            "ncclAllReduce on rank {i}"
        );
    }

    // AllReduce with ncclAvg: the sum divided by the rank count (not a min or max).
    let avg: Vec<u64> = ranks.iter().map(|r| alloc_on(r, n * 4)).collect();
    group(&ranks, |i, r| {
        // SAFETY: n floats in each device buffer.
        unsafe {
            nccl::ncclAllReduce(
                send[i] as *const c_void,
                avg[i] as *mut c_void,
                n,
                NCCL_FLOAT32,
                NCCL_AVG,
                r.comm,
                r.stream,
            )
        }
    });
    let want: Vec<f32> = (0..n)
        .map(|j| ((f64::from(inputs[0][j]) + f64::from(inputs[1][j])) / 2.0) as f32)
        .collect();
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(download_on(r, avg[i], n), want, "ncclAvg on rank {i}");
    }

    // Broadcast from rank 1.
    let bcast: Vec<u64> = ranks.iter().map(|r| alloc_on(r, n * 4)).collect();
    group(&ranks, |i, r| {
        // SAFETY: n floats in each device buffer.
        unsafe {
            nccl::ncclBroadcast(
                send[i] as *const c_void,
                bcast[i] as *mut c_void,
                n,
                NCCL_FLOAT32,
                1,
                r.comm,
                r.stream,
            )
        }
    });
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(
            download_on(r, bcast[i], n),
            inputs[1],
            "ncclBroadcast from rank 1, on rank {i}"
        );
    }

    // AllGather.
    let gathered: Vec<u64> = ranks.iter().map(|r| alloc_on(r, 2 * n * 4)).collect();
    group(&ranks, |i, r| {
        // SAFETY: n floats to send, 2n to receive.
        unsafe {
            nccl::ncclAllGather(
                send[i] as *const c_void,
                gathered[i] as *mut c_void,
                n,
                NCCL_FLOAT32,
                r.comm,
                r.stream,
            )
        }
    });
    let want: Vec<f32> = inputs.concat();
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(
            download_on(r, gathered[i], 2 * n),
            want,
            "ncclAllGather on rank {i}"
        );
    }
    for (i, r) in ranks.iter().enumerate() {
        set_current(r.ctx);
        for p in [send[i], recv[i], bcast[i], gathered[i]] {
            ok(free(p), "cuMemFree_v2");
        }
        // SAFETY: a live communicator.
        assert_eq!(unsafe { nccl::ncclCommDestroy(r.comm) }, 0);
    }
}

/// A `ncclSend`/`ncclRecv` exchange in both directions inside one group does not deadlock
/// (the group lets each rank's send and receive progress together) and swaps the buffers'
/// contents.
#[test]
fn send_recv_exchange_in_one_group_swaps_the_bytes() {
    let ranks = ranks();
    let n = 777usize;
    let inputs: Vec<Vec<f32>> = (0..2).map(|r| data(r, n)).collect();
    let send: Vec<u64> = ranks
        .iter()
        .zip(&inputs)
        .map(|(r, v)| upload_on(r, v))
        .collect();
    let recv: Vec<u64> = ranks.iter().map(|r| alloc_on(r, n * 4)).collect();
    group(&ranks, |i, r| {
        let peer = 1 - i as i32;
        // SAFETY: n floats in each device buffer.
        let s = unsafe {
            nccl::ncclSend(
                send[i] as *const c_void,
                n,
                NCCL_FLOAT32,
                peer,
                r.comm,
                r.stream,
            )
        };
        if s != 0 {
            return s;
        }
        // SAFETY: as above.
        unsafe {
            nccl::ncclRecv(
                recv[i] as *mut c_void,
                n,
                NCCL_FLOAT32,
                peer,
                r.comm,
                r.stream,
            )
        }
    });
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(
            download_on(r, recv[i], n),
            inputs[1 - i],
            "rank {i} received its peer's data"
        );
    }
    for (i, r) in ranks.iter().enumerate() {
        set_current(r.ctx);
        ok(free(send[i]), "cuMemFree_v2");
        ok(free(recv[i]), "cuMemFree_v2");
        // SAFETY: a live communicator.
        assert_eq!(unsafe { nccl::ncclCommDestroy(r.comm) }, 0);
    }
}

/// `ncclGetVersion` reports NCCL 2.10 or later (1000 * major + 100 * minor + patch for
/// 2.9 and later).
#[test]
fn get_version_is_at_least_2_10() {
    let mut v = 0i32;
    // SAFETY: a writable int.
    assert_eq!(unsafe { nccl::ncclGetVersion(&mut v) }, 0, "ncclGetVersion");
    assert!(v >= 21000, "NCCL version code {v}");
}
