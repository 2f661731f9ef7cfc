"""numpy arrays in plain pickles, as inert references to their bytes in the file.

numpy pickles an array as `_reconstruct(ndarray, (0,), b'b')` followed by BUILD with
`(version, shape, dtype, is_fortran, raw bytes)`, or from protocol 5 as
`_frombuffer(buffer, dtype, shape, order)`; the dtype is `numpy.dtype('f4', False, True)`
with BUILD `(3, '<', ...)`. Raw bytes from BINBYTES / BYTEARRAY8 sit in the file as they
are, so the array's values can be read at their offset. Protocol 2 stores them as latin-1
text through `_codecs.encode`, whose bytes differ from the values: such arrays are listed
without a byte range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import MAX_RANK
from .values import Blob, render

# numpy kind + itemsize -> dtype name used by the tensor layer
NUMPY_KINDS = {
    ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64", ("i", 1): "I8", ("i", 2): "I16",
    ("i", 4): "I32", ("i", 8): "I64", ("u", 1): "U8", ("u", 2): "U16", ("u", 4): "U32",
    ("u", 8): "U64", ("b", 1): "BOOL", ("c", 8): "C64", ("c", 16): "C128",
}


@dataclass(eq=False)
class NumpyDtype:
    code: str
    byteorder: str = "<"

    @property
    def name(self) -> str | None:
        code = self.code.lstrip("<>|=")
        if len(code) < 2 or not code[1:].isdigit():
            return None
        return NUMPY_KINDS.get((code[0], int(code[1:])))

    def build(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
            self.byteorder = state[1]

    def render(self) -> str:
        return f"dtype({self.code!r})"


@dataclass(eq=False)
class NumpyArray:
    """An ndarray: shape, dtype and where its raw bytes are (offset None: not stored raw)."""

    offset_in_pickle: int
    shape: Any = None
    dtype: Any = None
    fortran: bool = False
    data: Any = None  # bytes / Blob / bytearray / other
    data_offset: int | None = None
    data_length: int = 0

    def build(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 5:
            _, self.shape, self.dtype, self.fortran, self.data = state

    def render(self) -> str:
        return f"ndarray({render(self.dtype, 1)}, {render(self.shape, 1)})"


def _reconstruct(m, args, pos):
    return NumpyArray(m.base + pos)


def _frombuffer(m, args, pos):
    if len(args) != 4:
        return NotImplemented
    arr = NumpyArray(m.base + pos, args[2], args[1], args[3] == "F", args[0])
    return arr


def _dtype(m, args, pos):
    if args and isinstance(args[0], str):
        return NumpyDtype(args[0])
    return NotImplemented


NUMPY_REDUCERS = {}
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    NUMPY_REDUCERS[f"{_mod}._reconstruct"] = _reconstruct
for _mod in ("numpy.core.numeric", "numpy._core.numeric"):
    NUMPY_REDUCERS[f"{_mod}._frombuffer"] = _frombuffer
NUMPY_REDUCERS["numpy.dtype"] = _dtype


def locate(arr: NumpyArray, byte_offsets: dict[int, tuple[Any, int]]) -> tuple[int, int] | None:
    """(offset, length) of the array's raw bytes in the file, when they are stored raw."""
    data = arr.data
    if isinstance(data, Blob):
        return data.offset, data.length
    if isinstance(data, (bytes, bytearray)):
        hit = byte_offsets.get(id(data))
        if hit is not None and hit[0] is data:
            return hit[1], len(data)
    return None


def array_layout(arr: NumpyArray) -> tuple[str, str, tuple[int, ...], tuple[int, ...]] | None:
    """(dtype name, byteorder, shape, element strides) for a numeric array, else None."""
    dt = arr.dtype
    shape = arr.shape
    if not isinstance(dt, NumpyDtype) or dt.name is None:
        return None
    if not (isinstance(shape, tuple) and len(shape) <= MAX_RANK and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 63 for d in shape)):
        return None
    strides, acc = [], 1
    dims = shape if arr.fortran else tuple(reversed(shape))
    for d in dims:
        strides.append(acc)
        acc *= d
    stride = tuple(strides) if arr.fortran else tuple(reversed(strides))
    return dt.name, dt.byteorder, shape, stride
