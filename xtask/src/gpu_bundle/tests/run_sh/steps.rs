//! The steps after the tests: the doctor, the sanitizer steps (mixed binaries filtered to
//! their CUDA tests, CUDA ones run whole, a missing sanitizer), and the benchmarks with the
//! PyTorch comparator after them.

use super::*;

#[test]
fn the_doctor_step_prints_its_findings_and_fails_with_it() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("doctor");
    let bundle = fake_bundle(&tmp, &[("alpha", PASSING)]);
    let out = tmp.path().join("out");
    // Without the doctor in the bundle the step fails.
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--doctor"],
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("tools/cuda_doctor is not in the bundle"),
        "{stdout}"
    );
    script(
        &bundle.join("tools/cuda_doctor"),
        "echo 'FAILED (probe): no CUDA driver: libcuda was not found'\nexit 1\n",
    );
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--doctor"],
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("  FAILED (probe): no CUDA driver: libcuda was not found"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "doctor: ").starts_with("doctor: FAILED (exit 1, after "),
        "{stdout}"
    );
    // No test ran.
    assert!(!stdout.contains("alpha "), "{stdout}");
    // A second call into the same folder (a later step) adds its own files.
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        files_in(&out),
        [
            "doctor.logs.tar.gz",
            "doctor.summary.txt",
            "tests.logs.tar.gz",
            "tests.summary.txt"
        ]
    );
    let summary = fs::read_to_string(out.join("doctor.summary.txt")).unwrap();
    assert!(summary.contains("no CUDA driver"), "{summary}");
}

#[test]
fn sanitizer_steps_filter_mixed_binaries_and_run_cuda_ones_whole() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("sanitize");
    // `--list cuda` is how run.sh asks whether a binary has CUDA tests.
    let mixed = r#"
if [ "$1" = "--list" ]; then echo "a::cuda: test"; exit 0; fi
echo "args: $*"
echo "test a::cuda ... ok"
echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.01s"
"#;
    let cpu_only = r#"
if [ "$1" = "--list" ]; then echo "0 tests, 0 benchmarks"; exit 0; fi
echo "test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;
    // An unfiltered target (its tests lack `cuda` in their names): never listed, run whole.
    let nvrtc = r#"
if [ "$1" = "--list" ]; then echo "listed unexpectedly"; exit 1; fi
echo "args: $*"
echo "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;
    let bundle = fake_bundle(
        &tmp,
        &[("mixed", mixed), ("cpuonly", cpu_only), ("nvrtc", nvrtc)],
    );
    let fake_bin = tmp.path().join("fakebin");
    fs::create_dir_all(&fake_bin).unwrap();
    script(&fake_bin.join("compute-sanitizer"), FAKE_SANITIZER);
    let logs = tmp.path().join("logs");
    let out = tmp.path().join("out");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--sanitize", "all", "--logs", logs.to_str().unwrap()],
            path_prefix: Some(&fake_bin),
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 1, "{stdout}");
    for tool in ["memcheck", "racecheck", "synccheck"] {
        assert!(
            line(&stdout, &format!("==> {tool}: expected ")).contains("(an estimate)"),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "cpuonly                          {tool:<9} no CUDA tests"
            )),
            "{stdout}"
        );
        // The plain test run did not happen.
        assert!(!logs.join("mixed.log").exists());
    }
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("mixed ") || line.starts_with("nvrtc "))
        .collect();
    assert_eq!(rows.len(), 6, "{stdout}");
    assert!(rows[0].ends_with("ok"), "{}", rows[0]);
    assert!(
        rows[2].ends_with("FAILED (2 sanitizer errors)"),
        "{}",
        rows[2]
    );
    let memcheck = fs::read_to_string(logs.join("mixed.memcheck.log")).unwrap();
    assert!(
        memcheck.contains("sanitizer option: --report-api-errors no"),
        "{memcheck}"
    );
    assert!(
        memcheck.contains("sanitizer option: --error-exitcode 1"),
        "{memcheck}"
    );
    assert!(memcheck.contains("args: cuda --show-output"), "{memcheck}");
    let whole = fs::read_to_string(logs.join("nvrtc.memcheck.log")).unwrap();
    assert!(whole.contains("args: --show-output\n"), "{whole}");
    assert_eq!(
        line(&stdout, "run.sh: "),
        "run.sh: FAILED: 2 failed",
        "{stdout}"
    );
    assert_eq!(
        files_in(&out),
        [
            "memcheck-racecheck-synccheck.logs.tar.gz",
            "memcheck-racecheck-synccheck.summary.txt"
        ]
    );
}

#[test]
fn a_missing_sanitizer_fails_unless_skips_are_allowed() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("nosan");
    let bundle = fake_bundle(&tmp, &[("alpha", PASSING)]);
    let (code, stdout) = run_args(&bundle, &["--sanitize", "memcheck"]);
    if !stdout.contains("memcheck: not run: compute-sanitizer not found (searched ") {
        // This machine has a real compute-sanitizer; the missing case cannot be shown here.
        println!("SKIPPED: compute-sanitizer is installed here");
        return;
    }
    assert_eq!(code, 1, "{stdout}");
    assert!(
        verdict(&stdout).contains("memcheck: compute-sanitizer not found"),
        "{stdout}"
    );
    let (code, stdout) = run_args(&bundle, &["--sanitize", "memcheck", "--allow-skip"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn benchmarks_write_json_to_the_output_folder_eight_files_at_most() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("bench");
    let bundle = fake_bundle(&tmp, &[]);
    // More benchmarks than the output folder may hold; `$4` is the JSON file.
    for n in 0..7 {
        script(
            &bundle.join(format!("bench/b{n}_bench")),
            "echo \"bench args: $*\"\necho '{}' > \"$4\"\n",
        );
    }
    script(
        &bundle.join("bench/skip_bench"),
        "echo 'SKIPPED: no CUDA driver'\n",
    );
    let out = tmp.path().join("out");
    let logs = tmp.path().join("logs");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--bench", "--logs", logs.to_str().unwrap()],
            out: Some(&out),
            ..Call::default()
        },
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "bench args: --device cuda --json {}",
            logs.join("b0_bench.json").display()
        )),
        "{stdout}"
    );
    assert!(line(&stdout, "bench b0_bench: ").starts_with("bench b0_bench: ok ("));
    // Without --allow-skip a benchmark that skipped is a failure.
    assert!(
        stdout.contains("bench skip_bench: FAILED (it printed SKIPPED:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: b6_bench.json is only in the archive"),
        "{stdout}"
    );
    assert_fits_the_device_tool(&out);
    let names = files_in(&out);
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(names.contains(&"bench.summary.txt".to_owned()), "{names:?}");
    assert!(names.contains(&"b5_bench.json".to_owned()), "{names:?}");
    let archived = archive_names(&out.join("bench.logs.tar.gz"));
    assert!(
        archived.contains(&"b6_bench.json".to_owned()),
        "{archived:?}"
    );
    assert!(
        archived.contains(&"bench-skip_bench.log".to_owned()),
        "{archived:?}"
    );
}

/// A bundle with a fake `cuda_bench` and `pipeline_bench` that write a JSON report each.
fn bench_bundle(tmp: &TempDir) -> PathBuf {
    let bundle = fake_bundle(tmp, &[]);
    for name in ["cuda_bench", "pipeline_bench"] {
        script(&bundle.join("bench").join(name), "echo '[]' > \"$4\"\n");
    }
    bundle
}

#[test]
fn the_bench_step_runs_the_torch_comparator_on_the_reports() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("torch");
    let bundle = bench_bundle(&tmp);
    let logs = tmp.path().join("logs");
    let out = tmp.path().join("out");
    let bench = |fake_torch: &str| {
        let _ = fs::remove_dir_all(&out);
        run_sh(
            &bundle,
            Call {
                args: &["--bench", "--logs", logs.to_str().unwrap()],
                out: Some(&out),
                env: &[("TORCH_PYTHON", "bash"), ("FAKE_TORCH", fake_torch)],
                ..Call::default()
            },
        )
    };

    // An older bundle without the comparator: the step passes as before.
    let (code, stdout) = bench("runs");
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("torch comparator: not run (tools/torch_compare.py is not in the bundle)"),
        "{stdout}"
    );

    script(&bundle.join(TORCH_COMPARATOR), FAKE_COMPARATOR);
    // Torch on CUDA: it gets both reports, its table is in the summary, its JSON comes back.
    let (code, stdout) = bench("runs");
    assert_eq!(code, 0, "{stdout}");
    let log = |name: &str| logs.join(name).display().to_string();
    assert!(
        stdout.contains(&format!(
            "comparator args: --ours-cuda-bench {} --ours-pipeline-bench {} --json {}",
            log("cuda_bench.json"),
            log("pipeline_bench.json"),
            log("torch_compare.json")
        )),
        "{stdout}"
    );
    assert!(stdout.contains("add_f32_1024   host us/op"), "{stdout}");
    assert!(line(&stdout, "torch comparator: ").starts_with("torch comparator: ok ("));
    assert_eq!(verdict(&stdout), "run.sh: PASSED (bench)", "{stdout}");
    assert_fits_the_device_tool(&out);
    assert_eq!(
        files_in(&out),
        [
            "bench.logs.tar.gz",
            "bench.summary.txt",
            "cuda_bench.json",
            "pipeline_bench.json",
            "torch_compare.json"
        ]
    );
    let summary = fs::read_to_string(out.join("bench.summary.txt")).unwrap();
    assert!(summary.contains("add_f32_1024   host us/op"), "{summary}");
    assert!(
        archive_names(&out.join("bench.logs.tar.gz")).contains(&"bench-torch_compare.log".into())
    );

    // No torch (the machine without a GPU): not run, and the step still passes.
    let (code, stdout) = bench("absent");
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("torch comparator: not run (import torch failed: "),
        "{stdout}"
    );
    assert!(!stdout.contains("torch comparator: ok"), "{stdout}");
    assert!(!out.join("torch_compare.json").exists());

    // Torch on CUDA and a failure: the step fails, with the comparator's log.
    let (code, stdout) = bench("fails");
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("torch comparator: error: RuntimeError: CUDA error"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "torch comparator: FAILED").starts_with("torch comparator: FAILED (exit 1"),
        "{stdout}"
    );
    assert_eq!(verdict(&stdout), "run.sh: FAILED: 1 failed", "{stdout}");
    assert!(stdout.contains(&log("bench-torch_compare.log")), "{stdout}");

    // Without the Python it names: not run.
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--bench"],
            env: &[("TORCH_PYTHON", "no-such-python")],
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("torch comparator: not run (no-such-python not found)"),
        "{stdout}"
    );
}

/// Whether `python3` runs here; the comparator's own checks need it (not torch).
fn python_available() -> bool {
    let found = util::succeeds(Command::new("python3").arg("--version"));
    if !found {
        println!("SKIPPED: python3 not found");
    }
    found
}

#[test]
fn the_torch_comparator_passes_its_self_test_and_is_not_run_without_torch() {
    if !python_available() {
        return;
    }
    let script = util::workspace_root().join(TORCH_COMPARATOR_SOURCE);
    let out = Command::new("python3")
        .arg(&script)
        .arg("--self-test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("torch comparator self-test: ok ("),
        "{stdout}"
    );
    if !bash_available() {
        return;
    }
    let torch_on_cuda = Command::new("python3")
        .args([
            "-c",
            "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)",
        ])
        .output()
        .is_ok_and(|out| out.status.success());
    if torch_on_cuda {
        println!("SKIPPED: torch runs on CUDA here, so the comparator would measure for real");
        return;
    }
    // The real script in a bundle, with the real python3: where torch is missing it says so
    // in one line and the step passes.
    let tmp = TempDir::new("torchreal");
    let bundle = bench_bundle(&tmp);
    fs::copy(&script, bundle.join(TORCH_COMPARATOR)).unwrap();
    let (code, stdout) = run_args(&bundle, &["--bench"]);
    assert_eq!(code, 0, "{stdout}");
    let not_run = line(&stdout, "torch comparator: not run (");
    assert!(not_run.ends_with(')'), "{stdout}");
}
