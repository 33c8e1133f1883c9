//! Custom kernels: CUDA C through NVRTC or PTX as given, loaded as modules, launched with
//! arguments packed from gpukit-core's [`KernelArg`]s.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use gpukit_core::{
    Error, KernelArg, KernelDesc, KernelSig, KernelSource, KernelSpec, LaunchConfig, Result,
    MAX_LAUNCH_ARGS,
};

use crate::backend::{CudaBackend, CudaStream};
use crate::cache;
use crate::device::{Device, Raw};
use crate::driver;
use crate::error::{is_bad_image, CudaError};
use crate::streams::ContextStreams;

/// A loaded kernel: its module and entry point.
pub struct CudaKernel {
    name: String,
    module: Raw<sys::CUmodule>,
    func: Raw<sys::CUfunction>,
    /// The most threads per block this kernel can run (its registers can lower it below the
    /// device's limit).
    max_threads: u32,
    /// Bytes of static shared memory a block of it uses.
    static_smem: u32,
    /// The streams of the context that loaded it: the only ones that can have launched it,
    /// which its module's unloading waits for. Before `dev`: dropped first, while the
    /// device's context is still retained.
    streams: Arc<ContextStreams>,
    dev: Arc<Device>,
}

impl std::fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKernel")
            .field("name", &self.name)
            .field("device", &self.dev.ordinal)
            .field("max_threads_per_block", &self.max_threads)
            .finish_non_exhaustive()
    }
}

impl CudaKernel {
    /// The entry point's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most threads per block this kernel can be launched with.
    pub fn max_threads_per_block(&self) -> u32 {
        self.max_threads
    }
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        // Launches of this kernel may still be queued: the module is unloaded once the
        // context's streams have been synchronised, or when the context closes.
        self.streams.retire(&self.dev, self.module.0);
    }
}

/// A kernel that did not compile or load, with the compiler's or loader's message.
fn compile_error(desc: &KernelDesc, log: String) -> Error {
    CudaError::Compile {
        kernel: desc.name.clone(),
        log,
    }
    .into()
}

/// A kernel whose static shared memory is over the device's limit.
fn static_smem_message(kernel: &str, bytes: u32, limit: u32) -> String {
    format!(
        "`{kernel}` uses {bytes} bytes of static shared memory; a block on this device may have at most {limit} (more needs dynamic shared memory, `LaunchConfig::shared_mem_bytes`)"
    )
}

/// A spec with only a CPU closure.
fn no_gpu_code(desc: &KernelDesc) -> Error {
    Error::KernelUnavailable {
        kernel: desc.name.clone(),
        backend: "cuda",
        hint: "give the spec CUDA C (`KernelSpec::cuda`) or PTX (`KernelSpec::ptx`)",
    }
}

/// Compiles a spec's CUDA C with NVRTC for compute capability `cc` and checks that it has
/// the entry point the spec names, with no GPU and no driver: only NVRTC is needed (pip's
/// `nvidia-cuda-nvrtc-cu12` will do). A machine without a GPU, CI say, can so tell that a
/// kernel compiles before a GPU ever loads it. Where NVRTC knows the architecture it
/// compiles to machine code (SASS), so that the assembler's limits are checked too (more
/// than 48 KiB of static shared memory, say), as they are when a GPU loads the kernel;
/// else to PTX, whose limits only the driver checks. PTX given as such is checked for the
/// entry point's declaration only (only the driver assembles PTX).
///
/// Errors: [`Error::Unavailable`] when NVRTC cannot be found, [`Error::KernelCompile`] with
/// the compiler's log, or naming the missing entry point, and [`Error::KernelUnavailable`]
/// for a spec without GPU code.
///
/// ```
/// # use gpukit::{KernelSpec, Out};
/// // SAFETY: `ones(float*, unsigned long long)` matches the signature and writes below `n`.
/// let spec = unsafe {
///     KernelSpec::<(Out<f32>, u64)>::cuda(
///         r#"extern "C" __global__ void ones(float* x, unsigned long long n) {
///                unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
///                if (i < n) x[i] = 1.0f;
///            }"#,
///         "ones",
///     )
/// };
/// match gpukit::cuda::compile_check(&spec, (9, 0)) {
///     Ok(()) => println!("compiles for sm_90"),
///     Err(gpukit::Error::Unavailable { reason, .. }) => println!("no NVRTC here: {reason}"),
///     Err(e) => panic!("{e}"),
/// }
/// ```
pub fn compile_check<S: KernelSig>(spec: &KernelSpec<S>, cc: (u32, u32)) -> Result<()> {
    let desc = spec.desc();
    let compile_err = |log: String| compile_error(desc, log);
    let image = match &desc.source {
        None => return Err(no_gpu_code(desc)),
        Some(KernelSource::CudaC(src)) => {
            let nvrtc = gpukit_cuda_sys::nvrtc::nvrtc(None)
                .map_err(|e| CudaError::Unavailable(e.to_string()))?;
            // SASS where this NVRTC knows the architecture: its assembler then checks what
            // PTX leaves to the driver (registers, static shared memory over the limit).
            let (compiled, _) =
                cache::compile(nvrtc, src, &desc.name, nvrtc.target_for(cc), options(desc))
                    .map_err(|e| compile_err(e.to_string()))?;
            compiled.image.clone()
        }
        Some(KernelSource::Ptx(ptx)) => ptx.as_bytes().to_vec(),
    };
    if !declares_entry(&image, &desc.name) {
        return Err(compile_err(format!(
            "the module has no entry point named `{}` (declare it `extern \"C\" __global__` so its name is not mangled)",
            desc.name
        )));
    }
    Ok(())
}

/// Whether a compiled module (PTX text or a cubin) has an entry point named `name`: in PTX
/// a `.entry name(` declaration (also when it has no parameters); in a cubin (an ELF
/// object) the symbol `name`, whole, in its string table.
fn declares_entry(image: &[u8], name: &str) -> bool {
    if image.starts_with(b"\x7fELF") {
        let whole = [&[0u8][..], name.as_bytes(), &[0u8][..]].concat();
        return image.windows(whole.len()).any(|w| w == whole.as_slice());
    }
    let text = String::from_utf8_lossy(image);
    text.match_indices(".entry").any(|(at, _)| {
        let rest = text[at + ".entry".len()..].trim_start();
        rest.strip_prefix(name)
            .is_some_and(|after| after.trim_start().starts_with('('))
    })
}

/// NVRTC's options for generated (`#[kernel]`) code, the built-in ops' included: no
/// contraction of `a * b + c` into one fused operation, so that its arithmetic gives the
/// bits its CPU twin gives.
pub const GENERATED_OPTIONS: &[&str] = &["--fmad=false"];

/// NVRTC's options for a kernel: [`GENERATED_OPTIONS`] for generated code, NVRTC's
/// defaults for hand-written code.
fn options(desc: &KernelDesc) -> &'static [&'static str] {
    if desc.checked.is_some() {
        GENERATED_OPTIONS
    } else {
        &[]
    }
}

pub(crate) fn load(b: &CudaBackend, desc: &KernelDesc) -> Result<CudaKernel> {
    b.dev.bind()?;
    let compile_err = |log: String| compile_error(desc, log);
    let image: Vec<u8> = match &desc.source {
        None => return Err(no_gpu_code(desc)),
        Some(KernelSource::CudaC(src)) => {
            let nvrtc = b.dev.nvrtc;
            let cc = b.dev.info.compute_capability.unwrap_or((0, 0));
            let (compiled, _) =
                cache::compile(nvrtc, src, &desc.name, nvrtc.target_for(cc), options(desc))
                    .map_err(|e| compile_err(e.to_string()))?;
            compiled.image.clone()
        }
        Some(KernelSource::Ptx(ptx)) => CString::new(ptx.as_str())
            .map_err(|_| compile_err("the PTX contains a NUL byte".into()))?
            .into_bytes_with_nul(),
    };
    // SAFETY: the context is current; the image is a cubin or NUL-terminated PTX that lives
    // across the call.
    let r = unsafe { driver::module_load_data(&image) };
    match r {
        Err(e) if is_bad_image(e.code) => {
            let (name, message) = crate::error::describe(e.code);
            return Err(compile_err(format!(
                "cuModuleLoadData: {name} ({message}); the driver's compiler refuses a kernel over the device's limits, such as more than {} bytes of static shared memory",
                b.dev.info.limits.max_shared_mem_per_block
            )));
        }
        _ => {}
    }
    let module = b.dev.check(r)?;
    let unload = |e: Error| -> Error {
        // SAFETY: the module was just loaded and nothing else refers to it.
        let _ = unsafe { driver::module_unload(module) };
        e
    };
    let c_name = CString::new(desc.name.as_str())
        .map_err(|_| unload(compile_err("the kernel name contains a NUL byte".into())))?;
    // SAFETY: a live module.
    let r = unsafe { driver::module_get_function(module, &c_name) };
    if matches!(r, Err(e) if e.code == CUresult::CUDA_ERROR_NOT_FOUND) {
        return Err(unload(compile_err(format!(
            "the module has no entry point named `{}` (declare it `extern \"C\" __global__` so its name is not mangled)",
            desc.name
        ))));
    }
    let func = b.dev.check(r).map_err(|e| unload(e.into()))?;
    let attribute = |a: sys::CUfunction_attribute| -> Result<u32> {
        // SAFETY: a live function.
        let v = b
            .dev
            .check(unsafe { driver::func_get_attribute(a, func) })?;
        Ok(u32::try_from(v).unwrap_or(0))
    };
    let max_threads = attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        .map_err(unload)?;
    let static_smem = attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        .map_err(unload)?;
    let limit = b.dev.info.limits.max_shared_mem_per_block;
    if static_smem > limit {
        return Err(unload(compile_err(static_smem_message(
            &desc.name,
            static_smem,
            limit,
        ))));
    }
    Ok(CudaKernel {
        name: desc.name.clone(),
        module: Raw(module),
        func: Raw(func),
        max_threads,
        static_smem,
        streams: Arc::clone(&b.streams),
        dev: Arc::clone(&b.dev),
    })
}

/// One argument's bytes, 8-byte aligned as CUDA parameters need.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot([u8; 16]);

/// # Safety
///
/// The contract of [`gpukit_core::Backend::launch`].
pub(crate) unsafe fn launch(
    b: &CudaBackend,
    stream: &CudaStream,
    k: &CudaKernel,
    cfg: &LaunchConfig,
    args: &[KernelArg<'_, CudaBackend>],
) -> Result<()> {
    let threads = cfg.block.iter().map(|&d| u64::from(d)).product::<u64>();
    if threads > u64::from(k.max_threads) {
        return Err(Error::InvalidLaunch {
            kernel: k.name.clone(),
            reason: format!(
                "{threads} threads per block exceed this kernel's limit of {} on this device (its register use lowers the device's {})",
                k.max_threads, b.dev.info.limits.max_threads_per_block
            ),
        });
    }
    let smem = u64::from(k.static_smem) + u64::from(cfg.shared_mem_bytes);
    let limit = b.dev.info.limits.max_shared_mem_per_block;
    if smem > u64::from(limit) {
        return Err(Error::InvalidLaunch {
            kernel: k.name.clone(),
            reason: format!(
                "{} bytes of dynamic shared memory and the kernel's {} static bytes exceed the {limit} a block may have",
                cfg.shared_mem_bytes, k.static_smem
            ),
        });
    }
    if args.len() > MAX_LAUNCH_ARGS {
        return Err(Error::InvalidLaunch {
            kernel: k.name.clone(),
            reason: format!(
                "{} arguments (a launch has at most {MAX_LAUNCH_ARGS})",
                args.len()
            ),
        });
    }
    b.dev.bind()?;
    // On the stack: a launch allocates nothing.
    let mut slots = [Slot::default(); MAX_LAUNCH_ARGS];
    for (slot, arg) in slots.iter_mut().zip(args) {
        match arg {
            KernelArg::Buffer { at, .. } => {
                let addr: u64 = at.map_or(0, |at| at.buf.at(at.offset));
                slot.0[..8].copy_from_slice(&addr.to_ne_bytes());
            }
            KernelArg::Scalar { bytes, len } => {
                let len = (*len).min(16);
                slot.0[..len].copy_from_slice(&bytes[..len]);
            }
        }
    }
    let mut params = [std::ptr::null_mut::<c_void>(); MAX_LAUNCH_ARGS];
    for (p, s) in params.iter_mut().zip(slots.iter_mut()) {
        *p = s.0.as_mut_ptr().cast();
    }
    // SAFETY: `func` is a kernel of this context; `params` points at one slot per argument
    // holding its value (device addresses of valid ranges, scalars' bytes); the code takes
    // these arguments and stays inside them (this function's contract, vouched for by the
    // caller of the unsafe `KernelSpec::cuda`/`ptx`); the configuration was checked against
    // the device's and the kernel's limits.
    let r = unsafe {
        driver::launch_kernel(
            k.func.0,
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            stream.raw.0,
            &mut params,
        )
    };
    match r {
        Err(e)
            if matches!(
                e.code,
                CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES | CUresult::CUDA_ERROR_INVALID_VALUE
            ) =>
        {
            let (name, message) = crate::error::describe(e.code);
            Err(Error::InvalidLaunch {
                kernel: k.name.clone(),
                reason: format!("cuLaunchKernel: {name} ({message})"),
            })
        }
        r => Ok(b.dev.check(r)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_are_found_in_ptx_and_in_cubins() {
        let ptx = ".visible .entry ones(\n.param .u64 x\n)\n.visible .entry none ()";
        assert!(declares_entry(ptx.as_bytes(), "ones"));
        assert!(declares_entry(ptx.as_bytes(), "none"), "no parameters");
        assert!(
            !declares_entry(ptx.as_bytes(), "one"),
            "a prefix is not the name"
        );
        // An ELF string table: section names and symbols, NUL-separated.
        let cubin = b"\x7fELF\x02\x01\0\0.text.ones\0.nv.info.ones\0ones\0_Z7mangledPf\0";
        assert!(declares_entry(cubin, "ones"));
        assert!(
            !declares_entry(cubin, "mangled"),
            "only the mangled symbol is there"
        );
        assert!(!declares_entry(cubin, "one"));
    }

    #[test]
    fn the_static_shared_memory_message_names_the_kernel_and_both_sizes() {
        let m = static_smem_message("tile", 524_288, 49_152);
        assert!(
            m.contains("`tile`") && m.contains("524288") && m.contains("49152"),
            "{m}"
        );
    }
}
