//! CI's `package` step: every library crate would publish with everything it needs.
//!
//! 1. `cargo package --workspace --no-verify` of the published crates: the metadata
//!    crates.io requires, every path dependency with a version, the manifest cargo would
//!    upload.
//! 2. For each of them, `cargo package --list`: every file its sources name
//!    (`include_str!`, `include_bytes!`, `#[path = ...]`, as string literals) and its
//!    manifest names (`readme`, `license-file`) is in the package and inside the crate's
//!    folder. A file outside it, or left out, fails here rather than at release time.
//!
//! `cargo package`'s verify build (each crate built alone from its `.crate`) is left to
//! `cargo publish`, which does it anyway: every crate alone has a feature set of its own, so
//! in CI it built the wgpu stack and the CPU backend four more times, half of CI's time.
//! `cargo package --workspace --allow-dirty` runs it by hand.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use crate::util::{self, Failure, Result};

/// A published crate: its name, its folder, and the files its manifest names.
#[derive(Debug)]
struct Crate {
    name: String,
    dir: PathBuf,
    manifest_files: Vec<String>,
}

/// The workspace members not in `unpublished`, from `cargo metadata --no-deps`.
fn published(root: &Path, unpublished: &[&str]) -> Result<Vec<Crate>> {
    let metadata = util::cargo_metadata(root, &["--no-deps"])?;
    let mut crates = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let name = package["name"].as_str().unwrap_or_default();
        if name.is_empty() || unpublished.contains(&name) {
            continue;
        }
        let manifest = Path::new(package["manifest_path"].as_str().unwrap_or_default());
        let Some(dir) = manifest.parent() else {
            continue;
        };
        let manifest_files = ["readme", "license_file"]
            .iter()
            .filter_map(|key| package[key].as_str().map(str::to_owned))
            .collect();
        crates.push(Crate {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
            manifest_files,
        });
    }
    Ok(crates)
}

/// The string literals that follow `prefix` in `source` (`include_str!("a.wgsl")`, `#[path =
/// "x.rs"]`); a macro given something else (`concat!(..)`) is passed over.
fn literals_after<'a>(source: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        let trimmed = rest.trim_start();
        if let Some(body) = trimmed.strip_prefix('"') {
            if let Some(end) = body.find('"') {
                found.push(&body[..end]);
            }
        }
    }
    found
}

/// The files a Rust source names, as written: `include_str!`, `include_bytes!` and
/// `#[path = ...]`; except under a `#[cfg(...doctest...)]` attribute in the lines just
/// above, which only `cargo test --doc` in the workspace compiles (the facade's doc tests of
/// the workspace README).
fn named_files(source: &str) -> Vec<&str> {
    let lines: Vec<&str> = source.lines().collect();
    let mut names = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let attributes = lines[..i]
            .iter()
            .rev()
            .take_while(|above| above.trim_start().starts_with("#["));
        if attributes
            .into_iter()
            .chain(std::iter::once(line))
            .any(|l| l.contains("#[cfg(") && l.contains("doctest"))
        {
            continue;
        }
        for prefix in ["include_str!(", "include_bytes!(", "#[path ="] {
            names.extend(literals_after(line, prefix));
        }
    }
    names
}

/// `path` (relative to the crate's root) without `.` and `..`; `None` when it leaves the
/// root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with a package whose files are `listed` (relative, `/`-separated): each
/// file a listed source or the manifest names that is outside the crate or not listed.
/// `read` gives a listed source's text.
fn missing_files(
    listed: &BTreeSet<String>,
    manifest_files: &[String],
    read: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut check = |from: &str, named: &str, resolved: Option<PathBuf>| match resolved {
        None => problems.push(format!(
            "{from} names `{named}`, outside the crate's folder"
        )),
        Some(path) => {
            let path = path.to_string_lossy().replace('\\', "/");
            if !listed.contains(&path) {
                problems.push(format!(
                    "{from} names `{named}`, which the package leaves out"
                ));
            }
        }
    };
    for file in manifest_files {
        check("Cargo.toml", file, normalize(Path::new(file)));
    }
    for source in listed.iter().filter(|f| f.ends_with(".rs")) {
        let Some(text) = read(source) else {
            continue;
        };
        let dir = Path::new(source).parent().unwrap_or(Path::new(""));
        for named in named_files(&text) {
            check(source, named, normalize(&dir.join(named)));
        }
    }
    problems
}

/// Runs the step for the workspace at `root`, leaving out the `unpublished` members.
pub fn run(root: &Path, unpublished: &[&str]) -> Result {
    let mut pack = util::cargo(root);
    pack.args(["package", "--workspace", "--allow-dirty", "--no-verify"]);
    for name in unpublished {
        pack.args(["--exclude", name]);
    }
    util::run(&mut pack)?;
    let mut problems = Vec::new();
    let crates = published(root, unpublished)?;
    for krate in &crates {
        let out = util::cargo(root)
            .args([
                "package",
                "--list",
                "--allow-dirty",
                "--package",
                &krate.name,
            ])
            .output()
            .map_err(|e| Failure::new(format!("could not run `cargo package --list`: {e}")))?;
        if !out.status.success() {
            return Err(Failure::new(format!(
                "`cargo package --list --package {}` failed: {}",
                krate.name,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let listed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        let read = |file: &str| std::fs::read_to_string(krate.dir.join(file)).ok();
        for problem in missing_files(&listed, &krate.manifest_files, read) {
            problems.push(format!("{}: {problem}", krate.name));
        }
    }
    if problems.is_empty() {
        println!(
            "package: {} crates, every file they name is packed",
            crates.len()
        );
        return Ok(());
    }
    Err(Failure::new(format!(
        "package: files missing from the packages:\n  {}",
        problems.join("\n  ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_files_a_source_names() {
        let source = r#"
            const A: &str = include_str!("../kernels/builtin.cu");
            static B: &[u8] = include_bytes!( "data.bin" );
            #[path = "../common/mod.rs"]
            mod common;
            const C: &str = include_str!(concat!(env!("OUT_DIR"), "/x.rs"));
            #[cfg(all(doctest, feature = "half"))]
            #[doc = include_str!("../../../README.md")]
            struct Readme;
        "#;
        assert_eq!(
            named_files(source),
            ["../kernels/builtin.cu", "data.bin", "../common/mod.rs"]
        );
    }

    #[test]
    fn a_named_file_outside_the_crate_or_left_out_is_reported() {
        let listed: BTreeSet<String> = ["README.md", "src/lib.rs", "src/k.rs", "kernels/a.cu"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let sources = |file: &str| {
            let text = match file {
                "src/lib.rs" => "include_str!(\"../kernels/a.cu\"); include_str!(\"gone.wgsl\");",
                _ => "include_str!(\"../../shared/SPEC.md\");",
            };
            Some(text.to_owned())
        };
        let problems = missing_files(&listed, &["README.md".into(), "NOTICE".into()], sources);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("`NOTICE`, which the package leaves out"));
        assert!(problems[1].contains("src/k.rs names `../../shared/SPEC.md`, outside"));
        assert!(problems[2].contains("src/lib.rs names `gone.wgsl`, which the package"));
        // Nothing wrong: nothing reported.
        let fine = |_: &str| Some("include_str!(\"k.rs\");".to_owned());
        assert!(missing_files(&listed, &["README.md".into()], fine).is_empty());
    }
}
