//! Thin helpers over the emulator's C entry points, so that the tests read as the rules they
//! check: result codes compared by name, contexts made current, buffers moved, programs
//! compiled with the emulated NVRTC and kernels launched with a `void **` of arguments.
//!
//! Every helper passes the entry point valid pointers (Rust references and slices of the
//! right length); the result codes are returned as they came, or asserted where the helper
//! says so.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, Mutex};

use gpukit_cuda_emu::api::driver as drv;
use gpukit_cuda_emu::api::mem;
use gpukit_cuda_emu::api::module as md;
use gpukit_cuda_emu::api::nvrtc;
use gpukit_cuda_emu::api::stream as st;

/// `CUDA_SUCCESS`.
pub const SUCCESS: u32 = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const INVALID_VALUE: u32 = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const OUT_OF_MEMORY: u32 = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`.
pub const NOT_INITIALIZED: u32 = 3;
/// `CUDA_ERROR_INVALID_DEVICE`.
pub const INVALID_DEVICE: u32 = 101;
/// `CUDA_ERROR_INVALID_CONTEXT`.
pub const INVALID_CONTEXT: u32 = 201;
/// `CUDA_ERROR_JIT_COMPILER_NOT_FOUND`.
pub const JIT_COMPILER_NOT_FOUND: u32 = 221;
/// `CUDA_ERROR_UNSUPPORTED_LIMIT`.
pub const UNSUPPORTED_LIMIT: u32 = 215;
/// `CUDA_ERROR_FILE_NOT_FOUND`.
pub const FILE_NOT_FOUND: u32 = 301;
/// `CUDA_ERROR_INVALID_HANDLE`.
pub const INVALID_HANDLE: u32 = 400;
/// `CUDA_ERROR_NOT_FOUND`.
pub const NOT_FOUND: u32 = 500;
/// `CUDA_ERROR_NOT_READY`.
pub const NOT_READY: u32 = 600;
/// `CUDA_ERROR_ILLEGAL_ADDRESS`.
pub const ILLEGAL_ADDRESS: u32 = 700;
/// `CUDA_ERROR_ASSERT`.
pub const ASSERT: u32 = 710;
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`.
pub const HOST_MEMORY_ALREADY_REGISTERED: u32 = 712;
/// `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.
pub const HOST_MEMORY_NOT_REGISTERED: u32 = 713;
/// `CUDA_ERROR_LAUNCH_FAILED`.
pub const LAUNCH_FAILED: u32 = 719;
/// `CUDA_ERROR_NOT_PERMITTED`.
pub const NOT_PERMITTED: u32 = 800;
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
pub const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
pub const STREAM_CAPTURE_INVALIDATED: u32 = 901;
/// `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`.
pub const STREAM_CAPTURE_UNJOINED: u32 = 904;
/// `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`.
pub const STREAM_CAPTURE_WRONG_THREAD: u32 = 908;

/// `NVRTC_ERROR_INVALID_OPTION`.
pub const NVRTC_ERROR_INVALID_OPTION: u32 = 5;
/// `NVRTC_ERROR_COMPILATION`.
pub const NVRTC_ERROR_COMPILATION: u32 = 6;

/// `CU_STREAM_NON_BLOCKING`.
pub const NON_BLOCKING: u32 = 1;

/// The options every test program is compiled with.
pub const SM_90: &str = "--gpu-architecture=sm_90";

/// A `CUresult`'s name, through `cuGetErrorName` (or the number, for a code it does not
/// know).
pub fn name(code: u32) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: a writable pointer; the emulator stores a static NUL-terminated string or null.
    let r = unsafe { drv::cuGetErrorName(code, &mut p) };
    if r != SUCCESS || p.is_null() {
        return format!("unknown CUresult {code}");
    }
    // SAFETY: non-null, a static NUL-terminated name.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    format!("{s} ({code})")
}

/// Asserts that a call returned `want`.
#[track_caller]
pub fn expect(got: u32, want: u32, what: &str) {
    assert!(
        got == want,
        "{what}: returned {}, expected {}",
        name(got),
        name(want)
    );
}

/// Asserts that a call returned `CUDA_SUCCESS`.
#[track_caller]
pub fn ok(got: u32, what: &str) {
    expect(got, SUCCESS, what);
}

/// The harness's settings, then `cuInit(0)`.
#[track_caller]
pub fn init() {
    crate::setup();
    // SAFETY: no pointers.
    ok(unsafe { drv::cuInit(0) }, "cuInit(0)");
}

/// Initialises the driver and makes device `dev`'s primary context current on this thread;
/// returns the context.
#[track_caller]
pub fn use_device(dev: i32) -> u64 {
    init();
    let mut ctx = 0u64;
    // SAFETY: a writable CUcontext.
    ok(
        unsafe { drv::cuDevicePrimaryCtxRetain(&mut ctx, dev) },
        "cuDevicePrimaryCtxRetain",
    );
    // SAFETY: no pointers.
    ok(unsafe { drv::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent");
    ctx
}

/// Plain data that may be copied to and from device memory byte for byte.
pub trait Pod: Copy + Default + 'static {}
impl Pod for u8 {}
impl Pod for u16 {}
impl Pod for u32 {}
impl Pod for i32 {}
impl Pod for u64 {}
impl Pod for f32 {}
impl Pod for f64 {}

/// `cuMemAlloc_v2`.
pub fn try_alloc(bytes: usize) -> Result<u64, u32> {
    let mut p = 0u64;
    // SAFETY: a writable CUdeviceptr.
    match unsafe { mem::cuMemAlloc_v2(&mut p, bytes) } {
        SUCCESS => Ok(p),
        e => Err(e),
    }
}

/// `cuMemAlloc_v2`, asserted to succeed.
#[track_caller]
pub fn alloc(bytes: usize) -> u64 {
    match try_alloc(bytes) {
        Ok(p) => p,
        Err(e) => panic!("cuMemAlloc_v2({bytes}) returned {}", name(e)),
    }
}

/// `cuMemFree_v2`.
pub fn free(p: u64) -> u32 {
    // SAFETY: no host pointers.
    unsafe { mem::cuMemFree_v2(p) }
}

/// `cuMemcpyHtoD_v2` of `src`.
pub fn htod<T: Pod>(dst: u64, src: &[T]) -> u32 {
    // SAFETY: `src` holds `size_of_val(src)` readable bytes for the call (a synchronous copy).
    unsafe { mem::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), std::mem::size_of_val(src)) }
}

/// `cuMemcpyDtoH_v2` of `n` elements, or its error.
pub fn try_dtoh<T: Pod>(src: u64, n: usize) -> Result<Vec<T>, u32> {
    let mut out = vec![T::default(); n];
    // SAFETY: `out` has room for `n` elements; the copy is synchronous.
    let r = unsafe {
        mem::cuMemcpyDtoH_v2(
            out.as_mut_ptr().cast(),
            src,
            std::mem::size_of_val(out.as_slice()),
        )
    };
    match r {
        SUCCESS => Ok(out),
        e => Err(e),
    }
}

/// `cuMemcpyDtoH_v2` of `n` elements, asserted to succeed.
#[track_caller]
pub fn dtoh<T: Pod>(src: u64, n: usize) -> Vec<T> {
    match try_dtoh(src, n) {
        Ok(v) => v,
        Err(e) => panic!("cuMemcpyDtoH_v2 returned {}", name(e)),
    }
}

/// A new allocation holding `data`, ready for work on any stream.
///
/// The synchronous copy from pageable memory may return before the data reaches the
/// device ("the DMA to final destination may not have completed", api-sync-behavior), and
/// it runs on the legacy default stream, which non-blocking streams do not wait for: the
/// legacy stream is synchronised after it, so that the tests' later work on any stream is
/// ordered after the copy by the rules, not by the emulator's choice to finish it early.
#[track_caller]
pub fn upload<T: Pod>(data: &[T]) -> u64 {
    let p = alloc(std::mem::size_of_val(data).max(1));
    ok(htod(p, data), "cuMemcpyHtoD_v2");
    ok(sync(0), "cuStreamSynchronize(0) after the upload");
    p
}

/// `cuMemsetD32_v2`, then the legacy default stream synchronised (the synchronous memset
/// "is asynchronous with respect to the host" for device memory, api-sync-behavior; see
/// [`upload`]).
pub fn memset32(dst: u64, value: u32, count: usize) -> u32 {
    // SAFETY: no host pointers.
    match unsafe { mem::cuMemsetD32_v2(dst, value, count) } {
        SUCCESS => sync(0),
        e => e,
    }
}

/// `cuStreamCreate` with `flags`, asserted to succeed.
#[track_caller]
pub fn stream(flags: u32) -> u64 {
    let mut s = 0u64;
    // SAFETY: a writable CUstream.
    ok(
        unsafe { st::cuStreamCreate(&mut s, flags) },
        "cuStreamCreate",
    );
    s
}

/// `cuStreamSynchronize`.
pub fn sync(s: u64) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuStreamSynchronize(s) }
}

/// `cuStreamQuery`.
pub fn query(s: u64) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuStreamQuery(s) }
}

/// `cuCtxSynchronize`.
pub fn ctx_sync() -> u32 {
    // SAFETY: no pointers.
    unsafe { drv::cuCtxSynchronize() }
}

/// `cuEventCreate` with `flags`, asserted to succeed.
#[track_caller]
pub fn event(flags: u32) -> u64 {
    let mut e = 0u64;
    // SAFETY: a writable CUevent.
    ok(unsafe { st::cuEventCreate(&mut e, flags) }, "cuEventCreate");
    e
}

/// `cuEventRecord`.
pub fn record(e: u64, s: u64) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuEventRecord(e, s) }
}

/// `cuStreamWaitEvent` with flags 0.
pub fn wait_event(s: u64, e: u64) -> u32 {
    // SAFETY: no pointers.
    unsafe { st::cuStreamWaitEvent(s, e, 0) }
}

/// What `nvrtcCompileProgram` made of a program.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// `nvrtcCompileProgram`'s result.
    pub result: u32,
    /// The program log.
    pub log: String,
    /// The cubin (`nvrtcGetCUBIN`), empty when the compile failed.
    pub image: Vec<u8>,
}

/// Compiles `src` as program `name` with `options` through the emulated NVRTC.
pub fn compile(src: &str, name: &str, options: &[&str]) -> Compiled {
    crate::setup();
    let c_src = CString::new(src).expect("no NUL in the source");
    let c_name = CString::new(name).expect("no NUL in the name");
    let c_opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(*o).expect("no NUL in an option"))
        .collect();
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog = 0u64;
    // SAFETY: NUL-terminated source and name; no headers.
    let r = unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            c_src.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "nvrtcCreateProgram");
    // SAFETY: `opt_ptrs` holds `len` NUL-terminated options, alive for the call.
    let result =
        unsafe { nvrtc::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let mut log_size = 0usize;
    // SAFETY: a writable size_t.
    let r = unsafe { nvrtc::nvrtcGetProgramLogSize(prog, &mut log_size) };
    assert_eq!(r, 0, "nvrtcGetProgramLogSize");
    let mut log = vec![0u8; log_size.max(1)];
    // SAFETY: `log` has the size nvrtcGetProgramLogSize reported.
    let r = unsafe { nvrtc::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast()) };
    assert_eq!(r, 0, "nvrtcGetProgramLog");
    let log = CStr::from_bytes_until_nul(&log)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut image = Vec::new();
    if result == 0 {
        let mut size = 0usize;
        // SAFETY: a writable size_t.
        let r = unsafe { nvrtc::nvrtcGetCUBINSize(prog, &mut size) };
        assert_eq!(r, 0, "nvrtcGetCUBINSize");
        assert!(size > 0, "a program compiled for sm_90 has a cubin");
        image = vec![0u8; size];
        // SAFETY: `image` has the size nvrtcGetCUBINSize reported.
        let r = unsafe { nvrtc::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast()) };
        assert_eq!(r, 0, "nvrtcGetCUBIN");
    }
    // SAFETY: a live program handle, written back as 0.
    let r = unsafe { nvrtc::nvrtcDestroyProgram(&mut prog) };
    assert_eq!(r, 0, "nvrtcDestroyProgram");
    Compiled { result, log, image }
}

/// Compiled programs by (name, source).
type Images = HashMap<(String, String), Arc<Vec<u8>>>;

/// The cubin of `src` compiled for sm_90 (compiled once per process and program; the
/// emulator's own cache keeps it across processes), asserted to compile.
#[track_caller]
pub fn cubin(src: &str, name: &str) -> Arc<Vec<u8>> {
    static IMAGES: Mutex<Option<Images>> = Mutex::new(None);
    // Held while compiling: two tests wanting the same program compile it once.
    let mut images = IMAGES.lock().unwrap_or_else(|e| e.into_inner());
    let images = images.get_or_insert_with(HashMap::new);
    let key = (name.to_owned(), src.to_owned());
    if let Some(i) = images.get(&key) {
        return Arc::clone(i);
    }
    let c = compile(src, name, &[SM_90]);
    assert_eq!(
        c.result, 0,
        "program `{name}` did not compile; log:\n{}",
        c.log
    );
    let image = Arc::new(c.image);
    images.insert(key, Arc::clone(&image));
    image
}

/// `cuModuleLoadData` of `image` in the current context.
pub fn try_load(image: &[u8]) -> Result<u64, u32> {
    let mut m = 0u64;
    // SAFETY: `image` is an image of the emulated NVRTC (or NUL-terminated text), alive for
    // the call.
    match unsafe { md::cuModuleLoadData(&mut m, image.as_ptr().cast()) } {
        SUCCESS => Ok(m),
        e => Err(e),
    }
}

/// `src` compiled (see [`cubin`]) and loaded into the current context.
#[track_caller]
pub fn module(src: &str, name: &str) -> u64 {
    let image = cubin(src, name);
    match try_load(&image) {
        Ok(m) => m,
        Err(e) => panic!("cuModuleLoadData of `{name}` returned {}", self::name(e)),
    }
}

/// `cuModuleGetFunction`.
pub fn try_function(module: u64, name: &str) -> Result<u64, u32> {
    let c = CString::new(name).expect("no NUL in the name");
    let mut f = 0u64;
    // SAFETY: a writable CUfunction, a NUL-terminated name.
    match unsafe { md::cuModuleGetFunction(&mut f, module, c.as_ptr()) } {
        SUCCESS => Ok(f),
        e => Err(e),
    }
}

/// `cuModuleGetFunction`, asserted to succeed.
#[track_caller]
pub fn function(module: u64, name: &str) -> u64 {
    match try_function(module, name) {
        Ok(f) => f,
        Err(e) => panic!("cuModuleGetFunction(`{name}`) returned {}", self::name(e)),
    }
}

/// A kernel argument: a pointer to the value, as `cuLaunchKernel`'s `kernelParams` holds.
pub fn arg<T>(v: &T) -> *mut c_void {
    (v as *const T).cast_mut().cast()
}

/// `cuLaunchKernel` of `f` with `args` (one pointer per parameter, see [`arg`]).
///
/// # Safety
///
/// `args` has one pointer per parameter of the kernel, each to a value of the parameter's
/// type (`cuLaunchKernel`'s contract); pointer arguments name memory the kernel may access.
pub unsafe fn launch(
    f: u64,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    stream: u64,
    args: &[*mut c_void],
) -> u32 {
    let mut params: Vec<*mut c_void> = args.to_vec();
    let p = if params.is_empty() {
        std::ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    // SAFETY: the caller's contract; the launch copies the values when it is queued.
    unsafe {
        md::cuLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            smem,
            stream,
            p,
            std::ptr::null_mut(),
        )
    }
}

/// A kernel that spins for `ns` nanoseconds of the device's global timer (the helper the
/// emulator's device header defines in place of `%globaltimer`), then, when `flag` is not
/// null, writes `value` to it. Launched with one thread.
pub const SPIN_SRC: &str = r#"
extern "C" __global__ void spin(unsigned long long ns, int *flag, int value) {
    unsigned long long t0 = gk_globaltimer();
    while (gk_globaltimer() - t0 < ns) {
    }
    if (flag) *flag = value;
}
"#;

/// Queues [`SPIN_SRC`]'s `spin` for `ms` milliseconds on `stream` (module in the current
/// context), writing `value` to `flag` at the end (0: no write).
#[track_caller]
pub fn spin(f: u64, stream: u64, ms: u64, flag: u64, value: i32) {
    let ns: u64 = ms * 1_000_000;
    // SAFETY: `spin(unsigned long long, int *, int)`: a u64, a device pointer (or null) and
    // an i32.
    let r = unsafe {
        launch(
            f,
            [1, 1, 1],
            [1, 1, 1],
            0,
            stream,
            &[arg(&ns), arg(&flag), arg(&value)],
        )
    };
    ok(r, "cuLaunchKernel(spin)");
}
