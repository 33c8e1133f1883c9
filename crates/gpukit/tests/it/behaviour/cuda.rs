//! CUDA-only behaviours: compile errors, PTX kernels, launch limits, device info and running
//! out of device memory.
//!
//! Each test opens the first CUDA device through `common::cuda()`; without a usable one it
//! prints `SKIPPED: <reason>` and returns. A kernel that faults, which breaks the device's
//! primary context for the whole process, is tested in `tests/cuda_poison.rs`, its own
//! test binary.

use super::*;

use gpukit::{Context, DeviceSpec, Error};

/// Runs `body` on the first CUDA device (or skips); the context must be clean afterwards.
fn on_cuda(body: impl FnOnce(&Context) -> gpukit::Result<()>) {
    common::run(common::cuda(), body);
}

/// `vector_add` on a few elements: the context still works.
fn still_usable(ctx: &Context) -> gpukit::Result<()> {
    let k = ctx.kernel(vector_add_spec())?;
    let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
    let b = ctx.alloc_upload(&[10.0f32, 20.0, 30.0])?;
    let mut out = ctx.alloc_zeros::<f32>(3)?;
    ctx.launch(&k, LaunchConfig::for_elems(3), (&a, &b, &mut out, 3u64))?;
    assert_eq!(
        out.download()?,
        [11.0, 22.0, 33.0],
        "vector_add after the error"
    );
    Ok(())
}

/// CUDA C that uses an undeclared name.
const BROKEN_SRC: &str = r#"
extern "C" __global__ void broken(float* x) {
    x[threadIdx.x] = not_declared_anywhere;
}"#;

/// A valid kernel named `present`.
const PRESENT_SRC: &str = r#"
extern "C" __global__ void present(float* x) {
    x[threadIdx.x] = 1.0f;
}"#;

/// A valid kernel without `extern "C"`: its symbol is C++-mangled.
const MANGLED_SRC: &str = r#"
__global__ void mangled(float* x) {
    x[threadIdx.x] = 2.0f;
}"#;

type OneOut = (Out<f32>,);

/// A spec from CUDA C that these tests only compile or load, never launch.
fn unlaunched(src: &str, name: &str) -> KernelSpec<OneOut> {
    // SAFETY: a kernel made here is loaded (or fails to load) but never launched, so its
    // code never runs.
    unsafe { KernelSpec::<OneOut>::cuda(src, name) }
}

/// Asserts a kernel compile error for `kernel` whose log contains every one of `needles`.
fn expect_compile_error(
    got: gpukit::Result<gpukit::Kernel<OneOut>>,
    kernel_name: &str,
    needles: &[&str],
) {
    match got {
        Err(Error::KernelCompile { kernel, log }) => {
            assert_eq!(kernel, kernel_name);
            for needle in needles {
                assert!(
                    log.contains(needle),
                    "the log of `{kernel}` does not mention {needle:?}: {log}"
                );
            }
        }
        other => panic!("`{kernel_name}`: expected KernelCompile, got {other:?}"),
    }
}

#[test]
fn kernels_that_cannot_load_are_typed_errors() {
    on_cuda(|ctx| {
        // The compiler's own message reaches the caller.
        expect_compile_error(
            ctx.kernel(unlaunched(BROKEN_SRC, "broken")),
            "broken",
            &["not_declared_anywhere", "error"],
        );
        // An entry point the module does not have, and one whose name C++ mangled: the
        // error says to declare it `extern "C"`.
        expect_compile_error(
            ctx.kernel(unlaunched(PRESENT_SRC, "absent")),
            "absent",
            &["absent", "extern \"C\""],
        );
        expect_compile_error(
            ctx.kernel(unlaunched(MANGLED_SRC, "mangled")),
            "mangled",
            &["mangled", "extern \"C\""],
        );
        // PTX the driver cannot read.
        expect_compile_error(
            // SAFETY: not PTX, so it cannot load, let alone run.
            ctx.kernel(unsafe { KernelSpec::<OneOut>::ptx("this is not PTX", "nothing") }),
            "nothing",
            &["cuModuleLoadData"],
        );
        // A spec with only a CPU closure has nothing to run on CUDA.
        let cpu_only = KernelSpec::<OneOut>::named("cpu_only").cpu(|t, (x,)| {
            let i = t.x();
            if i < x.len() {
                x[i] = 1.0;
            }
        });
        match ctx.kernel(cpu_only) {
            Err(Error::KernelUnavailable {
                kernel, backend, ..
            }) => {
                assert_eq!(kernel, "cpu_only");
                assert_eq!(backend, "cuda");
            }
            other => panic!("expected KernelUnavailable, got {other:?}"),
        }
        // The valid kernels load under their own names, and the context works.
        ctx.kernel(unlaunched(PRESENT_SRC, "present"))?;
        still_usable(ctx)
    });
}

/// `x[i] *= a` for `i < n`, written by hand in PTX (ISA 7.0, sm_52: any driver of CUDA
/// 11 or newer compiles it for its device when the module loads).
const VSCALE_PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry vscale(
    .param .u64 vscale_x,
    .param .f32 vscale_a,
    .param .u64 vscale_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [vscale_x];
    ld.param.f32 %f1, [vscale_a];
    ld.param.u64 %rd2, [vscale_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    cvt.u64.u32 %rd3, %r3;
    mad.wide.u32 %rd4, %r1, %r2, %rd3;
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd5, %rd1;
    shl.b64 %rd6, %rd4, 2;
    add.s64 %rd7, %rd5, %rd6;
    ld.global.f32 %f2, [%rd7];
    mul.rn.f32 %f3, %f2, %f1;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}
"#;

type Vscale = (Out<f32>, f32, u64);

fn vscale_spec() -> KernelSpec<Vscale> {
    // SAFETY: `vscale` takes (.u64 pointer, .f32, .u64), `Vscale` in order and type, and
    // touches only indices below `n`.
    let spec = unsafe { KernelSpec::<Vscale>::ptx(VSCALE_PTX, "vscale") };
    spec.cpu(|t, (x, a, n)| {
        let i = t.x();
        if (i as u64) < *n {
            x[i] *= *a;
        }
    })
}

#[test]
fn a_ptx_kernel_runs_and_matches_the_cpu() {
    on_cuda(|ctx| {
        if common::skipped_on_emulator(ctx, "PTX") {
            return Ok(());
        }
        let cpu = Context::new(DeviceSpec::Cpu(None))?;
        let len = 1100;
        let n = 1000; // the last 100 elements are past `n`: the kernel leaves them alone
        let x: Vec<f32> = (0..len)
            .map(|i| (i as f32 * 0.37).sin() * 1e3)
            .chain([
                0.0,
                -0.0,
                f32::INFINITY,
                f32::MIN_POSITIVE,
                f32::from_bits(1),
            ])
            .collect();
        let a = -0.375f32;
        let mut results = Vec::new();
        for c in [&cpu, ctx] {
            let k = c.kernel(vscale_spec())?;
            assert_eq!(k.name(), "vscale");
            let mut d = c.alloc_upload(&x)?;
            // More threads than elements: the guard must hold.
            c.launch(&k, LaunchConfig::linear(8, 256), (&mut d, a, n as u64))?;
            results.push(d.download()?);
        }
        let want: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| if i < n { v * a } else { v })
            .collect();
        assert!(bits_eq(&results[0], &want), "the CPU closure");
        assert!(
            bits_eq(&results[1], &want),
            "the PTX kernel differs from the CPU: {:?}",
            results[1]
                .iter()
                .zip(&want)
                .enumerate()
                .find(|(_, (g, w))| g.to_bits() != w.to_bits())
        );
        Ok(())
    });
}

#[test]
fn launches_over_the_device_limits_are_refused_before_anything_runs() {
    on_cuda(|ctx| {
        let k = ctx.kernel(vector_add_spec())?;
        let n = 4096;
        let a = ctx.alloc_upload(&vec![1.0f32; n])?;
        let b = ctx.alloc_upload(&vec![2.0f32; n])?;
        let mut out = ctx.alloc_upload(&vec![-7.0f32; n])?;
        let limits = ctx.info().limits;
        let bad = [
            // More threads per block than any CUDA device allows (1024).
            (LaunchConfig::linear(2, 2048), "2048"),
            (
                LaunchConfig {
                    grid: [1, limits.max_grid_dim[1].saturating_add(1), 1],
                    block: [32, 1, 1],
                    shared_mem_bytes: 0,
                },
                "grid.y",
            ),
            (
                LaunchConfig {
                    grid: [16, 1, 1],
                    block: [256, 1, 1],
                    shared_mem_bytes: limits.max_shared_mem_per_block.saturating_add(1),
                },
                "shared memory",
            ),
            (LaunchConfig::linear(0, 256), "grid.x"),
        ];
        for (cfg, needle) in bad {
            match ctx.launch(&k, cfg, (&a, &b, &mut out, n as u64)) {
                Err(Error::InvalidLaunch { kernel, reason }) => {
                    assert_eq!(kernel, "vector_add");
                    assert!(reason.contains(needle), "{cfg:?}: {reason}");
                }
                other => panic!("{cfg:?}: expected InvalidLaunch, got {other:?}"),
            }
        }
        ctx.sync()?;
        assert_eq!(out.download()?, vec![-7.0; n], "a refused launch ran");
        // The context stays usable: the same kernel within the limits.
        ctx.launch(
            &k,
            LaunchConfig::linear(8, 512),
            (&a, &b, &mut out, n as u64),
        )?;
        assert_eq!(out.download()?, vec![3.0; n]);
        Ok(())
    });
}

#[test]
fn device_info_agrees_with_the_probe() {
    on_cuda(|ctx| {
        assert_eq!(ctx.backend_name(), "cuda");
        assert!(ctx.selection().rejected.is_empty());
        let info = ctx.info().clone();
        let cc = info
            .compute_capability
            .expect("a CUDA device has a compute capability");
        assert!(cc.0 >= 3, "compute capability {cc:?}");
        assert!(info.copy_engines >= 1, "{info:?}");
        assert!(info.multiprocessors >= 1, "{info:?}");
        assert!(info.total_memory > 0, "{info:?}");
        assert!(!info.name.is_empty(), "{info:?}");
        // CUDA's most urgent priority is numerically lowest: (least, greatest) = (0, -5).
        let (least, greatest) = info.priority_range;
        assert!(greatest < least, "priority range {:?}", info.priority_range);
        let l = info.limits;
        assert!(l.max_threads_per_block >= 1024, "{l:?}");
        assert!(l.max_block_dim.iter().all(|&d| d >= 1), "{l:?}");
        assert!(l.max_grid_dim.iter().all(|&d| d >= 1), "{l:?}");
        assert!(l.max_shared_mem_per_block > 0, "{l:?}");

        // The same device as the probe describes it.
        let probe = gpukit::cuda::probe().expect("CUDA opened, so the probe succeeded");
        let dev = probe
            .devices
            .get(ctx.device_id())
            .expect("the context's ordinal is among the probe's devices");
        assert_eq!(dev.ordinal, ctx.device_id());
        assert_eq!(info.name, dev.name);
        assert_eq!(info.total_memory, dev.total_memory);
        assert_eq!(info.compute_capability, Some(dev.compute_capability));
        assert_eq!(info.copy_engines, dev.copy_engines);
        assert_eq!(info.multiprocessors, dev.multiprocessors);

        // Both ends of the priority range make streams; one past the most urgent does not.
        let urgent = ctx.create_stream_with_priority(greatest)?;
        let lax = ctx.create_stream_with_priority(least)?;
        assert_eq!((urgent.priority(), lax.priority()), (greatest, least));
        match ctx.create_stream_with_priority(greatest - 1) {
            Err(Error::InvalidPriority { .. }) => {}
            other => panic!(
                "priority {}: expected InvalidPriority, got {other:?}",
                greatest - 1
            ),
        }
        urgent.sync()?;
        lax.sync()?;
        Ok(())
    });
}

#[test]
fn allocating_more_than_the_device_has_is_out_of_memory_and_harmless() {
    on_cuda(|ctx| {
        let total = usize::try_from(ctx.info().total_memory).expect("64-bit host");
        let bytes = total + (1 << 30);
        match ctx.alloc::<u8>(bytes) {
            Err(Error::OutOfMemory {
                backend,
                requested,
                detail,
            }) => {
                assert_eq!(backend, "cuda");
                assert_eq!(requested, bytes);
                assert!(!detail.is_empty());
            }
            Ok(a) => panic!(
                "allocated {} bytes on a {total}-byte device",
                a.size_bytes()
            ),
            Err(e) => panic!("expected OutOfMemory, got {e:?}"),
        }
        // The zeroing allocation fails the same way.
        let len = bytes / 4;
        match ctx.alloc_zeros::<f32>(len) {
            Err(Error::OutOfMemory {
                backend: "cuda",
                requested,
                ..
            }) => assert_eq!(requested, len * 4),
            Ok(a) => panic!(
                "allocated {} bytes on a {total}-byte device",
                a.size_bytes()
            ),
            Err(e) => panic!("expected OutOfMemory, got {e:?}"),
        }
        // Nothing is left broken: allocate, copy both ways, compute.
        ctx.sync()?;
        let data: Vec<u8> = (0..=255).collect();
        let d = ctx.alloc_upload(&data)?;
        assert_eq!(d.download()?, data);
        let mut out = ctx.alloc_zeros::<u8>(data.len())?;
        ctx.add(&d, &d, &mut out)?;
        let want: Vec<u8> = data.iter().map(|v| v.wrapping_add(*v)).collect();
        assert_eq!(out.download()?, want);
        Ok(())
    });
}

/// The CUDA C of every kernel these tests launch compiles with NVRTC for a Hopper and an
/// Ampere GPU and has its entry point, checked without a GPU wherever NVRTC can be found (CI
/// installs it from pip): a typo in a test kernel fails here, not on the first lent GPU.
/// The kernels meant not to compile compile with their errors.
#[test]
fn test_kernels_compile_with_nvrtc_without_a_gpu() {
    type Check = fn((u32, u32)) -> gpukit::Result<()>;
    let compiles: [(&str, Check); 7] = [
        ("vector_add", |cc| {
            gpukit::cuda::compile_check(&vector_add_spec(), cc)
        }),
        ("saxpy", |cc| gpukit::cuda::compile_check(&saxpy_spec(), cc)),
        ("scalars", |cc| {
            gpukit::cuda::compile_check(&kernels::scalars_spec(), cc)
        }),
        ("coords", |cc| {
            gpukit::cuda::compile_check(&kernels::coords_spec(), cc)
        }),
        ("vscale", |cc| {
            gpukit::cuda::compile_check(&vscale_spec(), cc)
        }),
        ("present", |cc| {
            gpukit::cuda::compile_check(&unlaunched(PRESENT_SRC, "present"), cc)
        }),
        ("delay", |cc| {
            gpukit::cuda::compile_check(&common::delay_spec(), cc)
        }),
    ];
    for (name, check) in compiles {
        for cc in [(9, 0), (8, 0)] {
            match check(cc) {
                Ok(()) => {}
                Err(Error::Unavailable { reason, .. }) if !common::require_cuda() => {
                    common::skipped(&format!("NVRTC not found: {reason}"));
                    return;
                }
                Err(e) => panic!("`{name}` for sm_{}{}: {e}", cc.0, cc.1),
            }
        }
    }
    let broken = unlaunched(BROKEN_SRC, "broken");
    let mangled = unlaunched(MANGLED_SRC, "mangled");
    for (spec, needle) in [(broken, "not_declared_anywhere"), (mangled, "extern \"C\"")] {
        match gpukit::cuda::compile_check(&spec, (9, 0)) {
            Err(Error::KernelCompile { log, .. }) => assert!(log.contains(needle), "{log}"),
            other => panic!("expected KernelCompile mentioning {needle:?}, got {other:?}"),
        }
    }
}
