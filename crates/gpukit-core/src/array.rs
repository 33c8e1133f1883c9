//! `GpuArray<T, B>`: a typed device array, and views of parts of it; `UnifiedArray<T, B>`,
//! one in unified memory.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::backend::{Backend, Location, RawPtr};
use crate::element::{byte_len, Element};
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::track::{Access, Alloc, SliceRef};

pub(crate) mod sealed {
    /// Only the workspace's arrays and views are device memory: ops rely on `&mut` access
    /// to a [`super::DeviceWrite`] being exclusive.
    pub trait Sealed {}
}

/// Device memory an op may read: an array or a view of one.
pub trait DeviceRead<T: Element, B: Backend>: sealed::Sealed {
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The untyped range, for the safe layer.
    fn slice_ref(&self) -> SliceRef<'_, B>;

    /// The native address of the first element (a view's offset included), for interop;
    /// `None` when empty. [`crate::Stream::with_raw`] and [`crate::Stream::with_raw_mut`]
    /// order raw use against the library's streams for you; prefer them.
    ///
    /// # Safety
    ///
    /// The address itself is harmless; this is `unsafe` because whatever uses it bypasses
    /// the library's ordering and lifetime checks. The caller vouches that:
    /// - the memory is used only while this array lives (a view: while its array lives);
    /// - every access is ordered after the work the library queued on the array (call
    ///   [`crate::Stream::sync`] on the streams that used it, or [`crate::Context::sync`],
    ///   first), and the library queues no work on the array until the raw accesses are
    ///   done;
    /// - at most `len()` elements are accessed, and none through a read-only handle is
    ///   written.
    unsafe fn raw_ptr(&self) -> Option<RawPtr> {
        self.slice_ref().raw_ptr()
    }
}

/// Device memory an op may write: an array or a mutable view of one.
pub trait DeviceWrite<T: Element, B: Backend>: DeviceRead<T, B> {}

/// A typed array in device memory.
///
/// Freed on drop; the backend frees it only after the work already queued on it, so
/// dropping an array that a stream still uses is safe. The element type is fixed here, once:
/// the backend sees untyped bytes.
///
/// `{:?}` shows the element type, the length, the context's id and the device, never the
/// values, and never blocks; [`Stream::peek`] downloads the first few values.
pub struct GpuArray<T: Element, B: Backend> {
    alloc: Arc<Alloc<B>>,
    len: usize,
    _t: PhantomData<T>,
}

/// `Debug` of arrays and views: the element type's name, the length, the offset in the array
/// (views only), the context's id and the device (`cpu:0`, `cuda:1`). It shows no values:
/// reading them means a device copy that waits for queued writes and can fail, which a
/// `Debug` must not do; [`Stream::peek`] (`ctx.peek(&a, 8)?`) downloads the first few.
/// Never blocks: it reads only what the handle holds.
fn fmt_device_memory<T: Element, B: Backend>(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    alloc: &Alloc<B>,
    offset: Option<usize>,
    len: usize,
) -> std::fmt::Result {
    let home = &alloc.home;
    let mut d = f.debug_struct(name);
    d.field("dtype", &format_args!("{}", T::DTYPE.name()))
        .field("len", &len);
    if let Some(offset) = offset {
        d.field("offset", &offset);
    }
    d.field("context", &home.context_id())
        .field(
            "device",
            &format_args!("{}:{}", home.backend().name(), home.backend().device_id()),
        )
        .finish()
}

impl<T: Element, B: Backend> std::fmt::Debug for GpuArray<T, B> {
    /// `GpuArray { dtype: f32, len: 4, context: 1, device: cpu:0 }`; no values (see
    /// [`Stream::peek`]) and never blocks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_device_memory::<T, B>(f, "GpuArray", &self.alloc, None, self.len)
    }
}

fn range_of(
    op: &'static str,
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        (s, e) => Err(Error::OutOfRange {
            op,
            start: s.unwrap_or(usize::MAX),
            end: e.unwrap_or(usize::MAX),
            len,
        }),
    }
}

impl<T: Element, B: Backend> GpuArray<T, B> {
    /// An array of `len` elements (`bytes` bytes, already checked) over an allocation made
    /// elsewhere; see [`crate::Context::array_from_raw`].
    pub(crate) fn from_buffer(home: &Stream<B>, buf: B::Buffer, len: usize, bytes: usize) -> Self {
        GpuArray {
            alloc: Arc::new(Alloc::with_buffer(home, Some(buf), bytes)),
            len,
            _t: PhantomData,
        }
    }

    /// Keeps `keeper` alive until the array's memory is released: until this array, every
    /// view and every export of it are dropped and the work queued on it has finished.
    /// Only for a fresh array (from [`crate::Context::array_from_raw`]) nothing else shares.
    pub(crate) fn keep_until_freed(&mut self, keeper: Box<dyn std::any::Any + Send + Sync>) {
        match Arc::get_mut(&mut self.alloc) {
            Some(a) => a.keep_until_freed(keeper),
            None => unreachable!("a fresh array's allocation is not shared"),
        }
    }

    pub(crate) fn alloc(home: &Stream<B>, len: usize, zeroed: bool) -> Result<Self> {
        let bytes = byte_len::<T>("alloc", len)?;
        Ok(GpuArray {
            alloc: Alloc::new(home, bytes, zeroed)?,
            len,
            _t: PhantomData,
        })
    }

    /// A built-in op's scratch array of `len` uninitialised elements, also while `home`
    /// captures a graph ([`Alloc::scratch`]); errors name `call`.
    pub(crate) fn scratch(home: &Stream<B>, call: &'static str, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(call, len)?;
        Ok(GpuArray {
            alloc: Alloc::scratch(home, bytes)?,
            len,
            _t: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.alloc.bytes
    }

    /// The id of the context the array belongs to.
    pub fn context_id(&self) -> u64 {
        self.alloc.context_id()
    }

    /// The default stream of the array's context.
    pub fn home_stream(&self) -> &Stream<B> {
        &self.alloc.home
    }

    /// Copies the array to a new vector; waits for work queued on it (on any stream).
    /// [`Error::CaptureViolation`] while an open capture has written the array (its work
    /// has not run; see [`crate::Graph`]), as for every host read.
    pub fn download(&self) -> Result<Vec<T>> {
        let mut out = vec![T::default(); self.len];
        self.download_into(&mut out)?;
        Ok(out)
    }

    /// Copies the array into `dst`, which must have the same length; waits for the copy.
    /// Refused like [`GpuArray::download`] while an open capture has written the array.
    pub fn download_into(&self, dst: &mut [T]) -> Result<()> {
        self.alloc.home.download_blocking(self, dst)
    }

    /// Overwrites the array with `src`, which must have the same length; returns once the
    /// copy is done, after work queued earlier on the array.
    pub fn upload(&mut self, src: &[T]) -> Result<()> {
        let home = self.alloc.home.clone();
        home.upload_blocking(src, self)
    }

    /// Copies this array into `dst` (same length, same context) on the default stream.
    pub fn copy_to(&self, dst: &mut impl DeviceWrite<T, B>) -> Result<()> {
        self.alloc.home.copy(self, dst)
    }

    /// Copies this array into `dst`, an array or view of another context (another device),
    /// on the default stream of `dst`'s context: [`Stream::copy_peer`] there.
    ///
    /// ```
    /// use gpukit::{Context, DeviceSpec};
    ///
    /// let (gpu0, gpu1) = (Context::new(DeviceSpec::Cpu(Some(0)))?, Context::new(DeviceSpec::Cpu(Some(1)))?);
    /// let a = gpu0.alloc_upload(&[1u32, 2, 3])?;
    /// let mut b = gpu1.alloc_zeros::<u32>(3)?;
    /// a.copy_to_peer(&mut b)?;
    /// assert_eq!(b.download()?, [1, 2, 3]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn copy_to_peer(&self, dst: &mut impl DeviceWrite<T, B>) -> Result<()> {
        let home = dst.slice_ref().home().clone();
        home.copy_peer(self, dst)
    }

    /// A read-only view of `range`.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<GpuView<'_, T, B>> {
        let (start, end) = range_of("GpuArray::slice", range, self.len)?;
        Ok(GpuView {
            alloc: &self.alloc,
            offset: start,
            len: end - start,
            _t: PhantomData,
        })
    }

    /// A writable view of `range`.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<GpuViewMut<'_, T, B>> {
        let (start, end) = range_of("GpuArray::slice_mut", range, self.len)?;
        Ok(GpuViewMut {
            alloc: &self.alloc,
            offset: start,
            len: end - start,
            _t: PhantomData,
        })
    }

    /// The whole array as a writable view.
    pub fn as_view_mut(&mut self) -> GpuViewMut<'_, T, B> {
        GpuViewMut {
            alloc: &self.alloc,
            offset: 0,
            len: self.len,
            _t: PhantomData,
        }
    }

    /// Two writable views, `[0, mid)` and `[mid, len)`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(GpuViewMut<'_, T, B>, GpuViewMut<'_, T, B>)> {
        self.as_view_mut().into_split_at(mid)
    }
}

impl<T: Element, B: Backend> DeviceRead<T, B> for GpuArray<T, B> {
    fn len(&self) -> usize {
        self.len
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        self.alloc.slice(0, self.alloc.bytes)
    }
}

impl<T: Element, B: Backend> DeviceWrite<T, B> for GpuArray<T, B> {}
impl<T: Element, B: Backend> sealed::Sealed for UnifiedArray<T, B> {}

/// An array in unified (managed) memory ([`crate::Context::alloc_unified`]): ops, copies and
/// kernels use it as any array, and the host reads and writes it in place, as a slice,
/// once no queued work uses it: [`UnifiedArray::host`] and [`UnifiedArray::host_mut`] wait
/// for that work, and the borrow they return keeps new work off the array until it ends
/// (an op that writes the array needs `&mut`, one that reads it `&`).
///
/// It dereferences to its [`GpuArray`] (`slice`, `download`, `len`, ...). Unified memory is
/// outside the device pool and its counters. On CUDA it is `cuMemAllocManaged`; on the CPU,
/// plain memory; the Vulkan backend has none ([`crate::Error::Unsupported`]).
pub struct UnifiedArray<T: Element, B: Backend> {
    array: GpuArray<T, B>,
}

impl<T: Element, B: Backend> std::fmt::Debug for UnifiedArray<T, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_device_memory::<T, B>(f, "UnifiedArray", &self.array.alloc, None, self.array.len)
    }
}

impl<T: Element, B: Backend> std::ops::Deref for UnifiedArray<T, B> {
    type Target = GpuArray<T, B>;

    fn deref(&self) -> &GpuArray<T, B> {
        &self.array
    }
}

impl<T: Element, B: Backend> DeviceRead<T, B> for UnifiedArray<T, B> {
    fn len(&self) -> usize {
        self.array.len
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        self.array.slice_ref()
    }
}

impl<T: Element, B: Backend> DeviceWrite<T, B> for UnifiedArray<T, B> {}

impl<T: Element, B: Backend> UnifiedArray<T, B> {
    pub(crate) fn alloc(home: &Stream<B>, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("alloc_unified", len)?;
        let alloc = if bytes == 0 {
            Arc::new(Alloc::with_buffer(home, None, 0))
        } else {
            Alloc::unified(home, bytes)?
        };
        Ok(UnifiedArray {
            array: GpuArray {
                alloc,
                len,
                _t: PhantomData,
            },
        })
    }

    /// The elements, read in place on the host, once the last queued write of the array
    /// has finished (this waits for it; its error, if it failed).
    /// [`Error::CaptureViolation`] while an open capture has written the array (its work
    /// has not run; see [`crate::Graph`]).
    pub fn host(&self) -> Result<&[T]> {
        let ptr = self.host_ptr("UnifiedArray::host", Access::Read)?;
        // SAFETY: `host_ptr` returned the host address of the array's `len` elements of
        // unified memory (initialized: zeroed at allocation, then written only with `T`s)
        // after the queued writes finished; new writes need `&mut self`, which this borrow
        // excludes, and queued reads do not change the memory.
        Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), self.array.len) })
    }

    /// The elements, read and written in place on the host, once every queued use of the
    /// array has finished (this waits for them; their error, if one failed). Refused like
    /// [`UnifiedArray::host`] while an open capture has written the array (the slice can be
    /// read); one that only reads it does not stop host writes.
    pub fn host_mut(&mut self) -> Result<&mut [T]> {
        let ptr = self.host_ptr("UnifiedArray::host_mut", Access::Write)?;
        // SAFETY: as for `host`, after every queued use finished; `&mut self` excludes any
        // new use while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>(), self.array.len) })
    }

    /// The host address of the elements after the uses a host access must follow, for
    /// `call`. Both forms let the host read the elements: refused while an open capture
    /// has written the array.
    fn host_ptr(&self, call: &'static str, access: Access) -> Result<*mut u8> {
        let alloc = &self.array.alloc;
        alloc.home.shared_arc().check()?;
        alloc.host_readable(call)?;
        let Some(at) = self.array.slice_ref().at() else {
            return Ok(std::ptr::NonNull::<T>::dangling().as_ptr().cast());
        };
        alloc.wait_for_host(access)?;
        alloc
            .home
            .backend()
            .unified_ptr(at)
            .ok_or_else(|| Error::Unsupported {
                backend: alloc.home.backend().name(),
                what: "host access to this array (not unified memory)".into(),
            })
    }

    /// Queues a migration of the array to `to` on `stream` (a hint: the contents do not
    /// change), ordered as a read of the array: a prefetch to the device before the work
    /// that uses it, or to the host before reading it there, saves the page faults. A
    /// no-op on the CPU backend.
    pub fn prefetch(&self, stream: &Stream<B>, to: Location) -> Result<()> {
        let s = self.array.slice_ref();
        stream.enqueue(
            "UnifiedArray::prefetch",
            &[("array", &s, Access::Read)],
            || {
                let Some(at) = s.at() else { return Ok(()) };
                // SAFETY: the range is the whole of this live unified array; `enqueue` records
                // the prefetch as a use, so the memory is not freed before the stream passes it.
                unsafe { stream.backend().prefetch(stream.raw(), at, s.bytes(), to) }
            },
        )
    }

    /// The array, for what takes a [`GpuArray`] by reference.
    pub fn as_array(&self) -> &GpuArray<T, B> {
        &self.array
    }
}
impl<T: Element, B: Backend> sealed::Sealed for GpuArray<T, B> {}
impl<A: sealed::Sealed + ?Sized> sealed::Sealed for &A {}
impl<A: sealed::Sealed + ?Sized> sealed::Sealed for &mut A {}

/// A reference reads what it refers to, so that a list of borrowed arrays (one per device,
/// for a collective) is a list of device memory.
impl<T: Element, B: Backend, A: DeviceRead<T, B> + ?Sized> DeviceRead<T, B> for &A {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        (**self).slice_ref()
    }
}

impl<T: Element, B: Backend, A: DeviceRead<T, B> + ?Sized> DeviceRead<T, B> for &mut A {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        (**self).slice_ref()
    }
}

/// An exclusive reference writes what it refers to, exclusively.
impl<T: Element, B: Backend, A: DeviceWrite<T, B> + ?Sized> DeviceWrite<T, B> for &mut A {}
impl<T: Element, B: Backend> sealed::Sealed for GpuView<'_, T, B> {}
impl<T: Element, B: Backend> sealed::Sealed for GpuViewMut<'_, T, B> {}

/// A read-only view of part of a [`GpuArray`].
pub struct GpuView<'a, T: Element, B: Backend> {
    alloc: &'a Arc<Alloc<B>>,
    offset: usize,
    len: usize,
    _t: PhantomData<&'a [T]>,
}

impl<T: Element, B: Backend> Clone for GpuView<'_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element, B: Backend> Copy for GpuView<'_, T, B> {}

impl<T: Element, B: Backend> std::fmt::Debug for GpuView<'_, T, B> {
    /// `GpuView { dtype: f32, len: 2, offset: 1, context: 1, device: cpu:0 }`; no values
    /// (see [`Stream::peek`]) and never blocks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_device_memory::<T, B>(f, "GpuView", self.alloc, Some(self.offset), self.len)
    }
}

impl<'a, T: Element, B: Backend> GpuView<'a, T, B> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view's first element in its array.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// A view of `range` of this view.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<GpuView<'a, T, B>> {
        let (start, end) = range_of("GpuView::slice", range, self.len)?;
        Ok(GpuView {
            alloc: self.alloc,
            offset: self.offset + start,
            len: end - start,
            _t: PhantomData,
        })
    }

    /// Copies the view to a new vector; waits for work queued on it.
    pub fn download(&self) -> Result<Vec<T>> {
        let mut out = vec![T::default(); self.len];
        self.alloc.home.download_blocking(self, &mut out)?;
        Ok(out)
    }
}

impl<T: Element, B: Backend> DeviceRead<T, B> for GpuView<'_, T, B> {
    fn len(&self) -> usize {
        self.len
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        let size = std::mem::size_of::<T>();
        self.alloc.slice(self.offset * size, self.len * size)
    }
}

/// A writable view of part of a [`GpuArray`]; views from `split_at_mut` never overlap.
pub struct GpuViewMut<'a, T: Element, B: Backend> {
    alloc: &'a Arc<Alloc<B>>,
    offset: usize,
    len: usize,
    _t: PhantomData<&'a mut [T]>,
}

impl<T: Element, B: Backend> std::fmt::Debug for GpuViewMut<'_, T, B> {
    /// As [`GpuView`]'s: dtype, length, offset, context and device; no values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_device_memory::<T, B>(f, "GpuViewMut", self.alloc, Some(self.offset), self.len)
    }
}

impl<'a, T: Element, B: Backend> GpuViewMut<'a, T, B> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view's first element in its array.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// A read-only view of the same range.
    pub fn as_view(&self) -> GpuView<'_, T, B> {
        GpuView {
            alloc: self.alloc,
            offset: self.offset,
            len: self.len,
            _t: PhantomData,
        }
    }

    /// A writable view of `range` of this view.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<GpuViewMut<'_, T, B>> {
        let (start, end) = range_of("GpuViewMut::slice_mut", range, self.len)?;
        Ok(GpuViewMut {
            alloc: self.alloc,
            offset: self.offset + start,
            len: end - start,
            _t: PhantomData,
        })
    }

    /// Splits into `[0, mid)` and `[mid, len)`.
    pub fn into_split_at(self, mid: usize) -> Result<(GpuViewMut<'a, T, B>, GpuViewMut<'a, T, B>)> {
        if mid > self.len {
            return Err(Error::OutOfRange {
                op: "GpuViewMut::into_split_at",
                start: mid,
                end: mid,
                len: self.len,
            });
        }
        let left = GpuViewMut {
            alloc: self.alloc,
            offset: self.offset,
            len: mid,
            _t: PhantomData,
        };
        let right = GpuViewMut {
            alloc: self.alloc,
            offset: self.offset + mid,
            len: self.len - mid,
            _t: PhantomData,
        };
        Ok((left, right))
    }

    /// Overwrites the view with `src` (same length); returns once the copy is done.
    pub fn upload(&mut self, src: &[T]) -> Result<()> {
        let home = self.alloc.home.clone();
        home.upload_blocking(src, self)
    }

    /// Copies the view to a new vector; waits for work queued on it.
    pub fn download(&self) -> Result<Vec<T>> {
        self.as_view().download()
    }
}

impl<T: Element, B: Backend> DeviceRead<T, B> for GpuViewMut<'_, T, B> {
    fn len(&self) -> usize {
        self.len
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        let size = std::mem::size_of::<T>();
        self.alloc.slice(self.offset * size, self.len * size)
    }
}

impl<T: Element, B: Backend> DeviceWrite<T, B> for GpuViewMut<'_, T, B> {}
