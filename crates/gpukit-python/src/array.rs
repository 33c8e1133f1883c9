//! `gpukit.Array`: a typed device array (ours, or a foreign tensor borrowed through DLPack)
//! with a shape, exported to other libraries through `__dlpack__`.

use std::any::Any;

use gpukit::core::dlpack::{DlpackArray, DlpackLegacy, DlpackTensor, DL_CPU, DL_CUDA, DL_VULKAN};
use gpukit::{AnyBackend, BinaryOp, DType, GpuArray, RawStream, UnaryOp};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::dlpack::{self, Form};
use crate::element::{numpy_name, PyElement};
use crate::error::to_py;

/// An array's memory: allocated by gpukit, or a foreign producer's, borrowed.
pub(crate) enum Slot<T: PyElement> {
    Owned(GpuArray<T>),
    Imported(DlpackArray<T, AnyBackend>),
}

impl<T: PyElement> Slot<T> {
    fn read(&self) -> &GpuArray<T> {
        match self {
            Slot::Owned(a) => a,
            Slot::Imported(d) => d.array(),
        }
    }

    fn write(&mut self) -> gpukit::Result<&mut GpuArray<T>> {
        match self {
            Slot::Owned(a) => Ok(a),
            Slot::Imported(d) => d.array_mut(),
        }
    }
}

/// What an export made: the DLPack 1.x form or the legacy one.
pub(crate) enum Made {
    Versioned(DlpackTensor),
    Legacy(DlpackLegacy),
}

/// The untyped face of a [`Slot`]: what the Python methods need, whatever the element type.
pub(crate) trait Held: Send + Sync {
    fn dtype(&self) -> DType;
    fn read_only(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
    /// Exports the memory (no copy) in `form`; the consumer's stream waits for its work
    /// where `consumer` names one.
    fn export(
        &self,
        ctx: &gpukit::Context,
        shape: &[usize],
        form: Form,
        consumer: Option<RawStream>,
    ) -> gpukit::Result<Made>;
    /// A new array of gpukit's holding a copy.
    fn copy(&self, ctx: &gpukit::Context) -> gpukit::Result<Box<dyn Held>>;
    fn fill(&mut self, ctx: &gpukit::Context, value: &Bound<'_, PyAny>) -> PyResult<()>;
    fn scale(&mut self, ctx: &gpukit::Context, alpha: &Bound<'_, PyAny>) -> PyResult<()>;
    fn unary(&mut self, ctx: &gpukit::Context, op: UnaryOp) -> gpukit::Result<()>;
    /// `self = op(a, b)`; `a` and `b` of this element type.
    fn binary(
        &mut self,
        ctx: &gpukit::Context,
        op: BinaryOp,
        a: &dyn Held,
        b: &dyn Held,
    ) -> PyResult<()>;
    /// The elements, downloaded, as nested lists of `shape`.
    fn tolist<'py>(&self, py: Python<'py>, shape: &[usize]) -> PyResult<Bound<'py, PyAny>>;
}

impl<T: PyElement> Held for Slot<T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn read_only(&self) -> bool {
        matches!(self, Slot::Imported(d) if d.is_read_only())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn export(
        &self,
        ctx: &gpukit::Context,
        shape: &[usize],
        form: Form,
        consumer: Option<RawStream>,
    ) -> gpukit::Result<Made> {
        let a = self.read();
        Ok(match (form, consumer) {
            (Form::Legacy, _) => Made::Legacy(ctx.to_dlpack_legacy(a, shape)?),
            (Form::Versioned, None) => {
                Made::Versioned(ctx.to_dlpack(a, shape, self.read_only())?)
            }
            (Form::Versioned, Some(raw)) => Made::Versioned(
                // SAFETY: DLPack's protocol: the consumer that passed `stream=` vouches that
                // it is a live stream of this device (checked to be the array's device).
                unsafe { ctx.to_dlpack_on(a, shape, self.read_only(), raw) }?,
            ),
        })
    }

    fn copy(&self, ctx: &gpukit::Context) -> gpukit::Result<Box<dyn Held>> {
        let src = self.read();
        let mut out = ctx.alloc::<T>(src.len())?;
        ctx.copy(src, &mut out)?;
        Ok(Box::new(Slot::Owned(out)))
    }

    fn fill(&mut self, ctx: &gpukit::Context, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = T::from_py(value)?;
        let a = self.write().map_err(to_py)?;
        ctx.fill(a, v).map_err(to_py)
    }

    fn scale(&mut self, ctx: &gpukit::Context, alpha: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = T::from_py(alpha)?;
        let a = self.write().map_err(to_py)?;
        ctx.scale(v, a).map_err(to_py)
    }

    fn unary(&mut self, ctx: &gpukit::Context, op: UnaryOp) -> gpukit::Result<()> {
        ctx.unary_inplace(op, self.write()?)
    }

    fn binary(
        &mut self,
        ctx: &gpukit::Context,
        op: BinaryOp,
        a: &dyn Held,
        b: &dyn Held,
    ) -> PyResult<()> {
        fn typed<'a, T: PyElement>(x: &'a dyn Held, name: &str) -> PyResult<&'a Slot<T>> {
            x.as_any().downcast_ref::<Slot<T>>().ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "Context.binary: {name} is {}, out is {}",
                    numpy_name(x.dtype()),
                    numpy_name(T::DTYPE)
                ))
            })
        }
        let (a, b) = (typed::<T>(a, "a")?, typed::<T>(b, "b")?);
        let out = self.write().map_err(to_py)?;
        ctx.binary(op, a.read(), b.read(), out).map_err(to_py)
    }

    fn tolist<'py>(&self, py: Python<'py>, shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
        let a = self.read();
        let data = py.detach(|| a.download()).map_err(to_py)?;
        nest(py, &data, shape)
    }
}

/// `data` as nested lists of `shape` (a scalar for no dimensions).
fn nest<'py, T: PyElement>(
    py: Python<'py>,
    data: &[T],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let Some((&n, rest)) = shape.split_first() else {
        return data[0].to_py(py);
    };
    let step: usize = rest.iter().product();
    let items = (0..n)
        .map(|i| nest(py, &data[i * step..(i + 1) * step], rest))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

/// A typed array on a gpukit device, with a shape (row-major). NumPy, PyTorch, CuPy and JAX
/// take it without a copy (`numpy.from_dlpack(a)`); `Context.from_dlpack` takes theirs.
#[pyclass(module = "gpukit", name = "Array")]
pub struct Array {
    pub(crate) ctx: gpukit::Context,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Box<dyn Held>,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.__repr__())
    }
}

impl Array {
    /// The DLPack device of the array's memory: `(kDLCPU, 0)` on the CPU backend,
    /// `(kDLCUDA, ordinal)` on CUDA, `(kDLVulkan, adapter)` on Vulkan (not exportable).
    pub(crate) fn dl_device(&self) -> (i32, i32) {
        let id = self.ctx.device_id() as i32;
        match self.ctx.backend_name() {
            "cpu" => (DL_CPU, 0),
            "cuda" => (DL_CUDA, id),
            _ => (DL_VULKAN, id),
        }
    }
}

#[pymethods]
impl Array {
    /// The shape, a tuple of ints.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type's NumPy name (`"float32"`).
    #[getter]
    fn dtype(&self) -> &'static str {
        numpy_name(self.data.dtype())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the producer of an imported tensor exported it read-only (writes are
    /// refused).
    #[getter]
    fn readonly(&self) -> bool {
        self.data.read_only()
    }

    /// The device, as `GPU_DEVICE` names it (`"cpu:0"`, `"cuda:1"`).
    #[getter]
    fn device(&self) -> String {
        format!("{}:{}", self.ctx.backend_name(), self.ctx.device_id())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.shape
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d gpukit.Array"))
    }

    fn __repr__(&self) -> String {
        format!(
            "gpukit.Array(shape={:?}, dtype={}, device={})",
            self.shape,
            self.dtype(),
            self.device()
        )
    }

    /// DLPack's export (Python array API): a capsule holding a DLPack 1.x tensor
    /// (`"dltensor_versioned"`) when `max_version` is (1, x) or later, else the legacy
    /// form (`"dltensor"`), sharing this array's memory (no copy) and keeping it alive until
    /// the consumer releases it. `stream`: the consumer's stream (CUDA: an int, 1 for the
    /// legacy default stream, 2 for the per-thread one, else a `cudaStream_t`; it is made to
    /// wait for this array's work through an event; -1 or, on the CPU, `None`: the host
    /// waits). `dl_device` other than the array's, or `copy=True` on the legacy form, is
    /// `BufferError`; `copy=True` exports a copy (flagged as copied).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        dlpack::export(py, self, stream, max_version, dl_device, copy)
    }

    /// DLPack's `(device_type, device_id)` of the array's memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.dl_device()
    }

    /// Sets every element to `value` (queued on the device; NumPy views of the array see
    /// it once the work is done, which their next `__dlpack__` or `Context.synchronize`
    /// waits for).
    fn fill(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.data.fill(&self.ctx, value)
    }

    /// Multiplies every element by `alpha`, in place.
    fn scale(&mut self, alpha: &Bound<'_, PyAny>) -> PyResult<()> {
        self.data.scale(&self.ctx, alpha)
    }

    /// Applies a unary op in place: one of `gpukit.UNARY_OPS` (`"exp"`, `"relu"`, `"tanh"`,
    /// ...).
    fn apply(&mut self, op: &str) -> PyResult<()> {
        let op = UnaryOp::ALL
            .iter()
            .copied()
            .find(|o| o.name() == op)
            .ok_or_else(|| {
                let names: Vec<&str> = UnaryOp::ALL.iter().map(|o| o.name()).collect();
                PyValueError::new_err(format!(
                    "Array.apply: no unary op {op:?}; one of {}",
                    names.join(", ")
                ))
            })?;
        self.data.unary(&self.ctx, op).map_err(to_py)
    }

    /// A new array of gpukit's with a copy of the elements.
    fn copy(&self, py: Python<'_>) -> PyResult<Array> {
        let data = py.detach(|| self.data.copy(&self.ctx)).map_err(to_py)?;
        Ok(Array {
            ctx: self.ctx.clone(),
            shape: self.shape.clone(),
            data,
        })
    }

    /// The elements as nested Python lists (downloaded: a copy).
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.data.tolist(py, &self.shape)
    }
}
