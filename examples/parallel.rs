//! The digits perceptron of [`crate::digits`] trained data-parallel over a
//! [`DeviceGroup`]: the model of `examples/data_parallel.rs` and of the test
//! `examples/tests/data_parallel.rs`.
//!
//! Every device holds a replica of the model, initialised from the same seed (the same
//! bits everywhere). One loader thread reads each shard file once and deals it to every
//! device's [`gpukit::Pipeline`]; each device shuffles the shard's rows the same way (the
//! device's random stream, from the seed) and trains on its part of every minibatch
//! ([`Part`]: rank `k` of `n` takes rows `chunk(m, n, k)`). Its gradients are the part's
//! sums scaled by `n / m`, so their average over the ranks, which the group's
//! [`Communicator`] all-reduces (`CollectiveOp::Avg`) between backward and the update, is
//! the minibatch's mean gradient: every replica applies the same update and stays equal to
//! the others, and to the single-device model up to the order of the sums.
//!
//! The pipelines run on threads of their own, one per device; the all-reduce is queued by
//! rank 0 once every rank has queued its backward pass (the ranks meet at a [`Gate`] twice
//! a step, to hand their gradient arrays over and to take them back). Work is only queued
//! there: the devices run it in order, the all-reduce waiting for each rank's gradients on
//! that rank's stream and each update waiting for the all-reduce.

use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use gpukit::{CollectiveOp, Communicator, Context, DeviceGroup, Error, GpuArray, Pipeline, Report};

use crate::digits::{
    self, file_name, load_csv, read_shard, shard_order, split, Config, Grads, Model, Part, Samples,
    ShardInfo, TempDir, FEATURES, SHARD_ROWS,
};

/// What the functions of this module return on error.
pub type Res<T = ()> = digits::Res<T>;

/// A meeting point for the ranks' threads, reusable, that a failing rank can open for good
/// (so the others stop instead of waiting for it forever).
#[derive(Debug)]
pub struct Gate {
    ranks: usize,
    state: Mutex<GateState>,
    turn: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    arrived: usize,
    round: u64,
    aborted: bool,
}

impl Gate {
    /// A gate for `ranks` threads.
    pub fn new(ranks: usize) -> Gate {
        Gate {
            ranks,
            state: Mutex::new(GateState::default()),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every rank has arrived; an error once a rank has given up.
    pub fn wait(&self) -> gpukit::Result<()> {
        let mut st = self.lock();
        if st.aborted {
            return Err(stopped());
        }
        let round = st.round;
        st.arrived += 1;
        if st.arrived == self.ranks {
            st.arrived = 0;
            st.round += 1;
            self.turn.notify_all();
            return Ok(());
        }
        while st.round == round && !st.aborted {
            st = self.turn.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.round == round {
            return Err(stopped());
        }
        Ok(())
    }

    /// Gives up: every waiting and later `wait` fails.
    pub fn abort(&self) {
        self.lock().aborted = true;
        self.turn.notify_all();
    }
}

fn stopped() -> Error {
    Error::Backend {
        backend: "data-parallel",
        call: "Gate::wait",
        message: "another rank stopped (its error is reported by its own pipeline)".into(),
    }
}

/// The gradients' all-reduce between the ranks' threads: each rank hands its arrays over,
/// rank 0 queues the all-reduce of all of them, each takes its own back.
#[derive(Debug)]
pub struct Exchange {
    comm: Communicator,
    contexts: Vec<Context>,
    slots: Mutex<Vec<Option<Grads>>>,
    /// Rank 0's all-reduce error, for the others.
    failed: Mutex<Option<String>>,
    gate: Gate,
}

impl Exchange {
    /// An exchange over the group's devices, through `comm`.
    pub fn new(group: &DeviceGroup, comm: Communicator) -> Exchange {
        let n = group.len();
        Exchange {
            comm,
            contexts: group.contexts().to_vec(),
            slots: Mutex::new((0..n).map(|_| None).collect()),
            failed: Mutex::new(None),
            gate: Gate::new(n),
        }
    }

    /// The gate the ranks meet at (also to start together, and to give up).
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Option<Grads>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rank `rank`'s part: `grads` become the average of every rank's.
    pub fn all_reduce(&self, rank: usize, grads: &mut Grads) -> gpukit::Result<()> {
        let ctx = &self.contexts[rank];
        self.slots()[rank] = Some(std::mem::replace(grads, ctx.alloc(0)?));
        let reduced = self.gate.wait().and_then(|()| {
            if rank == 0 {
                if let Err(e) = self.reduce_all() {
                    *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
            }
            self.gate.wait()
        });
        if let Some(g) = self.slots()[rank].take() {
            *grads = g;
        }
        reduced?;
        match self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            None => Ok(()),
            Some(message) => Err(Error::Backend {
                backend: "data-parallel",
                call: "Communicator::all_reduce",
                message: message.clone(),
            }),
        }
    }

    /// Rank 0, with every rank's gradients handed over: their all-reduce, in one call.
    fn reduce_all(&self) -> gpukit::Result<()> {
        let mut slots = self.slots();
        let mut bufs: Vec<&mut GpuArray<f32>> = slots.iter_mut().flatten().collect();
        self.comm.all_reduce(&mut bufs, CollectiveOp::Avg)
    }
}

/// What a data-parallel run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Devices (ranks).
    pub devices: usize,
    /// Mean training cross-entropy of each epoch, over every rank's rows.
    pub epoch_loss: Vec<f64>,
    /// Training accuracy of each epoch, over every rank's rows.
    pub epoch_train_accuracy: Vec<f64>,
    /// Held-out accuracy after each epoch (rank 0's replica).
    pub epoch_test_accuracy: Vec<f64>,
    /// Checksum of each rank's final parameters (all equal when the replicas agree).
    pub checksums: Vec<u64>,
    /// Each device's pipeline report, rank order.
    pub reports: Vec<Report>,
    /// Wall time of the training, ms.
    pub wall_ms: f64,
}

impl Outcome {
    /// Held-out accuracy of the final parameters.
    pub fn test_accuracy(&self) -> f64 {
        self.epoch_test_accuracy.last().copied().unwrap_or(0.0)
    }

    /// Whether every replica ended with the same parameters, bit for bit.
    pub fn replicas_agree(&self) -> bool {
        self.checksums.windows(2).all(|w| w[0] == w[1])
    }
}

/// A shard as the loader read it, dealt to every device.
#[derive(Debug)]
struct Shard {
    x: Vec<f32>,
    labels: Vec<u32>,
    rows: usize,
    info: ShardInfo,
}

/// What one rank's thread returns.
struct RankRun {
    loss: Vec<f64>,
    rows: Vec<usize>,
    right: Vec<usize>,
    test_right: Vec<usize>,
    checksum: u64,
    report: Report,
}

/// Trains on the digits data set over `group`, as [`digits::train`] does on one device.
pub fn train(group: &DeviceGroup, cfg: &Config) -> Res<Outcome> {
    let all = load_csv(&digits::data_path())?;
    let (train, test) = split(&all, cfg.seed);
    let dir = TempDir::create(&format!("dp{}", group.len()))?;
    let shards = digits::write_shards(dir.path(), &train)?;
    train_on_shards(group, cfg, &shards, &test)
}

/// Trains from the shard files `shards` over `group`, evaluating on `test` after every
/// epoch (on rank 0).
pub fn train_on_shards(
    group: &DeviceGroup,
    cfg: &Config,
    shards: &[PathBuf],
    test: &Samples,
) -> Res<Outcome> {
    if cfg.epochs == 0 || shards.is_empty() {
        return Err("nothing to train: no epochs or no shards".into());
    }
    let n = group.len();
    let order = shard_order(cfg, shards.len());
    let per_epoch = shards.len();
    let batches = cfg.epochs * per_epoch;
    let exchange = Exchange::new(group, group.communicator()?);
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..n).map(|_| sync_channel::<Arc<Shard>>(2)).unzip();
    let start = std::time::Instant::now();
    let runs: Vec<Res<RankRun>> = std::thread::scope(|scope| {
        let loader = scope.spawn(|| deal(shards, &order, senders));
        let ranks: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(rank, rx)| {
                let (ctx, exchange) = (&group[rank], &exchange);
                scope.spawn(move || {
                    let run = train_rank(
                        ctx,
                        cfg,
                        test,
                        Part { rank, ranks: n },
                        batches,
                        rx,
                        exchange,
                    );
                    if run.is_err() {
                        exchange.gate().abort();
                    }
                    run
                })
            })
            .collect();
        let runs = ranks
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a rank's thread panicked".into()))
            })
            .collect();
        if let Ok(Err(e)) = loader.join() {
            eprintln!("warning: the loader stopped: {e}");
        }
        runs
    });
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let runs = runs.into_iter().collect::<Res<Vec<RankRun>>>()?;
    let rows = &runs[0].rows;
    let sum = |f: fn(&RankRun, usize) -> f64, e: usize| runs.iter().map(|r| f(r, e)).sum::<f64>();
    let test_samples = test.len().max(1) as f64;
    Ok(Outcome {
        devices: n,
        epoch_loss: (0..cfg.epochs)
            .map(|e| sum(|r, e| r.loss[e], e) / rows[e].max(1) as f64)
            .collect(),
        epoch_train_accuracy: (0..cfg.epochs)
            .map(|e| sum(|r, e| r.right[e] as f64, e) / rows[e].max(1) as f64)
            .collect(),
        epoch_test_accuracy: runs[0]
            .test_right
            .iter()
            .map(|&r| r as f64 / test_samples)
            .collect(),
        checksums: runs.iter().map(|r| r.checksum).collect(),
        reports: runs.into_iter().map(|r| r.report).collect(),
        wall_ms,
    })
}

/// The loader thread: reads each shard once and deals it to every device's pipeline.
fn deal(shards: &[PathBuf], order: &[Vec<usize>], to: Vec<SyncSender<Arc<Shard>>>) -> Res {
    for (epoch, files) in order.iter().enumerate() {
        for (k, &f) in files.iter().enumerate() {
            let path = &shards[f];
            let (mut x, mut labels) = (vec![0.0; SHARD_ROWS * FEATURES], vec![0; SHARD_ROWS]);
            let rows = read_shard(path, &mut x, &mut labels)?;
            let info = ShardInfo {
                epoch,
                file: file_name(path),
                last_of_epoch: k + 1 == files.len(),
            };
            let shard = Arc::new(Shard {
                x,
                labels,
                rows,
                info,
            });
            for tx in &to {
                // A pipeline that stopped takes no more: its error is its own to report.
                if tx.send(shard.clone()).is_err() {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// One rank: its replica, trained through a pipeline on its device.
fn train_rank(
    ctx: &Context,
    cfg: &Config,
    test: &Samples,
    part: Part,
    batches: usize,
    shards: Receiver<Arc<Shard>>,
    exchange: &Exchange,
) -> Res<RankRun> {
    let mut model = Model::with_part(ctx, cfg, test, part)?;
    let (mut loss, mut rows) = (vec![0.0f64; cfg.epochs], vec![0usize; cfg.epochs]);
    let mut test_right = Vec::new();
    // The pipelines start together, so that their timelines share an origin.
    exchange.gate().wait()?;
    let report = Pipeline::new(ctx, cfg.pattern)
        .batches(batches)
        .max_rows(SHARD_ROWS)
        .input::<(f32, u32)>([FEATURES, 1])
        .output::<f32>(1)
        .run_with(
            &mut model,
            move |_, (x, labels)| {
                let shard = shards.recv().map_err(|_| "the loader stopped")?;
                x[..shard.rows * FEATURES].copy_from_slice(&shard.x[..shard.rows * FEATURES]);
                labels[..shard.rows].copy_from_slice(&shard.labels[..shard.rows]);
                Ok((shard.rows, shard.info.clone()))
            },
            |model, s, b, inputs, outputs| {
                model.step(s, b, inputs, outputs, &mut |g| {
                    exchange.all_reduce(part.rank, g)
                })
            },
            |model, b, batch_loss| {
                let e = b.meta.epoch;
                loss[e] += batch_loss.iter().map(|&l| f64::from(l)).sum::<f64>();
                rows[e] += b.rows;
                if b.meta.last_of_epoch && part.rank == 0 {
                    test_right.push(model.test_right(e)?);
                }
                Ok(())
            },
        )?;
    let right = (0..cfg.epochs)
        .map(|e| model.train_right(e))
        .collect::<gpukit::Result<Vec<_>>>()?;
    Ok(RankRun {
        loss,
        rows,
        right,
        test_right,
        checksum: model.checksum()?,
        report,
    })
}

/// One SGD step on the minibatch `x`, `labels` (at most `MINIBATCH` rows) over `group`
/// (each rank its part, the gradients all-reduced) and on `single` (every row); returns the
/// largest difference of a parameter between rank 0 and the single device, relative to the
/// largest magnitude of that parameter, and whether every rank's parameters are equal.
pub fn one_step_difference(
    group: &DeviceGroup,
    single: &Context,
    cfg: &Config,
    x: &[f32],
    labels: &[u32],
) -> Res<(f64, bool)> {
    let m = labels.len();
    let none = Samples::default();
    let mut reference = Model::new(single, cfg, &none)?;
    step_on(&mut reference, single, x, labels, m, &mut |_| Ok(()))?;
    let want = reference.parameters()?;
    let n = group.len();
    let exchange = Exchange::new(group, group.communicator()?);
    let params: Vec<Res<Vec<Vec<f32>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (ctx, exchange, none) = (&group[rank], &exchange, &none);
                scope.spawn(move || -> Res<Vec<Vec<f32>>> {
                    let part = Part { rank, ranks: n };
                    let (first, rows) = part.rows(m);
                    let xs = &x[first * FEATURES..(first + rows) * FEATURES];
                    let mut model = Model::with_part(ctx, cfg, none, part)?;
                    let mine = &labels[first..first + rows];
                    let run = step_on(&mut model, ctx, xs, mine, m, &mut |g| {
                        exchange.all_reduce(rank, g)
                    });
                    if run.is_err() {
                        exchange.gate().abort();
                    }
                    run?;
                    Ok(model.parameters()?)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a rank's thread panicked".into()))
            })
            .collect()
    });
    let params = params.into_iter().collect::<Res<Vec<_>>>()?;
    let agree = params.windows(2).all(|w| w[0] == w[1]);
    let mut worst = 0.0f64;
    for (got, want) in params[0].iter().zip(&want) {
        let scale = want
            .iter()
            .fold(0.0f64, |a, &v| a.max(f64::from(v).abs()))
            .max(f64::MIN_POSITIVE);
        for (a, b) in got.iter().zip(want) {
            worst = worst.max((f64::from(*a) - f64::from(*b)).abs() / scale);
        }
    }
    Ok((worst, agree))
}

/// One SGD step of `model` on the rows `x`, `labels`, its part of a minibatch of `total`.
fn step_on(
    model: &mut Model,
    ctx: &Context,
    x: &[f32],
    labels: &[u32],
    total: usize,
    exchange: &mut dyn FnMut(&mut Grads) -> gpukit::Result<()>,
) -> Res {
    let rows = labels.len();
    model.load_minibatch(x, labels)?;
    let mut loss = ctx.alloc_zeros::<f32>(rows.max(1))?;
    model.sgd(ctx, rows, total, 0, &mut loss.slice_mut(..rows)?, exchange)?;
    Ok(())
}
