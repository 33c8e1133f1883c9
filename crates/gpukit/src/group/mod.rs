//! Several devices: `DeviceGroup` opens them together, `Communicator` runs collectives
//! over them in this process (`comm.rs`; NCCL's path in `nccl.rs`), and `ProcessGroup` is
//! this process's rank of a multi-process job (`process.rs`).

use gpukit_core::{DeviceSet, DeviceSpec, Error, Result, SpecBackend};

use crate::any::AnyBackend;
use crate::config::{Config, SpecOrigin, DEVICE_VAR};
use crate::context::Context;

mod comm;
#[cfg(feature = "cuda")]
mod nccl;
mod process;

pub use comm::Communicator;
pub use process::{ProcessGroup, JOIN_TIMEOUT};

/// A stream of the facade's backend.
type Stream = gpukit_core::Stream<AnyBackend>;

/// Several devices, one [`Context`] each, for data-parallel work: rank `r` is
/// `group[r]`.
///
/// Opened from a [`DeviceSet`] (`cuda:0,1`, `cuda:*`, `cpu:0..4`, `auto`), in code, from
/// `GPU_DEVICE` or from `gpu.toml`'s `devices` key. `auto` is every visible CUDA device,
/// else every Vulkan GPU that is not a CPU implementation, else two logical CPU devices
/// (the CPU backend has any number, each with its own memory pool and streams, so every
/// multi-device program runs and is tested on any machine).
///
/// ```
/// use gpukit::{CollectiveOp, DeviceGroup};
///
/// let group = DeviceGroup::new("cpu:0..2".parse()?)?;
/// let mut grads = group
///     .iter()
///     .enumerate()
///     .map(|(r, ctx)| ctx.alloc_upload(&[r as f32 + 1.0; 4]))
///     .collect::<gpukit::Result<Vec<_>>>()?;
/// group.communicator()?.all_reduce(&mut grads, CollectiveOp::Avg)?;
/// for g in &grads {
///     assert_eq!(g.download()?, [1.5; 4]);
/// }
/// # Ok::<(), gpukit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct DeviceGroup {
    contexts: Vec<Context>,
    set: DeviceSet,
}

impl DeviceGroup {
    /// Opens every device of `set`; an error says which could not be used and why.
    pub fn new(set: DeviceSet) -> Result<DeviceGroup> {
        let specs = resolve(&set)?;
        let contexts = specs
            .into_iter()
            .map(Context::new)
            .collect::<Result<Vec<_>>>()?;
        Ok(DeviceGroup { contexts, set })
    }

    /// The devices named by `GPU_DEVICE` (a set, or one device), else `auto`.
    #[allow(clippy::should_implement_trait)] // fallible, so not `Default::default`
    pub fn default() -> Result<DeviceGroup> {
        match crate::config::read_device_var()? {
            Some(text) => DeviceGroup::new(DeviceSet::parse_from(&text, DEVICE_VAR)?),
            None => DeviceGroup::new(DeviceSet::Auto),
        }
    }

    /// The devices named by `GPU_DEVICE`, else by the `devices` key of `gpu.toml` (or the
    /// file `GPU_CONFIG` names), else `auto`.
    pub fn from_config() -> Result<DeviceGroup> {
        if crate::config::read_device_var()?.is_some() {
            return DeviceGroup::default();
        }
        let (cfg, origin) = Config::from_env()?;
        match origin {
            SpecOrigin::File(_) => DeviceGroup::new(cfg.devices),
            _ => DeviceGroup::new(DeviceSet::Auto),
        }
    }

    /// The set the group was opened from.
    pub fn set(&self) -> &DeviceSet {
        &self.set
    }

    /// The contexts, rank order.
    pub fn contexts(&self) -> &[Context] {
        &self.contexts
    }

    /// How many devices.
    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    /// Whether the group has no device (never true of an opened group).
    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    /// The contexts, rank order.
    pub fn iter(&self) -> std::slice::Iter<'_, Context> {
        self.contexts.iter()
    }

    /// Each context's default stream, rank order.
    pub fn default_streams(&self) -> Vec<Stream> {
        self.contexts
            .iter()
            .map(|c| c.default_stream().clone())
            .collect()
    }

    /// A communicator over the group's devices, running on each device's default stream:
    /// NCCL where every device is a CUDA device and NCCL loads, else the in-process
    /// implementation ([`Communicator::in_process`]).
    pub fn communicator(&self) -> Result<Communicator> {
        Communicator::new(self.default_streams())
    }

    /// Waits for all work on every device; returns the first error.
    pub fn sync(&self) -> Result<()> {
        first_error(self.contexts.iter().map(|c| c.sync()))
    }
}

/// Runs every wait (none is skipped after a failure) and returns the first error.
fn first_error(waits: impl Iterator<Item = Result<()>>) -> Result<()> {
    let mut first = Ok(());
    for r in waits {
        if first.is_ok() {
            first = r;
        }
    }
    first
}

impl std::ops::Index<usize> for DeviceGroup {
    type Output = Context;

    fn index(&self, rank: usize) -> &Context {
        &self.contexts[rank]
    }
}

impl<'a> IntoIterator for &'a DeviceGroup {
    type Item = &'a Context;
    type IntoIter = std::slice::Iter<'a, Context>;

    fn into_iter(self) -> Self::IntoIter {
        self.contexts.iter()
    }
}

/// The device specs of a set, with `auto` and `*` resolved on this machine.
fn resolve(set: &DeviceSet) -> Result<Vec<DeviceSpec>> {
    let bad = |reason: String| Error::InvalidDeviceSpec {
        input: set.to_string(),
        origin: "code".into(),
        reason,
    };
    match set {
        DeviceSet::List(v) if v.is_empty() => Err(bad("it names no device".into())),
        DeviceSet::List(v) => {
            // `cpu` and `cpu:0` are one device.
            let key = |d: &DeviceSpec| (d.backend(), d.ordinal().unwrap_or(0));
            for (i, d) in v.iter().enumerate() {
                if v[..i].iter().any(|e| key(e) == key(d)) && d.backend().is_some() {
                    return Err(bad(format!("it names {d} twice")));
                }
            }
            Ok(v.clone())
        }
        DeviceSet::All(SpecBackend::Cpu) => Err(bad(
            "the CPU backend has as many logical devices as a set names: name them (`cpu:0..2`)"
                .into(),
        )),
        DeviceSet::All(backend) => match visible(*backend, false)? {
            0 => Err(bad(format!("no {} device is visible", backend.name()))),
            n => Ok(usable(*backend, n)),
        },
        DeviceSet::Auto => {
            for backend in [SpecBackend::Cuda, SpecBackend::Vulkan] {
                match visible(backend, true) {
                    Ok(n) if n > 0 => return Ok(usable(backend, n)),
                    Ok(_) => {}
                    Err(reason) => {
                        tracing::info!(%reason, "auto device set: the {} backend was rejected", backend.name());
                    }
                }
            }
            Ok(vec![DeviceSpec::Cpu(Some(0)), DeviceSpec::Cpu(Some(1))])
        }
    }
}

/// The specs of the first `n` devices of a GPU backend.
fn usable(backend: SpecBackend, n: usize) -> Vec<DeviceSpec> {
    (0..n).map(|i| backend.spec(Some(i))).collect()
}

/// How many devices of `backend` this process sees; for `auto` (`gpus_only`), Vulkan's
/// CPU implementations are not counted. Vulkan ordinals count every adapter, so with
/// `gpus_only` the GPUs are the first ones (the probe's order puts CPU adapters last).
fn visible(backend: SpecBackend, gpus_only: bool) -> Result<usize> {
    match backend {
        SpecBackend::Cpu => Ok(0),
        SpecBackend::Cuda => cuda_devices(),
        SpecBackend::Vulkan => vulkan_devices(gpus_only),
    }
}

#[cfg(feature = "cuda")]
fn cuda_devices() -> Result<usize> {
    gpukit_cuda::probe()
        .map(|p| p.devices.len())
        .map_err(|e| Error::Unavailable {
            backend: "cuda",
            reason: e.to_string(),
        })
}

#[cfg(not(feature = "cuda"))]
fn cuda_devices() -> Result<usize> {
    Ok(0)
}

#[cfg(feature = "vulkan")]
fn vulkan_devices(gpus_only: bool) -> Result<usize> {
    let probe = gpukit_wgpu::probe().map_err(|e| Error::Unavailable {
        backend: "vulkan",
        reason: e.to_string(),
    })?;
    Ok(probe
        .adapters
        .iter()
        .filter(|a| a.usable() && !(gpus_only && a.kind == gpukit_wgpu::AdapterKind::Cpu))
        .count())
}

#[cfg(not(feature = "vulkan"))]
fn vulkan_devices(_gpus_only: bool) -> Result<usize> {
    Ok(0)
}
