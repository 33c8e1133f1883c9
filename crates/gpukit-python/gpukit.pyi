"""gpukit: GPU arrays shared with NumPy, PyTorch, CuPy and JAX through DLPack.

The module's type stubs (shipped in the wheel with `py.typed`); `cargo xtask python` checks
them against the built module with mypy's stubtest."""

import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, final

__all__ = [
    "Array",
    "BINARY_OPS",
    "Context",
    "Event",
    "GpukitError",
    "REDUCE_OPS",
    "Rng",
    "Stream",
    "UNARY_OPS",
    "UNARY_ULPS",
    "BINARY_ULPS",
    "__version__",
    "dtype",
]

__version__: str

UNARY_OPS: List[str]
"""The names `Array.apply` takes (`"exp"`, `"relu"`, `"tanh"`, ...)."""
BINARY_OPS: List[str]
"""The names `Context.binary` takes (`"add"`, `"mul"`, ...)."""
UNARY_ULPS: Dict[str, int]
"""Each unary op's accuracy contract: its result is within this many ulp of the exact one."""
BINARY_ULPS: Dict[str, int]
"""Each binary op's accuracy contract."""
REDUCE_OPS: List[str]
"""The names `Context.reduce` takes (`"sum"`, `"mean"`, `"min"`, `"max"`, `"argmin"`,
`"argmax"`)."""

_Shape = Union[int, Sequence[int]]
# A dtype: a NumPy name (`"float32"`), a NumPy or PyTorch dtype, or a type with a
# `__name__` (`numpy.float32`).
_DType = Any

@final
class dtype:
    """An element type: equal to NumPy's name of it (`"float32"`), to NumPy's and
    PyTorch's dtypes and NumPy's scalar types of it (`a.dtype == numpy.float32`)."""

    @property
    def name(self) -> str: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def kind(self) -> str:
        """NumPy's kind: `"f"`, `"i"` or `"u"`."""
    @property
    def dtype(self) -> Any:
        """NumPy's dtype of it, which `numpy.dtype(x)` reads."""
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

class GpukitError(Exception):
    """An error of the device or the library (a failed kernel, a lost device, a backend
    that is unavailable); the message names the call."""

@final
class Context:
    """A device: its memory, its default stream and the ops queued on it."""

    def __new__(cls, device: Optional[str] = None) -> "Context": ...
    @property
    def backend(self) -> str:
        """The backend's name: `"cpu"`, `"cuda"` or `"vulkan"`."""
    @property
    def device_id(self) -> int:
        """The device's ordinal within its backend."""
    def zeros(self, shape: _Shape, dtype: Optional[_DType] = None) -> "Array":
        """A new array of zeros (float32 unless `dtype` says otherwise)."""
    def full(
        self, shape: _Shape, fill_value: Union[int, float], dtype: Optional[_DType] = None
    ) -> "Array":
        """A new array with every element `fill_value`."""
    def from_dlpack(self, x: Any, *, copy: Optional[bool] = None) -> "Array":
        """Imports any DLPack producer, sharing its memory where it can."""
    def binary(
        self,
        op: str,
        a: "Array",
        b: "Array",
        out: Optional["Array"] = None,
        *,
        stream: Optional["Stream"] = None,
    ) -> "Array":
        """`out = op(a, b)` element-wise: one of `gpukit.BINARY_OPS`, the three arrays of one
        element type. Shapes broadcast as NumPy's do where gpukit runs it (equal shapes, or
        one operand one element, one row or one column of the other); `out` has the
        result's shape and may be or overlap `a` or `b` (NumPy's result). Integer `div`
        truncates toward zero, unlike NumPy's `//`."""
    def unary(
        self,
        op: str,
        x: "Array",
        out: Optional["Array"] = None,
        *,
        stream: Optional["Stream"] = None,
    ) -> "Array":
        """`op(x)` element-wise (one of `gpukit.UNARY_OPS`), into a new array or `out`."""
    def reduce(
        self,
        op: str,
        x: "Array",
        axis: Optional[int] = None,
        *,
        stream: Optional["Stream"] = None,
    ) -> "Array":
        """A reduction (one of `gpukit.REDUCE_OPS`) of all of `x` or along its first or last
        axis."""
    def matmul(self, a: "Array", b: "Array", *, stream: Optional["Stream"] = None) -> "Array":
        """`a @ b` for matrices and stacks of them (floating-point)."""
    def softmax(self, x: "Array", *, stream: Optional["Stream"] = None) -> "Array":
        """Softmax along the last axis."""
    def log_softmax(self, x: "Array", *, stream: Optional["Stream"] = None) -> "Array":
        """Log-softmax along the last axis."""
    def cross_entropy(
        self, logits: "Array", labels: "Array", *, stream: Optional["Stream"] = None
    ) -> "Array":
        """Each row's loss `-log(softmax(logits)[label])`."""
    def random_uniform(
        self,
        shape: _Shape,
        low: float = 0.0,
        high: float = 1.0,
        *,
        rng: "Rng",
        dtype: Optional[_DType] = None,
        stream: Optional["Stream"] = None,
    ) -> "Array":
        """Uniform samples in `[low, high)` from `rng`'s next positions."""
    def random_normal(
        self,
        shape: _Shape,
        mean: float = 0.0,
        std: float = 1.0,
        *,
        rng: "Rng",
        dtype: Optional[_DType] = None,
        stream: Optional["Stream"] = None,
    ) -> "Array":
        """Normal samples from `rng`'s next positions."""
    def stream(self, priority: Optional[int] = None) -> "Stream":
        """A new stream of this context (`with ctx.stream() as s:` queues there)."""
    @property
    def current_stream(self) -> "Stream":
        """The stream this thread's ops of this context queue on now."""
    def synchronize(self) -> None:
        """Waits until the work queued on every stream of the context has finished."""

@final
class Stream:
    """A stream of a context: an in-order queue of work."""

    def synchronize(self) -> None: ...
    def query(self) -> bool: ...
    def record(self) -> "Event": ...
    def wait(self, event: "Event") -> None: ...
    def __enter__(self) -> "Stream": ...
    def __exit__(self, kind: Optional[Any], value: Optional[Any], traceback: Optional[Any]) -> bool: ...

@final
class Event:
    """A point in a stream's queue."""

    def synchronize(self) -> None: ...
    def query(self) -> bool: ...

@final
class Rng:
    """A Philox random stream: the same seed and fills give the same bits everywhere."""

    def __new__(cls, seed: int, offset: int = 0) -> "Rng": ...
    @property
    def seed(self) -> int: ...
    @property
    def offset(self) -> int: ...

@final
class Array:
    """A typed array on a gpukit device, with a shape (row-major)."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> dtype:
        """The element type (equal to `"float32"`, `numpy.float32`, ...)."""
    @property
    def nbytes(self) -> int: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def readonly(self) -> bool:
        """Whether the producer of an imported tensor exported it read-only."""
    @property
    def device(self) -> str:
        """The device, as `GPU_DEVICE` names it (`"cpu:0"`, `"cuda:1"`)."""
    def __len__(self) -> int: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """DLPack's export: a capsule sharing this array's memory."""
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    if sys.version_info >= (3, 11):
        # The buffer protocol (`memoryview(a)`) of a module built for CPython 3.11 or later,
        # on the CPU backend (else `BufferError`); 3.12 names its slot `__buffer__`.
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """The CUDA Array Interface, version 3, of a CUDA array (else `AttributeError`)."""
    def fill(self, value: Union[int, float], *, stream: Optional["Stream"] = None) -> None:
        """Sets every element to `value` (queued on the device)."""
    def scale(self, alpha: Union[int, float], *, stream: Optional["Stream"] = None) -> None:
        """Multiplies every element by `alpha`, in place."""
    def apply(self, op: str, *, stream: Optional["Stream"] = None) -> None:
        """Applies a unary op in place: one of `gpukit.UNARY_OPS`."""
    def copy(self, *, stream: Optional["Stream"] = None) -> "Array":
        """A new array of gpukit's with a copy of the elements (writable)."""
    def reshape(self, *shape: Union[int, Sequence[int]]) -> "Array":
        """The same memory with another shape (one dimension may be -1)."""
    def astype(self, dtype: _DType, copy: bool = True) -> "Array":
        """The elements converted to `dtype`, in a new array."""
    def __array__(self, dtype: Optional[Any] = None, copy: Optional[bool] = None) -> Any:
        """NumPy's array protocol: a view of host memory, else a copy."""
    def to_numpy(self) -> Any:
        """A NumPy array holding a copy of the elements."""
    def tolist(self) -> Any:
        """The elements as nested Python lists (downloaded: a copy)."""
