//! The backend's one shader of its own, the byte copy ([`COPY_BYTES`]: a device copy that
//! wgpu's copy command refuses), and the element types a device's WGSL has ([`dtypes`]).
//! Every built-in op is a gpukit-core kernel, whose WGSL the kernel language writes.

mod copy;

use gpukit_core::DType;

pub(crate) use copy::COPY_BYTES;

/// The immediates of the copy shader: its `struct P` of 4 `u32`s (bytes, source and
/// destination byte offsets, padding).
pub(crate) const IMMEDIATE_BYTES: u32 = 16;

/// The shader features of a device that decide which element types exist.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) f16: bool,
    pub(crate) f64: bool,
    pub(crate) int64: bool,
}

/// The element types a device with `caps` has: all but f16 without `SHADER_F16`, f64
/// without `SHADER_F64` and the 64-bit integers without `SHADER_INT64` (8-bit types and
/// bf16 live packed in 32-bit words).
pub(crate) fn dtypes(caps: Caps) -> Vec<DType> {
    DType::ALL
        .into_iter()
        .filter(|d| match d {
            DType::F16 => caps.f16,
            DType::F64 => caps.f64,
            DType::I64 | DType::U64 => caps.int64,
            _ => true,
        })
        .collect()
}
