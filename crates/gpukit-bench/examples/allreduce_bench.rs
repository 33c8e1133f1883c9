//! All-reduce bus bandwidth over a device group against the machine's `memcpy` roofline,
//! and data-parallel training throughput on the group against one device, in one process.
//!
//! **All-reduce.** The group (`--devices`, default `cpu:0..2`) sums one f32 array per
//! device in place through [`DeviceGroup::communicator`] (NCCL on CUDA devices where it
//! loads, else the in-process implementation; the program prints which, and why NCCL was
//! passed over). For each size in bytes per rank (64 KiB, 1 MiB, 16 MiB, 64 MiB; `--quick`
//! stops at 16 MiB), a checked warm-up call, then rounds of: one `memcpy`, one peer copy,
//! one all-reduce followed by `group.sync()`, each timed alone; medians over `--runs` rounds
//! from 16 MiB, up to 16 times as many below. Interleaved, so that drift (a shared machine's
//! load) hits all three alike, and each finds the cache as the others leave it: a `memcpy`
//! loop on its own would keep a size that fits the last-level cache there, and measure the
//! cache rather than memory. With `S` the bytes per rank, `n` the ranks and `t` the
//! all-reduce's median, as NCCL-tests defines them:
//! - `algbw = S / t`;
//! - `busbw = algbw * 2(n-1)/n`, the rate of the bytes each rank must at least send and
//!   receive in a ring all-reduce, comparable with a link's bandwidth whatever `n` (0 for
//!   one rank, where nothing travels).
//!
//! Baselines, measured in the same rounds:
//! - `memcpy`: `copy_from_slice` of `S` bytes between two touched host `Vec`s on one thread,
//!   the roofline: `busbw / memcpy` is the ratio printed;
//! - `peer`: one `copy_peer` of `S` bytes from rank 0's device to rank 1's, then a sync (the
//!   primitive the in-process all-reduce is made of; a `memcpy` on a worker thread between
//!   CPU devices, `cuMemcpyPeerAsync` between GPUs, where it is the link's roofline).
//!
//! **What bounds the in-process all-reduce on the CPU.** It is a reduce-scatter then an
//! all-gather of peer copies and element-wise adds (`gpukit_core::collective`), each rank's
//! part on its device's stream. Counting bytes read plus written (a `memcpy` of `S` moves
//! `2S`; write-allocate reads not counted), with parts of `c = S/n`:
//! - reduce-scatter: rank `k` reduces part `k` of every rank's array in rank order, each
//!   other rank's part peer-copied into a scratch array first (`2c`), its own read where it
//!   is: `acc = x0 + x1` then `acc += x` (`3c` each). Every rank moves `5c(n-1)`;
//! - all-gather: every rank copies all `n` reduced parts into its array: `2S` each.
//!
//! In all `5(n-1)S + 2nS`: `9S` for two ranks (four and a half `memcpy`s' worth), `23S` for
//! four. The expected `busbw / memcpy`, printed beside the measured one:
//! - `1-lane`, every byte through one core at `memcpy`'s speed (where one thread's copy
//!   already takes the memory's bandwidth, or where the CPU backend runs short work inline
//!   on the calling thread): `2(n-1)/n * 2S / traffic`, 0.22 for two ranks, 0.13 for four;
//! - `par`, each rank's work on a core of its own at `memcpy`'s speed: the all-gather waits
//!   for every part, so the time is a rank's reduce plus its all-gather, `5(n-1)S/n + 2S`,
//!   and no less than the traffic over the cores: 0.44 for two ranks on two cores, 0.26 for
//!   four on two.
//!
//! Sizes well beyond the cache should fall between the two (where the parts fit the cache,
//! an add that reads the copy just made can lift the ratio above `par`); small ones below
//! both, where queueing and the streams' waits on each other cost more than the bytes.
//! Neither model applies to NCCL.
//!
//! **Data-parallel training.** The digits perceptron (`gpukit_examples::digits`, the data set
//! built into this program so that it also runs from the GPU bundle) trained with
//! `Config::default()` (`--epochs` overrides) by [`gpukit_examples::parallel`] on the group
//! against [`gpukit_examples::digits`] on its first device, from the same shard files,
//! after a warm-up run of each, then `--train-runs` runs of each, interleaved. Rows per
//! second are the training rows over the pipeline's wall time (`Report::wall_ms`; for the
//! group the slowest rank's, the ranks starting together), and the ratio is group / one
//! device; the wall time of the whole call (model set-up and final read-back included) gives
//! a second ratio. Expect less than 1 on CPU devices: a step is under 0.1 ms of work, while
//! each step's gradient exchange costs the ranks' threads two meetings and an all-reduce of
//! the 4,810 gradients (one flat array), and both devices share the machine's cores.
//!
//! **Devices.** `--devices` takes any set (`cpu:0..4`, `cuda:*`, `cuda:0,1`, `auto`); a bare
//! backend means all of its devices (`cuda` is `cuda:*`, `cpu` is `cpu:0..2`), and
//! `--device` is the same flag, as `run.sh --bench` passes it. A GPU set whose backend is
//! unusable prints `SKIPPED: <reason>` and writes no report; `auto` without a GPU says so
//! and runs on `cpu:0..2`. With one device there is no peer copy, `busbw` is 0 and the
//! training comparison is left out.
//!
//! ```text
//! cargo run --release -p gpukit-bench --example allreduce_bench -- [--devices SET]
//!     [--sizes KIB,...] [--runs N] [--epochs N] [--train-runs N] [--quick] [--json FILE]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use gpukit::core::SpecBackend;
use gpukit::{CollectiveOp, Communicator, DeviceGroup, DeviceSet, DeviceSpec, Error, GpuArray};
use gpukit_bench::{gbps, median_or_nan, write_json};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::digits::{self, Config, Samples, MINIBATCH, SHARD_ROWS};
use gpukit_examples::{fmt_bytes, parallel};
use serde::Serialize;

/// The training functions' result, whose errors cross threads.
type Res<T = ()> = digits::Res<T>;

const USAGE: &str = "\
usage: allreduce_bench [options]

  --devices SET    the device group: cpu:0..N, cuda:*, cuda:0,1, vulkan:*, auto, or a bare
                   backend for all its devices (cuda = cuda:*, cpu = cpu:0..2); default cpu:0..2
  --device SET     the same as --devices
  --sizes KIB,...  bytes per rank, in KiB, 1 to 4194304 (default 64,1024,16384,65536)
  --runs N         rounds per size from 16 MiB, at least 5 (default 11, 5 with --quick);
                   smaller sizes run up to 16 times as many
  --epochs N       training epochs, at least 1 (default: Config::default()'s, 20)
  --train-runs N   timed training runs of each side, at least 3 (default 5, 3 with --quick)
  --quick          sizes to 16 MiB, fewer runs
  --json FILE      write the records to FILE as JSON
  -h, --help       this text";

/// The sizes per rank, KiB; `--quick` takes the first three.
const SIZES_KIB: [usize; 4] = [64, 1 << 10, 16 << 10, 64 << 10];
/// From this size on, each size runs `--runs` rounds; below, up to 16 times as many.
const LARGE: usize = 16 << 20;

struct Args {
    devices: DeviceSet,
    sizes: Option<Vec<usize>>,
    runs: Option<usize>,
    epochs: Option<usize>,
    train_runs: Option<usize>,
    quick: bool,
    json: Option<String>,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        devices: two_cpus(),
        sizes: None,
        runs: None,
        epochs: None,
        train_runs: None,
        quick: false,
        json: None,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long(flag @ ("devices" | "device")) => {
                let flag = format!("--{flag}");
                args.devices = device_set(cli, &flag)?;
            }
            Long("sizes") => {
                let kib: Vec<usize> = cli.numbers("--sizes", "a size in KiB", 1..=4 << 20)?;
                args.sizes = Some(kib.into_iter().map(|k| k << 10).collect());
            }
            Long("runs") => args.runs = Some(cli.number("--runs", "a count", 5..)?),
            Long("epochs") => args.epochs = Some(cli.number("--epochs", "a count", 1..)?),
            Long("train-runs") => {
                args.train_runs = Some(cli.number("--train-runs", "a count", 3..)?)
            }
            Long("quick") => args.quick = true,
            Long("json") => args.json = Some(cli.string("--json")?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// `cpu:0..2`: the default group, and what a bare `cpu` means.
fn two_cpus() -> DeviceSet {
    DeviceSet::List(vec![DeviceSpec::Cpu(Some(0)), DeviceSpec::Cpu(Some(1))])
}

/// The value of `flag` as a device set, a bare backend naming all its devices.
fn device_set(cli: &mut Cli, flag: &str) -> Result<DeviceSet, CliError> {
    let text = cli.string(flag)?;
    let set = DeviceSet::parse_from(&text, flag).map_err(|e| {
        let why = match e {
            Error::InvalidDeviceSpec { reason, .. } => reason,
            other => other.to_string(),
        };
        CliError::Bad(format!(
            "{flag} {text}: expected a device set such as cpu:0..2, cuda:* or cuda:0,1 ({why})"
        ))
    })?;
    Ok(match set {
        DeviceSet::List(v) => match v[..] {
            [DeviceSpec::Cpu(None)] => two_cpus(),
            [DeviceSpec::Cuda(None)] => DeviceSet::All(SpecBackend::Cuda),
            [DeviceSpec::Vulkan(None)] => DeviceSet::All(SpecBackend::Vulkan),
            _ => DeviceSet::List(v),
        },
        other => other,
    })
}

/// One all-reduce size, as written to the JSON report.
#[derive(Serialize)]
struct AllReduceRecord {
    bench: &'static str,
    backend: &'static str,
    implementation: &'static str,
    nccl_rejected: Option<String>,
    devices: String,
    ranks: usize,
    bytes: usize,
    runs: usize,
    seconds: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    memcpy_seconds: f64,
    memcpy_gbps: f64,
    busbw_vs_memcpy: f64,
    peer_copy_seconds: f64,
    peer_copy_gbps: f64,
    busbw_vs_peer_copy: f64,
    model_one_lane: f64,
    model_parallel: f64,
}

/// The training comparison, as written to the JSON report.
#[derive(Serialize)]
struct TrainRecord {
    bench: &'static str,
    backend: &'static str,
    devices: String,
    ranks: usize,
    epochs: usize,
    rows: usize,
    steps: usize,
    runs: usize,
    single_rows_per_s: f64,
    group_rows_per_s: f64,
    ratio_vs_single: f64,
    single_call_rows_per_s: f64,
    group_call_rows_per_s: f64,
    call_ratio_vs_single: f64,
    single_test_accuracy: f64,
    group_test_accuracy: f64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Record {
    AllReduce(AllReduceRecord),
    Train(TrainRecord),
}

fn main() -> ExitCode {
    let result = run().map_err(|e| -> Box<dyn std::error::Error> { e });
    gpukit_examples::exit_status("allreduce_bench", result)
}

fn run() -> Res {
    let args = cli::parse_or_exit("allreduce_bench", USAGE, parse_args);
    let group = match DeviceGroup::new(args.devices.clone()) {
        Ok(group) if !group.is_empty() => group,
        Ok(_) => {
            println!(
                "SKIPPED: allreduce_bench on {}: the set resolved to no device",
                args.devices
            );
            return Ok(());
        }
        // A GPU that is not there is a skip, as the tests report it, not a failure.
        Err(e @ Error::Unavailable { .. }) if !is_cpu(&args.devices) => {
            println!("SKIPPED: allreduce_bench on {}: {e}", args.devices);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let backend = group[0].backend_name();
    let devices = describe(&group);
    if args.devices == DeviceSet::Auto && backend == "cpu" {
        println!("allreduce_bench: auto found no GPU: measuring {devices}");
    }
    let comm = group.communicator()?;
    let nccl = match comm.nccl_rejected() {
        Some(e) => format!("; NCCL was passed over: {}", gpukit::error_chain(e)),
        None if comm.implementation() == "nccl" => String::new(),
        None => "; NCCL is for CUDA devices only".to_owned(),
    };
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let ranks = match group.len() {
        1 => "1 rank".to_owned(),
        n => format!("{n} ranks"),
    };
    println!(
        "allreduce_bench: {devices} ({ranks}, {backend}: {}), the {} all-reduce{nccl}",
        group[0].info().name,
        comm.implementation()
    );
    println!(
        "machine: {}, {cores} cores, load average {}; every figure a median",
        cpu_model(),
        load_average()
    );

    let runs = args.runs.unwrap_or(if args.quick { 5 } else { 11 });
    let sizes = args.sizes.clone().unwrap_or_else(|| {
        let take = if args.quick { 3 } else { SIZES_KIB.len() };
        SIZES_KIB[..take].iter().map(|k| k << 10).collect()
    });
    let mut records = Vec::new();
    println!(
        "{:>9} {:>5} {:>9} {:>7} {:>7} {:>7} {:>8} {:>7} {:>6} {:>7} {:>7}",
        "size/rank",
        "runs",
        "time ms",
        "algbw",
        "busbw",
        "memcpy",
        "busbw/mc",
        "1-lane",
        "par",
        "peer",
        "bus/peer"
    );
    let in_process = comm.implementation() == "in-process";
    for &bytes in &sizes {
        let rounds = runs * (LARGE / bytes).clamp(1, 16);
        let t = measure(&group, &comm, bytes / 4, rounds)?;
        let n = group.len();
        let algbw = gbps(bytes, t.all_reduce);
        let busbw = algbw * 2.0 * (n - 1) as f64 / n as f64;
        let memcpy = gbps(bytes, t.memcpy);
        let peer = gbps(bytes, t.peer);
        let model = |lanes: usize| {
            if in_process {
                model_ratio(n, lanes)
            } else {
                f64::NAN
            }
        };
        let record = AllReduceRecord {
            bench: "all_reduce",
            backend,
            implementation: comm.implementation(),
            nccl_rejected: comm.nccl_rejected().map(|e| gpukit::error_chain(e)),
            devices: devices.clone(),
            ranks: n,
            bytes,
            runs: rounds,
            seconds: t.all_reduce,
            algbw_gbps: algbw,
            busbw_gbps: busbw,
            memcpy_seconds: t.memcpy,
            memcpy_gbps: memcpy,
            busbw_vs_memcpy: busbw / memcpy,
            peer_copy_seconds: t.peer,
            peer_copy_gbps: peer,
            busbw_vs_peer_copy: busbw / peer,
            model_one_lane: model(1),
            model_parallel: model(cores),
        };
        println!(
            "{:>9} {:>5} {:>9.3} {:>7.2} {:>7.2} {:>7.2} {:>8} {:>7} {:>6} {:>7} {:>7}",
            fmt_bytes(bytes),
            rounds,
            t.all_reduce * 1e3,
            algbw,
            busbw,
            memcpy,
            fixed(record.busbw_vs_memcpy, 3),
            fixed(record.model_one_lane, 3),
            fixed(record.model_parallel, 3),
            fixed(peer, 2),
            fixed(record.busbw_vs_peer_copy, 3)
        );
        records.push(Record::AllReduce(record));
    }
    println!(
        "(GB/s; busbw = algbw * 2(n-1)/n; busbw/mc = busbw / memcpy; 1-lane and par: the \
         in-process all-reduce's expected busbw/mc, see the program's docs; peer: one \
         copy_peer rank 0 -> 1)"
    );

    if group.len() < 2 {
        println!("one rank: busbw is 0 by definition (nothing travels), and there is no peer");
        println!("training: left out: data-parallel training needs two devices or more");
    } else {
        let mut cfg = Config::default();
        if let Some(epochs) = args.epochs {
            cfg.epochs = epochs;
        }
        let train_runs = args.train_runs.unwrap_or(if args.quick { 3 } else { 5 });
        let record = compare_training(&group, &devices, &cfg, train_runs)?;
        records.push(Record::Train(record));
    }

    if let Some(path) = &args.json {
        write_json(path, &records)?;
        println!("wrote {} records to {path}", records.len());
    }
    for ctx in group.iter() {
        ctx.sync()?;
    }
    Ok(())
}

/// `value` with `decimals` decimals, `-` where it is not a number.
fn fixed(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        "-".to_owned()
    }
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg` (the machine may be shared).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

/// Whether every device of `set` is a CPU device.
fn is_cpu(set: &DeviceSet) -> bool {
    matches!(set, DeviceSet::List(v) if v.iter().all(|d| matches!(d, DeviceSpec::Cpu(_))))
}

/// The group's devices as a set: `cpu:0,1`, `cuda:0,1,2,3`.
fn describe(group: &DeviceGroup) -> String {
    let ids: Vec<String> = group.iter().map(|c| c.device_id().to_string()).collect();
    format!("{}:{}", group[0].backend_name(), ids.join(","))
}

/// The CPU's model name from `/proc/cpuinfo`, or `unknown CPU`.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

/// The medians of one size, seconds.
struct Times {
    all_reduce: f64,
    memcpy: f64,
    /// NaN with one rank.
    peer: f64,
}

/// Sums `len` f32s per rank over the group, checked once, then times `rounds` rounds of
/// memcpy, peer copy and all-reduce.
fn measure(group: &DeviceGroup, comm: &Communicator, len: usize, rounds: usize) -> Res<Times> {
    let n = group.len();
    let mut bufs = group
        .iter()
        .enumerate()
        .map(|(r, ctx)| ctx.alloc_upload(&vec![(r + 1) as f32; len]))
        .collect::<gpukit::Result<Vec<GpuArray<f32>>>>()?;
    // The warm-up call, checked on every rank.
    comm.all_reduce(&mut bufs, CollectiveOp::Sum)?;
    group.sync()?;
    let want = (n * (n + 1) / 2) as f32;
    for (r, buf) in bufs.iter_mut().enumerate() {
        if let Some(i) = buf.download()?.iter().position(|&v| v != want) {
            return Err(format!("all-reduce: rank {r}'s element {i} is not {want}").into());
        }
        // Zeros from here on: repeated sums would overflow to infinity.
        buf.upload(&vec![0.0; len])?;
    }

    let src = vec![1.0f32; len];
    let mut dst = vec![0.0f32; len];
    let mut peer_dst = match group.contexts() {
        [_, ctx1, ..] => Some(ctx1.alloc_zeros::<f32>(len)?),
        _ => None,
    };
    let (mut t_ar, mut t_memcpy, mut t_peer) = (Vec::new(), Vec::new(), Vec::new());
    // Round 0 warms the memcpy and the peer copy up, and is not counted.
    for round in 0..=rounds {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        let memcpy = t.elapsed().as_secs_f64();

        let peer = match &mut peer_dst {
            Some(b1) => {
                let t = Instant::now();
                group[1].copy_peer(&bufs[0], b1)?;
                group[1].sync()?;
                t.elapsed().as_secs_f64()
            }
            None => f64::NAN,
        };

        let t = Instant::now();
        comm.all_reduce(&mut bufs, CollectiveOp::Sum)?;
        group.sync()?;
        let all_reduce = t.elapsed().as_secs_f64();
        if round > 0 {
            t_memcpy.push(memcpy);
            t_peer.push(peer);
            t_ar.push(all_reduce);
        }
    }
    Ok(Times {
        all_reduce: median_or_nan(t_ar),
        memcpy: median_or_nan(t_memcpy),
        peer: median_or_nan(t_peer),
    })
}

/// The in-process all-reduce's expected `busbw / memcpy` over `n` ranks if every byte it
/// moves went at `memcpy`'s speed, on `lanes` cores at once (1: all in turn). See the
/// program's docs for the counts; NaN for one rank.
fn model_ratio(n: usize, lanes: usize) -> f64 {
    if n < 2 {
        return f64::NAN;
    }
    let nf = n as f64;
    // Bytes read plus written, in units of S (a memcpy of S moves 2).
    let traffic = 5.0 * (nf - 1.0) + 2.0 * nf;
    let rank = 5.0 * (nf - 1.0) / nf + 2.0;
    let time = if lanes <= 1 {
        traffic
    } else {
        rank.max(traffic / lanes.min(n) as f64)
    };
    2.0 * (nf - 1.0) / nf * 2.0 / time
}

/// One training run's figures.
struct TrainRun {
    rows: usize,
    pipeline_s: f64,
    call_s: f64,
    test_accuracy: f64,
}

/// The digits perceptron on the group against its first device, `runs` runs of each after a
/// warm-up run, interleaved.
fn compare_training(
    group: &DeviceGroup,
    devices: &str,
    cfg: &Config,
    runs: usize,
) -> Res<TrainRecord> {
    let dir = digits::TempDir::create("allreduce-bench")?;
    let csv = dir.path().join("digits.csv");
    std::fs::write(&csv, DIGITS_CSV).map_err(|e| format!("cannot write {}: {e}", csv.display()))?;
    let all = digits::load_csv(&csv)?;
    let (train, test) = digits::split(&all, cfg.seed);
    let shards = digits::write_shards(dir.path(), &train)?;
    let steps = cfg.epochs * steps_per_epoch(train.len());

    let single = |test: &Samples| -> Res<TrainRun> {
        let t = Instant::now();
        let out = digits::train_on_shards(&group[0], cfg, &shards, test)?;
        Ok(TrainRun {
            rows: out.report.rows,
            pipeline_s: out.report.wall_ms / 1e3,
            call_s: t.elapsed().as_secs_f64(),
            test_accuracy: out.test_accuracy(),
        })
    };
    let data_parallel = |test: &Samples| -> Res<TrainRun> {
        let t = Instant::now();
        let out = parallel::train_on_shards(group, cfg, &shards, test)?;
        let call_s = t.elapsed().as_secs_f64();
        if !out.replicas_agree() {
            return Err(format!("the replicas disagree: checksums {:?}", out.checksums).into());
        }
        // The ranks' pipelines start together: the group's time is the slowest rank's.
        let wall_ms = out.reports.iter().map(|r| r.wall_ms).fold(0.0, f64::max);
        Ok(TrainRun {
            rows: out.reports[0].rows,
            pipeline_s: wall_ms / 1e3,
            call_s,
            test_accuracy: out.test_accuracy(),
        })
    };
    let (mut ones, mut groups) = (Vec::new(), Vec::new());
    for round in 0..=runs {
        let (one, many) = (single(&test)?, data_parallel(&test)?);
        if round > 0 {
            ones.push(one);
            groups.push(many);
        }
    }
    let rows = ones[0].rows;
    if groups.iter().chain(&ones).any(|r| r.rows != rows) {
        return Err("the runs trained on different numbers of rows".into());
    }
    let median_of =
        |runs: &[TrainRun], f: fn(&TrainRun) -> f64| median_or_nan(runs.iter().map(f).collect());
    let rate = |s: f64| rows as f64 / s;
    let (one_s, group_s) = (
        median_of(&ones, |r| r.pipeline_s),
        median_of(&groups, |r| r.pipeline_s),
    );
    let (one_call, group_call) = (
        median_of(&ones, |r| r.call_s),
        median_of(&groups, |r| r.call_s),
    );
    let record = TrainRecord {
        bench: "data_parallel",
        backend: group[0].backend_name(),
        devices: devices.to_owned(),
        ranks: group.len(),
        epochs: cfg.epochs,
        rows,
        steps,
        runs,
        single_rows_per_s: rate(one_s),
        group_rows_per_s: rate(group_s),
        ratio_vs_single: one_s / group_s,
        single_call_rows_per_s: rate(one_call),
        group_call_rows_per_s: rate(group_call),
        call_ratio_vs_single: one_call / group_call,
        single_test_accuracy: median_of(&ones, |r| r.test_accuracy),
        group_test_accuracy: median_of(&groups, |r| r.test_accuracy),
    };
    let n = group.len();
    println!(
        "data-parallel training: digits perceptron, {} epochs, {rows} rows, {steps} steps; \
         medians of {runs} runs each, interleaved",
        cfg.epochs
    );
    println!(
        "{:>24} {:>10} {:>12} {:>11} {:>9} {:>9}",
        "", "rows/s", "pipeline ms", "us per step", "call ms", "test acc"
    );
    for (name, s, call, acc) in [
        (
            format!("1 device ({}:{})", record.backend, group[0].device_id()),
            one_s,
            one_call,
            record.single_test_accuracy,
        ),
        (
            format!("{n} devices ({devices})"),
            group_s,
            group_call,
            record.group_test_accuracy,
        ),
    ] {
        println!(
            "{name:>24} {:>10.0} {:>12.2} {:>11.1} {:>9.2} {:>9.3}",
            rate(s),
            s * 1e3,
            s * 1e6 / steps as f64,
            call * 1e3,
            acc
        );
    }
    println!(
        "ratio {n} devices / 1: {:.3}x rows/s over the pipelines' wall time, {:.3}x over the \
         whole call",
        record.ratio_vs_single, record.call_ratio_vs_single
    );
    if record.ratio_vs_single < 1.0 {
        println!(
            "  slower on {n} devices: a step takes {:.1} us longer than on one device; the \
             model is tiny, and each step's gradient exchange costs two meetings of the \
             ranks' threads and an all-reduce of the 4,810 gradients",
            (group_s - one_s) * 1e6 / steps as f64
        );
    }
    Ok(record)
}

/// SGD steps per epoch over `rows` training rows: each shard's rows, in minibatches.
fn steps_per_epoch(rows: usize) -> usize {
    let (full, rest) = (rows / SHARD_ROWS, rows % SHARD_ROWS);
    full * SHARD_ROWS.div_ceil(MINIBATCH) + rest.div_ceil(MINIBATCH)
}

/// The digits data set (`examples/data/digits.csv`), built in: the GPU bundle carries
/// binaries only.
const DIGITS_CSV: &str = include_str!("../../../examples/data/digits.csv");
