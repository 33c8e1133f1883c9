"""CUDA arrays from Python: ops against the CPU backend's results, DLPack's export with its
stream handshake, `numpy.asarray` (a copy), and the CUDA Array Interface version 3 checked
against the specification's fields (CuPy and Numba, its consumers, need a real GPU).
`cargo xtask python` runs this file a second time against the CUDA emulator (GPU_REQUIRE_CUDA=1,
so there nothing is skipped); without a CUDA device the tests print SKIPPED."""

import ctypes
import os
import unittest

import numpy as np

import gpukit
from test_buffer import has_slots

CPU = gpukit.Context("cpu")


def cuda(test):
    try:
        return gpukit.Context("cuda:0")
    except gpukit.GpukitError as e:
        if os.environ.get("GPU_REQUIRE_CUDA") == "1":
            raise
        reason = f"no CUDA device ({str(e).split(';')[0]})"
        print(f"SKIPPED: {reason}", flush=True)
        test.skipTest(reason)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_get = ctypes.pythonapi.PyCapsule_GetPointer
_get.restype = ctypes.c_void_p
_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


def exported_address(a, **kw):
    """The device address a DLPack 1.x export of `a` shares (the capsule, unconsumed, gives
    the tensor back when it goes)."""
    cap = a.__dlpack__(max_version=(1, 0), **kw)
    t = DLManagedTensorVersioned.from_address(_get(cap, b"dltensor_versioned")).dl_tensor
    return t.data + t.byte_offset, (t.device.device_type, t.device.device_id)


class CudaArrays(unittest.TestCase):
    def test_ops_match_the_cpu_backend(self):
        gpu = cuda(self)
        rng = np.random.default_rng(11)
        x = rng.standard_normal((8, 16)).astype(np.float32)
        a, c = gpu.from_dlpack(x, copy=True), CPU.from_dlpack(x, copy=True)
        for name in ["exp", "tanh", "relu", "sigmoid"]:
            np.testing.assert_allclose(
                gpu.unary(name, a).tolist(), CPU.unary(name, c).tolist(), rtol=2e-6, atol=1e-30, err_msg=name
            )
        np.testing.assert_array_equal(gpu.binary("add", a, a).tolist(), CPU.binary("add", c, c).tolist())
        np.testing.assert_allclose(gpu.reduce("sum", a, axis=1).tolist(), CPU.reduce("sum", c, axis=1).tolist(), rtol=1e-5)
        np.testing.assert_allclose(
            gpu.matmul(a, a.reshape(16, 8)).tolist(), CPU.matmul(c, c.reshape(16, 8)).tolist(), rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(gpu.softmax(a).tolist(), CPU.softmax(c).tolist(), rtol=1e-5, atol=1e-7)
        self.assertEqual(
            gpu.random_uniform(100, rng=gpukit.Rng(5)).tolist(), CPU.random_uniform(100, rng=gpukit.Rng(5)).tolist()
        )

    def test_numpy_gets_a_copy(self):
        gpu = cuda(self)
        a = gpu.full((2, 2), 3.0)
        v = np.asarray(a)
        self.assertEqual(v.tolist(), [[3.0, 3.0], [3.0, 3.0]])
        a.fill(4.0)
        self.assertEqual(v.tolist(), [[3.0, 3.0], [3.0, 3.0]])
        with self.assertRaisesRegex(ValueError, "cuda device memory, which NumPy cannot view"):
            np.asarray(a, copy=False)

    def test_the_buffer_protocol_refuses_device_memory(self):
        gpu = cuda(self)
        if not has_slots(self):
            self.skipTest("a module for the stable ABI of 3.9 has no buffer protocol")
        with self.assertRaisesRegex(BufferError, "Array.__buffer__: a cuda array is in device "
                                                 "memory.*numpy.asarray"):
            memoryview(gpu.zeros(3))

    def test_dlpack_export_and_its_stream_handshake(self):
        gpu = cuda(self)
        a = gpu.full(6, 2.0)
        self.assertEqual(a.__dlpack_device__(), (2, 0))
        for stream in [None, 1, 2]:
            address, device = exported_address(a, stream=stream)
            self.assertEqual(device, (2, 0))
            self.assertNotEqual(address, 0)
        with self.assertRaisesRegex(BufferError, "stream=0 is ambiguous"):
            a.__dlpack__(max_version=(1, 0), stream=0)
        # Back through DLPack into gpukit: the same memory.
        back = gpu.from_dlpack(a)
        back.fill(7.0)
        self.assertEqual(a.tolist(), [7.0] * 6)

    def test_cuda_array_interface_has_the_specifications_fields(self):
        gpu = cuda(self)
        a = gpu.from_dlpack(np.arange(12, dtype=np.float32).reshape(3, 4), copy=True)
        cai = a.__cuda_array_interface__
        self.assertEqual(set(cai), {"shape", "typestr", "data", "strides", "version", "stream"})
        self.assertEqual(cai["shape"], (3, 4))
        self.assertEqual(cai["typestr"], "<f4")
        self.assertEqual(cai["version"], 3)
        self.assertIsNone(cai["strides"])
        address, readonly = cai["data"]
        self.assertIsInstance(address, int)
        self.assertFalse(readonly)
        self.assertEqual(address, exported_address(a)[0])
        # Version 3: 0 is not a valid stream (ambiguous); an int, 1 for the legacy default.
        self.assertIsInstance(cai["stream"], int)
        self.assertNotEqual(cai["stream"], 0)
        for name, typestr in [("float64", "<f8"), ("float16", "<f2"), ("int8", "|i1"), ("uint8", "|u1"),
                              ("int32", "<i4"), ("uint32", "<u4"), ("int64", "<i8"), ("uint64", "<u8")]:
            self.assertEqual(gpu.zeros(2, dtype=name).__cuda_array_interface__["typestr"], typestr)
        self.assertEqual(gpu.zeros(0).__cuda_array_interface__["data"][0], 0)
        self.assertFalse(hasattr(gpu.zeros(2, dtype="bfloat16"), "__cuda_array_interface__"))
        self.assertFalse(hasattr(CPU.zeros(2), "__cuda_array_interface__"))

    def test_an_out_that_shares_memory_through_the_interface_gives_numpys_result(self):
        gpu = cuda(self)
        a = gpu.from_dlpack(np.arange(6, dtype=np.float32), copy=True)
        a.__cuda_array_interface__  # the address is now known to be shared
        again = gpu.from_dlpack(a)
        gpu.binary("add", a, a, again)
        self.assertEqual(a.tolist(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
