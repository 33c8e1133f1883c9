//! The kernel cache: every CUDA C program is compiled by NVRTC once per process, however many
//! threads ask for it at once, and kept on disk so that later processes read it back instead
//! of compiling it again (a test run opens dozens of processes, each of which would otherwise
//! compile the built-in kernels anew).
//!
//! An entry is keyed by everything that decides the compiled image ([`KernelKey`]): the
//! source, the program's name, the options, NVRTC's version and the target architecture. On
//! disk it is one file named after a 128-bit hash of that key, whose header repeats every
//! part of the key (the source as its length and hash) and gives the length and hash of the
//! log and the image that follow. An entry is used only when every header line equals what
//! the caller asks for and the body hashes to the stated values: anything else (a truncated
//! or corrupted file, an entry of another NVRTC or architecture, a hash collision) is
//! compiled again and the file replaced, never trusted. Files are written under a temporary
//! name and renamed into place, so a reader sees a whole entry or none, also with several
//! processes at once. The disk cache is best effort: a folder that cannot be read or written
//! costs a compile, never an error (it is logged with `tracing`).
//!
//! The folder ([`cache_dir`]): `GPU_KERNEL_CACHE` if set (`off` turns the disk cache off),
//! else `$XDG_CACHE_HOME/gpukit/kernels`, else `$HOME/.cache/gpukit/kernels`. The hashes
//! are FNV-1a (128 bits), chosen for having no dependency: they detect accidents, which is
//! all a cache of one's own compiler output needs, not tampering. The driver checks an
//! image again when it loads it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use gpukit_cuda_sys::nvrtc::{Compiled, NvrtcError, NvrtcLib, Target};

use crate::device::lock;

/// The environment variable naming the cache folder (`off`: no disk cache).
pub const CACHE_VAR: &str = "GPU_KERNEL_CACHE";

/// The first line of every entry; a new layout gets a new number, and old entries are then
/// recompiled like any stale one.
const MAGIC: &str = "gpukit-kernel-cache 1";

/// Everything that decides what NVRTC makes of a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelKey<'a> {
    /// The CUDA C source.
    pub source: &'a str,
    /// The program's name (NVRTC calls it `name.cu` in its messages).
    pub name: &'a str,
    /// Options beyond the architecture (which [`KernelKey::target`] sets).
    pub options: &'a [&'a str],
    /// NVRTC's version, `(major, minor)`.
    pub nvrtc: (u32, u32),
    /// What the program is compiled to.
    pub target: Target,
}

impl KernelKey<'_> {
    /// The header every entry for this key must have, line for line.
    fn header(&self) -> String {
        let mut h = String::new();
        let _ = writeln!(h, "{MAGIC}");
        let _ = writeln!(h, "nvrtc {}.{}", self.nvrtc.0, self.nvrtc.1);
        let _ = writeln!(h, "target {}", self.target.arch_option());
        // Options are NUL-free (NVRTC takes C strings); a tab keeps them apart.
        let _ = writeln!(h, "options {}", self.options.join("\t"));
        let _ = writeln!(h, "name {}", self.name.escape_default());
        let _ = writeln!(
            h,
            "source {} {:032x}",
            self.source.len(),
            fnv128(self.source.as_bytes())
        );
        h
    }

    /// The entry's file name: the hash of its header.
    fn file_name(&self) -> String {
        format!("{:032x}.kernel", fnv128(self.header().as_bytes()))
    }
}

/// Where a compiled program came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled earlier in this process.
    Memory,
    /// Read back from the disk cache.
    Disk,
    /// Compiled by NVRTC now.
    Compiled,
}

/// Entries in one folder (see the module docs for the format and the rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// A cache in `dir` (created when the first entry is stored).
    pub fn at(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    /// The cache folder this process uses, from the environment; `None` when it is off.
    pub fn from_env() -> Option<DiskCache> {
        cache_dir().map(DiskCache::at)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `key`'s entry lives.
    pub fn path(&self, key: &KernelKey<'_>) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// `key`'s entry, if there is one that matches it exactly and is whole.
    pub fn load(&self, key: &KernelKey<'_>) -> Option<Compiled> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        parse_entry(&bytes, key)
    }

    /// Writes `compiled` as `key`'s entry, replacing any (atomically: a temporary file
    /// renamed into place).
    pub fn store(&self, key: &KernelKey<'_>, compiled: &Compiled) -> std::io::Result<()> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key);
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            key.file_name(),
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&entry_bytes(key, compiled))?;
            file.sync_data()?;
            std::fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// The cache folder from the environment (see the module docs); `None` when it is off or
/// no folder can be named.
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_VAR) {
        Some(v) if v == "off" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => {
            let base = match std::env::var_os("XDG_CACHE_HOME") {
                Some(x) if !x.is_empty() => PathBuf::from(x),
                _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
            };
            Some(base.join("gpukit").join("kernels"))
        }
    }
}

/// The bytes of an entry: the key's header, then the body's header, then the log and the
/// image.
fn entry_bytes(key: &KernelKey<'_>, compiled: &Compiled) -> Vec<u8> {
    let mut head = key.header();
    let log = compiled.log.as_bytes();
    let _ = writeln!(head, "log {} {:032x}", log.len(), fnv128(log));
    let _ = writeln!(
        head,
        "image {} {:032x}",
        compiled.image.len(),
        fnv128(&compiled.image)
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(log);
    out.extend_from_slice(&compiled.image);
    out
}

/// An entry's program, if `bytes` is a whole entry for exactly `key`.
fn parse_entry(bytes: &[u8], key: &KernelKey<'_>) -> Option<Compiled> {
    let want = key.header();
    let rest = bytes.strip_prefix(want.as_bytes())?;
    let (log_len, log_hash, rest) = body_line(rest, "log ")?;
    let (image_len, image_hash, rest) = body_line(rest, "image ")?;
    if rest.len() != log_len.checked_add(image_len)? {
        return None;
    }
    let (log, image) = rest.split_at(log_len);
    if fnv128(log) != log_hash || fnv128(image) != image_hash || image.is_empty() {
        return None;
    }
    Some(Compiled {
        image: image.to_vec(),
        target: key.target,
        log: String::from_utf8(log.to_vec()).ok()?,
    })
}

/// Reads `<label><len> <hash>\n` off the front of `bytes`.
fn body_line<'b>(bytes: &'b [u8], label: &str) -> Option<(usize, u128, &'b [u8])> {
    let end = bytes.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&bytes[..end])
        .ok()?
        .strip_prefix(label)?;
    let (len, hash) = line.split_once(' ')?;
    if hash.len() != 32 {
        return None;
    }
    Some((
        len.parse().ok()?,
        u128::from_str_radix(hash, 16).ok()?,
        &bytes[end + 1..],
    ))
}

/// FNV-1a, 128 bits.
fn fnv128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME))
}

/// One program of this process: `None` until it is compiled (or read from disk). Its lock
/// is held while that happens, so concurrent requests wait for one compile.
type Slot = Arc<Mutex<Option<Arc<Compiled>>>>;

/// The programs of this process, each behind its own lock, so that concurrent requests for
/// one program compile it once while other programs compile beside it.
#[derive(Default)]
struct Programs {
    slots: Mutex<HashMap<OwnedKey, Slot>>,
}

/// A [`KernelKey`] that owns its parts: the in-process map compares whole sources.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct OwnedKey {
    source: String,
    name: String,
    options: Vec<String>,
    nvrtc: (u32, u32),
    target: Target,
}

impl Programs {
    /// `key`'s program: from this process, else from `disk`, else from `compile` (which then
    /// goes to `disk`). Concurrent callers for one key wait for a single compile. A failed
    /// compile is returned to every caller that waited for it and is not remembered.
    fn get_or_compile<E>(
        &self,
        key: &KernelKey<'_>,
        disk: Option<&DiskCache>,
        compile: impl FnOnce() -> Result<Compiled, E>,
    ) -> Result<(Arc<Compiled>, Origin), E> {
        let owned = OwnedKey {
            source: key.source.to_owned(),
            name: key.name.to_owned(),
            options: key.options.iter().map(|o| (*o).to_owned()).collect(),
            nvrtc: key.nvrtc,
            target: key.target,
        };
        let slot = Arc::clone(lock(&self.slots).entry(owned).or_default());
        let mut slot = lock(&slot);
        if let Some(hit) = &*slot {
            return Ok((Arc::clone(hit), Origin::Memory));
        }
        let (compiled, origin) = match disk.and_then(|d| d.load(key)) {
            Some(found) => (found, Origin::Disk),
            None => {
                let compiled = compile()?;
                if let Some(d) = disk {
                    if let Err(e) = d.store(key, &compiled) {
                        tracing::warn!(
                            "kernel cache: could not store `{}` in {}: {e}",
                            key.name,
                            d.dir().display()
                        );
                    }
                }
                (compiled, Origin::Compiled)
            }
        };
        let compiled = Arc::new(compiled);
        *slot = Some(Arc::clone(&compiled));
        Ok((compiled, origin))
    }
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(Programs::default)
}

/// `src` compiled by `nvrtc` for `target` with `options`, through the kernel cache (this
/// process's programs, then the disk cache, then NVRTC), with where it came from.
pub fn compile(
    nvrtc: &NvrtcLib,
    src: &str,
    name: &str,
    target: Target,
    options: &[&str],
) -> Result<(Arc<Compiled>, Origin), NvrtcError> {
    let key = KernelKey {
        source: src,
        name,
        options,
        nvrtc: nvrtc.version,
        target,
    };
    let disk = DiskCache::from_env();
    programs().get_or_compile(&key, disk.as_ref(), || {
        nvrtc.compile(src, name, target, options)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn key<'a>(source: &'a str, nvrtc: (u32, u32)) -> KernelKey<'a> {
        KernelKey {
            source,
            name: "k",
            options: &["--fmad=false"],
            nvrtc,
            target: Target::Sass(9, 0),
        }
    }

    fn program(image: &[u8]) -> Compiled {
        Compiled {
            image: image.to_vec(),
            target: Target::Sass(9, 0),
            log: "warning: one".into(),
        }
    }

    /// A folder of its own for each test.
    fn temp_cache(test: &str) -> DiskCache {
        let dir =
            std::env::temp_dir().join(format!("gpukit-kernel-cache-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        DiskCache::at(dir)
    }

    #[test]
    fn fnv128_matches_its_published_vectors() {
        assert_eq!(fnv128(b""), 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d);
        assert_eq!(fnv128(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
    }

    #[test]
    fn an_entry_reads_back_only_for_exactly_its_key() {
        let disk = temp_cache("exact");
        let k = key("__global__ void k() {}", (12, 9));
        assert_eq!(disk.load(&k), None, "nothing stored yet");
        disk.store(&k, &program(b"\x7fELF image")).unwrap();
        assert_eq!(disk.load(&k), Some(program(b"\x7fELF image")));
        // Another NVRTC, architecture, option set, name or source finds nothing.
        let others = [
            key("__global__ void k() {}", (13, 0)),
            KernelKey {
                target: Target::Ptx(9, 0),
                ..k
            },
            KernelKey { options: &[], ..k },
            KernelKey { name: "j", ..k },
            key("__global__ void k() { }", (12, 9)),
        ];
        for other in others {
            assert_eq!(disk.load(&other), None, "{other:?}");
            // Even when a stale file sits under the other key's name (a hash collision, or
            // a file copied over): the header must match line for line.
            std::fs::copy(disk.path(&k), disk.path(&other)).unwrap();
            assert_eq!(disk.load(&other), None, "{other:?} from a copied file");
        }
        let _ = std::fs::remove_dir_all(disk.dir());
    }

    /// Regression test for the desk-check's "a corrupt or stale entry is recompiled, never
    /// trusted": every way of damaging an entry makes it a miss, the program is compiled
    /// again, and the entry is rewritten whole.
    #[test]
    fn a_corrupt_entry_is_compiled_again_and_replaced() {
        let disk = temp_cache("corrupt");
        let k = key("__global__ void k(float* x) { x[0] = 1.0f; }", (12, 9));
        let good = program(b"\x7fELF the real image");
        disk.store(&k, &good).unwrap();
        let whole = std::fs::read(disk.path(&k)).unwrap();
        let image_at = whole.len() - good.image.len();
        let damaged: Vec<(&str, Vec<u8>)> = vec![
            ("truncated", whole[..whole.len() - 3].to_vec()),
            ("empty", Vec::new()),
            ("a byte of the image flipped", {
                let mut b = whole.clone();
                b[image_at + 5] ^= 0x20;
                b
            }),
            ("a byte of the header flipped", {
                let mut b = whole.clone();
                b[3] ^= 1;
                b
            }),
            ("bytes appended", {
                let mut b = whole.clone();
                b.extend_from_slice(b"junk");
                b
            }),
        ];
        for (how, bytes) in damaged {
            std::fs::write(disk.path(&k), &bytes).unwrap();
            assert_eq!(disk.load(&k), None, "{how}");
            let programs = Programs::default();
            let compiles = AtomicUsize::new(0);
            let (got, origin) = programs
                .get_or_compile(&k, Some(&disk), || {
                    compiles.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ()>(good.clone())
                })
                .unwrap();
            assert_eq!(
                (origin, compiles.load(Ordering::SeqCst)),
                (Origin::Compiled, 1),
                "{how}"
            );
            assert_eq!(*got, good, "{how}");
            assert_eq!(
                std::fs::read(disk.path(&k)).unwrap(),
                whole,
                "{how}: rewritten whole"
            );
            // A fresh process reads the rewritten entry instead of compiling.
            let (_, origin) = Programs::default()
                .get_or_compile(&k, Some(&disk), || Err(()))
                .unwrap();
            assert_eq!(origin, Origin::Disk, "{how}");
        }
        let _ = std::fs::remove_dir_all(disk.dir());
    }

    #[test]
    fn concurrent_requests_compile_once() {
        let disk = temp_cache("concurrent");
        let programs = Programs::default();
        let compiles = AtomicUsize::new(0);
        let k = key("__global__ void k() {}", (12, 9));
        let origins: Vec<Origin> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        programs
                            .get_or_compile(&k, Some(&disk), || {
                                compiles.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_millis(50));
                                Ok::<_, ()>(program(b"image"))
                            })
                            .map(|(_, origin)| origin)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert_eq!(compiles.load(Ordering::SeqCst), 1);
        assert_eq!(
            origins.iter().filter(|&&o| o == Origin::Compiled).count(),
            1
        );
        assert_eq!(origins.iter().filter(|&&o| o == Origin::Memory).count(), 7);
        let _ = std::fs::remove_dir_all(disk.dir());
    }

    #[test]
    fn a_failed_compile_is_not_remembered_and_an_unwritable_folder_costs_only_a_compile() {
        // A file where the folder should be: nothing can be stored.
        let blocked =
            std::env::temp_dir().join(format!("gpukit-kernel-cache-file-{}", std::process::id()));
        std::fs::write(&blocked, b"a file, not a folder").unwrap();
        let disk = DiskCache::at(blocked.join("kernels"));
        let programs = Programs::default();
        let k = key("__global__ void k() {}", (12, 9));
        assert_eq!(
            programs.get_or_compile(&k, Some(&disk), || Err::<Compiled, _>("no")),
            Err("no")
        );
        let (_, origin) = programs
            .get_or_compile(&k, Some(&disk), || Ok::<_, ()>(program(b"image")))
            .unwrap();
        assert_eq!(origin, Origin::Compiled);
        let (_, origin) = programs
            .get_or_compile(&k, Some(&disk), || Err(()))
            .unwrap();
        assert_eq!(origin, Origin::Memory);
        let _ = std::fs::remove_file(&blocked);
    }

    #[test]
    fn the_folder_follows_the_environment_variable() {
        // Reads only: the variable is not set by this test (the environment is process-wide).
        match std::env::var_os(CACHE_VAR) {
            Some(v) if v == "off" || v.is_empty() => assert_eq!(cache_dir(), None),
            Some(v) => assert_eq!(cache_dir(), Some(PathBuf::from(v))),
            None => {
                let dir = cache_dir();
                assert!(
                    dir.as_ref().is_none_or(|d| d.ends_with("gpukit/kernels")),
                    "{dir:?}"
                );
            }
        }
    }
}
