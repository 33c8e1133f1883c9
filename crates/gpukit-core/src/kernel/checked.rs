//! The launch convention of bounds-checked kernels (those `#[kernel]` generates) and the
//! streams' fault records, through which a checked kernel on any backend reports the first
//! out-of-bounds access of a launch as [`Error::KernelFailed`] to the stream it ran on.
//!
//! A checked kernel receives, after the arguments of its signature:
//! 1. for each array argument, in order, its length in bytes (a `u64`);
//! 2. its tag (a `u32`): which kernel of the context it is;
//! 3. its stream's fault record (a capture's, for the work a graph replays): [`FAULT_WORDS`]
//!    `u32` words, written (not ordered against other work: only ever claimed with an
//!    atomic compare-and-swap) by the first access of any launch on the stream that falls
//!    outside its array.
//!
//! Word 0 is the claim (0: no fault; 1: being written; 2: whole), then the tag, the
//! parameter's number (the arrays in signature order, then the kernel's shared arrays),
//! the index (low, high word) and the length (low, high word). A thread that accesses out
//! of bounds skips the access (a read gives zero) and goes on; the stream's next `sync` (or
//! `query` that finds it idle), or the context's `sync`, reads its record, clears it and
//! returns the fault: once, to the stream whose launch made it (or to the context's sync,
//! which reads every stream's), and only once it is whole.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::race::RaceCheck;
use crate::backend::{Backend, BufAt, RawPtr};
use crate::error::{Error, Result};
use crate::lock;

/// Words in a fault record.
pub const FAULT_WORDS: usize = 8;
/// Bytes in a fault record.
const FAULT_BYTES: usize = FAULT_WORDS * 4;

/// What a checked kernel tells the launcher about itself: the names its fault codes refer
/// to, and why it has no WGSL where it has none.
///
/// A kernel whose [`crate::KernelDesc`] has one is launched with the checked convention:
/// after the arguments of its signature it receives, for each array argument in order, its
/// length in bytes (a `u64`; not on a backend whose [`Backend::checked_lengths`] is false),
/// then its tag (a `u32`, which kernel of the context it is), then
/// its stream's fault record ([`FAULT_WORDS`] `u32` words). The first access of any launch on
/// the stream that falls outside its array claims the record (word 0, compare-and-swap from 0
/// to 1), writes the tag, the array's number, the index and the length, then marks it whole
/// (word 0 set to 2); the access is skipped. The stream's next `sync` (or `query` that finds
/// it idle), or the context's `sync`, reads the whole record, clears it and returns
/// [`crate::Error::KernelFailed`] naming the kernel and the array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedAbi {
    /// The names of the kernel's fault codes: its array parameters in signature order, its
    /// shared arrays, then what its `report_out_of_bounds` calls name.
    pub arrays: Vec<String>,
    /// Why the kernel has no WGSL (an element type WGSL lacks, say), shown when it is
    /// loaded on the wgpu backend.
    pub no_wgsl: Option<&'static str>,
    /// Whether its GPU code checks its reads and writes (`false` after
    /// [`crate::KernelSpec::unchecked`]; the convention is the same either way).
    pub checks: bool,
    /// The number of parameters of its signature (set from the signature when the spec is
    /// built): the arguments after them are the convention's.
    pub arity: usize,
    /// Whether its code without the checks may still report a fault (it reports indices it
    /// checks itself, or has atomics, which keep their checks): a context reads its fault
    /// record at a sync only once a kernel that may report has been launched on it.
    pub unchecked_faults: bool,
}

/// The fault record as the CPU twin of a checked kernel writes it.
#[derive(Debug)]
pub struct KernelFaults<'a> {
    words: &'a [AtomicU32],
    tag: u32,
    race: Option<RaceCheck>,
}

impl<'a> KernelFaults<'a> {
    /// The record at `ptr`, for the kernel or op tagged `tag`: how a CPU twin reaches it.
    ///
    /// # Safety
    ///
    /// `ptr` is a fault record: [`FAULT_WORDS`] 4-aligned words, allocated for
    /// `'a` and only ever accessed atomically.
    pub unsafe fn from_raw(ptr: *const u8, tag: u32) -> Self {
        // SAFETY: this function's contract; `AtomicU32` has `u32`'s layout.
        let words = unsafe { std::slice::from_raw_parts(ptr.cast::<AtomicU32>(), FAULT_WORDS) };
        KernelFaults {
            words,
            tag,
            race: None,
        }
    }

    /// The record with a race checker for a launch of geometry `cfg` (see [`RaceCheck`]).
    pub(crate) fn race_checked(mut self, cfg: &super::LaunchConfig) -> Self {
        self.race = Some(RaceCheck::new(cfg));
        self
    }

    /// The launch's race checker, when it runs under one: what the twin tells of its
    /// accesses, barriers and blocks.
    #[doc(hidden)]
    pub fn race(&self) -> Option<&RaceCheck> {
        self.race.as_ref()
    }

    /// Notes an access at `index` of array number `array` (of length `len`), unless a fault
    /// is already noted.
    #[cold]
    pub fn fault(&self, array: u32, index: u64, len: u64) {
        let Some(claim) = self.words.first() else {
            return;
        };
        if claim
            .compare_exchange(0, WRITING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let words = [
                self.tag,
                array,
                index as u32,
                (index >> 32) as u32,
                len as u32,
                (len >> 32) as u32,
            ];
            for (w, v) in self.words[1..].iter().zip(words) {
                w.store(v, Ordering::Release);
            }
            claim.store(WHOLE, Ordering::Release);
        }
    }
}

/// The claim word's value while the faulting thread writes the record.
const WRITING: u32 = 1;
/// The claim word's value once the record is whole.
const WHOLE: u32 = 2;

/// One stream's fault record (or one capture's, which its graph's launches write): where
/// its checked launches report their first out-of-bounds access.
pub(crate) struct FaultRecord<B: Backend> {
    buf: B::Buffer,
    /// Set once a kernel that may report a fault has been launched with it: only then does
    /// a sync read it (a copy and a wait on a GPU), so that a stream whose kernels all run
    /// without checks and report nothing (the built-in ops of release builds, but those
    /// that index) pays nothing for it.
    live: AtomicBool,
}

impl<B: Backend> FaultRecord<B> {
    /// The record, as a kernel argument.
    pub(crate) fn at(&self) -> BufAt<'_, B> {
        BufAt {
            buf: &self.buf,
            offset: 0,
        }
    }

    /// Notes the launch of a kernel that may report a fault with this record: syncs read
    /// it from now on.
    pub(crate) fn launched(&self) {
        if !self.live.load(Ordering::Relaxed) {
            self.live.store(true, Ordering::SeqCst);
        }
    }
}

/// A context's fault records (one per stream and per capture that launched a checked
/// kernel) and the checked kernels loaded on it.
pub(crate) struct FaultLog<B: Backend> {
    /// The loaded checked kernels (and built-in ops' aliases of them): name and array
    /// names, by tag.
    kernels: Mutex<Vec<(String, Vec<String>)>>,
    /// Every record not yet freed: the streams' and the graphs' (each also holds its
    /// own), and those of dropped streams whose work had not finished, which the context's
    /// next sync reads and frees.
    records: Mutex<Vec<Arc<FaultRecord<B>>>>,
}

impl<B: Backend> FaultLog<B> {
    pub(crate) fn new() -> Self {
        FaultLog {
            kernels: Mutex::new(Vec::new()),
            records: Mutex::new(Vec::new()),
        }
    }

    /// Registers a checked kernel: its tag.
    pub(crate) fn register(&self, backend: &B, name: &str, abi: &CheckedAbi) -> Result<u32> {
        let mut kernels = lock(&self.kernels);
        let tag = u32::try_from(kernels.len()).map_err(|_| Error::Unsupported {
            backend: backend.name(),
            what: "more than 2^32 checked kernels loaded on one context".into(),
        })?;
        kernels.push((name.to_owned(), abi.arrays.clone()));
        Ok(tag)
    }

    /// A tag for the built-in op `call` that launches the kernel tagged `kernel`: its
    /// faults name the op the user called, with the kernel's arrays (registered once per
    /// call and kernel; the caller caches it).
    pub(crate) fn alias(&self, backend: &B, call: &'static str, kernel: u32) -> Result<u32> {
        let arrays = lock(&self.kernels)
            .get(kernel as usize)
            .map(|(_, a)| a.clone())
            .unwrap_or_default();
        let abi = CheckedAbi {
            arrays,
            no_wgsl: None,
            checks: true,
            arity: 0,
            unchecked_faults: false,
        };
        self.register(backend, call, &abi)
    }

    /// A new record (zeroed), kept in the log until it is released.
    pub(crate) fn new_record(&self, backend: &B) -> Result<Arc<FaultRecord<B>>> {
        let record = Arc::new(FaultRecord {
            buf: backend.alloc(FAULT_BYTES, true)?,
            live: AtomicBool::new(false),
        });
        lock(&self.records).push(Arc::clone(&record));
        Ok(record)
    }

    /// Whether any record is allocated.
    pub(crate) fn has_records(&self) -> bool {
        !lock(&self.records).is_empty()
    }

    /// Reads `record` after `stream` has finished the work that wrote it; a whole fault is
    /// cleared and returned as [`Error::KernelFailed`] (one still being written is left for
    /// the next sync).
    pub(crate) fn take(
        &self,
        backend: &B,
        stream: &B::Stream,
        record: &FaultRecord<B>,
    ) -> Result<()> {
        if !record.live.load(Ordering::SeqCst) {
            return Ok(());
        }
        let at = record.at();
        let mut words = [0u32; FAULT_WORDS];
        match backend.raw_ptr(at) {
            RawPtr::Host(p) => {
                // SAFETY: the CPU backend's record is FAULT_BYTES of live, 4-aligned host
                // memory owned by this log until it is released; kernels only ever touch
                // it atomically, as this does.
                let atomics =
                    unsafe { std::slice::from_raw_parts(p.cast::<AtomicU32>(), FAULT_WORDS) };
                match take_host(atomics) {
                    Some(w) => words = w,
                    None => return Ok(()),
                }
            }
            _ => {
                // SAFETY: `words` is FAULT_BYTES of writable memory that lives until the
                // stream is synchronized below; the record is a live buffer of that size.
                unsafe { backend.copy_d2h(stream, at, words.as_mut_ptr().cast(), FAULT_BYTES)? };
                backend.stream_sync(stream)?;
                if words[0] != WHOLE {
                    return Ok(());
                }
                let zeros = [0u32; FAULT_WORDS];
                // SAFETY: `zeros` lives until the stream is synchronized below; the record
                // is a live buffer of FAULT_BYTES.
                unsafe { backend.copy_h2d(stream, zeros.as_ptr().cast(), at, FAULT_BYTES)? };
                backend.stream_sync(stream)?;
            }
        }
        Err(self.describe(&words))
    }

    /// After the whole context's work has finished (`Context::sync`): reads every record,
    /// through `stream`, and returns the first fault found (the others stay for later
    /// syncs); frees the records nothing holds any more (dropped streams' and graphs').
    pub(crate) fn take_all(&self, backend: &B, stream: &B::Stream) -> Result<()> {
        let records: Vec<_> = lock(&self.records).clone();
        for record in &records {
            self.take(backend, stream, record)?;
        }
        drop(records);
        let orphans: Vec<_> = {
            let mut all = lock(&self.records);
            let (orphans, kept) = all.drain(..).partition(|r| Arc::strong_count(r) == 1);
            *all = kept;
            orphans
        };
        self.free_each(backend, orphans)
    }

    /// At the end of `stream`, which held `record`: a record that was never live is freed
    /// once the stream's work has passed; one whose stream is idle is read a last time (its
    /// fault, the stream's last, is returned for the context to defer) and freed; else it
    /// stays for the context's next sync, which reads and frees it.
    pub(crate) fn retire(
        &self,
        backend: &B,
        stream: &B::Stream,
        record: Arc<FaultRecord<B>>,
    ) -> Result<()> {
        let read = if !record.live.load(Ordering::SeqCst) {
            Ok(())
        } else if backend.stream_query(stream)? {
            self.take(backend, stream, &record)
        } else {
            return Ok(());
        };
        let mut all = lock(&self.records);
        if Arc::strong_count(&record) == 2 {
            all.retain(|r| !Arc::ptr_eq(r, &record));
            drop(all);
            self.free(backend, record, &[stream])?;
        }
        read
    }

    /// Frees `record`, held by nothing else, once the work queued on `users` has passed.
    fn free(&self, backend: &B, record: Arc<FaultRecord<B>>, users: &[&B::Stream]) -> Result<()> {
        match Arc::try_unwrap(record) {
            // SAFETY: no stream or graph holds the record any more, so no work queued
            // later can use it; the work queued before is on `users` (or has finished).
            Ok(r) => unsafe { backend.free(r.buf, users) },
            Err(_) => Ok(()),
        }
    }

    fn describe(&self, w: &[u32; FAULT_WORDS]) -> Error {
        let kernels = lock(&self.kernels);
        let (kernel, arrays) = kernels
            .get(w[1] as usize)
            .map(|(k, a)| (k.clone(), a.as_slice()))
            .unwrap_or_else(|| (format!("<checked kernel {}>", w[1]), &[]));
        let array = arrays
            .get(w[2] as usize)
            .map_or_else(|| format!("array {}", w[2]), |a| format!("`{a}`"));
        let index = u64::from(w[3]) | (u64::from(w[4]) << 32);
        let len = u64::from(w[5]) | (u64::from(w[6]) << 32);
        Error::KernelFailed {
            kernel,
            message: format!(
                "index {index} is out of bounds for {array} (length {len}); the access was \
                 skipped and the launch's outputs are undefined"
            ),
        }
    }

    /// Frees every record (at the context's end, after its work has finished and every
    /// stream and graph is gone).
    pub(crate) fn free_all(&mut self, backend: &B) -> Result<()> {
        let records = std::mem::take(&mut *lock(&self.records));
        self.free_each(backend, records)
    }

    /// Frees `records`, which nothing else holds and no unfinished work uses; the first
    /// error, after trying them all.
    fn free_each(&self, backend: &B, records: Vec<Arc<FaultRecord<B>>>) -> Result<()> {
        let mut first = Ok(());
        for r in records {
            first = first.and(self.free(backend, r, &[]));
        }
        first
    }
}

/// Reads and clears the fault in a record in host memory: `None` where it holds none, or
/// one still being written (which the next read takes).
fn take_host(record: &[AtomicU32]) -> Option<[u32; FAULT_WORDS]> {
    let claim = record.first()?;
    if claim.load(Ordering::Acquire) != WHOLE {
        return None;
    }
    let mut words = [0u32; FAULT_WORDS];
    for (w, a) in words.iter_mut().zip(record) {
        *w = a.load(Ordering::Acquire);
    }
    // The claim last: no thread writes the record again before it is released.
    for a in record.iter().rev() {
        a.store(0, Ordering::Release);
    }
    Some(words)
}

mod sealed {
    /// Only the element types `#[kernel]` compiles for.
    pub trait Sealed {}
}

/// The element types a generic `#[kernel]` with `T: Numeric` (or `T: KernelNumeric`) is
/// compiled for: `f32`, `f64`, `i32`, `u32`, `i64`, `u64`, `u8`, `i8`, and with the `half`
/// feature `f16` and `bf16` (computed in `f32`). Sealed.
pub trait KernelNumeric: crate::Element + super::KernelParam + sealed::Sealed {
    /// The value as a scalar launch argument (an f16 or bf16 as its f32), for built-in ops
    /// generic over the type.
    #[doc(hidden)]
    fn __scalar_arg(&self) -> ([u8; 16], usize);
    /// The value a CPU closure receives for a scalar of this type, back as the type.
    #[doc(hidden)]
    fn __from_cpu(v: &<Self as super::KernelParam>::Cpu<'_>) -> Self;
}

/// The element types a generic `#[kernel]` with `T: Float` (or `T: KernelFloat`) is
/// compiled for: `f32` and `f64`, and with the `half` feature `f16` and `bf16` (computed in
/// `f32`). Sealed.
pub trait KernelFloat: KernelNumeric {}

macro_rules! kernel_types {
    ($($t:ty => $wire:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl KernelNumeric for $t {
            #[inline]
            fn __scalar_arg(&self) -> ([u8; 16], usize) {
                let wire = <$wire>::from(*self).to_ne_bytes();
                (crate::backend::scalar_bytes(&wire), wire.len())
            }
            fn __from_cpu(v: &$t) -> $t {
                *v
            }
        }
    )*};
}
kernel_types!(f32 => f32, f64 => f64, i32 => i32, u32 => u32, i64 => i64, u64 => u64, u8 => u8, i8 => i8);
impl KernelFloat for f32 {}
impl KernelFloat for f64 {}
// As their f32 value, as `KernelParam` says.
#[cfg(feature = "half")]
kernel_types!(half::f16 => f32, half::bf16 => f32);
#[cfg(feature = "half")]
impl KernelFloat for half::f16 {}
#[cfg(feature = "half")]
impl KernelFloat for half::bf16 {}

/// A device function (`#[kernel(device)]`): its generated CUDA C and WGSL, and the device
/// functions it calls, for the kernels that call it to link in.
#[derive(Debug)]
pub struct DeviceFn {
    /// Its name.
    pub name: &'static str,
    /// Its CUDA C (a `__device__` function, guarded so that a module holds it once).
    pub cuda: &'static str,
    /// Its WGSL, or `None` where WGSL lacks one of its types.
    pub wgsl: Option<&'static str>,
    /// The device functions it calls.
    pub deps: &'static [&'static DeviceFn],
}

impl DeviceFn {
    /// A kernel's code with the device functions it calls (and theirs) before it, each once
    /// (in WGSL after the module's directives, with any 64-bit helper they need); no WGSL
    /// where one of them has none.
    #[doc(hidden)]
    pub fn link(
        cuda: &str,
        wgsl: Option<&str>,
        calls: &[&'static DeviceFn],
    ) -> (String, Option<String>) {
        fn visit(f: &'static DeviceFn, order: &mut Vec<&'static DeviceFn>) {
            if order.iter().any(|g| std::ptr::eq(*g, f)) {
                return;
            }
            for d in f.deps {
                visit(d, order);
            }
            order.push(f);
        }
        let mut order = Vec::new();
        for f in calls {
            visit(f, &mut order);
        }
        let mut c: String = order.iter().map(|f| f.cuda).collect();
        c.push_str(cuda);
        let w = wgsl.and_then(|w| {
            let mut device = String::new();
            for f in &order {
                device.push_str(f.wgsl?);
            }
            Some(gpukit_kernel::wgsl::link(w, &device))
        });
        (c, w)
    }
}

/// `src` (a `#[kernel]`'s CUDA C, `cuda: true`, or its WGSL) with the definitions of its
/// compile-time parameters written in: `params` holds each one's name, type and value (its
/// Rust literal). What a const-generic kernel's expansion calls for each instantiation.
#[doc(hidden)]
pub fn __comptime(src: &str, params: &[(&str, &str, &str)], cuda: bool) -> String {
    src.replacen(
        gpukit_kernel::ir::COMPTIME_MARK,
        &gpukit_kernel::ir::comptime_definitions(params, cuda),
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record's reader never sees a fault that a thread has claimed but not finished
    /// writing: every fault it takes is whole, and none is taken twice.
    #[test]
    fn a_record_is_read_only_once_whole() {
        let record: Vec<AtomicU32> = (0..FAULT_WORDS).map(|_| AtomicU32::new(0)).collect();
        let stop = AtomicBool::new(false);
        let taken = std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: FAULT_WORDS live, aligned words, touched only atomically, for the
                // test.
                let faults = unsafe { KernelFaults::from_raw(record.as_ptr().cast(), 7) };
                let mut k = 1u32;
                while !stop.load(Ordering::Relaxed) {
                    // Array, index and length agree in a whole record.
                    faults.fault(k, u64::from(k), u64::from(k));
                    k = k.wrapping_add(1).max(1);
                }
            });
            let mut taken = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while taken.len() < 5_000 && std::time::Instant::now() < deadline {
                taken.extend(take_host(&record));
            }
            stop.store(true, Ordering::Relaxed);
            taken
        });
        for w in &taken {
            assert_eq!(w[..2], [WHOLE, 7], "{w:?}");
            assert!(
                w[2] == w[3] && w[3] == w[5] && w[4] == 0 && w[6] == 0,
                "{w:?}"
            );
        }
        assert!(
            taken.windows(2).all(|p| p[0][2] < p[1][2]),
            "each fault once, in order"
        );
        assert_eq!(taken.len(), 5_000);
    }
}
