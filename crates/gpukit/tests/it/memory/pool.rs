//! The device memory pool, on every backend: its counters against a model of the pool
//! over random programs of allocations, drops and trims; reuse of a dropped array's memory
//! ordered after the old array's work on other streams; zeroing of reused memory; trim.

use crate::{backend_tests, common};

use std::collections::HashMap;

use common::{cases, delay_spec, harness_error};
use gpukit::{Context, GpuArray, LaunchConfig, MemoryStats};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// One step of an allocation program.
#[derive(Debug, Clone)]
enum Step {
    /// Allocate this many f32s (zeroed or not), then fill them with the step's number.
    Alloc { len: usize, zeroed: bool },
    /// Drop the live array at this index (modulo the count).
    Drop(usize),
    /// Hand the cache back to the device.
    Trim,
}

fn step() -> impl Strategy<Value = Step> {
    // Few distinct lengths, so that blocks are reused; some share a block size (1000 and
    // 1020 f32s), one is above the small sizes.
    let len = prop::sample::select(vec![1usize, 100, 1000, 1020, 3000, 40_000]);
    prop_oneof![
        4 => (len, any::<bool>()).prop_map(|(len, zeroed)| Step::Alloc { len, zeroed }),
        3 => any::<usize>().prop_map(Step::Drop),
        1 => Just(Step::Trim),
    ]
}

/// What the pool must report, computed from the program alone.
#[derive(Debug, Default)]
struct Model {
    cached: HashMap<usize, usize>,
    in_use: u64,
    peak_in_use: u64,
    reserved: u64,
    peak_reserved: u64,
    allocations: u64,
    frees: u64,
    hits: u64,
    misses: u64,
    released: u64,
}

impl Model {
    fn alloc(&mut self, block: usize) {
        self.allocations += 1;
        match self.cached.get_mut(&block).filter(|n| **n > 0) {
            Some(n) => {
                *n -= 1;
                self.hits += 1;
            }
            None => {
                self.misses += 1;
                self.reserved += block as u64;
            }
        }
        self.in_use += block as u64;
        self.peak_in_use = self.peak_in_use.max(self.in_use);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }

    fn free(&mut self, block: usize) {
        self.frees += 1;
        self.in_use -= block as u64;
        *self.cached.entry(block).or_default() += 1;
    }

    fn trim(&mut self) {
        let cached = self.reserved - self.in_use;
        self.released += cached;
        self.reserved = self.in_use;
        self.cached.clear();
    }

    fn check(&self, got: &MemoryStats, at: usize) -> Result<(), TestCaseError> {
        let want = [
            self.in_use,
            self.peak_in_use,
            self.reserved,
            self.peak_reserved,
            self.allocations,
            self.frees,
            self.hits,
            self.misses,
            self.released,
        ];
        let have = [
            got.bytes_in_use,
            got.peak_bytes_in_use,
            got.bytes_reserved,
            got.peak_bytes_reserved,
            got.allocations,
            got.frees,
            got.pool_hits,
            got.pool_misses,
            got.bytes_released,
        ];
        prop_assert_eq!(
            have,
            want,
            "after step {}: {:?} vs the model {:?}",
            at,
            got,
            self
        );
        prop_assert!(got.bytes_in_use <= got.bytes_reserved);
        prop_assert_eq!(got.pool_hits + got.pool_misses, got.allocations);
        Ok(())
    }
}

fn block(len: usize) -> usize {
    MemoryStats::block_size(len * 4).expect("small sizes have a block")
}

/// Runs one program, checking the counters after every step and the contents of every
/// array allocated zeroed (its block may have held another array's values).
fn run_program(ctx: &Context, steps: &[Step]) -> Result<(), TestCaseError> {
    let err = |e: gpukit::Error| TestCaseError::fail(e.to_string());
    ctx.trim().map_err(err)?;
    let base = ctx.memory_stats();
    let mut model = Model {
        released: base.bytes_released,
        allocations: base.allocations,
        frees: base.frees,
        hits: base.pool_hits,
        misses: base.pool_misses,
        peak_in_use: base.peak_bytes_in_use,
        peak_reserved: base.peak_bytes_reserved,
        in_use: base.bytes_in_use,
        reserved: base.bytes_reserved,
        ..Model::default()
    };
    let mut live: Vec<(GpuArray<f32>, usize)> = Vec::new();
    for (at, s) in steps.iter().enumerate() {
        match *s {
            Step::Alloc { len, zeroed } => {
                let mut a = if zeroed {
                    ctx.alloc_zeros::<f32>(len)
                } else {
                    ctx.alloc::<f32>(len)
                }
                .map_err(err)?;
                model.alloc(block(len));
                if zeroed {
                    let got = a.download().map_err(err)?;
                    prop_assert!(
                        got.iter().all(|v| v.to_bits() == 0),
                        "step {}: alloc_zeros({}) holds {:?}",
                        at,
                        len,
                        got.iter().find(|v| v.to_bits() != 0)
                    );
                }
                ctx.fill(&mut a, at as f32 + 1.0).map_err(err)?;
                live.push((a, len));
            }
            Step::Drop(i) if !live.is_empty() => {
                let (a, len) = live.swap_remove(i % live.len());
                drop(a);
                model.free(block(len));
            }
            Step::Drop(_) => {}
            Step::Trim => {
                ctx.trim().map_err(err)?;
                model.trim();
            }
        }
        model.check(&ctx.memory_stats(), at)?;
    }
    drop(live);
    ctx.sync().map_err(err)?;
    Ok(())
}

/// Whether the pool caches (`GPU_POOL` is not `off`); when it does not, says why the test
/// has nothing to check.
fn caching(why: &str) -> bool {
    let on = gpukit::core::pool_caching();
    if !on {
        common::skipped(&format!("{}=off: {why}", gpukit::core::POOL_VAR));
    }
    on
}

backend_tests! {
    fn stats_follow_the_model_over_random_alloc_free_programs(ctx) {
        if !caching("the model is the caching pool's") {
            return Ok(());
        }
        let config = Config {
            cases: cases(24)?,
            failure_persistence: None,
            ..Config::default()
        };
        TestRunner::new(config)
            .run(&prop::collection::vec(step(), 1..40), |steps| run_program(ctx, &steps))
            .map_err(|e| harness_error("proptest", e.to_string()))
    }

    fn a_reused_block_waits_for_its_old_arrays_work_on_another_stream(ctx) {
        // The old array's last write is queued on `s1` behind a delay; its memory is reused
        // at once and written on `s2`. Unless `s2` waits for `s1`, the late write lands last.
        let n = 1 << 16;
        let (s1, s2) = (ctx.create_stream()?, ctx.create_stream()?);
        let delay = ctx.kernel(delay_spec())?;
        let mut old = ctx.alloc::<f32>(n)?;
        s1.launch(&delay, LaunchConfig::linear(1, 1), (50_000u32,))?;
        s1.fill(&mut old, 1.0)?;
        let hits = ctx.memory_stats().pool_hits;
        drop(old);
        let mut new = ctx.alloc::<f32>(n)?;
        // Without the cache the old array's memory is freed after its work instead: the new
        // one must not see that work either.
        if gpukit::core::pool_caching() {
            assert_eq!(ctx.memory_stats().pool_hits, hits + 1, "the block is reused");
        }
        s2.fill(&mut new, 2.0)?;
        ctx.sync()?;
        let got = new.download()?;
        assert!(got.iter().all(|&v| v == 2.0), "{:?}", got.iter().find(|&&v| v != 2.0));
        Ok(())
    }

    fn alloc_zeros_zeroes_a_reused_block_after_its_old_arrays_work(ctx) {
        let n = 3000;
        let s1 = ctx.create_stream()?;
        let delay = ctx.kernel(delay_spec())?;
        let mut old = ctx.alloc::<f32>(n)?;
        s1.launch(&delay, LaunchConfig::linear(1, 1), (20_000u32,))?;
        s1.fill(&mut old, -3.0)?;
        drop(old);
        let new = ctx.alloc_zeros::<f32>(n)?;
        // After everything has run: a zero fill not ordered after the old write would be
        // overwritten by it.
        ctx.sync()?;
        assert_eq!(new.download()?, vec![0.0; n]);
        let hits = if gpukit::core::pool_caching() { 1 } else { 0 };
        assert_eq!(ctx.memory_stats().pool_hits, hits);
        Ok(())
    }

    fn trim_hands_cached_blocks_back_and_keeps_live_ones(ctx) {
        if !caching("nothing is cached to trim") {
            return Ok(());
        }
        let keep = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
        let dropped = ctx.alloc::<f32>(1 << 18)?;
        drop(dropped);
        let before = ctx.memory_stats();
        assert_eq!(before.bytes_cached(), 1 << 20);
        ctx.trim()?;
        let after = ctx.memory_stats();
        assert_eq!(after.bytes_reserved, after.bytes_in_use);
        assert_eq!(after.bytes_in_use, block(3) as u64);
        assert_eq!(after.bytes_released, before.bytes_released + (1 << 20));
        assert_eq!(keep.download()?, [1.0, 2.0, 3.0]);
        // The next allocation of the trimmed size reserves again.
        let _again = ctx.alloc::<f32>(1 << 18)?;
        assert_eq!(ctx.memory_stats().pool_misses, after.pool_misses + 1);
        Ok(())
    }

    fn empty_arrays_take_nothing_from_the_pool(ctx) {
        let before = ctx.memory_stats();
        let empty = ctx.alloc::<f32>(0)?;
        drop(empty);
        assert_eq!(ctx.memory_stats(), before);
        Ok(())
    }
}
