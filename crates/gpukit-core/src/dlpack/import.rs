//! Importing a foreign DLPack tensor as an array that borrows the producer's memory.

use super::{
    dl_dtype, DLManagedTensor, DLManagedTensorVersioned, DLTensor, Managed, DL_CPU, DL_CUDA,
    DL_CUDA_HOST, DL_CUDA_MANAGED, FLAG_READ_ONLY,
};
use crate::array::{sealed, DeviceRead, GpuArray};
use crate::backend::{Backend, RawPtr};
use crate::context::Context;
use crate::element::{byte_len, Element};
use crate::error::{Error, Result};
use crate::track::SliceRef;

/// The managed tensor an import is given, either form.
#[derive(Debug, Clone, Copy)]
enum Handle {
    Versioned(*mut DLManagedTensorVersioned),
    Legacy(*mut DLManagedTensor),
}

/// How an imported tensor goes back to its producer: its deleter, called once, when this is
/// dropped (kept by the array's allocation until its memory is released). Made only once
/// the import has succeeded: on error the caller still owns the tensor.
#[derive(Debug)]
struct Release(Handle);

// SAFETY: the pointer is the producer's managed tensor, owned by this value alone (the import
// contract), whose deleter DLPack lets any thread call; nothing but `drop` uses it.
unsafe impl Send for Release {}
// SAFETY: as above: `&Release` gives no access to the pointer.
unsafe impl Sync for Release {}

impl Drop for Release {
    fn drop(&mut self) {
        // SAFETY: the import contract: the pointer is the producer's live managed tensor,
        // released exactly once, here.
        unsafe {
            match self.0 {
                Handle::Versioned(t) => release(t),
                Handle::Legacy(t) => release(t),
            }
        }
    }
}

/// A foreign tensor imported as an array ([`Context::from_dlpack`]): its memory is the
/// producer's, borrowed without a copy, and given back through the producer's deleter
/// exactly once, when this and every export of it ([`crate::Stream::to_dlpack`]) are
/// dropped and the work queued on it has finished.
///
/// It is device memory an op may read (pass `&imported` wherever an array is read); to
/// write it, [`DlpackArray::array_mut`], which a read-only import refuses.
#[derive(Debug)]
pub struct DlpackArray<T: Element, B: Backend> {
    array: GpuArray<T, B>,
    shape: Vec<usize>,
    read_only: bool,
}

impl<T: Element, B: Backend> DlpackArray<T, B> {
    /// The array over the producer's memory.
    pub fn array(&self) -> &GpuArray<T, B> {
        &self.array
    }

    /// The array, to write: [`Error::InvalidArgument`] when the producer exported it
    /// read-only.
    pub fn array_mut(&mut self) -> Result<&mut GpuArray<T, B>> {
        if self.read_only {
            return Err(Error::InvalidArgument {
                op: "DlpackArray::array_mut",
                arg: "self",
                message: "the producer exported this tensor read-only".into(),
            });
        }
        Ok(&mut self.array)
    }

    /// The tensor's shape (row-major).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Whether the producer exported it read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

impl<T: Element, B: Backend> sealed::Sealed for DlpackArray<T, B> {}

impl<T: Element, B: Backend> DeviceRead<T, B> for DlpackArray<T, B> {
    fn len(&self) -> usize {
        self.array.len()
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        self.array.slice_ref()
    }
}

/// Calls a managed tensor's deleter, if it has one.
///
/// # Safety
///
/// `t` is a live managed tensor whose deleter has not been called, and is not used after.
unsafe fn release<M: Managed>(t: *mut M) {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(delete) = (*t).deleter() {
            delete(t);
        }
    }
}

impl<B: Backend> Context<B> {
    /// Imports a DLPack 1.x tensor (`DLManagedTensorVersioned`) as an array borrowing the
    /// producer's memory (no copy). On success the import owns the tensor and calls its
    /// deleter once, when dropped; on error the caller still owns it (nothing was called).
    ///
    /// Checked, each a typed error naming `Context::from_dlpack`: a null pointer; a major
    /// version other than 1; a device other than this context's (the CPU backend takes
    /// `kDLCPU` and `kDLCUDAHost`; CUDA takes `kDLCUDA` and `kDLCUDAManaged` of its ordinal);
    /// an element type other than `T`'s; a negative extent or an element count that
    /// overflows (in bytes: [`Error::SizeOverflow`]); strides that are not compact row-major
    /// ([`Error::InvalidArgument`] saying "not contiguous": copy it first); a null data
    /// pointer with elements, or data and byte offset not aligned to `T`. The read-only flag
    /// gives a read-only import.
    ///
    /// # Safety
    ///
    /// `tensor` is null or a live `DLManagedTensorVersioned` whose fields describe memory
    /// the producer keeps valid (readable, and writable unless read-only) until its deleter
    /// is called, which the producer allows to be called from any thread; nothing else
    /// accesses that memory while the import lives except in ways ordered with this
    /// library's work on it (as for [`Context::array_from_raw`]), and no other array of this
    /// library wraps it.
    pub unsafe fn from_dlpack<T: Element>(
        &self,
        tensor: *mut DLManagedTensorVersioned,
    ) -> Result<DlpackArray<T, B>> {
        const CALL: &str = "Context::from_dlpack";
        // SAFETY: the caller's contract: null or a live managed tensor.
        let t = unsafe { versioned(CALL, tensor) }?;
        let read_only = t.flags & FLAG_READ_ONLY != 0;
        // SAFETY: as above.
        unsafe { self.import(CALL, &t.dl_tensor, read_only, Handle::Versioned(tensor)) }
    }

    /// [`Context::from_dlpack`] for the legacy unversioned form (`DLManagedTensor`, which
    /// has no version and no read-only flag).
    ///
    /// # Safety
    ///
    /// As for [`Context::from_dlpack`], for a `DLManagedTensor`.
    pub unsafe fn from_dlpack_legacy<T: Element>(
        &self,
        tensor: *mut DLManagedTensor,
    ) -> Result<DlpackArray<T, B>> {
        const CALL: &str = "Context::from_dlpack_legacy";
        if tensor.is_null() {
            return Err(invalid(CALL, "tensor", "a null pointer".into()));
        }
        // SAFETY: the caller's contract: a live managed tensor.
        let t = unsafe { &*tensor };
        // SAFETY: as above.
        unsafe { self.import(CALL, &t.dl_tensor, false, Handle::Legacy(tensor)) }
    }

    /// Copies a DLPack 1.x tensor in host memory (`kDLCPU` or `kDLCUDAHost`) of any strides
    /// (a transposed or sliced NumPy array, say) into a new compact array of this context,
    /// and gives the tensor back to its producer at once (its deleter is called before this
    /// returns); returns the array and the tensor's shape. The checks are
    /// [`Context::from_dlpack`]'s, less contiguity and alignment (the elements are read
    /// unaligned: a NumPy view at an odd byte offset is copied), plus strides whose offsets overflow
    /// (span more than `isize::MAX` bytes or wrap the address space:
    /// [`Error::InvalidArgument`], `strides`, before anything is read); device memory of
    /// another device is [`Error::InvalidArgument`] (`device`). On error the caller still
    /// owns the tensor.
    ///
    /// # Safety
    ///
    /// As for [`Context::from_dlpack`]; the strides (in elements) address only the
    /// producer's memory for every index of the shape.
    pub unsafe fn from_dlpack_copy<T: Element>(
        &self,
        tensor: *mut DLManagedTensorVersioned,
    ) -> Result<(GpuArray<T, B>, Vec<usize>)> {
        const CALL: &str = "Context::from_dlpack_copy";
        // SAFETY: the caller's contract: null or a live managed tensor.
        let t = unsafe { versioned(CALL, tensor) }?;
        // SAFETY: as above.
        let copied = unsafe { self.copy_host::<T>(CALL, &t.dl_tensor) }?;
        // SAFETY: the contract: the producer's live tensor, released once, here (the data
        // is copied).
        unsafe { release(tensor) };
        Ok(copied)
    }

    /// [`Context::from_dlpack_copy`] for the legacy unversioned form (`DLManagedTensor`:
    /// what NumPy before 2.1, JAX and older producers give).
    ///
    /// # Safety
    ///
    /// As for [`Context::from_dlpack_copy`], for a `DLManagedTensor`.
    pub unsafe fn from_dlpack_copy_legacy<T: Element>(
        &self,
        tensor: *mut DLManagedTensor,
    ) -> Result<(GpuArray<T, B>, Vec<usize>)> {
        const CALL: &str = "Context::from_dlpack_copy_legacy";
        if tensor.is_null() {
            return Err(invalid(CALL, "tensor", "a null pointer".into()));
        }
        // SAFETY: the caller's contract: a live managed tensor.
        let t = unsafe { &*tensor };
        // SAFETY: as above.
        let copied = unsafe { self.copy_host::<T>(CALL, &t.dl_tensor) }?;
        // SAFETY: as in `from_dlpack_copy`.
        unsafe { release(tensor) };
        Ok(copied)
    }

    /// The copy of [`Context::from_dlpack_copy`] (either form): checks `dt` and copies the
    /// host memory it describes into a new compact array; releases nothing.
    ///
    /// # Safety
    ///
    /// `dt` is the tensor of a live managed tensor under [`Context::from_dlpack_copy`]'s
    /// contract.
    unsafe fn copy_host<T: Element>(
        &self,
        call: &'static str,
        dt: &DLTensor,
    ) -> Result<(GpuArray<T, B>, Vec<usize>)> {
        if !matches!(dt.device.device_type, DL_CPU | DL_CUDA_HOST) {
            return Err(invalid(
                call,
                "device",
                format!(
                    "DLPack device type {}: only host memory (kDLCPU, kDLCUDAHost) is copied here",
                    dt.device.device_type
                ),
            ));
        }
        // SAFETY: the caller's contract.
        let layout = unsafe { layout::<T>(call, dt, false) }?;
        let mut host: Vec<T> = Vec::new();
        if layout.len > 0 {
            let base = layout.start as *const T;
            let strides: Vec<i64> = match &layout.strides {
                Some(s) => s.clone(),
                None => compact_strides(&layout.shape),
            };
            // Before anything is allocated or read: the loop below reads through the strides.
            check_reach::<T>(call, layout.start, &layout.shape, &strides)?;
            // A valid tensor can still be more than the host can hold (a zero stride
            // broadcasts one element to any length): out of memory, not an abort.
            host.try_reserve_exact(layout.len)
                .map_err(|e| Error::OutOfMemory {
                    backend: "host",
                    requested: layout.len.saturating_mul(std::mem::size_of::<T>()),
                    detail: format!("{call}: the tensor's host copy: {e}"),
                })?;
            let mut index = vec![0usize; layout.shape.len()];
            for _ in 0..layout.len {
                // `check_reach` bounded every offset and partial sum: none overflows.
                let off: isize = index
                    .iter()
                    .zip(&strides)
                    .map(|(&i, &st)| i as isize * st as isize)
                    .sum();
                // SAFETY: the caller's contract: every index of the shape, through the
                // strides, addresses an element of the producer's live host memory (not
                // necessarily aligned: read as bytes).
                host.push(unsafe { base.offset(off).read_unaligned() });
                for k in (0..index.len()).rev() {
                    index[k] += 1;
                    if index[k] < layout.shape[k] {
                        break;
                    }
                    index[k] = 0;
                }
            }
        }
        Ok((self.alloc_upload(&host)?, layout.shape))
    }

    /// Checks `t` and wraps its memory.
    ///
    /// # Safety
    ///
    /// `t` is the `DLTensor` of a live managed tensor under the import contract.
    unsafe fn import<T: Element>(
        &self,
        call: &'static str,
        t: &DLTensor,
        read_only: bool,
        handle: Handle,
    ) -> Result<DlpackArray<T, B>> {
        let backend = self.backend();
        let dev = t.device;
        let ours = match backend.name() {
            "cpu" => matches!(dev.device_type, DL_CPU | DL_CUDA_HOST),
            "cuda" => {
                matches!(dev.device_type, DL_CUDA | DL_CUDA_MANAGED)
                    && usize::try_from(dev.device_id).ok() == Some(backend.device_id())
            }
            _ => false,
        };
        // The type is checked first (a tensor of another type is refused the same way on
        // every device).
        // SAFETY: the caller's contract.
        let layout = unsafe { layout::<T>(call, t, true) }?;
        if !ours {
            return Err(invalid(
                call,
                "device",
                format!(
                    "DLPack device type {} id {} is not this context's ({} device {})",
                    dev.device_type,
                    dev.device_id,
                    backend.name(),
                    backend.device_id()
                ),
            ));
        }
        if let Some(strides) = &layout.strides {
            if layout.len > 0 && *strides != compact_strides(&layout.shape) {
                let extents: Vec<usize> = layout.shape.clone();
                if strides
                    .iter()
                    .zip(&compact_strides(&layout.shape))
                    .zip(&extents)
                    .any(|((&s, &c), &e)| e != 1 && s != c)
                {
                    return Err(invalid(
                        call,
                        "strides",
                        format!(
                            "not contiguous: strides {strides:?} for shape {extents:?} (copy it \
                             into a compact row-major tensor first: `Context::from_dlpack_copy` \
                             for host memory)"
                        ),
                    ));
                }
            }
        }
        let ptr = match backend.name() {
            "cuda" => RawPtr::Cuda(layout.start as u64),
            _ => RawPtr::Host(layout.start as *mut u8),
        };
        // SAFETY: the import contract covers `array_from_raw`'s: `len` elements of `T` at
        // `start` (checked aligned), on this context's device, kept alive until the deleter
        // is called, which the allocation does once it is dropped and its work is done.
        let mut array = unsafe { self.array_from_raw::<T>(ptr, layout.len) }?;
        array.keep_until_freed(Box::new(Release(handle)));
        Ok(DlpackArray {
            array,
            shape: layout.shape,
            read_only,
        })
    }
}

/// The managed tensor at `tensor`: a null pointer, or a major version other than 1, is
/// [`Error::InvalidArgument`] naming `call`.
///
/// # Safety
///
/// `tensor` is null or a live managed tensor, unchanged while the reference is used.
unsafe fn versioned<'a>(
    call: &'static str,
    tensor: *mut DLManagedTensorVersioned,
) -> Result<&'a DLManagedTensorVersioned> {
    if tensor.is_null() {
        return Err(invalid(call, "tensor", "a null pointer".into()));
    }
    // SAFETY: the caller's contract: a live managed tensor.
    let t = unsafe { &*tensor };
    if t.version.major != 1 {
        return Err(invalid(
            call,
            "tensor",
            format!(
                "DLPack {}.{}: this library reads major version 1",
                t.version.major, t.version.minor
            ),
        ));
    }
    Ok(t)
}

/// What a tensor's fields say, checked: its shape, element count, first element's address
/// and strides (`None`: compact).
struct Layout {
    shape: Vec<usize>,
    len: usize,
    start: usize,
    strides: Option<Vec<i64>>,
}

/// Checks the element type, dimensions, extents, data pointer and (where `aligned`)
/// alignment of `t`.
///
/// # Safety
///
/// `t`'s `shape` and `strides` (where not null) hold `ndim` values.
unsafe fn layout<T: Element>(call: &'static str, t: &DLTensor, aligned: bool) -> Result<Layout> {
    let (dtype, want) = (t.dtype, dl_dtype(T::DTYPE));
    if dtype != want {
        return Err(invalid(
            call,
            "dtype",
            format!(
                "the tensor's type (code {}, {} bits, {} lanes) is not {}",
                dtype.code,
                dtype.bits,
                dtype.lanes,
                T::DTYPE
            ),
        ));
    }
    let ndim = usize::try_from(t.ndim)
        .map_err(|_| invalid(call, "ndim", format!("{} dimensions", t.ndim)))?;
    let extents: &[i64] = if ndim == 0 {
        &[]
    } else if t.shape.is_null() {
        return Err(invalid(
            call,
            "shape",
            "a null shape with dimensions".into(),
        ));
    } else {
        // SAFETY: the caller's contract: `ndim` extents at `shape`.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let mut shape = Vec::with_capacity(ndim);
    let mut len = 1usize;
    for &e in extents {
        let e = usize::try_from(e)
            .map_err(|_| invalid(call, "shape", format!("a negative extent {e}")))?;
        len = len
            .checked_mul(e)
            .ok_or_else(|| invalid(call, "shape", format!("{extents:?} overflows")))?;
        shape.push(e);
    }
    // The bytes must fit too: `from_dlpack_copy` allocates them.
    byte_len::<T>(call, len)?;
    let strides = if t.strides.is_null() || ndim == 0 {
        None
    } else {
        // SAFETY: the caller's contract: `ndim` strides at `strides`.
        Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) }.to_vec())
    };
    let size = std::mem::size_of::<T>();
    let offset = usize::try_from(t.byte_offset)
        .map_err(|_| invalid(call, "byte_offset", format!("{}", t.byte_offset)))?;
    let start = (t.data as usize).checked_add(offset).ok_or_else(|| {
        invalid(
            call,
            "byte_offset",
            format!("{offset} past the data pointer overflows"),
        )
    })?;
    if len > 0 && t.data.is_null() {
        return Err(invalid(
            call,
            "data",
            format!("a null pointer with {len} elements"),
        ));
    }
    if aligned && start % size != 0 {
        return Err(invalid(
            call,
            "data",
            format!(
                "address {start:#x} is not aligned to {} ({size} bytes)",
                T::DTYPE
            ),
        ));
    }
    Ok(Layout {
        shape,
        len,
        start,
        strides,
    })
}

/// Checks that the elements `strides` address from `start` (a tensor with elements) lie in
/// one span of at most `isize::MAX` bytes that does not wrap the address space, so that no
/// offset computed from them overflows: [`Error::InvalidArgument`] (`strides`) otherwise.
fn check_reach<T: Element>(
    call: &'static str,
    start: usize,
    shape: &[usize],
    strides: &[i64],
) -> Result<()> {
    let size = std::mem::size_of::<T>() as i128;
    // The lowest and the end of the highest byte reached, relative to `start`.
    let span = || -> Option<(i128, i128)> {
        let (mut lo, mut hi) = (0i128, 0i128);
        for (&e, &s) in shape.iter().zip(strides) {
            let r = (e as i128 - 1).checked_mul(i128::from(s))?;
            if r < 0 {
                lo = lo.checked_add(r)?;
            } else {
                hi = hi.checked_add(r)?;
            }
        }
        Some((lo.checked_mul(size)?, hi.checked_add(1)?.checked_mul(size)?))
    };
    let start = start as i128;
    match span() {
        Some((lo, hi))
            if hi - lo <= isize::MAX as i128
                && start + lo >= 0
                && start + hi <= usize::MAX as i128 + 1 =>
        {
            Ok(())
        }
        _ => Err(invalid(
            call,
            "strides",
            format!("strides {strides:?} for shape {shape:?} reach outside the address space"),
        )),
    }
}

/// The strides, in elements, of a compact row-major tensor of `shape`.
fn compact_strides(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for (s, &e) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step = step.saturating_mul(e as i64);
    }
    strides
}

fn invalid(op: &'static str, arg: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, arg, message }
}
