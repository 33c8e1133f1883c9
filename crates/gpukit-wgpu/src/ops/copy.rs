//! Copies between device ranges and uploads from the host: wgpu's copy command where it
//! allows (4-byte aligned, two buffers), else the byte-copy kernel, in windows.

use gpukit_core::{BufAt, Error, Result};

use super::pipeline::{dispatch, pipe, Bind};
use crate::device::NAME;
use crate::stream::StreamInner;
use crate::wgsl;
use crate::{round4, Shared, WgpuBackend};

/// Threads per workgroup of the copy shader.
const WG: u64 = 256;

/// Workgroups for a grid-stride loop over `n` items.
fn groups_for(shared: &Shared, n: u64) -> u32 {
    let max = u64::from(shared.limits.max_compute_workgroups_per_dimension);
    n.div_ceil(WG).clamp(1, max) as u32
}

/// A byte copy between device ranges with the copy kernel (unaligned ranges, or both in one
/// buffer, which wgpu's copy command refuses), in windows.
fn copy_kernel(
    shared: &Shared,
    stream: &StreamInner,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    bytes: u64,
) -> Result<()> {
    let p = pipe(shared, "copy_bytes".into(), 2, || {
        wgsl::COPY_BYTES.to_owned()
    })?;
    let chunk = shared.max_binding - shared.align - 8;
    let mut done = 0u64;
    while done < bytes {
        let n = chunk.min(bytes - done);
        let win = |buf: &wgpu::Buffer, first: u64| {
            let base = first / shared.align * shared.align;
            let end = round4(first + n).min(buf.size());
            (base, end - base, first - base)
        };
        let (sb, ss, so) = win(src.0, src.1 + done);
        let (db, ds, doff) = win(dst.0, dst.1 + done);
        let imm = [n as u32, so as u32, doff as u32, 0];
        let binds = [
            Bind {
                buf: src.0,
                base: sb,
                size: ss,
            },
            Bind {
                buf: dst.0,
                base: db,
                size: ds,
            },
        ];
        let words = (doff + n).div_ceil(4);
        dispatch(
            shared,
            stream,
            &p,
            &binds,
            &imm,
            [groups_for(shared, words), 1, 1],
        )?;
        done += n;
    }
    Ok(())
}

/// A device-to-device copy: wgpu's copy command where it allows (4-byte aligned, two
/// buffers), else the copy kernel.
pub(crate) fn copy_d2d(
    shared: &Shared,
    stream: &StreamInner,
    src: BufAt<'_, WgpuBackend>,
    dst: BufAt<'_, WgpuBackend>,
    bytes: usize,
) -> Result<()> {
    copy_raw(
        shared,
        stream,
        (&src.buf.buf, src.offset as u64),
        (&dst.buf.buf, dst.offset as u64),
        bytes as u64,
    )
}

/// [`copy_d2d`] on raw buffers and byte offsets.
pub(crate) fn copy_raw(
    shared: &Shared,
    stream: &StreamInner,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    n: u64,
) -> Result<()> {
    let (so, doff) = (src.1, dst.1);
    if src.0 != dst.0 && so % 4 == 0 && doff % 4 == 0 && n.is_multiple_of(4) {
        return stream.record(|enc| enc.copy_buffer_to_buffer(src.0, so, dst.0, doff, n));
    }
    copy_kernel(shared, stream, src, dst, n)
}

/// A host-to-device copy: the bytes go into a new staging buffer now (after the stream's
/// earlier downloads have landed, as they may write them), and from there to `dst` in
/// stream order.
///
/// # Safety
///
/// As [`gpukit_core::Backend::copy_h2d`].
pub(crate) unsafe fn upload(
    shared: &Shared,
    stream: &StreamInner,
    src: *const u8,
    dst: BufAt<'_, WgpuBackend>,
    bytes: usize,
) -> Result<()> {
    shared.check()?;
    let upto = stream.position();
    if stream.host_pending_upto(upto) {
        stream.drive(upto, true)?;
    }
    let (doff, n) = (dst.offset as u64, bytes as u64);
    // SAFETY: the caller keeps `src..src + bytes` readable (Backend::copy_h2d).
    let from = unsafe { std::slice::from_raw_parts(src, bytes) };
    let mapped_err = |e: wgpu::MapRangeError| Error::Backend {
        backend: NAME,
        call: "Buffer::get_mapped_range_mut",
        message: e.to_string(),
    };
    if doff % 4 == 0 && n % 4 == 0 {
        // A pooled staging buffer, mapped for writing, then wgpu's copy command.
        let staging = shared.staging.take_upload(shared, n)?;
        {
            let mut view = staging
                .slice(..n)
                .get_mapped_range_mut()
                .map_err(mapped_err)?;
            view.copy_from_slice(from);
        }
        staging.unmap();
        return stream.record_upload(staging, &dst.buf.buf, doff, n);
    }
    // Unaligned: a staging buffer the copy kernel can bind (storage buffers cannot be
    // mapped for writing), written while mapped at creation.
    let staging = shared.scoped("Device::create_buffer", || {
        shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit upload staging (unaligned)"),
            size: round4(n),
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: true,
        })
    })?;
    {
        let mut view = staging
            .slice(..)
            .get_mapped_range_mut()
            .map_err(mapped_err)?;
        view.slice(..bytes).copy_from_slice(from);
    }
    staging.unmap();
    copy_kernel(shared, stream, (&staging, 0), (&dst.buf.buf, doff), n)
}
