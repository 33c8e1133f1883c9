//! Modules, functions and launches.

#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::{entry, put, stream};
use crate::context::{self, current};
use crate::errors::{cu, CuResult};
use crate::module::{self as m, Function, Launch};
use crate::work::Work;

/// Dynamic shared memory a launch may ask for without opting in.
const DYNAMIC_SMEM_DEFAULT: u32 = 48 * 1024;
/// The most shared memory (static and dynamic) a block may opt in to.
const SMEM_OPTIN_MAX: u64 = 232448;

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut u64, image: *const c_void) -> CuResult {
    entry("cuModuleLoadData", || {
        let ctx = current()?;
        if module.is_null() || image.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        // SAFETY: the caller's image (the API's contract: an image or NUL-terminated text).
        let md = unsafe { m::load(&ctx, image.cast()) }?;
        // SAFETY: a writable CUmodule.
        unsafe { put(module, md.handle) }
    })
}

/// `cuModuleLoad`: the image in file `fname`, as [`cuModuleLoadData`] takes it; a file that
/// cannot be read is `CUDA_ERROR_FILE_NOT_FOUND`.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(module: *mut u64, fname: *const c_char) -> CuResult {
    let mut bytes = Vec::new();
    let read = entry("cuModuleLoad", || {
        if fname.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        // SAFETY: the caller's NUL-terminated path (the API's contract).
        let path = unsafe { CStr::from_ptr(fname) };
        let path = std::str::from_utf8(path.to_bytes()).map_err(|_| cu::FILE_NOT_FOUND)?;
        bytes = std::fs::read(path).map_err(|_| cu::FILE_NOT_FOUND)?;
        // A text image (PTX) is read up to its NUL.
        bytes.push(0);
        Ok(())
    });
    if read != cu::SUCCESS {
        return read;
    }
    // SAFETY: the whole file and a NUL, alive across the call; `module` is the caller's.
    unsafe { cuModuleLoadData(module, bytes.as_ptr().cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut u64,
    image: *const c_void,
    _n: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded; JIT options do not apply to the emulator's images.
    unsafe { cuModuleLoadData(module, image) }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: u64) -> CuResult {
    entry("cuModuleUnload", || {
        let d = context::driver()?;
        let md = d.modules.get(module).ok_or(cu::INVALID_HANDLE)?;
        md.unload(d);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut u64,
    module: u64,
    name: *const c_char,
) -> CuResult {
    entry("cuModuleGetFunction", || {
        let d = context::driver()?;
        if hfunc.is_null() || name.is_null() {
            return Err(cu::INVALID_VALUE);
        }
        let md = d.modules.get(module).ok_or(cu::INVALID_HANDLE)?;
        // SAFETY: a NUL-terminated name (the API's contract).
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let index = md
            .kernels
            .iter()
            .position(|k| k.name == name)
            .ok_or(cu::NOT_FOUND)?;
        let h = d.functions.reserve();
        let static_smem = md.kernels[index].static_smem;
        d.functions.insert_at(
            h,
            Arc::new(Function {
                handle: h,
                module: md,
                index,
                max_dynamic_smem: AtomicU32::new(
                    DYNAMIC_SMEM_DEFAULT.saturating_sub(static_smem as u32),
                ),
            }),
        );
        // SAFETY: a writable CUfunction.
        unsafe { put(hfunc, h) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: c_uint,
    hfunc: u64,
) -> CuResult {
    entry("cuFuncGetAttribute", || {
        let d = context::driver()?;
        let f = d.functions.get(hfunc).ok_or(cu::INVALID_HANDLE)?;
        let v = match attrib {
            0 => 1024,                                                // MAX_THREADS_PER_BLOCK
            1 => f.meta().static_smem as c_int,                       // SHARED_SIZE_BYTES
            2 | 3 => 0,                                               // CONST, LOCAL
            4 => 32,                                                  // NUM_REGS
            5 | 6 => 90,                                              // PTX, BINARY version
            7 => 0,                                                   // CACHE_MODE_CA
            8 => f.max_dynamic_smem.load(Ordering::Relaxed) as c_int, // MAX_DYNAMIC_SHARED
            9 => -1,                                                  // PREFERRED_CARVEOUT
            _ => return Err(cu::INVALID_VALUE),
        };
        // SAFETY: a writable int.
        unsafe { put(pi, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(hfunc: u64, attrib: c_uint, value: c_int) -> CuResult {
    entry("cuFuncSetAttribute", || {
        let d = context::driver()?;
        let f = d.functions.get(hfunc).ok_or(cu::INVALID_HANDLE)?;
        match attrib {
            8 => {
                let v = u64::try_from(value).map_err(|_| cu::INVALID_VALUE)?;
                if v + f.meta().static_smem > SMEM_OPTIN_MAX {
                    return Err(cu::INVALID_VALUE);
                }
                f.max_dynamic_smem.store(v as u32, Ordering::Relaxed);
                Ok(())
            }
            9 => Ok(()),
            _ => Err(cu::INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(hfunc: u64, _config: c_uint) -> CuResult {
    entry("cuFuncSetCacheConfig", || {
        context::driver()?
            .functions
            .get(hfunc)
            .map(|_| ())
            .ok_or(cu::INVALID_HANDLE)
    })
}

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: u64,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    h: u64,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    entry("cuLaunchKernel", || {
        let d = context::driver()?;
        let func = d.functions.get(f).ok_or(cu::INVALID_HANDLE)?;
        let s = stream(h)?;
        if func.module.ctx != s.ctx.handle {
            return Err(cu::INVALID_HANDLE);
        }
        let attr = |a| crate::api::driver::attribute(a).unwrap_or(0) as u64;
        let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
        let grid_ok = gx >= 1
            && gy >= 1
            && gz >= 1
            && u64::from(gx) <= attr(5)
            && u64::from(gy) <= attr(6)
            && u64::from(gz) <= attr(7);
        let block_ok = bx >= 1
            && by >= 1
            && bz >= 1
            && u64::from(bx) <= attr(2)
            && u64::from(by) <= attr(3)
            && u64::from(bz) <= attr(4)
            && threads <= attr(1);
        if !grid_ok || !block_ok {
            crate::errors::diagnose(&format!(
                "cuLaunchKernel `{}`: grid ({gx}, {gy}, {gz}) and block ({bx}, {by}, {bz}) exceed the device's limits",
                func.meta().name
            ));
            return Err(cu::INVALID_VALUE);
        }
        if smem > func.max_dynamic_smem.load(Ordering::Relaxed) {
            crate::errors::diagnose(&format!(
                "cuLaunchKernel `{}`: {smem} bytes of dynamic shared memory, above its limit (set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to use more than 48 KiB)",
                func.meta().name
            ));
            return Err(cu::INVALID_VALUE);
        }
        // Parameters: the `void **` array, or one packed buffer through `extra`.
        let nparams = func.meta().params.len();
        let mut pointers: Vec<*mut c_void> = Vec::with_capacity(nparams);
        if !params.is_null() {
            if !extra.is_null() {
                return Err(cu::INVALID_VALUE);
            }
            // SAFETY: the launch's contract: one pointer per parameter.
            pointers.extend((0..nparams).map(|i| unsafe { *params.add(i) }));
        } else if !extra.is_null() {
            let mut buffer: *mut u8 = std::ptr::null_mut();
            let mut size: usize = 0;
            let mut i = 0;
            loop {
                // SAFETY: `extra` is a CU_LAUNCH_PARAM_END-terminated list of pairs.
                let key = unsafe { *extra.add(i) } as usize;
                if key == PARAM_END {
                    break;
                }
                // SAFETY: as above.
                let value = unsafe { *extra.add(i + 1) };
                match key {
                    PARAM_BUFFER_POINTER => buffer = value.cast(),
                    // SAFETY: the value of BUFFER_SIZE points at a size_t.
                    PARAM_BUFFER_SIZE => size = unsafe { *value.cast::<usize>() },
                    _ => return Err(cu::INVALID_VALUE),
                }
                i += 2;
            }
            let mut at = 0usize;
            for &(sz, align) in &func.meta().params {
                let align = (align.max(1) as usize).min(16);
                at = at.div_ceil(align) * align;
                if buffer.is_null() || at + sz as usize > size {
                    return Err(cu::INVALID_VALUE);
                }
                // SAFETY: inside the caller's buffer of `size` bytes.
                pointers.push(unsafe { buffer.add(at) }.cast());
                at += sz as usize;
            }
        } else if nparams > 0 {
            return Err(cu::INVALID_VALUE);
        }
        let name = func.meta().name.clone();
        // SAFETY: one readable pointer per parameter, each to a value of its size.
        let launch = unsafe {
            Launch::new(
                Arc::clone(&func),
                Arc::clone(&s.ctx),
                [gx, gy, gz],
                [bx, by, bz],
                smem,
                pointers.as_mut_ptr(),
            )
        };
        let what: Arc<str> = Arc::from(format!("kernel `{name}` on stream 0x{:x}", s.handle));
        s.enqueue(Work::Kernel(Arc::new(launch)), what, None)
            .map(|_| ())
    })
}
