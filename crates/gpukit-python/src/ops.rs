//! The library's ops from Python, beyond the element-wise ones of `array.rs`: unary ops out
//! of place, reductions (whole, rows, columns), matrix products, softmax, log-softmax and
//! cross-entropy, and Philox random fills. Each takes its inputs' locks (in one order, the
//! GIL released), queues its work on the stream `stream::queue` picks and returns a new
//! array.

use std::sync::{Arc, Mutex};

use gpukit::{DType, Gemm, ReduceOp, Shape, UnaryOp};
use pyo3::prelude::*;

use crate::array::{internal, lock_all, shape_text, slot, typed, Array, Held, Slot};
use crate::element::{by_dtype, by_float, numpy_name, PyElement, Scalar};
use crate::error::{floats_only, py_err, type_err, value_err};
use crate::stream::{queue, On, Stream};

/// A new array of `len` elements of `T` on `on`'s context, uninitialised (the op that makes
/// it writes every element).
fn fresh<T: PyElement>(on: &On<'_>, len: usize) -> gpukit::Result<Slot<T>> {
    Ok(Slot::Owned(on.alloc::<T>(len)?))
}

/// `op(x)` element-wise into a new array (`Context.unary` without `out`).
pub(crate) fn unary_new(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    op: UnaryOp,
    x: &Array,
    stream: Option<&Stream>,
) -> PyResult<Array> {
    unary_types(call, op, x)?;
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    let held = x.with(py, call, |h| -> gpukit::Result<Box<dyn Held>> {
        let mut out: Box<dyn Held> = by_dtype!(x.dtype, T => Box::new(fresh::<T>(&on, x.size())?));
        out.unary_from(&on, op, h.as_ref())?;
        Ok(out)
    })?;
    Ok(Array::new(ctx, x.shape.clone(), held, None))
}

/// `out = op(x)` element-wise (`Context.unary` with `out`, of `x`'s shape and type): `x`
/// itself runs in place, an `out` overlapping `x` reads a copy of it first.
pub(crate) fn unary_into(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    op: UnaryOp,
    x: &Array,
    out: &Array,
    stream: Option<&Stream>,
) -> PyResult<()> {
    unary_types(call, op, x)?;
    if out.dtype != x.dtype || out.shape != x.shape {
        return Err(value_err(
            call,
            format!(
                "`out` is {} of shape {}, the result {} of shape {}",
                numpy_name(out.dtype),
                shape_text(&out.shape),
                numpy_name(x.dtype),
                shape_text(&x.shape)
            ),
        ));
    }
    out.writable(call)?;
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    let in_place = Arc::ptr_eq(&x.mem, &out.mem);
    let copied = (!in_place && x.mem.overlaps(&out.mem))
        .then(|| x.with(py, call, |h| h.copy(&on)))
        .transpose()?;
    py.detach(|| -> gpukit::Result<()> {
        if in_place {
            return out.mem.lock().unary(&on, op);
        }
        if let Some(c) = &copied {
            return out.mem.lock().unary_from(&on, op, c.as_ref());
        }
        let mut guards = lock_all(&[&out.mem, &x.mem]);
        let (o, rest) = guards.split_first_mut().ok_or_else(|| internal(call))?;
        let x = rest.first().ok_or_else(|| internal(call))?;
        o.unary_from(&on, op, x.as_ref())
    })
    .map_err(|e| py_err(call, e))
}

/// `TypeError` for a float-only unary op on `x`'s integer type.
fn unary_types(call: &str, op: UnaryOp, x: &Array) -> PyResult<()> {
    if op.floats_only() && !x.dtype.is_float() {
        return Err(floats_only(call, &format!("`{}`", op.name()), x.dtype));
    }
    Ok(())
}

/// The rows and columns a reduction or softmax over `axis` of `shape` folds: `(rows, cols,
/// along_rows)`, where `along_rows` folds each row (the last axis) and otherwise each
/// column (the first axis); other axes are refused with the shape.
fn matrix_of(call: &str, shape: &[usize], axis: i64) -> PyResult<(Shape, bool, Vec<usize>)> {
    let n = shape.len() as i64;
    let a = if axis < 0 { axis + n } else { axis };
    if n == 0 || a < 0 || a >= n {
        return Err(value_err(
            call,
            format!(
                "axis {axis} is out of bounds for shape {}",
                shape_text(shape)
            ),
        ));
    }
    let size: usize = shape.iter().product();
    let mut rest = shape.to_vec();
    rest.remove(a as usize);
    if a == n - 1 {
        let cols = shape[shape.len() - 1];
        return Ok((Shape::new(size / cols.max(1), cols), true, rest));
    }
    if a == 0 {
        let rows = shape[0];
        return Ok((Shape::new(rows, size / rows.max(1)), false, rest));
    }
    Err(value_err(
        call,
        format!(
            "axis {axis} of shape {}: gpukit folds the first or the last axis (reshape or \
             move the axis first)",
            shape_text(shape)
        ),
    ))
}

/// `Context.reduce`: `op` over all of `x` (`axis=None`: a 0-d array) or along `axis` (the
/// first or the last); the index reductions give `uint32`.
pub(crate) fn reduce(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    op: ReduceOp,
    x: &Array,
    axis: Option<i64>,
    stream: Option<&Stream>,
) -> PyResult<Array> {
    if op == ReduceOp::Mean && !x.dtype.is_float() {
        return Err(floats_only(call, "`mean`", x.dtype));
    }
    if x.size() == 0 && !matches!(op, ReduceOp::Sum) {
        return Err(value_err(
            call,
            format!("`{}` of an empty array, which has no identity", op.name()),
        ));
    }
    let (shape, rows, result) = match axis {
        None => (Shape::new(1, x.size()), true, Vec::new()),
        Some(a) => matrix_of(call, &x.shape, a)?,
    };
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    let n: usize = result.iter().product();
    let axis = if rows { 1 } else { 0 };
    let held = x.with(py, call, |h| -> gpukit::Result<Box<dyn Held>> {
        by_dtype!(x.dtype, T => {
            let src = typed::<T>(h.as_ref())?.read();
            if op.is_index() {
                reduced::<T, u32>(&on, op, axis, shape, src, n)
            } else {
                reduced::<T, T>(&on, op, axis, shape, src, n)
            }
        })
    })?;
    Ok(Array::new(ctx, result, held, None))
}

/// The reduction `op` of `src` (a `shape` matrix) along `axis` into a new array of `n`
/// results of `R` (the element type, or `u32` for the index reductions).
fn reduced<T: PyElement, R: PyElement>(
    on: &On<'_>,
    op: ReduceOp,
    axis: usize,
    shape: Shape,
    src: &gpukit::GpuArray<T>,
    n: usize,
) -> gpukit::Result<Box<dyn Held>> {
    let mut out = fresh::<R>(on, n)?;
    on.reduce(op, axis, shape, src, out.write()?)?;
    Ok(Box::new(out))
}

/// `Context.matmul`: `a @ b` for matrices (`(m, k) @ (k, n)`) and stacks of them
/// (`(batch, m, k) @ (batch, k, n)`, either side 2-D to share one matrix), floats only.
pub(crate) fn matmul(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    a: &Array,
    b: &Array,
    stream: Option<&Stream>,
) -> PyResult<Array> {
    if !a.dtype.is_float() {
        return Err(floats_only(call, "`matmul`", a.dtype));
    }
    if a.dtype != b.dtype {
        return Err(type_err(
            call,
            format!(
                "`a` is {}, `b` is {} (one element type; astype converts)",
                numpy_name(a.dtype),
                numpy_name(b.dtype)
            ),
        ));
    }
    let mismatch = || {
        value_err(
            call,
            format!(
                "shapes {} and {} do not multiply (gpukit takes (m, k) @ (k, n) and stacks \
                 (batch, m, k) @ (batch, k, n))",
                shape_text(&a.shape),
                shape_text(&b.shape)
            ),
        )
    };
    let split = |s: &[usize]| -> Option<(usize, usize, usize)> {
        match *s {
            [r, c] => Some((1, r, c)),
            [n, r, c] => Some((n, r, c)),
            _ => None,
        }
    };
    let ((ba, m, k), (bb, k2, n)) = split(&a.shape).zip(split(&b.shape)).ok_or_else(mismatch)?;
    let batch = ba.max(bb);
    if k != k2 || (ba != bb && ba != 1 && bb != 1) {
        return Err(mismatch());
    }
    let stacked = a.shape.len() == 3 || b.shape.len() == 3;
    let result = if stacked {
        vec![batch, m, n]
    } else {
        vec![m, n]
    };
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    let held = py
        .detach(|| -> gpukit::Result<Box<dyn Held>> {
            let mut mems = Vec::new();
            let (ia, ib) = (slot(&mut mems, &a.mem), slot(&mut mems, &b.mem));
            let guards = lock_all(&mems);
            by_float!(a.dtype, T => {
                let (x, y) = (typed::<T>(guards[ia].as_ref())?, typed::<T>(guards[ib].as_ref())?);
                let mut out = fresh::<T>(&on, batch * m * n)?;
                let stride = |b: usize, size: usize| if b == 1 { 0 } else { size };
                let g = Gemm::<T>::new(m, n, k).strided(
                    batch,
                    stride(ba, m * k),
                    stride(bb, k * n),
                    m * n,
                );
                on.gemm(g, x.read(), y.read(), out.write()?)?;
                Ok(Box::new(out) as Box<dyn Held>)
            }, else Err(internal(call)))
        })
        .map_err(|e| py_err(call, e))?;
    Ok(Array::new(ctx, result, held, None))
}

/// `Context.softmax` and `Context.log_softmax` (`log`) along the last axis, in a new array.
pub(crate) fn softmax(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    x: &Array,
    log: bool,
    stream: Option<&Stream>,
) -> PyResult<Array> {
    let (shape, _, _) = matrix_of(call, &x.shape, -1)?;
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    let held = by_float!(x.dtype, T => x.with(py, call, |h| -> gpukit::Result<Box<dyn Held>> {
        let src = typed::<T>(h.as_ref())?.read();
        let mut out = fresh::<T>(&on, x.size())?;
        if log {
            on.log_softmax(shape, src, out.write()?)?;
        } else {
            on.softmax(shape, src, out.write()?)?;
        }
        Ok(Box::new(out) as Box<dyn Held>)
    })?, else return Err(floats_only(call, if log { "`log_softmax`" } else { "`softmax`" }, x.dtype)));
    Ok(Array::new(ctx, x.shape.clone(), held, None))
}

/// `Context.cross_entropy`: each row's loss `-log softmax(logits)[label]` (a new array of
/// one loss per row), the labels `uint32` (or int32/int64/uint64, converted), checked to be
/// below the number of classes.
pub(crate) fn cross_entropy(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    logits: &Array,
    labels: &Array,
    stream: Option<&Stream>,
) -> PyResult<Array> {
    let (shape, _, rows) = matrix_of(call, &logits.shape, -1)?;
    if labels.shape != rows {
        return Err(value_err(
            call,
            format!(
                "`labels` has shape {}, logits of shape {} have rows of shape {}",
                shape_text(&labels.shape),
                shape_text(&logits.shape),
                shape_text(&rows)
            ),
        ));
    }
    if labels.dtype.is_float() {
        return Err(type_err(
            call,
            format!(
                "`labels` holds {}: class indices are integers",
                numpy_name(labels.dtype)
            ),
        ));
    }
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    // The labels as u32 (a conversion of any other integer type).
    let converted = if labels.dtype == DType::U32 {
        None
    } else {
        Some(labels.with(py, call, |h| h.cast(&on, DType::U32))?)
    };
    let held = by_float!(logits.dtype, T => py.detach(|| -> gpukit::Result<Box<dyn Held>> {
        let mut mems = Vec::new();
        let il = slot(&mut mems, &logits.mem);
        let ik = converted.is_none().then(|| slot(&mut mems, &labels.mem));
        let guards = lock_all(&mems);
        let x = typed::<T>(guards[il].as_ref())?;
        let k: &Slot<u32> = match (&converted, ik) {
            (Some(c), _) => typed::<u32>(c.as_ref())?,
            (None, Some(i)) => typed::<u32>(guards[i].as_ref())?,
            (None, None) => return Err(internal(call)),
        };
        let mut out = fresh::<T>(&on, shape.rows)?;
        on.cross_entropy_checked(shape, x.read(), k.read(), out.write()?)?;
        Ok(Box::new(out) as Box<dyn Held>)
    }).map_err(|e| py_err(call, e))?, else return Err(floats_only(call, "`cross_entropy`", logits.dtype)));
    Ok(Array::new(ctx, rows, held, None))
}

/// A Philox random stream (`gpukit.Rng(seed, offset=0)`): each fill draws the next
/// positions of the stream keyed by `seed`, so the same seed and the same fills give the
/// same bits on every backend.
#[pyclass(module = "gpukit", name = "Rng", frozen)]
#[derive(Debug)]
pub struct Rng {
    rng: Mutex<gpukit::Rng>,
}

#[pymethods]
impl Rng {
    #[new]
    #[pyo3(signature = (seed, offset=0))]
    fn new(seed: u64, offset: u64) -> Rng {
        Rng {
            rng: Mutex::new(gpukit::Rng::at(seed, offset)),
        }
    }

    /// The key.
    #[getter]
    fn seed(&self) -> u64 {
        self.lock().seed()
    }

    /// The position of the next fill's first element.
    #[getter]
    fn offset(&self) -> u64 {
        self.lock().offset()
    }

    fn __repr__(&self) -> String {
        let r = self.lock();
        format!("gpukit.Rng(seed={}, offset={})", r.seed(), r.offset())
    }
}

impl Rng {
    fn lock(&self) -> std::sync::MutexGuard<'_, gpukit::Rng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `fill` at the stream's next `n` positions (its seed and the first's offset),
    /// which it takes only once `fill` has succeeded; the stream stays locked meanwhile, so
    /// two threads drawing from one `Rng` take different positions.
    fn draw(
        &self,
        n: usize,
        fill: impl FnOnce(u64, u64) -> gpukit::Result<Box<dyn Held>>,
    ) -> gpukit::Result<Box<dyn Held>> {
        let mut r = self.lock();
        let drawn = fill(r.seed(), r.offset())?;
        r.take(n);
        Ok(drawn)
    }
}

/// The distributions of `Context.random_uniform` and `Context.random_normal`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Draw {
    /// Uniform in `[lo, hi)`.
    Uniform(f64, f64),
    /// Normal of this mean and standard deviation.
    Normal(f64, f64),
}

/// A new array of `shape` and float `dtype` filled from `rng`'s next positions.
#[allow(clippy::too_many_arguments)]
pub(crate) fn random(
    py: Python<'_>,
    call: &str,
    ctx: &gpukit::Context,
    shape: Vec<usize>,
    dtype: DType,
    draw: Draw,
    rng: &Rng,
    stream: Option<&Stream>,
) -> PyResult<Array> {
    let len: usize = shape.iter().product();
    let s = queue(call, ctx, stream)?;
    let on = On::new(ctx, &s);
    let held = by_float!(dtype, T => py.detach(|| rng.draw(len, |seed, offset| {
        let mut out = fresh::<T>(&on, len)?;
        let f = |x: f64| T::from_scalar(Scalar::Float(x));
        match draw {
            Draw::Uniform(lo, hi) => on.random_uniform(out.write()?, f(lo), f(hi), seed, offset)?,
            Draw::Normal(mean, std) => on.random_normal(out.write()?, f(mean), f(std), seed, offset)?,
        }
        Ok(Box::new(out) as Box<dyn Held>)
    })).map_err(|e| py_err(call, e))?, else return Err(floats_only(call, "a random fill", dtype)));
    Ok(Array::new(ctx, shape, held, None))
}
