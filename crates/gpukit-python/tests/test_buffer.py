"""Python's buffer protocol (PEP 3118) on gpukit arrays: `memoryview(a)`, `bytes(a)`, `struct`,
ctypes' `from_buffer`, and each kind of request a C consumer can make (`PyObject_GetBuffer`
through ctypes), checked against NumPy. A module built for the stable ABI of CPython 3.11 or
later has the protocol on CPU arrays; one built for 3.9 or 3.10 (whose stable ABI has no
buffer slots) has none, and `memoryview(a)` is then a `TypeError`, as documented. Run by
`cargo xtask python` with the wheel installed."""

import ctypes
import gc
import importlib.metadata
import os
import re
import struct
import threading
import unittest
import weakref

import numpy as np

import gpukit
from test_protocols import vulkan

CPU = gpukit.Context("cpu")

PyBUF_SIMPLE = 0
PyBUF_WRITABLE = 0x0001
PyBUF_FORMAT = 0x0004
PyBUF_ND = 0x0008
PyBUF_STRIDES = 0x0010 | PyBUF_ND
PyBUF_C_CONTIGUOUS = 0x0020 | PyBUF_STRIDES
PyBUF_F_CONTIGUOUS = 0x0040 | PyBUF_STRIDES
PyBUF_ANY_CONTIGUOUS = 0x0080 | PyBUF_STRIDES
PyBUF_FULL_RO = 0x0100 | PyBUF_STRIDES | PyBUF_FORMAT


class Py_buffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


def stable_abi_minor():
    """The CPython minor version whose stable ABI the installed module targets (its wheel's
    tag, `cp311-abi3-...`), or None for a bare module (the GPU bundle's)."""
    if not os.path.basename(gpukit.__file__).startswith("__init__."):
        return None
    wheel = importlib.metadata.distribution("gpukit").read_text("WHEEL") or ""
    tags = re.findall(r"^Tag: cp3(\d+)-abi3-", wheel, re.MULTILINE)
    return int(tags[0]) if tags else None


def has_slots(test):
    """Whether the module has the buffer protocol: a wheel for the stable ABI of 3.11 or
    later does, one for 3.9 or 3.10 does not; a bare module says by trying (SKIPPED where it
    has none)."""
    minor = stable_abi_minor()
    if minor is None:
        if os.environ.get("GPUKIT_WHEEL") == "1":
            test.fail("GPUKIT_WHEEL=1 but gpukit is not an installed wheel")
        try:
            memoryview(CPU.zeros(1))
        except TypeError:
            reason = "the module was built for the stable ABI of CPython 3.9 (no buffer slots)"
            print(f"SKIPPED: {reason}", flush=True)
            test.skipTest(reason)
        return True
    return minor >= 11


def get_buffer(x, flags):
    """`PyObject_GetBuffer(x, &view, flags)`; the caller releases the view."""
    view = Py_buffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
    get.restype = ctypes.c_int
    get(x, ctypes.byref(view), flags)
    return view


def release(view):
    rel = ctypes.pythonapi.PyBuffer_Release
    rel.argtypes = [ctypes.POINTER(Py_buffer)]
    rel.restype = None
    rel(ctypes.byref(view))


class WithoutSlots(unittest.TestCase):
    def test_a_module_for_3_9_has_no_buffer_protocol(self):
        if has_slots(self):
            self.skipTest("this module has the buffer protocol (WithSlots tests it)")
        with self.assertRaisesRegex(TypeError, "gpukit.Array"):
            memoryview(CPU.zeros(3))
        # The documented way there.
        self.assertEqual(memoryview(np.asarray(CPU.full(3, 2.0))).tolist(), [2.0] * 3)


class WithSlots(unittest.TestCase):
    def setUp(self):
        if not has_slots(self):
            self.skipTest("a module for the stable ABI of 3.9 (WithoutSlots tests it)")

    def test_memoryview_is_numpys_view(self):
        a = CPU.from_dlpack(np.arange(24, dtype=np.float32).reshape(2, 3, 4), copy=True)
        m = memoryview(a)
        n = memoryview(np.asarray(a))
        for field in ["format", "itemsize", "ndim", "shape", "strides", "nbytes", "readonly",
                      "c_contiguous", "f_contiguous", "contiguous"]:
            self.assertEqual(getattr(m, field), getattr(n, field), field)
        self.assertEqual(m.tolist(), n.tolist())
        # The same memory, not a copy.
        self.assertEqual(np.asarray(m).ctypes.data, np.from_dlpack(a).ctypes.data)

    def test_every_element_type_by_its_struct_format(self):
        formats = {"float32": "f", "float64": "d", "float16": "e", "int8": "b", "uint8": "B",
                   "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q"}
        for name, fmt in formats.items():
            a = CPU.from_dlpack(np.array([1, 2, 120], dtype=name), copy=True)
            m = memoryview(a)
            self.assertEqual((m.format, m.itemsize), (fmt, np.dtype(name).itemsize), name)
            self.assertEqual(struct.calcsize(fmt), m.itemsize, name)
            np.testing.assert_array_equal(np.asarray(m), np.array([1, 2, 120], dtype=name))
            self.assertEqual(np.asarray(m).dtype, np.dtype(name))

    def test_writes_through_the_view_reach_the_array(self):
        a = CPU.zeros((2, 3), dtype="int32")
        m = memoryview(a)
        self.assertFalse(m.readonly)
        m[1, 2] = 7
        m[0, 0] = -3
        self.assertEqual(a.tolist(), [[-3, 0, 0], [0, 0, 7]])
        # ctypes asks for a writable buffer.
        c = (ctypes.c_int32 * 6).from_buffer(a)
        c[1] = 5
        self.assertEqual(a.tolist()[0], [-3, 5, 0])

    def test_the_view_waits_for_the_arrays_queued_work(self):
        # No synchronize: the view is made after the last op, as an export is.
        for _ in range(5):
            a = CPU.full(1 << 20, 1.0)
            a.apply("exp")
            np.testing.assert_array_equal(np.asarray(memoryview(a)), np.float32(np.e))

    def test_read_only_arrays_give_read_only_views(self):
        host = np.arange(4, dtype=np.float64)
        host.flags.writeable = False
        a = CPU.from_dlpack(host)
        self.assertTrue(a.readonly)
        m = memoryview(a)
        self.assertTrue(m.readonly)
        with self.assertRaises(TypeError):
            m[0] = 1.0
        with self.assertRaisesRegex(BufferError, r"Array.__buffer__: a writable buffer .* "
                                                  r"read-only array .*a.copy\(\)"):
            get_buffer(a, PyBUF_WRITABLE | PyBUF_FORMAT)
        with self.assertRaisesRegex(TypeError, "not writable"):
            (ctypes.c_double * 4).from_buffer(a)
        self.assertEqual(host.tolist(), [0.0, 1.0, 2.0, 3.0])
        self.assertFalse(memoryview(a.copy()).readonly)

    def test_an_imported_array_views_the_producers_memory(self):
        host = np.arange(6, dtype=np.float32)
        a = CPU.from_dlpack(host)
        m = memoryview(a)
        self.assertEqual(np.asarray(m).ctypes.data, host.ctypes.data)
        m[2] = 40.0
        self.assertEqual(host[2], 40.0)

    def test_the_view_outlives_the_array(self):
        a = CPU.full((1000,), 3.0)
        m = memoryview(a)
        del a
        gc.collect()
        others = [CPU.full((1000,), float(i)) for i in range(8)]
        CPU.synchronize()
        self.assertEqual(set(m.tolist()), {3.0})
        del others
        m.release()

    def test_the_producer_is_given_back_once_the_view_is_released(self):
        host = np.arange(4, dtype=np.float32)
        freed = []
        weakref.finalize(host, freed.append, True)
        a = CPU.from_dlpack(host)
        m = memoryview(a)
        del a, host
        gc.collect()
        self.assertEqual(freed, [])
        self.assertEqual(m.tolist(), [0.0, 1.0, 2.0, 3.0])
        m.release()
        gc.collect()
        self.assertEqual(freed, [True])

    def test_bytes_and_struct(self):
        a = CPU.from_dlpack(np.array([1.5, -2.0], dtype=np.float32), copy=True)
        self.assertEqual(bytes(a), np.array([1.5, -2.0], dtype=np.float32).tobytes())
        self.assertEqual(struct.unpack_from("2f", a), (1.5, -2.0))
        self.assertEqual(len(memoryview(a).cast("B")), 8)

    def test_zero_and_empty_arrays(self):
        s = CPU.reduce("sum", CPU.full(3, 2.0))
        m = memoryview(s)
        self.assertEqual((m.ndim, m.shape, m.strides, m.nbytes), (0, (), (), 4))
        self.assertEqual(m.tolist(), 6.0)
        e = memoryview(CPU.zeros((0, 3)))
        self.assertEqual((e.shape, e.strides, e.nbytes, e.tolist()), ((0, 3), (12, 4), 0, []))

    def test_a_view_is_an_alias_that_out_checks_see(self):
        # `b` imports NumPy's view, through the buffer protocol, of the first row of `out`,
        # gpukit's own memory: the overlap is known and the result is NumPy's (as if `b`
        # were read first), not the second row added to the first's new values.
        out = CPU.from_dlpack(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32), copy=True)
        b = CPU.from_dlpack(np.asarray(memoryview(out)).reshape(4)[:2])
        a = CPU.from_dlpack(np.array([[10.0, 20.0], [30.0, 40.0]], dtype=np.float32))
        CPU.binary("add", a, b, out)
        self.assertEqual(out.tolist(), [[11.0, 22.0], [31.0, 42.0]])

    def test_each_kind_of_request(self):
        a = CPU.from_dlpack(np.arange(6, dtype=np.int64).reshape(2, 3), copy=True)
        base = np.from_dlpack(a).ctypes.data
        cases = [
            # flags, format, shape, strides
            (PyBUF_SIMPLE, None, None, None),
            (PyBUF_WRITABLE, None, None, None),
            (PyBUF_FORMAT, b"q", None, None),
            (PyBUF_ND, None, (2, 3), None),
            (PyBUF_STRIDES, None, (2, 3), (24, 8)),
            (PyBUF_C_CONTIGUOUS, None, (2, 3), (24, 8)),
            (PyBUF_ANY_CONTIGUOUS, None, (2, 3), (24, 8)),
            (PyBUF_FULL_RO, b"q", (2, 3), (24, 8)),
        ]
        for flags, fmt, shape, strides in cases:
            v = get_buffer(a, flags)
            try:
                self.assertEqual((v.buf, v.len, v.itemsize, v.ndim), (base, 48, 8, 2), flags)
                self.assertEqual((v.readonly, v.format), (0, fmt), flags)
                self.assertEqual(tuple(v.shape[:2]) if v.shape else None, shape, flags)
                self.assertEqual(tuple(v.strides[:2]) if v.strides else None, strides, flags)
                self.assertFalse(v.suboffsets)
                self.assertEqual(v.obj, id(a))
            finally:
                release(v)

    def test_fortran_order_only_where_the_array_has_it(self):
        with self.assertRaisesRegex(BufferError, r"Array.__buffer__: a Fortran-contiguous "
                                                  r"buffer .* shape \(2, 3\)"):
            get_buffer(CPU.zeros((2, 3)), PyBUF_F_CONTIGUOUS)
        for shape in [(6,), (1, 6), (6, 1), (1, 1, 4), (2, 0, 3)]:
            self.assertTrue(np.zeros(shape).flags.f_contiguous, shape)  # as NumPy counts
            v = get_buffer(CPU.zeros(shape), PyBUF_F_CONTIGUOUS)
            try:
                self.assertEqual(tuple(v.shape[: len(shape)]), shape)
            finally:
                release(v)

    def test_bfloat16_has_no_format(self):
        a = CPU.zeros(2, dtype="bfloat16")
        with self.assertRaisesRegex(BufferError, "Array.__buffer__: bfloat16 has no "
                                                 "buffer-protocol format"):
            memoryview(a)
        # A consumer that asks for bytes gets them.
        v = get_buffer(a, PyBUF_SIMPLE)
        try:
            self.assertEqual((v.len, v.format), (4, None))
        finally:
            release(v)

    def test_device_memory_is_refused(self):
        vk = vulkan(self)
        with self.assertRaisesRegex(BufferError, "Array.__buffer__: a vulkan array is in "
                                                 "device memory.*numpy.asarray"):
            memoryview(vk.zeros(3))

    def test_views_from_several_threads(self):
        a = CPU.zeros(1 << 16, dtype="int64")
        errors = []

        def writer(k):
            try:
                for _ in range(100):
                    with memoryview(a) as m:
                        m[k] = m[k] + 1
                    a.copy()  # a read of gpukit's, queued, which the next view waits for
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(a.tolist()[:5], [100, 100, 100, 100, 0])


if __name__ == "__main__":
    unittest.main()
