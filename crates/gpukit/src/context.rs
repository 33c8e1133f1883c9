//! `Context`: open the best usable device, or the one asked for, and say why others were
//! rejected.

use std::ops::Deref;

use gpukit_core::{DType, DeviceSpec, Error, Result};

use crate::config::{Config, FallbackPolicy, SpecOrigin};

use crate::any::AnyBackend;

/// A backend that was considered and not used, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The backend (`cuda`).
    pub backend: &'static str,
    /// Why it could not be used.
    pub reason: Error,
}

/// How a context's device was chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The device that was asked for.
    pub requested: DeviceSpec,
    /// Where the request came from.
    pub origin: SpecOrigin,
    /// Backends tried before the one in use, with the reasons they were rejected.
    pub rejected: Vec<Rejection>,
    /// The configured default element type.
    pub dtype: DType,
}

/// An opened device: CUDA when usable, else a Vulkan GPU, else the CPU backend.
///
/// `Context` dereferences to [`gpukit_core::Context`], which dereferences to its default
/// [`crate::Stream`]: everything in those two types is available here, and stream
/// operations called on a context run on its default stream. [`crate::Stream`]'s docs list
/// those methods by family, and [`gpukit_core::Context`]'s say why a context dereferences
/// to its stream. This type adds only how its device was chosen ([`Context::selection`]) to
/// the core context, which it wraps so that the backend stays out of the user's types.
///
/// ```
/// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
/// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0])?;
/// let b = ctx.alloc_upload(&[5.0f32, 6.0, 7.0, 8.0])?;
/// let mut out = ctx.alloc_zeros::<f32>(4)?;
/// ctx.add(&a, &b, &mut out)?;
/// assert_eq!(out.download()?, vec![6.0, 8.0, 10.0, 12.0]);
/// # Ok::<(), gpukit::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    inner: gpukit_core::Context<AnyBackend>,
    selection: Selection,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("backend", &self.backend_name())
            .field("device_id", &self.device_id())
            .field("id", &self.id())
            .field("selection", &self.selection)
            .finish()
    }
}

impl Deref for Context {
    type Target = gpukit_core::Context<AnyBackend>;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl Context {
    /// The device named by `GPU_DEVICE`, else the best usable one (CUDA, then a Vulkan GPU,
    /// then the CPU).
    /// Never panics; a malformed `GPU_DEVICE`, or a GPU it names that cannot be used, is an
    /// error. Reads no file (see [`Context::from_config`]).
    #[allow(clippy::should_implement_trait)] // fallible, so not `Default::default`
    pub fn default() -> Result<Context> {
        let env = crate::config::read_device_var()?;
        let (cfg, origin) = Config::resolve(None, env.as_deref(), None)?;
        Context::open(&cfg, origin)
    }

    /// Exactly the device asked for; an error says why it cannot be used.
    pub fn new(spec: DeviceSpec) -> Result<Context> {
        let (cfg, origin) = Config::resolve(Some(spec), None, None)?;
        Context::open(&cfg, origin)
    }

    /// The device configured by `gpu.toml` (or the file `GPU_CONFIG` names), overridden by
    /// `GPU_DEVICE`. A GPU named in the file that cannot be used falls back to the CPU
    /// when the file says `fallback = "cpu"` (the default); a GPU named in `GPU_DEVICE`
    /// must be usable.
    pub fn from_config() -> Result<Context> {
        let (cfg, origin) = Config::from_env()?;
        Context::open(&cfg, origin)
    }

    /// Opens a context for a configuration whose device came from `origin`.
    pub fn with_config(cfg: &Config, origin: SpecOrigin) -> Result<Context> {
        Context::open(cfg, origin)
    }

    fn open(cfg: &Config, origin: SpecOrigin) -> Result<Context> {
        let mut rejected = Vec::new();
        let inner = match cfg.device {
            DeviceSpec::Cpu(ordinal) => open_cpu(ordinal.unwrap_or(0))?,
            DeviceSpec::Auto => match open_cuda(None) {
                Ok(ctx) => ctx,
                Err(reason) => {
                    tracing::info!(%reason, "auto: the CUDA backend was rejected");
                    rejected.push(Rejection {
                        backend: "cuda",
                        reason,
                    });
                    match open_vulkan(None, true) {
                        Ok(ctx) => ctx,
                        Err(reason) => {
                            tracing::info!(%reason, "auto: the Vulkan backend was rejected; using the CPU backend");
                            rejected.push(Rejection {
                                backend: "vulkan",
                                reason,
                            });
                            open_cpu(0)?
                        }
                    }
                }
            },
            DeviceSpec::Cuda(_) | DeviceSpec::Vulkan(_) => {
                let (opened, backend) = match cfg.device {
                    DeviceSpec::Cuda(ordinal) => (open_cuda(ordinal), "cuda"),
                    DeviceSpec::Vulkan(ordinal) => (open_vulkan(ordinal, false), "vulkan"),
                    _ => unreachable!("matched above"),
                };
                match opened {
                    Ok(ctx) => ctx,
                    Err(reason) => {
                        let may_fall_back = matches!(origin, SpecOrigin::File(_))
                            && cfg.fallback == FallbackPolicy::Cpu;
                        if !may_fall_back {
                            return Err(reason);
                        }
                        tracing::warn!(%reason, "{}: falling back to the CPU backend", cfg.device);
                        rejected.push(Rejection { backend, reason });
                        open_cpu(0)?
                    }
                }
            }
        };
        Ok(Context {
            inner,
            selection: Selection {
                requested: cfg.device,
                origin,
                rejected,
                dtype: cfg.dtype,
            },
        })
    }

    /// How the device was chosen, with every rejected candidate and why.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The element type the configuration asks programs to default to.
    pub fn default_dtype(&self) -> DType {
        self.selection.dtype
    }

    /// The backend-generic context underneath.
    pub fn core(&self) -> &gpukit_core::Context<AnyBackend> {
        &self.inner
    }

    /// Waits for all work and returns every error still pending.
    pub fn close(self) -> Result<()> {
        self.inner.close()
    }
}

/// Logical CPU device `ordinal`.
fn open_cpu(ordinal: usize) -> Result<gpukit_core::Context<AnyBackend>> {
    gpukit_core::Context::new(AnyBackend::Cpu(gpukit_cpu::CpuBackend::device(ordinal)?))
}

/// The CUDA arm of the fallback chain: device `ordinal` (0 for `auto` and `cuda`) among
/// those `CUDA_VISIBLE_DEVICES` leaves visible. Fails with the probe's reason (no driver,
/// too old, no device, no NVRTC, with every path searched) or `InvalidDevice`.
#[cfg(feature = "cuda")]
fn open_cuda(ordinal: Option<usize>) -> Result<gpukit_core::Context<AnyBackend>> {
    let backend = gpukit_cuda::CudaBackend::new(ordinal.unwrap_or(0))?;
    gpukit_core::Context::new(AnyBackend::Cuda(backend))
}

/// The Vulkan arm: adapter `ordinal` in the wgpu backend's order, or the first usable one
/// (passing over CPU implementations such as lavapipe when `auto` asks). Fails with the
/// probe's reason (no loader, no driver, missing features) or `InvalidDevice`.
#[cfg(feature = "vulkan")]
fn open_vulkan(ordinal: Option<usize>, auto: bool) -> Result<gpukit_core::Context<AnyBackend>> {
    let opts = gpukit_wgpu::WgpuOptions {
        skip_cpu_adapters: auto,
        ..Default::default()
    };
    let backend = gpukit_wgpu::WgpuBackend::with_options(ordinal, opts)?;
    gpukit_core::Context::new(AnyBackend::Wgpu(backend))
}

/// Without the `vulkan` feature every Vulkan request is `Unavailable`, saying so.
#[cfg(not(feature = "vulkan"))]
fn open_vulkan(_ordinal: Option<usize>, _auto: bool) -> Result<gpukit_core::Context<AnyBackend>> {
    Err(Error::Unavailable {
        backend: "vulkan",
        reason: "not compiled in: this build of `gpukit` has no `vulkan` feature (it is on by \
                 default; enable it with `features = [\"vulkan\"]` on the `gpukit` dependency)"
            .to_owned(),
    })
}

/// Without the `cuda` feature there is no CUDA arm: every CUDA request is `Unavailable`,
/// saying so, and `auto` records it among the rejections.
#[cfg(not(feature = "cuda"))]
fn open_cuda(_ordinal: Option<usize>) -> Result<gpukit_core::Context<AnyBackend>> {
    Err(Error::Unavailable {
        backend: "cuda",
        reason: NOT_COMPILED_IN.to_owned(),
    })
}

/// The reason a CUDA request fails in a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
const NOT_COMPILED_IN: &str =
    "not compiled in: this build of `gpukit` has no `cuda` feature (it is on by default; \
     enable it with `features = [\"cuda\"]` on the `gpukit` dependency)";
