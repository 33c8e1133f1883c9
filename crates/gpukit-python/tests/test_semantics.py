"""What a Python user meets beyond DLPack, checked against NumPy: `Context.binary`'s shapes
and broadcasting, an `out` that is or overlaps an input, one array used from several
threads, and errors that name the Python call in Python's terms. Run by `cargo xtask python`
with the wheel installed."""

import ctypes
import threading
import unittest

import numpy as np

import gpukit

CPU = gpukit.Context("cpu")


def on(ctx, x):
    """A gpukit copy of the NumPy array `x`."""
    return ctx.from_dlpack(np.ascontiguousarray(x), copy=True)


def result(a):
    return np.array(a.tolist(), dtype=a.dtype)


_get = ctypes.pythonapi.PyCapsule_GetPointer
_get.restype = ctypes.c_void_p
_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


class ReadOnlyProducer:
    """A DLPack 1.x producer that exports a gpukit copy of `x` flagged read-only (whatever
    NumPy's version): the flags word follows the version, the context and the deleter."""

    def __init__(self, x):
        self.inner = CPU.from_dlpack(np.ascontiguousarray(x), copy=True)

    def __dlpack__(self, **kw):
        cap = self.inner.__dlpack__(max_version=(1, 0))
        flags = ctypes.c_uint64.from_address(_get(cap, b"dltensor_versioned") + 8 + 8 + 8)
        flags.value |= 1  # DLPACK_FLAG_BITMASK_READ_ONLY
        return cap

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def read_only(x):
    """A read-only gpukit array sharing a copy of `x`."""
    a = CPU.from_dlpack(ReadOnlyProducer(x))
    assert a.readonly
    return a


class Broadcasting(unittest.TestCase):
    A = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5

    def check(self, op, npop, a, b):
        expected = npop(a, b)
        out = CPU.zeros(expected.shape, dtype=expected.dtype)
        CPU.binary(op, on(CPU, a), on(CPU, b), out)
        np.testing.assert_array_equal(result(out), expected, err_msg=f"{op} {a.shape} {b.shape}")

    def test_every_broadcast_gpukit_runs_matches_numpy(self):
        a = self.A
        row = np.array([1.5, -2.0, 4.0], dtype=np.float32)
        col = np.array([[3.0], [-0.5]], dtype=np.float32)
        one = np.array([2.0], dtype=np.float32)
        scalar = np.array(2.0, dtype=np.float32)
        cases = [
            (a, a),
            (a, row),
            (a, row.reshape(1, 3)),
            (a, col),
            (a, one),
            (a, scalar),
            (a, one.reshape(1, 1)),
            # The left operand broadcast: swapped where the op commutes, else expanded.
            (row, a),
            (col, a),
            (scalar, a),
            # Neither has the result's shape: (1, 3) and (2, 1) make (2, 3).
            (row.reshape(1, 3), col),
            # Leading dimensions of 1.
            (a.reshape(1, 2, 3), row),
            (a.reshape(2, 1, 3), a.reshape(2, 1, 3)),
        ]
        for x, y in cases:
            for op, npop in [
                ("add", np.add),
                ("sub", np.subtract),
                ("mul", np.multiply),
                ("div", np.divide),
                ("pow", None),
            ]:
                if op == "pow":
                    # Positive bases: pow's budget is ulps, not bits.
                    xp, yp = np.abs(x) + 0.5, y
                    expected = np.power(xp.astype(np.float64), yp.astype(np.float64))
                    out = CPU.zeros(expected.shape)
                    CPU.binary("pow", on(CPU, xp), on(CPU, yp), out)
                    np.testing.assert_allclose(result(out), expected, rtol=1e-6)
                    continue
                self.check(op, npop, x, y)

    def test_integer_div_truncates_toward_zero_unlike_numpys_floor_division(self):
        a = np.array([-7, 7, -7, 7, 5], dtype=np.int32)
        b = np.array([2, 2, -2, -2, 0], dtype=np.int32)
        out = CPU.zeros(5, dtype="int32")
        CPU.binary("div", on(CPU, a), on(CPU, b), out)
        # C's `/` (and 0 for a division by zero), as documented: NumPy's `//` floors.
        self.assertEqual(out.tolist(), [-3, 3, 3, -3, 0])
        self.assertNotEqual(out.tolist()[:4], list(a[:4] // b[:4]))

    def test_shapes_that_do_not_broadcast_are_refused_with_the_shapes(self):
        with self.assertRaisesRegex(
            ValueError, r"Context.binary: operands could not be broadcast together with shapes \(2, 3\) \(6,\)"
        ):
            CPU.binary("add", CPU.zeros((2, 3)), CPU.zeros(6), CPU.zeros((2, 3)))
        with self.assertRaisesRegex(ValueError, r"`out` has shape \(3, 2\).*has shape \(2, 3\)"):
            CPU.binary("add", CPU.zeros((2, 3)), CPU.zeros((2, 3)), CPU.zeros((3, 2)))
        with self.assertRaisesRegex(ValueError, r"\(2, 1, 3\) and \(1, 4, 1\) broadcast to \(2, 4, 3\)"):
            CPU.binary("add", CPU.zeros((2, 1, 3)), CPU.zeros((1, 4, 1)), CPU.zeros((2, 4, 3)))

    def test_a_refused_op_writes_nothing(self):
        out = CPU.full(6, 7.0)
        with self.assertRaises(ValueError):
            CPU.binary("add", CPU.zeros((2, 3)), CPU.zeros(6), out)
        self.assertEqual(out.tolist(), [7.0] * 6)


class Aliasing(unittest.TestCase):
    def test_out_may_be_an_input(self):
        a0 = np.array([1.0, -2.0, 3.5], dtype=np.float32)
        b0 = np.array([0.5, 4.0, -1.0], dtype=np.float32)
        for op, npop in [("add", np.add), ("sub", np.subtract), ("div", np.divide)]:
            a, b = on(CPU, a0), on(CPU, b0)
            CPU.binary(op, a, b, a)  # out is a: in place
            np.testing.assert_array_equal(result(a), npop(a0, b0), err_msg=op)
            a, b = on(CPU, a0), on(CPU, b0)
            CPU.binary(op, a, b, b)  # out is b
            np.testing.assert_array_equal(result(b), npop(a0, b0), err_msg=op)
            a = on(CPU, a0)
            CPU.binary(op, a, a, a)  # all three one array
            np.testing.assert_array_equal(result(a), npop(a0, a0), err_msg=op)

    def test_an_out_that_overlaps_an_input_through_two_views_gives_numpys_result(self):
        for shift in [1, 2, -2]:
            host = np.arange(10, dtype=np.float32)
            expect = host.copy()
            lo, hi = (slice(0, 8), slice(2, 10)) if shift > 0 else (slice(2, 10), slice(0, 8))
            if abs(shift) == 1:
                lo, hi = slice(0, 9), slice(1, 10)
            np.add(expect[lo], expect[lo], out=expect[hi])
            x = CPU.from_dlpack(host[lo])  # shares host's memory
            y = CPU.from_dlpack(host[hi])  # shares it too, shifted
            CPU.binary("add", x, x, y)
            CPU.synchronize()
            np.testing.assert_array_equal(host, expect, err_msg=f"shift {shift}")

    def test_an_out_that_is_an_inputs_export_gives_numpys_result(self):
        if np.lib.NumpyVersion(np.__version__) < "2.1.0":
            reason = "NumPy before 2.1 gives read-only views, which it cannot export back"
            print(f"SKIPPED: {reason}", flush=True)
            self.skipTest(reason)
        a = on(CPU, np.arange(6, dtype=np.float32))
        view = np.from_dlpack(a)  # NumPy's view of a's memory
        again = CPU.from_dlpack(view)  # a second gpukit array over the same memory
        expect = np.arange(6, dtype=np.float32) + 1
        CPU.binary("add", a, on(CPU, np.ones(6, dtype=np.float32)), again)
        np.testing.assert_array_equal(result(a), expect)


class Threads(unittest.TestCase):
    def test_one_array_from_several_threads(self):
        a = CPU.full(4096, 1.0)
        errors = []
        stop = threading.Event()

        def writer():
            try:
                while not stop.is_set():
                    a.scale(1.0)
                    a.fill(1.0)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        def exporter():
            try:
                for _ in range(300):
                    v = np.from_dlpack(a)
                    if not (v == 1.0).all():
                        errors.append(AssertionError("an export saw a value other than 1"))
                    CPU.binary("add", a, a, CPU.zeros(4096))
                    a.tolist()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer) for _ in range(2)]
        readers = [threading.Thread(target=exporter) for _ in range(2)]
        for t in threads + readers:
            t.start()
        for t in readers:
            t.join()
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(set(a.tolist()), {1.0})


# Every error a user can provoke, with the class it must have; each message names the Python
# call (the word before the first colon) and no Rust path.
def provocations():
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    i32 = CPU.zeros(3, dtype="int32")
    imported_ro = read_only(np.arange(3, dtype=np.float32))
    return [
        ("Context.from_dlpack", BufferError, lambda: CPU.from_dlpack(strided, copy=False)),
        ("Context.from_dlpack", BufferError, lambda: CPU.from_dlpack(np.zeros(2, dtype=np.bool_))),
        ("Context.from_dlpack", TypeError, lambda: CPU.from_dlpack(5)),
        ("Array.fill", ValueError, lambda: imported_ro.fill(1.0)),
        ("Array.scale", ValueError, lambda: imported_ro.scale(2.0)),
        ("Array.apply", ValueError, lambda: imported_ro.apply("exp")),
        ("Context.binary", ValueError, lambda: CPU.binary("add", CPU.zeros(3), CPU.zeros(3), imported_ro)),
        ("Array.apply", TypeError, lambda: i32.apply("exp")),
        ("Array.apply", ValueError, lambda: CPU.zeros(3).apply("nope")),
        ("Array.fill", TypeError, lambda: i32.fill(1.5)),
        ("Array.fill", OverflowError, lambda: CPU.zeros(3, dtype="uint8").fill(300)),
        ("Array.fill", TypeError, lambda: CPU.zeros(3).fill("x")),
        ("Context.binary", TypeError, lambda: CPU.binary("pow", i32, i32, i32)),
        ("Context.binary", TypeError, lambda: CPU.binary("add", i32, CPU.zeros(3), CPU.zeros(3))),
        ("Context.binary", ValueError, lambda: CPU.binary("nope", i32, i32, i32)),
        ("Context.binary", ValueError, lambda: CPU.binary("add", CPU.zeros(2), CPU.zeros(3), CPU.zeros(3))),
        ("Context.binary", ValueError, lambda: CPU.binary("add", CPU.zeros(3), gpukit.Context("cpu").zeros(3), CPU.zeros(3))),
        ("Context.zeros", TypeError, lambda: CPU.zeros(3, dtype="complex64")),
        ("Context.zeros", TypeError, lambda: CPU.zeros("x")),
        ("Context.zeros", ValueError, lambda: CPU.zeros((2**40, 2**40))),
        ("Context.full", TypeError, lambda: CPU.full(3, 1.5, dtype="int32")),
        ("Context", ValueError, lambda: gpukit.Context("nope:3")),
        ("Array.__dlpack__", BufferError, lambda: CPU.zeros(3).__dlpack__(dl_device=(2, 0))),
        ("Array.__dlpack__", BufferError, lambda: CPU.zeros(3).__dlpack__(stream=5)),
    ]


class Errors(unittest.TestCase):
    def test_every_error_names_the_python_call_in_pythons_terms(self):
        for call, kind, provoke in provocations():
            with self.subTest(call=call, kind=kind.__name__):
                with self.assertRaises(kind) as caught:
                    provoke()
                message = str(caught.exception)
                self.assertTrue(message.startswith(call + ":"), message)
                self.assertNotRegex(message, r"\w::\w", "a Rust path in a Python error")
                self.assertNotIn("Already borrowed", message)

    def test_what_to_do_is_said_in_python(self):
        strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
        with self.assertRaisesRegex(BufferError, r"copy=False forbids a copy: pass copy=None"):
            CPU.from_dlpack(strided, copy=False)
        with self.assertRaisesRegex(BufferError, r"holds bool, not one of gpukit's element types"):
            CPU.from_dlpack(np.zeros(2, dtype=np.bool_))
        with self.assertRaisesRegex(BufferError, r"holds int16"):
            CPU.from_dlpack(np.zeros(2, dtype=np.int16))
        with self.assertRaisesRegex(TypeError, r"`exp` takes floating-point arrays, this one holds int32"):
            CPU.zeros(3, dtype="int32").apply("exp")
        ro = read_only(np.arange(3, dtype=np.float32))
        with self.assertRaisesRegex(ValueError, r"read-only.*copy\(\) gives a writable copy"):
            ro.fill(0.0)
        self.assertFalse(ro.copy().readonly)


if __name__ == "__main__":
    unittest.main(verbosity=2)
