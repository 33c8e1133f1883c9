//! The benchmarks of a short plan: `--quick` and `--max-mib` shape each benchmark's
//! arguments, the comparator runs after every step and, under `--quick`, only with the time
//! it needs; the benchmarks run before the sanitizers.

use std::fs;
use std::path::{Path, PathBuf};

use super::{bash_available, fake_bundle, files_in, line, run_sh, script, verdict, Call};
use super::{TempDir, FAKE_COMPARATOR, FAKE_SANITIZER};
use crate::gpu_bundle::{BENCH_PROGRAMS, TORCH_COMPARATOR};

/// A test binary with a CUDA test, listed by `--list cuda` (as the sanitizer steps ask).
const MIXED: &str = r#"
if [ "$1" = "--list" ]; then echo "a::cuda: test"; exit 0; fi
echo "test a::cuda ... ok"
echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
"#;

/// A bundle with every benchmark of [`BENCH_PROGRAMS`] (each prints its arguments and
/// writes its JSON report, `$4`), the fake comparator and a passing test binary.
fn bench_bundle(tmp: &TempDir) -> PathBuf {
    let bundle = fake_bundle(tmp, &[("alpha", MIXED)]);
    for name in BENCH_PROGRAMS {
        script(
            &bundle.join("bench").join(name),
            "echo \"$(basename \"$0\") args: $*\"\necho '[]' > \"$4\"\n",
        );
    }
    script(&bundle.join(TORCH_COMPARATOR), FAKE_COMPARATOR);
    bundle
}

/// Runs `run.sh` with the fake comparator on CUDA (`FAKE_TORCH=runs`).
fn bench(bundle: &Path, logs: &Path, args: &[&str]) -> (i32, String) {
    let mut all = vec!["--logs", logs.to_str().unwrap()];
    all.extend(args);
    run_sh(
        bundle,
        Call {
            args: &all,
            env: &[("TORCH_PYTHON", "bash"), ("FAKE_TORCH", "runs")],
            ..Call::default()
        },
    )
}

/// The arguments benchmark `name` printed.
fn args_of<'a>(stdout: &'a str, name: &str) -> &'a str {
    line(stdout, &format!("{name} args: ")).trim_start_matches(&format!("{name} args: "))
}

#[test]
fn quick_shortens_the_benchmarks_and_max_mib_sets_their_largest_transfer() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("quick");
    let bundle = bench_bundle(&tmp);
    let logs = tmp.path().join("logs");
    let json = |name: &str| logs.join(format!("{name}.json")).display().to_string();

    let (code, stdout) = bench(&bundle, &logs, &["--bench", "--quick"]);
    assert_eq!(code, 0, "{stdout}");
    let cuda_json = json("cuda_bench");
    assert_eq!(
        args_of(&stdout, "cuda_bench"),
        format!("--device cuda --json {cuda_json} --max-mib 256")
    );
    assert_eq!(
        args_of(&stdout, "transfer_bench"),
        format!(
            "--device cuda --json {} --max-mib 256",
            json("transfer_bench")
        )
    );
    assert_eq!(
        args_of(&stdout, "pipeline_bench"),
        format!("--device cuda --json {} --quick", json("pipeline_bench"))
    );
    assert_eq!(
        args_of(&stdout, "graph_bench"),
        format!("--device cuda --json {}", json("graph_bench"))
    );
    // allreduce_bench reads `--device cuda` as every CUDA device.
    assert_eq!(
        args_of(&stdout, "allreduce_bench"),
        format!("--device cuda --json {} --quick", json("allreduce_bench"))
    );
    // The default budget leaves the comparator its time.
    assert!(line(&stdout, "torch comparator: ").starts_with("torch comparator: ok ("));
    assert!(
        line(&stdout, "bench:  ")
            .starts_with("bench:  --quick: cuda_bench and transfer_bench to 256 MiB"),
        "{stdout}"
    );

    // --max-mib over --quick's 256; pipeline_bench stays quick.
    let (code, stdout) = bench(&bundle, &logs, &["--bench", "--quick", "--max-mib", "64"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(args_of(&stdout, "cuda_bench").ends_with(" --max-mib 64"));
    assert!(args_of(&stdout, "transfer_bench").ends_with(" --max-mib 64"));
    assert!(args_of(&stdout, "pipeline_bench").ends_with(" --quick"));

    // --max-mib alone: the benchmarks in full but for the largest transfer.
    let (code, stdout) = bench(&bundle, &logs, &["--bench", "--max-mib=2048"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        args_of(&stdout, "cuda_bench"),
        format!("--device cuda --json {cuda_json} --max-mib 2048")
    );
    assert!(!args_of(&stdout, "pipeline_bench").contains("--quick"));
    assert!(!args_of(&stdout, "allreduce_bench").contains("--quick"));

    // In full, no size is imposed.
    let (code, stdout) = bench(&bundle, &logs, &["--bench"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        args_of(&stdout, "cuda_bench"),
        format!("--device cuda --json {cuda_json}")
    );
}

#[test]
fn under_quick_the_comparator_runs_only_with_the_time_it_needs() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("quicktime");
    let bundle = bench_bundle(&tmp);
    let logs = tmp.path().join("logs");
    let (code, stdout) = bench(&bundle, &logs, &["--bench", "--quick", "--budget", "60"]);
    assert_eq!(
        code, 0,
        "a comparator left out for time fails nothing: {stdout}"
    );
    let not_run = line(&stdout, "torch comparator: ");
    assert!(
        not_run.starts_with("torch comparator: not run (time: ")
            && not_run.ends_with(" s left, needs about 90)"),
        "{stdout}"
    );
    assert!(!stdout.contains("comparator args:"), "{stdout}");
    assert_eq!(verdict(&stdout), "run.sh: PASSED (bench)");

    // Without --quick it is run as before, whatever the budget (and cut if need be).
    let (code, stdout) = bench(&bundle, &logs, &["--bench", "--budget", "60"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(line(&stdout, "torch comparator: ").starts_with("torch comparator: ok ("));
}

#[test]
fn the_benchmarks_run_before_the_sanitizers_and_the_comparator_after_them() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("steporder");
    let bundle = bench_bundle(&tmp);
    let fake_bin = tmp.path().join("fakebin");
    fs::create_dir_all(&fake_bin).unwrap();
    script(&fake_bin.join("compute-sanitizer"), FAKE_SANITIZER);
    let out = tmp.path().join("out");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--sanitize", "memcheck", "--bench", "--quick", "--tests"],
            path_prefix: Some(&fake_bin),
            out: Some(&out),
            env: &[("TORCH_PYTHON", "bash"), ("FAKE_TORCH", "runs")],
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    let at = |text: &str| {
        stdout
            .find(text)
            .unwrap_or_else(|| panic!("no {text:?}:\n{stdout}"))
    };
    assert!(at("==> tests: ") < at("==> bench: "));
    assert!(at("==> bench: ") < at("==> memcheck: "));
    assert!(at("==> memcheck: ") < at("==> torch_compare: "));
    assert!(at("alpha                            memcheck") < at("comparator args:"));
    assert_eq!(
        line(&stdout, "steps:  "),
        "steps:  tests bench memcheck, then the torch comparator"
    );
    assert_eq!(verdict(&stdout), "run.sh: PASSED (tests bench memcheck)");
    // Summary, archive, five benchmark reports and the comparator's: all 8 files. Under
    // --quick the comparator runs before startup_bench and allreduce_bench, whose reports
    // are only in the archive.
    assert_eq!(
        files_in(&out),
        [
            "cuda_bench.json",
            "graph_bench.json",
            "kernel_bench.json",
            "pipeline_bench.json",
            "tests-bench-memcheck.logs.tar.gz",
            "tests-bench-memcheck.summary.txt",
            "torch_compare.json",
            "transfer_bench.json"
        ]
    );
    assert!(at("comparator args:") < at("allreduce_bench args:"));
    assert!(stdout.contains(
        "note: allreduce_bench.json is only in the archive (8 files at most go to the output folder)"
    ), "{stdout}");
}

#[test]
fn under_quick_one_gpu_runs_no_one_rank_allreduce_after_the_comparator() {
    if !bash_available() {
        return;
    }
    let tmp = TempDir::new("onegpu");
    let bundle = bench_bundle(&tmp);
    let fake_bin = tmp.path().join("fakebin");
    fs::create_dir_all(&fake_bin).unwrap();
    script(
        &fake_bin.join("nvidia-smi"),
        "case \"$*\" in -L) echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)' ;; *) echo '0, NVIDIA H200' ;; esac\n",
    );
    let logs = tmp.path().join("logs");
    let (code, stdout) = run_sh(
        &bundle,
        Call {
            args: &["--bench", "--quick", "--logs", logs.to_str().unwrap()],
            path_prefix: Some(&fake_bin),
            env: &[("TORCH_PYTHON", "bash"), ("FAKE_TORCH", "runs")],
            ..Call::default()
        },
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        line(&stdout, "bench allreduce_bench: "),
        "bench allreduce_bench: not run (--quick, one GPU: a one-rank all-reduce measures no collective)"
    );
    let at = |text: &str| {
        stdout
            .find(text)
            .unwrap_or_else(|| panic!("no {text:?}:\n{stdout}"))
    };
    assert!(at("comparator args:") < at("startup_bench args:"));
}
