//! What a run measured: per-stage times from events, the max-stage bound and where its
//! stage costs came from, overlap efficiency, the speed-up over a sequential baseline,
//! device idle time and throughput. The timeline itself is in [`crate::Timeline`].
//!
//! # An honest bound
//!
//! Stages that overlap slow each other down (they share cores, memory bandwidth, the copy
//! engines), so a run's own stage times describe *its* contention, not the work: a bound built
//! from them grows with the contention it is meant to judge, and a slow overlapped run can
//! look efficient. The bound is therefore always built from stage costs measured with one
//! batch in flight ([`BoundSource`]): the sequential pattern's own stage times, the
//! calibration batches a buffered run starts with ([`crate::Pipeline::calibration_batches`]),
//! or, after [`Report::against`], a sequential baseline of the same work. Against a baseline
//! every pattern shares one bound, so a run that is slower than sequential always reports
//! the lower efficiency, and [`Report::speedup_vs_sequential`] says by how much.

use gpukit_core::{Backend, Context};

use crate::error::{PipelineError, Stage};
use crate::pattern::Pattern;
use crate::timeline::{Lane, Span, Timeline};

/// Total milliseconds of each stage over all batches.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StageTimes {
    /// Loading (host wall time).
    pub load: f64,
    /// Host to device.
    pub upload: f64,
    /// Device work.
    pub compute: f64,
    /// Device to host.
    pub download: f64,
    /// The calling thread's time in the compute function (enqueueing the device work).
    pub enqueue: f64,
    /// The calling thread's time in the sink.
    pub deliver: f64,
}

impl StageTimes {
    /// Every stage scaled by `k`.
    fn scaled(&self, k: f64) -> StageTimes {
        self.zip(self, |a, _| a * k)
    }

    /// `f` of each stage of `self` and `other`.
    fn zip(&self, other: &StageTimes, f: impl Fn(f64, f64) -> f64) -> StageTimes {
        StageTimes {
            load: f(self.load, other.load),
            upload: f(self.upload, other.upload),
            compute: f(self.compute, other.compute),
            download: f(self.download, other.download),
            enqueue: f(self.enqueue, other.enqueue),
            deliver: f(self.deliver, other.deliver),
        }
    }

    /// Adds `other`, stage by stage.
    pub(crate) fn add(&mut self, other: &StageTimes) {
        *self = self.zip(other, |a, b| a + b);
    }
}

/// Where the stage costs behind [`Report::bound_ms`] were measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BoundSource {
    /// The run itself, in the sequential pattern: nothing overlapped, so its stage times are
    /// uncontended.
    Sequential,
    /// The first `batches` batches of a buffered run, each run alone (load, upload, compute,
    /// download, nothing else in flight); each stage's least time per row among them,
    /// times the run's rows.
    Calibrated {
        /// Batches run alone.
        batches: usize,
    },
    /// A sequential run of the same work, given to [`Report::against`].
    Baseline,
}

impl std::fmt::Display for BoundSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BoundSource::Sequential => f.write_str("this sequential run's stage times"),
            BoundSource::Calibrated { batches: 1 } => {
                f.write_str("stage costs of the first batch, run alone")
            }
            BoundSource::Calibrated { batches } => {
                write!(
                    f,
                    "stage costs of the first {batches} batches, each run alone"
                )
            }
            BoundSource::Baseline => f.write_str("the stage times of a sequential baseline"),
        }
    }
}

/// What the bound needs to know about the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// The CPU backend: every stage shares the same cores.
    pub cpu_backend: bool,
    /// Cores (CPU backend) or multiprocessors.
    pub cores: u32,
    /// Copy engines (2: upload and download can overlap).
    pub copy_engines: u32,
}

impl Resources {
    pub(crate) fn of<B: Backend>(ctx: &Context<B>) -> Resources {
        let info = ctx.info();
        Resources {
            cpu_backend: info.compute_capability.is_none(),
            cores: info.multiprocessors,
            copy_engines: info.copy_engines,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The pattern that ran.
    pub pattern: Pattern,
    /// `cpu` or `cuda`.
    pub backend: &'static str,
    /// Batches processed.
    pub batches: usize,
    /// Rows processed, over all batches.
    pub rows: usize,
    /// Bytes uploaded, over all batches.
    pub bytes_in: usize,
    /// Bytes downloaded, over all batches.
    pub bytes_out: usize,
    /// Wall time of the run, ms (from the start event to the last delivery).
    pub wall_ms: f64,
    /// Per-stage totals, as they ran (with whatever contention the overlap caused): the
    /// spans of the timeline, and the calling thread's enqueue and deliver times.
    pub stages: StageTimes,
    /// CPU time the loader used, ms (below `stages.load` when it waits on I/O).
    pub load_cpu_ms: f64,
    /// The uncontended stage costs the bound is built from (see [`Report::bound_source`]);
    /// compute counts only the time its stream surely worked, not the stretches in which it
    /// may have waited for the compute function to enqueue more.
    pub uncontended: StageTimes,
    /// The loader's uncontended CPU time, ms (the CPU backend's bound counts it).
    pub uncontended_load_cpu_ms: f64,
    /// The max-stage bound, ms: the time the busiest resource needs for this work at its
    /// uncontended costs; no schedule of the work can beat it (see [`bound_ms`]).
    pub bound_ms: f64,
    /// Where the costs behind `bound_ms` were measured.
    pub bound_source: BoundSource,
    /// `bound_ms / wall_ms`: 1.0 is perfect overlap. Above 1 only by measurement noise.
    pub efficiency: f64,
    /// The sequential baseline's wall time over this run's, once [`Report::against`] has
    /// been given one: above 1 is faster than sequential.
    pub speedup_vs_sequential: Option<f64>,
    /// Fraction of the wall time no device stage was running.
    pub device_idle: f64,
    /// Batches per second.
    pub batches_per_s: f64,
    /// Bytes moved (in and out) per second.
    pub bytes_per_s: f64,
    /// What the bound assumed about the machine.
    pub resources: Resources,
    /// The timeline.
    pub timeline: Timeline,
}

impl Report {
    /// This run judged against `baseline`, a [`Pattern::Sequential`] run of the same work
    /// (same batches and rows) on the same backend: the bound is rebuilt from the baseline's
    /// stage times ([`BoundSource::Baseline`]), so every run compared with the same baseline
    /// shares one bound and the slower run reports the lower efficiency, and
    /// [`Report::speedup_vs_sequential`] is set. The baseline judged against itself gives
    /// speed-up 1.
    ///
    /// A baseline that is not sequential, or ran other work, is a
    /// [`PipelineError::Config`] error.
    pub fn against(&self, baseline: &Report) -> Result<Report, PipelineError> {
        if baseline.pattern != Pattern::Sequential {
            return Err(PipelineError::Config(format!(
                "Report::against: the baseline ran {}, not sequential (only a sequential run's \
                 stage times are free of contention)",
                baseline.pattern
            )));
        }
        let same = (baseline.backend, baseline.batches, baseline.rows)
            == (self.backend, self.batches, self.rows);
        if !same {
            return Err(PipelineError::Config(format!(
                "Report::against: the baseline ran {} batches ({} rows) on {}, this run {} \
                 batches ({} rows) on {}: not the same work",
                baseline.batches,
                baseline.rows,
                baseline.backend,
                self.batches,
                self.rows,
                self.backend
            )));
        }
        let mut r = self.clone();
        r.uncontended = baseline.uncontended;
        r.uncontended_load_cpu_ms = baseline.uncontended_load_cpu_ms;
        r.bound_ms = bound_ms(
            &r.uncontended,
            r.uncontended_load_cpu_ms,
            r.resources.cpu_backend,
            r.resources.cores,
            r.resources.copy_engines,
        );
        r.bound_source = BoundSource::Baseline;
        r.efficiency = r.bound_ms / r.wall_ms.max(f64::MIN_POSITIVE);
        r.speedup_vs_sequential = Some(baseline.wall_ms / r.wall_ms.max(f64::MIN_POSITIVE));
        Ok(r)
    }

    /// One line: pattern, wall time, bound and where it came from, efficiency, speed-up.
    pub fn summary(&self) -> String {
        let speedup = self
            .speedup_vs_sequential
            .map(|s| format!(", {s:.2}x sequential"))
            .unwrap_or_default();
        format!(
            "{}: {:.2} ms, bound {:.2} ms ({}), efficiency {:.2}{speedup}",
            self.pattern, self.wall_ms, self.bound_ms, self.bound_source, self.efficiency
        )
    }
}

/// The max-stage bound of a run: the time the busiest resource needs, whatever the overlap.
///
/// - Each stage runs one batch at a time, so the run takes at least each stage's total
///   (load on the loader thread; upload and download on their streams, or together when the
///   device has a single copy engine; compute; and the calling thread's enqueueing and
///   delivering).
/// - On the CPU backend every stage but a loader's waiting is work for the same `cores`, so
///   the run also takes at least (load CPU time + upload + compute + download + enqueue +
///   deliver) / cores.
///
/// The totals must be uncontended (see the [module docs](self)): with a run's own,
/// contended stage times the bound grows with the contention it should expose.
pub fn bound_ms(
    stages: &StageTimes,
    load_cpu_ms: f64,
    cpu_backend: bool,
    cores: u32,
    copy_engines: u32,
) -> f64 {
    let copies = if copy_engines >= 2 {
        stages.upload.max(stages.download)
    } else {
        stages.upload + stages.download
    };
    let host = stages.enqueue + stages.deliver;
    let mut bound = stages.load.max(copies).max(stages.compute).max(host);
    if cpu_backend {
        let work = load_cpu_ms + stages.upload + stages.compute + stages.download + host;
        bound = bound.max(work / f64::from(cores.max(1)));
    }
    bound
}

/// The length of the union of `intervals`.
fn union_ms(mut intervals: Vec<(f64, f64)>) -> f64 {
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (s, e) in intervals {
        match current {
            Some((cs, ce)) if s <= ce => current = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                current = Some((s, e));
            }
            None => current = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = current {
        total += ce - cs;
    }
    total
}

/// The least cost per row of each stage over the batches a buffered run ran alone.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Calibration {
    /// Batches measured.
    pub(crate) batches: usize,
    /// Least ms per row of each stage, and of the loader's CPU time.
    per_row: Option<(StageTimes, f64)>,
}

impl Calibration {
    /// Adds one batch run alone: its rows (an empty batch counts as one, its fixed cost),
    /// stage times and loader CPU time.
    pub(crate) fn add(&mut self, rows: usize, t: &StageTimes, load_cpu_ms: f64) {
        let units = rows.max(1) as f64;
        let this = (t.scaled(1.0 / units), load_cpu_ms / units);
        self.per_row = Some(match self.per_row {
            None => this,
            Some((p, c)) => (p.zip(&this.0, f64::min), c.min(this.1)),
        });
        self.batches += 1;
    }

    /// The uncontended totals for `units` rows (empty batches counting one).
    fn totals(&self, units: usize) -> (StageTimes, f64) {
        let (p, c) = self.per_row.unwrap_or_default();
        (p.scaled(units as f64), c * units as f64)
    }
}

/// What a run gives [`build`].
pub(crate) struct Measured {
    pub(crate) pattern: Pattern,
    pub(crate) batches: usize,
    pub(crate) rows: usize,
    /// Rows with each empty batch counted as one (the calibration's unit).
    pub(crate) units: usize,
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: usize,
    pub(crate) lanes: Vec<Lane>,
    pub(crate) spans: Vec<Span>,
    pub(crate) wall_ms: f64,
    pub(crate) load_cpu_ms: f64,
    /// The costs of all batches (compute as the stream's sure work, with the calling
    /// thread's enqueue and deliver times); uncontended in the sequential pattern.
    pub(crate) costs: StageTimes,
    pub(crate) calibration: Calibration,
}

pub(crate) fn build<B: Backend>(ctx: &Context<B>, m: Measured) -> Report {
    let mut stages = StageTimes {
        enqueue: m.costs.enqueue,
        ..StageTimes::default()
    };
    for s in &m.spans {
        match s.stage {
            Stage::Load => stages.load += s.ms(),
            Stage::Upload => stages.upload += s.ms(),
            Stage::Compute => stages.compute += s.ms(),
            Stage::Download => stages.download += s.ms(),
            Stage::Deliver => stages.deliver += s.ms(),
        }
    }
    let resources = Resources::of(ctx);
    let (uncontended, uncontended_load_cpu_ms, bound_source) = if m.pattern == Pattern::Sequential {
        (m.costs, m.load_cpu_ms, BoundSource::Sequential)
    } else {
        let (t, c) = m.calibration.totals(m.units);
        let source = BoundSource::Calibrated {
            batches: m.calibration.batches,
        };
        (t, c, source)
    };
    let bound = bound_ms(
        &uncontended,
        uncontended_load_cpu_ms,
        resources.cpu_backend,
        resources.cores,
        resources.copy_engines,
    );
    let device: Vec<(f64, f64)> = m
        .spans
        .iter()
        .filter(|s| matches!(s.stage, Stage::Upload | Stage::Compute | Stage::Download))
        .map(|s| (s.start_ms, s.end_ms))
        .collect();
    let wall = m.wall_ms.max(f64::MIN_POSITIVE);
    let busy = union_ms(device).min(wall);
    let secs = wall / 1e3;
    Report {
        pattern: m.pattern,
        backend: ctx.backend_name(),
        batches: m.batches,
        rows: m.rows,
        bytes_in: m.bytes_in,
        bytes_out: m.bytes_out,
        wall_ms: m.wall_ms,
        stages,
        load_cpu_ms: m.load_cpu_ms,
        uncontended,
        uncontended_load_cpu_ms,
        bound_ms: bound,
        bound_source,
        efficiency: bound / wall,
        speedup_vs_sequential: None,
        device_idle: 1.0 - busy / wall,
        batches_per_s: m.batches as f64 / secs,
        bytes_per_s: (m.bytes_in + m.bytes_out) as f64 / secs,
        resources,
        timeline: Timeline {
            lanes: m.lanes,
            spans: m.spans,
            title: format!("{} on {}", m.pattern, ctx.backend_name()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_overlaps() {
        assert_eq!(union_ms(vec![(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]), 4.0);
        assert_eq!(union_ms(vec![]), 0.0);
    }

    #[test]
    fn bound_takes_the_busiest_resource() {
        let mut s = StageTimes {
            load: 10.0,
            upload: 6.0,
            compute: 8.0,
            download: 6.0,
            ..StageTimes::default()
        };
        // Two copy engines: the loader is the bottleneck.
        assert_eq!(bound_ms(&s, 10.0, false, 1, 2), 10.0);
        // One copy engine: upload and download share it.
        assert_eq!(bound_ms(&s, 10.0, false, 1, 1), 12.0);
        // CPU backend with 2 cores: 30 ms of work over 2 cores is 15 ms; with a loader that
        // mostly sleeps (1 ms of CPU) the work is 21 ms, 10.5 ms over 2 cores.
        assert_eq!(bound_ms(&s, 10.0, true, 2, 2), 15.0);
        assert_eq!(bound_ms(&s, 1.0, true, 2, 2), 10.5);
        // The calling thread enqueues and delivers every batch: 13 ms of it is the bound.
        s.enqueue = 9.0;
        s.deliver = 4.0;
        assert_eq!(bound_ms(&s, 10.0, false, 1, 2), 13.0);
        assert_eq!(bound_ms(&s, 1.0, true, 2, 2), 17.0);
    }

    /// A report of `pattern` that took `wall` ms with these stage totals, its bound from
    /// its own stages (as a sequential run's is).
    fn report(pattern: Pattern, wall: f64, stages: StageTimes) -> Report {
        let resources = Resources {
            cpu_backend: true,
            cores: 2,
            copy_engines: 2,
        };
        let bound = bound_ms(&stages, stages.load, true, 2, 2);
        Report {
            pattern,
            backend: "cpu",
            batches: 8,
            rows: 800,
            bytes_in: 3200,
            bytes_out: 3200,
            wall_ms: wall,
            stages,
            load_cpu_ms: stages.load,
            uncontended: stages,
            uncontended_load_cpu_ms: stages.load,
            bound_ms: bound,
            bound_source: BoundSource::Sequential,
            efficiency: bound / wall,
            speedup_vs_sequential: None,
            device_idle: 0.0,
            batches_per_s: 0.0,
            bytes_per_s: 0.0,
            resources,
            timeline: Timeline::default(),
        }
    }

    fn stages(load: f64, upload: f64, compute: f64, download: f64) -> StageTimes {
        StageTimes {
            load,
            upload,
            compute,
            download,
            ..StageTimes::default()
        }
    }

    #[test]
    fn a_run_slower_than_its_baseline_reports_the_lower_efficiency() {
        // The newcomer's case: small batches, where triple buffering's stages slowed each
        // other down so much that the run was slower than sequential (43.9 ms vs 39.2 ms).
        // Built from its own contended stage times, triple's bound (and efficiency) was
        // high; against the sequential baseline it is the baseline's bound.
        let seq = report(Pattern::Sequential, 39.2, stages(10.0, 9.0, 11.0, 9.0));
        let triple = report(Pattern::Triple, 43.9, stages(20.0, 25.0, 40.0, 24.0));
        assert!(triple.efficiency > seq.efficiency, "the misleading figure");
        let judged = match triple.against(&seq) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        let seq_judged = match seq.against(&seq) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(judged.bound_ms, seq.bound_ms);
        assert_eq!(judged.bound_source, BoundSource::Baseline);
        assert!(judged.efficiency < seq_judged.efficiency);
        assert_eq!(judged.speedup_vs_sequential, Some(39.2 / 43.9));
        assert_eq!(seq_judged.speedup_vs_sequential, Some(1.0));
        assert!(seq_judged.efficiency <= 1.0);
        assert!(
            judged.summary().contains("0.89x sequential"),
            "{}",
            judged.summary()
        );
    }

    #[test]
    fn against_rejects_a_baseline_of_other_work() {
        let seq = report(Pattern::Sequential, 10.0, stages(1.0, 1.0, 1.0, 1.0));
        let double = report(Pattern::Double, 8.0, stages(1.0, 1.0, 1.0, 1.0));
        assert!(matches!(
            double.against(&double),
            Err(PipelineError::Config(_))
        ));
        let mut other = seq.clone();
        other.rows += 1;
        assert!(matches!(
            double.against(&other),
            Err(PipelineError::Config(_))
        ));
        let mut other = seq.clone();
        other.backend = "cuda";
        assert!(matches!(
            double.against(&other),
            Err(PipelineError::Config(_))
        ));
        assert!(double.against(&seq).is_ok());
    }

    #[test]
    fn calibration_keeps_the_least_cost_per_row() {
        let mut c = Calibration::default();
        // A first batch slowed by warm-up, then a warm one; an empty batch counts as a row.
        c.add(100, &stages(50.0, 20.0, 30.0, 10.0), 40.0);
        c.add(50, &stages(10.0, 5.0, 20.0, 5.0), 8.0);
        c.add(0, &stages(0.5, 0.05, 0.3, 0.05), 0.1);
        assert_eq!(c.batches, 3);
        let (t, cpu) = c.totals(1000);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(t.load, 200.0), "{t:?}"); // 0.2 ms a row, the second batch
        assert!(close(t.upload, 50.0), "{t:?}"); // 0.05, the empty batch
        assert!(close(t.compute, 300.0), "{t:?}"); // 0.3, the empty batch
        assert!(close(t.download, 50.0), "{t:?}");
        assert!(close(cpu, 100.0), "{cpu}");
    }
}
