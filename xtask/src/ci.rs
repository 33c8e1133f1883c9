//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first failure.
//!
//! fmt, clippy, tidy, test, cuda-emu, python, no-cuda, doc, package, toolchains: cheap
//! checks first so a formatting slip fails in seconds. `cuda-emu` ([`crate::cuda_emu::ci`])
//! runs the CUDA tests against the CUDA emulator on the test step's build, one process per
//! test, then the `data_parallel` example on two emulated devices and `cuda_doctor`. Each configuration is built once: `test` builds and
//! tests the workspace with its default features; `no-cuda` the other configuration users
//! can choose, the facade without its default features (`cuda`, `vulkan`, `half`). It
//! checks that no CUDA crate is in that build's dependency tree, lints the facade and the
//! programs built on it, builds the facade's tests and runs those whose behaviour depends on
//! the features: only the facade changes with them (the crates below it have no default
//! features, and the programs' tests do not depend on them), every `cfg` in the facade
//! names one feature, so the two builds cover every arm, and a CPU test not about device
//! selection runs the same in both. `python` ([`crate::python`]) builds the Python package's
//! wheel with the test step's profile, installs it in a virtual environment, checks its
//! stubs and runs its tests against NumPy (skipped, and said so, without Python or PyPI). `package` ([`crate::package`]) packs every library crate without building it
//! and checks that every file its sources and manifest name is in the package.
//! `toolchains` ([`crate::toolchains`]) checks the workspace with the declared minimum Rust
//! and the library crates with the current nightly, last because it builds them twice more
//! (check only).
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
    CudaEmu,
    Python,
    NoCuda,
    Doc,
    Package,
    Toolchains,
}

/// The crates a build without the facade's `cuda` feature must not compile.
const CUDA_CRATES: [&str; 3] = ["gpukit-cuda", "gpukit-cuda-sys", "cudarc"];

/// The workspace members that are not published (`publish = false`), left out of `package`.
const UNPUBLISHED: [&str; 6] = [
    "gpukit-cuda-emu",
    "gpukit-examples",
    "gpukit-bench",
    "gpukit-tools",
    "gpukit-python",
    "xtask",
];

impl Step {
    const ALL: [Step; 10] = [
        Step::Fmt,
        Step::Clippy,
        Step::Tidy,
        Step::Test,
        Step::CudaEmu,
        Step::Python,
        Step::NoCuda,
        Step::Doc,
        Step::Package,
        Step::Toolchains,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::Fmt => "fmt",
            Step::Clippy => "clippy",
            Step::Tidy => "tidy",
            Step::Test => "test",
            Step::CudaEmu => "cuda-emu",
            Step::Python => "python",
            Step::NoCuda => "no-cuda",
            Step::Doc => "doc",
            Step::Package => "package",
            Step::Toolchains => "toolchains",
        }
    }

    /// The cargo subcommand that must be installed for this step, if it is optional.
    fn component(self) -> Option<(&'static str, &'static str)> {
        match self {
            Step::Fmt => Some(("fmt", "rustfmt")),
            Step::Clippy => Some(("clippy", "clippy")),
            Step::Tidy
            | Step::Test
            | Step::CudaEmu
            | Step::Python
            | Step::NoCuda
            | Step::Doc
            | Step::Package
            | Step::Toolchains => None,
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
            Step::Test => {
                for mut command in test_commands(root, test_args) {
                    util::run(&mut command)?;
                }
                // The suites again under the chaos schedule (not with a test filter: the
                // filter picks its own tests).
                if test_args.is_empty() {
                    for seed in crate::chaos::CI_SEEDS {
                        crate::chaos::run_seed(root, seed)?;
                    }
                    util::header(
                        "the CPU tests and the kernel examples under GPU_KERNEL_RACECHECK=1",
                    );
                    for mut command in racecheck_commands(root) {
                        util::run(&mut command)?;
                    }
                }
                Ok(())
            }
            Step::CudaEmu => crate::cuda_emu::ci(root, test_args),
            Step::Python => crate::python::test(root),
            Step::NoCuda => no_cuda(root, test_args),
            Step::Doc => {
                // Keep flags the caller set and make rustdoc warnings errors on top.
                let flags = match std::env::var("RUSTDOCFLAGS") {
                    Ok(flags) if !flags.trim().is_empty() => format!("{flags} -D warnings"),
                    _ => "-D warnings".to_owned(),
                };
                // Every feature, as docs.rs builds them (`half`, `fault-injection`): a broken
                // intra-doc link in feature-gated docs fails here too. Then the private items
                // too: a module's docs that name a function since removed fail as well.
                for private in [&[][..], &["--document-private-items"]] {
                    util::run(
                        util::cargo(root)
                            .env("RUSTDOCFLAGS", &flags)
                            .args(["doc", "--workspace", "--no-deps", "--all-features"])
                            .args(private),
                    )?;
                }
                Ok(())
            }
            Step::Package => crate::package::run(root, &UNPUBLISHED),
            Step::Toolchains => crate::toolchains::run(root, &[]),
        }
    }
}

/// The test step's commands: every test target of the workspace but the examples, then its
/// doc tests. `cargo test` alone would also build every example (the benchmarks and tools
/// among them, about a minute here) without running them; clippy has type-checked them
/// already, and the GPU bundle and the README's commands build them.
fn test_commands(root: &Path, test_args: &[String]) -> [std::process::Command; 2] {
    let mut targets = util::cargo(root);
    targets
        .args(["test", "--workspace", "--lib", "--bins", "--tests"])
        .args(test_args);
    let mut doc = util::cargo(root);
    doc.args(["test", "--workspace", "--doc"]).args(test_args);
    [targets, doc]
}

/// The CPU backend's tests (every `#[kernel]` test and built-in op has an arm there) and the
/// README's kernel examples again with the race checker of `#[kernel]` launches on: a race
/// between the threads of any launch fails its test. On the test step's build.
fn racecheck_commands(root: &Path) -> [std::process::Command; 2] {
    let test = |target: &str, filters: &[&str]| {
        let mut c = util::cargo(root);
        c.env("GPU_KERNEL_RACECHECK", "1")
            .args(["test", "--workspace", "--test", target, "--"])
            .args(filters);
        c
    };
    [
        test("it", &["cpu", "multi_device", "rust_kernels"]),
        test("kernel_examples", &[]),
    ]
}

/// The `no-cuda` step: the dependency tree of `gpukit` without default features holds no CUDA
/// crate; clippy (where installed) on the facade and the programs (tutorials, benchmarks,
/// tools) in that configuration; then the facade's tests in it whose behaviour depends on
/// the features (the module docs say why those alone).
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
    for mut command in no_cuda_test_commands(root, test_args) {
        util::run(&mut command)?;
    }
    Ok(())
}

/// The modules of the facade's test binary whose tests depend on its features (device
/// selection and the fallback policy, and what a build without CUDA says); every other
/// test's CPU arm is the same in both configurations and ran in the test step.
const FEATURE_DEPENDENT_TESTS: [&str; 3] = ["no_cuda::", "selection::", "bad_input::devices::"];

/// The no-cuda step's tests, all built without the facade's default features: its unit
/// tests and the binaries beside `it`; `it` (all of it compiled) with the tests of
/// [`FEATURE_DEPENDENT_TESTS`], or with `test_args` instead where some are given; the doc
/// tests.
fn no_cuda_test_commands(root: &Path, test_args: &[String]) -> [std::process::Command; 3] {
    let facade = || {
        let mut cmd = util::cargo(root);
        cmd.args(["test", "--package", "gpukit", "--no-default-features"]);
        cmd
    };
    let mut units = facade();
    units
        .args(["--lib", "--test", "alloc_free", "--test", "cuda_poison"])
        .args(test_args);
    let mut it = facade();
    it.args(["--test", "it"]);
    if test_args.is_empty() {
        it.arg("--").args(FEATURE_DEPENDENT_TESTS);
    } else {
        it.args(test_args);
    }
    let mut doc = facade();
    doc.arg("--doc").args(test_args);
    [units, it, doc]
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
    /// Passed, in this many seconds.
    Ok(u64),
    /// Failed, after this many seconds.
    Failed(u64),
    Skipped(&'static str),
    NotRun,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(secs) => write!(f, "ok ({})", duration(*secs)),
            Outcome::Failed(secs) => write!(f, "FAILED ({})", duration(*secs)),
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
            let start = std::time::Instant::now();
            let result = step.run(root, &options.test_args);
            let secs = start.elapsed().as_secs();
            match result {
                Ok(()) => Outcome::Ok(secs),
                Err(err) => {
                    failure = Some(err);
                    Outcome::Failed(secs)
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

/// `42 s`, or `4 min 38 s` from a minute on.
fn duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs} s"),
        _ => format!("{} min {} s", secs / 60, secs % 60),
    }
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
    fn the_test_step_runs_every_target_but_the_examples_and_then_the_doc_tests() {
        let [targets, doc] = test_commands(Path::new("."), &["f".to_owned()]);
        assert!(
            util::display(&targets).ends_with("test --workspace --lib --bins --tests f"),
            "{}",
            util::display(&targets)
        );
        assert!(
            util::display(&doc).ends_with("test --workspace --doc f"),
            "{}",
            util::display(&doc)
        );
    }

    #[test]
    fn every_member_left_out_of_package_is_unpublished() {
        let root = util::workspace_root();
        for dir in [
            "crates/gpukit-cuda-emu",
            "examples",
            "crates/gpukit-bench",
            "crates/gpukit-tools",
            "crates/gpukit-python",
            "xtask",
        ] {
            let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
            assert!(manifest.contains("publish = false"), "{dir}");
        }
        assert_eq!(UNPUBLISHED.len(), 6);
    }

    #[test]
    fn the_no_cuda_tests_are_the_facades_without_default_features() {
        let shown = |args: &[String]| {
            no_cuda_test_commands(Path::new("."), args)
                .iter()
                .map(util::display)
                .collect::<Vec<_>>()
        };
        let plain = shown(&[]);
        let base = "test --package gpukit --no-default-features";
        assert!(
            plain[0].ends_with(&format!(
                "{base} --lib --test alloc_free --test cuda_poison"
            )),
            "{plain:?}"
        );
        assert!(
            plain[1].ends_with(&format!(
                "{base} --test it -- no_cuda:: selection:: bad_input::devices::"
            )),
            "{plain:?}"
        );
        assert!(plain[2].ends_with(&format!("{base} --doc")), "{plain:?}");
        // Given arguments replace the module filters.
        let filtered = shown(&["f".to_owned()]);
        assert!(
            filtered[1].ends_with(&format!("{base} --test it f")),
            "{filtered:?}"
        );
        // Every filter names a module of the test binary.
        let it = util::workspace_root().join("crates/gpukit/tests/it");
        for filter in FEATURE_DEPENDENT_TESTS {
            let path: Vec<&str> = filter.trim_end_matches("::").split("::").collect();
            let file = it.join(path.join("/"));
            assert!(
                file.with_extension("rs").is_file() || file.join("mod.rs").is_file(),
                "{filter}: no {}",
                file.display()
            );
        }
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
            (Step::Fmt, Outcome::Ok(2)),
            (Step::Clippy, Outcome::Skipped("asked")),
            (Step::Test, Outcome::Failed(278)),
            (Step::Doc, Outcome::NotRun),
        ]);
        assert_eq!(
            line,
            "==> ci summary: fmt ok (2 s), clippy skipped (asked), test FAILED (4 min 38 s), \
             doc not run"
        );
    }
}
