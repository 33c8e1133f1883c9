//! Python's buffer protocol (PEP 3118: `memoryview(a)`, `bytes(a)`, `struct`, `array`) for
//! arrays in host memory, where the stable ABI the module targets has the buffer slots
//! (CPython 3.11 and later).
//!
//! A view is made as `__dlpack__` makes an export, after the array's queued work, and holds
//! a reference to the array (the protocol's `obj`), which keeps the memory alive until the
//! view is released.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::{self, NonNull};

use gpukit::DType;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::array::Array;
use crate::error::buffer_err;

/// The call a refused request names (Python's name of the protocol's method, PEP 688).
const CALL: &str = "Array.__buffer__";

/// The shape and strides a view's `Py_buffer` points at, until it is released.
struct Lent {
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

/// The `struct` module's format of an element type, in native order and size (`None`:
/// bfloat16, which has none).
fn format(dtype: DType) -> Option<&'static CStr> {
    Some(match dtype {
        DType::F32 => c"f",
        DType::F64 => c"d",
        DType::F16 => c"e",
        DType::I8 => c"b",
        DType::U8 => c"B",
        DType::I32 => c"i",
        DType::U32 => c"I",
        DType::I64 => c"q",
        DType::U64 => c"Q",
        DType::BF16 => return None,
    })
}

/// `BufferError` for a request the array cannot serve.
fn refuse(message: impl std::fmt::Display) -> PyErr {
    PyBufferError::new_err(format!("{CALL}: {message}"))
}

/// Whether `flags` asks for all of `want` (the protocol's flags include the ones they
/// imply).
fn asks(flags: c_int, want: c_int) -> bool {
    flags & want == want
}

/// The row-major strides, in bytes, of `shape` with elements of `itemsize` bytes.
fn c_strides(shape: &[usize], itemsize: usize) -> Vec<ffi::Py_ssize_t> {
    let mut strides = vec![0; shape.len()];
    let mut step = itemsize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = step as ffi::Py_ssize_t;
        step = step.saturating_mul(d);
    }
    strides
}

/// `Array.__getbuffer__`: fills `view` with the array's host memory, or raises
/// `BufferError` (leaving `view.obj` null, as the protocol asks of a failed request).
///
/// # Safety
///
/// `view` is the `Py_buffer` Python passes to the slot, valid for writes.
pub(crate) unsafe fn get(
    slf: Bound<'_, Array>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    // SAFETY: the caller's contract; `obj` stays null unless the request is served.
    unsafe { (*view).obj = ptr::null_mut() };
    let py = slf.py();
    let a = slf.get();
    let backend = a.ctx.backend_name();
    if backend != "cpu" {
        return Err(refuse(format!(
            "a {backend} array is in device memory, which the buffer protocol cannot share \
             (numpy.asarray(a) and a.to_numpy() copy it to the host)"
        )));
    }
    if asks(flags, ffi::PyBUF_WRITABLE) && a.read_only {
        return Err(refuse(
            "a writable buffer was asked of a read-only array (a.copy() gives a writable copy)",
        ));
    }
    // A consumer that asks for no format reads bytes.
    let format = if asks(flags, ffi::PyBUF_FORMAT) {
        let f = format(a.dtype).ok_or_else(|| {
            refuse(
                "bfloat16 has no buffer-protocol format (numpy.asarray(a) gives it to NumPy \
                 with ml_dtypes; __dlpack__ shares it)",
            )
        })?;
        f.as_ptr().cast_mut()
    } else {
        ptr::null_mut()
    };
    let ndim = a.shape.len();
    if ndim > ffi::PyBUF_MAX_NDIM {
        return Err(refuse(format!(
            "{ndim} dimensions, more than the buffer protocol's {}",
            ffi::PyBUF_MAX_NDIM
        )));
    }
    // Always C-contiguous; also Fortran-contiguous where at most one dimension exceeds 1, or
    // where there are no elements (as NumPy counts).
    let fortran = a.size() == 0 || a.shape.iter().filter(|&&d| d > 1).count() <= 1;
    if asks(flags, ffi::PyBUF_F_CONTIGUOUS) && !fortran {
        return Err(refuse(format!(
            "a Fortran-contiguous buffer was asked of a row-major array of shape {}",
            crate::array::shape_text(&a.shape)
        )));
    }
    let itemsize = a.dtype.size();
    let nbytes = a.nbytes();
    let (len, size) = (
        isize::try_from(nbytes).map_err(|_| refuse("the array's bytes overflow Py_ssize_t"))?,
        isize::try_from(itemsize).map_err(|_| refuse("the element's bytes overflow"))?,
    );
    // The address once the array's queued work is done (the host waits); the view's
    // reference to the array keeps the memory.
    let span = a.exported_span(py, None).map_err(|e| buffer_err(CALL, e))?;
    let data = if span.start == 0 {
        // No elements: a pointer no access follows, but not null.
        NonNull::<u64>::dangling().as_ptr().cast::<c_void>()
    } else {
        span.start as *mut c_void
    };
    let mut lent = Box::new(Lent {
        shape: a.shape.iter().map(|&d| d as ffi::Py_ssize_t).collect(),
        strides: c_strides(&a.shape, itemsize),
    });
    let nd = asks(flags, ffi::PyBUF_ND) && ndim > 0;
    let strided = asks(flags, ffi::PyBUF_STRIDES) && ndim > 0;
    // SAFETY: the caller's contract. The pointers stay valid until `release`: `shape` and
    // `strides` are the heap buffers of the `Lent` that `internal` owns (moving the box
    // does not move them), `format` is static, and `buf` is the array's memory, which lives
    // as long as the array: `obj` takes a reference of its own to it.
    unsafe {
        (*view).buf = data;
        (*view).len = len;
        (*view).readonly = c_int::from(a.read_only);
        (*view).itemsize = size;
        (*view).format = format;
        (*view).ndim = ndim as c_int;
        (*view).shape = if nd {
            lent.shape.as_mut_ptr()
        } else {
            ptr::null_mut()
        };
        (*view).strides = if strided {
            lent.strides.as_mut_ptr()
        } else {
            ptr::null_mut()
        };
        (*view).suboffsets = ptr::null_mut();
        (*view).internal = Box::into_raw(lent).cast::<c_void>();
        (*view).obj = slf.into_any().into_ptr();
    }
    Ok(())
}

/// `Array.__releasebuffer__`: frees what `get` lent the view (Python then drops `obj`).
///
/// # Safety
///
/// `view` is a `Py_buffer` that [`get`] filled, released once (Python's protocol).
pub(crate) unsafe fn release(view: *mut ffi::Py_buffer) {
    // SAFETY: `internal` is the `Lent` that `get` boxed there, taken once and cleared.
    unsafe {
        let lent = (*view).internal.cast::<Lent>();
        if !lent.is_null() {
            (*view).internal = ptr::null_mut();
            drop(Box::from_raw(lent));
        }
    }
}
