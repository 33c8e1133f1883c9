"""The installed package as a type checker sees it: the wheel carries its stubs
(`gpukit/__init__.pyi`) and `py.typed`, and `cargo xtask python` runs `mypy --strict` over
this file, a typed use of the API, as well as running it; the stubs themselves are checked
against the module by mypy's stubtest."""

import importlib.metadata
import os
import unittest
from typing import List, Tuple

import gpukit


def a_typed_use() -> Tuple[List[int], str, float]:
    ctx: gpukit.Context = gpukit.Context("cpu")
    a: gpukit.Array = ctx.zeros((2, 3), dtype="float32")
    b = ctx.full(6, 2.0)
    a.fill(1.5)
    a.scale(2)
    a.apply("exp")
    out = a.copy()
    ctx.binary("add", ctx.full(6, 1.0), b, ctx.zeros(6))
    ctx.synchronize()
    shape: Tuple[int, ...] = out.reshape(-1).reshape(2, 3).shape
    device: Tuple[int, int] = out.__dlpack_device__()
    first: float = out.tolist()[0][0]
    kind: gpukit.dtype = out.astype("float64").dtype
    assert kind == "float64" and kind.itemsize == 8 and out.nbytes == 24
    return [*shape, *device], out.dtype.name, first


def a_buffer_use(a: gpukit.Array) -> int:
    """The buffer protocol as the stubs declare it (from CPython 3.11)."""
    with memoryview(a) as m:
        return m.nbytes


class Package(unittest.TestCase):
    def test_the_typed_use_runs(self) -> None:
        dims, dtype, first = a_typed_use()
        self.assertEqual(dims, [2, 3, 1, 0])
        self.assertEqual(dtype, "float32")
        self.assertAlmostEqual(first, 20.085536923187668, places=5)

    def test_the_buffer_use_runs(self) -> None:
        a = gpukit.Context("cpu").zeros((2, 3))
        try:
            nbytes = a_buffer_use(a)
        except TypeError:
            # A module for the stable ABI of 3.9 or 3.10, which has no buffer slots
            # (test_buffer checks that only such a module refuses).
            reason = "the module was built for the stable ABI of CPython 3.9 (no buffer slots)"
            print(f"SKIPPED: {reason}", flush=True)
            self.skipTest(reason)
        self.assertEqual(nbytes, 24)

    def test_the_wheel_carries_its_stubs_and_metadata(self) -> None:
        # The GPU bundle carries the bare module, not a wheel; `cargo xtask python`, which
        # installs the wheel, sets GPUKIT_WHEEL=1, so there a bare module fails.
        bare = not os.path.basename(gpukit.__file__).startswith("__init__.")
        if bare and os.environ.get("GPUKIT_WHEEL") != "1":
            reason = "the module is not an installed wheel (the GPU bundle's bare module)"
            print(f"SKIPPED: {reason}", flush=True)
            self.skipTest(reason)
        folder = os.path.dirname(gpukit.__file__)
        for name in ["__init__.pyi", "py.typed"]:
            self.assertTrue(os.path.isfile(os.path.join(folder, name)), name)
        self.assertEqual(importlib.metadata.version("gpukit"), gpukit.__version__)
        self.assertEqual(sorted(gpukit.__all__), sorted(set(gpukit.__all__)))
        for name in gpukit.__all__:
            self.assertTrue(hasattr(gpukit, name), name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
