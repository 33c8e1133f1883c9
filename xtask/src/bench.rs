//! `cargo xtask bench`: builds and runs the transfer benchmark in release mode.
//!
//! The benchmark itself is the `transfer_bench` example of the `gpu-examples` package; this
//! only fixes the build profile, picks where the JSON report goes (creating the folder) and
//! passes through whatever follows `--`. The benchmark's exit status becomes ours.

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{self, Failure, Result};

/// Where the JSON report goes when `--json` is not given, relative to the workspace root.
const DEFAULT_JSON: &str = "target/bench/transfer_bench.json";

/// Runs `cargo xtask bench [--json FILE] [-- extra args]`.
pub fn run(root: &Path, args: &[String]) -> Result {
    if crate::wants_help(args) {
        print!("{}", crate::USAGE);
        return Ok(());
    }
    let mut json: Option<PathBuf> = None;
    let mut extra: Vec<String> = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            extra.extend(iter.by_ref().cloned());
        } else if arg == "--json" {
            let file = iter
                .next()
                .ok_or_else(|| Failure::usage("`--json` needs a file name"))?;
            json = Some(PathBuf::from(file));
        } else if let Some(file) = arg.strip_prefix("--json=") {
            json = Some(PathBuf::from(file));
        } else {
            return Err(Failure::usage(format!(
                "unknown argument `{arg}` for `cargo xtask bench` \
                 (arguments for the benchmark go after `--`)"
            )));
        }
    }

    let json = match json {
        // Cargo leaves us in the caller's directory, but the benchmark runs in the root.
        Some(path) => absolute(&path)?,
        None => root.join(DEFAULT_JSON),
    };
    if let Some(dir) = json.parent() {
        fs::create_dir_all(dir)
            .map_err(|err| Failure::new(format!("could not create `{}`: {err}", dir.display())))?;
    }

    let mut cmd = util::cargo(root);
    cmd.args(["run", "--release", "--package", "gpu-examples"])
        .args(["--example", "transfer_bench", "--", "--json"])
        .arg(&json)
        .args(&extra);
    util::run(&mut cmd)?;
    if json.is_file() {
        println!("bench: JSON report in {}", json.display());
    }
    Ok(())
}

fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir()
        .map_err(|err| Failure::new(format!("could not read the current directory: {err}")))?;
    Ok(cwd.join(path))
}
