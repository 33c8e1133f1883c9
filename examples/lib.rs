//! Helpers shared by the example programs and benchmarks: their command lines ([`cli`]),
//! medians of repeated timings, human-readable sizes, and the benchmarks' JSON reports.

pub mod cli;
pub mod digits;

use std::time::Instant;

use serde::Serialize;

/// The median of the samples (the mean of the middle two for an even count); `None` when
/// there are none.
pub fn median(samples: &mut [f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    Some(if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    })
}

/// The median milliseconds of one batch's `stage` in a pipeline run (from its timeline's
/// spans); NaN for a run without batches.
pub fn median_stage_ms(report: &gpukit::Report, stage: gpukit::Stage) -> f64 {
    let mut ms: Vec<f64> = report
        .timeline
        .spans
        .iter()
        .filter(|s| s.stage == stage)
        .map(|s| s.ms())
        .collect();
    median(&mut ms).unwrap_or(f64::NAN)
}

/// Runs `f` `runs` times after one warm-up run and returns the median wall time in seconds.
pub fn median_seconds<E>(runs: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    f()?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(median(&mut samples).unwrap_or(f64::NAN))
}

/// The context an example runs on: the device `--device` named, else `Context::default()`
/// (`GPU_DEVICE`, else CUDA when usable, else the CPU).
pub fn open_context(device: Option<gpukit::DeviceSpec>) -> gpukit::Result<gpukit::Context> {
    match device {
        Some(spec) => gpukit::Context::new(spec),
        None => gpukit::Context::default(),
    }
}

/// `bytes` as `4 KiB`, `16 MiB`, `1 GiB`.
pub fn fmt_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
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

/// The exit status of a program whose work is `result`: success, or the error's whole chain
/// (`gpukit::error_chain`) on stderr after `program: error: `, and failure.
pub fn exit_status(
    program: &str,
    result: Result<(), Box<dyn std::error::Error>>,
) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: error: {}", gpukit::error_chain(&*e));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(1 << 30), "1 GiB");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
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
