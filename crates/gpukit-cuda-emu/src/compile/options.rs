//! NVRTC's options, turned into the C++ compiler's
//! (<https://docs.nvidia.com/cuda/nvrtc/index.html#supported-compile-options>): the
//! architecture (`__CUDA_ARCH__`), the language standard, macros and include folders are
//! passed on; options that change nothing the emulator models are accepted; any other is
//! `NVRTC_ERROR_INVALID_OPTION` with NVRTC's message.

use super::{CompileError, NVRTC_INVALID_OPTION};

/// NVRTC's options, turned into the C++ compiler's.
#[derive(Debug, Default)]
pub(super) struct Options {
    pub(super) arch: Option<(u32, bool)>,
    pub(super) std: Option<String>,
    pub(super) args: Vec<String>,
}

pub(super) fn parse_options(options: &[String]) -> Result<Options, CompileError> {
    let mut o = Options::default();
    let mut i = 0;
    let bad = |opt: &str| CompileError {
        code: NVRTC_INVALID_OPTION,
        log: format!("nvrtc: error: unrecognized option: {opt}"),
    };
    // Options NVRTC takes that change nothing the emulator models.
    const IGNORED_PREFIXES: &[&str] = &[
        "--fmad",
        "-fmad",
        "--use_fast_math",
        "-use_fast_math",
        "--ftz",
        "-ftz",
        "--prec-sqrt",
        "-prec-sqrt",
        "--prec-div",
        "-prec-div",
        "-default-device",
        "--device-as-default",
        "--extra-device-vectorization",
        "-extra-device-vectorization",
        "-dopt",
        "--dopt",
        "-maxrregcount",
        "--maxrregcount",
        "-restrict",
        "--restrict",
        "--relocatable-device-code",
        "-rdc",
        "-dw",
        "--disable-warnings",
        "-w",
        "-ewp",
        "--extensible-whole-program",
        "-dlto",
        "--dlink-time-opt",
        "-lto",
        "--ptxas-options",
        "-Xptxas",
        "--time",
        "-time",
        "--split-compile",
        "-split-compile",
        "-builtin-move-forward",
        "--builtin-move-forward",
        "-builtin-initializer-list",
        "--builtin-initializer-list",
        "--device-int128",
        "-device-int128",
        "-G",
        "--device-debug",
        "-lineinfo",
        "--generate-line-info",
        "--minimal",
        "-minimal",
        "-std=",
        "--fdevice-syntax-only",
        "--optimization-info",
        "-err-no",
        "--display-error-number",
        "--no-display-error-number",
        "--diag-suppress",
        "--diag-error",
        "--diag-warn",
        "-Werror",
        "--Werror",
        "--modify-stack-limit",
        "-modify-stack-limit",
        "--fdevice-time-trace",
    ];
    while i < options.len() {
        let opt = options[i].as_str();
        let value = |i: &mut usize, long: &str| -> Result<Option<String>, CompileError> {
            if let Some(v) = opt.strip_prefix(long).and_then(|r| r.strip_prefix('=')) {
                return Ok(Some(v.to_string()));
            }
            if opt == long {
                *i += 1;
                return options.get(*i).cloned().map(Some).ok_or_else(|| bad(opt));
            }
            Ok(None)
        };
        if let Some(v) = value(&mut i, "--gpu-architecture")?.or(value(&mut i, "-arch")?) {
            let (real, digits) = if let Some(d) = v.strip_prefix("sm_") {
                (true, d)
            } else if let Some(d) = v.strip_prefix("compute_") {
                (false, d)
            } else {
                return Err(bad(opt));
            };
            let n: u32 = digits
                .trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse()
                .map_err(|_| bad(opt))?;
            o.arch = Some((n, real));
        } else if let Some(v) = value(&mut i, "--std")? {
            o.std = Some(v);
        } else if let Some(v) = opt.strip_prefix("-std=") {
            o.std = Some(v.to_string());
        } else if let Some(v) = value(&mut i, "--define-macro")? {
            o.args.push(format!("-D{v}"));
        } else if let Some(v) = value(&mut i, "--undefine-macro")? {
            o.args.push(format!("-U{v}"));
        } else if let Some(v) = value(&mut i, "--include-path")? {
            o.args.push(format!("-I{v}"));
        } else if let Some(v) = value(&mut i, "--pre-include")? {
            o.args.push("-include".into());
            o.args.push(v);
        } else if let Some(rest) = opt
            .strip_prefix("-D")
            .or(opt.strip_prefix("-U"))
            .or(opt.strip_prefix("-I"))
        {
            let flag = &opt[..2];
            if rest.is_empty() {
                i += 1;
                let v = options.get(i).ok_or_else(|| bad(opt))?;
                o.args.push(format!("{flag}{v}"));
            } else {
                o.args.push(opt.to_string());
            }
        } else if opt == "-include" {
            i += 1;
            let v = options.get(i).ok_or_else(|| bad(opt))?;
            o.args.push("-include".into());
            o.args.push(v.clone());
        } else if IGNORED_PREFIXES
            .iter()
            .any(|p| opt == *p || opt.starts_with(&format!("{p}=")))
        {
            // Accepted; see the module docs for what is not modelled.
        } else {
            return Err(bad(opt));
        }
        i += 1;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_nvrtcs() {
        let o = parse_options(&[
            "--gpu-architecture=sm_90".into(),
            "--std=c++17".into(),
            "--fmad=false".into(),
            "-DX=1".into(),
            "-I".into(),
            "/inc".into(),
        ])
        .unwrap();
        assert_eq!(o.arch, Some((90, true)));
        assert_eq!(o.args, ["-DX=1", "-I/inc"]);
        let e = parse_options(&["--frobnicate".into()]).unwrap_err();
        assert_eq!(e.code, NVRTC_INVALID_OPTION);
        assert!(e.log.contains("--frobnicate"));
    }
}
