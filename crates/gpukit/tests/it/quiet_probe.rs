//! Probing Vulkan costs `auto` nothing where it cannot find a GPU, and prints nothing a
//! program did not ask for. `auto` does not start Vulkan where no adapter can be a GPU (no
//! GPU device node). Without a display session (`XDG_RUNTIME_DIR` unset, a server or a CI
//! job), Mesa's device-select layer used to make libwayland-client print `error:
//! XDG_RUNTIME_DIR is invalid or not set in the environment.` twice on stderr whenever the
//! adapters were listed. A child process of this test binary, without the variable, opens
//! `auto` and `vulkan`; its stderr must not hold the message.

use crate::common;

use gpukit::{Context, DeviceSpec};

const MARKER: &str = "GPUKIT_QUIET_PROBE_CHILD";

#[test]
fn probing_vulkan_without_a_session_is_quiet() {
    if std::env::var_os(MARKER).is_some() {
        // The child: the probe runs here, for the first time in this process.
        let auto = Context::new(DeviceSpec::Auto).expect("auto opens some device");
        println!("auto: {}", auto.backend_name());
        match Context::new(DeviceSpec::Vulkan(None)) {
            Ok(ctx) => println!("vulkan: {}", ctx.info().name),
            Err(e) => println!("vulkan: {e}"),
        }
        return;
    }
    if common::vulkan().is_none() {
        // Without a Vulkan driver there is no layer to be loud (common::vulkan said why).
        return;
    }
    let test = common::test_path(module_path!(), "probing_vulkan_without_a_session_is_quiet");
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args(["--exact", &test, "--test-threads=1", "--nocapture"])
        .env(MARKER, "1")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("the child test runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    print!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "the child failed; its output is above"
    );
    assert!(stdout.contains("1 passed"), "the child ran nothing");
    assert!(stdout.contains("vulkan: "), "the child opened nothing");
    assert!(
        !stderr.contains("XDG_RUNTIME_DIR"),
        "the probe printed a driver's noise: {stderr}"
    );
}

/// Whether this machine has a GPU device node or a Vulkan driver override (the cases where
/// `auto` must start Vulkan to know).
fn may_have_a_gpu() -> bool {
    let has = |dir: &str, keep: fn(&str) -> bool| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| keep(&e.file_name().to_string_lossy()))
        })
    };
    ["VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
        || has("/dev/dri", |n| n.starts_with("renderD"))
        || has("/dev", |n| {
            n == "dxg"
                || n.strip_prefix("nvidia")
                    .is_some_and(|r| r.parse::<u32>().is_ok())
        })
}

#[test]
fn auto_without_a_gpu_does_not_start_vulkan() {
    let ctx = Context::new(DeviceSpec::Auto).expect("auto opens some device");
    if ctx.backend_name() != "cpu" {
        println!("note: auto chose {}; nothing to check", ctx.backend_name());
        return;
    }
    let vulkan = ctx
        .selection()
        .rejected
        .iter()
        .find(|r| r.backend == "vulkan")
        .expect("auto on the CPU says why Vulkan was rejected");
    let reason = vulkan.reason.to_string();
    if cfg!(target_os = "linux") && !may_have_a_gpu() {
        assert!(
            reason.contains("auto did not start Vulkan") && reason.contains("no GPU device node"),
            "{reason}"
        );
    } else {
        println!("note: a GPU device node or a driver override here: auto probed ({reason})");
    }
}
