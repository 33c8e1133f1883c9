//! The availability probe: is a CUDA driver there, which version, and what devices.
//!
//! [`probe`] loads the driver by absolute path (see [`crate::discover`]), calls `cuInit` and
//! asks each device for its name, memory, compute capability, copy engines and SMs, through
//! the committed bindgen declarations in [`crate::ffi::driver`]. It runs once per process
//! (the driver itself reads `CUDA_VISIBLE_DEVICES` once, at `cuInit`) and every failure is a
//! [`ProbeError`] value: which library, every path searched, the loader's or the driver's
//! message. Nothing in it panics, so it is safe under `panic = "abort"` too.

use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::discover::{self, Lib, LibError, Loaded};
use crate::ffi::driver::{CUdevice_attribute, CUresult, Driver};

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
        /// The loader's message (names the missing symbol).
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

/// The loaded driver library with the probe's entry points.
pub struct DriverLib {
    /// Where it came from.
    pub loaded: Loaded,
    api: Driver,
}

impl std::fmt::Debug for DriverLib {
    /// Where the driver came from; the table of entry points is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverLib")
            .field("loaded", &self.loaded)
            .finish_non_exhaustive()
    }
}

impl DriverLib {
    /// Whether the driver exports `symbol` (for checking, before calling through another
    /// binding such as cudarc's, that no call can find its entry point missing).
    pub fn has_symbol(&self, symbol: &str) -> bool {
        let mut name = symbol.as_bytes().to_vec();
        name.push(0);
        // SAFETY: the symbol is only looked up, never called through this pointer type.
        unsafe {
            self.loaded
                .handle
                .get::<*const std::ffi::c_void>(&name[..])
                .is_ok()
        }
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

    /// The driver's CUDA version as `cuDriverGetVersion` reports it (13000 is 13.0).
    ///
    /// Needs no `cuInit` and no device, so it answers where [`probe`] fails for want of a
    /// device (for a diagnosis that reports the driver's version either way).
    pub fn version(&self) -> Result<u32, ProbeError> {
        let mut version: c_int = 0;
        // SAFETY: cuDriverGetVersion only writes an int through the pointer, a live local;
        // the entry point was resolved from this driver by bindgen's declaration of cuda.h.
        let r = unsafe { self.api.cuDriverGetVersion(&mut version) };
        if r != CUresult::CUDA_SUCCESS {
            let (name, message) = self.error_text(r);
            return Err(ProbeError::Driver {
                call: "cuDriverGetVersion",
                code: r.0,
                name,
                message,
                hint: "",
            });
        }
        Ok(u32::try_from(version).unwrap_or(0))
    }

    /// The name and description of a `CUresult`, as the driver gives them.
    pub fn error_text(&self, code: CUresult) -> (String, String) {
        let mut name: *const c_char = std::ptr::null();
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: both calls only write a pointer to a static string (or leave it null for an
        // unknown code); the strings are NUL-terminated and live as long as the library.
        unsafe {
            self.api.cuGetErrorName(code, &mut name);
            self.api.cuGetErrorString(code, &mut text);
            (c_text(name, code.0), c_text(text, code.0))
        }
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

/// The driver library, loaded once per process.
pub fn driver() -> Result<&'static DriverLib, ProbeError> {
    static DRIVER: OnceLock<Result<DriverLib, ProbeError>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let loaded = discover::load(Lib::Driver, None).map_err(ProbeError::DriverMissing)?;
            // SAFETY: `Driver` is bindgen's translation of cuda.h.
            let api = unsafe { discover::bind(&loaded, |lib| Driver::from_library(lib)) }.map_err(
                |message| ProbeError::DriverSymbols {
                    path: loaded.path.clone(),
                    message,
                },
            )?;
            Ok(DriverLib { loaded, api })
        })
        .as_ref()
        .map_err(Clone::clone)
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
        let (name, message) = drv.error_text(r);
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
            code: r.0,
            name,
            message,
            hint,
        })
    };

    // The driver calls below: the entry points were resolved from the driver by bindgen's
    // declarations of cuda.h; every out-pointer is a live local of the right type.
    // SAFETY: see above.
    let init = unsafe { drv.api.cuInit(0) };
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
        drv.api.cuDeviceGetCount(&mut count)
    })?;
    if count <= 0 {
        return Err(ProbeError::NoDevice { visible_devices });
    }
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let mut dev = 0;
        // SAFETY: see above; the ordinal is below the count the driver gave.
        check("cuDeviceGet", unsafe {
            drv.api.cuDeviceGet(&mut dev, ordinal)
        })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: see above; the buffer's length is passed.
        check("cuDeviceGetName", unsafe {
            drv.api
                .cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
        })?;
        // SAFETY: the driver NUL-terminates the name within the buffer; the last byte is
        // still the 0 it was initialised with in any case.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut bytes = 0usize;
        // SAFETY: see above.
        check("cuDeviceTotalMem", unsafe {
            drv.api.cuDeviceTotalMem_v2(&mut bytes, dev)
        })?;
        let attr = |a: CUdevice_attribute| -> Result<u32, ProbeError> {
            let mut v: c_int = 0;
            // SAFETY: see above.
            check("cuDeviceGetAttribute", unsafe {
                drv.api.cuDeviceGetAttribute(&mut v, a, dev)
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
