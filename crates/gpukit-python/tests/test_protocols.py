"""NumPy's protocols on gpukit arrays: `numpy.asarray`/`numpy.array` (`__array__`, a view of
host memory, a copy of device memory), `to_numpy`, `dtype` objects that compare with NumPy's,
`nbytes`, `reshape` views and `astype` conversions, checked against NumPy. Run by
`cargo xtask python` with the wheel installed."""

import os
import unittest

import numpy as np

import gpukit

CPU = gpukit.Context("cpu")


def skip(test, reason):
    print(f"SKIPPED: {reason}", flush=True)
    test.skipTest(reason)


def vulkan(test):
    try:
        return gpukit.Context("vulkan")
    except gpukit.GpukitError as e:
        if os.environ.get("GPU_REQUIRE_VULKAN") == "1":
            raise
        skip(test, f"no Vulkan device ({e})")


class ArrayProtocol(unittest.TestCase):
    def test_asarray_is_a_view_of_host_memory(self):
        a = CPU.full((2, 3), 1.5)
        v = np.asarray(a)
        self.assertEqual((v.shape, v.dtype), ((2, 3), np.float32))
        self.assertTrue((v == 1.5).all())
        self.assertEqual(v.ctypes.data, np.from_dlpack(a).ctypes.data)
        a.fill(2.0)
        CPU.synchronize()
        self.assertTrue((v == 2.0).all())
        # copy=False is honoured on host memory.
        self.assertEqual(np.asarray(a, copy=False).ctypes.data, v.ctypes.data)
        # NumPy takes the buffer protocol before `__array__` where the module has it: the
        # protocol's own view is the same memory.
        self.assertEqual(a.__array__(copy=False).ctypes.data, v.ctypes.data)

    def test_array_copies_and_dtype_converts(self):
        a = CPU.from_dlpack(np.arange(6, dtype=np.float32).reshape(2, 3), copy=True)
        c = np.array(a)
        self.assertNotEqual(c.ctypes.data, np.asarray(a).ctypes.data)
        a.fill(0.0)
        CPU.synchronize()
        self.assertEqual(c.tolist(), [[0, 1, 2], [3, 4, 5]])
        d = np.asarray(a, dtype=np.float64)
        self.assertEqual(d.dtype, np.float64)
        # NumPy reads host memory through the buffer protocol where the module has it, and
        # refuses the conversion itself; `__array__` refuses it as well.
        with self.assertRaises(ValueError):
            np.asarray(a, dtype=np.float64, copy=False)
        with self.assertRaisesRegex(ValueError, "Array.__array__: converting to another dtype"):
            a.__array__(dtype=np.float64, copy=False)
        t = a.to_numpy()
        self.assertNotEqual(t.ctypes.data, np.asarray(a).ctypes.data)
        self.assertEqual(t.tolist(), [[0.0] * 3] * 2)

    def test_every_element_type(self):
        for name in ["float32", "float64", "float16", "int8", "uint8", "int32", "uint32", "int64", "uint64"]:
            a = CPU.full(4, 3, dtype=name)
            v = np.asarray(a)
            self.assertEqual(v.dtype, np.dtype(name), name)
            self.assertEqual(v.tolist(), [3] * 4, name)

    def test_bfloat16_is_a_copy_through_ml_dtypes(self):
        a = CPU.full(3, 1.5, dtype="bfloat16")
        try:
            import ml_dtypes
        except ImportError:
            with self.assertRaisesRegex(TypeError, "ml_dtypes"):
                np.asarray(a)
            return
        v = np.asarray(a)
        self.assertEqual(v.dtype, np.dtype(ml_dtypes.bfloat16))
        self.assertEqual(v.astype(np.float32).tolist(), [1.5] * 3)
        with self.assertRaisesRegex(ValueError, "cannot view bfloat16"):
            np.asarray(a, copy=False)

    def test_device_memory_comes_back_as_a_copy(self):
        vk = vulkan(self)
        a = vk.from_dlpack(np.arange(6, dtype=np.float32).reshape(3, 2))
        v = np.asarray(a)
        self.assertEqual(v.tolist(), [[0, 1], [2, 3], [4, 5]])
        a.fill(9.0)
        self.assertEqual(np.asarray(a).tolist(), [[9.0] * 2] * 3)
        self.assertEqual(v.tolist(), [[0, 1], [2, 3], [4, 5]])
        with self.assertRaisesRegex(ValueError, "vulkan device memory, which NumPy cannot view"):
            np.asarray(a, copy=False)


class DTypes(unittest.TestCase):
    def test_dtype_compares_with_numpys(self):
        a = CPU.zeros(3)
        self.assertTrue(a.dtype == np.float32)
        self.assertTrue(a.dtype == np.dtype("float32"))
        self.assertTrue(a.dtype == "float32")
        self.assertTrue(a.dtype != np.float64)
        self.assertFalse(a.dtype == 5)
        self.assertEqual(np.dtype(a.dtype), np.float32)
        self.assertEqual(str(a.dtype), "float32")
        self.assertEqual(hash(a.dtype), hash("float32"))
        self.assertEqual((a.dtype.name, a.dtype.itemsize, a.dtype.kind), ("float32", 4, "f"))
        self.assertEqual(CPU.zeros(3, dtype=np.uint8).dtype.kind, "u")
        # A gpukit dtype is a dtype argument too.
        self.assertEqual(CPU.zeros(2, dtype=a.dtype).dtype, np.float32)
        self.assertEqual(np.zeros(2, dtype=a.dtype).dtype, np.float32)

    def test_nbytes(self):
        self.assertEqual(CPU.zeros((2, 3), dtype="float64").nbytes, 48)
        self.assertEqual(CPU.zeros(5, dtype="bfloat16").nbytes, 10)


class Reshape(unittest.TestCase):
    def test_reshape_is_a_view(self):
        a = CPU.from_dlpack(np.arange(6, dtype=np.float32), copy=True)
        r = a.reshape(2, 3)
        self.assertEqual(r.shape, (2, 3))
        self.assertEqual(a.reshape((3, -1)).shape, (3, 2))
        self.assertEqual(a.reshape(-1, 1).shape, (6, 1))
        r.fill(4.0)
        self.assertEqual(a.tolist(), [4.0] * 6)
        # A binary op through two shapes of one memory runs in place.
        CPU.binary("add", r, r, a.reshape(2, 3))
        self.assertEqual(a.tolist(), [8.0] * 6)

    def test_impossible_shapes_are_refused(self):
        a = CPU.zeros(6)
        for bad in [(4,), (-1, 4), (-1, -1), (2, -2)]:
            with self.assertRaisesRegex(ValueError, r"Array.reshape: cannot reshape an array of 6 elements"):
                a.reshape(*bad)
        with self.assertRaisesRegex(TypeError, "Array.reshape"):
            a.reshape("x")


class AsType(unittest.TestCase):
    def test_conversions_match_numpy_in_range(self):
        x = np.array([-3.75, -1.5, 0.0, 0.25, 2.5, 100.0], dtype=np.float32)
        a = CPU.from_dlpack(x, copy=True)
        for name in ["float64", "float16", "int32", "int64", "int8"]:
            got = np.asarray(a.astype(name))
            np.testing.assert_array_equal(got, x.astype(name), err_msg=name)
        ints = CPU.from_dlpack(np.array([1, -2, 300], dtype=np.int32), copy=True)
        np.testing.assert_array_equal(np.asarray(ints.astype("float32")), [1.0, -2.0, 300.0])
        # Integers wrap, as NumPy's do.
        np.testing.assert_array_equal(np.asarray(ints.astype("uint8")), np.array([1, -2, 300]).astype(np.uint8))

    def test_out_of_range_floats_saturate_and_nan_is_zero(self):
        a = CPU.from_dlpack(np.array([1e10, -1e10, np.nan], dtype=np.float32), copy=True)
        self.assertEqual(a.astype("int32").tolist(), [2**31 - 1, -(2**31), 0])

    def test_the_same_dtype_without_a_copy_is_the_same_memory(self):
        a = CPU.zeros(3)
        same = a.astype("float32", copy=False)
        same.fill(1.0)
        self.assertEqual(a.tolist(), [1.0] * 3)
        other = a.astype(np.float32)
        other.fill(2.0)
        self.assertEqual(a.tolist(), [1.0] * 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
