"""torch_selftest.py: torch_compare.py's self-test (`torch_compare.py --self-test`), which
needs no PyTorch: the parsing of both report formats, the plan, and the table's ratios and
verdicts on samples (and on the reports given, if any)."""

import argparse
import json
import math
import time

from torch_compare import (
    DEFAULT_BATCH_BYTES, ENQUEUE_KIND, PIPELINE_PATTERNS, ReportError, TRANSFER_KINDS,
    clean, compare, fmt_bytes, gbps, log, make_plan, median, median_run, parse_cuda_bench,
    parse_pipeline_bench, read_report, render, sizes_kib, summary_line, tally,
    transfer_sizes, verdict_text, write_json,
)


# ---- the self-test (no torch)

# cuda_bench's JSON as write_json writes it (a record per line; serde's tag `bench` first).
SAMPLE_CUDA_BENCH = """[
  {"bench":"transfer","kind":"upload_pageable","bytes":4096,"ours_ms":0.012,"raw_ms":0.0118,"ratio_vs_raw":0.9833333333333333},
  {"bench":"transfer","kind":"upload_pinned","bytes":4096,"ours_ms":0.008,"raw_ms":0.0079,"ratio_vs_raw":0.9875},
  {"bench":"transfer","kind":"upload_registered","bytes":4096,"ours_ms":0.008,"raw_ms":0.008,"ratio_vs_raw":1.0},
  {"bench":"transfer","kind":"download_pageable","bytes":4096,"ours_ms":null,"raw_ms":0.015,"ratio_vs_raw":null},
  {"bench":"transfer","kind":"download_pinned","bytes":4096,"ours_ms":0.009,"raw_ms":0.009,"ratio_vs_raw":1.0},
  {"bench":"transfer","kind":"download_registered","bytes":4096,"ours_ms":0.009,"raw_ms":0.009,"ratio_vs_raw":1.0},
  {"bench":"transfer","kind":"upload_pageable","bytes":16777216,"ours_ms":1.6,"raw_ms":1.6,"ratio_vs_raw":1.0},
  {"bench":"transfer","kind":"upload_pinned","bytes":16777216,"ours_ms":0.7,"raw_ms":0.69,"ratio_vs_raw":0.9857142857142858},
  {"bench":"transfer","kind":"upload_registered","bytes":16777216,"ours_ms":0.71,"raw_ms":0.7,"ratio_vs_raw":0.9859154929577465},
  {"bench":"transfer","kind":"download_pageable","bytes":16777216,"ours_ms":2.0,"raw_ms":2.0,"ratio_vs_raw":1.0},
  {"bench":"transfer","kind":"download_pinned","bytes":16777216,"ours_ms":0.8,"raw_ms":0.79,"ratio_vs_raw":0.9875},
  {"bench":"transfer","kind":"download_registered","bytes":16777216,"ours_ms":0.8,"raw_ms":0.8,"ratio_vs_raw":1.0},
  {"bench":"enqueue","kind":"add_f32_1024","ours_us":2.0,"raw_us":1.9,"ratio_vs_raw":1.0526315789473684}
]
"""

# pipeline_bench's JSON: the first four lines are verbatim from a CPU-backend run of the
# release binary; the rest are CUDA points with round figures.
SAMPLE_PIPELINE_BENCH = """[
  {"backend":"cpu","pattern":"sequential","ratio":0.25,"batch_bytes":262144,"batches":6,"seconds":0.000571525,"speedup_vs_sequential":1.0,"efficiency":0.2780473295131446},
  {"backend":"cpu","pattern":"double","ratio":0.25,"batch_bytes":262144,"batches":6,"seconds":0.000715929,"speedup_vs_sequential":0.7982984346213102,"efficiency":0.22196474790097895},
  {"backend":"cpu","pattern":"triple","ratio":0.25,"batch_bytes":262144,"batches":6,"seconds":0.000753985,"speedup_vs_sequential":0.7580057958712707,"efficiency":0.2107614872974926},
  {"backend":"cpu","pattern":"deep-4","ratio":0.25,"batch_bytes":262144,"batches":6,"seconds":0.000751612,"speedup_vs_sequential":0.7603989824537128,"efficiency":0.21142690643576734}
]
"""

SAMPLE_CUDA_PIPELINE = """[
  {"backend":"cuda","pattern":"sequential","ratio":1.0,"batch_bytes":4194304,"batches":128,"seconds":1.2,"speedup_vs_sequential":1.0,"efficiency":0.25},
  {"backend":"cuda","pattern":"double","ratio":1.0,"batch_bytes":4194304,"batches":128,"seconds":0.6,"speedup_vs_sequential":2.0,"efficiency":0.5},
  {"backend":"cuda","pattern":"triple","ratio":1.0,"batch_bytes":4194304,"batches":128,"seconds":0.5,"speedup_vs_sequential":2.4,"efficiency":0.6},
  {"backend":"cuda","pattern":"deep-4","ratio":1.0,"batch_bytes":4194304,"batches":128,"seconds":0.45,"speedup_vs_sequential":2.6666666666666665,"efficiency":0.6666666666666666},
  {"backend":"cuda","pattern":"sequential","ratio":4.0,"batch_bytes":4194304,"batches":128,"seconds":2.0,"speedup_vs_sequential":1.0,"efficiency":0.5},
  {"backend":"cuda","pattern":"triple","ratio":4.0,"batch_bytes":4194304,"batches":128,"seconds":null,"speedup_vs_sequential":null,"efficiency":null}
]
"""


class SelfTest:
    def __init__(self):
        self.checks = 0

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            raise AssertionError(what)

    def close(self, a, b, what):
        self.check(a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(b)),
                   "%s: %r != %r" % (what, a, b))


def _theirs_like(ours_cb, ours_pb, factor):
    """PyTorch results with the same figures as ours, times `factor` (bandwidth and time
    alike), in the shapes measure_* return."""
    transfers = []
    for (kind, nbytes), ms in sorted((ours_cb or {"transfers": {}})["transfers"].items(),
                                     key=lambda kv: (kv[0][1], kv[0][0])):
        if kind.split("_")[1] in TRANSFER_KINDS and ms is not None:
            transfers.append({"kind": kind, "bytes": nbytes, "ms": ms * factor,
                              "gbps": gbps(nbytes, ms * factor)})
    us = (ours_cb or {"enqueue": {}})["enqueue"].get(ENQUEUE_KIND)
    pipeline = [dict(r, seconds=r["seconds"] * factor) for r in (ours_pb or {}).values()
                if r["pattern"] in PIPELINE_PATTERNS and r["seconds"] is not None]
    return {"transfers": transfers, "pipeline": pipeline,
            "enqueue": None if us is None else {"kind": ENQUEUE_KIND, "us": us * factor}}


def self_test(args):
    t = SelfTest()

    # The helpers match gpukit-examples' and gpukit-bench's.
    t.check(median([3.0, 1.0, 2.0]) == 2.0, "median of 3")
    t.check(median([4.0, 1.0, 3.0, 2.0]) == 2.5, "median of 4: the mean of the middle two")
    t.check(math.isnan(median([])), "median of nothing")
    t.check(median_run([4.0, 1.0, 3.0, 2.0], key=lambda s: s) == 3.0,
            "pipeline_bench's median run: the upper middle one")
    t.check(fmt_bytes(4096) == "4 KiB" and fmt_bytes(1 << 30) == "1 GiB"
            and fmt_bytes(1536) == "1.5 KiB", "fmt_bytes")
    t.close(gbps(16 << 20, 1.0), 16.777216, "gbps")
    t.check(transfer_sizes(1 << 30)[0] == 4096 and transfer_sizes(1 << 30)[-1] == 1 << 30
            and len(transfer_sizes(1 << 30)) == 10, "cuda_bench's sizes: 4 KiB x 4 to 1 GiB")

    # Both formats parse; registered kinds and null figures are kept as such.
    cb = parse_cuda_bench(SAMPLE_CUDA_BENCH)
    t.check(len(cb["transfers"]) == 12, "12 transfer records")
    t.check(cb["transfers"][("download_pageable", 4096)] is None, "null ours_ms")
    t.check(cb["enqueue"] == {"add_f32_1024": 2.0}, "the enqueue record")
    pb_cpu = parse_pipeline_bench(SAMPLE_PIPELINE_BENCH)
    t.check(len(pb_cpu) == 4 and pb_cpu[("triple", 0.25, 262144)]["seconds"] == 0.000753985,
            "the CPU run's records")
    pb = parse_pipeline_bench(SAMPLE_CUDA_PIPELINE)
    t.check(pb[("triple", 4.0, 4194304)]["seconds"] is None, "null seconds")

    # Malformed reports are refused with their place.
    for bad, what in [("{}", "an object"), ("[1]", "a number record"),
                      ('[{"bench":"transfer","kind":"upload_pinned"}]', "no bytes"),
                      ('[{"bench":"launch","kind":"x"}]', "an unknown bench"),
                      ('[{"bench":"enqueue","kind":"x","ours_us":"2"}]', "a string figure"),
                      ("[", "not JSON")]:
        try:
            parse_cuda_bench(bad, "bad.json")
        except ReportError as e:
            t.check(str(e).startswith("bad.json"), "the error names the file: %s" % e)
        else:
            t.check(False, "a cuda_bench report with %s was accepted" % what)
    try:
        parse_pipeline_bench('[{"backend":"cuda","pattern":"triple"}]', "p.json")
        t.check(False, "a pipeline record without its fields was accepted")
    except ReportError:
        t.check(True, "")

    # The plan follows our reports, or the defaults; the command line overrides.
    defaults = argparse.Namespace(max_mib=None, sizes_kib=None, batches=None, runs=5,
                                  transfer_runs=11)
    plan = make_plan(cb, pb, defaults)
    t.check(plan["transfer_bytes"] == [4096, 16 << 20], "transfer sizes from ours")
    t.check(plan["batch_bytes"] == [4 << 20] and plan["batches"] == 128
            and plan["ratios"] == [1.0, 4.0], "pipeline work from ours: %r" % plan)
    plan = make_plan(None, None, defaults)
    t.check(plan["transfer_bytes"] == transfer_sizes(1 << 30)
            and plan["batch_bytes"] == list(DEFAULT_BATCH_BYTES)
            and plan["batches"] == 128 and plan["ratios"] == [0.25, 1.0, 4.0]
            and plan["large_transfer_runs"] == 10, "the defaults are cuda_bench's and "
            "pipeline_bench's on CUDA")
    plan = make_plan(cb, pb, argparse.Namespace(max_mib=1, sizes_kib=[256], batches=8, runs=3,
                                                transfer_runs=10))
    t.check(plan["transfer_bytes"] == [4096, 16384, 65536, 262144, 1 << 20]
            and plan["batch_bytes"] == [256 << 10] and plan["batches"] == 8, "overrides")

    # The table: ratios, targets and verdicts, with known figures.
    theirs = {
        "transfers": [
            # ours 0.7 ms, torch 0.75 ms: ours is 0.75 / 0.7 = 1.071x the bandwidth: met.
            {"kind": "upload_pinned", "bytes": 16 << 20, "ms": 0.75, "gbps": gbps(16 << 20, 0.75)},
            # ours 0.8 ms, torch 0.7 ms: 0.875x: missed.
            {"kind": "download_pinned", "bytes": 16 << 20, "ms": 0.7, "gbps": gbps(16 << 20, 0.7)},
            # Equal: 1.0x is met (>=).
            {"kind": "upload_pageable", "bytes": 16 << 20, "ms": 1.6, "gbps": gbps(16 << 20, 1.6)},
            # Our figure is null: no verdict.
            {"kind": "download_pageable", "bytes": 4096, "ms": 0.02, "gbps": gbps(4096, 0.02)},
            # Not in our report at all.
            {"kind": "upload_pinned", "bytes": 64 << 20, "ms": 2.8, "gbps": gbps(64 << 20, 2.8)},
        ],
        "enqueue": {"kind": "add_f32_1024", "us": 4.0},  # ours 2.0: 0.5x, met (<=)
        "pipeline": [
            {"pattern": "sequential", "ratio": 1.0, "batch_bytes": 4 << 20, "batches": 128,
             "seconds": 1.5},
            {"pattern": "triple", "ratio": 1.0, "batch_bytes": 4 << 20, "batches": 128,
             "seconds": 0.7},  # ours 0.5: 0.714x, met
            {"pattern": "triple", "ratio": 4.0, "batch_bytes": 4 << 20, "batches": 128,
             "seconds": 2.1},  # ours null
        ],
    }
    rows = compare(cb, pb, theirs)
    by_item = {r["item"]: r for r in rows}
    t.check(len(rows) == 9, "one row per PyTorch figure: %d" % len(rows))
    r = by_item["upload_pinned 16 MiB"]
    t.close(r["ratio"], 0.75 / 0.7, "upload ratio")
    t.close(r["ours"], gbps(16 << 20, 0.7), "our GB/s from ours_ms")
    t.check(r["met"] is True and r["target"] == ">= 1.00", "upload met")
    r = by_item["download_pinned 16 MiB"]
    t.close(r["ratio"], 0.875, "download ratio")
    t.check(r["met"] is False and verdict_text(r) == "NOT MET", "download missed")
    t.check(by_item["upload_pageable 16 MiB"]["met"] is True, "1.0x meets >= 1.0")
    r = by_item["download_pageable 4 KiB"]
    t.check(r["ours"] is None and r["ratio"] is None and r["met"] is None
            and verdict_text(r) == "n/a" and r["note"] == "our cuda_bench figure is null",
            "a null figure of ours: %r" % r)
    t.check(by_item["upload_pinned 64 MiB"]["note"] == "not in our cuda_bench report",
            "a size our report lacks")
    r = by_item["add_f32_1024"]
    t.close(r["ratio"], 0.5, "enqueue ratio")
    t.check(r["met"] is True and r["target"] == "<= 0.50" and r["metric"] == "host us/op",
            "enqueue at exactly half meets <= 0.5")
    r = by_item["triple r=1 4 MiB"]
    t.close(r["ratio"], 0.5 / 0.7, "pipeline ratio: ours / torch wall time")
    t.check(r["met"] is True and r["target"] == "<= 0.83", "triple met")
    r = by_item["sequential r=1 4 MiB"]
    t.close(r["ratio"], 1.2 / 1.5, "sequential ratio")
    t.check(r["target"] is None and verdict_text(r) == "-", "sequential has no target")
    r = by_item["triple r=4 4 MiB"]
    t.check(r["met"] is None and r["note"] == "our pipeline_bench figure is null",
            "a null pipeline figure of ours: %r" % r)
    t.check(tally(rows) == {"rows": 9, "met": 4, "missed": 1, "not_judged": 3,
                            "without_target": 1}, "tally: %r" % tally(rows))
    # Just over and under the pipeline bound.
    for torch_s, met in [(0.5 / 0.83 - 1e-6, False), (0.5 / 0.83 + 1e-6, True)]:
        p = [{"pattern": "triple", "ratio": 1.0, "batch_bytes": 4 << 20, "batches": 128,
              "seconds": torch_s}]
        t.check(compare(None, pb, {"pipeline": p})[0]["met"] is met, "0.83 bound")
    # Batches that differ are not compared; without reports nothing is judged.
    p = [{"pattern": "triple", "ratio": 1.0, "batch_bytes": 4 << 20, "batches": 48,
          "seconds": 0.3}]
    r = compare(None, pb, {"pipeline": p})[0]
    t.check(r["ratio"] is None and r["met"] is None and "not compared" in r["note"],
            "different batch counts")
    t.check(all(r["met"] is None for r in compare(None, None, theirs)), "no reports")
    # A CPU-backend report of ours is shown but not judged.
    r = compare(None, pb_cpu, _theirs_like(None, pb_cpu, 2.0))
    t.check([x["item"] for x in r] == ["sequential r=0.25 256 KiB", "triple r=0.25 256 KiB"]
            and r[1]["ratio"] == 0.5 and r[1]["met"] is None
            and r[1]["note"] == "ours ran on the cpu backend: not judged", "a CPU report: %r" % r)

    text = render(rows)
    t.check(text.splitlines()[0].split() == ["section", "item", "metric", "ours", "torch",
                                              "ratio", "target", "verdict", "note"], "header")
    t.check(any(line.startswith("transfer  download_pinned 16 MiB") and "NOT MET" in line
                for line in text.splitlines()), "a missed row reads NOT MET")
    t.check(summary_line(tally(rows)).startswith("torch comparator: 4 of 8 targets met, 1 missed"),
            summary_line(tally(rows)))
    # The JSON report is strict JSON (no NaN) and reads back.
    doc = clean({"rows": rows, "nan": float("nan"), "inf": [float("inf")]})
    back = json.loads(json.dumps(doc, allow_nan=False))
    t.check(back["nan"] is None and back["inf"] == [None] and len(back["rows"]) == 9, "JSON")

    # The reports given on the command line (real ones): against PyTorch figures equal to
    # ours, every transfer ratio is 1.0 and met, every triple ratio 1.0 and missed.
    real_cb = read_report(args.ours_cuda_bench, parse_cuda_bench)
    real_pb = read_report(args.ours_pipeline_bench, parse_pipeline_bench)
    if real_cb or real_pb:
        rows = compare(real_cb, real_pb, _theirs_like(real_cb, real_pb, 1.0))
        for r in rows:
            if r["ratio"] is not None:
                t.close(r["ratio"], 1.0, "%s against itself" % r["item"])
            if r["section"] == "transfer":
                t.check(r["met"] is True, "%s: equal bandwidth meets >= 1.0" % r["item"])
            if r["section"] == "pipeline" and r["target"] is not None and r["ratio"] is not None:
                # Only a CUDA report of ours is judged against PyTorch on CUDA.
                cuda = not (r["note"] or "").startswith("ours ran on the")
                t.check(r["met"] is (False if cuda else None),
                        "%s: equal time misses <= 0.83 (%r)" % (r["item"], r))
        log("the given reports against themselves (%d rows):" % len(rows))
        log(render(rows))
        log(summary_line(tally(rows)))
        if args.json:
            write_json(args.json, {"tool": "torch_compare", "self_test": True, "rows": rows,
                                   "summary": tally(rows)})

    log("sample table:")
    log(render(compare(cb, pb, theirs)))
    log("torch comparator self-test: ok (%d checks)" % t.checks)
    return 0
