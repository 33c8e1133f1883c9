//! The availability probe: is a CUDA driver there, which version, and what devices.
//!
//! [`probe`] loads the driver by absolute path ([`driver`]: see there how cudarc is made to
//! get that very library), calls `cuInit` and asks each device for its name, memory,
//! compute capability, copy engines and SMs, through cudarc's raw `driver::sys`, the one
//! binding of the driver in the workspace. It runs once per process (the driver itself
//! reads `CUDA_VISIBLE_DEVICES` once, at `cuInit`) and every failure is a [`ProbeError`]
//! value: which library, every path searched, the loader's or the driver's message.
//! Nothing in it panics, so it is safe under `panic = "abort"` too.

use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::driver::sys::{self as cu, CUdevice_attribute, CUresult};

use crate::discover::{self, Lib, LibError, Loaded};

/// The oldest driver API version the workspace supports: 12.0 (`cuDriverGetVersion` 12000).
pub const MIN_DRIVER_VERSION: u32 = 12000;

/// What the probe found: a working driver and at least one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// Where the driver library was loaded from.
    pub driver_path: PathBuf,
    /// The driver's CUDA version, as `cuDriverGetVersion` reports it (12040 is 12.4).
    pub driver_version: u32,
    /// The devices the driver shows this process (after `CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<DeviceProbe>,
    /// `CUDA_VISIBLE_DEVICES` as the process saw it, if set.
    pub visible_devices: Option<String>,
}

impl Probe {
    /// The driver's version as `(major, minor)`.
    pub fn driver_version_pair(&self) -> (u32, u32) {
        version_pair(self.driver_version)
    }
}

/// One device, as the driver describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProbe {
    /// The ordinal among the visible devices.
    pub ordinal: usize,
    /// The marketing name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (u32, u32),
    /// Copy engines (`CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`).
    pub copy_engines: u32,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
}

/// Why CUDA cannot be used here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The driver library is not installed (or none of the copies found would load).
    #[error("no CUDA driver: {0}")]
    DriverMissing(LibError),
    /// A driver library loaded but lacks an entry point the workspace calls.
    #[error("the CUDA driver at {path} is unusable: {message}")]
    DriverSymbols {
        /// The library.
        path: PathBuf,
        /// Which entry point is missing.
        message: String,
    },
    /// cudarc, through which the driver is called, would open another library than the
    /// one found (or none), by the names it tries.
    #[error("the CUDA driver at {path} cannot be called through cudarc: {message}")]
    Cudarc {
        /// The library the probe loaded.
        path: PathBuf,
        /// What cudarc would open instead, and what to do.
        message: String,
    },
    /// The driver is older than `MIN_DRIVER_VERSION` (CUDA 12.0).
    #[error("the CUDA driver is too old: it supports CUDA {}.{}, the workspace needs {}.{} or newer (update the NVIDIA driver)",
        version_pair(*version).0, version_pair(*version).1,
        version_pair(*required).0, version_pair(*required).1)]
    DriverTooOld {
        /// What `cuDriverGetVersion` said.
        version: u32,
        /// What the workspace needs.
        required: u32,
    },
    /// The driver works but shows no device.
    #[error("the CUDA driver sees no device{}", match visible_devices {
        Some(v) => format!(" (CUDA_VISIBLE_DEVICES={v:?} may hide them)"),
        None => String::new(),
    })]
    NoDevice {
        /// `CUDA_VISIBLE_DEVICES`, if set.
        visible_devices: Option<String>,
    },
    /// A driver call failed.
    #[error("{call} failed: {name} ({message}){hint}")]
    Driver {
        /// The call.
        call: &'static str,
        /// The `CUresult` code.
        code: u32,
        /// Its name (`CUDA_ERROR_NO_DEVICE`).
        name: String,
        /// The driver's description of it.
        message: String,
        /// Advice for the common cases, with a leading `; `.
        hint: &'static str,
    },
}

/// `12040` -> `(12, 4)`.
pub const fn version_pair(v: u32) -> (u32, u32) {
    (v / 1000, (v % 1000) / 10)
}

/// The driver library, loaded by absolute path, which cudarc's calls reach.
pub struct DriverLib {
    /// Where it came from.
    pub loaded: Loaded,
}

impl std::fmt::Debug for DriverLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverLib")
            .field("loaded", &self.loaded)
            .finish()
    }
}

impl DriverLib {
    /// Whether the driver exports `symbol`: checked before a call through cudarc, whose
    /// functions look their symbol up on their first call and panic when it is missing.
    pub fn has_symbol(&self, symbol: &str) -> bool {
        self.symbol_address(symbol).is_some()
    }

    /// The address of `symbol` in this library, to tell whether another loader's handle is
    /// the same library.
    pub fn symbol_address(&self, symbol: &str) -> Option<usize> {
        let mut name = symbol.as_bytes().to_vec();
        name.push(0);
        // SAFETY: the symbol is only looked up; its address is compared, never called.
        unsafe { self.loaded.handle.get::<*const std::ffi::c_void>(&name[..]) }
            .ok()
            .map(|s| *s as usize)
    }

    /// Fails with [`ProbeError::DriverSymbols`] naming the first of `symbols` the driver
    /// lacks: every entry point a caller will reach through cudarc must pass this first.
    pub fn require(&self, symbols: &[&str]) -> Result<(), ProbeError> {
        match symbols.iter().find(|s| !self.has_symbol(s)) {
            None => Ok(()),
            Some(missing) => Err(ProbeError::DriverSymbols {
                path: self.loaded.path.clone(),
                message: format!("it has no `{missing}`: update the NVIDIA driver"),
            }),
        }
    }

    /// The driver's CUDA version as `cuDriverGetVersion` reports it (13000 is 13.0).
    ///
    /// Needs no `cuInit` and no device, so it answers where [`probe`] fails for want of a
    /// device (for a diagnosis that reports the driver's version either way).
    pub fn version(&self) -> Result<u32, ProbeError> {
        let mut version: c_int = 0;
        // SAFETY: cuDriverGetVersion only writes an int through the pointer, a live local;
        // `driver` checked that cudarc reaches this library and that it has the symbol.
        let r = unsafe { cu::cuDriverGetVersion(&mut version) };
        if r != CUresult::CUDA_SUCCESS {
            let (name, message) = error_text(r);
            return Err(ProbeError::Driver {
                call: "cuDriverGetVersion",
                code: r as u32,
                name,
                message,
                hint: "",
            });
        }
        Ok(u32::try_from(version).unwrap_or(0))
    }
}

/// The name and description of a `CUresult`, as the driver gives them. Call only once
/// [`driver`] has succeeded (cudarc must reach a driver).
pub fn error_text(code: CUresult) -> (String, String) {
    let mut name: *const c_char = std::ptr::null();
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: both calls only write a pointer to a static string (or leave it null for an
    // unknown code); the strings are NUL-terminated and live as long as the library, which
    // `driver` checked cudarc reaches, with both symbols.
    unsafe {
        cu::cuGetErrorName(code, &mut name);
        cu::cuGetErrorString(code, &mut text);
        (c_text(name, code as u32), c_text(text, code as u32))
    }
}

/// Copies a driver string, or describes the code when there is none.
///
/// # Safety
///
/// `p` is null or points to a NUL-terminated string.
unsafe fn c_text(p: *const c_char, code: u32) -> String {
    if p.is_null() {
        format!("unknown CUresult {code}")
    } else {
        // SAFETY: non-null and NUL-terminated, by the caller's promise.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Every driver entry point the probe and [`error_text`] call.
const PROBE_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// The driver library, loaded once per process by absolute path, once it is certain that
/// cudarc's calls reach it: cudarc opens the driver by name (the first of
/// [`cudarc::get_lib_name_candidates`] that opens) and panics when none does, so the first
/// name that opens must be this very library (the dynamic loader matches a name against
/// the libraries already loaded; a stray `libcuda.so` earlier on the search path, such as
/// the toolkit's link stub, would not match), and cudarc is then let load it inside
/// `catch_unwind`. The probe's own entry points are checked too ([`DriverLib::require`]).
pub fn driver() -> Result<&'static DriverLib, ProbeError> {
    static DRIVER: OnceLock<Result<DriverLib, ProbeError>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let loaded = discover::load(Lib::Driver, None).map_err(ProbeError::DriverMissing)?;
            let lib = DriverLib { loaded };
            lib.require(PROBE_SYMBOLS)?;
            cudarc_reaches(&lib)?;
            Ok(lib)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Checks that cudarc's loader will get `lib` (see [`driver`]) and lets it load.
fn cudarc_reaches(lib: &DriverLib) -> Result<(), ProbeError> {
    let path = &lib.loaded.path;
    let fail = |message: String| ProbeError::Cudarc {
        path: path.clone(),
        message,
    };
    match first_opening_candidate() {
        None => Err(fail(
            "cudarc cannot open the driver by any of its names".into(),
        )),
        Some((name, addr)) if addr.is_none() || addr != lib.symbol_address("cuInit") => {
            Err(fail(format!(
                "cudarc would open `{name}`, another library (a stub or a second driver on \
                 the library path?): remove it from LD_LIBRARY_PATH"
            )))
        }
        Some(_) => {
            // SAFETY: cudarc's loader opens the library just checked; catch_unwind turns an
            // unexpected panic (in a build that unwinds) into an error.
            let loaded = std::panic::catch_unwind(|| unsafe {
                cu::culib()
                    .get::<*const std::ffi::c_void>(b"cuInit\0")
                    .is_ok()
            });
            match loaded {
                Ok(true) => Ok(()),
                _ => Err(fail("cudarc could not load it".into())),
            }
        }
    }
}

/// The library cudarc will get: the first of its names that opens, as it tries them, with
/// the address of its `cuInit` (to compare with the probe's).
fn first_opening_candidate() -> Option<(String, Option<usize>)> {
    for name in cudarc::get_lib_name_candidates("cuda") {
        // SAFETY: opening a library runs its initialisers; every candidate is a name of the
        // CUDA driver, which cudarc would open anyway. The handle is closed again at once;
        // the probe's own handle keeps its library loaded.
        if let Ok(lib) = unsafe { libloading::Library::new(&name) } {
            // SAFETY: looked up only to compare addresses.
            let addr = unsafe { lib.get::<*const std::ffi::c_void>(b"cuInit\0") }
                .ok()
                .map(|s| *s as usize);
            return Some((name, addr));
        }
    }
    None
}

/// What cudarc's driver loader will open, next to what the probe loaded: the facts behind
/// [`driver`]'s check, for a diagnosis (the bundle's `cuda_doctor`).
#[derive(Debug, Clone, PartialEq)]
pub struct CudarcDriverReport {
    /// cudarc's file names for the driver, in the order it tries them.
    pub candidates: Vec<String>,
    /// Where the probe loaded the driver from, if it did.
    pub probe_path: Option<PathBuf>,
    /// The first candidate that opens, and whether it is the probe's library (the same
    /// `cuInit`); `None` when none opens.
    pub first_opened: Option<(String, bool)>,
    /// [`driver`]'s verdict.
    pub verdict: Result<(), ProbeError>,
}

/// Walks cudarc's driver names as [`driver`] does and reports what it found. Never panics
/// and, where the check fails, never lets cudarc load.
pub fn cudarc_driver_report() -> CudarcDriverReport {
    let loaded = discover::load(Lib::Driver, None).ok();
    let ours = loaded.map(|loaded| DriverLib { loaded }).and_then(|lib| {
        lib.symbol_address("cuInit")
            .map(|a| (lib.loaded.path.clone(), a))
    });
    let first_opened = first_opening_candidate().map(|(name, addr)| {
        let same = matches!((addr, &ours), (Some(a), Some((_, b))) if a == *b);
        (name, same)
    });
    CudarcDriverReport {
        candidates: cudarc::get_lib_name_candidates("cuda"),
        probe_path: ours.map(|(path, _)| path),
        first_opened,
        verdict: driver().map(|_| ()),
    }
}

/// Probes the driver and the devices once per process; later calls return the same answer.
pub fn probe() -> Result<&'static Probe, ProbeError> {
    static PROBE: OnceLock<Result<Probe, ProbeError>> = OnceLock::new();
    PROBE.get_or_init(run_probe).as_ref().map_err(Clone::clone)
}

fn run_probe() -> Result<Probe, ProbeError> {
    let drv = driver()?;
    let visible_devices = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let check = |call: &'static str, r: CUresult| -> Result<(), ProbeError> {
        if r == CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        if r == CUresult::CUDA_ERROR_NO_DEVICE {
            return Err(ProbeError::NoDevice {
                visible_devices: visible_devices.clone(),
            });
        }
        let (name, message) = error_text(r);
        let hint = match r {
            CUresult::CUDA_ERROR_STUB_LIBRARY => {
                "; this libcuda is the toolkit's link-time stub: install the NVIDIA driver"
            }
            CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
                "; the kernel module and libcuda do not match: reinstall the driver or reboot"
            }
            CUresult::CUDA_ERROR_NOT_PERMITTED | CUresult::CUDA_ERROR_OPERATING_SYSTEM => {
                "; check the permissions of /dev/nvidia*"
            }
            _ => "",
        };
        Err(ProbeError::Driver {
            call,
            code: r as u32,
            name,
            message,
            hint,
        })
    };

    // The driver calls below go through cudarc, which `driver` checked reaches this library,
    // and every entry point was checked to be there; every out-pointer is a live local of
    // the right type.
    // SAFETY: see above.
    let init = unsafe { cu::cuInit(0) };
    check("cuInit", init)?;
    let version = drv.version()?;
    if version < MIN_DRIVER_VERSION {
        return Err(ProbeError::DriverTooOld {
            version,
            required: MIN_DRIVER_VERSION,
        });
    }
    let mut count: c_int = 0;
    // SAFETY: see above.
    check("cuDeviceGetCount", unsafe {
        cu::cuDeviceGetCount(&mut count)
    })?;
    if count <= 0 {
        return Err(ProbeError::NoDevice { visible_devices });
    }
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let mut dev = 0;
        // SAFETY: see above; the ordinal is below the count the driver gave.
        check("cuDeviceGet", unsafe { cu::cuDeviceGet(&mut dev, ordinal) })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: see above; the buffer's length is passed.
        check("cuDeviceGetName", unsafe {
            cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
        })?;
        // SAFETY: the driver NUL-terminates the name within the buffer; the last byte is
        // still the 0 it was initialised with in any case.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut bytes = 0usize;
        // SAFETY: see above.
        check("cuDeviceTotalMem", unsafe {
            cu::cuDeviceTotalMem_v2(&mut bytes, dev)
        })?;
        let attr = |a: CUdevice_attribute| -> Result<u32, ProbeError> {
            let mut v: c_int = 0;
            // SAFETY: see above.
            check("cuDeviceGetAttribute", unsafe {
                cu::cuDeviceGetAttribute(&mut v, a, dev)
            })?;
            Ok(u32::try_from(v).unwrap_or(0))
        };
        devices.push(DeviceProbe {
            ordinal: ordinal as usize,
            name,
            total_memory: bytes as u64,
            compute_capability: (
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            copy_engines: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?,
            multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        });
    }
    Ok(Probe {
        driver_path: drv.loaded.path.clone(),
        driver_version: version,
        devices,
        visible_devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every driver function this file calls through cudarc is in [`PROBE_SYMBOLS`], which
    /// `driver` checks before any call (a missing one would make cudarc panic).
    #[test]
    fn every_driver_call_is_checked_first() {
        let mut calls: Vec<String> = Vec::new();
        for line in include_str!("probe.rs").lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("cu::cu") {
                let name: String = code[at + "cu::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let called = code[at + "cu::".len() + name.len()..].starts_with('(');
                if called && name != "culib" && !calls.contains(&name) {
                    calls.push(name);
                }
            }
        }
        calls.sort();
        let mut listed: Vec<String> = PROBE_SYMBOLS.iter().map(|s| (*s).to_owned()).collect();
        listed.sort();
        assert_eq!(calls, listed);
    }

    #[test]
    fn versions_read_as_pairs() {
        assert_eq!(version_pair(12040), (12, 4));
        assert_eq!(version_pair(13000), (13, 0));
    }

    /// On any machine: the probe answers with data, never a panic, and twice the same.
    #[test]
    fn probe_returns_a_typed_answer_without_panicking() {
        let first = probe().map(|p| p.devices.len());
        let second = probe().map(|p| p.devices.len());
        assert_eq!(first, second);
        match probe() {
            Ok(p) => {
                assert!(!p.devices.is_empty());
                assert!(p.driver_version >= MIN_DRIVER_VERSION);
                assert!(p.driver_path.is_absolute());
                for d in &p.devices {
                    assert!(d.total_memory > 0 && d.compute_capability.0 >= 3, "{d:?}");
                }
            }
            Err(ProbeError::DriverMissing(e)) => {
                assert_eq!(e.lib, Lib::Driver);
                assert!(!e.searched.is_empty(), "the search covered no folder");
                let text = e.to_string();
                assert!(text.contains("libcuda.so.1"), "{text}");
            }
            Err(other) => assert!(!other.to_string().is_empty()),
        }
    }
}
