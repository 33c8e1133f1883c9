//! One rank's communicator: how it is made (one process for all GPUs, or one per GPU), the
//! collectives queued on it, and how it goes away.
//!
//! NCCL's pages: communicators
//! <https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html>, collectives
//! <https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html>, send and
//! receive <https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/p2p.html>.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use cudarc::driver::sys::CUstream;
use cudarc::nccl::sys;
use gpukit_core::{CollectiveOp, DType, Error, Result};

use super::{available, check, check_devices, check_rank, nccl_dtype, nccl_op, to_int, NcclId};
use crate::device::Device;
use crate::CudaBackend;

/// One rank's NCCL communicator (`ncclComm_t`) on one CUDA device.
///
/// Dropping it destroys it (`ncclCommDestroy`, which waits for its queued operations), or
/// aborts it (`ncclCommAbort`) after an asynchronous error or a fatal error on the device,
/// where waiting could hang.
pub struct NcclComm {
    comm: sys::ncclComm_t,
    rank: usize,
    world_size: usize,
    /// Keeps the device's primary context, where NCCL's resources live, retained.
    dev: Arc<Device>,
}

// SAFETY: NCCL lets a communicator be used from any thread, one thread at a time (it sets
// the comm's device itself on each call); `Arc<Device>` is Send and Sync. Not Sync: the
// collectives take `&self`, and two threads queueing on one communicator at once is what
// NCCL forbids.
unsafe impl Send for NcclComm {}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.dev.ordinal)
            .finish()
    }
}

impl NcclComm {
    /// Rank `rank` of `world_size` (`ncclCommInitRank`) on `backend`'s device, joining the
    /// other ranks made from the same `id`. Blocks until all have joined (see the module
    /// docs for several ranks on one thread).
    ///
    /// `rank >= world_size` is [`Error::InvalidArgument`]; without NCCL,
    /// [`available`]'s error.
    pub fn init_rank(
        backend: &CudaBackend,
        id: &NcclId,
        rank: usize,
        world_size: usize,
    ) -> Result<NcclComm> {
        let (r, n) = check_rank("NcclComm::init_rank", rank, world_size)?;
        available()?;
        // NCCL takes the current device: the one of the context made current here.
        backend.bind()?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: NCCL is loaded with this symbol (`available`); live out-pointer; the id is
        // passed by value.
        check("ncclCommInitRank", unsafe {
            sys::ncclCommInitRank(&mut comm, n, id.raw(), r)
        })?;
        Ok(NcclComm {
            comm,
            rank,
            world_size,
            dev: Arc::clone(&backend.dev),
        })
    }

    /// One communicator per backend, all in this process (`ncclCommInitAll`): rank `i` on
    /// `backends[i]`'s device. Each device may appear once ([`Error::InvalidArgument`]
    /// otherwise, also for no backend).
    pub fn init_all(backends: &[&CudaBackend]) -> Result<Vec<NcclComm>> {
        let ordinals: Vec<usize> = backends.iter().map(|b| b.dev.ordinal).collect();
        let devices = check_devices(&ordinals)?;
        available()?;
        for b in backends {
            b.dev.alive()?;
        }
        let n = devices.len();
        let ndev = to_int("NcclComm::init_all", "backends", n)?;
        let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); n];
        // SAFETY: NCCL is loaded with this symbol (`available`); `comms` has room for `n`
        // handles and `devices` holds `n` distinct ordinals (`check_devices`), all of
        // devices the backends opened.
        check("ncclCommInitAll", unsafe {
            sys::ncclCommInitAll(comms.as_mut_ptr(), ndev, devices.as_ptr())
        })?;
        Ok(comms
            .into_iter()
            .zip(backends)
            .enumerate()
            .map(|(rank, (comm, b))| NcclComm {
                comm,
                rank,
                world_size: n,
                dev: Arc::clone(&b.dev),
            })
            .collect())
    }

    /// This communicator's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The CUDA device ordinal the communicator runs on.
    pub fn device(&self) -> usize {
        self.dev.ordinal
    }

    /// An error NCCL hit while running queued operations (`ncclCommGetAsyncError`), such as
    /// a peer that went away; the communicator is then unusable (drop it).
    pub fn async_error(&self) -> Result<()> {
        let mut r = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live (NCCL was loaded to make it); live out-pointer.
        check("ncclCommGetAsyncError", unsafe {
            sys::ncclCommGetAsyncError(self.comm, &mut r)
        })?;
        match r {
            // Still connecting (inside a group): not an error.
            sys::ncclResult_t::ncclInProgress => Ok(()),
            r => check("ncclCommGetAsyncError", r),
        }
    }

    /// `peer` (a root or a peer rank) as NCCL's int, below the world size.
    fn peer(&self, op: &'static str, arg: &'static str, peer: usize) -> Result<c_int> {
        if peer >= self.world_size {
            return Err(Error::InvalidArgument {
                op,
                arg,
                message: format!(
                    "rank {peer} is not below the world size {}",
                    self.world_size
                ),
            });
        }
        to_int(op, arg, peer)
    }

    /// Reduces `count` elements of every rank's `send` with `op` into every rank's `recv`
    /// (`ncclAllReduce`), queued on `stream`. In place when `send == recv`.
    ///
    /// # Safety
    ///
    /// - `send` and `recv` are device memory of this communicator's device with at least
    ///   `count` elements of `dtype` each (equal, or not overlapping);
    /// - `stream` is a live stream of the device's primary context;
    /// - the memory stays allocated, and nothing else writes `recv` or `send` (nor reads
    ///   `recv`) until `stream` has passed the call.
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        op: CollectiveOp,
        stream: CUstream,
    ) -> Result<()> {
        let op = nccl_op(op, dtype)?;
        self.dev.alive()?;
        // SAFETY: the caller's promises above; the communicator is live.
        check("ncclAllReduce", unsafe {
            sys::ncclAllReduce(
                send as *const c_void,
                recv as *mut c_void,
                count,
                nccl_dtype(dtype),
                op,
                self.comm,
                stream.cast(),
            )
        })
    }

    /// Copies `count` elements of rank `root`'s `send` into every rank's `recv`
    /// (`ncclBroadcast`; `send` is read on `root` only). In place when `send == recv`.
    ///
    /// # Safety
    ///
    /// As [`NcclComm::all_reduce`]: `recv` (and on `root`, `send`) holds `count` elements.
    pub unsafe fn broadcast(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        root: usize,
        stream: CUstream,
    ) -> Result<()> {
        let root = self.peer("NcclComm::broadcast", "root", root)?;
        self.dev.alive()?;
        // SAFETY: the caller's promises above; the communicator is live.
        check("ncclBroadcast", unsafe {
            sys::ncclBroadcast(
                send as *const c_void,
                recv as *mut c_void,
                count,
                nccl_dtype(dtype),
                root,
                self.comm,
                stream.cast(),
            )
        })
    }

    /// Gathers `count_per_rank` elements from every rank's `send` into every rank's `recv`,
    /// rank `i`'s at element `i * count_per_rank` (`ncclAllGather`). In place when `send` is
    /// `recv`'s own slot (`recv + rank * count_per_rank` elements).
    ///
    /// # Safety
    ///
    /// As [`NcclComm::all_reduce`], with `count_per_rank` elements in `send` and
    /// `count_per_rank * world_size` in `recv`.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count_per_rank: usize,
        dtype: DType,
        stream: CUstream,
    ) -> Result<()> {
        self.dev.alive()?;
        // SAFETY: the caller's promises above; the communicator is live.
        check("ncclAllGather", unsafe {
            sys::ncclAllGather(
                send as *const c_void,
                recv as *mut c_void,
                count_per_rank,
                nccl_dtype(dtype),
                self.comm,
                stream.cast(),
            )
        })
    }

    /// Reduces every rank's `send` with `op` and leaves block `rank` of the result
    /// (`recv_count` elements from element `rank * recv_count`) in each rank's `recv`
    /// (`ncclReduceScatter`). In place when `recv` is `send`'s own block.
    ///
    /// # Safety
    ///
    /// As [`NcclComm::all_reduce`], with `recv_count * world_size` elements in `send` and
    /// `recv_count` in `recv`.
    pub unsafe fn reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        recv_count: usize,
        dtype: DType,
        op: CollectiveOp,
        stream: CUstream,
    ) -> Result<()> {
        let op = nccl_op(op, dtype)?;
        self.dev.alive()?;
        // SAFETY: the caller's promises above; the communicator is live.
        check("ncclReduceScatter", unsafe {
            sys::ncclReduceScatter(
                send as *const c_void,
                recv as *mut c_void,
                recv_count,
                nccl_dtype(dtype),
                op,
                self.comm,
                stream.cast(),
            )
        })
    }

    /// Sends `count` elements of `buf` to rank `peer` (`ncclSend`), which must queue the
    /// matching [`NcclComm::recv`]; pairs that wait for each other go in one
    /// [`group_start`](super::group_start)/[`group_end`](super::group_end).
    ///
    /// # Safety
    ///
    /// - `buf` is device memory of this communicator's device with at least `count`
    ///   elements of `dtype`;
    /// - `stream` is a live stream of the device's primary context;
    /// - the memory stays allocated and unwritten until `stream` has passed the call.
    pub unsafe fn send(
        &self,
        buf: u64,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: CUstream,
    ) -> Result<()> {
        let peer = self.peer("NcclComm::send", "peer", peer)?;
        self.dev.alive()?;
        // SAFETY: the caller's promises above; the communicator is live.
        check("ncclSend", unsafe {
            sys::ncclSend(
                buf as *const c_void,
                count,
                nccl_dtype(dtype),
                peer,
                self.comm,
                stream.cast(),
            )
        })
    }

    /// Receives `count` elements from rank `peer` into `buf` (`ncclRecv`; see
    /// [`NcclComm::send`]).
    ///
    /// # Safety
    ///
    /// As [`NcclComm::send`], and nothing else reads `buf` until `stream` has passed the call.
    pub unsafe fn recv(
        &self,
        buf: u64,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: CUstream,
    ) -> Result<()> {
        let peer = self.peer("NcclComm::recv", "peer", peer)?;
        self.dev.alive()?;
        // SAFETY: the caller's promises above; the communicator is live.
        check("ncclRecv", unsafe {
            sys::ncclRecv(
                buf as *mut c_void,
                count,
                nccl_dtype(dtype),
                peer,
                self.comm,
                stream.cast(),
            )
        })
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live; live out-pointer.
        let r = unsafe { sys::ncclCommGetAsyncError(self.comm, &mut state) };
        let failed = r != sys::ncclResult_t::ncclSuccess
            || !matches!(
                state,
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress
            )
            || self.dev.alive().is_err();
        let (call, r) = if failed {
            // SAFETY: the communicator is live and dropped once; `&mut self` rules out
            // calls on it from other threads.
            ("ncclCommAbort", unsafe { sys::ncclCommAbort(self.comm) })
        } else {
            // SAFETY: as above.
            ("ncclCommDestroy", unsafe {
                sys::ncclCommDestroy(self.comm)
            })
        };
        if let Err(e) = check(call, r) {
            tracing::error!(
                rank = self.rank,
                device = self.dev.ordinal,
                "dropping an NCCL communicator: {e}"
            );
        }
    }
}
