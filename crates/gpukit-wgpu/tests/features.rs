//! The backend on an adapter without 64-bit floats and without subgroups, as many are
//! (`WgpuOptions::without` turns the features off on one that has them): the reductions
//! accumulate float sums in f32 and run their subgroup collectives through workgroup
//! memory, and still agree with the host, long rows in parts included. Without a Vulkan
//! driver each test prints `SKIPPED: <reason>` (with `GPU_REQUIRE_VULKAN=1` it fails
//! instead).

mod common;

use gpukit_core::half::f16;
use gpukit_core::{Context, DType, Shape};
use gpukit_wgpu::{WgpuBackend, WgpuOptions};

fn open() -> Option<Context<WgpuBackend>> {
    common::open(WgpuOptions {
        without: wgpu::Features::SHADER_F64 | wgpu::Features::SUBGROUP,
        ..Default::default()
    })
}

/// Values in [-2, 2), not all equal, the largest and smallest at known places.
fn values(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 4001) as f32 / 1000.0 - 2.0)
        .collect()
}

/// Whether `got` (an f32 sum of `xs`) is within f32 accumulation's bound of the exact sum:
/// `n` roundings of at most `2^-24` of the running magnitude, at most `Σ|x|`.
fn close(got: f64, xs: &[f32]) -> bool {
    let exact: f64 = xs.iter().map(|&v| f64::from(v)).sum();
    let scale: f64 = xs.iter().map(|&v| f64::from(v).abs()).sum();
    (got - exact).abs() <= xs.len() as f64 * 2f64.powi(-24) * scale + 1e-6
}

#[test]
fn without_f64_the_device_has_no_f64_ops() {
    let Some(ctx) = open() else { return };
    assert!(!ctx.info().op_dtypes.contains(&DType::F64));
}

#[test]
fn float_sums_without_f64_or_subgroups_agree_with_the_host() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    // One long array (in parts: more than 8192 elements), and few long rows (in parts per
    // row) beside many short ones (a block each).
    let n = 100_003;
    let x = values(n);
    let y: Vec<f32> = values(n).iter().rev().copied().collect();
    let (dx, dy) = (ctx.alloc_upload(&x)?, ctx.alloc_upload(&y)?);
    let sum = f64::from(ctx.sum(&dx)?);
    assert!(close(sum, &x), "sum {sum}");
    let mean = f64::from(ctx.mean(&dx)?);
    assert!(close(mean * n as f64, &x), "mean {mean}");
    let dot = f64::from(ctx.dot(&dx, &dy)?);
    let products: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
    assert!(close(dot, &products), "dot {dot}");
    for (rows, cols) in [(3, 33_001), (100, 1000)] {
        let shape = Shape::new(rows, cols);
        let m = ctx.alloc_upload(&x[..rows * cols])?;
        let mut out = ctx.alloc::<f32>(rows)?;
        ctx.row_sum(shape, &m, &mut out)?;
        for (r, &s) in out.download()?.iter().enumerate() {
            let row = &x[r * cols..(r + 1) * cols];
            assert!(close(f64::from(s), row), "{rows} x {cols} row {r}: {s}");
        }
    }
    // A 16-bit type's rows stay whole (no f32 parts): still within f32's bound, then one
    // rounding to f16.
    let h: Vec<f16> = x[..20_000].iter().map(|&v| f16::from_f32(v)).collect();
    let dh = ctx.alloc_upload(&h)?;
    let got = ctx.sum(&dh)?.to_f64();
    let hx: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    let exact: f64 = hx.iter().map(|&v| f64::from(v)).sum();
    let ulp = f64::from(f16::from_f64(exact).to_f32()).abs() * 2f64.powi(-10);
    assert!(
        (got - exact).abs() <= ulp + 1e-3,
        "f16 sum {got}, exact {exact}"
    );
    Ok(())
}

#[test]
fn min_max_and_their_indices_without_subgroups_are_exact() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let n = 100_003;
    let mut x = values(n);
    x[77_777] = 9.0;
    x[90_001] = 9.0; // a tie: the first wins
    x[12] = -9.0;
    x[5] = f32::NAN; // ignored
    let dx = ctx.alloc_upload(&x)?;
    assert_eq!(ctx.max(&dx)?, 9.0);
    assert_eq!(ctx.min(&dx)?, -9.0);
    assert_eq!(ctx.argmax(&dx)?, 77_777);
    assert_eq!(ctx.argmin(&dx)?, 12);
    let (rows, cols) = (3, 33_001);
    let m = ctx.alloc_upload(&x[..rows * cols])?;
    let mut idx = ctx.alloc::<u32>(rows)?;
    ctx.row_argmax(Shape::new(rows, cols), &m, &mut idx)?;
    let want: Vec<u32> = (0..rows)
        .map(|r| {
            let row = &x[r * cols..(r + 1) * cols];
            let best = row
                .iter()
                .copied()
                .filter(|v| !v.is_nan())
                .fold(f32::NEG_INFINITY, f32::max);
            row.iter().position(|&v| v == best).unwrap_or(0) as u32
        })
        .collect();
    assert_eq!(idx.download()?, want);
    Ok(())
}

/// Softmax, log-softmax and cross-entropy with its gradient, their sums of exponentials in
/// f32 and the subgroup collectives through workgroup memory, against the host in f64: a
/// long row (f32 summing 33,001 terms) and many short ones, a label out of range among
/// them (a NaN loss and gradient row).
#[test]
fn softmax_and_cross_entropy_without_f64_or_subgroups_agree_with_the_host(
) -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let x = values(100_000);
    for (rows, cols) in [(2, 33_001), (100, 1000)] {
        let shape = Shape::new(rows, cols);
        let xs = &x[..rows * cols];
        let m = ctx.alloc_upload(xs)?;
        let (mut p, mut lp) = (ctx.alloc::<f32>(xs.len())?, ctx.alloc::<f32>(xs.len())?);
        ctx.softmax(shape, &m, &mut p)?;
        ctx.log_softmax(shape, &m, &mut lp)?;
        let labels: Vec<u32> = (0..rows as u32)
            .map(|r| {
                if r == 1 {
                    cols as u32
                } else {
                    r * 7 % cols as u32
                }
            })
            .collect();
        let dl = ctx.alloc_upload(&labels)?;
        let (mut loss, mut grad) = (ctx.alloc::<f32>(rows)?, ctx.alloc::<f32>(xs.len())?);
        ctx.cross_entropy_grad(shape, &m, &dl, &mut loss, &mut grad)?;
        let (p, lp) = (p.download()?, lp.download()?);
        let (loss, grad) = (loss.download()?, grad.download()?);
        for r in 0..rows {
            let row: Vec<f64> = xs[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - top).exp()).sum();
            // f32 accumulation: `cols` roundings of the running sum, at most `s`.
            let rel = cols as f64 * 2f64.powi(-24) + 1e-6;
            for (j, v) in row.iter().enumerate() {
                let i = r * cols + j;
                let want = (v - top).exp() / s;
                assert!((f64::from(p[i]) - want).abs() <= rel * want, "p[{r}][{j}]");
                let want_lp = v - top - s.ln();
                assert!(
                    (f64::from(lp[i]) - want_lp).abs() <= 1e-5 * (1.0 + want_lp.abs()),
                    "lp[{r}][{j}]"
                );
                let l = labels[r] as usize;
                if l >= cols {
                    assert!(grad[i].is_nan(), "grad[{r}][{j}] with a bad label");
                } else {
                    let hot = f64::from(u8::from(j == l));
                    let g = f64::from(grad[i]);
                    assert!(
                        (g - (want - hot)).abs() <= rel * want + 1e-7,
                        "grad[{r}][{j}]"
                    );
                }
            }
            let l = labels[r] as usize;
            if l >= cols {
                assert!(loss[r].is_nan(), "loss[{r}] with a bad label");
            } else {
                let want = s.ln() - (row[l] - top);
                let got = f64::from(loss[r]);
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want),
                    "loss[{r}]: {got} vs {want}"
                );
            }
        }
    }
    Ok(())
}
