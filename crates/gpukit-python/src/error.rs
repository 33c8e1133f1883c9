//! gpukit's errors as Python exceptions.

use gpukit::Error;
use pyo3::exceptions::{PyBufferError, PyException, PyMemoryError, PyValueError};
use pyo3::PyErr;

pyo3::create_exception!(
    gpukit,
    GpukitError,
    PyException,
    "An error of the device or the library (a failed kernel, a lost device, a backend that \
     is unavailable); the message names the call."
);

/// The exception for `e`: bad arguments are `ValueError`, running out of memory
/// `MemoryError`, anything else [`GpukitError`]; the message is the library's, which names
/// the call.
pub(crate) fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::InvalidArgument { .. }
        | Error::InvalidShape { .. }
        | Error::LengthMismatch { .. }
        | Error::OutOfRange { .. }
        | Error::SizeOverflow { .. }
        | Error::EmptyInput { .. }
        | Error::InvalidDeviceSpec { .. }
        | Error::ContextMismatch { .. } => PyValueError::new_err(message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        _ => GpukitError::new_err(message),
    }
}

/// The exception for `e` in DLPack's protocol: what cannot be exported or imported
/// (a backend without addressable memory, a device or layout the other side cannot take) is
/// `BufferError`, as the protocol asks; other errors as [`to_py`].
pub(crate) fn to_buffer_error(e: Error) -> PyErr {
    match e {
        Error::Unsupported { .. } | Error::InvalidArgument { .. } => {
            PyBufferError::new_err(e.to_string())
        }
        e => to_py(e),
    }
}
