//! Six kernels written in Rust with `#[kernel]` (the `rust_kernels` tutorial runs them,
//! `examples/tests/kernel_examples.rs` tests them on every backend): each with the plain Rust it
//! must agree with and the launch it is meant for.

use gpukit::{kernel, Context, GpuArray, In, KernelSpec, LaunchConfig, Out, Result};

/// `y = a * x + y`, one thread per element. The guard names both arrays, which proves
/// every access in bounds: the checked GPU code has no check left to make.
#[kernel]
pub fn saxpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_x();
    if i < x.len() && i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// The side of a tile of [`tiled_gemm`]: it runs in blocks of `TILE x TILE` threads.
pub const TILE: u32 = 16;

/// `c = a * b` for row-major `a` (`m x k`), `b` (`k x n`) and `c` (`m x n`): each block
/// computes a `16 x 16` tile of `c`, staging tiles of `a` and `b` through shared memory, the
/// block's threads meeting at a barrier before and after each use of them.
#[kernel]
pub fn tiled_gemm(a: &[f32], b: &[f32], c: &mut [f32], m: u32, n: u32, k: u32) {
    const T: usize = 16;
    let ta = shared::<f32, { T * T }>();
    let tb = shared::<f32, { T * T }>();
    let (rows, cols, inner) = (m as usize, n as usize, k as usize);
    let tx = thread_x();
    let ty = thread_y();
    let row = block_y() * T + ty;
    let col = block_x() * T + tx;
    let mut acc = 0.0f32;
    for t in 0..(inner + T - 1) / T {
        let ak = t * T + tx;
        ta[ty * T + tx] = if row < rows && ak < inner {
            a[row * inner + ak]
        } else {
            0.0
        };
        let bk = t * T + ty;
        tb[ty * T + tx] = if bk < inner && col < cols {
            b[bk * cols + col]
        } else {
            0.0
        };
        barrier();
        for q in 0..T {
            acc += ta[ty * T + q] * tb[q * T + tx];
        }
        barrier();
    }
    if row < rows && col < cols {
        c[row * cols + col] = acc;
    }
}

/// The threads of a block of [`block_sum`] (a power of two, at most 256).
pub const SUM_BLOCK: u32 = 256;

/// Adds `x` into `out[0]`: each block sums its part in shared memory, halving the active
/// threads at each step (a barrier between steps), and its thread 0 adds the block's sum
/// atomically. The order of the blocks' additions is not fixed on a GPU.
#[kernel]
pub fn block_sum(x: &[f32], out: &mut [f32]) {
    let partial = shared::<f32, 256>();
    let tid = thread_x();
    let i = global_x();
    partial[tid] = if i < x.len() { x[i] } else { 0.0 };
    barrier();
    let mut s = block_dim_x() / 2;
    while s > 0 {
        if tid < s {
            partial[tid] += partial[tid + s];
        }
        barrier();
        s /= 2;
    }
    if tid == 0 {
        atomic_add(&mut out[0], partial[0]);
    }
}

/// Adds `x` into `out[0]` as [`block_sum`] does, with subgroup sums instead of a tree in
/// shared memory: each subgroup adds its lanes' values (warp shuffles on CUDA), its first
/// lane stores the subgroup's sum, and thread 0 adds those and the block's sum atomically.
/// Written for the target's subgroup size, whatever it is from 4 lanes up; launched in 1-D
/// blocks of [`SUM_BLOCK`] threads.
#[kernel]
pub fn warp_sum(x: &[f32], out: &mut [f32]) {
    let partial = shared::<f32, 64>();
    let i = global_x();
    let v = if i < x.len() { x[i] } else { 0.0 };
    let s = subgroup_add(v);
    if subgroup_lane() == 0 {
        partial[subgroup_id()] = s;
    }
    barrier();
    if thread_x() == 0 {
        let mut total = 0.0f32;
        for j in 0..num_subgroups() {
            total += partial[j];
        }
        atomic_add(&mut out[0], total);
    }
}

/// Sums `x` with [`warp_sum`] (into a fresh one-element array).
pub fn warp_sum_of(ctx: &Context, x: &GpuArray<f32>) -> Result<f32> {
    sum_with(ctx, warp_sum(), x)
}

/// One Jacobi step of the 2-D Laplace equation on a `rows x cols` grid: each interior
/// point becomes the mean of its four neighbours, the border is copied.
#[kernel]
pub fn stencil(src: &[f32], dst: &mut [f32], rows: u32, cols: u32) {
    let x = global_x();
    let y = global_y();
    let (r, c) = (rows as usize, cols as usize);
    if x < c && y < r {
        let at = y * c + x;
        if x == 0 || y == 0 || x + 1 == c || y + 1 == r {
            dst[at] = src[at];
        } else {
            dst[at] = 0.25 * (src[at - 1] + src[at + 1] + src[at - c] + src[at + c]);
        }
    }
}

/// The side of the blocks of [`conv5x5`]: each computes a `16 x 16` tile of the output.
pub const CONV_BLOCK: u32 = 16;

/// A 5 x 5 convolution (cross-correlation) of a `rows x cols` image with zero padding:
/// `dst[y][x] = sum of w[dy][dx] * src[y + dy - 2][x + dx - 2]`. Each block stages its
/// tile of `src` with a halo of two on every side (20 x 20) and the weights in shared
/// memory, then each thread sums its 25 products from there. The shared indices are in
/// bounds by their loops and guards, so their checks vanish from the GPU code.
#[kernel]
pub fn conv5x5(src: &[f32], w: &[f32], dst: &mut [f32], rows: u32, cols: u32) {
    let tile = shared::<f32, 400>();
    let wt = shared::<f32, 25>();
    let (tx, ty) = (thread_x(), thread_y());
    let (rows, cols) = (rows as usize, cols as usize);
    let (x0, y0) = (block_x() * 16, block_y() * 16);
    let t = ty * block_dim_x() + tx;
    if t < 25 {
        wt[t] = if t < w.len() { w[t] } else { 0.0 };
    }
    for k in (t..400).step_by(256) {
        // Above or left of the image, the subtraction wraps past `rows` and `cols`.
        let gy = y0 + k / 20 - 2;
        let gx = x0 + k % 20 - 2;
        tile[k] = if gy < rows && gx < cols {
            src[gy * cols + gx]
        } else {
            0.0
        };
    }
    barrier();
    let (x, y) = (x0 + tx, y0 + ty);
    if tx < 16 && ty < 16 && x < cols && y < rows {
        let mut acc = 0.0f32;
        for dy in 0..5 {
            for dx in 0..5 {
                acc += wt[dy * 5 + dx] * tile[(ty + dy) * 20 + tx + dx];
            }
        }
        dst[y * cols + x] = acc;
    }
}

/// [`saxpy`] in plain Rust.
pub fn saxpy_ref(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// [`tiled_gemm`] in plain Rust: the same sums, in the same order.
pub fn gemm_ref(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for row in 0..m {
        for col in 0..n {
            let mut acc = 0.0f32;
            for q in 0..k {
                acc += a[row * k + q] * b[q * n + col];
            }
            c[row * n + col] = acc;
        }
    }
    c
}

/// [`stencil`] in plain Rust.
pub fn stencil_ref(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut dst = src.to_vec();
    for y in 1..rows.saturating_sub(1) {
        for x in 1..cols.saturating_sub(1) {
            let at = y * cols + x;
            dst[at] = 0.25 * (src[at - 1] + src[at + 1] + src[at - cols] + src[at + cols]);
        }
    }
    dst
}

/// [`conv5x5`] in plain Rust: the same products, added in the same order.
pub fn conv5x5_ref(src: &[f32], w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut dst = vec![0.0f32; rows * cols];
    for y in 0..rows {
        for x in 0..cols {
            let mut acc = 0.0f32;
            for dy in 0..5 {
                for dx in 0..5 {
                    let (sy, sx) = ((y + dy).wrapping_sub(2), (x + dx).wrapping_sub(2));
                    let v = if sy < rows && sx < cols {
                        src[sy * cols + sx]
                    } else {
                        0.0
                    };
                    acc += w[dy * 5 + dx] * v;
                }
            }
            dst[y * cols + x] = acc;
        }
    }
    dst
}

/// The launch of [`conv5x5`] over a `rows x cols` image.
pub fn conv_config(rows: usize, cols: usize) -> LaunchConfig {
    LaunchConfig::for_elems_2d(cols, rows, [CONV_BLOCK, CONV_BLOCK])
}

/// The launch of [`tiled_gemm`] for `c = a * b` (`m x k` times `k x n`).
pub fn gemm_config(m: usize, n: usize) -> LaunchConfig {
    LaunchConfig::for_elems_2d(n, m, [TILE, TILE])
}

/// The launch of [`stencil`] over a `rows x cols` grid, in blocks of 16 x 16.
pub fn stencil_config(rows: usize, cols: usize) -> LaunchConfig {
    LaunchConfig::for_elems_2d(cols, rows, [16, 16])
}

/// Sums `x` with [`block_sum`] (into a fresh one-element array).
pub fn sum(ctx: &Context, x: &GpuArray<f32>) -> Result<f32> {
    sum_with(ctx, block_sum(), x)
}

/// Sums `x` with a kernel that adds its blocks of [`SUM_BLOCK`] elements into `out[0]`.
fn sum_with(
    ctx: &Context,
    spec: KernelSpec<(In<f32>, Out<f32>)>,
    x: &GpuArray<f32>,
) -> Result<f32> {
    let k = ctx.kernel(spec)?;
    let mut out = ctx.alloc_zeros::<f32>(1)?;
    let blocks = u32::try_from(x.len().div_ceil(SUM_BLOCK as usize)).unwrap_or(u32::MAX);
    ctx.launch(
        &k,
        LaunchConfig::linear(blocks.max(1), SUM_BLOCK),
        (x, &mut out),
    )?;
    ctx.sync()?;
    Ok(out.download()?[0])
}
