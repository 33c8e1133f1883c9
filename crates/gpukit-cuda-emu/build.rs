//! Gives the shared library the driver's `SONAME`, `libcuda.so.1`: the backend loads the
//! driver by absolute path and cudarc then opens it by name, which the dynamic loader
//! matches against the `SONAME`s of the libraries already loaded. The file itself is named
//! after the package (`libgpukit_cuda_emu.so`), so nothing in `target/*/deps`, which cargo
//! puts on test binaries' library path, carries an NVIDIA library name.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    }
}
