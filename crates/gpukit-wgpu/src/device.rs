//! Finding adapters (the probe) and opening a device on one.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use gpukit_core::{Error, Result};

/// The backend's name, in errors and `Context::backend_name()`.
pub(crate) const NAME: &str = "vulkan";

/// The wgpu backends this crate uses: Vulkan everywhere, Metal on Apple, DX12 on Windows.
/// Never GL: on a machine with only Mesa's llvmpipe, wgpu would otherwise fall back to
/// OpenGL silently, which has no f64 and is not the Vulkan driver that was asked for.
pub(crate) fn wgpu_backends() -> wgpu::Backends {
    wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12
}

/// The device features the backend needs, and why.
pub(crate) const REQUIRED: &[(wgpu::Features, &str)] = &[
    (
        wgpu::Features::IMMEDIATES,
        "IMMEDIATES (push constants carry every kernel's scalars and array lengths)",
    ),
    (
        wgpu::Features::TIMESTAMP_QUERY,
        "TIMESTAMP_QUERY (timing events)",
    ),
];

/// The optional features the backend turns on where the adapter has them.
pub(crate) fn optional_features() -> wgpu::Features {
    wgpu::Features::SHADER_F16
        | wgpu::Features::SHADER_F64
        | wgpu::Features::SHADER_INT64
        | wgpu::Features::SUBGROUP
        | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
}

/// Runs a wgpu future to completion on this thread. On native backends wgpu's futures are
/// ready when first polled (the work is done inside the call); the loop only yields in
/// case one is not.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// The kind of an adapter, as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdapterKind {
    /// A discrete GPU.
    Discrete,
    /// A GPU integrated with the CPU.
    Integrated,
    /// A virtual GPU (a VM's).
    Virtual,
    /// Unknown.
    Other,
    /// A CPU implementation (Mesa's lavapipe, SwiftShader): correct, but slower than the
    /// CPU backend, so `auto` passes it over.
    Cpu,
}

impl AdapterKind {
    fn from_wgpu(t: wgpu::DeviceType) -> AdapterKind {
        match t {
            wgpu::DeviceType::DiscreteGpu => AdapterKind::Discrete,
            wgpu::DeviceType::IntegratedGpu => AdapterKind::Integrated,
            wgpu::DeviceType::VirtualGpu => AdapterKind::Virtual,
            wgpu::DeviceType::Cpu => AdapterKind::Cpu,
            wgpu::DeviceType::Other => AdapterKind::Other,
        }
    }
}

/// One adapter the probe found.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterProbe {
    /// Its ordinal in the backend's stable order (`vulkan:N`).
    pub ordinal: usize,
    /// The driver's name for it (`NVIDIA H100 80GB HBM3`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// What it is.
    pub kind: AdapterKind,
    /// The graphics API under wgpu (`Vulkan`, `Metal`, `Dx12`).
    pub api: String,
    /// The driver and its version (`NVIDIA 580.95.05`, `llvmpipe Mesa 22.3.6 (LLVM 15.0.6)`).
    pub driver: String,
    /// The required features it lacks (empty: usable).
    pub missing: Vec<String>,
    /// Whether it has 16-bit floats in shaders (`SHADER_F16`).
    pub f16: bool,
    /// Whether it has 64-bit floats in shaders (`SHADER_F64`).
    pub f64: bool,
}

impl AdapterProbe {
    /// Whether the backend can run on it.
    pub fn usable(&self) -> bool {
        self.missing.is_empty()
    }
}

/// What the probe found: every adapter of the enabled APIs, in the backend's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The adapters, best first: discrete, integrated, virtual, other, CPU; then by name.
    pub adapters: Vec<AdapterProbe>,
}

/// Why no adapter can be used, with what was looked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// No Vulkan loader library on the machine.
    #[error("no Vulkan loader: {looked_for} could not be loaded ({detail}); install the Vulkan loader (Debian: `libvulkan1`) and a driver (`mesa-vulkan-drivers` for lavapipe, or the GPU vendor's)")]
    NoLoader {
        /// The library names tried.
        looked_for: String,
        /// The dynamic loader's message.
        detail: String,
    },
    /// A loader, but no adapter (no installed driver, an ICD that fails to start).
    #[error("no Vulkan adapter: the loader found no usable driver ({searched})")]
    NoAdapter {
        /// Where drivers were looked for.
        searched: String,
    },
    /// Adapters, but none with the features the backend needs.
    #[error("no adapter has the features the backend needs: {details}")]
    MissingFeatures {
        /// Each adapter and what it lacks.
        details: String,
    },
}

impl ProbeError {
    pub(crate) fn into_error(self) -> Error {
        Error::Unavailable {
            backend: NAME,
            reason: self.to_string(),
        }
    }
}

/// The instance and its adapters in the backend's order, created once per process (creating
/// a Vulkan instance and listing adapters takes tens of milliseconds).
struct Found {
    instance: wgpu::Instance,
    adapters: Vec<(wgpu::Adapter, AdapterProbe)>,
}

fn found() -> &'static Mutex<Option<Arc<Found>>> {
    static FOUND: OnceLock<Mutex<Option<Arc<Found>>>> = OnceLock::new();
    FOUND.get_or_init(|| Mutex::new(None))
}

/// Keeps a driver's noise about a display session off the program's stderr where there is
/// no session. Mesa's Vulkan loader layer `VK_LAYER_MESA_device_select`, which the loader
/// enables for every program, asks Wayland for the default GPU while the adapters are
/// listed; without `XDG_RUNTIME_DIR` libwayland-client prints `error: XDG_RUNTIME_DIR is
/// invalid or not set in the environment.` twice before anything of the program's (a
/// compute program on a server, a CI job), whatever device it asked for. Where
/// `XDG_RUNTIME_DIR` is unset or not a folder, no Wayland connection can succeed in this
/// process, so this sets libwayland-client's log handler to one that drops the messages
/// (they could only ever say that); with a session nothing is changed. No environment
/// variable is set (that would race with other threads reading theirs). Best effort: where
/// the library is absent, nothing happens.
#[cfg(target_os = "linux")]
fn quiet_wayland_without_session() {
    use std::ffi::{c_char, c_void};

    let session =
        std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|dir| std::path::Path::new(&dir).is_dir());
    if session {
        return;
    }
    /// libwayland-client's `wl_log_func_t` (`void (*)(const char *, va_list)`): a `va_list`
    /// arrives as a pointer on Linux's ABIs (x86-64: an array; AArch64: a struct over 16
    /// bytes, passed by reference); it is not read.
    extern "C" fn drop_message(_format: *const c_char, _args: *mut c_void) {}
    type SetHandler = unsafe extern "C" fn(extern "C" fn(*const c_char, *mut c_void));
    // SAFETY: dlopen and dlsym with constant NUL-terminated names; the handle is never
    // closed, so the library (the one the layer loads: one instance per soname) and the
    // handler's caller stay loaded; `wl_log_set_handler_client` has the type above in
    // every libwayland-client (wayland-client-core.h) and only stores the pointer.
    unsafe {
        let lib = libc::dlopen(
            c"libwayland-client.so.0".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        );
        if lib.is_null() {
            return;
        }
        let sym = libc::dlsym(lib, c"wl_log_set_handler_client".as_ptr());
        if sym.is_null() {
            return;
        }
        let set = std::mem::transmute::<*mut c_void, SetHandler>(sym);
        set(drop_message);
    }
}

fn discover() -> Arc<Found> {
    let mut slot = found().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = &*slot {
        return f.clone();
    }
    #[cfg(target_os = "linux")]
    quiet_wayland_without_session();
    let desc = wgpu::InstanceDescriptor {
        backends: wgpu_backends(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    };
    let instance = wgpu::Instance::new(desc);
    let mut adapters: Vec<(wgpu::Adapter, AdapterProbe)> =
        block_on(instance.enumerate_adapters(wgpu_backends()))
            .into_iter()
            .map(|a| {
                let info = a.get_info();
                let features = a.features();
                let missing = REQUIRED
                    .iter()
                    .filter(|(f, _)| !features.contains(*f))
                    .map(|(_, why)| why.to_string())
                    .collect();
                let p = AdapterProbe {
                    ordinal: 0,
                    name: info.name.clone(),
                    kind: AdapterKind::from_wgpu(info.device_type),
                    api: format!("{:?}", info.backend),
                    driver: format!("{} {}", info.driver, info.driver_info)
                        .trim()
                        .to_string(),
                    missing,
                    f16: features.contains(wgpu::Features::SHADER_F16),
                    f64: features.contains(wgpu::Features::SHADER_F64),
                };
                (a, p)
            })
            .collect();
    adapters.sort_by(|(_, a), (_, b)| {
        (a.kind, &a.name, &a.api, &a.driver).cmp(&(b.kind, &b.name, &b.api, &b.driver))
    });
    for (i, (_, p)) in adapters.iter_mut().enumerate() {
        p.ordinal = i;
    }
    let f = Arc::new(Found { instance, adapters });
    *slot = Some(f.clone());
    f
}

/// Lists the adapters the backend can see, in its order, or says why there are none.
/// Never panics; the result is computed once per process.
///
/// ```
/// match gpukit::wgpu::probe() {
///     Ok(p) => for a in &p.adapters {
///         println!("vulkan:{} {} ({:?}, {})", a.ordinal, a.name, a.kind, a.driver);
///     },
///     Err(e) => println!("no Vulkan: {e}"),
/// }
/// ```
pub fn probe() -> std::result::Result<Probe, ProbeError> {
    let f = discover();
    if f.adapters.is_empty() {
        return Err(no_adapter_reason());
    }
    let probe = Probe {
        adapters: f.adapters.iter().map(|(_, p)| p.clone()).collect(),
    };
    if probe.adapters.iter().all(|a| !a.usable()) {
        let details = probe
            .adapters
            .iter()
            .map(|a| format!("{} lacks {}", a.name, a.missing.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ProbeError::MissingFeatures { details });
    }
    Ok(probe)
}

/// Why the instance found no adapter: no loader at all, or a loader without a driver.
fn no_adapter_reason() -> ProbeError {
    #[cfg(target_os = "linux")]
    {
        if let Err(detail) = loader_loadable() {
            return ProbeError::NoLoader {
                looked_for: "libvulkan.so.1, libvulkan.so".into(),
                detail,
            };
        }
    }
    let var = |k: &str| std::env::var(k).ok().map(|v| format!("{k}={v}"));
    let mut searched: Vec<String> = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"]
        .iter()
        .filter_map(|k| var(k))
        .collect();
    if searched.is_empty() {
        searched.push(
            "the default ICD folders: /usr/share/vulkan/icd.d, /etc/vulkan/icd.d, \
             /usr/local/share/vulkan/icd.d"
                .into(),
        );
    }
    ProbeError::NoAdapter {
        searched: searched.join(", "),
    }
}

/// Whether the Vulkan loader can be opened (as wgpu-hal will open it).
#[cfg(target_os = "linux")]
fn loader_loadable() -> std::result::Result<(), String> {
    let mut last = String::new();
    for name in [c"libvulkan.so.1", c"libvulkan.so"] {
        // SAFETY: dlopen with a valid NUL-terminated name; the handle is closed at once. The
        // loader's initialisers run, as they will when wgpu opens it.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !h.is_null() {
            // SAFETY: `h` is the live handle dlopen just returned.
            unsafe { libc::dlclose(h) };
            return Ok(());
        }
        // SAFETY: dlerror returns null or a NUL-terminated string valid until the next call.
        let e = unsafe { libc::dlerror() };
        if !e.is_null() {
            // SAFETY: non-null, NUL-terminated (above).
            last = unsafe { std::ffi::CStr::from_ptr(e) }
                .to_string_lossy()
                .into_owned();
        }
    }
    Err(last)
}

/// An opened device: wgpu's device and queue and what the backend knows about them.
pub(crate) struct Opened {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) probe: AdapterProbe,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    /// Keeps the instance alive as long as the device.
    pub(crate) _instance: wgpu::Instance,
}

/// Opens adapter `ordinal` (`None`: the first usable one; `skip_cpu`: pass over CPU-type
/// adapters, as `auto` does).
/// Why no Vulkan adapter here can be a GPU, where that is certain without starting Vulkan:
/// no GPU device node (every GPU driver of Linux opens one: `/dev/dri/renderD*` for Mesa's
/// drivers, `/dev/nvidia[0-9]*` for NVIDIA's, `/dev/dxg` under WSL), or driver manifests
/// that are all CPU implementations (Mesa's lavapipe, SwiftShader). `None` where a GPU may
/// be there, or where the environment overrides the loader's search (`VK_DRIVER_FILES`,
/// `VK_ICD_FILENAMES`, `VK_ADD_DRIVER_FILES`), which only the probe can follow. Looking
/// takes microseconds; the probe it spares (a Vulkan instance, lavapipe's initialisation,
/// listing the adapters) tens of milliseconds, which every `auto` program on a machine
/// without a GPU would pay for adapters it passes over.
#[cfg(target_os = "linux")]
fn no_gpu_adapter() -> Option<String> {
    if ["VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return None;
    }
    let names_in = |dir: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let render = names_in("/dev/dri")
        .iter()
        .any(|n| n.starts_with("renderD"));
    let nvidia = names_in("/dev").iter().any(|n| {
        n.strip_prefix("nvidia")
            .is_some_and(|rest| rest.parse::<u32>().is_ok())
            || n == "dxg"
    });
    if !render && !nvidia {
        return Some(
            "no GPU device node (/dev/dri/renderD*, /dev/nvidia0..., /dev/dxg): any Vulkan              adapter here is a CPU implementation"
                .to_owned(),
        );
    }
    let cpu = only_cpu_drivers()?;
    Some(format!(
        "only CPU Vulkan drivers are installed ({})",
        cpu.join(", ")
    ))
}

/// The file names of the Vulkan driver manifests the loader would find, when there are
/// some and every one is a CPU implementation. The folders are the loader's on Linux, in
/// its order: `$XDG_CONFIG_DIRS` (else `/etc/xdg`), `/etc`, `$XDG_DATA_HOME` (else
/// `~/.local/share`) and `$XDG_DATA_DIRS` (else `/usr/local/share:/usr/share`), each with
/// `vulkan/icd.d`.
#[cfg(target_os = "linux")]
fn only_cpu_drivers() -> Option<Vec<String>> {
    use std::path::PathBuf;

    let list = |var: &str, default: &str| -> Vec<PathBuf> {
        let value = std::env::var_os(var).filter(|v| !v.is_empty());
        match value {
            Some(v) => std::env::split_paths(&v).collect(),
            None => std::env::split_paths(default).collect(),
        }
    };
    let mut roots = list("XDG_CONFIG_DIRS", "/etc/xdg");
    roots.push(PathBuf::from("/etc"));
    match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(home) => roots.push(PathBuf::from(home)),
        None => {
            if let Some(home) = std::env::var_os("HOME") {
                roots.push(PathBuf::from(home).join(".local/share"));
            }
        }
    }
    roots.extend(list("XDG_DATA_DIRS", "/usr/local/share:/usr/share"));
    let mut names = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root.join("vulkan/icd.d")) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json") {
                continue;
            }
            // Mesa's lavapipe is `lvp_icd.<arch>.json` (its library `libvulkan_lvp.so`),
            // SwiftShader's `vk_swiftshader_icd.json`; the library path decides where the
            // name does not.
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let cpu = name.starts_with("lvp_icd")
                || name.contains("swiftshader")
                || text.contains("libvulkan_lvp")
                || text.contains("libvk_swiftshader");
            if !cpu {
                return None;
            }
            names.push(name);
        }
    }
    (!names.is_empty()).then_some(names)
}

pub(crate) fn open(
    ordinal: Option<usize>,
    skip_cpu: bool,
    without: wgpu::Features,
) -> Result<Opened> {
    #[cfg(target_os = "linux")]
    if ordinal.is_none() && skip_cpu {
        if let Some(why) = no_gpu_adapter() {
            return Err(Error::Unavailable {
                backend: NAME,
                reason: format!(
                    "{why}: the CPU backend is faster on this machine; ask for `vulkan` \
                     explicitly to use it (auto did not start Vulkan to list the adapters)"
                ),
            });
        }
    }
    let f = discover();
    probe().map_err(ProbeError::into_error)?;
    let (adapter, p) = match ordinal {
        Some(n) => {
            let Some((a, p)) = f.adapters.get(n) else {
                return Err(Error::InvalidDevice {
                    backend: NAME,
                    ordinal: n,
                    count: f.adapters.len(),
                });
            };
            if !p.usable() {
                return Err(Error::Unavailable {
                    backend: NAME,
                    reason: format!("adapter {n} ({}) lacks {}", p.name, p.missing.join(", ")),
                });
            }
            (a, p)
        }
        None => {
            let pick = f
                .adapters
                .iter()
                .find(|(_, p)| p.usable() && !(skip_cpu && p.kind == AdapterKind::Cpu));
            match pick {
                Some((a, p)) => (a, p),
                None => {
                    return Err(Error::Unavailable {
                        backend: NAME,
                        reason: format!(
                            "only CPU-type adapters ({}): the CPU backend is faster on this \
                             machine; ask for `vulkan` explicitly to use them",
                            f.adapters
                                .iter()
                                .map(|(_, p)| p.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })
                }
            }
        }
    };
    let features = adapter.features();
    let wanted = REQUIRED
        .iter()
        .fold(wgpu::Features::empty(), |acc, (f, _)| acc | *f)
        | (features & optional_features() & !without);
    let limits = adapter.limits();
    let desc = wgpu::DeviceDescriptor {
        label: Some("gpukit"),
        required_features: wanted,
        required_limits: limits.clone(),
        ..Default::default()
    };
    let (device, queue) =
        block_on(adapter.request_device(&desc)).map_err(|e| Error::Unavailable {
            backend: NAME,
            reason: format!("adapter {} ({}) refused a device: {e}", p.ordinal, p.name),
        })?;
    Ok(Opened {
        device,
        queue,
        probe: p.clone(),
        limits,
        features: wanted,
        _instance: f.instance.clone(),
    })
}
