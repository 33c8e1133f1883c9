//! Copies and uploads: compiled pipelines, bound windows and dispatches. (Every built-in op
//! is a gpukit-core kernel, loaded and launched as any kernel is: `crate::kernel`.)

mod copy;
mod pipeline;

use crate::wgsl::Caps;
use crate::Shared;

pub(crate) use copy::{copy_d2d, copy_raw, upload};
pub(crate) use pipeline::{compile, dispatch, Bind, Pipe};

/// The device's shader capabilities.
pub(crate) fn caps(shared: &Shared) -> Caps {
    let f = shared.features;
    Caps {
        f16: f.contains(wgpu::Features::SHADER_F16),
        f64: f.contains(wgpu::Features::SHADER_F64),
        int64: f.contains(wgpu::Features::SHADER_INT64),
    }
}
