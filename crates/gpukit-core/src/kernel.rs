//! Custom kernels: a backend-agnostic spec (CUDA C or PTX for GPUs, a Rust closure for the
//! CPU backend), a typed signature, launch configurations checked against device limits,
//! and launches that order their array arguments like any other op.
//!
//! ```
//! use gpukit::{In, KernelSpec, LaunchConfig, Out};
//!
//! const SRC: &str = r#"
//! extern "C" __global__ void vector_add(const float* a, const float* b, float* out, unsigned long long n) {
//!     unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
//!     if (i < n) out[i] = a[i] + b[i];
//! }"#;
//!
//! // The signature says what each argument is; the CPU closure sees host slices and the
//! // thread's coordinates (`t.x()` is CUDA's `blockIdx.x * blockDim.x + threadIdx.x`).
//! type VectorAdd = (In<f32>, In<f32>, Out<f32>, u64);
//! // SAFETY: `vector_add` takes (const float*, const float*, float*, unsigned long long),
//! // which is `VectorAdd` in order and type, and touches only indices below `n`, the
//! // length passed with the arrays.
//! let spec = unsafe { KernelSpec::<VectorAdd>::cuda(SRC, "vector_add") }.cpu(|t, (a, b, out, n)| {
//!     let i = t.x();
//!     if (i as u64) < *n {
//!         out[i] = a[i] + b[i];
//!     }
//! });
//! # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
//! let k = ctx.kernel(spec)?;
//! let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
//! let b = ctx.alloc_upload(&[10.0f32, 20.0, 30.0])?;
//! let mut out = ctx.alloc_zeros::<f32>(3)?;
//! ctx.launch(&k, LaunchConfig::for_elems(3), (&a, &b, &mut out, 3u64))?;
//! assert_eq!(out.download()?, [11.0, 22.0, 33.0]);
//! # Ok::<(), gpukit::Error>(())
//! ```
//!
//! ## Why GPU code is `unsafe` to construct
//!
//! Nothing can check that CUDA C or PTX reads its parameters as the signature says, or that
//! it stays inside the arrays it is given: a kernel that indexes past an array writes over
//! whatever the device keeps there. [`KernelSpec::cuda`] and [`KernelSpec::ptx`] are
//! therefore `unsafe fn`s, and the caller vouches for the code once, where it is named;
//! launching a loaded [`Kernel`] is then safe, because everything else a launch needs
//! (argument types matching the signature, arrays of this context, launch limits, ordering
//! against other streams, no aliasing between written arguments) is checked or enforced by
//! types. A CPU closure is safe Rust and needs no such promise. Safe code cannot build
//! launch arguments of its own: [`LaunchArg`] and [`LaunchArgs`] are sealed.
//!
//! ```compile_fail,E0133
//! use gpukit::{In, KernelSpec};
//! let spec = KernelSpec::<(In<f32>,)>::cuda("extern \"C\" __global__ void k(const float*) {}", "k");
//! ```
//!
//! ```compile_fail,E0133
//! use gpukit::{In, KernelSpec};
//! let spec = KernelSpec::<(In<f32>,)>::ptx(".version 8.0", "k");
//! ```
//!
//! Nor can safe code make an argument that claims to be something it is not:
//!
//! ```compile_fail,E0277
//! use gpukit::core::{ArgRef, Backend, LaunchArg, Out};
//! struct Pretend;
//! impl<B: Backend> LaunchArg<B> for Pretend {
//!     type Param = Out<f32>;
//!     fn arg(&self) -> ArgRef<'_, B> {
//!         ArgRef::Scalar { bytes: [0; 16], len: 4 }
//!     }
//! }
//! ```

use smallvec::SmallVec;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::array::{DeviceRead, GpuArray, GpuView, GpuViewMut};
use crate::backend::{Backend, KernelArg, LaunchLimits};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

/// Grid and block dimensions of a launch, and its dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks along x, y and z.
    pub grid: [u32; 3],
    /// Threads per block along x, y and z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// Threads per block used by [`LaunchConfig::for_elems`].
    pub const DEFAULT_BLOCK: u32 = 256;

    /// One thread per element, 256 to a block; at least one block. A count too large for
    /// the grid is reported when the launch is checked.
    pub fn for_elems(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(Self::DEFAULT_BLOCK as usize).max(1);
        LaunchConfig {
            grid: [u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1],
            block: [Self::DEFAULT_BLOCK, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// A one-dimensional grid of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> LaunchConfig {
        LaunchConfig {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// Threads in one block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| d as u64).product()
    }

    /// Threads in the whole launch.
    pub fn total_threads(&self) -> u64 {
        self.grid.iter().map(|&d| d as u64).product::<u64>() * self.threads_per_block()
    }

    /// Checks the configuration against a device's limits.
    pub fn validate(&self, kernel: &str, limits: &LaunchLimits) -> Result<()> {
        let bad = |reason: String| Error::InvalidLaunch {
            kernel: kernel.to_string(),
            reason,
        };
        const AXES: [&str; 3] = ["x", "y", "z"];
        for (i, axis) in AXES.iter().enumerate() {
            if self.grid[i] == 0 {
                return Err(bad(format!("grid.{axis} is 0")));
            }
            if self.block[i] == 0 {
                return Err(bad(format!("block.{axis} is 0")));
            }
            if self.grid[i] > limits.max_grid_dim[i] {
                return Err(bad(format!(
                    "grid.{axis} = {} exceeds the device's maximum {}",
                    self.grid[i], limits.max_grid_dim[i]
                )));
            }
            if self.block[i] > limits.max_block_dim[i] {
                return Err(bad(format!(
                    "block.{axis} = {} exceeds the device's maximum {}",
                    self.block[i], limits.max_block_dim[i]
                )));
            }
        }
        if self.threads_per_block() > limits.max_threads_per_block as u64 {
            return Err(bad(format!(
                "{} threads per block exceed the device's maximum {}",
                self.threads_per_block(),
                limits.max_threads_per_block
            )));
        }
        if self.shared_mem_bytes > limits.max_shared_mem_per_block {
            return Err(bad(format!(
                "{} bytes of shared memory exceed the device's maximum {}",
                self.shared_mem_bytes, limits.max_shared_mem_per_block
            )));
        }
        Ok(())
    }
}

/// Three extents or coordinates, as CUDA's `dim3`/`uint3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dim3 {
    /// Along x (fastest varying).
    pub x: u32,
    /// Along y.
    pub y: u32,
    /// Along z.
    pub z: u32,
}

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Dim3 {
        Dim3 { x, y, z }
    }
}

/// Where one thread of a launch is: what a CUDA thread reads from its built-in variables,
/// given to CPU closures so that a kernel's CPU version indexes as its GPU version does.
///
/// | CUDA C | here |
/// |---|---|
/// | `blockIdx` | [`ThreadIndex::block_idx`] |
/// | `threadIdx` | [`ThreadIndex::thread_idx`] |
/// | `blockDim` | [`ThreadIndex::block_dim`] |
/// | `gridDim` | [`ThreadIndex::grid_dim`] |
/// | `blockIdx.x * blockDim.x + threadIdx.x` | [`ThreadIndex::x`] (also [`y`](ThreadIndex::y), [`z`](ThreadIndex::z)) |
///
/// ```
/// # use gpukit::{Dim3, ThreadIndex};
/// let t = ThreadIndex {
///     block_idx: Dim3 { x: 2, y: 1, z: 0 },
///     thread_idx: Dim3 { x: 5, y: 3, z: 0 },
///     block_dim: Dim3 { x: 16, y: 8, z: 1 },
///     grid_dim: Dim3 { x: 4, y: 2, z: 1 },
/// };
/// assert_eq!((t.x(), t.y(), t.z()), (37, 11, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadIndex {
    /// The block's coordinates in the grid (`blockIdx`).
    pub block_idx: Dim3,
    /// The thread's coordinates in its block (`threadIdx`).
    pub thread_idx: Dim3,
    /// Threads per block along each axis (`blockDim`).
    pub block_dim: Dim3,
    /// Blocks along each axis (`gridDim`).
    pub grid_dim: Dim3,
}

impl ThreadIndex {
    /// The global x coordinate, `blockIdx.x * blockDim.x + threadIdx.x`: the element index
    /// of a one-dimensional launch.
    pub fn x(&self) -> usize {
        global(self.block_idx.x, self.block_dim.x, self.thread_idx.x)
    }

    /// The global y coordinate, `blockIdx.y * blockDim.y + threadIdx.y`.
    pub fn y(&self) -> usize {
        global(self.block_idx.y, self.block_dim.y, self.thread_idx.y)
    }

    /// The global z coordinate, `blockIdx.z * blockDim.z + threadIdx.z`.
    pub fn z(&self) -> usize {
        global(self.block_idx.z, self.block_dim.z, self.thread_idx.z)
    }
}

/// `block * dim + thread`; at most about 2^41 within [`LaunchLimits`], so it fits a 64-bit
/// `usize` exactly.
fn global(block: u32, dim: u32, thread: u32) -> usize {
    (block as usize)
        .wrapping_mul(dim as usize)
        .wrapping_add(thread as usize)
}

/// Runs `f` once for every thread of a launch of `cfg`, in a fixed order: blocks by z, y,
/// x, and inside each block threads by z, y, x (x fastest). A thread runs to completion
/// before the next starts, so there is no shared memory and no `__syncthreads`; a kernel
/// whose threads only write their own outputs behaves as on a GPU.
pub(crate) fn for_each_thread(cfg: &LaunchConfig, mut f: impl FnMut(&ThreadIndex)) {
    let grid_dim = Dim3::from(cfg.grid);
    let block_dim = Dim3::from(cfg.block);
    for bz in 0..grid_dim.z {
        for by in 0..grid_dim.y {
            for bx in 0..grid_dim.x {
                for tz in 0..block_dim.z {
                    for ty in 0..block_dim.y {
                        for tx in 0..block_dim.x {
                            f(&ThreadIndex {
                                block_idx: Dim3 {
                                    x: bx,
                                    y: by,
                                    z: bz,
                                },
                                thread_idx: Dim3 {
                                    x: tx,
                                    y: ty,
                                    z: tz,
                                },
                                block_dim,
                                grid_dim,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// GPU code for a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSource {
    /// CUDA C source, compiled at run time (NVRTC) and cached.
    CudaC(String),
    /// PTX assembly, loaded as it is.
    Ptx(String),
}

/// A CPU kernel with its arguments erased: runs the whole launch.
/// An error it returns (or a panic inside it) becomes [`Error::KernelFailed`].
pub type CpuKernelFn =
    Arc<dyn Fn(&LaunchConfig, &[RawArg]) -> std::result::Result<(), String> + Send + Sync>;

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
    /// The CPU implementation, if any.
    pub cpu: Option<CpuKernelFn>,
}

impl std::fmt::Debug for KernelDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDesc")
            .field("name", &self.name)
            .field("source", &self.source.as_ref().map(|_| ".."))
            .field("wgsl", &self.wgsl.is_some())
            .field("cpu", &self.cpu.is_some())
            .finish()
    }
}

/// A kernel argument read by the kernel: `&[T]` on the CPU, `const T*` in CUDA C.
pub struct In<T>(PhantomData<T>);
/// A kernel argument the kernel may write: `&mut [T]` on the CPU, `T*` in CUDA C.
pub struct Out<T>(PhantomData<T>);

impl<T> std::fmt::Debug for In<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "In<{}>", std::any::type_name::<T>())
    }
}

impl<T> std::fmt::Debug for Out<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Out<{}>", std::any::type_name::<T>())
    }
}

/// One parameter of a kernel signature.
pub trait KernelParam: 'static {
    /// What the CPU closure receives for it.
    type Cpu<'a>;
    /// Rebuilds the CPU value.
    ///
    /// # Safety
    ///
    /// - `raw` was made from an argument of this parameter's kind and element type;
    /// - a slice's memory is live, aligned and not written by anything else for `'a`, and
    ///   for [`Out`] not read by anything else either.
    unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a>;
}

impl<T: Element> KernelParam for In<T> {
    type Cpu<'a> = &'a [T];

    unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a> {
        match *raw {
            // SAFETY: by this function's contract the range is live, aligned, typed `T`
            // (a whole number of elements) and not written for 'a.
            RawArg::Slice { ptr, bytes } => unsafe {
                std::slice::from_raw_parts(ptr.cast::<T>(), bytes / std::mem::size_of::<T>())
            },
            RawArg::Scalar(_) => &[],
        }
    }
}

impl<T: Element> KernelParam for Out<T> {
    type Cpu<'a> = &'a mut [T];

    unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a> {
        match *raw {
            // SAFETY: by this function's contract the range is live, aligned, typed `T` and
            // used by nothing else for 'a.
            RawArg::Slice { ptr, bytes } => unsafe {
                std::slice::from_raw_parts_mut(ptr.cast::<T>(), bytes / std::mem::size_of::<T>())
            },
            RawArg::Scalar(_) => &mut [],
        }
    }
}

macro_rules! scalar_params {
    ($($t:ty),*) => {$(
        impl KernelParam for $t {
            type Cpu<'a> = $t;

            unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a> {
                match raw {
                    // SAFETY: the scalar's bytes were written from a `$t` (16 >= its size);
                    // any bit pattern is a valid `$t`.
                    RawArg::Scalar(bytes) => unsafe { bytes.as_ptr().cast::<$t>().read_unaligned() },
                    RawArg::Slice { .. } => <$t>::default(),
                }
            }
        }

        impl sealed::Sealed for $t {}

        impl<B: Backend> LaunchArg<B> for $t {
            type Param = $t;

            fn arg(&self) -> ArgRef<'_, B> {
                let mut bytes = [0u8; 16];
                bytes[..std::mem::size_of::<$t>()].copy_from_slice(&self.to_ne_bytes());
                ArgRef::Scalar { bytes, len: std::mem::size_of::<$t>() }
            }
        }
    )*};
}

scalar_params!(f32, f64, i32, u32, i64, u64, u8, i8);

/// A kernel's signature: a tuple of [`In`], [`Out`] and scalar types.
pub trait KernelSig: 'static {
    /// What the CPU closure receives: the tuple of the parameters' CPU values.
    type Cpu<'a>;
    /// Number of parameters.
    const ARITY: usize;
    /// Rebuilds the CPU tuple.
    ///
    /// # Safety
    ///
    /// - `raw` has [`Self::ARITY`] entries, each made from an argument matching its
    ///   parameter (see [`KernelParam::from_raw`]);
    /// - no two [`Out`] slices overlap each other or any [`In`] slice.
    unsafe fn from_raw<'a>(raw: &[RawArg]) -> Self::Cpu<'a>;
}

mod sealed {
    /// Only the workspace's arrays, views and scalars are launch arguments: a launch trusts
    /// an argument's [`super::LaunchArg::Param`] to describe the memory it hands over.
    pub trait Sealed {}
}

/// A launch argument: an array or view (by reference) or a scalar (by value). Sealed: a
/// launch relies on [`LaunchArg::Param`] describing the memory exactly.
pub trait LaunchArg<B: Backend>: sealed::Sealed {
    /// The signature parameter it matches.
    type Param: KernelParam;
    /// The argument for the safe layer.
    fn arg(&self) -> ArgRef<'_, B>;
}

/// A launch argument, resolved.
pub enum ArgRef<'a, B: Backend> {
    /// Device memory the kernel reads.
    Read(SliceRef<'a, B>),
    /// Device memory the kernel may write.
    Write(SliceRef<'a, B>),
    /// A scalar value.
    Scalar {
        /// The value's bytes.
        bytes: [u8; 16],
        /// Its size.
        len: usize,
    },
}

impl<B: Backend> std::fmt::Debug for ArgRef<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgRef::Read(s) => f.debug_tuple("Read").field(s).finish(),
            ArgRef::Write(s) => f.debug_tuple("Write").field(s).finish(),
            ArgRef::Scalar { bytes, len } => f
                .debug_struct("Scalar")
                .field("bytes", &bytes.get(..*len).unwrap_or(bytes))
                .finish(),
        }
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &GpuArray<T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &GpuArray<T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &mut GpuArray<T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &mut GpuArray<T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for GpuView<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for GpuView<'_, T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &GpuView<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &GpuView<'_, T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for GpuViewMut<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for GpuViewMut<'_, T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &mut GpuViewMut<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &mut GpuViewMut<'_, T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.slice_ref())
    }
}

/// The most parameters a kernel signature has: signatures are tuples of 1 to 8 parameters.
pub const MAX_KERNEL_ARGS: usize = 8;

/// A launch's resolved arguments, in order, on the stack.
pub(crate) type ArgList<'a, B> = SmallVec<[ArgRef<'a, B>; MAX_KERNEL_ARGS]>;

/// A tuple of launch arguments matching a signature. Sealed, as [`LaunchArg`] is.
pub trait LaunchArgs<B: Backend>: sealed::Sealed {
    /// The signature the arguments match.
    type Sig: KernelSig;
    /// Calls `f` with each resolved argument, in order.
    fn each_arg<'a>(&'a self, f: &mut dyn FnMut(ArgRef<'a, B>));
}

macro_rules! tuples {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: KernelParam),+> KernelSig for ($($name,)+) {
            type Cpu<'a> = ($($name::Cpu<'a>,)+);
            const ARITY: usize = [$($idx),+].len();

            unsafe fn from_raw<'a>(raw: &[RawArg]) -> Self::Cpu<'a> {
                // SAFETY: forwarded from the caller, entry by entry.
                unsafe { ($($name::from_raw(&raw[$idx]),)+) }
            }
        }

        impl<$($name: sealed::Sealed),+> sealed::Sealed for ($($name,)+) {}

        impl<B: Backend, $($name: LaunchArg<B>),+> LaunchArgs<B> for ($($name,)+) {
            type Sig = ($($name::Param,)+);

            fn each_arg<'a>(&'a self, f: &mut dyn FnMut(ArgRef<'a, B>)) {
                $(f(self.$idx.arg());)+
            }
        }
    };
}

tuples!(A 0);
tuples!(A 0, B1 1);
tuples!(A 0, B1 1, C 2);
tuples!(A 0, B1 1, C 2, D 3);
tuples!(A 0, B1 1, C 2, D 3, E 4);
tuples!(A 0, B1 1, C 2, D 3, E 4, F 5);
tuples!(A 0, B1 1, C 2, D 3, E 4, F 5, G 6);
tuples!(A 0, B1 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// A kernel before it is loaded: its name, GPU code and CPU closure, typed by signature `S`.
pub struct KernelSpec<S: KernelSig> {
    desc: KernelDesc,
    _s: PhantomData<fn(S)>,
}

impl<S: KernelSig> std::fmt::Debug for KernelSpec<S> {
    /// `KernelSpec { name: "vector_add", params: 4, source: Some("cuda"), wgsl: true, cpu: true }`:
    /// which implementations it has, not their code.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = self.desc.source.as_ref().map(|s| match s {
            KernelSource::CudaC(_) => "cuda",
            KernelSource::Ptx(_) => "ptx",
        });
        f.debug_struct("KernelSpec")
            .field("name", &self.desc.name)
            .field("params", &S::ARITY)
            .field("source", &source)
            .field("wgsl", &self.desc.wgsl.is_some())
            .field("cpu", &self.desc.cpu.is_some())
            .finish()
    }
}

impl<S: KernelSig> KernelSpec<S> {
    /// A kernel with no code yet; add CUDA C, PTX or a CPU closure.
    pub fn named(name: impl Into<String>) -> Self {
        KernelSpec {
            desc: KernelDesc {
                name: name.into(),
                source: None,
                wgsl: None,
                cpu: None,
            },
            _s: PhantomData,
        }
    }

    /// A kernel from CUDA C source; `name` is the `extern "C" __global__` entry point.
    ///
    /// # Safety
    ///
    /// The caller vouches for the GPU code, which nothing can check:
    /// - the entry point's parameters match the signature `S` in order and type: [`In<T>`]
    ///   is `const T*`, [`Out<T>`] is `T*`, a scalar is the C type of the same size and
    ///   representation (`u64` is `unsigned long long`, `f32` is `float`, ...);
    /// - every access stays within the lengths passed: the kernel reads or writes an array
    ///   argument only below the element count the caller passes with it (or that it can
    ///   otherwise derive from its arguments), for every launch configuration it is used
    ///   with, and writes only through [`Out`] parameters;
    /// - it does not race with itself (two threads of a launch never write the same
    ///   element, or one reads while another writes it, without synchronisation).
    pub unsafe fn cuda(src: impl Into<String>, name: impl Into<String>) -> Self {
        let mut s = Self::named(name);
        s.desc.source = Some(KernelSource::CudaC(src.into()));
        s
    }

    /// A kernel from PTX; `name` is the entry point.
    ///
    /// # Safety
    ///
    /// As for [`KernelSpec::cuda`]: the entry point's parameters match `S` in order and
    /// type, and every access stays within the lengths passed.
    pub unsafe fn ptx(ptx: impl Into<String>, name: impl Into<String>) -> Self {
        let mut s = Self::named(name);
        s.desc.source = Some(KernelSource::Ptx(ptx.into()));
        s
    }

    /// Adds WGSL code for the wgpu (Vulkan) backend; the entry point is the kernel's name,
    /// an `@compute` function.
    ///
    /// The arguments bind as follows: the i-th array argument ([`In`] or [`Out`], counting
    /// arrays only) is `@group(0) @binding(i) var<storage, read_write> name: array<T>` (`read`
    /// is accepted for an [`In`]); the scalars, in signature order, are the fields of one
    /// `var<immediate>` struct, each a 4-byte field (`u32`, `i32`, `f32`; a 1- or 2-byte
    /// scalar is zero-extended into a `u32`; an 8-byte scalar is 8-byte aligned, an `f64`
    /// or a `vec2<u32>` low word first for `u64`/`i64`). A view that starts at an offset the
    /// adapter cannot bind at goes through an aligned copy (written back after the launch). The launch's block size must equal
    /// the entry point's `@workgroup_size`, except along the dimensions the WGSL leaves to
    /// the launch by declaring `override block_x: u32;` (`block_y`, `block_z`) and writing
    /// `@workgroup_size(block_x, ...)`. Dynamic shared memory does not exist in WGSL.
    ///
    /// ```
    /// # use gpukit::{In, KernelSpec, Out};
    /// const SRC: &str = "
    /// struct Args { n: u32 }
    /// var<immediate> args: Args;
    /// @group(0) @binding(0) var<storage, read> a: array<f32>;
    /// @group(0) @binding(1) var<storage, read_write> out: array<f32>;
    /// override block_x: u32 = 64;
    /// @compute @workgroup_size(block_x)
    /// fn twice(@builtin(global_invocation_id) g: vec3<u32>) {
    ///     if (g.x < args.n) { out[g.x] = 2.0 * a[g.x]; }
    /// }";
    /// // SAFETY: `twice` reads binding 0 and writes binding 1 below `n` only, matching
    /// // (In<f32>, Out<f32>, u32).
    /// let spec = unsafe { KernelSpec::<(In<f32>, Out<f32>, u32)>::named("twice").wgsl(SRC) };
    /// # let _ = spec;
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`KernelSpec::cuda`]: the bindings and the immediate struct match the
    /// signature `S` as described above, in order and type, and every access stays within
    /// the lengths passed (WGSL's bounds checks clamp accesses to the bound window, which
    /// for a view may be wider than the view), with no races inside the launch.
    pub unsafe fn wgsl(mut self, src: impl Into<String>) -> Self {
        self.desc.wgsl = Some(src.into());
        self
    }

    /// Adds the CPU implementation: called once per thread of the launch with the thread's
    /// [`ThreadIndex`] (CUDA's `blockIdx`, `threadIdx`, `blockDim`, `gridDim`; `t.x()` is
    /// `blockIdx.x * blockDim.x + threadIdx.x`) and the arguments as host slices. Threads
    /// run one after another on the stream's worker, blocks by z, y, x and threads inside a
    /// block by z, y, x (x fastest), so a closure that writes only its own elements gives
    /// what the GPU gives for every launch shape. Safe: slices are bounds-checked.
    ///
    /// ```
    /// # use gpukit::{KernelSpec, LaunchConfig, Out};
    /// // A 2-D kernel: out[y][x] = 10 * y + x over a 3 x 4 matrix.
    /// let spec = KernelSpec::<(Out<u32>, u32, u32)>::named("grid").cpu(|t, (out, rows, cols)| {
    ///     let (x, y) = (t.x(), t.y());
    ///     if y < *rows as usize && x < *cols as usize {
    ///         out[y * *cols as usize + x] = 10 * y as u32 + x as u32;
    ///     }
    /// });
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
    /// let k = ctx.kernel(spec)?;
    /// let mut out = ctx.alloc_zeros::<u32>(12)?;
    /// let cfg = LaunchConfig { grid: [2, 2, 1], block: [2, 2, 1], shared_mem_bytes: 0 };
    /// ctx.launch(&k, cfg, (&mut out, 3u32, 4u32))?;
    /// assert_eq!(out.download()?, [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn cpu<F>(mut self, f: F) -> Self
    where
        F: for<'a, 'b> Fn(&ThreadIndex, &'b mut S::Cpu<'a>) + Send + Sync + 'static,
    {
        let erased: CpuKernelFn = Arc::new(move |cfg: &LaunchConfig, raw: &[RawArg]| {
            if raw.len() != S::ARITY {
                return Err(format!(
                    "{} arguments given, the signature has {}",
                    raw.len(),
                    S::ARITY
                ));
            }
            // SAFETY: the launcher built `raw` from arguments whose types match `S` (the
            // `LaunchArgs::Sig = S` bound of `Stream::launch`), keeps every range alive and
            // ordered for the duration of this call, and Rust's borrow rules at the launch
            // site forbid an `Out` to alias another argument.
            let mut args = unsafe { S::from_raw(raw) };
            for_each_thread(cfg, |t| f(t, &mut args));
            Ok(())
        });
        self.desc.cpu = Some(erased);
        self
    }

    /// The untyped description.
    pub fn desc(&self) -> &KernelDesc {
        &self.desc
    }
}

/// A kernel loaded on a context, typed by its signature.
pub struct Kernel<S: KernelSig, B: Backend> {
    raw: B::Kernel,
    name: String,
    context: u64,
    limits: LaunchLimits,
    _s: PhantomData<fn(S)>,
}

impl<S: KernelSig, B: Backend> std::fmt::Debug for Kernel<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("context", &self.context)
            .finish()
    }
}

impl<S: KernelSig, B: Backend> Kernel<S, B> {
    pub(crate) fn load(home: &Stream<B>, spec: KernelSpec<S>) -> Result<Self> {
        let raw = home.backend().load_kernel(&spec.desc)?;
        Ok(Kernel {
            raw,
            name: spec.desc.name,
            context: home.context_id(),
            limits: home.shared_arc().info.limits,
            _s: PhantomData,
        })
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<B: Backend> Stream<B> {
    /// Launches a kernel with arguments matching its signature, after checking the
    /// configuration against the device's limits. Array arguments are ordered against other
    /// streams like any op's: [`In`] as reads, [`Out`] as writes.
    pub fn launch<A: LaunchArgs<B>>(
        &self,
        kernel: &Kernel<A::Sig, B>,
        cfg: LaunchConfig,
        args: A,
    ) -> Result<()> {
        self.shared_arc()
            .same_context("launch", "kernel", kernel.context)?;
        cfg.validate(&kernel.name, &kernel.limits)?;
        // Everything on the stack: a launch allocates nothing.
        let mut resolved = ArgList::<B>::new();
        args.each_arg(&mut |a| resolved.push(a));
        let mut accesses = SmallVec::<[_; MAX_KERNEL_ARGS]>::new();
        for a in &resolved {
            match a {
                ArgRef::Read(s) => accesses.push(("kernel argument", s, Access::Read)),
                ArgRef::Write(s) => accesses.push(("kernel argument", s, Access::Write)),
                ArgRef::Scalar { .. } => {}
            }
        }
        self.enqueue("launch", &accesses, || {
            let raw: SmallVec<[KernelArg<'_, B>; MAX_KERNEL_ARGS]> = resolved
                .iter()
                .map(|a| match a {
                    ArgRef::Read(s) => KernelArg::Buffer {
                        at: s.at(),
                        bytes: s.bytes(),
                        write: false,
                    },
                    ArgRef::Write(s) => KernelArg::Buffer {
                        at: s.at(),
                        bytes: s.bytes(),
                        write: true,
                    },
                    ArgRef::Scalar { bytes, len } => KernelArg::Scalar {
                        bytes: *bytes,
                        len: *len,
                    },
                })
                .collect();
            // SAFETY: the kernel's GPU code was vouched for by the caller of the unsafe
            // `KernelSpec::cuda`/`ptx` to take the signature `A::Sig`, which the sealed
            // `LaunchArgs` built these arguments from (a CPU closure is safe Rust); every
            // range comes from a checked view of this context's arrays; `enqueue` ordered
            // the ranges after conflicting uses and records this one, so no buffer is freed
            // before the launch has run; written arguments are `&mut` borrows or views, so
            // no written range overlaps another argument.
            unsafe { self.backend().launch(self.raw(), &kernel.raw, &cfg, &raw) }
        })
    }
}
