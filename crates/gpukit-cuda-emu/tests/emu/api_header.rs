//! The device API header's own test (`runtime/tests/api_test.cpp`): a standalone C++ program
//! that checks `gkemu_api.h` (intrinsics, conversions, math, 16-bit floats, atomics) against
//! references worked out without the header. Built here with the host's compiler as its
//! own comment says, and run.

use std::path::Path;
use std::process::Command;

#[test]
fn api_test_cpp_compiles_runs_and_passes_every_check() {
    if crate::skip_without_cxx() {
        return;
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let runtime = crate_dir.join("runtime");
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gkemu-api-test-{}", std::process::id()));
    let cxx = if Command::new("g++")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        "g++"
    } else {
        "clang++"
    };
    let out = Command::new(cxx)
        .args(["-std=c++17", "-O1", "-w", "-I"])
        .arg(&runtime)
        .arg("-I")
        .arg(runtime.join("include"))
        .arg(runtime.join("tests").join("api_test.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the C++ compiler runs");
    assert!(
        out.status.success(),
        "api_test.cpp did not compile with {cxx}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("api_test runs");
    let _ = std::fs::remove_file(&exe);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        run.status.success(),
        "api_test exited with {}; its output is above",
        run.status
    );
    // The program's summary line: "api_test: all N checks passed", with N > 0.
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("api_test: all ") && l.ends_with(" checks passed"))
        .unwrap_or_else(|| panic!("api_test printed no success summary:\n{stdout}"));
    let n: u64 = summary
        .trim_start_matches("api_test: all ")
        .trim_end_matches(" checks passed")
        .parse()
        .expect("the summary counts the checks");
    assert!(n > 0, "api_test ran no checks: {summary}");
    assert!(!stdout.contains("FAILED"), "{stdout}");
}
