"""torch_measure.py: PyTorch's side of torch_compare.py (which see): the transfers, the op
enqueue and the pipelines, measured through the imported torch module that every function
takes (nothing here imports torch). torch_compare.py imports this module when torch is there."""

import queue
import threading
import time

from torch_compare import (
    ENQUEUE_ELEMENTS, ENQUEUE_KIND, ENQUEUE_LAUNCHES, ENQUEUE_ROUNDS, LARGE_TRANSFER_BYTES,
    LEAD_SPIN_CYCLES, SLEEP_SAMPLES, TRANSFER_DIRS, TRANSFER_KINDS, TRIPLE_DEPTH,
    fmt_bytes, gbps, log, median, median_run,
)


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
