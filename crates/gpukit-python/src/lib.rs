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
//! `pip install crates/gpukit-python` builds it (maturin, `pyproject.toml`: a wheel on the
//! stable ABI of CPython 3.9 and later, with the type stubs of `gpukit.pyi`); `cargo xtask
//! python` builds the wheel into a virtual environment, checks the stubs against the module
//! and runs the tests in `tests/`.

use gpukit::{BinaryOp, DeviceSpec};
use pyo3::prelude::*;

mod array;
mod dlpack;
mod element;
mod error;

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
        self.zeros_as(py, "Context.zeros", shape, dtype)
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
        let d = match dtype {
            Some(d) => parse_dtype(CALL, d)?,
            None => gpukit::DType::F32,
        };
        let v = scalar(CALL, fill_value, d)?;
        let a = self.zeros_as(py, CALL, shape, dtype)?;
        a.with(py, CALL, |h| h.fill(&self.ctx, v))?;
        Ok(a)
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
    /// the three arrays of one element type. Shapes broadcast as NumPy's do where gpukit
    /// runs it (equal shapes, or one operand one element, one row or one column of the
    /// other); `out` has the result's shape and may be (or overlap) `a` or `b`: the result
    /// is NumPy's, as if the inputs were read first. Integer `div` truncates toward zero
    /// (C's `/`, not NumPy's `//`, which floors) and gives 0 for a division by zero.
    fn binary(
        &self,
        py: Python<'_>,
        op: &str,
        a: &Bound<'_, Array>,
        b: &Bound<'_, Array>,
        out: &Bound<'_, Array>,
    ) -> PyResult<()> {
        const CALL: &str = "Context.binary";
        let op = BinaryOp::ALL
            .iter()
            .copied()
            .find(|o| o.name() == op)
            .ok_or_else(|| {
                value_err(
                    CALL,
                    format!("no binary op {op:?}; one of {}", binary_names().join(", ")),
                )
            })?;
        let (a, b, out) = (a.get(), b.get(), out.get());
        for (name, x) in [("a", a), ("b", b), ("out", out)] {
            if x.ctx.id() != self.ctx.id() {
                return Err(value_err(
                    CALL,
                    format!(
                        "`{name}` is an array of another gpukit.Context (copy it into this one \
                         with ctx.from_dlpack(x, copy=True))"
                    ),
                ));
            }
        }
        array::binary(py, CALL, op, a, b, out)
    }

    /// Waits until the work queued on the context has finished.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.ctx.sync())
            .map_err(|e| py_err("Context.synchronize", e))
    }
}

impl Context {
    /// `Context.zeros`, its errors naming `call`.
    fn zeros_as(
        &self,
        py: Python<'_>,
        call: &str,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Array> {
        let shape = shape_of(call, shape)?;
        let d = match dtype {
            Some(d) => parse_dtype(call, d)?,
            None => gpukit::DType::F32,
        };
        let len = shape
            .iter()
            .try_fold(1usize, |n, &e| n.checked_mul(e))
            .ok_or_else(|| {
                value_err(
                    call,
                    format!("shape {} overflows", array::shape_text(&shape)),
                )
            })?;
        let ctx = &self.ctx;
        let held = py
            .detach(|| -> gpukit::Result<Box<dyn array::Held>> {
                Ok(by_dtype!(d, T => Box::new(array::Slot::Owned(ctx.alloc_zeros::<T>(len)?))))
            })
            .map_err(|e| py_err(call, e))?;
        Ok(Array::new(ctx, shape, held, None))
    }
}

fn binary_names() -> Vec<&'static str> {
    BinaryOp::ALL.iter().map(|o| o.name()).collect()
}

/// gpukit: GPU arrays shared with NumPy, PyTorch, CuPy and JAX through DLPack.
#[pymodule]
#[pyo3(name = "gpukit")]
fn gpukit_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Context>()?;
    m.add_class::<Array>()?;
    m.add_class::<element::PyDType>()?;
    m.add("GpukitError", m.py().get_type::<GpukitError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "UNARY_OPS",
        gpukit::UnaryOp::ALL
            .iter()
            .map(|o| o.name())
            .collect::<Vec<_>>(),
    )?;
    m.add("BINARY_OPS", binary_names())?;
    // What `from gpukit.gpukit import *` (the wheel's `__init__.py`) takes, `__version__`
    // among it.
    m.add(
        "__all__",
        [
            "Array",
            "BINARY_OPS",
            "Context",
            "GpukitError",
            "UNARY_OPS",
            "__version__",
            "dtype",
        ],
    )?;
    Ok(())
}
