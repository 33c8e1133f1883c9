//! The worker threads' side of running kernels: the pool of stack slots a block's threads
//! run on (each aligned to its size, its first page a guard), and the signal handlers that
//! turn a kernel's fault (a wild access, a division by zero, a stack overflow) into its
//! launch's error instead of the process's end.

use super::*;

// ---- stacks --------------------------------------------------------------------------

struct Stacks {
    free: Vec<usize>,
    next: usize,
    end: usize,
}

fn stacks() -> &'static Mutex<Stacks> {
    static STACKS: OnceLock<Mutex<Stacks>> = OnceLock::new();
    STACKS.get_or_init(|| {
        Mutex::new(Stacks {
            free: Vec::new(),
            next: 0,
            end: 0,
        })
    })
}

/// A stack slot: its first page a guard, the rest the stack and, at its end, the thread's
/// record.
pub(super) unsafe extern "C" fn take_stack(_host: *mut c_void) -> *mut c_void {
    let mut s = stacks().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot) = s.free.pop() {
        return slot as *mut c_void;
    }
    if s.next == s.end {
        // Reserve 4096 slots (256 MiB of addresses) at a time, aligned to a slot.
        let want = 4096 * STACK_SIZE as usize;
        // SAFETY: an anonymous mapping nothing else refers to.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                want + STACK_SIZE as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        let start = (p as usize).div_ceil(STACK_SIZE as usize) * STACK_SIZE as usize;
        s.next = start;
        s.end = start + want;
    }
    let slot = s.next;
    s.next += STACK_SIZE as usize;
    let page = memory::PAGE as usize;
    // SAFETY: the slot lies in our reserved range and is handed out once; all but its first
    // page (a guard) become readable and writable.
    unsafe {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        if libc::mprotect((slot + page) as *mut c_void, STACK_SIZE as usize - page, rw) != 0 {
            return std::ptr::null_mut();
        }
    }
    slot as *mut c_void
}

pub(super) unsafe extern "C" fn give_stack(_host: *mut c_void, slot: *mut c_void) {
    stacks()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .free
        .push(slot as usize);
}

// ---- signals -------------------------------------------------------------------------

thread_local! {
    pub(super) static ACTIVE: Cell<(*mut GkLaunch, Option<EscapeFn>)> =
        const { Cell::new((std::ptr::null_mut(), None)) };
}

struct Previous([libc::sigaction; 4]);
// SAFETY: the saved dispositions are written once, before any handler reads them.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

static SIGNALS: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL];
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut c_void) {
    let (launch, escape) = ACTIVE.get();
    if let (false, Some(escape)) = (launch.is_null(), escape) {
        // SAFETY: the kernel faulted on this thread while `launch` runs: the module's escape
        // records the fault and jumps back to the launch's start on this thread (never
        // returns). The messages are static.
        unsafe {
            let addr = if info.is_null() {
                0
            } else {
                (*info).si_addr() as u64
            };
            let (code, what): (i32, &CStr) = match sig {
                libc::SIGSEGV | libc::SIGBUS => (
                    cu::ILLEGAL_ADDRESS as i32,
                    c"a memory access outside everything the emulator maps (a wild or null pointer, or a thread's stack overflowing its 43 KiB or more)",
                ),
                libc::SIGFPE => (
                    cu::LAUNCH_FAILED as i32,
                    c"an integer division by zero (an undefined result on a GPU, a trap on this CPU)",
                ),
                _ => (cu::ILLEGAL_INSTRUCTION as i32, c"an illegal instruction"),
            };
            escape(launch, code, addr, what.as_ptr());
        }
    }
    // Not a kernel's: the disposition that was there before.
    let Some(prev) = PREVIOUS.get() else { return };
    let Some(i) = SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    let old = prev.0[i];
    // SAFETY: restoring or calling the previous disposition as the kernel would have.
    unsafe {
        if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
            libc::sigaction(sig, &old, std::ptr::null_mut());
        } else if old.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(old.sa_sigaction);
            f(sig, info, uctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(old.sa_sigaction);
            f(sig);
        }
    }
}

/// Installs the handlers that turn a kernel's faults into launch errors (once).
pub fn install_signal_handlers() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: zeroed sigaction structs are valid; each handler is installed with the
        // previous one saved for chaining.
        unsafe {
            let mut prev: [libc::sigaction; 4] = std::mem::zeroed();
            for (i, &sig) in SIGNALS.iter().enumerate() {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, &mut prev[i]);
            }
            Previous(prev)
        }
    });
}

/// The alternate signal stack of a worker thread, freed when the thread ends.
struct AltStack(*mut c_void, usize);

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: disabling this thread's alternate stack, then unmapping it.
        unsafe {
            let mut ss: libc::stack_t = std::mem::zeroed();
            ss.ss_flags = libc::SS_DISABLE;
            libc::sigaltstack(&ss, std::ptr::null_mut());
            libc::munmap(self.0, self.1);
        }
    }
}

thread_local! {
    static ALT_STACK: std::cell::RefCell<Option<AltStack>> = const { std::cell::RefCell::new(None) };
}

/// Gives a worker thread an alternate signal stack, so that a kernel thread overflowing its
/// stack is still reported.
pub fn worker_thread_setup() {
    let size = 64 * 1024;
    // SAFETY: a fresh anonymous mapping, installed as this thread's alternate stack.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        let ss = libc::stack_t {
            ss_sp: p,
            ss_flags: 0,
            ss_size: size,
        };
        if libc::sigaltstack(&ss, std::ptr::null_mut()) == 0 {
            ALT_STACK.with(|a| *a.borrow_mut() = Some(AltStack(p, size)));
        } else {
            libc::munmap(p, size);
        }
    }
}
