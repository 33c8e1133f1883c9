//! `ProcessGroup`: this process's rank of a job of several processes (one per GPU, on one
//! machine or many), joined through the launcher's environment.

use std::time::Duration;

use gpukit_core::collective;
use gpukit_core::{CollectiveOp, DeviceRead, DeviceWrite, Element, Error, Numeric, Result};

use super::Stream;
use crate::any::AnyBackend;
use crate::context::Context;
use crate::launch::LaunchEnv;

/// How long [`ProcessGroup::from_env`] waits for the other ranks to join.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// This process's rank of a job that a launcher (`torchrun`, Slurm's `srun`, `mpirun`)
/// started as one process per GPU, on one machine or many: NCCL, the engine every framework
/// uses across machines, with the unique id shared as [`crate::launch`] describes.
///
/// Each process opens its own device (usually `cuda:LOCAL_RANK`, [`LaunchEnv::local_rank`])
/// and joins; every rank must then make the same calls in the same order, each with its own
/// array. Calls are queued on the context's default stream and ordered like every other op.
///
/// ```no_run
/// use gpukit::{CollectiveOp, Context, DeviceSpec, LaunchEnv, ProcessGroup};
///
/// let env = LaunchEnv::from_env()?;                       // RANK, WORLD_SIZE, LOCAL_RANK, ...
/// let ctx = Context::new(DeviceSpec::Cuda(Some(env.local_rank)))?;
/// let pg = ProcessGroup::from_env(&ctx)?;
/// let mut grads = ctx.alloc_upload(&[pg.rank() as f32; 1024])?;
/// pg.all_reduce(&mut grads, CollectiveOp::Avg)?;          // every rank: the mean
/// # Ok::<(), gpukit::Error>(())
/// ```
///
/// What runs where: on CUDA, NCCL (a typed [`Error::Unavailable`] naming what to install
/// when the library is missing and the job has more than one process). A job of one process
/// runs on every backend without NCCL (the collectives are then copies, or nothing); a job
/// of several processes on the CPU or Vulkan backend is [`Error::Unavailable`]: there, run
/// the ranks as devices of one process ([`crate::DeviceGroup`], [`crate::Communicator`]).
#[derive(Debug)]
pub struct ProcessGroup {
    env: LaunchEnv,
    stream: Stream,
    imp: Imp,
}

#[derive(Debug)]
enum Imp {
    /// A job of one process, without NCCL.
    Alone,
    #[cfg(feature = "cuda")]
    Nccl(std::sync::Mutex<gpukit_cuda::nccl::NcclComm>),
}

impl ProcessGroup {
    /// Joins the job described by the launcher's environment ([`LaunchEnv::from_env`]) on
    /// `ctx`, waiting up to [`JOIN_TIMEOUT`] for the other ranks.
    pub fn from_env(ctx: &Context) -> Result<ProcessGroup> {
        ProcessGroup::join(ctx, LaunchEnv::from_env()?, JOIN_TIMEOUT)
    }

    /// Joins the job `env` describes on `ctx`: rank 0 makes the NCCL unique id, the launch
    /// module's file or TCP rendezvous hands it to every rank, each initialises its rank.
    pub fn join(ctx: &Context, env: LaunchEnv, timeout: Duration) -> Result<ProcessGroup> {
        let stream = ctx.default_stream().clone();
        let imp = match nccl_rank(ctx, &env, timeout)? {
            Some(imp) => imp,
            None => Imp::Alone,
        };
        Ok(ProcessGroup { env, stream, imp })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.env.rank
    }

    /// How many processes.
    pub fn world_size(&self) -> usize {
        self.env.world_size
    }

    /// The launcher's environment the group was joined with.
    pub fn env(&self) -> &LaunchEnv {
        &self.env
    }

    /// `"nccl"`, or `"alone"` for a job of one process without NCCL.
    pub fn implementation(&self) -> &'static str {
        match &self.imp {
            Imp::Alone => "alone",
            #[cfg(feature = "cuda")]
            Imp::Nccl(_) => "nccl",
        }
    }

    /// In place: `buf` becomes the reduction of every rank's `buf`.
    pub fn all_reduce<T: Numeric>(
        &self,
        buf: &mut impl DeviceWrite<T, AnyBackend>,
        op: CollectiveOp,
    ) -> Result<()> {
        collective::check_op::<T>("ProcessGroup::all_reduce", op)?;
        self.mine("ProcessGroup::all_reduce", "buf", &*buf)?;
        match &self.imp {
            Imp::Alone => Ok(()),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                let len = buf.len();
                // SAFETY: `buf` is `len` elements of `T` on this rank's device, in place.
                self.nccl(c, &[], &[buf.slice_ref()], |comm, p| unsafe {
                    comm.all_reduce(p.recv(), p.recv(), len, T::DTYPE, op, p.stream)
                })
            }
        }
    }

    /// Out of place: `dst` = the reduction of every rank's `src` (the same length).
    pub fn all_reduce_into<T: Numeric>(
        &self,
        src: &impl DeviceRead<T, AnyBackend>,
        dst: &mut impl DeviceWrite<T, AnyBackend>,
        op: CollectiveOp,
    ) -> Result<()> {
        const CALL: &str = "ProcessGroup::all_reduce_into";
        collective::check_op::<T>(CALL, op)?;
        self.mine(CALL, "src", src)?;
        self.mine(CALL, "dst", &*dst)?;
        same_len(CALL, "dst", src.len(), dst.len())?;
        match &self.imp {
            Imp::Alone => self.stream.copy(src, dst),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                let len = src.len();
                // SAFETY: `src` and `dst` are `len` elements of `T` on this rank's device.
                self.nccl(
                    c,
                    &[src.slice_ref()],
                    &[dst.slice_ref()],
                    |comm, p| unsafe {
                        comm.all_reduce(p.send(), p.recv(), len, T::DTYPE, op, p.stream)
                    },
                )
            }
        }
    }

    /// In place: every rank's `buf` becomes rank `root`'s.
    pub fn broadcast<T: Element>(
        &self,
        buf: &mut impl DeviceWrite<T, AnyBackend>,
        root: usize,
    ) -> Result<()> {
        collective::check_root("ProcessGroup::broadcast", root, self.world_size())?;
        self.mine("ProcessGroup::broadcast", "buf", &*buf)?;
        match &self.imp {
            Imp::Alone => Ok(()),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                let len = buf.len();
                // SAFETY: `buf` is `len` elements of `T` on this rank's device, in place.
                self.nccl(c, &[], &[buf.slice_ref()], |comm, p| unsafe {
                    comm.broadcast(p.recv(), p.recv(), len, T::DTYPE, root, p.stream)
                })
            }
        }
    }

    /// `dst` (`world_size * len` elements) receives rank `k`'s `src` (`len`) at elements
    /// `k * len..(k + 1) * len`.
    pub fn all_gather_into<T: Element>(
        &self,
        src: &impl DeviceRead<T, AnyBackend>,
        dst: &mut impl DeviceWrite<T, AnyBackend>,
    ) -> Result<()> {
        const CALL: &str = "ProcessGroup::all_gather_into";
        self.mine(CALL, "src", src)?;
        self.mine(CALL, "dst", &*dst)?;
        let len = src.len();
        same_len(CALL, "dst", self.times_world(CALL, len)?, dst.len())?;
        match &self.imp {
            Imp::Alone => self.stream.copy(src, dst),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                // SAFETY: `src` is `len` elements and `dst` `world_size * len`, on this device.
                self.nccl(
                    c,
                    &[src.slice_ref()],
                    &[dst.slice_ref()],
                    |comm, p| unsafe {
                        comm.all_gather(p.send(), p.recv(), len, T::DTYPE, p.stream)
                    },
                )
            }
        }
    }

    /// `dst` (`len` elements) receives elements `rank * len..(rank + 1) * len` of the
    /// reduction of every rank's `src` (`world_size * len`).
    pub fn reduce_scatter_into<T: Numeric>(
        &self,
        src: &impl DeviceRead<T, AnyBackend>,
        dst: &mut impl DeviceWrite<T, AnyBackend>,
        op: CollectiveOp,
    ) -> Result<()> {
        const CALL: &str = "ProcessGroup::reduce_scatter_into";
        collective::check_op::<T>(CALL, op)?;
        self.mine(CALL, "src", src)?;
        self.mine(CALL, "dst", &*dst)?;
        let len = dst.len();
        same_len(CALL, "src", self.times_world(CALL, len)?, src.len())?;
        match &self.imp {
            Imp::Alone => self.stream.copy(src, dst),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                // SAFETY: `src` is `world_size * len` elements and `dst` `len`, on this device.
                self.nccl(
                    c,
                    &[src.slice_ref()],
                    &[dst.slice_ref()],
                    |comm, p| unsafe {
                        comm.reduce_scatter(p.send(), p.recv(), len, T::DTYPE, op, p.stream)
                    },
                )
            }
        }
    }

    /// Sends `buf` to rank `peer`, which must call [`ProcessGroup::recv`] with a buffer of
    /// the same length.
    pub fn send<T: Element>(
        &self,
        buf: &impl DeviceRead<T, AnyBackend>,
        peer: usize,
    ) -> Result<()> {
        self.check_peer("ProcessGroup::send", peer)?;
        self.mine("ProcessGroup::send", "buf", buf)?;
        match &self.imp {
            Imp::Alone => Ok(()),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                let len = buf.len();
                // SAFETY: `buf` is `len` elements of `T` on this rank's device, read only.
                self.nccl(c, &[buf.slice_ref()], &[], |comm, p| unsafe {
                    comm.send(p.send(), len, T::DTYPE, peer, p.stream)
                })
            }
        }
    }

    /// Receives into `buf` what rank `peer` sends with [`ProcessGroup::send`].
    pub fn recv<T: Element>(
        &self,
        buf: &mut impl DeviceWrite<T, AnyBackend>,
        peer: usize,
    ) -> Result<()> {
        self.check_peer("ProcessGroup::recv", peer)?;
        self.mine("ProcessGroup::recv", "buf", &*buf)?;
        match &self.imp {
            Imp::Alone => Ok(()),
            #[cfg(feature = "cuda")]
            Imp::Nccl(c) => {
                let len = buf.len();
                // SAFETY: `buf` is `len` elements of `T` on this rank's device.
                self.nccl(c, &[], &[buf.slice_ref()], |comm, p| unsafe {
                    comm.recv(p.recv(), len, T::DTYPE, peer, p.stream)
                })
            }
        }
    }

    /// Checks that `a` is memory of this rank's context.
    fn mine<T: Element>(
        &self,
        call: &'static str,
        arg: &'static str,
        a: &impl DeviceRead<T, AnyBackend>,
    ) -> Result<()> {
        let stream = std::slice::from_ref(&self.stream);
        collective::check_arrays(call, stream, arg, std::slice::from_ref(a), None).map(|_| ())
    }

    /// `len * world_size`, or an error naming `call`.
    fn times_world(&self, call: &'static str, len: usize) -> Result<usize> {
        len.checked_mul(self.world_size())
            .ok_or_else(|| Error::InvalidArgument {
                op: call,
                arg: "src",
                message: format!("{len} elements times {} ranks overflows", self.world_size()),
            })
    }

    /// A peer is another rank of the job.
    fn check_peer(&self, call: &'static str, peer: usize) -> Result<()> {
        collective::check_root(call, peer, self.world_size())?;
        if peer == self.rank() {
            return Err(Error::InvalidArgument {
                op: call,
                arg: "peer",
                message: format!("rank {peer} is this process's own rank"),
            });
        }
        Ok(())
    }

    /// Queues one NCCL call on this rank's stream, ordered as reads of `reads` and writes
    /// of `writes` (an empty call queues nothing).
    #[cfg(feature = "cuda")]
    fn nccl(
        &self,
        comm: &std::sync::Mutex<gpukit_cuda::nccl::NcclComm>,
        reads: &[gpukit_core::SliceRef<'_, AnyBackend>],
        writes: &[gpukit_core::SliceRef<'_, AnyBackend>],
        call: impl FnOnce(&gpukit_cuda::nccl::NcclComm, &super::nccl::Parts) -> Result<()>,
    ) -> Result<()> {
        if reads.iter().chain(writes).all(|s| s.bytes() == 0) {
            return Ok(());
        }
        let comm = comm.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: `call` queues one NCCL call on the raw stream given, touching only these
        // ranges within their lengths (the callers checked every length against the count
        // they pass); the writes come from `&mut` borrows this call holds.
        unsafe {
            self.stream.with_raw_parts(reads, writes, |r, w, raw| {
                call(&comm, &super::nccl::Parts::new(r, w, raw))
            })
        }?
    }
}

/// [`Error::LengthMismatch`] naming the call, unless the lengths agree.
fn same_len(call: &'static str, arg: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        return Ok(());
    }
    Err(Error::LengthMismatch {
        op: call,
        arg,
        expected,
        got,
    })
}

/// On a CUDA context with NCCL: this process's NCCL rank. `None` for a job of one process
/// that runs without NCCL; [`Error::Unavailable`] for a job of several that cannot.
fn nccl_rank(ctx: &Context, env: &LaunchEnv, timeout: Duration) -> Result<Option<Imp>> {
    let alone = env.world_size == 1;
    #[cfg(feature = "cuda")]
    if let AnyBackend::Cuda(backend) = ctx.backend() {
        use gpukit_cuda::nccl::{self, NcclComm, NcclId};
        match nccl::available() {
            Ok(()) => {
                let id =
                    crate::launch::share_id(env, || NcclId::new().map(|i| *i.as_bytes()), timeout)?;
                let comm = NcclComm::init_rank(
                    backend,
                    &NcclId::from_bytes(id),
                    env.rank,
                    env.world_size,
                )?;
                return Ok(Some(Imp::Nccl(std::sync::Mutex::new(comm))));
            }
            Err(reason) if alone => {
                tracing::info!(%reason, "ProcessGroup: a job of one process runs without NCCL");
                return Ok(None);
            }
            Err(reason) => return Err(reason),
        }
    }
    let _ = timeout;
    if alone {
        return Ok(None);
    }
    Err(Error::Unavailable {
        backend: "nccl",
        reason: format!(
            "NCCL unavailable: a job of {} processes needs NCCL, which runs on CUDA devices, and \
             this context is the {} backend (in one process, `DeviceGroup` and `Communicator` \
             run collectives on every backend)",
            env.world_size,
            ctx.backend_name()
        ),
    })
}
