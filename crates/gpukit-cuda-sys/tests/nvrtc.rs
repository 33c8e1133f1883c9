//! NVRTC as the sys crate loads it: a good source compiles to PTX and to a cubin, a bad one
//! is a typed error with the compiler's log, and its builtins library is found. (The
//! built-in modules' own compile test is gpukit-cuda's, which owns them.) These run wherever libnvrtc can be found (a GPU is not needed: pip's
//! `nvidia-cuda-nvrtc-cu12` is enough) and print `SKIPPED: <reason>` elsewhere.

use std::io::Write;

use gpukit_cuda_sys::nvrtc::{nvrtc, NvrtcError, NvrtcLib, Target};

fn lib() -> Option<&'static NvrtcLib> {
    match nvrtc(None) {
        Ok(lib) => Some(lib),
        Err(e) => {
            // The real stderr: the test harness does not capture it, so the line shows.
            let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {e}");
            None
        }
    }
}

/// The version the CUDA emulator's NVRTC reports (gpukit-cuda-emu), which no real NVRTC has.
const EMULATED_NVRTC: (u32, u32) = (12, 99);

/// A small kernel compiles to PTX naming its entry point, and to an sm_90 cubin (an ELF file).
#[test]
fn a_kernel_compiles_to_ptx_and_to_a_cubin() {
    let Some(lib) = lib() else { return };
    println!("NVRTC {:?} from {}", lib.version, lib.loaded.path.display());
    if lib.version == EMULATED_NVRTC {
        // Its "PTX" and "cubin" are images only the emulated driver loads.
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED: the CUDA emulator's NVRTC makes no PTX text or ELF cubin"
        );
        return;
    }
    assert!(!lib.archs.is_empty());
    let src = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] = 1.0f; }";
    let ptx = match lib.compile(src, "k", Target::Ptx(8, 0), &[]) {
        Ok(out) => String::from_utf8_lossy(&out.image).into_owned(),
        Err(e) => panic!("PTX: {e}"),
    };
    assert!(ptx.contains(".entry k("), "{ptx}");
    if lib.archs.contains(&90) {
        match lib.compile(src, "k", Target::Sass(9, 0), &[]) {
            Ok(out) => assert_eq!(&out.image[..4], b"\x7fELF", "a cubin is an ELF file"),
            Err(e) => panic!("sm_90: {e}"),
        }
    }
}

#[test]
fn a_bad_source_is_a_compile_error_with_the_log() {
    let Some(lib) = lib() else { return };
    let src = "extern \"C\" __global__ void k(float *x) { x[0] = undefined_name; }";
    match lib.compile(src, "bad", Target::Ptx(8, 0), &[]) {
        Err(NvrtcError::Compile { log }) => {
            assert!(log.contains("undefined_name"), "{log}");
            assert!(log.contains("bad.cu"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert_eq!(
        lib.compile("a\0b", "nul", Target::Ptx(8, 0), &[]).err(),
        Some(NvrtcError::Nul)
    );
}

/// NVRTC's builtins library is loaded by absolute path, from NVRTC's own folder when it is
/// there (pip's wheels keep the two side by side), so a compile never depends on that folder
/// being on the loader's path.
#[test]
fn the_builtins_library_is_loaded_beside_nvrtc() {
    let Some(lib) = lib() else { return };
    let (major, minor) = lib.version;
    let want = format!("libnvrtc-builtins.so.{major}.{minor}");
    let beside = lib.loaded.path.with_file_name(&want);
    match &lib.builtins {
        Ok(path) => {
            assert_eq!(
                path.file_name().and_then(|n| n.to_str()),
                Some(want.as_str())
            );
            if beside.is_file() {
                assert_eq!(path, &beside);
            }
        }
        Err(why) => {
            assert!(!beside.is_file(), "{} exists but: {why}", beside.display());
            assert!(why.contains(&want), "{why}");
        }
    }
}

#[test]
fn targets_follow_the_supported_architectures() {
    let Some(lib) = lib() else { return };
    let newest = *lib.archs.last().unwrap_or(&0);
    // A device newer than anything NVRTC knows gets PTX for the newest architecture.
    assert_eq!(
        lib.target_for((99, 9)),
        Target::Ptx(newest / 10, newest % 10)
    );
    if lib.archs.contains(&90) {
        assert_eq!(lib.target_for((9, 0)), Target::Sass(9, 0));
    }
}
