//! DLPack's Python protocol: capsules out (`Array.__dlpack__`) and in
//! (`Context.from_dlpack`), with the stream handshake.
//!
//! A capsule named `"dltensor_versioned"` (DLPack 1.x) or `"dltensor"` (legacy) holds a
//! managed tensor; the consumer renames it `"used_..."` when it takes the tensor over, and
//! a capsule destroyed before that gives the tensor back through its deleter.

use std::ffi::{c_void, CStr};

use gpukit::core::dlpack::{
    dl_dtype, DLManagedTensor, DLManagedTensorVersioned, DLTensor, Managed, DL_CPU, DL_CUDA,
    DL_CUDA_HOST, DL_CUDA_MANAGED, FLAG_IS_COPIED,
};
use gpukit::{DType, DeviceRead, Error, RawStream};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::array::{Array, Held, Made, Slot, Span};
use crate::element::{by_dtype, PyElement};
use crate::error::buffer_err;
use crate::stream::On;

/// The calls whose errors this module raises.
const EXPORT: &str = "Array.__dlpack__";
const IMPORT: &str = "Context.from_dlpack";

const VERSIONED: &CStr = c"dltensor_versioned";
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";
const LEGACY: &CStr = c"dltensor";
const USED_LEGACY: &CStr = c"used_dltensor";

/// The managed-tensor form an export makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Versioned,
    Legacy,
}

/// Calls the deleter of the managed tensor `t` (of type `M`), if it has one.
///
/// # Safety
///
/// `t` is a live `M` whose deleter has not been called, and is not used after.
unsafe fn give_back<M: Managed>(t: *mut c_void) {
    let t = t.cast::<M>();
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(delete) = (*t).deleter() {
            delete(t);
        }
    }
}

/// A capsule destructor's work: a tensor no consumer took (the capsule still has `name`:
/// a consumer renames it) goes back to its producer.
///
/// # Safety
///
/// `cap` is a live capsule that this module made with `name` over an `M`.
unsafe fn drop_unused<M: Managed>(cap: *mut ffi::PyObject, name: &CStr) {
    // SAFETY: a capsule still named `name` holds the managed tensor this module put there,
    // not taken by a consumer, so its deleter is called once, here.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, name.as_ptr()) == 1 {
            give_back::<M>(ffi::PyCapsule_GetPointer(cap, name.as_ptr()));
        }
    }
}

/// The destructor of a versioned capsule ([`drop_unused`]).
///
/// # Safety
///
/// `cap` is a live capsule (Python calls this once, as it frees it).
unsafe extern "C" fn drop_versioned(cap: *mut ffi::PyObject) {
    // SAFETY: Python's call on a capsule of this module's, made over a versioned tensor.
    unsafe { drop_unused::<DLManagedTensorVersioned>(cap, VERSIONED) }
}

/// The destructor of a legacy capsule ([`drop_unused`]).
///
/// # Safety
///
/// As for [`drop_versioned`].
unsafe extern "C" fn drop_legacy(cap: *mut ffi::PyObject) {
    // SAFETY: as in `drop_versioned`, over a legacy tensor.
    unsafe { drop_unused::<DLManagedTensor>(cap, LEGACY) }
}

/// The consumer's CUDA stream (its handle's address) of `__dlpack__(stream=...)`: `None`
/// where the host waits instead.
fn consumer_stream(a: &Array, stream: Option<i64>) -> PyResult<Option<usize>> {
    let backend = a.ctx.backend_name();
    match (backend, stream) {
        (_, Some(-1)) => Ok(None),
        // `CU_STREAM_LEGACY`.
        ("cuda", None | Some(1)) => Ok(Some(1)),
        ("cuda", Some(0)) => Err(PyBufferError::new_err(
            "Array.__dlpack__: stream=0 is ambiguous in DLPack's protocol (1: the legacy \
             default stream, 2: the per-thread one)",
        )),
        ("cuda", Some(s)) if s > 0 => Ok(Some(s as usize)),
        (_, None) => Ok(None),
        (_, Some(s)) => Err(PyBufferError::new_err(format!(
            "Array.__dlpack__: stream={s} on a {backend} array (DLPack's protocol: None or -1 \
             for host memory, a positive int for CUDA)"
        ))),
    }
}

/// `Array.__dlpack__`.
pub(crate) fn export<'py>(
    py: Python<'py>,
    a: &Array,
    stream: Option<i64>,
    max_version: Option<(u32, u32)>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(want) = dl_device {
        if want != a.dl_device() {
            return Err(PyBufferError::new_err(format!(
                "Array.__dlpack__: dl_device={want:?}, the array is on {:?} (gpukit exports \
                 without moving between devices)",
                a.dl_device()
            )));
        }
    }
    let form = match max_version {
        Some((major, _)) if major >= 1 => Form::Versioned,
        _ => Form::Legacy,
    };
    if form == Form::Legacy && (a.read_only || copy == Some(true)) {
        return Err(PyBufferError::new_err(
            "Array.__dlpack__: a read-only array or a copy needs DLPack 1.x (the legacy form \
             has no flags): pass max_version=(1, 0)",
        ));
    }
    let consumer = consumer_stream(a, stream)?;
    let made = py
        .detach(|| -> gpukit::Result<Made> {
            let consumer = consumer.map(|s| RawStream::Cuda(s as *mut c_void));
            let held = a.mem.lock();
            let on = On::new(&a.ctx, &a.ctx);
            if copy == Some(true) {
                let c = held.copy(&on)?;
                drop(held);
                c.export(&on, &a.shape, form, consumer)
            } else {
                held.export(&on, &a.shape, form, consumer)
            }
        })
        .map_err(|e| buffer_err(EXPORT, e))?;
    // Where the memory is, now that another library can alias it (not for a copy's).
    if copy != Some(true) {
        a.mem.note_span(Span::of(made.tensor(), a.nbytes()));
    }
    type GiveBack = unsafe fn(*mut c_void);
    let (raw, name, destructor, back): (*mut c_void, &CStr, ffi::PyCapsule_Destructor, GiveBack) =
        match made {
            Made::Versioned(t) => {
                let raw = t.into_raw();
                if copy == Some(true) {
                    // SAFETY: our own export, not yet handed to anyone.
                    unsafe { (*raw).flags |= FLAG_IS_COPIED };
                }
                (
                    raw.cast(),
                    VERSIONED,
                    drop_versioned,
                    give_back::<DLManagedTensorVersioned>,
                )
            }
            Made::Legacy(t) => (
                t.into_raw().cast(),
                LEGACY,
                drop_legacy,
                give_back::<DLManagedTensor>,
            ),
        };
    // SAFETY: `raw` is a managed tensor of the capsule's name; the capsule owns it from here
    // (its destructor gives it back unless a consumer renamed the capsule).
    let cap = unsafe { ffi::PyCapsule_New(raw, name.as_ptr(), Some(destructor)) };
    if cap.is_null() {
        // No capsule: the tensor goes back at once.
        // SAFETY: `raw` is the live tensor made above, of `back`'s type, owned by nobody else.
        unsafe { back(raw) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, not null.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}

/// A managed tensor taken from a capsule, either form.
#[derive(Debug, Clone, Copy)]
enum Taken {
    Versioned(*mut DLManagedTensorVersioned),
    Legacy(*mut DLManagedTensor),
}

impl Taken {
    /// The capsule's managed tensor, left in the capsule (which still owns it).
    fn open(cap: &Bound<'_, PyAny>) -> PyResult<Taken> {
        let p = cap.as_ptr();
        // SAFETY: `p` is a live object; the checks accept only capsules of those names.
        unsafe {
            if ffi::PyCapsule_IsValid(p, VERSIONED.as_ptr()) == 1 {
                let t = ffi::PyCapsule_GetPointer(p, VERSIONED.as_ptr());
                return Ok(Taken::Versioned(t.cast()));
            }
            if ffi::PyCapsule_IsValid(p, LEGACY.as_ptr()) == 1 {
                let t = ffi::PyCapsule_GetPointer(p, LEGACY.as_ptr());
                return Ok(Taken::Legacy(t.cast()));
            }
        }
        Err(PyTypeError::new_err(format!(
            "Context.from_dlpack: __dlpack__ returned {}, not an unused DLPack capsule \
             (\"dltensor_versioned\" or \"dltensor\")",
            cap.repr()?
        )))
    }

    /// Marks the capsule used: its tensor is ours now (given back through its deleter by us).
    fn consume(cap: &Bound<'_, PyAny>, versioned: bool) {
        let name = if versioned {
            USED_VERSIONED
        } else {
            USED_LEGACY
        };
        // SAFETY: `cap` is the capsule `open` accepted; the new name is a static string.
        // Renaming a valid capsule does not fail.
        unsafe { ffi::PyCapsule_SetName(cap.as_ptr(), name.as_ptr()) };
    }

    fn tensor(&self) -> &DLTensor {
        // SAFETY: the capsule's live tensor (the producer's protocol), unchanged meanwhile.
        unsafe {
            match *self {
                Taken::Versioned(t) => &(*t).dl_tensor,
                Taken::Legacy(t) => &(*t).dl_tensor,
            }
        }
    }
}

/// How `Context.from_dlpack` takes a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Borrow it; `copy=None` copies host memory whose strides are not compact.
    Share { may_copy: bool },
    /// Borrow it, copy it into a new array on the device, give it back.
    DeviceCopy,
    /// Copy host memory into a new array (another device's context, or `copy=True`).
    HostCopy,
}

/// `Context.from_dlpack`.
pub(crate) fn import(
    py: Python<'_>,
    ctx: &gpukit::Context,
    x: &Bound<'_, PyAny>,
    copy: Option<bool>,
) -> PyResult<Array> {
    let no_protocol =
        |_| {
            PyTypeError::new_err(format!(
            "Context.from_dlpack: {} has no __dlpack__ / __dlpack_device__ (not a DLPack producer)",
            x.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
        };
    let (dev_type, dev_id): (i32, i32) = x
        .getattr("__dlpack_device__")
        .map_err(no_protocol)?
        .call0()?
        .extract()?;
    let backend = ctx.backend_name();
    let host = matches!(dev_type, DL_CPU | DL_CUDA_HOST);
    let ours = match backend {
        "cpu" => host,
        "cuda" => matches!(dev_type, DL_CUDA | DL_CUDA_MANAGED) && dev_id == ctx.device_id() as i32,
        _ => false,
    };
    let take = match (ours, host, copy) {
        (true, _, Some(true)) if !host => Take::DeviceCopy,
        (true, _, Some(true)) => Take::HostCopy,
        (true, _, c) => Take::Share {
            may_copy: host && c.is_none(),
        },
        (false, true, None | Some(true)) => Take::HostCopy,
        (false, _, _) => {
            return Err(PyBufferError::new_err(format!(
                "Context.from_dlpack: a tensor on DLPack device ({dev_type}, {dev_id}) cannot \
                 be shared with this {backend} context (device {}){}",
                ctx.device_id(),
                if host {
                    "; copy=None or copy=True copies it"
                } else {
                    ""
                }
            )))
        }
    };
    let kwargs = PyDict::new(py);
    if backend == "cuda" && matches!(dev_type, DL_CUDA | DL_CUDA_MANAGED) {
        // SAFETY: the handle goes to the producer, which only makes it wait for its own
        // work on the tensor (DLPack's protocol); the import's work runs on this stream.
        let raw = unsafe { ctx.raw_handle() };
        if let RawStream::Cuda(s) = raw {
            // A null handle is the legacy default stream: 1 in the protocol.
            kwargs.set_item("stream", if s.is_null() { 1 } else { s as usize })?;
        }
    }
    kwargs.set_item("max_version", (1, 1))?;
    let exported = match x.call_method("__dlpack__", (), Some(&kwargs)) {
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            // A producer from before DLPack 1.0 takes no `max_version`.
            kwargs.del_item("max_version")?;
            x.call_method("__dlpack__", (), Some(&kwargs))
        }
        other => other,
    };
    let cap = match exported {
        Ok(cap) => cap,
        Err(e) if e.is_instance_of::<PyBufferError>(py) => {
            // The producer cannot export it (NumPy before 2.1 refuses read-only arrays, its
            // legacy capsule having no flag for them): a NumPy array is copied by NumPy
            // where a copy is allowed, and the copy shared.
            let numpy_array = py
                .import("numpy")
                .and_then(|np| Ok((x.is_instance(&np.getattr("ndarray")?)?, np)));
            return match (copy, numpy_array) {
                (Some(false), _) => Err(PyBufferError::new_err(format!(
                    "{IMPORT}: the producer cannot export it ({e}), and copy=False forbids a \
                     copy: pass copy=None to copy it"
                ))),
                (_, Ok((true, np))) => {
                    let copied = np.call_method1("array", (x,))?;
                    import(py, ctx, &copied, Some(false))
                }
                _ => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let taken = Taken::open(&cap)?;
    let dt = taken.tensor().dtype;
    let dtype = DType::ALL
        .into_iter()
        .find(|&d| dl_dtype(d) == dt)
        .ok_or_else(|| {
            PyBufferError::new_err(format!(
                "{IMPORT}: the tensor holds {}, not one of gpukit's element types ({})",
                dl_type_name(dt.code, dt.bits, dt.lanes),
                DType::ALL
                    .into_iter()
                    .map(crate::element::numpy_name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let versioned = matches!(taken, Taken::Versioned(_));
    let consume = || Taken::consume(&cap, versioned);
    let (data, shape, span) =
        by_dtype!(dtype, T => take_typed::<T>(ctx, taken, take, &consume, copy))?;
    let mut array = Array::new(ctx, shape, data, span);
    // JAX's arrays are immutable, but its capsules carry no read-only flag (the legacy
    // form): a shared JAX array is read-only here too.
    array.read_only |= span.is_some() && from_jax(x);
    Ok(array)
}

/// What an import made: the array's memory, its shape, and where a shared tensor's bytes
/// are (to find arrays that overlap).
type Imported = (Box<dyn Held>, Vec<usize>, Option<Span>);

/// The typed import of `taken`; `consume` is called as soon as the tensor is ours. `copy` is
/// the caller's argument, which the errors mention.
fn take_typed<T: PyElement>(
    ctx: &gpukit::Context,
    taken: Taken,
    take: Take,
    consume: &dyn Fn(),
    copy: Option<bool>,
) -> PyResult<Imported> {
    let host_copy = |taken: Taken| -> PyResult<Imported> {
        // SAFETY: the capsule's live tensor (DLPack's protocol: the producer keeps it valid
        // until its deleter is called, from any thread); on success it has been given back.
        let copied = unsafe {
            match taken {
                Taken::Versioned(t) => ctx.from_dlpack_copy::<T>(t),
                Taken::Legacy(t) => ctx.from_dlpack_copy_legacy::<T>(t),
            }
        };
        let (a, shape) = copied.map_err(|e| buffer_err(IMPORT, e))?;
        consume();
        Ok((Box::new(Slot::Owned(a)), shape, None))
    };
    let share = || -> gpukit::Result<_> {
        // SAFETY: as above; the capsule's tensor is wrapped by nothing else, and the producer
        // no longer writes it unordered (the protocol: its stream work was ordered through
        // `stream=`, host producers have finished).
        unsafe {
            match taken {
                Taken::Versioned(t) => ctx.from_dlpack::<T>(t),
                Taken::Legacy(t) => ctx.from_dlpack_legacy::<T>(t),
            }
        }
    };
    match (take, taken) {
        (Take::HostCopy, _) => host_copy(taken),
        (take, _) => match share() {
            Ok(imported) => {
                consume();
                let shape = imported.shape().to_vec();
                if take == Take::DeviceCopy {
                    let mut out = ctx
                        .alloc::<T>(imported.len())
                        .map_err(|e| buffer_err(IMPORT, e))?;
                    ctx.copy(&imported, &mut out)
                        .map_err(|e| buffer_err(IMPORT, e))?;
                    return Ok((Box::new(Slot::Owned(out)), shape, None));
                }
                // The tensor's fields, checked by the import above.
                let bytes = imported.len() * std::mem::size_of::<T>();
                let span = Span::of(taken.tensor(), bytes);
                Ok((Box::new(Slot::Imported(imported)), shape, Some(span)))
            }
            // Memory the import cannot share as it is (strided, or not aligned to its
            // element type): copied where the caller allows a copy.
            Err(Error::InvalidArgument {
                arg: arg @ ("strides" | "data"),
                message,
                ..
            }) if arg == "strides" || message.contains("not aligned") => {
                if take == (Take::Share { may_copy: true }) {
                    return host_copy(taken);
                }
                let what = match arg {
                    "strides" => format!(
                        "the tensor is {}",
                        message.split(" (copy it").next().unwrap_or(&message)
                    ),
                    _ => format!("the tensor's {message}"),
                };
                Err(PyBufferError::new_err(match copy {
                    Some(false) => format!(
                        "{IMPORT}: {what}, and copy=False forbids a copy: pass copy=None (the \
                         default) to copy it, or make it contiguous first \
                         (numpy.ascontiguousarray(x))"
                    ),
                    _ => format!(
                        "{IMPORT}: {what}; gpukit copies such tensors from host memory only: \
                         make it contiguous first (x.contiguous() in PyTorch, \
                         cupy.ascontiguousarray(x))"
                    ),
                }))
            }
            Err(e) => Err(buffer_err(IMPORT, e)),
        },
    }
}

/// NumPy's name of a DLPack element type (`bool`, `int16`, `complex64`), else its codes.
fn dl_type_name(code: u8, bits: u8, lanes: u16) -> String {
    let kind = match code {
        0 => "int",
        1 => "uint",
        2 => "float",
        4 => "bfloat",
        5 => "complex",
        6 if bits == 8 => return "bool".to_owned(),
        _ => "",
    };
    match (kind, lanes) {
        ("", _) => format!("DLPack type code {code} of {bits} bits and {lanes} lanes"),
        (kind, 1) => format!("{kind}{bits}"),
        (kind, lanes) => format!("{kind}{bits} vectors of {lanes} lanes"),
    }
}

/// Whether `x` is a JAX array (its type's module is JAX's or jaxlib's).
fn from_jax(x: &Bound<'_, PyAny>) -> bool {
    x.get_type()
        .getattr("__module__")
        .and_then(|m| m.extract::<String>())
        .is_ok_and(|m| m == "jax" || m.starts_with("jax.") || m.starts_with("jaxlib"))
}
