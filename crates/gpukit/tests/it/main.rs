//! The facade's integration tests, in one test binary: one module per area, so that the
//! tests link the facade, wgpu and every backend once rather than once per file (each
//! binary of its own costs a full link). A test's path starts with its area:
//! `cargo test -p gpukit --test it behaviour::` runs the behaviours (a filter matches
//! anywhere in a name: `props::` takes `pipeline_props::` too), and the GPU bundle's
//! `run.sh` runs each area as a group of its own, its tests named exactly
//! (`--only behaviour`).
//!
//! Two binaries stay separate, beside this folder: `alloc_free` counts heap allocations
//! with a global allocator of its own and runs without libtest's harness, and `cuda_poison`
//! breaks the CUDA device for the rest of its process on purpose. Tests that need a process
//! of their own for a moment (they set the environment, or hide the Vulkan drivers) run this
//! binary again as a child, the one test there (`common::run_in_child`).

// Shared with the two separate binaries.
#[path = "../common/mod.rs"]
mod common;

mod asynchronous;
mod bad_input;
mod bad_input_pipeline;
mod behaviour;
// The CUDA emulator's fault injection against the backend's error paths.
#[cfg(feature = "cuda")]
mod cuda_faults;
mod debug;
mod dlpack;
mod error_chain;
mod half;
mod interop;
mod memory;
mod multi_device;
mod nccl;
mod rust_kernels;
// Without the `cuda` feature: no CUDA arm at all.
#[cfg(not(feature = "cuda"))]
mod no_cuda;
// The CUDA probe and backend are in the build only with the `cuda` feature (`no_cuda`
// covers the build without it).
#[cfg(feature = "cuda")]
mod no_gpu;
// The Vulkan backend is in the build only with the `vulkan` feature.
#[cfg(feature = "vulkan")]
mod no_vulkan;
mod pipeline_props;
#[cfg(feature = "cuda")]
mod probe;
mod props;
// The Vulkan probe's noise and cost: only with the `vulkan` feature.
#[cfg(feature = "vulkan")]
mod quiet_probe;
mod selection;
