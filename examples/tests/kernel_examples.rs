//! The four `#[kernel]`s of `gpukit_examples::kernels` (saxpy, tiled gemm, block reduction,
//! stencil) as property tests against the same work in plain Rust on host slices, on the
//! CPU backend, on Vulkan (lavapipe in CI; `SKIPPED` where no Vulkan device opens, unless
//! `GPU_REQUIRE_VULKAN=1`) and on CUDA (`SKIPPED` without a GPU, unless
//! `GPU_REQUIRE_CUDA=1`), and their CUDA C compiled by NVRTC (`SKIPPED` where no libnvrtc is
//! found).

use std::io::Write;

use gpukit::{Context, DeviceSpec, LaunchConfig};
use gpukit_examples::kernels::*;
use proptest::prelude::*;

// Without the `cuda` and `vulkan` features there is nothing to skip.
#[cfg_attr(not(any(feature = "cuda", feature = "vulkan")), allow(dead_code))]
fn skipped(why: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// The contexts to test on: the CPU backend, and CUDA and Vulkan where they open (with
/// `GPU_REQUIRE_CUDA=1`, as the GPU bundle's `run.sh` sets it, CUDA must open).
fn contexts() -> Vec<Context> {
    #[cfg_attr(not(any(feature = "cuda", feature = "vulkan")), allow(unused_mut))]
    let mut out = vec![Context::new(DeviceSpec::Cpu).expect("the CPU backend opens")];
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

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn floats(max_len: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-100.0f32..100.0, 0..max_len)
}

/// Every element, bit for bit: the kernels do the reference's arithmetic in its order.
fn same_bits(what: &str, ctx: &Context, got: &[f32], want: &[f32]) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        prop_assert!(
            g.to_bits() == w.to_bits(),
            "{} on {}: [{}] {} vs {}",
            what,
            ctx.backend_name(),
            i,
            g,
            w
        );
    }
    Ok(())
}

#[test]
fn saxpy_agrees_with_plain_rust() {
    let ctxs = contexts();
    proptest!(cases(24), |(x in floats(3000), a in -4.0f32..4.0, seed in any::<u32>())| {
        let y0: Vec<f32> = x.iter().enumerate().map(|(i, v)| v * 0.5 + (i as u32 ^ seed) as f32 * 1e-3).collect();
        let mut want = y0.clone();
        saxpy_ref(a, &x, &mut want);
        for ctx in &ctxs {
            let k = ctx.kernel(saxpy()).unwrap();
            let dx = ctx.alloc_upload(&x).unwrap();
            let mut dy = ctx.alloc_upload(&y0).unwrap();
            ctx.launch(&k, LaunchConfig::for_elems(x.len().max(1)), (a, &dx, &mut dy)).unwrap();
            same_bits("saxpy", ctx, &dy.download().unwrap(), &want)?;
        }
    });
}

#[test]
fn tiled_gemm_agrees_with_plain_rust() {
    let ctxs = contexts();
    proptest!(cases(12), |(m in 1usize..40, n in 1usize..40, k in 0usize..40, seed in any::<u64>())| {
        let mut state = seed | 1;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let want = gemm_ref(&a, &b, m, n, k);
        for ctx in &ctxs {
            let kern = ctx.kernel(tiled_gemm()).unwrap();
            let da = ctx.alloc_upload(&a).unwrap();
            let db = ctx.alloc_upload(&b).unwrap();
            let mut dc = ctx.alloc_upload(&vec![f32::NAN; m * n]).unwrap();
            ctx.launch(&kern, gemm_config(m, n), (&da, &db, &mut dc, m as u32, n as u32, k as u32)).unwrap();
            same_bits("tiled_gemm", ctx, &dc.download().unwrap(), &want)?;
        }
    });
}

#[test]
fn block_sum_agrees_with_a_float64_sum() {
    let ctxs = contexts();
    proptest!(cases(16), |(x in floats(5000))| {
        let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let scale: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
        for ctx in &ctxs {
            let dx = ctx.alloc_upload(&x).unwrap();
            let got = f64::from(sum(ctx, &dx).unwrap());
            // Pairwise within blocks, then one addition per block in any order.
            let bound = scale * f64::from(f32::EPSILON) * (8.0 + x.len() as f64 / 256.0) + 1e-30;
            prop_assert!((got - want).abs() <= bound, "block_sum on {}: {} vs {} (bound {})", ctx.backend_name(), got, want, bound);
        }
    });
}

#[test]
fn stencil_agrees_with_plain_rust() {
    let ctxs = contexts();
    proptest!(cases(16), |(rows in 1usize..50, cols in 1usize..50, seed in any::<u32>())| {
        let src: Vec<f32> = (0..rows * cols).map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32).collect();
        let want = stencil_ref(&src, rows, cols);
        for ctx in &ctxs {
            let k = ctx.kernel(stencil()).unwrap();
            let ds = ctx.alloc_upload(&src).unwrap();
            let mut dd = ctx.alloc_zeros::<f32>(rows * cols).unwrap();
            ctx.launch(&k, stencil_config(rows, cols), (&ds, &mut dd, rows as u32, cols as u32)).unwrap();
            same_bits("stencil", ctx, &dd.download().unwrap(), &want)?;
        }
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
        ("stencil", gpukit::cuda::compile_check(&stencil(), (9, 0))),
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
