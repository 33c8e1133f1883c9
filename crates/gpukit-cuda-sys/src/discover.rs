//! Finding and loading CUDA's shared libraries by absolute path.
//!
//! Each library is looked for, in this order, in:
//! 1. the folders of `LD_LIBRARY_PATH`;
//! 2. `$CUDA_HOME`, `$CUDA_PATH` and `$CUDA_ROOT` (their `lib64`, `lib` and
//!    `targets/<arch>-linux/lib`), then `/usr/local/cuda` and every `/usr/local/cuda-*`
//!    (newest first), the same way;
//! 3. the dynamic loader's cache (`ldconfig -p`);
//! 4. the system library folders (`/usr/lib/x86_64-linux-gnu`, `/usr/lib64`, WSL's
//!    `/usr/lib/wsl/lib`, ...);
//! 5. the `nvidia/*/lib` folders of Python's site-packages, where pip-installed CUDA lives
//!    (the interpreter's own site folders, `$VIRTUAL_ENV`, `$CONDA_PREFIX`, and the usual
//!    system and user locations).
//!
//! Folders named `stubs` are never used: their `libcuda.so` is a link-time stub whose every
//! call fails. The first file that loads wins, except that for NVRTC and cuBLAS a library
//! whose CUDA major version is newer than the driver's is taken only when nothing else loads
//! (the driver cannot run what it produces).
//!
//! A library is loaded with `dlopen(absolute path, RTLD_NOW | RTLD_GLOBAL)` and never
//! unloaded. Loading it by path first matters for cudarc, which opens libraries by name:
//! the dynamic loader matches a name against the libraries already loaded (by their
//! `SONAME`), so cudarc gets the very library found here instead of searching again.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The CUDA libraries gpukit-cuda-sys knows how to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lib {
    /// The driver, `libcuda.so.1` (installed with the kernel driver, not the toolkit).
    Driver,
    /// NVRTC, the run-time CUDA C compiler, `libnvrtc.so.<major>`.
    Nvrtc,
    /// cuBLAS, `libcublas.so.<major>`.
    Cublas,
    /// cuBLASLt, `libcublasLt.so.<major>`, which cuBLAS itself needs.
    CublasLt,
}

impl Lib {
    /// Every library, in the order a backend needs them.
    pub const ALL: [Lib; 4] = [Lib::Driver, Lib::Nvrtc, Lib::CublasLt, Lib::Cublas];

    /// The library's stem (`cuda`, `nvrtc`, ...).
    pub const fn stem(self) -> &'static str {
        match self {
            Lib::Driver => "cuda",
            Lib::Nvrtc => "nvrtc",
            Lib::Cublas => "cublas",
            Lib::CublasLt => "cublasLt",
        }
    }

    /// The file names tried in every folder, most wanted first.
    pub fn file_names(self) -> Vec<String> {
        let stem = self.stem();
        match self {
            Lib::Driver => vec![format!("lib{stem}.so.1"), format!("lib{stem}.so")],
            Lib::Nvrtc | Lib::Cublas | Lib::CublasLt => {
                let mut names: Vec<String> =
                    MAJORS.iter().map(|m| format!("lib{stem}.so.{m}")).collect();
                if self == Lib::Nvrtc {
                    // CUDA 11.2 to 11.8 named it after the minor version that introduced it.
                    names.push(format!("lib{stem}.so.11.2"));
                }
                names.push(format!("lib{stem}.so"));
                names
            }
        }
    }

    /// Where pip puts the library inside `site-packages/nvidia/`.
    const fn pip_folder(self) -> &'static str {
        match self {
            Lib::Driver => "",
            Lib::Nvrtc => "cuda_nvrtc",
            Lib::Cublas | Lib::CublasLt => "cublas",
        }
    }
}

impl fmt::Display for Lib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lib{}", self.stem())
    }
}

/// CUDA major versions whose libraries are looked for, newest first.
const MAJORS: [u32; 3] = [13, 12, 11];

/// A library that was found and loaded.
#[derive(Debug)]
pub struct Loaded {
    /// Which library.
    pub lib: Lib,
    /// The absolute path it was loaded from.
    pub path: PathBuf,
    /// The CUDA major version in its file name (`libnvrtc.so.12` is 12), if the name has one.
    pub major: Option<u32>,
    /// The open handle; the library stays loaded for the life of the process.
    pub(crate) handle: libloading::Library,
}

/// Why a library could not be loaded: every place searched and what each attempt said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibError {
    /// The library.
    pub lib: Lib,
    /// Every folder searched, in order.
    pub searched: Vec<PathBuf>,
    /// Files that exist but did not load, with the dynamic loader's message.
    pub failures: Vec<(PathBuf, String)>,
}

impl fmt::Display for LibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.failures.is_empty() {
            write!(f, "{} was not found", self.lib)?;
        } else {
            write!(f, "{} was found but did not load:", self.lib)?;
            for (i, (path, message)) in self.failures.iter().enumerate() {
                let sep = if i == 0 { " " } else { "; " };
                write!(f, "{sep}{} ({message})", path.display())?;
            }
        }
        let names = self.lib.file_names().join(", ");
        write!(
            f,
            "; looked for {names} in {} folders: ",
            self.searched.len()
        )?;
        for (i, dir) in self.searched.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", dir.display())?;
        }
        Ok(())
    }
}

impl std::error::Error for LibError {}

/// The folders searched for `lib`, in order, without duplicates. Only folders that exist are
/// listed (plus every `LD_LIBRARY_PATH` entry, which the user named on purpose).
pub fn search_dirs(lib: Lib) -> Vec<PathBuf> {
    let mut dirs = Dirs::default();
    // 1. LD_LIBRARY_PATH, as the dynamic loader would.
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        for dir in std::env::split_paths(&paths) {
            dirs.push_always(dir);
        }
    }
    // 2. The toolkit's folders.
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(home) = std::env::var_os(var) {
            dirs.toolkit(Path::new(&home));
        }
    }
    dirs.toolkit(Path::new("/usr/local/cuda"));
    let mut versioned = glob_dirs(Path::new("/usr/local"), |name| name.starts_with("cuda-"));
    versioned.sort_by_key(|dir| std::cmp::Reverse(version_key(dir)));
    for home in versioned {
        dirs.toolkit(&home);
    }
    // 3. The loader's cache.
    for path in ld_cache(lib) {
        if let Some(dir) = path.parent() {
            dirs.push(dir.to_path_buf());
        }
    }
    // 4. System folders.
    for dir in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/local/lib",
        "/usr/lib/wsl/lib",
        "/usr/local/nvidia/lib64",
    ] {
        dirs.push(PathBuf::from(dir));
    }
    // 5. pip's nvidia/*/lib folders.
    if lib != Lib::Driver {
        for site in site_packages() {
            dirs.push(site.join("nvidia").join(lib.pip_folder()).join("lib"));
            // CUDA 13's wheels put everything under nvidia/cu13/lib.
            for dir in glob_dirs(&site.join("nvidia"), |name| name.starts_with("cu1")) {
                dirs.push(dir.join("lib"));
            }
        }
    }
    dirs.list
}

/// Finds and loads `lib`. With `max_major`, a file whose CUDA major version is newer is
/// taken only when nothing else loads.
pub fn load(lib: Lib, max_major: Option<u32>) -> Result<Loaded, LibError> {
    load_from(lib, &search_dirs(lib), max_major)
}

/// Loads `lib` from the first of `dirs` that has a loadable copy (see [`load`]).
pub fn load_from(lib: Lib, dirs: &[PathBuf], max_major: Option<u32>) -> Result<Loaded, LibError> {
    // Files of an allowed major version first, in search order, then the newer ones.
    let (mut order, too_new): (Vec<PathBuf>, Vec<PathBuf>) = candidates(lib, dirs)
        .into_iter()
        .partition(|path| match (max_major, major_of(path)) {
            (Some(max), Some(m)) => m <= max,
            _ => true,
        });
    order.extend(too_new);
    let mut failures = Vec::new();
    for path in order {
        match open(&path) {
            Ok(handle) => {
                let major = major_of(&path);
                return Ok(Loaded {
                    lib,
                    path,
                    major,
                    handle,
                });
            }
            Err(message) => failures.push((path, message)),
        }
    }
    Err(LibError {
        lib,
        searched: dirs.to_vec(),
        failures,
    })
}

/// NVRTC's builtins library for NVRTC `version` (`libnvrtc-builtins.so.<major>.<minor>`),
/// loaded by absolute path: first from the folder of `nvrtc` (the NVRTC library in use),
/// then from the other folders NVRTC is looked for in. NVRTC opens it by that name on its
/// first compile, and the dynamic loader matches the name against this already loaded copy
/// (its `SONAME`), so NVRTC finds it even where its folder is not on the loader's path.
///
/// Returns the path and the handle (keep it: the library must stay loaded), or a message
/// naming the file and every folder looked in.
pub fn load_nvrtc_builtins(
    nvrtc: &Path,
    version: (u32, u32),
) -> Result<(PathBuf, libloading::Library), String> {
    let name = format!("libnvrtc-builtins.so.{}.{}", version.0, version.1);
    let mut dirs = Dirs::default();
    if let Some(dir) = nvrtc.parent() {
        dirs.push_always(dir.to_path_buf());
        // The usual case, without listing the other folders (which asks Python for its
        // site-packages).
        if let Ok(found) = load_named(&name, &dirs.list) {
            return Ok(found);
        }
    }
    for dir in search_dirs(Lib::Nvrtc) {
        dirs.push(dir);
    }
    load_named(&name, &dirs.list)
}

/// Loads the first file called `name` in `dirs` that loads (see [`load_nvrtc_builtins`]).
fn load_named(name: &str, dirs: &[PathBuf]) -> Result<(PathBuf, libloading::Library), String> {
    let mut failures = Vec::new();
    for dir in dirs {
        let path = dir.join(name);
        if !path.is_file() {
            continue;
        }
        match open(&path) {
            Ok(handle) => return Ok((path, handle)),
            Err(message) => failures.push(format!("{} ({message})", path.display())),
        }
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut message = if failures.is_empty() {
        format!("{name} was not found")
    } else {
        format!("{name} was found but did not load: {}", failures.join("; "))
    };
    message.push_str(&format!(
        " in {} folders: {}",
        looked.len(),
        looked.join(", ")
    ));
    Err(message)
}

/// Files named like `lib` in `dirs`, in search order (each real file once).
pub fn candidates(lib: Lib, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut out = Vec::new();
    for dir in dirs {
        for name in lib.file_names() {
            let path = dir.join(&name);
            if !path.is_file() {
                continue;
            }
            let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if !seen.contains(&real) {
                seen.push(real);
                out.push(path);
            }
        }
    }
    out
}

/// Opens a library by absolute path with `RTLD_NOW | RTLD_GLOBAL`.
fn open(path: &Path) -> Result<libloading::Library, String> {
    // SAFETY: loading a library runs its initialisers. The CUDA libraries' initialisers only
    // set up their own state; the path was found by name in folders CUDA is installed in.
    let lib = unsafe {
        libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL)
    };
    lib.map(libloading::Library::from)
        .map_err(|e| e.to_string())
}

/// Builds a generated binding struct (`make` is its `from_library`) on a second handle to
/// an already loaded library; the error is the loader's message, naming a missing symbol.
///
/// # Safety
///
/// `make` must declare the library's functions with their true C signatures (bindgen's
/// translation of the library's own header).
pub(crate) unsafe fn bind<T>(
    loaded: &Loaded,
    make: impl FnOnce(libloading::Library) -> Result<T, libloading::Error>,
) -> Result<T, String> {
    // The loader counts references: this handle is the same library, opened again.
    open(&loaded.path).and_then(|lib| make(lib).map_err(|e| e.to_string()))
}

/// `libnvrtc.so.12` -> 12; `libnvrtc.so.11.2` -> 11; `libnvrtc.so` -> None.
fn major_of(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let (_, version) = name.split_once(".so.")?;
    version.split('.').next()?.parse().ok()
}

/// `/usr/local/cuda-12.4` -> (12, 4), for newest-first ordering.
fn version_key(path: &Path) -> (u32, u32) {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let v = name.trim_start_matches("cuda-");
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Sub-folders of `dir` whose names pass `keep`.
fn glob_dirs(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// The paths the loader's cache (`ldconfig -p`) has for `lib`. The cache is listed once
/// per process (every library's search reads it).
fn ld_cache(lib: Lib) -> Vec<PathBuf> {
    static LISTING: OnceLock<String> = OnceLock::new();
    let listing = LISTING.get_or_init(|| {
        ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
            .iter()
            .find_map(|exe| Command::new(exe).arg("-p").output().ok())
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default()
    });
    parse_ld_cache(listing, &lib.file_names())
}

/// Parses `ldconfig -p` lines like `\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1`.
pub(crate) fn parse_ld_cache(text: &str, names: &[String]) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let (name, path) = line.trim().split_once(" => ")?;
            let name = name.split_whitespace().next()?;
            let arch_ok = !line.contains("(libc6)") || cfg!(target_pointer_width = "32");
            (arch_ok && names.iter().any(|n| n == name)).then(|| PathBuf::from(path.trim()))
        })
        .collect()
}

/// Python site-packages folders that may hold pip's `nvidia/*` packages, found once per
/// process (starting an interpreter takes tens of milliseconds).
fn site_packages() -> Vec<PathBuf> {
    static FOLDERS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    FOLDERS.get_or_init(find_site_packages).clone()
}

fn find_site_packages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    // The interpreters' own idea, which covers pyenv, virtual environments and user sites.
    for python in ["python3", "python"] {
        let script = "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)";
        if let Ok(output) = Command::new(python).args(["-c", script]).output() {
            if output.status.success() {
                for line in String::from_utf8_lossy(&output.stdout).lines() {
                    out.push(PathBuf::from(line.trim()));
                }
                break;
            }
        }
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    roots.extend(["/usr/local/lib", "/usr/lib", "/opt/conda/lib"].map(PathBuf::from));
    for root in roots {
        for py in glob_dirs(&root, |n| n.starts_with("python3")) {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    out
}

/// An ordered folder list without duplicates or `stubs` folders.
#[derive(Default)]
struct Dirs {
    list: Vec<PathBuf>,
}

impl Dirs {
    fn push(&mut self, dir: PathBuf) {
        if dir.is_dir() {
            self.push_always(dir);
        }
    }

    fn push_always(&mut self, dir: PathBuf) {
        let stub = dir.file_name() == Some(OsString::from("stubs").as_os_str());
        if !stub && !dir.as_os_str().is_empty() && !self.list.contains(&dir) {
            self.list.push(dir);
        }
    }

    /// A toolkit root's library folders.
    fn toolkit(&mut self, home: &Path) {
        self.push(home.join("lib64"));
        self.push(home.join("lib"));
        self.push(home.join(format!("targets/{}-linux/lib", std::env::consts::ARCH)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_prefer_versioned_names() {
        assert_eq!(Lib::Driver.file_names()[0], "libcuda.so.1");
        let nvrtc = Lib::Nvrtc.file_names();
        assert_eq!(nvrtc.first().map(String::as_str), Some("libnvrtc.so.13"));
        assert!(nvrtc.contains(&"libnvrtc.so.11.2".to_string()));
        assert_eq!(nvrtc.last().map(String::as_str), Some("libnvrtc.so"));
    }

    #[test]
    fn majors_are_read_from_file_names() {
        assert_eq!(major_of(Path::new("/x/libnvrtc.so.12")), Some(12));
        assert_eq!(major_of(Path::new("/x/libnvrtc.so.11.2")), Some(11));
        assert_eq!(major_of(Path::new("/x/libnvrtc.so")), None);
        assert_eq!(version_key(Path::new("/usr/local/cuda-12.4")), (12, 4));
    }

    #[test]
    fn ld_cache_lines_are_parsed() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n\
            \tlibcudart.so.12 (libc6,x86-64) => /usr/lib/libcudart.so.12\n";
        let found = parse_ld_cache(text, &Lib::Driver.file_names());
        assert_eq!(
            found,
            vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")]
        );
    }

    #[test]
    fn stubs_and_duplicates_are_skipped() {
        let mut dirs = Dirs::default();
        dirs.push_always(PathBuf::from("/a/lib64"));
        dirs.push_always(PathBuf::from("/a/lib64/stubs"));
        dirs.push_always(PathBuf::from("/a/lib64"));
        assert_eq!(dirs.list, vec![PathBuf::from("/a/lib64")]);
    }

    #[test]
    fn a_missing_library_reports_every_folder_and_failure() {
        let tmp = std::env::temp_dir().join(format!("cuda-sys-discover-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&tmp);
        // A file with the right name that is not a library: found, fails to load.
        let fake = tmp.join("libcuda.so.1");
        let _ = std::fs::write(&fake, b"not an ELF file");
        let dirs = vec![tmp.clone(), PathBuf::from("/nonexistent/cuda/lib64")];
        let err = load_from(Lib::Driver, &dirs, None).err();
        let _ = std::fs::remove_dir_all(&tmp);
        let Some(err) = err else {
            panic!("a text file loaded as libcuda");
        };
        assert_eq!(err.searched, dirs);
        assert_eq!(err.failures.len(), 1);
        assert_eq!(err.failures[0].0, fake);
        let text = err.to_string();
        assert!(text.contains("did not load"), "{text}");
        assert!(text.contains("/nonexistent/cuda/lib64"), "{text}");
    }

    #[test]
    fn a_missing_builtins_library_names_the_file_and_the_folders() {
        let tmp = std::env::temp_dir().join(format!("cuda-sys-builtins-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&tmp);
        // A file with the right name that is not a library: found, fails to load.
        let _ = std::fs::write(tmp.join("libnvrtc-builtins.so.12.9"), b"not an ELF file");
        let dirs = vec![PathBuf::from("/nonexistent/nvrtc/lib"), tmp.clone()];
        let err = load_named("libnvrtc-builtins.so.12.9", &dirs).err();
        let missing = load_named("libnvrtc-builtins.so.13.1", &dirs).err();
        let _ = std::fs::remove_dir_all(&tmp);
        let err = err.unwrap_or_default();
        assert!(err.contains("did not load"), "{err}");
        assert!(err.contains("/nonexistent/nvrtc/lib"), "{err}");
        let missing = missing.unwrap_or_default();
        assert!(
            missing.starts_with("libnvrtc-builtins.so.13.1 was not found in 2 folders"),
            "{missing}"
        );
    }

    #[test]
    fn newer_majors_are_a_last_resort() {
        let tmp = std::env::temp_dir().join(format!("cuda-sys-major-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&tmp);
        for name in ["libnvrtc.so.13", "libnvrtc.so.12"] {
            let _ = std::fs::write(tmp.join(name), b"x");
        }
        let found = candidates(Lib::Nvrtc, std::slice::from_ref(&tmp));
        let err = load_from(Lib::Nvrtc, std::slice::from_ref(&tmp), Some(12)).err();
        let _ = std::fs::remove_dir_all(&tmp);
        assert_eq!(found.len(), 2);
        // Both fail to load (they are not libraries); the allowed major is tried first.
        let tried: Vec<_> = err.map(|e| e.failures).unwrap_or_default();
        let names: Vec<_> = tried.iter().filter_map(|(p, _)| p.file_name()).collect();
        assert_eq!(names, ["libnvrtc.so.12", "libnvrtc.so.13"]);
    }
}
