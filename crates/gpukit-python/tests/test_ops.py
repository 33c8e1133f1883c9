"""The library's ops from Python against NumPy (float64 references): the op table's unary
and binary ops by their names within their `ulps` contracts, reductions (whole, rows,
columns), matmul, softmax, log-softmax and cross-entropy, Philox random fills with `Rng`,
and streams and events. On the CPU backend, and on Vulkan (lavapipe in CI) where a device
is found, within the driver's looser precision there (the Rust suite checks the exact
driver bounds). Run by `cargo xtask python` with the wheel installed."""

import os
import threading
import unittest

import numpy as np

import gpukit

CPU = gpukit.Context("cpu")


def skip(test, reason):
    print(f"SKIPPED: {reason}", flush=True)
    test.skipTest(reason)


def contexts(test):
    """The CPU backend, and Vulkan where a device is found."""
    out = [CPU]
    try:
        out.append(gpukit.Context("vulkan"))
    except gpukit.GpukitError as e:
        if os.environ.get("GPU_REQUIRE_VULKAN") == "1":
            raise
        print(f"SKIPPED: the Vulkan arm: no Vulkan device ({e})", flush=True)
    return out


def on(ctx, x):
    return ctx.from_dlpack(np.ascontiguousarray(x), copy=True)


def host(a):
    return np.array(a.tolist(), dtype=np.float64)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    "neg": (lambda x: -x, (-50, 50)),
    "abs": (np.abs, (-50, 50)),
    "square": (np.square, (-50, 50)),
    "relu": (lambda x: np.maximum(x, 0.0), (-50, 50)),
    "sqrt": (np.sqrt, (0, 100)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), (0.01, 100)),
    "exp": (np.exp, (-80, 80)),
    "log": (np.log, (1e-6, 1e6)),
    "log1p": (np.log1p, (-0.99, 100)),
    "sigmoid": (sigmoid, (-80, 80)),
    "silu": (lambda x: x * sigmoid(x), (-80, 80)),
    "tanh": (np.tanh, (-20, 20)),
    "gelu": (lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3))), (0, 20)),
    "softplus": (lambda x: np.logaddexp(0.0, x), (-80, 80)),
    "softsign": (lambda x: x / (1.0 + np.abs(x)), (-50, 50)),
    "hardswish": (lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, (-8, 8)),
}


def within_ulps(got, want, ulps, what):
    """`got` (float32 results) within `ulps` ulp of the exact `want` rounded to float32 (the
    op table's contract: 0 is correctly rounded)."""
    rounded = want.astype(np.float32).astype(np.float64)
    spacing = np.spacing(np.abs(rounded).astype(np.float32)).astype(np.float64)
    bad = np.abs(got - rounded) > ulps * spacing
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{what}: {got[i]!r} against {want[i]!r} (budget {ulps} ulp)")


class TableOps(unittest.TestCase):
    def test_every_unary_op_by_its_name_within_its_budget(self):
        self.assertEqual(sorted(UNARY), sorted(gpukit.UNARY_OPS))
        for ctx in contexts(self):
            for name, (f, (lo, hi)) in UNARY.items():
                x = np.linspace(lo, hi, 3001, dtype=np.float32)
                got = host(ctx.unary(name, on(ctx, x)))
                want = f(x.astype(np.float64))
                if ctx.backend == "cpu":
                    within_ulps(got, want, gpukit.UNARY_ULPS[name], f"{name} on cpu")
                else:
                    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-30, err_msg=name)

    def test_unary_into_out_and_in_place(self):
        x = on(CPU, np.linspace(-2, 2, 9, dtype=np.float32))
        out = CPU.zeros(9)
        self.assertIs(CPU.unary("tanh", x, out), out)
        np.testing.assert_allclose(host(out), np.tanh(np.linspace(-2, 2, 9)), rtol=1e-6)
        CPU.unary("exp", x, x)  # x itself: in place
        np.testing.assert_allclose(host(x), np.exp(np.linspace(-2, 2, 9)), rtol=1e-6)
        with self.assertRaisesRegex(ValueError, r"Context.unary: `out` is float32 of shape \(3,\)"):
            CPU.unary("exp", x, CPU.zeros(3))
        with self.assertRaisesRegex(TypeError, "Context.unary: `exp` takes floating-point"):
            CPU.unary("exp", CPU.zeros(3, dtype="int32"))

    def test_every_binary_op_by_its_name(self):
        a0 = np.linspace(-3, 3, 61, dtype=np.float32)
        b0 = np.linspace(2.5, -4, 61, dtype=np.float32)
        refs = {
            "add": np.add,
            "sub": np.subtract,
            "mul": np.multiply,
            "div": np.divide,
            "min": np.fmin,
            "max": np.fmax,
            "relu_backward": lambda a, b: np.where(a > 0, b, 0.0),
        }
        for ctx in contexts(self):
            for name, f in refs.items():
                got = host(ctx.binary(name, on(ctx, a0), on(ctx, b0)))
                want = f(a0.astype(np.float64), b0.astype(np.float64)).astype(np.float32)
                np.testing.assert_array_equal(got, want, err_msg=f"{name} on {ctx.backend}")
            base = np.abs(a0) + 0.5
            got = host(ctx.binary("pow", on(ctx, base), on(ctx, b0)))
            want = np.power(base.astype(np.float64), b0.astype(np.float64))
            if ctx.backend == "cpu":
                within_ulps(got, want, gpukit.BINARY_ULPS["pow"], "pow")
            else:
                np.testing.assert_allclose(got, want, rtol=1e-4)


class Reductions(unittest.TestCase):
    def test_whole_rows_and_columns_match_numpy(self):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((37, 53)).astype(np.float32)
        for ctx in contexts(self):
            a = on(ctx, x)
            x64 = x.astype(np.float64)
            for axis in [None, 0, 1, -1]:
                for name, f in [("sum", np.sum), ("mean", np.mean), ("min", np.min), ("max", np.max)]:
                    got = ctx.reduce(name, a, axis=axis)
                    want = f(x64, axis=axis)
                    self.assertEqual(got.shape, np.shape(want), f"{name} {axis}")
                    np.testing.assert_allclose(host(got), want, rtol=2e-5, atol=2e-5, err_msg=f"{name} {axis}")
                for name, f in [("argmin", np.argmin), ("argmax", np.argmax)]:
                    got = ctx.reduce(name, a, axis=axis)
                    self.assertEqual(got.dtype, "uint32")
                    np.testing.assert_array_equal(np.array(got.tolist()), f(x, axis=axis), err_msg=name)

    def test_integer_sums_and_bad_axes(self):
        a = on(CPU, np.arange(12, dtype=np.int32).reshape(3, 4))
        self.assertEqual(CPU.reduce("sum", a).tolist(), 66)
        self.assertEqual(CPU.reduce("sum", a, axis=0).tolist(), [12, 15, 18, 21])
        with self.assertRaisesRegex(TypeError, "Context.reduce: `mean` takes floating-point"):
            CPU.reduce("mean", a)
        with self.assertRaisesRegex(ValueError, r"Context.reduce: axis 2 is out of bounds for shape \(3, 4\)"):
            CPU.reduce("sum", a, axis=2)
        with self.assertRaisesRegex(ValueError, "gpukit folds the first or the last axis"):
            CPU.reduce("sum", a.reshape(2, 3, 2), axis=1)
        with self.assertRaisesRegex(ValueError, "no reduction 'prod'"):
            CPU.reduce("prod", a)
        with self.assertRaisesRegex(ValueError, "`max` of an empty array"):
            CPU.reduce("max", CPU.zeros(0))
        self.assertEqual(CPU.reduce("sum", CPU.zeros(0)).tolist(), 0.0)


class MatmulAndRows(unittest.TestCase):
    def test_matmul_matches_numpy(self):
        rng = np.random.default_rng(3)
        for ctx in contexts(self):
            for sa, sb in [((5, 7), (7, 3)), ((4, 5, 6), (4, 6, 2)), ((4, 5, 6), (6, 2)), ((5, 6), (3, 6, 2))]:
                a = rng.standard_normal(sa).astype(np.float32)
                b = rng.standard_normal(sb).astype(np.float32)
                got = ctx.matmul(on(ctx, a), on(ctx, b))
                want = np.matmul(a.astype(np.float64), b.astype(np.float64))
                self.assertEqual(got.shape, want.shape)
                np.testing.assert_allclose(host(got), want, rtol=1e-5, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"shapes \(2, 3\) and \(2, 3\) do not multiply"):
            CPU.matmul(CPU.zeros((2, 3)), CPU.zeros((2, 3)))
        with self.assertRaisesRegex(TypeError, "Context.matmul: `matmul` takes floating-point"):
            CPU.matmul(CPU.zeros((2, 2), dtype="int32"), CPU.zeros((2, 2), dtype="int32"))

    def test_softmax_log_softmax_and_cross_entropy_match_numpy(self):
        rng = np.random.default_rng(5)
        x = (rng.standard_normal((6, 10)) * 4).astype(np.float32)
        labels = rng.integers(0, 10, size=6)
        x64 = x.astype(np.float64)
        logsm = x64 - np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1, keepdims=True)) - x64.max(1, keepdims=True)
        for ctx in contexts(self):
            a = on(ctx, x)
            np.testing.assert_allclose(host(ctx.softmax(a)), np.exp(logsm), rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(host(ctx.log_softmax(a)), logsm, rtol=1e-5, atol=1e-5)
            for ltype in ["uint32", "int64", "int32"]:
                loss = ctx.cross_entropy(a, on(ctx, labels.astype(ltype)))
                np.testing.assert_allclose(host(loss), -logsm[np.arange(6), labels], rtol=1e-5, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"`labels` has shape \(5,\)"):
            CPU.cross_entropy(on(CPU, x), CPU.zeros(5, dtype="uint32"))
        with self.assertRaisesRegex(TypeError, "class indices are integers"):
            CPU.cross_entropy(on(CPU, x), CPU.zeros(6))
        bad = on(CPU, np.full(6, 10, dtype=np.uint32))
        with self.assertRaises((ValueError, gpukit.GpukitError)) as caught:
            CPU.cross_entropy(on(CPU, x), bad)
            CPU.synchronize()
        self.assertIn("cross_entropy", str(caught.exception))


class Random(unittest.TestCase):
    def test_philox_fills_are_reproducible_and_distributed(self):
        r = gpukit.Rng(1234)
        u = CPU.random_uniform((200, 500), -2.0, 3.0, rng=r)
        self.assertEqual(r.offset, 100_000)
        v = np.array(u.tolist())
        self.assertTrue(((v >= -2.0) & (v < 3.0)).all())
        self.assertAlmostEqual(v.mean(), 0.5, delta=0.02)
        # The same seed and position: the same bits; the next position: others.
        again = CPU.random_uniform((200, 500), -2.0, 3.0, rng=gpukit.Rng(1234))
        self.assertEqual(again.tolist(), u.tolist())
        head = CPU.random_uniform(10, -2.0, 3.0, rng=gpukit.Rng(1234, offset=0))
        self.assertEqual(head.tolist(), v.reshape(-1)[:10].tolist())
        nxt = CPU.random_uniform(10, -2.0, 3.0, rng=r)
        self.assertNotEqual(nxt.tolist(), head.tolist())
        n = np.array(CPU.random_normal(100_000, 1.0, 2.0, rng=gpukit.Rng(9), dtype="float64").tolist())
        self.assertAlmostEqual(n.mean(), 1.0, delta=0.03)
        self.assertAlmostEqual(n.std(), 2.0, delta=0.03)
        for ctx in contexts(self)[1:]:
            other = ctx.random_uniform((200, 500), -2.0, 3.0, rng=gpukit.Rng(1234))
            self.assertEqual(other.tolist(), u.tolist(), "the same bits on every backend")
        with self.assertRaisesRegex(TypeError, "Context.random_uniform: a random fill takes floating-point"):
            CPU.random_uniform(3, rng=r, dtype="int32")
        with self.assertRaisesRegex(ValueError, "Context.random_uniform"):
            CPU.random_uniform(3, 2.0, 1.0, rng=r)


class Streams(unittest.TestCase):
    def test_with_a_stream_queues_there_and_is_ordered_across_streams(self):
        s = CPU.stream()
        default = CPU.current_stream
        x = on(CPU, np.arange(100_000, dtype=np.float32))
        with s as entered:
            self.assertIs(entered, s)
            self.assertEqual(repr(CPU.current_stream), repr(s))
            y = CPU.unary("square", x)  # queued on s
            y.scale(0.5)
        self.assertEqual(repr(CPU.current_stream), repr(default))
        # Read on the default stream: gpukit orders it after s's writes.
        z = CPU.binary("add", y, y)
        np.testing.assert_allclose(host(z), np.arange(100_000, dtype=np.float64) ** 2, rtol=1e-6)
        e = s.record()
        other = CPU.stream()
        other.wait(e)
        w = CPU.unary("neg", y, stream=other)
        other.synchronize()
        e.synchronize()
        self.assertTrue(e.query() and s.query())
        self.assertEqual(w.tolist()[3], -4.5)

    def test_the_current_stream_is_per_thread(self):
        s = CPU.stream()
        seen = []
        with s:
            t = threading.Thread(target=lambda: seen.append(repr(CPU.current_stream)))
            t.start()
            t.join()
            self.assertEqual(repr(CPU.current_stream), repr(s))
        self.assertNotEqual(seen[0], repr(s))

    def test_a_stream_of_another_context_is_refused(self):
        other = gpukit.Context("cpu")
        with self.assertRaisesRegex(ValueError, "Array.fill: `stream` is a stream of another gpukit.Context"):
            CPU.zeros(3).fill(1.0, stream=other.stream())


if __name__ == "__main__":
    unittest.main(verbosity=2)
