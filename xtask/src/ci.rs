//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first failure.
//!
//! fmt, clippy, tidy, test, no-cuda, doc, package: cheap checks first so a formatting slip
//! fails in seconds. Each configuration is built once: `test` builds and tests the workspace
//! with its default features; `no-cuda` the other configuration users can choose, the facade
//! without its default features (`cuda`, `vulkan`, `half`). It checks that no CUDA crate is
//! in that build's dependency tree, lints the facade and the programs built on it, and runs
//! the facade's tests: only the facade changes with those features (the crates below it have
//! no default features, and the programs' tests do not depend on them), and every `cfg` in
//! the facade names one feature, so the two runs cover every arm.
//! `package` runs `cargo package` on every library crate, in dependency order, and builds
//! each from its `.crate` file: a crate that needs a file outside its folder, or lacks the
//! metadata crates.io requires, fails here rather than at release time. It builds with the
//! workspace's dev profile, so that the dependencies `test` built are reused rather than
//! built again in cargo's default profile.
//! `.ci/run` calls this on a fresh clone; where rustfmt or clippy is not installed (and
//! could not be added) their steps are reported as skipped rather than failing the build,
//! since the tests are what a machine without those components can still verify.

use std::fmt;
use std::path::Path;

use lexopt::Arg::Long;

use crate::tidy;
use crate::util::{self, Cli, Failure, Result};

/// One CI step, in the order they run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    Fmt,
    Clippy,
    Tidy,
    Test,
    NoCuda,
    Doc,
    Package,
}

/// The crates a build without the facade's `cuda` feature must not compile.
const CUDA_CRATES: [&str; 3] = ["gpukit-cuda", "gpukit-cuda-sys", "cudarc"];

/// The workspace members that are not published (`publish = false`), left out of `package`.
const UNPUBLISHED: [&str; 4] = ["gpukit-examples", "gpukit-bench", "gpukit-tools", "xtask"];

impl Step {
    const ALL: [Step; 7] = [
        Step::Fmt,
        Step::Clippy,
        Step::Tidy,
        Step::Test,
        Step::NoCuda,
        Step::Doc,
        Step::Package,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::Fmt => "fmt",
            Step::Clippy => "clippy",
            Step::Tidy => "tidy",
            Step::Test => "test",
            Step::NoCuda => "no-cuda",
            Step::Doc => "doc",
            Step::Package => "package",
        }
    }

    /// The cargo subcommand that must be installed for this step, if it is optional.
    fn component(self) -> Option<(&'static str, &'static str)> {
        match self {
            Step::Fmt => Some(("fmt", "rustfmt")),
            Step::Clippy => Some(("clippy", "clippy")),
            Step::Tidy | Step::Test | Step::NoCuda | Step::Doc | Step::Package => None,
        }
    }

    fn run(self, root: &Path, test_args: &[String]) -> Result {
        match self {
            Step::Fmt => util::run(util::cargo(root).args(["fmt", "--all", "--", "--check"])),
            Step::Clippy => util::run(util::cargo(root).args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])),
            Step::Tidy => {
                util::header("tidy (module docs, generated files only in ffi/)");
                tidy::run(root)
            }
            Step::Test => util::run(
                util::cargo(root)
                    .args(["test", "--workspace"])
                    .args(test_args),
            ),
            Step::NoCuda => no_cuda(root, test_args),
            Step::Doc => {
                // Keep flags the caller set and make rustdoc warnings errors on top.
                let flags = match std::env::var("RUSTDOCFLAGS") {
                    Ok(flags) if !flags.trim().is_empty() => format!("{flags} -D warnings"),
                    _ => "-D warnings".to_owned(),
                };
                // Every feature, as docs.rs builds them (`half`, `fault-injection`): a broken
                // intra-doc link in feature-gated docs fails here too.
                util::run(util::cargo(root).env("RUSTDOCFLAGS", flags).args([
                    "doc",
                    "--workspace",
                    "--no-deps",
                    "--all-features",
                ]))
            }
            Step::Package => {
                forget_stale_package_sources()?;
                let manifest = std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| {
                    Failure::new(format!("cannot read the workspace's Cargo.toml: {e}"))
                })?;
                util::run(&mut package_command(root, &dev_profile(&manifest)))
            }
        }
    }
}

/// Removes the sources cargo extracted from earlier runs' temporary local registries
/// (`$CARGO_HOME/registry/src/-<hash>/gpukit-*`). cargo reuses an extracted `name-version`
/// folder without looking at the new `.crate`, so a second `cargo package` of the same
/// version in the same checkout would verify each crate against the previous run's sources
/// of its dependencies and fail (or pass) on stale code. Only folders of local registries
/// (whose names start with `-`) holding this workspace's crates are touched.
fn forget_stale_package_sources() -> Result {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for krate in crates.flatten() {
            if krate.file_name().to_string_lossy().starts_with("gpukit") {
                std::fs::remove_dir_all(krate.path()).map_err(|e| {
                    util::Failure::new(format!(
                        "cannot remove stale package sources {}: {e}",
                        krate.path().display()
                    ))
                })?;
            }
        }
    }
    Ok(())
}

/// `cargo package` of every published crate. `--workspace` packages them in dependency order
/// and verifies each by building it from its `.crate` file, resolving the workspace crates it
/// depends on (not on crates.io yet) through a temporary local registry. `--allow-dirty`:
/// the check is of the tree as it is, uncommitted changes included. `profile` (from
/// [`dev_profile`]) goes to `--config`: each crate is verified as a workspace of its own,
/// whose manifest has no profile, in the workspace's target folder; with the workspace's dev
/// profile its dependencies are those the test step built, not all of them again.
fn package_command(root: &Path, profile: &[String]) -> std::process::Command {
    let mut cmd = util::cargo(root);
    cmd.args(["package", "--workspace", "--allow-dirty"]);
    for name in UNPUBLISHED {
        cmd.args(["--exclude", name]);
    }
    for setting in profile {
        cmd.args(["--config", setting]);
    }
    cmd
}

/// The settings of the dev profile in a workspace manifest, `[profile.dev]` and
/// `[profile.dev.package.NAME]`, as `--config` values (`profile.dev.opt-level=1`); the
/// values are TOML as written. Only `key = value` lines are read: a value with a comment
/// after it reaches cargo as it is, which refuses it rather than ignoring it.
fn dev_profile(manifest: &str) -> Vec<String> {
    let mut table = None;
    let mut settings = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let header = header.trim();
            table =
                (header == "profile.dev" || header.starts_with("profile.dev.")).then_some(header);
            continue;
        }
        if let (Some(table), Some((key, value))) = (table, line.split_once('=')) {
            settings.push(format!("{table}.{}={}", key.trim(), value.trim()));
        }
    }
    settings
}

/// The `no-cuda` step: the dependency tree of `gpukit` without default features holds no CUDA
/// crate; clippy (where installed) on the facade and the programs (tutorials, benchmarks,
/// tools) in that configuration; then the facade's tests in it (the module docs say why
/// those alone).
fn no_cuda(root: &Path, test_args: &[String]) -> Result {
    util::header("no-cuda: `gpukit` without its default `cuda` feature compiles no CUDA crate");
    let mut tree = util::cargo(root);
    tree.args([
        "tree",
        "--package",
        "gpukit",
        "--no-default-features",
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    let shown = util::display(&tree);
    let out = tree
        .output()
        .map_err(|err| util::spawn_failure(&shown, &err))?;
    if !out.status.success() {
        return Err(Failure::new(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let tree = String::from_utf8_lossy(&out.stdout);
    let found = cuda_crates_in(&tree);
    if !found.is_empty() {
        return Err(Failure::new(format!(
            "`gpukit` without default features still depends on {}",
            found.join(", ")
        )));
    }
    println!(
        "no CUDA crate in the tree ({} lines checked)",
        tree.lines().count()
    );
    if util::succeeds(util::cargo(root).args(["clippy", "--version"])) {
        util::run(util::cargo(root).args([
            "clippy",
            "--package",
            "gpukit",
            "--package",
            "gpukit-examples",
            "--package",
            "gpukit-bench",
            "--package",
            "gpukit-tools",
            "--all-targets",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    util::run(&mut no_cuda_test_command(root, test_args))
}

/// The no-cuda step's tests: the facade's, without its default features.
fn no_cuda_test_command(root: &Path, test_args: &[String]) -> std::process::Command {
    let mut cmd = util::cargo(root);
    cmd.args(["test", "--package", "gpukit", "--no-default-features"])
        .args(test_args);
    cmd
}

/// The CUDA crates named in `cargo tree --format {p}` output (`name vX.Y.Z (path)` lines).
fn cuda_crates_in(tree: &str) -> Vec<&'static str> {
    CUDA_CRATES
        .into_iter()
        .filter(|name| {
            tree.lines()
                .any(|line| line.split_whitespace().next() == Some(*name))
        })
        .collect()
}

/// What became of a step, for the summary line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Ok,
    Failed,
    Skipped(&'static str),
    NotRun,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Failed => f.write_str("FAILED"),
            Outcome::Skipped(why) => write!(f, "skipped ({why})"),
            Outcome::NotRun => f.write_str("not run"),
        }
    }
}

/// Parsed `cargo xtask ci` arguments.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options {
    skip: Vec<Step>,
    test_args: Vec<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options> {
        let (mut cli, test_args) = Cli::with_passthrough(args);
        let mut skip = Vec::new();
        while let Some(arg) = cli.next_arg()? {
            let step = match &arg {
                Long(flag) => flag
                    .strip_prefix("skip-")
                    .and_then(|name| Step::ALL.into_iter().find(|step| step.name() == name)),
                _ => None,
            };
            match step {
                Some(step) => skip.push(step),
                None => return Err(arg.unexpected().into()),
            }
        }
        Ok(Options { skip, test_args })
    }
}

/// Runs `cargo xtask ci [--skip-STEP ...] [-- test args]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let options = Options::parse(args)?;
    let mut outcomes = Vec::new();
    let mut failure = None;
    for step in Step::ALL {
        let outcome = if failure.is_some() {
            Outcome::NotRun
        } else if options.skip.contains(&step) {
            Outcome::Skipped("asked")
        } else if let Some(missing) = missing_component(root, step) {
            Outcome::Skipped(missing)
        } else {
            match step.run(root, &options.test_args) {
                Ok(()) => Outcome::Ok,
                Err(err) => {
                    failure = Some(err);
                    Outcome::Failed
                }
            }
        };
        outcomes.push((step, outcome));
    }
    println!("{}", summary(&outcomes));
    failure.map_or(Ok(()), Err)
}

/// `Some(why)` when the step needs a rustup component that is not installed.
fn missing_component(root: &Path, step: Step) -> Option<&'static str> {
    let (subcommand, component) = step.component()?;
    if util::succeeds(util::cargo(root).args([subcommand, "--version"])) {
        return None;
    }
    eprintln!(
        "warning: `cargo {subcommand}` is not available; skipping the {} step \
         (install it with `rustup component add {component}`)",
        step.name()
    );
    Some("not installed")
}

fn summary(outcomes: &[(Step, Outcome)]) -> String {
    let steps: Vec<String> = outcomes
        .iter()
        .map(|(step, outcome)| format!("{} {outcome}", step.name()))
        .collect();
    format!("==> ci summary: {}", steps.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn parses_skips_and_passthrough() {
        let options = Options::parse(&strings(&[
            "--skip-fmt",
            "--skip-doc",
            "--",
            "foo",
            "--",
            "-q",
        ]))
        .unwrap();
        assert_eq!(options.skip, vec![Step::Fmt, Step::Doc]);
        assert_eq!(options.test_args, strings(&["foo", "--", "-q"]));
    }

    #[test]
    fn rejects_unknown_arguments_with_usage_code() {
        for bad in ["--skip-everything", "--fmt", "fmt", "-x"] {
            let err = Options::parse(&strings(&[bad])).unwrap_err();
            assert_eq!(err.code, 2, "{bad}");
            assert!(err.message.contains(bad), "{bad}: {}", err.message);
        }
        assert!(Options::parse(&strings(&["--help"])).unwrap_err().is_help());
    }

    #[test]
    fn packages_every_published_crate_in_the_workspaces_dev_profile() {
        let profile = dev_profile(
            &std::fs::read_to_string(util::workspace_root().join("Cargo.toml")).unwrap(),
        );
        // The workspace's tests build with a dev profile of their own; without it here,
        // `package` would build every dependency again.
        assert!(
            profile
                .iter()
                .any(|setting| setting.starts_with("profile.dev.opt-level=")),
            "{profile:?}"
        );
        let cmd = package_command(Path::new("."), &profile);
        let shown = util::display(&cmd);
        assert!(
            shown.contains(
                "package --workspace --allow-dirty --exclude gpukit-examples --exclude gpukit-bench \
                 --exclude gpukit-tools --exclude xtask --config profile.dev."
            ),
            "{shown}"
        );
        let args: Vec<_> = cmd.get_args().filter_map(|a| a.to_str()).collect();
        for setting in &profile {
            assert!(
                args.windows(2).any(|w| w == ["--config", setting.as_str()]),
                "{shown}"
            );
        }
        // Every member left out must really be unpublished.
        let root = util::workspace_root();
        for dir in [
            "examples",
            "crates/gpukit-bench",
            "crates/gpukit-tools",
            "xtask",
        ] {
            let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
            assert!(manifest.contains("publish = false"), "{dir}");
        }
    }

    #[test]
    fn reads_the_dev_profile_of_a_manifest() {
        let manifest = "[workspace]\nmembers = [\"a\"]\n\n# Faster tests.\n[profile.dev]\n\
                        opt-level = 1\ndebug = \"line-tables-only\"\n\n[profile.dev.package.proptest]\n\
                        opt-level = 3\n\n[profile.release]\nlto = true\n[[bin]]\nname = \"x\"\n";
        assert_eq!(
            dev_profile(manifest),
            [
                "profile.dev.opt-level=1",
                "profile.dev.debug=\"line-tables-only\"",
                "profile.dev.package.proptest.opt-level=3"
            ]
        );
        assert!(dev_profile("[package]\nname = \"x\"\n").is_empty());
    }

    #[test]
    fn the_no_cuda_tests_are_the_facades_without_default_features() {
        let shown = util::display(&no_cuda_test_command(Path::new("."), &["f".to_owned()]));
        assert!(
            shown.ends_with("test --package gpukit --no-default-features f"),
            "{shown}"
        );
    }

    #[test]
    fn finds_cuda_crates_in_a_tree_by_name() {
        let with = "gpukit v0.1.0 (/w/crates/gpukit)\ngpukit-cuda v0.1.0 (/w/crates/gpukit-cuda)\n\
                    cudarc v0.19.10\ngpukit-core v0.1.0 (/w/crates/gpukit-core)\n";
        assert_eq!(cuda_crates_in(with), ["gpukit-cuda", "cudarc"]);
        // Names that only contain a CUDA crate's name are not it.
        let without =
            "gpukit v0.1.0 (/w/crates/gpukit)\nmy-cuda-sys-helper v1.0.0\ntracing v0.1.41\n";
        assert!(cuda_crates_in(without).is_empty());
    }

    #[test]
    fn summary_lists_every_step() {
        let line = summary(&[
            (Step::Fmt, Outcome::Ok),
            (Step::Clippy, Outcome::Skipped("asked")),
            (Step::Test, Outcome::Failed),
            (Step::Doc, Outcome::NotRun),
        ]);
        assert_eq!(
            line,
            "==> ci summary: fmt ok, clippy skipped (asked), test FAILED, doc not run"
        );
    }
}
