//! The command lines of the workspace's programs (tutorials, benchmarks, tools), read with
//! lexopt, so that every program behaves the same: `--flag value` and `--flag=value` alike,
//! `-h`/`--help` prints the usage and exits with 0, and an unknown flag, a missing value or a
//! bad value is an error that names the flag and what it accepts (exit status 2). Nothing is
//! clamped or substituted: a value out of range is refused, never moved into range.
//!
//! A program writes one `parse` function over a [`Cli`] and hands it to [`parse_or_exit`]:
//!
//! ```
//! use gpukit_examples::cli::{Cli, CliError, Long};
//!
//! fn parse(cli: &mut Cli) -> Result<usize, CliError> {
//!     let mut batches = 16;
//!     while let Some(arg) = cli.next_arg()? {
//!         match arg {
//!             Long("batches") => batches = cli.number("--batches", "a count", 1..)?,
//!             other => return Err(other.unexpected().into()),
//!         }
//!     }
//!     Ok(batches)
//! }
//!
//! let mut cli = Cli::from_args(["--batches=4"]);
//! assert_eq!(parse(&mut cli).ok(), Some(4));
//! let err = parse(&mut Cli::from_args(["--batches", "0"])).unwrap_err();
//! assert_eq!(err.to_string(), "--batches 0: expected a count, at least 1");
//! ```

use std::ffi::OsString;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::process::exit;
use std::str::FromStr;

use gpukit::DeviceSpec;

pub use lexopt::Arg::{Long, Short, Value};

/// What `--device` accepts where any device will do.
pub const ANY_DEVICE: &str = "auto, cpu, cpu:N, cuda, cuda:N, vulkan or vulkan:N";

/// Why a command line was not accepted, or that it asked for help.
#[derive(Debug)]
pub enum CliError {
    /// `-h` or `--help`: print the usage and succeed.
    Help,
    /// A bad argument; the message names it and what would have been accepted.
    Bad(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Help => f.write_str("help requested"),
            CliError::Bad(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for CliError {}

impl From<lexopt::Error> for CliError {
    fn from(err: lexopt::Error) -> Self {
        CliError::Bad(match err {
            lexopt::Error::UnexpectedOption(option) => format!("unknown option {option}"),
            other => other.to_string(),
        })
    }
}

/// A command line being read: lexopt's parser with the value helpers every program uses.
#[derive(Debug)]
pub struct Cli {
    parser: lexopt::Parser,
}

impl Cli {
    /// The command line this process was started with.
    pub fn from_env() -> Cli {
        Cli {
            parser: lexopt::Parser::from_env(),
        }
    }

    /// The given arguments (without the program name), for tests.
    pub fn from_args<I>(args: I) -> Cli
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        Cli {
            parser: lexopt::Parser::from_args(args),
        }
    }

    /// The next flag or value; `-h` and `--help` end the parse with [`CliError::Help`].
    pub fn next_arg(&mut self) -> Result<Option<lexopt::Arg<'_>>, CliError> {
        match self.parser.next()? {
            Some(Short('h') | Long("help")) => Err(CliError::Help),
            arg => Ok(arg),
        }
    }

    /// Accepts no arguments at all (but `--help`).
    pub fn none(&mut self) -> Result<(), CliError> {
        match self.next_arg()? {
            Some(arg) => Err(arg.unexpected().into()),
            None => Ok(()),
        }
    }

    /// The value of `flag` as text.
    pub fn string(&mut self, flag: &str) -> Result<String, CliError> {
        self.parser
            .value()?
            .into_string()
            .map_err(|value| CliError::Bad(format!("{flag} {value:?}: not valid UTF-8")))
    }

    /// The value of `flag` as a number in `range`; `what` says what it counts ("a count",
    /// "a size in MiB") for the error message.
    pub fn number<T>(
        &mut self,
        flag: &str,
        what: &str,
        range: impl RangeBounds<T>,
    ) -> Result<T, CliError>
    where
        T: FromStr + PartialOrd + fmt::Display,
    {
        let text = self.string(flag)?;
        parse_in(&text, &range).map_err(|()| bad_number(flag, &text, what, &range))
    }

    /// The value of `flag` as a comma-separated list of numbers, each in `range`.
    pub fn numbers<T>(
        &mut self,
        flag: &str,
        what: &str,
        range: impl RangeBounds<T>,
    ) -> Result<Vec<T>, CliError>
    where
        T: FromStr + PartialOrd + fmt::Display,
    {
        let text = self.string(flag)?;
        text.split(',')
            .map(|item| {
                let item = item.trim();
                parse_in(item, &range).map_err(|()| bad_number(flag, item, what, &range))
            })
            .collect()
    }

    /// The value of `flag`, which must be one of `choices`.
    pub fn choice(
        &mut self,
        flag: &str,
        choices: &[&'static str],
    ) -> Result<&'static str, CliError> {
        let text = self.string(flag)?;
        choices
            .iter()
            .find(|choice| **choice == text)
            .copied()
            .ok_or_else(|| CliError::Bad(format!("{flag} {text}: expected {}", or_list(choices))))
    }

    /// The value of `flag` as a device spec that `accepts` allows; `accepted` names those
    /// specs for the error message ([`ANY_DEVICE`] where `accepts` allows every one).
    pub fn device(
        &mut self,
        flag: &str,
        accepted: &str,
        accepts: impl Fn(DeviceSpec) -> bool,
    ) -> Result<DeviceSpec, CliError> {
        let text = self.string(flag)?;
        let why = match DeviceSpec::parse_from(&text, flag) {
            Ok(spec) if accepts(spec) => return Ok(spec),
            Ok(_) => String::new(),
            Err(gpukit::Error::InvalidDeviceSpec { reason, .. }) => format!(" ({reason})"),
            Err(err) => format!(" ({err})"),
        };
        Err(CliError::Bad(format!(
            "{flag} {text}: expected {accepted}{why}"
        )))
    }
}

/// Reads this process's command line with `parse`. On `-h`/`--help` it prints `usage` and
/// exits with status 0; on a bad argument it prints `program: error: ...` and a pointer to
/// `--help`, and exits with status 2.
pub fn parse_or_exit<T>(
    program: &str,
    usage: &str,
    parse: impl FnOnce(&mut Cli) -> Result<T, CliError>,
) -> T {
    match parse(&mut Cli::from_env()) {
        Ok(parsed) => parsed,
        Err(CliError::Help) => {
            println!("{usage}");
            exit(0);
        }
        Err(CliError::Bad(message)) => {
            eprintln!("{program}: error: {message}\n(run `{program} --help` for usage)");
            exit(2);
        }
    }
}

fn parse_in<T: FromStr + PartialOrd>(text: &str, range: &impl RangeBounds<T>) -> Result<T, ()> {
    match text.parse::<T>() {
        Ok(value) if range.contains(&value) => Ok(value),
        _ => Err(()),
    }
}

fn bad_number<T: fmt::Display>(
    flag: &str,
    text: &str,
    what: &str,
    range: &impl RangeBounds<T>,
) -> CliError {
    let bounds = match (range.start_bound(), range.end_bound()) {
        (Bound::Unbounded, Bound::Unbounded) => String::new(),
        (Bound::Included(lo), Bound::Unbounded) => format!(", at least {lo}"),
        (Bound::Excluded(lo), Bound::Unbounded) => format!(", above {lo}"),
        (Bound::Unbounded, Bound::Included(hi)) => format!(", at most {hi}"),
        (Bound::Unbounded, Bound::Excluded(hi)) => format!(", below {hi}"),
        (Bound::Included(lo), Bound::Included(hi)) => format!(", from {lo} to {hi}"),
        (Bound::Included(lo), Bound::Excluded(hi)) => format!(", at least {lo} and below {hi}"),
        (Bound::Excluded(lo), Bound::Included(hi)) => format!(", above {lo} and at most {hi}"),
        (Bound::Excluded(lo), Bound::Excluded(hi)) => format!(", above {lo} and below {hi}"),
    };
    CliError::Bad(format!("{flag} {text}: expected {what}{bounds}"))
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `--n`, `--x`, `--mode`, `--device`, `--sizes` and `--quick` the way the
    /// programs do.
    #[derive(Debug, Default, PartialEq)]
    struct Opts {
        n: Option<usize>,
        x: Option<f64>,
        mode: Option<&'static str>,
        device: Option<DeviceSpec>,
        sizes: Option<Vec<usize>>,
        quick: bool,
    }

    fn parse(args: &[&str]) -> Result<Opts, CliError> {
        let mut cli = Cli::from_args(args.iter().copied());
        let mut o = Opts::default();
        while let Some(arg) = cli.next_arg()? {
            match arg {
                Long("n") => o.n = Some(cli.number("--n", "a count", 1..)?),
                Long("x") => {
                    o.x = Some(cli.number(
                        "--x",
                        "a size in MiB",
                        (Bound::Excluded(0.0), Bound::Included(4096.0)),
                    )?)
                }
                Long("mode") => o.mode = Some(cli.choice("--mode", &["cpu", "cuda"])?),
                Long("device") => {
                    o.device = Some(cli.device("--device", "cuda or cuda:N", |spec| {
                        matches!(spec, DeviceSpec::Cuda(_))
                    })?)
                }
                Long("sizes") => o.sizes = Some(cli.numbers("--sizes", "a size in KiB", 1..)?),
                Long("quick") => o.quick = true,
                other => return Err(other.unexpected().into()),
            }
        }
        Ok(o)
    }

    fn error(args: &[&str]) -> String {
        match parse(args) {
            Err(CliError::Bad(message)) => message,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    #[test]
    fn reads_both_value_spellings() {
        let o = parse(&[
            "--n",
            "3",
            "--x=0.5",
            "--mode=cuda",
            "--quick",
            "--sizes",
            "4, 16",
        ])
        .unwrap();
        assert_eq!(o.n, Some(3));
        assert_eq!(o.x, Some(0.5));
        assert_eq!(o.mode, Some("cuda"));
        assert_eq!(o.sizes, Some(vec![4, 16]));
        assert!(o.quick);
        assert_eq!(
            parse(&["--device=cuda:1"]).unwrap().device,
            Some(DeviceSpec::Cuda(Some(1)))
        );
    }

    #[test]
    fn help_anywhere_asks_for_help() {
        assert!(matches!(
            parse(&["--n", "3", "--help"]),
            Err(CliError::Help)
        ));
        assert!(matches!(parse(&["-h"]), Err(CliError::Help)));
    }

    #[test]
    fn errors_name_the_flag_and_what_it_accepts() {
        for (args, message) in [
            (&["--n", "0"][..], "--n 0: expected a count, at least 1"),
            (&["--n=many"], "--n many: expected a count, at least 1"),
            (
                &["--x", "0"],
                "--x 0: expected a size in MiB, above 0 and at most 4096",
            ),
            (
                &["--x", "NaN"],
                "--x NaN: expected a size in MiB, above 0 and at most 4096",
            ),
            (&["--mode", "tpu"], "--mode tpu: expected cpu or cuda"),
            (
                &["--device", "cpu"],
                "--device cpu: expected cuda or cuda:N",
            ),
            (
                &["--device", "tpu"],
                "--device tpu: expected cuda or cuda:N (unknown backend \"tpu\")",
            ),
            (
                &["--sizes", "4,0"],
                "--sizes 0: expected a size in KiB, at least 1",
            ),
            (&["--fast"], "unknown option --fast"),
            (&["--n"], "missing argument for option '--n'"),
            (
                &["--quick=yes"],
                "unexpected argument for option '--quick': \"yes\"",
            ),
            (&["stray"], "unexpected argument \"stray\""),
        ] {
            assert_eq!(error(args), message, "{args:?}");
        }
    }

    #[test]
    fn lists_read_naturally() {
        assert_eq!(or_list(&["a"]), "a");
        assert_eq!(or_list(&["a", "b", "c"]), "a, b or c");
    }
}
