//! A multi-layer perceptron trained on the handwritten digits data set, streamed from shard
//! files on disk through a [`gpukit::Pipeline`]: the model, the data and the training loop
//! of `examples/training_pipeline.rs` and of the test `examples/tests/digits.rs`.
//!
//! See the example's docs for the data, the model and the streams. In short: 1,797 8x8
//! images (pixels 0-16, scaled to 0-1), a seeded split into 1,437 training and 360 held-out
//! samples; the training set written as shards of [`SHARD_ROWS`] records (the last one
//! short); a 64-[`HIDDEN`]-10 perceptron with a ReLU hidden layer and softmax cross-entropy,
//! trained by minibatch SGD with momentum, one shard per pipeline batch shuffled on the device
//! into minibatches of [`MINIBATCH`] rows, every op (the random streams and the accuracy
//! counts included) on the device.

use std::error::Error;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use gpukit::{
    Batch, Context, Gemm, GpuArray, GpuView, GpuViewMut, Pattern, Pipeline, Report, Rng, Shape,
    Stream,
};

/// What the functions of this module return on error.
pub type Res<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// Pixels per image.
pub const FEATURES: usize = 64;
/// Digit classes.
pub const CLASSES: usize = 10;
/// Hidden units.
pub const HIDDEN: usize = 64;
/// Records per shard file, the pipeline's batch: 1,437 training samples are 11 full shards
/// and a short one of 29.
pub const SHARD_ROWS: usize = 128;
/// Rows per SGD step: a shard's rows, shuffled on the device, make two minibatches (the
/// short shard one).
pub const MINIBATCH: usize = 64;
/// Held-out samples.
pub const TEST_SAMPLES: usize = 360;
/// Bytes of one record on disk: 64 little-endian `f32` pixels, then the label as `u32`.
const RECORD_BYTES: usize = 4 * FEATURES + 4;

/// The data set's file, from scikit-learn (see `examples/data/README.md`).
pub fn data_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv")
}

/// How to train.
#[derive(Debug, Clone)]
pub struct Config {
    /// Passes over the training shards.
    pub epochs: usize,
    /// SGD learning rate.
    pub lr: f32,
    /// Momentum of the SGD velocity.
    pub momentum: f32,
    /// Seed of the split, the shard order and the device's random stream (the initial
    /// weights and the minibatches).
    pub seed: u64,
    /// The pipeline pattern.
    pub pattern: Pattern,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            epochs: 20,
            lr: 0.1,
            momentum: 0.9,
            seed: 0x6469_6769_7473,
            pattern: Pattern::Triple,
        }
    }
}

/// Images and labels in memory: `x` holds `FEATURES` values per sample, row-major.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// The pixels, `FEATURES` per sample.
    pub x: Vec<f32>,
    /// The digits.
    pub labels: Vec<u32>,
}

impl Samples {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    fn push(&mut self, other: &Samples, i: usize) {
        self.x
            .extend_from_slice(&other.x[i * FEATURES..(i + 1) * FEATURES]);
        self.labels.push(other.labels[i]);
    }
}

/// Reads the CSV: 64 pixel values (0-16) and the label on each line, pixels scaled to 0-1.
pub fn load_csv(path: &Path) -> Res<Samples> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut s = Samples::default();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != FEATURES + 1 {
            return Err(format!(
                "{} line {}: {} fields, expected {}",
                path.display(),
                n + 1,
                fields.len(),
                FEATURES + 1
            )
            .into());
        }
        for f in &fields[..FEATURES] {
            let v: f32 = f
                .trim()
                .parse()
                .map_err(|e| format!("line {}: {f:?}: {e}", n + 1))?;
            s.x.push(v / 16.0);
        }
        let label: u32 = fields[FEATURES]
            .trim()
            .parse()
            .map_err(|e| format!("line {}: label: {e}", n + 1))?;
        if label as usize >= CLASSES {
            return Err(format!("line {}: label {label} is not a digit", n + 1).into());
        }
        s.labels.push(label);
    }
    Ok(s)
}

/// SplitMix64: the seeded generator of the split and the shard order (the host's choices;
/// the weights and the minibatches come from the device's [`Rng`]).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// The seeded split: `TEST_SAMPLES` held out, the rest for training.
pub fn split(all: &Samples, seed: u64) -> (Samples, Samples) {
    let mut order: Vec<usize> = (0..all.len()).collect();
    SplitMix64(seed).shuffle(&mut order);
    let (mut train, mut test) = (Samples::default(), Samples::default());
    for (k, &i) in order.iter().enumerate() {
        if k < TEST_SAMPLES {
            test.push(all, i);
        } else {
            train.push(all, i);
        }
    }
    (train, test)
}

/// A folder removed on drop (also after an error).
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// `$TMPDIR/gpukit-digits-<pid>-<n>-<tag>`, where `n` counts the folders this process
    /// made: runs on several threads of one process (the tests) each get their own.
    pub fn create(tag: &str) -> Res<TempDir> {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let name = format!("gpukit-digits-{}-{n}-{tag}", std::process::id());
        let path = std::env::temp_dir().join(name);
        fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("warning: cannot remove {}: {e}", self.0.display());
        }
    }
}

/// Writes `train` as shard files of up to `SHARD_ROWS` records; returns their paths.
pub fn write_shards(dir: &Path, train: &Samples) -> Res<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for (k, start) in (0..train.len()).step_by(SHARD_ROWS).enumerate() {
        let end = (start + SHARD_ROWS).min(train.len());
        let path = dir.join(format!("train-{k:02}.bin"));
        let mut w = BufWriter::new(File::create(&path)?);
        for i in start..end {
            for v in &train.x[i * FEATURES..(i + 1) * FEATURES] {
                w.write_all(&v.to_le_bytes())?;
            }
            w.write_all(&train.labels[i].to_le_bytes())?;
        }
        w.flush()?;
        paths.push(path);
    }
    Ok(paths)
}

/// Reads a shard into the first rows of the staging arrays; returns the rows.
pub fn read_shard(path: &Path, x: &mut [f32], labels: &mut [u32]) -> Res<usize> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() % RECORD_BYTES != 0 {
        return Err(format!(
            "{}: {} bytes is not a whole number of {RECORD_BYTES}-byte records",
            path.display(),
            bytes.len()
        )
        .into());
    }
    let rows = bytes.len() / RECORD_BYTES;
    if rows > labels.len() {
        return Err(format!("{}: {rows} records, more than a batch", path.display()).into());
    }
    let word = |b: &[u8]| [b[0], b[1], b[2], b[3]];
    for (r, rec) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
        for (j, px) in rec[..4 * FEATURES].chunks_exact(4).enumerate() {
            x[r * FEATURES + j] = f32::from_le_bytes(word(px));
        }
        labels[r] = u32::from_le_bytes(word(&rec[4 * FEATURES..]));
    }
    Ok(rows)
}

/// What the loader tells the sink about a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// The epoch the batch belongs to.
    pub epoch: usize,
    /// The shard file's name.
    pub file: String,
    /// Whether it is the epoch's last batch.
    pub last_of_epoch: bool,
}

/// Which rows of every minibatch a model trains on: the whole minibatch on one device; in
/// data-parallel training ([`crate::parallel`]) rank `rank` of `ranks` takes its part
/// (`gpukit::core::collective::chunk`: the first `m % ranks` parts have a row more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// This model's rank.
    pub rank: usize,
    /// How many models share each minibatch.
    pub ranks: usize,
}

impl Part {
    /// One device, every row.
    pub const WHOLE: Part = Part { rank: 0, ranks: 1 };

    /// This part's first row and row count in a minibatch of `m` rows.
    pub fn rows(self, m: usize) -> (usize, usize) {
        gpukit::core::collective::chunk(m, self.ranks, self.rank)
    }
}

/// The gradients `[dW1, db1, dW2, db2]` of a step in one flat array (one bucket: the
/// data-parallel exchange all-reduces them in one call), handed to the exchange between
/// backward and the update, already scaled so that the average over the ranks is the
/// minibatch's mean gradient.
pub type Grads = GpuArray<f32>;

/// The sizes of `[W1, b1, W2, b2]`, the order of the parameters everywhere.
const SIZES: [usize; 4] = [FEATURES * HIDDEN, HIDDEN, HIDDEN * CLASSES, CLASSES];

/// The four gradients' views of the flat array.
fn split_grads(g: &mut Grads) -> gpukit::Result<[GpuViewMut<'_, f32>; 4]> {
    let (gw1, rest) = g.split_at_mut(SIZES[0])?;
    let (gb1, rest) = rest.into_split_at(SIZES[1])?;
    let (gw2, gb2) = rest.into_split_at(SIZES[2])?;
    Ok([gw1, gb1, gw2, gb2])
}

/// The perceptron's parameters, their SGD velocities, the device's random stream and the
/// scratch arrays of a step, all on the device; the state compute updates and the sink
/// reads.
#[derive(Debug)]
pub struct Model {
    /// The rows of each minibatch this model trains on.
    part: Part,
    w1: GpuArray<f32>,
    b1: GpuArray<f32>,
    w2: GpuArray<f32>,
    b2: GpuArray<f32>,
    /// Velocities, in the order of the parameters.
    v: [GpuArray<f32>; 4],
    /// Gradients, likewise, one after the other in one array.
    g: Grads,
    /// The device's random stream: the initial weights, then a shuffle of each shard's rows.
    rng: Rng,
    /// The shard's rows in the shuffled order the minibatches take them.
    perm: GpuArray<u32>,
    /// Scratch for a minibatch of up to `MINIBATCH` rows: its pixels and labels (gathered
    /// from the shard), the hidden activations, the logits, the gradient of the logits and
    /// of the hidden layer (before and after the ReLU's mask), the predicted classes and
    /// their count of correct ones.
    xb: GpuArray<f32>,
    lb: GpuArray<u32>,
    a1: GpuArray<f32>,
    z2: GpuArray<f32>,
    dz2: GpuArray<f32>,
    da1: GpuArray<f32>,
    dz1: GpuArray<f32>,
    pred: GpuArray<u32>,
    right: GpuArray<u32>,
    /// Correct training predictions per epoch, added up on the device (the sink reads each
    /// after its epoch's last batch).
    train_right: Vec<GpuArray<u32>>,
    /// The held-out set on the device, and its count of correct predictions after each
    /// epoch (compute writes it at the end of the epoch; the sink downloads it).
    test_x: GpuArray<f32>,
    test_labels: GpuArray<u32>,
    test_pred: GpuArray<u32>,
    test_right: Vec<GpuArray<u32>>,
    /// Scratch for the held-out forward pass.
    test_a1: GpuArray<f32>,
    test_z2: GpuArray<f32>,
    lr: f32,
    momentum: f32,
}

impl Model {
    /// Weights from the device's random stream (Kaiming-normal for the ReLU layer,
    /// Glorot-uniform for the output layer), zero biases and velocities, the held-out set
    /// uploaded.
    pub fn new(ctx: &Context, cfg: &Config, test: &Samples) -> gpukit::Result<Model> {
        Model::with_part(ctx, cfg, test, Part::WHOLE)
    }

    /// [`Model::new`] for the part `part` of every minibatch (the same initial weights on
    /// every rank: they come from the seed).
    pub fn with_part(
        ctx: &Context,
        cfg: &Config,
        test: &Samples,
        part: Part,
    ) -> gpukit::Result<Model> {
        let zeros = |n: usize| ctx.alloc_zeros::<f32>(n);
        let sizes = SIZES;
        let n = test.len();
        let mut rng = Rng::new(cfg.seed ^ 0x5eed);
        let mut w1 = ctx.alloc::<f32>(sizes[0])?;
        rng.kaiming_normal(ctx, &mut w1, FEATURES)?;
        let mut w2 = ctx.alloc::<f32>(sizes[2])?;
        rng.xavier_uniform(ctx, &mut w2, HIDDEN, CLASSES)?;
        let counters = || {
            (0..cfg.epochs)
                .map(|_| ctx.alloc_zeros::<u32>(1))
                .collect::<gpukit::Result<Vec<_>>>()
        };
        Ok(Model {
            part,
            w1,
            b1: zeros(HIDDEN)?,
            w2,
            b2: zeros(CLASSES)?,
            v: [
                zeros(sizes[0])?,
                zeros(sizes[1])?,
                zeros(sizes[2])?,
                zeros(sizes[3])?,
            ],
            g: zeros(SIZES.iter().sum())?,
            rng,
            perm: ctx.alloc_zeros::<u32>(SHARD_ROWS)?,
            xb: zeros(MINIBATCH * FEATURES)?,
            lb: ctx.alloc_zeros::<u32>(MINIBATCH)?,
            a1: zeros(MINIBATCH * HIDDEN)?,
            z2: zeros(MINIBATCH * CLASSES)?,
            dz2: zeros(MINIBATCH * CLASSES)?,
            da1: zeros(MINIBATCH * HIDDEN)?,
            dz1: zeros(MINIBATCH * HIDDEN)?,
            pred: ctx.alloc_zeros::<u32>(MINIBATCH)?,
            right: ctx.alloc_zeros::<u32>(1)?,
            train_right: counters()?,
            test_x: ctx.alloc_upload(&test.x)?,
            test_labels: ctx.alloc_upload(&test.labels)?,
            test_pred: ctx.alloc_zeros::<u32>(n)?,
            test_right: counters()?,
            test_a1: zeros(n * HIDDEN)?,
            test_z2: zeros(n * CLASSES)?,
            lr: cfg.lr,
            momentum: cfg.momentum,
        })
    }

    /// A shard's SGD steps: its rows shuffled on the device and taken as minibatches of up
    /// to `MINIBATCH` rows, this model's part of each gathered from the shard, then forward,
    /// the per-row losses into `loss` (the batch's output, in the order the rows were
    /// trained: the only per-row data that leaves the device, for printing the epoch's loss;
    /// the other parts' rows 0), the correct predictions added to the epoch's count,
    /// backward, `exchange` (the data-parallel all-reduce of the gradients; nothing on one
    /// device) and the momentum update; after an epoch's last shard, the held-out count
    /// (rank 0 only).
    pub fn step(
        &mut self,
        s: &Stream,
        b: &Batch<ShardInfo>,
        (x, labels): &(GpuView<'_, f32>, GpuView<'_, u32>),
        loss: &mut GpuViewMut<'_, f32>,
        exchange: &mut dyn FnMut(&mut Grads) -> gpukit::Result<()>,
    ) -> gpukit::Result<()> {
        let r = b.rows;
        if r == 0 {
            return Ok(());
        }
        let table = Shape::new(r, FEATURES);
        // The same permutation on every rank: it comes from the seed and the shard count.
        self.rng.permutation(s, &mut self.perm.slice_mut(..r)?)?;
        if self.part.ranks > 1 {
            s.fill(&mut loss.slice_mut(..r)?, 0.0)?;
        }
        for start in (0..r).step_by(MINIBATCH) {
            let m = MINIBATCH.min(r - start);
            let (first, rows) = self.part.rows(m);
            let idx = self.perm.slice(start + first..start + first + rows)?;
            s.gather_rows(table, x, &idx, &mut self.xb.slice_mut(..rows * FEATURES)?)?;
            s.gather_rows(
                Shape::new(r, 1),
                labels,
                &idx,
                &mut self.lb.slice_mut(..rows)?,
            )?;
            let mut rows_loss = loss.slice_mut(start + first..start + first + rows)?;
            self.sgd(s, rows, m, b.meta.epoch, &mut rows_loss, exchange)?;
        }
        if b.meta.last_of_epoch && self.part.rank == 0 {
            self.evaluate(s, b.meta.epoch)?;
        }
        Ok(())
    }

    /// One SGD step on the `m` rows in `xb`, `lb`, this model's part of a minibatch of
    /// `total` rows: the gradients of the part's loss summed and scaled by
    /// `ranks / total`, so that their average over the ranks is the minibatch's mean
    /// gradient (`1 / m` on one device), then `exchange`, then the update.
    pub fn sgd(
        &mut self,
        s: &Stream,
        m: usize,
        total: usize,
        epoch: usize,
        loss: &mut GpuViewMut<'_, f32>,
        exchange: &mut dyn FnMut(&mut Grads) -> gpukit::Result<()>,
    ) -> gpukit::Result<()> {
        if m == 0 {
            // Nothing of this minibatch here: a zero contribution to the average.
            s.fill(&mut self.g, 0.0)?;
            return self.update(s, exchange);
        }
        let x = self.xb.slice(..m * FEATURES)?;
        let labels = self.lb.slice(..m)?;
        let mut a1 = self.a1.slice_mut(..m * HIDDEN)?;
        let mut z2 = self.z2.slice_mut(..m * CLASSES)?;
        let mut dz2 = self.dz2.slice_mut(..m * CLASSES)?;
        let mut da1 = self.da1.slice_mut(..m * HIDDEN)?;
        let mut dz1 = self.dz1.slice_mut(..m * HIDDEN)?;
        let mut pred = self.pred.slice_mut(..m)?;
        let inv = self.part.ranks as f32 / total as f32;
        // Forward, loss, and the correct predictions, counted on the device.
        let weights = [&self.w1, &self.b1, &self.w2, &self.b2];
        forward(s, weights, m, &x, &mut a1, &mut z2)?;
        let logits = Shape::new(m, CLASSES);
        s.cross_entropy_grad_checked(logits, &z2, &labels, loss, &mut dz2)?; // softmax - onehot
        s.row_argmax(logits, &z2, &mut pred)?;
        s.count_eq_into(&pred, &labels, &mut self.right)?;
        s.add_inplace(&mut self.train_right[epoch], &self.right)?;
        // Backward, each gradient of the mean loss (alpha = 1 / m).
        let [gw1, gb1, gw2, gb2] = &mut split_grads(&mut self.g)?;
        let mean = |g: Gemm<f32>| g.scaled(inv, 0.0);
        let (ta, tb) = ((true, false), (false, true));
        let t_ = |g: Gemm<f32>, (a, b): (bool, bool)| g.transpose(a, b);
        s.gemm(mean(t_(Gemm::new(HIDDEN, CLASSES, m), ta)), &a1, &dz2, gw2)?; // a1^T dz2
        s.col_sum(logits, &dz2, gb2)?; //                                       bias: column sums
        s.mul_scalar_inplace(gb2, inv)?;
        s.gemm(
            t_(Gemm::new(m, HIDDEN, CLASSES), tb),
            &dz2,
            &self.w2,
            &mut da1,
        )?; // dz2 W2^T
        s.relu_backward(&a1, &da1, &mut dz1)?; //               through the ReLU: where a1 > 0
        s.gemm(mean(t_(Gemm::new(FEATURES, HIDDEN, m), ta)), &x, &dz1, gw1)?; // x^T dz1
        s.col_sum(Shape::new(m, HIDDEN), &dz1, gb1)?;
        s.mul_scalar_inplace(gb1, inv)?;
        self.update(s, exchange)
    }

    /// The gradients through `exchange`, then `v = momentum v + g; p -= lr v`.
    fn update(
        &mut self,
        s: &Stream,
        exchange: &mut dyn FnMut(&mut Grads) -> gpukit::Result<()>,
    ) -> gpukit::Result<()> {
        exchange(&mut self.g)?;
        let params = [&mut self.w1, &mut self.b1, &mut self.w2, &mut self.b2];
        for ((p, v), g) in params
            .into_iter()
            .zip(&mut self.v)
            .zip(split_grads(&mut self.g)?)
        {
            s.scale(self.momentum, v)?;
            s.add_inplace(v, &g)?;
            s.axpy(-self.lr, v, p)?;
        }
        Ok(())
    }

    /// The held-out set's correct predictions with the current parameters, into
    /// `test_right[epoch]`.
    fn evaluate(&mut self, s: &Stream, epoch: usize) -> gpukit::Result<()> {
        let n = self.test_labels.len();
        let x = self.test_x.slice(..)?;
        let mut a1 = self.test_a1.slice_mut(..)?;
        let mut z2 = self.test_z2.slice_mut(..)?;
        let weights = [&self.w1, &self.b1, &self.w2, &self.b2];
        forward(s, weights, n, &x, &mut a1, &mut z2)?;
        s.row_argmax(Shape::new(n, CLASSES), &z2, &mut self.test_pred)?;
        s.count_eq_into(
            &self.test_pred,
            &self.test_labels,
            &mut self.test_right[epoch],
        )
    }

    /// The correct training and held-out predictions of `epoch`, from the counts compute
    /// wrote (these downloads wait for them: gpukit orders them after the compute stream's
    /// writes).
    fn epoch_right(&self, epoch: usize) -> gpukit::Result<(usize, usize)> {
        let train = self.train_right[epoch].download()?[0] as usize;
        let test = self.test_right[epoch].download()?[0] as usize;
        Ok((train, test))
    }

    /// The parameters `[W1, b1, W2, b2]`, downloaded.
    pub fn parameters(&self) -> gpukit::Result<Vec<Vec<f32>>> {
        [&self.w1, &self.b1, &self.w2, &self.b2]
            .iter()
            .map(|p| p.download())
            .collect()
    }

    /// Uploads a minibatch's pixels and labels into the step's scratch arrays, for
    /// [`Model::sgd`] called directly (the tests' one step).
    pub fn load_minibatch(&mut self, x: &[f32], labels: &[u32]) -> gpukit::Result<()> {
        self.xb.slice_mut(..x.len())?.upload(x)?;
        self.lb.slice_mut(..labels.len())?.upload(labels)
    }

    /// The correct predictions of this model's rows in `epoch`, counted on its device.
    pub fn train_right(&self, epoch: usize) -> gpukit::Result<usize> {
        Ok(self.train_right[epoch].download()?[0] as usize)
    }

    /// The correct held-out predictions after `epoch` (rank 0's count).
    pub fn test_right(&self, epoch: usize) -> gpukit::Result<usize> {
        Ok(self.test_right[epoch].download()?[0] as usize)
    }

    /// A checksum of the parameters (to compare runs bit for bit).
    pub fn checksum(&self) -> gpukit::Result<u64> {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            for v in p.download()? {
                h = (h ^ u64::from(v.to_bits())).wrapping_mul(0x100_0000_01b3);
            }
        }
        Ok(h)
    }
}

/// The forward pass of `rows` rows of `x` with the weights `[W1, b1, W2, b2]`: the hidden
/// activations into `a1`, the logits into `z2`.
fn forward(
    s: &Stream,
    [w1, b1, w2, b2]: [&GpuArray<f32>; 4],
    rows: usize,
    x: &GpuView<'_, f32>,
    a1: &mut GpuViewMut<'_, f32>,
    z2: &mut GpuViewMut<'_, f32>,
) -> gpukit::Result<()> {
    s.gemm(Gemm::new(rows, HIDDEN, FEATURES), x, w1, a1)?; //       a1 = x W1
    s.add_row_inplace(Shape::new(rows, HIDDEN), a1, b1)?; //           + b1
    s.relu_inplace(a1)?; //                                             relu
    s.gemm(Gemm::new(rows, CLASSES, HIDDEN), &*a1, w2, z2)?; //     z2 = a1 W2
    s.add_row_inplace(Shape::new(rows, CLASSES), z2, b2) //            + b2
}

/// What a training run measured, per epoch and at the end.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Mean training cross-entropy of each epoch (each batch's loss measured before its own
    /// update, as training loops report it).
    pub epoch_loss: Vec<f64>,
    /// Training accuracy of each epoch, likewise.
    pub epoch_train_accuracy: Vec<f64>,
    /// Held-out accuracy after each epoch.
    pub epoch_test_accuracy: Vec<f64>,
    /// The shard files each epoch read, in order (from the batches' metadata).
    pub epoch_files: Vec<Vec<String>>,
    /// Checksum of the final parameters.
    pub checksum: u64,
    /// The pipeline's report.
    pub report: Report,
}

impl Outcome {
    /// Held-out accuracy of the final parameters.
    pub fn test_accuracy(&self) -> f64 {
        self.epoch_test_accuracy.last().copied().unwrap_or(0.0)
    }
}

/// What the sink adds up over an epoch.
#[derive(Debug, Default)]
struct EpochSums {
    loss: f64,
    right: usize,
    rows: usize,
    files: Vec<String>,
}

/// Trains on `train` (written as shards under a temporary folder), evaluates on `test`,
/// both from the data set's file: the whole training loop on `ctx`.
pub fn train(ctx: &Context, cfg: &Config) -> Res<Outcome> {
    let all = load_csv(&data_path())?;
    let (train, test) = split(&all, cfg.seed);
    let dir = TempDir::create(ctx.backend_name())?;
    let shards = write_shards(dir.path(), &train)?;
    train_on_shards(ctx, cfg, &shards, &test)
}

/// The order each epoch visits the `shards` shard files in, shuffled from the seed.
pub fn shard_order(cfg: &Config, shards: usize) -> Vec<Vec<usize>> {
    let mut rng = SplitMix64(cfg.seed ^ 0x006f_7264_6572);
    (0..cfg.epochs)
        .map(|_| {
            let mut o: Vec<usize> = (0..shards).collect();
            rng.shuffle(&mut o);
            o
        })
        .collect()
}

/// The shard file's name, for the batches' metadata.
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
}

/// Trains from the shard files `shards`, evaluating on `test` after every epoch.
pub fn train_on_shards(
    ctx: &Context,
    cfg: &Config,
    shards: &[PathBuf],
    test: &Samples,
) -> Res<Outcome> {
    if cfg.epochs == 0 || shards.is_empty() {
        return Err("nothing to train: no epochs or no shards".into());
    }
    let order = shard_order(cfg, shards.len());
    let per_epoch = shards.len();
    let test_samples = test.len().max(1);
    let mut model = Model::new(ctx, cfg, test)?;
    let mut sums: Vec<EpochSums> = (0..cfg.epochs).map(|_| EpochSums::default()).collect();
    let mut test_accuracy = Vec::new();
    let report = Pipeline::new(ctx, cfg.pattern)
        .batches(cfg.epochs * per_epoch)
        .max_rows(SHARD_ROWS)
        .input::<(f32, u32)>([FEATURES, 1]) // pixels and the label of each row
        .output::<f32>(1) // the loss of each row, for printing
        .run_with(
            &mut model,
            // The loader thread: batch i is shard order[epoch][k], read from disk.
            |i, (x, labels)| {
                let (epoch, k) = (i / per_epoch, i % per_epoch);
                let path = &shards[order[epoch][k]];
                let rows = read_shard(path, x, labels)?;
                let file = file_name(path);
                let info = ShardInfo {
                    epoch,
                    file,
                    last_of_epoch: k + 1 == per_epoch,
                };
                Ok((rows, info))
            },
            // The compute stream: the SGD step, which updates the model (the shared state).
            |model, s, b, inputs, outputs| model.step(s, b, inputs, outputs, &mut |_| Ok(())),
            // This thread, in batch order: the epoch's loss; after its last batch, the
            // correct predictions compute counted on the device over that epoch, and the
            // held-out ones of the parameters it left at the end of that epoch.
            |model, b, loss| {
                let e = &mut sums[b.meta.epoch];
                e.loss += loss.iter().map(|&l| f64::from(l)).sum::<f64>();
                e.rows += b.rows;
                e.files.push(b.meta.file.clone());
                if b.meta.last_of_epoch {
                    let (train, test) = model.epoch_right(b.meta.epoch)?;
                    e.right = train;
                    test_accuracy.push(test as f64 / test_samples as f64);
                }
                Ok(())
            },
        )?;
    Ok(Outcome {
        epoch_loss: sums.iter().map(|e| e.loss / e.rows.max(1) as f64).collect(),
        epoch_train_accuracy: sums
            .iter()
            .map(|e| e.right as f64 / e.rows.max(1) as f64)
            .collect(),
        epoch_test_accuracy: test_accuracy,
        epoch_files: sums.into_iter().map(|e| e.files).collect(),
        checksum: model.checksum()?,
        report,
    })
}
