//! `#[kernel]`s: a set of small kernels over the language, each against plain Rust on host
//! slices, on every backend (fixed inputs in `language`, random ones in `props`); the bounds-check contract; the CPU backend's race checker; their CUDA C through NVRTC. (The
//! examples' kernels, saxpy, tiled gemm, two reductions, stencil and convolution, are property
//! tested in `examples/tests/kernel_examples.rs`.)

mod faults;
mod language;
mod nvrtc;
mod props;
mod races;
