//! Shared plumbing for the subcommands: their command lines ([`Cli`]), where the workspace
//! is, how to call cargo, and how to run a command so that it is echoed first and its
//! failure ends `xtask` with its status.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::str::FromStr;

/// Why a subcommand stopped: a message for `error: ...` and the exit code to leave with.
#[derive(Debug)]
pub struct Failure {
    /// Printed as `error: {message}` on stderr.
    pub message: String,
    /// Process exit code (never 0).
    pub code: u8,
}

impl Failure {
    /// A failure that exits with 1.
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }

    /// Bad command-line usage: exits with 2, as argument parsers conventionally do.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }

    /// `-h` or `--help`: not a failure, but it ends the subcommand the same way; `main`
    /// prints the usage and exits with 0.
    pub fn help() -> Self {
        Failure {
            message: String::new(),
            code: 0,
        }
    }

    /// Whether this is [`Failure::help`].
    pub fn is_help(&self) -> bool {
        self.code == 0
    }
}

impl From<lexopt::Error> for Failure {
    fn from(err: lexopt::Error) -> Self {
        Failure::usage(match err {
            lexopt::Error::UnexpectedOption(option) => format!("unknown option {option}"),
            other => other.to_string(),
        })
    }
}

/// The result every subcommand returns.
pub type Result<T = ()> = std::result::Result<T, Failure>;

/// The workspace root: the parent of this package's manifest directory.
///
/// Taken at compile time, as rust-analyzer's xtask does, so it does not depend on the
/// directory `cargo xtask` was started from.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// A `cargo` command run in `root`: the cargo that started us (`$CARGO`), else `cargo`.
pub fn cargo(root: &Path) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.current_dir(root);
    cmd
}

/// `cargo metadata --format-version 1 {args}` in `root`, parsed.
pub fn cargo_metadata(root: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let out = cargo(root)
        .args(["metadata", "--format-version", "1"])
        .args(args)
        .output()
        .map_err(|err| Failure::new(format!("could not run `cargo metadata`: {err}")))?;
    if !out.status.success() {
        return Err(Failure::new(format!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|err| Failure::new(format!("`cargo metadata` printed no JSON: {err}")))
}

/// Prints a step header: `==> {text}`.
pub fn header(text: &str) {
    println!("==> {text}");
}

/// A subcommand's command line, read with lexopt: `--flag value` and `--flag=value` alike,
/// `-h`/`--help` ends the parse with [`Failure::help`], and an unknown flag or a bad value is
/// a usage failure that names the flag and what it accepts. Nothing is clamped or replaced.
#[derive(Debug)]
pub struct Cli {
    parser: lexopt::Parser,
}

impl Cli {
    /// All of `args` as flags and values (after a `--` everything is a value).
    pub fn new(args: &[String]) -> Cli {
        Cli {
            parser: lexopt::Parser::from_args(args),
        }
    }

    /// The arguments before the first `--` as flags and values, and those after it, which
    /// the subcommand passes on untouched (to cargo, a test binary, libFuzzer, ...).
    pub fn with_passthrough(args: &[String]) -> (Cli, Vec<String>) {
        let (own, passthrough) = match args.iter().position(|arg| arg == "--") {
            Some(at) => (&args[..at], args[at + 1..].to_vec()),
            None => (args, Vec::new()),
        };
        (Cli::new(own), passthrough)
    }

    /// The next flag or value.
    pub fn next_arg(&mut self) -> Result<Option<lexopt::Arg<'_>>> {
        match self.parser.next()? {
            Some(lexopt::Arg::Short('h') | lexopt::Arg::Long("help")) => Err(Failure::help()),
            arg => Ok(arg),
        }
    }

    /// Accepts no arguments (but `--help`).
    pub fn none(&mut self) -> Result {
        match self.next_arg()? {
            Some(arg) => Err(arg.unexpected().into()),
            None => Ok(()),
        }
    }

    /// The value of the flag just read, as text.
    pub fn string(&mut self, flag: &str) -> Result<String> {
        self.parser
            .value()?
            .into_string()
            .map_err(|value| Failure::usage(format!("{flag} {value:?} is not valid UTF-8")))
    }

    /// The value of `flag`, parsed and checked by `ok`; `accepted` says what is accepted,
    /// for the error.
    pub fn number<T: FromStr>(
        &mut self,
        flag: &str,
        accepted: &str,
        ok: impl Fn(&T) -> bool,
    ) -> Result<T> {
        let text = self.string(flag)?;
        text.parse::<T>()
            .ok()
            .filter(|value| ok(value))
            .ok_or_else(|| Failure::usage(format!("{flag} {text}: expected {accepted}")))
    }

    /// The value of `flag`, one of `names`.
    pub fn one_of(&mut self, flag: &str, names: &[&'static str]) -> Result<&'static str> {
        let text = self.string(flag)?;
        if let Some(name) = names.iter().find(|name| **name == text) {
            return Ok(name);
        }
        Err(Failure::usage(format!(
            "{flag} {text}: expected one of {}",
            names.join(", ")
        )))
    }
}

/// Echoes `cmd` as a header and starts it with stdout piped (stdin closed); returns the
/// child and the command as shown.
pub fn spawn_piped(cmd: &mut Command) -> Result<(std::process::Child, String)> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    let shown = display(cmd);
    header(&shown);
    let child = cmd.spawn().map_err(|err| spawn_failure(&shown, &err))?;
    Ok((child, shown))
}

/// Echoes `cmd` as a header, runs it with inherited stdio and fails with its exit status.
pub fn run(cmd: &mut Command) -> Result {
    let shown = display(cmd);
    header(&shown);
    let status = cmd.status().map_err(|err| spawn_failure(&shown, &err))?;
    if status.success() {
        return Ok(());
    }
    Err(Failure {
        message: format!("`{shown}` failed ({status})"),
        code: exit_code(status),
    })
}

/// Runs `cmd` silently and says whether it succeeded (used to probe for tools).
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `path` made absolute against the current directory (cargo leaves `xtask` in the caller's
/// directory, while the commands it runs start in the workspace root).
pub fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir()
        .map_err(|err| Failure::new(format!("could not read the current directory: {err}")))?;
    Ok(cwd.join(path))
}

/// The exit code to leave with for a child's `status`: its own code when it has a non-zero
/// one that fits, else 1 (a process killed by a signal has no code).
pub fn exit_code(status: ExitStatus) -> u8 {
    status
        .code()
        .and_then(|code| u8::try_from(code).ok())
        .filter(|&code| code != 0)
        .unwrap_or(1)
}

/// The failure for a command that could not be started.
pub fn spawn_failure(shown: &str, err: &std::io::Error) -> Failure {
    let hint = if err.kind() == ErrorKind::NotFound {
        " (is it installed and on PATH?)"
    } else {
        ""
    };
    Failure::new(format!("could not start `{shown}`: {err}{hint}"))
}

/// The command as a shell-like line: environment overrides, program name and arguments.
pub fn display(cmd: &Command) -> String {
    let mut words = Vec::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            words.push(format!("{}={}", key.to_string_lossy(), quote(value)));
        }
    }
    // `$CARGO` is usually an absolute path; the file name is what a reader needs.
    let program = Path::new(cmd.get_program());
    words.push(quote(program.file_name().unwrap_or(program.as_os_str())));
    words.extend(cmd.get_args().map(quote));
    words.join(" ")
}

fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    if !word.is_empty() && !word.contains(|c: char| c.is_whitespace() || c == '"') {
        word.into_owned()
    } else {
        format!("{word:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lexopt::Arg::Long;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| arg.to_string()).collect()
    }

    /// `--n`, `--mode`, `--quick` and the arguments after `--`.
    type Parsed = (Option<u32>, Option<&'static str>, bool, Vec<String>);

    /// `--n N` (a count), `--mode cpu|cuda` and `--quick`, the way the subcommands read them.
    fn parse(args: &[&str]) -> Result<Parsed> {
        let (mut cli, rest) = Cli::with_passthrough(&strings(args));
        let (mut n, mut mode, mut quick) = (None, None, false);
        while let Some(arg) = cli.next_arg()? {
            match arg {
                Long("n") => n = Some(cli.number("--n", "a count, at least 1", |n| *n >= 1)?),
                Long("mode") => mode = Some(cli.one_of("--mode", &["cpu", "cuda"])?),
                Long("quick") => quick = true,
                other => return Err(other.unexpected().into()),
            }
        }
        Ok((n, mode, quick, rest))
    }

    fn usage_error(args: &[&str]) -> String {
        let err = parse(args).unwrap_err();
        assert_eq!(err.code, 2, "{args:?}: {}", err.message);
        err.message
    }

    #[test]
    fn reads_both_value_spellings_and_passes_the_rest_on() {
        let parsed = parse(&["--n=3", "--mode", "cuda", "--quick", "--", "-x", "--", "y"]).unwrap();
        assert_eq!(
            parsed,
            (Some(3), Some("cuda"), true, strings(&["-x", "--", "y"]))
        );
        assert_eq!(parse(&[]).unwrap(), (None, None, false, vec![]));
    }

    #[test]
    fn help_before_the_passthrough_asks_for_help() {
        assert!(parse(&["--n", "1", "-h"]).unwrap_err().is_help());
        assert!(parse(&["--help"]).unwrap_err().is_help());
        assert!(parse(&["--", "--help"]).is_ok());
    }

    #[test]
    fn errors_name_the_flag_and_what_it_accepts() {
        let cases: [(&[&str], &str); 7] = [
            (&["--n", "0"], "--n 0: expected a count, at least 1"),
            (&["--n=x"], "--n x: expected a count, at least 1"),
            (&["--mode", "tpu"], "--mode tpu: expected one of cpu, cuda"),
            (&["--fast"], "unknown option --fast"),
            (&["--n"], "missing argument for option '--n'"),
            (
                &["--quick=1"],
                "unexpected argument for option '--quick': \"1\"",
            ),
            (&["stray"], "unexpected argument \"stray\""),
        ];
        for (args, message) in cases {
            assert_eq!(usage_error(args), message, "{args:?}");
        }
    }
}
