//! Built-in ops, copies and uploads: compiled pipelines, bound windows and dispatches.
//!
//! [`op`] runs any op of the table: it refuses what the device's WGSL lacks (element types
//! without the adapter's features; float-only ops on integers), then dispatches one function
//! per op family (`gemm`). An element-wise op added to the
//! table needs nothing here: its WGSL body is rendered from the entry (`crate::wgsl`'s
//! `unary`/`binary`, through the kernel language's emitter).

mod copy;
mod elementwise;
mod gemm;
mod pipeline;

use gpukit_core::{DType, Error, Op, Result};

use crate::device::NAME;
use crate::stream::StreamInner;
use crate::wgsl::{Caps, WgslType};
use crate::{Shared, WgpuBackend};

pub(crate) use copy::{copy_d2d, copy_raw, upload};
pub(crate) use pipeline::{compile, dispatch, Bind, Pipe};

/// Where an op's dispatches go: the device, the stream that records them and the WGSL type
/// of the op's elements.
#[derive(Clone, Copy)]
struct Target<'a> {
    shared: &'a Shared,
    stream: &'a StreamInner,
    t: WgslType,
}

fn unsupported(what: String) -> Error {
    Error::Unsupported {
        backend: NAME,
        what,
    }
}

fn u32_of(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| unsupported(format!("{what} of {v} (more than 2^32 - 1)")))
}

/// The device's shader capabilities.
pub(crate) fn caps(shared: &Shared) -> Caps {
    let f = shared.features;
    Caps {
        f16: f.contains(wgpu::Features::SHADER_F16),
        f64: f.contains(wgpu::Features::SHADER_F64),
        int64: f.contains(wgpu::Features::SHADER_INT64),
    }
}

/// The WGSL type of `dtype` on this device, or `Unsupported`.
fn wt(shared: &Shared, dtype: DType, op: &str) -> Result<WgslType> {
    WgslType::of(dtype, caps(shared)).map_err(|why| unsupported(format!("`{op}` on {why}")))
}

/// Runs one op of the table.
pub(crate) fn op(
    shared: &Shared,
    stream: &StreamInner,
    dtype: DType,
    op: &Op<'_, WgpuBackend>,
) -> Result<()> {
    shared.check()?;
    let name = op.name();
    let t = wt(shared, dtype, name)?;
    if op.floats_only() && !t.is_float() {
        return Err(unsupported(format!(
            "`{name}` on {dtype} (a float-only op)"
        )));
    }
    let at = Target { shared, stream, t };
    match *op {
        Op::Gemm { g, a, b, c } => gemm::gemm(at, g, a, b, c),
    }
}
