//! `cargo xtask sanitize --sanitizer address|thread [--minutes N] [-- <test filters>]`: the
//! facade's multi-device and collective tests (the `it` binary's `multi_device` group, on
//! the CPU backend's logical devices) and the CPU backend's own unit tests (its queues,
//! tasks, memory and worker threads) under AddressSanitizer or ThreadSanitizer.
//!
//! Both need the nightly toolchain with `rust-src`: the standard library is rebuilt with the
//! sanitizer (`-Zbuild-std`), so that ThreadSanitizer sees std's synchronisation (without it
//! every `Mutex` and channel looks like a race) and AddressSanitizer std's allocations. The
//! build goes to `target/sanitize-<name>` (a full build of the tests' dependencies, some
//! minutes the first time), without the facade's default features: the tests run on the CPU
//! backend's logical devices. The run is stopped after N minutes (default 40) so the command
//! always ends; any report fails it (`halt_on_error`). Arguments after `--` replace the test
//! filters (`multi_device`).

use std::path::Path;
use std::process::Command;

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

/// Minutes a run may take unless `--minutes` says otherwise.
pub const DEFAULT_MINUTES: f64 = 40.0;

/// The host target the standard library is rebuilt for.
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// What `cargo xtask sanitize` was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    /// `address` or `thread`.
    pub sanitizer: &'static str,
    /// The time bound.
    pub minutes: f64,
    /// Test filters for the `it` binary.
    pub filters: Vec<String>,
}

/// Parses `--sanitizer address|thread [--minutes N] [-- filters]`.
pub fn parse(args: &[String]) -> Result<Opts> {
    let (mut cli, extra) = Cli::with_passthrough(args);
    let mut sanitizer = None;
    let mut minutes = DEFAULT_MINUTES;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("sanitizer") => {
                sanitizer = Some(cli.one_of("--sanitizer", &["address", "thread"])?)
            }
            Long("minutes") => {
                minutes = cli.number("--minutes", "a number of minutes above 0", |m: &f64| {
                    *m > 0.0 && m.is_finite()
                })?;
            }
            other => return Err(other.unexpected().into()),
        }
    }
    let sanitizer =
        sanitizer.ok_or_else(|| Failure::usage("--sanitizer address|thread is required"))?;
    let filters = if extra.is_empty() {
        vec!["multi_device".to_string()]
    } else {
        extra
    };
    Ok(Opts {
        sanitizer,
        minutes,
        filters,
    })
}

/// The two test commands: the facade's `it` tests (filtered) and gpukit-cpu's unit tests.
pub fn commands(root: &Path, opts: &Opts) -> Vec<Command> {
    let flags = format!("-Zsanitizer={}", opts.sanitizer);
    let options = match opts.sanitizer {
        "address" => ("ASAN_OPTIONS", "halt_on_error=1:detect_leaks=0"),
        _ => ("TSAN_OPTIONS", "halt_on_error=1:second_deadlock_stack=1"),
    };
    let target_dir = root.join(format!("target/sanitize-{}", opts.sanitizer));
    let base = |args: &[&str]| {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(root)
            .env("RUSTFLAGS", &flags)
            .env("RUSTDOCFLAGS", &flags)
            .env("CARGO_TARGET_DIR", &target_dir)
            .env(options.0, options.1)
            // One build for both commands; without the GPU backends (the tests run on the
            // CPU backend's logical devices), so wgpu and cudarc are not rebuilt for it.
            .args(["+nightly", "test", "-Zbuild-std", "--target", TARGET])
            .arg("--no-default-features")
            .args(args);
        cmd
    };
    let mut it = base(&["-p", "gpukit", "-p", "gpukit-cpu", "--test", "it", "--"]);
    it.args(&opts.filters);
    let cpu = base(&["-p", "gpukit", "-p", "gpukit-cpu", "--lib", "--", "queue::"]);
    vec![it, cpu]
}

/// Runs `cargo xtask sanitize ...`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let opts = parse(args)?;
    let nightly = util::succeeds(Command::new("cargo").args(["+nightly", "--version"]));
    if !nightly {
        return Err(Failure::new(
            "the nightly toolchain is not installed (the sanitizers need it): run \
             `rustup toolchain install nightly --component rust-src`",
        ));
    }
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_secs_f64(opts.minutes * 60.0);
    for mut cmd in commands(root, &opts) {
        crate::miri::run_until(&mut cmd, deadline, opts.minutes)?;
    }
    println!("{} sanitizer: no reports", opts.sanitizer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn parses_the_sanitizer_and_filters() {
        let o = parse(&strings(&["--sanitizer", "thread"])).unwrap();
        assert_eq!((o.sanitizer, o.minutes), ("thread", DEFAULT_MINUTES));
        assert_eq!(o.filters, strings(&["multi_device"]));
        let o = parse(&strings(&[
            "--sanitizer=address",
            "--minutes",
            "5",
            "--",
            "peer",
        ]))
        .unwrap();
        assert_eq!((o.sanitizer, o.minutes), ("address", 5.0));
        assert_eq!(o.filters, strings(&["peer"]));
        for bad in [
            &[][..],
            &["--sanitizer", "memory"][..],
            &["--sanitizer", "thread", "--minutes", "0"][..],
        ] {
            assert_eq!(parse(&strings(bad)).unwrap_err().code, 2, "{bad:?}");
        }
        let cmds = commands(
            Path::new("."),
            &parse(&strings(&["--sanitizer", "address"])).unwrap(),
        );
        let args: Vec<_> = cmds[0].get_args().filter_map(|a| a.to_str()).collect();
        assert!(
            args.contains(&"-Zbuild-std") && args.ends_with(&["--", "multi_device"]),
            "{args:?}"
        );
    }
}
