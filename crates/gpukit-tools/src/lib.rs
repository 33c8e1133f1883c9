//! The tools of the gpukit workspace, programs that check a machine rather than measure or
//! teach; each is an example of this package (`cargo run --release --example cuda_doctor`):
//!
//! - `cuda_doctor`: what the machine offers CUDA (driver, devices, NVRTC, cuBLAS, NVTX, the
//!   environment) and what the workspace's probe and loaders make of it; it compiles every
//!   built-in kernel module into the kernel cache and runs a smoke test on device 0. The GPU
//!   bundle ships it as `tools/cuda_doctor` (`run.sh --doctor`).
//! - `soak`: a triple-buffered pipeline repeated for a set time while host, pinned and
//!   device memory are sampled; fails unless memory is flat after the warm-up
//!   (`cargo xtask soak`).
//! - `no_gpu_abort`: every way into CUDA returns, without a panic, in a build with
//!   `panic = "abort"` (`cargo xtask no-gpu`).
//!
//! This library holds no code: the package needs a library target to carry its examples,
//! and its documentation is this list. The command line comes from `gpukit_examples::cli`,
//! which the tutorials and the benchmarks use too.
