//! Fuzz target `dlpack_import`: hostile DLPack tensors into `Context::from_dlpack`,
//! `Context::from_dlpack_legacy`, `Context::from_dlpack_copy` and
//! `Context::from_dlpack_copy_legacy` on the CPU backend (the copies take data of any
//! alignment, the imports only data aligned to the element type).
//!
//! The input decodes (through `arbitrary::Unstructured`) into a managed tensor, either form:
//! a null tensor pointer, the version, the flags (read-only), the deleter (one that counts its
//! calls, or none), the element type's code, bits and lanes, the device type and id, `ndim`
//! (0, small, many, negative, or up to `i32::MAX`), the shape (null, negative, huge, extents
//! whose product overflows), the strides (null, compact, transposed, zero, negative, huge),
//! the byte offset (aligned, misaligned, huge), a null data pointer, and the element type it is
//! imported as (u8, i32, f32, f64, i64).
//!
//! A model of the documented checks (`import.rs`'s `Context::from_dlpack` docs) gives the
//! arguments a tensor may be refused for, and the outcome must agree:
//! - refused: [`Error::InvalidArgument`] (or `SizeOverflow`) of that call, naming one of
//!   those arguments, whose message formats; the deleter was not called (the caller still
//!   owns the tensor; the target then deletes it as its producer);
//! - accepted: only a tensor with nothing wrong; its shape, read-only flag and contents are
//!   the tensor's (compared byte for byte with a read of the producer's memory made before
//!   the import); a writable import's writes land exactly on the tensor's bytes; the deleter
//!   runs exactly once, when the import is dropped (at once for the copy), and frees the
//!   data, shape and strides, so a later access is a use after free that AddressSanitizer
//!   reports.
//!
//! In contract (the producer may get it wrong and the library must check it): everything
//! above. Out of contract (the safety section makes it the producer's duty, so the target
//! never passes it): a tensor pointer that is neither null nor live; a non-null shape or
//! strides pointer holding fewer than `ndim` values (so `ndim` beyond 40 comes with null
//! shape and strides); a tensor the checks accept whose data is not valid for what it
//! addresses. So an accepted tensor's elements lie in a buffer of exactly the bytes it
//! addresses (AddressSanitizer's redzones at both ends), while a refused one gets whatever
//! the input says (a null pointer, a 16-byte buffer, a huge offset): it must be refused
//! before its data is read. Tensors the checks accept but that address (or copy) more than
//! 64 KiB are skipped: the fuzzer's memory is bounded, not the library's.
#![no_main]

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use gpukit_core::dlpack::{
    dl_dtype, DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion,
    DLTensor, DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED, DL_VULKAN, FLAG_READ_ONLY,
};
use gpukit_core::{Context, DType, Element, Error, GpuArray};
use gpukit_cpu::CpuBackend;
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

type B = CpuBackend;

/// The most bytes an accepted tensor may address or copy here.
const CAP: usize = 1 << 16;
/// The most dimensions a tensor with a shape array has (more comes with a null shape).
const MAX_LISTED_DIMS: i32 = 40;

fn context() -> &'static Context<B> {
    static CTX: OnceLock<Context<B>> = OnceLock::new();
    CTX.get_or_init(|| match CpuBackend::context() {
        Ok(ctx) => ctx,
        Err(e) => panic!("CpuBackend::context: {e}"),
    })
}

// ---------------------------------------------------------------------------------------
// The producer's memory and deleter.

/// `len` bytes (16-aligned) of producer memory, exactly: reading past either end is caught
/// by AddressSanitizer.
struct Buf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain heap memory owned by this value; the deleter that drops it may run on the
// CPU backend's worker thread.
unsafe impl Send for Buf {}

impl Buf {
    /// A buffer holding `bytes` (at least one).
    fn new(bytes: &[u8]) -> Buf {
        let layout = Buf::layout(bytes.len());
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        assert!(!ptr.is_null(), "allocating {} bytes", bytes.len());
        // SAFETY: `ptr` holds `bytes.len()` fresh bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
        Buf {
            ptr,
            len: bytes.len(),
        }
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len.max(1), 16) {
            Ok(l) => l,
            Err(e) => panic!("layout of {len} bytes: {e}"),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        // SAFETY: `len` initialized bytes at `ptr`, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, Buf::layout(self.len)) }
    }
}

/// What the deleter frees: the data, the shape and the strides.
struct Owned {
    data: Option<Buf>,
    _shape: Option<Vec<i64>>,
    _strides: Option<Vec<i64>>,
}

/// The producer: the tensor's memory, until the deleter runs, and how often it ran.
struct Producer {
    calls: AtomicUsize,
    owned: Mutex<Option<Owned>>,
}

impl Producer {
    fn release(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(owned);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// The deleter of a versioned tensor.
///
/// # Safety
///
/// `t` is a managed tensor built by this target, whose `manager_ctx` is a live `Producer`.
unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    // SAFETY: the caller's contract.
    let p = unsafe { &*(*t).manager_ctx.cast::<Producer>() };
    p.release();
}

/// The deleter of a legacy tensor.
///
/// # Safety
///
/// As for [`delete_versioned`].
unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    // SAFETY: the caller's contract.
    let p = unsafe { &*(*t).manager_ctx.cast::<Producer>() };
    p.release();
}

// ---------------------------------------------------------------------------------------
// The input.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Entry {
    Versioned,
    Legacy,
    Copy,
    CopyLegacy,
}

impl Entry {
    fn call(self) -> &'static str {
        match self {
            Entry::Versioned => "Context::from_dlpack",
            Entry::Legacy => "Context::from_dlpack_legacy",
            Entry::Copy => "Context::from_dlpack_copy",
            Entry::CopyLegacy => "Context::from_dlpack_copy_legacy",
        }
    }

    /// A copy (any strides, any alignment), not an import.
    fn is_copy(self) -> bool {
        matches!(self, Entry::Copy | Entry::CopyLegacy)
    }

    /// The legacy form (no version to check).
    fn is_legacy(self) -> bool {
        matches!(self, Entry::Legacy | Entry::CopyLegacy)
    }
}

#[derive(Debug, Clone, Copy)]
enum Offset {
    /// `k` elements of padding before the first element (and before any element negative
    /// strides reach).
    Aligned(u64),
    /// As `Aligned`, plus `m` bytes (1 to the element size less 1).
    Misaligned(u64, u64),
    /// Any value (huge ones mostly); the data is then not where the tensor says.
    Raw(u64),
}

#[derive(Debug)]
struct Case {
    entry: Entry,
    elem: DType,
    null_tensor: bool,
    version: DLPackVersion,
    flags: u64,
    deleter: bool,
    dtype: Option<DLDataType>,
    device: DLDevice,
    ndim: i32,
    /// `None`: a null pointer.
    shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    offset: Offset,
    null_data: bool,
    seed: u64,
}

const ELEMS: [DType; 5] = [DType::U8, DType::I32, DType::F32, DType::F64, DType::I64];

fn huge(u: &mut Unstructured<'_>) -> ArbResult<i64> {
    let any: i64 = u.arbitrary()?;
    Ok(*u.choose(&[
        i64::MAX,
        1 << 62,
        1 << 61,
        1 << 40,
        1 << 32,
        1 << 31,
        (1 << 31) - 1,
        any,
    ])?)
}

fn negative(u: &mut Unstructured<'_>) -> ArbResult<i64> {
    let any: i64 = u.arbitrary()?;
    Ok(*u.choose(&[-1, -2, i64::MIN, -(1 << 40), any.min(-1)])?)
}

fn extent(u: &mut Unstructured<'_>, many: bool) -> ArbResult<i64> {
    Ok(match u.int_in_range(0..=15u8)? {
        0 => negative(u)?,
        1 => huge(u)?,
        _ if many => {
            if u.ratio(1, 6)? {
                2
            } else {
                1
            }
        }
        _ => u.int_in_range(0..=5)?,
    })
}

/// Row-major strides of `shape`, as `import.rs` computes them (saturating).
fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for (s, &e) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step = step.saturating_mul(e.max(0));
    }
    strides
}

fn strides(u: &mut Unstructured<'_>, shape: &[i64], entry: Entry) -> ArbResult<Option<Vec<i64>>> {
    let n = shape.len();
    // Null (compact) is the common case for an import, real strides for a copy.
    let null_weight = if entry.is_copy() { 1 } else { 4 };
    let pick = u.int_in_range(0..=(null_weight + 5))?;
    if pick < null_weight {
        return Ok(None);
    }
    let mut s = compact_strides(shape);
    match pick - null_weight {
        0 => {}
        1 if n > 0 => {
            let i = u.int_in_range(0..=n - 1)?;
            s[i] = u.int_in_range(-3..=3)?;
        }
        2 if n > 1 => {
            // A permuted (transposed) compact layout.
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                let j = u.int_in_range(0..=i)?;
                order.swap(i, j);
            }
            let permuted: Vec<i64> = order.iter().map(|&i| shape[i]).collect();
            let ps = compact_strides(&permuted);
            for (k, &i) in order.iter().enumerate() {
                s[i] = ps[k];
            }
        }
        3 => {
            for v in &mut s {
                *v = u.int_in_range(-3..=3)?;
            }
        }
        4 if n > 0 => {
            let i = u.int_in_range(0..=n - 1)?;
            s[i] = if u.arbitrary()? {
                huge(u)?
            } else {
                negative(u)?.min(-(1 << 20))
            };
        }
        _ => {}
    }
    Ok(Some(s))
}

impl Case {
    fn decode(u: &mut Unstructured<'_>) -> ArbResult<Case> {
        let entry = *u.choose(&[
            Entry::Versioned,
            Entry::Legacy,
            Entry::Copy,
            Entry::CopyLegacy,
        ])?;
        let elem = *u.choose(&ELEMS)?;
        let null_tensor = u.ratio(1, 64)?;
        let version = if u.ratio(7, 8)? {
            DLPackVersion {
                major: 1,
                minor: u.int_in_range(0..=3)?,
            }
        } else {
            DLPackVersion {
                major: u.arbitrary()?,
                minor: u.arbitrary()?,
            }
        };
        let flags = match u.int_in_range(0..=3u8)? {
            0 | 1 => 0,
            2 => FLAG_READ_ONLY,
            _ => u.arbitrary()?,
        };
        let deleter = !u.ratio(1, 16)?;
        let dtype = match u.int_in_range(0..=7u8)? {
            0..=4 => None,
            5 => Some(dl_dtype(*u.choose(&ELEMS)?)),
            6 => {
                let honest = dl_dtype(elem);
                Some(DLDataType {
                    lanes: u.int_in_range(0..=4)?,
                    ..honest
                })
            }
            _ => Some(DLDataType {
                code: u.arbitrary()?,
                bits: u.arbitrary()?,
                lanes: u.arbitrary()?,
            }),
        };
        let device_type = if u.ratio(3, 4)? {
            *u.choose(&[DL_CPU, DL_CPU, DL_CUDA_HOST])?
        } else {
            let any: i32 = u.arbitrary()?;
            *u.choose(&[DL_CUDA, DL_VULKAN, DL_CUDA_MANAGED, 0, -1, i32::MAX, any])?
        };
        let device_id = if u.ratio(7, 8)? { 0 } else { u.arbitrary()? };
        let (ndim, listed) = match u.int_in_range(0..=15u8)? {
            0..=11 => {
                let n = u.int_in_range(0..=4)?;
                (n, Some(n))
            }
            12 | 13 => {
                let n = u.int_in_range(5..=MAX_LISTED_DIMS)?;
                (n, Some(n))
            }
            14 => {
                let n: i32 = u.arbitrary()?;
                let n = if n >= 0 { -1 - n.min(i32::MAX - 1) } else { n };
                // No extents to read: a small array, or none.
                let listed = if u.arbitrary()? { Some(1) } else { None };
                (n, listed)
            }
            _ => (u.int_in_range(MAX_LISTED_DIMS + 1..=i32::MAX)?, None),
        };
        let null_shape = listed.is_none() || (ndim > 0 && u.ratio(1, 24)?);
        let many = ndim > 4;
        let extents: Vec<i64> = match listed {
            Some(n) => (0..n).map(|_| extent(u, many)).collect::<ArbResult<_>>()?,
            None => Vec::new(),
        };
        let strides = if listed.is_some() {
            strides(u, &extents, entry)?
        } else {
            None
        };
        let shape = (!null_shape).then_some(extents);
        let size = elem.size() as u64;
        let offset = match u.int_in_range(0..=9u8)? {
            0..=4 => Offset::Aligned(0),
            5 | 6 => Offset::Aligned(u.int_in_range(0..=4)?),
            7 if size > 1 => {
                Offset::Misaligned(u.int_in_range(0..=2)?, u.int_in_range(1..=size - 1)?)
            }
            _ => {
                let any: u64 = u.arbitrary()?;
                Offset::Raw(*u.choose(&[u64::MAX, u64::MAX - 7, 1 << 63, 1 << 40, any])?)
            }
        };
        let null_data = u.ratio(1, 16)?;
        Ok(Case {
            entry,
            elem,
            null_tensor,
            version,
            flags,
            deleter,
            dtype,
            device: DLDevice {
                device_type,
                device_id,
            },
            ndim,
            shape,
            strides,
            offset,
            null_data,
            seed: u.arbitrary()?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// The model: what the documentation says is checked.

/// What a tensor's fields say, per the documented checks.
struct Model {
    /// The arguments the tensor may be refused for; empty: it must be accepted.
    faults: Vec<&'static str>,
    /// The extents, where they are valid.
    shape: Option<Vec<usize>>,
    /// The element count, where the shape is valid.
    len: Option<usize>,
    /// The byte offsets (from the first element) of the elements, in row-major order, where
    /// the shape is valid and addresses at most `CAP` bytes: what is read.
    offsets: Option<Vec<i128>>,
}

fn model(c: &Case, t: &DLTensor, size: usize) -> Model {
    let mut faults = Vec::new();
    let none = |faults| Model {
        faults,
        shape: None,
        len: None,
        offsets: None,
    };
    if c.null_tensor {
        return none(vec!["tensor"]);
    }
    if !c.entry.is_legacy() && c.version.major != 1 {
        faults.push("tensor");
    }
    // The CPU backend takes host memory (kDLCPU, kDLCUDAHost), whatever the device id.
    if !matches!(t.device.device_type, DL_CPU | DL_CUDA_HOST) {
        faults.push("device");
    }
    if t.dtype != dl_dtype(c.elem) {
        faults.push("dtype");
    }
    let start = (t.data as usize).checked_add(t.byte_offset as usize);
    match start {
        None => faults.push("byte_offset"),
        // A copy reads its elements unaligned; an import aliases them, aligned.
        Some(s) if s % size != 0 && !c.entry.is_copy() => faults.push("data"),
        Some(_) => {}
    }
    if t.ndim < 0 {
        faults.push("ndim");
        return none(faults);
    }
    let extents: &[i64] = match &c.shape {
        _ if t.ndim == 0 => &[],
        None => {
            faults.push("shape");
            return none(faults);
        }
        Some(e) => e,
    };
    let mut shape = Vec::new();
    let mut len = 1usize;
    for &e in extents {
        let Ok(e) = usize::try_from(e) else {
            faults.push("shape");
            return none(faults);
        };
        let Some(l) = len.checked_mul(e) else {
            faults.push("shape");
            return none(faults);
        };
        len = l;
        shape.push(e);
    }
    if len > 0 && t.data.is_null() {
        faults.push("data");
    }
    if len
        .checked_mul(size)
        .is_none_or(|b| b > isize::MAX as usize)
    {
        faults.push("size");
    }
    let given = (!t.strides.is_null() && t.ndim > 0).then(|| c.strides.clone().unwrap_or_default());
    // The strides the data is read through: an import reads compact memory (it refuses
    // other strides), a copy reads through the strides.
    let mut read = compact_strides(extents);
    if let (Some(s), true) = (&given, len > 0) {
        if c.entry.is_copy() {
            read = s.clone();
            if reach(&shape, s, size, start.unwrap_or(0)).is_none() {
                faults.push("strides");
            }
        } else if shape
            .iter()
            .zip(s)
            .zip(&compact_strides(extents))
            .any(|((&e, &s), &c)| e != 1 && s != c)
        {
            faults.push("strides");
        }
    }
    let offsets = if len == 0 {
        Some(Vec::new())
    } else if len.saturating_mul(size) > CAP {
        None
    } else {
        let mut out = Vec::with_capacity(len);
        let mut index = vec![0usize; shape.len()];
        for _ in 0..len {
            let off: i128 = index
                .iter()
                .zip(&read)
                .map(|(&i, &s)| i as i128 * s as i128)
                .sum();
            out.push(off * size as i128);
            for k in (0..index.len()).rev() {
                index[k] += 1;
                if index[k] < shape[k] {
                    break;
                }
                index[k] = 0;
            }
        }
        Some(out)
    };
    Model {
        faults,
        shape: Some(shape),
        len: Some(len),
        offsets,
    }
}

/// The lowest and highest byte the strides reach from the first element at `start`
/// (`[lo, hi)`), or `None` when that span is more than `isize::MAX` bytes or wraps the
/// address space.
fn reach(shape: &[usize], strides: &[i64], size: usize, start: usize) -> Option<(i128, i128)> {
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&e, &s) in shape.iter().zip(strides) {
        let r = (e as i128 - 1).checked_mul(s as i128)?;
        if r < 0 {
            lo = lo.checked_add(r)?;
        } else {
            hi = hi.checked_add(r)?;
        }
    }
    let size = size as i128;
    let (lo, hi) = (lo.checked_mul(size)?, hi.checked_add(1)?.checked_mul(size)?);
    let span_ok = hi - lo <= isize::MAX as i128;
    let start = start as i128;
    let inside = start + lo >= 0 && start + hi <= usize::MAX as i128 + 1;
    (span_ok && inside).then_some((lo, hi))
}

// ---------------------------------------------------------------------------------------
// Running a case.

/// A small xorshift for the data's bytes.
fn bytes_from(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn check_error(e: &Error, call: &str, faults: &[&str], case: &Case) {
    let arg = match e {
        Error::InvalidArgument { op, arg, message } => {
            assert_eq!(*op, call, "{e}");
            assert!(!message.is_empty(), "{e:?}");
            *arg
        }
        Error::SizeOverflow { op, .. } => {
            assert_eq!(*op, call, "{e}");
            "size"
        }
        other => panic!("{call}: unexpected error {other:?}\ncase: {case:#?}"),
    };
    assert!(
        faults.contains(&arg),
        "{call} refused the tensor for `{arg}` ({e}), but its faults are {faults:?}\ncase: {case:#?}"
    );
    assert!(!e.to_string().is_empty());
}

fn elems_of<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytes
        .chunks_exact(size_of::<T>())
        // SAFETY: `size_of::<T>()` bytes; every bit pattern is an element (`Element`'s
        // contract: plain integers and floats here).
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<T>()) })
        .collect()
}

fn bytes_of<T: Element>(v: &[T]) -> Vec<u8> {
    // SAFETY: elements are plain bytes (`Element`'s contract), `v` is initialized.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        .to_vec()
}

fn run<T: Element>(c: &Case) {
    let size = size_of::<T>();
    let call = c.entry.call();

    // The shape and strides arrays, and where the data goes.
    let mut shape_arr = c.shape.clone();
    let mut strides_arr = c.strides.clone();
    let shape_ptr = shape_arr
        .as_mut()
        .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    let strides_ptr = strides_arr
        .as_mut()
        .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    let dtype = c.dtype.unwrap_or(dl_dtype(T::DTYPE));

    // First the geometry without the data, to size the buffer: what the tensor addresses
    // relative to its first element.
    let probe = DLTensor {
        data: std::ptr::null_mut(),
        device: c.device,
        ndim: c.ndim,
        dtype,
        shape: shape_ptr,
        strides: strides_ptr,
        byte_offset: 0,
    };
    let geometry = model(c, &probe, size);
    let span = geometry.offsets.as_ref().and_then(|o| {
        let lo = o.iter().copied().min().unwrap_or(0);
        let hi = o.iter().copied().max().map_or(0, |h| h + size as i128);
        usize::try_from(hi - lo).ok().map(|n| (lo, n))
    });
    let (pad, extra) = match c.offset {
        Offset::Aligned(k) => (k as usize * size, 0),
        Offset::Misaligned(k, m) => (k as usize * size, m as usize),
        Offset::Raw(_) => (0, 0),
    };
    // An honest buffer: the padding, then exactly the addressed bytes.
    let (buf, first) = match span {
        Some((lo, n)) if n > 0 && pad.saturating_add(n).saturating_add(extra) <= CAP + 64 => {
            let lead = (-lo) as usize;
            (
                Some(Buf::new(&bytes_from(c.seed, pad + extra + n))),
                pad + extra + lead,
            )
        }
        _ => (Some(Buf::new(&bytes_from(c.seed, 16))), 0),
    };
    let honest = (matches!(c.offset, Offset::Aligned(_))
        || (matches!(c.offset, Offset::Misaligned(..)) && c.entry.is_copy()))
        && !c.null_data
        && matches!(span, Some((_, n)) if n > 0 && buf.as_ref().is_some_and(|b| b.len >= n));
    let data: *mut c_void = match (&buf, c.null_data) {
        (Some(b), false) => b.ptr.cast(),
        _ => std::ptr::null_mut(),
    };
    let byte_offset = match c.offset {
        Offset::Raw(v) => v,
        _ => first as u64,
    };
    let tensor = DLTensor {
        data,
        byte_offset,
        ..probe
    };
    let m = model(c, &tensor, size);

    // Out of contract, or out of the fuzzer's memory: an acceptable tensor whose data is
    // not all there, or one too large to copy.
    let len = m.len.unwrap_or(0);
    if m.faults.is_empty() && len > 0 && (!honest || m.offsets.is_none()) {
        return;
    }
    let expected: Option<Vec<u8>> = match (&buf, &m.offsets) {
        (Some(b), Some(offs)) if m.faults.is_empty() && len > 0 => {
            let all = b.bytes();
            let mut out = Vec::with_capacity(len * size);
            for &o in offs {
                let at = (first as i128 + o) as usize;
                out.extend_from_slice(&all[at..at + size]);
            }
            Some(out)
        }
        _ => (m.faults.is_empty()).then(Vec::new),
    };
    let before = buf.as_ref().map(Buf::bytes);

    let producer = Box::new(Producer {
        calls: AtomicUsize::new(0),
        owned: Mutex::new(Some(Owned {
            data: buf,
            _shape: shape_arr,
            _strides: strides_arr,
        })),
    });
    let manager_ctx = (&*producer as *const Producer).cast_mut().cast::<c_void>();
    let ctx = context();

    match c.entry {
        Entry::Versioned | Entry::Copy => {
            let raw = Box::into_raw(Box::new(DLManagedTensorVersioned {
                version: c.version,
                manager_ctx,
                deleter: c.deleter.then_some(delete_versioned as _),
                flags: c.flags,
                dl_tensor: tensor,
            }));
            let ptr = if c.null_tensor {
                std::ptr::null_mut()
            } else {
                raw
            };
            if c.entry == Entry::Copy {
                // SAFETY: null or our live tensor, under the import contract (see the module
                // docs: what is passed is in contract).
                let r = unsafe { ctx.from_dlpack_copy::<T>(ptr) };
                match r {
                    Ok(copied) => copy_ok(c, copied, &m, expected, &producer),
                    Err(e) => refused(c, &e, &m, &producer, || delete_v(raw)),
                }
            } else {
                // SAFETY: as above.
                let r = unsafe { ctx.from_dlpack::<T>(ptr) };
                let read_only = c.flags & FLAG_READ_ONLY != 0;
                match r {
                    Ok(imported) => {
                        let before = before.as_deref();
                        imported_ok(
                            c, imported, &m, expected, read_only, before, first, &producer,
                        )
                    }
                    Err(e) => refused(c, &e, &m, &producer, || delete_v(raw)),
                }
            }
            // SAFETY: made by `Box::into_raw` above; the import is over.
            drop(unsafe { Box::from_raw(raw) });
        }
        Entry::Legacy | Entry::CopyLegacy => {
            let raw = Box::into_raw(Box::new(DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx,
                deleter: c.deleter.then_some(delete_legacy as _),
            }));
            let ptr = if c.null_tensor {
                std::ptr::null_mut()
            } else {
                raw
            };
            let delete = || {
                // SAFETY: our live tensor, refused, so still ours: deleted as its producer
                // would, once.
                if let Some(d) = unsafe { (*raw).deleter } {
                    unsafe { d(raw) }
                }
            };
            if c.entry == Entry::CopyLegacy {
                // SAFETY: as above.
                match unsafe { ctx.from_dlpack_copy_legacy::<T>(ptr) } {
                    Ok(copied) => copy_ok(c, copied, &m, expected, &producer),
                    Err(e) => refused(c, &e, &m, &producer, delete),
                }
            } else {
                // SAFETY: as above.
                match unsafe { ctx.from_dlpack_legacy::<T>(ptr) } {
                    Ok(imported) => {
                        let before = before.as_deref();
                        imported_ok(c, imported, &m, expected, false, before, first, &producer)
                    }
                    Err(e) => refused(c, &e, &m, &producer, delete),
                }
            }
            // SAFETY: made by `Box::into_raw` above; the import is over.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
    if let Err(e) = ctx.check() {
        panic!("the context holds an error after {call}: {e}\ncase: {c:#?}");
    }
    if c.deleter {
        assert_eq!(
            producer.calls(),
            1,
            "the deleter runs exactly once\ncase: {c:#?}"
        );
    }
}

/// A copy the model accepts: given back at once, of the model's shape and the producer's
/// bytes.
fn copy_ok<T: Element>(
    c: &Case,
    (array, shape): (GpuArray<T, B>, Vec<usize>),
    m: &Model,
    expected: Option<Vec<u8>>,
    producer: &Producer,
) {
    accepted(c, m);
    if c.deleter {
        assert_eq!(producer.calls(), 1, "a copy gives the tensor back at once");
    }
    assert_eq!(Some(&shape), m.shape.as_ref());
    let got = match array.download() {
        Ok(v) => bytes_of(&v),
        Err(e) => panic!("download: {e}"),
    };
    assert_eq!(Some(got), expected, "the copy's contents\ncase: {c:#?}");
}

/// Deletes a refused versioned tensor as its producer would.
fn delete_v(raw: *mut DLManagedTensorVersioned) {
    // SAFETY: `raw` is this target's live tensor (from `Box::into_raw`), refused, so still
    // ours; deleted once, here.
    if let Some(d) = unsafe { (*raw).deleter } {
        unsafe { d(raw) }
    }
}

fn accepted(c: &Case, m: &Model) {
    assert!(
        m.faults.is_empty(),
        "{} accepted a tensor with faults {:?}\ncase: {c:#?}",
        c.entry.call(),
        m.faults
    );
}

fn refused(c: &Case, e: &Error, m: &Model, producer: &Producer, delete: impl FnOnce()) {
    check_error(e, c.entry.call(), &m.faults, c);
    assert_eq!(
        producer.calls(),
        0,
        "a refused tensor stays with its caller\ncase: {c:#?}"
    );
    delete();
}

#[allow(clippy::too_many_arguments)]
fn imported_ok<T: Element>(
    c: &Case,
    mut imported: gpukit_core::DlpackArray<T, B>,
    m: &Model,
    expected: Option<Vec<u8>>,
    read_only: bool,
    before: Option<&[u8]>,
    first: usize,
    producer: &Producer,
) {
    accepted(c, m);
    assert_eq!(producer.calls(), 0, "deleted while imported\ncase: {c:#?}");
    assert_eq!(Some(imported.shape()), m.shape.as_deref());
    assert_eq!(imported.is_read_only(), read_only);
    assert_eq!(Some(imported.array().len()), m.len);
    let got = match imported.array().download() {
        Ok(v) => bytes_of(&v),
        Err(e) => panic!("download: {e}"),
    };
    assert_eq!(
        Some(got.clone()),
        expected,
        "the import's contents\ncase: {c:#?}"
    );
    match imported.array_mut() {
        Err(e) => {
            assert!(read_only, "array_mut of a writable import: {e}");
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        }
        Ok(array) => {
            assert!(!read_only, "array_mut of a read-only import");
            // Write the complement; it must land on the tensor's bytes and nowhere else.
            let flipped: Vec<u8> = got.iter().map(|b| !b).collect();
            if let Err(e) = array.upload(&elems_of::<T>(&flipped)) {
                panic!("upload into the import: {e}");
            }
            if let Some(before) = before {
                // The producer's buffer is alive until the deleter runs, which the import has
                // not done (checked above); the upload has finished.
                let now = producer_bytes(producer);
                let mut want = before.to_vec();
                if !flipped.is_empty() {
                    want[first..first + flipped.len()].copy_from_slice(&flipped);
                }
                assert_eq!(now, want, "a write through the import\ncase: {c:#?}");
            }
        }
    }
    drop(imported);
    if c.deleter {
        assert_eq!(
            producer.calls(),
            1,
            "dropping the import deletes it once\ncase: {c:#?}"
        );
    }
}

fn producer_bytes(p: &Producer) -> Vec<u8> {
    let owned = p.owned.lock().unwrap_or_else(|e| e.into_inner());
    owned
        .as_ref()
        .and_then(|o| o.data.as_ref())
        .map(Buf::bytes)
        .unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(case) = Case::decode(&mut u) else {
        return;
    };
    match case.elem {
        DType::U8 => run::<u8>(&case),
        DType::I32 => run::<i32>(&case),
        DType::F32 => run::<f32>(&case),
        DType::F64 => run::<f64>(&case),
        _ => run::<i64>(&case),
    }
});
