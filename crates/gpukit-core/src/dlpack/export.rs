//! Exporting an array or view as a DLPack tensor that keeps the memory alive.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use super::{
    dl_dtype, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor, DL_CPU,
    DL_CUDA, DL_CUDA_HOST, FLAG_READ_ONLY, VERSION,
};
use crate::array::DeviceRead;
use crate::backend::{Backend, RawPtr, RawStream};
use crate::element::Element;
use crate::error::{Error, Rejected, Result};
use crate::host::HostBuffer;
use crate::stream::Stream;
use crate::track::{Access, Alloc};

/// What keeps an export's memory valid: an array's allocation, or a host buffer.
type Keeper = Box<dyn std::any::Any + Send + Sync>;

/// What an export owns: the managed struct the consumer sees (first, so that a pointer to
/// it is a pointer to this), the shape it points into, and what keeps the memory alive.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: Box<[i64]>,
    _keep: Keeper,
}

/// The deleter of a versioned export: frees the box the export was made in.
///
/// # Safety
///
/// `t` is the pointer an export handed out, passed once.
unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    // SAFETY: the caller's contract: `t` is the first field of a leaked `Box<Export<..>>`
    // (`repr(C)`), freed once, here.
    drop(unsafe { Box::from_raw(t.cast::<Export<DLManagedTensorVersioned>>()) });
}

/// The deleter of a legacy export (as [`delete_versioned`]).
///
/// # Safety
///
/// `t` is the pointer a legacy export handed out, passed once.
unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    // SAFETY: as in `delete_versioned`.
    drop(unsafe { Box::from_raw(t.cast::<Export<DLManagedTensor>>()) });
}

/// A DLPack managed tensor struct (versioned or legacy), as far as an owner needs it.
pub trait Managed {
    /// Its deleter.
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
}

impl Managed for DLManagedTensorVersioned {
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
}

impl Managed for DLManagedTensor {
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
}

/// An exported DLPack tensor, owned: dropping it calls its deleter (the array's memory is
/// released once the array, and every export, are gone); [`Exported::into_raw`] hands it to
/// a consumer, which calls the deleter once. [`DlpackTensor`] is the DLPack 1.x form,
/// [`DlpackLegacy`] the unversioned one.
#[derive(Debug)]
pub struct Exported<M: Managed> {
    raw: NonNull<M>,
}

/// An exported DLPack 1.x tensor (`DLManagedTensorVersioned`).
pub type DlpackTensor = Exported<DLManagedTensorVersioned>;
/// An exported legacy DLPack tensor (`DLManagedTensor`), for consumers that ask for it.
pub type DlpackLegacy = Exported<DLManagedTensor>;

// SAFETY: the tensor owns its export box exclusively; what the box holds (an `Arc` of an
// allocation, a shape) is `Send` and `Sync`.
unsafe impl<M: Managed> Send for Exported<M> {}

impl<M: Managed> Exported<M> {
    /// The managed tensor, for reading.
    pub fn managed(&self) -> &M {
        // SAFETY: the box lives until `self` is dropped or consumed.
        unsafe { self.raw.as_ref() }
    }

    /// Hands the tensor to a consumer, which must call its deleter exactly once.
    pub fn into_raw(self) -> *mut M {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }
}

impl<M: Managed> Drop for Exported<M> {
    fn drop(&mut self) {
        let raw = self.raw.as_ptr();
        // SAFETY: our own export, not handed out: its deleter, read from the live struct,
        // is called once, here.
        unsafe {
            if let Some(delete) = (*raw).deleter() {
                delete(raw);
            }
        }
    }
}

/// The tensor every export describes, before it is boxed.
struct Described {
    data: *mut c_void,
    device: DLDevice,
    shape: Box<[i64]>,
    keep: Keeper,
}

impl<B: Backend> Stream<B> {
    /// Exports `a` (an array or view of this stream's context) as a DLPack 1.x tensor of
    /// `shape` (row-major, compact; `&[a.len()]` for one dimension), sharing its memory:
    /// nothing is copied, and the tensor keeps the memory alive until its deleter is called
    /// (also after the array is dropped). `read_only` sets the flag that tells the consumer
    /// not to write it. Returns once the work queued on `a` (on any stream) has finished, so
    /// that a consumer on the host, or on a stream of its own, sees it complete; see
    /// [`Stream::to_dlpack_on`] for the stream handshake instead.
    ///
    /// Errors: a shape whose product is not `a.len()` is [`Error::InvalidArgument`]; a
    /// backend whose memory has no address to share (a wgpu buffer) is
    /// [`Error::Unsupported`]; an open capture that writes `a` is
    /// [`Error::CaptureViolation`].
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    /// let t = ctx.to_dlpack(&a, &[2, 3], false)?;
    /// let m = t.managed();
    /// assert_eq!((m.dl_tensor.ndim, m.version.major), (2, 1));
    /// // SAFETY: a CPU-backend export's data is host memory holding the six floats.
    /// let data = unsafe { std::slice::from_raw_parts(m.dl_tensor.data.cast::<f32>(), 6) };
    /// assert_eq!(data[5], 6.0);
    /// drop(a);                          // the export keeps the memory alive
    /// assert_eq!(unsafe { *m.dl_tensor.data.cast::<f32>() }, 1.0);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn to_dlpack<T: Element>(
        &self,
        a: &impl DeviceRead<T, B>,
        shape: &[usize],
        read_only: bool,
    ) -> Result<DlpackTensor> {
        let d = self.describe("Stream::to_dlpack", a, shape, None)?;
        Ok(DlpackTensor {
            raw: export_versioned::<T>(d, read_only),
        })
    }

    /// [`Stream::to_dlpack`] with the stream handshake of DLPack's Python protocol: instead
    /// of the host waiting, the consumer's stream `consumer` is made to wait (an event, on
    /// CUDA `cuStreamWaitEvent`) for the work queued on `a`; where the backend has no
    /// native streams ([`RawStream::None`]) the host waits.
    ///
    /// # Safety
    ///
    /// `consumer` is a live native stream of this context's device (for CUDA, a `CUstream`
    /// of its primary context), or [`RawStream::None`].
    pub unsafe fn to_dlpack_on<T: Element>(
        &self,
        a: &impl DeviceRead<T, B>,
        shape: &[usize],
        read_only: bool,
        consumer: RawStream,
    ) -> Result<DlpackTensor> {
        let d = self.describe("Stream::to_dlpack_on", a, shape, Some(consumer))?;
        Ok(DlpackTensor {
            raw: export_versioned::<T>(d, read_only),
        })
    }

    /// [`Stream::to_dlpack`] in the legacy unversioned form (`DLManagedTensor`, which has
    /// no read-only flag), for consumers that ask for it.
    pub fn to_dlpack_legacy<T: Element>(
        &self,
        a: &impl DeviceRead<T, B>,
        shape: &[usize],
    ) -> Result<DlpackLegacy> {
        let d = self.describe("Stream::to_dlpack_legacy", a, shape, None)?;
        let tensor = dl_tensor::<T>(&d);
        let b = Box::new(Export {
            managed: DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_legacy),
            },
            shape: d.shape,
            _keep: d.keep,
        });
        Ok(DlpackLegacy {
            raw: finish(
                b,
                |e| &mut e.managed.dl_tensor,
                |e, ctx| e.managed.manager_ctx = ctx,
            ),
        })
    }

    /// Checks an export and orders it: the host (or `consumer`) after the work queued on
    /// `a`, which this stream then counts as writing it (the consumer may).
    fn describe<T: Element>(
        &self,
        call: &'static str,
        a: &impl DeviceRead<T, B>,
        shape: &[usize],
        consumer: Option<RawStream>,
    ) -> Result<Described> {
        let dims = dims(call, shape, a.len())?;
        let s = a.slice_ref();
        s.host_readable(call)?;
        let backend = self.backend();
        let device = match (s.raw_ptr(), backend.name()) {
            (Some(RawPtr::Host(_)), _) | (None, "cpu") => DLDevice {
                device_type: DL_CPU,
                device_id: 0,
            },
            (Some(RawPtr::Cuda(_)), _) | (None, "cuda") => DLDevice {
                device_type: DL_CUDA,
                device_id: backend.device_id() as i32,
            },
            _ => {
                return Err(Error::Unsupported {
                    backend: backend.name(),
                    what: format!(
                        "{call}: the {} backend's memory has no address another library can \
                         use (download it, or copy it to a CPU-backend array, and export that)",
                        backend.name()
                    ),
                })
            }
        };
        let data = match s.raw_ptr() {
            Some(RawPtr::Host(p)) => p.cast::<c_void>(),
            Some(RawPtr::Cuda(addr)) => addr as usize as *mut c_void,
            _ => std::ptr::null_mut(),
        };
        // This stream after the work on `a` (as a write: the consumer may write), then the
        // consumer (or the host) after this stream.
        let ((), event) =
            self.enqueue_marked(call, &[("a", &s, Access::Write)], true, || Ok(()))?;
        if let Some(event) = event {
            match consumer {
                Some(raw) if raw != RawStream::None => backend.raw_stream_wait(raw, &event)?,
                _ => backend.event_sync(&event)?,
            }
        }
        let keep: Arc<Alloc<B>> = s.alloc_arc().clone();
        Ok(Described {
            data,
            device,
            shape: dims,
            keep: Box::new(keep),
        })
    }
}

/// `shape` as DLPack's extents, checked to hold `len` elements.
fn dims(call: &'static str, shape: &[usize], len: usize) -> Result<Box<[i64]>> {
    let bad = |message: String| Error::InvalidArgument {
        op: call,
        arg: "shape",
        message,
    };
    let elements = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| bad(format!("{shape:?} overflows")))?;
    if elements != len {
        return Err(bad(format!(
            "{shape:?} holds {elements} elements, the array {len}"
        )));
    }
    shape
        .iter()
        .map(|&d| i64::try_from(d).map_err(|_| bad(format!("{d} is over i64::MAX"))))
        .collect()
}

impl<T: Element, B: Backend> HostBuffer<T, B> {
    /// Exports this host buffer as a DLPack 1.x tensor of `shape` (row-major), moving the
    /// buffer into it: nothing is copied, and the memory goes back to the context's pinned
    /// pool once the consumer calls the deleter. Pinned memory of the CUDA backend is
    /// `kDLCUDAHost` (the device reads it directly; PyTorch sees a pinned CPU tensor), any
    /// other backend's `kDLCPU`. A buffer is never in a copy here (a copy owns it until its
    /// `Pending` is waited for), so nothing is waited for. `read_only` sets the flag that
    /// tells the consumer not to write it.
    ///
    /// Errors: a shape whose product is not the buffer's length is
    /// [`Error::InvalidArgument`] (`HostBuffer::into_dlpack`, `shape`), with the buffer
    /// given back in the [`Rejected`].
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut host = ctx.alloc_host::<f32>(6, gpukit::HostUse::Download)?;
    /// host.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// let t = host.into_dlpack(&[3, 2], false)?;
    /// assert_eq!(t.managed().dl_tensor.device.device_type, gpukit::core::dlpack::DL_CPU);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    // The buffer comes back by value, as `upload` and `download` give theirs (`Rejected<H>`).
    #[allow(clippy::result_large_err)]
    pub fn into_dlpack(
        self,
        shape: &[usize],
        read_only: bool,
    ) -> std::result::Result<DlpackTensor, Rejected<Self>> {
        let dims = match dims("HostBuffer::into_dlpack", shape, self.len()) {
            Ok(d) => d,
            Err(e) => return Err(Rejected::new(e, self)),
        };
        let backend = self.home().backend();
        let device = DLDevice {
            device_type: if backend.name() == "cuda" {
                DL_CUDA_HOST
            } else {
                DL_CPU
            },
            device_id: 0,
        };
        let data = self.as_ptr().cast_mut().cast::<c_void>();
        let d = Described {
            data,
            device,
            shape: dims,
            keep: Box::new(self),
        };
        Ok(DlpackTensor {
            raw: export_versioned::<T>(d, read_only),
        })
    }
}

/// The `DLTensor` of a described export (its shape pointer set once the export is boxed).
fn dl_tensor<T: Element>(d: &Described) -> DLTensor {
    DLTensor {
        data: d.data,
        device: d.device,
        ndim: d.shape.len() as i32,
        dtype: dl_dtype(T::DTYPE),
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

fn export_versioned<T: Element>(
    d: Described,
    read_only: bool,
) -> NonNull<DLManagedTensorVersioned> {
    let tensor = dl_tensor::<T>(&d);
    let b = Box::new(Export {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion { ..VERSION },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags: if read_only { FLAG_READ_ONLY } else { 0 },
            dl_tensor: tensor,
        },
        shape: d.shape,
        _keep: d.keep,
    });
    finish(
        b,
        |e| &mut e.managed.dl_tensor,
        |e, ctx| e.managed.manager_ctx = ctx,
    )
}

/// Leaks the export box with its tensor's shape pointer and `manager_ctx` set: the managed
/// struct's address (the box's, its first field) for the consumer.
fn finish<M>(
    b: Box<Export<M>>,
    tensor: impl Fn(&mut Export<M>) -> &mut DLTensor,
    set_ctx: impl Fn(&mut Export<M>, *mut c_void),
) -> NonNull<M> {
    let raw = Box::into_raw(b);
    // SAFETY: `raw` is the live box just leaked, used only here until handed out.
    let e = unsafe { &mut *raw };
    let shape = e.shape.as_mut_ptr();
    tensor(e).shape = shape;
    set_ctx(e, raw.cast::<c_void>());
    // SAFETY: a box's pointer is never null; `managed` is its first field (`repr(C)`).
    unsafe { NonNull::new_unchecked(raw.cast::<M>()) }
}
