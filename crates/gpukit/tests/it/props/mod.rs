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
//!
//! Case counts: each property has a default sized for CI on two cores; the environment
//! variable `PROPTEST_CASES=N` raises every property to at least `N` cases (a GPU run asks
//! for more), and never lowers one below its default. A value that is not a number fails
//! the tests rather than being ignored.
//!
//! Float tolerances are derived, not guessed: see `tolerance.rs`.

use crate::{backend_tests, common};
mod cross;
mod cross_rejects;
mod cuda_vs_cpu;
mod ops;
mod programs;
mod scan;
mod table;
mod tolerance;
mod views;

use std::ops::Bound;

use common::{cases, harness_error};

use gpukit::{Float, Gemm, GpuArray, Numeric};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

// ---------------------------------------------------------------------------------------
// Harness glue
// ---------------------------------------------------------------------------------------

/// Runs `test` on `default_cases` inputs drawn from `strategy` (or more: see [`cases`]); a
/// failure becomes a `gpukit::Error` whose message holds the shrunk input.
pub(crate) fn check<S>(
    default_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> gpukit::Result<()>
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases: cases(default_cases)?,
        // Failures print their shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&strategy, test)
        .map_err(|e| harness_error("proptest", e.to_string()))
}

/// Turns a library error into a test-case failure.
pub(crate) trait OrFail<T> {
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

#[test]
fn proptest_cases_raises_the_defaults_and_never_lowers_them() {
    use std::env::VarError;
    let from = |default: u32, var: Result<&str, VarError>| {
        common::cases_from(default, var.map(str::to_owned))
    };
    assert_eq!(from(32, Err(VarError::NotPresent)).ok(), Some(32));
    assert_eq!(from(32, Ok("1000")).ok(), Some(1000));
    assert_eq!(from(32, Ok(" 64 ")).ok(), Some(64));
    assert_eq!(from(512, Ok("64")).ok(), Some(512));
    assert!(from(32, Ok("many")).is_err());
    assert!(from(32, Ok("-1")).is_err());
    assert!(from(32, Err(VarError::NotUnicode("x".into()))).is_err());
}
