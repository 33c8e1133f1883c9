//! Trains a logistic-regression classifier on the detected backend, from data streamed off
//! disk in batches through a triple-buffered [`gpukit::Pipeline`] with a prefetching loader.
//!
//! ```text
//! cargo run --release --example training_pipeline                  # GPU_DEVICE, else auto
//! cargo run --release --example training_pipeline -- --device cpu
//! cargo run --release --example training_pipeline -- --check-against-cpu
//! ```
//!
//! # The data
//!
//! A synthetic binary-classification set drawn from a fixed seed with the program's own
//! SplitMix64 generator (no dependency; features by Box-Muller): `N = 65536`
//! samples of `D = 64` standard-normal features. A hidden linear model (a random unit
//! direction `u`, scale 4, bias 0.5) gives each sample the probability
//! `p* = sigmoid(4 u.x + 0.5)`, and its label is drawn as `Bernoulli(p*)`: the labels are
//! noisy, so no model can be right everywhere. The program prints what the hidden model
//! itself scores on the data (its loss and its accuracy when it predicts `p* > 1/2`): the
//! noise floor. A model fitted to these very samples can match it, and beat it only by a
//! hair, by fitting noise.
//!
//! The set is written as 4 shard files of 16384 records to `$TMPDIR/gpu-training-<pid>/`
//! (removed at the end, also after an error). A record is 65 little-endian `f32`: the 64
//! features, then the label (0 or 1). No header; a shard's length is checked when it is
//! opened.
//!
//! # The model
//!
//! Logistic regression with an intercept: `z = X w + b`, where `X` is the batch's 64 features
//! per row, `w` the 64 weights and `b` the bias. The 65 parameters are one device array
//! `[w | b]`, kept on the device for the whole run. Per batch of `B = 1024` rows, all on the
//! device:
//!
//! | step                               | op                                                      |
//! |------------------------------------|---------------------------------------------------------|
//! | logits `z = X w`                   | `gemm` (B x 64 times 64 x 1), written into the output   |
//! | bias `z += b`                      | `add_row_inplace` over the B x 1 logits                 |
//! | labels `y`, for the host           | `copy` into the output                                  |
//! | residual `r = sigmoid(z) - y`      | `sigmoid`, then `sub_inplace`                           |
//! | Brier sum `sum r^2`                | `dot_into`, written into the output                     |
//! | signed logits `t = (1 - 2y) z`     | `mul_scalar`, `add_scalar_inplace`, `mul_inplace`       |
//! | per-sample loss `softplus(t)`      | `softplus_inplace`                                      |
//! | the batch's mean loss              | `mean_into`, written into the output                    |
//! | gradient `g_w = X^T r / B`         | `gemm` with `trans_a` and `alpha = 1/B`                 |
//! | gradient `g_b = mean r`            | `mean_into`                                             |
//! | weight decay `(w, b) *= 1 - lr*l2` | `scale`                                                 |
//! | SGD step `(w, b) -= lr (g_w, g_b)` | `axpy`                                                  |
//!
//! Plain minibatch SGD, learning rate 0.1, weight decay 1e-4 (on the bias too), parameters
//! starting at zero, 5 epochs; each epoch visits the 64 batches in an order shuffled from the
//! seed (rows stay in their batch). The loss is the mean binary cross-entropy
//! `softplus(z) - y z`. For a label of 0 or 1 that is `softplus((1 - 2y) z)` (`softplus(z)`
//! for `y = 0`, `softplus(-z) = softplus(z) - z` for `y = 1`), which the device evaluates
//! without the cancellation of the difference: per sample in f32, then `mean_into`, which
//! accumulates in f64 and rounds once. The host recomputes each batch's loss in f64 from the
//! downloaded logits and labels as a reference (see below). A batch's loss is measured before
//! its own update, as training loops report it. After training, a forward-only pass over the
//! data (the same pipeline, no update) evaluates the final parameters.
//!
//! # The streams
//!
//! ```text
//! loader thread:   seek + read a shard -> unpack into a pinned staging buffer (<= 3 ahead)
//! upload stream:   staging buffer -> the slot's device input [X (B x 64) | y (B)]
//! compute stream:  forward, loss, gradient and SGD step on the shared parameters (the table)
//! download stream: the slot's device output [z (B) | y (B) | Brier sum (1) | loss (1)] -> host
//! sink (this thread, in batch order): epoch loss, its host reference, accuracy, Brier score
//! ```
//!
//! `Pattern::Triple` keeps three batches in flight, each in its own slot of device buffers,
//! so reading batch `i+2` from disk, uploading batch `i+1`, computing batch `i` and
//! downloading batch `i-1` overlap. The parameters and the scratch arrays (the residual, the
//! per-sample losses, the gradient) live outside the pipeline and are shared by every batch:
//! that is correct because there is one compute stream, on which batches run in order, so
//! each SGD step sees the parameters of the step before. (With `compute_streams(k > 1)`
//! gpukit-core's automatic ordering of shared arrays would serialise the steps anyway, since
//! every step reads and writes the parameters: a model update is sequential by nature.) The
//! whole run, all epochs, is one pipeline run of 320 batches, so the loader prefetches across
//! epoch boundaries.
//!
//! # Reproducibility and its tolerance
//!
//! The same seed gives the same data and the same batch order (both runs of
//! `--check-against-cpu` also read the very same files), and each backend is
//! deterministic: the CPU backend's gemm (`matrixmultiply`, single-threaded) and reductions
//! always sum in the same order, so two CPU runs give bit-identical losses.
//! `--check-against-cpu` trains a second time on the CPU backend and compares the per-epoch
//! losses and the evaluation loss:
//!
//! - on the CPU itself (no GPU), the two runs must agree exactly (bit for bit);
//! - on CUDA they must agree within a relative `1e-3`. They cannot agree exactly: cuBLAS
//!   sums the f32 products of a gemm in another order (and may use other kernels for other
//!   shapes) than the CPU backend, and CUDA's `expf` and `log1pf` in `sigmoid` and `softplus`
//!   may differ in the last bits; each step's rounding differences (about `1e-7` relative per
//!   value) feed into the next step's parameters over 320 SGD steps. The logistic loss is
//!   smooth and SGD with this small learning rate does not amplify perturbations (it
//!   contracts towards the optimum), so the differences should stay orders of magnitude below
//!   `1e-3`, while a real bug (a wrong transpose, a missed or doubled update, a step that
//!   raced another) changes the losses by far more than 0.1%. (Each batch's loss is a mean
//!   accumulated in f64 and rounded once to f32, and the host averages an epoch's batches in
//!   f64, so the comparison itself adds no rounding of note.)
//!
//! # What is checked
//!
//! The run fails (exit status 1) unless
//!
//! - every epoch's loss and the evaluation loss from the device match the host's f64
//!   recomputation from the downloaded logits within a relative `1e-5` (each per-sample loss
//!   is an f32 `softplus` within a few ulp, a few `1e-7` relative, and these roundings
//!   largely cancel in the mean, which `mean_into` rounds once: on the CPU the two differ by
//!   about `1e-8`; a wrong sign, label or count is off by far more),
//! - the last epoch's mean loss is below 0.7 times the first epoch's (on this data about
//!   0.49 falls to 0.31, 0.62x), and
//! - the accuracy of the final weights on the training data is at least the hidden model's
//!   own accuracy minus one percentage point (the hidden model scores 87.5% on this data,
//!   the ceiling the label noise sets; the trained model reaches it, so the threshold is
//!   86.5%); a constant prediction scores at most 55% (the share of the larger class).
//!
//! The cosine between the learned weights and the hidden direction is printed as well. Any
//! error (a malformed `--device`/`GPU_DEVICE`, an unusable GPU, an I/O error in the loader,
//! a device error) prints and exits with status 1.

use std::error::Error;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use gpukit::{Context, DeviceSpec, Gemm, GpuArray, Pattern, Pipeline, Shape, Stream};
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};

type Res<T = ()> = Result<T, Box<dyn Error>>;

/// Seed of the data, the hidden model and the batch order.
const SEED: u64 = 0x7261_696e_2d67_7075;
/// Features per sample.
const FEATURES: usize = 64;
/// Parameters of the model: the weights of the features, then the bias.
const PARAMS: usize = FEATURES + 1;
/// `f32` values per record on disk: the features and the label.
const RECORD: usize = FEATURES + 1;
/// Samples in the data set.
const SAMPLES: usize = 65536;
/// Shard files.
const SHARDS: usize = 4;
/// Samples per batch (a shard holds a whole number of batches).
const BATCH: usize = 1024;
/// Passes over the data.
const EPOCHS: usize = 5;
/// SGD learning rate.
const LR: f32 = 0.1;
/// Weight decay (L2) coefficient.
const WEIGHT_DECAY: f32 = 1e-4;
/// The hidden model: logit = SCALE * u.x + BIAS for a random unit direction u.
const TEACHER_SCALE: f64 = 4.0;
const TEACHER_BIAS: f64 = 0.5;
/// The last epoch's mean loss must be below this fraction of the first epoch's.
const LOSS_RATIO: f64 = 0.7;
/// The final weights' accuracy on the training data must reach the hidden model's accuracy
/// minus this.
const ACCURACY_MARGIN: f64 = 0.01;
/// Largest relative difference between a loss from the device and its f64 host reference.
const HOST_LOSS_RTOL: f64 = 1e-5;
/// Largest relative difference of a loss between CUDA and the CPU backend.
const CUDA_VS_CPU_RTOL: f64 = 1e-3;

/// Device input per batch: `X` (BATCH x FEATURES, row-major) then the labels.
const IN_LEN: usize = BATCH * FEATURES + BATCH;
/// Device output per batch: the logits, the labels, the batch's Brier sum, its mean loss.
const OUT_LEN: usize = 2 * BATCH + 2;

const USAGE: &str = "\
usage: training_pipeline [options]

  --device SPEC        auto | cpu | cuda | cuda:N (default: GPU_DEVICE, else auto)
  --check-against-cpu  train a second time on the CPU backend and compare the losses
  -h, --help           this text";

fn main() -> ExitCode {
    gpukit_examples::exit_status("training_pipeline", run())
}

/// Command-line options.
struct Args {
    device: Option<DeviceSpec>,
    check_against_cpu: bool,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: None,
        check_against_cpu: false,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("check-against-cpu") => args.check_against_cpu = true,
            Long("device") => args.device = Some(cli.device("--device", ANY_DEVICE, |_| true)?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

fn run() -> Res {
    let args = cli::parse_or_exit("training_pipeline", USAGE, parse_args);
    let ctx = gpukit_examples::open_context(args.device)?;
    let sel = ctx.selection();
    println!(
        "{} device {} ({}; requested `{}` by {})",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name,
        sel.requested,
        sel.origin
    );
    for r in &sel.rejected {
        println!("  rejected {}: {}", r.backend, r.reason);
    }

    let dir = TempDir::create()?;
    let t = Instant::now();
    let data = write_dataset(dir.path())?;
    println!(
        "data: {SAMPLES} samples x {FEATURES} features in {SHARDS} shards under {} ({:.1} MiB, written in {:.2} s)",
        dir.path().display(),
        (SAMPLES * RECORD * 4) as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    println!(
        "      {:.1}% positive; the hidden model scores loss {:.4}, accuracy {:.2}% (the noise floor)",
        100.0 * data.positives,
        data.teacher_loss,
        100.0 * data.teacher_accuracy
    );
    println!(
        "model: logistic regression, {FEATURES} weights and a bias; SGD lr {LR}, weight decay {WEIGHT_DECAY}, batch {BATCH}, {EPOCHS} epochs"
    );

    let main_run = train(&ctx, &data)?;
    main_run.print(ctx.backend_name());

    let mut failures = Vec::new();
    // The device's losses against the host's f64 recomputation, per epoch and for the eval.
    let host_diffs: Vec<f64> = main_run
        .epochs
        .iter()
        .chain([&main_run.eval])
        .map(|t| rel_diff(t.mean_loss(), t.host_mean_loss()))
        .collect();
    // `<=` is false for a NaN, which `f64::max` in `worst` would skip.
    if host_diffs.iter().all(|&d| d <= HOST_LOSS_RTOL) {
        let worst = host_diffs.iter().copied().fold(0.0, f64::max);
        println!(
            "  ok: the device's losses match their f64 host reference (largest relative difference {worst:.2e}, tolerance {HOST_LOSS_RTOL:.0e})"
        );
    } else {
        let listed: Vec<String> = host_diffs.iter().map(|d| format!("{d:.2e}")).collect();
        failures.push(format!(
            "the device's losses differ from their f64 host reference by more than {HOST_LOSS_RTOL:.0e} relative (epochs, then eval: {})",
            listed.join(", ")
        ));
    }
    let (first, last) = (main_run.loss[0], main_run.loss[EPOCHS - 1]);
    if last < LOSS_RATIO * first {
        println!(
            "  ok: the loss fell from {first:.4} to {last:.4} ({:.2}x, required below {LOSS_RATIO}x)",
            last / first
        );
    } else {
        failures.push(format!(
            "the loss fell only from {first:.4} to {last:.4} ({:.2}x; required below {LOSS_RATIO}x)",
            last / first
        ));
    }
    let min_accuracy = data.teacher_accuracy - ACCURACY_MARGIN;
    if main_run.eval_accuracy >= min_accuracy {
        println!(
            "  ok: final accuracy {:.2}% (required at least {:.2}%: the hidden model's minus {:.0} point)",
            100.0 * main_run.eval_accuracy,
            100.0 * min_accuracy,
            100.0 * ACCURACY_MARGIN
        );
    } else {
        failures.push(format!(
            "final accuracy {:.2}% is below the required {:.2}% (the hidden model's minus {:.0} point)",
            100.0 * main_run.eval_accuracy,
            100.0 * min_accuracy,
            100.0 * ACCURACY_MARGIN
        ));
    }
    let cosine = cosine(&main_run.weights[..FEATURES], &data.direction);
    println!("  learned weights vs the hidden direction: cosine {cosine:.4}");

    if args.check_against_cpu {
        failures.extend(check_against_cpu(&ctx, &data, &main_run)?);
    }
    ctx.close()?;
    drop(dir);
    if failures.is_empty() {
        println!("all checks passed");
        Ok(())
    } else {
        Err(failures.join("; ").into())
    }
}

/// Trains again on a fresh CPU context and compares; returns the failures.
fn check_against_cpu(ctx: &Context, data: &DataSet, main_run: &Outcome) -> Res<Vec<String>> {
    let cpu = Context::new(DeviceSpec::Cpu)?;
    println!("--check-against-cpu: training again on the CPU backend");
    let cpu_run = train(&cpu, data)?;
    cpu.close()?;
    let exact = ctx.backend_name() == "cpu";
    let pairs: Vec<(String, f64, f64)> = (0..EPOCHS)
        .map(|e| {
            (
                format!("epoch {}", e + 1),
                main_run.loss[e],
                cpu_run.loss[e],
            )
        })
        .chain([("eval".to_string(), main_run.eval_loss, cpu_run.eval_loss)])
        .collect();
    println!(
        "  {:<8} {:>14} {:>14} {:>10}",
        "loss",
        ctx.backend_name(),
        "cpu",
        "rel diff"
    );
    let mut worst = 0.0f64;
    let mut failures = Vec::new();
    for (name, a, b) in &pairs {
        let rel = rel_diff(*a, *b);
        worst = worst.max(rel);
        println!("  {name:<8} {a:>14.9} {b:>14.9} {rel:>10.2e}");
        let bad = if exact {
            a.to_bits() != b.to_bits()
        } else {
            rel.is_nan() || rel > CUDA_VS_CPU_RTOL
        };
        if bad {
            failures.push(format!(
                "{name}: {} loss {a:.9} vs cpu {b:.9} (relative {rel:.2e})",
                ctx.backend_name()
            ));
        }
    }
    if failures.is_empty() {
        if exact {
            println!("  ok: cpu vs cpu: bit-identical losses (the CPU backend is deterministic)");
        } else {
            println!(
                "  ok: {} vs cpu: largest relative difference {worst:.2e} (tolerance {CUDA_VS_CPU_RTOL:.0e})",
                ctx.backend_name()
            );
        }
    } else if exact {
        failures.insert(0, "two CPU runs differ (must be bit-identical)".into());
    }
    Ok(failures)
}

// ---------------------------------------------------------------------------------------
// Data: generation and the shard reader.
// ---------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea and Flood): small, fast, and good enough for synthetic data.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller; one of the pair is discarded, for simplicity).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Uniform in `0..n` (`n >= 1`; the modulo bias is below 2^-50 here).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// `ln(1 + e^z)` without overflow.
fn softplus(z: f64) -> f64 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

/// Binary cross-entropy of logit `z` against label `y`: `-[y ln p + (1-y) ln(1-p)]`.
fn bce(z: f64, y: f64) -> f64 {
    softplus(z) - y * z
}

/// The temporary folder of the shards, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> Res<TempDir> {
        let path = std::env::temp_dir().join(format!("gpu-training-{}", std::process::id()));
        fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!(
                "training_pipeline: warning: cannot remove {}: {e}",
                self.0.display()
            );
        }
    }
}

/// The shards on disk and what the hidden model scores on them.
struct DataSet {
    shards: Vec<PathBuf>,
    /// The hidden model's unit direction.
    direction: Vec<f64>,
    positives: f64,
    teacher_loss: f64,
    teacher_accuracy: f64,
}

fn write_dataset(dir: &Path) -> Res<DataSet> {
    let mut rng = SplitMix64(SEED);
    let mut direction: Vec<f64> = (0..FEATURES).map(|_| rng.normal()).collect();
    let norm = direction.iter().map(|v| v * v).sum::<f64>().sqrt();
    direction.iter_mut().for_each(|v| *v /= norm);

    let rows = SAMPLES / SHARDS;
    let (mut positives, mut loss, mut correct) = (0usize, 0.0f64, 0usize);
    let mut shards = Vec::with_capacity(SHARDS);
    let mut x = [0f32; FEATURES];
    for s in 0..SHARDS {
        let path = dir.join(format!("shard-{s:02}.f32"));
        let file =
            File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let mut w = BufWriter::new(file);
        for _ in 0..rows {
            x.iter_mut().for_each(|v| *v = rng.normal() as f32);
            // The hidden model sees exactly the stored (f32) features.
            let dot: f64 = x.iter().zip(&direction).map(|(&a, b)| a as f64 * b).sum();
            let z = TEACHER_SCALE * dot + TEACHER_BIAS;
            let y = if rng.uniform() < sigmoid(z) { 1.0 } else { 0.0 };
            positives += (y == 1.0) as usize;
            loss += bce(z, y);
            correct += ((z > 0.0) == (y == 1.0)) as usize;
            for v in x.iter().chain([&(y as f32)]) {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        w.flush()
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        shards.push(path);
    }
    Ok(DataSet {
        shards,
        direction,
        positives: positives as f64 / SAMPLES as f64,
        teacher_loss: loss / SAMPLES as f64,
        teacher_accuracy: correct as f64 / SAMPLES as f64,
    })
}

/// Reads batches from the shards into the pipeline's staging buffers.
struct ShardReader {
    files: Vec<(File, PathBuf)>,
    bytes: Vec<u8>,
}

impl ShardReader {
    fn open(data: &DataSet) -> Res<ShardReader> {
        let want = (SAMPLES / SHARDS * RECORD * 4) as u64;
        let mut files = Vec::with_capacity(data.shards.len());
        for path in &data.shards {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let len = file.metadata()?.len();
            if len != want {
                return Err(format!("{}: {len} bytes, expected {want}", path.display()).into());
            }
            files.push((file, path.clone()));
        }
        Ok(ShardReader {
            files,
            bytes: vec![0; BATCH * RECORD * 4],
        })
    }

    /// Reads data batch `b` (rows `b*BATCH ..`) into `buf` as `[X | y]`: the records'
    /// features, row after row, then their labels.
    fn read_batch(&mut self, b: usize, buf: &mut [f32]) -> Result<(), gpukit::pipeline::BoxError> {
        let per_shard = SAMPLES / SHARDS / BATCH;
        let (file, path) = self
            .files
            .get_mut(b / per_shard)
            .ok_or_else(|| format!("batch {b} is past the last shard"))?;
        let offset = ((b % per_shard) * BATCH * RECORD * 4) as u64;
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut self.bytes))
            .map_err(|e| format!("reading batch {b} from {}: {e}", path.display()))?;
        let (x, y) = buf.split_at_mut(BATCH * FEATURES);
        let records = self.bytes.chunks_exact(RECORD * 4);
        for ((rec, row), label) in records.zip(x.chunks_exact_mut(FEATURES)).zip(y) {
            let mut values = rec
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            for v in row.iter_mut() {
                *v = values.next().unwrap_or(f32::NAN);
            }
            *label = values.next().unwrap_or(f32::NAN);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The model and the training loop.
// ---------------------------------------------------------------------------------------

/// The parameters and the per-batch scratch arrays, on the device; shared by every batch.
struct Model {
    /// `[w | b]`: the weights of the features, then the bias.
    params: GpuArray<f32>,
    /// `r = sigmoid(z) - y`, each sample's `dL/dz`.
    residual: GpuArray<f32>,
    /// Each sample's loss.
    loss: GpuArray<f32>,
    /// `[g_w | g_b]`, the gradient of the batch's mean loss.
    grad: GpuArray<f32>,
}

impl Model {
    fn new(ctx: &Context) -> gpukit::Result<Model> {
        Ok(Model {
            params: ctx.alloc_zeros(PARAMS)?,
            residual: ctx.alloc_zeros(BATCH)?,
            loss: ctx.alloc_zeros(BATCH)?,
            grad: ctx.alloc_zeros(PARAMS)?,
        })
    }

    /// Enqueues one batch on `s`: the forward pass and the loss into `output` and, when
    /// `update`, the backward pass and the SGD step. Nothing here waits for the device.
    fn step(
        &mut self,
        s: &Stream,
        input: &GpuArray<f32>,
        output: &mut GpuArray<f32>,
        update: bool,
    ) -> gpukit::Result<()> {
        let x = input.slice(..BATCH * FEATURES)?;
        let y = input.slice(BATCH * FEATURES..)?;
        let (mut logits, rest) = output.split_at_mut(BATCH)?;
        let (mut labels, rest) = rest.into_split_at(BATCH)?;
        let (mut brier, mut mean_loss) = rest.into_split_at(1)?;
        let w = self.params.slice(..FEATURES)?;
        let b = self.params.slice(FEATURES..)?;

        // z = X w + b: `b` is a row vector of one element, added to each row of the
        // BATCH x 1 logits.
        s.gemm(Gemm::new(BATCH, 1, FEATURES), &x, &w, &mut logits)?;
        s.add_row_inplace(Shape::new(BATCH, 1), &mut logits, &b)?;
        s.copy(&y, &mut labels)?; // for the host's accuracy and loss reference
        s.sigmoid(&logits, &mut self.residual)?;
        s.sub_inplace(&mut self.residual, &y)?; // r = sigmoid(z) - y = dL/dz
        s.dot_into(&self.residual, &self.residual, &mut brier)?;
        // Loss softplus(z) - y z = softplus(t) for t = (1 - 2y) z, as the labels are 0 or 1.
        s.mul_scalar(&y, -2.0, &mut self.loss)?;
        s.add_scalar_inplace(&mut self.loss, 1.0)?;
        s.mul_inplace(&mut self.loss, &logits)?;
        s.softplus_inplace(&mut self.loss)?;
        s.mean_into(&self.loss, &mut mean_loss)?;
        if update {
            let (mut grad_w, mut grad_b) = self.grad.split_at_mut(FEATURES)?;
            // g_w = X^T r / B: X is stored B x FEATURES, so op(A) = X^T is FEATURES x B.
            let g = Gemm::new(FEATURES, 1, BATCH)
                .transpose(true, false)
                .scaled(1.0 / BATCH as f32, 0.0);
            s.gemm(g, &x, &self.residual, &mut grad_w)?;
            s.mean_into(&self.residual, &mut grad_b)?; // g_b = sum r / B
            s.scale(1.0 - LR * WEIGHT_DECAY, &mut self.params)?;
            s.axpy(-LR, &self.grad, &mut self.params)?;
        }
        Ok(())
    }
}

/// Loss, accuracy and Brier score summed over a pass.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    /// The device's loss, summed over the samples (each batch's mean times its size).
    loss: f64,
    /// The same loss recomputed on the host in f64 from the downloaded logits: the reference.
    host_loss: f64,
    correct: usize,
    brier: f64,
    samples: usize,
}

impl Tally {
    /// Adds one batch's output `[z | y | Brier sum | mean loss]`.
    fn add(&mut self, out: &[f32]) {
        let (z, rest) = out.split_at(BATCH);
        let (y, sums) = rest.split_at(BATCH);
        for (&z, &y) in z.iter().zip(y) {
            self.host_loss += bce(z as f64, y as f64);
            self.correct += ((z > 0.0) == (y == 1.0)) as usize;
        }
        let (brier, mean_loss) = match *sums {
            [brier, mean_loss] => (brier as f64, mean_loss as f64),
            _ => (f64::NAN, f64::NAN),
        };
        self.brier += brier;
        self.loss += mean_loss * BATCH as f64;
        self.samples += BATCH;
    }

    fn mean_loss(&self) -> f64 {
        self.loss / self.samples as f64
    }

    fn host_mean_loss(&self) -> f64 {
        self.host_loss / self.samples as f64
    }

    fn accuracy(&self) -> f64 {
        self.correct as f64 / self.samples as f64
    }

    fn brier(&self) -> f64 {
        self.brier / self.samples as f64
    }
}

/// What a training run gives.
struct Outcome {
    loss: Vec<f64>,
    epochs: Vec<Tally>,
    eval_loss: f64,
    eval_accuracy: f64,
    eval: Tally,
    weights: Vec<f32>,
    seconds: f64,
    train_report: gpukit::Report,
}

impl Outcome {
    fn print(&self, backend: &str) {
        println!("training on {backend} ({:.2} s):", self.seconds);
        println!("  epoch   mean loss   accuracy   Brier");
        for (e, t) in self.epochs.iter().enumerate() {
            println!(
                "  {:>5}   {:>9.6}   {:>7.2}%   {:.4}",
                e + 1,
                t.mean_loss(),
                100.0 * t.accuracy(),
                t.brier()
            );
        }
        println!(
            "  final   {:>9.6}   {:>7.2}%   {:.4}   (forward-only pass with the final weights)",
            self.eval_loss,
            100.0 * self.eval_accuracy,
            self.eval.brier()
        );
        let r = &self.train_report;
        println!(
            "  pipeline: {} batches, {}, {:.0} ms wall; stage totals load {:.0} / upload {:.0} / compute {:.0} / download {:.0} ms; {:.2} of the max-stage bound",
            r.batches,
            r.pattern,
            r.wall_ms,
            r.stages.load,
            r.stages.upload,
            r.stages.compute,
            r.stages.download,
            r.efficiency
        );
    }
}

/// The data batch each pipeline batch reads: every epoch visits all batches, in an order
/// shuffled (Fisher-Yates) from the seed.
fn batch_order() -> Vec<usize> {
    let per_epoch = SAMPLES / BATCH;
    let mut rng = SplitMix64(SEED ^ 0x5348_5546_464c_4521);
    let mut order = Vec::with_capacity(EPOCHS * per_epoch);
    for _ in 0..EPOCHS {
        let mut epoch: Vec<usize> = (0..per_epoch).collect();
        for i in (1..per_epoch).rev() {
            epoch.swap(i, rng.below(i + 1));
        }
        order.extend(epoch);
    }
    order
}

/// Trains from zero weights on `ctx`, then evaluates the final weights.
fn train(ctx: &Context, data: &DataSet) -> Res<Outcome> {
    let per_epoch = SAMPLES / BATCH;
    let order = batch_order();
    let mut model = Model::new(ctx)?;
    let mut reader = ShardReader::open(data)?;
    let mut epochs = vec![Tally::default(); EPOCHS];

    let t = Instant::now();
    let train_report = Pipeline::new(ctx, Pattern::Triple)
        .batches(order.len())
        .input_len(IN_LEN)
        .output_len(OUT_LEN)
        .run(
            |i, buf: &mut [f32]| reader.read_batch(order[i], buf),
            |s, _i, input, output| model.step(s, input, output, true),
            |i, out: &[f32]| {
                epochs[i / per_epoch].add(out);
                Ok(())
            },
        )?;

    let mut eval = Tally::default();
    Pipeline::new(ctx, Pattern::Triple)
        .batches(per_epoch)
        .input_len(IN_LEN)
        .output_len(OUT_LEN)
        .run(
            |i, buf: &mut [f32]| reader.read_batch(i, buf),
            |s, _i, input, output| model.step(s, input, output, false),
            |_i, out: &[f32]| {
                eval.add(out);
                Ok(())
            },
        )?;
    let weights = model.params.download()?;
    let seconds = t.elapsed().as_secs_f64();

    Ok(Outcome {
        loss: epochs.iter().map(Tally::mean_loss).collect(),
        epochs,
        eval_loss: eval.mean_loss(),
        eval_accuracy: eval.accuracy(),
        eval,
        weights,
        seconds,
        train_report,
    })
}

/// `|a - b| / |b|`.
fn rel_diff(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, y)| x as f64 * y).sum();
    let na = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}
