//! Custom kernels: launches with arrays, views and scalars; thread coordinates for every
//! launch shape; CPU kernel failures and deferred errors.

use super::*;

/// Every thread writes its CUDA built-in variables at the element its global coordinates
/// name: `blockIdx`, `threadIdx`, `blockDim`, `gridDim`, each packed as x | y << 10 | z << 20.
const COORDS_SRC: &str = r#"
__device__ unsigned int pack(uint3 v) { return v.x | (v.y << 10) | (v.z << 20); }
__device__ unsigned int pack_dim(dim3 v) { return v.x | (v.y << 10) | (v.z << 20); }
extern "C" __global__ void coords(unsigned int* out, unsigned long long n) {
    unsigned long long x = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long y = blockIdx.y * (unsigned long long)blockDim.y + threadIdx.y;
    unsigned long long z = blockIdx.z * (unsigned long long)blockDim.z + threadIdx.z;
    unsigned long long nx = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long ny = (unsigned long long)gridDim.y * blockDim.y;
    unsigned long long i = (z * ny + y) * nx + x;
    if (i < n) {
        out[4 * i] = pack(blockIdx);
        out[4 * i + 1] = pack(threadIdx);
        out[4 * i + 2] = pack_dim(blockDim);
        out[4 * i + 3] = pack_dim(gridDim);
    }
}"#;

const COORDS_WGSL: &str = r#"
struct Args { n: vec2<u32> }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
override block_x: u32 = 1;
override block_y: u32 = 1;
override block_z: u32 = 1;
fn pack(v: vec3<u32>) -> u32 { return v.x | (v.y << 10u) | (v.z << 20u); }
@compute @workgroup_size(block_x, block_y, block_z)
fn coords(@builtin(workgroup_id) b: vec3<u32>, @builtin(local_invocation_id) t: vec3<u32>,
          @builtin(num_workgroups) g: vec3<u32>) {
    let bd = vec3<u32>(block_x, block_y, block_z);
    let x = b.x * bd.x + t.x;
    let y = b.y * bd.y + t.y;
    let z = b.z * bd.z + t.z;
    let i = (z * (g.y * bd.y) + y) * (g.x * bd.x) + x;
    if (args.n.y == 0u && i < args.n.x) {
        out[4u * i] = pack(b);
        out[4u * i + 1u] = pack(t);
        out[4u * i + 2u] = pack(bd);
        out[4u * i + 3u] = pack(g);
    }
}"#;

type Coords = (Out<u32>, u64);

fn pack(d: gpukit::Dim3) -> u32 {
    d.x | (d.y << 10) | (d.z << 20)
}

pub(super) fn scalars_spec() -> KernelSpec<Scalars> {
    // SAFETY: `scalars` takes (int, unsigned char, double, signed char, double*,
    // unsigned long long), `Scalars` in order and type, and writes only below `n`.
    let spec = unsafe { KernelSpec::<Scalars>::cuda(SCALARS_SRC, "scalars") };
    // SAFETY: the WGSL reads the scalars from the immediates in signature order (u8 and i8
    // zero-extended into u32 fields, u64 a vec2<u32>) and writes `out` below `n` only.
    unsafe { spec.wgsl(SCALARS_WGSL) }.cpu(|t, (a, b, c, d, out, n)| {
        let i = t.x();
        if (i as u64) < *n {
            out[i] = *a as f64 + *b as f64 + *c + *d as f64 + i as f64;
        }
    })
}

pub(super) fn coords_spec() -> KernelSpec<Coords> {
    // SAFETY: `coords` takes (unsigned int*, unsigned long long), `Coords` in order and type,
    // and writes only the 4 elements of threads below `n`, with `out` holding 4 * n.
    let spec = unsafe { KernelSpec::<Coords>::cuda(COORDS_SRC, "coords") };
    // SAFETY: the WGSL takes `n` from the immediates and writes the 4 elements of threads
    // below `n` only, like the CUDA C.
    unsafe { spec.wgsl(COORDS_WGSL) }.cpu(|t, (out, n)| {
        let nx = t.grid_dim.x as usize * t.block_dim.x as usize;
        let ny = t.grid_dim.y as usize * t.block_dim.y as usize;
        let i = (t.z() * ny + t.y()) * nx + t.x();
        if (i as u64) < *n {
            out[4 * i] = pack(t.block_idx);
            out[4 * i + 1] = pack(t.thread_idx);
            out[4 * i + 2] = pack(t.block_dim);
            out[4 * i + 3] = pack(t.grid_dim);
        }
    })
}

/// What `coords` must write for `cfg`, from CUDA's definition of the built-in variables.
fn coords_reference(cfg: &LaunchConfig) -> Vec<u32> {
    let [gx, gy, gz] = cfg.grid;
    let [bx, by, bz] = cfg.block;
    let (nx, ny) = (gx * bx, gy * by);
    let mut want = vec![0u32; 4 * cfg.total_threads() as usize];
    let p = |x: u32, y: u32, z: u32| x | (y << 10) | (z << 20);
    for z in 0..gz * bz {
        for y in 0..gy * by {
            for x in 0..nx {
                let i = ((z * ny + y) * nx + x) as usize;
                want[4 * i] = p(x / bx, y / by, z / bz);
                want[4 * i + 1] = p(x % bx, y % by, z % bz);
                want[4 * i + 2] = p(bx, by, bz);
                want[4 * i + 3] = p(gx, gy, gz);
            }
        }
    }
    want
}

backend_tests! {
    fn kernels_see_cuda_thread_coordinates_for_every_launch_shape(ctx) {
        // The CPU closure gets what CUDA's blockIdx/threadIdx/blockDim/gridDim hold, so CPU
        // and GPU versions of a kernel agree on 1-, 2- and 3-D launches alike.
        let k = ctx.kernel(coords_spec())?;
        let shapes = [
            LaunchConfig::linear(1, 1),
            LaunchConfig::for_elems(300),
            LaunchConfig::new([1, 1, 1], [1, 1, 64]),
            LaunchConfig::new([2, 3, 1], [4, 2, 2]),
            LaunchConfig::new([3, 1, 2], [1, 5, 1]),
            LaunchConfig::new([1, 2, 3], [7, 1, 1]),
            LaunchConfig::new([2, 2, 2], [2, 2, 2]),
        ];
        for cfg in shapes {
            let threads = cfg.total_threads() as usize;
            // Poisoned first, so an element no thread wrote shows.
            let mut out = ctx.alloc_upload(&vec![u32::MAX; 4 * threads])?;
            ctx.launch(&k, cfg, (&mut out, threads as u64))?;
            assert_eq!(out.download()?, coords_reference(&cfg), "{cfg:?}");
        }
        Ok(())
    }

    fn custom_kernel_vector_add(ctx) {
        let k = ctx.kernel(vector_add_spec())?;
        assert_eq!(k.name(), "vector_add");
        let n = 1000; // not a multiple of the block size
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| (i * i) as f32 * 0.5).collect();
        let da = ctx.alloc_upload(&a)?;
        let db = ctx.alloc_upload(&b)?;
        let mut out = ctx.alloc_zeros::<f32>(n)?;
        let s = ctx.create_stream()?;
        s.launch(&k, LaunchConfig::for_elems(n), (&da, &db, &mut out, n as u64))?;
        let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| *x as f64 + *y as f64).collect();
        assert_close(&out.download()?, &want, 1e-6, "vector_add");
        // The same kernel again, on the default stream, reading its own output.
        let mut out2 = ctx.alloc_zeros::<f32>(n)?;
        ctx.launch(&k, LaunchConfig::linear(4, 256), (&out, &db, &mut out2, n as u64))?;
        let want2: Vec<f64> = want.iter().zip(&b).map(|(x, y)| x + *y as f64).collect();
        assert_close(&out2.download()?, &want2, 1e-6, "vector_add twice");
        Ok(())
    }

    fn custom_kernel_with_scalars_and_views(ctx) {
        let k = ctx.kernel(saxpy_spec())?;
        let n = 300;
        let x: Vec<f32> = (0..n).map(|i| i as f32 - 100.0).collect();
        let y: Vec<f32> = (0..n).map(|i| 0.25 * i as f32).collect();
        let dx = ctx.alloc_upload(&x)?;
        let mut dy = ctx.alloc_upload(&y)?;
        ctx.launch(&k, LaunchConfig::for_elems(n), (n as u64, 2.5f32, &dx, &mut dy))?;
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| 2.5 * *a as f64 + *b as f64).collect();
        assert_close(&dy.download()?, &want, 1e-6, "saxpy");

        // On views: x[10..110] into y[150..250]; the rest of y is untouched.
        let before = dy.download()?;
        {
            let xv = dx.slice(10..110)?;
            let mut yv = dy.slice_mut(150..250)?;
            ctx.launch(&k, LaunchConfig::for_elems(100), (100u64, -1.0f32, xv, &mut yv))?;
        }
        let got = dy.download()?;
        for i in 0..n {
            let want = if (150..250).contains(&i) {
                before[i] as f64 - x[i - 140] as f64
            } else {
                before[i] as f64
            };
            assert!(close(got[i] as f64, want, 1e-6), "view saxpy [{i}]: {} vs {want}", got[i]);
        }

        // Scalars of several types reach the kernel intact.
        let ks = ctx.kernel(scalars_spec())?;
        let mut out = ctx.alloc_zeros::<f64>(40)?;
        ctx.launch(&ks, LaunchConfig::linear(1, 64), (-70_000i32, 200u8, 0.125f64, -3i8, &mut out, 40u64))?;
        let want: Vec<f64> = (0..40).map(|i| -70_000.0 + 200.0 + 0.125 - 3.0 + i as f64).collect();
        assert_eq!(out.download()?, want);
        Ok(())
    }
}

// A kernel closure that panics exists on the CPU backend alone.
cpu_tests! {
    fn panicking_cpu_kernel_fails_the_next_sync_and_the_context_survives(ctx) {
        let k = ctx.kernel(panicking_spec())?;
        let s = ctx.create_stream()?;
        let mut out = ctx.alloc_zeros::<f32>(8)?;
        s.launch(&k, LaunchConfig::for_elems(8), (&mut out,))?; // queued: Ok
        match s.sync() {
            Err(gpukit::Error::KernelFailed { kernel, message }) => {
                assert_eq!(kernel, "boom");
                assert!(message.contains("boom at thread 3"), "{message}");
            }
            other => panic!("expected KernelFailed, got {other:?}"),
        }
        s.sync()?; // reported once
        s.fill(&mut out, 2.0)?;
        s.sync()?;
        assert_eq!(out.download()?, [2.0; 8]);
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        ctx.check()?;
        Ok(())
    }

    fn stream_dropped_with_a_failed_kernel_defers_the_error(ctx) {
        let k = ctx.kernel(panicking_spec())?;
        let s = ctx.create_stream()?;
        let mut out = ctx.alloc_zeros::<f32>(8)?;
        s.launch(&k, LaunchConfig::for_elems(8), (&mut out,))?;
        // The array's record of its users keeps the stream alive until it goes too.
        drop(s);
        drop(out);
        match ctx.check() {
            Err(e @ gpukit::Error::Deferred { origin: "Stream drop", .. }) => {
                assert!(
                    matches!(e.root(), gpukit::Error::KernelFailed { kernel, .. } if kernel == "boom"),
                    "root: {:?}",
                    e.root()
                );
            }
            other => panic!("expected a deferred KernelFailed from Stream drop, got {other:?}"),
        }
        ctx.check()?; // reported once
        let a = ctx.alloc_upload(&[4i32, 5])?;
        assert_eq!(ctx.sum(&a)?, 9);
        Ok(())
    }
}
