//! `cargo xtask bindgen`: regenerates gpukit-cuda-sys's raw declarations from CUDA's headers.
//!
//! The functions bound are listed in `crates/gpukit-cuda-sys/bindgen/functions.txt`, one section per
//! library: `[file Struct header.h]` followed by function names. Each section becomes
//! `crates/gpukit-cuda-sys/src/ffi/<file>.rs`, made by the `bindgen` command-line tool with
//! `--dynamic-loading <Struct> --dynamic-link-require-all`: a struct of function pointers
//! that loads only when every listed symbol is present, so no call can find a symbol missing
//! (and nothing in the generated code panics). Enums become newtypes (`struct CUresult(u32)`),
//! so an unknown value from a newer library is data, not undefined behaviour.
//!
//! The generated files are committed: a normal build needs neither the CUDA toolkit nor
//! libclang. This command needs both: `bindgen` (`cargo install bindgen-cli --locked`),
//! libclang (Debian: `libclang-dev`) and CUDA's include folders, taken from `--include DIR`
//! (repeatable) or `$CUDA_HOME/include`. pip's wheels work too: `nvidia/cuda_runtime/include`,
//! `nvidia/cuda_nvrtc/include` and `nvidia/cublas/include`. The CUDA version (`CUDA_VERSION`
//! from `cuda.h`) and the headers are written at the top of each file.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use lexopt::Arg::Long;

use crate::util::{self, Cli, Failure, Result};

/// Where the generated files go, relative to the workspace root. Its `mod.rs` (written by
/// hand) turns off the lints that generated code cannot meet.
pub const FFI_DIR: &str = "crates/gpukit-cuda-sys/src/ffi";

/// One library's section of `functions.txt`.
struct Section {
    file: String,
    strukt: String,
    header: String,
    functions: Vec<String>,
}

/// Runs `cargo xtask bindgen [--include DIR]...`.
pub fn run(root: &Path, args: &[String]) -> Result {
    let mut cli = Cli::new(args);
    let mut includes: Vec<PathBuf> = Vec::new();
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("include") => includes.push(PathBuf::from(cli.string("--include")?)),
            other => return Err(other.unexpected().into()),
        }
    }
    if includes.is_empty() {
        match std::env::var_os("CUDA_HOME").or_else(|| std::env::var_os("CUDA_PATH")) {
            Some(home) => includes.push(PathBuf::from(home).join("include")),
            None => {
                return Err(Failure::usage(
                    "no CUDA include folder: pass `--include DIR` or set CUDA_HOME",
                ))
            }
        }
    }
    let includes: Vec<PathBuf> = includes
        .iter()
        .map(|dir| {
            fs::canonicalize(dir).map_err(|e| Failure::new(format!("{}: {e}", dir.display())))
        })
        .collect::<Result<_>>()?;

    let cuda_h = includes
        .iter()
        .map(|dir| dir.join("cuda.h"))
        .find(|p| p.is_file())
        .ok_or_else(|| Failure::new("cuda.h is in none of the include folders"))?;
    let version = cuda_version(&cuda_h)?;

    let dir = root.join("crates/gpukit-cuda-sys/bindgen");
    let list = fs::read_to_string(dir.join("functions.txt"))
        .map_err(|e| Failure::new(format!("functions.txt: {e}")))?;
    for section in parse(&list)? {
        let out = root.join(FFI_DIR).join(format!("{}.rs", section.file));
        let mut cmd = Command::new("bindgen");
        cmd.arg(dir.join(&section.header))
            .args([
                "--dynamic-loading",
                &section.strukt,
                "--dynamic-link-require-all",
            ])
            .args(["--allowlist-function", &section.functions.join("|")])
            .args(["--default-enum-style", "newtype"])
            .args([
                "--no-layout-tests",
                "--no-doc-comments",
                "--no-prepend-enum-name",
            ])
            .args(["--use-core", "--merge-extern-blocks"])
            .arg("--output")
            .arg(&out)
            .arg("--");
        for inc in &includes {
            cmd.arg(format!("-I{}", inc.display()));
        }
        util::run(&mut cmd).map_err(|f| {
            Failure::new(format!(
                "{} (is bindgen installed? `cargo install bindgen-cli --locked`; it needs libclang)",
                f.message
            ))
        })?;
        let body = fs::read_to_string(&out)
            .map_err(|e| Failure::new(format!("{}: {e}", out.display())))?;
        let header = format!(
            "//! Raw declarations of {lib}, {marker} from\n\
             //! `crates/gpukit-cuda-sys/bindgen/{h}` with CUDA {major}.{minor}'s headers (`CUDA_VERSION {v}`).\n\
             //! Do not edit: change `bindgen/functions.txt` and regenerate.\n\n",
            lib = section.strukt,
            marker = crate::tidy::GENERATED_MARKER,
            h = section.header,
            major = version / 1000,
            minor = (version % 1000) / 10,
            v = version,
        );
        fs::write(&out, header + &body)
            .map_err(|e| Failure::new(format!("{}: {e}", out.display())))?;
        println!(
            "bindgen: {} ({} functions) from CUDA {}.{}",
            out.display(),
            section.functions.len(),
            version / 1000,
            (version % 1000) / 10
        );
    }
    Ok(())
}

/// `CUDA_VERSION` from `cuda.h` (12090 for 12.9).
fn cuda_version(cuda_h: &Path) -> Result<u32> {
    let text = fs::read_to_string(cuda_h)
        .map_err(|e| Failure::new(format!("{}: {e}", cuda_h.display())))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("#define CUDA_VERSION"))
        .find_map(|v| v.trim().parse().ok())
        .ok_or_else(|| Failure::new(format!("no CUDA_VERSION in {}", cuda_h.display())))
}

/// Parses `functions.txt`.
fn parse(list: &str) -> Result<Vec<Section>> {
    let mut sections: Vec<Section> = Vec::new();
    for (n, line) in list.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let parts: Vec<&str> = head.split_whitespace().collect();
            let [file, strukt, header] = parts[..] else {
                return Err(Failure::new(format!(
                    "functions.txt:{}: expected `[file Struct header.h]`",
                    n + 1
                )));
            };
            sections.push(Section {
                file: file.into(),
                strukt: strukt.into(),
                header: header.into(),
                functions: Vec::new(),
            });
        } else {
            let section = sections.last_mut().ok_or_else(|| {
                Failure::new(format!(
                    "functions.txt:{}: a function before any section",
                    n + 1
                ))
            })?;
            section.functions.push(line.to_string());
        }
    }
    Ok(sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sections() {
        let s = parse("# c\n[a A a.h]\nf\ng\n\n[b B b.h]\nh\n").unwrap_or_default();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].functions, ["f", "g"]);
        assert_eq!((s[1].file.as_str(), s[1].strukt.as_str()), ("b", "B"));
        assert!(parse("f\n").is_err());
        assert!(parse("[a b]\n").is_err());
    }
}
