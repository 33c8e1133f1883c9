//! Emulated memory: device, managed and pinned host memory as host pages in one reserved
//! address range, with guard pages between allocations and addresses never reused.
//!
//! Every allocation gets whole pages of its own at the next free address, followed by an
//! unmapped guard page; freed memory is unmapped and its addresses are never handed out
//! again. A kernel or a copy that reaches past an allocation's end or into freed memory so
//! finds nothing there: copies check their ranges against this table when they run, and
//! kernels' accesses are checked by the module runtime (byte for byte, through
//! [`Memory::find`]), or fault on the unmapped page. Either is a sticky
//! `CUDA_ERROR_ILLEGAL_ADDRESS`, as on hardware
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html>: "an illegal memory
//! access ... leaves the process in an inconsistent state").
//!
//! Rules from the driver API's memory management section
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html>): `cuMemAlloc` of 0
//! bytes is `CUDA_ERROR_INVALID_VALUE`; memory is suitably aligned for any kind of variable
//! (here: page-aligned); `cuMemFree` takes the pointer `cuMemAlloc` returned, anything else is
//! `CUDA_ERROR_INVALID_VALUE`; `cuMemHostRegister` of a range that overlaps a registered one
//! is `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`, `cuMemHostUnregister` of an address that
//! was not registered `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.
//!
//! New device memory is filled with `GPUKIT_CUDA_EMU_FILL` (0xff: NaN as a float, -1 as an
//! integer) up to 256 MiB, so that code relying on fresh memory being zero (it is not on a
//! GPU, where memory is reused) shows it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard};

use crate::errors::{cu, CuResult};
use crate::hb::Shadow;

/// The page size the emulator maps in.
pub const PAGE: u64 = 4096;

/// Allocations larger than this are not filled (they stay zero, and cost no memory until
/// touched).
const FILL_MAX: u64 = 256 << 20;

/// What an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    /// `cuMemAlloc`: device memory.
    Device,
    /// `cuMemAllocManaged`: one address for the host and every device.
    Managed,
    /// `cuMemHostAlloc`: pinned host memory, which kernels may read and write too (unified
    /// addressing).
    Pinned,
}

impl MemKind {
    /// A name for diagnostics.
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Device => "device memory",
            MemKind::Managed => "managed memory",
            MemKind::Pinned => "pinned host memory",
        }
    }
}

/// One live allocation.
#[derive(Debug)]
pub struct Allocation {
    /// A number for diagnostics, never reused.
    pub id: u64,
    /// Its address.
    pub base: u64,
    /// Its size in bytes, as asked for.
    pub size: u64,
    /// The bytes mapped for it (whole pages).
    span: u64,
    /// What it is.
    pub kind: MemKind,
    /// The device whose context allocated it.
    pub device: usize,
    /// The context that allocated it.
    pub ctx: u64,
    /// The accesses made to it, for the race checker.
    pub shadow: Mutex<Shadow>,
}

impl Allocation {
    /// Whether `[addr, addr + len)` lies inside it.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.size)
    }

    /// A description for diagnostics.
    pub fn describe(&self) -> String {
        format!(
            "allocation #{} ({} of {} bytes at 0x{:x} on device {})",
            self.id,
            self.kind.name(),
            self.size,
            self.base,
            self.device
        )
    }
}

/// An allocation that was freed, kept to explain a use after free.
#[derive(Debug, Clone)]
struct Freed {
    id: u64,
    base: u64,
    size: u64,
    span: u64,
    kind: MemKind,
    device: usize,
}

/// The emulator's memory.
#[derive(Debug)]
pub struct Memory {
    /// The reserved address range.
    pub base: u64,
    /// Its size.
    pub size: u64,
    next: Mutex<u64>,
    live: RwLock<BTreeMap<u64, Arc<Allocation>>>,
    freed: Mutex<BTreeMap<u64, Freed>>,
    registered: Mutex<BTreeMap<u64, u64>>,
    used: Vec<AtomicU64>,
    pinned: AtomicU64,
    next_id: AtomicU64,
}

/// The process's memory, reserved on first use.
pub fn memory() -> Result<&'static Memory, CuResult> {
    static MEMORY: OnceLock<Result<Memory, CuResult>> = OnceLock::new();
    MEMORY
        .get_or_init(|| Memory::reserve(crate::config::get().devices))
        .as_ref()
        .map_err(|e| *e)
}

impl Memory {
    fn reserve(devices: usize) -> Result<Memory, CuResult> {
        // Addresses are never reused, so the range is large; untouched, it costs nothing.
        for shift in [44u32, 40, 36] {
            let size = 1u64 << shift;
            // SAFETY: an anonymous private mapping with no access; nothing else refers to it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                let base = p as u64;
                return Ok(Memory {
                    base,
                    size,
                    // The first page stays a guard too.
                    next: Mutex::new(base + PAGE),
                    live: RwLock::new(BTreeMap::new()),
                    freed: Mutex::new(BTreeMap::new()),
                    registered: Mutex::new(BTreeMap::new()),
                    used: (0..devices).map(|_| AtomicU64::new(0)).collect(),
                    pinned: AtomicU64::new(0),
                    next_id: AtomicU64::new(1),
                });
            }
        }
        crate::errors::diagnose("could not reserve an address range for device memory");
        Err(cu::OUT_OF_MEMORY)
    }

    /// Bytes of device and managed memory in use on `device`.
    pub fn used(&self, device: usize) -> u64 {
        self.used
            .get(device)
            .map_or(0, |u| u.load(Ordering::Relaxed))
    }

    /// A new allocation of `size` bytes.
    pub fn alloc(
        &self,
        kind: MemKind,
        device: usize,
        ctx: u64,
        size: u64,
    ) -> Result<Arc<Allocation>, CuResult> {
        if size == 0 {
            return Err(cu::INVALID_VALUE);
        }
        let span = size.checked_add(PAGE - 1).ok_or(cu::OUT_OF_MEMORY)? / PAGE * PAGE;
        // Device memory counts against the device; pinned memory against the host, whose
        // RAM it would really pin (half of it at most: more fails, as pinning does).
        {
            let (capacity, used) = if kind == MemKind::Pinned {
                (crate::config::host_memory() / 2, &self.pinned)
            } else {
                (crate::config::get().memory, &self.used[device])
            };
            let mut now = used.load(Ordering::Relaxed);
            loop {
                let after = now.checked_add(span).ok_or(cu::OUT_OF_MEMORY)?;
                if after > capacity {
                    return Err(cu::OUT_OF_MEMORY);
                }
                match used.compare_exchange(now, after, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(seen) => now = seen,
                }
            }
        }
        let counter = if kind == MemKind::Pinned {
            &self.pinned
        } else {
            &self.used[device]
        };
        let undo = |used: &AtomicU64| {
            used.fetch_sub(span, Ordering::Relaxed);
        };
        let base = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let base = *next;
            let end = base + span + PAGE;
            if end > self.base + self.size {
                drop(next);
                undo(counter);
                crate::errors::diagnose(
                    "the emulator's address range is used up (addresses are never reused)",
                );
                return Err(cu::OUT_OF_MEMORY);
            }
            *next = end;
            base
        };
        // SAFETY: `base..base + span` lies in the reserved range and was never handed out
        // (the bump pointer only grows), so no one else refers to it.
        let r = unsafe {
            libc::mprotect(
                base as *mut libc::c_void,
                span as usize,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if r != 0 {
            undo(counter);
            return Err(cu::OUT_OF_MEMORY);
        }
        if kind != MemKind::Pinned {
            if let Some(byte) = crate::config::get().fill {
                if size <= FILL_MAX {
                    // SAFETY: just mapped readable and writable, `span` bytes, ours alone.
                    unsafe { std::ptr::write_bytes(base as *mut u8, byte, span as usize) };
                }
            }
        }
        let a = Arc::new(Allocation {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            base,
            size,
            span,
            kind,
            device,
            ctx,
            shadow: Mutex::new(Shadow::default()),
        });
        self.live
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(base, Arc::clone(&a));
        Ok(a)
    }

    /// Frees the allocation at exactly `base`, if it is of one of `kinds`; its pages are
    /// unmapped at once (work still queued on it faults when it runs).
    pub fn free(&self, base: u64, kinds: &[MemKind]) -> Result<Arc<Allocation>, CuResult> {
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let Some(a) = live.get(&base) else {
            return Err(cu::INVALID_VALUE);
        };
        if !kinds.contains(&a.kind) {
            return Err(cu::INVALID_VALUE);
        }
        let a = live.remove(&base).ok_or(cu::INVALID_VALUE)?;
        // SAFETY: the pages were mapped for this allocation, which is no longer in the
        // table; the write lock keeps copies (which read under the read lock) off them.
        unsafe {
            libc::madvise(
                a.base as *mut libc::c_void,
                a.span as usize,
                libc::MADV_DONTNEED,
            );
            libc::mprotect(
                a.base as *mut libc::c_void,
                a.span as usize,
                libc::PROT_NONE,
            );
        }
        drop(live);
        if a.kind == MemKind::Pinned {
            self.pinned.fetch_sub(a.span, Ordering::Relaxed);
        } else {
            self.used[a.device].fetch_sub(a.span, Ordering::Relaxed);
        }
        self.freed.lock().unwrap_or_else(|e| e.into_inner()).insert(
            a.base,
            Freed {
                id: a.id,
                base: a.base,
                size: a.size,
                span: a.span,
                kind: a.kind,
                device: a.device,
            },
        );
        Ok(a)
    }

    /// The live allocations, read-locked: copies hold this while they move bytes, so that
    /// nothing is unmapped under them. A thread holding it must not lock it again (no
    /// [`Memory::find`] or [`Memory::in_region`]): a writer queued in between blocks the
    /// second read, and the first read blocks the writer.
    pub fn read(&self) -> RwLockReadGuard<'_, BTreeMap<u64, Arc<Allocation>>> {
        self.live.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The live allocation holding `addr`.
    pub fn find(&self, addr: u64) -> Option<Arc<Allocation>> {
        find_in(&self.read(), addr)
    }

    /// Whether `addr` lies in the emulator's address range.
    pub fn in_region(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.base) < self.size
    }

    /// Why `[addr, addr + len)` is not inside one live allocation, for diagnostics.
    pub fn explain_miss(&self, addr: u64, len: u64) -> String {
        if let Some(a) = self.find(addr) {
            let end = a.base + a.size;
            return format!(
                "{} bytes at 0x{addr:x} run {} bytes past the end of {}",
                len,
                (addr + len).saturating_sub(end),
                a.describe()
            );
        }
        let freed = self.freed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, f)) = freed.range(..=addr).next_back() {
            if addr < f.base + f.span.max(f.size) {
                return format!(
                    "0x{addr:x} is in allocation #{} ({} of {} bytes at 0x{:x} on device {}), which was freed",
                    f.id, f.kind.name(), f.size, f.base, f.device
                );
            }
        }
        if self.in_region(addr) {
            format!("0x{addr:x} is in no allocation (a guard page between allocations)")
        } else {
            format!("0x{addr:x} is not an address the emulator handed out")
        }
    }

    /// Whether host memory `[ptr, ptr + len)` is pinned (allocated by `cuMemHostAlloc`,
    /// managed, or inside a registration), so that copies from and to it are asynchronous.
    pub fn is_pinned(&self, ptr: u64, len: u64) -> bool {
        if let Some(a) = self.find(ptr) {
            return a.contains(ptr, len.max(1));
        }
        let reg = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        reg.range(..=ptr)
            .next_back()
            .is_some_and(|(&b, &n)| ptr.checked_add(len).is_some_and(|e| e <= b + n))
    }

    /// `cuMemHostRegister`.
    pub fn register(&self, ptr: u64, len: u64) -> Result<(), CuResult> {
        if ptr == 0 || len == 0 {
            return Err(cu::INVALID_VALUE);
        }
        let end = ptr.checked_add(len).ok_or(cu::INVALID_VALUE)?;
        let mut reg = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        let overlaps = reg
            .range(..end)
            .next_back()
            .is_some_and(|(&b, &n)| b + n > ptr);
        if overlaps {
            return Err(cu::HOST_MEMORY_ALREADY_REGISTERED);
        }
        reg.insert(ptr, len);
        Ok(())
    }

    /// `cuMemHostUnregister`.
    pub fn unregister(&self, ptr: u64) -> Result<(), CuResult> {
        let mut reg = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        reg.remove(&ptr)
            .map(|_| ())
            .ok_or(cu::HOST_MEMORY_NOT_REGISTERED)
    }
}

/// The allocation holding `addr` in a read-locked table.
pub fn find_in(live: &BTreeMap<u64, Arc<Allocation>>, addr: u64) -> Option<Arc<Allocation>> {
    let (_, a) = live.range(..=addr).next_back()?;
    (addr < a.base + a.size).then(|| Arc::clone(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_guarded_and_never_reused() {
        let Ok(m) = Memory::reserve(1) else {
            return;
        };
        let a = m.alloc(MemKind::Device, 0, 1, 100).unwrap();
        let b = m.alloc(MemKind::Device, 0, 1, 100).unwrap();
        assert!(b.base >= a.base + PAGE + PAGE, "a guard page between them");
        assert_eq!(a.base % PAGE, 0);
        assert!(a.contains(a.base, 100) && !a.contains(a.base, 101));
        assert_eq!(m.used(0), 2 * PAGE);
        let base = a.base;
        m.free(base, &[MemKind::Device]).unwrap();
        assert_eq!(
            m.free(base, &[MemKind::Device]).err(),
            Some(cu::INVALID_VALUE)
        );
        let c = m.alloc(MemKind::Device, 0, 1, 100).unwrap();
        assert!(c.base > b.base, "freed addresses are not reused");
        assert!(m.explain_miss(base + 8, 4).contains("was freed"));
        assert!(m.explain_miss(b.base + 96, 8).contains("past the end"));
        assert_eq!(
            m.alloc(MemKind::Device, 0, 1, 0).err(),
            Some(cu::INVALID_VALUE)
        );
        assert_eq!(
            m.free(c.base + 8, &[MemKind::Device]).err(),
            Some(cu::INVALID_VALUE)
        );
    }

    #[test]
    fn registrations_do_not_overlap() {
        let Ok(m) = Memory::reserve(1) else {
            return;
        };
        m.register(0x10000, 0x1000).unwrap();
        assert_eq!(
            m.register(0x10800, 16),
            Err(cu::HOST_MEMORY_ALREADY_REGISTERED)
        );
        assert!(m.is_pinned(0x10010, 16) && !m.is_pinned(0x10ff0, 32));
        assert_eq!(m.unregister(0x10008), Err(cu::HOST_MEMORY_NOT_REGISTERED));
        m.unregister(0x10000).unwrap();
    }
}
