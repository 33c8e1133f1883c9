"""gpukit's Python module against NumPy (and PyTorch where it is installed): memory shared
both ways through DLPack (a write on one side is seen on the other), lifetimes both ways,
the versioned and legacy capsules, read-only tensors, strided input, the element types, and
typed errors. Run by `cargo xtask python` with the wheel installed in its environment."""

import ctypes
import gc
import os
import sys
import unittest

import numpy as np

import gpukit

CPU = gpukit.Context("cpu")

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype = ctypes.c_char_p
_name.argtypes = [ctypes.py_object]


def capsule_name(cap):
    return _name(cap).decode()


class Legacy:
    """A producer from before DLPack 1.0: `__dlpack__` takes no `max_version`."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, stream=None):
        return self.inner.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


# NumPy speaks DLPack 1.x (versioned capsules, read-only flags, writable views, `copy=`)
# from 2.1; Python 3.9's last NumPy, 2.0, gives legacy capsules and read-only views.
NUMPY_DLPACK_1 = np.lib.NumpyVersion(np.__version__) >= "2.1.0"
OLD_NUMPY = f"NumPy {np.__version__} speaks legacy DLPack only (2.1 and later: DLPack 1.x)"


def skip(test, reason):
    print(f"SKIPPED: {reason}", flush=True)
    test.skipTest(reason)


class NumpyReadsOurs(unittest.TestCase):
    def test_a_view_shares_the_memory_both_ways(self):
        if not NUMPY_DLPACK_1:
            skip(self, f"{OLD_NUMPY}: its views are read-only")
        a = CPU.zeros((2, 3))
        v = np.from_dlpack(a)
        self.assertEqual(v.shape, (2, 3))
        self.assertEqual(v.dtype, np.float32)
        a.fill(7.0)
        CPU.synchronize()
        self.assertTrue((v == 7.0).all(), v)
        v[1, 2] = -1.5  # NumPy's write, in gpukit's memory
        self.assertEqual(a.tolist(), [[7.0, 7.0, 7.0], [7.0, 7.0, -1.5]])
        # A second view is the same memory.
        w = np.from_dlpack(a)
        self.assertEqual(v.ctypes.data, w.ctypes.data)

    def test_the_export_waits_for_the_arrays_queued_work(self):
        # No synchronize: the export orders the consumer after the last op.
        for _ in range(5):
            a = CPU.full(1 << 20, 1.0)
            a.apply("exp")
            v = np.from_dlpack(a)
            np.testing.assert_array_equal(v, np.float32(np.e))

    def test_the_view_outlives_the_array(self):
        a = CPU.full((1000,), 3.0)
        v = np.from_dlpack(a)
        del a
        gc.collect()
        # Fresh arrays of the same size would reuse the memory had it been released.
        others = [CPU.full((1000,), float(i)) for i in range(8)]
        CPU.synchronize()
        self.assertTrue((v == 3.0).all())
        del others

    def test_copy_true_exports_a_copy(self):
        if not NUMPY_DLPACK_1:
            skip(self, f"{OLD_NUMPY}: its from_dlpack takes no copy=")
        a = CPU.full((4,), 2.0)
        v = np.from_dlpack(a, copy=True)
        v[0] = 9.0
        self.assertEqual(a.tolist(), [2.0] * 4)

    def test_protocol_errors_are_buffer_errors(self):
        a = CPU.zeros(4)
        self.assertEqual(a.__dlpack_device__(), (1, 0))
        with self.assertRaisesRegex(BufferError, "dl_device"):
            a.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
        with self.assertRaisesRegex(BufferError, "stream=5"):
            a.__dlpack__(max_version=(1, 0), stream=5)
        a.__dlpack__(max_version=(1, 0), stream=-1)


class WeReadNumpy(unittest.TestCase):
    def test_an_import_shares_the_memory_both_ways(self):
        h = np.arange(6, dtype=np.float32).reshape(2, 3)
        b = CPU.from_dlpack(h)
        self.assertEqual((b.shape, b.dtype, b.readonly), ((2, 3), "float32", False))
        b.fill(4.0)
        CPU.synchronize()
        self.assertTrue((h == 4.0).all(), h)
        h[0, 1] = 8.0
        self.assertEqual(b.tolist(), [[4.0, 8.0, 4.0], [4.0, 4.0, 4.0]])
        b.apply("sqrt")
        CPU.synchronize()
        self.assertEqual(h[0, 1], np.sqrt(np.float32(8.0)))

    def test_the_producer_is_released_once_when_the_last_holder_goes(self):
        h = np.ones(100, dtype=np.float64)
        before = sys.getrefcount(h)
        b = CPU.from_dlpack(h)
        self.assertEqual(sys.getrefcount(h), before + 1, "the import holds NumPy's array")
        # Handed on: the export holds the producer's tensor after the import is gone.
        cap = b.__dlpack__(max_version=(1, 0))
        self.assertEqual(capsule_name(cap), "dltensor_versioned")
        del b
        gc.collect()
        self.assertEqual(sys.getrefcount(h), before + 1)
        del cap  # never consumed: its destructor gives the tensor back
        gc.collect()
        self.assertEqual(sys.getrefcount(h), before, "the deleter ran exactly once")

    def test_the_import_outlives_the_producers_name(self):
        h = np.full(1000, 5.0, dtype=np.float32)
        b = CPU.from_dlpack(h)
        del h
        gc.collect()
        junk = [np.full(1000, -1.0, dtype=np.float32) for _ in range(16)]
        self.assertEqual(b.tolist(), [5.0] * 1000)
        del junk

    def test_a_round_trip_through_numpy_keeps_everything_alive(self):
        a = CPU.full((3,), 1.25)
        back = CPU.from_dlpack(np.from_dlpack(a))
        del a
        gc.collect()
        self.assertEqual(back.tolist(), [1.25] * 3)

    def test_read_only_arrays_stay_read_only(self):
        h = np.arange(4, dtype=np.int32)
        h.flags.writeable = False
        if not NUMPY_DLPACK_1:
            # NumPy cannot export a read-only array: copy=None copies it (writable, as
            # every copy), copy=False refuses.
            c = CPU.from_dlpack(h)
            self.assertFalse(c.readonly)
            c.fill(1)
            self.assertEqual(h.tolist(), [0, 1, 2, 3])
            with self.assertRaisesRegex(BufferError, "copy=False forbids a copy"):
                CPU.from_dlpack(h, copy=False)
            return
        b = CPU.from_dlpack(h)
        self.assertTrue(b.readonly)
        with self.assertRaisesRegex(ValueError, "read-only"):
            b.fill(1)
        v = np.from_dlpack(b)
        self.assertFalse(v.flags.writeable)
        self.assertEqual(v.tolist(), [0, 1, 2, 3])
        with self.assertRaisesRegex(BufferError, "read-only"):
            b.__dlpack__()  # the legacy form has no read-only flag

    def test_strided_input_is_copied_or_refused(self):
        h = np.arange(12, dtype=np.float32).reshape(3, 4).T  # not contiguous
        b = CPU.from_dlpack(h)  # copy=None: copies what it cannot share
        self.assertEqual(b.tolist(), h.tolist())
        b.fill(0.0)
        CPU.synchronize()
        self.assertEqual(h[1, 2], 9.0, "a copy, not NumPy's memory")
        with self.assertRaisesRegex(BufferError, "not contiguous"):
            CPU.from_dlpack(h, copy=False)
        c = CPU.from_dlpack(np.arange(3, dtype=np.float32), copy=True)
        self.assertEqual(c.tolist(), [0.0, 1.0, 2.0])

    def test_unaligned_input_is_copied_where_a_copy_is_allowed(self):
        raw = bytearray(4 * 6 + 1)
        h = np.frombuffer(raw, dtype=np.float32, offset=1, count=6)
        self.assertFalse(h.flags.aligned)
        h[:] = np.arange(6, dtype=np.float32) - 2.5
        for copy in [None, True]:
            a = CPU.from_dlpack(h, copy=copy)
            self.assertEqual(a.tolist(), (np.arange(6) - 2.5).tolist())
            a.fill(0.0)  # the copy's, not the producer's
            self.assertEqual(h.tolist(), (np.arange(6) - 2.5).tolist())
        with self.assertRaisesRegex(BufferError, r"not aligned.*copy=False forbids a copy"):
            CPU.from_dlpack(h, copy=False)

    def test_a_failed_import_leaves_the_tensor_with_its_producer(self):
        h = np.zeros((2, 3), dtype=np.float32).T
        before = sys.getrefcount(h)
        for _ in range(3):
            with self.assertRaises(BufferError):
                CPU.from_dlpack(h, copy=False)
        gc.collect()
        self.assertEqual(sys.getrefcount(h), before)


class Capsules(unittest.TestCase):
    def test_versioned_and_legacy_capsules(self):
        a = CPU.full((2,), 6.0)
        self.assertEqual(capsule_name(a.__dlpack__(max_version=(1, 0))), "dltensor_versioned")
        self.assertEqual(capsule_name(a.__dlpack__(max_version=(2, 3))), "dltensor_versioned")
        self.assertEqual(capsule_name(a.__dlpack__()), "dltensor")
        self.assertEqual(capsule_name(a.__dlpack__(max_version=(0, 8))), "dltensor")
        # NumPy reads the legacy form (it retries without max_version) ...
        v = np.from_dlpack(Legacy(a))
        a.fill(1.0)
        CPU.synchronize()
        self.assertEqual(v.tolist(), [1.0, 1.0])
        # ... and so do we, from NumPy's legacy export.
        h = np.arange(3, dtype=np.int64)
        b = CPU.from_dlpack(Legacy(h))
        b.scale(10)
        CPU.synchronize()
        self.assertEqual(h.tolist(), [0, 10, 20])

    def test_a_consumed_capsule_is_marked_used(self):
        h = np.arange(3, dtype=np.float32)
        caps = []

        class Keep:
            def __dlpack__(self, **kw):
                caps.append(h.__dlpack__(**kw))
                return caps[-1]

            def __dlpack_device__(self):
                return h.__dlpack_device__()

        b = CPU.from_dlpack(Keep())
        used = "used_dltensor_versioned" if NUMPY_DLPACK_1 else "used_dltensor"
        self.assertEqual(capsule_name(caps[0]), used)
        del caps[:]
        gc.collect()
        self.assertEqual(b.tolist(), [0.0, 1.0, 2.0])


class ElementTypes(unittest.TestCase):
    def test_every_numpy_type_round_trips(self):
        for name in ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "uint64"]:
            h = (np.arange(10) - (0 if name.startswith("u") else 4)).astype(name)
            b = CPU.from_dlpack(h)
            self.assertEqual(b.dtype, name)
            self.assertEqual(b.tolist(), h.tolist(), name)
            v = np.from_dlpack(CPU.zeros(3, dtype=name))
            self.assertEqual(v.dtype, np.dtype(name))
            self.assertEqual(np.from_dlpack(CPU.zeros(3, dtype=getattr(np, name))).dtype, np.dtype(name))
        z = CPU.full((2, 2), 1.5, dtype="bfloat16")
        self.assertEqual(z.tolist(), [[1.5, 1.5], [1.5, 1.5]])

    def test_unsupported_types_are_buffer_errors(self):
        for h in [np.zeros(3, dtype=np.int16), np.zeros(3, dtype=np.bool_), np.zeros(3, dtype=np.complex64)]:
            with self.assertRaisesRegex(BufferError, "not one of gpukit's element types"):
                CPU.from_dlpack(h)


class Errors(unittest.TestCase):
    def test_bad_input_is_a_typed_error(self):
        with self.assertRaisesRegex(TypeError, "not a DLPack producer"):
            CPU.from_dlpack(5)
        with self.assertRaisesRegex(TypeError, "dtype"):
            CPU.zeros(3, dtype="complex64")
        with self.assertRaises(ValueError):
            gpukit.Context("nope:3")
        with self.assertRaisesRegex(ValueError, "no unary op"):
            CPU.zeros(3).apply("nope")
        with self.assertRaisesRegex(TypeError, "int32"):
            CPU.binary("add", CPU.zeros(3, dtype="int32"), CPU.zeros(3), CPU.zeros(3))
        with self.assertRaisesRegex(
            ValueError, r"Context.binary: operands could not be broadcast together with shapes \(3,\) \(4,\)"
        ):
            CPU.binary("add", CPU.zeros(3), CPU.zeros(4), CPU.zeros(3))
        with self.assertRaises(OverflowError):
            CPU.zeros(3, dtype="uint8").fill(300)
        with self.assertRaises(TypeError):
            CPU.zeros(3, dtype="int32").fill(1.5)
        with self.assertRaises(TypeError):
            len(CPU.zeros(()))

    def test_binary_ops_match_numpy(self):
        a = CPU.from_dlpack(np.array([1.0, 2.0, 3.0], dtype=np.float32))
        b = CPU.from_dlpack(np.array([4.0, 5.0, 6.0], dtype=np.float32))
        out = CPU.zeros(3)
        CPU.binary("mul", a, b, out)
        self.assertEqual(out.tolist(), [4.0, 10.0, 18.0])
        self.assertIn("add", gpukit.BINARY_OPS)
        self.assertIn("exp", gpukit.UNARY_OPS)


class Jax(unittest.TestCase):
    """JAX (CPU jaxlib from PyPI, which `cargo xtask python` installs where it can): its
    arrays are immutable, and its capsules are the legacy form, without a read-only flag."""

    def setUp(self):
        try:
            import jax.numpy as jnp
        except ImportError:
            skip(self, "JAX is not installed (pip install jax)")
        self.jnp = jnp

    def test_jax_arrays_come_in_shared_and_read_only(self):
        jnp = self.jnp
        x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
        a = CPU.from_dlpack(x)
        self.assertEqual(a.shape, (2, 3))
        self.assertTrue(a.readonly)
        # Shared, not copied: NumPy's view of gpukit's array is JAX's buffer.
        self.assertEqual(np.from_dlpack(a).ctypes.data, x.unsafe_buffer_pointer())
        with self.assertRaisesRegex(ValueError, "Array.fill: the array is read-only"):
            a.fill(1.0)
        with self.assertRaisesRegex(ValueError, "read-only"):
            CPU.binary("add", a, a, a)
        self.assertEqual(x.tolist(), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
        # A copy is the caller's own, writable.
        c = CPU.from_dlpack(x, copy=True)
        self.assertFalse(c.readonly)
        c.fill(2.0)
        self.assertEqual(c.tolist(), [[2.0] * 3] * 2)
        self.assertEqual(x.tolist(), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])

    def test_jax_reads_ours(self):
        jnp = self.jnp
        for dtype in ["float32", "bfloat16", "int32", "uint8"]:
            a = CPU.full((2, 2), 3, dtype=dtype)
            y = jnp.from_dlpack(a)
            self.assertEqual(str(y.dtype), dtype)
            self.assertEqual(y.tolist(), [[3, 3], [3, 3]])
            back = CPU.from_dlpack(y)
            self.assertEqual(back.tolist(), [[3, 3], [3, 3]])


class Vulkan(unittest.TestCase):
    def test_vulkan_arrays_are_not_exportable(self):
        try:
            ctx = gpukit.Context("vulkan")
        except gpukit.GpukitError as e:
            if os.environ.get("GPU_REQUIRE_VULKAN") == "1":
                raise
            skip(self, f"no Vulkan device ({e})")
        a = ctx.full(4, 2.0)
        self.assertEqual(a.__dlpack_device__()[0], 7)
        with self.assertRaisesRegex(BufferError, "no address"):
            np.from_dlpack(a)
        # Host memory comes in as a copy.
        b = ctx.from_dlpack(np.arange(4, dtype=np.float32))
        self.assertEqual(b.tolist(), [0.0, 1.0, 2.0, 3.0])
        with self.assertRaisesRegex(BufferError, "cannot be shared"):
            ctx.from_dlpack(np.arange(4, dtype=np.float32), copy=False)


class Torch(unittest.TestCase):
    def setUp(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            skip(self, "PyTorch is not installed (pip install torch)")

    def test_torch_shares_our_memory_both_ways(self):
        import torch

        a = CPU.zeros((2, 2))
        t = torch.from_dlpack(a)
        a.fill(3.0)
        CPU.synchronize()
        self.assertTrue(bool((t == 3.0).all()))
        t.add_(1.0)
        self.assertEqual(a.tolist(), [[4.0, 4.0], [4.0, 4.0]])
        src = torch.arange(4, dtype=torch.float32)
        b = CPU.from_dlpack(src)
        b.scale(2.0)
        CPU.synchronize()
        self.assertEqual(src.tolist(), [0.0, 2.0, 4.0, 6.0])
        del src
        gc.collect()
        self.assertEqual(b.tolist(), [0.0, 2.0, 4.0, 6.0])

    def test_torch_on_a_cuda_device(self):
        import torch

        if not torch.cuda.is_available():
            skip(self, "no CUDA device for PyTorch")
        try:
            ctx = gpukit.Context("cuda:0")
        except gpukit.GpukitError as e:
            skip(self, f"gpukit has no CUDA device ({e})")
        src = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        src.mul_(2.0)  # queued on torch's stream: the import's stream waits for it
        b = ctx.from_dlpack(src)
        b.scale(0.5)
        t = torch.from_dlpack(b)  # torch's stream waits for ours
        self.assertEqual(t.data_ptr(), src.data_ptr())
        self.assertTrue(bool((t == torch.arange(1 << 20, dtype=torch.float32, device="cuda")).all()))
        del src, t
        gc.collect()
        self.assertEqual(b.tolist()[:3], [0.0, 1.0, 2.0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
