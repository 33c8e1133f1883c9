//! The built-in ops: NVRTC-compiled modules per element type, their launches, and gemm
//! through cuBLAS.

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;
use gpukit_core::{BinaryOp, BufAt, DType, Error, Float, Gemm, Numeric, ReduceOp, Result, UnaryOp};
use gpukit_cuda_sys::cublas::CublasLib;
use gpukit_cuda_sys::ffi::cublas::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t,
    cublasStatus_t, cudaDataType,
};
use gpukit_cuda_sys::kernels::{
    builtin_source, kernel_names, Elem, BUILTIN_OPTIONS, MAX_PARTIALS, REDUCE_BLOCK,
};
use gpukit_cuda_sys::nvrtc::{NvrtcLib, Target};

use crate::backend::{CudaBackend, CudaStream};
use crate::device::{lock, Device, Raw};
use crate::error::CudaError;

/// Threads per block of the element-wise kernels.
const BLOCK: u32 = 256;
/// Blocks per SM the element-wise grids are capped at (grid-stride loops cover the rest).
const BLOCKS_PER_SM: u32 = 32;

/// One element type's loaded module.
pub(crate) struct Module {
    raw: Raw<sys::CUmodule>,
    fns: Vec<(&'static str, Raw<sys::CUfunction>)>,
}

impl Module {
    fn get(&self, name: &'static str) -> Result<sys::CUfunction> {
        self.fns
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.0)
            .ok_or_else(|| Error::Backend {
                backend: "cuda",
                call: "cuModuleGetFunction",
                message: format!("the built-in module has no `{name}`"),
            })
    }
}

/// The built-in modules of one context, loaded on first use.
pub(crate) struct Builtins {
    pub nvrtc: &'static NvrtcLib,
    target: Target,
    modules: [OnceLock<Module>; 10],
    loading: Mutex<()>,
}

impl Builtins {
    pub fn new(nvrtc: &'static NvrtcLib, target: Target) -> Self {
        Builtins {
            nvrtc,
            target,
            modules: Default::default(),
            loading: Mutex::new(()),
        }
    }

    /// The module for `dtype`, compiled (once per process) and loaded (once per context).
    fn module(&self, dev: &Device, dtype: DType) -> Result<&Module> {
        let elem = elem(dtype);
        let slot = &self.modules[Elem::ALL.iter().position(|&e| e == elem).unwrap_or(0)];
        if let Some(m) = slot.get() {
            return Ok(m);
        }
        let _guard = lock(&self.loading);
        if let Some(m) = slot.get() {
            return Ok(m);
        }
        let src = builtin_source(elem);
        let compiled = self
            .nvrtc
            .compile_cached(
                &src,
                &format!("builtin_{}", elem.name()),
                self.target,
                BUILTIN_OPTIONS,
            )
            .map_err(|e| CudaError::Compile {
                kernel: format!("built-in ops for {}", elem.name()),
                log: e.to_string(),
            })?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: the context is current (callers bind); the image is a cubin or NUL-terminated
        // PTX that lives across the call.
        dev.check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut module, compiled.image.as_ptr().cast())
        })?;
        let mut fns = Vec::new();
        for name in kernel_names(elem) {
            let mut f: sys::CUfunction = std::ptr::null_mut();
            let c_name = format!("{name}\0");
            // SAFETY: a live module; NUL-terminated name; live out-pointer.
            let r = unsafe { sys::cuModuleGetFunction(&mut f, module, c_name.as_ptr().cast()) };
            if let Err(e) = dev.check("cuModuleGetFunction", r) {
                // SAFETY: the module was just loaded and nothing refers to it.
                unsafe { sys::cuModuleUnload(module) };
                return Err(e.into());
            }
            fns.push((name, Raw(f)));
        }
        let _ = slot.set(Module {
            raw: Raw(module),
            fns,
        });
        slot.get().ok_or_else(|| Error::Backend {
            backend: "cuda",
            call: "cuModuleLoadData",
            message: "the module cache lost a module".into(),
        })
    }

    /// Unloads every module (the context is current; no queued work uses them).
    pub fn unload(&mut self, _dev: &Device) {
        for slot in &mut self.modules {
            if let Some(m) = slot.take() {
                // SAFETY: the backend is being dropped after every stream was destroyed
                // (streams are synchronised then), so no launch of this module is pending.
                unsafe { sys::cuModuleUnload(m.raw.0) };
            }
        }
    }
}

/// The kernel module element type of a dtype.
fn elem(d: DType) -> Elem {
    match d {
        DType::F32 => Elem::F32,
        DType::F64 => Elem::F64,
        DType::F16 => Elem::F16,
        DType::BF16 => Elem::BF16,
        DType::I8 => Elem::I8,
        DType::U8 => Elem::U8,
        DType::I32 => Elem::I32,
        DType::U32 => Elem::U32,
        DType::I64 => Elem::I64,
        DType::U64 => Elem::U64,
    }
}

/// The grid for an element-wise launch over `n` elements.
fn grid_for(b: &CudaBackend, n: usize) -> u32 {
    let cap = b.dev.info.multiprocessors.max(1) * BLOCKS_PER_SM;
    let blocks = n.div_ceil(BLOCK as usize).max(1);
    u32::try_from(blocks).unwrap_or(u32::MAX).min(cap)
}

/// Launches built-in `name` for `T` with the given parameters.
///
/// # Safety
///
/// - `params` point, in order, at values of the types `name`'s parameters have in
///   builtin.cu for `T`;
/// - the device ranges among them meet the [`gpukit_core::Backend`] contract of the op that
///   calls this (inside their buffers, ordered, not freed before the launch has run), and
///   the scratch buffer is the stream's own.
unsafe fn run<T: Numeric>(
    b: &CudaBackend,
    stream: &CudaStream,
    name: &'static str,
    grid: u32,
    block: u32,
    params: &mut [*mut c_void],
) -> Result<()> {
    b.dev.bind()?;
    let f = b.builtins.module(&b.dev, T::DTYPE)?.get(name)?;
    // SAFETY: `f` is a kernel of this context whose parameters are, in order, the values the
    // pointers in `params` point to, and every device range among them is valid for the
    // launch (this function's contract).
    let r = unsafe {
        sys::cuLaunchKernel(
            f,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            stream.raw.0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    Ok(b.dev.check("cuLaunchKernel", r)?)
}

/// A pointer to a kernel parameter, as `cuLaunchKernel` wants it.
fn p<V>(v: &V) -> *mut c_void {
    (v as *const V).cast_mut().cast()
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::fill`].
pub(crate) unsafe fn fill<T: Numeric>(
    b: &CudaBackend,
    s: &CudaStream,
    dst: BufAt<'_, CudaBackend>,
    len: usize,
    value: T,
) -> Result<()> {
    let (out, n) = (dst.buf.at(dst.offset), len as u64);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            "fill",
            grid_for(b, len),
            BLOCK,
            &mut [p(&out), p(&value), p(&n)],
        )
    }
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::axpy`].
pub(crate) unsafe fn axpy<T: Numeric>(
    b: &CudaBackend,
    s: &CudaStream,
    alpha: T,
    x: BufAt<'_, CudaBackend>,
    y: BufAt<'_, CudaBackend>,
    len: usize,
) -> Result<()> {
    let (xp, yp, n) = (x.buf.at(x.offset), y.buf.at(y.offset), len as u64);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            "axpy",
            grid_for(b, len),
            BLOCK,
            &mut [p(&alpha), p(&xp), p(&yp), p(&n)],
        )
    }
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::scale`].
pub(crate) unsafe fn scale<T: Numeric>(
    b: &CudaBackend,
    s: &CudaStream,
    alpha: T,
    x: BufAt<'_, CudaBackend>,
    len: usize,
) -> Result<()> {
    let (xp, n) = (x.buf.at(x.offset), len as u64);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            "scale",
            grid_for(b, len),
            BLOCK,
            &mut [p(&alpha), p(&xp), p(&n)],
        )
    }
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::binary`].
pub(crate) unsafe fn binary<T: Numeric>(
    b: &CudaBackend,
    s: &CudaStream,
    op: BinaryOp,
    x: BufAt<'_, CudaBackend>,
    y: BufAt<'_, CudaBackend>,
    out: BufAt<'_, CudaBackend>,
    len: usize,
) -> Result<()> {
    let name = match op {
        BinaryOp::Add => "add_op",
        BinaryOp::Sub => "sub_op",
        BinaryOp::Mul => "mul_op",
        BinaryOp::Div => "div_op",
    };
    let (xp, yp, op_, n) = (
        x.buf.at(x.offset),
        y.buf.at(y.offset),
        out.buf.at(out.offset),
        len as u64,
    );
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            name,
            grid_for(b, len),
            BLOCK,
            &mut [p(&xp), p(&yp), p(&op_), p(&n)],
        )
    }
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::unary`].
pub(crate) unsafe fn unary<T: Float>(
    b: &CudaBackend,
    s: &CudaStream,
    op: UnaryOp,
    x: BufAt<'_, CudaBackend>,
    out: BufAt<'_, CudaBackend>,
    len: usize,
) -> Result<()> {
    let name = match op {
        UnaryOp::Relu => "relu",
        UnaryOp::Sigmoid => "sigmoid",
        UnaryOp::Tanh => "tanh_op",
        UnaryOp::Exp => "exp_op",
    };
    let (xp, op_, n) = (x.buf.at(x.offset), out.buf.at(out.offset), len as u64);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            name,
            grid_for(b, len),
            BLOCK,
            &mut [p(&xp), p(&op_), p(&n)],
        )
    }
}

/// Blocks of a reduction's first launch.
fn partial_grid(len: usize) -> u32 {
    u32::try_from(len.div_ceil(REDUCE_BLOCK as usize).max(1))
        .unwrap_or(MAX_PARTIALS)
        .min(MAX_PARTIALS)
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::reduce`].
pub(crate) unsafe fn reduce<T: Numeric>(
    b: &CudaBackend,
    s: &CudaStream,
    op: ReduceOp,
    x: BufAt<'_, CudaBackend>,
    len: usize,
    out: BufAt<'_, CudaBackend>,
) -> Result<()> {
    let (partial, final_) = match op {
        ReduceOp::Sum => ("sum_partial", "sum_final"),
        ReduceOp::Max => ("max_partial", "max_final"),
    };
    let (xp, n, scratch) = (x.buf.at(x.offset), len as u64, s.scratch);
    let parts = partial_grid(len);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            partial,
            parts,
            REDUCE_BLOCK,
            &mut [p(&xp), p(&n), p(&scratch)],
        )
    }?;
    let op_ = out.buf.at(out.offset);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            final_,
            1,
            REDUCE_BLOCK,
            &mut [p(&scratch), p(&parts), p(&op_)],
        )
    }
}

/// # Safety
///
/// The contract of [`gpukit_core::Backend::dot`].
pub(crate) unsafe fn dot<T: Numeric>(
    b: &CudaBackend,
    s: &CudaStream,
    x: BufAt<'_, CudaBackend>,
    y: BufAt<'_, CudaBackend>,
    len: usize,
    out: BufAt<'_, CudaBackend>,
) -> Result<()> {
    let (xp, yp, n, scratch) = (
        x.buf.at(x.offset),
        y.buf.at(y.offset),
        len as u64,
        s.scratch,
    );
    let parts = partial_grid(len);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            "dot_partial",
            parts,
            REDUCE_BLOCK,
            &mut [p(&xp), p(&yp), p(&n), p(&scratch)],
        )
    }?;
    let op_ = out.buf.at(out.offset);
    // SAFETY: the parameters follow the entry point's signature in builtin.cu, and the ranges
    // meet the Backend contract this function was called under.
    unsafe {
        run::<T>(
            b,
            s,
            "sum_final",
            1,
            REDUCE_BLOCK,
            &mut [p(&scratch), p(&parts), p(&op_)],
        )
    }
}

// ----- gemm --------------------------------------------------------------------------

fn blas_lib(b: &CudaBackend) -> Result<&'static CublasLib> {
    let major = gpukit_cuda_sys::probe()
        .ok()
        .map(|p| p.driver_version_pair().0);
    gpukit_cuda_sys::cublas::cublas(major).map_err(|e| Error::Unavailable {
        backend: "cuda",
        reason: format!("gemm needs cuBLAS on CUDA device {}: {e}", b.dev.ordinal),
    })
}

fn blas_check(lib: &CublasLib, call: &'static str, st: cublasStatus_t) -> Result<()> {
    if st == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    let (name, message) = lib.status_parts(st);
    Err(CudaError::Cublas {
        call,
        status: st.0,
        name,
        message,
    }
    .into())
}

/// The stream's cuBLAS handle, created and bound to the stream on first use.
fn blas_handle(b: &CudaBackend, lib: &CublasLib, s: &CudaStream) -> Result<cublasHandle_t> {
    let mut slot = lock(&s.blas);
    if let Some(h) = *slot {
        return Ok(h.0);
    }
    let mut h: cublasHandle_t = std::ptr::null_mut();
    // SAFETY: the context is current (callers bind); live out-pointer.
    blas_check(lib, "cublasCreate", unsafe {
        lib.api.cublasCreate_v2(&mut h)
    })?;
    // SAFETY: a live handle and a live stream of the current context; cuBLAS's stream type
    // is the driver's `CUstream_st *`.
    let st = unsafe { lib.api.cublasSetStream_v2(h, s.raw.0.cast()) };
    // Default math (no TF32 unless NVIDIA_TF32_OVERRIDE asks), and no reductions in 16 bits:
    // with split-K, cuBLAS may otherwise sum f16/bf16 partial products in the output type,
    // and results would drift from the f32-accumulated ones the CPU backend gives.
    let mode = cublasMath_t(
        cublasMath_t::CUBLAS_DEFAULT_MATH.0
            | cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.0,
    );
    let st = blas_check(lib, "cublasSetStream", st).and_then(|()| {
        // SAFETY: a live handle; the mode is a valid combination of cublasMath_t flags.
        let r = unsafe { lib.api.cublasSetMathMode(h, mode) };
        blas_check(lib, "cublasSetMathMode", r)
    });
    if let Err(e) = st {
        // SAFETY: the handle was just created and has no work.
        unsafe { lib.api.cublasDestroy_v2(h) };
        return Err(e);
    }
    *slot = Some(Raw(h));
    let _ = b;
    Ok(h)
}

/// Destroys a stream's cuBLAS handle (its stream is synchronised).
pub(crate) fn destroy_blas(h: Raw<cublasHandle_t>) {
    if let Ok(lib) = gpukit_cuda_sys::cublas::cublas(None) {
        // SAFETY: a handle created by `blas_handle`, destroyed once, its stream idle.
        unsafe { lib.api.cublasDestroy_v2(h.0) };
    }
}

/// Which stored matrix fills one of cuBLAS's operand slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    /// gpukit-core's `A`.
    A,
    /// gpukit-core's `B`.
    B,
}

/// Every argument of the cuBLAS gemm call but the handle, the scalars and the element type:
/// the one description that `gemm` passes and the unit test runs through a reference BLAS,
/// so the two cannot drift apart.
///
/// cuBLAS is column-major and a row-major `r x c` matrix is a column-major `c x r` one, so
/// gpukit-core's row-major `C = op(A) op(B)` is cuBLAS's `C^T = op(B)^T op(A)^T`: B fills the
/// first slot, A the second, and cuBLAS's `m x n` result is gpukit-core's `n x m` C^T.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlasCall {
    /// The matrix in cuBLAS's first slot (its `A`), its operation and leading dimension.
    first: Operand,
    op_first: cublasOperation_t,
    ld_first: i32,
    /// The matrix in cuBLAS's second slot (its `B`), its operation and leading dimension.
    second: Operand,
    op_second: cublasOperation_t,
    ld_second: i32,
    /// cuBLAS's `m`, `n` and `k`: its column-major C is `m x n`, the inner dimension `k`.
    m: i32,
    n: i32,
    k: i32,
    /// C's leading dimension.
    ldc: i32,
}

impl BlasCall {
    /// The call for gpukit-core's row-major gemm of `op(A)` (`m x k`) and `op(B)` (`k x n`).
    ///
    /// Row-major `B` (`k x n`, or `n x k` when transposed) read column-major is `B^T` with
    /// leading dimension `n` (or `B` itself with leading dimension `k`, which the call
    /// transposes); the same for `A` with `m` and `k`.
    fn for_row_major(trans_a: bool, trans_b: bool, m: i32, n: i32, k: i32) -> BlasCall {
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        BlasCall {
            first: Operand::B,
            op_first: op(trans_b),
            ld_first: if trans_b { k } else { n },
            second: Operand::A,
            op_second: op(trans_a),
            ld_second: if trans_a { m } else { k },
            m: n,
            n: m,
            k,
            ldc: n,
        }
    }

    /// The operands in cuBLAS's order, given gpukit-core's `a` and `b`.
    fn operands<P: Copy>(&self, a: P, b: P) -> (P, P) {
        let pick = |o: Operand| match o {
            Operand::A => a,
            Operand::B => b,
        };
        (pick(self.first), pick(self.second))
    }
}

/// `C = alpha op(A) op(B) + beta C`, row-major, through the column-major cuBLAS call that
/// [`BlasCall`] describes.
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::gemm`].
pub(crate) unsafe fn gemm<T: Float>(
    b: &CudaBackend,
    s: &CudaStream,
    g: &Gemm<T>,
    a: BufAt<'_, CudaBackend>,
    bm: BufAt<'_, CudaBackend>,
    c: BufAt<'_, CudaBackend>,
) -> Result<()> {
    b.dev.bind()?;
    let lib = blas_lib(b)?;
    let h = blas_handle(b, lib, s)?;
    let int = |v: usize| -> Result<i32> {
        i32::try_from(v).map_err(|_| Error::Backend {
            backend: "cuda",
            call: "cublasGemm",
            message: format!("dimension {v} exceeds cuBLAS's 32-bit limit"),
        })
    };
    let call = BlasCall::for_row_major(g.trans_a, g.trans_b, int(g.m)?, int(g.n)?, int(g.k)?);
    let (first, second) = call.operands(a.buf.at(a.offset), bm.buf.at(bm.offset));
    let cp = c.buf.at(c.offset);
    // SAFETY: (all three calls) a live handle bound to `s`; device pointers to ranges gpukit-core
    // checked to hold op(A) m x k, op(B) k x n and C m x n (all non-zero), which `call` lays
    // out as cuBLAS's column-major operands (its unit test runs these very arguments); alpha
    // and beta are host scalars of the type the call reads.
    let st = unsafe {
        match T::DTYPE {
            DType::F32 => {
                let (alpha, beta) = (g.alpha.to_f64() as f32, g.beta.to_f64() as f32);
                lib.api.cublasSgemm_v2(
                    h,
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    &alpha,
                    first as *const f32,
                    call.ld_first,
                    second as *const f32,
                    call.ld_second,
                    &beta,
                    cp as *mut f32,
                    call.ldc,
                )
            }
            DType::F64 => {
                let (alpha, beta) = (g.alpha.to_f64(), g.beta.to_f64());
                lib.api.cublasDgemm_v2(
                    h,
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    &alpha,
                    first as *const f64,
                    call.ld_first,
                    second as *const f64,
                    call.ld_second,
                    &beta,
                    cp as *mut f64,
                    call.ldc,
                )
            }
            DType::F16 | DType::BF16 => {
                let ty = if T::DTYPE == DType::F16 {
                    cudaDataType::CUDA_R_16F
                } else {
                    cudaDataType::CUDA_R_16BF
                };
                let (alpha, beta) = (g.alpha.to_f64() as f32, g.beta.to_f64() as f32);
                lib.api.cublasGemmEx(
                    h,
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    p(&alpha),
                    first as *const c_void,
                    ty,
                    call.ld_first,
                    second as *const c_void,
                    ty,
                    call.ld_second,
                    p(&beta),
                    cp as *mut c_void,
                    ty,
                    call.ldc,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            other => {
                return Err(Error::Backend {
                    backend: "cuda",
                    call: "cublasGemm",
                    message: format!("no gemm for {other}"),
                })
            }
        }
    };
    blas_check(lib, "cublasGemm", st)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BLAS's column-major `C = op(A) op(B)` as cuBLAS defines it, with its argument checks
    /// (`CUBLAS_STATUS_INVALID_VALUE` becomes a panic).
    #[allow(clippy::too_many_arguments)]
    fn blas_gemm(
        op_a: cublasOperation_t,
        op_b: cublasOperation_t,
        m: i32,
        n: i32,
        k: i32,
        a: &[f64],
        lda: i32,
        b: &[f64],
        ldb: i32,
        c: &mut [f64],
        ldc: i32,
    ) {
        let transposed = |op: cublasOperation_t| match op {
            cublasOperation_t::CUBLAS_OP_N => false,
            cublasOperation_t::CUBLAS_OP_T => true,
            other => panic!("unexpected operation {other:?}"),
        };
        let (ta, tb) = (transposed(op_a), transposed(op_b));
        let dim = |v: i32| usize::try_from(v).unwrap_or_else(|_| panic!("negative argument {v}"));
        let (m, n, k, lda, ldb, ldc) = (dim(m), dim(n), dim(k), dim(lda), dim(ldb), dim(ldc));
        // The stored operands have `lda`/`ldb` rows: m (k if transposed) for A, k (n) for B.
        assert!(lda >= (if ta { k } else { m }).max(1), "lda {lda}");
        assert!(ldb >= (if tb { n } else { k }).max(1), "ldb {ldb}");
        assert!(ldc >= m.max(1), "ldc {ldc}");
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0.0;
                for l in 0..k {
                    let x = if ta { a[l + i * lda] } else { a[i + l * lda] };
                    let y = if tb { b[j + l * ldb] } else { b[l + j * ldb] };
                    acc += x * y;
                }
                c[i + j * ldc] = acc;
            }
        }
    }

    /// The cuBLAS call `gemm` makes, every argument taken from the same [`BlasCall`], computes
    /// the row-major product gpukit-core defines.
    #[test]
    fn column_major_call_computes_the_row_major_product() {
        for (m, n, k) in [(3usize, 4usize, 5usize), (1, 6, 2), (7, 1, 3), (2, 3, 1)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                // Stored A is m x k (k x m if ta), B is k x n (n x k if tb), row-major.
                let a: Vec<f64> = (0..m * k).map(|i| (i * 7 % 11) as f64 - 5.0).collect();
                let b: Vec<f64> = (0..k * n).map(|i| (i * 5 % 13) as f64 - 6.0).collect();
                let at = |i: usize, l: usize| if ta { a[l * m + i] } else { a[i * k + l] };
                let bt = |l: usize, j: usize| if tb { b[j * k + l] } else { b[l * n + j] };
                let mut want = vec![0.0; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
                    }
                }
                let call = BlasCall::for_row_major(ta, tb, m as i32, n as i32, k as i32);
                let (first, second) = call.operands(&a[..], &b[..]);
                let mut got = vec![f64::NAN; m * n];
                blas_gemm(
                    call.op_first,
                    call.op_second,
                    call.m,
                    call.n,
                    call.k,
                    first,
                    call.ld_first,
                    second,
                    call.ld_second,
                    &mut got,
                    call.ldc,
                );
                assert_eq!(
                    got, want,
                    "{m}x{n}x{k}, trans_a {ta}, trans_b {tb}: {call:?}"
                );
            }
        }
    }

    #[test]
    fn reduction_grids_stay_within_the_scratch_buffer() {
        assert_eq!(partial_grid(1), 1);
        assert_eq!(partial_grid(256), 1);
        assert_eq!(partial_grid(257), 2);
        assert_eq!(partial_grid(usize::MAX), MAX_PARTIALS);
    }
}
