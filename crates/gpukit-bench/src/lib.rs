//! What the benchmarks of the gpukit workspace share beyond the tutorials' helpers: timing
//! repeated runs, throughput, and the JSON reports that `cargo xtask bench` reads into its
//! summary table and `docs/BENCHMARKS.md`.
//!
//! The benchmarks are this package's examples (`cargo run --release --example ops_bench`):
//! `transfer_bench`, `cuda_bench`, `pipeline_bench`, `graph_bench`, `ops_bench`,
//! `enqueue_bench`, `startup_bench`, `kernel_bench` and `allreduce_bench`, each printing
//! ratios against a baseline measured in the same run (`startup_bench`: milliseconds beside
//! an empty process's). The command line, medians and sizes come from
//! `gpukit_examples`, which the tutorials use too; this package adds what only benchmarks
//! need (serde_json, the `gemm` crate, raw cudarc), so that a tutorial's first build does
//! not compile them. `torch_compare.py`, beside this package's manifest, runs the work of
//! `cuda_bench` and `pipeline_bench` through PyTorch.

use std::time::Instant;

use gpukit_examples::median;
use serde::Serialize;

/// Times `runs` runs of `f` (at least one) after one warm-up run: the seconds of each.
pub fn samples<E>(runs: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<Vec<f64>, E> {
    f()?;
    let mut seconds = Vec::with_capacity(runs.max(1));
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        f()?;
        seconds.push(t.elapsed().as_secs_f64());
    }
    Ok(seconds)
}

/// Runs `f` `runs` times (at least once) after one warm-up run and returns the median wall
/// time in seconds.
pub fn median_seconds<E>(runs: usize, f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let mut seconds = samples(runs, f)?;
    Ok(median(&mut seconds).unwrap_or(f64::NAN))
}

/// The median of `samples`, NaN where there are none (a report writes it as `null`).
pub fn median_or_nan(mut samples: Vec<f64>) -> f64 {
    median(&mut samples).unwrap_or(f64::NAN)
}

/// Throughput in GB/s (10^9 bytes per second).
pub fn gbps(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

/// Writes `records` to `path` as a JSON array, one record per line; a number that is not
/// finite is written as `null`. The error names the file.
pub fn write_json<T: Serialize>(path: &str, records: &[T]) -> Result<(), String> {
    std::fs::write(path, json_lines(records)?).map_err(|e| format!("cannot write {path}: {e}"))
}

/// `records` as a JSON array with one record per line.
fn json_lines<T: Serialize>(records: &[T]) -> Result<String, String> {
    let lines = records
        .iter()
        .map(|record| serde_json::to_string(record).map(|line| format!("  {line}")))
        .collect::<Result<Vec<String>, _>>()
        .map_err(|e| format!("cannot write a record as JSON: {e}"))?;
    if lines.is_empty() {
        return Ok("[]\n".to_owned());
    }
    Ok(format!("[\n{}\n]\n", lines.join(",\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_time_every_run_after_a_warm_up() {
        let mut calls = 0;
        let seconds = samples::<()>(3, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, seconds.len()), (4, 3));
        assert!(median_seconds::<()>(0, || Ok(())).unwrap() >= 0.0);
        assert!(median_or_nan(Vec::new()).is_nan());
        assert_eq!(median_or_nan(vec![3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn json_has_one_record_per_line_with_escapes_and_nulls() {
        #[derive(Serialize)]
        struct Record {
            a: &'static str,
            b: f64,
            c: usize,
        }
        let text = json_lines(&[
            Record {
                a: "x\"y",
                b: f64::NAN,
                c: 4096,
            },
            Record {
                a: "z",
                b: 0.5,
                c: 1,
            },
        ])
        .unwrap();
        assert_eq!(
            text,
            "[\n  {\"a\":\"x\\\"y\",\"b\":null,\"c\":4096},\n  {\"a\":\"z\",\"b\":0.5,\"c\":1}\n]\n"
        );
        assert_eq!(json_lines::<Record>(&[]).unwrap(), "[]\n");
    }
}
