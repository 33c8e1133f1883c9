//! The exported C entry points, one module per library and topic.
//!
//! Every entry point runs through [`entry`]: a call from inside a host function is
//! `CUDA_ERROR_NOT_PERMITTED` (the documented answer to CUDA calls from `cuLaunchHostFunc`'s
//! function), an injected failure (`GPUKIT_CUDA_EMU_FAIL_CALL`) is returned before anything
//! happens, and a panic inside the emulator is `CUDA_ERROR_UNKNOWN` with a diagnostic, never
//! an unwind into C. Enum parameters are taken as the integers they are in the C ABI.

pub mod cublas;
pub mod driver;
pub mod mem;
pub mod module;
pub mod nccl;
pub mod nvrtc;
pub mod stream;

use std::sync::Arc;

use crate::context::{self, Context};
use crate::errors::{cu, CuResult};
use crate::stream::{Stream, StreamKind};

/// Runs the body of entry point `name` (see the module docs).
pub fn entry(name: &'static str, f: impl FnOnce() -> Result<(), CuResult>) -> CuResult {
    if crate::stream::in_host_fn() {
        crate::errors::diagnose(&format!(
            "{name} was called from a host function (cuLaunchHostFunc), which must not call CUDA"
        ));
        return cu::NOT_PERMITTED;
    }
    if let Some(code) = crate::faults::call_fails(name) {
        return code;
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => cu::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            crate::errors::diagnose(&format!("{name}: the emulator panicked"));
            cu::UNKNOWN
        }
    }
}

/// Writes `v` through an out-pointer, `CUDA_ERROR_INVALID_VALUE` when it is null.
///
/// # Safety
///
/// `p` is null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> Result<(), CuResult> {
    if p.is_null() {
        return Err(cu::INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for a write by the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// `CU_STREAM_LEGACY`.
pub const STREAM_LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD`.
pub const STREAM_PER_THREAD: u64 = 2;

thread_local! {
    static PER_THREAD: std::cell::RefCell<Vec<(u64, Arc<Stream>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The stream behind a `CUstream` handle: the legacy default stream of the current context
/// for 0 and `CU_STREAM_LEGACY`, the calling thread's per-thread stream for
/// `CU_STREAM_PER_THREAD`.
pub fn stream(handle: u64) -> Result<Arc<Stream>, CuResult> {
    let d = context::driver()?;
    match handle {
        0 | STREAM_LEGACY => {
            let ctx = context::current()?;
            Ok(legacy(&ctx))
        }
        STREAM_PER_THREAD => {
            let ctx = context::current()?;
            PER_THREAD.with(|list| {
                let mut list = list.borrow_mut();
                list.retain(|(_, s)| s.ctx.is_live());
                if let Some((_, s)) = list.iter().find(|(c, _)| *c == ctx.handle) {
                    return Ok(Arc::clone(s));
                }
                let h = d.streams.reserve();
                let s = Stream::new(Arc::clone(&ctx), h, 0, 0, StreamKind::PerThread);
                list.push((ctx.handle, Arc::clone(&s)));
                Ok(s)
            })
        }
        h => {
            let s = d.streams.get(h).ok_or(cu::INVALID_HANDLE)?;
            s.ctx.check()?;
            Ok(s)
        }
    }
}

/// A context's legacy default stream.
pub fn legacy(ctx: &Arc<Context>) -> Arc<Stream> {
    Arc::clone(ctx.legacy.get_or_init(|| {
        let h = context::driver_unchecked().streams.reserve();
        Stream::new(Arc::clone(ctx), h, 0, 0, StreamKind::Legacy)
    }))
}
