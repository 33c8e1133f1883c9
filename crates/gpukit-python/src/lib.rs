//! # gpukit for Python
//!
//! The Python module `gpukit`: a device context and typed arrays whose memory NumPy,
//! PyTorch, CuPy and JAX share through DLPack, both ways, without a copy.
//!
//! ```python
//! import numpy as np, gpukit
//!
//! ctx = gpukit.Context("cpu")          # or gpukit.Context(): GPU_DEVICE, else auto
//! a = ctx.zeros((2, 3), dtype="float32")
//! view = np.from_dlpack(a)             # NumPy's view of gpukit's memory
//! a.fill(7.0)
//! ctx.synchronize()
//! assert (view == 7.0).all()
//!
//! host = np.arange(6, dtype=np.float32)
//! b = ctx.from_dlpack(host)            # gpukit's view of NumPy's memory
//! b.apply("exp")                       # in place: NumPy sees it once synchronized
//! ```
//!
//! Exports follow DLPack's Python protocol: `Array.__dlpack__(stream=, max_version=,
//! dl_device=, copy=)` gives a DLPack 1.x capsule (`"dltensor_versioned"`, with the
//! read-only flag) or, for consumers that ask for no version, the legacy one; on CUDA the
//! consumer's stream waits for the array's work through an event (no host wait).
//! `Context.from_dlpack(x, copy=None)` asks `x` for DLPack 1.x (legacy where it cannot),
//! passing its own stream on CUDA; `copy=None` shares where it can and copies host memory
//! it cannot share (not contiguous, not aligned, or another device's context), `copy=False` never
//! copies, `copy=True` always does. A foreign tensor is given back to its producer once the
//! array, and every export of it, are gone.
//!
//! On the CPU backend an array also has Python's buffer protocol (`memoryview(a)`), in a
//! module built for CPython 3.11 or later, whose stable ABI has the buffer slots.
//!
//! `pip install crates/gpukit-python` builds it (maturin, `pyproject.toml`: a wheel on the
//! stable ABI of the Python that builds it, good for later ones too, with the type stubs of
//! `gpukit.pyi`; the feature `abi3-py39` builds one for every CPython from 3.9, without the
//! buffer protocol); `cargo xtask python` builds the wheels into virtual environments,
//! checks the stubs against the module and runs the tests in `tests/`.

use gpukit::{BinaryOp, DeviceSpec};
use pyo3::prelude::*;

mod array;
#[cfg(Py_3_11)]
mod buffer;
mod dlpack;
mod element;
mod error;
mod ops;
mod stream;

use array::Array;
use element::{by_dtype, parse_dtype, scalar};
use error::{py_err, value_err, GpukitError};

/// A device: its memory, its default stream and the ops queued on it.
#[pyclass(module = "gpukit", name = "Context", frozen)]
struct Context {
    ctx: gpukit::Context,
}

/// A `shape` argument of `call`: an int, or a sequence of ints, none negative.
fn shape_of(call: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = v.extract::<usize>() {
        return Ok(vec![n]);
    }
    v.extract::<Vec<usize>>().map_err(|_| {
        let text = v.repr().map(|r| r.to_string()).unwrap_or_default();
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{call}: shape {text} is not an int or a sequence of non-negative ints"
        ))
    })
}

#[pymethods]
impl Context {
    /// Opens `device` (`"cpu"`, `"cuda:0"`, `"vulkan"`, `"auto"`); without one, as
    /// `gpukit::Context::default()`: `GPU_DEVICE`, `gpu.toml`, else auto.
    #[new]
    #[pyo3(signature = (device=None))]
    fn new(py: Python<'_>, device: Option<&str>) -> PyResult<Self> {
        let ctx = py
            .detach(|| match device {
                None => gpukit::Context::default(),
                Some(d) => d.parse::<DeviceSpec>().and_then(gpukit::Context::new),
            })
            .map_err(|e| py_err("Context", e))?;
        Ok(Context { ctx })
    }

    /// The backend's name: `"cpu"`, `"cuda"` or `"vulkan"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.ctx.backend_name()
    }

    /// The device's ordinal within its backend.
    #[getter]
    fn device_id(&self) -> usize {
        self.ctx.device_id()
    }

    fn __repr__(&self) -> String {
        format!(
            "gpukit.Context({}:{})",
            self.ctx.backend_name(),
            self.ctx.device_id()
        )
    }

    /// A new array of zeros.
    #[pyo3(signature = (shape, dtype=None))]
    fn zeros(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.zeros";
        let (shape, d) = self.shape_and_type(CALL, shape, dtype)?;
        self.new_array(py, CALL, shape, d, None)
    }

    /// A new array with every element `fill_value`.
    #[pyo3(signature = (shape, fill_value, dtype=None))]
    fn full(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        fill_value: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.full";
        let (shape, d) = self.shape_and_type(CALL, shape, dtype)?;
        let v = scalar(CALL, fill_value, d)?;
        self.new_array(py, CALL, shape, d, Some(v))
    }

    /// Imports any DLPack producer (a NumPy array, a PyTorch, CuPy or JAX tensor, a
    /// `gpukit.Array`): shares its memory where it can (`copy=None`, the default; never
    /// copies with `copy=False`, always with `copy=True`). A read-only producer gives a
    /// read-only array.
    #[pyo3(name = "from_dlpack", signature = (x, *, copy=None))]
    fn import_dlpack(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        copy: Option<bool>,
    ) -> PyResult<Array> {
        dlpack::import(py, &self.ctx, x, copy)
    }

    /// `out = op(a, b)` element-wise: one of `gpukit.BINARY_OPS` (`"add"`, `"mul"`, ...),
    /// the arrays of one element type; returns `out` (a new array where not given). Shapes
    /// broadcast as NumPy's do where gpukit runs it (equal shapes, or one operand one
    /// element, one row or one column of the other); `out` has the result's shape and may be
    /// (or overlap) `a` or `b`: the result is NumPy's, as if the inputs were read first.
    /// Integer `div` truncates toward zero (C's `/`, not NumPy's `//`, which floors) and
    /// gives 0 for a division by zero.
    #[pyo3(signature = (op, a, b, out=None, *, stream=None))]
    fn binary<'py>(
        &self,
        py: Python<'py>,
        op: &str,
        a: &Bound<'py, Array>,
        b: &Bound<'py, Array>,
        out: Option<Bound<'py, Array>>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Bound<'py, Array>> {
        const CALL: &str = "Context.binary";
        let op = named(CALL, "binary op", BinaryOp::ALL, BinaryOp::name, op)?;
        self.ours(CALL, [("a", a.get()), ("b", b.get())])?;
        let out = match out {
            Some(o) => o,
            None => {
                // The result's shape (`array::binary` refuses shapes that do not broadcast).
                let shape = array::broadcast_shape(&a.get().shape, &b.get().shape)
                    .unwrap_or_else(|| a.get().shape.clone());
                let made = self.new_array(py, CALL, shape, a.get().dtype, None)?;
                Bound::new(py, made)?
            }
        };
        self.ours(CALL, [("out", out.get())])?;
        let s = stream::queue(CALL, &self.ctx, stream)?;
        let on = stream::On::new(&self.ctx, &s);
        array::binary(py, &on, CALL, op, a.get(), b.get(), out.get())?;
        Ok(out)
    }

    /// `op(x)` element-wise (one of `gpukit.UNARY_OPS`), into a new array or into `out` (of
    /// `x`'s shape and type; `x` itself works in place); returns the result.
    #[pyo3(signature = (op, x, out=None, *, stream=None))]
    fn unary<'py>(
        &self,
        py: Python<'py>,
        op: &str,
        x: &Bound<'py, Array>,
        out: Option<Bound<'py, Array>>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Bound<'py, Array>> {
        const CALL: &str = "Context.unary";
        let op = unary_op(CALL, op)?;
        self.ours(CALL, [("x", x.get())])?;
        if let Some(o) = &out {
            self.ours(CALL, [("out", o.get())])?;
        }
        match out {
            None => Bound::new(
                py,
                ops::unary_new(py, CALL, &self.ctx, op, x.get(), stream)?,
            ),
            Some(o) => {
                ops::unary_into(py, CALL, &self.ctx, op, x.get(), o.get(), stream)?;
                Ok(o)
            }
        }
    }

    /// A reduction of `x` (one of `gpukit.REDUCE_OPS`: `"sum"`, `"mean"`, `"min"`, `"max"`,
    /// `"argmin"`, `"argmax"`): over all of it (`axis=None`, a 0-d array) or along its first
    /// or last axis; the index reductions give `uint32`.
    #[pyo3(signature = (op, x, axis=None, *, stream=None))]
    fn reduce(
        &self,
        py: Python<'_>,
        op: &str,
        x: &Bound<'_, Array>,
        axis: Option<i64>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.reduce";
        let op = named(
            CALL,
            "reduction",
            &gpukit::ReduceOp::ALL,
            gpukit::ReduceOp::name,
            op,
        )?;
        self.ours(CALL, [("x", x.get())])?;
        ops::reduce(py, CALL, &self.ctx, op, x.get(), axis, stream)
    }

    /// `a @ b`: `(m, k) @ (k, n)`, or stacks `(batch, m, k) @ (batch, k, n)` (a 2-D side is
    /// shared by every product); floating-point arrays of one type, in a new array.
    #[pyo3(signature = (a, b, *, stream=None))]
    fn matmul(
        &self,
        py: Python<'_>,
        a: &Bound<'_, Array>,
        b: &Bound<'_, Array>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.matmul";
        self.ours(CALL, [("a", a.get()), ("b", b.get())])?;
        ops::matmul(py, CALL, &self.ctx, a.get(), b.get(), stream)
    }

    /// Softmax along the last axis, in a new array (floating-point).
    #[pyo3(signature = (x, *, stream=None))]
    fn softmax(
        &self,
        py: Python<'_>,
        x: &Bound<'_, Array>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.softmax";
        self.ours(CALL, [("x", x.get())])?;
        ops::softmax(py, CALL, &self.ctx, x.get(), false, stream)
    }

    /// Log-softmax along the last axis, in a new array (floating-point).
    #[pyo3(signature = (x, *, stream=None))]
    fn log_softmax(
        &self,
        py: Python<'_>,
        x: &Bound<'_, Array>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.log_softmax";
        self.ours(CALL, [("x", x.get())])?;
        ops::softmax(py, CALL, &self.ctx, x.get(), true, stream)
    }

    /// Each row's cross-entropy loss `-log(softmax(logits)[label])`: `logits` of shape
    /// `(..., classes)`, `labels` integers of the rows' shape, each below `classes` (a
    /// label out of range is a `ValueError`, raised once the work has run); a new array of
    /// the rows' shape.
    #[pyo3(signature = (logits, labels, *, stream=None))]
    fn cross_entropy(
        &self,
        py: Python<'_>,
        logits: &Bound<'_, Array>,
        labels: &Bound<'_, Array>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.cross_entropy";
        self.ours(CALL, [("logits", logits.get()), ("labels", labels.get())])?;
        ops::cross_entropy(py, CALL, &self.ctx, logits.get(), labels.get(), stream)
    }

    /// A new array of `shape` with uniform samples in `[low, high)` from `rng`'s next
    /// positions (Philox: the same bits on every backend).
    #[pyo3(signature = (shape, low=0.0, high=1.0, *, rng, dtype=None, stream=None))]
    #[allow(clippy::too_many_arguments)]
    fn random_uniform(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        low: f64,
        high: f64,
        rng: &ops::Rng,
        dtype: Option<&Bound<'_, PyAny>>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.random_uniform";
        let (shape, d) = self.shape_and_type(CALL, shape, dtype)?;
        ops::random(
            py,
            CALL,
            &self.ctx,
            shape,
            d,
            ops::Draw::Uniform(low, high),
            rng,
            stream,
        )
    }

    /// A new array of `shape` with normal samples of mean `mean` and standard deviation
    /// `std` from `rng`'s next positions.
    #[pyo3(signature = (shape, mean=0.0, std=1.0, *, rng, dtype=None, stream=None))]
    #[allow(clippy::too_many_arguments)]
    fn random_normal(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        mean: f64,
        std: f64,
        rng: &ops::Rng,
        dtype: Option<&Bound<'_, PyAny>>,
        stream: Option<&stream::Stream>,
    ) -> PyResult<Array> {
        const CALL: &str = "Context.random_normal";
        let (shape, d) = self.shape_and_type(CALL, shape, dtype)?;
        ops::random(
            py,
            CALL,
            &self.ctx,
            shape,
            d,
            ops::Draw::Normal(mean, std),
            rng,
            stream,
        )
    }

    /// A new stream of this context (`priority`: lower is more urgent, within the backend's
    /// range; default the least urgent). `with ctx.stream() as s:` queues the block's ops
    /// there on this thread.
    #[pyo3(signature = (priority=None))]
    fn stream(&self, py: Python<'_>, priority: Option<i32>) -> PyResult<stream::Stream> {
        const CALL: &str = "Context.stream";
        let s = py
            .detach(|| match priority {
                Some(p) => self.ctx.create_stream_with_priority(p),
                None => self.ctx.create_stream(),
            })
            .map_err(|e| py_err(CALL, e))?;
        Ok(stream::Stream::new(&self.ctx, s))
    }

    /// The stream this thread's ops of this context queue on now: the innermost `with`
    /// stream, else the default one.
    #[getter]
    fn current_stream(&self) -> PyResult<stream::Stream> {
        let s = stream::queue("Context.current_stream", &self.ctx, None)?;
        Ok(stream::Stream::new(&self.ctx, s))
    }

    /// Waits, with the GIL released, until the work queued on every stream of the context
    /// has finished; raises the first error that work raised. Arrays' views and exports
    /// wait for their own arrays' work already; this is the wait for everything.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.ctx.sync())
            .map_err(|e| py_err("Context.synchronize", e))
    }
}

impl Context {
    /// `ValueError` raised by `call` for an argument array of another context.
    fn ours<const N: usize>(&self, call: &str, args: [(&str, &Array); N]) -> PyResult<()> {
        for (name, x) in args {
            if x.ctx.id() != self.ctx.id() {
                return Err(value_err(call, error::other_context(name)));
            }
        }
        Ok(())
    }

    /// A `shape` and a `dtype` (default float32) argument of `call`, the shape's element
    /// count checked not to overflow.
    fn shape_and_type(
        &self,
        call: &str,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Vec<usize>, gpukit::DType)> {
        let shape = shape_of(call, shape)?;
        let d = match dtype {
            Some(d) => parse_dtype(call, d)?,
            None => gpukit::DType::F32,
        };
        if shape
            .iter()
            .try_fold(1usize, |n, &e| n.checked_mul(e))
            .is_none()
        {
            return Err(value_err(
                call,
                format!("shape {} overflows", array::shape_text(&shape)),
            ));
        }
        Ok((shape, d))
    }

    /// A new array of `shape` and `d` (the shape's count checked by `shape_and_type`):
    /// every element `fill`, else zeros; its errors naming `call`.
    fn new_array(
        &self,
        py: Python<'_>,
        call: &str,
        shape: Vec<usize>,
        d: gpukit::DType,
        fill: Option<element::Scalar>,
    ) -> PyResult<Array> {
        let len = shape.iter().product();
        let ctx = &self.ctx;
        let s = stream::queue(call, ctx, None)?;
        let on = stream::On::new(ctx, &s);
        let held = py
            .detach(|| -> gpukit::Result<Box<dyn array::Held>> {
                Ok(by_dtype!(d, T => match fill {
                    None => Box::new(array::Slot::Owned(ctx.alloc_zeros::<T>(len)?)),
                    Some(v) => {
                        let mut a = array::Slot::<T>::Owned(ctx.alloc::<T>(len)?);
                        array::Held::fill(&mut a, &on, v)?;
                        Box::new(a)
                    }
                }))
            })
            .map_err(|e| py_err(call, e))?;
        Ok(Array::new(ctx, shape, held, None))
    }
}

/// The op of `all` named `name` (`kind`: "unary op", "reduction"), or a `ValueError`
/// raised by `call` listing the names.
fn named<O: Copy>(
    call: &str,
    kind: &str,
    all: &[O],
    name_of: impl Fn(O) -> &'static str,
    name: &str,
) -> PyResult<O> {
    all.iter()
        .copied()
        .find(|&o| name_of(o) == name)
        .ok_or_else(|| {
            value_err(
                call,
                format!(
                    "no {kind} '{name}'; one of {}",
                    names(all, &name_of).join(", ")
                ),
            )
        })
}

/// The names of `all`, in the table's order.
fn names<O: Copy>(all: &[O], name_of: impl Fn(O) -> &'static str) -> Vec<&'static str> {
    all.iter().map(|&o| name_of(o)).collect()
}

/// The unary op named `name`, or a `ValueError` raised by `call` listing them.
fn unary_op(call: &str, name: &str) -> PyResult<gpukit::UnaryOp> {
    named(
        call,
        "unary op",
        gpukit::UnaryOp::ALL,
        gpukit::UnaryOp::name,
        name,
    )
}

/// gpukit: GPU arrays shared with NumPy, PyTorch, CuPy and JAX through DLPack.
#[pymodule]
#[pyo3(name = "gpukit")]
fn gpukit_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Context>()?;
    m.add_class::<Array>()?;
    m.add_class::<element::PyDType>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<stream::Event>()?;
    m.add_class::<ops::Rng>()?;
    m.add("GpukitError", m.py().get_type::<GpukitError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "UNARY_OPS",
        names(gpukit::UnaryOp::ALL, gpukit::UnaryOp::name),
    )?;
    m.add("BINARY_OPS", names(BinaryOp::ALL, BinaryOp::name))?;
    m.add(
        "REDUCE_OPS",
        names(&gpukit::ReduceOp::ALL, gpukit::ReduceOp::name),
    )?;
    // The op table's accuracy contracts (the `ulps` column): each op's result is within this
    // many ulp of the exact one on the CPU and CUDA backends (see the crate docs of `UnaryOp`).
    let ulps = pyo3::types::PyDict::new(m.py());
    for op in gpukit::UnaryOp::ALL {
        ulps.set_item(op.name(), op.ulps())?;
    }
    m.add("UNARY_ULPS", ulps)?;
    let ulps = pyo3::types::PyDict::new(m.py());
    for op in BinaryOp::ALL {
        ulps.set_item(op.name(), op.ulps())?;
    }
    m.add("BINARY_ULPS", ulps)?;
    // What `from gpukit.gpukit import *` (the wheel's `__init__.py`) takes, `__version__`
    // among it.
    m.add(
        "__all__",
        [
            "Array",
            "BINARY_OPS",
            "Context",
            "Event",
            "GpukitError",
            "REDUCE_OPS",
            "Rng",
            "Stream",
            "UNARY_OPS",
            "UNARY_ULPS",
            "BINARY_ULPS",
            "__version__",
            "dtype",
        ],
    )?;
    Ok(())
}
