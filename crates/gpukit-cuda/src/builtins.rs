//! The built-in ops' modules of one device: one module of CUDA C per element type
//! ([`crate::source`]), compiled through the kernel cache ([`crate::cache`]: once per
//! process, read back from disk by later ones) and loaded once per device into its primary
//! context, where every context on the device shares them.
//!
//! A module is loaded on the first op of its element type, or for all element types at once
//! by [`Builtins::preload`], which a capture calls before it begins: loading a module is no
//! work for a stream, and a capture must never be the first to need one. The modules are
//! unloaded with the device (`Device`'s drop), when no context, kernel, event or graph of it
//! is left.

use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

use crate::kernels::{Elem, BUILTIN_OPTIONS};
use cudarc::driver::sys;
use gpukit_core::{Error, Result};
use gpukit_cuda_sys::nvrtc::{Compiled, NvrtcLib, Target};

use crate::cache::{self, Origin};
use crate::device::{lock, Device, Raw};
use crate::driver;
use crate::error::CudaError;
use crate::source::{entries, module_source, Entry};

/// One element type's loaded module and its entry points.
pub(crate) struct Module {
    raw: Raw<sys::CUmodule>,
    fns: Vec<(Entry, Raw<sys::CUfunction>)>,
}

impl Module {
    /// The entry point `entry`.
    pub(crate) fn get(&self, entry: Entry) -> Result<sys::CUfunction> {
        self.fns
            .iter()
            .find(|(e, _)| *e == entry)
            .map(|(_, f)| f.0)
            .ok_or_else(|| Error::Backend {
                backend: "cuda",
                call: "cuModuleGetFunction",
                message: format!("the built-in module has no `{}`", entry.c_name()),
            })
    }
}

/// The built-in modules of one device.
pub(crate) struct Builtins {
    pub nvrtc: &'static NvrtcLib,
    target: Target,
    modules: [OnceLock<Module>; Elem::ALL.len()],
    /// Held while a module is loaded, so that each loads once.
    loading: Mutex<()>,
}

/// The slot of `elem` in [`Builtins::modules`].
fn slot_of(elem: Elem) -> usize {
    Elem::ALL.iter().position(|&e| e == elem).unwrap_or(0)
}

/// The built-in module of `elem` as the backend compiles it (with
/// [`crate::kernels::BUILTIN_OPTIONS`]): its CUDA C and its program name.
pub fn builtin_program(elem: Elem) -> (String, String) {
    (module_source(elem), format!("builtin_{}", elem.name()))
}

/// The built-in module of `elem` compiled for `target` through the kernel cache, with where
/// it came from.
pub fn compile_builtin(
    nvrtc: &NvrtcLib,
    elem: Elem,
    target: Target,
) -> std::result::Result<(std::sync::Arc<Compiled>, Origin), CudaError> {
    let (source, name) = builtin_program(elem);
    cache::compile(nvrtc, &source, &name, target, BUILTIN_OPTIONS).map_err(|e| CudaError::Compile {
        kernel: format!("built-in ops for {}", elem.name()),
        log: e.to_string(),
    })
}

/// Compiles the built-in modules of `elems` for `target` at once, one thread each (NVRTC
/// compiles on the CPU, and independent programs in parallel); returns each result in
/// order.
pub fn compile_builtins(
    nvrtc: &NvrtcLib,
    elems: &[Elem],
    target: Target,
) -> Vec<std::result::Result<(std::sync::Arc<Compiled>, Origin), CudaError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = elems
            .iter()
            .map(|&elem| s.spawn(move || compile_builtin(nvrtc, elem, target)))
            .collect();
        handles
            .into_iter()
            .zip(elems)
            .map(|(h, elem)| {
                h.join().unwrap_or_else(|_| {
                    Err(CudaError::Compile {
                        kernel: format!("built-in ops for {}", elem.name()),
                        log: "the compiling thread panicked".into(),
                    })
                })
            })
            .collect()
    })
}

impl Builtins {
    pub fn new(nvrtc: &'static NvrtcLib, target: Target) -> Self {
        Builtins {
            nvrtc,
            target,
            modules: Default::default(),
            loading: Mutex::new(()),
        }
    }

    /// The module for `elem`, loaded on first use. The context must be current.
    pub fn get(&self, dev: &Device, elem: Elem) -> Result<&Module> {
        let slot = &self.modules[slot_of(elem)];
        if let Some(m) = slot.get() {
            return Ok(m);
        }
        let (compiled, _) = compile_builtin(self.nvrtc, elem, self.target)?;
        self.load(dev, elem, &compiled)
    }

    /// Loads every module not loaded yet, compiling those the kernel cache lacks in
    /// parallel; returns the first error, after trying every module. The context must be
    /// current.
    pub fn preload(&self, dev: &Device) -> Result<()> {
        let missing: Vec<Elem> = Elem::ALL
            .into_iter()
            .filter(|&e| self.modules[slot_of(e)].get().is_none())
            .collect();
        let compiled = compile_builtins(self.nvrtc, &missing, self.target);
        let mut first = Ok(());
        for (elem, compiled) in missing.iter().zip(compiled) {
            let loaded = compiled
                .map_err(Error::from)
                .and_then(|(c, _)| self.load(dev, *elem, &c).map(|_| ()));
            if first.is_ok() {
                first = loaded;
            }
        }
        first
    }

    /// Loads `compiled` as `elem`'s module unless another thread did first.
    fn load(&self, dev: &Device, elem: Elem, compiled: &Compiled) -> Result<&Module> {
        let slot = &self.modules[slot_of(elem)];
        let _guard = lock(&self.loading);
        if let Some(m) = slot.get() {
            return Ok(m);
        }
        // SAFETY: the context is current (callers bind); the image is a cubin or NUL-terminated
        // PTX that lives across the call.
        let module = dev.check(unsafe { driver::module_load_data(&compiled.image) })?;
        let mut fns = Vec::new();
        for entry in entries(elem) {
            // Entry points are C identifiers, without NUL; were one not, the empty name
            // would find no function, and the lookup fail below with the driver's error.
            let c_name = CString::new(entry.c_name()).unwrap_or_default();
            // SAFETY: a live module.
            let f = match dev.check(unsafe { driver::module_get_function(module, &c_name) }) {
                Ok(f) => f,
                Err(e) => {
                    // SAFETY: the module was just loaded and nothing refers to it.
                    let _ = unsafe { driver::module_unload(module) };
                    return Err(e.into());
                }
            };
            fns.push((entry, Raw(f)));
        }
        let _ = slot.set(Module {
            raw: Raw(module),
            fns,
        });
        slot.get().ok_or_else(|| Error::Backend {
            backend: "cuda",
            call: "cuModuleLoadData",
            message: "the module cache lost a module".into(),
        })
    }

    /// Unloads every module. The context must be current, and nothing may launch them any
    /// more (the device is being dropped).
    pub fn unload(&mut self) {
        for slot in &mut self.modules {
            if let Some(m) = slot.take() {
                // SAFETY: the device is being dropped: every stream of every context on it was
                // destroyed (synchronised) and every graph destroyed, so no launch of the
                // module is pending and none can be queued.
                let _ = unsafe { driver::module_unload(m.raw.0) };
            }
        }
    }
}
