//! The built-in ops as tasks: the op table's reference semantics (`gpukit_core::optable`) run
//! over slices on the stream's worker; gemm through `matrixmultiply`. One function,
//! [`task`], turns any [`Op`] into a task: adding an op to the table needs nothing here.

use std::sync::Arc;

use rayon::prelude::*;

use gpukit_core::{
    add_chunk_sums, arg_better, block_dots, block_sums, ordered_sum, ordered_sums, BinaryOp, BufAt,
    ChunkSums, DType, DTypeVisitor, Element, Float, Gemm, Numeric, Op, ReduceOp, Result, Rhs,
    RhsSlice, Scalar, UnaryOp, SUM_BLOCK, SUM_CHUNK, SUM_LANES,
};

use crate::mem::{Mem, SendPtr};
use crate::queue::Task;
use crate::CpuBackend;

/// A typed read-only range captured by a task.
#[derive(Clone, Copy)]
pub(crate) struct Src<T> {
    ptr: SendPtr,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

/// A typed writable range captured by a task.
#[derive(Clone, Copy)]
pub(crate) struct Dst<T> {
    ptr: SendPtr,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> Src<T> {
    pub(crate) fn new(ptr: SendPtr, len: usize) -> Self {
        Src {
            ptr,
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// # Safety
    ///
    /// - the range is live, aligned for `T` and not written while the slice is used (the
    ///   task holds the buffer's `Arc` and gpukit-core orders every writer against it).
    pub(crate) unsafe fn get<'a>(self) -> &'a [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts(self.ptr.get().cast::<T>(), self.len) }
    }
}

impl<T: Element> Dst<T> {
    pub(crate) fn new(ptr: SendPtr, len: usize) -> Self {
        Dst {
            ptr,
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// # Safety
    ///
    /// - the range is live, aligned for `T`, and accessed by nothing else while the slice is
    ///   used (gpukit-core orders every other access against this write, and `&mut` borrows at
    ///   the call site keep a write from overlapping the op's other arguments).
    pub(crate) unsafe fn get<'a>(self) -> &'a mut [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.get().cast::<T>(), self.len) }
    }
}

/// The ranges a task touches: the buffers it keeps alive.
type Keep = [Option<Arc<Mem>>; 4];

/// Collects a task's ranges, keeping each buffer alive until the task has run.
#[derive(Default)]
struct Ranges {
    keep: Keep,
    n: usize,
}

impl Ranges {
    fn hold(&mut self, at: BufAt<'_, CpuBackend>) -> SendPtr {
        if let Some(slot) = self.keep.get_mut(self.n) {
            *slot = Some(at.buf.mem.clone());
            self.n += 1;
        }
        at.buf.at(at.offset)
    }

    fn src<T: Element>(&mut self, at: BufAt<'_, CpuBackend>, len: usize) -> Src<T> {
        Src::new(self.hold(at), len)
    }

    fn dst<T: Element>(&mut self, at: BufAt<'_, CpuBackend>, len: usize) -> Dst<T> {
        Dst::new(self.hold(at), len)
    }
}

/// What an element type runs of the table: [`Ints`] the `numeric` entries, [`Floats`] all of
/// them (and softmax, cross-entropy and gemm).
trait Kind<T: Numeric> {
    /// Whether the type has float-only ops.
    const FLOAT: bool;
    fn unary(op: UnaryOp, src: Option<&[T]>, out: &mut [T]);
    fn binary(op: BinaryOp, src: Option<&[T]>, rhs: RhsSlice<'_, T>, cols: usize, out: &mut [T]);
    fn softmax(log: bool, src: Option<&[T]>, cols: usize, out: &mut [T]);
    fn cross_entropy(
        logits: &[T],
        labels: &[u32],
        cols: usize,
        loss: &mut [T],
        grad: Option<&mut [T]>,
    );
    fn gemm(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]);
}

/// The integer element types' part of the table.
struct Ints;
/// The float element types' part: all of it.
struct Floats;

/// Elements from which an element-wise op is split across the machine's cores (rayon's
/// pool, shared by every stream); smaller ones run whole on the stream's worker.
const SPLIT_FROM: usize = 1 << 20;
/// Elements per piece of a split op (rounded down to whole rows).
const PIECE: usize = 1 << 16;
/// The work of an element-wise op per element, in units of a memory-bound one (`add`): an
/// op calling the math library per element (`exp`, `tanh`, `pow`, softmax, ...) takes
/// about 3-4 ns per element here against a fraction of a nanosecond, so it is split from
/// [`SPLIT_FROM`] / `MATH` elements, in pieces of [`PIECE`] / `MATH`.
const MATH: usize = 16;
/// [`MATH`] for the ops that call the math library per element, else 1.
fn unary_work(op: UnaryOp) -> usize {
    match op {
        UnaryOp::Exp
        | UnaryOp::Log
        | UnaryOp::Log1p
        | UnaryOp::Sigmoid
        | UnaryOp::Silu
        | UnaryOp::Tanh
        | UnaryOp::Gelu
        | UnaryOp::Softplus => MATH,
        _ => 1,
    }
}
/// [`unary_work`] for a binary op.
fn binary_work(op: BinaryOp) -> usize {
    match op {
        BinaryOp::Pow => MATH,
        _ => 1,
    }
}

/// Runs `f(start, piece)` over `out` in pieces of whole `row`s, in parallel when `out` holds
/// at least [`SPLIT_FROM`] elements' worth of work (`work` per element, [`MATH`] or 1), else
/// once over all of it. For element-wise work, whose every output depends only on inputs at
/// its own index (and its row's broadcast vector), the result is the same bits however it
/// is split.
fn pieces<T: Send>(out: &mut [T], row: usize, work: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if out.len().saturating_mul(work) < SPLIT_FROM {
        return f(0, out);
    }
    let piece = (PIECE / work / row.max(1)).max(1) * row.max(1);
    out.par_chunks_mut(piece)
        .enumerate()
        .for_each(|(i, o)| f(i * piece, o));
}

/// `src[start..start + len]`, for the piece of a split op.
fn part<T>(src: Option<&[T]>, start: usize, len: usize) -> Option<&[T]> {
    src.map(|s| &s[start..start + len])
}

/// A binary op over `out` (`rows x cols`), split by [`pieces`] into whole rows for a row or
/// column vector (anywhere for an array or a scalar), each piece given its part of the
/// operands.
fn binary_pieces<T: Numeric>(
    src: Option<&[T]>,
    rhs: RhsSlice<'_, T>,
    cols: usize,
    out: &mut [T],
    work: usize,
    map: impl Fn(Option<&[T]>, RhsSlice<'_, T>, usize, &mut [T]) + Sync,
) {
    let row = match rhs {
        RhsSlice::Row(_) | RhsSlice::Col(_) => cols,
        RhsSlice::Array(_) | RhsSlice::Scalar(_) => 1,
    };
    pieces(out, row, work, |start, o| {
        let n = o.len();
        let (rhs, cols) = match rhs {
            RhsSlice::Array(b) => (RhsSlice::Array(&b[start..start + n]), n),
            RhsSlice::Scalar(v) => (RhsSlice::Scalar(v), n),
            RhsSlice::Row(v) => (RhsSlice::Row(v), cols),
            RhsSlice::Col(v) => (RhsSlice::Col(&v[start / cols..(start + n) / cols]), cols),
        };
        map(part(src, start, n), rhs, cols, o);
    });
}

impl<T: Numeric> Kind<T> for Ints {
    const FLOAT: bool = false;
    fn unary(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
        pieces(out, 1, 1, |start, o| {
            op.map_numeric(part(src, start, o.len()), o);
        });
    }
    fn binary(op: BinaryOp, src: Option<&[T]>, rhs: RhsSlice<'_, T>, cols: usize, out: &mut [T]) {
        binary_pieces(src, rhs, cols, out, 1, |s, r, c, o| {
            op.map_numeric(s, r, c, o);
        });
    }
    // Unreachable: `typed` refuses float-only ops on integers before queuing them.
    fn softmax(_: bool, _: Option<&[T]>, _: usize, _: &mut [T]) {}
    fn cross_entropy(_: &[T], _: &[u32], _: usize, _: &mut [T], _: Option<&mut [T]>) {}
    fn gemm(_: &Gemm<T>, _: &[T], _: &[T], _: &mut [T]) {}
}

impl<T: Float> Kind<T> for Floats {
    const FLOAT: bool = true;
    fn unary(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
        pieces(out, 1, unary_work(op), |start, o| {
            op.map_float(part(src, start, o.len()), o)
        });
    }
    fn binary(op: BinaryOp, src: Option<&[T]>, rhs: RhsSlice<'_, T>, cols: usize, out: &mut [T]) {
        let work = binary_work(op);
        binary_pieces(src, rhs, cols, out, work, |s, r, c, o| {
            op.map_float(s, r, c, o)
        });
    }
    fn softmax(log: bool, src: Option<&[T]>, cols: usize, out: &mut [T]) {
        // Rows are independent: split in whole rows, the same bits.
        pieces(out, cols, MATH, |start, o| {
            gpukit_core::softmax_rows(log, part(src, start, o.len()), cols, o)
        });
    }
    fn cross_entropy(
        logits: &[T],
        labels: &[u32],
        cols: usize,
        loss: &mut [T],
        grad: Option<&mut [T]>,
    ) {
        let rows = loss.len();
        if rows.saturating_mul(cols).saturating_mul(MATH) < SPLIT_FROM || cols == 0 {
            return gpukit_core::cross_entropy_rows(logits, labels, cols, loss, grad);
        }
        // Rows are independent: split in whole rows, the same bits.
        let per = (PIECE / MATH / cols).max(1);
        let rows_of = |k: usize, l: &[T]| (k * per, k * per + l.len());
        match grad {
            Some(grad) => loss
                .par_chunks_mut(per)
                .zip(grad.par_chunks_mut(per * cols))
                .enumerate()
                .for_each(|(k, (l, g))| {
                    let (a, b) = rows_of(k, l);
                    let x = &logits[a * cols..b * cols];
                    gpukit_core::cross_entropy_rows(x, &labels[a..b], cols, l, Some(g));
                }),
            None => loss.par_chunks_mut(per).enumerate().for_each(|(k, l)| {
                let (a, b) = rows_of(k, l);
                let x = &logits[a * cols..b * cols];
                gpukit_core::cross_entropy_rows(x, &labels[a..b], cols, l, None);
            }),
        }
    }
    fn gemm(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]) {
        gemm(g, a, b, c);
    }
}

fn unsupported(what: String) -> gpukit_core::Error {
    gpukit_core::Error::Unsupported {
        backend: "cpu",
        what,
    }
}

/// An element type this build of gpukit-core lacks.
fn lacks(dtype: DType) -> gpukit_core::Error {
    unsupported(format!(
        "{dtype} elements (gpukit-core is built without its `half` feature)"
    ))
}

/// Builds the task of an op for the element type the visit names.
///
/// Constructed only by [`task`], which holds the contract [`typed`] needs, so that the
/// visitor's safe methods may call it.
struct Build<'o, 'b> {
    op: &'o Op<'b, CpuBackend>,
}

impl DTypeVisitor for Build<'_, '_> {
    type Output = Result<Task>;
    fn integer<T: Numeric>(self) -> Result<Task> {
        // SAFETY: a `Build` exists only inside `task`, under its contract.
        unsafe { typed::<T, Ints>(self.op) }
    }
    fn float<T: Float>(self) -> Result<Task> {
        // SAFETY: as above.
        unsafe { typed::<T, Floats>(self.op) }
    }
}

/// The task of a cast from `T`: converts into the target type the visit names.
struct CastTo<T> {
    src: Src<T>,
    out: SendPtr,
    len: usize,
    keep: Ranges,
}

impl<T: Numeric> CastTo<T> {
    fn to<U: Numeric>(self) -> Task {
        let CastTo {
            src,
            out,
            len,
            keep,
        } = self;
        let out = Dst::<U>::new(out, len);
        Task::new(move || {
            let _keep = &keep;
            // SAFETY: the contract of `task` (live, aligned, ordered); `out` holds `len`
            // elements of the target type.
            let (s, o) = unsafe { (src.get(), out.get()) };
            gpukit_core::cast_slice(s, o);
            Ok(())
        })
    }
}

impl<T: Numeric> DTypeVisitor for CastTo<T> {
    type Output = Task;
    fn integer<U: Numeric>(self) -> Task {
        self.to::<U>()
    }
    fn float<U: Float>(self) -> Task {
        self.to::<U>()
    }
}

/// Elements of the largest operand up to which an op is short enough to run in place on the
/// calling thread when its stream is idle (see `Queue::run_or_push`): a few microseconds of
/// memory-bound work, less than a hand-off to the worker costs.
const SHORT_ELEMENTS: usize = 16 << 10;

/// Whether `op` is short enough to run in place (see [`SHORT_ELEMENTS`]); a gemm counts its
/// multiply-adds.
pub(crate) fn is_short(op: &Op<'_, CpuBackend>) -> bool {
    let elements = match *op {
        Op::Fill { len, .. }
        | Op::Axpy { len, .. }
        | Op::Unary { len, .. }
        | Op::Clamp { len, .. }
        | Op::Dot { len, .. }
        | Op::Cast { len, .. } => Some(len),
        Op::Binary { shape, .. }
        | Op::Reduce { shape, .. }
        | Op::Softmax { shape, .. }
        | Op::CrossEntropy { shape, .. } => shape.len(),
        Op::Gemm { g, .. } => {
            g.m.checked_mul(g.n)
                .and_then(|mn| mn.checked_mul(g.k))
                .and_then(|mnk| mnk.checked_mul(g.batch))
        }
    };
    elements.is_some_and(|n| n <= SHORT_ELEMENTS)
}

/// The task that runs `op` on elements of `dtype`, or why the CPU backend cannot. Every
/// element type gpukit-core has is supported (f16 and bf16 when its `half` feature is on).
///
/// # Safety
///
/// The contract of `Backend::op`: every range lies inside its buffer and is aligned, and
/// gpukit-core orders every other access to the written ranges against the task.
pub(crate) unsafe fn task(dtype: DType, op: &Op<'_, CpuBackend>) -> Result<Task> {
    dtype
        .visit(Build { op })
        .unwrap_or_else(|| Err(lacks(dtype)))
}

/// [`task`] for the element type `T`, whose part of the table is `K`'s.
///
/// # Safety
///
/// As [`task`].
unsafe fn typed<T: Numeric, K: Kind<T>>(op: &Op<'_, CpuBackend>) -> Result<Task> {
    if op.floats_only() && !K::FLOAT {
        return Err(unsupported(format!("`{}` on {}", op.name(), T::DTYPE)));
    }
    let scalar = |s: Scalar| {
        s.get::<T>()
            .ok_or_else(|| unsupported(format!("a {} scalar for {} elements", s.dtype(), T::DTYPE)))
    };
    let mut r = Ranges::default();
    // Every arm captures typed ranges (`Src`/`Dst`, whose `get` is sound under this
    // function's contract: live, aligned, ordered, a written range overlapping nothing else).
    let task = match *op {
        Op::Fill { out, len, value } => {
            let (o, v) = (r.dst::<T>(out, len), scalar(value)?);
            done(r, move || {
                // SAFETY: see above.
                let o = unsafe { o.get() };
                o.fill(v);
            })
        }
        Op::Axpy { alpha, x, y, len } => {
            let (a, x, y) = (scalar(alpha)?, r.src::<T>(x, len), r.dst::<T>(y, len));
            done(r, move || {
                // SAFETY: see above.
                let (x, y) = unsafe { (x.get(), y.get()) };
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = a.axpy(x, *y);
                }
            })
        }
        Op::Unary { op, src, out, len } => {
            let (s, o) = (src.map(|s| r.src::<T>(s, len)), r.dst::<T>(out, len));
            done(r, move || {
                // SAFETY: see above.
                let (s, o) = unsafe { (s.map(|s| s.get()), o.get()) };
                K::unary(op, s, o);
            })
        }
        Op::Binary {
            op,
            src,
            ref rhs,
            out,
            shape,
        } => {
            let len = shape.rows * shape.cols;
            let s = src.map(|s| r.src::<T>(s, len));
            let o = r.dst::<T>(out, len);
            enum R<T> {
                A(Src<T>),
                Row(Src<T>),
                Col(Src<T>),
                S(T),
            }
            let rhs = match *rhs {
                Rhs::Array(b) => R::A(r.src::<T>(b, len)),
                Rhs::Row(v) => R::Row(r.src::<T>(v, shape.cols)),
                Rhs::Col(v) => R::Col(r.src::<T>(v, shape.rows)),
                Rhs::Scalar(v) => R::S(scalar(v)?),
            };
            done(r, move || {
                // SAFETY: see above.
                let rhs = unsafe {
                    match rhs {
                        R::A(b) => RhsSlice::Array(b.get()),
                        R::Row(v) => RhsSlice::Row(v.get()),
                        R::Col(v) => RhsSlice::Col(v.get()),
                        R::S(v) => RhsSlice::Scalar(v),
                    }
                };
                // SAFETY: see above.
                let (s, o) = unsafe { (s.map(|s| s.get()), o.get()) };
                K::binary(op, s, rhs, shape.cols, o);
            })
        }
        Op::Clamp {
            lo,
            hi,
            src,
            out,
            len,
        } => {
            let (lo, hi) = (scalar(lo)?, scalar(hi)?);
            let (s, o) = (src.map(|s| r.src::<T>(s, len)), r.dst::<T>(out, len));
            done(r, move || {
                let clamp = |x: T| {
                    if x < lo {
                        lo
                    } else if x > hi {
                        hi
                    } else {
                        x
                    }
                };
                // SAFETY: see above.
                let (s, o) = unsafe { (s.map(|s| s.get()), o.get()) };
                match s {
                    Some(s) => o.iter_mut().zip(s).for_each(|(o, &x)| *o = clamp(x)),
                    None => o.iter_mut().for_each(|o| *o = clamp(*o)),
                }
            })
        }
        Op::Reduce { op, x, shape, out } => {
            let (rows, cols) = (shape.rows, shape.cols);
            let x = r.src::<T>(x, rows * cols);
            if op.is_index() {
                let o = r.dst::<u32>(out, rows);
                done(r, move || {
                    // SAFETY: see above.
                    let (x, o) = unsafe { (x.get(), o.get()) };
                    by_rows(x, cols, o, |row| arg_reduce(op, row).unwrap_or(0));
                })
            } else if (op == ReduceOp::Mean || K::FLOAT && op == ReduceOp::Sum)
                && (1..SPLIT_FROM).contains(&cols)
            {
                // An f64 sum per row (`ReduceOp::value`'s), rows side by side.
                let o = r.dst::<T>(out, rows);
                done(r, move || {
                    // SAFETY: see above.
                    let (x, o) = unsafe { (x.get(), o.get()) };
                    sum_rows(x, cols, o, |s| op.of_sum(s, cols).unwrap_or(T::ZERO));
                })
            } else {
                let o = r.dst::<T>(out, rows);
                done(r, move || {
                    // SAFETY: see above.
                    let (x, o) = unsafe { (x.get(), o.get()) };
                    by_rows(x, cols, o, |row| {
                        value_reduce(op, K::FLOAT, row).unwrap_or(T::ZERO)
                    });
                })
            }
        }
        Op::Dot { x, y, len, out } => {
            let (x, y, o) = (r.src::<T>(x, len), r.src::<T>(y, len), r.dst::<T>(out, 1));
            done(r, move || {
                // SAFETY: see above.
                let (x, y, o) = unsafe { (x.get(), y.get(), o.get()) };
                o[0] = dot(K::FLOAT, x, y);
            })
        }
        Op::Softmax {
            log,
            src,
            out,
            shape,
        } => {
            let len = shape.rows * shape.cols;
            let (s, o) = (src.map(|s| r.src::<T>(s, len)), r.dst::<T>(out, len));
            done(r, move || {
                // SAFETY: see above.
                let (s, o) = unsafe { (s.map(|s| s.get()), o.get()) };
                K::softmax(log, s, shape.cols, o);
            })
        }
        Op::CrossEntropy {
            logits,
            labels,
            loss,
            grad,
            shape,
        } => {
            let len = shape.rows * shape.cols;
            let x = r.src::<T>(logits, len);
            let y = r.src::<u32>(labels, shape.rows);
            let l = r.dst::<T>(loss, shape.rows);
            let g = grad.map(|g| r.dst::<T>(g, len));
            done(r, move || {
                // SAFETY: see above.
                let (x, y, l, g) = unsafe { (x.get(), y.get(), l.get(), g.map(|g| g.get())) };
                K::cross_entropy(x, y, shape.cols, l, g);
            })
        }
        Op::Cast { to, src, out, len } => {
            let src = r.src::<T>(src, len);
            let out = r.hold(out);
            let cast = CastTo {
                src,
                out,
                len,
                keep: r,
            };
            return to.visit(cast).ok_or_else(|| lacks(to));
        }
        Op::Gemm { g, a, b, c } => {
            let typed = Gemm {
                alpha: T::from_f64(g.alpha),
                beta: T::from_f64(g.beta),
                m: g.m,
                n: g.n,
                k: g.k,
                trans_a: g.trans_a,
                trans_b: g.trans_b,
                batch: g.batch,
                stride_a: g.stride_a,
                stride_b: g.stride_b,
                stride_c: g.stride_c,
            };
            let span = |size: usize, stride: usize| g.span(size, stride).unwrap_or(0);
            let a = r.src::<T>(a, span(g.m * g.k, g.stride_a));
            let b = r.src::<T>(b, span(g.k * g.n, g.stride_b));
            let c = r.dst::<T>(c, span(g.m * g.n, g.stride_c));
            done(r, move || {
                // SAFETY: see above.
                let (a, b, c) = unsafe { (a.get(), b.get(), c.get()) };
                let g = &typed;
                let (sa, sb, sc) = (g.m * g.k, g.k * g.n, g.m * g.n);
                for i in 0..g.batch {
                    let (ia, ib, ic) = (i * g.stride_a, i * g.stride_b, i * g.stride_c);
                    K::gemm(g, &a[ia..ia + sa], &b[ib..ib + sb], &mut c[ic..ic + sc]);
                }
            })
        }
    };
    Ok(task)
}

/// `out[r] = f(row r of x)` for the `cols`-wide rows of `x`, the rows spread over the
/// machine's cores when `x` has at least [`SPLIT_FROM`] elements in more than one row (each
/// row's result is the same wherever it is computed).
fn by_rows<T: Sync, U: Send>(x: &[T], cols: usize, out: &mut [U], f: impl Fn(&[T]) -> U + Sync) {
    // Empty rows: `chunks` would yield none; every output is `f(&[])`.
    let row = |r: usize| &x[(r * cols).min(x.len())..((r + 1) * cols).min(x.len())];
    if out.len() > 1 && x.len() >= SPLIT_FROM {
        out.par_iter_mut()
            .enumerate()
            .for_each(|(r, o)| *o = f(row(r)));
    } else {
        for (r, o) in out.iter_mut().enumerate() {
            *o = f(row(r));
        }
    }
}

/// `out[r] = f(s_r)`, `s_r` the f64 sum of row `r` of `x` in the order gpukit-core defines
/// ([`ordered_sum`]), the rows `cols` wide and [`SUM_LANES`] of them side by side
/// ([`ordered_sums`]: independent chains a core overlaps, the bits of one row at a time);
/// the groups of rows spread over the cores from [`SPLIT_FROM`] elements.
fn sum_rows<T: Numeric, U: Send>(x: &[T], cols: usize, out: &mut [U], f: impl Fn(f64) -> U + Sync) {
    let row = |r: usize| &x[(r * cols).min(x.len())..((r + 1) * cols).min(x.len())];
    let group = |g: usize, o: &mut [U]| {
        let first = g * SUM_LANES;
        if o.len() == SUM_LANES {
            let sums = ordered_sums(std::array::from_fn(|k| row(first + k)));
            for (o, s) in o.iter_mut().zip(sums) {
                *o = f(s);
            }
        } else {
            for (k, o) in o.iter_mut().enumerate() {
                *o = f(ordered_sum(row(first + k)));
            }
        }
    };
    if out.len() > SUM_LANES && x.len() >= SPLIT_FROM {
        let groups = out.par_chunks_mut(SUM_LANES).enumerate();
        groups.for_each(|(g, o)| group(g, o));
    } else {
        for (g, o) in out.chunks_mut(SUM_LANES).enumerate() {
            group(g, o);
        }
    }
}

/// A value reduction (sum, mean, min, max) of one row, as `ReduceOp::value` defines it; a
/// row of at least [`SPLIT_FROM`] elements is reduced in chunks of [`SUM_CHUNK`] across the
/// machine's cores, then the chunks' results in order: the order gpukit-core defines for
/// float sums and means, and the same bits for the rest (integer sums wrap; min and max
/// keep the first of equals and ignore NaNs, whatever the grouping).
fn value_reduce<T: Numeric>(op: ReduceOp, float: bool, x: &[T]) -> Option<T> {
    if x.len() < SPLIT_FROM {
        return op.value(x);
    }
    let chunks = x.par_chunks(SUM_CHUNK);
    Some(match op {
        ReduceOp::Sum if !float => chunks.map(T::sum).reduce(|| T::ZERO, T::add),
        ReduceOp::Sum | ReduceOp::Mean => {
            let blocks: Vec<ChunkSums> = x.par_chunks(SUM_BLOCK).map(block_sums).collect();
            return op.of_sum(add_chunk_sums(blocks.into_iter().flatten()), x.len());
        }
        ReduceOp::Min | ReduceOp::Max => {
            let each: Vec<T> = chunks.filter_map(|c| op.value(c)).collect();
            return op.value(&each);
        }
        ReduceOp::ArgMin | ReduceOp::ArgMax => return None,
    })
}

/// An index reduction (argmin, argmax) of one row, as `ReduceOp::index` defines it; a long
/// row in chunks across the cores, then the chunks' winners in order (the first best
/// element is the first best of the first chunk holding one: the same index).
fn arg_reduce<T: Numeric>(op: ReduceOp, x: &[T]) -> Option<u32> {
    if x.len() < SPLIT_FROM {
        return op.index(x);
    }
    let max = op == ReduceOp::ArgMax;
    let winners: Vec<(usize, T)> = x
        .par_chunks(SUM_CHUNK)
        .enumerate()
        .filter_map(|(k, c)| {
            let i = op.index(c)? as usize;
            Some((k * SUM_CHUNK + i, c[i]))
        })
        .collect();
    let mut best = *winners.first()?;
    for &(i, v) in &winners[1..] {
        if arg_better(max, v.load(), best.1.load()) {
            best = (i, v);
        }
    }
    u32::try_from(best.0).ok()
}

/// `Numeric::dot`, inputs of at least [`SPLIT_FROM`] elements in chunks across the cores (the
/// order gpukit-core defines for floats; integer sums wrap).
fn dot<T: Numeric>(float: bool, x: &[T], y: &[T]) -> T {
    if x.len() < SPLIT_FROM {
        return T::dot(x, y);
    }
    if float {
        let blocks = x.par_chunks(SUM_BLOCK).zip(y.par_chunks(SUM_BLOCK));
        let sums: Vec<ChunkSums> = blocks.map(|(a, b)| block_dots(a, b)).collect();
        T::from_f64(add_chunk_sums(sums.into_iter().flatten()))
    } else {
        let pairs = x.par_chunks(SUM_CHUNK).zip(y.par_chunks(SUM_CHUNK));
        pairs.map(|(a, b)| T::dot(a, b)).reduce(|| T::ZERO, T::add)
    }
}

/// The task running `f`, holding the buffers of `keep` until it is dropped.
fn done(keep: Ranges, f: impl Fn() + Send + 'static) -> Task {
    Task::new(move || {
        let _keep = &keep;
        f();
        Ok(())
    })
}

/// One row-major product of a gemm (see `gpukit_core::Gemm`; the batch is the caller's
/// loop). f32 and f64 go straight to matrixmultiply; the 16-bit floats are widened to f32,
/// multiplied, and rounded back once.
pub(crate) fn gemm<T: Float>(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]) {
    // Strides of op(A) (m x k) and op(B) (k x n) over row-major storage.
    let (rsa, csa) = if g.trans_a { (1, g.m) } else { (g.k, 1) };
    let (rsb, csb) = if g.trans_b { (1, g.k) } else { (g.n, 1) };
    let (rsa, csa, rsb, csb) = (rsa as isize, csa as isize, rsb as isize, csb as isize);
    let rsc = g.n as isize;
    match T::DTYPE {
        DType::F32 | DType::F64 => {
            let (alpha, beta) = (g.alpha.to_f64(), g.beta.to_f64());
            // SAFETY: `Element`'s contract makes `T` an f32 (f64) when its dtype says so;
            // the slices hold m*k, k*n and m*n elements (checked by gpukit-core), so every index
            // matrixmultiply forms from these strides is inside them; `c` is exclusive.
            unsafe {
                if T::DTYPE == DType::F32 {
                    matrixmultiply::sgemm(
                        g.m,
                        g.k,
                        g.n,
                        alpha as f32,
                        a.as_ptr().cast(),
                        rsa,
                        csa,
                        b.as_ptr().cast(),
                        rsb,
                        csb,
                        beta as f32,
                        c.as_mut_ptr().cast(),
                        rsc,
                        1,
                    );
                } else {
                    matrixmultiply::dgemm(
                        g.m,
                        g.k,
                        g.n,
                        alpha,
                        a.as_ptr().cast(),
                        rsa,
                        csa,
                        b.as_ptr().cast(),
                        rsb,
                        csb,
                        beta,
                        c.as_mut_ptr().cast(),
                        rsc,
                        1,
                    );
                }
            }
        }
        _ => {
            let wide = |xs: &[T]| xs.iter().map(|x| x.to_f64() as f32).collect::<Vec<f32>>();
            let (a32, b32) = (wide(a), wide(b));
            let mut c32 = if g.beta == T::ZERO {
                vec![0.0f32; c.len()]
            } else {
                wide(c)
            };
            let g32 = Gemm::new(g.m, g.n, g.k)
                .transpose(g.trans_a, g.trans_b)
                .scaled(g.alpha.to_f64() as f32, g.beta.to_f64() as f32);
            gemm(&g32, &a32, &b32, &mut c32);
            for (c, v) in c.iter_mut().zip(c32) {
                *c = T::from_f64(v as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops large enough to be split across cores give the bits of the same op run whole,
    /// for every kind of operand (a piece boundary falls inside no row).
    #[test]
    fn split_element_wise_ops_equal_the_whole() {
        let (rows, cols) = (1103, 997); // 1,099,691 elements: split, with a short last piece
        let n = rows * cols;
        assert!(n >= SPLIT_FROM);
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 1013) as f32 * 0.01 - 5.0)
            .collect();
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 11) % 997) as f32 * 0.02 - 9.0)
            .collect();
        let row: Vec<f32> = (0..cols).map(|j| j as f32 * 0.5 - 3.0).collect();
        let col: Vec<f32> = (0..rows).map(|r| r as f32 * 0.25 + 1.0).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

        for op in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Relu] {
            let (mut split, mut whole) = (vec![0f32; n], vec![0f32; n]);
            <Floats as Kind<f32>>::unary(op, Some(&x), &mut split);
            op.map_float(Some(&x), &mut whole);
            assert!(bits(&split) == bits(&whole), "{op:?}");
        }
        let rhs = [
            RhsSlice::Array(&y[..]),
            RhsSlice::Scalar(1.5),
            RhsSlice::Row(&row[..]),
            RhsSlice::Col(&col[..]),
        ];
        for op in [BinaryOp::Add, BinaryOp::Div, BinaryOp::Pow] {
            for r in rhs {
                let (mut split, mut whole) = (vec![0f32; n], vec![0f32; n]);
                <Floats as Kind<f32>>::binary(op, Some(&x), r, cols, &mut split);
                op.map_float(Some(&x), r, cols, &mut whole);
                assert!(bits(&split) == bits(&whole), "{op:?} with {r:?}");
                // In place too.
                let mut inplace = x.clone();
                <Floats as Kind<f32>>::binary(op, None, r, cols, &mut inplace);
                assert!(bits(&inplace) == bits(&whole), "{op:?} in place with {r:?}");
            }
        }
        let xi: Vec<i32> = (0..n as i32).map(|i| i % 1000 - 500).collect();
        let (mut split, mut whole) = (vec![0i32; n], vec![0i32; n]);
        <Ints as Kind<i32>>::binary(
            BinaryOp::Mul,
            Some(&xi),
            RhsSlice::Scalar(3),
            cols,
            &mut split,
        );
        BinaryOp::Mul.map_numeric(Some(&xi), RhsSlice::Scalar(3), cols, &mut whole);
        assert_eq!(split, whole);
    }

    /// Reductions, dots, softmax and cross-entropy large enough to be spread over the cores
    /// give the bits of the same work done in one pass in the defined order (gpukit-core's
    /// references): long single rows in chunks, many rows row by row; with NaNs, ties
    /// (argmin/argmax take the first) and signed zeros (min/max keep the first of equals).
    #[test]
    fn split_reductions_equal_the_reference() {
        let n = 3 * SPLIT_FROM + 12_345;
        let mut x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 100_003) as f32 * 1e-3 - 50.0)
            .collect();
        // The largest and smallest value twice, in different chunks; NaNs and zeros.
        let (hi, lo) = (1e6f32, -1e6f32);
        x[SUM_CHUNK + 5] = hi;
        x[3 * SUM_CHUNK + 1] = hi;
        x[7] = lo;
        x[n - 3] = lo;
        x[SUM_CHUNK - 1] = f32::NAN;
        x[2 * SUM_CHUNK] = f32::NAN;
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 31) % 977) as f32 * 0.01 - 4.0)
            .collect();
        let bits = |v: Option<f32>| v.map(f32::to_bits);
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max] {
            let clean: Vec<f32> = x
                .iter()
                .map(|v| if v.is_nan() { 0.5 } else { *v })
                .collect();
            for data in [&x, &clean] {
                assert_eq!(
                    bits(value_reduce(op, true, data)),
                    bits(op.value(data)),
                    "{op:?}"
                );
            }
        }
        // f64 sums show any other order of adding (f32 results round it away).
        let w: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 100_003) as f64 * 1.1e-3 * if i % 3 == 0 { 1e9 } else { -1.0 })
            .collect();
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            let got = value_reduce(op, true, &w).map(f64::to_bits);
            assert_eq!(got, op.value(&w).map(f64::to_bits), "f64 {op:?}");
        }
        let plain: f64 = w.iter().sum();
        assert_ne!(
            ReduceOp::Sum.value(&w),
            Some(plain),
            "the data tells orders apart"
        );
        assert_eq!(
            dot(true, &w, &w).to_bits(),
            Numeric::dot(&w[..], &w[..]).to_bits()
        );
        for op in [ReduceOp::ArgMin, ReduceOp::ArgMax] {
            assert_eq!(arg_reduce(op, &x), op.index(&x), "{op:?}");
        }
        assert_eq!(
            arg_reduce(ReduceOp::ArgMax, &x),
            Some((SUM_CHUNK + 5) as u32)
        );
        assert_eq!(arg_reduce(ReduceOp::ArgMin, &x), Some(7));
        assert_eq!(
            dot(true, &x, &y).to_bits(),
            Numeric::dot(&x[..], &y[..]).to_bits()
        );
        // Signed zeros: min and max keep the first of equal values.
        let mut z = vec![0.0f32; n];
        z[SUM_CHUNK * 2 + 3] = -0.0;
        z[0] = -0.0;
        for op in [ReduceOp::Min, ReduceOp::Max] {
            assert_eq!(
                bits(value_reduce(op, true, &z)),
                bits(op.value(&z)),
                "{op:?} of zeros"
            );
        }
        // Integers wrap: any grouping gives the same sum.
        let xi: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(1_000_003)).collect();
        assert_eq!(
            value_reduce(ReduceOp::Sum, false, &xi),
            ReduceOp::Sum.value(&xi)
        );
        assert_eq!(
            value_reduce(ReduceOp::Mean, false, &xi),
            ReduceOp::Mean.value(&xi)
        );
        assert_eq!(dot(false, &xi, &xi), Numeric::dot(&xi[..], &xi[..]));
        // Many rows: each row's result, wherever computed.
        let cols = 1000;
        let rows = n / cols;
        let mut split = vec![0f32; rows];
        by_rows(&x[..rows * cols], cols, &mut split, |r| {
            value_reduce(ReduceOp::Sum, true, r).unwrap_or(0.0)
        });
        for (r, s) in split.iter().enumerate() {
            let want = ReduceOp::Sum
                .value(&x[r * cols..(r + 1) * cols])
                .unwrap_or(0.0);
            assert_eq!(s.to_bits(), want.to_bits(), "row {r}");
        }
        // Sums and means of many rows, four side by side (f64 data that tells orders
        // apart): each row's bits; across the cores, in one pass, with a last group short
        // and rows longer than a chunk.
        for (cols, rows) in [(1000, n / 1000), (1000, 7), (SUM_CHUNK + 3, 6)] {
            let w = &w[..rows * cols];
            assert!(rows % SUM_LANES != 0, "a short last group");
            for op in [ReduceOp::Sum, ReduceOp::Mean] {
                let mut got = vec![0f64; rows];
                sum_rows(w, cols, &mut got, |s| {
                    if op == ReduceOp::Mean {
                        s / cols as f64
                    } else {
                        s
                    }
                });
                for (r, g) in got.iter().enumerate() {
                    let want = op.value(&w[r * cols..(r + 1) * cols]).map(f64::to_bits);
                    assert_eq!(
                        Some(g.to_bits()),
                        want,
                        "{op:?} of row {r} of {rows}x{cols}"
                    );
                }
            }
        }
        // Softmax and cross-entropy: rows split across cores equal the whole.
        let m = &y[..rows * cols];
        let (mut split, mut whole) = (vec![0f32; m.len()], vec![0f32; m.len()]);
        <Floats as Kind<f32>>::softmax(true, Some(m), cols, &mut split);
        gpukit_core::softmax_rows(true, Some(m), cols, &mut whole);
        assert!(split
            .iter()
            .zip(&whole)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let labels: Vec<u32> = (0..rows as u32).map(|r| (r * 7) % cols as u32).collect();
        let (mut ls, mut lw) = (vec![0f32; rows], vec![0f32; rows]);
        let (mut gs, mut gw) = (vec![0f32; m.len()], vec![0f32; m.len()]);
        <Floats as Kind<f32>>::cross_entropy(m, &labels, cols, &mut ls, Some(&mut gs));
        gpukit_core::cross_entropy_rows(m, &labels, cols, &mut lw, Some(&mut gw));
        assert!(ls.iter().zip(&lw).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(gs.iter().zip(&gw).all(|(a, b)| a.to_bits() == b.to_bits()));
        let mut ln = vec![0f32; rows];
        <Floats as Kind<f32>>::cross_entropy(m, &labels, cols, &mut ln, None);
        assert!(ln.iter().zip(&lw).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    /// The backend runs every element type gpukit-core has: f16 and bf16 exactly when
    /// gpukit-core's `half` feature is on; without it, ops on them and casts to them are
    /// `Unsupported` naming the feature, before anything is queued or touched.
    #[test]
    fn sixteen_bit_types_follow_gpukit_cores_half_feature() {
        use gpukit_core::{Backend, Error};
        struct Has;
        impl DTypeVisitor for Has {
            type Output = ();
            fn integer<T: Numeric>(self) {}
            fn float<T: Float>(self) {}
        }
        let has_half = DType::F16.visit(Has).is_some();
        let b = CpuBackend::new().expect("the CPU backend opens");
        let s = b.create_stream(0).expect("a stream");
        let buf = b.alloc(8, true).expect("8 bytes");
        let at = BufAt {
            buf: &buf,
            offset: 0,
        };
        let hi = BufAt {
            buf: &buf,
            offset: 4,
        };
        let ops = [
            (
                DType::F32,
                Op::Cast {
                    to: DType::F16,
                    src: at,
                    out: hi,
                    len: 1,
                },
            ),
            (
                DType::BF16,
                Op::Unary {
                    op: UnaryOp::Exp,
                    src: None,
                    out: at,
                    len: 2,
                },
            ),
        ];
        for (dtype, op) in &ops {
            // SAFETY: the ranges are inside the 8-byte buffer and aligned: the cast reads the
            // f32 at byte 0 and writes the f16 at byte 4, the in-place exp reads and writes
            // bytes 0..4; the stream runs them in order and nothing else uses the buffer.
            let r = unsafe { b.op(&s, *dtype, op) };
            if has_half {
                assert!(r.is_ok(), "{r:?}");
            } else {
                assert!(
                    matches!(r, Err(Error::Unsupported { backend: "cpu", ref what }) if what.contains("half")),
                    "{r:?}"
                );
            }
        }
        b.stream_sync(&s).expect("nothing failed on the stream");
        b.destroy_stream(s).expect("destroyed");
        // SAFETY: no stream uses the buffer any more.
        unsafe { b.free(buf, &[]) }.expect("freed");
    }

    #[test]
    fn gemm_matches_the_reference_for_every_transpose() {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<f64> = (0..m * k).map(|i| i as f64 * 0.5 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64).sin()).collect();
        let c0: Vec<f64> = (0..m * n).map(|i| i as f64).collect();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let g = Gemm::new(m, n, k).transpose(ta, tb).scaled(1.5, 0.25);
            let mut c = c0.clone();
            gemm(&g, &a, &b, &mut c);
            let want =
                crate::reference::gemm(&g, &a, &b, &c0).expect("the reference gets whole matrices");
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-9, "{ta} {tb}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn gemm_with_zero_beta_ignores_nan_in_c() {
        let g = Gemm::<f32>::new(1, 1, 1);
        let mut c = [f32::NAN];
        gemm(&g, &[2.0], &[3.0], &mut c);
        assert_eq!(c, [6.0]);
    }
}
