//! The operands of the ops that remain in hand-written WGSL (the indexing ops, gemm): a
//! range bound as a window of its buffer.

use gpukit_core::{BufAt, Result};

use super::pipeline::Bind;
use super::unsupported;
use crate::{round4, Shared, WgpuBackend, WgpuBuffer};

/// Threads per workgroup of the grid-stride kernels.
const WG: u64 = 256;

/// One operand of an element-wise op: a buffer, the byte offset of element 0, the element
/// size.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    buf: &'a WgpuBuffer,
    off: u64,
    es: u64,
}

impl<'a> Operand<'a> {
    pub(super) fn of(at: BufAt<'a, WgpuBackend>, es: u64) -> Operand<'a> {
        Operand {
            buf: at.buf,
            off: at.offset as u64,
            es,
        }
    }

    /// The window over elements `start..start + len`, and the element offset of `start`
    /// inside it.
    pub(super) fn window(&self, shared: &Shared, start: u64, len: u64) -> (Bind<'a>, u32) {
        let first = self.off + start * self.es;
        let base = first / shared.align * shared.align;
        let end = round4(first + len * self.es).min(self.buf.buf.size());
        (
            Bind {
                buf: &self.buf.buf,
                base,
                size: (end - base).max(4),
            },
            ((first - base) / self.es) as u32,
        )
    }

    /// The whole range of `len` elements as one window, or `Unsupported`.
    pub(super) fn whole(&self, shared: &Shared, len: u64, what: &str) -> Result<(Bind<'a>, u32)> {
        let (b, o) = self.window(shared, 0, len);
        if b.size > shared.max_binding {
            return Err(unsupported(format!(
                "{what} of {} bytes in one binding (the adapter binds at most {} bytes)",
                len * self.es,
                shared.max_binding
            )));
        }
        Ok((b, o))
    }
}

/// Workgroups for a grid-stride loop over `n` items.
pub(super) fn groups_for(shared: &Shared, n: u64) -> u32 {
    let max = u64::from(shared.limits.max_compute_workgroups_per_dimension);
    n.div_ceil(WG).clamp(1, max) as u32
}
