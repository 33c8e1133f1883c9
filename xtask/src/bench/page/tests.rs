//! Tests of the benchmarks page: a run's record round-trips through `run.json`, and the
//! page from sample reports states the run and shows every figure in its place.

use std::fs;
use std::path::PathBuf;

use serde_json::json;

use super::*;
use crate::bench::table;

/// A fresh, empty folder for one test's reports.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-bench-page-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn info() -> RunInfo {
    RunInfo {
        date: "2026-11-26 10:00:00 UTC".into(),
        commit: "0123abcd (plus uncommitted changes)".into(),
        rustc: "rustc 1.99.0".into(),
        machine: vec![
            ("CPU".into(), "AMD EPYC 7B13, 2 logical CPUs".into()),
            ("GPU".into(), "none found (no working `nvidia-smi`)".into()),
        ],
        quick: true,
        load_start: "0.50 0.60 0.70".into(),
        load_end: "1.50 1.00 0.80".into(),
        runs: vec![
            Run {
                program: "transfer_bench".into(),
                args: vec!["--max-mib".into(), "16".into()],
                report: "transfer_bench".into(),
            },
            Run {
                program: "cuda_bench".into(),
                args: Vec::new(),
                report: "cuda_bench".into(),
            },
        ],
    }
}

#[test]
fn the_run_record_round_trips() {
    let info = info();
    assert_eq!(RunInfo::from_json(&info.to_json()), Ok(info));
    let err = RunInfo::from_json(&json!({"date": "today"})).unwrap_err();
    assert!(err.contains("commit"), "{err}");
}

#[test]
fn the_page_states_the_run_and_shows_the_figures() {
    let dir = folder("sample");
    let write = |name: &str, value: Value| {
        fs::write(dir.join(format!("{name}.json")), value.to_string()).unwrap();
    };
    let copy = |kind: &str, bytes: u64, ratio: f64| {
        json!({"backend": "cpu", "kind": kind, "bytes": bytes, "seconds": 1e-5,
               "gbps": 6.5, "memcpy_seconds": 2e-5, "ratio_vs_memcpy": ratio})
    };
    write(
        "transfer_bench",
        json!([
            copy("d2d", 64 << 10, 0.85),
            copy("upload_pinned", 64 << 10, 0.5),
            copy("d2d", 1 << 20, 1.01),
        ]),
    );
    write(
        "ops_bench",
        json!([
            {"bench": "roofline", "backend": "cpu", "op": "add", "bytes": 1 << 20,
             "memcpy_gbps": 48.7, "ratio_vs_memcpy": 0.86},
            {"bench": "gemm", "key": "ours", "implementation": "ours (cpu)", "device": "cpu",
             "n": 256, "gflops": 120.9, "ratio_vs_numpy": 0.7, "time_ratio_vs_numpy": 1.43},
            {"bench": "gemm", "key": "numpy", "implementation": "numpy a @ b", "device": "host",
             "n": 256, "gflops": 172.7, "ratio_vs_numpy": 1.0},
            {"bench": "numpy", "available": false, "reason": "ModuleNotFoundError"},
        ]),
    );
    write(
        "graph_bench",
        json!([{"backend": "cpu", "device": "cpu", "ops": 100, "eager_us_per_op": 0.25,
                "replay_us_per_op": 0.01, "ratio_eager_vs_replay": 25.0}]),
    );
    write(
        "allreduce_bench",
        json!([
            {"bench": "all_reduce", "backend": "cpu", "implementation": "in-process",
             "devices": "cpu:0,1", "ranks": 2, "bytes": 1 << 20, "busbw_gbps": 2.5,
             "memcpy_gbps": 10.0, "peer_copy_gbps": 8.0, "busbw_vs_memcpy": 0.25,
             "model_one_lane": 0.2, "model_parallel": null},
            {"bench": "data_parallel", "backend": "cpu", "devices": "cpu:0,1", "ranks": 2,
             "epochs": 20, "single_rows_per_s": 400000.4, "group_rows_per_s": 300000.0,
             "ratio_vs_single": 0.75, "call_ratio_vs_single": 0.8},
        ]),
    );
    fs::write(dir.join("enqueue_bench.json"), "[{not json").unwrap();
    let reports = table::Reports {
        transfer: dir.join("transfer_bench.json"),
        dir: dir.clone(),
    };
    let rows = table::rows(&reports);
    let page = render(&info(), &rows, &reports);

    // The run: machine, date, commit, mode, load, and what each program left.
    for line in [
        "| date | 2026-11-26 10:00:00 UTC |",
        "| commit | 0123abcd (plus uncommitted changes) |",
        "| CPU | AMD EPYC 7B13, 2 logical CPUs |",
        "| rustc | rustc 1.99.0 |",
        "| load average (1, 5, 15 min) | 0.50 0.60 0.70 at the start, 1.50 1.00 0.80 at the end |",
        "| transfer_bench | `--max-mib 16` | transfer_bench.json, 3 records |",
        "| cuda_bench | - | none: it skipped (no GPU here) or failed |",
    ] {
        assert!(page.contains(line), "no line {line:?} in\n{page}");
    }
    assert!(page.contains("| mode | quick (`cargo xtask bench --quick`)"));

    // Targets, with their verdicts.
    assert!(page.contains("| d2d 64 KiB vs memcpy | cpu | 0.850x | >= 0.8x | holds |"));
    assert!(page.contains("| upload_pinned 64 KiB vs memcpy | cpu | 0.500x | >= 0.8x | MISSED |"));
    assert!(page.contains(
        "| op enqueue vs cuLaunchKernel | cuda | - | <= 1.1x | n/a (no cuda_bench.json (skipped or not run)) |"
    ));

    // The figures, one table per report: sizes as columns, a row per kind.
    assert!(page.contains(
        "| ratio vs memcpy | 64 KiB | 1 MiB |\n|---|---:|---:|\n\
         | memcpy GB/s | 3.3 | 52.4 |\n| d2d | 0.85 | 1.01 |\n| upload_pinned | 0.50 | - |\n"
    ));
    assert!(page.contains(
        "| GFLOP/s, n = | 256 |\n|---|---:|\n| ours (cpu) | 120.9 |\n\
                           | our time / numpy's | 1.43x |\n| numpy a @ b | 172.7 |\n"
    ));
    assert!(page.contains("| cpu | cpu | 100 | 0.250 | 0.010 | 25.0 |"));
    assert!(page.contains("\nnumpy: not measured (ModuleNotFoundError)\n"));
    assert!(page.contains("| add | 0.86 |"));
    assert!(page.contains(
        "| per rank | 1 MiB |\n|---|---:|\n| memcpy GB/s | 10.00 |\n| peer copy GB/s | 8.00 |\n\
         | in-process busbw GB/s, 2 ranks | 2.50 |\n| busbw / memcpy | 0.250 |\n\
         | expected busbw / memcpy, 1 lane | 0.200 |\n\
         | expected busbw / memcpy, parallel | - |\n"
    ));
    assert!(page.contains("| cpu:0,1 | 2 | 20 | 400000 | 300000 | 0.750 | 0.800 |"));
    assert!(page.contains("No figures: no allreduce_bench_cuda.json (skipped or not run)."));
    assert!(page.contains("No figures: no transfer_bench_vulkan.json (skipped or not run)."));
    assert!(page.contains("No figures: no pipeline_bench_cuda.json (skipped or not run)."));
    let unreadable = page
        .lines()
        .find(|l| l.starts_with("No figures:") && l.contains("enqueue_bench.json"))
        .unwrap_or_else(|| panic!("no enqueue line in\n{page}"));
    assert!(
        !unreadable.contains("no enqueue_bench.json"),
        "{unreadable}"
    );

    // The fixed text: generated, how to regenerate, the comparator's link.
    assert!(page.starts_with("# Benchmarks\n\n<!-- Generated by `cargo xtask bench --write-docs`"));
    assert!(page.contains("[GPU-RUNS.md](GPU-RUNS.md)"));
    assert!(page.ends_with("without torch.\n"));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prose_wraps_at_the_width() {
    assert_eq!(wrap("a bb ccc dddd", 6), "a bb\nccc\ndddd\n");
    assert_eq!(wrap("  ", 6), "");
    let text = INTRO.to_owned() + &wrap(SECTIONS[0].about, WIDTH);
    assert!(
        text.lines().all(|line| line.chars().count() <= WIDTH),
        "{text}"
    );
}

#[test]
fn the_grid_orders_columns_by_number_and_rows_as_they_come() {
    let cells = [
        Cell::sized("b", 1 << 20, "2".into()),
        Cell::sized("a", 4 << 10, "1".into()),
        Cell::sized("b", 4 << 10, "3".into()),
    ];
    assert_eq!(
        grid("x", &cells),
        "| x | 4 KiB | 1 MiB |\n|---|---:|---:|\n| b | 3 | 2 |\n| a | 1 | - |\n"
    );
}
