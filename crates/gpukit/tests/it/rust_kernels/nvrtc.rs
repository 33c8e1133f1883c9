//! Every `#[kernel]` of these tests compiles with NVRTC for sm_90 (the lent H100s and
//! H200s), where libnvrtc is found; no GPU is needed. (The examples' kernels have the same
//! check in `examples/tests/kernel_examples.rs`.)

#[cfg(feature = "cuda")]
#[test]
fn kernels_compile_with_nvrtc() {
    use super::{faults, language};
    let checks = [
        gpukit::cuda::compile_check(&language::int_ops(), (9, 0)),
        gpukit::cuda::compile_check(&language::constants(), (9, 0)),
        gpukit::cuda::compile_check(&language::casts(), (9, 0)),
        gpukit::cuda::compile_check(&language::loops(), (9, 0)),
        gpukit::cuda::compile_check(&language::math(), (9, 0)),
        gpukit::cuda::compile_check(&language::atomics(), (9, 0)),
        gpukit::cuda::compile_check(&language::block_reverse(), (9, 0)),
        gpukit::cuda::compile_check(&language::coords(), (9, 0)),
        gpukit::cuda::compile_check(&language::counted_rounds(), (9, 0)),
        gpukit::cuda::compile_check(&language::shape(), (9, 0)),
        gpukit::cuda::compile_check(&language::means(), (9, 0)),
        gpukit::cuda::compile_check(&language::triangles(), (9, 0)),
        gpukit::cuda::compile_check(&language::axpy1::<i32>(), (9, 0)),
        gpukit::cuda::compile_check(&language::axpy1::<u8>(), (9, 0)),
        gpukit::cuda::compile_check(&language::axpy1::<i64>(), (9, 0)),
        gpukit::cuda::compile_check(&language::lerp_sqrt::<f64>(), (9, 0)),
        gpukit::cuda::compile_check(&language::min_max_ln_1p(), (9, 0)),
        gpukit::cuda::compile_check(&language::subgroups(), (9, 0)),
        gpukit::cuda::compile_check(&language::tile_reverse::<256, -7, true>(), (9, 0)),
        gpukit::cuda::compile_check(&language::scale_by::<f32, 3>(), (9, 0)),
        gpukit::cuda::compile_check(&language::every_type::<u8>(), (9, 0)),
        gpukit::cuda::compile_check(&language::every_type::<i8>(), (9, 0)),
        gpukit::cuda::compile_check(&language::every_type::<f64>(), (9, 0)),
        gpukit::cuda::compile_check(&faults::gather(), (9, 0)),
        gpukit::cuda::compile_check(&faults::shifted(), (9, 0)),
        gpukit::cuda::compile_check(&faults::shared_over(), (9, 0)),
        gpukit::cuda::compile_check(&faults::exp64(), (9, 0)),
    ];
    #[cfg(feature = "half")]
    let checks: Vec<_> = checks
        .into_iter()
        .chain([
            gpukit::cuda::compile_check(&language::halves(), (9, 0)),
            gpukit::cuda::compile_check(&language::axpy1::<gpukit::half::f16>(), (9, 0)),
            gpukit::cuda::compile_check(&language::every_type::<gpukit::half::bf16>(), (9, 0)),
        ])
        .collect();
    for (i, r) in checks.into_iter().enumerate() {
        match r {
            Ok(()) => {}
            Err(gpukit::Error::Unavailable { reason, .. }) => {
                crate::common::skipped(&format!("NVRTC: {reason}"));
                return;
            }
            Err(e) => panic!("kernel {i}: {e}"),
        }
    }
}

/// 512 KiB of static shared memory: over the 48 KiB any CUDA block may have statically
/// (more needs dynamic shared memory and an opt-in).
#[gpukit::kernel]
pub(super) fn oversized(out: &mut [f64]) {
    let tile = shared::<f64, 65536>();
    let t = thread_x();
    tile[t] = t as f64;
    barrier();
    if t < out.len() {
        out[t] = tile[t];
    }
}

/// The compile check compiles to machine code for sm_90, so the assembler's static shared
/// memory limit fails it there, as it would fail the load on a GPU.
#[cfg(feature = "cuda")]
#[test]
fn static_shared_memory_over_the_limit_fails_the_compile_check() {
    match gpukit::cuda::compile_check(&oversized(), (9, 0)) {
        Err(gpukit::Error::KernelCompile { kernel, log }) => {
            assert_eq!(kernel, "oversized");
            assert!(log.contains("shared"), "{log}");
        }
        Err(gpukit::Error::Unavailable { reason, .. }) => {
            crate::common::skipped(&format!("NVRTC: {reason}"));
        }
        other => panic!("expected KernelCompile, got {other:?}"),
    }
}

/// Loading it is a typed error naming the kernel, not a driver failure at launch.
#[cfg(feature = "cuda")]
#[test]
fn static_shared_memory_over_the_limit_fails_the_load_on_cuda() {
    let Some(ctx) = crate::common::cuda() else {
        return;
    };
    match ctx.kernel(oversized()) {
        Err(gpukit::Error::KernelCompile { kernel, log }) => {
            assert_eq!(kernel, "oversized");
            assert!(log.contains("shared"), "{log}");
        }
        other => panic!("expected KernelCompile, got {other:?}"),
    }
}

/// `#[kernel]`'s CUDA C for 16-bit floats carries gpukit-core's PTX helpers word for word:
/// the macro crate keeps a copy (it cannot depend on gpukit-core), and an emulated device
/// header that defines the helpers must see the same guard.
#[cfg(feature = "half")]
#[test]
fn generated_cuda_c_has_the_cores_ptx_helpers() {
    let spec = super::language::halves();
    let src = spec.cuda_source().unwrap_or_default();
    assert!(src.contains(gpukit::core::CUDA_PTX_HELPERS), "{src}");
}
