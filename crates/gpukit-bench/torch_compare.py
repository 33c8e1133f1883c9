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

Python 3.7 or later, the standard library and torch; no numpy.
"""

import argparse
import json
import math
import platform
import queue
import sys
import threading
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


# ---- PyTorch's side (every function takes the imported module: nothing above imports it)


def measure_transfers(torch, dev, plan):
    """cuda_bench's transfer sweep: per size, upload then download, pageable then pinned;
    each copy between two events on its own stream, a warm-up, then the median ms."""
    log("\ntransfers: PyTorch GB/s, medians of %d runs (%d from %s)" % (
        plan["transfer_runs"], plan["large_transfer_runs"], fmt_bytes(LARGE_TRANSFER_BYTES)))
    log("%10s %10s %10s %10s %10s" % ("size", "up page", "up pin", "down page", "down pin"))
    stream = torch.cuda.Stream(device=dev)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    results = []
    for nbytes in plan["transfer_bytes"]:
        n = nbytes // 4
        large = nbytes >= LARGE_TRANSFER_BYTES
        runs = plan["large_transfer_runs"] if large else plan["transfer_runs"]
        device_buf = torch.zeros(n, dtype=torch.float32, device=dev)
        row = []
        for direction in TRANSFER_DIRS:
            for kind in TRANSFER_KINDS:
                host = torch.ones(n, dtype=torch.float32, pin_memory=(kind == "pinned"))
                dst, src = (device_buf, host) if direction == "upload" else (host, device_buf)

                def once():
                    with torch.cuda.stream(stream):
                        start.record(stream)
                        dst.copy_(src, non_blocking=True)
                        end.record(stream)
                    end.synchronize()
                    return start.elapsed_time(end)

                once()
                ms = median([once() for _ in range(runs)])
                results.append({"kind": "%s_%s" % (direction, kind), "bytes": nbytes,
                                "ms": ms, "gbps": gbps(nbytes, ms)})
                row.append(gbps(nbytes, ms))
        log("%10s %10.2f %10.2f %10.2f %10.2f" % tuple([fmt_bytes(nbytes)] + row))
    torch.cuda.synchronize()
    return results


def measure_enqueue(torch, dev):
    """Host time to enqueue `torch.add(a, b, out=c)` on 1024 f32: rounds of 256 calls with no
    sync inside, a sync after each; the first round dropped, the median of the rest."""
    a = torch.full((ENQUEUE_ELEMENTS,), 1.0, dtype=torch.float32, device=dev)
    b = torch.full((ENQUEUE_ELEMENTS,), 2.0, dtype=torch.float32, device=dev)
    c = torch.zeros(ENQUEUE_ELEMENTS, dtype=torch.float32, device=dev)
    add = torch.add
    for _ in range(ENQUEUE_LAUNCHES):  # warm-up: the kernel loaded, the caches filled
        add(a, b, out=c)
    torch.cuda.synchronize()
    per_op_ns = []
    for round_ in range(ENQUEUE_ROUNDS):
        t = time.perf_counter_ns()
        for _ in range(ENQUEUE_LAUNCHES):
            add(a, b, out=c)
        dt = time.perf_counter_ns() - t
        torch.cuda.synchronize()
        if round_ > 0:
            per_op_ns.append(dt / ENQUEUE_LAUNCHES)
    if not bool((c == 3.0).all()):
        raise RuntimeError("torch.add produced wrong results")
    us = median(per_op_ns) / 1e3
    log("\nenqueue: torch.add(a, b, out=c) on %d f32: %.2f us per op on the host "
        "(median of %d rounds of %d)" % (ENQUEUE_ELEMENTS, us, len(per_op_ns), ENQUEUE_LAUNCHES))
    return {"kind": ENQUEUE_KIND, "us": us, "launches": ENQUEUE_LAUNCHES,
            "rounds": len(per_op_ns)}


class IoWait:
    """Waits like a loader blocked on I/O: sleeps for about `d` seconds, the sleep's measured
    overshoot (median of 15) taken off the request, as pipeline_bench's IoWait does."""

    def __init__(self, d):
        samples = []
        for _ in range(SLEEP_SAMPLES):
            t = time.perf_counter()
            time.sleep(d)
            samples.append(max(0.0, time.perf_counter() - t - d))
        self.overshoot = median(samples)

    def wait(self, d):
        if d > 0:
            time.sleep(max(0.0, d - self.overshoot))


class Compute:
    """The compute stage: `torch.cuda._sleep(cycles)` then `out[0] = in[0] + 1` (torch.add on
    one-element views), with `cycles` fitted so the stage takes a requested time."""

    def __init__(self, torch):
        if not hasattr(torch.cuda, "_sleep"):
            raise RuntimeError("this torch has no torch.cuda._sleep (the spinning kernel)")
        self.torch = torch
        self.slope = None  # cycles per ms
        self.intercept = 0.0  # ms of the stage without spinning

    def enqueue(self, head_in, head_out, cycles):
        if cycles > 0:
            self.torch.cuda._sleep(cycles)
        self.torch.add(head_in, 1.0, out=head_out)

    def time_ms(self, stream, head_in, head_out, cycles, reps):
        """The stage's median time in ms on `stream`, between two events. A lead spin keeps
        the stream busy while the host enqueues the stage, so that the events time the
        device's work alone, as in a pipeline, where the stream runs behind the host."""
        torch = self.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(reps):
            with torch.cuda.stream(stream):
                torch.cuda._sleep(LEAD_SPIN_CYCLES)
                start.record(stream)
                self.enqueue(head_in, head_out, cycles)
                end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end))
        return median(samples)

    def calibrate(self, dev):
        """A linear fit of the stage's time against the cycles, from two points."""
        torch = self.torch
        stream = torch.cuda.Stream(device=dev)
        x = torch.zeros(1, dtype=torch.float32, device=dev)
        y = torch.zeros(1, dtype=torch.float32, device=dev)
        lo_cycles, hi_cycles = 1000000, 20000000
        self.time_ms(stream, x, y, lo_cycles, 3)  # warm-up
        lo = self.time_ms(stream, x, y, lo_cycles, 5)
        hi = self.time_ms(stream, x, y, hi_cycles, 5)
        if not hi > lo:
            raise RuntimeError("torch.cuda._sleep did not take longer with more cycles "
                               "(%.4f ms for %d, %.4f ms for %d)" % (lo, lo_cycles, hi, hi_cycles))
        self.slope = (hi_cycles - lo_cycles) / (hi - lo)
        self.intercept = max(0.0, lo - lo_cycles / self.slope)
        log("compute: torch.cuda._sleep runs %.0f cycles per ms; the stage without spinning "
            "takes %.4f ms" % (self.slope, self.intercept))

    def cycles(self, ms):
        """Cycles to spin for the stage to take `ms` (0 when the launches alone take longer)."""
        return max(0, int(round((ms - self.intercept) * self.slope)))


class Pipe:
    """The buffers and streams of PyTorch's pipelines for one batch size: `TRIPLE_DEPTH`
    slots of device input and output plus a pinned output tensor each, enough pinned staging
    tensors for the loader to run `TRIPLE_DEPTH` batches ahead of those in flight, and the
    upload, compute and download streams (the sequential pattern uses the first alone)."""

    def __init__(self, torch, dev, n, compute):
        self.torch = torch
        self.n = n
        self.compute = compute
        f32 = torch.float32
        # In flight, waiting in the loader's queue, and the one being loaded.
        self.staging = [torch.zeros(n, dtype=f32, pin_memory=True)
                        for _ in range(2 * TRIPLE_DEPTH + 1)]
        self.dev_in = [torch.zeros(n, dtype=f32, device=dev) for _ in range(TRIPLE_DEPTH)]
        self.dev_out = [torch.zeros(n, dtype=f32, device=dev) for _ in range(TRIPLE_DEPTH)]
        self.host_out = [torch.zeros(n, dtype=f32, pin_memory=True) for _ in range(TRIPLE_DEPTH)]
        # The one-element views the compute stage reads and writes.
        self.head_in = [t[:1] for t in self.dev_in]
        self.head_out = [t[:1] for t in self.dev_out]
        self.upload, self.computing, self.download = (
            torch.cuda.Stream(device=dev) for _ in range(3))
        # Per slot: the end of its upload, compute and download (ordering only, no timing).
        event = torch.cuda.Event
        self.uploaded = [event() for _ in range(TRIPLE_DEPTH)]
        self.computed = [event() for _ in range(TRIPLE_DEPTH)]
        self.downloaded = [event() for _ in range(TRIPLE_DEPTH)]

    def sink(self, k, i):
        """Delivers slot `k`'s batch `i`: its output must start with `i + 1`."""
        got = self.host_out[k][0].item()
        if got != i + 1.0:
            raise RuntimeError("batch %d delivered %r (expected %d)" % (i, got, i + 1))

    def sequential(self, batches, cycles, io, wait_s, timed=False):
        """Load, upload, compute, download and deliver one batch, then the next, on one
        stream. Returns the wall seconds, and with `timed` the median upload and download
        ms (events around each copy)."""
        torch = self.torch
        s = self.upload
        buf, x, y, out = self.staging[0], self.dev_in[0], self.dev_out[0], self.host_out[0]
        done = torch.cuda.Event()
        marks = [torch.cuda.Event(enable_timing=timed) for _ in range(4)]
        ups, downs = [], []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(batches):
            io.wait(wait_s)
            buf[0] = float(i)
            with torch.cuda.stream(s):
                if timed:
                    marks[0].record(s)
                x.copy_(buf, non_blocking=True)
                if timed:
                    marks[1].record(s)
                self.compute.enqueue(self.head_in[0], self.head_out[0], cycles)
                if timed:
                    marks[2].record(s)
                out.copy_(y, non_blocking=True)
                if timed:
                    marks[3].record(s)
                done.record(s)
            done.synchronize()
            self.sink(0, i)
            if timed:
                ups.append(marks[0].elapsed_time(marks[1]))
                downs.append(marks[2].elapsed_time(marks[3]))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        return wall, median(ups), median(downs)

    def triple(self, batches, cycles, io, wait_s):
        """Triple buffering: a loader thread fills staging tensors up to `TRIPLE_DEPTH`
        batches ahead; this thread enqueues each batch's upload, compute and download on
        their streams, ordered by events, and delivers batches in order as their downloads
        finish (at the latest when their slot is needed again). Returns the wall seconds."""
        torch = self.torch
        free = queue.Queue()
        for b in self.staging:
            free.put(b)
        ready = queue.Queue(maxsize=TRIPLE_DEPTH)
        stop = threading.Event()
        inflight = [None] * TRIPLE_DEPTH  # per slot: (batch, staging tensor)

        def loader():
            try:
                for i in range(batches):
                    buf = _get(free, stop)
                    if buf is None:
                        return
                    io.wait(wait_s)
                    buf[0] = float(i)
                    if not _put(ready, (i, buf), stop):
                        return
            except BaseException as e:  # raised again on the main thread
                _put(ready, e, stop)

        def submit(k, i, buf):
            up, comp, down = self.upload, self.computing, self.download
            with torch.cuda.stream(up):
                up.wait_event(self.computed[k])  # the slot's last compute read its input
                self.dev_in[k].copy_(buf, non_blocking=True)
                self.uploaded[k].record(up)
            with torch.cuda.stream(comp):
                comp.wait_event(self.uploaded[k])
                comp.wait_event(self.downloaded[k])  # the slot's last download read its output
                self.compute.enqueue(self.head_in[k], self.head_out[k], cycles)
                self.computed[k].record(comp)
            with torch.cuda.stream(down):
                down.wait_event(self.computed[k])
                self.host_out[k].copy_(self.dev_out[k], non_blocking=True)
                self.downloaded[k].record(down)
            inflight[k] = (i, buf)

        def retire(k):
            i, buf = inflight[k]
            self.downloaded[k].synchronize()
            self.sink(k, i)
            inflight[k] = None
            free.put(buf)  # its upload is done: the loader may fill it again

        torch.cuda.synchronize()
        t0 = time.perf_counter()
        thread = threading.Thread(target=loader, name="loader", daemon=True)
        thread.start()
        try:
            oldest = 0  # the oldest batch not yet delivered
            for i in range(batches):
                item = ready.get()
                if isinstance(item, BaseException):
                    raise item
                k = i % TRIPLE_DEPTH
                if inflight[k] is not None:
                    retire(k)
                    oldest += 1
                submit(k, i, item[1])
                while oldest <= i:
                    slot = oldest % TRIPLE_DEPTH
                    f = inflight[slot]
                    if f is None or f[0] != oldest or not self.downloaded[slot].query():
                        break
                    retire(slot)
                    oldest += 1
            for i in range(oldest, batches):
                retire(i % TRIPLE_DEPTH)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        finally:
            stop.set()
            thread.join(timeout=10)
        return wall

    def run(self, pattern, batches, cycles, io, wait_s):
        if pattern == "triple":
            return self.triple(batches, cycles, io, wait_s)
        return self.sequential(batches, cycles, io, wait_s)[0]


def _get(q, stop):
    """The next item of `q`, or None once `stop` is set."""
    while not stop.is_set():
        try:
            return q.get(timeout=0.05)
        except queue.Empty:
            pass
    return None


def _put(q, item, stop):
    """Puts `item` into `q`; False when `stop` was set first."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.05)
            return True
        except queue.Full:
            pass
    return False


def measure_pipelines(torch, dev, plan):
    """pipeline_bench's sweep with PyTorch's sequential and triple patterns."""
    compute = Compute(torch)
    compute.calibrate(dev)
    batches, runs = plan["batches"], plan["pipeline_runs"]
    log("%d batches per run; each point is the median of %d runs (after a warm-up run per "
        "batch size); patterns %s" % (batches, runs, ", ".join(plan["patterns"])))
    points, calibrations = [], []
    for nbytes in plan["batch_bytes"]:
        pipe = Pipe(torch, dev, nbytes // 4, compute)
        no_wait = IoWait(0.0)
        pipe.sequential(batches, 0, no_wait, 0.0, timed=True)  # fills the caches
        _, t_up, t_down = pipe.sequential(batches, 0, no_wait, 0.0, timed=True)
        wait_s = t_up / 1e3
        io = IoWait(wait_s)
        log("\n%s: a batch's upload takes %.3f ms, its download %.3f ms (medians of a sequential "
            "run without compute); the loader sleeps %.3f ms per batch (its overshoot of %.3f ms "
            "taken off); compute spins ratio x %.3f ms" % (
                fmt_bytes(nbytes), t_up, t_down, t_up, io.overshoot * 1e3, t_up))
        calibrations.append({"batch_bytes": nbytes, "upload_ms": t_up, "download_ms": t_down,
                             "sleep_overshoot_ms": io.overshoot * 1e3})
        pipe.triple(batches, compute.cycles(t_up), io, wait_s)  # warm-up
        log("%6s %8s %11s %9s %12s %12s" % (
            "ratio", "batch", "pattern", "seconds", "compute ms", "(requested)"))
        for ratio in plan["ratios"]:
            cycles = compute.cycles(ratio * t_up)
            got_ms = compute.time_ms(pipe.computing, pipe.head_in[0], pipe.head_out[0], cycles, 3)
            samples = {p: [] for p in plan["patterns"]}
            for _ in range(runs):
                for pattern in plan["patterns"]:
                    samples[pattern].append(pipe.run(pattern, batches, cycles, io, wait_s))
            for pattern in plan["patterns"]:
                seconds = median_run(samples[pattern], key=lambda s: s)
                log("%6g %8s %11s %9.4f %12.3f %12.3f" % (
                    ratio, fmt_bytes(nbytes), pattern, seconds, got_ms, ratio * t_up))
                points.append({"pattern": pattern, "ratio": ratio, "batch_bytes": nbytes,
                               "batches": batches, "seconds": seconds,
                               "compute_ms": got_ms, "compute_ms_requested": ratio * t_up,
                               "spin_cycles": cycles})
        del pipe
    torch.cuda.synchronize()
    return {"points": points, "calibration": calibrations,
            "spin": {"cycles_per_ms": compute.slope, "stage_ms_without_spin": compute.intercept}}


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
        return self_test(args) if args.self_test else run(args)
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
