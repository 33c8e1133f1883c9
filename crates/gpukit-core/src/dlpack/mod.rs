//! DLPack: arrays shared with other libraries (NumPy, PyTorch, CuPy, JAX) without a copy.
//!
//! The ABI of `dlpack.h` (version 1.1: the versioned managed tensor, and the legacy
//! unversioned one), declared here (`#[repr(C)]`, a few dozen lines: no dependency), the
//! export of an array or view ([`crate::Stream::to_dlpack`]) and the import of a foreign
//! tensor ([`crate::Context::from_dlpack`]).
//!
//! Device types: the CPU backend's memory is `kDLCPU` (device 0), CUDA's `kDLCUDA` with the
//! device's ordinal; a Vulkan (wgpu) buffer has no address another library can use, so its
//! export is [`crate::Error::Unsupported`]. Element types: `kDLFloat` (f16, f32, f64),
//! `kDLBfloat` (bf16), `kDLInt` and `kDLUInt` (8, 32, 64 bits), one lane.

use std::ffi::c_void;

use crate::element::DType;

mod export;
mod import;

pub use export::{DlpackLegacy, DlpackTensor, Exported, Managed};
pub use import::DlpackArray;

/// `kDLCPU`.
pub const DL_CPU: i32 = 1;
/// `kDLCUDA`.
pub const DL_CUDA: i32 = 2;
/// `kDLCUDAHost` (pinned host memory, which the CPU reads as host memory).
pub const DL_CUDA_HOST: i32 = 3;
/// `kDLVulkan`.
pub const DL_VULKAN: i32 = 7;
/// `kDLCUDAManaged`.
pub const DL_CUDA_MANAGED: i32 = 13;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write the tensor.
pub const FLAG_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer made a copy for this export.
pub const FLAG_IS_COPIED: u64 = 1 << 1;

/// The DLPack version this module speaks (`DLPACK_MAJOR_VERSION`, `DLPACK_MINOR_VERSION`).
pub const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 1 };

/// `DLDevice`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    /// `DLDeviceType` (`kDLCPU` = 1, `kDLCUDA` = 2, ...).
    pub device_type: i32,
    /// The device's ordinal.
    pub device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    /// `kDLInt` = 0, `kDLUInt` = 1, `kDLFloat` = 2, `kDLBfloat` = 4, ...
    pub code: u8,
    /// Bits of one lane.
    pub bits: u8,
    /// Lanes (1 for scalars).
    pub lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// The data (for CUDA, a device address), `byte_offset` before the first element.
    pub data: *mut c_void,
    /// Where the data is.
    pub device: DLDevice,
    /// Dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for a compact row-major tensor.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: the legacy, unversioned form.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's state.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it no longer needs the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLPackVersion`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// `DLManagedTensorVersioned`: the DLPack 1.x form.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The ABI version the producer wrote.
    pub version: DLPackVersion,
    /// The producer's state.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it no longer needs the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `FLAG_READ_ONLY`, `FLAG_IS_COPIED`.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// The DLPack type of an element type.
pub fn dl_dtype(dtype: DType) -> DLDataType {
    let code = match dtype {
        DType::I8 | DType::I32 | DType::I64 => 0,
        DType::U8 | DType::U32 | DType::U64 => 1,
        DType::BF16 => 4,
        _ => 2,
    };
    DLDataType {
        code,
        bits: (dtype.size() * 8) as u8,
        lanes: 1,
    }
}
