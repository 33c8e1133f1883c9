//! The images the emulated NVRTC makes and its `cuModuleLoadData` loads.
//!
//! An image is text lines, then two length-prefixed parts:
//!
//! ```text
//! GKEMU-MODULE 2
//! key <32 hex digits>          the compile's key: names the shared object's file
//! runtime <32 hex digits>      the device header and runtime it was built with
//! fibers 0|1                   whether a block's threads need fibers
//! .entry <kernel>( smem=<n>    one line per kernel, with its static shared memory
//! program <length>             the program (name, options, headers, source), NUL-separated
//! <bytes>
//! so <length> <32 hex digits>  the shared object and its checksum
//! <bytes>
//! ```
//!
//! The `.entry name(` lines are what a reader of PTX looks for (gpukit's `compile_check`
//! finds its entry points in them). The program travels with the image so that an image
//! kept in a cache past a change of the emulator's runtime (whose thread records and entry
//! points it was linked against) is compiled again when loaded, instead of run against a
//! runtime it does not match.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::{fnv128, runtime_id, write_atomically};
use crate::errors::{cu, CuResult};

const MAGIC: &str = "GKEMU-MODULE 2\n";

/// Headers longer than this are not an image's.
const HEADER_MAX: usize = 1 << 20;

/// What a program was compiled from, kept in its image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Its name.
    pub name: String,
    /// NVRTC's options.
    pub options: Vec<String>,
    /// Its headers, `(include name, text)`.
    pub headers: Vec<(String, String)>,
    /// Its source.
    pub source: String,
}

impl Program {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut field = |s: &str| {
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        };
        field(&self.name);
        field(&self.options.len().to_string());
        for o in &self.options {
            field(o);
        }
        field(&self.headers.len().to_string());
        for (n, t) in &self.headers {
            field(n);
            field(t);
        }
        out.extend_from_slice(self.source.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Program> {
        let mut parts = bytes.split(|&b| b == 0);
        let mut next = || {
            parts
                .next()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        let name = next()?;
        let n_opts: usize = next()?.parse().ok()?;
        let options = (0..n_opts).map(|_| next()).collect::<Option<Vec<_>>>()?;
        let n_headers: usize = next()?.parse().ok()?;
        let headers = (0..n_headers)
            .map(|_| Some((next()?, next()?)))
            .collect::<Option<Vec<_>>>()?;
        let source = next()?;
        Some(Program {
            name,
            options,
            headers,
            source,
        })
    }
}

/// An image, read.
#[derive(Debug)]
pub struct Parsed<'a> {
    /// Its key (names the shared object's file).
    pub key: String,
    /// The runtime it was built with.
    pub runtime: String,
    /// Whether its threads need fibers.
    pub fibers: bool,
    /// Each kernel's static shared memory.
    pub kernels: Vec<(String, u64)>,
    /// What it was compiled from.
    pub program: Option<Program>,
    /// The shared object.
    pub so: &'a [u8],
    so_hash: String,
}

impl Parsed<'_> {
    /// Whether it was built against the runtime this emulator has.
    pub fn current(&self) -> bool {
        self.runtime == format!("{:032x}", runtime_id())
    }
}

/// An image of `so`, compiled from `program` with the given key and facts.
pub fn build(
    key: u128,
    fibers: bool,
    kernels: &[(String, u64)],
    program: &Program,
    so: &[u8],
) -> Vec<u8> {
    let mut head = String::from(MAGIC);
    let _ = writeln!(head, "key {key:032x}");
    let _ = writeln!(head, "runtime {:032x}", runtime_id());
    let _ = writeln!(head, "fibers {}", u8::from(fibers));
    for (n, smem) in kernels {
        let _ = writeln!(head, ".entry {n}( smem={smem}");
    }
    let program = program.encode();
    let _ = writeln!(head, "program {}", program.len());
    let mut image = head.into_bytes();
    image.extend_from_slice(&program);
    image.extend_from_slice(format!("so {} {:032x}\n", so.len(), fnv128(&[so])).as_bytes());
    image.extend_from_slice(so);
    image
}

/// Reads an image held in a slice.
pub fn parse_slice(image: &[u8]) -> Result<Parsed<'_>, CuResult> {
    if !image.starts_with(MAGIC.as_bytes()) {
        return Err(cu::INVALID_IMAGE);
    }
    let mut at = MAGIC.len();
    let mut key = String::new();
    let mut runtime = String::new();
    let mut fibers = false;
    let mut kernels = Vec::new();
    let mut program = None;
    loop {
        let end = image
            .get(at..)
            .and_then(|rest| rest.iter().position(|&c| c == b'\n'))
            .ok_or(cu::INVALID_IMAGE)?
            + at;
        let line = std::str::from_utf8(&image[at..end]).map_err(|_| cu::INVALID_IMAGE)?;
        at = end + 1;
        if let Some(k) = line.strip_prefix("key ") {
            key = k.to_string();
        } else if let Some(r) = line.strip_prefix("runtime ") {
            runtime = r.to_string();
        } else if let Some(f) = line.strip_prefix("fibers ") {
            fibers = f == "1";
        } else if let Some(rest) = line.strip_prefix(".entry ") {
            let (n, smem) = rest.split_once("( smem=").ok_or(cu::INVALID_IMAGE)?;
            kernels.push((n.to_string(), smem.parse().map_err(|_| cu::INVALID_IMAGE)?));
        } else if let Some(len) = line.strip_prefix("program ") {
            let len: usize = len.parse().map_err(|_| cu::INVALID_IMAGE)?;
            let bytes = image.get(at..at + len).ok_or(cu::INVALID_IMAGE)?;
            program = Program::decode(bytes);
            at += len;
        } else if let Some(rest) = line.strip_prefix("so ") {
            let (len, hash) = rest.split_once(' ').ok_or(cu::INVALID_IMAGE)?;
            let len: usize = len.parse().map_err(|_| cu::INVALID_IMAGE)?;
            let so = image.get(at..at + len).ok_or(cu::INVALID_IMAGE)?;
            if key.len() != 32 || key.contains(|c: char| !c.is_ascii_hexdigit()) {
                return Err(cu::INVALID_IMAGE);
            }
            return Ok(Parsed {
                key,
                runtime,
                fibers,
                kernels,
                program,
                so,
                so_hash: hash.to_string(),
            });
        } else {
            return Err(cu::INVALID_IMAGE);
        }
    }
}

const NO_PTX: &str = "cuModuleLoadData: PTX cannot run on the CUDA emulator (it has no PTX compiler: it runs CUDA C compiled by its own NVRTC only)";

/// Reads an image given by pointer only, as `cuModuleLoadData` is: the header says how long
/// the rest is. PTX text and cubins are refused with a diagnostic.
///
/// # Safety
///
/// `image` points at an image of the emulated NVRTC, or at NUL-terminated text.
pub unsafe fn parse_image<'a>(image: *const u8) -> Result<Parsed<'a>, CuResult> {
    if image.is_null() {
        return Err(cu::INVALID_VALUE);
    }
    // Read byte by byte, never past a NUL (text) before the magic is confirmed.
    let mut len = 0usize;
    while len < MAGIC.len() {
        // SAFETY: the bytes before the first NUL of a text, or an image's magic, are readable.
        let c = unsafe { *image.add(len) };
        if c != MAGIC.as_bytes()[len] {
            if len == 0 && c == 0x7f {
                crate::errors::diagnose("cuModuleLoadData: a cubin cannot run on the CUDA emulator; compile CUDA C with its NVRTC");
                return Err(cu::NO_BINARY_FOR_GPU);
            }
            crate::errors::diagnose(NO_PTX);
            return Err(cu::JIT_COMPILER_NOT_FOUND);
        }
        len += 1;
    }
    // An image: its lines say how long each part is.
    let mut line_start = len;
    let total;
    loop {
        if len > HEADER_MAX {
            return Err(cu::INVALID_IMAGE);
        }
        // SAFETY: inside the image's header, whose lines the loop follows.
        let c = unsafe { *image.add(len) };
        len += 1;
        if c != b'\n' {
            continue;
        }
        // SAFETY: bytes `line_start..len` were just read.
        let line = unsafe { std::slice::from_raw_parts(image.add(line_start), len - line_start) };
        let text = String::from_utf8_lossy(line);
        let number = |prefix: &str| -> Option<usize> {
            text.strip_prefix(prefix)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        if let Some(n) = number("program ") {
            len += n;
        } else if let Some(n) = number("so ") {
            total = len + n;
            break;
        }
        line_start = len;
    }
    // SAFETY: the header says the image has `total` bytes.
    let all = unsafe { std::slice::from_raw_parts(image, total) };
    parse_slice(all)
}

/// Writes the shared object of `parsed` into the module cache (unless the same is there).
pub fn write_so(parsed: &Parsed<'_>) -> Result<PathBuf, CuResult> {
    if format!("{:032x}", fnv128(&[parsed.so])) != parsed.so_hash {
        return Err(cu::INVALID_IMAGE);
    }
    let path = crate::config::get()
        .cache
        .join("modules")
        .join(format!("{}.so", parsed.key));
    let fresh = std::fs::read(&path)
        .ok()
        .is_some_and(|b| format!("{:032x}", fnv128(&[&b])) == parsed.so_hash);
    if !fresh {
        write_atomically(&path, parsed.so).map_err(|e| {
            crate::errors::diagnose(&format!(
                "cuModuleLoadData: could not write {}: {e}",
                path.display()
            ));
            cu::OPERATING_SYSTEM
        })?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_round_trips() {
        let program = Program {
            name: "p".into(),
            options: vec!["-DX=1".into(), "--fmad=false".into()],
            headers: vec![("a.h".into(), "int a;".into())],
            source: "extern \"C\" __global__ void k() {}".into(),
        };
        let image = build(7, true, &[("k".into(), 1024)], &program, b"\x7fELF...");
        let p = parse_slice(&image).unwrap();
        assert_eq!(p.key, format!("{:032x}", 7));
        assert!(p.fibers && p.current());
        assert_eq!(p.kernels, [("k".to_string(), 1024)]);
        assert_eq!(p.program.as_ref(), Some(&program));
        assert_eq!(p.so, b"\x7fELF...");
        // SAFETY: a whole image.
        let q = unsafe { parse_image(image.as_ptr()) }.unwrap();
        assert_eq!(q.so, p.so);
        assert!(String::from_utf8_lossy(&image).contains(".entry k("));
    }

    #[test]
    fn text_and_cubins_are_refused() {
        // SAFETY: NUL-terminated text.
        let ptx = unsafe { parse_image(c".version 8.0\n.target sm_90".as_ptr().cast()) };
        assert_eq!(ptx.err(), Some(cu::JIT_COMPILER_NOT_FOUND));
        // SAFETY: four readable bytes; the first differs from the magic.
        let cubin = unsafe { parse_image(b"\x7fELF".as_ptr()) };
        assert_eq!(cubin.err(), Some(cu::NO_BINARY_FOR_GPU));
    }
}
