//! Custom WGSL kernels: the launch checks that only this backend has (a workgroup size fixed
//! in the shader, one array bound read-only and writable at once), each a typed error that
//! leaves the context usable. The facade's `behaviour` and `bad_input` tests cover the rest
//! on every backend. Without a Vulkan driver each test prints `SKIPPED: <reason>`.

mod common;

use gpukit_core::{Context, Error, In, KernelSpec, LaunchConfig, Out};
use gpukit_wgpu::{WgpuBackend, WgpuOptions};

fn open() -> Option<Context<WgpuBackend>> {
    common::open(WgpuOptions::default())
}

/// `out[i] = 2 * a[i]` with a workgroup size fixed at 64.
const TWICE: &str = "
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn twice(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&out)) { out[g.x] = 2.0 * a[g.x]; }
}";

fn twice() -> KernelSpec<(In<f32>, Out<f32>)> {
    // SAFETY: `twice` binds a (read) and out (written) in order and touches indices below
    // `out`'s length only, which the launches below make `a`'s too.
    unsafe { KernelSpec::named("twice").wgsl(TWICE) }
}

#[test]
fn a_fixed_workgroup_size_must_match_the_block() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let k = ctx.kernel(twice())?;
    let a = ctx.alloc_upload(&[1.0f32; 128])?;
    let mut out = ctx.alloc_zeros::<f32>(128)?;
    let r = ctx.launch(&k, LaunchConfig::linear(4, 32), (&a, &mut out));
    assert!(
        matches!(&r, Err(Error::InvalidLaunch { kernel, reason }) if kernel == "twice" && reason.contains("workgroup_size")),
        "{r:?}"
    );
    assert_eq!(out.download()?, vec![0.0; 128], "a refused launch wrote");
    ctx.launch(&k, LaunchConfig::linear(2, 64), (&a, &mut out))?;
    assert_eq!(out.download()?, vec![2.0; 128]);
    Ok(())
}

#[test]
fn one_array_read_and_written_in_one_launch_is_refused() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let k = ctx.kernel(twice())?;
    let mut x = ctx.alloc_upload(&[1.0f32; 128])?;
    let r = {
        let (left, mut right) = x.split_at_mut(64)?;
        let left = left.as_view();
        ctx.launch(&k, LaunchConfig::linear(1, 64), (&left, &mut right))
    };
    assert!(
        matches!(&r, Err(Error::Unsupported { what, .. }) if what.contains("views of one array")),
        "{r:?}"
    );
    assert_eq!(x.download()?, vec![1.0; 128]);
    Ok(())
}

#[test]
fn wgsl_without_the_entry_point_names_the_ones_it_has() {
    let Some(ctx) = open() else { return };
    // SAFETY: never launched (it does not load).
    let spec = unsafe { KernelSpec::<(In<f32>, Out<f32>)>::named("thrice").wgsl(TWICE) };
    match ctx.kernel(spec) {
        Err(Error::KernelCompile { kernel, log }) => {
            assert_eq!(kernel, "thrice");
            assert!(log.contains("twice"), "{log}");
        }
        other => panic!("expected KernelCompile, got {other:?}"),
    }
}
