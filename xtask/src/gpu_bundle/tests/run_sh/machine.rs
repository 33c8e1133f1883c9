//! What run.sh does about the machine: the doctor's preflight (information that fails
//! nothing and never hangs), the sanitizer steps under gVisor or on a device that
//! compute-sanitizer refuses (not run, failing nothing), and the binaries the sanitizers
//! leave out because they fault on purpose.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{bash_available, fake_bundle, line, run_sh, script, verdict, Call};
use super::{TempDir, FAKE_SANITIZER};
use crate::gpu_test::UNFILTERED_TARGETS;

/// A test binary with a CUDA test, listed by `--list cuda`; it prints its arguments.
const MIXED: &str = r#"
if [ "$1" = "--list" ]; then echo "a::cuda: test"; exit 0; fi
echo "args: $*"
echo "test a::cuda ... ok"
echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;

/// A folder of fake tools, prepended to PATH: each (name, body) a script.
pub(super) fn fake_tools(tmp: &TempDir, tools: &[(&str, &str)]) -> PathBuf {
    let dir = tmp.path().join("fakebin");
    fs::create_dir_all(&dir).unwrap();
    for (name, body) in tools {
        script(&dir.join(name), body);
    }
    dir
}

/// `nvidia-smi` as an H100 machine answers: the query, and the banner with the CUDA version.
const FAKE_NVIDIA_SMI: &str = r#"
case "$*" in
    *--query-gpu=*compute_cap*) echo "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 9.0" ;;
    *--query-gpu=*) echo "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB" ;;
    *) echo "| NVIDIA-SMI 580.159.04     Driver Version: 580.159.04     CUDA Version: 13.0     |" ;;
esac
"#;

/// compute-sanitizer's `--version`, and a run as [`FAKE_SANITIZER`] does.
fn versioned_sanitizer() -> String {
    format!(
        "if [ \"$1\" = --version ]; then printf 'NVIDIA (R) Compute Sanitizer\\nCopyright (c) \
         2020-2025 NVIDIA Corporation\\nVersion 2025.3.1.0 (build 36398583)\\n'; exit 0; fi\n\
         {FAKE_SANITIZER}"
    )
}

#[test]
fn the_preflight_reports_the_machine_and_fails_nothing() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("preflight");
    let bundle = fake_bundle(&tmp, &[]);
    script(&bundle.join("tools/cuda_doctor"), "echo 'doctor ran'\n");
    let sanitizer = versioned_sanitizer();
    let tools = fake_tools(
        &tmp,
        &[
            ("nvidia-smi", FAKE_NVIDIA_SMI),
            ("compute-sanitizer", &sanitizer),
            ("python3", "echo '2.11.0+cu130 CUDA 13.0'\n"),
        ],
    );
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--doctor"],
            path_prefix: Some(&tools),
            env: &[
                ("NVIDIA_TF32_OVERRIDE", "0"),
                ("CUDA_VISIBLE_DEVICES", ""),
                ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
                ("RUN_SH_KERNEL_RELEASE", "6.18.44-fc-v310-gpu"),
            ],
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    let preflight = stdout
        .split("preflight (information; it fails nothing):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no preflight:\n{stdout}"));
    assert!(
        preflight.contains("doctor ran"),
        "the preflight comes before the doctor: {stdout}"
    );
    let expected = [
        "  kernel:                6.18.44-fc-v310-gpu ",
        "  gpu:                   0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 9.0 \
         (index, name, driver, memory, compute capability)",
        "  CUDA (nvidia-smi):     13.0",
        "  compute-sanitizer:     ",
        "  NVIDIA_TF32_OVERRIDE:  '0'",
        "  CUDA_VISIBLE_DEVICES:  ''",
        "  LD_LIBRARY_PATH:       '/usr/local/cuda/lib64'",
        "  torch (python3):       2.11.0+cu130 CUDA 13.0",
    ];
    for (line, start) in preflight.lines().zip(expected) {
        assert!(
            line.starts_with(start),
            "{line:?} is not {start:?}:\n{stdout}"
        );
    }
    assert!(
        line(preflight, "  kernel:").ends_with("(gVisor: no)"),
        "{stdout}"
    );
    let sanitizer_line = line(preflight, "  compute-sanitizer:");
    assert!(
        sanitizer_line.ends_with("/compute-sanitizer (Version 2025.3.1.0 (build 36398583))"),
        "{sanitizer_line}"
    );
    assert!(
        line(&stdout, "doctor: ").starts_with("doctor: ok ("),
        "{stdout}"
    );

    // On gVisor, with nothing installed: the same lines, saying so; still nothing fails.
    let tools = fake_tools(
        &tmp,
        &[("python3", "echo 'No module named torch' >&2\nexit 1\n")],
    );
    fs::remove_file(tools.join("nvidia-smi")).unwrap();
    fs::remove_file(tools.join("compute-sanitizer")).unwrap();
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--doctor"],
            path_prefix: Some(&tools),
            env: &[("RUN_SH_KERNEL_RELEASE", "4.4.0")],
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(
        line(&stdout, "  kernel:").contains(
            "(gVisor: yes: compute-sanitizer cannot attach to the GPU here, the sanitizer \
             steps are not run)"
        ),
        "{stdout}"
    );
    assert_eq!(
        line(&stdout, "  torch (python3):"),
        "  torch (python3):       not available (No module named torch)"
    );
    if !stdout.contains("  compute-sanitizer:     /") {
        // (This machine may have a real one.)
        assert!(
            line(&stdout, "  compute-sanitizer:")
                .contains("not found (searched $COMPUTE_SANITIZER, PATH"),
            "{stdout}"
        );
    }
}

#[test]
fn a_preflight_probe_that_hangs_is_cut_within_the_budget() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("preflighthang");
    let bundle = fake_bundle(&tmp, &[]);
    script(&bundle.join("tools/cuda_doctor"), "echo 'doctor ran'\n");
    let tools = fake_tools(
        &tmp,
        &[("nvidia-smi", "sleep 60\n"), ("python3", "sleep 60\n")],
    );
    let started = Instant::now();
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--doctor", "--budget", "4"],
            path_prefix: Some(&tools),
            ..Call::default()
        },
    );
    assert!(
        started.elapsed().as_secs() < 20,
        "a probe was not cut: {stdout}"
    );
    let gpu = line(&stdout, "  gpu:");
    assert!(
        gpu.contains("nvidia-smi gave no answer within ") && gpu.ends_with(" s"),
        "{stdout}"
    );
    let torch = line(&stdout, "  torch (python3):");
    assert!(
        torch.contains("not available (no answer within "),
        "{stdout}"
    );
    // The budget went to the probes, so the doctor did not start: that, not the preflight,
    // fails the call.
    assert_eq!(code, 1, "{stdout}");
    assert!(
        verdict(&stdout).contains("1 programs not started"),
        "{stdout}"
    );
}

/// A bundle with a mixed binary and the binaries the sanitizers leave out, and a fake
/// compute-sanitizer (`body`).
fn sanitizer_bundle(tmp: &TempDir, body: &str) -> (PathBuf, PathBuf) {
    let left_out: Vec<(&str, &str)> = UNFILTERED_TARGETS
        .iter()
        .filter(|target| !target.sanitize)
        .map(|target| (target.name, MIXED))
        .collect();
    assert!(!left_out.is_empty(), "cuda_poison faults on purpose");
    let mut tests = vec![("mixed", MIXED), ("other", MIXED)];
    tests.extend(left_out);
    let bundle = fake_bundle(tmp, &tests);
    let tools = fake_tools(tmp, &[("compute-sanitizer", body)]);
    (bundle, tools)
}

#[test]
fn the_sanitizers_leave_out_what_faults_on_purpose_and_the_tests_run_it() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("leftout");
    let (bundle, tools) = sanitizer_bundle(&tmp, FAKE_SANITIZER);
    let logs = tmp.path().join("logs");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &[
                "--tests",
                "--sanitize",
                "memcheck",
                "--logs",
                logs.to_str().unwrap(),
            ],
            path_prefix: Some(&tools),
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(
        line(&stdout, "cuda_poison                      tests ").ends_with(" ok"),
        "{stdout}"
    );
    assert_eq!(
        line(&stdout, "cuda_poison                      memcheck "),
        "cuda_poison                      memcheck  not run: it faults on purpose, which \
         memcheck reports by design (xtask's gpu_test::UNFILTERED_TARGETS)"
    );
    assert!(!logs.join("cuda_poison.memcheck.log").exists());
    assert!(logs.join("mixed.memcheck.log").is_file());
    assert_eq!(verdict(&stdout), "run.sh: PASSED (tests memcheck)");
}

#[test]
fn under_gvisor_no_sanitizer_step_runs_and_none_fails() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("gvisor");
    let (bundle, tools) = sanitizer_bundle(&tmp, FAKE_SANITIZER);
    let logs = tmp.path().join("logs");
    for tools in [Some(tools.as_path()), None::<&Path>] {
        // With compute-sanitizer or without it, and without --allow-skip.
        let (code, stdout) = run_sh(
            &bundle,
            Call {
                args: &["--sanitize", "all", "--logs", logs.to_str().unwrap()],
                path_prefix: tools,
                env: &[("RUN_SH_KERNEL_RELEASE", "4.4.0")],
                ..Call::default()
            },
        );
        assert_eq!(code, 0, "{stdout}");
        for tool in ["memcheck", "racecheck", "synccheck"] {
            assert_eq!(
                line(&stdout, &format!("{tool}: ")),
                format!(
                    "{tool}: not run: gVisor (kernel 4.4.0): compute-sanitizer cannot attach \
                     to the GPU there"
                )
            );
        }
        assert!(!logs.join("mixed.memcheck.log").exists());
        assert_eq!(
            verdict(&stdout),
            "run.sh: PASSED (memcheck racecheck synccheck)"
        );
    }
}

#[test]
fn a_sanitizer_that_refuses_the_device_stops_its_step_and_fails_nothing() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("refused");
    // What compute-sanitizer said on gVisor; the program then fails its first allocation.
    let refusing = r#"
echo "========= Error: Device not supported. Please refer to the compute-sanitizer documentation"
echo "test a::cuda ... FAILED"
echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
exit 1
"#;
    let (bundle, tools) = sanitizer_bundle(&tmp, refusing);
    let logs = tmp.path().join("logs");
    let out = tmp.path().join("out");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--sanitize", "memcheck", "--logs", logs.to_str().unwrap()],
            path_prefix: Some(&tools),
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    // The first binary of the default order that is sanitized: cuda_poison is left out.
    let refused = line(&stdout, "mixed ");
    assert!(
        refused.contains("memcheck  not run: compute-sanitizer refused the device (after "),
        "{stdout}"
    );
    assert!(
        line(
            &stdout,
            "memcheck: stopped: compute-sanitizer refused the device"
        )
        .ends_with("mixed.memcheck.log); it fails nothing"),
        "{stdout}"
    );
    // The step stopped: the next binary did not run.
    assert!(!logs.join("other.memcheck.log").exists(), "{stdout}");
    assert!(
        !stdout.lines().any(|line| line.starts_with("other ")),
        "{stdout}"
    );
    assert_eq!(verdict(&stdout), "run.sh: PASSED (memcheck)");
    assert_eq!(line(&stdout, "0 passed"), "0 passed, 0 failed");
    // Its log is in the archive, for a reader to check the refusal.
    assert!(super::archive_names(&out.join("memcheck.logs.tar.gz"))
        .contains(&"mixed.memcheck.log".to_owned()));
}

#[test]
fn nccl_from_the_pythons_site_packages_is_linked_as_libnccl_so() {
    if !bash_available() {
        return;
    }
    // The loader's cache has no NCCL on the lent machines (nor here, as a rule): pip's
    // wheel sits in a virtual environment's site-packages, which Python names.
    let ldconfig_has_nccl = std::process::Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q libnccl"])
        .status()
        .is_ok_and(|s| s.success());
    if ldconfig_has_nccl {
        return;
    }
    let tmp = TempDir::new("ncclsite");
    let bundle = fake_bundle(&tmp, &[]);
    let site = tmp.path().join("venv/site-packages/nvidia/nccl");
    fs::create_dir_all(site.join("lib")).unwrap();
    fs::write(site.join("lib/libnccl.so.2"), "").unwrap();
    let python = format!("echo '{}'\n", site.display());
    let tools = fake_tools(&tmp, &[("python3", &python)]);
    let (_, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--tests", "--budget", "30"],
            path_prefix: Some(&tools),
            ..Call::default()
        },
    );
    assert_eq!(
        line(&stdout, "nccl:"),
        format!(
            "nccl:   libnccl.so -> {}/lib/libnccl.so.2 (a link first on LD_LIBRARY_PATH)",
            site.display()
        ),
        "{stdout}"
    );
}
