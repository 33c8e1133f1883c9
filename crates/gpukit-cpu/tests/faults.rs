//! Fault injection on the CPU backend (feature `fault-injection`; run with
//! `cargo test -p gpukit-cpu --features fault-injection`, and by `cargo test --workspace`,
//! where gpukit-pipeline's dev-dependency turns the feature on):
//!
//! - each kind of fault (allocation, copy, op, event) fails exactly the planned call, with a
//!   typed error, at the call that would have queued the work;
//! - a multi-stream program (three streams, uploads, built-in ops, gemm, a kernel, events,
//!   waits, downloads) is run once to count its backend calls, then once per call with that
//!   call failing: the error surfaces at the program step that made the call (every earlier
//!   step succeeded), nothing hangs, every array holds what the steps before the fault
//!   wrote, and every buffer, host allocation and stream is released in the end.

use std::collections::BTreeMap;
use std::time::Duration;

use gpukit_core::{
    Error, Event, Gemm, GpuArray, HostBuffer, HostUse, In, Kernel, KernelSpec, LaunchConfig, Out,
    Pending, Stream,
};
use gpukit_cpu::fault::{is_injected, within_limit};
use gpukit_cpu::{reference, CpuBackend, CpuContext, FaultKind, FaultPlan, FaultProbe};

/// How long one case may take before it counts as a hang (see [`within_limit`]).
const CASE_LIMIT: Duration = Duration::from_secs(30);

/// Elements per array (a 4 x 4 matrix for gemm).
const N: usize = 16;

fn faulty_context(plan: Option<FaultPlan>) -> (CpuContext, FaultProbe) {
    let (backend, probe) =
        CpuBackend::with_faults(plan.unwrap_or(FaultPlan::new(FaultKind::Any, u64::MAX)))
            .expect("open the CPU backend");
    if plan.is_none() {
        probe.disarm();
    }
    (
        gpukit_core::Context::new(backend).expect("open a context"),
        probe,
    )
}

// ---------------------------------------------------------------------------------------
// One fault of each kind
// ---------------------------------------------------------------------------------------

#[test]
fn counters_count_each_kind_and_live_objects() {
    let (ctx, probe) = faulty_context(None);
    let s0 = probe.stats();
    assert_eq!((s0.any, s0.live_buffers, s0.live_streams), (0, 0, 1));
    let a = ctx.alloc_upload(&[1.0f32, 2.0]).unwrap();
    let mut b = ctx.alloc_zeros::<f32>(2).unwrap();
    ctx.add(&a, &a, &mut b).unwrap();
    let st = probe.stats();
    // The two arrays and the default stream's fault record, allocated at its first checked
    // launch (the add's).
    assert_eq!(st.allocs, 3);
    assert_eq!(st.copies, 1, "alloc_upload copies once");
    assert_eq!(st.ops, 1);
    assert_eq!(st.any, st.allocs + st.copies + st.ops + st.events);
    assert_eq!(st.live_buffers, 3);
    assert_eq!(ctx.backend().fault_stats().live_buffers, 3);
    let h = ctx.alloc_host::<f32>(8, HostUse::Download).unwrap();
    assert_eq!(probe.stats().live_host, 1);
    drop(h);
    assert_eq!(probe.stats().live_host, 1, "the pool keeps it");
    ctx.set_host_pool_limit(0);
    assert_eq!(probe.stats().live_host, 0);
    let s = ctx.create_stream().unwrap();
    assert_eq!(probe.stats().live_streams, 2);
    drop((a, b, s));
    ctx.sync().unwrap();
    let st = probe.stats();
    assert_eq!(
        (st.live_buffers, st.live_streams),
        (3, 1),
        "the device pool keeps both arrays' blocks, the default stream its fault record"
    );
    ctx.trim().unwrap();
    let st = probe.stats();
    assert_eq!((st.live_buffers, st.live_streams, st.injected), (1, 1, 0));
    drop(ctx);
    assert_eq!(
        (probe.stats().live_buffers, probe.stats().live_streams),
        (0, 0)
    );
}

#[test]
fn running_out_of_memory_trims_the_device_pool_and_retries() {
    let (ctx, probe) = faulty_context(None);
    let keep = ctx.alloc_upload(&[1u32, 2, 3]).unwrap();
    drop(ctx.alloc::<u32>(1 << 16).unwrap());
    assert_eq!(
        ctx.memory_stats().bytes_cached(),
        1 << 18,
        "the pool caches the block"
    );
    // The next device allocation runs out: the pool hands its cache back and tries again.
    probe.arm(FaultPlan::new(FaultKind::Alloc, 1));
    let b = ctx.alloc::<u32>(128).unwrap();
    assert_eq!(probe.injected().len(), 1);
    let st = ctx.memory_stats();
    assert_eq!((st.bytes_released, st.bytes_cached()), (1 << 18, 0));
    assert_eq!(st.bytes_in_use, 512 + 512);
    assert_eq!(probe.stats().live_buffers, 2, "the cached block was freed");
    assert_eq!(keep.download().unwrap(), [1, 2, 3]);
    drop(b);
}

#[test]
fn an_alloc_fault_is_out_of_memory_and_only_the_nth_fails() {
    // 128 u32s fill one of the device pool's blocks exactly: the failed allocation has no
    // smaller size to fall back to (and nothing is cached to trim), so the fault surfaces.
    let (ctx, probe) = faulty_context(Some(FaultPlan::new(FaultKind::Alloc, 3)));
    let a = ctx.alloc_zeros::<u32>(128).unwrap();
    let _h = ctx.alloc_host::<u32>(4, HostUse::Upload).unwrap();
    match ctx.alloc_zeros::<u32>(128) {
        Err(Error::OutOfMemory {
            backend: "cpu",
            requested: 512,
            detail,
        }) => assert!(detail.contains("injected fault #3"), "{detail}"),
        other => panic!("expected an injected OutOfMemory, got {other:?}"),
    }
    assert!(!probe.is_armed(), "a fault is one-shot");
    let b = ctx.alloc_zeros::<u32>(128).unwrap();
    assert_eq!(
        probe.stats().live_buffers,
        2,
        "the failed allocation holds nothing"
    );
    assert_eq!(probe.injected().len(), 1);
    assert_eq!(probe.injected()[0].call, "alloc");
    drop((a, b));
}

#[test]
fn copy_op_and_event_faults_fail_synchronously_and_leave_outputs_untouched() {
    for (kind, nth, call) in [
        (FaultKind::Copy, 2, "copy_h2d"),
        // `add` is a kernel: the backend call that fails is its launch.
        (FaultKind::Op, 1, "launch"),
        (FaultKind::Event, 1, "record_event"),
    ] {
        let (ctx, probe) = faulty_context(None);
        let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0]).unwrap();
        let mut out = ctx.alloc_upload(&[7.0f32; 3]).unwrap();
        probe.arm(FaultPlan::new(kind, nth));
        let r = match kind {
            FaultKind::Copy => ctx.copy(&a, &mut out).and_then(|()| out.upload(&[9.0; 3])),
            FaultKind::Op => ctx.add(&a, &a, &mut out),
            _ => ctx.record_event().map(drop),
        };
        match r {
            Err(Error::Backend {
                backend: "cpu",
                call: c,
                message,
            }) => {
                assert_eq!(c, call, "{kind:?}");
                assert_eq!(message, format!("injected fault #{nth}"));
            }
            other => panic!("{kind:?}: expected the injected fault, got {other:?}"),
        }
        ctx.sync().expect("nothing was queued by the failed call");
        let expect = if kind == FaultKind::Copy {
            vec![1.0, 2.0, 3.0] // the copy before the failed upload ran
        } else {
            vec![7.0; 3]
        };
        assert_eq!(out.download().unwrap(), expect, "{kind:?}");
        // The context stays usable.
        ctx.add(&a, &a, &mut out).unwrap();
        assert_eq!(out.download().unwrap(), [2.0, 4.0, 6.0]);
    }
}

// ---------------------------------------------------------------------------------------
// A multi-stream program with a fault at every step
// ---------------------------------------------------------------------------------------

/// `y[i] = x[i] * 0.5 - 1` for `i < n`.
type HalfSig = (In<f32>, Out<f32>, u64);

/// Host values the arrays must hold after the steps that succeeded.
#[derive(Clone, Default, Debug, PartialEq)]
struct Model {
    arrays: BTreeMap<&'static str, Vec<f32>>,
    /// What the pending download of `m` must deliver.
    pending_m: Vec<f32>,
}

impl Model {
    fn get(&self, name: &str) -> Vec<f32> {
        self.arrays[name].clone()
    }

    fn set(&mut self, name: &'static str, v: Vec<f32>) {
        self.arrays.insert(name, v);
    }

    fn map2(&self, a: &str, b: &str, f: impl Fn(f32, f32) -> f32) -> Vec<f32> {
        let (a, b) = (self.get(a), self.get(b));
        a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect()
    }
}

type Arr = GpuArray<f32, CpuBackend>;

/// The program's live objects.
struct Prog {
    ctx: CpuContext,
    s: [Stream<CpuBackend>; 3],
    arrays: BTreeMap<&'static str, Arr>,
    kernel: Kernel<HalfSig, CpuBackend>,
    event: Option<Event<CpuBackend>>,
    up: Option<Pending<HostBuffer<f32, CpuBackend>, CpuBackend>>,
    down: Option<Pending<Vec<f32>, CpuBackend>>,
    /// Results read back during the program that did not match the model.
    mismatches: Vec<String>,
}

impl Prog {
    fn a(&self, name: &str) -> &Arr {
        &self.arrays[name]
    }

    /// Takes an array out to write it (put it back with `put`).
    fn take(&mut self, name: &str) -> Arr {
        self.arrays.remove(name).expect("array exists")
    }

    fn put(&mut self, name: &'static str, a: Arr) {
        self.arrays.insert(name, a);
    }

    fn check(&mut self, what: &str, got: Vec<f32>, want: Vec<f32>) {
        if got != want {
            self.mismatches
                .push(format!("{what}: got {got:?}, want {want:?}"));
        }
    }
}

type Run = fn(&mut Prog, &Model) -> gpukit_core::Result<()>;
type Update = fn(&mut Model);

/// One step of the program: the calls, and what they do to the model when they succeed.
struct Step {
    name: &'static str,
    run: Run,
    update: Update,
}

fn xs() -> Vec<f32> {
    (0..N).map(|i| i as f32).collect()
}

fn ys() -> Vec<f32> {
    (0..N).map(|i| (N - i) as f32).collect()
}

/// Runs a binary op writing `out` on a stream (the output is taken out of the map so that
/// inputs can be borrowed beside it).
fn with_out(
    p: &mut Prog,
    out: &'static str,
    f: impl FnOnce(&Prog, &mut Arr) -> gpukit_core::Result<()>,
) -> gpukit_core::Result<()> {
    let mut o = p.take(out);
    let r = f(p, &mut o);
    p.put(out, o);
    r
}

/// A step allocating the zeroed array `name`.
macro_rules! alloc_step {
    ($name:literal) => {
        Step {
            name: concat!("alloc ", $name),
            run: |p, _| {
                let a = p.ctx.alloc_zeros::<f32>(N)?;
                p.put($name, a);
                Ok(())
            },
            update: |m| m.set($name, vec![0.0; N]),
        }
    };
}

/// `a b` for two 4 x 4 matrices, from the f64 reference (exact here: small integers and
/// halves).
fn gemm_4x4(a: &[f32], b: &[f32]) -> Vec<f32> {
    let product =
        reference::gemm(&Gemm::new(4, 4, 4), a, b, &[]).expect("the reference gets whole matrices");
    product.into_iter().map(|v| v as f32).collect()
}

fn program() -> Vec<Step> {
    vec![
        alloc_step!("x"),
        alloc_step!("y"),
        alloc_step!("z"),
        alloc_step!("w"),
        alloc_step!("v"),
        alloc_step!("m"),
        Step {
            name: "s0: async upload of x from pinned memory",
            run: |p, _| {
                let mut h = p.ctx.alloc_host::<f32>(N, HostUse::Upload)?;
                h.copy_from_slice(&xs());
                let mut x = p.take("x");
                let r = p.s[0].upload(h, &mut x);
                p.put("x", x);
                p.up = Some(r?);
                Ok(())
            },
            update: |m| m.set("x", xs()),
        },
        Step {
            name: "s1: blocking upload of y",
            run: |p, _| with_out(p, "y", |p, y| p.s[1].upload_blocking(&ys(), y)),
            update: |m| m.set("y", ys()),
        },
        Step {
            name: "s2: z = x * y (waits for both uploads)",
            run: |p, _| with_out(p, "z", |p, z| p.s[2].mul(p.a("x"), p.a("y"), z)),
            update: |m| m.set("z", m.map2("x", "y", |a, b| a * b)),
        },
        Step {
            name: "s2: record an event",
            run: |p, _| {
                p.event = Some(p.s[2].record_event()?);
                Ok(())
            },
            update: |_| {},
        },
        Step {
            name: "s0: wait for the event",
            run: |p, _| p.s[0].wait(p.event.as_ref().expect("recorded")),
            update: |_| {},
        },
        Step {
            name: "s0: z *= 0.5",
            run: |p, _| with_out(p, "z", |p, z| p.s[0].scale(0.5, z)),
            update: |m| m.set("z", m.map2("z", "z", |a, _| a * 0.5)),
        },
        Step {
            name: "s1: w = z - x",
            run: |p, _| with_out(p, "w", |p, w| p.s[1].sub(p.a("z"), p.a("x"), w)),
            update: |m| m.set("w", m.map2("z", "x", |a, b| a - b)),
        },
        Step {
            name: "s1: w = 0",
            run: |p, _| with_out(p, "w", |p, w| p.s[1].fill(w, 0.0)),
            update: |m| m.set("w", vec![0.0; N]),
        },
        Step {
            name: "s1: v = relu(z)",
            run: |p, _| with_out(p, "v", |p, v| p.s[1].relu(p.a("z"), v)),
            update: |m| m.set("v", m.map2("z", "z", |a, _| a.max(0.0))),
        },
        Step {
            name: "s2: kernel w = x * 0.5 - 1",
            run: |p, _| {
                let mut w = p.take("w");
                let r = p.s[2].launch(
                    &p.kernel,
                    LaunchConfig::for_elems(N),
                    (p.a("x"), &mut w, N as u64),
                );
                p.put("w", w);
                r
            },
            update: |m| m.set("w", m.map2("x", "x", |a, _| a * 0.5 - 1.0)),
        },
        Step {
            name: "s2: m = z * y (gemm 4x4)",
            run: |p, _| {
                with_out(p, "m", |p, m| {
                    p.s[2].gemm(Gemm::new(4, 4, 4), p.a("z"), p.a("y"), m)
                })
            },
            update: |m| m.set("m", gemm_4x4(&m.get("z"), &m.get("y"))),
        },
        Step {
            name: "s1: y = v (d2d copy; waits for gemm's read of y)",
            run: |p, _| with_out(p, "y", |p, y| p.s[1].copy(p.a("v"), y)),
            update: |m| m.set("y", m.get("v")),
        },
        Step {
            name: "wait for the upload of x",
            run: |p, _| {
                let up = p.up.take().expect("upload pending");
                let h = up.wait()?;
                if h[..] != xs()[..] {
                    p.mismatches.push("upload buffer changed".into());
                }
                Ok(())
            },
            update: |_| {},
        },
        Step {
            name: "s0: async download of m",
            run: |p, _| {
                p.down = Some(p.s[0].download(p.a("m"), vec![0.0f32; N])?);
                Ok(())
            },
            update: |m| m.pending_m = m.get("m"),
        },
        Step {
            name: "s0: x = 2 y + x (waits for s1's copy and s2's kernel)",
            run: |p, _| with_out(p, "x", |p, x| p.s[0].axpy(2.0, p.a("y"), x)),
            update: |m| m.set("x", m.map2("y", "x", |y, x| 2.0 * y + x)),
        },
        Step {
            name: "s1: fill w = 3 (waits for s2's kernel)",
            run: |p, _| with_out(p, "w", |p, w| p.s[1].fill(w, 3.0)),
            update: |m| m.set("w", vec![3.0; N]),
        },
        Step {
            name: "wait for the download of m",
            run: |p, m| {
                let got = p.down.take().expect("download pending").wait()?;
                p.check("download of m", got, m.pending_m.clone());
                Ok(())
            },
            update: |_| {},
        },
        Step {
            name: "default stream: sum(x)",
            run: |p, m| {
                let got = p.ctx.sum(p.a("x"))?;
                let want: f32 = m.get("x").iter().sum();
                p.check("sum of x", vec![got], vec![want]);
                Ok(())
            },
            update: |_| {},
        },
        Step {
            name: "s2: dot(x, y)",
            run: |p, m| {
                let got = p.s[2].dot(p.a("x"), p.a("y"))?;
                let want: f32 = m.map2("x", "y", |a, b| a * b).iter().sum();
                p.check("dot of x and y", vec![got], vec![want]);
                Ok(())
            },
            update: |_| {},
        },
        Step {
            name: "s1: max(v)",
            run: |p, m| {
                let got = p.s[1].max(p.a("v"))?;
                let want = m.get("v").into_iter().fold(f32::MIN, f32::max);
                p.check("max of v", vec![got], vec![want]);
                Ok(())
            },
            update: |_| {},
        },
    ]
}

/// What one run of the program did.
#[derive(Debug, Default)]
struct Outcome {
    /// The `Any` count after each step that ran (up to and including a failing one).
    calls_after: Vec<u64>,
    /// The step that failed, with its error.
    failed: Option<(usize, Error)>,
    /// Whether the failing step's outputs hold the values a successful step would have
    /// written (never allowed: a failed call leaves its outputs untouched).
    outputs_written_despite_error: bool,
    /// The step whose injected fault was absorbed: an ordering event after queued work
    /// failed, gpukit-core waited for the work instead, and the call succeeded.
    absorbed: Option<usize>,
}

/// Runs the program on a fresh context with `plan` armed once the streams exist, checks
/// everything a fault must leave intact, and reports what happened.
fn run_program(plan: Option<FaultPlan>) -> Outcome {
    let (ctx, probe) = faulty_context(None);
    let s = [
        ctx.create_stream().unwrap(),
        ctx.create_stream().unwrap(),
        ctx.create_stream().unwrap(),
    ];
    let kernel = ctx
        .kernel(
            KernelSpec::<HalfSig>::named("half_minus_one").cpu(|t, (x, y, n)| {
                let i = t.x();
                if (i as u64) < *n {
                    y[i] = x[i] * 0.5 - 1.0;
                }
            }),
        )
        .unwrap();
    let base = probe.stats();
    assert_eq!(base.any, 0, "setup makes no counted calls");
    if let Some(plan) = plan {
        probe.arm(plan);
    }
    let mut p = Prog {
        ctx,
        s,
        arrays: BTreeMap::new(),
        kernel,
        event: None,
        up: None,
        down: None,
        mismatches: Vec::new(),
    };
    let mut model = Model::default();
    let mut outcome = Outcome::default();
    let mut failed_step_model = None;
    for (k, step) in program().iter().enumerate() {
        let injected_before = probe.stats().injected;
        let r = (step.run)(&mut p, &model);
        outcome.calls_after.push(probe.stats().any);
        let injected_now = probe.stats().injected > injected_before;
        match r {
            Ok(()) => {
                if injected_now {
                    // Only two calls may fail without failing the call: an ordering event
                    // recorded after queued work (gpukit-core then waits for the work
                    // instead), and the device pool's allocation of a block larger than
                    // the request (out of memory: the pool then allocates the exact size).
                    // Either way the call has done what it should.
                    let last = probe.injected().last().map(|f| f.call);
                    assert!(
                        matches!(last, Some("record_event" | "alloc")),
                        "{plan:?}: step {k} ({}) succeeded although its call {last:?} was \
                         failed",
                        step.name
                    );
                    outcome.absorbed = Some(k);
                }
                (step.update)(&mut model);
            }
            Err(e) => {
                assert!(
                    injected_now && is_injected(&e),
                    "{plan:?}: step {k} ({}) failed with {e:?}, not at the injected call",
                    step.name
                );
                let mut after = model.clone();
                (step.update)(&mut after);
                failed_step_model = Some(after);
                outcome.failed = Some((k, e));
                break;
            }
        }
    }
    // The checks below must not trip a plan that the program did not reach.
    probe.disarm();
    assert!(
        p.mismatches.is_empty(),
        "{plan:?}: results read during the program: {:?}",
        p.mismatches
    );
    // Nothing hangs, nothing is left failing: every stream drains without an error.
    p.ctx
        .sync()
        .unwrap_or_else(|e| panic!("{plan:?}: sync after the fault: {e:?}"));
    for s in &p.s {
        s.sync().unwrap();
    }
    // Every array holds what the steps before the fault wrote; the failing step's outputs
    // hold the old values, or (see Outcome) the new ones.
    for (name, arr) in &p.arrays {
        let got = arr.download().unwrap();
        let want = model.arrays.get(name).cloned().unwrap_or_default();
        if got == want {
            continue;
        }
        let after = failed_step_model
            .as_ref()
            .and_then(|m| m.arrays.get(name).cloned());
        if after.as_ref() == Some(&got) {
            outcome.outputs_written_despite_error = true;
            continue;
        }
        panic!(
            "{plan:?}: array {name} after failure at {:?}: got {got:?}, want {want:?}",
            outcome.failed.as_ref().map(|f| f.0)
        );
    }
    // A stream's fault record lives from its first checked launch (a built-in op is one)
    // to the stream's end: make sure the default stream has one, whatever the program ran
    // before its fault.
    probe.disarm();
    p.ctx.fill(&mut p.ctx.alloc::<u8>(4).unwrap(), 0).unwrap();
    p.ctx.sync().unwrap();
    // Blocks of the dropped arrays are cached by the device pool: trim them first.
    p.ctx
        .trim()
        .unwrap_or_else(|e| panic!("{plan:?}: trim: {e:?}"));
    let records = probe.stats().live_buffers as usize - p.arrays.len();
    assert!(
        (1..=4).contains(&records),
        "{plan:?}: {records} device buffers beyond the program's arrays are live: at most the \
         four streams' fault records may be"
    );
    drop(p);
    let st = probe.stats();
    assert_eq!(
        (st.live_buffers, st.live_host, st.live_streams),
        (0, 0, 0),
        "{plan:?}: something was not released"
    );
    outcome
}

#[test]
fn a_fault_at_every_call_of_a_multi_stream_program_surfaces_at_its_step() {
    let steps = program().len();
    let dry = within_limit(CASE_LIMIT, || run_program(None))
        .unwrap_or_else(|e| panic!("the dry run {e}"));
    assert!(dry.failed.is_none());
    assert_eq!(dry.calls_after.len(), steps);
    let total = *dry.calls_after.last().unwrap();
    let mut cases = 0;
    let mut absorbed = Vec::new();
    // Every call overall; the failing step must be the one that made the call.
    for k in 1..=total {
        let plan = FaultPlan::new(FaultKind::Any, k);
        let out = within_limit(CASE_LIMIT, move || run_program(Some(plan)))
            .unwrap_or_else(|e| panic!("{plan:?} {e}"));
        let expected = dry.calls_after.iter().position(|&c| c >= k).unwrap();
        assert!(
            !out.outputs_written_despite_error,
            "{plan:?}: a failed step wrote its outputs"
        );
        match (out.failed, out.absorbed) {
            (Some((step, err)), _) => {
                assert_eq!(step, expected, "{plan:?} failed at the wrong step: {err}")
            }
            (None, Some(step)) => {
                assert_eq!(step, expected, "{plan:?} was absorbed at the wrong step");
                absorbed.push((k, step));
            }
            (None, None) => panic!("{plan:?}: the planned call exists but nothing failed"),
        }
        cases += 1;
    }
    // Every call of each kind, counted by kind.
    for kind in [
        FaultKind::Alloc,
        FaultKind::Copy,
        FaultKind::Op,
        FaultKind::Event,
    ] {
        let mut k = 1;
        loop {
            let plan = FaultPlan::new(kind, k);
            let out = within_limit(CASE_LIMIT, move || run_program(Some(plan)))
                .unwrap_or_else(|e| panic!("{plan:?} {e}"));
            assert!(!out.outputs_written_despite_error, "{plan:?}");
            match out.failed {
                Some((_, err)) => assert!(is_injected(&err)),
                None if out.absorbed.is_some() => {}
                None => break,
            }
            cases += 1;
            k += 1;
        }
        assert!(k > 1, "the program makes {kind:?} calls");
    }
    eprintln!(
        "multi-stream program: {steps} steps, {total} counted calls, {cases} injected-fault cases; \
         {} ordering-event faults (call, step) absorbed by waiting for the work: {absorbed:?}",
        absorbed.len()
    );
}
