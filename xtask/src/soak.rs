//! `cargo xtask soak --minutes N [--backend cpu|cuda]`: builds and runs the `soak` tool (an
//! example of gpukit-tools) in release mode, which repeats a triple-buffered pipeline for N
//! minutes while sampling host RSS, the context's pinned pool and (on CUDA) device memory,
//! and fails (status 1) unless memory is flat after the warm-up and every run's output
//! matches the first run's.
//!
//! `cargo xtask soak --chaos --minutes N [--seed S]` soaks the ordering instead: the test
//! suites under the CPU backend's chaos schedule ([`crate::chaos`]), seed after seed from S
//! (by default one drawn from the clock, printed), until N minutes have passed; the first
//! failure stops it and names its seed.
//!
//! This only checks the arguments (so a typo fails before a release build) and forwards
//! them; the sampling, the table and the verdict are the tool's
//! (`crates/gpukit-tools/examples/soak.rs`).

use std::path::Path;

use lexopt::Arg::Long;

use crate::gpu_bundle::TOOL_PACKAGE;
use crate::util::{self, Cli, Failure, Result};

/// What `cargo xtask soak` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    /// Minutes to run (fractions allowed).
    pub minutes: f64,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// Arguments after `--`, for the tool (`--batches N`, `--batch-mib X`).
    pub extra: Vec<String>,
    /// The chaos soak (the suites under seed after seed) instead of the memory soak.
    pub chaos: bool,
    /// The chaos soak's first seed.
    pub seed: Option<u64>,
}

/// The longest soak: a week, as the tool accepts.
pub const MAX_MINUTES: f64 = 7.0 * 24.0 * 60.0;

/// Parses `--minutes N [--backend cpu|cuda] [-- tool args]`.
pub fn parse(args: &[String]) -> Result<Opts> {
    let (mut cli, extra) = Cli::with_passthrough(args);
    let mut minutes = None;
    let mut backend = None;
    let mut chaos = false;
    let mut seed = None;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("chaos") => chaos = true,
            Long("seed") => {
                seed = Some(cli.number("--seed", "a whole number from 0 to 2^64 - 1", |_| true)?);
            }
            Long("minutes") => {
                let accepted = format!("a number of minutes above 0, at most {MAX_MINUTES}");
                minutes = Some(cli.number("--minutes", &accepted, |m: &f64| {
                    *m > 0.0 && *m <= MAX_MINUTES
                })?);
            }
            Long("backend") => backend = Some(cli.one_of("--backend", &["cpu", "cuda"])?),
            other => return Err(other.unexpected().into()),
        }
    }
    let minutes = minutes.ok_or_else(|| Failure::usage("--minutes N is required"))?;
    if chaos && (backend.is_some() || !extra.is_empty()) {
        return Err(Failure::usage(
            "--chaos runs the test suites on the CPU backend: it takes no --backend and no \
             tool arguments",
        ));
    }
    if seed.is_some() && !chaos {
        return Err(Failure::usage("--seed is the chaos soak's (add --chaos)"));
    }
    Ok(Opts {
        minutes,
        backend: backend.unwrap_or("cpu").to_owned(),
        extra,
        chaos,
        seed,
    })
}

/// Runs `cargo xtask soak ...`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let opts = parse(args)?;
    if opts.chaos {
        let first = opts.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
        println!(
            "chaos soak: seeds from {first} for {} minutes",
            opts.minutes
        );
        let seeds = crate::chaos::soak(root, opts.minutes, first)?;
        println!(
            "chaos soak: {} seeds passed ({first}..={})",
            seeds.len(),
            seeds.last().copied().unwrap_or(first)
        );
        return Ok(());
    }
    let mut cmd = util::cargo(root);
    cmd.args(["run", "--release", "--package", TOOL_PACKAGE])
        .args(["--example", "soak", "--", "--minutes"])
        .arg(opts.minutes.to_string())
        .args(["--backend", &opts.backend])
        .args(&opts.extra);
    util::run(&mut cmd).map_err(|failure| Failure {
        message: format!("soak failed: {}", failure.message),
        code: failure.code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn parses_minutes_and_backend() {
        let opts = parse(&strings(&["--minutes", "0.2"])).unwrap();
        assert_eq!(opts.minutes, 0.2);
        assert_eq!(opts.backend, "cpu");
        assert!(opts.extra.is_empty());
        let opts = parse(&strings(&[
            "--backend=cuda",
            "--minutes=3",
            "--",
            "--batches",
            "8",
        ]))
        .unwrap();
        assert_eq!(opts.minutes, 3.0);
        assert_eq!(opts.backend, "cuda");
        assert_eq!(opts.extra, strings(&["--batches", "8"]));
        let opts = parse(&strings(&["--chaos", "--minutes", "10", "--seed", "7"])).unwrap();
        assert!(opts.chaos);
        assert_eq!((opts.minutes, opts.seed), (10.0, Some(7)));
    }

    #[test]
    fn refuses_bad_arguments() {
        for bad in [
            &[][..],
            &["--minutes"][..],
            &["--minutes", "0"][..],
            &["--minutes", "-1"][..],
            &["--minutes", "NaN"][..],
            &["--minutes", "inf"][..],
            &["--minutes", "soon"][..],
            &["--minutes", "1", "--backend", "tpu"][..],
            &["--minutes", "1", "--fast"][..],
            &["--minutes", "1", "--seed", "3"][..],
            &["--chaos", "--minutes", "1", "--backend", "cuda"][..],
            &["--chaos", "--minutes", "1", "--seed", "-3"][..],
            &["--chaos", "--minutes", "1", "--", "--batches", "2"][..],
        ] {
            let err = parse(&strings(bad)).unwrap_err();
            assert_eq!(err.code, 2, "{bad:?}: {}", err.message);
        }
    }
}
