//! [`KernelSpec`]: a kernel before it is loaded, typed by its signature; its GPU code is
//! `unsafe` to give (see the module docs of [`crate::kernel`]), its CPU closure safe.

use std::marker::PhantomData;
use std::sync::Arc;

use super::geometry::for_each_thread;
use super::*;

/// A kernel before it is loaded: its name, GPU code and CPU closure, typed by signature `S`.
pub struct KernelSpec<S: KernelSig> {
    pub(super) desc: KernelDesc,
    /// A `#[kernel]`'s CUDA C, WGSL and WGSL without subgroups, all without bounds checks,
    /// for [`KernelSpec::unchecked`].
    unchecked: Option<Box<Unchecked>>,
    _s: PhantomData<fn(S)>,
}

/// A `#[kernel]`'s code without bounds checks: CUDA C, WGSL, WGSL without subgroups.
type Unchecked = (String, Option<String>, Option<String>);

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
                wgsl_without_subgroups: None,
                cpu: None,
                checked: None,
                native: false,
            },
            unchecked: None,
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
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
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
        let erased: CpuKernelFn = Arc::new(move |cfg: &LaunchConfig, raw: &[RawArg], _| {
            if raw.len() != S::ARITY {
                return Err(format!(
                    "{} arguments given, the signature has {}",
                    raw.len(),
                    S::ARITY
                ));
            }
            // SAFETY: the launcher built `raw` from arguments whose types match `S` (the
            // `LaunchArgs<B, S>` bound of `Stream::launch`), keeps every range alive and
            // ordered for the duration of this call, and Rust's borrow rules at the launch
            // site forbid an `Out` to alias another argument.
            let mut args = unsafe { S::from_raw(raw) };
            for_each_thread(cfg, |t| f(t, &mut args));
            Ok(())
        });
        self.desc.cpu = Some(erased);
        self
    }

    /// The spec with `body` as its CPU implementation in place of the `#[kernel]`'s twin: a
    /// built-in op's native Rust body (a whole launch at once, over the arguments), where
    /// the twin, which runs thread by thread, is slower. The CPU backend passes a checked
    /// kernel its signature's arguments followed by the convention's; the body takes the
    /// signature's.
    pub(crate) fn native(
        self,
        body: impl for<'a, 'b> Fn(&'b mut S::Cpu<'a>) + Send + Sync + 'static,
    ) -> Self {
        self.native_reporting(move |args, _| body(args))
    }

    /// [`KernelSpec::native`] for a body that reports what the kernel reports
    /// (`report_out_of_bounds`) through the launch's fault record, as the twin would.
    pub(crate) fn native_reporting(
        mut self,
        body: impl for<'a, 'b> Fn(&'b mut S::Cpu<'a>, &KernelFaults<'_>) + Send + Sync + 'static,
    ) -> Self {
        let erased: CpuKernelFn = Arc::new(move |_: &LaunchConfig, raw: &[RawArg], _| {
            let faults = checked_record::<S>(raw)?;
            // SAFETY: as in `KernelSpec::cpu`: the first `S::ARITY` raw arguments were built
            // from arguments whose types match `S`, live and ordered for this call, with no
            // written range aliasing another.
            let mut args = unsafe { S::from_raw(&raw[..S::ARITY]) };
            body(&mut args, &faults);
            Ok(())
        });
        self.desc.cpu = Some(erased);
        self.desc.native = true;
        self
    }

    /// The untyped description.
    pub fn desc(&self) -> &KernelDesc {
        &self.desc
    }

    /// The kernel's CUDA C, if it has some: for a `#[kernel]`, the code it generated.
    pub fn cuda_source(&self) -> Option<&str> {
        match &self.desc.source {
            Some(KernelSource::CudaC(src)) => Some(src),
            _ => None,
        }
    }

    /// The kernel's WGSL, if it has some: for a `#[kernel]`, the code it generated.
    pub fn wgsl_source(&self) -> Option<&str> {
        self.desc.wgsl.as_deref()
    }

    /// Whether every access of the kernel is bounds-checked (a `#[kernel]`'s are, unless
    /// made [`KernelSpec::unchecked`]).
    pub fn is_checked(&self) -> bool {
        self.desc.checked.as_ref().is_some_and(|c| c.checks)
    }

    /// The `#[kernel]` without the bounds checks of its GPU code's reads and writes, for a
    /// hot kernel whose every access is known to be in bounds (`kernel_bench` measures what
    /// the checks cost). Atomics keep their checks, the CPU twin all of its (it is safe
    /// Rust), and WGSL still clamps accesses to the bound window. A spec without a checked
    /// variant (written by hand) is returned as it is.
    ///
    /// # Safety
    ///
    /// Every launch of the kernel reads and writes its arrays only within their lengths
    /// (and its shared arrays within their sizes): out of bounds, the GPU code would read or
    /// write whatever memory lies there.
    pub unsafe fn unchecked(mut self) -> Self {
        if let (Some(variant), Some(abi)) = (self.unchecked.take(), self.desc.checked.as_mut()) {
            let (cuda, wgsl, plain) = *variant;
            self.desc.source = Some(KernelSource::CudaC(cuda));
            self.desc.wgsl = wgsl;
            self.desc.wgsl_without_subgroups = plain;
            abi.checks = false;
        }
        self
    }

    /// The `#[kernel]` with its subgroup operations computed through workgroup memory on
    /// every Vulkan adapter (subgroups of 32 lanes, float sums in lane order, as on the CPU
    /// twin), not only on those without subgroups, where the backend chooses that code by
    /// itself: to compare the two, or to step around a driver's subgroup bug. A kernel
    /// without subgroup operations, and the CUDA and CPU backends, are unaffected.
    pub fn without_subgroups(mut self) -> Self {
        if let Some(plain) = self.desc.wgsl_without_subgroups.take() {
            self.desc.wgsl = Some(plain);
        }
        if let Some(variant) = self.unchecked.as_mut() {
            if let Some(plain) = variant.2.take() {
                variant.1 = Some(plain);
            }
        }
        self
    }

    /// The spec of one instantiation of a generic `#[kernel]`: `S2` is the instantiation's
    /// signature (`(Out<f32>, f32)` for `T = f32`), `None` unless it is `S` itself.
    ///
    /// # Safety
    ///
    /// As for [`KernelSpec::__generated`], for the signature `S2`.
    #[doc(hidden)]
    pub unsafe fn __generated_as<S2: KernelSig, F, R>(
        name: &str,
        cuda: &str,
        wgsl: Option<&str>,
        abi: CheckedAbi,
        unchecked: (&str, Option<&str>),
        without_subgroups: (Option<&str>, Option<&str>),
        (twin, racecheck): (F, R),
    ) -> Option<Self>
    where
        F: CpuTwin<S2>,
        R: CpuTwin<S2>,
    {
        if std::any::TypeId::of::<S2>() != std::any::TypeId::of::<S>() {
            return None;
        }
        // SAFETY: forwarded from the caller.
        let spec = unsafe {
            KernelSpec::<S2>::__generated(
                name,
                cuda,
                wgsl,
                abi,
                unchecked,
                without_subgroups,
                (twin, racecheck),
            )
        };
        spec.retyped()
    }

    /// The same spec typed `S2`, where `S2` is `S` (`None` where it is not): how a
    /// built-in op generic over its element type picks among kernels written per type.
    pub(crate) fn retyped<S2: KernelSig>(self) -> Option<KernelSpec<S2>> {
        // The description is untyped, and `S2` is `S`: the same spec, typed `S2`.
        (std::any::TypeId::of::<S2>() == std::any::TypeId::of::<S>()).then(|| KernelSpec {
            desc: self.desc,
            unchecked: self.unchecked,
            _s: PhantomData,
        })
    }

    /// The spec `#[kernel]` expands to: generated CUDA C and WGSL, and a CPU twin that runs
    /// a whole launch. Not for hand-written code.
    ///
    /// # Safety
    ///
    /// The GPU code takes the signature `S` followed by the arguments of the checked
    /// convention (see [`CheckedAbi`]), checks every access against the lengths it is
    /// given, reporting the first that falls outside through the fault record, and
    /// writes only through [`Out`] parameters; `abi.arrays` names its arrays in the order
    /// of its fault codes. `unchecked` is the same code without the checks (the caller of
    /// [`KernelSpec::unchecked`] vouches for its accesses); `without_subgroups`, the WGSL
    /// (checked, unchecked) that computes subgroup operations through workgroup memory,
    /// under the same contract. The twins run a launch on the CPU: the first plainly, the
    /// second telling the launch's race checker of every access (`GPU_KERNEL_RACECHECK`).
    #[doc(hidden)]
    pub unsafe fn __generated<F, R>(
        name: &str,
        cuda: &str,
        wgsl: Option<&str>,
        abi: CheckedAbi,
        unchecked: (&str, Option<&str>),
        without_subgroups: (Option<&str>, Option<&str>),
        (twin, racecheck): (F, R),
    ) -> Self
    where
        F: CpuTwin<S>,
        R: CpuTwin<S>,
    {
        let mut s = Self::named(name);
        let arrays = abi.arrays.clone();
        s.desc.source = Some(KernelSource::CudaC(cuda.to_owned()));
        s.desc.wgsl = wgsl.map(str::to_owned);
        s.desc.checked = Some(CheckedAbi {
            arity: S::ARITY,
            ..abi
        });
        s.desc.wgsl_without_subgroups = without_subgroups.0.map(str::to_owned);
        s.unchecked = Some(Box::new((
            unchecked.0.to_owned(),
            unchecked.1.map(str::to_owned),
            without_subgroups.1.map(str::to_owned),
        )));
        let erased: CpuKernelFn =
            Arc::new(move |cfg: &LaunchConfig, raw: &[RawArg], run: CpuRun| {
                let faults = checked_record::<S>(raw)?;
                // SAFETY: as in `KernelSpec::cpu`: the first `S::ARITY` raw arguments were
                // built from arguments whose types match `S`, live and ordered for this call,
                // with no written range aliasing another.
                let mut args = unsafe { S::from_raw(&raw[..S::ARITY]) };
                if !run.racecheck {
                    return twin(cfg, &mut args, &faults);
                }
                let faults = faults.race_checked(cfg);
                racecheck(cfg, &mut args, &faults)?;
                match faults.race().and_then(|r| r.report(&arrays)) {
                    Some(race) => Err(race),
                    None => Ok(()),
                }
            });
        s.desc.cpu = Some(erased);
        s
    }
}

/// A `#[kernel]`'s CPU twin: a whole launch over the typed arguments, reporting through
/// the fault record (and, in its race-checked instance, to the launch's race checker).
#[doc(hidden)]
pub trait CpuTwin<S: KernelSig>:
    for<'a, 'b> Fn(
        &LaunchConfig,
        &'b mut S::Cpu<'a>,
        &KernelFaults<'_>,
    ) -> std::result::Result<(), String>
    + Send
    + Sync
    + 'static
{
}

impl<S: KernelSig, T> CpuTwin<S> for T where
    T: for<'a, 'b> Fn(
            &LaunchConfig,
            &'b mut S::Cpu<'a>,
            &KernelFaults<'_>,
        ) -> std::result::Result<(), String>
        + Send
        + Sync
        + 'static
{
}

/// The fault record a checked kernel's launch passes after the signature's arguments (a
/// length per array, the tag, the record), as the twin writes it.
fn checked_record<S: KernelSig>(raw: &[RawArg]) -> std::result::Result<KernelFaults<'_>, String> {
    let (Some(RawArg::Slice { ptr, bytes }), Some(RawArg::Scalar(tag))) = (
        raw.last(),
        raw.len().checked_sub(2).and_then(|i| raw.get(i)),
    ) else {
        return Err("launched without the checked convention's arguments".into());
    };
    if raw.len() < S::ARITY + 2 || *bytes < FAULT_WORDS * 4 {
        return Err(format!(
            "{} arguments given, the checked signature has at least {}",
            raw.len(),
            S::ARITY + 2
        ));
    }
    let tag = u32::from_ne_bytes([tag[0], tag[1], tag[2], tag[3]]);
    // SAFETY: the launcher passes the context's fault record last: FAULT_WORDS live,
    // 4-aligned words that stay allocated for the context's life and that everything
    // touches atomically only.
    Ok(unsafe { KernelFaults::from_raw(*ptr, tag) })
}
