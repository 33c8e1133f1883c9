//! Reading the launchers' variables into a [`LaunchEnv`]: which launcher started this
//! process, its rank and world, and where rank 0 can be reached (the [module
//! docs](super) list the variables and the precedence).

use std::path::PathBuf;

use gpukit_core::{Error, Result};

use super::MAX_RUN_ID;

const OP_ENV: &str = "LaunchEnv::from_env";

/// Which launcher's variables [`LaunchEnv`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LaunchSource {
    /// torchrun or `torch.distributed.launch`: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
    /// `LOCAL_WORLD_SIZE`.
    Torchrun,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`,
    /// `SLURM_NTASKS_PER_NODE` or `SLURM_TASKS_PER_NODE`.
    Slurm,
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`.
    OpenMpi,
    /// No launcher: rank 0 of 1.
    Single,
}

/// This process's place in a multi-process job, from its launcher's environment variables
/// (the [module docs](super) list them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// This process's rank, below `world_size`.
    pub rank: usize,
    /// How many processes the job has, at least 1.
    pub world_size: usize,
    /// This process's rank among those on its node (the GPU to use), below
    /// `local_world_size`.
    pub local_rank: usize,
    /// How many of the job's processes run on this node.
    pub local_world_size: usize,
    /// `MASTER_ADDR` and `MASTER_PORT`, when set: rank 0's host, and torchrun's store port.
    pub master: Option<(String, u16)>,
    /// `GPUKIT_ID_FILE`: where [`share_id`](super::share_id) passes the id through a shared
    /// filesystem.
    pub id_file: Option<PathBuf>,
    /// The port [`share_id`](super::share_id)'s TCP rendezvous uses on the master's host:
    /// `GPUKIT_RENDEZVOUS_PORT`, else `MASTER_PORT + 1`; `None` when neither is set.
    pub rendezvous_port: Option<u16>,
    /// What tells this run's id file from an earlier run's (the [module docs](super) say
    /// where it comes from); `None` where the launcher gives nothing unique.
    pub run_id: Option<String>,
    /// The launcher whose variables were read.
    pub source: LaunchSource,
}

impl LaunchEnv {
    /// Reads the process's environment; see [`LaunchEnv::from_vars`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the variable at fault, as [`LaunchEnv::from_vars`].
    pub fn from_env() -> Result<LaunchEnv> {
        let mut env =
            Self::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into()))?;
        // A path need not be UTF-8: take it as the OS gives it.
        if let Some(path) = std::env::var_os("GPUKIT_ID_FILE").filter(|p| !p.is_empty()) {
            env.id_file = Some(PathBuf::from(path));
        }
        Ok(env)
    }

    /// Reads the variables `get` returns (`None` for unset): the testable core of
    /// [`LaunchEnv::from_env`]. The [module docs](super) give the variables, the precedence
    /// between launchers and the defaults.
    ///
    /// ```
    /// use gpukit::launch::{LaunchEnv, LaunchSource};
    ///
    /// let vars = [("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8"), ("SLURM_LOCALID", "1"),
    ///             ("SLURM_TASKS_PER_NODE", "4(x2)"), ("GPUKIT_ID_FILE", "/shared/id")];
    /// let get = |name: &str| vars.iter().find(|v| v.0 == name).map(|v| v.1.to_string());
    /// let env = LaunchEnv::from_vars(get)?;
    /// assert_eq!((env.source, env.rank, env.world_size), (LaunchSource::Slurm, 5, 8));
    /// assert_eq!((env.local_rank, env.local_world_size), (1, 4));
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] with `op` `"LaunchEnv::from_env"` and `arg` the variable at
    /// fault: a value that is not a number (or port), a rank not below the world size, a
    /// world size of 0, a local rank not below the local world size, a rank variable without
    /// its world size (or the reverse), half of `MASTER_ADDR`/`MASTER_PORT`, and a world of
    /// more than one process with neither `MASTER_ADDR`/`MASTER_PORT` nor `GPUKIT_ID_FILE`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<LaunchEnv> {
        let vars = Vars(get);
        let (source, raw) = if vars.get("RANK").is_some() {
            (LaunchSource::Torchrun, torchrun(&vars)?)
        } else if vars.get("SLURM_PROCID").is_some() {
            (LaunchSource::Slurm, slurm(&vars)?)
        } else if vars.get("OMPI_COMM_WORLD_RANK").is_some() {
            (LaunchSource::OpenMpi, open_mpi(&vars)?)
        } else {
            (LaunchSource::Single, single(&vars)?)
        };
        let (rank, world_size, local_rank, local_world_size) = raw.check()?;

        let master = match (vars.get("MASTER_ADDR"), vars.get("MASTER_PORT")) {
            (Some(addr), Some(port)) => {
                Some((addr.trim().to_string(), port_var("MASTER_PORT", &port)?))
            }
            (Some(addr), None) => {
                return Err(invalid!(
                    OP_ENV,
                    "MASTER_PORT",
                    "MASTER_ADDR={addr:?} is set but MASTER_PORT is not: set both, or neither"
                ))
            }
            (None, Some(port)) => {
                return Err(invalid!(
                    OP_ENV,
                    "MASTER_ADDR",
                    "MASTER_PORT={port:?} is set but MASTER_ADDR is not: set both, or neither"
                ))
            }
            (None, None) => None,
        };
        let rendezvous_port = match (vars.get("GPUKIT_RENDEZVOUS_PORT"), &master) {
            (Some(port), _) => Some(port_var("GPUKIT_RENDEZVOUS_PORT", &port)?),
            (None, Some((_, port))) => Some(port.checked_add(1).ok_or_else(|| {
                invalid!(
                    OP_ENV,
                    "MASTER_PORT",
                    "MASTER_PORT={port} leaves no next port for gpukit's rendezvous: set \
                     GPUKIT_RENDEZVOUS_PORT"
                )
            })?),
            (None, None) => None,
        };
        let id_file = vars.get("GPUKIT_ID_FILE").map(PathBuf::from);
        if world_size > 1 && master.is_none() && id_file.is_none() {
            return Err(invalid!(
                OP_ENV,
                "MASTER_ADDR",
                "{}={world_size} but neither MASTER_ADDR/MASTER_PORT nor GPUKIT_ID_FILE is \
                 set: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port), or \
                 GPUKIT_ID_FILE (a path every rank sees)",
                raw.world.1,
            ));
        }
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            local_world_size,
            master,
            id_file,
            rendezvous_port,
            run_id: run_id(&vars, source)?,
            source,
        })
    }
}

/// The variables, with empty values taken as unset.
struct Vars<G>(G);

impl<G: Fn(&str) -> Option<String>> Vars<G> {
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// The variable as a number, `None` when unset.
    fn num(&self, name: &'static str) -> Result<Option<(usize, &'static str)>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) => Ok(Some((n, name))),
                Err(_) => Err(invalid!(
                    OP_ENV,
                    name,
                    "{name}={v:?} is not a non-negative integer"
                )),
            },
        }
    }

    /// The variable as a number, which must be set since `because` is.
    fn needed(&self, name: &'static str, because: &'static str) -> Result<(usize, &'static str)> {
        let why = || {
            let value = self.get(because).unwrap_or_default();
            invalid!(OP_ENV, name, "{because}={value:?} is set but {name} is not")
        };
        self.num(name)?.ok_or_else(why)
    }
}

/// A launcher's numbers, each with the variable it came from, before the checks.
struct Raw {
    rank: (usize, &'static str),
    world: (usize, &'static str),
    local_rank: Option<(usize, &'static str)>,
    local_world: Option<(usize, &'static str)>,
}

impl Raw {
    /// Checks the numbers and fills in the local ones: `(rank, world, local_rank, local_world)`.
    fn check(&self) -> Result<(usize, usize, usize, usize)> {
        let ((rank, rank_var), (world, world_var)) = (self.rank, self.world);
        if world == 0 {
            return Err(invalid!(
                OP_ENV,
                world_var,
                "{world_var}=0: a job has at least one process"
            ));
        }
        if rank >= world {
            return Err(invalid!(
                OP_ENV,
                rank_var,
                "{rank_var}={rank} is not below {world_var}={world}"
            ));
        }
        let local_world = match self.local_world {
            None => world,
            Some((0, var)) => {
                return Err(invalid!(
                    OP_ENV,
                    var,
                    "{var}=0: a node runs at least one process"
                ))
            }
            Some((n, var)) if n > world => {
                return Err(invalid!(
                    OP_ENV,
                    var,
                    "{var}={n} is more than {world_var}={world}"
                ))
            }
            Some((n, _)) => n,
        };
        let local_rank = match self.local_rank {
            None => rank % local_world,
            Some((r, var)) if r >= local_world => {
                let size = match self.local_world {
                    Some((_, size_var)) => format!("{size_var}={local_world}"),
                    None => format!("{world_var}={world} (no local world size is set)"),
                };
                return Err(invalid!(OP_ENV, var, "{var}={r} is not below {size}"));
            }
            Some((r, _)) => r,
        };
        Ok((rank, world, local_rank, local_world))
    }
}

fn torchrun<G: Fn(&str) -> Option<String>>(vars: &Vars<G>) -> Result<Raw> {
    Ok(Raw {
        rank: vars.needed("RANK", "RANK")?,
        world: vars.needed("WORLD_SIZE", "RANK")?,
        local_rank: vars.num("LOCAL_RANK")?,
        local_world: vars.num("LOCAL_WORLD_SIZE")?,
    })
}

fn slurm<G: Fn(&str) -> Option<String>>(vars: &Vars<G>) -> Result<Raw> {
    let local_world = match vars.num("SLURM_NTASKS_PER_NODE")? {
        Some(n) => Some(n),
        None => match vars.get("SLURM_TASKS_PER_NODE") {
            None => None,
            Some(list) => {
                let node = vars.num("SLURM_NODEID")?.map_or(0, |n| n.0);
                Some((tasks_on_node(&list, node)?, "SLURM_TASKS_PER_NODE"))
            }
        },
    };
    Ok(Raw {
        rank: vars.needed("SLURM_PROCID", "SLURM_PROCID")?,
        world: vars.needed("SLURM_NTASKS", "SLURM_PROCID")?,
        local_rank: vars.num("SLURM_LOCALID")?,
        local_world,
    })
}

/// The tasks on node `node` from Slurm's `SLURM_TASKS_PER_NODE` (`4(x2),3`: 4 on each of
/// the first two nodes, 3 on the third), or the first entry when the list is shorter.
pub(super) fn tasks_on_node(list: &str, node: usize) -> Result<usize> {
    let bad = || {
        invalid!(
            OP_ENV,
            "SLURM_TASKS_PER_NODE",
            "SLURM_TASKS_PER_NODE={list:?} is not a list like `4(x2),3`"
        )
    };
    let (mut first, mut mine) = (None, None);
    let mut skip = node;
    // Every field is checked, not only those up to this node's.
    for field in list.trim().split(',') {
        let (count, times) = match field.split_once('(') {
            None => (field, 1),
            Some((count, rest)) => {
                let times = rest.strip_prefix('x').and_then(|r| r.strip_suffix(')'));
                (
                    count,
                    times
                        .and_then(|t| t.parse::<usize>().ok())
                        .ok_or_else(bad)?,
                )
            }
        };
        let count = count.trim().parse::<usize>().map_err(|_| bad())?;
        first.get_or_insert(count);
        if mine.is_none() && skip < times {
            mine = Some(count);
        }
        skip = skip.saturating_sub(times);
    }
    mine.or(first).ok_or_else(bad)
}

fn open_mpi<G: Fn(&str) -> Option<String>>(vars: &Vars<G>) -> Result<Raw> {
    Ok(Raw {
        rank: vars.needed("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK")?,
        world: vars.needed("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")?,
        local_rank: vars.num("OMPI_COMM_WORLD_LOCAL_RANK")?,
        local_world: vars.num("OMPI_COMM_WORLD_LOCAL_SIZE")?,
    })
}

fn single<G: Fn(&str) -> Option<String>>(vars: &Vars<G>) -> Result<Raw> {
    // N processes that each think they are rank 0 of 1 would never meet: refuse.
    if let Some((world, _)) = vars.num("WORLD_SIZE")? {
        if world != 1 {
            return Err(invalid!(
                OP_ENV,
                "RANK",
                "WORLD_SIZE={world} is set but RANK is not (nor SLURM_PROCID or \
                 OMPI_COMM_WORLD_RANK)"
            ));
        }
    }
    Ok(Raw {
        rank: (0, "RANK"),
        world: (1, "WORLD_SIZE"),
        local_rank: None,
        local_world: None,
    })
}

/// The run id: `GPUKIT_RUN_ID`, else the launcher's job (and restart) ids.
fn run_id<G: Fn(&str) -> Option<String>>(
    vars: &Vars<G>,
    source: LaunchSource,
) -> Result<Option<String>> {
    if let Some(id) = vars.get("GPUKIT_RUN_ID") {
        if id.len() > MAX_RUN_ID {
            let len = id.len();
            let message = format!("GPUKIT_RUN_ID is {len} bytes long, more than {MAX_RUN_ID}");
            return Err(invalid!(OP_ENV, "GPUKIT_RUN_ID", "{message}"));
        }
        return Ok(Some(id));
    }
    let names: &[&str] = match source {
        LaunchSource::Torchrun => &["TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"],
        LaunchSource::Slurm => &["SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT"],
        LaunchSource::OpenMpi if vars.get("PMIX_NAMESPACE").is_some() => &["PMIX_NAMESPACE"],
        LaunchSource::OpenMpi => &["OMPI_MCA_ess_base_jobid"],
        LaunchSource::Single => &[],
    };
    if names.first().and_then(|n| vars.get(n)).is_none() {
        return Ok(None);
    }
    let parts: Vec<String> = names
        .iter()
        .filter_map(|n| vars.get(n).map(|v| format!("{n}={v}")))
        .collect();
    let mut id = parts.join(",");
    while id.len() > MAX_RUN_ID {
        id.pop();
    }
    Ok(Some(id))
}

fn port_var(name: &'static str, value: &str) -> Result<u16> {
    match value.trim().parse::<u16>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(invalid!(
            OP_ENV,
            name,
            "{name}={value:?} is not a port (1 to 65535)"
        )),
    }
}
