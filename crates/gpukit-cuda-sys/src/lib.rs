//! # gpukit-cuda-sys
//!
//! The raw layer of the `gpukit` workspace, under the CUDA backend (`gpukit-cuda`):
//!
//! - [`discover`]: finds libcuda, libnvrtc and libcublas/libcublasLt (`CUDA_HOME`,
//!   `CUDA_PATH`, `/usr/local/cuda*`, the loader's cache and system folders, and the
//!   `nvidia/*/lib` folders of Python's site-packages) and loads each by absolute path, so
//!   that cudarc's own loader, which opens libraries by name, then finds the same copy;
//! - [`mod@probe`]: a typed availability report (driver missing, too old, no device, with every
//!   path searched and the loader's message) that never panics, also under `panic = "abort"`;
//! - [`nvrtc`] and [`cublas`]: NVRTC and cuBLAS through the committed bindgen declarations in
//!   [`ffi`], loaded by path. cudarc binds these too, but finds them only under the file
//!   names of the CUDA major version it was built for, and panics when they are missing;
//!   loading them here works with whichever CUDA 11, 12 or 13 copy is installed and turns
//!   every failure into data;
//! - [`kernels`]: the CUDA C of the built-in ops, compiled at run time by NVRTC.
//!
//! Nothing here needs a CUDA toolkit or libclang to build: the declarations in [`ffi`] are
//! generated offline by `cargo xtask bindgen` and committed. The driver API beyond the probe
//! is reached through cudarc, in `gpukit-cuda`.
//!
//! Dependencies: `libc` (dlopen flags), `libloading` (the handle type bindgen's
//! `--dynamic-loading` output is built on; opened through its `os::unix::Library::open`,
//! which is dlopen with our flags) and `thiserror`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod cublas;
pub mod discover;
pub mod ffi;
pub mod kernels;
pub mod nvrtc;
pub mod probe;

pub use discover::{Lib, LibError};
pub use probe::{probe, DeviceProbe, Probe, ProbeError};
