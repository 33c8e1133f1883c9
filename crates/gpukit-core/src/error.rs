//! The one error type of the workspace, and the slot that keeps errors raised in `Drop`.
//!
//! Every backend crate has its own small error enum that converts into [`Error`]; the
//! variants here are the contract every caller can match on, whatever the backend.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Result with the workspace's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a call into the workspace can fail with.
///
/// A failed call leaves its outputs untouched unless the variant's documentation says they
/// are undefined.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two arguments that must have matching lengths do not.
    #[error("{op}: `{arg}` has {got} elements, expected {expected}")]
    LengthMismatch {
        /// The call that was rejected.
        op: &'static str,
        /// The argument whose length is wrong.
        arg: &'static str,
        /// The length the call needed.
        expected: usize,
        /// The length it was given.
        got: usize,
    },

    /// A view's range does not lie inside its array.
    #[error("{op}: range {start}..{end} is out of bounds for length {len}")]
    OutOfRange {
        /// The call that was rejected.
        op: &'static str,
        /// First element of the requested range.
        start: usize,
        /// One past the last element of the requested range.
        end: usize,
        /// Length of the array or view the range was taken from.
        len: usize,
    },

    /// A size in elements does not fit in memory's address space (`len * size_of::<T>()`
    /// overflows or exceeds `isize::MAX`).
    #[error("{op}: {len} elements of {elem_bytes} bytes overflow the address space")]
    SizeOverflow {
        /// The call that was rejected.
        op: &'static str,
        /// The requested number of elements.
        len: usize,
        /// Size of one element in bytes.
        elem_bytes: usize,
    },

    /// The device (or, for the CPU backend, the host) cannot provide the memory.
    #[error("out of memory on the {backend} backend: {requested} bytes requested ({detail})")]
    OutOfMemory {
        /// Backend that ran out.
        backend: &'static str,
        /// Bytes the failed allocation asked for.
        requested: usize,
        /// What the backend knows: free and total memory, or the allocator's message.
        detail: String,
    },

    /// A reduction that has no value on empty input (`max`) was given an empty array.
    #[error("{op}: the input is empty and `{op}` has no identity element")]
    EmptyInput {
        /// The call that was rejected.
        op: &'static str,
    },

    /// Arguments whose sizes are each possible but do not fit together: a batch stride that
    /// makes a gemm's outputs overlap, an index reduction over more elements than a `u32`
    /// counts.
    #[error("{op}: `{arg}`: {message}")]
    InvalidShape {
        /// The call that was rejected.
        op: &'static str,
        /// The argument at fault.
        arg: &'static str,
        /// What is wrong, with the numbers.
        message: String,
    },

    /// A scalar argument outside what the call accepts (a dropout probability of 1, an
    /// integer range wider than `2^32`, a negative standard deviation).
    #[error("{op}: `{arg}`: {message}")]
    InvalidArgument {
        /// The call that was rejected.
        op: &'static str,
        /// The argument at fault.
        arg: &'static str,
        /// What is wrong, with the value.
        message: String,
    },

    /// A device spec could not be parsed.
    #[error("invalid device spec {input:?} (from {origin}): {reason}; expected one of `auto`, `cpu`, `cuda`, `cuda:N`, `vulkan` or `vulkan:N`")]
    InvalidDeviceSpec {
        /// The text that was given.
        input: String,
        /// Where it came from: `code`, the `GPU_DEVICE` environment variable or a file.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A configuration file could not be read or parsed.
    #[error("configuration {path}: {message}")]
    Config {
        /// The file (or variable) that holds the bad configuration.
        path: String,
        /// What is wrong, with line and column where the parser knows them.
        message: String,
    },

    /// The requested backend cannot be used on this machine or in this build.
    #[error("the {backend} backend is unavailable: {reason}")]
    Unavailable {
        /// The backend that was requested (`cuda`, ...).
        backend: &'static str,
        /// Why, in words that say what to install or set.
        reason: String,
    },

    /// A call that would break the graph capture in progress ([`crate::Stream::capture`]):
    /// a host sync or query, an event, an allocation, a host transfer, or work that would
    /// have to wait for unfinished work of another stream. Nothing was queued or changed,
    /// and the capture goes on: the closure may return this error (ending the capture with
    /// it) or do something else.
    #[error("{call} is not allowed during a graph capture: {reason}")]
    CaptureViolation {
        /// The call refused.
        call: &'static str,
        /// Why it would break the capture.
        reason: &'static str,
    },

    /// The backend cannot do what was asked (wrap a foreign stream on a backend without
    /// native streams, a pointer of another backend's kind, ...).
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        /// The backend asked.
        backend: &'static str,
        /// What it cannot do.
        what: String,
    },

    /// A device ordinal is not among the devices the backend can see.
    #[error("{backend} device {ordinal} does not exist: {count} device(s) visible")]
    InvalidDevice {
        /// The backend asked.
        backend: &'static str,
        /// The ordinal that was requested.
        ordinal: usize,
        /// How many devices the backend sees.
        count: usize,
    },

    /// Arrays, streams, events or kernels from two different contexts met in one call.
    #[error("{op}: `{arg}` belongs to context #{got}, but the call runs on context #{expected}")]
    ContextMismatch {
        /// The call that was rejected.
        op: &'static str,
        /// The argument that came from another context.
        arg: &'static str,
        /// The context the call runs on.
        expected: u64,
        /// The context the argument belongs to.
        got: u64,
    },

    /// A stream priority outside the backend's range.
    #[error("stream priority {priority} is outside the backend's range {greatest}..={least} (lower is more urgent)")]
    InvalidPriority {
        /// The requested priority.
        priority: i32,
        /// The most urgent priority allowed.
        greatest: i32,
        /// The least urgent priority allowed (the default).
        least: i32,
    },

    /// A launch configuration is zero somewhere or over the device's limits.
    #[error("invalid launch configuration for kernel `{kernel}`: {reason}")]
    InvalidLaunch {
        /// The kernel being launched.
        kernel: String,
        /// Which dimension or limit is at fault, with the limit.
        reason: String,
    },

    /// A kernel has no implementation for the backend it is launched on.
    #[error("kernel `{kernel}` has no {backend} implementation: {hint}")]
    KernelUnavailable {
        /// The kernel's name.
        kernel: String,
        /// The backend it was loaded on.
        backend: &'static str,
        /// What to add to the kernel spec.
        hint: &'static str,
    },

    /// Kernel source did not compile or a module did not load.
    #[error("kernel `{kernel}` failed to compile: {log}")]
    KernelCompile {
        /// The kernel's name.
        kernel: String,
        /// The compiler's log.
        log: String,
    },

    /// A kernel failed while it ran, reported at the next sync of its work. Most often a
    /// bounds fault: a `#[kernel]`'s checked access (or a `report_out_of_bounds`) found an
    /// index outside its array, and `message` names the array, the index and the length (the
    /// first such access of the context; the access itself was not made). Also a built-in
    /// op's bad index (`gather_rows`, ...: `kernel` is the op), or a CPU kernel closure that
    /// panicked or returned an error. The outputs of the launch are undefined; the context
    /// stays usable.
    #[error("kernel `{kernel}` failed while running: {message}")]
    KernelFailed {
        /// The kernel's name (the op's, for a built-in op).
        kernel: String,
        /// What went wrong: the array, index and length of a bounds fault; the panic
        /// message of a CPU closure.
        message: String,
    },

    /// A call into a backend's library (the CUDA driver, cuBLAS) failed with a status code.
    /// `code` is the library's own value, so callers can match on it (for CUDA,
    /// `gpukit::cuda::driver_result` compares it with cudarc's `CUresult`).
    #[error("{api} call `{call}` failed with {name} ({code}): {message}")]
    Status {
        /// The library whose code this is: `cuda-driver` (a `CUresult`) or `cublas` (a
        /// `cublasStatus_t`).
        api: &'static str,
        /// The call that failed (`cuMemAlloc`, `cublasSgemm_v2`, ...).
        call: &'static str,
        /// The status code, as the library defines it.
        code: i64,
        /// The code's name (`CUDA_ERROR_INVALID_VALUE`).
        name: String,
        /// The library's description of the code.
        message: String,
    },

    /// A backend call failed in a way no other variant describes.
    #[error("{backend} call `{call}` failed: {message}")]
    Backend {
        /// The backend.
        backend: &'static str,
        /// The backend call that failed (`cuMemAlloc`, `spawn stream worker`, ...).
        call: &'static str,
        /// The backend's own message.
        message: String,
    },

    /// The context hit an unrecoverable device error earlier; every later call fails with
    /// this until the context is dropped. The first fatal error (with its status code) is
    /// [`source`](std::error::Error::source).
    #[error("the context is unusable after an earlier fatal error")]
    Poisoned {
        /// The first fatal error.
        #[source]
        first: Box<Error>,
    },

    /// An error raised in a `Drop` (or in work nobody waited for), returned by the next call.
    /// The error itself is [`source`](std::error::Error::source).
    #[error("error deferred from {origin}")]
    Deferred {
        /// What was being dropped or cleaned up.
        origin: &'static str,
        /// The error itself.
        source: Box<Error>,
    },
}

impl Error {
    /// The error behind any number of [`Error::Deferred`] and [`Error::Poisoned`] wrappers:
    /// the fault itself.
    pub fn root(&self) -> &Error {
        match self {
            Error::Deferred { source, .. } => source.root(),
            Error::Poisoned { first } => first.root(),
            other => other,
        }
    }
}

/// `Ok` when `got == expected`, else [`Error::LengthMismatch`] naming the call and argument.
pub(crate) fn same_len(
    op: &'static str,
    arg: &'static str,
    expected: usize,
    got: usize,
) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            op,
            arg,
            expected,
            got,
        })
    }
}

/// A call refused the value moved into it; the error says why and `value` gives it back.
///
/// Calls that take ownership of host memory (asynchronous copies) return this so that a
/// rejected buffer is never lost. It converts into [`Error`] for `?`, dropping the value.
/// As an error it is transparent: it displays as `error` and its source is `error`'s.
pub struct Rejected<T> {
    /// Why the call failed.
    pub error: Error,
    /// The value the call was given, untouched.
    pub value: T,
}

impl<T> Rejected<T> {
    pub(crate) fn new(error: Error, value: T) -> Self {
        Rejected { error, value }
    }

    /// Splits into the error and the returned value.
    pub fn into_parts(self) -> (Error, T) {
        (self.error, self.value)
    }
}

impl<T> fmt::Debug for Rejected<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for Rejected<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<T> std::error::Error for Rejected<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<T> From<Rejected<T>> for Error {
    fn from(r: Rejected<T>) -> Self {
        r.error
    }
}

/// Errors raised where nothing can return them (in `Drop`), kept for the next call.
#[derive(Default)]
pub(crate) struct DeferredErrors {
    any: AtomicBool,
    errors: Mutex<Vec<(&'static str, Error)>>,
}

impl DeferredErrors {
    pub(crate) fn push(&self, origin: &'static str, error: Error) {
        tracing::debug!(origin, %error, "error deferred to the next call");
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.push((origin, error));
        self.any.store(true, Ordering::Release);
    }

    /// Returns the oldest deferred error, if any. One atomic load when there is none.
    #[inline]
    pub(crate) fn take(&self) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        self.take_kept()
    }

    /// [`DeferredErrors::take`] once an error has been kept: out of line, so that the check
    /// every op makes is the load alone.
    #[cold]
    #[inline(never)]
    fn take_kept(&self) -> Result<()> {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            return Ok(());
        }
        let (origin, error) = errors.remove(0);
        if errors.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        Err(Error::Deferred {
            origin,
            source: Box::new(error),
        })
    }

    /// Everything still kept, for the context's last words.
    pub(crate) fn drain(&self) -> Vec<(&'static str, Error)> {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        self.any.store(false, Ordering::Release);
        std::mem::take(&mut *errors)
    }
}
