//! Element types as Python sees them: NumPy's names, and conversions of scalars.

use gpukit::half::{bf16, f16};
use gpukit::{DType, Numeric};
use pyo3::exceptions::{PyOverflowError, PyTypeError};

use crate::error::type_err;
use pyo3::prelude::*;

/// An element type with Python scalars: what `fill`, `scale` and `tolist` convert.
pub(crate) trait PyElement: Numeric + Send + Sync {
    /// The integer type's range, `None` for a float type.
    fn int_range() -> Option<(i128, i128)>;
    /// A [`Scalar`] checked for this type by [`scalar`], as this type.
    fn from_scalar(v: Scalar) -> Self;
    /// This value as a Python `int` or `float`.
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

macro_rules! float {
    ($($t:ty: $from:expr, $to:expr;)*) => {$(
        impl PyElement for $t {
            fn int_range() -> Option<(i128, i128)> {
                None
            }
            fn from_scalar(v: Scalar) -> Self {
                match v {
                    Scalar::Float(x) => $from(x),
                    Scalar::Int(x) => $from(x as f64),
                }
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let x: f64 = $to(self);
                Ok(x.into_pyobject(py)?.into_any())
            }
        }
    )*};
}

float! {
    f32: |x: f64| x as f32, f64::from;
    f64: |x: f64| x, |x: f64| x;
    f16: f16::from_f64, f16::to_f64;
    bf16: bf16::from_f64, bf16::to_f64;
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl PyElement for $t {
            fn int_range() -> Option<(i128, i128)> {
                Some((<$t>::MIN as i128, <$t>::MAX as i128))
            }
            fn from_scalar(v: Scalar) -> Self {
                match v {
                    // Checked by `scalar`: in range.
                    Scalar::Int(x) => x as $t,
                    // Not made for an integer type by `scalar`; truncated as a cast would.
                    Scalar::Float(x) => x as $t,
                }
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok(self.into_pyobject(py)?.into_any())
            }
        }
    )*};
}

integer!(i8, u8, i32, u32, i64, u64);

/// Runs `$e` with `$T` the float type of `$d` (a [`DType`]), or `$err` for an integer type.
macro_rules! by_float {
    ($d:expr, $T:ident => $e:expr, else $err:expr) => {
        match $d {
            ::gpukit::DType::F32 => {
                type $T = f32;
                $e
            }
            ::gpukit::DType::F64 => {
                type $T = f64;
                $e
            }
            ::gpukit::DType::F16 => {
                type $T = ::gpukit::half::f16;
                $e
            }
            ::gpukit::DType::BF16 => {
                type $T = ::gpukit::half::bf16;
                $e
            }
            _ => $err,
        }
    };
}
pub(crate) use by_float;

/// Runs `$e` with `$T` the element type of `$d` (a [`DType`]): [`by_float`]'s types, then
/// the integers.
macro_rules! by_dtype {
    ($d:expr, $T:ident => $e:expr) => {
        $crate::element::by_float!($d, $T => $e, else match $d {
            ::gpukit::DType::I8 => {
                type $T = i8;
                $e
            }
            ::gpukit::DType::U8 => {
                type $T = u8;
                $e
            }
            ::gpukit::DType::I32 => {
                type $T = i32;
                $e
            }
            ::gpukit::DType::U32 => {
                type $T = u32;
                $e
            }
            ::gpukit::DType::I64 => {
                type $T = i64;
                $e
            }
            ::gpukit::DType::U64 => {
                type $T = u64;
                $e
            }
            ::gpukit::DType::F32
            | ::gpukit::DType::F64
            | ::gpukit::DType::F16
            | ::gpukit::DType::BF16 => unreachable!("the float types are matched first"),
        })
    };
}
pub(crate) use by_dtype;

/// NumPy's name of `d` (`float32`, `bfloat16`, `uint8`).
pub(crate) fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::I32 => "int32",
        DType::U32 => "uint32",
        DType::I64 => "int64",
        DType::U64 => "uint64",
    }
}

/// The element type a `dtype=` argument names: a string (`"float32"`, or gpukit's
/// `"f32"`), or an object with a `__name__` or `name` (`numpy.float32`,
/// `numpy.dtype("float32")`) or whose `str` is one (`torch.float32`).
pub(crate) fn parse_dtype(call: &str, v: &Bound<'_, PyAny>) -> PyResult<DType> {
    let text: String = if let Ok(s) = v.extract::<String>() {
        s
    } else if let Ok(n) = v.getattr("__name__").and_then(|n| n.extract::<String>()) {
        n
    } else if let Ok(n) = v.getattr("name").and_then(|n| n.extract::<String>()) {
        n
    } else {
        v.str()?.to_string()
    };
    let name = text.strip_prefix("torch.").unwrap_or(&text);
    DType::ALL
        .into_iter()
        .find(|&d| numpy_name(d) == name || d.name() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = DType::ALL.into_iter().map(numpy_name).collect();
            PyTypeError::new_err(format!(
                "{call}: dtype {text:?} is not one of gpukit's: {}",
                known.join(", ")
            ))
        })
}

/// A Python number checked against an array's element type (under the GIL), to be
/// converted to it later without Python ([`PyElement::from_scalar`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    Int(i128),
    Float(f64),
}

/// The Python number `v` as a value for an array of `dtype`, for the call `call`: a float
/// given to an integer array is `TypeError` (NumPy's casting rule), an integer out of the
/// type's range `OverflowError`, anything but an int, a float or a bool `TypeError`.
pub(crate) fn scalar(call: &str, v: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Scalar> {
    let name = numpy_name(dtype);
    if v.is_instance_of::<pyo3::types::PyFloat>() {
        if !dtype.is_float() {
            return Err(type_err(
                call,
                format!(
                    "{} is a float; the array holds {name} (pass an int)",
                    v.repr()?
                ),
            ));
        }
        return Ok(Scalar::Float(v.extract()?));
    }
    if let Ok(x) = v.extract::<i128>() {
        if dtype.is_float() {
            return Ok(Scalar::Float(x as f64));
        }
        let fits = by_dtype!(dtype, T => int_fits::<T>(x));
        if !fits {
            return Err(PyOverflowError::new_err(format!(
                "{call}: {x} does not fit in {name}"
            )));
        }
        return Ok(Scalar::Int(x));
    }
    if let Ok(x) = v.extract::<f64>() {
        // A float-like object that is not a Python float (numpy.float32(2.5)).
        if dtype.is_float() {
            return Ok(Scalar::Float(x));
        }
    }
    Err(type_err(
        call,
        format!(
            "{} is not a number an array of {name} takes (an int{})",
            v.repr()?,
            if dtype.is_float() { " or a float" } else { "" }
        ),
    ))
}

/// Whether the integer `x` fits in `T` (always, for a float type).
fn int_fits<T: PyElement>(x: i128) -> bool {
    T::int_range().is_none_or(|(lo, hi)| (lo..=hi).contains(&x))
}

/// An element type as Python sees it (`Array.dtype`): equal to NumPy's name of it
/// (`"float32"`), to NumPy's and PyTorch's dtypes and to NumPy's scalar types of it
/// (`a.dtype == numpy.float32`), and taken by `numpy.dtype(...)` (through its `dtype`
/// attribute, NumPy's protocol).
#[pyclass(module = "gpukit", name = "dtype", frozen, skip_from_py_object)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PyDType {
    pub(crate) d: DType,
}

#[pymethods]
impl PyDType {
    /// NumPy's name (`"float32"`, `"bfloat16"`).
    #[getter]
    fn name(&self) -> &'static str {
        numpy_name(self.d)
    }

    /// The bytes of one element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.d.size()
    }

    /// NumPy's kind: `"f"` (floats, bfloat16 among them), `"i"` or `"u"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.d {
            d if d.is_float() => "f",
            DType::U8 | DType::U32 | DType::U64 => "u",
            _ => "i",
        }
    }

    /// NumPy's dtype of it, which `numpy.dtype(x)` reads from an object's `dtype` attribute
    /// (bfloat16's is `ml_dtypes.bfloat16`); `AttributeError` without NumPy (or ml_dtypes).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, "dtype.dtype", self.d)
            .map_err(|e| pyo3::exceptions::PyAttributeError::new_err(e.to_string()))
    }

    /// Equal to anything naming the same element type (a name, a NumPy or PyTorch dtype, a
    /// NumPy scalar type, another `gpukit.dtype`); unequal to anything else.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        parse_dtype("dtype.__eq__", other).is_ok_and(|d| d == self.d)
    }

    fn __ne__(&self, other: &Bound<'_, PyAny>) -> bool {
        !self.__eq__(other)
    }

    /// The hash of the name, as it compares equal to the name.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        pyo3::types::PyString::new(py, numpy_name(self.d)).hash()
    }

    fn __str__(&self) -> &'static str {
        numpy_name(self.d)
    }

    fn __repr__(&self) -> String {
        format!("gpukit.dtype('{}')", numpy_name(self.d))
    }
}

/// NumPy's dtype for `d`: its name, or for bfloat16 `ml_dtypes.bfloat16` (NumPy has none).
pub(crate) fn numpy_dtype<'py>(
    py: Python<'py>,
    call: &str,
    d: DType,
) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    if d == DType::BF16 {
        let ml = py.import("ml_dtypes").map_err(|_| {
            type_err(
                call,
                "NumPy has no bfloat16: install ml_dtypes (pip install ml-dtypes), or \
                 astype(\"float32\") first",
            )
        })?;
        return np.call_method1("dtype", (ml.getattr("bfloat16")?,));
    }
    np.call_method1("dtype", (numpy_name(d),))
}
