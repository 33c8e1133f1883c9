//! The tutorials' helpers, which the workspace's other programs (the benchmarks of
//! `gpukit-bench`, the tools of `gpukit-tools`) share too: the command line ([`cli`]), the
//! context a program runs on, medians, human-readable sizes and the exit status. The
//! training tutorial's model and data are in [`digits`].
//!
//! Only gpukit and lexopt: a tutorial's first build compiles nothing it does not need. What
//! only the benchmarks need (their JSON reports) lives in `gpukit-bench`.

pub mod cli;
pub mod digits;
pub mod kernels;
pub mod parallel;

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
}
