//! The CPU backend's own errors, and how they become `gpukit_core::Error`.

/// What can go wrong inside the CPU backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuError {
    /// The allocator refused, or the request exceeds the machine's memory.
    #[error("cannot allocate {requested} bytes: {detail}")]
    OutOfMemory {
        /// Bytes requested.
        requested: usize,
        /// Why.
        detail: String,
    },
    /// The operating system would not start a worker thread for the streams.
    #[error("cannot start a stream worker thread: {0}")]
    Spawn(String),
    /// A kernel closure panicked.
    #[error("kernel `{kernel}` panicked: {message}")]
    KernelPanicked {
        /// The kernel.
        kernel: String,
        /// The panic's message.
        message: String,
    },
    /// A kernel closure reported an error.
    #[error("kernel `{kernel}` failed: {message}")]
    KernelError {
        /// The kernel.
        kernel: String,
        /// Its message.
        message: String,
    },
    /// A kernel spec has no CPU closure.
    #[error("kernel `{kernel}` has no CPU closure")]
    NoCpuKernel {
        /// The kernel.
        kernel: String,
    },
    /// Elapsed time was asked of an event recorded without timing.
    #[error("an event recorded without timing has no time")]
    NotTiming,
    /// A null pointer was given for host memory.
    #[error("host memory at a null pointer")]
    NullHostPointer,
}

impl From<CpuError> for gpukit_core::Error {
    fn from(e: CpuError) -> Self {
        use gpukit_core::Error;
        match e {
            CpuError::OutOfMemory { requested, detail } => Error::OutOfMemory {
                backend: "cpu",
                requested,
                detail,
            },
            CpuError::KernelPanicked { kernel, message }
            | CpuError::KernelError { kernel, message } => Error::KernelFailed { kernel, message },
            CpuError::NoCpuKernel { kernel } => Error::KernelUnavailable {
                kernel,
                backend: "cpu",
                hint: "add a CPU implementation with `KernelSpec::cpu(|i, args| ...)`",
            },
            CpuError::Spawn(message) => Error::Backend {
                backend: "cpu",
                call: "spawn stream worker",
                message,
            },
            CpuError::NotTiming => Error::Backend {
                backend: "cpu",
                call: "event_elapsed_ms",
                message: CpuError::NotTiming.to_string(),
            },
            CpuError::NullHostPointer => Error::Backend {
                backend: "cpu",
                call: "register_host",
                message: CpuError::NullHostPointer.to_string(),
            },
        }
    }
}
