//! Trains the digits perceptron data-parallel on several devices: one replica of the model
//! per device, each on its part of every minibatch, the gradients all-reduced (averaged)
//! before every update.
//!
//! ```text
//! cargo run --release --example data_parallel                       # GPU_DEVICE, else auto
//! cargo run --release --example data_parallel -- --devices cpu:0..4
//! cargo run --release --example data_parallel -- --devices cuda:0,1 --check-against-one
//! ```
//!
//! `auto` is every visible CUDA device, else every Vulkan GPU, else two logical CPU devices
//! (the CPU backend has any number, so the program runs on any machine).
//!
//! # What runs where
//!
//! The model, the data and the step are the `training_pipeline` example's
//! (`gpukit_examples::digits`); the data-parallel loop is `gpukit_examples::parallel`
//! (`examples/parallel.rs`), which the test `examples/tests/data_parallel.rs` runs in CI
//! on two, three and four CPU devices:
//!
//! ```text
//! loader thread:        read each shard file once -> deal it to every device's pipeline
//! device k's pipeline:  upload the shard; on its compute stream: the shard's permutation
//!                       (the same on every device: the device's random stream, from the
//!                       seed), then per minibatch of 64 rows its part (rows chunk(64, n, k))
//!                       gathered, forward, loss, backward (gradients scaled by n / 64) ...
//! all ranks:            ... the gradients all-reduced (CollectiveOp::Avg) by the group's
//!                       Communicator: the minibatch's mean gradient on every device ...
//! device k's pipeline:  ... the momentum update; its rows' losses downloaded
//! ```
//!
//! Every replica applies the same update, so the replicas stay equal bit for bit (checked
//! at the end), and equal to the single-device model up to the order of the sums (one
//! step: a largest relative difference of ~1e-7, see `--check-against-one`).
//!
//! # What is checked
//!
//! The run fails unless the held-out accuracy reaches 95% and the replicas agree. With
//! `--check-against-one` it also trains on one device of the same backend with the same
//! seed and global minibatch, and compares the accuracy (within 1.5 points) and one step's
//! parameters (within 1e-6 of each parameter's largest magnitude).
//!
//! `--timeline PREFIX` writes every device's pipeline lanes on one time axis as
//! `PREFIX.svg` and `PREFIX.trace.json` (Perfetto: one process per device).

use std::process::ExitCode;

use gpukit::{Context, DeviceGroup, DeviceSet, GroupTimeline};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::digits::{self, Config, FEATURES, MINIBATCH};
use gpukit_examples::parallel;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Held-out accuracy the model must reach.
const MIN_ACCURACY: f64 = 0.95;
/// Largest difference of the held-out accuracy between the group and one device.
const ACCURACY_VS_ONE: f64 = 0.015;
/// Largest relative difference of a parameter after one step, group vs one device.
const ONE_STEP_RTOL: f64 = 1e-6;

const USAGE: &str = "\
usage: data_parallel [options]

  --devices SET        auto | cuda:* | cuda:0,1 | vulkan:* | cpu:0..4 | ... (default:
                       GPU_DEVICE, else auto: every CUDA device, else every Vulkan GPU,
                       else two CPU devices)
  --epochs N           passes over the training shards (default 20)
  --check-against-one  train on one device too, and compare
  --timeline PREFIX    write every device's lanes to PREFIX.svg and PREFIX.trace.json
  -h, --help           this text";

fn main() -> ExitCode {
    gpukit_examples::exit_status("data_parallel", run())
}

/// Command-line options.
struct Args {
    devices: Option<DeviceSet>,
    epochs: usize,
    check_against_one: bool,
    timeline: Option<String>,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        devices: None,
        epochs: Config::default().epochs,
        check_against_one: false,
        timeline: None,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("devices") => {
                let text = cli.string("--devices")?;
                let set = DeviceSet::parse_from(&text, "--devices")
                    .map_err(|e| CliError::Bad(e.to_string()))?;
                args.devices = Some(set);
            }
            Long("epochs") => args.epochs = cli.number("--epochs", "a count", 1..=1000)?,
            Long("check-against-one") => args.check_against_one = true,
            Long("timeline") => args.timeline = Some(cli.string("--timeline")?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

fn run() -> Res {
    let args = cli::parse_or_exit("data_parallel", USAGE, parse_args);
    let group = match args.devices {
        Some(set) => DeviceGroup::new(set)?,
        None => DeviceGroup::default()?,
    };
    let comm = group.communicator()?;
    println!(
        "{} devices (`{}`), collectives: {}",
        group.len(),
        group.set(),
        comm.implementation()
    );
    for (rank, ctx) in group.iter().enumerate() {
        println!(
            "  rank {rank}: {} device {} ({})",
            ctx.backend_name(),
            ctx.device_id(),
            ctx.info().name
        );
    }
    let cfg = Config {
        epochs: args.epochs,
        ..Config::default()
    };
    let outcome = parallel::train(&group, &cfg).map_err(|e| e.to_string())?;
    println!(
        "trained in {:.2} s: {} epochs, minibatches of {MINIBATCH} rows split over {} devices",
        outcome.wall_ms / 1e3,
        cfg.epochs,
        outcome.devices
    );
    println!(
        "{:>5} {:>10} {:>10} {:>10}",
        "epoch", "loss", "train acc", "held-out"
    );
    for (e, loss) in outcome.epoch_loss.iter().enumerate() {
        println!(
            "{:>5} {:>10.5} {:>9.2}% {:>9.2}%",
            e + 1,
            loss,
            100.0 * outcome.epoch_train_accuracy[e],
            100.0
                * outcome
                    .epoch_test_accuracy
                    .get(e)
                    .copied()
                    .unwrap_or(f64::NAN)
        );
    }
    println!("held-out accuracy: {:.2}%", 100.0 * outcome.test_accuracy());
    // Stage totals, not the report's bound: a rank's compute function waits for the other
    // ranks at every step, which its pipeline cannot tell from its own work, so the
    // single-device bound (`Report::summary`) does not hold here.
    for (rank, r) in outcome.reports.iter().enumerate() {
        let t = &r.stages;
        println!(
            "pipeline of rank {rank}: {} batches, {} rows in {:.1} ms; stage totals: load \
             {:.1} ms, upload {:.1} ms, compute {:.1} ms, download {:.1} ms, enqueue (with \
             the all-reduce's meetings) {:.1} ms",
            r.batches, r.rows, r.wall_ms, t.load, t.upload, t.compute, t.download, t.enqueue
        );
    }
    if let Some(prefix) = &args.timeline {
        let timeline = GroupTimeline {
            devices: group
                .iter()
                .zip(&outcome.reports)
                .enumerate()
                .map(|(rank, (ctx, r))| {
                    let label = format!("rank {rank} ({} {})", ctx.backend_name(), ctx.device_id());
                    (label, r.timeline.clone())
                })
                .collect(),
            title: format!("data-parallel digits on {} devices", group.len()),
        };
        timeline.write_svg(format!("{prefix}.svg"))?;
        timeline.write_chrome_trace(format!("{prefix}.trace.json"))?;
        println!("timeline: {prefix}.svg, {prefix}.trace.json");
    }

    let mut failures = Vec::new();
    if outcome.test_accuracy() < MIN_ACCURACY {
        failures.push(format!(
            "held-out accuracy {:.2}% is below {:.0}%",
            100.0 * outcome.test_accuracy(),
            100.0 * MIN_ACCURACY
        ));
    }
    if !outcome.replicas_agree() {
        failures.push(format!(
            "the replicas differ: checksums {:?}",
            outcome.checksums
        ));
    } else {
        println!(
            "replicas agree bit for bit (checksum {:016x})",
            outcome.checksums[0]
        );
    }
    if args.check_against_one {
        failures.extend(check_against_one(&group, &cfg, outcome.test_accuracy())?);
    }
    group.sync()?;
    if failures.is_empty() {
        println!("all checks passed");
        Ok(())
    } else {
        Err(failures.join("; ").into())
    }
}

/// Trains on rank 0's device alone and compares; returns the failures.
fn check_against_one(group: &DeviceGroup, cfg: &Config, accuracy: f64) -> Res<Vec<String>> {
    let mut failures = Vec::new();
    // Rank 0's device, opened again: the spec the group resolved for it.
    let one = Context::new(group[0].selection().requested)?;
    println!(
        "--check-against-one: training on {} device {} alone",
        one.backend_name(),
        one.device_id()
    );
    let single = digits::train(&one, cfg).map_err(|e| e.to_string())?;
    println!(
        "  held-out accuracy: {} devices {:.2}%, one device {:.2}%",
        group.len(),
        100.0 * accuracy,
        100.0 * single.test_accuracy()
    );
    if (accuracy - single.test_accuracy()).abs() > ACCURACY_VS_ONE {
        failures.push(format!(
            "held-out accuracy {:.2}% on the group vs {:.2}% on one device",
            100.0 * accuracy,
            100.0 * single.test_accuracy()
        ));
    }
    let all = digits::load_csv(&digits::data_path()).map_err(|e| e.to_string())?;
    let (x, labels) = (&all.x[..MINIBATCH * FEATURES], &all.labels[..MINIBATCH]);
    let (worst, agree) =
        parallel::one_step_difference(group, &one, cfg, x, labels).map_err(|e| e.to_string())?;
    println!("  one step: largest difference {worst:.3e} of a parameter's largest magnitude");
    if !agree || worst > ONE_STEP_RTOL {
        failures.push(format!(
            "one step: the group differs from one device by {worst:.3e} (agree: {agree})"
        ));
    }
    Ok(failures)
}
