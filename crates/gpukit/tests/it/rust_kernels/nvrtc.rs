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
        gpukit::cuda::compile_check(&language::shape(), (9, 0)),
        gpukit::cuda::compile_check(&language::means(), (9, 0)),
        gpukit::cuda::compile_check(&language::axpy1::<i32>(), (9, 0)),
        gpukit::cuda::compile_check(&language::axpy1::<u8>(), (9, 0)),
        gpukit::cuda::compile_check(&language::axpy1::<i64>(), (9, 0)),
        gpukit::cuda::compile_check(&language::lerp_sqrt::<f64>(), (9, 0)),
        gpukit::cuda::compile_check(&faults::gather(), (9, 0)),
        gpukit::cuda::compile_check(&faults::shifted(), (9, 0)),
        gpukit::cuda::compile_check(&faults::shared_over(), (9, 0)),
        gpukit::cuda::compile_check(&faults::divergent(), (9, 0)),
        gpukit::cuda::compile_check(&faults::halve64(), (9, 0)),
    ];
    #[cfg(feature = "half")]
    let checks: Vec<_> = checks
        .into_iter()
        .chain([gpukit::cuda::compile_check(&language::halves(), (9, 0))])
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
