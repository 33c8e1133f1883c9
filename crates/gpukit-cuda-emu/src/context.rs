//! Devices and contexts: the emulated devices, their primary contexts, the calling thread's
//! current context, and the sticky errors that break a device.
//!
//! Rules (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html>):
//! - every call but `cuInit`, `cuDriverGetVersion` and the error-string calls fails with
//!   `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`;
//! - the current context is per thread (`cuCtxSetCurrent` replaces the top of the thread's
//!   context stack, `cuCtxPushCurrent`/`cuCtxPopCurrent` push and pop); a call that needs a
//!   context without one current is `CUDA_ERROR_INVALID_CONTEXT`;
//! - a device's primary context is created by its first `cuDevicePrimaryCtxRetain` and
//!   destroyed when the last retain is released, with everything it owns: its memory is freed
//!   and its streams, events and modules become invalid handles;
//! - a sticky error (an illegal address, a failed launch, an assertion) leaves the device
//!   unusable: "any further CUDA work will return the same error". Here it is kept per device
//!   for the life of the process, and every call that touches the device returns it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::capture::{Graph, GraphExec};
use crate::errors::{cu, CuResult};
use crate::handles::{Table, Tag};
use crate::module::{Function, Module};
use crate::stream::{Event, Stream};

/// A sticky error: the first one, and what caused it.
#[derive(Debug, Clone)]
pub struct Sticky {
    /// The code every later call returns.
    pub code: CuResult,
    /// What happened (also printed when it happened).
    pub message: String,
}

/// One emulated device.
#[derive(Debug)]
pub struct Device {
    /// Its ordinal.
    pub ordinal: usize,
    primary: Mutex<Primary>,
    sticky: OnceLock<Sticky>,
}

#[derive(Debug, Default)]
struct Primary {
    ctx: Option<Arc<Context>>,
    refs: u32,
    /// The handle the primary context keeps across its re-creations.
    handle: u64,
}

impl Device {
    /// The sticky error, if one happened.
    pub fn sticky(&self) -> Option<&Sticky> {
        self.sticky.get()
    }

    /// Breaks the device with `code` (the first call wins) and says why.
    pub fn fail(&self, code: CuResult, message: &str) {
        self.sticky.get_or_init(|| {
            // Said before the error is published: a host thread that sees it (a sync
            // returning it) may end the process at once, and the line that explains the
            // failure must already be out.
            crate::errors::diagnose(&format!(
                "device {}: {} ({}); the device is unusable from now on, as after a sticky error on hardware",
                self.ordinal,
                message,
                crate::errors::name(code)
            ));
            Sticky {
                code,
                message: message.to_owned(),
            }
        });
    }

    /// `Err` with the sticky error's code once there is one.
    pub fn check(&self) -> Result<(), CuResult> {
        match self.sticky.get() {
            Some(s) => Err(s.code),
            None => Ok(()),
        }
    }
}

/// A context: the primary context of a device, or one `cuCtxCreate` made.
#[derive(Debug)]
pub struct Context {
    /// Its handle.
    pub handle: u64,
    /// Its device's ordinal.
    pub device: usize,
    live: AtomicBool,
    /// Every stream created in it (for the legacy stream's implicit waits and
    /// `cuCtxSynchronize`).
    pub streams: Mutex<Vec<Weak<Stream>>>,
    /// The legacy default stream, made on first use.
    pub legacy: OnceLock<Arc<Stream>>,
    /// The contexts whose memory this one's kernels may access (`cuCtxEnablePeerAccess`).
    pub peers: Mutex<Vec<u64>>,
    /// Its limits (`cuCtxGetLimit`, `cuCtxSetLimit`), by `CUlimit` value.
    pub limits: Mutex<[usize; LIMITS]>,
    /// Its L1/shared memory preference (`cuCtxSetCacheConfig`, a `CUfunc_cache` value): a
    /// hint that changes nothing the emulator runs.
    pub cache_config: std::sync::atomic::AtomicU32,
}

/// How many `CUlimit` values there are (`CU_LIMIT_STACK_SIZE` = 0 to
/// `CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED` = 9).
pub const LIMITS: usize = 10;

/// A new context's limits: the driver's documented defaults where it documents them
/// (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html>, `cuCtxSetLimit`:
/// a device runtime synchronisation depth of 2 and 2048 pending launches), an H100's
/// values elsewhere (1 KiB of stack, a 1 MiB printf FIFO, an 8 MiB malloc heap, a 64-byte
/// L2 fetch granularity, no persisting L2, no CIG).
pub const DEFAULT_LIMITS: [usize; LIMITS] = [1024, 1 << 20, 8 << 20, 2, 2048, 64, 0, 0, 0, 0];

impl Context {
    fn new(handle: u64, device: usize) -> Context {
        Context {
            handle,
            device,
            live: AtomicBool::new(true),
            streams: Mutex::new(Vec::new()),
            legacy: OnceLock::new(),
            peers: Mutex::new(Vec::new()),
            limits: Mutex::new(DEFAULT_LIMITS),
            cache_config: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Its device.
    pub fn dev(&self) -> &'static Device {
        &driver_unchecked().devices[self.device]
    }

    /// `Err` when the context was destroyed or its device broken.
    pub fn check(&self) -> Result<(), CuResult> {
        if !self.live.load(Ordering::Acquire) {
            return Err(cu::CONTEXT_IS_DESTROYED);
        }
        self.dev().check()
    }

    /// Whether it is still alive.
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// The live streams created in it.
    pub fn live_streams(&self) -> Vec<Arc<Stream>> {
        let mut list = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(Weak::upgrade).collect()
    }

    /// Whether its kernels may access memory allocated in context `other`.
    pub fn may_access(&self, other: u64) -> bool {
        other == self.handle
            || self
                .peers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&other)
    }
}

/// Everything the driver has.
#[derive(Debug)]
pub struct Driver {
    /// The devices.
    pub devices: Vec<Device>,
    /// Live contexts.
    pub contexts: Table<Context>,
    /// Live streams.
    pub streams: Table<Stream>,
    /// Live events.
    pub events: Table<Event>,
    /// Loaded modules.
    pub modules: Table<Module>,
    /// Their functions.
    pub functions: Table<Function>,
    /// Graphs.
    pub graphs: Table<Graph>,
    /// Executable graphs.
    pub execs: Table<GraphExec>,
}

static DRIVER: OnceLock<Driver> = OnceLock::new();
static INITIALISED: AtomicBool = AtomicBool::new(false);

/// `cuInit`: sets the driver up (once) and marks it initialised.
pub fn init() -> Result<&'static Driver, CuResult> {
    let config = crate::config::get();
    if let Some(e) = &config.error {
        crate::errors::diagnose(&format!("cuInit: {e}"));
        return Err(cu::INVALID_VALUE);
    }
    crate::memory::memory()?;
    let d = DRIVER.get_or_init(|| Driver {
        devices: (0..config.devices)
            .map(|ordinal| Device {
                ordinal,
                primary: Mutex::new(Primary::default()),
                sticky: OnceLock::new(),
            })
            .collect(),
        contexts: Table::new(Tag::Context),
        streams: Table::new(Tag::Stream),
        events: Table::new(Tag::Event),
        modules: Table::new(Tag::Module),
        functions: Table::new(Tag::Function),
        graphs: Table::new(Tag::Graph),
        execs: Table::new(Tag::GraphExec),
    });
    crate::module::install_signal_handlers();
    INITIALISED.store(true, Ordering::Release);
    Ok(d)
}

/// The driver, or `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn driver() -> Result<&'static Driver, CuResult> {
    if !INITIALISED.load(Ordering::Acquire) {
        return Err(cu::NOT_INITIALIZED);
    }
    DRIVER.get().ok_or(cu::NOT_INITIALIZED)
}

/// The driver, for code that only runs after `cuInit` (workers, objects that exist).
pub fn driver_unchecked() -> &'static Driver {
    match DRIVER.get() {
        Some(d) => d,
        None => unreachable_driver(),
    }
}

#[cold]
fn unreachable_driver() -> ! {
    // Objects that reach here were made through an initialised driver.
    std::process::abort()
}

/// The device `ordinal`, or `CUDA_ERROR_INVALID_DEVICE`.
pub fn device(ordinal: i32) -> Result<&'static Device, CuResult> {
    let d = driver()?;
    usize::try_from(ordinal)
        .ok()
        .and_then(|o| d.devices.get(o))
        .ok_or(cu::INVALID_DEVICE)
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current context, if any (it may have been destroyed since).
pub fn current_handle() -> Option<u64> {
    STACK.with(|s| s.borrow().last().copied())
}

/// The calling thread's current context, alive; `CUDA_ERROR_INVALID_CONTEXT` without one.
pub fn current() -> Result<Arc<Context>, CuResult> {
    let d = driver()?;
    let h = current_handle().ok_or(cu::INVALID_CONTEXT)?;
    let ctx = d.contexts.get(h).ok_or(cu::INVALID_CONTEXT)?;
    ctx.check()?;
    Ok(ctx)
}

/// `cuCtxSetCurrent`: replaces the top of the stack (null: pops it).
pub fn set_current(handle: u64) -> Result<(), CuResult> {
    let d = driver()?;
    if handle != 0 && d.contexts.get(handle).is_none() {
        return Err(cu::INVALID_CONTEXT);
    }
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if handle != 0 {
            s.push(handle);
        }
    });
    Ok(())
}

/// `cuCtxPushCurrent`.
pub fn push_current(handle: u64) -> Result<(), CuResult> {
    let d = driver()?;
    if d.contexts.get(handle).is_none() {
        return Err(cu::INVALID_CONTEXT);
    }
    STACK.with(|s| s.borrow_mut().push(handle));
    Ok(())
}

/// `cuCtxPopCurrent`.
pub fn pop_current() -> Result<u64, CuResult> {
    driver()?;
    STACK
        .with(|s| s.borrow_mut().pop())
        .ok_or(cu::INVALID_CONTEXT)
}

/// `cuDevicePrimaryCtxRetain`.
pub fn retain_primary(dev: &'static Device) -> Result<u64, CuResult> {
    let d = driver()?;
    let mut p = dev.primary.lock().unwrap_or_else(|e| e.into_inner());
    if p.handle == 0 {
        p.handle = d.contexts.reserve();
    }
    if p.ctx.is_none() {
        let ctx = Arc::new(Context::new(p.handle, dev.ordinal));
        d.contexts.insert_at(p.handle, Arc::clone(&ctx));
        p.ctx = Some(ctx);
    }
    p.refs += 1;
    Ok(p.handle)
}

/// `cuDevicePrimaryCtxRelease`: the last release destroys the context.
pub fn release_primary(dev: &'static Device) -> Result<(), CuResult> {
    let d = driver()?;
    let ctx = {
        let mut p = dev.primary.lock().unwrap_or_else(|e| e.into_inner());
        if p.refs == 0 {
            return Err(cu::INVALID_CONTEXT);
        }
        p.refs -= 1;
        if p.refs > 0 {
            return Ok(());
        }
        p.ctx.take()
    };
    if let Some(ctx) = ctx {
        destroy(d, &ctx);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxGetState`: `(flags, active)`.
pub fn primary_state(dev: &'static Device) -> (u32, bool) {
    let p = dev.primary.lock().unwrap_or_else(|e| e.into_inner());
    (0, p.ctx.is_some())
}

/// `cuCtxCreate`: a context of its own on `dev`, made current.
pub fn create(dev: &'static Device) -> Result<u64, CuResult> {
    let d = driver()?;
    let h = d.contexts.reserve();
    d.contexts
        .insert_at(h, Arc::new(Context::new(h, dev.ordinal)));
    push_current(h)?;
    Ok(h)
}

/// `cuCtxDestroy` of a context `cuCtxCreate` made.
pub fn destroy_created(handle: u64) -> Result<(), CuResult> {
    let d = driver()?;
    let ctx = d.contexts.get(handle).ok_or(cu::INVALID_CONTEXT)?;
    let is_primary = d.devices.iter().any(|dev| {
        let p = dev.primary.lock().unwrap_or_else(|e| e.into_inner());
        p.handle == handle
    });
    if is_primary {
        return Err(cu::INVALID_CONTEXT);
    }
    destroy(d, &ctx);
    STACK.with(|s| s.borrow_mut().retain(|&h| h != handle));
    Ok(())
}

/// Destroys `ctx` and what it owns: its streams finish their work first (as
/// `cuStreamDestroy` lets them), then its memory is freed and its handles die.
fn destroy(d: &'static Driver, ctx: &Arc<Context>) {
    for s in ctx.live_streams() {
        s.close_and_drain();
        d.streams.remove(s.handle);
    }
    if let Some(l) = ctx.legacy.get() {
        l.close_and_drain();
    }
    ctx.live.store(false, Ordering::Release);
    d.contexts.remove(ctx.handle);
    for e in d.events.all() {
        if e.ctx == ctx.handle {
            d.events.remove(e.handle);
        }
    }
    for m in d.modules.all() {
        if m.ctx == ctx.handle {
            m.unload(d);
        }
    }
    if let Ok(mem) = crate::memory::memory() {
        let owned: Vec<u64> = mem
            .read()
            .values()
            .filter(|a| a.ctx == ctx.handle)
            .map(|a| a.base)
            .collect();
        for base in owned {
            let _ = mem.free(
                base,
                &[
                    crate::memory::MemKind::Device,
                    crate::memory::MemKind::Managed,
                    crate::memory::MemKind::Pinned,
                ],
            );
        }
    }
}
