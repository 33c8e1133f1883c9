//! The ops that index, in CUDA C (appended to every element type's module after the
//! template) and their launches. Each kernel is
//! gpukit-core's reference (`optable::index`) in the same order of operations; a bad index
//! claims the context's fault record as a checked kernel does (`gk_op_fault`).
//!
//! Entry points (`T` the module's element type):
//! - `gather_rows(const T *src, const unsigned int *idx, T *out, ull rows, ull cols, ull n,
//!   unsigned int *rec, unsigned int tag)`;
//! - `scatter_add_rows(..)` with the same parameters (4- and 8-byte types);
//! - `one_hot(const unsigned int *idx, T *out, ull rows, ull cols, unsigned int *rec,
//!   unsigned int tag)`;
//! - `check_indices(const unsigned int *idx, ull n, ull bound, unsigned int *rec, unsigned
//!   int tag)` (the `u32` module).

use gpukit_core::optable::Faults;
use gpukit_core::{BufAt, Result, Shape};

use crate::backend::CudaBackend;
use crate::kernels::Elem;
use crate::ops::{param, ptr, Launcher, BLOCK};
use crate::source::Entry;

/// Whether `elem`'s module has a native atomic add (4- and 8-byte types).
pub(crate) fn has_atomic_add(elem: Elem) -> bool {
    !matches!(elem, Elem::F16 | Elem::BF16 | Elem::I8 | Elem::U8)
}

/// The entry points of `elem`'s module that this file adds.
pub(crate) fn entries(elem: Elem) -> Vec<&'static str> {
    let mut v = vec!["gather_rows", "one_hot"];
    if has_atomic_add(elem) {
        v.push("scatter_add_rows");
    }
    if elem == Elem::U32 {
        v.push("check_indices");
    }
    v
}

/// The CUDA C of `elem`'s entry points (after the template).
pub(crate) fn index_source(elem: Elem) -> String {
    let mut s = String::from(
        "
// Gather, scatter, one-hot (index.rs).
__device__ __forceinline__ void gk_op_fault(unsigned int *rec, unsigned int tag, unsigned long long index, unsigned long long len) {
    if (atomicCAS(rec, 0u, 1u) == 0u) {
        rec[1] = tag; rec[2] = 0u;
        rec[3] = (unsigned int)index; rec[4] = (unsigned int)(index >> 32);
        rec[5] = (unsigned int)len; rec[6] = (unsigned int)(len >> 32);
        __threadfence();
    }
}
extern \"C\" __global__ void gather_rows(const T *src, const unsigned int *idx, T *out, unsigned long long rows, unsigned long long cols, unsigned long long n, unsigned int *rec, unsigned int tag) {
    GRID_STRIDE(e, n * cols) {
        unsigned long long r = e / cols, j = e % cols;
        unsigned int i = idx[r];
        if (i < rows) {
            out[e] = src[(unsigned long long)i * cols + j];
        } else {
            out[e] = store((C)0);
            if (j == 0) gk_op_fault(rec, tag, i, rows);
        }
    }
}
extern \"C\" __global__ void one_hot(const unsigned int *idx, T *out, unsigned long long rows, unsigned long long cols, unsigned int *rec, unsigned int tag) {
    GRID_STRIDE(e, rows * cols) {
        unsigned long long r = e / cols, j = e % cols;
        unsigned int i = idx[r];
        out[e] = store((C)(i == j ? 1 : 0));
        if (i >= cols && j == 0) gk_op_fault(rec, tag, i, cols);
    }
}
"
    );
    if has_atomic_add(elem) {
        let add = match elem {
            Elem::I64 => "atomicAdd((unsigned long long *)p, (unsigned long long)v)",
            Elem::U64 => "atomicAdd(p, v)",
            _ => "atomicAdd(p, v)",
        };
        s += &format!(
            "__device__ __forceinline__ void gk_atomic_add(T *p, T v) {{ {add}; }}
extern \"C\" __global__ void scatter_add_rows(const T *src, const unsigned int *idx, T *out, unsigned long long rows, unsigned long long cols, unsigned long long n, unsigned int *rec, unsigned int tag) {{
    GRID_STRIDE(e, n * cols) {{
        unsigned long long r = e / cols, j = e % cols;
        unsigned int i = idx[r];
        if (i < rows) gk_atomic_add(&out[(unsigned long long)i * cols + j], src[e]);
        else if (j == 0) gk_op_fault(rec, tag, i, rows);
    }}
}}
"
        );
    }
    if elem == Elem::U32 {
        s += "extern \"C\" __global__ void check_indices(const unsigned int *idx, unsigned long long n, unsigned long long bound, unsigned int *rec, unsigned int tag) {
    GRID_STRIDE(i, n) { if ((unsigned long long)idx[i] >= bound) gk_op_fault(rec, tag, idx[i], bound); }
}
";
    }
    s
}

/// `gather_rows` or `scatter_add_rows` (`scatter`).
///
/// # Safety
///
/// The contract of [`gpukit_core::Backend::op`] for the op's ranges; the fault record is the
/// context's.
pub(crate) unsafe fn rows_by_index(
    l: Launcher<'_>,
    scatter: bool,
    (src, idx, out): (
        BufAt<'_, CudaBackend>,
        BufAt<'_, CudaBackend>,
        BufAt<'_, CudaBackend>,
    ),
    (shape, n): (Shape, usize),
    faults: Faults<'_, CudaBackend>,
) -> Result<()> {
    let (sp, ip, op, rec) = (ptr(src), ptr(idx), ptr(out), ptr(faults.record));
    let (rows, cols, count, tag) = (shape.rows as u64, shape.cols as u64, n as u64, faults.tag);
    let mut params = [
        param(&sp),
        param(&ip),
        param(&op),
        param(&rows),
        param(&cols),
        param(&count),
        param(&rec),
        param(&tag),
    ];
    let entry = if scatter {
        "scatter_add_rows"
    } else {
        "gather_rows"
    };
    // SAFETY: the parameters of the entry point, in order and type; the ranges meet this
    // function's contract, and every index is checked against `rows` before it is used.
    unsafe {
        l.launch(
            Entry::Named(entry),
            l.grid_for(n * shape.cols),
            BLOCK,
            &mut params,
        )
    }
}

/// `one_hot`.
///
/// # Safety
///
/// As [`rows_by_index`].
pub(crate) unsafe fn one_hot(
    l: Launcher<'_>,
    idx: BufAt<'_, CudaBackend>,
    out: BufAt<'_, CudaBackend>,
    shape: Shape,
    faults: Faults<'_, CudaBackend>,
) -> Result<()> {
    let (ip, op, rec) = (ptr(idx), ptr(out), ptr(faults.record));
    let (rows, cols, tag) = (shape.rows as u64, shape.cols as u64, faults.tag);
    let mut params = [
        param(&ip),
        param(&op),
        param(&rows),
        param(&cols),
        param(&rec),
        param(&tag),
    ];
    // SAFETY: the parameters of `one_hot`, in order and type; the ranges meet this
    // function's contract.
    unsafe {
        l.launch(
            Entry::Named("one_hot"),
            l.grid_for(shape.rows * shape.cols),
            BLOCK,
            &mut params,
        )
    }
}

/// `check_indices` (the `u32` module).
///
/// # Safety
///
/// As [`rows_by_index`].
pub(crate) unsafe fn check_indices(
    l: Launcher<'_>,
    idx: BufAt<'_, CudaBackend>,
    len: usize,
    bound: u64,
    faults: Faults<'_, CudaBackend>,
) -> Result<()> {
    let (ip, rec, n, tag) = (ptr(idx), ptr(faults.record), len as u64, faults.tag);
    let mut params = [
        param(&ip),
        param(&n),
        param(&bound),
        param(&rec),
        param(&tag),
    ];
    // SAFETY: the parameters of `check_indices`, in order and type; the range meets this
    // function's contract.
    unsafe {
        l.launch(
            Entry::Named("check_indices"),
            l.grid_for(len),
            BLOCK,
            &mut params,
        )
    }
}
