//! # gpukit-cuda-emu
//!
//! Test support of the `gpukit` workspace, not a backend: an emulated CUDA stack (driver,
//! NVRTC, cuBLAS, NCCL) in one shared library that the real `gpukit-cuda` loads through its
//! normal discovery, in place of NVIDIA's libraries, so that the CUDA backend's own code runs
//! on machines without a GPU. It is held to NVIDIA's documentation, not to gpukit's code:
//! each rule below links the page it comes from, and where the documentation leaves a rule
//! open the emulator's choice is said (a question for the first real GPU run).
//!
//! `cargo xtask cuda-emu run -- COMMAND` runs a program with it, and `cargo xtask cuda-emu
//! env` prints the variables that select it: `LD_LIBRARY_PATH` gets a folder of links named
//! `libcuda.so.1`, `libnvrtc.so.12`, `libcublas.so.12`, `libcublasLt.so.12` and
//! `libnccl.so.2` to this library. The library's own file is named after the package, so
//! nothing finds it by an NVIDIA name unless that folder is on the path; every link is the
//! same file, so the dynamic loader loads it once and the four libraries share one state.
//! The devices it reports are named `gpukit CUDA emulator`.
//!
//! ## What runs how, and the documentation each part follows
//!
//! - **Devices and contexts** ([`context`], [`api::driver`];
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html>):
//!   `GPUKIT_CUDA_EMU_DEVICES` H100-like devices (compute capability 9.0,
//!   `GPUKIT_CUDA_EMU_SMS` multiprocessors), primary contexts, the current context per
//!   thread, a call before `cuInit` is `CUDA_ERROR_NOT_INITIALIZED`, a destroyed or foreign
//!   handle `CUDA_ERROR_INVALID_HANDLE`, a sticky error poisons the device's context.
//! - **Memory** ([`memory`], [`api::mem`];
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html>): host pages in
//!   a reserved range, guard pages between allocations, addresses never reused, so that an
//!   access past an allocation or after its free is `CUDA_ERROR_ILLEGAL_ADDRESS`;
//!   `cuMemGetInfo` reflects use, allocations past `GPUKIT_CUDA_EMU_MEMORY` are
//!   `CUDA_ERROR_OUT_OF_MEMORY`; pinned, registered and managed memory, prefetch.
//! - **Copies and memsets** ([`api::mem`];
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>): which calls
//!   return before their copy is done, pageable memory staged, the synchronous ones on the
//!   legacy stream.
//! - **Streams and events** ([`stream`], [`mod@api::stream`];
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html>,
//!   <https://docs.nvidia.com/cuda/cuda-runtime-api/stream-sync-behavior.html>): a worker
//!   thread per stream runs its queue asynchronously; events are positions in it; the legacy
//!   and per-thread default streams; `cuLaunchHostFunc`, whose function may not call CUDA.
//! - **Races between streams** ([`hb`]): every operation's place in the happens-before order
//!   is recorded, and two unordered operations touching the same bytes, one writing, are
//!   reported whatever order they ran in (`GPUKIT_CUDA_EMU_RACES`).
//! - **Capture and graphs** ([`capture`];
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html>,
//!   <https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-graphs>): the
//!   three capture modes, the calls a capture forbids, graphs replayed with their independent
//!   branches concurrent.
//! - **Kernels** ([`compile`], [`module`], `runtime/`;
//!   <https://docs.nvidia.com/cuda/nvrtc/index.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html>,
//!   <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html>,
//!   <https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html>): the emulated NVRTC
//!   compiles CUDA C with the host's C++ compiler against the emulator's device header; a
//!   launch runs its blocks one after another in a seeded order on the stream's worker, a
//!   block's threads as fibers (real barriers, warps of 32 real lanes, shared memory per
//!   block), and every access to the emulator's memory is checked.
//! - **cuBLAS and NCCL** ([`api::cublas`], [`api::nccl`];
//!   <https://docs.nvidia.com/cuda/cublas/>,
//!   <https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html>): computed on the
//!   CPU in stream order; NCCL's communicators span the emulated devices of one process.
//! - **Fault injection** ([`faults`]).
//!
//! ## The helpers in place of inline PTX
//!
//! gpukit's CUDA C reaches PTX and hardware registers only through three functions
//! (`gpukit_core::CUDA_PTX_HELPERS`), which the emulator's header defines in C++ with their
//! documented semantics: `gk_cvt_f32_f16` (`cvt.f32.f16`, exact), `gk_cvt_rn_f16_f32`
//! (`cvt.rn.f16.f32`, to nearest even) and `gk_globaltimer` (`%globaltimer`, nanoseconds).
//! Other inline PTX does not compile here.
//!
//! ## What it does not model
//!
//! Timing (only order), fused multiply-add and TF32 rounding (contraction is off; cuBLAS
//! results agree with a GPU's to rounding, not bit for bit), PTX and cubins (only CUDA C
//! compiled by its NVRTC runs), memory coalescing, caches and banks, texture and surface
//! memory, cooperative launches and grid-wide synchronisation (blocks run one at a time),
//! forward progress between blocks, NCCL across processes (communicators span one
//! process's devices), and hardware limits beyond the device attributes it reports.
//! Integer division by zero in a kernel is a launch failure here (a trap of the
//! host CPU), an undefined value on a GPU.
//!
//! Every entry point's `unsafe` contract is the documented contract of the CUDA function of
//! the same name; those functions are not meant to be called from Rust.

#![warn(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::missing_safety_doc)]

pub mod api;
pub mod capture;
pub mod compile;
pub mod config;
pub mod context;
pub mod elf;
pub mod errors;
pub mod faults;
pub mod handles;
pub mod hb;
pub mod memory;
pub mod module;
pub mod stream;
pub mod work;
