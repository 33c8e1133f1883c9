//! NVRTC: compiling CUDA C at run time, through the committed declarations in
//! [`crate::ffi::nvrtc`] and the library found by [`crate::discover`].
//!
//! A program is compiled to SASS (a cubin) for the device's exact architecture when this
//! NVRTC knows it, which loads on any driver of the same major version; for a device newer
//! than NVRTC it is compiled to PTX for the newest architecture NVRTC has, which the driver
//! compiles on load. Caching compiled programs (in the process and on disk) is the CUDA
//! backend's job (`gpukit-cuda`'s kernel cache); this module only compiles.
//!
//! NVRTC opens its builtins library (`libnvrtc-builtins.so.<major>.<minor>`) by name on its
//! first compile. Where NVRTC's folder is not on the loader's path (pip's CUDA wheels), that
//! fails and every compile with it, so [`nvrtc`] loads the builtins by absolute path first,
//! from NVRTC's own folder before the other places NVRTC is looked for
//! ([`NvrtcLib::builtins`] says where from, or why not).

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::discover::{self, Lib, LibError, Loaded};
use crate::ffi::nvrtc::{nvrtcProgram, nvrtcResult, Nvrtc};

/// What a program is compiled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Machine code for `sm_XY` exactly (a cubin).
    Sass(u32, u32),
    /// PTX for `compute_XY`, compiled by the driver when loaded.
    Ptx(u32, u32),
}

impl Target {
    /// The `--gpu-architecture` option for this target.
    pub fn arch_option(self) -> String {
        match self {
            Target::Sass(major, minor) => format!("--gpu-architecture=sm_{major}{minor}"),
            Target::Ptx(major, minor) => format!("--gpu-architecture=compute_{major}{minor}"),
        }
    }
}

/// A compiled program: the image to hand to `cuModuleLoadData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// A cubin, or PTX text with a terminating NUL.
    pub image: Vec<u8>,
    /// What it was compiled for.
    pub target: Target,
    /// The compiler's log (warnings), possibly empty.
    pub log: String,
}

/// What can go wrong with NVRTC.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum NvrtcError {
    /// The library is not installed.
    #[error("NVRTC is unavailable: {0}")]
    Library(LibError),
    /// The library loaded but lacks an entry point.
    #[error("NVRTC at {path} is unusable: {message}")]
    Symbols {
        /// The library.
        path: std::path::PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The source did not compile; the log says why.
    #[error("{log}")]
    Compile {
        /// The compiler's log.
        log: String,
    },
    /// The source or an option contains a NUL byte.
    #[error("the source or an option contains a NUL byte")]
    Nul,
    /// An NVRTC call failed for another reason than the source; for a compile, `log` is
    /// the compiler's log (it names a builtins library that did not load, for one).
    #[error("{call} failed: {message}{}", log_suffix(log))]
    Call {
        /// The call.
        call: &'static str,
        /// NVRTC's description, and what may explain it.
        message: String,
        /// The compiler's log; empty for calls that are not compiles.
        log: String,
    },
}

/// The log of a failed call as the end of its message.
fn log_suffix(log: &str) -> String {
    if log.is_empty() {
        String::new()
    } else {
        format!("; compiler log: {log}")
    }
}

/// The loaded NVRTC library.
pub struct NvrtcLib {
    /// Where it came from.
    pub loaded: Loaded,
    api: Nvrtc,
    /// NVRTC's version `(major, minor)`.
    pub version: (u32, u32),
    /// The SASS architectures it can compile for (`90` is sm_90), ascending.
    pub archs: Vec<u32>,
    /// Where NVRTC's builtins library was loaded from, or why it was not (NVRTC then looks
    /// for it on the loader's path itself, at its first compile).
    pub builtins: Result<PathBuf, String>,
    /// Keeps the builtins library loaded for the life of the process.
    _builtins_handle: Option<libloading::Library>,
}

impl std::fmt::Debug for NvrtcLib {
    /// Where NVRTC and its builtins came from, its version and architectures.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvrtcLib")
            .field("loaded", &self.loaded)
            .field("version", &self.version)
            .field("archs", &self.archs)
            .field("builtins", &self.builtins)
            .finish_non_exhaustive()
    }
}

/// NVRTC, loaded once per process. `max_major` (the driver's CUDA major version) steers the
/// search away from an NVRTC newer than the driver; the first call's value decides.
pub fn nvrtc(max_major: Option<u32>) -> Result<&'static NvrtcLib, NvrtcError> {
    static LIB: OnceLock<Result<NvrtcLib, NvrtcError>> = OnceLock::new();
    LIB.get_or_init(|| load(max_major))
        .as_ref()
        .map_err(Clone::clone)
}

fn load(max_major: Option<u32>) -> Result<NvrtcLib, NvrtcError> {
    let loaded = discover::load(Lib::Nvrtc, max_major).map_err(NvrtcError::Library)?;
    // SAFETY: `Nvrtc` is bindgen's translation of nvrtc.h.
    let api =
        unsafe { discover::bind(&loaded, |lib| Nvrtc::from_library(lib)) }.map_err(|message| {
            NvrtcError::Symbols {
                path: loaded.path.clone(),
                message,
            }
        })?;
    let mut lib = NvrtcLib {
        loaded,
        api,
        version: (0, 0),
        archs: Vec::new(),
        builtins: Err("not looked for yet".into()),
        _builtins_handle: None,
    };
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: out-pointers are live locals.
    lib.check("nvrtcVersion", unsafe {
        lib.api.nvrtcVersion(&mut major, &mut minor)
    })?;
    lib.version = (major.max(0) as u32, minor.max(0) as u32);
    let mut n: c_int = 0;
    // SAFETY: as above.
    lib.check("nvrtcGetNumSupportedArchs", unsafe {
        lib.api.nvrtcGetNumSupportedArchs(&mut n)
    })?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    // SAFETY: the buffer has the length NVRTC just reported.
    lib.check("nvrtcGetSupportedArchs", unsafe {
        lib.api.nvrtcGetSupportedArchs(archs.as_mut_ptr())
    })?;
    lib.archs = archs
        .into_iter()
        .filter_map(|a| u32::try_from(a).ok())
        .collect();
    lib.archs.sort_unstable();
    match discover::load_nvrtc_builtins(&lib.loaded.path, lib.version) {
        Ok((path, handle)) => {
            lib.builtins = Ok(path);
            lib._builtins_handle = Some(handle);
        }
        Err(why) => lib.builtins = Err(why),
    }
    Ok(lib)
}

impl NvrtcLib {
    /// The best target for a device of compute capability `cc`: SASS when this NVRTC knows
    /// the architecture, else PTX for the newest architecture not above it, else PTX for
    /// the oldest it knows.
    pub fn target_for(&self, cc: (u32, u32)) -> Target {
        let want = cc.0 * 10 + cc.1;
        if self.archs.contains(&want) {
            return Target::Sass(cc.0, cc.1);
        }
        let below = self.archs.iter().rev().find(|&&a| a <= want);
        let arch = below.or(self.archs.first()).copied().unwrap_or(want);
        Target::Ptx(arch / 10, arch % 10)
    }

    /// Compiles `src` (the program's file name is `name.cu`) for `target` with extra
    /// `options`. Every error but [`NvrtcError::Nul`] and a failed program creation carries
    /// the compiler's log.
    pub fn compile(
        &self,
        src: &str,
        name: &str,
        target: Target,
        options: &[&str],
    ) -> Result<Compiled, NvrtcError> {
        let c_src = CString::new(src).map_err(|_| NvrtcError::Nul)?;
        let c_name = CString::new(format!("{name}.cu")).map_err(|_| NvrtcError::Nul)?;
        let mut opts = vec![target.arch_option(), "--std=c++17".to_string()];
        opts.extend(options.iter().map(|o| o.to_string()));
        let c_opts = opts
            .into_iter()
            .map(CString::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| NvrtcError::Nul)?;
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: nvrtcProgram = std::ptr::null_mut();
        // SAFETY: the strings are NUL-terminated and outlive the call; no headers are passed.
        self.check("nvrtcCreateProgram", unsafe {
            self.api.nvrtcCreateProgram(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        let prog = Program {
            lib: self,
            raw: prog,
        };
        // SAFETY: `prog` is a live program; the option array and its strings outlive the call.
        let status = unsafe {
            self.api
                .nvrtcCompileProgram(prog.raw, opt_ptrs.len() as c_int, opt_ptrs.as_ptr())
        };
        let log = prog.log()?;
        if status == nvrtcResult::NVRTC_ERROR_COMPILATION {
            return Err(NvrtcError::Compile { log });
        }
        if status != nvrtcResult::NVRTC_SUCCESS {
            let mut message = self.describe(status);
            if status == nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE {
                if let Err(why) = &self.builtins {
                    message.push_str(&format!(" (NVRTC's builtins library: {why})"));
                }
            }
            return Err(NvrtcError::Call {
                call: "nvrtcCompileProgram",
                message,
                log,
            });
        }
        // Each closure's unsafe call: `prog` is live and compiled; the size pointer is a live
        // local and each buffer has the size NVRTC reported for it.
        let image = match target {
            Target::Sass(..) => prog.output(
                "nvrtcGetCUBIN",
                // SAFETY: see above.
                |size| unsafe { self.api.nvrtcGetCUBINSize(prog.raw, size) },
                // SAFETY: see above.
                |buf| unsafe { self.api.nvrtcGetCUBIN(prog.raw, buf) },
            )?,
            Target::Ptx(..) => prog.output(
                "nvrtcGetPTX",
                // SAFETY: see above.
                |size| unsafe { self.api.nvrtcGetPTXSize(prog.raw, size) },
                // SAFETY: see above.
                |buf| unsafe { self.api.nvrtcGetPTX(prog.raw, buf) },
            )?,
        };
        Ok(Compiled { image, target, log })
    }

    fn check(&self, call: &'static str, r: nvrtcResult) -> Result<(), NvrtcError> {
        if r == nvrtcResult::NVRTC_SUCCESS {
            return Ok(());
        }
        Err(NvrtcError::Call {
            call,
            message: self.describe(r),
            log: String::new(),
        })
    }

    /// NVRTC's description of a result code.
    fn describe(&self, r: nvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let p = unsafe { self.api.nvrtcGetErrorString(r) };
        if p.is_null() {
            format!("nvrtcResult {}", r.0)
        } else {
            // SAFETY: non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }
}

/// A program handle, destroyed on drop.
struct Program<'a> {
    lib: &'a NvrtcLib,
    raw: nvrtcProgram,
}

impl Program<'_> {
    fn log(&self) -> Result<String, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: live program, live out-pointer.
        self.lib.check("nvrtcGetProgramLogSize", unsafe {
            self.lib.api.nvrtcGetProgramLogSize(self.raw, &mut size)
        })?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: the buffer has the size NVRTC reported (at least 1 for the NUL).
        self.lib.check("nvrtcGetProgramLog", unsafe {
            self.lib
                .api
                .nvrtcGetProgramLog(self.raw, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).trim().to_string())
    }

    fn output(
        &self,
        call: &'static str,
        size: impl FnOnce(&mut usize) -> nvrtcResult,
        get: impl FnOnce(*mut c_char) -> nvrtcResult,
    ) -> Result<Vec<u8>, NvrtcError> {
        let mut n = 0usize;
        self.lib.check(call, size(&mut n))?;
        let mut buf = vec![0u8; n];
        self.lib.check(call, get(buf.as_mut_ptr().cast()))?;
        Ok(buf)
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live program created by nvrtcCreateProgram and destroyed once.
        // Destroying a valid program cannot fail in a way the caller could act on.
        let _ = unsafe { self.lib.api.nvrtcDestroyProgram(&mut self.raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression test for the desk-check's "the compiler log is dropped for non-compile
    /// errors": a failed compile that is not a source error (NVRTC could not load its
    /// builtins, say) still shows the log, which names the missing file.
    #[test]
    fn a_failed_compile_keeps_the_log_in_its_message() {
        let e = NvrtcError::Call {
            call: "nvrtcCompileProgram",
            message: "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE".into(),
            log: "nvrtc: error: failed to open libnvrtc-builtins.so.13.0.".into(),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("nvrtcCompileProgram failed: NVRTC_ERROR_BUILTIN"),
            "{text}"
        );
        assert!(
            text.ends_with("compiler log: nvrtc: error: failed to open libnvrtc-builtins.so.13.0."),
            "{text}"
        );
        let no_log = NvrtcError::Call {
            call: "nvrtcVersion",
            message: "m".into(),
            log: String::new(),
        };
        assert_eq!(no_log.to_string(), "nvrtcVersion failed: m");
    }
}
