//! Launch geometry: grid and block dimensions ([`LaunchConfig`]), checked against a
//! device's limits, and the coordinates a thread of a launch sees ([`ThreadIndex`]).

use crate::backend::LaunchLimits;
use crate::error::{Error, Result};

/// Grid and block dimensions of a launch, and its dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks along x, y and z.
    pub grid: [u32; 3],
    /// Threads per block along x, y and z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// Threads per block used by [`LaunchConfig::for_elems`].
    pub const DEFAULT_BLOCK: u32 = 256;

    /// One thread per element, 256 to a block; at least one block. A count too large for
    /// the grid is reported when the launch is checked.
    pub fn for_elems(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(Self::DEFAULT_BLOCK as usize).max(1);
        LaunchConfig {
            grid: [u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1],
            block: [Self::DEFAULT_BLOCK, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// A one-dimensional grid of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> LaunchConfig {
        LaunchConfig {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// A grid of `grid` blocks of `block` threads (x, y, z), no dynamic shared memory.
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        }
    }

    /// One thread per element of a `width x height` grid of elements (x along the width), in
    /// blocks of `block` (x, y) threads: enough blocks to cover it, so the threads past an
    /// edge must check it (`if x < width && y < height`); at least one block along each axis.
    /// A count too large for the grid, or a block of 0 threads, is reported when the launch
    /// is checked.
    ///
    /// ```
    /// use gpukit::LaunchConfig;
    /// let cfg = LaunchConfig::for_elems_2d(1000, 30, [16, 16]);
    /// assert_eq!((cfg.grid, cfg.block), ([63, 2, 1], [16, 16, 1]));
    /// ```
    pub fn for_elems_2d(width: usize, height: usize, block: [u32; 2]) -> LaunchConfig {
        Self::for_elems_3d([width, height, 1], [block[0], block[1], 1])
    }

    /// [`LaunchConfig::for_elems_2d`] in three dimensions: `extent` elements along x, y and
    /// z, in blocks of `block` threads.
    pub fn for_elems_3d(extent: [usize; 3], block: [u32; 3]) -> LaunchConfig {
        let blocks = |i: usize| {
            let n = extent[i].div_ceil(block[i].max(1) as usize).max(1);
            u32::try_from(n).unwrap_or(u32::MAX)
        };
        LaunchConfig::new([blocks(0), blocks(1), blocks(2)], block)
    }

    /// Threads in one block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| d as u64).product()
    }

    /// Threads in the whole launch.
    pub fn total_threads(&self) -> u64 {
        self.grid.iter().map(|&d| d as u64).product::<u64>() * self.threads_per_block()
    }

    /// Checks the configuration against a device's limits.
    #[inline]
    pub fn validate(&self, kernel: &str, limits: &LaunchLimits) -> Result<()> {
        // Every comparison made, none skipped (no branch per axis: this runs on every
        // launch); `d - 1 < max`, wrapping, is `1 <= d <= max`.
        let mut ok = (self.threads_per_block() <= limits.max_threads_per_block as u64)
            & (self.shared_mem_bytes <= limits.max_shared_mem_per_block);
        for i in 0..3 {
            ok &= (self.grid[i].wrapping_sub(1) < limits.max_grid_dim[i])
                & (self.block[i].wrapping_sub(1) < limits.max_block_dim[i]);
        }
        if ok {
            return Ok(());
        }
        self.invalid(kernel, limits)
    }

    /// The error [`LaunchConfig::validate`] returns for this configuration, which breaks one
    /// of its limits.
    #[cold]
    #[inline(never)]
    fn invalid(&self, kernel: &str, limits: &LaunchLimits) -> Result<()> {
        let bad = |reason: String| Error::InvalidLaunch {
            kernel: kernel.to_string(),
            reason,
        };
        const AXES: [&str; 3] = ["x", "y", "z"];
        for (i, axis) in AXES.iter().enumerate() {
            if self.grid[i] == 0 {
                return Err(bad(format!("grid.{axis} is 0")));
            }
            if self.block[i] == 0 {
                return Err(bad(format!("block.{axis} is 0")));
            }
            if self.grid[i] > limits.max_grid_dim[i] {
                return Err(bad(format!(
                    "grid.{axis} = {} exceeds the device's maximum {}",
                    self.grid[i], limits.max_grid_dim[i]
                )));
            }
            if self.block[i] > limits.max_block_dim[i] {
                return Err(bad(format!(
                    "block.{axis} = {} exceeds the device's maximum {}",
                    self.block[i], limits.max_block_dim[i]
                )));
            }
        }
        if self.threads_per_block() > limits.max_threads_per_block as u64 {
            return Err(bad(format!(
                "{} threads per block exceed the device's maximum {}",
                self.threads_per_block(),
                limits.max_threads_per_block
            )));
        }
        if self.shared_mem_bytes > limits.max_shared_mem_per_block {
            return Err(bad(format!(
                "{} bytes of shared memory exceed the device's maximum {}",
                self.shared_mem_bytes, limits.max_shared_mem_per_block
            )));
        }
        Ok(())
    }
}

/// Three extents or coordinates, as CUDA's `dim3`/`uint3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dim3 {
    /// Along x (fastest varying).
    pub x: u32,
    /// Along y.
    pub y: u32,
    /// Along z.
    pub z: u32,
}

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Dim3 {
        Dim3 { x, y, z }
    }
}

/// Where one thread of a launch is: what a CUDA thread reads from its built-in variables,
/// given to CPU closures so that a kernel's CPU version indexes as its GPU version does.
///
/// | CUDA C | here |
/// |---|---|
/// | `blockIdx` | [`ThreadIndex::block_idx`] |
/// | `threadIdx` | [`ThreadIndex::thread_idx`] |
/// | `blockDim` | [`ThreadIndex::block_dim`] |
/// | `gridDim` | [`ThreadIndex::grid_dim`] |
/// | `blockIdx.x * blockDim.x + threadIdx.x` | [`ThreadIndex::x`] (also [`y`](ThreadIndex::y), [`z`](ThreadIndex::z)) |
///
/// ```
/// # use gpukit::{Dim3, ThreadIndex};
/// let t = ThreadIndex {
///     block_idx: Dim3 { x: 2, y: 1, z: 0 },
///     thread_idx: Dim3 { x: 5, y: 3, z: 0 },
///     block_dim: Dim3 { x: 16, y: 8, z: 1 },
///     grid_dim: Dim3 { x: 4, y: 2, z: 1 },
/// };
/// assert_eq!((t.x(), t.y(), t.z()), (37, 11, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadIndex {
    /// The block's coordinates in the grid (`blockIdx`).
    pub block_idx: Dim3,
    /// The thread's coordinates in its block (`threadIdx`).
    pub thread_idx: Dim3,
    /// Threads per block along each axis (`blockDim`).
    pub block_dim: Dim3,
    /// Blocks along each axis (`gridDim`).
    pub grid_dim: Dim3,
}

impl ThreadIndex {
    /// The global x coordinate, `blockIdx.x * blockDim.x + threadIdx.x`: the element index
    /// of a one-dimensional launch.
    pub fn x(&self) -> usize {
        global(self.block_idx.x, self.block_dim.x, self.thread_idx.x)
    }

    /// The global y coordinate, `blockIdx.y * blockDim.y + threadIdx.y`.
    pub fn y(&self) -> usize {
        global(self.block_idx.y, self.block_dim.y, self.thread_idx.y)
    }

    /// The global z coordinate, `blockIdx.z * blockDim.z + threadIdx.z`.
    pub fn z(&self) -> usize {
        global(self.block_idx.z, self.block_dim.z, self.thread_idx.z)
    }
}

/// `block * dim + thread`; at most about 2^41 within [`LaunchLimits`], so it fits a 64-bit
/// `usize` exactly.
fn global(block: u32, dim: u32, thread: u32) -> usize {
    (block as usize)
        .wrapping_mul(dim as usize)
        .wrapping_add(thread as usize)
}

/// Runs `f` once for every thread of a launch of `cfg`, in a fixed order: blocks by z, y,
/// x, and inside each block threads by z, y, x (x fastest). A thread runs to completion
/// before the next starts, so there is no shared memory and no `__syncthreads`; a kernel
/// whose threads only write their own outputs behaves as on a GPU.
pub(crate) fn for_each_thread(cfg: &LaunchConfig, mut f: impl FnMut(&ThreadIndex)) {
    let grid_dim = Dim3::from(cfg.grid);
    let block_dim = Dim3::from(cfg.block);
    for bz in 0..grid_dim.z {
        for by in 0..grid_dim.y {
            for bx in 0..grid_dim.x {
                for tz in 0..block_dim.z {
                    for ty in 0..block_dim.y {
                        for tx in 0..block_dim.x {
                            f(&ThreadIndex {
                                block_idx: Dim3 {
                                    x: bx,
                                    y: by,
                                    z: bz,
                                },
                                thread_idx: Dim3 {
                                    x: tx,
                                    y: ty,
                                    z: tz,
                                },
                                block_dim,
                                grid_dim,
                            });
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2-D and 3-D helpers cover every element with whole blocks, at least one along
    /// each axis; what no device could run is left for `validate` to report.
    #[test]
    fn multi_dimensional_launches_cover_their_extent() {
        let cfg = LaunchConfig::for_elems_2d(1000, 30, [16, 16]);
        assert_eq!((cfg.grid, cfg.block), ([63, 2, 1], [16, 16, 1]));
        assert_eq!(cfg.shared_mem_bytes, 0);
        let cfg = LaunchConfig::for_elems_3d([64, 64, 65], [8, 8, 4]);
        assert_eq!(cfg.grid, [8, 8, 17]);
        let cfg = LaunchConfig::for_elems_2d(0, 0, [16, 16]);
        assert_eq!(
            cfg.grid,
            [1, 1, 1],
            "an empty extent still launches one block"
        );
        let limits = LaunchLimits::CUDA_COMMON;
        let zero = LaunchConfig::for_elems_2d(10, 10, [0, 16]);
        assert!(
            matches!(zero.validate("k", &limits), Err(Error::InvalidLaunch { reason, .. }) if reason == "block.x is 0")
        );
        let huge = LaunchConfig::for_elems_3d([1, 1 << 40, 1], [1, 1, 1]);
        assert_eq!(huge.grid[1], u32::MAX);
        assert!(huge.validate("k", &limits).is_err());
        assert_eq!(
            LaunchConfig::new([2, 3, 4], [5, 6, 7]),
            LaunchConfig {
                grid: [2, 3, 4],
                block: [5, 6, 7],
                shared_mem_bytes: 0
            }
        );
    }
}
