//! Element types as Python sees them: NumPy's names, and conversions of scalars.

use gpukit::half::{bf16, f16};
use gpukit::{DType, Numeric};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;

/// An element type with Python scalars: what `fill`, `scale` and `tolist` convert.
pub(crate) trait PyElement: Numeric + Send + Sync {
    /// The Python number `v` as this type: an integer out of range is `OverflowError`, a
    /// float given to an integer array `TypeError`.
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self>;
    /// This value as a Python `int` or `float`.
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

macro_rules! float {
    ($($t:ty: $from:expr, $to:expr;)*) => {$(
        impl PyElement for $t {
            fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
                let x: f64 = v.extract()?;
                Ok($from(x))
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
            fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
                if v.is_instance_of::<pyo3::types::PyFloat>() {
                    return Err(PyTypeError::new_err(format!(
                        "{} is a float; this array holds {}",
                        v.repr()?,
                        stringify!($t)
                    )));
                }
                let x: i128 = v.extract()?;
                <$t>::try_from(x).map_err(|_| {
                    PyOverflowError::new_err(format!("{x} does not fit in {}", stringify!($t)))
                })
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok(self.into_pyobject(py)?.into_any())
            }
        }
    )*};
}

integer!(i8, u8, i32, u32, i64, u64);

/// Runs `$e` with `$T` the element type of `$d` (a [`DType`]).
macro_rules! by_dtype {
    ($d:expr, $T:ident => $e:expr) => {
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
        }
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
pub(crate) fn parse_dtype(v: &Bound<'_, PyAny>) -> PyResult<DType> {
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
                "dtype {text:?} is not one of gpukit's: {}",
                known.join(", ")
            ))
        })
}
