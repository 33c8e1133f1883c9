//! Staging buffers for transfers between host memory and the device, kept between copies
//! so that a steady stream of transfers allocates (and faults in) no new host-visible
//! memory.

use std::sync::{Arc, Mutex};

use gpukit_core::Result;

use crate::Shared;

/// Staging buffers kept between transfers, so that a steady stream of copies allocates (and
/// faults in) no new host-visible memory: upload buffers wait mapped for writing, download
/// buffers unmapped. At most [`StagingPool::KEEP`] of each are kept.
#[derive(Default)]
pub(crate) struct StagingPool {
    up: Arc<Mutex<Vec<wgpu::Buffer>>>,
    down: Mutex<Vec<wgpu::Buffer>>,
}

impl StagingPool {
    /// Buffers kept per direction.
    const KEEP: usize = 8;

    /// The size to allocate for `n` bytes: powers of two up to 16 MiB, then multiples of
    /// 4 MiB, so that batches of varying length reuse one buffer.
    fn size_for(shared: &Shared, n: u64) -> u64 {
        let s = if n <= 16 << 20 {
            n.next_power_of_two().max(4096)
        } else {
            n.div_ceil(4 << 20) * (4 << 20)
        };
        s.min(shared.limits.max_buffer_size).max(n)
    }

    /// The smallest kept buffer of at least `n` bytes.
    fn take(list: &Mutex<Vec<wgpu::Buffer>>, n: u64) -> Option<wgpu::Buffer> {
        let mut l = list.lock().unwrap_or_else(|p| p.into_inner());
        let i = l
            .iter()
            .enumerate()
            .filter(|(_, b)| b.size() >= n)
            .min_by_key(|(_, b)| b.size())
            .map(|(i, _)| i)?;
        Some(l.swap_remove(i))
    }

    fn keep(list: &Mutex<Vec<wgpu::Buffer>>, buf: wgpu::Buffer) {
        let mut l = list.lock().unwrap_or_else(|p| p.into_inner());
        if l.len() < Self::KEEP {
            l.push(buf);
        }
    }

    /// A buffer of at least `n` bytes mapped for writing (usage `MAP_WRITE | COPY_SRC`).
    pub(crate) fn take_upload(&self, shared: &Shared, n: u64) -> Result<wgpu::Buffer> {
        if let Some(b) = Self::take(&self.up, n) {
            return Ok(b);
        }
        let size = Self::size_for(shared, n);
        shared.scoped("Device::create_buffer", || {
            shared.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit upload staging"),
                size,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            })
        })
    }

    /// Maps an upload buffer for writing again, after the submission that reads it; the
    /// mapping's callback returns it to the pool.
    pub(crate) fn recycle_upload(&self, buf: wgpu::Buffer) {
        let pool = self.up.clone();
        let again = buf.clone();
        buf.slice(..).map_async(wgpu::MapMode::Write, move |r| {
            if r.is_ok() {
                Self::keep(&pool, again);
            }
        });
    }

    /// A buffer of at least `n` bytes for a download (usage `MAP_READ | COPY_DST`).
    pub(crate) fn take_download(&self, shared: &Shared, n: u64) -> Result<wgpu::Buffer> {
        if let Some(b) = Self::take(&self.down, n) {
            return Ok(b);
        }
        let size = Self::size_for(shared, n);
        shared.scoped("Device::create_buffer", || {
            shared.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit download staging"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    pub(crate) fn recycle_download(&self, buf: wgpu::Buffer) {
        Self::keep(&self.down, buf);
    }
}
