//! The order of the test binaries: the default (the most telling first, the slowest last,
//! so that a call cut short has run the most), `--first`, `--only`, and the names matching
//! cargo's `name-hash` files.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::{bash_available, fake_bundle, line, run_args, run_sh, verdict, Call, PASSING};
use super::{TempDir, FAKE_SANITIZER};
use crate::gpu_bundle::run_sh_text;
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

/// A bundle with binaries named like the real ones (and two `faults` that share a name, as
/// cargo names them), each passing and listing a CUDA test (as the sanitizer steps ask).
fn named_bundle(tmp: &TempDir) -> std::path::PathBuf {
    let body = format!("if [ \"$1\" = --list ]; then echo 'a::cuda: test'; exit 0; fi\n{PASSING}");
    let names = [
        "alpha",
        "behaviour",
        "faults-0123abcd",
        "faults-4567ef01",
        "memory",
        "pipeline_props",
        "props",
        "zeta",
    ];
    let tests: Vec<(&str, &str)> = names.iter().map(|name| (*name, body.as_str())).collect();
    fake_bundle(tmp, &tests)
}

#[test]
fn the_default_order_runs_props_and_behaviour_first_and_the_slowest_last() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("order");
    let bundle = named_bundle(&tmp);
    let (code, stdout) = run_args(&bundle, &[]);
    assert_eq!(code, 0, "{stdout}");
    let order = [
        "props",
        "behaviour",
        "memory",
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
            "pipeline_props",
        ],
        "{stdout}"
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
                "run.sh: {option}: no test binary named 'nosuch' 'other' in "
            )),
            "{stderr}"
        );
        assert!(first.contains("(there: alpha behaviour "), "{stderr}");
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

#[test]
fn every_name_in_the_default_order_is_a_test_target() {
    // A renamed target must not silently drop to the end of the order.
    let text = run_sh_text();
    let targets = test_targets(&util::workspace_root());
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
            "{name} (run.sh's default order) is no test target: {targets:?}"
        );
    }
}
