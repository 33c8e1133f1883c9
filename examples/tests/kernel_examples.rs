//! The four `#[kernel]`s of `gpukit_examples::kernels` (saxpy, tiled gemm, block reduction,
//! stencil) as property tests (random sizes and values from seeded cases, the edges drawn
//! often; the tutorials' package has no proptest, so that `cargo run --example` does not
//! build it) against the same work in plain Rust on host slices, on the
//! CPU backend, on Vulkan (lavapipe in CI; `SKIPPED` where no Vulkan device opens, unless
//! `GPU_REQUIRE_VULKAN=1`) and on CUDA (`SKIPPED` without a GPU, unless
//! `GPU_REQUIRE_CUDA=1`), and their CUDA C compiled by NVRTC (`SKIPPED` where no libnvrtc is
//! found).

use std::io::Write;

use gpukit::{Context, DeviceSpec, LaunchConfig};
use gpukit_examples::kernels::*;

// Without the `cuda` and `vulkan` features there is nothing to skip.
#[cfg_attr(not(any(feature = "cuda", feature = "vulkan")), allow(dead_code))]
fn skipped(why: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// The contexts to test on: the CPU backend, and CUDA and Vulkan where they open (with
/// `GPU_REQUIRE_CUDA=1`, as the GPU bundle's `run.sh` sets it, CUDA must open).
fn contexts() -> Vec<Context> {
    #[cfg_attr(not(any(feature = "cuda", feature = "vulkan")), allow(unused_mut))]
    let mut out = vec![Context::new(DeviceSpec::Cpu(None)).expect("the CPU backend opens")];
    #[cfg(feature = "cuda")]
    match Context::new(DeviceSpec::Cuda(None)) {
        Ok(ctx) => out.push(ctx),
        Err(e) if std::env::var("GPU_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
            panic!("GPU_REQUIRE_CUDA is set but CUDA is unusable: {e}")
        }
        Err(e) => skipped(format!("CUDA: {e}")),
    }
    #[cfg(feature = "vulkan")]
    match "vulkan".parse().and_then(Context::new) {
        Ok(ctx) => out.push(ctx),
        Err(e) if std::env::var("GPU_REQUIRE_VULKAN").is_ok_and(|v| v == "1") => {
            panic!("GPU_REQUIRE_VULKAN is set but Vulkan is unusable: {e}")
        }
        Err(e) => skipped(format!("Vulkan: {e}")),
    }
    out
}

/// A seeded generator of test cases (xorshift): each test draws its inputs from one seed
/// per case and names the seed when it fails, so a failure replays.
struct Cases(u64);

impl Cases {
    fn new(seed: u64) -> Self {
        Cases(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A size in `0..=max`: the edges (0, 1, and just around a block of 256) one time in
    /// four.
    fn size(&mut self, max: usize) -> usize {
        let edges = [0, 1, 255, 256, 257];
        if self.next().is_multiple_of(4) {
            edges[(self.next() % 5) as usize].min(max)
        } else {
            (self.next() % (max as u64 + 1)) as usize
        }
    }

    /// A float in `[-scale, scale)`, on a grid of 1/1024 (exact in f32).
    fn float(&mut self, scale: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    fn floats(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.float(scale)).collect()
    }
}

/// Runs `case` for the seeds `0..n` on every context.
fn check(n: u64, mut case: impl FnMut(&Context, &mut Cases, u64)) {
    let ctxs = contexts();
    for seed in 0..n {
        for ctx in &ctxs {
            case(ctx, &mut Cases::new(seed), seed);
        }
    }
}

/// Every element, bit for bit: the kernels do the reference's arithmetic in its order.
fn same_bits(what: &str, ctx: &Context, seed: u64, got: &[f32], want: &[f32]) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what} on {}, seed {seed}",
        ctx.backend_name()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what} on {}, seed {seed}: [{i}] {g} vs {w}",
            ctx.backend_name()
        );
    }
}

#[test]
fn saxpy_agrees_with_plain_rust() {
    check(24, |ctx, c, seed| {
        let n = c.size(3000);
        let (x, y0, a) = (c.floats(n, 100.0), c.floats(n, 100.0), c.float(4.0));
        let mut want = y0.clone();
        saxpy_ref(a, &x, &mut want);
        let k = ctx.kernel(saxpy()).unwrap();
        let dx = ctx.alloc_upload(&x).unwrap();
        let mut dy = ctx.alloc_upload(&y0).unwrap();
        ctx.launch(&k, LaunchConfig::for_elems(n.max(1)), (a, &dx, &mut dy))
            .unwrap();
        same_bits("saxpy", ctx, seed, &dy.download().unwrap(), &want);
    });
}

#[test]
fn tiled_gemm_agrees_with_plain_rust() {
    check(12, |ctx, c, seed| {
        let (m, n, k) = (c.size(40).max(1), c.size(40).max(1), c.size(40));
        let (a, b) = (c.floats(m * k, 1.0), c.floats(k * n, 1.0));
        let want = gemm_ref(&a, &b, m, n, k);
        let kern = ctx.kernel(tiled_gemm()).unwrap();
        let da = ctx.alloc_upload(&a).unwrap();
        let db = ctx.alloc_upload(&b).unwrap();
        let mut dc = ctx.alloc_upload(&vec![f32::NAN; m * n]).unwrap();
        let dims = (m as u32, n as u32, k as u32);
        ctx.launch(
            &kern,
            gemm_config(m, n),
            (&da, &db, &mut dc, dims.0, dims.1, dims.2),
        )
        .unwrap();
        same_bits("tiled_gemm", ctx, seed, &dc.download().unwrap(), &want);
    });
}

/// `sum` of random floats against their float64 sum, within `f32::EPSILON` times the sum of
/// magnitudes times `ordered` (the additions in a fixed order within a block) plus one per
/// block (added in any order).
fn agrees_with_a_float64_sum(
    name: &str,
    sum: fn(&Context, &gpukit::GpuArray<f32>) -> gpukit::Result<f32>,
    ordered: f64,
) {
    check(16, |ctx, c, seed| {
        let x = {
            let n = c.size(5000);
            c.floats(n, 100.0)
        };
        let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let scale: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
        let dx = ctx.alloc_upload(&x).unwrap();
        let got = f64::from(sum(ctx, &dx).unwrap());
        let bound = scale * f64::from(f32::EPSILON) * (ordered + x.len() as f64 / 256.0) + 1e-30;
        assert!(
            (got - want).abs() <= bound,
            "{name} on {}, seed {seed}: {got} vs {want} (bound {bound})",
            ctx.backend_name()
        );
    });
}

#[test]
fn block_sum_agrees_with_a_float64_sum() {
    // Pairwise within blocks.
    agrees_with_a_float64_sum("block_sum", sum, 8.0);
}

#[test]
fn warp_sum_agrees_with_a_float64_sum() {
    // Within subgroups in the target's order, then up to 64 partials in order.
    agrees_with_a_float64_sum("warp_sum", warp_sum_of, 100.0);
}

#[test]
fn stencil_agrees_with_plain_rust() {
    check(16, |ctx, c, seed| {
        let (rows, cols) = (c.size(50).max(1), c.size(50).max(1));
        let src = c.floats(rows * cols, 1.0);
        let want = stencil_ref(&src, rows, cols);
        let k = ctx.kernel(stencil()).unwrap();
        let ds = ctx.alloc_upload(&src).unwrap();
        let mut dd = ctx.alloc_zeros::<f32>(rows * cols).unwrap();
        ctx.launch(
            &k,
            stencil_config(rows, cols),
            (&ds, &mut dd, rows as u32, cols as u32),
        )
        .unwrap();
        same_bits("stencil", ctx, seed, &dd.download().unwrap(), &want);
    });
}

#[test]
fn conv5x5_agrees_with_plain_rust() {
    check(16, |ctx, c, seed| {
        // Images smaller than the halo, and not multiples of the block, among them.
        let (rows, cols) = (c.size(70).max(1), c.size(70).max(1));
        let (src, w) = (c.floats(rows * cols, 1.0), c.floats(25, 1.0));
        let want = conv5x5_ref(&src, &w, rows, cols);
        let k = ctx.kernel(conv5x5()).unwrap();
        let ds = ctx.alloc_upload(&src).unwrap();
        let dw = ctx.alloc_upload(&w).unwrap();
        let mut dd = ctx.alloc_upload(&vec![f32::NAN; rows * cols]).unwrap();
        ctx.launch(
            &k,
            conv_config(rows, cols),
            (&ds, &dw, &mut dd, rows as u32, cols as u32),
        )
        .unwrap();
        same_bits("conv5x5", ctx, seed, &dd.download().unwrap(), &want);
    });
}

/// Every example's CUDA C compiles with NVRTC (for sm_90, the lent H100s and H200s), where
/// libnvrtc is found: no GPU is needed.
#[cfg(feature = "cuda")]
#[test]
fn every_example_compiles_with_nvrtc() {
    let specs = [
        ("saxpy", gpukit::cuda::compile_check(&saxpy(), (9, 0))),
        (
            "tiled_gemm",
            gpukit::cuda::compile_check(&tiled_gemm(), (9, 0)),
        ),
        (
            "block_sum",
            gpukit::cuda::compile_check(&block_sum(), (9, 0)),
        ),
        ("warp_sum", gpukit::cuda::compile_check(&warp_sum(), (9, 0))),
        ("stencil", gpukit::cuda::compile_check(&stencil(), (9, 0))),
        ("conv5x5", gpukit::cuda::compile_check(&conv5x5(), (9, 0))),
    ];
    for (name, r) in specs {
        match r {
            Ok(()) => println!("{name}: compiles for sm_90"),
            Err(gpukit::Error::Unavailable { reason, .. }) => {
                return skipped(format!("NVRTC: {reason}"))
            }
            Err(e) => panic!("{name}: {e}\n{}", saxpy().cuda_source().unwrap_or_default()),
        }
    }
}
