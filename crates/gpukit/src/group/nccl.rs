//! NCCL's path of [`super::Communicator`] (cargo feature `cuda`): one NCCL communicator
//! per device of the group (`ncclCommInitAll`), each call one NCCL group of every rank's
//! part, queued on the ranks' streams through [`gpukit_core::Stream::with_raw_parts`], so
//! that the ordering tracker orders NCCL's work like the library's own.

use std::sync::{Mutex, MutexGuard};

use gpukit_core::collective;
use gpukit_core::{
    CollectiveOp, DeviceRead, DeviceWrite, Element, Error, Numeric, RawPtr, RawStream, Result,
    SliceRef,
};
use gpukit_cuda::cudarc::driver::sys::CUstream;
use gpukit_cuda::nccl::{self, NcclComm};

use super::Stream;
use crate::any::AnyBackend;

/// The group's NCCL communicators, rank order, used by one call at a time.
#[derive(Debug)]
pub(crate) struct Nccl {
    comms: Mutex<Vec<NcclComm>>,
}

/// One rank's share of a call: the native addresses of its reads and writes (0 for an
/// empty range) and its stream.
pub(crate) struct Parts {
    reads: Vec<u64>,
    writes: Vec<u64>,
    pub(crate) stream: CUstream,
}

impl Parts {
    /// The share `with_raw_parts` hands out.
    pub(crate) fn new(r: &[Option<RawPtr>], w: &[Option<RawPtr>], raw: RawStream) -> Parts {
        let addr = |p: &Option<RawPtr>| match p {
            Some(RawPtr::Cuda(a)) => *a,
            _ => 0,
        };
        Parts {
            reads: r.iter().map(addr).collect(),
            writes: w.iter().map(addr).collect(),
            stream: match raw {
                RawStream::Cuda(s) => s.cast(),
                _ => std::ptr::null_mut(),
            },
        }
    }

    /// The send buffer: the read, or for an in-place call the write.
    pub(crate) fn send(&self) -> u64 {
        self.reads.first().copied().unwrap_or_else(|| self.recv())
    }

    /// The receive buffer.
    pub(crate) fn recv(&self) -> u64 {
        self.writes.first().copied().unwrap_or(0)
    }
}

/// A rank's call: its rank, its communicator and its share.
type Call<'a> = dyn FnMut(usize, &NcclComm, &Parts) -> Result<()> + 'a;

impl Nccl {
    /// One communicator per stream's device; [`Error::Unavailable`] without NCCL.
    pub(crate) fn init(streams: &[Stream]) -> Result<Nccl> {
        nccl::available()?;
        let backends = streams
            .iter()
            .enumerate()
            .map(|(r, s)| match s.backend() {
                AnyBackend::Cuda(b) => Ok(b),
                other => Err(Error::InvalidArgument {
                    op: "Communicator::nccl",
                    arg: "streams",
                    message: format!(
                        "rank {r}'s stream is of the {} backend: NCCL runs on CUDA devices",
                        gpukit_core::Backend::name(other)
                    ),
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Nccl {
            comms: Mutex::new(NcclComm::init_all(&backends)?),
        })
    }

    fn comms(&self) -> MutexGuard<'_, Vec<NcclComm>> {
        self.comms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `call` for each of `ranks` inside one NCCL group: rank `ranks[i]` on
    /// `streams[ranks[i]]`, ordered as reads of `reads[i]` and writes of `writes[i]`.
    fn grouped(
        &self,
        streams: &[Stream],
        ranks: &[usize],
        reads: &[Vec<SliceRef<'_, AnyBackend>>],
        writes: &[Vec<SliceRef<'_, AnyBackend>>],
        call: &mut Call<'_>,
    ) -> Result<()> {
        let comms = self.comms();
        let mut got = Vec::with_capacity(ranks.len());
        nest(
            streams,
            ranks,
            reads,
            writes,
            &mut got,
            &mut |got: &[Parts]| {
                nccl::group_start()?;
                let mut first = Ok(());
                for (&r, p) in ranks.iter().zip(got) {
                    if first.is_ok() {
                        first = call(r, &comms[r], p);
                    }
                }
                first.and(nccl::group_end())
            },
        )
    }

    /// [`Nccl::grouped`] over every rank, in order.
    fn every_rank(
        &self,
        streams: &[Stream],
        reads: &[Vec<SliceRef<'_, AnyBackend>>],
        writes: &[Vec<SliceRef<'_, AnyBackend>>],
        call: &mut Call<'_>,
    ) -> Result<()> {
        let ranks: Vec<usize> = (0..streams.len()).collect();
        self.grouped(streams, &ranks, reads, writes, call)
    }

    /// `dst[r]` = the reduction of every rank's `src[r]` (or of `dst[r]` itself, in place).
    pub(crate) fn all_reduce<T: Numeric>(
        &self,
        streams: &[Stream],
        src: Option<&[impl DeviceRead<T, AnyBackend>]>,
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
        op: CollectiveOp,
    ) -> Result<()> {
        let (call, arg) = match src {
            Some(_) => ("Communicator::all_reduce_into", "dst"),
            None => ("Communicator::all_reduce", "bufs"),
        };
        collective::check_op::<T>(call, op)?;
        let len = collective::check_arrays(call, streams, arg, dst, None)?;
        if let Some(src) = src {
            collective::check_arrays(call, streams, "src", src, Some(len))?;
        }
        if len == 0 {
            return Ok(());
        }
        let reads = per_rank(streams.len(), |r| src.map(|s| s[r].slice_ref()));
        let writes = per_rank(streams.len(), |r| Some(dst[r].slice_ref()));
        self.every_rank(streams, &reads, &writes, &mut |_, comm, p| {
            // SAFETY: `p`'s addresses are the ranges of `src[r]` and `dst[r]` (or `dst[r]`
            // twice, in place, which NCCL allows), `len` elements of `T` each, on the comm's
            // device; `with_raw_parts` ordered the stream after their earlier uses and
            // records this one when the group has been queued.
            unsafe { comm.all_reduce(p.send(), p.recv(), len, T::DTYPE, op, p.stream) }
        })
    }

    /// Every rank's `dst[r]` = `src` (of rank `root`), or `dst[root]` in place.
    pub(crate) fn broadcast<T: Element>(
        &self,
        streams: &[Stream],
        root: usize,
        src: Option<&impl DeviceRead<T, AnyBackend>>,
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
    ) -> Result<()> {
        let (call, arg) = match src {
            Some(_) => ("Communicator::broadcast_into", "dst"),
            None => ("Communicator::broadcast", "bufs"),
        };
        let n = streams.len();
        collective::check_root(call, root, n)?;
        let len = match src {
            Some(s) => {
                let root_stream = std::slice::from_ref(&streams[root]);
                collective::check_arrays(call, root_stream, "src", std::slice::from_ref(s), None)?
            }
            None => collective::check_arrays(call, streams, arg, dst, None)?,
        };
        collective::check_arrays(call, streams, arg, dst, Some(len))?;
        if len == 0 {
            return Ok(());
        }
        let reads = per_rank(n, |r| src.filter(|_| r == root).map(|s| s.slice_ref()));
        let writes = per_rank(n, |r| Some(dst[r].slice_ref()));
        self.every_rank(streams, &reads, &writes, &mut |_, comm, p| {
            // SAFETY: as in `all_reduce`; NCCL reads the send buffer on the root only.
            unsafe { comm.broadcast(p.send(), p.recv(), len, T::DTYPE, root, p.stream) }
        })
    }

    /// Every rank's `dst[r]` (`n * len`) = every rank's `src[k]` (`len`), in rank order.
    pub(crate) fn all_gather<T: Element>(
        &self,
        streams: &[Stream],
        src: &[impl DeviceRead<T, AnyBackend>],
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
    ) -> Result<()> {
        const CALL: &str = "Communicator::all_gather_into";
        let n = streams.len();
        let len = collective::check_arrays(CALL, streams, "src", src, None)?;
        let total = len
            .checked_mul(n)
            .ok_or_else(|| overflow(CALL, "src", len, n))?;
        collective::check_arrays(CALL, streams, "dst", dst, Some(total))?;
        if len == 0 {
            return Ok(());
        }
        let reads = per_rank(n, |r| Some(src[r].slice_ref()));
        let writes = per_rank(n, |r| Some(dst[r].slice_ref()));
        self.every_rank(streams, &reads, &writes, &mut |_, comm, p| {
            // SAFETY: as in `all_reduce`; the receive buffer holds `n * len` elements.
            unsafe { comm.all_gather(p.send(), p.recv(), len, T::DTYPE, p.stream) }
        })
    }

    /// Rank `r`'s `dst[r]` (`len`) = part `r` of the reduction of every `src[k]` (`n * len`).
    pub(crate) fn reduce_scatter<T: Numeric>(
        &self,
        streams: &[Stream],
        src: &[impl DeviceRead<T, AnyBackend>],
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
        op: CollectiveOp,
    ) -> Result<()> {
        const CALL: &str = "Communicator::reduce_scatter_into";
        collective::check_op::<T>(CALL, op)?;
        let n = streams.len();
        let len = collective::check_arrays(CALL, streams, "dst", dst, None)?;
        let total = len
            .checked_mul(n)
            .ok_or_else(|| overflow(CALL, "dst", len, n))?;
        collective::check_arrays(CALL, streams, "src", src, Some(total))?;
        if len == 0 {
            return Ok(());
        }
        let reads = per_rank(n, |r| Some(src[r].slice_ref()));
        let writes = per_rank(n, |r| Some(dst[r].slice_ref()));
        self.every_rank(streams, &reads, &writes, &mut |_, comm, p| {
            // SAFETY: as in `all_reduce`; the send buffer holds `n * len` elements.
            unsafe { comm.reduce_scatter(p.send(), p.recv(), len, T::DTYPE, op, p.stream) }
        })
    }

    /// Rank `from`'s `src` into rank `to`'s `dst` (checked by the caller; `from != to`).
    pub(crate) fn send_recv<T: Element>(
        &self,
        streams: &[Stream],
        from: usize,
        src: &impl DeviceRead<T, AnyBackend>,
        to: usize,
        dst: &mut impl DeviceWrite<T, AnyBackend>,
    ) -> Result<()> {
        let len = src.len();
        if len == 0 {
            return Ok(());
        }
        let reads = [vec![src.slice_ref()], Vec::new()];
        let writes = [Vec::new(), vec![dst.slice_ref()]];
        self.grouped(streams, &[from, to], &reads, &writes, &mut |r, comm, p| {
            // SAFETY: as in `all_reduce`: `src` on `from`'s stream, `dst` on `to`'s, `len`
            // elements each, paired in one group.
            unsafe {
                if r == from {
                    comm.send(p.send(), len, T::DTYPE, to, p.stream)
                } else {
                    comm.recv(p.recv(), len, T::DTYPE, from, p.stream)
                }
            }
        })
    }
}

/// One list per rank of at most one range.
fn per_rank<'a>(
    n: usize,
    f: impl Fn(usize) -> Option<SliceRef<'a, AnyBackend>>,
) -> Vec<Vec<SliceRef<'a, AnyBackend>>> {
    (0..n).map(|r| f(r).into_iter().collect()).collect()
}

fn overflow(call: &'static str, arg: &'static str, len: usize, n: usize) -> Error {
    Error::InvalidArgument {
        op: call,
        arg,
        message: format!("{len} elements times {n} ranks overflows"),
    }
}

/// Orders each of `ranks` in turn through `with_raw_parts`, one inside the other, and runs
/// `last` with every rank's share innermost: so each rank's use is recorded after the whole
/// group has been queued (NCCL queues a group's work at `ncclGroupEnd`).
fn nest(
    streams: &[Stream],
    ranks: &[usize],
    reads: &[Vec<SliceRef<'_, AnyBackend>>],
    writes: &[Vec<SliceRef<'_, AnyBackend>>],
    got: &mut Vec<Parts>,
    last: &mut dyn FnMut(&[Parts]) -> Result<()>,
) -> Result<()> {
    let k = got.len();
    let Some(&rank) = ranks.get(k) else {
        return last(got);
    };
    // SAFETY: the closure queues NCCL work on this rank's raw stream only (inside the group
    // the innermost call runs), touching only these ranges within their lengths (the
    // callers check every length against the count they pass NCCL); the writes come from
    // the `&mut` arrays the `Communicator` call holds; the group is queued before the
    // closure returns.
    unsafe {
        streams[rank].with_raw_parts(&reads[k], &writes[k], |r, w, raw| {
            got.push(Parts::new(r, w, raw));
            nest(streams, ranks, reads, writes, got, last)
        })
    }?
}
