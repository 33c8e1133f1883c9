//! The helpers CUDA C calls instead of inline PTX or hardware registers: gpukit-kernel's
//! (`gpukit_kernel::cuda::PTX_HELPERS`), which hand-written CUDA C puts in front of its
//! source ([`cuda_ptx_helpers!`](crate::cuda_ptx_helpers), re-exported at the crate's root)
//! so that it also runs under the CUDA emulator.

/// The helpers' CUDA C (`gpukit_kernel::cuda::PTX_HELPERS`), as a constant.
pub const CUDA_PTX_HELPERS: &str = gpukit_kernel::cuda::PTX_HELPERS;
