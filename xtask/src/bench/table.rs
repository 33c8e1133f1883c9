//! The summary table of `cargo xtask bench`: every measured ratio of the benchmarks' JSON
//! reports beside its target, and whether it holds. The targets are the project's
//! performance goals, and this file is where they are written down (`groups`).
//!
//! Each [`Group`] reads one report, picks the records it is about and turns each into a
//! [`Row`]: a value, an optional [`Target`] and so a verdict, `holds`, `MISSED`, `n/a` (no
//! value: the report is missing, as when a benchmark skipped without a GPU, unreadable, has
//! no matching record, or the value is `null`) or `info` (a figure without a target). A
//! group that finds nothing still leaves one `n/a` row, so a target never drops out of the
//! table unseen. The table is printed and written as JSON (`summary.json`).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// How a value is compared with its target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    /// The value must be at least the target (a speed or a bandwidth ratio).
    AtLeast,
    /// The value must be at most the target (a cost ratio).
    AtMost,
}

/// A bound a measured value must meet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// The comparison.
    pub cmp: Cmp,
    /// The bound.
    pub bound: f64,
}

/// `>= bound`.
const fn at_least(bound: f64) -> Target {
    Target {
        cmp: Cmp::AtLeast,
        bound,
    }
}

/// `<= bound`.
const fn at_most(bound: f64) -> Target {
    Target {
        cmp: Cmp::AtMost,
        bound,
    }
}

impl Target {
    /// Whether `value` meets the target (a NaN never does).
    pub fn holds(self, value: f64) -> bool {
        match self.cmp {
            Cmp::AtLeast => value >= self.bound,
            Cmp::AtMost => value <= self.bound,
        }
    }

    /// `>=` or `<=`.
    pub fn symbol(self) -> &'static str {
        match self.cmp {
            Cmp::AtLeast => ">=",
            Cmp::AtMost => "<=",
        }
    }
}

/// What a row's value counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    /// A ratio (printed with `x`).
    Ratio,
    /// Billions of floating-point operations per second.
    Gflops,
    /// Billions of bytes per second.
    Gbps,
    /// Training rows per second.
    RowsPerSec,
    /// Milliseconds (lower is faster).
    Ms,
    /// Nanoseconds (lower is faster).
    Ns,
}

/// One line of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// The backend or device it ran on (`cpu`, `cuda`, `host`).
    pub device: String,
    /// The measured value; `None` where there is none (`n/a`).
    pub value: Option<f64>,
    /// What the value counts.
    pub unit: Unit,
    /// The target, if the figure has one.
    pub target: Option<Target>,
    /// Why there is no value, where that is known.
    pub note: Option<String>,
}

/// A row's verdict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// The value meets its target.
    Holds,
    /// The value misses its target.
    Missed,
    /// No value.
    NotAvailable,
    /// A value without a target.
    Info,
}

impl Verdict {
    /// As printed and written: `holds`, `MISSED`, `n/a`, `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Missed => "MISSED",
            Verdict::NotAvailable => "n/a",
            Verdict::Info => "info",
        }
    }
}

impl Row {
    fn new(
        name: String,
        device: &str,
        value: Option<f64>,
        unit: Unit,
        target: Option<Target>,
    ) -> Row {
        Row {
            name,
            device: device.to_owned(),
            value: value.filter(|v| v.is_finite()),
            unit,
            target,
            note: None,
        }
    }

    /// The verdict: `n/a` without a value, `info` without a target.
    pub fn verdict(&self) -> Verdict {
        match (self.value, self.target) {
            (None, _) => Verdict::NotAvailable,
            (Some(_), None) => Verdict::Info,
            (Some(v), Some(t)) if t.holds(v) => Verdict::Holds,
            (Some(_), Some(_)) => Verdict::Missed,
        }
    }

    /// The value as shown: `0.850x`, `120.3 GFLOP/s`, `12.34 GB/s`, `51234 rows/s`, `-`.
    pub fn value_text(&self) -> String {
        match (self.value, self.unit) {
            (None, _) => "-".to_owned(),
            (Some(v), Unit::Ratio) => format!("{v:.3}x"),
            (Some(v), Unit::Gflops) => format!("{v:.1} GFLOP/s"),
            (Some(v), Unit::Gbps) => format!("{v:.2} GB/s"),
            (Some(v), Unit::RowsPerSec) => format!("{v:.0} rows/s"),
            (Some(v), Unit::Ms) => format!("{v:.1} ms"),
            (Some(v), Unit::Ns) => format!("{v:.0} ns"),
        }
    }

    /// The target as shown: `>= 0.8x`, `<= 20 ms`, `-`.
    pub fn target_text(&self) -> String {
        match (self.target, self.unit) {
            (None, _) => "-".to_owned(),
            (Some(t), Unit::Ms) => format!("{} {} ms", t.symbol(), t.bound),
            (Some(t), Unit::Ns) => format!("{} {} ns", t.symbol(), t.bound),
            (Some(t), _) => format!("{} {}x", t.symbol(), t.bound),
        }
    }

    /// The row as written to `summary.json`.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "device": self.device,
            "value": self.value,
            "unit": match self.unit {
                Unit::Ratio => "x",
                Unit::Gflops => "GFLOP/s",
                Unit::Gbps => "GB/s",
                Unit::RowsPerSec => "rows/s",
                Unit::Ms => "ms",
                Unit::Ns => "ns",
            },
            "target": self.target.map(|t| t.bound),
            "comparison": self.target.map(|t| t.symbol()),
            "holds": self.verdict().as_str(),
            "note": self.note,
        })
    }
}

/// Where the reports are: transfer_bench's (its path can be chosen) and the folder of the
/// others (`NAME.json`).
#[derive(Debug)]
pub struct Reports {
    /// transfer_bench's report on the CPU.
    pub transfer: PathBuf,
    /// The folder of every other report.
    pub dir: PathBuf,
}

/// A report as read: absent, unreadable (why), or its records.
pub enum Loaded {
    /// No such file: the benchmark skipped (no GPU) or did not run.
    Missing,
    /// The file is not a JSON array; why.
    Unreadable(String),
    /// The report's records.
    Records(Vec<Value>),
}

impl Reports {
    /// The path of the report `name` (a file stem: `cuda_bench`).
    pub fn path(&self, name: &str) -> PathBuf {
        if name == "transfer_bench" {
            self.transfer.clone()
        } else {
            self.dir.join(format!("{name}.json"))
        }
    }

    /// The report `name`, read.
    pub fn load(&self, name: &str) -> Loaded {
        let path = self.path(name);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
            Err(err) => return Loaded::Unreadable(format!("{}: {err}", path.display())),
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(records)) => Loaded::Records(records),
            Ok(_) => Loaded::Unreadable(format!("{}: not a JSON array", path.display())),
            Err(err) => Loaded::Unreadable(format!("{}: {err}", path.display())),
        }
    }
}

/// Which records of a report a group is about, and the rows they make.
struct Group {
    /// The report's file stem.
    report: &'static str,
    /// The row shown, `n/a`, when nothing matched.
    missing: &'static str,
    /// The device shown on that row.
    device: &'static str,
    /// The target shown on that row.
    target: Option<Target>,
    /// The rows of one record (none where the record is not one of the group's).
    rows: fn(&Value) -> Vec<Row>,
}

/// The text of a record's field; empty where it is absent or not text.
pub fn text<'a>(r: &'a Value, key: &str) -> &'a str {
    r[key].as_str().unwrap_or("")
}

/// A record's number; `None` where it is absent or `null`.
pub fn num(r: &Value, key: &str) -> Option<f64> {
    r[key].as_f64()
}

/// A record's whole number (a size, a count); 0 where it is absent.
pub fn bytes(r: &Value, key: &str) -> u64 {
    r[key].as_u64().unwrap_or(0)
}

/// `4 KiB`, `16 MiB`, `1 GiB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

const KIB_64: u64 = 64 << 10;
const MIB: u64 = 1 << 20;
/// CPU copies: >= 0.8x memcpy at 64 KiB, >= 0.9x from 1 MiB.
const CPU_COPY_SMALL: Target = at_least(0.8);
const CPU_COPY_LARGE: Target = at_least(0.9);
const CPU_COPIES: [&str; 3] = ["d2d", "upload_pinned", "download_pinned"];

/// transfer_bench's CPU copies in `[lo, hi)` bytes.
fn cpu_copies(r: &Value, lo: u64, hi: u64, target: Target) -> Vec<Row> {
    let (kind, b) = (text(r, "kind"), bytes(r, "bytes"));
    if text(r, "backend") != "cpu" || !CPU_COPIES.contains(&kind) || b < lo || b >= hi {
        return Vec::new();
    }
    vec![Row::new(
        format!("{kind} {} vs memcpy", size(b)),
        "cpu",
        num(r, "ratio_vs_memcpy"),
        Unit::Ratio,
        Some(target),
    )]
}

/// pipeline_bench's triple buffering at compute:transfer ratio 1, from `min_batch` bytes.
fn triple_at_ratio_1(
    r: &Value,
    backend: &str,
    min_batch: u64,
    key: &str,
    target: Target,
) -> Vec<Row> {
    let b = bytes(r, "batch_bytes");
    if text(r, "backend") != backend
        || text(r, "pattern") != "triple"
        || num(r, "ratio") != Some(1.0)
        || b < min_batch
    {
        return Vec::new();
    }
    let what = match key {
        "efficiency" => "efficiency (of the max-stage bound)",
        "fraction_of_machine_bound" => "fraction of the machine's bound",
        _ => "speedup vs sequential",
    };
    vec![Row::new(
        format!("triple buffering, ratio 1, {} batches: {what}", size(b)),
        backend,
        num(r, key),
        Unit::Ratio,
        Some(target),
    )]
}

/// The groups, in the order of the table: targets on the CPU, targets on CUDA, then the
/// figures without targets.
fn groups() -> Vec<Group> {
    vec![
        Group {
            report: "transfer_bench",
            missing: "CPU copies (d2d, pinned up/download) at 64 KiB vs memcpy",
            device: "cpu",
            target: Some(CPU_COPY_SMALL),
            rows: |r| cpu_copies(r, KIB_64, MIB, CPU_COPY_SMALL),
        },
        Group {
            report: "transfer_bench",
            missing: "CPU copies (d2d, pinned up/download) from 1 MiB vs memcpy",
            device: "cpu",
            target: Some(CPU_COPY_LARGE),
            rows: |r| cpu_copies(r, MIB, u64::MAX, CPU_COPY_LARGE),
        },
        Group {
            report: "pipeline_bench",
            missing:
                "triple buffering, ratio 1, batches from 1 MiB: fraction of the machine's bound",
            device: "cpu",
            target: Some(at_least(0.85)),
            rows: |r| triple_at_ratio_1(r, "cpu", MIB, "fraction_of_machine_bound", at_least(0.85)),
        },
        Group {
            report: "pipeline_bench",
            missing: "triple buffering, ratio 1, batches from 1 MiB: speedup vs sequential",
            device: "cpu",
            target: Some(at_least(1.0)),
            rows: |r| triple_at_ratio_1(r, "cpu", MIB, "speedup_vs_sequential", at_least(1.0)),
        },
        Group {
            report: "ops_bench",
            missing: "built-in ops: our time / the faster of numpy and PyTorch (ops_bench)",
            device: "cpu",
            target: Some(at_most(1.0)),
            rows: |r| {
                let bench = text(r, "bench");
                if !matches!(bench, "roofline" | "math") || r["time_ratio_vs_fastest"].is_null() {
                    return Vec::new();
                }
                let against = if r["time_ratio_vs_torch"].is_null() {
                    "numpy"
                } else {
                    "the faster of numpy and PyTorch"
                };
                vec![Row::new(
                    format!(
                        "{} at {}: our time / {against}",
                        text(r, "op"),
                        size(bytes(r, "bytes"))
                    ),
                    text(r, "backend"),
                    num(r, "time_ratio_vs_fastest"),
                    Unit::Ratio,
                    Some(at_most(1.0)),
                )]
            },
        },
        Group {
            report: "ops_bench",
            missing: "math ops: speed-up over the op table's scalar body (ops_bench)",
            device: "cpu",
            target: None,
            rows: |r| {
                if text(r, "bench") != "math" || r["speedup_vs_table"].is_null() {
                    return Vec::new();
                }
                vec![Row::new(
                    format!(
                        "{} at {}: speed-up over the scalar body, one thread",
                        text(r, "op"),
                        size(bytes(r, "bytes"))
                    ),
                    text(r, "backend"),
                    num(r, "speedup_vs_table"),
                    Unit::Ratio,
                    None,
                )]
            },
        },
        Group {
            report: "startup_bench",
            missing: "GPU_DEVICE=cpu: a fresh process's first result (startup_bench)",
            device: "cpu",
            target: Some(at_most(STARTUP_CPU_MS)),
            rows: |r| startup_rows(r, true),
        },
        Group {
            report: "enqueue_bench",
            missing: "enqueue vs the backend's own launch of the same work (enqueue_bench)",
            device: "cpu",
            target: Some(at_most(1.3)),
            rows: |r| {
                // enqueue_bench's names say what they are measured against already.
                let name = text(r, "name");
                // Against PyTorch's eager op the target is a quarter of its cost; a context
                // with two streams also records the event that orders the other after it.
                let bound = if name.ends_with("vs torch.add") {
                    0.25
                } else if name.contains("with 2 streams") {
                    1.6
                } else {
                    1.3
                };
                vec![Row::new(
                    format!("enqueue {name}"),
                    match text(r, "backend") {
                        "" => "cpu",
                        backend => backend,
                    },
                    num(r, "ratio"),
                    Unit::Ratio,
                    Some(at_most(bound)),
                )]
            },
        },
        Group {
            report: "cuda_bench",
            missing: "pinned upload/download from 8 MiB vs raw cudarc",
            device: "cuda",
            target: Some(at_least(0.97)),
            rows: |r| {
                let (kind, b) = (text(r, "kind"), bytes(r, "bytes"));
                if text(r, "bench") != "transfer"
                    || !["upload_pinned", "download_pinned"].contains(&kind)
                    || b < 8 * MIB
                {
                    return Vec::new();
                }
                vec![Row::new(
                    format!("{kind} {} vs raw cudarc", size(b)),
                    "cuda",
                    num(r, "ratio_vs_raw"),
                    Unit::Ratio,
                    Some(at_least(0.97)),
                )]
            },
        },
        Group {
            report: "cuda_bench",
            missing: "op enqueue vs cuLaunchKernel",
            device: "cuda",
            target: Some(at_most(1.1)),
            rows: |r| {
                // The launches: the upload's enqueue has its figure on the emulator.
                if text(r, "bench") != "enqueue" || text(r, "kind").starts_with("upload") {
                    return Vec::new();
                }
                let (what, against) = enqueue_kind(text(r, "kind"));
                // Against the launch and the ordering event a context with several streams
                // records after it, or cudarc's safe API: information, the target is against
                // the launch alone.
                let target = (against == "raw cuLaunchKernel").then(|| at_most(1.1));
                vec![Row::new(
                    format!("enqueue {what} vs {against}"),
                    "cuda",
                    num(r, "ratio_vs_raw"),
                    Unit::Ratio,
                    target,
                )]
            },
        },
        Group {
            report: "cuda_bench_emu",
            missing: "host cost per op over raw cudarc (CUDA emulator: host-only)",
            device: "cuda-emu",
            target: Some(at_most(250.0)),
            rows: |r| {
                if text(r, "bench") != "enqueue" {
                    return Vec::new();
                }
                let (what, against) = enqueue_kind(text(r, "kind"));
                // The target is against cudarc's own API, as a user of it writes the same
                // work; over the bare driver calls the cost is information. Both loops are
                // queued behind a gate (nothing runs meanwhile), so below zero is ours
                // costing less.
                let target = against.starts_with("cudarc").then(|| at_most(250.0));
                vec![Row::new(
                    format!("host cost of {what} over {against} (CUDA emulator: host-only)"),
                    "cuda-emu",
                    num(r, "over_raw_ns"),
                    Unit::Ns,
                    target,
                )]
            },
        },
        Group {
            report: "pipeline_bench_cuda",
            missing: "triple buffering, ratio 1: speedup vs sequential",
            device: "cuda",
            target: Some(at_least(2.7)),
            rows: |r| triple_at_ratio_1(r, "cuda", 0, "speedup_vs_sequential", at_least(2.7)),
        },
        Group {
            report: "pipeline_bench_cuda",
            missing: "triple buffering, ratio 1: efficiency (of the max-stage bound)",
            device: "cuda",
            target: Some(at_least(0.95)),
            rows: |r| triple_at_ratio_1(r, "cuda", 0, "efficiency", at_least(0.95)),
        },
        Group {
            report: "graph_bench_cuda",
            missing: "host cost per op, eager / graph replay",
            device: "cuda",
            target: Some(at_least(5.0)),
            rows: |r| {
                vec![Row::new(
                    format!(
                        "host cost per op of {} ops, eager / graph replay",
                        bytes(r, "ops")
                    ),
                    "cuda",
                    num(r, "ratio_eager_vs_replay"),
                    Unit::Ratio,
                    Some(at_least(5.0)),
                )]
            },
        },
        Group {
            report: "graph_bench",
            missing: "host cost per op, eager / graph replay",
            device: "cpu",
            target: None,
            rows: |r| {
                vec![Row::new(
                    format!(
                        "host cost per op of {} ops, eager / graph replay",
                        bytes(r, "ops")
                    ),
                    match text(r, "backend") {
                        "" => "cpu",
                        backend => backend,
                    },
                    num(r, "ratio_eager_vs_replay"),
                    Unit::Ratio,
                    None,
                )]
            },
        },
        Group {
            report: "ops_bench",
            missing: "built-in op bandwidth vs memcpy (roofline)",
            device: "cpu",
            target: None,
            rows: |r| {
                if text(r, "bench") != "roofline" {
                    return Vec::new();
                }
                vec![Row::new(
                    format!(
                        "op {} on {} vs memcpy",
                        text(r, "op"),
                        size(bytes(r, "bytes"))
                    ),
                    text(r, "backend"),
                    num(r, "ratio_vs_memcpy"),
                    Unit::Ratio,
                    None,
                )]
            },
        },
        Group {
            report: "ops_bench",
            missing: "gemm GFLOP/s",
            device: "cpu",
            target: None,
            rows: |r| {
                if text(r, "bench") != "gemm" {
                    return Vec::new();
                }
                let n = bytes(r, "n");
                let mut rows = vec![Row::new(
                    format!("gemm {n}^3 f32: {}", text(r, "implementation")),
                    text(r, "device"),
                    num(r, "gflops"),
                    Unit::Gflops,
                    None,
                )];
                if text(r, "key") == "ours" && !r["time_ratio_vs_fastest"].is_null() {
                    let against = if r["time_ratio_vs_torch"].is_null() {
                        "numpy's"
                    } else {
                        "the faster of numpy's and PyTorch's"
                    };
                    // The target holds from n = 512 (smaller products are a matter of
                    // threads starting, not of the kernel): at most 1.1x the faster one's
                    // time, an OpenBLAS with a kernel tuned for each CPU.
                    rows.push(Row::new(
                        format!("gemm {n}^3 f32: our time / {against}"),
                        text(r, "device"),
                        num(r, "time_ratio_vs_fastest"),
                        Unit::Ratio,
                        (n >= 512).then_some(at_most(1.1)),
                    ));
                }
                rows
            },
        },
        Group {
            report: "kernel_bench",
            missing: "#[kernel] tiled gemm (CPU twin) / plain closure",
            device: "cpu",
            target: Some(at_most(2.0)),
            rows: kernel_rows,
        },
        Group {
            report: "kernel_bench_vulkan",
            missing: "#[kernel] saxpy / hand-written WGSL",
            device: "vulkan",
            target: None,
            rows: kernel_rows,
        },
        Group {
            report: "kernel_bench_cuda",
            missing: "#[kernel] saxpy / hand-written CUDA C",
            device: "cuda",
            target: None,
            rows: kernel_rows,
        },
        Group {
            report: "startup_bench",
            missing: "start-up of auto and vulkan, and each probe alone (startup_bench)",
            device: "cpu",
            target: None,
            rows: |r| startup_rows(r, false),
        },
        Group {
            report: "allreduce_bench",
            missing: ALL_REDUCE_MISSING,
            device: "cpu",
            target: None,
            rows: all_reduce_rows,
        },
        Group {
            report: "allreduce_bench",
            missing: DATA_PARALLEL_MISSING,
            device: "cpu",
            target: None,
            rows: data_parallel_rows,
        },
        Group {
            report: "allreduce_bench_cuda",
            missing: ALL_REDUCE_MISSING,
            device: "cuda",
            target: None,
            rows: all_reduce_rows,
        },
        Group {
            report: "allreduce_bench_cuda",
            missing: DATA_PARALLEL_MISSING,
            device: "cuda",
            target: None,
            rows: data_parallel_rows,
        },
    ]
}

/// The first result of a fresh process with `GPU_DEVICE=cpu`, in milliseconds at most.
const STARTUP_CPU_MS: f64 = 20.0;

/// `startup_bench`'s rows: `GPU_DEVICE=cpu`'s first result against its target (`cpu`), or
/// every other device's (and probe's) time, for information.
fn startup_rows(r: &Value, cpu: bool) -> Vec<Row> {
    let device = text(r, "device");
    if (device == "cpu") != cpu {
        return Vec::new();
    }
    let (what, key) = if device.starts_with("probe:") {
        (format!("{device} alone in a fresh process"), "open_ms")
    } else {
        (
            format!(
                "GPU_DEVICE={device} ({}): a fresh process's first result",
                text(r, "backend")
            ),
            "first_result_ms",
        )
    };
    vec![Row::new(
        what,
        "host",
        num(r, key),
        Unit::Ms,
        cpu.then_some(at_most(STARTUP_CPU_MS)),
    )]
}

/// `kernel_bench`'s rows: `#[kernel]` time over hand-written time; the CPU twin of the tiled
/// gemm is to stay within 2x of the plain closure.
fn kernel_rows(r: &serde_json::Value) -> Vec<Row> {
    let bench = text(r, "bench");
    let target = (bench == "gemm").then_some(at_most(2.0));
    vec![Row::new(
        format!(
            "#[kernel] {bench} / hand-written, size {}",
            bytes(r, "size")
        ),
        text(r, "backend"),
        num(r, "time_ratio"),
        Unit::Ratio,
        target,
    )]
}

const ALL_REDUCE_MISSING: &str = "all-reduce per size: busbw, and busbw / memcpy";
const DATA_PARALLEL_MISSING: &str = "data-parallel training: rows/s, group / one device";

/// The device set a record ran on (`cpu:0,1`, `cuda:0,1,2,3`), else its backend.
fn devices(r: &Value) -> &str {
    match text(r, "devices") {
        "" => text(r, "backend"),
        set => set,
    }
}

/// `allreduce_bench`'s all-reduce rows, two per size: the bus bandwidth (NCCL-tests'
/// `busbw`, 0 with one rank) and its ratio to a host `memcpy` of the same bytes.
fn all_reduce_rows(r: &Value) -> Vec<Row> {
    if text(r, "bench") != "all_reduce" {
        return Vec::new();
    }
    let ranks = match bytes(r, "ranks") {
        1 => "1 rank".to_owned(),
        n => format!("{n} ranks"),
    };
    let what = format!(
        "all-reduce {} per rank, {ranks} ({})",
        size(bytes(r, "bytes")),
        text(r, "implementation")
    );
    vec![
        Row::new(
            format!("{what}: busbw"),
            devices(r),
            num(r, "busbw_gbps"),
            Unit::Gbps,
            None,
        ),
        Row::new(
            format!("{what}: busbw / memcpy"),
            devices(r),
            num(r, "busbw_vs_memcpy"),
            Unit::Ratio,
            None,
        ),
    ]
}

/// `allreduce_bench`'s data-parallel training rows: rows per second of the group and of its
/// first device alone, and group / one device (above 1: the group trains faster).
fn data_parallel_rows(r: &Value) -> Vec<Row> {
    if text(r, "bench") != "data_parallel" {
        return Vec::new();
    }
    let group = devices(r);
    // The single-device runs use the group's first device: `cpu:0,1` -> `cpu:0`.
    let first = match group.split_once(':') {
        Some((backend, ids)) => format!("{backend}:{}", ids.split(',').next().unwrap_or("")),
        None => group.to_owned(),
    };
    let ranks = bytes(r, "ranks");
    vec![
        Row::new(
            format!("data-parallel training, {ranks} devices: rows/s"),
            group,
            num(r, "group_rows_per_s"),
            Unit::RowsPerSec,
            None,
        ),
        Row::new(
            "data-parallel training, 1 device: rows/s".to_owned(),
            &first,
            num(r, "single_rows_per_s"),
            Unit::RowsPerSec,
            None,
        ),
        Row::new(
            format!("data-parallel training, {ranks} devices / 1 device"),
            group,
            num(r, "ratio_vs_single"),
            Unit::Ratio,
            None,
        ),
    ]
}

/// Every row of the table, from the reports in `reports`.
pub fn rows(reports: &Reports) -> Vec<Row> {
    let mut out = Vec::new();
    for group in groups() {
        let (found, note) = match reports.load(group.report) {
            Loaded::Records(records) => (records.iter().flat_map(group.rows).collect(), None),
            Loaded::Missing => (
                Vec::new(),
                Some(format!("no {}.json (skipped or not run)", group.report)),
            ),
            Loaded::Unreadable(why) => (Vec::new(), Some(why)),
        };
        if found.is_empty() {
            let mut row = Row::new(
                group.missing.to_owned(),
                group.device,
                None,
                Unit::Ratio,
                group.target,
            );
            row.note =
                Some(note.unwrap_or_else(|| format!("no such record in {}.json", group.report)));
            out.push(row);
        } else {
            out.extend(found);
        }
    }
    out
}

/// The table as printed: a header with the load averages, one line per row, and a count of
/// the verdicts.
pub fn render(rows: &[Row], load_start: &str, load_end: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "bench summary: every figure is a median over its benchmark's runs (see each program)"
    );
    let _ = writeln!(
        s,
        "load average (1, 5, 15 min) at start: {load_start}; at end: {load_end}"
    );
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let dev_w = rows
        .iter()
        .map(|r| r.device.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        s,
        "{:<name_w$}  {:<dev_w$}  {:>16}  {:>9}  verdict",
        "name", "device", "value", "target"
    );
    for row in rows {
        let _ = write!(
            s,
            "{:<name_w$}  {:<dev_w$}  {:>16}  {:>9}  {}",
            row.name,
            row.device,
            row.value_text(),
            row.target_text(),
            row.verdict().as_str()
        );
        if let (Verdict::NotAvailable, Some(note)) = (row.verdict(), &row.note) {
            let _ = write!(s, " ({note})");
        }
        s.push('\n');
    }
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict() == v).count();
    let _ = writeln!(
        s,
        "targets: {} hold, {} MISSED, {} n/a; {} figures without a target",
        count(Verdict::Holds),
        count(Verdict::Missed),
        rows.iter()
            .filter(|r| r.target.is_some() && r.verdict() == Verdict::NotAvailable)
            .count(),
        rows.iter().filter(|r| r.target.is_none()).count()
    );
    s
}

/// `summary.json`: the note on medians, the load averages and the rows.
pub fn to_json(rows: &[Row], load_start: &str, load_end: &str) -> Value {
    json!({
        "note": "every value is a median over its benchmark's runs",
        "load_start": load_start,
        "load_end": load_end,
        "rows": rows.iter().map(Row::to_json).collect::<Vec<Value>>(),
    })
}

/// The first three fields of `/proc/loadavg` (the 1, 5 and 15 minute load averages), or
/// why they could not be read.
pub fn load_average() -> String {
    load_average_from(Path::new("/proc/loadavg"))
}

fn load_average_from(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        Err(err) => format!("unavailable ({}: {err})", path.display()),
    }
}

#[cfg(test)]
mod tests;

/// What a `cuda_bench` enqueue record measures, and the raw call it is measured against:
/// `add_f32_1024` in a context with two streams, `_one_stream` in one with one, and
/// `_vs_evented` against the launch plus the event a context with several streams records.
fn enqueue_kind(kind: &str) -> (String, &'static str) {
    if let Some(k) = kind.strip_suffix("_vs_builder") {
        let (what, _) = enqueue_kind(k);
        return (what, "cudarc launch_builder");
    }
    if let Some(k) = kind.strip_suffix("_vs_memcpy_htod") {
        return (k.to_owned(), "cudarc memcpy_htod");
    }
    if let Some(k) = kind.strip_suffix("_vs_evented") {
        return (
            format!("{k} (2 streams)"),
            "raw cuLaunchKernel + cuEventRecord",
        );
    }
    if let Some(k) = kind.strip_suffix("_one_stream") {
        return (format!("{k} (1 stream)"), "raw cuLaunchKernel");
    }
    if kind.starts_with("upload") {
        return (kind.to_owned(), "raw cuMemcpyHtoDAsync");
    }
    (format!("{kind} (2 streams)"), "raw cuLaunchKernel")
}
