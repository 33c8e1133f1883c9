//! `Communicator`: collectives over a group of devices in this process.

use gpukit_core::collective;
use gpukit_core::{CollectiveOp, DeviceRead, DeviceWrite, Element, Error, Numeric, Result};

use super::Stream;
use crate::any::AnyBackend;

/// Collectives over a group of devices in this process, one rank per device, each rank's
/// part queued on its stream and ordered like every other op: a collective waits for the
/// work queued on its arrays (on any stream of their device), and later work on them waits
/// for it. Calls return once the work is queued.
///
/// Every call takes one array (or view) per rank, rank order, each of its rank's device.
/// [`CollectiveOp::Avg`] is for float elements. Bad input (a wrong number of arrays, an
/// array of another device, lengths that differ, a root out of range) is
/// [`Error::InvalidArgument`] naming the call, before any work is queued.
///
/// Two implementations, with the same results up to the order of float sums:
/// - **in-process** ([`Communicator::in_process`]), on every backend: peer copies and the
///   op table's binary ops. An all-reduce is a reduce-scatter then an all-gather; rank `k`
///   reduces its part of every rank's array in rank order, so a float all-reduce gives the
///   same bits whatever the thread timing, on every rank;
/// - **NCCL** ([`Communicator::nccl`]) on CUDA devices: `ncclCommInitAll` over the group's
///   devices, each call one NCCL group (`ncclGroupStart`/`ncclGroupEnd`) of every rank's
///   part, queued on the ranks' streams. NCCL's float sums follow its own order (ring or
///   tree, by size), the same on every rank.
///
/// A `Communicator` may be shared between threads; its calls are serialized (NCCL's
/// communicators are not for concurrent use).
#[derive(Debug, Clone)]
pub struct Communicator {
    streams: Vec<Stream>,
    imp: Imp,
    /// Why NCCL was not used, where it was considered.
    nccl_rejected: Option<Error>,
}

#[derive(Debug, Clone)]
enum Imp {
    InProcess,
    #[cfg(feature = "cuda")]
    Nccl(std::sync::Arc<super::nccl::Nccl>),
}

impl Communicator {
    /// A communicator whose rank `r` runs on `streams[r]` (one per device, each of its own
    /// context): NCCL when every stream is of a CUDA device and NCCL loads, else the
    /// in-process implementation, with the reason NCCL was passed over in
    /// [`Communicator::nccl_rejected`].
    pub fn new(streams: Vec<Stream>) -> Result<Communicator> {
        collective::check_streams("Communicator::new", &streams)?;
        if !streams
            .iter()
            .all(|s| gpukit_core::Backend::name(s.backend()) == "cuda")
        {
            return Communicator::in_process(streams);
        }
        match Communicator::nccl(streams.clone()) {
            Ok(c) => Ok(c),
            Err(reason) => {
                tracing::info!(%reason, "Communicator::new: NCCL was passed over; using the in-process collectives");
                let mut c = Communicator::in_process(streams)?;
                c.nccl_rejected = Some(reason);
                Ok(c)
            }
        }
    }

    /// The in-process implementation, on any backend.
    pub fn in_process(streams: Vec<Stream>) -> Result<Communicator> {
        collective::check_streams("Communicator::in_process", &streams)?;
        Ok(Communicator {
            streams,
            imp: Imp::InProcess,
            nccl_rejected: None,
        })
    }

    /// NCCL over the streams' CUDA devices. [`Error::Unavailable`] (backend `nccl`, a reason
    /// beginning "NCCL unavailable") when the NCCL library cannot be loaded, or this build has
    /// no `cuda` feature; [`Error::InvalidArgument`] for a stream that is not CUDA's.
    pub fn nccl(streams: Vec<Stream>) -> Result<Communicator> {
        collective::check_streams("Communicator::nccl", &streams)?;
        #[cfg(feature = "cuda")]
        {
            let nccl = super::nccl::Nccl::init(&streams)?;
            Ok(Communicator {
                streams,
                imp: Imp::Nccl(std::sync::Arc::new(nccl)),
                nccl_rejected: None,
            })
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(Error::Unavailable {
                backend: "nccl",
                reason: "NCCL unavailable: this build of `gpukit` has no `cuda` feature".into(),
            })
        }
    }

    /// How many ranks.
    pub fn world_size(&self) -> usize {
        self.streams.len()
    }

    /// The implementation: `"in-process"` or `"nccl"`.
    pub fn implementation(&self) -> &'static str {
        match &self.imp {
            Imp::InProcess => "in-process",
            #[cfg(feature = "cuda")]
            Imp::Nccl(_) => "nccl",
        }
    }

    /// Why [`Communicator::new`] did not use NCCL on CUDA devices (the library is missing,
    /// or its initialisation failed); `None` where NCCL runs, or was not considered.
    pub fn nccl_rejected(&self) -> Option<&Error> {
        self.nccl_rejected.as_ref()
    }

    /// The streams the ranks run on, rank order.
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    /// In place: every rank's `bufs[r]` becomes `bufs[0] op bufs[1] op ... op bufs[n-1]`.
    pub fn all_reduce<T: Numeric>(
        &self,
        bufs: &mut [impl DeviceWrite<T, AnyBackend>],
        op: CollectiveOp,
    ) -> Result<()> {
        match &self.imp {
            Imp::InProcess => collective::all_reduce(&self.streams, bufs, op),
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) => n.all_reduce(
                &self.streams,
                None::<&[&gpukit_core::GpuArray<T, AnyBackend>]>,
                bufs,
                op,
            ),
        }
    }

    /// Out of place: `dst[r] = src[0] op ... op src[n-1]` for every rank.
    pub fn all_reduce_into<T: Numeric>(
        &self,
        src: &[impl DeviceRead<T, AnyBackend>],
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
        op: CollectiveOp,
    ) -> Result<()> {
        match &self.imp {
            Imp::InProcess => collective::all_reduce_into(&self.streams, src, dst, op),
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) => n.all_reduce(&self.streams, Some(src), dst, op),
        }
    }

    /// In place: every rank's `bufs[r]` becomes a copy of `bufs[root]`.
    pub fn broadcast<T: Element>(
        &self,
        root: usize,
        bufs: &mut [impl DeviceWrite<T, AnyBackend>],
    ) -> Result<()> {
        match &self.imp {
            Imp::InProcess => collective::broadcast(&self.streams, root, bufs),
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) => n.broadcast(
                &self.streams,
                root,
                None::<&gpukit_core::GpuArray<T, AnyBackend>>,
                bufs,
            ),
        }
    }

    /// Out of place: every rank's `dst[r]` becomes a copy of `src`, an array of rank
    /// `root`'s device.
    pub fn broadcast_into<T: Element>(
        &self,
        root: usize,
        src: &impl DeviceRead<T, AnyBackend>,
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
    ) -> Result<()> {
        match &self.imp {
            Imp::InProcess => collective::broadcast_into(&self.streams, root, src, dst),
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) => n.broadcast(&self.streams, root, Some(src), dst),
        }
    }

    /// Every rank's `dst[r]` (`n * len` elements) receives rank `k`'s `src[k]` (`len`) at
    /// elements `k * len..(k + 1) * len`.
    pub fn all_gather_into<T: Element>(
        &self,
        src: &[impl DeviceRead<T, AnyBackend>],
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
    ) -> Result<()> {
        match &self.imp {
            Imp::InProcess => collective::all_gather_into(&self.streams, src, dst),
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) => n.all_gather(&self.streams, src, dst),
        }
    }

    /// Rank `r`'s `dst[r]` (`len` elements) receives elements `r * len..(r + 1) * len` of
    /// `src[0] op ... op src[n-1]` (each `n * len`).
    pub fn reduce_scatter_into<T: Numeric>(
        &self,
        src: &[impl DeviceRead<T, AnyBackend>],
        dst: &mut [impl DeviceWrite<T, AnyBackend>],
        op: CollectiveOp,
    ) -> Result<()> {
        match &self.imp {
            Imp::InProcess => collective::reduce_scatter_into(&self.streams, src, dst, op),
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) => n.reduce_scatter(&self.streams, src, dst, op),
        }
    }

    /// Point to point: rank `from` sends `src` (of its device) and rank `to` receives it
    /// into `dst` (of its device): NCCL's `send`/`recv` pair, or a peer copy on rank `to`'s
    /// stream in process.
    pub fn send_recv<T: Element>(
        &self,
        from: usize,
        src: &impl DeviceRead<T, AnyBackend>,
        to: usize,
        dst: &mut impl DeviceWrite<T, AnyBackend>,
    ) -> Result<()> {
        const CALL: &str = "Communicator::send_recv";
        for (arg, rank) in [("from", from), ("to", to)] {
            if rank >= self.world_size() {
                return Err(Error::InvalidArgument {
                    op: CALL,
                    arg,
                    message: format!("rank {rank} of {} ranks", self.world_size()),
                });
            }
        }
        let (s_from, s_to) = (
            std::slice::from_ref(&self.streams[from]),
            std::slice::from_ref(&self.streams[to]),
        );
        collective::check_arrays(CALL, s_from, "src", std::slice::from_ref(src), None)?;
        collective::check_arrays(
            CALL,
            s_to,
            "dst",
            std::slice::from_ref(&*dst),
            Some(src.len()),
        )?;
        match &self.imp {
            #[cfg(feature = "cuda")]
            Imp::Nccl(n) if from != to => n.send_recv(&self.streams, from, src, to, dst),
            _ => {
                let s = &self.streams[to];
                if from == to {
                    s.copy(src, dst)
                } else {
                    s.copy_peer(src, dst)
                }
            }
        }
    }

    /// Waits until every rank's stream has finished its queued work.
    pub fn sync(&self) -> Result<()> {
        super::first_error(self.streams.iter().map(|s| s.sync()))
    }
}
