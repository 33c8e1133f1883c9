//! Modules and launches: the shared objects the emulated NVRTC builds, loaded with `dlopen`,
//! their kernels run on a stream's worker thread, and the signals a kernel can raise.
//!
//! Rules (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html>):
//! - `cuModuleLoadData` takes an image without a size: here, what the emulated NVRTC made
//!   (a header naming the kernels, then the shared object). PTX cannot run here (the
//!   emulator has no PTX compiler): it is `CUDA_ERROR_JIT_COMPILER_NOT_FOUND`, said on
//!   standard error; a real cubin is `CUDA_ERROR_NO_BINARY_FOR_GPU`;
//! - `cuModuleGetFunction` of a name the module lacks is `CUDA_ERROR_NOT_FOUND`;
//! - a launch's parameters are copied when it is queued; block and grid dimensions, threads
//!   per block and shared memory are checked against the device's limits
//!   (`CUDA_ERROR_INVALID_VALUE`), and dynamic shared memory above 48 KiB needs
//!   `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` first;
//! - a kernel that reads or writes outside a live allocation the device may access (its own
//!   memory, managed and pinned memory, a peer's with peer access enabled) ends the launch
//!   with the sticky `CUDA_ERROR_ILLEGAL_ADDRESS`; `__trap()` with `CUDA_ERROR_LAUNCH_FAILED`,
//!   a failed device `assert` with `CUDA_ERROR_ASSERT`.
//! - unloading a module whose kernels are still queued is undefined on hardware; here those
//!   launches fail with `CUDA_ERROR_LAUNCH_FAILED`, saying so (the code stays loaded).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::context::{Context, Driver};
use crate::errors::{cu, CuResult};
use crate::hb::Kind;
use crate::memory::{self, Allocation, MemKind};
use crate::work::{Exec, Fault, Outcome, Touch};

mod threads;

use threads::{give_stack, take_stack, ACTIVE};
pub use threads::{install_signal_handlers, worker_thread_setup};

/// `GKEMU_STACK_SIZE` of the runtime.
pub const STACK_SIZE: u64 = 64 * 1024;
const MAX_VIEWS: usize = 64;
const ABI_VERSION: u32 = 1;

/// `gkemu_view` (runtime/gkemu_abi.h).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct GkView {
    base: u64,
    size: u64,
    id: u64,
    lo: [u64; 3],
    hi: [u64; 3],
}

/// `gkemu_fault`.
#[repr(C)]
#[derive(Clone, Copy)]
struct GkFault {
    code: i32,
    kind: i32,
    addr: u64,
    size: u32,
    block: [u32; 3],
    thread: [u32; 3],
    message: [c_char; 512],
}

type LookupFn = unsafe extern "C" fn(*mut c_void, u64, u64, *mut GkView, *mut c_char, usize) -> i32;
type TakeStackFn = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type GiveStackFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// `gkemu_launch`.
#[repr(C)]
struct GkLaunch {
    abi: u32,
    kernel: u32,
    grid: [u32; 3],
    block: [u32; 3],
    dyn_smem: u32,
    nviews: u32,
    fibers: u32,
    reserved: u32,
    params: *mut *mut c_void,
    seed: u64,
    region_base: u64,
    region_size: u64,
    host: *mut c_void,
    lookup: LookupFn,
    take_stack: TakeStackFn,
    give_stack: GiveStackFn,
    views: [GkView; MAX_VIEWS],
    fault: GkFault,
    rt: *mut c_void,
}

/// `gkemu_kernel_info`.
#[repr(C)]
struct GkKernelInfo {
    name: *const c_char,
    entry: *const c_void,
    nparams: u32,
    param_size: *const u32,
    param_align: *const u32,
}

type EscapeFn = unsafe extern "C" fn(*mut GkLaunch, i32, u64, *const c_char);

/// `gkemu_module_info`.
#[repr(C)]
struct GkModuleInfo {
    abi: u32,
    nkernels: u32,
    kernels: *const GkKernelInfo,
    launch: unsafe extern "C" fn(*mut GkLaunch) -> i32,
    escape: EscapeFn,
}

/// One kernel of a module.
#[derive(Debug, Clone)]
pub struct KernelMeta {
    /// Its name.
    pub name: String,
    /// Its parameters' sizes and alignments.
    pub params: Vec<(u32, u32)>,
    /// Its static shared memory in bytes.
    pub static_smem: u64,
}

/// A loaded module.
pub struct Module {
    /// Its handle.
    pub handle: u64,
    /// Its context.
    pub ctx: u64,
    info: *const GkModuleInfo,
    /// Its kernels, in the module's order.
    pub kernels: Vec<KernelMeta>,
    /// Whether its threads need fibers (it has barriers or warp collectives).
    pub fibers: bool,
}

// SAFETY: `info` points into a shared object that is never unloaded (dlclose is never
// called), and is only read.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("handle", &format_args!("0x{:x}", self.handle))
            .field("kernels", &self.kernels.len())
            .finish_non_exhaustive()
    }
}

impl Module {
    /// `cuModuleUnload`: its handle and its functions' die, so that no new launch can name
    /// them; launches queued before still run (the code stays loaded), as programs written
    /// for hardware expect (cudarc's examples unload a module behind its last launch).
    pub fn unload(&self, d: &Driver) {
        d.modules.remove(self.handle);
        for f in d.functions.all() {
            if f.module.handle == self.handle {
                d.functions.remove(f.handle);
            }
        }
    }
}

/// A function of a module (`CUfunction`).
#[derive(Debug)]
pub struct Function {
    /// Its handle.
    pub handle: u64,
    /// Its module.
    pub module: Arc<Module>,
    /// Its index in the module.
    pub index: usize,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    pub max_dynamic_smem: AtomicU32,
}

impl Function {
    /// Its metadata.
    pub fn meta(&self) -> &KernelMeta {
        &self.module.kernels[self.index]
    }
}

/// A queued launch: the function, its configuration and a copy of its parameters.
#[derive(Debug)]
pub struct Launch {
    /// The function.
    pub func: Arc<Function>,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub smem: u32,
    /// The parameters' bytes, each at its offset.
    pub params: Vec<u64>,
    /// Each parameter's byte offset in `params`.
    pub offsets: Vec<usize>,
    /// The device it runs on.
    pub ctx: Arc<Context>,
}

impl Launch {
    /// Copies the parameters `kernel_params[i]` points at (the launch's contract: one
    /// pointer per parameter of the kernel's signature).
    ///
    /// # Safety
    ///
    /// `kernel_params` holds a readable pointer for each parameter of `func`, to a value of
    /// the parameter's size.
    pub unsafe fn new(
        func: Arc<Function>,
        ctx: Arc<Context>,
        grid: [u32; 3],
        block: [u32; 3],
        smem: u32,
        kernel_params: *mut *mut c_void,
    ) -> Launch {
        let mut offsets = Vec::new();
        let mut end = 0usize;
        for &(size, align) in &func.meta().params {
            let align = (align.max(1) as usize).min(16);
            let at = end.div_ceil(align) * align;
            offsets.push(at);
            end = at + size as usize;
        }
        let mut params = vec![0u64; end.div_ceil(8).max(1) + 2];
        let bytes = params.as_mut_ptr().cast::<u8>();
        for (i, &(size, _)) in func.meta().params.iter().enumerate() {
            // SAFETY: the caller's contract gives a readable pointer per parameter; the
            // buffer has room for every parameter at its offset.
            unsafe {
                let p = *kernel_params.add(i);
                std::ptr::copy_nonoverlapping(p.cast::<u8>(), bytes.add(offsets[i]), size as usize);
            }
        }
        Launch {
            func,
            grid,
            block,
            smem,
            params,
            offsets,
            ctx,
        }
    }
}

/// Loads a module image (see the module docs) into `ctx`.
///
/// # Safety
///
/// `image` points at a NUL-terminated text or at an image of the emulated NVRTC.
pub unsafe fn load(ctx: &Arc<Context>, image: *const u8) -> Result<Arc<Module>, CuResult> {
    // SAFETY: the caller's contract.
    let first = unsafe { crate::compile::parse_image(image) }?;
    // An image built against another runtime (kept in a cache across an emulator change)
    // is compiled again from the program it carries.
    let rebuilt;
    let parsed = if first.current() {
        first
    } else {
        let Some(p) = first.program.clone() else {
            return Err(cu::INVALID_IMAGE);
        };
        crate::errors::diagnose(&format!(
            "cuModuleLoadData: `{}` was compiled against another version of the emulator's runtime; compiling it again",
            p.name
        ));
        rebuilt = crate::compile::compile(&p.source, &p.name, &p.headers, &p.options)
            .map_err(|e| {
                crate::errors::diagnose(&format!(
                    "cuModuleLoadData: the recompile failed: {}",
                    e.log
                ));
                cu::INVALID_IMAGE
            })?
            .image;
        crate::compile::parse_slice(&rebuilt)?
    };
    if parsed
        .kernels
        .iter()
        .any(|(_, s)| *s > crate::compile::STATIC_SMEM_MAX)
    {
        crate::errors::diagnose("cuModuleLoadData: a kernel uses more than 48 KiB of static shared memory (the JIT compiler refuses it, as ptxas does)");
        return Err(cu::INVALID_PTX);
    }
    let path = crate::compile::write_so(&parsed)?;
    let c_path = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| cu::INVALID_VALUE)?;
    // SAFETY: loading our own compiled module: its initialisers set up nothing but the
    // instrumentation's (empty) hooks.
    let lib = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        // SAFETY: dlerror returns a NUL-terminated string or null.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                String::new()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        crate::errors::diagnose(&format!(
            "cuModuleLoadData: {} did not load: {why}",
            path.display()
        ));
        return Err(cu::SHARED_OBJECT_INIT_FAILED);
    }
    // SAFETY: a loaded library; the symbol name is NUL-terminated.
    let info = unsafe { libc::dlsym(lib, c"gkemu_module".as_ptr()) }.cast::<GkModuleInfo>();
    if info.is_null() {
        return Err(cu::INVALID_IMAGE);
    }
    // SAFETY: the module exports a `gkemu_module_info` under that name (our generator's
    // contract), static for the life of the library, which is never unloaded.
    let info_ref = unsafe { &*info };
    if info_ref.abi != ABI_VERSION {
        return Err(cu::INVALID_IMAGE);
    }
    let mut kernels = Vec::new();
    for i in 0..info_ref.nkernels as usize {
        // SAFETY: `kernels` has `nkernels` entries, each with a NUL-terminated name and
        // `nparams` sizes and alignments.
        let k = unsafe { &*info_ref.kernels.add(i) };
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(k.name) }
            .to_string_lossy()
            .into_owned();
        let params = (0..k.nparams as usize)
            // SAFETY: as above.
            .map(|j| unsafe { (*k.param_size.add(j), *k.param_align.add(j)) })
            .collect();
        // The image lists the kernels in the module's order, under their linkage names.
        let (name, static_smem) = parsed.kernels.get(i).cloned().unwrap_or((name, 0));
        kernels.push(KernelMeta {
            name,
            params,
            static_smem,
        });
    }
    let d = crate::context::driver()?;
    let handle = d.modules.reserve();
    let m = Arc::new(Module {
        handle,
        ctx: ctx.handle,
        info,
        kernels,
        fibers: parsed.fibers,
    });
    d.modules.insert_at(handle, Arc::clone(&m));
    Ok(m)
}

/// What the runtime's callbacks need: the launching context and the allocations found.
struct LaunchHost {
    ctx: Arc<Context>,
    found: HashMap<u64, Arc<Allocation>>,
}

unsafe extern "C" fn lookup(
    host: *mut c_void,
    addr: u64,
    size: u64,
    out: *mut GkView,
    why: *mut c_char,
    why_len: usize,
) -> i32 {
    // SAFETY: `host` is the `LaunchHost` of the launch running on this thread, which
    // outlives it; `out` and `why` are the runtime's buffers of the given sizes.
    let (host, out) = unsafe { (&mut *host.cast::<LaunchHost>(), &mut *out) };
    let write_why = |text: &str| {
        let bytes = text.as_bytes();
        let n = bytes.len().min(why_len.saturating_sub(1));
        // SAFETY: at most `why_len - 1` bytes and the NUL, inside the runtime's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), why.cast::<u8>(), n);
            *why.add(n) = 0;
        }
    };
    let Ok(mem) = memory::memory() else {
        return 0;
    };
    let Some(a) = mem.find(addr).filter(|a| a.contains(addr, size)) else {
        write_why(&mem.explain_miss(addr, size));
        return 0;
    };
    if a.kind == MemKind::Device && !host.ctx.may_access(a.ctx) {
        write_why(&format!(
            "{} belongs to another context, and peer access to it was not enabled (cuCtxEnablePeerAccess)",
            a.describe()
        ));
        return 0;
    }
    out.base = a.base;
    out.size = a.size;
    out.id = a.id;
    host.found.insert(a.id, a);
    1
}

// ---- running a launch ------------------------------------------------------------------

fn launch_counter() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Runs `launch` on the calling (worker) thread.
pub fn run_launch(exec: &Exec<'_>, launch: &Launch) -> Outcome {
    let func = &launch.func;
    let meta = func.meta();
    let name = &meta.name;
    if crate::faults::kernel_faults(name) {
        return Err(Fault {
            code: cu::ILLEGAL_ADDRESS,
            message: format!(
                "{}: an illegal address injected by GPUKIT_CUDA_EMU_FAULT_KERNEL",
                exec.what
            ),
        });
    }
    let mem = memory::memory().map_err(|code| Fault {
        code,
        message: String::new(),
    })?;
    let mut host = LaunchHost {
        ctx: Arc::clone(&launch.ctx),
        found: HashMap::new(),
    };
    let base = launch.params.as_ptr().cast::<u8>().cast_mut();
    let mut ptrs: Vec<*mut c_void> = launch
        .offsets
        .iter()
        // SAFETY: each offset lies inside the parameter buffer.
        .map(|&o| unsafe { base.add(o) }.cast::<c_void>())
        .collect();
    ptrs.push(std::ptr::null_mut());
    // SAFETY: `info` is valid for the life of the never-unloaded library.
    let info = unsafe { &*func.module.info };
    // SAFETY: all-zero is a valid GkLaunch but for the function pointers, set right after.
    let mut gk: Box<GkLaunch> = Box::new(GkLaunch {
        abi: ABI_VERSION,
        kernel: func.index as u32,
        grid: launch.grid,
        block: launch.block,
        dyn_smem: launch.smem,
        nviews: 0,
        fibers: u32::from(func.module.fibers),
        reserved: 0,
        params: ptrs.as_mut_ptr(),
        seed: crate::config::get().seed ^ launch_counter().wrapping_mul(0x9e37_79b9_7f4a_7c15),
        region_base: mem.base,
        region_size: mem.size,
        host: (&mut host as *mut LaunchHost).cast(),
        lookup,
        take_stack,
        give_stack,
        views: [GkView {
            base: 0,
            size: 0,
            id: 0,
            lo: [0; 3],
            hi: [0; 3],
        }; MAX_VIEWS],
        // SAFETY: a plain C struct of integers and bytes.
        fault: unsafe { std::mem::zeroed() },
        rt: std::ptr::null_mut(),
    });
    let gk_ptr: *mut GkLaunch = &mut *gk;
    ACTIVE.set((gk_ptr, Some(info.escape)));
    // SAFETY: the launch's configuration was checked when it was queued; its parameters
    // are copies of the caller's, which vouched they match the kernel (the launch API's
    // contract); the runtime runs the grid on this thread and returns.
    let r = unsafe { (info.launch)(gk_ptr) };
    ACTIVE.set((std::ptr::null_mut(), None));
    if r != 0 {
        let f = &gk.fault;
        // SAFETY: the runtime NUL-terminates the message inside the buffer.
        let message = unsafe { CStr::from_ptr(f.message.as_ptr()) }.to_string_lossy();
        let at = if f.code != 0 && (f.block != [0; 3] || f.thread != [0; 3] || f.addr != 0) {
            format!(
                " (block ({}, {}, {}), thread ({}, {}, {}))",
                f.block[0], f.block[1], f.block[2], f.thread[0], f.thread[1], f.thread[2]
            )
        } else {
            String::new()
        };
        let code = if f.code > 0 {
            f.code as u32
        } else {
            cu::LAUNCH_FAILED
        };
        let code = match r {
            1 => cu::INVALID_VALUE,
            2 => cu::OUT_OF_MEMORY,
            _ => code,
        };
        let what = if f.addr != 0 && code == cu::ILLEGAL_ADDRESS && !message.contains("0x") {
            format!("{message} at 0x{:x}", f.addr)
        } else {
            message.into_owned()
        };
        return Err(Fault {
            code,
            message: format!("{}{at}: {what}", exec.what),
        });
    }
    let mut touches = Vec::new();
    for v in &gk.views[..gk.nviews as usize] {
        let Some(a) = host.found.get(&v.id) else {
            continue;
        };
        for (k, kind) in [Kind::Read, Kind::Write, Kind::Atomic]
            .into_iter()
            .enumerate()
        {
            if v.lo[k] < v.hi[k] {
                touches.push(Touch {
                    alloc: Arc::clone(a),
                    kind,
                    lo: v.lo[k],
                    hi: v.hi[k],
                });
            }
        }
    }
    Ok(touches)
}
