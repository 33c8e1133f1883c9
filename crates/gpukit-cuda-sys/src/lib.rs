//! # gpukit-cuda-sys
//!
//! The raw layer of the `gpukit` workspace, under the CUDA backend (`gpukit-cuda`):
//!
//! - [`discover`]: finds libcuda, libnvrtc and libcublas/libcublasLt (`CUDA_HOME`,
//!   `CUDA_PATH`, `/usr/local/cuda*`, the loader's cache and system folders, and the
//!   `nvidia/*/lib` folders of Python's site-packages) and loads each by absolute path, so
//!   that cudarc's own loader, which opens libraries by name, then finds the same copy;
//! - [`mod@probe`]: a typed availability report (driver missing, too old, no device, with every
//!   path searched and the loader's message) that never panics, also under `panic = "abort"`.
//!   The driver is called through cudarc's raw `driver::sys`, the workspace's one binding of
//!   the driver API: [`probe::driver`] makes sure cudarc reaches the library found here, and
//!   [`probe::DriverLib::require`] that every entry point a caller will use is there, so
//!   cudarc's own loader (which panics on a missing library or symbol) never fails;
//! - [`nvrtc`] and [`cublas`]: NVRTC and cuBLAS through the committed bindgen declarations in
//!   [`ffi`], loaded by path. cudarc binds these too, but finds them only under the file
//!   names of the CUDA major version it was built for, and panics when they are missing;
//!   loading them here works with whichever CUDA 11, 12 or 13 copy is installed and turns
//!   every failure into data;
//!
//! Nothing here needs a CUDA toolkit or libclang to build: the declarations in [`ffi`] are
//! generated offline by `cargo xtask bindgen` and committed, and cudarc resolves the
//! driver's symbols at run time.
//!
//! Dependencies: `cudarc` (the driver API, with `dynamic-loading`), `libc` (dlopen flags),
//! `libloading` (the handle type bindgen's `--dynamic-loading` output is built on; opened
//! through its `os::unix::Library::open`, which is dlopen with our flags) and `thiserror`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod cublas;
pub mod discover;
pub mod ffi;
pub mod nvrtc;
pub mod probe;

pub use discover::{Lib, LibError};
pub use probe::{probe, DeviceProbe, Probe, ProbeError};
