//! Tests of the summary table: targets, rows from sample reports, load averages.

use super::*;

/// A fresh, empty folder for one test's reports.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-bench-table-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn reports(dir: &Path) -> Reports {
    Reports {
        transfer: dir.join("transfer_bench.json"),
        dir: dir.to_path_buf(),
    }
}

fn find<'a>(rows: &'a [Row], name: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
}

#[test]
fn targets_compare_in_their_direction() {
    assert!(at_least(0.9).holds(0.9));
    assert!(at_least(0.9).holds(1.2));
    assert!(!at_least(0.9).holds(0.899));
    assert!(at_most(1.1).holds(1.1));
    assert!(at_most(1.1).holds(0.5));
    assert!(!at_most(1.1).holds(1.11));
    assert!(!at_least(0.9).holds(f64::NAN));
    assert!(!at_most(1.1).holds(f64::NAN));

    let row = |value, target| Row::new("r".into(), "cpu", value, Unit::Ratio, target);
    assert_eq!(
        row(Some(2.0), Some(at_least(1.8))).verdict(),
        Verdict::Holds
    );
    assert_eq!(
        row(Some(1.0), Some(at_least(1.8))).verdict(),
        Verdict::Missed
    );
    assert_eq!(row(Some(1.0), None).verdict(), Verdict::Info);
    assert_eq!(
        row(None, Some(at_least(1.8))).verdict(),
        Verdict::NotAvailable
    );
    // A NaN (a `null` in a report) is no value, not a miss.
    assert_eq!(
        row(Some(f64::NAN), Some(at_most(1.3))).verdict(),
        Verdict::NotAvailable
    );
}

#[test]
fn missing_reports_leave_one_na_row_per_group() {
    let dir = folder("missing");
    let rows = rows(&reports(&dir));
    assert_eq!(rows.len(), groups().len());
    assert!(rows.iter().all(|r| r.verdict() == Verdict::NotAvailable));
    let cuda = find(&rows, "op enqueue vs cuLaunchKernel");
    assert_eq!(cuda.device, "cuda");
    assert_eq!(cuda.target, Some(at_most(1.1)));
    assert_eq!(
        cuda.note.as_deref(),
        Some("no cuda_bench.json (skipped or not run)")
    );
    let table = render(&rows, "0.10 0.20 0.30", "0.40 0.50 0.60");
    assert!(table.contains("at start: 0.10 0.20 0.30; at end: 0.40 0.50 0.60"));
    assert!(table.contains("targets: 0 hold, 0 MISSED, 14 n/a; 11 figures without a target"));
    let summary = to_json(&rows, "a", "b");
    assert_eq!(summary["rows"][0]["holds"], "n/a");
    assert_eq!(summary["rows"][0]["value"], Value::Null);
    assert_eq!(summary["rows"][0]["comparison"], ">=");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn records_become_rows_with_their_targets() {
    let dir = folder("records");
    let write = |name: &str, v: Value| {
        fs::write(dir.join(format!("{name}.json")), v.to_string()).unwrap();
    };
    let copy = |kind: &str, bytes: u64, ratio: f64| json!({"backend": "cpu", "kind": kind, "bytes": bytes, "ratio_vs_memcpy": ratio});
    write(
        "transfer_bench",
        json!([
            copy("d2d", 4 << 10, 0.05),
            copy("d2d", 64 << 10, 0.85),
            copy("upload_pinned", 1 << 20, 0.85),
            copy("download_pinned", 16 << 20, 1.01),
            copy("add", 16 << 20, 1.5),
        ]),
    );
    let point = |pattern: &str, ratio: f64, batch: u64, speedup: f64, of_bound: f64| {
        json!({"backend": "cpu", "pattern": pattern, "ratio": ratio, "batch_bytes": batch,
               "speedup_vs_sequential": speedup, "efficiency": 0.9,
               "fraction_of_machine_bound": of_bound})
    };
    write(
        "pipeline_bench",
        json!([
            point("triple", 1.0, 1 << 20, 0.95, 0.4),
            point("triple", 1.0, 16 << 20, 2.1, 0.9),
            point("triple", 0.25, 16 << 20, 1.2, 0.5),
            point("double", 1.0, 16 << 20, 1.7, 0.5),
            point("triple", 1.0, 256 << 10, 0.9, 0.5),
        ]),
    );
    write(
        "enqueue_bench",
        json!([
            {"backend": "cpu", "name": "add_f32_1024 via core vs Backend::launch of its kernel", "ours_ns": 500.0, "baseline_ns": 400.0, "ratio": 1.25},
            {"backend": "cpu", "name": "add_f32_1024 via facade with 2 streams vs Backend::launch of its kernel", "ours_ns": 600.0, "baseline_ns": 400.0, "ratio": 1.5},
            {"backend": "cpu", "name": "a closure kernel via Stream::launch vs Backend::launch of it", "ours_ns": 700.0, "baseline_ns": 400.0, "ratio": 1.75},
            {"backend": "cpu", "name": "add_f32_1024 via facade vs torch.add", "ours_ns": 500.0, "baseline_ns": 4000.0, "ratio": 0.125},
        ]),
    );
    write(
        "cuda_bench",
        json!([
            {"bench": "transfer", "kind": "upload_pinned", "bytes": 4 << 20, "ratio_vs_raw": 0.5},
            {"bench": "transfer", "kind": "upload_pinned", "bytes": 16 << 20, "ratio_vs_raw": 0.99},
            {"bench": "transfer", "kind": "download_pageable", "bytes": 16 << 20, "ratio_vs_raw": 0.5},
            {"bench": "enqueue", "kind": "add_f32_1024", "ratio_vs_raw": null},
        ]),
    );
    write(
        "cuda_bench_emu",
        json!([
            {"bench": "transfer", "kind": "upload_pinned", "bytes": 1 << 20, "ratio_vs_raw": 1.0},
            {"bench": "enqueue", "kind": "add_f32_1024", "ratio_vs_raw": 2.7, "over_raw_ns": 1103.0},
            {"bench": "enqueue", "kind": "add_f32_1024_vs_evented", "ratio_vs_raw": 1.4, "over_raw_ns": 540.0},
            {"bench": "enqueue", "kind": "add_f32_1024_one_stream", "ratio_vs_raw": 1.2, "over_raw_ns": 196.0},
            {"bench": "enqueue", "kind": "add_f64_1024_one_stream", "ratio_vs_raw": 0.7, "over_raw_ns": -531.0},
            {"bench": "enqueue", "kind": "upload_pinned_4k", "ratio_vs_raw": 1.2, "over_raw_ns": 240.0},
            {"bench": "enqueue", "kind": "add_f32_1024_vs_builder", "ratio_vs_raw": 0.5, "over_raw_ns": -3300.0},
            {"bench": "enqueue", "kind": "add_f32_1024_one_stream_vs_builder", "ratio_vs_raw": 1.3, "over_raw_ns": 260.0},
            {"bench": "enqueue", "kind": "upload_pinned_4k_vs_memcpy_htod", "ratio_vs_raw": 0.7, "over_raw_ns": -1200.0},
        ]),
    );
    write(
        "ops_bench",
        json!([
            {"bench": "roofline", "backend": "cpu", "op": "add", "bytes": 1 << 20, "ratio_vs_memcpy": 0.6},
            {"bench": "gemm", "key": "ours", "implementation": "ours (cpu)", "device": "cpu",
             "n": 256, "gflops": 100.0, "ratio_vs_numpy": null},
            {"bench": "gemm", "key": "ours", "implementation": "ours (cpu)", "device": "cpu",
             "n": 512, "gflops": 100.0, "ratio_vs_numpy": 0.8, "time_ratio_vs_numpy": 1.25,
             "time_ratio_vs_torch": null, "time_ratio_vs_fastest": 1.25},
            {"bench": "gemm", "key": "gemm_rayon", "implementation": "gemm crate", "device": "host",
             "n": 256, "gflops": 200.0, "ratio_vs_numpy": null},
            {"bench": "numpy", "available": false},
        ]),
    );
    fs::write(dir.join("graph_bench.json"), "[{not json").unwrap();
    let rows = rows(&reports(&dir));

    let small = find(&rows, "d2d 64 KiB vs memcpy");
    assert_eq!(
        (small.target, small.verdict()),
        (Some(at_least(0.8)), Verdict::Holds)
    );
    let mib = find(&rows, "upload_pinned 1 MiB vs memcpy");
    assert_eq!(
        (mib.target, mib.verdict()),
        (Some(at_least(0.9)), Verdict::Missed)
    );
    assert_eq!(
        find(&rows, "download_pinned 16 MiB vs memcpy").verdict(),
        Verdict::Holds
    );
    // Below 64 KiB, and the op, have no copy target.
    assert!(!rows
        .iter()
        .any(|r| r.name.starts_with("d2d 4 KiB") || r.name.starts_with("add ")));

    let p1 = find(
        &rows,
        "triple buffering, ratio 1, 1 MiB batches: speedup vs sequential",
    );
    assert_eq!((p1.device.as_str(), p1.verdict()), ("cpu", Verdict::Missed));
    let p16 = find(
        &rows,
        "triple buffering, ratio 1, 16 MiB batches: speedup vs sequential",
    );
    assert_eq!(p16.verdict(), Verdict::Holds);
    let b1 = find(
        &rows,
        "triple buffering, ratio 1, 1 MiB batches: fraction of the machine's bound",
    );
    assert_eq!(
        (b1.target, b1.verdict()),
        (Some(at_least(0.85)), Verdict::Missed)
    );
    let b16 = find(
        &rows,
        "triple buffering, ratio 1, 16 MiB batches: fraction of the machine's bound",
    );
    assert_eq!(b16.verdict(), Verdict::Holds);
    assert_eq!(
        rows.iter()
            .filter(|r| r.name.starts_with("triple buffering") && r.device == "cpu")
            .count(),
        4
    );

    let torch = find(&rows, "enqueue add_f32_1024 via facade vs torch.add");
    assert_eq!(
        (torch.target, torch.verdict()),
        (Some(at_most(0.25)), Verdict::Holds)
    );
    assert_eq!(
        find(
            &rows,
            "enqueue add_f32_1024 via core vs Backend::launch of its kernel"
        )
        .verdict(),
        Verdict::Holds
    );
    // Two streams: the target is 1.6.
    let two = find(
        &rows,
        "enqueue add_f32_1024 via facade with 2 streams vs Backend::launch of its kernel",
    );
    assert_eq!(
        (two.target, two.verdict()),
        (Some(at_most(1.6)), Verdict::Holds)
    );
    let launch = find(
        &rows,
        "enqueue a closure kernel via Stream::launch vs Backend::launch of it",
    );
    assert_eq!(
        (launch.target, launch.verdict()),
        (Some(at_most(1.3)), Verdict::Missed)
    );

    assert_eq!(
        find(&rows, "upload_pinned 16 MiB vs raw cudarc").verdict(),
        Verdict::Holds
    );
    assert!(!rows
        .iter()
        .any(|r| r.name.contains("4 MiB vs raw") || r.name.contains("pageable")));
    // A null ratio is n/a, not a miss.
    assert_eq!(
        find(
            &rows,
            "enqueue add_f32_1024 (2 streams) vs raw cuLaunchKernel"
        )
        .verdict(),
        Verdict::NotAvailable
    );
    // On the emulator only the host cost counts, in nanoseconds: the target is against
    // cudarc's safe API; over the bare driver calls it is information.
    let emu = |name: &str| {
        find(
            &rows,
            &format!("host cost of {name} (CUDA emulator: host-only)"),
        )
    };
    let bare = emu("add_f32_1024 (2 streams) over raw cuLaunchKernel");
    assert_eq!(
        (
            bare.device.as_str(),
            bare.value_text(),
            bare.target.is_none()
        ),
        ("cuda-emu", "1103 ns".to_string(), true)
    );
    assert!(emu("upload_pinned_4k over raw cuMemcpyHtoDAsync")
        .target
        .is_none());
    assert!(emu("add_f32_1024 (1 stream) over raw cuLaunchKernel")
        .target
        .is_none());
    assert!(
        emu("add_f32_1024 (2 streams) over raw cuLaunchKernel + cuEventRecord")
            .target
            .is_none()
    );
    // Below zero is a figure (both loops are gated): ours costs less.
    let builder = emu("add_f32_1024 (2 streams) over cudarc launch_builder");
    assert_eq!(
        (
            builder.value_text(),
            builder.target_text(),
            builder.verdict()
        ),
        (
            "-3300 ns".to_string(),
            "<= 250 ns".to_string(),
            Verdict::Holds
        )
    );
    assert_eq!(
        emu("add_f32_1024 (1 stream) over cudarc launch_builder").verdict(),
        Verdict::Missed
    );
    assert_eq!(
        emu("upload_pinned_4k over cudarc memcpy_htod").verdict(),
        Verdict::Holds
    );
    assert_eq!(
        emu("add_f64_1024 (1 stream) over raw cuLaunchKernel").value_text(),
        "-531 ns"
    );
    assert!(!rows
        .iter()
        .any(|r| r.device == "cuda-emu" && r.unit != Unit::Ns));
    // CUDA pipelines and graphs were not run: their groups are n/a.
    assert_eq!(
        find(&rows, "triple buffering, ratio 1: speedup vs sequential").verdict(),
        Verdict::NotAvailable
    );
    // An unreadable report is n/a, and says why.
    let graph = rows
        .iter()
        .find(|r| r.device == "cpu" && r.name == "host cost per op, eager / graph replay")
        .unwrap();
    assert_eq!(graph.verdict(), Verdict::NotAvailable);
    assert!(graph.note.as_deref().unwrap().contains("graph_bench.json"));

    let roof = find(&rows, "op add on 1 MiB vs memcpy");
    assert_eq!((roof.verdict(), roof.value), (Verdict::Info, Some(0.6)));
    let gemm = find(&rows, "gemm 256^3 f32: gemm crate");
    assert_eq!((gemm.unit, gemm.device.as_str()), (Unit::Gflops, "host"));
    // Without numpy's time, no ratio row; from n = 512 the ratio has its target.
    assert!(!rows
        .iter()
        .any(|r| r.name.starts_with("gemm 256^3 f32: our time")));
    let ratio = find(&rows, "gemm 512^3 f32: our time / numpy's");
    assert_eq!(
        (ratio.target, ratio.verdict()),
        (Some(at_most(1.1)), Verdict::Missed)
    );

    let summary = to_json(&rows, "1", "2");
    let first = &summary["rows"][0];
    assert_eq!(first["name"], "d2d 64 KiB vs memcpy");
    assert_eq!(first["target"], 0.8);
    assert_eq!(first["comparison"], ">=");
    assert_eq!(first["holds"], "holds");
    assert_eq!(first["unit"], "x");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn allreduce_records_become_bandwidth_and_training_rows() {
    let dir = folder("allreduce");
    let all_reduce = |bytes: u64, busbw: f64, ratio: Value| {
        json!({"bench": "all_reduce", "backend": "cpu", "implementation": "in-process",
               "nccl_rejected": null, "devices": "cpu:0,1", "ranks": 2, "bytes": bytes,
               "busbw_gbps": busbw, "memcpy_gbps": 10.0, "busbw_vs_memcpy": ratio})
    };
    fs::write(
        dir.join("allreduce_bench.json"),
        json!([
            all_reduce(64 << 10, 0.5, json!(0.05)),
            all_reduce(16 << 20, 2.5, json!(0.25)),
            all_reduce(64 << 20, 2.0, Value::Null),
            {"bench": "data_parallel", "backend": "cpu", "devices": "cpu:0,1", "ranks": 2,
             "single_rows_per_s": 400000.4, "group_rows_per_s": 300000.0,
             "ratio_vs_single": 0.75},
        ])
        .to_string(),
    )
    .unwrap();
    // One CUDA device: the all-reduce's records, no training record.
    fs::write(
        dir.join("allreduce_bench_cuda.json"),
        json!([{"bench": "all_reduce", "backend": "cuda", "implementation": "nccl",
                "devices": "cuda:0", "ranks": 1, "bytes": 1 << 20, "busbw_gbps": 0.0,
                "busbw_vs_memcpy": 0.0}])
        .to_string(),
    )
    .unwrap();
    let rows = rows(&reports(&dir));

    let busbw = find(
        &rows,
        "all-reduce 16 MiB per rank, 2 ranks (in-process): busbw",
    );
    assert_eq!(
        (busbw.device.as_str(), busbw.unit, busbw.value),
        ("cpu:0,1", Unit::Gbps, Some(2.5))
    );
    assert_eq!(
        (busbw.verdict(), busbw.value_text()),
        (Verdict::Info, "2.50 GB/s".into())
    );
    let ratio = find(
        &rows,
        "all-reduce 64 KiB per rank, 2 ranks (in-process): busbw / memcpy",
    );
    assert_eq!(
        (ratio.unit, ratio.value_text()),
        (Unit::Ratio, "0.050x".into())
    );
    assert_eq!(
        find(
            &rows,
            "all-reduce 64 MiB per rank, 2 ranks (in-process): busbw / memcpy"
        )
        .verdict(),
        Verdict::NotAvailable
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r.name.contains("(in-process)"))
            .count(),
        6
    );

    let group = find(&rows, "data-parallel training, 2 devices: rows/s");
    assert_eq!(
        (group.device.as_str(), group.value_text()),
        ("cpu:0,1", "300000 rows/s".into())
    );
    let one = find(&rows, "data-parallel training, 1 device: rows/s");
    assert_eq!(
        (one.device.as_str(), one.value, one.unit),
        ("cpu:0", Some(400000.4), Unit::RowsPerSec)
    );
    let speedup = find(&rows, "data-parallel training, 2 devices / 1 device");
    assert_eq!(
        (speedup.value_text(), speedup.target),
        ("0.750x".into(), None)
    );

    let nccl = find(&rows, "all-reduce 1 MiB per rank, 1 rank (nccl): busbw");
    assert_eq!((nccl.device.as_str(), nccl.value), ("cuda:0", Some(0.0)));
    // One device: no training record, so its group leaves one n/a row that says so.
    let no_training: Vec<&Row> = rows
        .iter()
        .filter(|r| r.name == DATA_PARALLEL_MISSING)
        .collect();
    assert_eq!(no_training.len(), 1, "{rows:#?}");
    assert_eq!(no_training[0].device, "cuda");
    assert_eq!(
        no_training[0].note.as_deref(),
        Some("no such record in allreduce_bench_cuda.json")
    );
    let summary = to_json(&rows, "1", "2");
    let units: Vec<&Value> = summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["unit"])
        .collect();
    assert!(units.contains(&&json!("GB/s")) && units.contains(&&json!("rows/s")));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn load_average_reads_three_fields_or_says_why_not() {
    let dir = folder("loadavg");
    let path = dir.join("loadavg");
    fs::write(&path, "0.52 0.58 0.59 1/467 12345\n").unwrap();
    assert_eq!(load_average_from(&path), "0.52 0.58 0.59");
    assert!(load_average_from(&dir.join("absent")).starts_with("unavailable ("));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sizes_read_naturally() {
    assert_eq!(size(64 << 10), "64 KiB");
    assert_eq!(size(1 << 20), "1 MiB");
    assert_eq!(size(1 << 30), "1 GiB");
    assert_eq!(size(1000), "1000 B");
}

#[test]
fn startup_rows_are_milliseconds_with_a_target_for_the_cpu_only() {
    let cpu = json!({"device": "cpu", "backend": "cpu", "open_ms": 0.4, "first_result_ms": 0.5});
    let auto = json!({"device": "auto", "backend": "cpu", "open_ms": 2.5, "first_result_ms": 2.6});
    let probe = json!({"device": "probe:vulkan", "backend": "found", "open_ms": 36.5});
    let row = &startup_rows(&cpu, true)[0];
    assert_eq!(row.value_text(), "0.5 ms");
    assert_eq!(row.target_text(), "<= 20 ms");
    assert_eq!(row.verdict(), Verdict::Holds);
    assert!(startup_rows(&cpu, false).is_empty());
    assert!(startup_rows(&auto, true).is_empty());
    let row = &startup_rows(&auto, false)[0];
    assert_eq!(row.verdict(), Verdict::Info);
    assert!(row.name.contains("GPU_DEVICE=auto (cpu)"), "{}", row.name);
    assert_eq!(startup_rows(&probe, false)[0].value_text(), "36.5 ms");
    let slow = json!({"device": "cpu", "backend": "cpu", "first_result_ms": 25.0});
    assert_eq!(startup_rows(&slow, true)[0].verdict(), Verdict::Missed);
}

#[test]
fn ops_rows_compare_with_the_faster_foreign_library() {
    let groups = groups();
    let g = groups
        .iter()
        .find(|g| g.report == "ops_bench" && g.target == Some(at_most(1.0)))
        .expect("the side-by-side group");
    let numpy_only = json!({"bench": "roofline", "backend": "cpu", "op": "exp", "bytes": 65536,
        "time_ratio_vs_numpy": 0.8, "time_ratio_vs_torch": null, "time_ratio_vs_fastest": 0.8});
    let row = &(g.rows)(&numpy_only)[0];
    assert_eq!(row.name, "exp at 64 KiB: our time / numpy");
    assert_eq!(row.verdict(), Verdict::Holds);
    let both = json!({"bench": "roofline", "backend": "cpu", "op": "add", "bytes": 1048576,
        "time_ratio_vs_numpy": 0.9, "time_ratio_vs_torch": 1.4, "time_ratio_vs_fastest": 1.4});
    let row = &(g.rows)(&both)[0];
    assert!(
        row.name.ends_with("the faster of numpy and PyTorch"),
        "{}",
        row.name
    );
    assert_eq!(row.verdict(), Verdict::Missed);
    // Without numpy there is no row (the group's n/a row says so).
    let none = json!({"bench": "roofline", "op": "add", "bytes": 1, "time_ratio_vs_fastest": null});
    assert!((g.rows)(&none).is_empty());
}
