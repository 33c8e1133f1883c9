//! Bad input: every case of the SPEC's error list that applies, each checked for its exact
//! error variant and for leaving its outputs untouched.
//!
//! Array, op and launch cases run per backend through `backend_tests!`; device specs and
//! configuration files are not about a backend and are plain tests. One file per kind of
//! input: wrong shapes and sizes, objects of another context, launches and kernels, devices
//! and configuration.

mod contexts;
mod devices;
mod launches;
mod shapes;

use crate::{backend_tests, common, cpu_tests};

use std::path::Path;

use gpukit::{
    BinaryOp, Config, DeviceSpec, Error, FallbackPolicy, Gemm, HostUse, KernelSpec, LaunchConfig,
    Out, Shape, SpecOrigin, UnaryOp,
};

use common::{vector_add_spec, VectorAdd, VECTOR_ADD_SRC};

/// A second context, always on the CPU backend: its objects never belong to `ctx`.
fn other_context() -> gpukit::Result<gpukit::Context> {
    gpukit::Context::new(DeviceSpec::Cpu(None))
}

/// Asserts a `LengthMismatch` with the given lengths.
#[track_caller]
fn assert_mismatch<T: std::fmt::Debug>(r: gpukit::Result<T>, expected: usize, got: usize) {
    match r {
        Err(Error::LengthMismatch {
            expected: e,
            got: g,
            ..
        }) => assert_eq!((e, g), (expected, got)),
        other => {
            panic!("expected LengthMismatch {{ expected: {expected}, got: {got} }}, got {other:?}")
        }
    }
}

#[track_caller]
fn assert_context_mismatch<T: std::fmt::Debug>(r: gpukit::Result<T>) {
    assert!(
        matches!(r, Err(Error::ContextMismatch { .. })),
        "expected ContextMismatch, got {r:?}"
    );
}

#[track_caller]
fn assert_out_of_range<T>(r: gpukit::Result<T>) {
    match r {
        Err(Error::OutOfRange { .. }) => {}
        Err(e) => panic!("expected OutOfRange, got {e:?}"),
        Ok(_) => panic!("expected OutOfRange, got Ok"),
    }
}

#[track_caller]
fn assert_invalid_launch(r: gpukit::Result<()>, what: &str) {
    assert!(
        matches!(r, Err(Error::InvalidLaunch { ref kernel, .. }) if kernel == "vector_add"),
        "{what}: expected InvalidLaunch, got {r:?}"
    );
}
