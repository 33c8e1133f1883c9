//! Starting as one process of many: which rank this is, and sharing a 128-byte id.
//!
//! A multi-process program (one process per GPU, started by `torchrun`, Slurm's `srun` or
//! Open MPI's `mpirun`) needs to know its place in the job, and rank 0 must hand every
//! other rank an opaque id (an NCCL unique id, say) before the processes can talk to each
//! other. [`LaunchEnv::from_env`] reads the launcher's variables; [`share_id`] carries the
//! id. Nothing here knows about NCCL or CUDA, and it is plain `std`.
//!
//! ```no_run
//! use std::time::Duration;
//! use gpukit::launch::{share_id, LaunchEnv};
//!
//! let env = LaunchEnv::from_env()?;     // rank 0 of 1 when no launcher is found
//! // Rank 0 makes the id (ncclGetUniqueId, say); every rank gets the same bytes back.
//! let id = share_id(&env, || Ok([7u8; 128]), Duration::from_secs(300))?;
//! println!("rank {} of {}, GPU {}", env.rank, env.world_size, env.local_rank);
//! # let _ = id;
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! ## What each launcher sets, and which wins
//!
//! The first of these whose rank variable is set is used ([`LaunchSource`] says which):
//!
//! 1. **torchrun** (and `torch.distributed.launch`): `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//!    `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`. A program started by torchrun
//!    inside a Slurm job is a torchrun program.
//! 2. **Slurm** (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, and the tasks on
//!    this node from `SLURM_NTASKS_PER_NODE`, else `SLURM_TASKS_PER_NODE` (`4(x2),3`: the
//!    entry of node `SLURM_NODEID`, else the first). Slurm sets no rendezvous address:
//!    export `MASTER_ADDR` (the first host of `scontrol show hostnames`) and `MASTER_PORT`,
//!    or `GPUKIT_ID_FILE`. Start the program with `srun`: a program the batch script runs
//!    directly sees the allocation's task count and would wait for ranks that never come.
//! 3. **Open MPI** (`mpirun`): `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
//!    `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`; `MASTER_ADDR` and
//!    `MASTER_PORT`, or `GPUKIT_ID_FILE`, as for Slurm.
//! 4. **Single**: none of them: rank 0 of 1 (an error if `WORLD_SIZE` says more than 1).
//!
//! `MASTER_ADDR`, `MASTER_PORT`, `GPUKIT_ID_FILE`, `GPUKIT_RENDEZVOUS_PORT` and
//! `GPUKIT_RUN_ID` are read whatever the launcher. A variable set to the empty string counts
//! as unset. A missing local world size is taken as the world size (one node); a missing
//! local rank as `rank % local_world_size` (right for the usual block distribution, and the
//! rank itself on one node). Every malformed or inconsistent value is
//! [`Error::InvalidArgument`] whose `arg` is the variable at fault and whose message shows
//! its value; nothing is guessed past that.
//!
//! ## How the id travels
//!
//! - **A file**, when `GPUKIT_ID_FILE` names a path on a filesystem every rank sees. Rank 0
//!   writes a temporary file in the same folder and renames it over the path, so a reader
//!   sees the whole file or none; the others poll until it appears. The file starts with a
//!   run id ([`LaunchEnv::run_id`]: `GPUKIT_RUN_ID`, else torchrun's
//!   `TORCHELASTIC_RUN_ID` and `TORCHELASTIC_RESTART_COUNT`, Slurm's `SLURM_JOB_ID`,
//!   `SLURM_STEP_ID` and `SLURM_RESTART_COUNT`, Open MPI's `PMIX_NAMESPACE` or
//!   `OMPI_MCA_ess_base_jobid`), and a reader takes only a file of its own run, so a file
//!   left by an earlier run is waited past, not used. Where there is no unique run id
//!   (torchrun without `--rdzv-id` has the run id `none`; a bare `mpirun`), set
//!   `GPUKIT_RUN_ID` to the same fresh value on every rank, or use a fresh path per run.
//!   On NFS a new file can take a few seconds (the attribute cache) to be seen elsewhere.
//! - **TCP** otherwise, at `MASTER_ADDR` on port `GPUKIT_RENDEZVOUS_PORT`, by default
//!   `MASTER_PORT + 1`: torchrun's own store already listens on `MASTER_PORT`. Rank 0
//!   listens on every interface (binding the wildcard address of `MASTER_ADDR`'s family, so
//!   a host name that resolves to a loopback address on rank 0's own node still works),
//!   accepts one connection per other rank, checks its hello (a magic and version, its
//!   rank and the world size; a rank out of range or seen twice is rejected and fails rank
//!   0) and answers with the id. The others connect, retrying until rank 0 listens. The
//!   port must be free on rank 0's node; there is no authentication, so use it on a
//!   trusted network only.
//!
//! Every wait ends at `share_id`'s timeout with an error naming the address or path.

use std::thread;
use std::time::{Duration, Instant};

use gpukit_core::{Error, Result};

/// The length of the id [`share_id`] carries (an NCCL unique id's).
pub const ID_LEN: usize = 128;

/// [`Error::InvalidArgument`] of call `$op` for argument `$arg`, the rest a `format!`.
// Defined before the submodules: a `macro_rules!` is in scope only below its definition.
macro_rules! invalid {
    ($op:expr, $arg:expr, $($message:tt)+) => {
        Error::InvalidArgument { op: $op, arg: $arg, message: format!($($message)+) }
    };
}

mod env;
mod file;
mod tcp;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

pub use env::{LaunchEnv, LaunchSource};

const OP_SHARE: &str = "share_id";
/// The first bytes of every hello, reply and id file.
const MAGIC: [u8; 8] = *b"GPUKITID";
const VERSION: u16 = 1;
/// Longest run id, so that it fits the id file's header with room to spare.
const MAX_RUN_ID: usize = 1024;
/// Longest pause between two polls of a file, two connection attempts or two `accept`s.
const MAX_POLL: Duration = Duration::from_millis(200);

/// Rank 0 calls `make` and hands its bytes to every other rank; every rank returns the same
/// bytes. With one process this is `make()`.
///
/// The id goes through [`LaunchEnv::id_file`] when that is set, else by TCP to
/// [`LaunchEnv::master`]'s host on [`LaunchEnv::rendezvous_port`] (the [module
/// docs](self) describe both). Each rank waits at most `timeout` in all; rank 0 returns once
/// every other rank has its answer (TCP) or once the file is written.
///
/// ```
/// use std::time::Duration;
/// use gpukit::launch::{share_id, LaunchEnv};
///
/// let env = LaunchEnv::from_vars(|_| None)?; // no launcher: rank 0 of 1
/// let id = share_id(&env, || Ok([1; 128]), Duration::from_secs(1))?;
/// assert_eq!(id, [1; 128]);
/// # Ok::<(), gpukit::Error>(())
/// ```
///
/// # Errors
///
/// `make`'s error on rank 0; else [`Error::InvalidArgument`] with `op` `"share_id"` and
/// `arg`:
/// - `"timeout"`: the wait ended (the message names the address or path, and the last
///   thing seen there);
/// - `"hello"`: two ranks disagree (a rank out of range or seen twice, other world sizes,
///   other protocol versions); rank 0 fails, and so does the rank it rejected;
/// - `"GPUKIT_RENDEZVOUS_PORT"`: the port cannot be bound, or something other than this
///   protocol speaks on it;
/// - `"GPUKIT_ID_FILE"`: rank 0 cannot write the file;
/// - `"env"`: `env` is inconsistent (a rank not below the world size, no way to pass the id).
pub fn share_id(
    env: &LaunchEnv,
    make: impl FnOnce() -> Result<[u8; ID_LEN]>,
    timeout: Duration,
) -> Result<[u8; ID_LEN]> {
    if env.rank >= env.world_size {
        let message = format!(
            "rank {} is not below the world size {}",
            env.rank, env.world_size
        );
        return Err(invalid!(OP_SHARE, "env", "{message}"));
    }
    if env.world_size == 1 {
        return make();
    }
    let start = Instant::now();
    // A timeout too long for `Instant` to add waits a year.
    let deadline = start
        .checked_add(timeout)
        .or_else(|| start.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(start);
    match (&env.id_file, &env.master, env.rendezvous_port) {
        (Some(path), _, _) => file::via_file(env, path, make, deadline, timeout),
        (None, Some((host, _)), Some(port)) => {
            tcp::via_tcp(env, host, port, make, deadline, timeout)
        }
        _ => Err(invalid!(
            OP_SHARE,
            "env",
            "a world of {} processes needs `id_file` (GPUKIT_ID_FILE) or `master` and \
             `rendezvous_port` (MASTER_ADDR, MASTER_PORT)",
            env.world_size,
        )),
    }
}

/// Time left before `deadline`, `None` once it has passed.
fn left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Sleeps `*pause` (at most until `deadline`) and doubles it, up to [`MAX_POLL`].
fn back_off(pause: &mut Duration, deadline: Instant) {
    if let Some(left) = left(deadline) {
        thread::sleep((*pause).min(left));
    }
    *pause = (*pause * 2).min(MAX_POLL);
}
