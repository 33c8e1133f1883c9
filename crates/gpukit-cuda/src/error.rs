//! The CUDA backend's own errors, and how every `CUresult` becomes a `gpukit_core::Error`.
//!
//! Every driver call is a wrapper in [`crate::driver`] that fails with the call's name and
//! its `CUresult`; [`Device::check`](crate::device::Device::check) turns that into the error
//! naming the call. A failed call keeps the driver's code as data:
//! [`gpukit_core::Error::Status`] with `api: "cuda-driver"` and the `CUresult`'s value, name and
//! description ([`driver_result`] matches it against a `CUresult`; cuBLAS statuses likewise
//! with `api: "cublas"`). Errors that leave the context unusable (an illegal address, a
//! failed launch, an assertion in a kernel: CUDA calls them sticky) poison the backend: that
//! call and every later one return [`gpukit_core::Error::Poisoned`], whose source is the
//! first sticky error with its code.

use cudarc::driver::sys::CUresult;
use gpukit_core::Error;

/// What can go wrong inside the CUDA backend.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// CUDA is unusable here: the probe's reason, or a library that would not load.
    #[error("{0}")]
    Unavailable(String),
    /// A driver call failed.
    #[error("{call} failed with {name} ({}): {message}", *result as u32)]
    Driver {
        /// The call (`cuMemAlloc`, ...).
        call: &'static str,
        /// The driver's result code.
        result: CUresult,
        /// The `CUresult` name.
        name: String,
        /// The driver's description.
        message: String,
    },
    /// The device is out of memory.
    #[error("{call}: {requested} bytes requested, {free} of {total} bytes free")]
    OutOfMemory {
        /// The allocating call.
        call: &'static str,
        /// Bytes asked for.
        requested: usize,
        /// Free device memory when it failed.
        free: usize,
        /// Total device memory.
        total: usize,
    },
    /// An earlier error left the context unusable; the first one is the source.
    #[error("the context is unusable after an earlier fatal error")]
    Poisoned {
        /// The first sticky error, with its call and code.
        #[source]
        first: Box<CudaError>,
    },
    /// A kernel did not compile or load.
    #[error("kernel `{kernel}`: {log}")]
    Compile {
        /// The kernel.
        kernel: String,
        /// The compiler's or loader's message.
        log: String,
    },
    /// A launch the device refused.
    #[error("kernel `{kernel}`: {reason}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// Why.
        reason: String,
    },
    /// A cuBLAS call failed.
    #[error("{call} failed with {name} ({status}): {message}")]
    Cublas {
        /// The call.
        call: &'static str,
        /// The `cublasStatus_t` value.
        status: u32,
        /// The status's name.
        name: String,
        /// cuBLAS's description.
        message: String,
    },
}

impl From<CudaError> for Error {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Unavailable(reason) => Error::Unavailable {
                backend: "cuda",
                reason,
            },
            CudaError::Driver {
                call,
                result,
                name,
                message,
            } => Error::Status {
                api: "cuda-driver",
                call,
                code: i64::from(result as u32),
                name,
                message,
            },
            CudaError::OutOfMemory {
                call,
                requested,
                free,
                total,
            } => Error::OutOfMemory {
                backend: "cuda",
                requested,
                detail: format!("{call}: {free} of {total} bytes free"),
            },
            CudaError::Poisoned { first } => Error::Poisoned {
                first: Box::new(Error::from(*first)),
            },
            CudaError::Compile { kernel, log } => Error::KernelCompile { kernel, log },
            CudaError::Launch { kernel, reason } => Error::InvalidLaunch { kernel, reason },
            CudaError::Cublas {
                call,
                status,
                name,
                message,
            } => Error::Status {
                api: "cublas",
                call,
                code: i64::from(status),
                name,
                message,
            },
        }
    }
}

/// Whether `err` is (or wraps, through [`Error::Deferred`] and [`Error::Poisoned`]) a failed
/// CUDA driver call that returned `result`.
///
/// ```
/// use gpukit::cuda::{driver_result, CUresult};
///
/// let err = gpukit::Error::Status {
///     api: "cuda-driver",
///     call: "cuMemAlloc",
///     code: CUresult::CUDA_ERROR_INVALID_VALUE as i64,
///     name: "CUDA_ERROR_INVALID_VALUE".into(),
///     message: "invalid argument".into(),
/// };
/// assert!(driver_result(&err, CUresult::CUDA_ERROR_INVALID_VALUE));
/// assert!(!driver_result(&err, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
/// ```
pub fn driver_result(err: &Error, result: CUresult) -> bool {
    matches!(
        err.root(),
        Error::Status { api: "cuda-driver", code, .. } if *code == i64::from(result as u32)
    )
}

/// `(name, description)` of a `CUresult`, from the driver.
pub(crate) fn describe(r: CUresult) -> (String, String) {
    gpukit_cuda_sys::probe::error_text(r)
}

/// Whether `r` leaves the context unusable: after one of these every later call on the
/// context fails, so the backend poisons itself.
pub(crate) fn is_sticky(r: CUresult) -> bool {
    matches!(
        r,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
    )
}

/// Whether a module load failed because of the code itself (not the machine).
pub(crate) fn is_bad_image(r: CUresult) -> bool {
    matches!(
        r,
        CUresult::CUDA_ERROR_INVALID_PTX
            | CUresult::CUDA_ERROR_INVALID_IMAGE
            | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
            | CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            | CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND
            | CUresult::CUDA_ERROR_INVALID_SOURCE
            | CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_core_variants() {
        let oom: gpukit_core::Error = CudaError::OutOfMemory {
            call: "cuMemAlloc",
            requested: 10,
            free: 1,
            total: 2,
        }
        .into();
        assert!(matches!(
            oom,
            gpukit_core::Error::OutOfMemory {
                backend: "cuda",
                requested: 10,
                ..
            }
        ));
        let driver = CudaError::Driver {
            call: "cuLaunchKernel",
            result: CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            message: "an illegal memory access was encountered".into(),
        };
        let p: gpukit_core::Error = CudaError::Poisoned {
            first: Box::new(driver),
        }
        .into();
        // The code survives the poisoning and both wrappers.
        assert!(driver_result(&p, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
        let deferred = gpukit_core::Error::Deferred {
            origin: "Stream drop",
            source: Box::new(p.clone()),
        };
        assert!(driver_result(
            &deferred,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        ));
        assert!(!driver_result(
            &deferred,
            CUresult::CUDA_ERROR_LAUNCH_FAILED
        ));
        match p {
            gpukit_core::Error::Poisoned { first } => assert!(matches!(
                *first,
                gpukit_core::Error::Status {
                    api: "cuda-driver",
                    code: 700,
                    call: "cuLaunchKernel",
                    ..
                }
            )),
            other => panic!("expected Poisoned, got {other:?}"),
        }
        let l: gpukit_core::Error = CudaError::Launch {
            kernel: "k".into(),
            reason: "r".into(),
        }
        .into();
        assert!(matches!(l, gpukit_core::Error::InvalidLaunch { .. }));
    }

    #[test]
    fn sticky_errors_are_the_fatal_ones() {
        assert!(is_sticky(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(!is_sticky(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!is_sticky(CUresult::CUDA_ERROR_INVALID_VALUE));
        assert!(is_bad_image(CUresult::CUDA_ERROR_INVALID_PTX));
    }
}
