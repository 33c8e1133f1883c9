//! Kernels written in Rust: the `#[kernel]`s of `gpukit_examples::kernels` (saxpy, a tiled
//! matrix multiply, two reductions, a 2-D stencil, a 5 x 5 convolution) run on the detected backend and
//! checked against plain Rust; an out-of-bounds index shown as the typed error it becomes;
//! and the generated CUDA C or WGSL printed for review.
//!
//! ```text
//! cargo run --release --example rust_kernels                      # gpu.toml / GPU_DEVICE / auto
//! GPU_DEVICE=vulkan cargo run --release --example rust_kernels
//! cargo run --release --example rust_kernels -- --print tiled_gemm --target wgsl
//! ```

use std::error::Error;
use std::process::ExitCode;

use gpukit::core::KernelSig;
use gpukit::{kernel, Context, KernelSpec, LaunchConfig};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::kernels::*;

const USAGE: &str = "\
usage: rust_kernels [--print NAME [--target cuda|wgsl]]

Runs the #[kernel] examples on the device that gpu.toml, GPU_DEVICE or detection selects
(GPU_DEVICE=cpu forces the CPU backend), verifying every result against plain Rust.

  --print NAME     print the code generated for NAME (saxpy, tiled_gemm, block_sum,
                   warp_sum, stencil, conv5x5; row_sum: the built-in f32 row_sum's kernel) instead
                   of running anything
  --target T       which code: cuda or wgsl (default: both)";

type Res<T = ()> = Result<T, Box<dyn Error>>;

struct Args {
    print: Option<&'static str>,
    target: Option<&'static str>,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        print: None,
        target: None,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("print") => {
                args.print = Some(cli.choice(
                    "--print",
                    &[
                        "saxpy",
                        "tiled_gemm",
                        "block_sum",
                        "warp_sum",
                        "stencil",
                        "conv5x5",
                        "row_sum",
                    ],
                )?)
            }
            Long("target") => args.target = Some(cli.choice("--target", &["cuda", "wgsl"])?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// Reads `src` at the indices in `idx`: an index past the end of `src` is reported, not
/// followed.
#[kernel]
fn gather(src: &[f32], idx: &[u32], out: &mut [f32]) {
    let i = global_x();
    if i < out.len() {
        out[i] = src[idx[i] as usize];
    }
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("rust_kernels", run())
}

fn print<S: KernelSig>(spec: &KernelSpec<S>, target: Option<&str>) {
    if target != Some("wgsl") {
        println!("{}", spec.cuda_source().unwrap_or("// no CUDA C"));
    }
    if target != Some("cuda") {
        match spec.wgsl_source() {
            Some(w) => println!("{w}"),
            None => println!("// no WGSL: {:?}", spec.desc().checked),
        }
    }
}

fn verify(ok: bool, what: &str) -> Res {
    if ok {
        println!("  verified: {what}");
        Ok(())
    } else {
        Err(format!("wrong result: {what}").into())
    }
}

fn run() -> Res {
    let args = cli::parse_or_exit("rust_kernels", USAGE, parse_args);
    if let Some(name) = args.print {
        match name {
            "saxpy" => print(&saxpy(), args.target),
            "tiled_gemm" => print(&tiled_gemm(), args.target),
            "block_sum" => print(&block_sum(), args.target),
            "warp_sum" => print(&warp_sum(), args.target),
            "row_sum" => print(&gpukit::core::__row_sum_kernel(), args.target),
            "conv5x5" => print(&conv5x5(), args.target),
            _ => print(&stencil(), args.target),
        }
        return Ok(());
    }
    let ctx = Context::from_config()?;
    println!(
        "{} device {}: {}",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name
    );

    // saxpy: y = 2x + y.
    let n = 100_000;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.001).collect();
    let mut want: Vec<f32> = (0..n).map(|i| (i % 10) as f32).collect();
    let k = ctx.kernel(saxpy())?;
    let dx = ctx.alloc_upload(&x)?;
    let mut dy = ctx.alloc_upload(&want)?;
    ctx.launch(&k, LaunchConfig::for_elems(n), (2.0f32, &dx, &mut dy))?;
    saxpy_ref(2.0, &x, &mut want);
    verify(
        dy.download()? == want,
        "saxpy of 100000 elements, bit for bit",
    )?;

    // A tiled matrix multiply, 300 x 200 times 200 x 100.
    let (m, kk, nn) = (300, 200, 100);
    let a: Vec<f32> = (0..m * kk).map(|i| (i % 17) as f32 * 0.125 - 1.0).collect();
    let b: Vec<f32> = (0..kk * nn)
        .map(|i| (i % 11) as f32 * 0.25 - 1.25)
        .collect();
    let k = ctx.kernel(tiled_gemm())?;
    let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
    let mut dc = ctx.alloc_zeros::<f32>(m * nn)?;
    let dims = (m as u32, nn as u32, kk as u32);
    ctx.launch(
        &k,
        gemm_config(m, nn),
        (&da, &db, &mut dc, dims.0, dims.1, dims.2),
    )?;
    verify(
        dc.download()? == gemm_ref(&a, &b, m, nn, kk),
        "tiled gemm 300x200 * 200x100 (shared tiles, barriers), bit for bit",
    )?;

    // A block reduction: shared memory, barriers, one atomic add per block.
    let v: Vec<f32> = (0..1_000_000).map(|i| (i % 1000) as f32 * 0.5).collect();
    let got = sum(&ctx, &ctx.alloc_upload(&v)?)?;
    let exact: f64 = v.iter().map(|&x| f64::from(x)).sum();
    verify(
        (f64::from(got) - exact).abs() <= exact * 1e-5,
        &format!("block sum of 1000000 elements: {got} (exact {exact})"),
    )?;

    // The same sum with subgroup (warp) sums.
    let got = warp_sum_of(&ctx, &ctx.alloc_upload(&v)?)?;
    verify(
        (f64::from(got) - exact).abs() <= exact * 1e-5,
        &format!("subgroup sum of 1000000 elements: {got} (exact {exact})"),
    )?;

    // One Jacobi step on a 500 x 400 grid.
    let (rows, cols) = (500, 400);
    let g: Vec<f32> = (0..rows * cols).map(|i| ((i * 7) % 100) as f32).collect();
    let k = ctx.kernel(stencil())?;
    let dg = ctx.alloc_upload(&g)?;
    let mut out = ctx.alloc_zeros::<f32>(rows * cols)?;
    ctx.launch(
        &k,
        stencil_config(rows, cols),
        (&dg, &mut out, rows as u32, cols as u32),
    )?;
    verify(
        out.download()? == stencil_ref(&g, rows, cols),
        "stencil on 500 x 400, bit for bit",
    )?;

    // A 5 x 5 convolution of the same grid: a shared tile with a halo.
    let w: Vec<f32> = (0..25).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect();
    let k = ctx.kernel(conv5x5())?;
    let dw = ctx.alloc_upload(&w)?;
    ctx.launch(
        &k,
        conv_config(rows, cols),
        (&dg, &dw, &mut out, rows as u32, cols as u32),
    )?;
    verify(
        out.download()? == conv5x5_ref(&g, &w, rows, cols),
        "5 x 5 convolution on 500 x 400 (shared tile and halo), bit for bit",
    )?;

    // An index out of bounds: skipped on the device, a typed error at the next sync.
    let k = ctx.kernel(gather())?;
    let src = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
    let idx = ctx.alloc_upload(&[2u32, 7, 0])?;
    let mut out = ctx.alloc_zeros::<f32>(3)?;
    ctx.launch(&k, LaunchConfig::for_elems(3), (&src, &idx, &mut out))?;
    match ctx.sync() {
        Err(e @ gpukit::Error::KernelFailed { .. }) => println!("  caught, as expected: {e}"),
        other => return Err(format!("expected KernelFailed, got {other:?}").into()),
    }
    verify(
        out.download()? == [3.0, 0.0, 1.0],
        "the faulting read gave zero and the other threads ran",
    )?;
    ctx.sync()?;
    println!("all #[kernel] examples verified on {}", ctx.backend_name());
    Ok(())
}
