//! `cargo xtask gpu-bundle [DIR]`: a folder of release test and benchmark binaries plus a
//! `run.sh`, for a GPU machine that has no Rust toolchain.
//!
//! The bundle runs on a machine like this one (x86-64 Linux, a glibc at least as new as
//! the one it was built against): Rust binaries link the standard library statically and
//! load the CUDA libraries at run time, so copying the executables is enough. Steps:
//!
//! 1. `cargo test --release --workspace --exclude xtask --no-run` with
//!    `--message-format=json-render-diagnostics`: every `compiler-artifact` line whose
//!    `profile.test` is true and whose `executable` is set names a test binary (cargo's JSON
//!    is read with serde_json). xtask's own tests are left out: they check this tooling, not
//!    the GPU, and expect the source tree.
//! 2. `cargo build --release -p gpukit-bench -p gpukit-tools --examples`, the same way, for
//!    the benchmark programs named in [`BENCH_PROGRAMS`] (examples of [`BENCH_PACKAGE`]) and
//!    the tools in [`TOOL_PROGRAMS`] (examples of [`TOOL_PACKAGE`]: the `cuda_doctor` that
//!    `run.sh --doctor` runs); a name with no executable is skipped with a warning.
//!    Then the Python module (`gpukit-python`, release) is built.
//! 3. DIR's old contents are removed, but only if DIR holds a `MANIFEST.txt` (so a mistyped
//!    DIR cannot delete someone's files); test binaries go to `DIR/tests/<target name>`
//!    (cargo's `name-hash` file name where two targets share a name), benchmarks to
//!    `DIR/bench/<name>`, tools to `DIR/tools/<name>`, all stripped with `strip` when it is
//!    on PATH; the PyTorch comparator [`TORCH_COMPARATOR_SOURCE`] (a Python script, which
//!    `run.sh --bench` runs after the benchmarks on their JSON reports) goes to
//!    [`TORCH_COMPARATOR`] as it is; the Python module (stripped), its tests and the
//!    example one runs go to `DIR/python/`, and the runner that reports them as libtest
//!    does to [`PYTHON_UNIT`], a test unit like any binary (with PyTorch on the GPU machine
//!    its CUDA test shares a CUDA tensor both ways).
//! 4. `DIR/run.sh` (the template in `run_sh/` next to this file, its parts put in place,
//!    with the names of [`GROUPED_TARGETS`], which it runs a group at a time, and of
//!    [`gpu_test::UNFILTERED_TARGETS`] filled in, and of those its sanitizer steps leave
//!    out; read it for what it does) and `DIR/MANIFEST.txt` (commit, date from `date -u`,
//!    toolchain, every file with its size) are written.
//! 5. `tests/`, `bench/`, `tools/` and `python/` are packed into [`PACKED`] (tar and xz: the test
//!    binaries that link wgpu and the benchmarks are several MiB each, and unpacked they are
//!    well over the limit), which `run.sh` unpacks beside itself on its first call.
//! 6. The total size is printed; [`MAX_BUNDLE_BYTES`] or more is an error, since the bundle
//!    must travel to machines that limit what they accept.
//!
//! Doc tests are not in the bundle: they need rustdoc to build.

#[cfg(test)]
mod tests;

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lexopt::Arg;
use serde_json::Value;

use crate::gpu_test;
use crate::python;
use crate::util::{self, Cli, Failure, Result};

/// The package whose examples are the benchmarks (its folder is `crates/<name>`).
pub const BENCH_PACKAGE: &str = "gpukit-bench";

/// The package whose examples are the tools (its folder is `crates/<name>`).
pub const TOOL_PACKAGE: &str = "gpukit-tools";

/// The benchmark programs (examples of [`BENCH_PACKAGE`]) copied into `DIR/bench/`.
pub const BENCH_PROGRAMS: &[&str] = &[
    "transfer_bench",
    "cuda_bench",
    "pipeline_bench",
    "graph_bench",
    "kernel_bench",
    "allreduce_bench",
    "startup_bench",
];

/// The tools (examples of [`TOOL_PACKAGE`]) copied into `DIR/tools/`; `run.sh` runs them by
/// name.
pub const TOOL_PROGRAMS: &[&str] = &["cuda_doctor"];

/// The PyTorch comparator in the repository (relative to the workspace root): the work of
/// `cuda_bench` and `pipeline_bench` through PyTorch, compared with their reports.
pub const TORCH_COMPARATOR_SOURCE: &str = "crates/gpukit-bench/torch_compare.py";

/// Where the comparator goes in the bundle; `run.sh --bench` runs it from there.
pub const TORCH_COMPARATOR: &str = "tools/torch_compare.py";

/// The Python module's tests as a test unit (a script that reports them as libtest does).
pub const PYTHON_UNIT: &str = "tests/python";

/// The modules the comparator imports from its own folder, beside it in the repository and
/// in the bundle's `tools/`.
pub const TORCH_COMPARATOR_MODULES: &[&str] = &["torch_measure.py", "torch_selftest.py"];

/// A bundle this size or larger is refused.
pub const MAX_BUNDLE_BYTES: u64 = 64 << 20;

/// The bundle folder when none is given, relative to the workspace root.
const DEFAULT_DIR: &str = "bundle";

/// The archive the binaries travel in (xz-compressed tar of [`PACKED_DIRS`]).
pub const PACKED: &str = "bins.tar.xz";

/// The folders of the bundle that travel packed.
const PACKED_DIRS: [&str; 4] = ["tests", "bench", "tools", "python"];

/// Packs [`PACKED_DIRS`] of `dir` into [`PACKED`] and removes them.
fn pack(dir: &Path) -> Result {
    let mut tar = Command::new("tar");
    tar.current_dir(dir)
        .env("XZ_OPT", "-6 -T0")
        .args(["-cJf", PACKED])
        .args(PACKED_DIRS);
    util::run(&mut tar)?;
    for sub in PACKED_DIRS {
        fs::remove_dir_all(dir.join(sub)).map_err(|err| {
            Failure::new(format!(
                "could not remove `{}`: {err}",
                dir.join(sub).display()
            ))
        })?;
    }
    Ok(())
}

/// The file whose presence marks a folder as a bundle this command may empty.
const MANIFEST: &str = "MANIFEST.txt";

/// The template of the script that runs a bundle (see the file itself for its options),
/// with an `# @include NAME` line where each of [`RUN_SH_PARTS`] goes.
const RUN_SH_TEMPLATE: &str = include_str!("run_sh/run.sh");

/// The parts of `run.sh`, one concern each, by the name its include line gives.
const RUN_SH_PARTS: [(&str, &str); 4] = [
    ("units.sh", include_str!("run_sh/units.sh")),
    ("budget.sh", include_str!("run_sh/budget.sh")),
    ("results.sh", include_str!("run_sh/results.sh")),
    ("steps.sh", include_str!("run_sh/steps.sh")),
];

/// The line of the template that a part replaces.
const INCLUDE_PREFIX: &str = "# @include ";

/// The template with each `# @include NAME` line replaced by the part `NAME`; an include
/// of a part that does not exist stays as it is (a comment), which the tests refuse.
fn assembled_template() -> String {
    let mut text = String::with_capacity(
        RUN_SH_TEMPLATE.len() + RUN_SH_PARTS.iter().map(|(_, p)| p.len()).sum::<usize>(),
    );
    for line in RUN_SH_TEMPLATE.split_inclusive('\n') {
        let part = line
            .trim_end()
            .strip_prefix(INCLUDE_PREFIX)
            .and_then(|name| RUN_SH_PARTS.iter().find(|(part, _)| *part == name));
        match part {
            Some((_, part)) => text.push_str(part),
            None => text.push_str(line),
        }
    }
    text
}

/// Where the template takes the names of the test binaries its sanitizer steps run
/// unfiltered.
const UNFILTERED_PLACEHOLDER: &str = "@UNFILTERED_TARGETS@";

/// Where the template takes the names of the test binaries its sanitizer steps leave out.
const NOT_SANITIZED_PLACEHOLDER: &str = "@NOT_SANITIZED_TARGETS@";

/// Where the template takes the names of [`GROUPED_TARGETS`].
const GROUPED_PLACEHOLDER: &str = "@GROUPED_TARGETS@";

/// The test binaries (package, target name) that `run.sh` runs once per group, a group being
/// the tests under one of the binary's top-level modules: the facade's one integration-test
/// binary, whose modules are the areas that were binaries of their own (`props`,
/// `behaviour`, ...), so that `--first props` and `--only behaviour` keep their meaning and
/// each area its own time limit, log and row.
pub const GROUPED_TARGETS: &[(&str, &str)] = &[("gpukit", "it")];

/// The bundle's `run.sh`: the template with the names of [`GROUPED_TARGETS`] and of
/// [`gpu_test::UNFILTERED_TARGETS`] filled in, all of these and those the sanitizers leave
/// out.
pub fn run_sh_text() -> String {
    let names = |keep: fn(&gpu_test::UnfilteredTarget) -> bool| {
        let names: Vec<&str> = gpu_test::UNFILTERED_TARGETS
            .iter()
            .filter(|target| keep(target))
            .map(|target| target.name)
            .collect();
        names.join(" ")
    };
    let grouped: Vec<&str> = GROUPED_TARGETS.iter().map(|(_, name)| *name).collect();
    assembled_template()
        .replace(GROUPED_PLACEHOLDER, &grouped.join(" "))
        .replace(UNFILTERED_PLACEHOLDER, &names(|_| true))
        .replace(NOT_SANITIZED_PLACEHOLDER, &names(|target| !target.sanitize))
}

/// Runs `cargo xtask gpu-bundle [DIR]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let mut cli = Cli::new(args);
    let mut dir = None;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Arg::Value(folder) if dir.is_none() => {
                dir = Some(util::absolute(Path::new(&folder))?);
            }
            Arg::Value(_) => return Err(Failure::usage("it takes at most one folder")),
            other => return Err(other.unexpected().into()),
        }
    }
    let dir = dir.unwrap_or_else(|| root.join(DEFAULT_DIR));
    // Refuse a folder that may not be emptied before spending minutes on the build.
    refuse_unsafe_dir(root, &dir)?;
    replaceable_entries(&dir)?;

    let artifacts = cargo_artifacts(
        root,
        &[
            "test",
            "--release",
            "--workspace",
            "--exclude",
            "xtask",
            "--no-run",
        ],
    )?;
    let tests = name_test_binaries(&artifacts);
    if tests.is_empty() {
        return Err(Failure::new("cargo built no test binaries"));
    }
    let examples = cargo_artifacts(
        root,
        &[
            "build",
            "--release",
            "--package",
            BENCH_PACKAGE,
            "--package",
            TOOL_PACKAGE,
            "--examples",
        ],
    )?;
    let benches = pick_examples(&examples, BENCH_PROGRAMS, BENCH_PACKAGE, "benchmark");
    let tools = pick_examples(&examples, TOOL_PROGRAMS, TOOL_PACKAGE, "tool");
    let (module, module_name) = python::build_library(root)?;

    util::header(&format!("writing the bundle to {}", dir.display()));
    clear_dir(&dir)?;
    let strip = strip_available();
    if !strip {
        eprintln!("warning: `strip` is not on PATH; the binaries keep their symbols (larger)");
    }
    let mut files = Vec::new();
    for (subdir, binaries) in [("tests", &tests), ("bench", &benches), ("tools", &tools)] {
        create_dir(&dir.join(subdir))?;
        for (name, source) in binaries.iter() {
            let relative = format!("{subdir}/{name}");
            let dest = dir.join(&relative);
            fs::copy(source, &dest).map_err(|err| {
                Failure::new(format!(
                    "could not copy `{}` to `{}`: {err}",
                    source.display(),
                    dest.display()
                ))
            })?;
            if strip {
                strip_binary(&dest);
            }
            make_executable(&dest)?;
            files.push(relative);
        }
    }
    // Scripts: copied as they are, nothing to strip; the modules beside the comparator.
    let source = root.join(TORCH_COMPARATOR_SOURCE);
    let source_dir = source.parent().unwrap_or(root);
    let tools_dir = Path::new(TORCH_COMPARATOR)
        .parent()
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let mut scripts = vec![(source.clone(), TORCH_COMPARATOR.to_owned())];
    for module in TORCH_COMPARATOR_MODULES {
        let relative = tools_dir.join(module).to_string_lossy().into_owned();
        scripts.push((source_dir.join(module), relative));
    }
    // The Python module, its tests and the example they run, and the runner that reports
    // them as libtest does: the test unit `python` (tests/python).
    create_dir(&dir.join("python"))?;
    let python_dest = format!("python/{module_name}");
    fs::copy(&module, dir.join(&python_dest)).map_err(|err| {
        Failure::new(format!(
            "could not copy the Python module `{}`: {err}",
            module.display()
        ))
    })?;
    if strip {
        strip_binary(&dir.join(&python_dest));
    }
    files.push(python_dest);
    for script in python::BUNDLED_SCRIPTS {
        let name = Path::new(script).file_name().unwrap_or_default();
        let relative = format!("python/{}", name.to_string_lossy());
        scripts.push((root.join(script), relative));
    }
    scripts.push((root.join(python::LIBTEST_RUNNER), PYTHON_UNIT.to_owned()));
    for (source, relative) in scripts {
        let dest = dir.join(&relative);
        fs::copy(&source, &dest).map_err(|err| {
            Failure::new(format!(
                "could not copy the script `{}` to `{}`: {err}",
                source.display(),
                dest.display()
            ))
        })?;
        make_executable(&dest)?;
        files.push(relative);
    }
    let mut listed = Vec::new();
    for relative in &files {
        listed.push((relative.clone(), file_size(&dir.join(relative))?));
    }
    let unpacked: u64 = listed.iter().map(|(_, size)| size).sum();
    // The binaries that link wgpu and the CUDA loader are several MiB each: together over
    // the limit, but they compress about six to one. `run.sh` unpacks the archive on its
    // first call.
    pack(&dir)?;
    let run_sh = dir.join("run.sh");
    write_file(&run_sh, &run_sh_text())?;
    make_executable(&run_sh)?;
    let mut carried = vec![(PACKED.to_owned(), file_size(&dir.join(PACKED))?)];
    carried.push(("run.sh".to_owned(), file_size(&run_sh)?));
    let manifest = manifest_text(&provenance(root), &listed);
    write_file(&dir.join(MANIFEST), &manifest)?;
    carried.push((MANIFEST.to_owned(), file_size(&dir.join(MANIFEST))?));

    for (relative, size) in &listed {
        println!("  {:>10}  {relative} (packed)", human_size(*size));
    }
    for (relative, size) in &carried {
        println!("  {:>10}  {relative}", human_size(*size));
    }
    println!("  {:>10}  unpacked", human_size(unpacked));
    let total: u64 = carried.iter().map(|(_, size)| size).sum();
    println!(
        "==> gpu-bundle: {} test binaries, {} benchmarks, {} tools, total {} ({total} bytes) \
         in {}",
        tests.len(),
        benches.len(),
        tools.len(),
        human_size(total),
        dir.display()
    );
    if total >= MAX_BUNDLE_BYTES {
        return Err(Failure::new(format!(
            "the bundle is {} ({total} bytes), over the limit of {}: leave out a benchmark, \
             or check that the binaries were stripped",
            human_size(total),
            human_size(MAX_BUNDLE_BYTES)
        )));
    }
    println!(
        "run it on the GPU machine with `{}/run.sh` (`--help` for its options; \
         docs/GPU-RUNS.md has the sequence of steps)",
        dir.display()
    );
    Ok(())
}

/// The executables of the examples in `names` (each with its name), warning about any that
/// cargo did not build. Example names are unique in the workspace (`cargo run --example`
/// needs that), so the name finds the program; `package` is for the warning.
fn pick_examples(
    examples: &[Artifact],
    names: &[&str],
    package: &str,
    what: &str,
) -> Vec<(String, PathBuf)> {
    let mut picked = Vec::new();
    for &name in names {
        let found = examples.iter().find(|artifact| {
            artifact.name == name && artifact.kinds.iter().any(|kind| kind == "example")
        });
        match found {
            Some(artifact) if artifact.executable.is_file() => {
                picked.push((name.to_owned(), artifact.executable.clone()));
            }
            _ => eprintln!(
                "warning: {what} `{name}` was not built (no example of that name in \
                 {package}?); it is left out of the bundle"
            ),
        }
    }
    picked
}

/// One executable cargo reported building.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Artifact {
    /// The target's name (`it`, `gpukit_core`, `transfer_bench`).
    pub(crate) name: String,
    /// The target's kinds (`lib`, `test`, `example`, ...).
    pub(crate) kinds: Vec<String>,
    /// Whether it was built as a test harness (`profile.test`).
    pub(crate) test: bool,
    /// The executable's path.
    pub(crate) executable: PathBuf,
}

/// The executable artifact a cargo JSON message describes, if it is one: a
/// `compiler-artifact` with a non-null `executable`. Other messages give `Ok(None)`.
fn parse_artifact(line: &str) -> serde_json::Result<Option<Artifact>> {
    let message: Value = serde_json::from_str(line)?;
    if message["reason"] != "compiler-artifact" {
        return Ok(None);
    }
    let Some(executable) = message["executable"].as_str() else {
        return Ok(None);
    };
    let target = &message["target"];
    let kinds = target["kind"].as_array().into_iter().flatten();
    Ok(Some(Artifact {
        name: target["name"].as_str().unwrap_or_default().to_owned(),
        kinds: kinds.filter_map(Value::as_str).map(str::to_owned).collect(),
        test: message["profile"]["test"].as_bool().unwrap_or(false),
        executable: PathBuf::from(executable),
    }))
}

/// Runs a cargo build command with JSON messages and returns the executables it reported.
pub(crate) fn cargo_artifacts(root: &Path, args: &[&str]) -> Result<Vec<Artifact>> {
    let mut cmd = util::cargo(root);
    cmd.args(args)
        .arg("--message-format=json-render-diagnostics");
    let (mut child, shown) = util::spawn_piped(&mut cmd)?;
    let mut artifacts = Vec::new();
    let mut read_error = None;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = match line {
                Ok(line) => line,
                Err(err) => {
                    // Keep reading nothing more, but let cargo finish before failing.
                    read_error = Some(err);
                    break;
                }
            };
            if !line.starts_with('{') {
                continue;
            }
            match parse_artifact(&line) {
                Ok(Some(artifact)) => artifacts.push(artifact),
                Ok(None) => {}
                Err(err) => {
                    let start: String = line.chars().take(120).collect();
                    eprintln!("warning: cargo printed a line that is not JSON ({err}): {start}");
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|err| Failure::new(format!("waiting for `{shown}` failed: {err}")))?;
    if !status.success() {
        return Err(Failure {
            message: format!("`{shown}` failed ({status})"),
            code: util::exit_code(status),
        });
    }
    if let Some(err) = read_error {
        return Err(Failure::new(format!(
            "could not read the output of `{shown}`: {err}"
        )));
    }
    Ok(artifacts)
}

/// The test binaries among `artifacts`, each with the file name it gets in the bundle: the
/// target name, or cargo's `name-hash` file name for targets that share a name.
fn name_test_binaries(artifacts: &[Artifact]) -> Vec<(String, PathBuf)> {
    let mut tests: Vec<&Artifact> = Vec::new();
    for artifact in artifacts.iter().filter(|artifact| artifact.test) {
        if !tests
            .iter()
            .any(|seen| seen.executable == artifact.executable)
        {
            tests.push(artifact);
        }
    }
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    for artifact in &tests {
        let shared = tests
            .iter()
            .filter(|other| other.name == artifact.name)
            .count()
            > 1;
        let file_name = artifact
            .executable
            .file_name()
            .map(|name| name.to_string_lossy().into_owned());
        let base = match file_name {
            Some(file_name) if shared || artifact.name.is_empty() => file_name,
            _ => artifact.name.clone(),
        };
        // Cargo's file names are unique in one folder; this only guards odd layouts.
        let mut name = base.clone();
        let mut n = 2;
        while named.iter().any(|(taken, _)| *taken == name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        named.push((name, artifact.executable.clone()));
    }
    named.sort();
    named
}

/// Refuses a DIR that is the workspace root or one of its ancestors.
fn refuse_unsafe_dir(root: &Path, dir: &Path) -> Result {
    let (Ok(root), Ok(dir_real)) = (root.canonicalize(), dir.canonicalize()) else {
        return Ok(()); // DIR does not exist yet: nothing to protect.
    };
    if root.starts_with(&dir_real) {
        return Err(Failure::new(format!(
            "refusing to use `{}` as the bundle folder: it contains the workspace",
            dir.display()
        )));
    }
    Ok(())
}

/// The entries of `dir` that [`clear_dir`] would remove (none if `dir` does not exist), or
/// an error if `dir` may not be emptied: it is not a readable folder, or it is not empty and
/// has no `MANIFEST.txt` (so it is not an earlier bundle). Checked before building, too.
fn replaceable_entries(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => {
            return Err(Failure::new(format!(
                "`{}` exists but cannot be read as a folder: {err}",
                dir.display()
            )))
        }
    };
    let entries: Vec<fs::DirEntry> = entries
        .collect::<std::io::Result<_>>()
        .map_err(|err| Failure::new(format!("could not list `{}`: {err}", dir.display())))?;
    if !entries.is_empty() && !dir.join(MANIFEST).is_file() {
        return Err(Failure::new(format!(
            "refusing to empty `{}`: it is not empty and has no {MANIFEST}, so it is not an \
             earlier bundle; pick another folder or remove it yourself",
            dir.display()
        )));
    }
    Ok(entries)
}

/// Makes `dir` an empty folder. An existing non-empty folder is emptied only when it holds
/// a `MANIFEST.txt`, i.e. when it is an earlier bundle.
fn clear_dir(dir: &Path) -> Result {
    let entries = replaceable_entries(dir)?;
    create_dir(dir)?;
    for entry in entries {
        let path = entry.path();
        // `file_type` does not follow symbolic links: a link is removed, not its target.
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        let removed = if is_dir {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed
            .map_err(|err| Failure::new(format!("could not remove `{}`: {err}", path.display())))?;
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result {
    fs::create_dir_all(dir)
        .map_err(|err| Failure::new(format!("could not create `{}`: {err}", dir.display())))
}

fn write_file(path: &Path, text: &str) -> Result {
    fs::write(path, text)
        .map_err(|err| Failure::new(format!("could not write `{}`: {err}", path.display())))
}

fn file_size(path: &Path) -> Result<u64> {
    fs::metadata(path)
        .map(|meta| meta.len())
        .map_err(|err| Failure::new(format!("could not read `{}`: {err}", path.display())))
}

/// Sets mode 755 (the copies keep cargo's mode already; this makes the intent explicit).
fn make_executable(path: &Path) -> Result {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(|err| {
            Failure::new(format!(
                "could not make `{}` executable: {err}",
                path.display()
            ))
        })?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn strip_available() -> bool {
    util::succeeds(Command::new("strip").arg("--version"))
}

/// Strips `path` in place; a failure is a warning, the binary is only larger.
fn strip_binary(path: &Path) {
    match Command::new("strip")
        .arg(path)
        .stdin(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => eprintln!(
            "warning: `strip {}` failed ({status}); kept unstripped",
            path.display()
        ),
        Err(err) => eprintln!(
            "warning: could not run `strip {}`: {err}; kept unstripped",
            path.display()
        ),
    }
}

/// Where the binaries (or a benchmark run's figures) came from: the manifest's and the
/// benchmarks page's header.
pub struct Provenance {
    /// `git rev-parse HEAD`, with `(plus uncommitted changes)` where the tree differs.
    pub commit: String,
    /// `date -u`, as `2026-11-26 09:30:00 UTC`.
    pub date: String,
    /// `rustc -V`.
    pub rustc: String,
}

/// The provenance of the workspace at `root` now.
pub fn provenance(root: &Path) -> Provenance {
    let commit = match git(root, &["rev-parse", "HEAD"]) {
        Some(commit) => match git(root, &["status", "--porcelain"]) {
            Some(changes) if !changes.is_empty() => {
                format!("{commit} (plus uncommitted changes)")
            }
            _ => commit,
        },
        None => "unknown (`git rev-parse HEAD` failed)".to_owned(),
    };
    let date = quiet_output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M:%S UTC"]))
        .unwrap_or_else(|| "unknown (`date -u` failed)".to_owned());
    let rustc = quiet_output(Command::new("rustc").arg("-V").current_dir(root))
        .unwrap_or_else(|| "unknown".to_owned());
    Provenance {
        commit,
        date,
        rustc,
    }
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    quiet_output(Command::new("git").args(args).current_dir(root))
}

/// The trimmed stdout of a command that succeeded, or `None` (nothing printed on failure).
fn quiet_output(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn manifest_text(provenance: &Provenance, files: &[(String, u64)]) -> String {
    let mut text = format!(
        "gpu bundle, made by `cargo xtask gpu-bundle`; run ./run.sh (--help for options)\n\
         commit: {}\n\
         built: {}\n\
         rustc: {}\n\
         \n\
         files (bytes, path):\n",
        provenance.commit, provenance.date, provenance.rustc
    );
    for (path, size) in files {
        text.push_str(&format!("{size:>12}  {path}\n"));
    }
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    text.push_str(&format!(
        "{total:>12}  total, without this file ({})\n",
        human_size(total)
    ));
    text
}

/// `bytes` in KiB or MiB with one decimal, for people.
fn human_size(bytes: u64) -> String {
    // Precision loss is irrelevant for display.
    #[allow(clippy::cast_precision_loss)]
    let value = bytes as f64;
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", value / f64::from(1u32 << 20))
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", value / 1024.0)
    } else {
        format!("{bytes} B")
    }
}
