"""A PyTorch model's activations through gpukit and back, without a copy.

A two-layer network runs in PyTorch; its hidden activation (GELU, tanh form) is applied by
gpukit, in place, on the memory PyTorch allocated: `ctx.from_dlpack(h)` borrows it,
`x.apply("gelu")` queues the op on gpukit's stream, and `torch.from_dlpack(x)` hands the same
memory back, ordered after the op (DLPack's stream handshake on CUDA, a host wait on the
CPU). The result is checked against PyTorch's own `gelu(approximate="tanh")` and the
pointers against each other.

    pip install crates/gpukit-python      # builds and installs the module
    python3 examples/torch_interop.py

Without PyTorch it runs the same steps with NumPy (`numpy.from_dlpack`). GPU_DEVICE picks the
device as in Rust; on CUDA the tensors live on the GPU (`cuda:0`).
"""

import math
import sys
import time

import numpy as np

import gpukit

try:
    import torch
except ImportError:
    torch = None


def reference_gelu(v):
    """GELU, tanh form, in float64."""
    v = np.asarray(v, dtype=np.float64)
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def with_torch(ctx):
    device = "cuda" if ctx.backend == "cuda" else "cpu"
    torch.manual_seed(0)
    w1 = torch.randn(256, 512, device=device) / 16
    w2 = torch.randn(512, 10, device=device) / 16
    x = torch.randn(1024, 256, device=device)

    h = x @ w1                                  # PyTorch's memory
    expected = torch.nn.functional.gelu(h, approximate="tanh")
    g = ctx.from_dlpack(h)                      # gpukit's view of it: no copy
    g.apply("gelu")                             # in place, on gpukit's stream
    back = torch.from_dlpack(g)                 # the same memory, after the op
    assert back.data_ptr() == h.data_ptr(), "shared, not copied"
    logits = back @ w2
    err = (back - expected).abs().max().item()
    print(f"torch {torch.__version__} on {device}: hidden {tuple(h.shape)} through gpukit "
          f"({ctx.backend}) in place; max |gpukit - torch gelu| = {err:.2e}; "
          f"logits {tuple(logits.shape)}")
    return err


def with_numpy(ctx):
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((256, 512)) / 16).astype(np.float32)
    x = rng.standard_normal((1024, 256)).astype(np.float32)
    h = x @ w1                                  # NumPy's memory
    expected = reference_gelu(h)
    g = ctx.from_dlpack(h)                      # shared on the CPU backend, else copied in
    g.apply("gelu")
    back = np.from_dlpack(g) if ctx.backend == "cpu" else np.array(g.tolist(), np.float32)
    if ctx.backend == "cpu":
        assert back.ctypes.data == h.ctypes.data, "shared, not copied"
    err = float(np.abs(back - expected).max())
    print(f"numpy {np.__version__} (PyTorch not installed): hidden {h.shape} through gpukit "
          f"({ctx.backend}) {'in place' if ctx.backend == 'cpu' else 'as a copy'}; "
          f"max |gpukit - float64 gelu| = {err:.2e}")
    return err


def main():
    start = time.perf_counter()
    ctx = gpukit.Context()
    err = with_torch(ctx) if torch is not None else with_numpy(ctx)
    # GELU's contract is a few ulp of float32 (values here are below ~30): 1e-5 absolute
    # is far looser than that and far tighter than any wrong formula.
    if not err < 1e-5:
        print(f"FAILED: gpukit's gelu differs by {err}", file=sys.stderr)
        return 1
    print(f"ok in {(time.perf_counter() - start) * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
