//! The test suites under the CPU backend's chaos schedule (`GPU_CPU_SCHEDULE=chaos:<seed>`):
//! the schedule fuzzer and race checker of `gpukit_cpu::chaos`, which reorders every
//! stream's work as far as its recorded dependencies allow and fails a task that races
//! another.
//!
//! The suites are the facade's behaviour, property and memory tests on the CPU backend and
//! its logical devices (the `it` binary's tests whose names contain `cpu` or
//! `multi_device`: the other backends' arms do not use the CPU schedule) and the pipeline's
//! integration tests (`run_async`, `panics`, `faults`; gpukit-cpu's fault tests share the
//! last name and run too). `cargo xtask ci` runs them under [`CI_SEEDS`] after the plain
//! test run, on its build (the same packages and features: nothing is rebuilt);
//! `cargo xtask soak --chaos --minutes N` runs them under one seed after another until the
//! time is up. A failing run names its seed; the replay is the same command with that seed.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::util::{self, Failure, Result};

/// The seeds `cargo xtask ci` runs the suites under: one, about two minutes on a 2-core
/// machine (the soak runs seed after seed; the CUDA emulator's step took the second seed's
/// place in CI's time).
pub const CI_SEEDS: [u64; 1] = [1];

/// The commands that run the suites under `seed`.
pub fn commands(root: &Path, seed: u64) -> Vec<Command> {
    let schedule = format!("chaos:{seed}");
    let mut it = util::cargo(root);
    it.env("GPU_CPU_SCHEDULE", &schedule).args([
        "test",
        "--workspace",
        "--test",
        "it",
        "--",
        "cpu",
        "multi_device",
    ]);
    let mut pipelines = util::cargo(root);
    pipelines.env("GPU_CPU_SCHEDULE", &schedule).args([
        "test",
        "--workspace",
        "--test",
        "run_async",
        "--test",
        "panics",
        "--test",
        "faults",
    ]);
    vec![it, pipelines]
}

/// Runs the suites under `seed`; a failure names the seed and how to replay it.
pub fn run_seed(root: &Path, seed: u64) -> Result {
    util::header(&format!(
        "the test suites under GPU_CPU_SCHEDULE=chaos:{seed}"
    ));
    for mut command in commands(root, seed) {
        if let Err(failure) = util::run(&mut command) {
            return Err(Failure {
                message: format!(
                    "{} (chaos schedule, seed {seed}: replay with GPU_CPU_SCHEDULE=chaos:{seed} \
                     `{}`)",
                    failure.message,
                    util::display(&command)
                ),
                code: failure.code,
            });
        }
    }
    Ok(())
}

/// Runs the suites under `first`, `first + 1`, ... until `minutes` have passed (each seed
/// started runs to its end); returns the seeds run.
pub fn soak(root: &Path, minutes: f64, first: u64) -> Result<Vec<u64>> {
    let start = Instant::now();
    let mut seeds = Vec::new();
    let mut seed = first;
    while start.elapsed().as_secs_f64() < minutes * 60.0 {
        run_seed(root, seed)?;
        seeds.push(seed);
        seed = seed.wrapping_add(1);
    }
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_carries_the_seed() {
        let root = Path::new(".");
        let commands = commands(root, 42);
        assert_eq!(commands.len(), 2);
        for c in &commands {
            let env: Vec<_> = c.get_envs().collect();
            assert!(
                env.iter().any(|(k, v)| *k == "GPU_CPU_SCHEDULE"
                    && v.and_then(|v| v.to_str()) == Some("chaos:42")),
                "{env:?}"
            );
            let args: Vec<_> = c.get_args().filter_map(|a| a.to_str()).collect();
            // The workspace's features, as the plain test run builds them: nothing rebuilt.
            assert!(args.starts_with(&["test", "--workspace"]), "{args:?}");
        }
    }
}
