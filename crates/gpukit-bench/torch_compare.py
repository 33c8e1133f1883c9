#!/usr/bin/env python3
"""torch_compare.py: PyTorch as the measured rival of gpukit's CUDA benchmarks.

It runs the work of `cuda_bench` and `pipeline_bench` (gpukit-bench's examples) through
PyTorch on the same GPU, reads the JSON reports those two programs wrote, and prints one
table with our figure, PyTorch's and their ratio side by side, each row with its target:

- transfers (cuda_bench's sweep, pageable and pinned, upload and download): our bandwidth
  / PyTorch's >= 1.0. Each size is `dev.copy_(host, non_blocking=True)` (or the reverse)
  between two CUDA events on a stream of its own, one warm-up, then the median of 11 runs
  (10 from 256 MiB), as cuda_bench times ours;
- op enqueue (cuda_bench's `ctx.add` on 1024 f32): our host time per op / PyTorch's eager
  `torch.add(a, b, out=c)` <= 0.5. Each round times 256 calls on the host with no sync
  inside the loop and syncs after; 22 rounds, the first dropped, the median of the rest;
- pipelines (pipeline_bench's batch sizes, batch counts and compute:transfer ratios): our
  triple-buffered wall time / PyTorch's <= 0.83 (PyTorch's sequential pattern is measured
  and shown too, without a target). PyTorch's triple buffering is what a careful PyTorch
  user writes: a loader thread filling pinned staging tensors up to three batches ahead,
  and upload, compute and download on three streams ordered by events, with
  `non_blocking=True` copies; the sequential pattern does every stage of one batch on one
  stream, then waits. Each batch is calibrated the way pipeline_bench does it: the transfer
  time `t` is the median upload span (events) of a sequential run without loader wait or
  compute (the second of two); the loader sleeps about `t` per batch (the sleep's measured
  overshoot taken off) and writes the batch index into element 0; compute takes `ratio *
  t` on the device and writes `out[0] = in[0] + 1`; the sink checks batch `i` arrives as
  `i + 1`, in order. Each point is the run whose wall time is the median of 5 (the
  patterns alternate within each repeat), after one warm-up run per batch size.

The sizes, batch counts and ratios are taken from our reports (so a `--quick` run of ours
is compared with the same work); without a report, the CUDA defaults of the two programs.

Not the same as ours, for want of a PyTorch equivalent (the JSON report says so too):
- compute: ours is one launch of a kernel spinning on `%globaltimer`; PyTorch has no such
  kernel without a compiler, so it is `torch.cuda._sleep(cycles)` (a one-thread kernel
  spinning on `clock64()`) followed by `torch.add` on element 0. The cycles are calibrated
  with events so that the two launches together take `ratio * t` (a linear fit of the
  stage's time against the cycles, its intercept being the launches and the add); the
  compute time each point actually got is measured and reported;
- staging: ours uploads from write-combined pinned memory (`HostUse::Upload`), PyTorch
  from `pin_memory=True` tensors (plainly pinned); registered host memory, which cuda_bench
  also measures, has no PyTorch counterpart and is left out;
- our buffered pipelines run their first two batches alone (their calibration) inside the
  wall time; PyTorch's overlaps from the first batch (which favours PyTorch slightly);
- ours hands each download a fresh pinned buffer from its pool; PyTorch reuses one pinned
  output tensor per slot (its batch is delivered before the slot is used again);
- the figures come from two processes run one after the other, not interleaved run by run.

Usage:
    torch_compare.py [--ours-cuda-bench FILE] [--ours-pipeline-bench FILE] [--json FILE]
                     [--device cuda|cuda:N] [--runs N] [--batches N] [--sizes-kib K,...]
                     [--max-mib N] [--transfer-runs N]
    torch_compare.py --self-test [--ours-cuda-bench FILE] [--ours-pipeline-bench FILE]

Without PyTorch, or where `torch.cuda.is_available()` is false, it prints
`torch comparator: not run (<reason>)` and exits 0: there is nothing to compare there. Any
other failure exits 1 (2 for a bad command line). A target that is missed is reported, not
a failure. `--self-test` needs no PyTorch: it checks the parsing of both report formats and
the table's ratios and verdicts on samples (and on the reports given, if any).

Python 3.7 or later, the standard library and torch; no numpy. Three files, side by side
(the GPU bundle carries them to tools/): this one (the plan, our reports, the comparison,
the command line), torch_measure.py (PyTorch's side) and torch_selftest.py (`--self-test`).
"""

import argparse
import json
import math
import platform
import sys
import time
import traceback

# ---- what ours measures (the defaults of cuda_bench and pipeline_bench on CUDA)

# Transfer sizes: 4 KiB, times 4, up to cuda_bench's default --max-mib of 1024.
FIRST_TRANSFER_BYTES = 4 << 10
DEFAULT_MAX_TRANSFER_BYTES = 1 << 30
# cuda_bench's --runs default (at least 10), and its fixed count from 256 MiB on.
DEFAULT_TRANSFER_RUNS = 11
LARGE_TRANSFER_BYTES = 256 << 20
LARGE_TRANSFER_RUNS = 10
# The transfer kinds PyTorch has: cuda_bench's names (`{dir}_{kind}`), in its order.
TRANSFER_DIRS = ("upload", "download")
TRANSFER_KINDS = ("pageable", "pinned")

# cuda_bench's enqueue benchmark: `ctx.add` on 1024 f32, 256 launches per round, 22 rounds
# of which the first is dropped.
ENQUEUE_KIND = "add_f32_1024"
ENQUEUE_ELEMENTS = 1024
ENQUEUE_LAUNCHES = 256
ENQUEUE_ROUNDS = 22

# pipeline_bench on CUDA: 4, 16 and 64 MiB batches of f32, 128 batches per run, medians of
# 5 runs, compute:transfer ratios 0.25, 1 and 4.
DEFAULT_BATCH_BYTES = (4 << 20, 16 << 20, 64 << 20)
DEFAULT_BATCHES = 128
DEFAULT_PIPELINE_RUNS = 5
DEFAULT_RATIOS = (0.25, 1.0, 4.0)
# The patterns PyTorch runs (named as in our report); `triple` is the one with a target.
PIPELINE_PATTERNS = ("sequential", "triple")
TRIPLE_DEPTH = 3
# Samples of the sleep overshoot (pipeline_bench's IoWait::calibrate).
SLEEP_SAMPLES = 15
# The spin ahead of a timed compute stage (about 0.2 ms at 2 GHz): longer than the host
# takes to enqueue the stage.
LEAD_SPIN_CYCLES = 400000

# The targets: (section, comparison, bound). Ratios are ours / PyTorch's: bandwidth for
# transfers (higher is better), host time per op for enqueue and wall time for the triple
# pipeline (lower is better). The project's goals: transfers >= 1.0x, the triple-buffered
# pipeline at least 1.2x faster (1 / 1.2 = 0.83), op enqueue at most half PyTorch's eager
# cost.
TARGETS = {
    "transfer": (">=", 1.0),
    "enqueue": ("<=", 0.5),
    "pipeline": ("<=", 0.83),
}

NOT_RUN = "torch comparator: not run"

# What PyTorch's side does differently from ours (see the module docs), for the JSON report.
DIFFERENCES = [
    "compute: torch.cuda._sleep(cycles) + torch.add on element 0, cycles fitted with events "
    "(ours: one kernel spinning on %globaltimer that writes out[0])",
    "staging: pin_memory=True tensors, plainly pinned (ours: write-combined pinned for uploads)",
    "transfers: no registered host memory kind in PyTorch",
    "pipelines: ours runs two calibration batches alone inside a buffered run; torch does not",
    "pipelines: torch reuses one pinned output tensor per slot (ours: a pooled buffer per batch)",
    "two processes one after the other, not interleaved run by run",
]


class ReportError(Exception):
    """A report of ours that is not in the format our benchmarks write."""


# ---- small helpers, as in gpukit-examples' lib.rs


def median(samples):
    """The median (the mean of the middle two for an even count); NaN when empty."""
    s = sorted(samples)
    n = len(s)
    if n == 0:
        return float("nan")
    if n % 2 == 1:
        return s[n // 2]
    return (s[n // 2 - 1] + s[n // 2]) / 2.0


def median_run(runs, key):
    """The run whose `key` is the median, as pipeline_bench picks its point: sorted, the
    element at len / 2 (the upper middle one for an even count)."""
    return sorted(runs, key=key)[len(runs) // 2]


def fmt_bytes(n):
    """`n` bytes as `4 KiB`, `16 MiB`, `1 GiB` (gpukit-examples' fmt_bytes)."""
    units = ("B", "KiB", "MiB", "GiB")
    v = float(n)
    unit = 0
    while v >= 1024.0 and unit + 1 < len(units):
        v /= 1024.0
        unit += 1
    if v == int(v):
        return "%d %s" % (int(v), units[unit])
    return "%.1f %s" % (v, units[unit])


def gbps(nbytes, ms):
    """GB/s (10^9 bytes per second) of `nbytes` in `ms` milliseconds; None without a time."""
    if ms is None or not ms > 0:
        return None
    return nbytes / (ms / 1e3) / 1e9


def finite(x):
    """`x` when it is a finite number, else None (JSON has no NaN)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return x
    return None


def log(message=""):
    print(message, flush=True)


# ---- our reports (gpukit-bench's write_json: a JSON array, one record per line; a
# number that is not finite is null)


def _records(text, source):
    try:
        records = json.loads(text)
    except ValueError as e:
        raise ReportError("%s: not JSON: %s" % (source, e))
    if not isinstance(records, list):
        raise ReportError("%s: expected a JSON array of records" % source)
    for k, r in enumerate(records):
        if not isinstance(r, dict):
            raise ReportError("%s: record %d is not an object" % (source, k))
    return records


def _field(record, name, types, source, k, nullable=False):
    value = record.get(name)
    if value is None and nullable and name in record:
        return None
    if not isinstance(value, types) or isinstance(value, bool):
        raise ReportError("%s: record %d: `%s` is missing or not a %s" % (
            source, k, name, "/".join(t.__name__ for t in types)))
    return value


NUMBER = (int, float)


def parse_cuda_bench(text, source="cuda_bench report"):
    """cuda_bench's records: `{"bench":"transfer","kind":"upload_pinned","bytes":4096,
    "ours_ms":..,"raw_ms":..,"ratio_vs_raw":..}` and `{"bench":"enqueue",
    "kind":"add_f32_1024","ours_us":..,"raw_us":..,"ratio_vs_raw":..}` (serde's internally
    tagged enum `Record`). Returns {"transfers": {(kind, bytes): ours_ms or None},
    "enqueue": {kind: ours_us or None}}."""
    out = {"transfers": {}, "enqueue": {}}
    for k, r in enumerate(_records(text, source)):
        bench = r.get("bench")
        kind = _field(r, "kind", (str,), source, k)
        if bench == "transfer":
            nbytes = _field(r, "bytes", (int,), source, k)
            ms = _field(r, "ours_ms", NUMBER, source, k, nullable=True)
            _field(r, "raw_ms", NUMBER, source, k, nullable=True)
            out["transfers"][(kind, nbytes)] = finite(ms)
        elif bench == "enqueue":
            us = _field(r, "ours_us", NUMBER, source, k, nullable=True)
            _field(r, "raw_us", NUMBER, source, k, nullable=True)
            out["enqueue"][kind] = finite(us)
        else:
            raise ReportError("%s: record %d: `bench` is %r, not \"transfer\" or \"enqueue\""
                              % (source, k, bench))
    return out


def parse_pipeline_bench(text, source="pipeline_bench report"):
    """pipeline_bench's records: `{"backend":"cuda","pattern":"triple","ratio":1.0,
    "batch_bytes":4194304,"batches":128,"seconds":..,"speedup_vs_sequential":..,
    "efficiency":..}`. Returns {(pattern, ratio, batch_bytes): record} with `seconds` None
    when it was not finite."""
    out = {}
    for k, r in enumerate(_records(text, source)):
        rec = {
            "backend": _field(r, "backend", (str,), source, k),
            "pattern": _field(r, "pattern", (str,), source, k),
            "ratio": float(_field(r, "ratio", NUMBER, source, k)),
            "batch_bytes": _field(r, "batch_bytes", (int,), source, k),
            "batches": _field(r, "batches", (int,), source, k),
            "seconds": finite(_field(r, "seconds", NUMBER, source, k, nullable=True)),
        }
        out[(rec["pattern"], rec["ratio"], rec["batch_bytes"])] = rec
    return out


def read_report(path, parse):
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ReportError("cannot read %s: %s" % (path, e))
    return parse(text, path)


# ---- the work: taken from our reports where they are given


def transfer_sizes(max_bytes):
    sizes = []
    n = FIRST_TRANSFER_BYTES
    while n <= max_bytes:
        sizes.append(n)
        n *= 4
    return sizes


def make_plan(ours_cb, ours_pb, args):
    """What PyTorch runs: our reports' sizes, batch counts and ratios, else the defaults;
    the command line overrides either."""
    if args.max_mib is not None:
        sizes = transfer_sizes(args.max_mib << 20)
    elif ours_cb and ours_cb["transfers"]:
        sizes = sorted({b for (_, b) in ours_cb["transfers"]})
    else:
        sizes = transfer_sizes(DEFAULT_MAX_TRANSFER_BYTES)

    pb = list(ours_pb.values()) if ours_pb else []
    if args.sizes_kib is not None:
        batch_bytes = [k << 10 for k in args.sizes_kib]
    elif pb:
        batch_bytes = sorted({r["batch_bytes"] for r in pb})
    else:
        batch_bytes = list(DEFAULT_BATCH_BYTES)
    if args.batches is not None:
        batches = args.batches
    elif pb:
        # One count per report (pipeline_bench uses one for every point).
        batches = max(r["batches"] for r in pb)
    else:
        batches = DEFAULT_BATCHES
    ratios = sorted({r["ratio"] for r in pb}) if pb else list(DEFAULT_RATIOS)
    return {
        "transfer_bytes": sizes,
        "transfer_runs": args.transfer_runs,
        "large_transfer_runs": min(args.transfer_runs, LARGE_TRANSFER_RUNS),
        "enqueue_launches": ENQUEUE_LAUNCHES,
        "enqueue_rounds": ENQUEUE_ROUNDS - 1,
        "batch_bytes": batch_bytes,
        "batches": batches,
        "ratios": ratios,
        "pipeline_runs": args.runs,
        "patterns": list(PIPELINE_PATTERNS),
    }


# ---- the comparison


def judge(section, ratio):
    """(target text, met) for a row of `section` with `ratio`; met is None without a
    target or without a ratio."""
    op, bound = TARGETS[section]
    target = "%s %.2f" % (op, bound)
    if ratio is None:
        return target, None
    return target, (ratio >= bound if op == ">=" else ratio <= bound)


def _ratio(a, b):
    if a is None or b is None or not b > 0:
        return None
    return a / b


def compare(ours_cb, ours_pb, theirs):
    """The table's rows: one per figure PyTorch measured, with ours beside it (None where our
    report lacks it). `theirs` holds PyTorch's `transfers`, `enqueue` and `pipeline`
    results as measure_* return them."""
    rows = []

    def row(section, item, metric, ours, torch_value, ratio, target, met, note=None):
        rows.append({"section": section, "item": item, "metric": metric, "ours": ours,
                     "torch": torch_value, "ratio": ratio, "target": target, "met": met,
                     "note": note})

    def missing(table, key, report):
        """Why our figure for `key` is missing: not in the report, or null there."""
        if key in table:
            return "our %s figure is null" % report
        return "not in our %s report" % report

    transfers = ours_cb["transfers"] if ours_cb else {}
    for t in theirs.get("transfers", []):
        key = (t["kind"], t["bytes"])
        ours_gbps = gbps(t["bytes"], transfers.get(key))
        ratio = _ratio(ours_gbps, t["gbps"])
        target, met = judge("transfer", ratio)
        row("transfer", "%s %s" % (t["kind"], fmt_bytes(t["bytes"])), "GB/s", ours_gbps,
            t["gbps"], ratio, target, met,
            None if ours_gbps is not None else missing(transfers, key, "cuda_bench"))

    e = theirs.get("enqueue")
    if e is not None:
        enqueue = ours_cb["enqueue"] if ours_cb else {}
        ours_us = enqueue.get(e["kind"])
        ratio = _ratio(ours_us, e["us"])
        target, met = judge("enqueue", ratio)
        row("enqueue", e["kind"], "host us/op", ours_us, e["us"], ratio, target, met,
            None if ours_us is not None else missing(enqueue, e["kind"], "cuda_bench"))

    pipelines = ours_pb or {}
    for p in theirs.get("pipeline", []):
        key = (p["pattern"], p["ratio"], p["batch_bytes"])
        ours = pipelines.get(key)
        ours_s = ours["seconds"] if ours else None
        ratio, note, judged = None, None, True
        if ours is None:
            note = missing(pipelines, key, "pipeline_bench")
        elif ours["batches"] != p["batches"]:
            note = "ours ran %d batches, torch %d: not compared" % (ours["batches"], p["batches"])
        else:
            ratio = _ratio(ours_s, p["seconds"])
            if ours_s is None:
                note = missing({key: None}, key, "pipeline_bench")
            elif ours["backend"] != "cuda":
                # A CPU-backend report against PyTorch on CUDA is not the same work.
                note = "ours ran on the %s backend: not judged" % ours["backend"]
                judged = False
        target, met = None, None
        if p["pattern"] == "triple":
            target, met = judge("pipeline", ratio if judged else None)
        item = "%s r=%g %s" % (p["pattern"], p["ratio"], fmt_bytes(p["batch_bytes"]))
        row("pipeline", item, "seconds", ours_s, p["seconds"], ratio, target, met, note)
    return rows


def tally(rows):
    judged = [r for r in rows if r["target"] is not None]
    return {
        "rows": len(rows),
        "met": sum(1 for r in judged if r["met"] is True),
        "missed": sum(1 for r in judged if r["met"] is False),
        "not_judged": sum(1 for r in judged if r["met"] is None),
        "without_target": len(rows) - len(judged),
    }


def verdict_text(r):
    if r["target"] is None:
        return "-"
    if r["met"] is None:
        return "n/a"
    return "met" if r["met"] else "NOT MET"


def _num(x, digits):
    return "-" if x is None else "%.*f" % (digits, x)


def render(rows):
    """The table as text: our figure, PyTorch's, ours / PyTorch's, the target, the verdict."""
    digits = {"GB/s": 2, "host us/op": 2, "seconds": 4}
    head = "%-9s %-28s %-10s %10s %10s %8s %8s %8s  %s" % (
        "section", "item", "metric", "ours", "torch", "ratio", "target", "verdict", "note")
    lines = [head, "-" * len(head)]
    for r in rows:
        d = digits.get(r["metric"], 3)
        lines.append(("%-9s %-28s %-10s %10s %10s %8s %8s %8s  %s" % (
            r["section"], r["item"], r["metric"], _num(r["ours"], d), _num(r["torch"], d),
            _num(r["ratio"], 3), r["target"] or "-", verdict_text(r), r["note"] or "")).rstrip())
    return "\n".join(lines)


def summary_line(t):
    return ("torch comparator: %d of %d targets met, %d missed, %d not judged (no figure of "
            "ours to compare), %d rows without a target" % (
                t["met"], t["met"] + t["missed"] + t["not_judged"], t["missed"], t["not_judged"],
                t["without_target"]))


def clean(obj):
    """`obj` with every non-finite float as None, ready for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def write_json(path, report):
    text = json.dumps(clean(report), indent=1, allow_nan=False, sort_keys=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


# ---- the run


def probe_torch():
    """(torch, None), or (None, why there is nothing to compare on this machine)."""
    try:
        import torch  # noqa: the comparator's one dependency, optional by design
    except Exception as e:  # an ImportError, or a broken install failing as it loads
        return None, "import torch failed: %s" % (str(e).splitlines() or [type(e).__name__])[0]
    if not torch.cuda.is_available():
        return None, "torch %s: torch.cuda.is_available() is false" % torch.__version__
    return torch, None


def run(args):
    torch, why = probe_torch()
    if torch is None:
        log("%s (%s)" % (NOT_RUN, why))
        return 0
    began = time.perf_counter()
    ours_cb = read_report(args.ours_cuda_bench, parse_cuda_bench)
    ours_pb = read_report(args.ours_pipeline_bench, parse_pipeline_bench)
    plan = make_plan(ours_cb, ours_pb, args)

    dev = torch.device(args.device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    device = {
        "name": props.name,
        "index": dev.index,
        "compute_capability": "%d.%d" % (props.major, props.minor),
        "multiprocessors": props.multi_processor_count,
    }
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda,
                "python": platform.python_version()}
    log("torch comparator: %s (cuda:%d, compute capability %s, %d SMs); torch %s, CUDA %s "
        "(torch's build), Python %s" % (
            device["name"], device["index"], device["compute_capability"],
            device["multiprocessors"], versions["torch"], versions["cuda"], versions["python"]))
    log("ours: cuda_bench %s, pipeline_bench %s" % (
        args.ours_cuda_bench or "(no report)", args.ours_pipeline_bench or "(no report)"))

    # Here, not at the top: torch_measure imports this module's helpers.
    from torch_measure import measure_enqueue, measure_pipelines, measure_transfers

    theirs = {}
    theirs["transfers"] = measure_transfers(torch, dev, plan)
    theirs["enqueue"] = measure_enqueue(torch, dev)
    pipelines = measure_pipelines(torch, dev, plan)
    theirs["pipeline"] = pipelines["points"]

    rows = compare(ours_cb, ours_pb, theirs)
    t = tally(rows)
    log("\nours against PyTorch on %s (ratio: ours / torch, of bandwidth for transfers, of host "
        "time per op for enqueue, of wall time for pipelines)" % device["name"])
    log(render(rows))
    elapsed = time.perf_counter() - began
    log(summary_line(t) + "; measured in %.1f s" % elapsed)
    if args.json:
        write_json(args.json, {
            "tool": "torch_compare",
            "device": device,
            "versions": versions,
            "ours": {"cuda_bench": args.ours_cuda_bench,
                     "pipeline_bench": args.ours_pipeline_bench},
            "plan": plan,
            "targets": {k: "%s %.2f" % v for k, v in TARGETS.items()},
            "torch_results": {
                "transfers": theirs["transfers"],
                "enqueue": theirs["enqueue"],
                "pipeline": pipelines["points"],
                "pipeline_calibration": pipelines["calibration"],
                "spin": pipelines["spin"],
            },
            "differences": DIFFERENCES,
            "rows": rows,
            "summary": t,
            "seconds": elapsed,
        })
        log("wrote %d rows to %s" % (len(rows), args.json))
    return 0


# ---- the command line


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("%s is not at least 1" % text)
    return value


def sizes_kib(text):
    try:
        sizes = [int(k) for k in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a list of sizes in KiB" % text)
    if not sizes or any(not 1 <= k <= 4 << 20 for k in sizes):
        raise argparse.ArgumentTypeError("each size must be 1 to 4194304 KiB")
    return sizes


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_compare.py",
        description="The work of cuda_bench and pipeline_bench through PyTorch on the same "
                    "GPU, in a table beside our figures from their JSON reports.")
    p.add_argument("--ours-cuda-bench", metavar="FILE", help="cuda_bench's --json report")
    p.add_argument("--ours-pipeline-bench", metavar="FILE", help="pipeline_bench's --json report")
    p.add_argument("--json", metavar="FILE", help="write the figures and the table as JSON")
    p.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    p.add_argument("--runs", type=positive, default=DEFAULT_PIPELINE_RUNS,
                   help="repeats per pipeline point (default 5, as ours)")
    p.add_argument("--batches", type=positive, help="batches per pipeline run (default: ours)")
    p.add_argument("--sizes-kib", type=sizes_kib, metavar="K,...",
                   help="pipeline batch sizes in KiB (default: ours)")
    p.add_argument("--max-mib", type=positive, help="the largest transfer in MiB (default: ours)")
    p.add_argument("--transfer-runs", type=positive, default=DEFAULT_TRANSFER_RUNS,
                   help="runs per transfer size below 256 MiB (default 11, as ours)")
    p.add_argument("--self-test", action="store_true",
                   help="check the report parsing and the table on samples; needs no torch")
    args = p.parse_args(argv)
    if not (args.device == "cuda" or args.device.startswith("cuda:")
            and args.device[5:].isdigit()):
        p.error("--device takes cuda or cuda:N, not %r" % args.device)
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        if args.self_test:
            from torch_selftest import self_test  # it imports this module's functions
            return self_test(args)
        return run(args)
    except ReportError as e:
        print("torch comparator: error: %s" % e, file=sys.stderr, flush=True)
        return 1
    except AssertionError as e:
        print("torch comparator self-test: FAILED: %s" % e, file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # any failure once torch runs on CUDA is the step's failure
        traceback.print_exc()
        print("torch comparator: error: %s: %s" % (type(e).__name__, e), file=sys.stderr,
              flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
