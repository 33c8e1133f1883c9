"""The Python examples run and pass their own checks (examples/torch_interop.py: with
PyTorch where it is installed, else with NumPy), on the CPU backend (on a GPU run, the
device `auto` finds). The child is this interpreter, so it imports the same module."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# In the repository the example is in examples/; in the GPU bundle, beside this file.
EXAMPLE = next(
    p
    for p in [
        os.path.join(HERE, "..", "..", "..", "examples", "torch_interop.py"),
        os.path.join(HERE, "torch_interop.py"),
    ]
    if os.path.isfile(p)
)


class Examples(unittest.TestCase):
    def test_torch_interop(self):
        # On a GPU run (the bundle's run.sh sets GPU_REQUIRE_CUDA=1) the device it finds,
        # else the CPU backend.
        device = "auto" if os.environ.get("GPU_REQUIRE_CUDA") == "1" else "cpu"
        env = dict(os.environ, GPU_DEVICE=device)
        run = subprocess.run(
            [sys.executable, EXAMPLE],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("in place", run.stdout)
        self.assertIn("ok in", run.stdout)
        print(run.stdout.strip())


if __name__ == "__main__":
    unittest.main(verbosity=2)
