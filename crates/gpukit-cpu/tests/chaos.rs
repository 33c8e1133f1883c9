//! The chaos schedule against planted ordering bugs (`gpukit_core::plant`, on the test
//! thread only): each is found within a stated number of seeds, by wrong results or by the
//! race checker, and the race report names both calls; the same programs without a planted
//! bug run clean (right results, no race) under every seed tried.
//!
//! The default schedule never finds the planted tracker bug (a short write on an idle
//! stream runs in place, so the read that forgot to wait comes after it anyway: asserted
//! below); the planted dropped stream wait in a pipeline is found by it in a share of runs
//! that depends on the machine's load, which the test prints and does not assert.

use std::sync::Mutex;

use gpukit::cpu::chaos::{take_races, Race};
use gpukit::cpu::{CpuBackend, CpuContext, Schedule};
use gpukit::pipeline::{Batch, Pattern, Pipeline};
use gpukit_core::plant::{plant, Bug};

/// Seeds within which the chaos schedule must find each planted bug.
const SEEDS: u64 = 8;

/// The race reports are process-wide: the tests that read them take turns.
static RACES: Mutex<()> = Mutex::new(());

fn context(schedule: Schedule) -> CpuContext {
    let backend = CpuBackend::new()
        .expect("the CPU backend")
        .with_schedule(schedule);
    CpuContext::new(backend).expect("a context")
}

/// What one run of a program showed.
#[derive(Debug, Default)]
struct Seen {
    /// Results that differ from the program's sequential meaning.
    wrong: usize,
    /// Races reported (by the race checker, through the failed sync and `take_races`).
    races: Vec<Race>,
    /// Lines of this file where the write and the read of the first round were queued.
    lines: (u32, u32),
}

impl Seen {
    fn found(&self) -> bool {
        self.wrong > 0 || !self.races.is_empty()
    }
}

/// Rounds of: stream 1 fills an array with the round's value, stream 2 copies it into
/// another, the host reads the copy. With `ReadSkipsWriter` planted the copy does not wait
/// for the fill.
fn fill_then_copy(schedule: Schedule, planted: bool) -> Seen {
    let ctx = context(schedule);
    let (s1, s2) = (ctx.create_stream().unwrap(), ctx.create_stream().unwrap());
    let mut seen = Seen::default();
    let _planted = planted.then(|| plant(Bug::ReadSkipsWriter));
    for round in 1..=8u32 {
        let mut a = ctx.alloc_zeros::<f32>(4096).unwrap();
        let mut b = ctx.alloc_zeros::<f32>(4096).unwrap();
        let fill_line = line!() + 1;
        s1.fill(&mut a, round as f32).unwrap();
        let copy_line = line!() + 1;
        s2.copy(&a, &mut b).unwrap();
        if round == 1 {
            seen.lines = (fill_line, copy_line);
        }
        // A race found fails the task that found it (on either stream); both syncs wait.
        only_races([s2.sync(), s1.sync()]);
        let got = b.download().unwrap();
        seen.wrong += got.iter().filter(|&&x| x != round as f32).count();
    }
    seen.races = take_races();
    seen
}

/// Fails unless each sync succeeded or failed with a race the chaos checker found.
fn only_races<const N: usize>(syncs: [gpukit::Result<()>; N]) {
    for r in syncs {
        if let Err(e) = r {
            let text = e.to_string();
            assert!(text.contains("chaos race check"), "{text}");
        }
    }
}

/// The first seed (of `SEEDS`) under which `program` finds the bug.
fn first_finding(program: impl Fn(Schedule) -> Seen) -> Option<(u64, Seen)> {
    (0..SEEDS).find_map(|seed| {
        let seen = program(Schedule::Chaos { seed });
        seen.found().then_some((seed, seen))
    })
}

#[test]
fn a_read_that_skips_its_writer_is_found_and_both_calls_are_named() {
    let _turn = RACES.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    // The default schedule: the fill (short, on an idle stream) runs in place before the
    // copy is queued, so the missing wait never shows.
    for _ in 0..20 {
        let seen = fill_then_copy(Schedule::Default, true);
        assert_eq!(seen.wrong, 0, "the default schedule hid the bug until now");
        assert!(seen.races.is_empty(), "no checker without chaos");
    }
    let (seed, seen) = first_finding(|s| fill_then_copy(s, true))
        .unwrap_or_else(|| panic!("the planted bug was not found within {SEEDS} seeds"));
    eprintln!(
        "found at seed {seed}: {} wrong elements, {} races",
        seen.wrong,
        seen.races.len()
    );
    let race = seen
        .races
        .first()
        .expect("the race checker reports the unordered copy");
    eprintln!("{race}");
    let here = file!().rsplit('/').next().unwrap_or(file!());
    let (fill, copy) = seen.lines;
    // Whichever of the two started second found the race.
    let (write, read) = if race.first.writes {
        (&race.first, &race.second)
    } else {
        (&race.second, &race.first)
    };
    assert!(write.writes && !read.writes, "{race}");
    assert!(
        write.site.contains(&format!("{here}:{fill},")),
        "the fill's call site (line {fill}) in {race}"
    );
    assert!(
        read.site.contains(&format!("{here}:{copy},")),
        "the copy's call site (line {copy}) in {race}"
    );
    assert!(race.to_string().contains("with no ordering between them"));
}

/// Rounds of: a context's only stream writes an array three times (the later writes on the
/// fast path, recorded as positions alone), then a stream created afterwards copies it and
/// the host reads the copy. The copy must wait for all three writes; with `FastSkipsCheck`
/// planted it takes the fast path too and waits for none.
fn only_stream_then_another(schedule: Schedule, planted: bool) -> Seen {
    let mut seen = Seen::default();
    for round in 1..=8u32 {
        let ctx = context(schedule);
        let mut a = ctx.alloc_zeros::<f32>(4096).unwrap();
        ctx.fill(&mut a, round as f32).unwrap();
        ctx.scale(2.0, &mut a).unwrap();
        ctx.add_scalar_inplace(&mut a, 1.0).unwrap();
        let s2 = ctx.create_stream().unwrap();
        let mut b = ctx.alloc_zeros::<f32>(4096).unwrap();
        ctx.sync().unwrap();
        let _planted = planted.then(|| plant(Bug::FastSkipsCheck));
        ctx.scale(1.0, &mut a).unwrap();
        s2.copy(&a, &mut b).unwrap();
        drop(_planted);
        only_races([s2.sync(), ctx.sync()]);
        let want = 2.0 * round as f32 + 1.0;
        seen.wrong += b.download().unwrap().iter().filter(|&&x| x != want).count();
    }
    seen.races = take_races();
    seen
}

#[test]
fn a_stream_created_later_waits_for_the_uses_recorded_without_locks() {
    let _turn = RACES.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let seen = only_stream_then_another(Schedule::Chaos { seed }, false);
        assert_eq!(seen.wrong, 0, "seed {seed}");
        assert!(seen.races.is_empty(), "seed {seed}: {:?}", seen.races);
    }
    let (seed, seen) = first_finding(|s| only_stream_then_another(s, true))
        .unwrap_or_else(|| panic!("the planted fast path was not found within {SEEDS} seeds"));
    eprintln!(
        "found at seed {seed}: {} wrong elements, {} races",
        seen.wrong,
        seen.races.len()
    );
}

#[test]
fn the_same_program_without_the_bug_is_clean_under_every_seed() {
    let _turn = RACES.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for seed in 0..SEEDS {
        let seen = fill_then_copy(Schedule::Chaos { seed }, false);
        assert_eq!(seen.wrong, 0, "seed {seed}");
        assert!(seen.races.is_empty(), "seed {seed}: {:?}", seen.races);
    }
}

/// A triple-buffered pipeline whose compute doubles and adds the batch index; the outputs
/// checked against that. With `StreamWaitDropped` planted no stream waits for another.
fn pipeline(schedule: Schedule, planted: bool) -> Seen {
    const BATCHES: usize = 12;
    const ROWS: usize = 512;
    let ctx = context(schedule);
    let _planted = planted.then(|| plant(Bug::StreamWaitDropped));
    let mut seen = Seen::default();
    let run = Pipeline::new(&ctx, Pattern::Triple)
        .batches(BATCHES)
        .max_rows(ROWS)
        .input::<f32>(1)
        .output::<f32>(1)
        .run(
            |i, x: &mut [f32]| {
                for (r, v) in x.iter_mut().enumerate() {
                    *v = (i * ROWS + r) as f32;
                }
                Ok((ROWS, i))
            },
            |s, b, x, y| {
                s.copy(x, y)?;
                s.scale(2.0, y)?;
                s.add_scalar_inplace(y, b.meta as f32)
            },
            |b: Batch<usize>, y: &[f32]| {
                for (r, v) in y.iter().enumerate() {
                    if *v != 2.0 * (b.index * ROWS + r) as f32 + b.meta as f32 {
                        seen.wrong += 1;
                    }
                }
                Ok(())
            },
        );
    if let Err(e) = run {
        let text = format!("{e:?}");
        assert!(text.contains("chaos race check"), "{text}");
    }
    seen.races = take_races();
    seen
}

#[test]
fn a_pipeline_whose_streams_do_not_wait_is_found() {
    let _turn = RACES.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    let default = (0..5)
        .filter(|_| pipeline(Schedule::Default, true).found())
        .count();
    eprintln!("the default schedule found the dropped stream wait in {default} of 5 runs");
    let (seed, seen) = first_finding(|s| pipeline(s, true))
        .unwrap_or_else(|| panic!("the dropped stream wait was not found within {SEEDS} seeds"));
    eprintln!(
        "chaos found it at seed {seed}: {} wrong elements, {} races",
        seen.wrong,
        seen.races.len()
    );
    for seed in 0..SEEDS / 2 {
        let clean = pipeline(Schedule::Chaos { seed }, false);
        assert_eq!(clean.wrong, 0, "seed {seed}");
        assert!(clean.races.is_empty(), "seed {seed}: {:?}", clean.races);
    }
}

/// A graph that reads an array, launched on stream 2 while stream 1 writes it: ordered by
/// the graph's launch (no race, right results); with `ReadSkipsWriter` planted, the launch's
/// read does not wait and the checker reports it through the ranges the graph's tasks
/// declared when they were captured.
#[test]
fn a_graph_launch_declares_what_its_tasks_declared() {
    let _turn = RACES.lock().unwrap_or_else(|p| p.into_inner());
    take_races();
    for planted in [false, true] {
        let mut races = Vec::new();
        for seed in 0..SEEDS {
            let ctx = context(Schedule::Chaos { seed });
            let (s1, s2) = (ctx.create_stream().unwrap(), ctx.create_stream().unwrap());
            let mut a = ctx.alloc_zeros::<f32>(4096).unwrap();
            let mut b = ctx.alloc_zeros::<f32>(4096).unwrap();
            s1.sync().unwrap();
            let graph = s2.capture(|s| s.copy(&a, &mut b)).unwrap();
            let _planted = planted.then(|| plant(Bug::ReadSkipsWriter));
            s1.fill(&mut a, 5.0).unwrap();
            graph.launch(&s2).unwrap();
            let synced = (s1.sync(), s2.sync());
            drop(_planted);
            races.extend(take_races());
            if !planted {
                assert!(
                    synced.0.is_ok() && synced.1.is_ok(),
                    "seed {seed}: {synced:?}"
                );
                assert!(
                    b.download().unwrap().iter().all(|&x| x == 5.0),
                    "seed {seed}"
                );
            }
        }
        assert_eq!(races.is_empty(), !planted, "planted: {planted}: {races:?}");
    }
}
