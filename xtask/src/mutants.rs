//! `cargo xtask mutants [--area tracker|optable|pipeline]... [--minutes N] [--shard K/N]
//! [--iterate]`:
//! mutation testing with cargo-mutants over the code whose mistakes the test suites must
//! catch: gpukit-core's ordering tracker, the op table and the pipeline engine.
//!
//! cargo-mutants changes one thing at a time (a function body replaced by a default, an
//! operator swapped, a `!` deleted), builds, and runs the area's tests; a mutant the tests
//! pass is *missed*. Each area runs the tests that are fast and aimed at it:
//!
//! - `tracker` (`crates/gpukit-core/src/track.rs`): gpukit-cpu's `tracker` and `chaos`
//!   tests, which run every kind of dependency under the chaos schedule with its race
//!   checker (a dropped wait is a race even when the results happen to be right);
//! - `optable` (`crates/gpukit-core/src/optable/`): gpukit-core's unit tests with the `half`
//!   feature, the table's reference semantics against known answers. (The CPU backend's
//!   bodies call the reference, so its tests cannot tell a wrong reference from a right
//!   one, and building gpukit-cpu for each mutant tripled the time per mutant);
//! - `pipeline` (`crates/gpukit-pipeline/src/engine.rs`): gpukit-pipeline's tests, under the
//!   chaos schedule (seed 1).
//!
//! Each area's results go to `target/mutants/<area>/mutants.out` (cargo-mutants' own files:
//! `caught.txt`, `missed.txt`, `timeout.txt`, `unviable.txt`), and this command prints the
//! counts. The whole run stops after N minutes (default 60; cargo-mutants builds in a copy
//! of the tree, the first build taking some minutes), and `--shard K/N` runs a K-th of each
//! area's mutants (cargo-mutants' round-robin sharding), so that a budget can cover every
//! area. `--iterate` tests again only the mutants the area's last run did not catch (after
//! new tests were written for them), keeping the caught ones in the counts. Needs
//! cargo-mutants (`cargo install cargo-mutants --locked`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

/// One area: its name, the files mutated, the package whose tests run, their `cargo test`
/// arguments and features, the schedule they run under (if the environment should set one),
/// and the seconds after which a test run is a timeout (a mutant can turn a loop endless).
pub struct Area {
    pub name: &'static str,
    pub files: &'static [&'static str],
    pub packages: &'static [&'static str],
    pub test_args: &'static [&'static str],
    pub features: &'static [&'static str],
    pub schedule: Option<&'static str>,
    pub timeout_s: u32,
}

/// The areas, in the order they run.
pub const AREAS: [Area; 3] = [
    Area {
        name: "tracker",
        files: &["crates/gpukit-core/src/track.rs"],
        packages: &["gpukit-cpu"],
        test_args: &["--test", "tracker", "--test", "chaos"],
        features: &[],
        schedule: None,
        timeout_s: 300,
    },
    Area {
        name: "optable",
        files: &["crates/gpukit-core/src/optable/*.rs"],
        packages: &["gpukit-core"],
        test_args: &["--lib"],
        // f16 and bf16 compute in f32: the row ops' path that recomputes each exp.
        features: &["half"],
        schedule: None,
        // The unit tests take about a second; a permutation whose network a mutant made
        // constant walks its cycle forever.
        timeout_s: 30,
    },
    Area {
        name: "pipeline",
        files: &["crates/gpukit-pipeline/src/engine.rs"],
        packages: &["gpukit-pipeline"],
        test_args: &["--tests"],
        features: &[],
        schedule: Some("chaos:1"),
        timeout_s: 300,
    },
];

/// Minutes for the whole run unless `--minutes` says otherwise.
pub const DEFAULT_MINUTES: f64 = 60.0;

/// What `cargo xtask mutants` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    pub areas: Vec<&'static str>,
    pub minutes: f64,
    pub shard: Option<String>,
    pub iterate: bool,
}

/// Parses `[--area NAME]... [--minutes N] [--shard K/N] [--iterate]`.
pub fn parse(args: &[String]) -> Result<Opts> {
    let mut cli = Cli::new(args);
    let mut areas = Vec::new();
    let mut minutes = DEFAULT_MINUTES;
    let mut shard = None;
    let mut iterate = false;
    let names: Vec<&'static str> = AREAS.iter().map(|a| a.name).collect();
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("area") => {
                let a = cli.one_of("--area", &names)?;
                if !areas.contains(&a) {
                    areas.push(a);
                }
            }
            Long("minutes") => {
                minutes = cli.number("--minutes", "a number of minutes above 0", |m: &f64| {
                    *m > 0.0 && m.is_finite()
                })?;
            }
            Long("shard") => {
                let s = cli.string("--shard")?;
                let ok = s.split_once('/').is_some_and(|(k, n)| {
                    matches!((k.parse::<u32>(), n.parse::<u32>()), (Ok(k), Ok(n)) if n > 0 && k < n)
                });
                if !ok {
                    return Err(Failure::usage(format!(
                        "--shard {s:?}: expected K/N with 0 <= K < N (e.g. 0/4)"
                    )));
                }
                shard = Some(s);
            }
            Long("iterate") => iterate = true,
            other => return Err(other.unexpected().into()),
        }
    }
    if areas.is_empty() {
        areas = names;
    }
    Ok(Opts {
        areas,
        minutes,
        shard,
        iterate,
    })
}

/// The cargo-mutants command for `area`.
pub fn command(root: &Path, area: &Area, shard: Option<&str>, iterate: bool) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root)
        .args(["mutants", "--no-shuffle", "--baseline", "skip"]);
    cmd.args([
        "--timeout",
        &area.timeout_s.to_string(),
        "--build-timeout",
        "900",
    ]);
    cmd.arg("--output")
        .arg(root.join("target/mutants").join(area.name));
    for f in area.files {
        cmd.args(["--file", f]);
    }
    for p in area.packages {
        cmd.args(["--test-package", p]);
    }
    for f in area.features {
        cmd.args(["--features", f]);
    }
    if let Some(s) = shard {
        cmd.args(["--shard", s]);
    }
    if iterate {
        cmd.arg("--iterate");
    }
    if let Some(s) = area.schedule {
        cmd.env("GPU_CPU_SCHEDULE", s);
    }
    cmd.arg("--").args(area.test_args);
    cmd
}

/// The counts in an area's `mutants.out`: (caught, missed, timeout, unviable).
pub fn counts(root: &Path, area: &str) -> [usize; 4] {
    let dir = root.join("target/mutants").join(area).join("mutants.out");
    ["caught.txt", "missed.txt", "timeout.txt", "unviable.txt"].map(|f| {
        std::fs::read_to_string(dir.join(f))
            .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
            .unwrap_or(0)
    })
}

/// Runs `cargo xtask mutants ...`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let opts = parse(args)?;
    if !util::succeeds(Command::new("cargo").args(["mutants", "--version"])) {
        return Err(Failure::new(
            "cargo-mutants is not installed: run `cargo install cargo-mutants --locked`",
        ));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(opts.minutes * 60.0);
    let mut stopped = None;
    for name in &opts.areas {
        let Some(area) = AREAS.iter().find(|a| a.name == *name) else {
            continue;
        };
        let out = root.join("target/mutants").join(area.name);
        std::fs::create_dir_all(&out)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", out.display())))?;
        // cargo-mutants exits 2 when mutants were missed and 3 on timeouts: the counts say
        // what happened. Anything else is a failure to run.
        let mut cmd = command(root, area, opts.shard.as_deref(), opts.iterate);
        if let Err(e) = crate::miri::run_until(&mut cmd, deadline, opts.minutes) {
            if Instant::now() >= deadline {
                stopped = Some(e.message);
                break;
            }
            if !matches!(e.code, 2 | 3) {
                return Err(e);
            }
        }
    }
    println!("\nmutants (caught / missed / timeout / unviable):");
    for name in &opts.areas {
        let [c, m, t, u] = counts(root, name);
        println!("  {name:<9} {c:>5} / {m:>5} / {t:>5} / {u:>5}   (target/mutants/{name}/mutants.out/missed.txt)");
    }
    match stopped {
        Some(why) => Err(Failure::new(format!("stopped at the time limit: {why}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn parses_areas_minutes_and_shards() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.areas, vec!["tracker", "optable", "pipeline"]);
        let o = parse(&strings(&[
            "--area",
            "pipeline",
            "--minutes",
            "5",
            "--shard",
            "1/4",
            "--iterate",
        ]))
        .unwrap();
        assert_eq!(
            (o.areas, o.minutes, o.shard, o.iterate),
            (vec!["pipeline"], 5.0, Some("1/4".into()), true)
        );
        assert!(!parse(&[]).unwrap().iterate);
        for bad in [
            &["--area", "gpu"][..],
            &["--shard", "4/4"][..],
            &["--shard", "x"][..],
            &["--minutes", "0"][..],
        ] {
            assert_eq!(parse(&strings(bad)).unwrap_err().code, 2, "{bad:?}");
        }
    }

    #[test]
    fn every_area_names_files_that_exist() {
        let root = util::workspace_root();
        for a in &AREAS {
            for f in a.files {
                let dir = Path::new(f).parent().unwrap();
                assert!(root.join(dir).is_dir(), "{}: {f}", a.name);
                if !f.contains('*') {
                    assert!(root.join(f).is_file(), "{}: {f}", a.name);
                }
            }
            let args: Vec<_> = command(&root, a, None, false)
                .get_args()
                .filter_map(|s| s.to_str().map(String::from))
                .collect();
            assert!(args.ends_with(
                &a.test_args
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
            ));
        }
    }
}
