//! Helpers shared by the example programs and benchmarks: medians of repeated timings,
//! human-readable sizes, and a tiny JSON writer for benchmark records.

use std::time::Instant;

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

/// A value in a JSON record.
#[derive(Debug, Clone)]
pub enum Json {
    /// A string.
    Str(String),
    /// A number (non-finite numbers are written as `null`).
    Num(f64),
}

/// Writes records (lists of key/value pairs) as a JSON array of objects.
pub fn to_json(records: &[Vec<(&str, Json)>]) -> String {
    let mut out = String::from("[\n");
    for (i, rec) in records.iter().enumerate() {
        out.push_str("  {");
        for (j, (k, v)) in rec.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("{}: ", quote(k)));
            match v {
                Json::Str(s) => out.push_str(&quote(s)),
                Json::Num(n) if n.is_finite() => out.push_str(&format!("{n}")),
                Json::Num(_) => out.push_str("null"),
            }
        }
        out.push('}');
        if i + 1 < records.len() {
            out.push(',');
        }
        out.push('\n');
    }
    out.push(']');
    out.push('\n');
    out
}

fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if (c as u32) < 0x20 => q.push_str(&format!("\\u{:04x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
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
    fn json_escapes_and_nulls() {
        let s = to_json(&[vec![
            ("a", Json::Str("x\"y".into())),
            ("b", Json::Num(f64::NAN)),
        ]]);
        assert_eq!(s, "[\n  {\"a\": \"x\\\"y\", \"b\": null}\n]\n");
    }
}
