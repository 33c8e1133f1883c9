//! NVRTC: compiling CUDA C at run time, through the committed declarations in
//! [`crate::ffi::nvrtc`] and the library found by [`crate::discover`].
//!
//! A program is compiled to SASS (a cubin) for the device's exact architecture when this
//! NVRTC knows it, which loads on any driver of the same major version; for a device newer
//! than NVRTC it is compiled to PTX for the newest architecture NVRTC has, which the driver
//! compiles on load. [`NvrtcLib::compile_cached`] keeps each result for the life of the
//! process, so a source is compiled once however many contexts load it.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

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
    /// An NVRTC call failed.
    #[error("{call} failed: {message}")]
    Call {
        /// The call.
        call: &'static str,
        /// NVRTC's description.
        message: String,
    },
}

/// Compiled programs by (source, options, target).
type Cache = HashMap<(String, Vec<String>, Target), Arc<Compiled>>;

/// The loaded NVRTC library.
pub struct NvrtcLib {
    /// Where it came from.
    pub loaded: Loaded,
    api: Nvrtc,
    /// NVRTC's version `(major, minor)`.
    pub version: (u32, u32),
    /// The SASS architectures it can compile for (`90` is sm_90), ascending.
    pub archs: Vec<u32>,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for NvrtcLib {
    /// Where NVRTC came from, its version and architectures, and how many programs are
    /// cached (`?` while another thread holds the cache); never blocks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("NvrtcLib");
        d.field("loaded", &self.loaded)
            .field("version", &self.version)
            .field("archs", &self.archs);
        match self.cache.try_lock() {
            Ok(cache) => d.field("cached_programs", &cache.len()),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                d.field("cached_programs", &p.into_inner().len())
            }
            Err(std::sync::TryLockError::WouldBlock) => d.field("cached_programs", &"?"),
        };
        d.finish_non_exhaustive()
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
        cache: Mutex::new(HashMap::new()),
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
    /// `options`, or returns the copy compiled earlier in this process.
    pub fn compile_cached(
        &self,
        src: &str,
        name: &str,
        target: Target,
        options: &[&str],
    ) -> Result<Arc<Compiled>, NvrtcError> {
        let key = (
            src.to_string(),
            options.iter().map(|o| o.to_string()).collect(),
            target,
        );
        if let Some(hit) = self.lock().get(&key) {
            return Ok(Arc::clone(hit));
        }
        // Compiled outside the lock: two threads may compile the same source once each,
        // which is harmless, while one slow compile does not hold up other sources.
        let compiled = Arc::new(self.compile(src, name, target, options)?);
        Ok(Arc::clone(self.lock().entry(key).or_insert(compiled)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // The map stays consistent even if a holder panicked (inserts are single calls).
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Compiles `src` for `target` with extra `options` (no caching).
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
        self.check("nvrtcCompileProgram", status)?;
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
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let p = unsafe { self.api.nvrtcGetErrorString(r) };
        let message = if p.is_null() {
            format!("nvrtcResult {}", r.0)
        } else {
            // SAFETY: non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(NvrtcError::Call { call, message })
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
