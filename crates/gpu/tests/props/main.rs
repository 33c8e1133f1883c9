//! Property tests, one body per property, run on every backend through `backend_tests!`:
//!
//! - every built-in op against a float64 reference (floats) or exact wrapping arithmetic
//!   (integers), on random sizes (empty included) and random values;
//! - random programs of fills, ops, copies, asynchronous transfers and events over one to
//!   four streams, run with no synchronisation beyond what the program itself says, against
//!   the same program interpreted sequentially on the host: the automatic cross-stream
//!   ordering at work;
//! - the laws of views: nested slicing against host slicing, out-of-range requests, writes
//!   through mutable views and `split_at_mut`.
//!
//! Each body drives proptest's [`TestRunner`] itself (rather than the `proptest!` macro) so
//! that the same body serves every backend. A failure reports the shrunk input.

#[path = "../common/mod.rs"]
mod common;
mod cuda_vs_cpu;
mod ops;
mod programs;
mod views;

use std::ops::Bound;

use gpu::{Float, Gemm, GpuArray, Numeric};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ---------------------------------------------------------------------------------------
// Harness glue
// ---------------------------------------------------------------------------------------

/// Runs `test` on `cases` inputs drawn from `strategy`; a failure becomes a `gpu::Error`
/// whose message holds the shrunk input.
fn check<S>(
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> gpu::Result<()>
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases,
        // Failures print their shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&strategy, test)
        .map_err(|e| gpu::Error::Backend {
            backend: "test",
            call: "proptest",
            message: e.to_string(),
        })
}

/// Turns a library error into a test-case failure.
trait OrFail<T> {
    fn tc(self) -> Result<T, TestCaseError>;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn tc(self) -> Result<T, TestCaseError> {
        self.map_err(|e| TestCaseError::fail(e.to_string()))
    }
}

/// An array length: empty and tiny lengths are drawn often, the rest up to `max`.
fn length(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 1 => 1..=8usize, 8 => 0..=max]
}

/// Deterministic pseudo-random values in -10..10 with a granularity of 1/64 (exact in f32).
fn data(seed: u32, len: usize) -> Vec<f32> {
    let mut x = u64::from(seed) ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % 1281) as f32 - 640.0) / 64.0
        })
        .collect()
}
