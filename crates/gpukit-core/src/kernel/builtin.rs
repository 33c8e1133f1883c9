//! Built-in ops written as `#[kernel]`s (`#[kernel(core = "crate")]` inside this crate):
//! each context loads such a kernel the first time an op launches it and keeps it, and the
//! op's launch is ordered and reported under the op's own name.
//!
//! A built-in kernel runs bounds-checked in debug builds, so that every test of an op also
//! checks that its kernels stay inside their arrays (an access outside is
//! [`crate::Error::KernelFailed`] naming the kernel), and without the checks in release
//! builds, where the op's own argument checks and those tests are what keep it in bounds.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::backend::Backend;
use crate::error::Result;
use crate::stream::Stream;

use super::{Kernel, KernelSig, KernelSpec, LaunchArgs, LaunchConfig};

/// The most blocks of a built-in kernel that walks its elements in a grid-stride loop.
const STRIDE_BLOCKS: usize = 4096;

/// The launch of a grid-stride kernel over `n` elements (not zero): blocks of 256 threads,
/// one element each up to [`STRIDE_BLOCKS`] blocks, more per thread past that (a grid that
/// fits every backend's limits).
pub(crate) fn grid_stride(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid: [n.div_ceil(256).clamp(1, STRIDE_BLOCKS) as u32, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// A context's loaded built-in kernels, by the type of the function that makes each spec
/// (a generic kernel's instantiations are different functions).
#[derive(Default)]
pub(crate) struct Builtins {
    loaded: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl<B: Backend> Stream<B> {
    /// The built-in kernel `spec` makes, loaded on this context the first time it is asked
    /// for.
    pub(crate) fn builtin_kernel<S, F>(&self, spec: F) -> Result<Arc<Kernel<S, B>>>
    where
        S: KernelSig + 'static,
        F: Fn() -> KernelSpec<S> + 'static,
    {
        let shared = self.shared_arc();
        // Held while loading: two threads asking for the same kernel compile it once.
        let mut loaded = shared
            .builtins
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(k) = loaded.get(&TypeId::of::<F>()) {
            if let Ok(k) = Arc::clone(k).downcast::<Kernel<S, B>>() {
                return Ok(k);
            }
        }
        let spec = spec();
        let spec = if cfg!(debug_assertions) {
            spec
        } else {
            // SAFETY: built-in kernels are written to touch only indices below the lengths
            // their op checked and passed (each op's documentation states the lengths); the
            // debug builds that every test of the ops runs keep the checks and fail on any
            // access outside.
            unsafe { spec.unchecked() }
        };
        let k = Arc::new(Kernel::load(self, spec)?);
        loaded.insert(
            TypeId::of::<F>(),
            Arc::clone(&k) as Arc<dyn Any + Send + Sync>,
        );
        Ok(k)
    }

    /// The windows `(start, len)` over `n` elements in which an element-wise built-in op
    /// launches its kernel, so that no array argument, of elements of at most `elem_bytes`
    /// bytes, is over the device's [`max_array_bytes`](crate::LaunchLimits::max_array_bytes)
    /// (one window, all of it, on the CPU and CUDA).
    pub(crate) fn windows(
        &self,
        n: usize,
        elem_bytes: usize,
    ) -> impl Iterator<Item = (usize, usize)> {
        let max = self.shared_arc().info.limits.max_array_bytes / elem_bytes.max(1) as u64;
        let per = usize::try_from(max).unwrap_or(usize::MAX).max(1);
        (0..n)
            .step_by(per)
            .map(move |start| (start, per.min(n - start)))
    }

    /// Launches the built-in kernel `spec` makes, as the op `call`: ordered over its array
    /// arguments like any op, and any error naming `call`.
    pub(crate) fn launch_builtin<A, F>(
        &self,
        call: &'static str,
        spec: F,
        cfg: LaunchConfig,
        args: A,
    ) -> Result<()>
    where
        A: LaunchArgs<B>,
        A::Sig: 'static,
        F: Fn() -> KernelSpec<A::Sig> + 'static,
    {
        let k = self.builtin_kernel(spec)?;
        self.launch_as(call, &k, cfg, args)
    }
}
