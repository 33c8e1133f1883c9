//! Shared plumbing for the subcommands: where the workspace is, how to call cargo, and how
//! to run a command so that it is echoed first and its failure ends `xtask` with its status.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

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

/// Prints a step header: `==> {text}`.
pub fn header(text: &str) {
    println!("==> {text}");
}

/// Splits `--flag=value` into the flag and its inline value; any other argument is returned
/// whole, without a value.
pub fn split_flag(arg: &str) -> (&str, Option<String>) {
    match arg.split_once('=') {
        Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_string())),
        _ => (arg, None),
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
