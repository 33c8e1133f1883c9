//! The reductions' kernels: sums, means, minima, maxima and their indices of each row of a
//! matrix (a whole array is one row), and dot products, written as `#[kernel]`s.
//!
//! A row is folded by one block: each thread folds a strided share of it, each subgroup its
//! threads (`subgroup_add`, `subgroup_min`, ...: warp shuffles in CUDA, subgroup operations
//! in WGSL) and the block's first thread the subgroups, in a shared array. A long row
//! (fewer than [`MANY_ROWS`] rows of more than [`SHORT_ROW`] elements) is split into parts,
//! each part folded by a block into a scratch array, and the parts folded by a second
//! launch. Float sums, means and dot products accumulate in f64 where the device has it, as
//! the reference does, and round once to the element type; without it (some Vulkan
//! adapters) in f32. The CPU backend runs each kernel's native body: gpukit-core's
//! references on vectors and across cores ([`crate::native`]), one launch per op.

use gpukit_macros::kernel;

use crate::backend::Backend;
use crate::element::{DType, Element, Numeric};
use crate::error::Result;
use crate::kernel::{In, KernelSpec, LaunchConfig, Out, Reads, Writes};
use crate::native::reduce::{arg_reduce, by_rows, dot_of, sum_rows, value_reduce};
use crate::native::split::SPLIT_FROM;
use crate::native::sum::{ordered_dot, ordered_sum};
use crate::optable::ReduceOp;
use crate::stream::Stream;
use crate::GpuArray;

/// Threads per block of every reduction kernel (and the length of their shared arrays: at
/// least one slot per subgroup, whatever the subgroup size).
const BLOCK: u32 = 256;

/// Rows from which each row is one part, however long.
const MANY_ROWS: usize = 64;

/// Elements up to which a row is one part.
const SHORT_ROW: usize = 8192;

/// The most parts of a row, and the elements a part aims at.
const MAX_PARTS: usize = 1024;
const PART: usize = 4096;

/// The codes of the `op` parameter of [`fold_rows`], [`sum_rows_f64`] and
/// [`sum_parts_f64`].
const SUM: u32 = 0;
const MEAN: u32 = 1;
const MIN: u32 = 2;
const MAX: u32 = 3;
const DOT: u32 = 4;

/// The elements `(start, end)` of part `b` of the parts of the rows of a `len`-element
/// matrix with `outs` results, `per_row` parts to a row: the kernels' partition (each row
/// in `per_row` pieces of `ceil(cols / per_row)`, the last shorter).
fn part_range(len: usize, outs: usize, per_row: usize, b: usize) -> (usize, usize) {
    let rows = outs / per_row;
    let cols = len / rows;
    let chunk = cols.div_ceil(per_row);
    let (row, part) = (b / per_row, b % per_row);
    let first = (part * chunk).min(cols);
    (row * cols + first, row * cols + (first + chunk).min(cols))
}

/// Folds part `b % per_row` of row `b / per_row` of `x` into `out[b]`, in the compute type:
/// the sum (integers wrap), the mean (the sum divided by `count`), the minimum, the maximum
/// (a NaN loses to a number) or, with `y`, the dot product ([`SUM`], [`MEAN`], [`MIN`],
/// [`MAX`], [`DOT`]). Rows are `x.len() / (out.len() / per_row)` long; every part holds
/// an element (`per_row` at most the square root of the row's length).
#[kernel(core = "crate")]
fn fold_rows<T: Numeric>(x: &[T], y: &[T], op: u32, per_row: u32, count: f32, out: &mut [T]) {
    let per = per_row as usize;
    let cols = x.len() / (out.len() / per);
    let chunk = (cols + per - 1) / per;
    let folded = shared::<T, 256>();
    let mut b = block_x();
    while b < out.len() {
        let base = (b / per) * cols;
        let first = (b % per) * chunk;
        let mut last = first + chunk;
        if last > cols {
            last = cols;
        }
        let mut acc: T = 0;
        if op == 2 || op == 3 {
            acc = x[base + first];
        }
        let mut j = first + thread_x();
        while j < last {
            let v = x[base + j];
            if op == 2 {
                acc = acc.min(v);
            } else if op == 3 {
                acc = acc.max(v);
            } else if op == 4 {
                acc += v * y[base + j];
            } else {
                acc += v;
            }
            j += block_dim_x();
        }
        let s = subgroup_add(acc);
        let lo = subgroup_min(acc);
        let hi = subgroup_max(acc);
        if subgroup_lane() == 0 {
            let mut w = s;
            if op == 2 {
                w = lo;
            } else if op == 3 {
                w = hi;
            }
            folded[subgroup_id()] = w;
        }
        barrier();
        if thread_x() == 0 {
            let mut t = folded[0];
            for k in 1..num_subgroups() {
                let v = folded[k];
                if op == 2 {
                    t = t.min(v);
                } else if op == 3 {
                    t = t.max(v);
                } else {
                    t += v;
                }
            }
            if op == 1 {
                t = t / (count as T);
            }
            out[b] = t;
        }
        barrier();
        b += grid_dim_x();
    }
}

/// The sum ([`SUM`]), mean ([`MEAN`]) or, with `y`, dot product ([`DOT`]) of each row of
/// `x` into `out[row]`, accumulated in f64 and rounded once to `T`.
#[kernel(core = "crate")]
fn sum_rows_f64<T: Numeric>(x: &[T], y: &[T], op: u32, out: &mut [T]) {
    let cols = x.len() / out.len();
    let sums = shared::<f64, 256>();
    let mut r = block_x();
    while r < out.len() {
        let base = r * cols;
        let mut acc: f64 = -0.0;
        let mut j = thread_x();
        while j < cols {
            if op == 4 {
                acc += (x[base + j] as f64) * (y[base + j] as f64);
            } else {
                acc += x[base + j] as f64;
            }
            j += block_dim_x();
        }
        let s = subgroup_add(acc);
        if subgroup_lane() == 0 {
            sums[subgroup_id()] = s;
        }
        barrier();
        if thread_x() == 0 {
            let mut t: f64 = -0.0;
            for k in 0..num_subgroups() {
                t += sums[k];
            }
            if op == 1 {
                t = t / (cols as f64);
            }
            out[r] = t as T;
        }
        barrier();
        r += grid_dim_x();
    }
}

/// [`sum_rows_f64`] of each part (as [`fold_rows`] parts rows) into `parts[b]`, in f64:
/// the first launch of a long row's sum or dot product ([`SUM`] or [`DOT`]).
#[kernel(core = "crate")]
fn sum_parts_f64<T: Numeric>(x: &[T], y: &[T], op: u32, per_row: u32, parts: &mut [f64]) {
    let per = per_row as usize;
    let cols = x.len() / (parts.len() / per);
    let chunk = (cols + per - 1) / per;
    let sums = shared::<f64, 256>();
    let mut b = block_x();
    while b < parts.len() {
        let base = (b / per) * cols;
        let first = (b % per) * chunk;
        let mut last = first + chunk;
        if last > cols {
            last = cols;
        }
        let mut acc: f64 = -0.0;
        let mut j = first + thread_x();
        while j < last {
            if op == 4 {
                acc += (x[base + j] as f64) * (y[base + j] as f64);
            } else {
                acc += x[base + j] as f64;
            }
            j += block_dim_x();
        }
        let s = subgroup_add(acc);
        if subgroup_lane() == 0 {
            sums[subgroup_id()] = s;
        }
        barrier();
        if thread_x() == 0 {
            let mut t: f64 = -0.0;
            for k in 0..num_subgroups() {
                t += sums[k];
            }
            parts[b] = t;
        }
        barrier();
        b += grid_dim_x();
    }
}

/// The parts of each row (`parts.len() / out.len()` of them) added into `out[row]`, divided
/// by `count` where `mean` is not 0, rounded once to `T`: the second launch of a long
/// row's sum, mean or dot product.
#[kernel(core = "crate")]
fn sum_final_f64<T: Numeric>(parts: &[f64], mean: u32, count: f64, out: &mut [T]) {
    let per = parts.len() / out.len();
    let sums = shared::<f64, 256>();
    let mut r = block_x();
    while r < out.len() {
        let mut acc: f64 = -0.0;
        let mut p = thread_x();
        while p < per {
            acc += parts[r * per + p];
            p += block_dim_x();
        }
        let s = subgroup_add(acc);
        if subgroup_lane() == 0 {
            sums[subgroup_id()] = s;
        }
        barrier();
        if thread_x() == 0 {
            let mut t: f64 = -0.0;
            for k in 0..num_subgroups() {
                t += sums[k];
            }
            if mean != 0 {
                t = t / count;
            }
            out[r] = t as T;
        }
        barrier();
        r += grid_dim_x();
    }
}

/// The index of the first largest (`max` not 0) or smallest element of each part (as
/// [`fold_rows`] parts rows; NaNs rank last, an all-NaN part gives 0), counted from the
/// part's first element, into `out[b]`.
#[kernel(core = "crate")]
fn arg_rows<T: Numeric>(x: &[T], max: u32, per_row: u32, out: &mut [u32]) {
    let per = per_row as usize;
    let cols = x.len() / (out.len() / per);
    let chunk = (cols + per - 1) / per;
    let values = shared::<T, 256>();
    let places = shared::<u32, 256>();
    let mut b = block_x();
    while b < out.len() {
        let base = (b / per) * cols;
        let first = (b % per) * chunk;
        let mut last = first + chunk;
        if last > cols {
            last = cols;
        }
        let mut bv: T = x[base + first];
        let mut bi: u32 = 0;
        let mut j = first + thread_x();
        while j < last {
            let v = x[base + j];
            if v == v && (bv != bv || (max != 0 && v > bv) || (max == 0 && v < bv)) {
                bv = v;
                bi = (j - first) as u32;
            }
            j += block_dim_x();
        }
        // The subgroup's best value, and the least index holding it.
        let hi = subgroup_max(bv);
        let lo = subgroup_min(bv);
        let mut best = lo;
        if max != 0 {
            best = hi;
        }
        let mut mine: u32 = u32::MAX;
        if bv == best || (best != best && bv != bv) {
            mine = bi;
        }
        let at = subgroup_min(mine);
        if subgroup_lane() == 0 {
            values[subgroup_id()] = best;
            places[subgroup_id()] = at;
        }
        barrier();
        if thread_x() == 0 {
            let mut tv = values[0];
            let mut ti = places[0];
            for k in 1..num_subgroups() {
                let v = values[k];
                let i = places[k];
                let better = v == v && (tv != tv || (max != 0 && v > tv) || (max == 0 && v < tv));
                let same = v == tv || (v != v && tv != tv);
                if better || (same && i < ti) {
                    tv = v;
                    ti = i;
                }
            }
            out[b] = ti;
        }
        barrier();
        b += grid_dim_x();
    }
}

/// The index in its row of the first largest (`max` not 0) or smallest element of each
/// row of `x`, from the winners [`arg_rows`] found in its parts (`idx`, `idx.len() /
/// out.len()` to a row), into `out[row]`.
#[kernel(core = "crate")]
fn arg_final<T: Numeric>(x: &[T], idx: &[u32], max: u32, out: &mut [u32]) {
    let per = idx.len() / out.len();
    let cols = x.len() / out.len();
    let chunk = (cols + per - 1) / per;
    let values = shared::<T, 256>();
    let places = shared::<u32, 256>();
    let mut r = block_x();
    while r < out.len() {
        let base = r * cols;
        let mut bi: u32 = idx[r * per];
        let mut bv: T = x[base + bi as usize];
        let mut p = thread_x();
        while p < per {
            let i = (p * chunk) as u32 + idx[r * per + p];
            let v = x[base + i as usize];
            if v == v && (bv != bv || (max != 0 && v > bv) || (max == 0 && v < bv)) {
                bv = v;
                bi = i;
            }
            p += block_dim_x();
        }
        let hi = subgroup_max(bv);
        let lo = subgroup_min(bv);
        let mut best = lo;
        if max != 0 {
            best = hi;
        }
        let mut mine: u32 = u32::MAX;
        if bv == best || (best != best && bv != bv) {
            mine = bi;
        }
        let at = subgroup_min(mine);
        if subgroup_lane() == 0 {
            values[subgroup_id()] = best;
            places[subgroup_id()] = at;
        }
        barrier();
        if thread_x() == 0 {
            let mut tv = values[0];
            let mut ti = places[0];
            for k in 1..num_subgroups() {
                let v = values[k];
                let i = places[k];
                let better = v == v && (tv != tv || (max != 0 && v > tv) || (max == 0 && v < tv));
                let same = v == tv || (v != v && tv != tv);
                if better || (same && i < ti) {
                    tv = v;
                    ti = i;
                }
            }
            out[r] = ti;
        }
        barrier();
        r += grid_dim_x();
    }
}

/// The signatures of the kernels: [`fold_rows`], [`sum_rows_f64`], [`sum_parts_f64`] and
/// [`arg_final`].
type FoldRows<T> = (In<T>, In<T>, u32, u32, f32, Out<T>);
#[doc(hidden)]
pub type SumRows<T> = (In<T>, In<T>, u32, Out<T>);
type SumParts<T> = (In<T>, In<T>, u32, u32, Out<f64>);
type ArgFinal<T> = (In<T>, In<u32>, u32, Out<u32>);

/// The kernel of the f32 sum of each row (`sum_rows_f64::<f32>`), as the backends compile
/// it: for review of the generated code (`rust_kernels --print row_sum`).
#[doc(hidden)]
pub fn __row_sum_kernel() -> KernelSpec<SumRows<f32>> {
    sum_rows_f64::<f32>()
}

/// The `op` code of [`fold_rows`] of a value reduction (its inverse: [`reduce_op`]).
fn op_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Mean => MEAN,
        ReduceOp::Min => MIN,
        ReduceOp::Max => MAX,
        _ => SUM,
    }
}

/// The reduction of an `op` code of [`fold_rows`].
fn reduce_op(op: u32) -> ReduceOp {
    match op {
        MEAN => ReduceOp::Mean,
        MIN => ReduceOp::Min,
        MAX => ReduceOp::Max,
        _ => ReduceOp::Sum,
    }
}

/// `out[b] = f(part b)` over the parts of [`part_range`].
fn each_part<T, U>(x: &[T], per_row: usize, out: &mut [U], f: impl Fn(&[T], usize) -> U) {
    let (len, outs) = (x.len(), out.len());
    for (b, o) in out.iter_mut().enumerate() {
        let (s, e) = part_range(len, outs, per_row, b);
        *o = f(&x[s..e], s);
    }
}

/// The spec of [`fold_rows`] on `T` with its native body: gpukit-core's references.
fn fold_rows_spec<T: Numeric>() -> KernelSpec<FoldRows<T>> {
    fold_rows::<T>().native(|(x, y, op, per, _count, out)| {
        let (op, per, float) = (*op, *per as usize, T::DTYPE.is_float());
        if op == DOT {
            let y: &[T] = y;
            return each_part(x, per, out, |xs, s| dot_of(float, xs, &y[s..s + xs.len()]));
        }
        let rop = reduce_op(op);
        if per == 1 {
            let cols = x.len() / out.len().max(1);
            by_rows(x, cols, out, |row| {
                value_reduce(rop, float, row).unwrap_or(T::ZERO)
            });
        } else {
            each_part(x, per, out, |xs, _| rop.value(xs).unwrap_or(T::ZERO));
        }
    })
}

/// The spec of [`sum_rows_f64`] on `T` with its native body.
fn sum_rows_spec<T: Numeric>() -> KernelSpec<SumRows<T>> {
    sum_rows_f64::<T>().native(|(x, y, op, out)| {
        let cols = x.len() / out.len().max(1);
        if *op == DOT {
            let y: &[T] = y;
            return each_part(x, 1, out, |xs, s| dot_of(true, xs, &y[s..s + xs.len()]));
        }
        let rop = reduce_op(*op);
        if cols < SPLIT_FROM {
            sum_rows(x, cols, out, |s| rop.of_sum(s, cols).unwrap_or(T::ZERO));
        } else {
            by_rows(x, cols, out, |row| {
                value_reduce(rop, true, row).unwrap_or(T::ZERO)
            });
        }
    })
}

/// The spec of [`sum_parts_f64`] on `T` with its native body.
fn sum_parts_spec<T: Numeric>() -> KernelSpec<SumParts<T>> {
    sum_parts_f64::<T>().native(|(x, y, op, per, parts)| {
        let y: &[T] = y;
        let dot = *op == DOT;
        each_part(x, *per as usize, parts, |xs, s| {
            if dot {
                ordered_dot(xs, &y[s..s + xs.len()])
            } else {
                ordered_sum(xs)
            }
        });
    })
}

/// The spec of [`sum_final_f64`] on `T` with its native body.
fn sum_final_spec<T: Numeric>() -> KernelSpec<(In<f64>, u32, f64, Out<T>)> {
    sum_final_f64::<T>().native(|(parts, mean, count, out)| {
        let per = parts.len() / out.len().max(1);
        for (o, row) in out.iter_mut().zip(parts.chunks(per.max(1))) {
            let s = row.iter().copied().reduce(|a, b| a + b).unwrap_or(-0.0);
            *o = T::from_f64(if *mean != 0 { s / *count } else { s });
        }
    })
}

/// The spec of [`arg_rows`] on `T` with its native body.
fn arg_rows_spec<T: Numeric>() -> KernelSpec<(In<T>, u32, u32, Out<u32>)> {
    arg_rows::<T>().native(|(x, max, per, out)| {
        let op = arg_op(*max);
        let per = *per as usize;
        if per == 1 {
            let cols = x.len() / out.len().max(1);
            by_rows(x, cols, out, |row| arg_reduce(op, row).unwrap_or(0));
        } else {
            each_part(x, per, out, |xs, _| op.index(xs).unwrap_or(0));
        }
    })
}

/// The spec of [`arg_final`] on `T` with its native body.
fn arg_final_spec<T: Numeric>() -> KernelSpec<ArgFinal<T>> {
    arg_final::<T>().native(|(x, idx, max, out)| {
        let op = arg_op(*max);
        let rows = out.len().max(1);
        let (cols, per) = (x.len() / rows, idx.len() / rows);
        let chunk = cols.div_ceil(per.max(1));
        for (r, o) in out.iter_mut().enumerate() {
            let at: Vec<usize> = (0..per)
                .map(|p| p * chunk + idx[r * per + p] as usize)
                .collect();
            let vals: Vec<T> = at.iter().map(|&i| x[r * cols + i]).collect();
            *o = op.index(&vals).map_or(0, |w| at[w as usize] as u32);
        }
    })
}

/// The index reduction of a `max` flag.
fn arg_op(max: u32) -> ReduceOp {
    if max != 0 {
        ReduceOp::ArgMax
    } else {
        ReduceOp::ArgMin
    }
}

/// One block of [`BLOCK`] threads for each of `blocks` (rows or parts; blocks loop over
/// more than a grid holds).
pub(super) fn blocks(n: usize) -> LaunchConfig {
    LaunchConfig::linear(n.clamp(1, 65535) as u32, BLOCK)
}

impl<B: Backend> Stream<B> {
    /// The parts each of `rows` rows of `cols` elements is folded in: 1 where rows are
    /// many or short, or on a backend that runs the native bodies.
    fn parts_per_row(&self, rows: usize, cols: usize) -> usize {
        if self.shared_arc().info.native_ops || rows >= MANY_ROWS || cols <= SHORT_ROW {
            1
        } else {
            cols.div_ceil(PART).min(MAX_PARTS)
        }
    }

    /// Whether float sums accumulate in f64 here (the device has it).
    pub(super) fn wide_sums(&self) -> bool {
        self.shared_arc().info.op_dtypes.contains(&DType::F64)
    }

    /// The reduction `op` of each of the `rows` rows of `x` into `out` (`R` is `T`, or
    /// `u32` for the index reductions), as the op `call`; rows and columns are not zero and
    /// the caller checked the lengths.
    pub(crate) fn fold<T: Numeric, R: Element>(
        &self,
        call: &'static str,
        op: ReduceOp,
        (rows, cols): (usize, usize),
        x: Reads<'_, T, B>,
        out: Writes<'_, R, B>,
    ) -> Result<()> {
        let per = self.parts_per_row(rows, cols);
        if op.is_index() {
            let max = u32::from(op == ReduceOp::ArgMax);
            let out = Writes::<u32, B>::raw(out.0);
            if per == 1 {
                return self.launch_builtin(
                    call,
                    arg_rows_spec::<T>,
                    blocks(rows),
                    (x, max, 1u32, out),
                );
            }
            let mut idx = GpuArray::<u32, B>::scratch(self, call, rows * per)?;
            let args = (x, max, per as u32, &mut idx);
            self.launch_builtin(call, arg_rows_spec::<T>, blocks(rows * per), args)?;
            let args = (x, Reads::of(&idx), max, out);
            return self.launch_builtin(call, arg_final_spec::<T>, blocks(rows), args);
        }
        let out = Writes::<T, B>::raw(out.0);
        let code = op_code(op);
        if code <= MEAN && T::DTYPE.is_float() {
            return self.sum_like(call, code, (rows, cols, per), x, None, out);
        }
        self.fold_in_parts(call, code, (rows, cols, per), (x, x), out)
    }

    /// The dot product of `len` elements of `x` and `y` into the one element `out`
    /// (`len` not zero).
    pub(crate) fn fold_dot<T: Numeric>(
        &self,
        call: &'static str,
        len: usize,
        (x, y): (Reads<'_, T, B>, Reads<'_, T, B>),
        out: Writes<'_, T, B>,
    ) -> Result<()> {
        let per = self.parts_per_row(1, len);
        if T::DTYPE.is_float() {
            return self.sum_like(call, DOT, (1, len, per), x, Some(y), out);
        }
        self.fold_in_parts(call, DOT, (1, len, per), (x, y), out)
    }

    /// A float sum, mean ([`SUM`], [`MEAN`]) or dot product ([`DOT`], with `y`) of each
    /// row, in `per` parts ([`Stream::parts_per_row`]): in f64 where the device has it,
    /// else in f32 (a 16-bit type's rows in one part each).
    fn sum_like<T: Numeric>(
        &self,
        call: &'static str,
        code: u32,
        (rows, cols, per): (usize, usize, usize),
        x: Reads<'_, T, B>,
        y: Option<Reads<'_, T, B>>,
        out: Writes<'_, T, B>,
    ) -> Result<()> {
        let y = y.unwrap_or(x);
        if self.wide_sums() {
            if per == 1 {
                let args = (x, y, code, out);
                return self.launch_builtin(call, sum_rows_spec::<T>, blocks(rows), args);
            }
            let mut parts = GpuArray::<f64, B>::scratch(self, call, rows * per)?;
            let first = if code == DOT { DOT } else { SUM };
            let args = (x, y, first, per as u32, &mut parts);
            self.launch_builtin(call, sum_parts_spec::<T>, blocks(rows * per), args)?;
            let args = (Reads::of(&parts), u32::from(code == MEAN), cols as f64, out);
            return self.launch_builtin(call, sum_final_spec::<T>, blocks(rows), args);
        }
        // In f32: partial sums of f32 elements are f32s; other floats' rows go whole.
        let per = if T::DTYPE == DType::F32 { per } else { 1 };
        self.fold_in_parts(call, code, (rows, cols, per), (x, y), out)
    }

    /// [`fold_rows`] with `per` parts to a row: one launch, or the parts into a scratch
    /// array and a second launch folding them (a mean's divided by the row's length).
    fn fold_in_parts<T: Numeric>(
        &self,
        call: &'static str,
        code: u32,
        (rows, cols, per): (usize, usize, usize),
        (x, y): (Reads<'_, T, B>, Reads<'_, T, B>),
        out: Writes<'_, T, B>,
    ) -> Result<()> {
        let count = cols as f32;
        if per == 1 {
            let args = (x, y, code, 1u32, count, out);
            return self.launch_builtin(call, fold_rows_spec::<T>, blocks(rows), args);
        }
        let mut parts = GpuArray::<T, B>::scratch(self, call, rows * per)?;
        let first = if code == MEAN { SUM } else { code };
        let args = (x, y, first, per as u32, count, &mut parts);
        self.launch_builtin(call, fold_rows_spec::<T>, blocks(rows * per), args)?;
        let second = if code == DOT { SUM } else { code };
        let p = Reads::of(&parts);
        let args = (p, p, second, 1u32, count, out);
        self.launch_builtin(call, fold_rows_spec::<T>, blocks(rows), args)
    }
}

/// Folds each column of `x` (`out.len()` columns) over its rows, in row order, into
/// `out[col]`, in the compute type: the sum (integers wrap), the mean (the sum divided by
/// the rows), the minimum or the maximum ([`SUM`], [`MEAN`], [`MIN`], [`MAX`]). A thread
/// to a column: neighbouring threads read neighbouring elements.
#[kernel(core = "crate")]
fn fold_cols<T: Numeric>(x: &[T], op: u32, out: &mut [T]) {
    let cols = out.len();
    let rows = x.len() / cols;
    let stride = grid_dim_x() * block_dim_x();
    let mut c = global_x();
    while c < cols {
        let mut acc = x[c];
        for r in 1..rows {
            let v = x[r * cols + c];
            if op == 2 {
                acc = acc.min(v);
            } else if op == 3 {
                acc = acc.max(v);
            } else {
                acc += v;
            }
        }
        if op == 1 {
            acc = acc / (rows as T);
        }
        out[c] = acc;
        c += stride;
    }
}

/// The sum or (`mean` not 0) mean of each column of `x` over its rows, accumulated in f64
/// in row order (the reference's order, so the reference's bits) and rounded once.
#[kernel(core = "crate")]
fn sum_cols_f64<T: Numeric>(x: &[T], mean: u32, out: &mut [T]) {
    let cols = out.len();
    let rows = x.len() / cols;
    let stride = grid_dim_x() * block_dim_x();
    let mut c = global_x();
    while c < cols {
        let mut acc = x[c] as f64;
        for r in 1..rows {
            acc += x[r * cols + c] as f64;
        }
        if mean != 0 {
            acc = acc / (rows as f64);
        }
        out[c] = acc as T;
        c += stride;
    }
}

/// The row of the first largest (`max` not 0) or smallest element of each column of `x`
/// (NaNs rank last; an all-NaN column gives 0) into `out[col]`.
#[kernel(core = "crate")]
fn arg_cols<T: Numeric>(x: &[T], max: u32, out: &mut [u32]) {
    let cols = out.len();
    let rows = x.len() / cols;
    let stride = grid_dim_x() * block_dim_x();
    let mut c = global_x();
    while c < cols {
        let mut bv = x[c];
        let mut bi: u32 = 0;
        for r in 1..rows {
            let v = x[r * cols + c];
            if v == v && (bv != bv || (max != 0 && v > bv) || (max == 0 && v < bv)) {
                bv = v;
                bi = r as u32;
            }
        }
        out[c] = bi;
        c += stride;
    }
}

impl<B: Backend> Stream<B> {
    /// The reduction `op` of each column of the `rows x cols` matrix `x` into `out` (`R`
    /// is `T`, or `u32` for the index reductions), as the op `call`; rows and columns are
    /// not zero and the caller checked the lengths. The native bodies are gpukit-core's
    /// reference ([`crate::optable::reduce_cols`]).
    pub(crate) fn fold_columns<T: Numeric, R: Element>(
        &self,
        call: &'static str,
        op: ReduceOp,
        cols: usize,
        x: Reads<'_, T, B>,
        out: Writes<'_, R, B>,
    ) -> Result<()> {
        let cfg = self.grid_stride(cols);
        if op.is_index() {
            let max = u32::from(op == ReduceOp::ArgMax);
            let spec = || {
                arg_cols::<T>().native(|(x, max, out)| {
                    let cols = out.len();
                    crate::optable::reduce_cols::<T>(arg_op(*max), x, cols, &mut [], out);
                })
            };
            return self.launch_builtin(call, spec, cfg, (x, max, Writes::raw(out.0)));
        }
        let out = Writes::<T, B>::raw(out.0);
        let mean = op == ReduceOp::Mean;
        if matches!(op, ReduceOp::Sum | ReduceOp::Mean) && T::DTYPE.is_float() && self.wide_sums() {
            let spec = || {
                sum_cols_f64::<T>().native(|(x, mean, out)| {
                    let op = if *mean != 0 {
                        ReduceOp::Mean
                    } else {
                        ReduceOp::Sum
                    };
                    let cols = out.len();
                    crate::optable::reduce_cols(op, x, cols, out, &mut []);
                })
            };
            return self.launch_builtin(call, spec, cfg, (x, u32::from(mean), out));
        }
        let code = op_code(op);
        let spec = || {
            fold_cols::<T>().native(|(x, op, out)| {
                let cols = out.len();
                crate::optable::reduce_cols(reduce_op(*op), x, cols, out, &mut []);
            })
        };
        self.launch_builtin(call, spec, cfg, (x, code, out))
    }
}
