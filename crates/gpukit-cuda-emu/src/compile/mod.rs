//! The emulated NVRTC's compiler: CUDA C to a shared object the emulator can run, with the
//! host's C++ compiler, and the images that carry it to `cuModuleLoadData`.
//!
//! A program is compiled as C++ with the emulator's device header (`runtime/gkemu.h`) in front
//! of it, after two rewrites the header cannot do: `extern __shared__ T name[];` becomes
//! `gkemu_dyn_shared<T> name;` (the launch's dynamic shared memory), and a trampoline per
//! `__global__` function is appended, which calls the kernel with the values the launch's
//! `void **` points at and describes its parameters (sizes, alignments). The kernel code is
//! compiled with `-fsanitize=thread`'s instrumentation, whose hooks the runtime
//! (`runtime/gkemu_rt.cpp`, compiled once, linked into every module) implements as the
//! emulator's memory checks; the ThreadSanitizer runtime itself is never linked. Options are
//! NVRTC's (`--gpu-architecture`, `-D`, `-I`, `--std`, `--fmad`, ...); an unknown one is
//! `NVRTC_ERROR_INVALID_OPTION`, as NVRTC answers. Floating-point contraction is always off
//! (`--fmad=true` is not modelled: results are those of `--fmad=false`).
//!
//! After compiling, the object's symbol table says whether the module needs fibers (it calls
//! a barrier or a warp collective) and how much static shared memory each kernel has (its
//! thread-local `__shared__` arrays); a kernel over 48 KiB fails a compile for a real
//! architecture the way ptxas fails it, and the load of a `compute_XX` image the way the
//! driver's JIT does.
//!
//! Compiled images are kept in `GPUKIT_CUDA_EMU_CACHE`, keyed by everything that decides
//! them (the emulator's runtime, the compiler and its version, the options, the source and
//! its headers), so a test run compiles each module once; files are written under a
//! temporary name and renamed, so concurrent processes never see half a file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

mod image;
mod options;
mod scan;

pub use image::{parse_image, parse_slice, write_so, Parsed, Program};
use options::parse_options;
use scan::{blank, kernel_names, renamed, rewrite_dynamic_shared, trampolines};

/// The runtime's files, written into the cache for the compiler.
const FILES: &[(&str, &str)] = &[
    ("gkemu.h", include_str!("../../runtime/gkemu.h")),
    ("gkemu_abi.h", include_str!("../../runtime/gkemu_abi.h")),
    ("gkemu_api.h", include_str!("../../runtime/gkemu_api.h")),
    ("gkemu_rt.cpp", include_str!("../../runtime/gkemu_rt.cpp")),
    (
        "include/assert.h",
        include_str!("../../runtime/include/assert.h"),
    ),
    (
        "include/cassert",
        include_str!("../../runtime/include/assert.h"),
    ),
    (
        "include/cuda_fp16.h",
        include_str!("../../runtime/include/cuda_fp16.h"),
    ),
    (
        "include/cuda_bf16.h",
        include_str!("../../runtime/include/cuda_bf16.h"),
    ),
    (
        "include/cuda_runtime.h",
        include_str!("../../runtime/include/cuda_runtime.h"),
    ),
    (
        "include/cuda.h",
        include_str!("../../runtime/include/cuda.h"),
    ),
    (
        "include/math_constants.h",
        include_str!("../../runtime/include/math_constants.h"),
    ),
    (
        "include/vector_types.h",
        include_str!("../../runtime/include/vector_types.h"),
    ),
];

/// The emulator's code that decides what an image holds: its compiler driver, besides the
/// runtime's files.
const COMPILER_SOURCES: &[&str] = &[
    include_str!("mod.rs"),
    include_str!("image.rs"),
    include_str!("options.rs"),
    include_str!("scan.rs"),
];

/// The identity of the device header, runtime and compiler driver images are built with:
/// images built by another are compiled again when loaded (see the `image` module).
pub fn runtime_id() -> u128 {
    static ID: OnceLock<u128> = OnceLock::new();
    *ID.get_or_init(|| {
        let parts: Vec<&[u8]> = FILES
            .iter()
            .flat_map(|(n, t)| [n.as_bytes(), t.as_bytes()])
            .chain(COMPILER_SOURCES.iter().map(|s| s.as_bytes()))
            .collect();
        fnv128(&parts)
    })
}

/// The static shared memory a kernel may have (sm_90 without opt-in), as ptxas checks it.
pub const STATIC_SMEM_MAX: u64 = 48 * 1024;

/// 128-bit FNV-1a: keys and checksums of files the emulator wrote itself.
pub fn fnv128(parts: &[&[u8]]) -> u128 {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for p in parts {
        for &b in p.iter() {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000000001000000000000000000013B);
        }
        // Separates the parts.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    h
}

/// A failed compile: NVRTC's result code and the log.
#[derive(Debug, Clone)]
pub struct CompileError {
    /// `nvrtcResult`.
    pub code: u32,
    /// The program log.
    pub log: String,
}

/// `NVRTC_ERROR_INVALID_OPTION`.
const NVRTC_INVALID_OPTION: u32 = 5;
/// `NVRTC_ERROR_COMPILATION`.
const NVRTC_COMPILATION: u32 = 6;
/// `NVRTC_ERROR_BUILTIN_OPERATION_FAILURE`.
const NVRTC_BUILTIN_FAILURE: u32 = 7;

fn tool_failure(log: String) -> CompileError {
    CompileError {
        code: NVRTC_BUILTIN_FAILURE,
        log,
    }
}

/// The C++ compiler the emulated NVRTC runs.
#[derive(Debug)]
struct Cxx {
    path: String,
    clang: bool,
    identity: String,
}

fn cxx() -> Result<&'static Cxx, CompileError> {
    static CXX: OnceLock<Result<Cxx, String>> = OnceLock::new();
    CXX.get_or_init(|| {
        let candidates: Vec<String> = match &crate::config::get().cxx {
            Some(c) => vec![c.clone()],
            None => vec!["g++".into(), "clang++".into(), "c++".into()],
        };
        for c in &candidates {
            if let Ok(out) = Command::new(c).arg("--version").output() {
                if out.status.success() {
                    let identity = String::from_utf8_lossy(&out.stdout).into_owned();
                    return Ok(Cxx {
                        path: c.clone(),
                        clang: identity.contains("clang"),
                        identity,
                    });
                }
            }
        }
        Err(format!(
            "the CUDA emulator's NVRTC compiles CUDA C with the host's C++ compiler, and none was found (tried {}; set GPUKIT_CUDA_EMU_CXX, or install g++ or clang++)",
            candidates.join(", ")
        ))
    })
    .as_ref()
    .map_err(|e| tool_failure(e.clone()))
}

/// The runtime's files in the cache, written on first use.
fn runtime_dir() -> Result<&'static PathBuf, CompileError> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = crate::config::get()
            .cache
            .join(format!("runtime-{:032x}", runtime_id()));
        if dir.join(".complete").is_file() {
            return Ok(dir);
        }
        let tmp = temp_sibling(&dir);
        let written = (|| -> std::io::Result<()> {
            for (name, text) in FILES {
                let path = tmp.join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(path, text)?;
            }
            std::fs::write(tmp.join(".complete"), b"")
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(format!(
                "the CUDA emulator could not write its runtime to {}: {e} (set GPUKIT_CUDA_EMU_CACHE to a writable folder)",
                tmp.display()
            ));
        }
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another process put it there first.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Ok(dir)
    })
    .as_ref()
    .map_err(|e| tool_failure(e.clone()))
}

/// A unique temporary path next to `path`.
fn temp_sibling(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = temp_sibling(path);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Flags every compile of kernel code gets.
fn kernel_flags(cxx: &Cxx) -> Vec<&'static str> {
    let mut f = vec![
        "-O1",
        "-fPIC",
        "-fno-exceptions",
        "-fno-strict-aliasing",
        "-fwrapv",
        "-ffp-contract=off",
        "-fno-math-errno",
        "-fvisibility=hidden",
        "-fsanitize=thread",
        "-w",
    ];
    if !cxx.clang {
        f.push("--param=tsan-instrument-func-entry-exit=0");
    }
    f
}

/// The runtime's object, compiled once per compiler.
fn runtime_object(cxx: &'static Cxx) -> Result<&'static PathBuf, CompileError> {
    static OBJ: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    OBJ.get_or_init(|| {
        let dir = runtime_dir().map_err(|e| e.log)?;
        let key = fnv128(&[cxx.path.as_bytes(), cxx.identity.as_bytes()]);
        let obj = dir.join(format!("gkemu_rt-{key:032x}.o"));
        if obj.is_file() {
            return Ok(obj);
        }
        let tmp = temp_sibling(&obj);
        let out = Command::new(&cxx.path)
            .args([
                "-std=c++17",
                "-O2",
                "-fPIC",
                "-fno-exceptions",
                "-fvisibility=hidden",
                "-w",
            ])
            .arg("-I")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("gkemu_rt.cpp"))
            .arg("-o")
            .arg(&tmp)
            .output()
            .map_err(|e| format!("{} could not be run: {e}", cxx.path))?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!(
                "the CUDA emulator's runtime did not compile with {}:\n{}",
                cxx.path,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::fs::rename(&tmp, &obj).map_err(|e| e.to_string())?;
        Ok(obj)
    })
    .as_ref()
    .map_err(|e| tool_failure(e.clone()))
}

/// A compiled program: its image and the log.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The image for `cuModuleLoadData` (what `nvrtcGetCUBIN` and `nvrtcGetPTX` return).
    pub image: Vec<u8>,
    /// The compiler's warnings (the emulator compiles with them off: empty).
    pub log: String,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Compiles `src` (program `name`, extra headers `(include name, text)`) with NVRTC's
/// `options`.
pub fn compile(
    src: &str,
    name: &str,
    headers: &[(String, String)],
    options: &[String],
) -> Result<Compiled, CompileError> {
    let opts = parse_options(options)?;
    if crate::faults::compile_fails(name, src) {
        return Err(CompileError {
            code: NVRTC_COMPILATION,
            log: format!(
                "{name}.cu: error: a compile failure injected by GPUKIT_CUDA_EMU_FAIL_COMPILE"
            ),
        });
    }
    let cxx = cxx()?;
    let rt = runtime_dir()?;
    let rt_obj = runtime_object(cxx)?;
    let (arch, real) = opts.arch.unwrap_or((52, false));
    let std_flag = match opts.std.as_deref() {
        None | Some("c++17") | Some("c++14") | Some("c++11") | Some("c++03") => {
            "-std=c++17".to_string()
        }
        Some(s) => format!("-std={s}"),
    };
    let mut args: Vec<String> = kernel_flags(cxx).iter().map(|s| s.to_string()).collect();
    args.push(std_flag);
    args.push(format!("-D__CUDA_ARCH__={}", arch * 10));
    args.extend(opts.args.iter().cloned());
    // The key: everything that decides the image.
    let mut key_parts: Vec<Vec<u8>> = vec![
        rt.to_string_lossy().into_owned().into_bytes(),
        cxx.path.clone().into_bytes(),
        cxx.identity.clone().into_bytes(),
        args.join("\u{1}").into_bytes(),
        format!("{arch} {real}").into_bytes(),
        name.as_bytes().to_vec(),
        src.as_bytes().to_vec(),
    ];
    for (n, t) in headers {
        key_parts.push(n.clone().into_bytes());
        key_parts.push(t.clone().into_bytes());
    }
    let refs: Vec<&[u8]> = key_parts.iter().map(Vec::as_slice).collect();
    let key = fnv128(&refs);
    let cache = crate::config::get().cache.join("images");
    let image_path = cache.join(format!("{key:032x}.img"));
    if let Ok(image) = std::fs::read(&image_path) {
        if let Some(parsed) = parse_slice(&image).ok().filter(|p| p.current()) {
            check_smem(&parsed, real).map_err(|log| CompileError {
                code: NVRTC_COMPILATION,
                log,
            })?;
            return Ok(Compiled {
                image,
                log: String::new(),
            });
        }
    }
    let body = rewrite_dynamic_shared(src, &blank(src));
    let work = cache.join(format!(
        "build-{key:032x}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let scanned = preprocess(
        cxx,
        rt,
        &work,
        &format!("#line 1 \"{name}.cu\"\n{body}\n"),
        headers,
        &args,
    );
    let kernels = match scanned {
        Ok(text) => kernel_names(&blank(&text)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&work);
            return Err(e);
        }
    };
    let mut program = String::new();
    for k in &kernels {
        let _ = writeln!(program, "#define {k} {}", renamed(k));
    }
    let _ = write!(
        program,
        "#line 1 \"{name}.cu\"\n{body}\n#line 1 \"<emulator trampolines>\"\n"
    );
    program.push_str(&trampolines(&kernels));
    let result = build(cxx, rt, rt_obj, &work, &program, headers, &args);
    let _ = std::fs::remove_dir_all(&work);
    let (so, syms) = result?;
    let fibers = syms
        .iter()
        .any(|s| s.undefined && (s.name == "gkemu_rt_barrier" || s.name == "gkemu_rt_warp"));
    let mut shared_by_all = 0u64;
    let mut own: Vec<u64> = vec![0; kernels.len()];
    for s in syms
        .iter()
        .filter(|s| s.kind == crate::elf::STT_TLS && !s.undefined)
    {
        match kernels.iter().position(|k| {
            let k = renamed(k);
            s.name.starts_with(&format!("_ZZ{}{k}E", k.len()))
        }) {
            Some(k) => own[k] += s.size,
            None => shared_by_all += s.size,
        }
    }
    // Each kernel under its linkage name, as NVRTC's output names it: the plain name for an
    // `extern "C"` kernel, the Itanium-mangled one otherwise (`cuModuleGetFunction` finds a
    // C++ kernel only by that).
    let kernels: Vec<(String, u64)> = kernels
        .iter()
        .enumerate()
        .map(|(k, n)| (linkage_name(n, &syms), own[k] + shared_by_all))
        .collect();
    let program = Program {
        name: name.to_string(),
        options: options.to_vec(),
        headers: headers.to_vec(),
        source: src.to_string(),
    };
    let image = image::build(key, fibers, &kernels, &program, &so);
    let parsed =
        parse_slice(&image).map_err(|_| tool_failure("internal: unreadable image".into()))?;
    let _ = write_atomically(&image_path, &image);
    let _ = write_so(&parsed);
    check_smem(&parsed, real).map_err(|log| CompileError {
        code: NVRTC_COMPILATION,
        log,
    })?;
    Ok(Compiled {
        image,
        log: String::new(),
    })
}

/// The linkage name of kernel `name` (compiled as [`renamed`]`(name)`) in the object whose
/// symbols are `syms`.
fn linkage_name(name: &str, syms: &[crate::elf::Symbol]) -> String {
    let compiled = renamed(name);
    let mangled_prefix = format!("_Z{}{compiled}", compiled.len());
    if syms.iter().any(|s| !s.undefined && s.name == compiled) {
        return name.to_string();
    }
    match syms
        .iter()
        .find(|s| !s.undefined && s.name.starts_with(&mangled_prefix))
    {
        Some(s) => format!("_Z{}{name}{}", name.len(), &s.name[mangled_prefix.len()..]),
        None => name.to_string(),
    }
}

/// A kernel over the static shared memory limit: ptxas's message (for a real architecture).
pub fn check_smem(parsed: &Parsed<'_>, real: bool) -> Result<(), String> {
    if !real {
        return Ok(());
    }
    match parsed.kernels.iter().find(|(_, s)| *s > STATIC_SMEM_MAX) {
        Some((n, s)) => Err(format!(
            "ptxas error   : Entry function '{n}' uses too much shared data (0x{s:x} bytes, 0x{STATIC_SMEM_MAX:x} max)"
        )),
        None => Ok(()),
    }
}

/// Writes the program's headers into `work` and the include options for them.
fn write_headers(work: &Path, headers: &[(String, String)]) -> Result<(), CompileError> {
    let io = |e: std::io::Error| {
        tool_failure(format!(
            "the CUDA emulator could not write {}: {e}",
            work.display()
        ))
    };
    std::fs::create_dir_all(work.join("headers")).map_err(io)?;
    for (n, t) in headers {
        let p = work.join("headers").join(n);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(p, t).map_err(io)?;
    }
    Ok(())
}

/// A compiler command for `src` with the emulator's header and include folders.
fn command(cxx: &Cxx, rt: &Path, work: &Path, args: &[String]) -> Command {
    let mut cmd = Command::new(&cxx.path);
    cmd.args(args)
        .arg("-I")
        .arg(work.join("headers"))
        .arg("-I")
        .arg(rt.join("include"))
        .arg("-I")
        .arg(rt)
        .arg("-include")
        .arg(rt.join("gkemu.h"));
    cmd
}

/// The program after the preprocessor (with `__global__` kept), to find its kernels.
fn preprocess(
    cxx: &Cxx,
    rt: &Path,
    work: &Path,
    program: &str,
    headers: &[(String, String)],
    args: &[String],
) -> Result<String, CompileError> {
    write_headers(work, headers)?;
    let src = work.join("scan.cpp");
    std::fs::write(&src, program).map_err(|e| {
        tool_failure(format!(
            "the CUDA emulator could not write {}: {e}",
            src.display()
        ))
    })?;
    let out = command(cxx, rt, work, args)
        .args(["-E", "-P", "-DGKEMU_SCAN"])
        .arg(&src)
        .output()
        .map_err(|e| tool_failure(format!("{} could not be run: {e}", cxx.path)))?;
    if !out.status.success() {
        return Err(CompileError {
            code: NVRTC_COMPILATION,
            log: String::from_utf8_lossy(&out.stderr).replace(&*work.to_string_lossy(), "."),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn build(
    cxx: &Cxx,
    rt: &Path,
    rt_obj: &Path,
    work: &Path,
    program: &str,
    headers: &[(String, String)],
    args: &[String],
) -> Result<(Vec<u8>, Vec<crate::elf::Symbol>), CompileError> {
    let io = |e: std::io::Error| {
        tool_failure(format!(
            "the CUDA emulator could not write {}: {e}",
            work.display()
        ))
    };
    write_headers(work, headers)?;
    let src = work.join("program.cpp");
    std::fs::write(&src, program).map_err(io)?;
    let obj = work.join("program.o");
    let out = command(cxx, rt, work, args)
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .map_err(|e| tool_failure(format!("{} could not be run: {e}", cxx.path)))?;
    if !out.status.success() {
        let mut log = String::from_utf8_lossy(&out.stderr).replace(&*work.to_string_lossy(), ".");
        if program.contains("asm") && (log.contains("asm") || log.contains("constraint")) {
            log.push_str("\nnote: the CUDA emulator cannot run inline PTX (`asm`): call the helpers its device header defines instead (gk_globaltimer, gk_cvt_f32_f16, gk_cvt_rn_f16_f32)");
        }
        return Err(CompileError {
            code: NVRTC_COMPILATION,
            log,
        });
    }
    let syms = std::fs::read(&obj)
        .ok()
        .and_then(|b| crate::elf::symbols(&b))
        .ok_or_else(|| tool_failure("the compiled object could not be read".into()))?;
    let so = work.join("program.so");
    let out = Command::new(&cxx.path)
        .args(["-shared", "-Wl,--no-undefined", "-o"])
        .arg(&so)
        .arg(&obj)
        .arg(rt_obj)
        .output()
        .map_err(|e| tool_failure(format!("{} could not be run: {e}", cxx.path)))?;
    if !out.status.success() {
        return Err(CompileError {
            code: NVRTC_COMPILATION,
            log: format!(
                "the program did not link against the emulator's runtime:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    let bytes = std::fs::read(&so).map_err(io)?;
    Ok((bytes, syms))
}
