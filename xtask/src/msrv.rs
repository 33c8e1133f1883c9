//! The declared minimum Rust version against the dependencies': the workspace's
//! `rust-version` must be at least the newest `rust-version` any locked dependency declares,
//! or a user on the declared version gets a build that stops at once (as 1.85 once did, with
//! `libloading 0.9` asking for 1.88). Part of `cargo xtask tidy`.
//!
//! Only one toolchain is installed on the machines that build this workspace, so the check
//! reads what the dependencies declare (`cargo metadata`) instead of building with the old
//! compiler; clippy's `incompatible_msrv` lint, which `cargo xtask ci` runs with
//! `-D warnings`, checks the workspace's own use of the standard library against it.

use std::path::Path;

use serde_json::Value;

use crate::util::{self, Failure, Result};

/// A `major.minor[.patch]` version, compared numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

impl Version {
    fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().unwrap_or(Some(0))?;
        let patch = parts.next().unwrap_or(Some(0))?;
        Some(Version(major, minor, patch))
    }
}

impl Version {
    /// The rustup toolchain of the release this version names (`1.90` is `1.90.0`).
    fn toolchain(self) -> String {
        format!("{}.{}.{}", self.0, self.1, self.2)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)?;
        if self.2 != 0 {
            write!(f, ".{}", self.2)?;
        }
        Ok(())
    }
}

/// The workspace's declared minimum: the lowest `rust-version` its members declare.
fn declared(metadata: &Value) -> Option<Version> {
    let members = members(metadata);
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|package| members.contains(&package["id"].as_str().unwrap_or_default()))
        .filter_map(|package| package["rust_version"].as_str().and_then(Version::parse))
        .min()
}

/// The package ids of the workspace's members.
fn members(metadata: &Value) -> Vec<&str> {
    metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// What `cargo metadata` says: the workspace's declared versions, and the newest a
/// dependency declares with the dependencies that declare it.
fn verdict(metadata: &Value) -> std::result::Result<String, String> {
    let members = members(metadata);
    let mut newest: Option<(Version, Vec<String>)> = None;
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let id = package["id"].as_str().unwrap_or_default();
        let Some(version) = package["rust_version"].as_str().and_then(Version::parse) else {
            continue;
        };
        if members.contains(&id) {
            continue;
        }
        let name = format!(
            "{} {}",
            package["name"].as_str().unwrap_or("?"),
            package["version"].as_str().unwrap_or("?")
        );
        match &mut newest {
            Some((v, names)) if *v == version => names.push(name),
            Some((v, _)) if *v > version => {}
            _ => newest = Some((version, vec![name])),
        }
    }
    let declared = declared(metadata);
    let Some(declared) = declared else {
        return Err("no workspace member declares a rust-version".into());
    };
    match newest {
        Some((needed, names)) if needed > declared => Err(format!(
            "the workspace declares rust-version {declared}, but {} need{} {needed}: raise \
             `rust-version` in Cargo.toml (and the README's toolchain line) to {needed}, or pin \
             older versions",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
        )),
        Some((needed, _)) => Ok(format!(
            "rust-version {declared} covers every dependency (the newest needs {needed})"
        )),
        None => Ok(format!(
            "rust-version {declared}; no dependency declares one"
        )),
    }
}

/// The rustup toolchain of the workspace's declared minimum (`1.90.0` for
/// `rust-version = "1.90"`), from `cargo metadata`.
pub fn declared_toolchain(root: &Path) -> Result<String> {
    let metadata = util::cargo_metadata(root, &["--no-deps"])?;
    declared(&metadata)
        .map(Version::toolchain)
        .ok_or_else(|| Failure::new("no workspace member declares a rust-version"))
}

/// Checks the workspace at `root` (runs `cargo metadata`).
pub fn check(root: &Path) -> Result {
    let metadata = util::cargo_metadata(root, &[])?;
    match verdict(&metadata) {
        Ok(line) => {
            println!("msrv: {line}");
            Ok(())
        }
        Err(why) => Err(Failure::new(format!("msrv: {why}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(ours: &str, deps: &[(&str, Option<&str>)]) -> Value {
        let mut packages = vec![serde_json::json!({
            "id": "path+file:///w#gpukit@0.1.0", "name": "gpukit", "version": "0.1.0",
            "rust_version": ours,
        })];
        for (i, (name, rv)) in deps.iter().enumerate() {
            packages.push(serde_json::json!({
                "id": format!("registry#{name}@{i}"), "name": name, "version": "1.0.0",
                "rust_version": rv,
            }));
        }
        serde_json::json!({
            "packages": packages,
            "workspace_members": ["path+file:///w#gpukit@0.1.0"],
        })
    }

    /// Regression test for "rust-version = 1.85 is false": a dependency that needs a newer
    /// compiler than the workspace declares fails the check, naming it.
    #[test]
    fn a_dependency_newer_than_the_declared_version_fails() {
        let m = metadata(
            "1.85",
            &[
                ("libloading", Some("1.88.0")),
                ("naga", Some("1.87")),
                ("libc", None),
            ],
        );
        let err = verdict(&m).unwrap_err();
        assert!(
            err.contains("1.85") && err.contains("libloading 1.0.0 needs 1.88"),
            "{err}"
        );
        assert!(!err.contains("naga"), "only the newest: {err}");
    }

    #[test]
    fn a_declared_version_at_or_above_every_dependency_passes() {
        let m = metadata(
            "1.88",
            &[("libloading", Some("1.88.0")), ("naga", Some("1.87"))],
        );
        assert!(verdict(&m).is_ok());
        let m = metadata("1.90", &[("a", Some("1.88")), ("b", Some("1.88"))]);
        assert_eq!(
            verdict(&m),
            Ok("rust-version 1.90 covers every dependency (the newest needs 1.88)".into())
        );
    }

    #[test]
    fn the_declared_minimum_is_the_lowest_member_version_as_a_toolchain() {
        let m = metadata("1.90", &[("libloading", Some("1.95"))]);
        assert_eq!(
            declared(&m).map(Version::toolchain).as_deref(),
            Some("1.90.0")
        );
        assert_eq!(
            declared(&metadata("1.88.1", &[])).unwrap().toolchain(),
            "1.88.1"
        );
        assert_eq!(declared(&metadata("stable", &[])), None);
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(Version::parse("1.100").unwrap() > Version::parse("1.90.1").unwrap());
        assert_eq!(Version::parse("1.88.0"), Version::parse("1.88"));
        assert_eq!(Version::parse("x"), None);
    }
}
