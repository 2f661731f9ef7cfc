"""Plain (unquantized) dtypes as the file formats name them, measured in bits.

Bits, not bytes, so the sub-byte safetensors types (F4, F6_*) size correctly.
"""

from __future__ import annotations

import numpy as np

# safetensors dtype name -> size of one element in bits
SAFETENSORS_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


def _ml(name: str):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


# safetensors dtype name -> numpy dtype factory (None: no numpy type, decoded specially)
NUMPY_DTYPES: dict[str, object] = {
    "BOOL": lambda: np.dtype(np.bool_),
    "U8": lambda: np.dtype(np.uint8),
    "I8": lambda: np.dtype(np.int8),
    "I16": lambda: np.dtype(np.int16),
    "U16": lambda: np.dtype(np.uint16),
    "I32": lambda: np.dtype(np.int32),
    "U32": lambda: np.dtype(np.uint32),
    "I64": lambda: np.dtype(np.int64),
    "U64": lambda: np.dtype(np.uint64),
    "F16": lambda: np.dtype(np.float16),
    "F32": lambda: np.dtype(np.float32),
    "F64": lambda: np.dtype(np.float64),
    "C64": lambda: np.dtype(np.complex64),
    "BF16": lambda: _ml("bfloat16"),
    "F8_E4M3": lambda: _ml("float8_e4m3fn"),
    "F8_E5M2": lambda: _ml("float8_e5m2"),
    "F8_E8M0": lambda: _ml("float8_e8m0fnu"),
}


def numpy_dtype(name: str, byteorder: str = "<") -> np.dtype | None:
    """The numpy dtype for a plain dtype name, with explicit byte order, or None."""
    factory = NUMPY_DTYPES.get(name)
    if factory is None:
        return None
    dt = factory()
    return dt.newbyteorder(byteorder) if dt.itemsize > 1 else dt


def nbytes_for(bits: int, numel: int) -> int:
    """Bytes taken by `numel` elements of `bits` each, rounded up to a whole byte."""
    return (bits * numel + 7) // 8
