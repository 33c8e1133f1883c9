//! gpukit's errors as Python exceptions: each names the Python call that raised it
//! (`Array.fill`, `Context.binary`) and says what went wrong in Python's terms.

use gpukit::Error;
use pyo3::exceptions::{PyBufferError, PyException, PyMemoryError, PyTypeError, PyValueError};
use pyo3::PyErr;

pyo3::create_exception!(
    gpukit,
    GpukitError,
    PyException,
    "An error of the device or the library (a failed kernel, a lost device, a backend that \
     is unavailable); the message names the call."
);

/// What the library says of `e`, without the Rust call it names (the Python call is put in
/// its place).
fn detail(e: &Error) -> String {
    match e {
        Error::LengthMismatch {
            arg, expected, got, ..
        } => format!("`{arg}` has {got} elements, expected {expected}"),
        Error::OutOfRange {
            start, end, len, ..
        } => format!("elements {start}..{end} are out of bounds for {len} elements"),
        Error::SizeOverflow {
            len, elem_bytes, ..
        } => format!("{len} elements of {elem_bytes} bytes overflow the address space"),
        Error::EmptyInput { .. } => "the input is empty and the op has no identity element".into(),
        Error::InvalidShape { arg, message, .. } | Error::InvalidArgument { arg, message, .. } => {
            format!("`{arg}`: {message}")
        }
        Error::ContextMismatch { arg, .. } => other_context(arg),
        e => e.to_string(),
    }
}

/// The exception for `e`, raised by the Python call `call`: bad arguments are `ValueError`,
/// an element type an op does not take `TypeError`, running out of memory `MemoryError`,
/// anything else [`GpukitError`].
pub(crate) fn py_err(call: &str, e: Error) -> PyErr {
    let message = format!("{call}: {}", detail(&e));
    match e {
        Error::InvalidArgument { .. }
        | Error::InvalidShape { .. }
        | Error::LengthMismatch { .. }
        | Error::OutOfRange { .. }
        | Error::SizeOverflow { .. }
        | Error::EmptyInput { .. }
        | Error::InvalidDeviceSpec { .. }
        | Error::InvalidDevice { .. }
        | Error::InvalidPriority { .. }
        | Error::ContextMismatch { .. } => PyValueError::new_err(message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        _ => GpukitError::new_err(message),
    }
}

/// The exception for `e` in DLPack's protocol, raised by `call`: what cannot be exported or
/// imported (a backend without addressable memory, a device or layout the other side cannot
/// take) is `BufferError`, as the protocol asks; other errors as [`py_err`].
pub(crate) fn buffer_err(call: &str, e: Error) -> PyErr {
    match e {
        Error::Unsupported { .. } | Error::InvalidArgument { .. } => {
            PyBufferError::new_err(format!("{call}: {}", detail(&e)))
        }
        e => py_err(call, e),
    }
}

/// What to say of the argument `arg`, an array of another context.
pub(crate) fn other_context(arg: &str) -> String {
    format!(
        "`{arg}` is an array of another gpukit.Context (copy it into this one with \
         ctx.from_dlpack(x, copy=True))"
    )
}

/// `TypeError` raised by `call` for a float-only op (`what`: "`exp`", "a random fill") asked
/// of the integer type `dtype`.
pub(crate) fn floats_only(call: &str, what: &str, dtype: gpukit::DType) -> PyErr {
    type_err(
        call,
        format!(
            "{what} takes floating-point arrays, this one holds {} (astype converts)",
            crate::element::numpy_name(dtype)
        ),
    )
}

/// A `TypeError` raised by `call`.
pub(crate) fn type_err(call: &str, message: impl std::fmt::Display) -> PyErr {
    PyTypeError::new_err(format!("{call}: {message}"))
}

/// A `ValueError` raised by `call`.
pub(crate) fn value_err(call: &str, message: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{call}: {message}"))
}
