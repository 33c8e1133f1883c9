//! Prefix sums (`cumsum`), written as `#[kernel]`s: each tile of [`TILE`] elements is
//! scanned by one block (a subgroup scan, then the subgroups' totals), and the tiles' totals
//! are scanned the same way, level by level, and added back.

use gpukit_macros::kernel;

use crate::array::{DeviceRead, DeviceWrite, GpuArray};
use crate::backend::Backend;
use crate::element::Numeric;
use crate::error::{same_len, Result};
use crate::kernel::{LaunchConfig, Reads, Writes};
use crate::stream::Stream;

/// The elements of a tile, and the threads of a block of the scan.
const TILE: usize = 256;

/// The most blocks along a grid's `x` (Vulkan's least limit): more tiles go along `y`.
const GRID_X: usize = 65535;

/// Scans each tile of `x` into `out` and writes the tile's total into `totals[tile]`; a
/// tile is the block `block_y * grid_dim_x + block_x`.
#[kernel(core = "crate")]
fn cumsum_tiles<T: Numeric>(x: &[T], out: &mut [T], totals: &mut [T]) {
    let tile = block_y() * grid_dim_x() + block_x();
    let i = tile * 256 + thread_x();
    let v: T = if i < x.len() { x[i] } else { 0 };
    let s = subgroup_inclusive_add(v);
    let sums = shared::<T, 256>();
    if subgroup_lane() == subgroup_size() - 1 {
        sums[subgroup_id()] = s;
    }
    barrier();
    if thread_x() == 0 {
        let mut acc: T = 0;
        for j in 0..num_subgroups() {
            let t = sums[j];
            sums[j] = acc;
            acc += t;
        }
        if tile < totals.len() {
            totals[tile] = acc;
        }
    }
    barrier();
    let r = s + sums[subgroup_id()];
    if i < out.len() {
        out[i] = r;
    }
}

/// Adds to each element of `out` past the first tile the inclusive sum of the tiles before
/// its own (`offsets[tile - 1]`).
#[kernel(core = "crate")]
fn cumsum_offsets<T: Numeric>(out: &mut [T], offsets: &[T]) {
    let tile = block_y() * grid_dim_x() + block_x();
    let i = tile * 256 + thread_x();
    if tile > 0 && i < out.len() {
        out[i] += offsets[tile - 1];
    }
}

/// The launch of one block per tile of `n` elements.
fn tiles(n: usize) -> (usize, LaunchConfig) {
    let tiles = n.div_ceil(TILE);
    let (x, y) = (tiles.min(GRID_X), tiles.div_ceil(GRID_X));
    let cfg = LaunchConfig {
        grid: [x as u32, y as u32, 1],
        block: [TILE as u32, 1, 1],
        shared_mem_bytes: 0,
    };
    (tiles, cfg)
}

impl<B: Backend> Stream<B> {
    /// Writes the inclusive prefix sums of `x` into `out` (of `x`'s length): `out[i] =
    /// x[0] + ... + x[i]`, as NumPy's `cumsum` and PyTorch's `torch.cumsum`. Integer sums
    /// wrap. A float sum is added in tiles of 256 and across tiles (not left to right), so
    /// each `out[i]` is within `258·L·ε·(|x[0]| + ... + |x[i]|)` of the exact sum, `L` the
    /// levels of tiles (`⌈log₂₅₆ n⌉`: 1 up to 256 elements, 4 up to 2³²), `ε` the type's
    /// machine epsilon; in practice a few ulps. f16 and bf16 are added in f32, and each
    /// output and each tile's total rounded to the type: within `(L·ε + 258·L·ε₃₂)·(|x[0]| +
    /// ... + |x[i]|)`. Empty `x` does nothing. Past 256 elements it takes scratch memory for
    /// the tiles' totals (`n / 256` elements, and so on per level), also inside a graph
    /// capture, where the graph keeps it and each launch reuses it. On Vulkan `x` and `out`
    /// must each fit one storage binding ([`LaunchLimits::max_array_bytes`]); a larger array
    /// is [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// [`LaunchLimits::max_array_bytes`]: crate::LaunchLimits::max_array_bytes
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let x = ctx.alloc_upload(&[1i32, 2, 3, 4])?;
    /// let mut out = ctx.alloc_zeros::<i32>(4)?;
    /// ctx.cumsum(&x, &mut out)?;
    /// assert_eq!(out.download()?, [1, 3, 6, 10]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn cumsum<T: Numeric>(
        &self,
        x: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        const CALL: &str = "cumsum";
        same_len(CALL, "out", x.len(), out.len())?;
        self.same_contexts(
            CALL,
            [
                ("x", x.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if x.is_empty() {
            return Ok(());
        }
        self.scan_into(CALL, Reads::of(x), Writes::of(out), x.len())
    }

    /// Scans `n` elements of `x` into `out`, a level of tiles at a time.
    fn scan_into<T: Numeric>(
        &self,
        call: &'static str,
        x: Reads<'_, T, B>,
        out: Writes<'_, T, B>,
        n: usize,
    ) -> Result<()> {
        let (count, cfg) = tiles(n);
        let mut totals = GpuArray::<T, B>::scratch(self, call, count)?;
        self.launch_builtin(call, cumsum_tiles::<T>, cfg, (x, out, &mut totals))?;
        if count > 1 {
            let mut offsets = GpuArray::<T, B>::scratch(self, call, count)?;
            self.scan_into(call, Reads::of(&totals), Writes::of(&mut offsets), count)?;
            self.launch_builtin(call, cumsum_offsets::<T>, cfg, (out, &offsets))?;
        }
        Ok(())
    }
}
