//! The element types the WGSL kernels have ([`WgslType`]) and the device features that decide
//! which exist ([`Caps`]).

use gpukit_core::DType;

/// An element type the WGSL kernels have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WgslType {
    F32,
    I32,
    U32,
    F16,
    F64,
    I64,
    U64,
    /// Packed four to a word (WGSL has no 8-bit type); written with atomics.
    U8,
    /// Packed four to a word, sign-extended on load.
    I8,
    /// Packed two to a word, computed in f32, rounded to nearest even on store.
    BF16,
}

/// The shader features of a device that decide which element types exist.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) f16: bool,
    pub(crate) f64: bool,
    pub(crate) int64: bool,
}

impl WgslType {
    /// The WGSL type of `dtype` on a device with `caps`, or why there is none.
    pub(crate) fn of(dtype: DType, caps: Caps) -> std::result::Result<WgslType, String> {
        let need = |has: bool, t: WgslType, feature: &str| {
            if has {
                Ok(t)
            } else {
                Err(format!("{dtype} (the adapter lacks {feature})"))
            }
        };
        match dtype {
            DType::F32 => Ok(WgslType::F32),
            DType::I32 => Ok(WgslType::I32),
            DType::U32 => Ok(WgslType::U32),
            DType::F16 => need(caps.f16, WgslType::F16, "SHADER_F16"),
            DType::F64 => need(caps.f64, WgslType::F64, "SHADER_F64"),
            DType::I64 => need(caps.int64, WgslType::I64, "SHADER_INT64"),
            DType::U64 => need(caps.int64, WgslType::U64, "SHADER_INT64"),
            DType::U8 => Ok(WgslType::U8),
            DType::I8 => Ok(WgslType::I8),
            DType::BF16 => Ok(WgslType::BF16),
        }
    }

    /// Every type `caps` allows, as dtypes.
    pub(crate) fn dtypes(caps: Caps) -> Vec<DType> {
        DType::ALL
            .into_iter()
            .filter(|&d| WgslType::of(d, caps).is_ok())
            .collect()
    }

    pub(crate) fn size(self) -> u64 {
        match self {
            WgslType::U8 | WgslType::I8 => 1,
            WgslType::F16 | WgslType::BF16 => 2,
            WgslType::F32 | WgslType::I32 | WgslType::U32 => 4,
            WgslType::F64 | WgslType::I64 | WgslType::U64 => 8,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            WgslType::F32 => "f32",
            WgslType::I32 => "i32",
            WgslType::U32 => "u32",
            WgslType::F16 => "f16",
            WgslType::F64 => "f64",
            WgslType::I64 => "i64",
            WgslType::U64 => "u64",
            WgslType::U8 => "u8",
            WgslType::I8 => "i8",
            WgslType::BF16 => "bf16",
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(
            self,
            WgslType::F32 | WgslType::F16 | WgslType::F64 | WgslType::BF16
        )
    }

    /// Whether elements share 32-bit words (stored through atomics).
    pub(crate) fn packed(self) -> bool {
        matches!(self, WgslType::U8 | WgslType::I8 | WgslType::BF16)
    }

    /// Whether the compute type is 64 bits wide (scalars take two words).
    pub(crate) fn wide(self) -> bool {
        self.size() == 8
    }

    /// The compute type.
    pub(super) fn compute(self) -> &'static str {
        match self {
            WgslType::F16 | WgslType::BF16 => "f32",
            WgslType::U8 => "u32",
            WgslType::I8 => "i32",
            t => t.name(),
        }
    }

    pub(super) fn enables(self) -> &'static str {
        match self {
            WgslType::F16 => "enable f16;\n",
            _ => "",
        }
    }
}
