//! The test units and their order: a grouped binary run a group (a top-level module) at a
//! time, each group exactly; the default order (the most telling first, the slowest last,
//! so that a call cut short has run the most), `--first`, `--only`, and the names matching
//! cargo's `name-hash` files.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::{bash_available, fake_bundle, line, run_args, run_sh, verdict, Call, PASSING};
use super::{TempDir, FAKE_SANITIZER};
use crate::gpu_bundle::{run_sh_text, GROUPED_TARGETS};
use crate::util;

/// The binaries of `column` (`tests`, `memcheck`, ...) in the order their rows were printed.
fn rows<'a>(stdout: &'a str, column: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            // Not a header line (`steps:  tests`).
            (!name.ends_with(':') && words.next() == Some(column)).then_some(name)
        })
        .collect()
}

/// A grouped binary `it` whose tests are `$TESTS` (space-separated): `--list` lists those its
/// filters (substrings) select and its `--skip`s leave, as libtest does; a run prints its
/// arguments and passes every name it is given, and fails unless the names come `--exact`.
const FAKE_GROUPED: &str = r#"
if [ "$1" = --list ]; then
    shift
    filters=()
    skips=()
    while [ $# -gt 0 ]; do
        case $1 in
            --format) shift ;;
            --skip) skips+=("$2"); shift ;;
            -*) ;;
            *) filters+=("$1") ;;
        esac
        shift
    done
    for t in $TESTS; do
        keep=$((${#filters[@]} == 0))
        for f in ${filters[@]+"${filters[@]}"}; do case $t in *"$f"*) keep=1 ;; esac; done
        for k in ${skips[@]+"${skips[@]}"}; do case $t in *"$k"*) keep=0 ;; esac; done
        if [ "$keep" -eq 1 ]; then echo "$t: test"; fi
    done
    exit 0
fi
echo "args: $*"
if [ "$1" != --exact ]; then echo "not run --exact"; exit 1; fi
n=0
for a in "$@"; do
    case $a in
        -*) ;;
        *) echo "test $a ... ok"; n=$((n + 1)) ;;
    esac
done
echo "test result: ok. $n passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;

/// The tests of the fake `it`: groups named like the real ones, with names that a substring
/// filter would take into the wrong group (`props::` is in `pipeline_props::`, `memory::`
/// in `..._of_memory::`).
const GROUPED_TESTS: &str = "props::a::cpu props::a::cuda behaviour::b::cuda memory::c::cuda \
                             bad_input::huge_out_of_memory::cuda pipeline_props::d::cuda";

/// [`FAKE_GROUPED`] with its tests.
fn grouped(tests: &str) -> String {
    format!("TESTS='{tests}'\n{FAKE_GROUPED}")
}

/// A bundle with binaries named like the real ones (and two `faults` that share a name, as
/// cargo names them), each passing and listing a CUDA test (as the sanitizer steps ask), and
/// the grouped `it` with [`GROUPED_TESTS`].
fn named_bundle(tmp: &TempDir) -> std::path::PathBuf {
    let body = format!("if [ \"$1\" = --list ]; then echo 'a::cuda: test'; exit 0; fi\n{PASSING}");
    let names = ["alpha", "faults-0123abcd", "faults-4567ef01", "zeta"];
    let mut tests: Vec<(&str, &str)> = names.iter().map(|name| (*name, body.as_str())).collect();
    let it = grouped(GROUPED_TESTS);
    tests.push(("it", &it));
    fake_bundle(tmp, &tests)
}

/// The arguments the log of a fake binary's run shows.
fn logged_args(logs: &Path, log: &str) -> String {
    let text = fs::read_to_string(logs.join(log)).unwrap_or_else(|err| panic!("{log}: {err}"));
    line(&text, "args: ").to_owned()
}

#[test]
fn the_default_order_runs_props_and_behaviour_first_and_the_slowest_last() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("order");
    let bundle = named_bundle(&tmp);
    let logs = tmp.path().join("logs");
    let (code, stdout) = run_args(&bundle, &["--logs", logs.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    let order = [
        "props",
        "behaviour",
        "memory",
        "bad_input",
        "alpha",
        "zeta",
        "pipeline_props",
        "faults-0123abcd",
        "faults-4567ef01",
    ];
    assert_eq!(rows(&stdout, "tests"), order, "{stdout}");
    assert_eq!(
        line(&stdout, "order:  "),
        format!("order:  {} (the default order)", order.join(" "))
    );
    // Each group ran its own tests, named exactly, in a run of its own.
    assert_eq!(
        logged_args(&logs, "props.log"),
        "args: --exact props::a::cpu props::a::cuda --show-output"
    );
    assert_eq!(
        logged_args(&logs, "memory.log"),
        "args: --exact memory::c::cuda --show-output"
    );
    assert_eq!(
        logged_args(&logs, "pipeline_props.log"),
        "args: --exact pipeline_props::d::cuda --show-output"
    );
    assert!(
        line(&stdout, "props ").contains("    2 passed     0 failed"),
        "{stdout}"
    );
    // 4 binaries of 5 passed each, and the 6 tests of `it`.
    assert_eq!(
        line(&stdout, "26 passed"),
        "26 passed, 0 failed",
        "{stdout}"
    );

    // --first: those, in its order (a name takes both `faults-HASH`), then the default order.
    let (code, stdout) = run_args(&bundle, &["--first", "zeta,faults", "--first=alpha"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        rows(&stdout, "tests"),
        [
            "zeta",
            "faults-0123abcd",
            "faults-4567ef01",
            "alpha",
            "props",
            "behaviour",
            "memory",
            "bad_input",
            "pipeline_props",
        ],
        "{stdout}"
    );

    // A grouped binary's name takes all its groups, in the default order.
    let (code, stdout) = run_args(&bundle, &["--first", "pipeline_props", "--only", "it"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        rows(&stdout, "tests"),
        [
            "pipeline_props",
            "props",
            "behaviour",
            "memory",
            "bad_input"
        ],
        "{stdout}"
    );
}

#[test]
fn a_groups_run_names_the_tests_the_arguments_select() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("groupfilter");
    let bundle = named_bundle(&tmp);
    let logs = tmp.path().join("logs");
    // A filter and a skip after `--`: applied to the listing; the run names what they leave,
    // with the other arguments.
    let (code, stdout) = run_args(
        &bundle,
        &[
            "--only",
            "props,memory,behaviour",
            "--logs",
            logs.to_str().unwrap(),
            "--",
            "::a::",
            "--skip",
            "cpu",
            "--nocapture",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        rows(&stdout, "tests"),
        ["props", "memory", "behaviour"],
        "{stdout}"
    );
    assert_eq!(
        logged_args(&logs, "props.log"),
        "args: --exact props::a::cuda --show-output --nocapture"
    );
    assert!(
        line(&stdout, "behaviour ")
            .ends_with("no test selected (the arguments after -- leave none)"),
        "{stdout}"
    );
    assert!(!logs.join("memory.log").exists());
}

#[test]
fn root_tests_of_a_grouped_binary_are_a_unit_and_a_failed_listing_runs_it_whole() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("grouproot");
    let it = grouped("lonely props::a::cuda");
    let bundle = fake_bundle(&tmp, &[("it", &it)]);
    let logs = tmp.path().join("logs");
    let (code, stdout) = run_args(&bundle, &["--logs", logs.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(rows(&stdout, "tests"), ["props", "it"], "{stdout}");
    assert_eq!(
        logged_args(&logs, "it.log"),
        "args: --exact lonely --show-output"
    );

    // A binary that cannot list its tests runs whole, which here fails (no --exact).
    let broken = "if [ \"$1\" = --list ]; then exit 3; fi\necho 'args: '\"$*\"\nexit 101\n";
    let tmp = TempDir::new("grouplist");
    let bundle = fake_bundle(&tmp, &[("it", broken)]);
    let (code, stdout) = run_args(&bundle, &[]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(rows(&stdout, "tests"), ["it"], "{stdout}");
    assert_eq!(
        line(&stdout, "note:   "),
        "note:   listing the tests of tests/it failed: it runs as one binary"
    );
}

#[test]
fn only_runs_the_binaries_it_names_in_the_test_and_sanitizer_steps() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("only");
    let bundle = named_bundle(&tmp);
    let fake_bin = super::machine::fake_tools(&tmp, &[("compute-sanitizer", FAKE_SANITIZER)]);
    let logs = tmp.path().join("logs");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &[
                "--tests",
                "--sanitize",
                "memcheck",
                "--only",
                "zeta,props",
                "--logs",
                logs.to_str().unwrap(),
            ],
            path_prefix: Some(&fake_bin),
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(rows(&stdout, "tests"), ["zeta", "props"], "{stdout}");
    assert_eq!(rows(&stdout, "memcheck"), ["zeta", "props"], "{stdout}");
    assert_eq!(line(&stdout, "order:  "), "order:  zeta props (--only)");
    assert!(!logs.join("behaviour.log").exists());
    assert!(logs.join("zeta.memcheck.log").is_file());
    // A group's sanitizer run names its CUDA tests.
    assert_eq!(
        logged_args(&logs, "props.memcheck.log"),
        "args: --exact props::a::cuda --show-output"
    );
    assert_eq!(verdict(&stdout), "run.sh: PASSED (tests memcheck)");

    // With --first, --first gives the order of the binaries --only keeps.
    let (code, stdout) = run_args(&bundle, &["--only", "zeta,props", "--first", "props"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(rows(&stdout, "tests"), ["props", "zeta"], "{stdout}");
}

#[test]
fn an_unknown_name_is_an_error_naming_it() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("unknown");
    let bundle = named_bundle(&tmp);
    for option in ["--first", "--only"] {
        let out = Command::new("bash")
            .arg(bundle.join("run.sh"))
            .args([option, "nosuch,props,faults-0123abcd,other"])
            .current_dir(tmp.path())
            .env_remove("OUT")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{option}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!(
                "run.sh: {option}: no test binary or group named 'nosuch' 'other' in "
            )),
            "{stderr}"
        );
        assert!(
            first.ends_with(
                "(there: alpha bad_input behaviour faults-0123abcd faults-4567ef01 it memory \
                 pipeline_props props zeta)"
            ),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "nothing ran");
    }
}

/// The names in run.sh's `VAR="a b c"` line.
fn listed(text: &str, var: &str) -> Vec<String> {
    let prefix = format!("{var}=\"");
    let line = text
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("run.sh sets no {var}"));
    line[prefix.len()..]
        .trim_end_matches('"')
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The top-level modules of a grouped test binary (`mod NAME;` in its `main.rs`, with or
/// without attributes before it): its groups.
fn groups_of(main_rs: &Path) -> Vec<String> {
    let text = fs::read_to_string(main_rs).unwrap_or_else(|err| panic!("{main_rs:?}: {err}"));
    text.lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// The test targets of the workspace's packages (those under `crates/` and `examples/`):
/// each package's library (its name with `_`) and each `tests/NAME.rs` or
/// `tests/NAME/main.rs`.
fn test_targets(root: &Path) -> Vec<String> {
    let mut dirs: Vec<_> = fs::read_dir(root.join("crates"))
        .expect("crates/ is readable")
        .map(|entry| entry.expect("crates/ entry").path())
        .collect();
    dirs.push(root.join("examples"));
    let mut targets = Vec::new();
    for dir in dirs {
        let Ok(manifest) = fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        if let Some(package) = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = \""))
        {
            targets.push(package.trim_end_matches('"').replace('-', "_"));
        }
        let Ok(tests) = fs::read_dir(dir.join("tests")) else {
            continue;
        };
        for entry in tests {
            let path = entry.expect("tests/ entry").path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.extension().is_some_and(|ext| ext == "rs") || path.join("main.rs").is_file() {
                targets.push(name);
            }
        }
    }
    targets
}

/// The groups of every grouped binary: the top-level modules of its `main.rs`.
fn grouped_modules(root: &Path) -> Vec<String> {
    let mut groups = Vec::new();
    for (package, name) in GROUPED_TARGETS {
        let main_rs = root
            .join("crates")
            .join(package)
            .join("tests")
            .join(name)
            .join("main.rs");
        groups.extend(groups_of(&main_rs));
    }
    groups
}

#[test]
fn grouped_binaries_exist_and_their_groups_name_no_other_target() {
    let root = util::workspace_root();
    let targets = test_targets(&root);
    for (package, name) in GROUPED_TARGETS {
        assert!(targets.contains(&(*name).to_owned()), "{package} {name}");
    }
    let groups = grouped_modules(&root);
    for group in [
        "props",
        "behaviour",
        "memory",
        "pipeline_props",
        "selection",
    ] {
        assert!(groups.contains(&group.to_owned()), "{group}: {groups:?}");
    }
    // `--only NAME` would take both a group and a binary of one name.
    for group in &groups {
        assert!(
            !targets.contains(group),
            "the group {group} is named like a test target"
        );
    }
}

#[test]
fn every_name_in_the_default_order_is_a_test_target_or_group() {
    // A renamed target or module must not silently drop to the end of the order.
    let text = run_sh_text();
    let root = util::workspace_root();
    let mut targets = test_targets(&root);
    targets.extend(grouped_modules(&root));
    // The bundle's Python runner, a unit of its own (tests/python).
    let python = crate::gpu_bundle::PYTHON_UNIT
        .rsplit('/')
        .next()
        .unwrap_or_default();
    targets.push(python.to_owned());
    assert!(
        targets.iter().any(|target| target == "props"),
        "{targets:?}"
    );
    let first = listed(&text, "default_first");
    let last = listed(&text, "default_last");
    assert_eq!(first[..2], ["props", "behaviour"]);
    assert!(last.contains(&"pipeline_props".to_owned()), "{last:?}");
    for name in first.iter().chain(&last) {
        assert!(
            targets.contains(name),
            "{name} (run.sh's default order) is no test target or group: {targets:?}"
        );
    }
}
