"""gpukit: GPU arrays shared with NumPy, PyTorch, CuPy and JAX through DLPack.

The module's type stubs (shipped in the wheel with `py.typed`); `cargo xtask python` checks
them against the built module with mypy's stubtest."""

from typing import Any, List, Optional, Sequence, Tuple, Union, final

__all__ = [
    "Array",
    "BINARY_OPS",
    "Context",
    "GpukitError",
    "UNARY_OPS",
    "__version__",
    "dtype",
]

__version__: str

UNARY_OPS: List[str]
"""The names `Array.apply` takes (`"exp"`, `"relu"`, `"tanh"`, ...)."""
BINARY_OPS: List[str]
"""The names `Context.binary` takes (`"add"`, `"mul"`, ...)."""

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
    def binary(self, op: str, a: "Array", b: "Array", out: "Array") -> None:
        """`out = op(a, b)` element-wise: one of `gpukit.BINARY_OPS`, the three arrays of one
        element type. Shapes broadcast as NumPy's do where gpukit runs it (equal shapes, or
        one operand one element, one row or one column of the other); `out` has the
        result's shape and may be or overlap `a` or `b` (NumPy's result). Integer `div`
        truncates toward zero, unlike NumPy's `//`."""
    def synchronize(self) -> None:
        """Waits until the work queued on the context has finished."""

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
    def fill(self, value: Union[int, float]) -> None:
        """Sets every element to `value` (queued on the device)."""
    def scale(self, alpha: Union[int, float]) -> None:
        """Multiplies every element by `alpha`, in place."""
    def apply(self, op: str) -> None:
        """Applies a unary op in place: one of `gpukit.UNARY_OPS`."""
    def copy(self) -> "Array":
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
