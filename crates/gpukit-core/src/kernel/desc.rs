//! What a backend is given to load a kernel: its name, GPU code ([`KernelSource`]) and CPU
//! closure with the arguments erased ([`CpuKernelFn`], [`RawArg`]).

use std::sync::Arc;

use super::*;

/// GPU code for a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSource {
    /// CUDA C source, compiled at run time (NVRTC) and cached.
    CudaC(String),
    /// PTX assembly, loaded as it is.
    Ptx(String),
}

/// A CPU kernel with its arguments erased: runs the whole launch, as [`CpuRun`] asks.
/// An error it returns (or a panic inside it) becomes [`crate::Error::KernelFailed`].
pub type CpuKernelFn =
    Arc<dyn Fn(&LaunchConfig, &[RawArg], CpuRun) -> std::result::Result<(), String> + Send + Sync>;

/// How the CPU backend asks a kernel's CPU code to run a launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuRun {
    /// Check the launch for data races between its threads: a `#[kernel]`'s twin records
    /// which threads read and write each element between barriers and fails the launch
    /// with the first race (see `RaceCheck`); a closure written by hand is not checked.
    pub racecheck: bool,
}

impl CpuRun {
    /// A run with the race checker on or off.
    pub fn racecheck(on: bool) -> CpuRun {
        CpuRun { racecheck: on }
    }
}

/// An argument as a CPU kernel receives it before it is typed again.
#[derive(Debug, Clone, Copy)]
pub enum RawArg {
    /// A device range: start and length in bytes (the start is aligned and non-null, also
    /// when the range is empty).
    Slice {
        /// First byte.
        ptr: *mut u8,
        /// Length in bytes.
        bytes: usize,
    },
    /// A scalar's bytes.
    Scalar([u8; 16]),
}

/// Everything a backend needs to load a kernel, without its type.
#[derive(Clone)]
pub struct KernelDesc {
    /// The kernel's (entry point's) name.
    pub name: String,
    /// GPU code, if any.
    pub source: Option<KernelSource>,
    /// WGSL code for the wgpu backend, if any (the entry point is `name`).
    pub wgsl: Option<String>,
    /// For a `#[kernel]` with subgroup operations, its WGSL that computes them through
    /// workgroup memory, which the wgpu backend loads where the adapter lacks subgroups.
    pub wgsl_without_subgroups: Option<String>,
    /// The CPU implementation, if any.
    pub cpu: Option<CpuKernelFn>,
    /// Set for a bounds-checked kernel (one `#[kernel]` generated): it takes the extra
    /// arguments of the checked convention ([`CheckedAbi`]), and its code (GPU and CPU) checks
    /// every access against the lengths given.
    pub checked: Option<CheckedAbi>,
    /// Set when `cpu` is a built-in op's native body: one call over the whole launch whose
    /// work grows with its arrays' sizes, so that a backend running it may treat a launch on
    /// small arrays as a short task (the CPU backend runs it on the calling thread when the
    /// stream is idle).
    pub native: bool,
}

impl std::fmt::Debug for KernelDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDesc")
            .field("name", &self.name)
            .field("source", &self.source.as_ref().map(|_| ".."))
            .field("wgsl", &self.wgsl.is_some())
            .field("cpu", &self.cpu.is_some())
            .field("checked", &self.checked.is_some())
            .field("native", &self.native)
            .finish()
    }
}
