//! The whole context API on the detected backend: device info, allocation and transfers
//! with verified results, built-in ops, two streams ordered by an event with elapsed time,
//! a pinned asynchronous upload, and a custom kernel.
//!
//! ```text
//! cargo run --release --example context_basic              # gpu.toml / GPU_DEVICE / auto
//! GPU_DEVICE=cpu cargo run --release --example context_basic
//! ```
//!
//! Any failure (a malformed `GPU_DEVICE`, an unusable GPU, a wrong result) prints the error
//! and exits with status 1.

use std::error::Error;
use std::process::ExitCode;

use gpukit::{Context, Gemm, HostUse, In, KernelSpec, LaunchConfig, Out};
use gpukit_examples::cli::{self, Cli};

const USAGE: &str = "\
usage: context_basic

Tours the context API on the device that gpu.toml, GPU_DEVICE or detection selects
(GPU_DEVICE=cpu forces the CPU backend), verifying every result. It takes no options.";

/// The CUDA C of the custom kernel; the CPU backend runs the closure beside it.
const VECTOR_ADD: &str = r#"
extern "C" __global__ void vector_add(const float* a, const float* b, float* out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"#;

/// The same kernel in WGSL, for the Vulkan backend: arrays are bindings in order, scalars an
/// immediate struct, and the block size the launch's (`override block_x`).
const VECTOR_ADD_WGSL: &str = r#"
struct Args { n: vec2<u32> }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
override block_x: u32 = 256;
@compute @workgroup_size(block_x)
fn vector_add(@builtin(global_invocation_id) g: vec3<u32>) {
    if (args.n.y == 0u && g.x < args.n.x) { out[g.x] = a[g.x] + b[g.x]; }
}
"#;

type Res<T = ()> = Result<T, Box<dyn Error>>;

fn verify(ok: bool, what: &str) -> Res {
    if ok {
        println!("  verified: {what}");
        Ok(())
    } else {
        Err(format!("wrong result: {what}").into())
    }
}

fn main() -> ExitCode {
    gpukit_examples::exit_status("context_basic", run())
}

fn run() -> Res {
    cli::parse_or_exit("context_basic", USAGE, Cli::none);
    let ctx = Context::from_config()?;
    let sel = ctx.selection();
    println!(
        "{} device {} (requested `{}` by {})",
        ctx.backend_name(),
        ctx.device_id(),
        sel.requested,
        sel.origin
    );
    for r in &sel.rejected {
        println!("  rejected {}: {}", r.backend, r.reason);
    }

    let info = ctx.info();
    println!("device info:");
    println!("  name:               {}", info.name);
    println!(
        "  memory:             {:.1} GiB",
        info.total_memory as f64 / (1u64 << 30) as f64
    );
    match info.compute_capability {
        Some((major, minor)) => println!("  compute capability: {major}.{minor}"),
        None => println!("  compute capability: none (not a GPU)"),
    }
    println!("  copy engines:       {}", info.copy_engines);
    println!("  multiprocessors:    {}", info.multiprocessors);
    println!(
        "  launch limits:      {} threads/block, grid {:?}",
        info.limits.max_threads_per_block, info.limits.max_grid_dim
    );
    println!("  default dtype:      {}", ctx.default_dtype());

    println!("arrays and built-in ops:");
    let n = 1 << 16;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| (n - i) as f32).collect();
    let x = ctx.alloc_upload(&xs)?;
    let mut y = ctx.alloc_upload(&ys)?;
    verify(x.download()? == xs, "upload then download returns the data")?;

    let mut sum = ctx.alloc_zeros::<f32>(n)?;
    ctx.add(&x, &y, &mut sum)?;
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    verify(sum.download()? == want, "add")?;

    ctx.axpy(2.0f32, &x, &mut y)?;
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| 2.0 * a + b).collect();
    verify(y.download()? == want, "axpy")?;

    let ints = ctx.alloc_upload(&(1..=100).collect::<Vec<i32>>())?;
    verify(ctx.sum(&ints)? == 5050, "sum of 1..=100 is 5050")?;

    let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?; // 2 x 3
    let b = ctx.alloc_upload(&[7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0])?; // 3 x 2
    let mut c = ctx.alloc_zeros::<f32>(4)?;
    ctx.gemm(Gemm::new(2, 2, 3), &a, &b, &mut c)?;
    verify(
        c.download()? == [58.0, 64.0, 139.0, 154.0],
        "gemm 2x3 * 3x2",
    )?;

    let mut tail = y.slice_mut(n - 4..)?;
    tail.upload(&[1.0, 2.0, 3.0, 4.0])?;
    verify(
        y.slice(n - 4..)?.download()? == [1.0, 2.0, 3.0, 4.0],
        "a view writes only its range",
    )?;

    println!("streams and events:");
    let (s1, s2) = (ctx.create_stream()?, ctx.create_stream()?);
    let mut big = ctx.alloc::<f32>(1 << 22)?;
    let start = s1.record_event()?;
    s1.fill(&mut big, 1.0)?;
    for _ in 0..8 {
        s1.scale(1.5f32, &mut big)?;
    }
    let done = s1.record_event()?;
    s2.wait(&done)?;
    let mut copy = ctx.alloc::<f32>(1 << 22)?;
    s2.copy(&big, &mut copy)?;
    s2.sync()?;
    let ms = start.elapsed_ms(&done)?;
    println!("  stream 1 filled and scaled 16 MiB 8 times in {ms:.3} ms (timed with events)");
    let expect = 1.5f32.powi(8);
    verify(
        copy.download()?.iter().all(|&v| v == expect),
        "stream 2 waited for stream 1's event before copying",
    )?;

    println!("pinned asynchronous upload:");
    let mut host = ctx.alloc_host::<f32>(n, HostUse::Upload)?;
    for (i, v) in host.iter_mut().enumerate() {
        *v = (i % 97) as f32;
    }
    let mut dev = ctx.alloc::<f32>(n)?;
    let pending = s1.upload(host, &mut dev)?; // `host` is inside `pending` now
    let host = pending.wait()?; // and back once the copy is done
    verify(dev.download()? == host[..], "pinned upload")?;
    drop(host);
    let again = ctx.alloc_host::<f32>(n, HostUse::Upload)?;
    let stats = ctx.host_pool_stats();
    println!(
        "  pinned pool: {} fresh allocation(s), {} reuse(s), {} bytes held",
        stats.fresh, stats.reused, stats.retained_bytes
    );
    verify(
        stats.reused >= 1,
        "a dropped pinned buffer is reused, not pinned again",
    )?;
    drop(again);

    println!("custom kernel:");
    // SAFETY: `vector_add` takes (const float*, const float*, float*, unsigned long long), the
    // signature's types in order, and touches only indices below `n`.
    let spec =
        unsafe { KernelSpec::<(In<f32>, In<f32>, Out<f32>, u64)>::cuda(VECTOR_ADD, "vector_add") };
    // SAFETY: the WGSL binds a, b (read) and out (written) in that order, reads `n` (a u64,
    // so a vec2<u32>) from the immediates, and touches only indices below it.
    let spec = unsafe { spec.wgsl(VECTOR_ADD_WGSL) };
    let spec = spec.cpu(|t, (a, b, out, n)| {
        let i = t.x();
        if (i as u64) < *n {
            out[i] = a[i] + b[i];
        }
    });
    let kernel = ctx.kernel(spec)?;
    let mut out = ctx.alloc_zeros::<f32>(n)?;
    s2.launch(
        &kernel,
        LaunchConfig::for_elems(n),
        (&x, &sum, &mut out, n as u64),
    )?;
    let want: Vec<f32> = xs.iter().zip(sum.download()?).map(|(a, b)| a + b).collect();
    verify(out.download()? == want, "vector_add kernel")?;

    let backend = ctx.backend_name();
    ctx.close()?;
    println!("all results verified on the {backend} backend");
    Ok(())
}
