//! `gpukit.Array`: a typed device array (ours, or a foreign tensor borrowed through DLPack)
//! with a shape, exported to other libraries through `__dlpack__`.
//!
//! The array object is immutable (a frozen class): its memory sits behind a lock
//! ([`Memory`]), which every method takes with the GIL released, so one array can be used
//! from several Python threads at once; a call waits for another's use of the memory to be
//! queued, never fails for it.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gpukit::core::dlpack::{
    DLTensor, DlpackArray, DlpackLegacy, DlpackTensor, DL_CPU, DL_CUDA, DL_VULKAN,
};
use gpukit::{AnyBackend, BinaryOp, DType, GpuArray, RawStream, Shape, UnaryOp};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::dlpack::{self, Form};
use crate::element::{
    by_dtype, numpy_dtype, numpy_name, parse_dtype, scalar, PyDType, PyElement, Scalar,
};
use crate::error::{floats_only, py_err, value_err};
use crate::stream::{queue, On, Stream};

/// An array's memory: allocated by gpukit, or a foreign producer's, borrowed.
pub(crate) enum Slot<T: PyElement> {
    Owned(GpuArray<T>),
    Imported(DlpackArray<T, AnyBackend>),
}

impl<T: PyElement> Slot<T> {
    pub(crate) fn read(&self) -> &GpuArray<T> {
        match self {
            Slot::Owned(a) => a,
            Slot::Imported(d) => d.array(),
        }
    }

    pub(crate) fn write(&mut self) -> gpukit::Result<&mut GpuArray<T>> {
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

impl Made {
    /// The exported tensor's fields.
    pub(crate) fn tensor(&self) -> &DLTensor {
        match self {
            Made::Versioned(t) => &t.managed().dl_tensor,
            Made::Legacy(t) => &t.managed().dl_tensor,
        }
    }
}

/// How the second operand of a binary op meets the first, which has the result's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// Element by element.
    Same,
    /// `b` is one row, over every row of the `Shape` matrix (one element: a 1-column one).
    Row(Shape),
    /// `b` is one column, over every column.
    Col(Shape),
}

/// The untyped face of a [`Slot`]: what the Python methods need, whatever the element type.
/// None of it calls Python: it runs with the GIL released.
pub(crate) trait Held: Send + Sync {
    fn dtype(&self) -> DType;
    fn read_only(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
    /// Exports the memory (no copy) in `form`; the consumer's stream waits for its work
    /// where `consumer` names one.
    fn export(
        &self,
        on: &On<'_>,
        shape: &[usize],
        form: Form,
        consumer: Option<RawStream>,
    ) -> gpukit::Result<Made>;
    /// A new array of gpukit's holding a copy.
    fn copy(&self, on: &On<'_>) -> gpukit::Result<Box<dyn Held>>;
    fn fill(&mut self, on: &On<'_>, value: Scalar) -> gpukit::Result<()>;
    fn scale(&mut self, on: &On<'_>, alpha: Scalar) -> gpukit::Result<()>;
    fn unary(&mut self, on: &On<'_>, op: UnaryOp) -> gpukit::Result<()>;
    /// `self = op(x)`; `x` of this element type.
    fn unary_from(&mut self, on: &On<'_>, op: UnaryOp, x: &dyn Held) -> gpukit::Result<()>;
    /// `self = op(a, b)`; `a` and `b` of this element type.
    fn binary(
        &mut self,
        on: &On<'_>,
        op: BinaryOp,
        a: &dyn Held,
        b: &dyn Held,
        how: How,
    ) -> gpukit::Result<()>;
    /// `self = op(self, b)`; `b` of this element type.
    fn binary_inplace(
        &mut self,
        on: &On<'_>,
        op: BinaryOp,
        b: &dyn Held,
        how: How,
    ) -> gpukit::Result<()>;
    /// The elements, downloaded: a `Vec` of the element type.
    fn download(&self) -> gpukit::Result<Box<dyn Any + Send>>;
    /// The elements, downloaded into `dst` (host memory of exactly their bytes, aligned for
    /// the element type).
    fn download_into(&self, dst: &mut [u8]) -> gpukit::Result<()>;
    /// A new array of gpukit's with the elements converted to `dtype`.
    fn cast(&self, on: &On<'_>, dtype: DType) -> gpukit::Result<Box<dyn Held>>;
}

/// `x` as a `Slot<T>`: the callers checked the element types first.
pub(crate) fn typed<T: PyElement>(x: &dyn Held) -> gpukit::Result<&Slot<T>> {
    x.as_any()
        .downcast_ref::<Slot<T>>()
        .ok_or_else(|| gpukit::Error::InvalidArgument {
            op: "gpukit",
            arg: "array",
            message: format!(
                "{} where {} was checked (a bug of gpukit's; please report it)",
                x.dtype(),
                T::DTYPE
            ),
        })
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
        on: &On<'_>,
        shape: &[usize],
        form: Form,
        consumer: Option<RawStream>,
    ) -> gpukit::Result<Made> {
        let a = self.read();
        Ok(match (form, consumer) {
            (Form::Legacy, _) => Made::Legacy(on.to_dlpack_legacy(a, shape)?),
            (Form::Versioned, None) => Made::Versioned(on.to_dlpack(a, shape, self.read_only())?),
            (Form::Versioned, Some(raw)) => Made::Versioned(
                // SAFETY: DLPack's protocol: the consumer that passed `stream=` vouches that
                // it is a live stream of this device (checked to be the array's device).
                unsafe { on.to_dlpack_on(a, shape, self.read_only(), raw) }?,
            ),
        })
    }

    fn copy(&self, on: &On<'_>) -> gpukit::Result<Box<dyn Held>> {
        let src = self.read();
        let mut out = on.alloc::<T>(src.len())?;
        on.copy(src, &mut out)?;
        Ok(Box::new(Slot::Owned(out)))
    }

    fn fill(&mut self, on: &On<'_>, value: Scalar) -> gpukit::Result<()> {
        on.fill(self.write()?, T::from_scalar(value))
    }

    fn scale(&mut self, on: &On<'_>, alpha: Scalar) -> gpukit::Result<()> {
        on.scale(T::from_scalar(alpha), self.write()?)
    }

    fn unary(&mut self, on: &On<'_>, op: UnaryOp) -> gpukit::Result<()> {
        on.unary_inplace(op, self.write()?)
    }

    fn unary_from(&mut self, on: &On<'_>, op: UnaryOp, x: &dyn Held) -> gpukit::Result<()> {
        let x = typed::<T>(x)?.read();
        on.unary(op, x, self.write()?)
    }

    fn binary(
        &mut self,
        on: &On<'_>,
        op: BinaryOp,
        a: &dyn Held,
        b: &dyn Held,
        how: How,
    ) -> gpukit::Result<()> {
        let (a, b) = (typed::<T>(a)?.read(), typed::<T>(b)?.read());
        let out = self.write()?;
        match how {
            How::Same => on.binary(op, a, b, out),
            How::Row(shape) => on.binary_row(op, shape, a, b, out),
            How::Col(shape) => on.binary_col(op, shape, a, b, out),
        }
    }

    fn binary_inplace(
        &mut self,
        on: &On<'_>,
        op: BinaryOp,
        b: &dyn Held,
        how: How,
    ) -> gpukit::Result<()> {
        let b = typed::<T>(b)?.read();
        let a = self.write()?;
        match how {
            How::Same => on.binary_inplace(op, a, b),
            How::Row(shape) => on.binary_row_inplace(op, shape, a, b),
            How::Col(shape) => on.binary_col_inplace(op, shape, a, b),
        }
    }

    fn download(&self) -> gpukit::Result<Box<dyn Any + Send>> {
        Ok(Box::new(self.read().download()?))
    }

    fn download_into(&self, dst: &mut [u8]) -> gpukit::Result<()> {
        let a = self.read();
        let bytes = dst.len();
        // SAFETY: `T` is one of the plain numeric types of `PyElement` (integers, IEEE and
        // bfloat16 floats): every bit pattern is a value and there is no padding, so bytes
        // may be viewed as elements where aligned, which the prefix and suffix check.
        let (before, elems, after) = unsafe { dst.align_to_mut::<T>() };
        if !before.is_empty() || !after.is_empty() || elems.len() != a.len() {
            return Err(gpukit::Error::InvalidArgument {
                op: "download_into",
                arg: "dst",
                message: format!(
                    "{} bytes, not {} aligned elements of {}",
                    bytes,
                    a.len(),
                    T::DTYPE
                ),
            });
        }
        a.download_into(elems)
    }

    fn cast(&self, on: &On<'_>, dtype: DType) -> gpukit::Result<Box<dyn Held>> {
        let src = self.read();
        by_dtype!(dtype, U => {
            let mut out = on.alloc::<U>(src.len())?;
            on.cast(src, &mut out)?;
            Ok(Box::new(Slot::Owned(out)) as Box<dyn Held>)
        })
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

/// The bytes an array's memory spans, on its DLPack device: where it is known (a foreign
/// tensor's from its import; our own memory's once exported, since only an export lets
/// another array alias it), to find arrays that overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) device: (i32, i32),
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Span {
    /// The `bytes` bytes at the first element of the tensor `t` (its data pointer and byte
    /// offset, checked by the import or made by the export), on its device.
    pub(crate) fn of(t: &DLTensor, bytes: usize) -> Span {
        let start = (t.data as usize).saturating_add(t.byte_offset as usize);
        Span {
            device: (t.device.device_type, t.device.device_id),
            start,
            end: start.saturating_add(bytes),
        }
    }
}

/// An array's memory, shared by the arrays that view it, behind its lock.
pub(crate) struct Memory {
    held: Mutex<Box<dyn Held>>,
    span: OnceLock<Span>,
}

impl Memory {
    pub(crate) fn new(held: Box<dyn Held>, span: Option<Span>) -> Arc<Memory> {
        Arc::new(Memory {
            held: Mutex::new(held),
            span: span.map_or_else(OnceLock::new, OnceLock::from),
        })
    }

    /// The lock, taken (call with the GIL released: another thread may hold it while it
    /// waits for the device). A panic in an earlier holder left the memory as the device
    /// left it, so the lock is taken anyway.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Box<dyn Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the span once known (an export's).
    pub(crate) fn note_span(&self, span: Span) {
        let _ = self.span.set(span);
    }

    /// Whether `self` and `other` may share bytes: the same memory, or spans that meet.
    pub(crate) fn overlaps(self: &Arc<Self>, other: &Arc<Memory>) -> bool {
        if Arc::ptr_eq(self, other) {
            return true;
        }
        match (self.span.get(), other.span.get()) {
            (Some(a), Some(b)) => a.device == b.device && a.start < b.end && b.start < a.end,
            _ => false,
        }
    }
}

/// A typed array on a gpukit device, with a shape (row-major). NumPy, PyTorch, CuPy and JAX
/// take it without a copy (`numpy.from_dlpack(a)`); `Context.from_dlpack` takes theirs.
#[pyclass(module = "gpukit", name = "Array", frozen)]
pub struct Array {
    pub(crate) ctx: gpukit::Context,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) read_only: bool,
    pub(crate) mem: Arc<Memory>,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.__repr__())
    }
}

impl Array {
    /// A new array over `held`.
    pub(crate) fn new(
        ctx: &gpukit::Context,
        shape: Vec<usize>,
        held: Box<dyn Held>,
        span: Option<Span>,
    ) -> Array {
        Array {
            ctx: ctx.clone(),
            shape,
            dtype: held.dtype(),
            read_only: held.read_only(),
            mem: Memory::new(held, span),
        }
    }

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

    /// Another array over the same memory, of `shape` (as many elements).
    fn view(&self, shape: Vec<usize>) -> Array {
        Array {
            ctx: self.ctx.clone(),
            shape,
            dtype: self.dtype,
            read_only: self.read_only,
            mem: Arc::clone(&self.mem),
        }
    }

    pub(crate) fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// `ValueError` for a write to a read-only array, raised by `call`.
    pub(crate) fn writable(&self, call: &str) -> PyResult<()> {
        if self.read_only {
            return Err(value_err(
                call,
                "the array is read-only (it shares the memory of a read-only or immutable \
                 producer's array, such as a read-only NumPy array or a JAX array); copy() \
                 gives a writable copy",
            ));
        }
        Ok(())
    }

    /// An in-place write of the Python number `value` (checked against the element type)
    /// by `call`, queued on `stream` (or the current one).
    fn with_scalar(
        &self,
        py: Python<'_>,
        call: &str,
        value: &Bound<'_, PyAny>,
        stream: Option<&Stream>,
        f: impl FnOnce(&mut Box<dyn Held>, &On<'_>, Scalar) -> gpukit::Result<()> + Send,
    ) -> PyResult<()> {
        self.writable(call)?;
        let v = scalar(call, value, self.dtype)?;
        let s = queue(call, &self.ctx, stream)?;
        let on = On::new(&self.ctx, &s);
        self.with(py, call, |h| f(h, &on, v))
    }

    /// Where the array's memory is: the span of an export made as `__dlpack__` makes one
    /// (the CUDA stream at the address `cuda_consumer` waits for the array's work, else the
    /// host does), dropped at once, since the memory stays the array's. Recorded as the
    /// memory's span: another library may now alias it.
    pub(crate) fn exported_span(
        &self,
        py: Python<'_>,
        cuda_consumer: Option<usize>,
    ) -> gpukit::Result<Span> {
        let bytes = self.nbytes();
        let span = py.detach(|| -> gpukit::Result<Span> {
            // Passed as an address: a pointer does not cross to the thread without the GIL.
            let consumer = cuda_consumer.map(|s| RawStream::Cuda(s as *mut std::ffi::c_void));
            let held = self.mem.lock();
            let on = On::new(&self.ctx, &self.ctx);
            let made = held.export(&on, &self.shape, Form::Versioned, consumer)?;
            Ok(Span::of(made.tensor(), bytes))
        })?;
        self.mem.note_span(span);
        Ok(span)
    }

    /// Runs `f` on the memory, locked, with the GIL released; its error is raised as
    /// `call`'s.
    pub(crate) fn with<R: Send>(
        &self,
        py: Python<'_>,
        call: &str,
        f: impl FnOnce(&mut Box<dyn Held>) -> gpukit::Result<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| f(&mut self.mem.lock()))
            .map_err(|e| py_err(call, e))
    }
}

/// Element-wise `out = op(a, b)` for `Context.binary`: NumPy's broadcasting where the
/// library has it (equal shapes; `b` or `a` one element, one row or one column of the
/// other), and NumPy's answer where `out` shares memory with an input (as if the inputs
/// were read first).
pub(crate) fn binary(
    py: Python<'_>,
    on: &On<'_>,
    call: &str,
    op: BinaryOp,
    a: &Array,
    b: &Array,
    out: &Array,
) -> PyResult<()> {
    for (name, x) in [("a", a), ("b", b)] {
        if x.dtype != out.dtype {
            return Err(crate::error::type_err(
                call,
                format!(
                    "`{name}` is {}, `out` is {} (one element type for all three; astype \
                     converts)",
                    numpy_name(x.dtype),
                    numpy_name(out.dtype)
                ),
            ));
        }
    }
    if op.floats_only() && !out.dtype.is_float() {
        return Err(floats_only(call, &format!("`{}`", op.name()), out.dtype));
    }
    out.writable(call)?;
    let result = broadcast_shape(&a.shape, &b.shape).ok_or_else(|| {
        value_err(
            call,
            format!(
                "operands could not be broadcast together with shapes {} {}",
                shape_text(&a.shape),
                shape_text(&b.shape)
            ),
        )
    })?;
    if result != out.shape {
        return Err(value_err(
            call,
            format!(
                "`out` has shape {}, the result of shapes {} and {} has shape {}",
                shape_text(&out.shape),
                shape_text(&a.shape),
                shape_text(&b.shape),
                shape_text(&result)
            ),
        ));
    }
    let unsupported = || {
        value_err(
            call,
            format!(
                "shapes {} and {} broadcast to {} in a way gpukit does not run (it broadcasts \
                 one element, one row or one column over the other operand)",
                shape_text(&a.shape),
                shape_text(&b.shape),
                shape_text(&result)
            ),
        )
    };
    let (Some(fa), Some(fb)) = (fit(&a.shape, &result), fit(&b.shape, &result)) else {
        return Err(unsupported());
    };
    let commutes = matches!(op, BinaryOp::Add | BinaryOp::Mul);
    // The left operand must have the result's shape: swap where the op commutes, else
    // broadcast `a` into a temporary of the result's shape first.
    let (a, b, fb) = match (fa, fb) {
        (Fit::Full, _) => (Operand::Array(a), b, fb),
        (_, Fit::Full) if commutes => (Operand::Array(b), a, fa),
        _ => (Operand::Broadcast(a, fa), b, fb),
    };
    run_binary(py, on, call, op, a, b, fb.how(out.size()), out)
}

/// The left operand of [`run_binary`]: an array, or one to broadcast to the result's shape
/// first.
#[derive(Clone, Copy)]
enum Operand<'a> {
    Array(&'a Array),
    Broadcast(&'a Array, Fit),
}

/// Runs `out = op(a, b)`, `a` of the result's shape (or broadcast to it), `b` as `how` says.
#[allow(clippy::too_many_arguments)]
fn run_binary<'a>(
    py: Python<'_>,
    on: &On<'_>,
    call: &str,
    op: BinaryOp,
    a: Operand<'a>,
    b: &'a Array,
    how: How,
    out: &'a Array,
) -> PyResult<()> {
    let size = out.size();
    py.detach(|| -> gpukit::Result<()> {
        // Inputs that share memory with `out` are read into copies first (NumPy's answer),
        // except `a` being `out`'s own memory, which runs in place.
        let a_is_out = matches!(a, Operand::Array(x) if Arc::ptr_eq(&x.mem, &out.mem));
        let b_copy = if b.mem.overlaps(&out.mem) {
            Some(b.mem.lock().copy(on)?)
        } else {
            None
        };
        let a_copy = match a {
            Operand::Array(x) if !a_is_out && x.mem.overlaps(&out.mem) => {
                Some(x.mem.lock().copy(on)?)
            }
            Operand::Broadcast(x, fit) => Some(broadcast_into(on, x, fit, size)?),
            Operand::Array(_) => None,
        };
        // The memories still read in place, and `out`'s, locked together.
        let mut mems: Vec<&'a Arc<Memory>> = vec![&out.mem];
        let a_slot = match a {
            Operand::Array(x) if a_copy.is_none() && !a_is_out => Some(slot(&mut mems, &x.mem)),
            _ => None,
        };
        let b_slot = b_copy.is_none().then(|| slot(&mut mems, &b.mem));
        let mut guards = lock_all(&mems);
        let (o, rest) = guards.split_first_mut().ok_or_else(|| internal(call))?;
        let b_ref = pick(b_copy.as_deref(), b_slot, rest).ok_or_else(|| internal(call))?;
        if a_is_out {
            return o.binary_inplace(on, op, b_ref, how);
        }
        let a_ref = pick(a_copy.as_deref(), a_slot, rest).ok_or_else(|| internal(call))?;
        o.binary(on, op, a_ref, b_ref, how)
    })
    .map_err(|e| py_err(call, e))
}

/// The index of `m` in `mems`, added where it is not there yet.
pub(crate) fn slot<'m>(mems: &mut Vec<&'m Arc<Memory>>, m: &'m Arc<Memory>) -> usize {
    match mems.iter().position(|x| Arc::ptr_eq(x, m)) {
        Some(i) => i,
        None => {
            mems.push(m);
            mems.len() - 1
        }
    }
}

/// An operand: its copy where it has one, else its memory's guard (`at`, counted with
/// `out`'s as 0; `rest` holds the others).
fn pick<'g>(
    copy: Option<&'g dyn Held>,
    at: Option<usize>,
    rest: &'g [MutexGuard<'_, Box<dyn Held>>],
) -> Option<&'g dyn Held> {
    match (copy, at) {
        (Some(c), _) => Some(c),
        (None, Some(i)) => rest.get(i.checked_sub(1)?).map(|g| g.as_ref()),
        (None, None) => None,
    }
}

/// An error that the checks before it rule out, should it happen anyway.
pub(crate) fn internal(call: &str) -> gpukit::Error {
    gpukit::Error::InvalidArgument {
        op: "gpukit",
        arg: "array",
        message: format!("{call}: an operand went missing (a bug of gpukit's; please report it)"),
    }
}

/// Locks `mems` (distinct) in the order of their addresses, the one order every thread
/// takes several in (so none waits for another that waits for it); the guards come back in
/// the order of `mems`.
pub(crate) fn lock_all<'a>(mems: &[&'a Arc<Memory>]) -> Vec<MutexGuard<'a, Box<dyn Held>>> {
    let mut order: Vec<usize> = (0..mems.len()).collect();
    order.sort_by_key(|&i| Arc::as_ptr(mems[i]) as usize);
    let mut guards: Vec<Option<MutexGuard<'a, Box<dyn Held>>>> =
        (0..mems.len()).map(|_| None).collect();
    for i in order {
        guards[i] = Some(mems[i].lock());
    }
    guards.into_iter().flatten().collect()
}

/// How an operand's shape meets the result's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// The result's number of elements, in its layout (equal after leading 1s).
    Full,
    /// One row of the result's last dimension (`cols` elements; one element: `cols` 1).
    Row(usize),
    /// One column: the result's shape with a last dimension of 1 (`cols`: the result's).
    Col(usize),
}

impl Fit {
    /// How an operand of this fit meets one of the result's `size` elements.
    fn how(self, size: usize) -> How {
        match self {
            Fit::Full => How::Same,
            Fit::Row(cols) => How::Row(Shape::new(size / cols.max(1), cols)),
            Fit::Col(cols) => How::Col(Shape::new(size / cols.max(1), cols)),
        }
    }
}

/// `shape` without leading 1s.
fn trimmed(shape: &[usize]) -> &[usize] {
    let first = shape.iter().position(|&d| d != 1).unwrap_or(shape.len());
    &shape[first..]
}

/// How `x` fits the broadcast result `result`, where gpukit runs it.
fn fit(x: &[usize], result: &[usize]) -> Option<Fit> {
    let (tx, tr) = (trimmed(x), trimmed(result));
    if tx == tr {
        return Some(Fit::Full);
    }
    if tx.is_empty() {
        return Some(Fit::Row(1));
    }
    let last = *result.last()?;
    if tx.len() == 1 && tx[0] == last {
        return Some(Fit::Row(last));
    }
    // One column: all of the result's dimensions but the last (which is 1 in `x`).
    if x.last() == Some(&1) && trimmed(&x[..x.len() - 1]) == trimmed(&result[..result.len() - 1]) {
        return Some(Fit::Col(last));
    }
    None
}

/// NumPy's broadcast of two shapes, or `None` where they do not broadcast.
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| -> usize { (i + s.len()).checked_sub(n).map_or(1, |j| s[j]) };
    (0..n)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// A shape as NumPy prints it: `(2, 3)`, `(6,)`, `()`.
pub(crate) fn shape_text(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `x` broadcast to `size` elements of the result's shape, in a new array: a row or
/// column (or one element) repeated, as a multiply of ones by it (exact: `1 * v == v`).
fn broadcast_into(on: &On<'_>, x: &Array, fit: Fit, size: usize) -> gpukit::Result<Box<dyn Held>> {
    let src = x.mem.lock();
    let how = match fit.how(size) {
        How::Same => return src.copy(on),
        how => how,
    };
    by_dtype!(x.dtype, T => {
        let mut ones = Slot::<T>::Owned(on.alloc::<T>(size)?);
        ones.fill(on, Scalar::Int(1))?;
        ones.binary_inplace(on, BinaryOp::Mul, src.as_ref(), how)?;
        Ok(Box::new(ones) as Box<dyn Held>)
    })
}

#[pymethods]
impl Array {
    /// The shape, a tuple of ints.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type: a `gpukit.dtype`, equal to NumPy's name of it (`"float32"`) and to
    /// NumPy's and PyTorch's dtypes of it (`a.dtype == numpy.float32`).
    #[getter]
    fn dtype(&self) -> PyDType {
        PyDType { d: self.dtype }
    }

    /// The bytes of the elements.
    #[getter]
    pub(crate) fn nbytes(&self) -> usize {
        self.size() * self.dtype.size()
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    #[getter(size)]
    fn size_of(&self) -> usize {
        self.size()
    }

    /// Whether the producer of an imported tensor exported it read-only (writes are
    /// refused).
    #[getter]
    fn readonly(&self) -> bool {
        self.read_only
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
            "gpukit.Array(shape={}, dtype={}, device={})",
            shape_text(&self.shape),
            numpy_name(self.dtype),
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

    /// The buffer protocol (`memoryview(a)`; CPython 3.11 and later) on the CPU backend: a
    /// view of the array's memory, after its queued work, holding it until released;
    /// writable unless the array is read-only. Device memory and bfloat16 (which has no
    /// format) are `BufferError`.
    ///
    /// # Safety
    ///
    /// `view` is the `Py_buffer` Python passes to fill.
    #[cfg(Py_3_11)]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: Python's call of the slot, with the view it fills.
        unsafe { crate::buffer::get(slf, view, flags) }
    }

    /// Ends a view of the buffer protocol.
    ///
    /// # Safety
    ///
    /// `view` is one that `__getbuffer__` filled, released once.
    #[cfg(Py_3_11)]
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        // SAFETY: Python's call of the slot, once, with a view `__getbuffer__` filled.
        unsafe { crate::buffer::release(view) }
    }

    /// DLPack's `(device_type, device_id)` of the array's memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.dl_device()
    }

    /// The CUDA Array Interface, version 3 (CuPy's, Numba's and PyTorch's protocol), on a
    /// CUDA array: `shape`, `typestr`, `data` (the device address and whether the array is
    /// read-only), `strides` (`None`: contiguous), `version` 3 and `stream`, the context's
    /// stream after the array's queued work (1 for CUDA's legacy default stream): the
    /// consumer makes its own work wait for that stream, as the protocol asks, and keeps
    /// this array alive while it uses the address. Other arrays, and bfloat16 (which has no
    /// `typestr`), raise `AttributeError`: `__dlpack__` is their protocol.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        const CALL: &str = "Array.__cuda_array_interface__";
        if self.ctx.backend_name() != "cuda" {
            return Err(PyAttributeError::new_err(format!(
                "{CALL}: a {} array is not in CUDA memory (__dlpack__ and numpy.asarray take \
                 it)",
                self.ctx.backend_name()
            )));
        }
        let typestr = match self.dtype {
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::F16 => "<f2",
            DType::I8 => "|i1",
            DType::U8 => "|u1",
            DType::I32 => "<i4",
            DType::U32 => "<u4",
            DType::I64 => "<i8",
            DType::U64 => "<u8",
            DType::BF16 => {
                return Err(PyAttributeError::new_err(format!(
                    "{CALL}: bfloat16 has no typestr in the CUDA Array Interface (__dlpack__ \
                     shares it)"
                )))
            }
        };
        // SAFETY: the handle goes to the consumer, which only makes its own work wait for
        // this stream (the interface's protocol); gpukit's work stays on it.
        let raw = unsafe { self.ctx.raw_handle() };
        let RawStream::Cuda(handle) = raw else {
            return Err(PyAttributeError::new_err(format!(
                "{CALL}: the context has no CUDA stream"
            )));
        };
        // The address through an export ordered onto the context's own stream (after the
        // array's work on any stream).
        let stream = handle as usize;
        let address = self
            .exported_span(py, Some(stream))
            .map_err(|e| py_err(CALL, e))?
            .start;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", typestr)?;
        // A null pointer for no elements, as the interface asks.
        let address = if self.size() == 0 { 0 } else { address };
        d.set_item("data", (address, self.read_only))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", if stream == 0 { 1 } else { stream })?;
        Ok(d)
    }

    /// Sets every element to `value` (queued on the device; NumPy views of the array see
    /// it once the work is done, which their next `__dlpack__` or `Context.synchronize`
    /// waits for).
    #[pyo3(signature = (value, *, stream=None))]
    fn fill(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        stream: Option<&Stream>,
    ) -> PyResult<()> {
        self.with_scalar(py, "Array.fill", value, stream, |h, on, v| h.fill(on, v))
    }

    /// Multiplies every element by `alpha`, in place.
    #[pyo3(signature = (alpha, *, stream=None))]
    fn scale(
        &self,
        py: Python<'_>,
        alpha: &Bound<'_, PyAny>,
        stream: Option<&Stream>,
    ) -> PyResult<()> {
        self.with_scalar(py, "Array.scale", alpha, stream, |h, on, v| h.scale(on, v))
    }

    /// Applies a unary op in place: one of `gpukit.UNARY_OPS` (`"exp"`, `"relu"`, `"tanh"`,
    /// ...).
    #[pyo3(signature = (op, *, stream=None))]
    fn apply(&self, py: Python<'_>, op: &str, stream: Option<&Stream>) -> PyResult<()> {
        const CALL: &str = "Array.apply";
        let op = crate::unary_op(CALL, op)?;
        if op.floats_only() && !self.dtype.is_float() {
            return Err(floats_only(CALL, &format!("`{}`", op.name()), self.dtype));
        }
        self.writable(CALL)?;
        let s = queue(CALL, &self.ctx, stream)?;
        let on = On::new(&self.ctx, &s);
        self.with(py, CALL, |h| h.unary(&on, op))
    }

    /// A new array of gpukit's with a copy of the elements (writable, whatever the
    /// original's read-only status).
    #[pyo3(signature = (*, stream=None))]
    fn copy(&self, py: Python<'_>, stream: Option<&Stream>) -> PyResult<Array> {
        const CALL: &str = "Array.copy";
        let s = queue(CALL, &self.ctx, stream)?;
        let on = On::new(&self.ctx, &s);
        let held = self.with(py, CALL, |h| h.copy(&on))?;
        Ok(Array::new(&self.ctx, self.shape.clone(), held, None))
    }

    /// The same memory with another shape (an array is always contiguous, so a reshape is a
    /// view, as NumPy's of a contiguous array): the shape as one tuple or as ints, one of
    /// them -1 to be inferred.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Array> {
        const CALL: &str = "Array.reshape";
        let dims: Vec<i64> = match shape.len() {
            1 => {
                let only = shape.get_item(0)?;
                only.extract::<Vec<i64>>()
                    .or_else(|_| only.extract::<i64>().map(|d| vec![d]))
            }
            _ => shape.extract::<Vec<i64>>(),
        }
        .map_err(|_| crate::error::type_err(CALL, "the shape is ints, or one tuple of ints"))?;
        let new = infer_shape(&dims, self.size()).ok_or_else(|| {
            value_err(
                CALL,
                format!(
                    "cannot reshape an array of {} elements (shape {}) into shape {:?}",
                    self.size(),
                    shape_text(&self.shape),
                    dims
                ),
            )
        })?;
        Ok(self.view(new))
    }

    /// The elements converted to `dtype`, in a new array (floats to integers saturate and
    /// NaN becomes 0, where NumPy's result is undefined; integers wrap; floats round to
    /// nearest even). With `copy=False` and the same `dtype`, the array itself (its memory,
    /// not a copy).
    #[pyo3(signature = (dtype, copy=true))]
    fn astype(&self, py: Python<'_>, dtype: &Bound<'_, PyAny>, copy: bool) -> PyResult<Array> {
        const CALL: &str = "Array.astype";
        let d = parse_dtype(CALL, dtype)?;
        if d == self.dtype && !copy {
            return Ok(self.view(self.shape.clone()));
        }
        let s = queue(CALL, &self.ctx, None)?;
        let on = On::new(&self.ctx, &s);
        let held = if d == self.dtype {
            self.with(py, CALL, |h| h.copy(&on))?
        } else {
            self.with(py, CALL, |h| h.cast(&on, d))?
        };
        Ok(Array::new(&self.ctx, self.shape.clone(), held, None))
    }

    /// NumPy's array protocol (`numpy.asarray(a)`, `numpy.array(a)`): on the CPU backend a
    /// view of the array's memory (after its queued work; `copy=True`: a copy), elsewhere
    /// a copy downloaded from the device (`copy=False` is then a `ValueError`). `dtype`
    /// other than the array's converts in NumPy (a copy). Later writes through gpukit are
    /// ordered by the caller: synchronize before reading a view again.
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_numpy(slf, "Array.__array__", dtype, copy)
    }

    /// A NumPy array holding a copy of the elements (downloaded from the device).
    fn to_numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_numpy(slf, "Array.to_numpy", None, Some(true))
    }

    /// The elements as nested Python lists (downloaded: a copy).
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let data = self.with(py, "Array.tolist", |h| h.download())?;
        by_dtype!(self.dtype, T => {
            let data = data.downcast::<Vec<T>>().map_err(|_| {
                crate::error::type_err("Array.tolist", "the download is not of the array's type")
            })?;
            nest(py, &data, &self.shape)
        })
    }
}

/// `dims` (one of them -1 at most, inferred) as a shape of `size` elements, or `None`.
fn infer_shape(dims: &[i64], size: usize) -> Option<Vec<usize>> {
    let unknown = dims.iter().filter(|&&d| d == -1).count();
    if unknown > 1 || dims.iter().any(|&d| d < -1) {
        return None;
    }
    let known = dims
        .iter()
        .filter(|&&d| d != -1)
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))?;
    dims.iter()
        .map(|&d| match d {
            -1 if known > 0 && size.is_multiple_of(known) => Some(size / known),
            -1 => None,
            d => usize::try_from(d).ok(),
        })
        .collect::<Option<Vec<usize>>>()
        .filter(|s| s.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) == Some(size))
}

/// `__array__` and `to_numpy`: a view of host memory where `copy` allows one, else a copy.
fn to_numpy<'py>(
    slf: &Bound<'py, Array>,
    call: &str,
    dtype: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let a = slf.get();
    let np = py.import("numpy")?;
    let want = dtype.map(|d| np.call_method1("dtype", (d,))).transpose()?;
    let own = numpy_dtype(py, call, a.dtype)?;
    let converts = match &want {
        Some(w) => !w.eq(&own)?,
        None => false,
    };
    if copy == Some(false) && converts {
        return Err(value_err(
            call,
            "converting to another dtype makes a copy, and copy=False forbids one",
        ));
    }
    // NumPy views host memory through DLPack, which has no bfloat16 of NumPy's: those are
    // copied like device memory.
    let host = a.ctx.backend_name() == "cpu" && a.dtype != DType::BF16;
    let array = if host {
        let view = np.call_method1("from_dlpack", (slf,))?;
        if copy == Some(true) && !converts {
            view.call_method0("copy")?
        } else {
            view
        }
    } else {
        if copy == Some(false) {
            return Err(value_err(
                call,
                if a.dtype == DType::BF16 {
                    "NumPy cannot view bfloat16 memory: NumPy gets a copy (copy=None or \
                     copy=True)"
                        .to_owned()
                } else {
                    format!(
                        "the array is in {} device memory, which NumPy cannot view: NumPy \
                         gets a copy (copy=None or copy=True)",
                        a.ctx.backend_name()
                    )
                },
            ));
        }
        let out = np.call_method1("empty", (PyTuple::new(py, &a.shape)?, &own))?;
        let address: usize = out.getattr("ctypes")?.getattr("data")?.extract()?;
        let bytes = a.nbytes();
        if bytes > 0 {
            // SAFETY: `out` is a new C-contiguous NumPy array of exactly `bytes` bytes at
            // `address` (NumPy's `empty`, aligned for its dtype), which nothing else refers
            // to yet and which `out` keeps alive past this call.
            let dst = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, bytes) };
            a.with(py, call, |h| h.download_into(dst))?;
        }
        out
    };
    match want {
        Some(w) if converts => array.call_method1("astype", (w,)),
        _ => Ok(array),
    }
}
