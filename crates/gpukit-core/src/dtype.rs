//! [`DType`]: the runtime name of an element type, as backends and ops see it (its size,
//! kind and C name), with a visitor that turns it back into the type ([`DTypeVisitor`]) and
//! parsing from its name (`"f32"`, [`ParseDTypeError`]).

use std::fmt;
use std::str::FromStr;

use crate::element::{Float, Numeric};

/// The runtime name of an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit signed integer.
    I64,
    /// 64-bit unsigned integer.
    U64,
    /// 8-bit unsigned integer.
    U8,
    /// 8-bit signed integer.
    I8,
    /// IEEE half precision (feature `half`).
    F16,
    /// bfloat16 (feature `half`).
    BF16,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::U8,
        DType::I8,
        DType::F16,
        DType::BF16,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::I8 => 1,
        }
    }

    /// The lower-case name used in configuration files and messages (`f32`, `bf16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The matching CUDA C type name, for kernels generated per dtype.
    pub const fn cuda_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::I32 => "int",
            DType::U32 => "unsigned int",
            DType::I64 => "long long",
            DType::U64 => "unsigned long long",
            DType::U8 => "unsigned char",
            DType::I8 => "signed char",
            DType::F16 => "__half",
            DType::BF16 => "__nv_bfloat16",
        }
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

/// A computation generic over the element type, run for a [`DType`] known only at run time
/// ([`DType::visit`]): how a backend turns an op's dtype back into a Rust type.
pub trait DTypeVisitor {
    /// What the computation gives.
    type Output;
    /// Runs for an integer element type.
    fn integer<T: Numeric>(self) -> Self::Output;
    /// Runs for a float element type (which has the float-only ops).
    fn float<T: Float>(self) -> Self::Output;
}

impl DType {
    /// Runs `v` with the Rust type this dtype names; `None` for f16 and bf16 when gpukit-core
    /// is built without its `half` feature (the types do not exist then). A backend that
    /// dispatches through this supports every element type gpukit-core has.
    pub fn visit<V: DTypeVisitor>(self, v: V) -> Option<V::Output> {
        Some(match self {
            DType::F32 => v.float::<f32>(),
            DType::F64 => v.float::<f64>(),
            DType::I32 => v.integer::<i32>(),
            DType::U32 => v.integer::<u32>(),
            DType::I64 => v.integer::<i64>(),
            DType::U64 => v.integer::<u64>(),
            DType::U8 => v.integer::<u8>(),
            DType::I8 => v.integer::<i8>(),
            #[cfg(feature = "half")]
            DType::F16 => v.float::<half::f16>(),
            #[cfg(feature = "half")]
            DType::BF16 => v.float::<half::bf16>(),
            #[cfg(not(feature = "half"))]
            DType::F16 | DType::BF16 => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`DType::ALL`]'s (from `"f33".parse::<DType>()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDTypeError {
    /// The text that was given.
    pub input: String,
}

impl fmt::Display for ParseDTypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown dtype {:?}; expected one of ", self.input)?;
        for (i, d) in DType::ALL.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}", d.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseDTypeError {}

impl FromStr for DType {
    type Err = ParseDTypeError;

    /// Parses a name of [`DType::name`], ignoring case and surrounding blanks.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        DType::ALL
            .into_iter()
            .find(|d| d.name() == wanted)
            .ok_or_else(|| ParseDTypeError {
                input: s.to_owned(),
            })
    }
}
