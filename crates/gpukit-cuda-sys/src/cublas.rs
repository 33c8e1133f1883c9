//! cuBLAS, loaded by absolute path for gemm, through the committed declarations in
//! [`crate::ffi::cublas`].
//!
//! cuBLASLt is loaded first, from the same folder as the cuBLAS that will be used where it
//! is there: cuBLAS needs it (`DT_NEEDED libcublasLt.so.<major>`) and the dynamic loader then
//! finds the copy already loaded instead of searching `LD_LIBRARY_PATH` for one.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

use crate::discover::{self, Lib, LibError, Loaded};
use crate::ffi::cublas::{cublasStatus_t, Cublas};

/// What can go wrong loading cuBLAS.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CublasLoadError {
    /// The library (or cuBLASLt, which it needs) is not installed.
    #[error("cuBLAS is unavailable: {0}")]
    Library(LibError),
    /// The library loaded but lacks an entry point.
    #[error("cuBLAS at {path} is unusable: {message}")]
    Symbols {
        /// The library.
        path: std::path::PathBuf,
        /// The loader's message.
        message: String,
    },
}

/// The loaded cuBLAS library.
pub struct CublasLib {
    /// Where cuBLAS came from.
    pub loaded: Loaded,
    /// Where cuBLASLt came from.
    pub lt: Loaded,
    /// The entry points.
    pub api: Cublas,
}

impl std::fmt::Debug for CublasLib {
    /// The libraries' paths; the table of entry points is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CublasLib")
            .field("loaded", &self.loaded)
            .field("lt", &self.lt)
            .finish_non_exhaustive()
    }
}

impl CublasLib {
    /// The name and description of a status, as cuBLAS gives them.
    pub fn status_text(&self, status: cublasStatus_t) -> String {
        let (name, text) = self.status_parts(status);
        format!("{name} ({text})")
    }

    /// `(name, description)` of a status, from `cublasGetStatusName` and
    /// `cublasGetStatusString`.
    pub fn status_parts(&self, status: cublasStatus_t) -> (String, String) {
        // SAFETY: both calls return static NUL-terminated strings for any status.
        let (name, text) = unsafe {
            (
                self.api.cublasGetStatusName(status),
                self.api.cublasGetStatusString(status),
            )
        };
        let read = |p: *const std::ffi::c_char| {
            if p.is_null() {
                format!("cublasStatus_t {}", status.0)
            } else {
                // SAFETY: non-null static NUL-terminated string from cuBLAS.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        (read(name), read(text))
    }

    /// cuBLAS's version `(major, minor, patch)`, from
    /// [`cublasGetProperty`](https://docs.nvidia.com/cuda/cublas/#cublasgetproperty), which
    /// needs no handle and so no GPU. An error names the failed call or status.
    pub fn version(&self) -> Result<(u32, u32, u32), String> {
        // cublasGetProperty(libraryPropertyType, int*) -> cublasStatus_t; not among the
        // bindgen declarations (they are generated from `functions.txt` with libclang), so it
        // is declared here; libraryPropertyType is a C enum, an int.
        type GetProperty = unsafe extern "C" fn(c_int, *mut c_int) -> cublasStatus_t;
        // SAFETY: the symbol is cuBLAS's `cublasGetProperty`, whose C signature is the one
        // declared above (cublas_api.h); the pointer is used while the library stays loaded.
        let get = unsafe {
            self.loaded
                .handle
                .get::<GetProperty>(b"cublasGetProperty\0")
        }
        .map_err(|e| format!("cublasGetProperty: {e}"))?;
        // MAJOR_VERSION, MINOR_VERSION and PATCH_LEVEL of libraryPropertyType.
        let mut parts = [0u32; 3];
        for (property, part) in (0..).zip(parts.iter_mut()) {
            let mut value: c_int = 0;
            // SAFETY: the property is a valid libraryPropertyType; `value` is a live local.
            let status = unsafe { get(property, &mut value) };
            if status != cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(format!(
                    "cublasGetProperty({property}) failed: {}",
                    self.status_text(status)
                ));
            }
            *part = u32::try_from(value).unwrap_or(0);
        }
        Ok((parts[0], parts[1], parts[2]))
    }

    /// [`cublasSetWorkspace_v2`](https://docs.nvidia.com/cuda/cublas/#cublassetworkspace):
    /// the handle's gemms from now on use `bytes` of device memory at `workspace` instead
    /// of cuBLAS's default pool, until `cublasSetStream` resets it. `Err` names the missing
    /// entry point (cuBLAS before 11.2).
    ///
    /// # Safety
    ///
    /// `handle` is a live handle; `workspace` is device memory of its context, at least
    /// 256-byte aligned, of `bytes` bytes, that outlives every gemm queued with it (captured
    /// ones included).
    pub unsafe fn set_workspace(
        &self,
        handle: crate::ffi::cublas::cublasHandle_t,
        workspace: *mut std::ffi::c_void,
        bytes: usize,
    ) -> Result<cublasStatus_t, String> {
        // Not among the bindgen declarations, so declared here, as in cublas_api.h:
        // cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void *, size_t).
        type SetWorkspace = unsafe extern "C" fn(
            crate::ffi::cublas::cublasHandle_t,
            *mut std::ffi::c_void,
            usize,
        ) -> cublasStatus_t;
        // SAFETY: the symbol is cuBLAS's `cublasSetWorkspace_v2`, whose C signature is the
        // one declared above; the pointer is used while the library stays loaded.
        let set = unsafe {
            self.loaded
                .handle
                .get::<SetWorkspace>(b"cublasSetWorkspace_v2\0")
        }
        .map_err(|e| format!("cublasSetWorkspace_v2: {e}"))?;
        // SAFETY: the caller's contract.
        Ok(unsafe { set(handle, workspace, bytes) })
    }
}

/// cuBLAS, loaded once per process; `max_major` as for [`crate::nvrtc::nvrtc`].
pub fn cublas(max_major: Option<u32>) -> Result<&'static CublasLib, CublasLoadError> {
    static LIB: OnceLock<Result<CublasLib, CublasLoadError>> = OnceLock::new();
    LIB.get_or_init(|| load(max_major))
        .as_ref()
        .map_err(Clone::clone)
}

fn load(max_major: Option<u32>) -> Result<CublasLib, CublasLoadError> {
    // Find cuBLAS's folder first, then take cuBLASLt from it where possible.
    let dirs = discover::search_dirs(Lib::Cublas);
    let found = discover::candidates(Lib::Cublas, &dirs);
    let preferred: Vec<_> = found
        .iter()
        .filter_map(|p| p.parent().map(|d| d.to_path_buf()))
        .chain(dirs.iter().cloned())
        .collect();
    let lt = discover::load_from(Lib::CublasLt, &preferred, max_major)
        .map_err(CublasLoadError::Library)?;
    let loaded =
        discover::load_from(Lib::Cublas, &dirs, max_major).map_err(CublasLoadError::Library)?;
    // SAFETY: `Cublas` is bindgen's translation of cublas_v2.h.
    let api =
        unsafe { discover::bind(&loaded, |lib| Cublas::from_library(lib)) }.map_err(|message| {
            CublasLoadError::Symbols {
                path: loaded.path.clone(),
                message,
            }
        })?;
    Ok(CublasLib { loaded, lt, api })
}
