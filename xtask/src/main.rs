//! `cargo xtask`: the workspace's automation, written in Rust so it runs wherever cargo does.
//!
//! This is the matklad xtask pattern (as in rust-analyzer and wgpu): `.cargo/config.toml`
//! aliases `cargo xtask` to `cargo run --package xtask --`, so no tool has to be installed.
//! Each subcommand lives in its own module; `util` holds the shared command plumbing.
//! The package uses only `std` (arguments are parsed by hand) so it builds in seconds.

mod bench;
mod ci;
mod tidy;
mod util;

use std::process::ExitCode;

use util::{Failure, Result};

/// The help text for `cargo xtask help`.
pub const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  ci [--skip-fmt] [--skip-clippy] [--skip-tidy] [--skip-test] [--skip-doc] [-- <test args>]
        run the checks CI runs, in order, stopping at the first failure:
        cargo fmt --check, cargo clippy -D warnings, tidy, cargo test --workspace,
        cargo doc with RUSTDOCFLAGS=\"-D warnings\". Arguments after `--` are appended to
        `cargo test --workspace` (e.g. a test filter, or `-- --nocapture`).
  tidy
        check the house rules: `//!` module docs in every file, `// SAFETY:` comments on
        unsafe blocks and impls, `# Safety` docs on unsafe fns and traits, and no
        `.unwrap()`/`.expect(` in library code (escape hatch: `// tidy: allow(unwrap)`).
  bench [--json FILE] [-- <args>]
        run the transfer benchmark (release build); JSON goes to FILE, by default
        target/bench/transfer_bench.json. Arguments after `--` go to the benchmark.
  help
        print this message
";

fn main() -> ExitCode {
    match dispatch() {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            if failure.code == 2 {
                eprintln!("run `cargo xtask help` for usage");
            }
            ExitCode::from(failure.code)
        }
    }
}

fn dispatch() -> Result {
    let args = args()?;
    let root = util::workspace_root();
    let Some((command, rest)) = args.split_first() else {
        print!("{USAGE}");
        return Ok(());
    };
    match command.as_str() {
        "ci" => ci::run(&root, rest),
        "tidy" => tidy::run_cli(&root, rest),
        "bench" => bench::run(&root, rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => {
            eprint!("{USAGE}");
            Err(Failure::usage(format!("unknown subcommand `{other}`")))
        }
    }
}

/// The arguments after the program name; a non-UTF-8 argument is a usage error, not a panic.
fn args() -> Result<Vec<String>> {
    std::env::args_os()
        .skip(1)
        .map(|arg| {
            arg.into_string()
                .map_err(|arg| Failure::usage(format!("argument {arg:?} is not valid UTF-8")))
        })
        .collect()
}

/// True when `args` asks for help (`-h`/`--help` before any `--`).
pub fn wants_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "-h" || arg == "--help")
}
