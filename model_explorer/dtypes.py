"""Plain (unquantized) dtypes as the file formats name them, measured in bits.

Bits, not bytes, so the sub-byte safetensors types (F4, F6_*) size correctly.
"""

from __future__ import annotations

from collections.abc import Callable

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
NUMPY_DTYPES: dict[str, Callable[[], np.dtype]] = {
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
    # PyTorch-only dtypes that pickled checkpoints can hold (no safetensors name of their own).
    "C128": lambda: np.dtype(np.complex128),
    "F8_E4M3FNUZ": lambda: _ml("float8_e4m3fnuz"),
    "F8_E5M2FNUZ": lambda: _ml("float8_e5m2fnuz"),
}


def numpy_dtype(name: str, byteorder: str = "<") -> np.dtype | None:
    """The numpy dtype for a plain dtype name, with explicit byte order, or None."""
    factory = NUMPY_DTYPES.get(name)
    if factory is None:
        return None
    dt = factory()
    # byteorder is "<" or ">" as the readers record it; numpy's stubs want a Literal
    return dt.newbyteorder(byteorder) if dt.itemsize > 1 else dt  # type: ignore[arg-type]


def nbytes_for(bits: int, numel: int) -> int:
    """Bytes taken by `numel` elements of `bits` each, rounded up to a whole byte."""
    return (bits * numel + 7) // 8


# PyTorch's legacy storage classes -> the element dtype they hold (safetensors-style names).
STORAGE_DTYPES = {
    "FloatStorage": "F32", "DoubleStorage": "F64", "HalfStorage": "F16",
    "BFloat16Storage": "BF16", "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16",
    "CharStorage": "I8", "ByteStorage": "U8", "BoolStorage": "BOOL",
    "ComplexFloatStorage": "C64", "ComplexDoubleStorage": "C128", "QInt8Storage": "I8",
    "QUInt8Storage": "U8", "QInt32Storage": "I32", "QUInt4x2Storage": "U8",
    "QUInt2x4Storage": "U8", "UntypedStorage": "U8",
}
# torch.<dtype> globals (the dtype argument of _rebuild_tensor_v3) -> dtype name.
TORCH_DTYPES = {
    "float32": "F32", "float": "F32", "float64": "F64", "double": "F64", "float16": "F16",
    "half": "F16", "bfloat16": "BF16", "int64": "I64", "long": "I64", "int32": "I32",
    "int": "I32", "int16": "I16", "short": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
    "complex64": "C64", "cfloat": "C64", "complex128": "C128", "cdouble": "C128",
    "complex32": "C32", "chalf": "C32", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0", "float4_e2m1fn_x2": "F4_E2M1FN_X2", "uint16": "U16",
    "uint32": "U32", "uint64": "U64", "qint8": "I8", "quint8": "U8", "qint32": "I32",
    "quint4x2": "U8", "quint2x4": "U8",
}
# Other spellings of the same dtypes (PyTorch storages and torch dtype names) -> safetensors name.
ALIASES: dict[str, str] = {**STORAGE_DTYPES, **TORCH_DTYPES}


def canonical(name: str) -> str:
    """The safetensors spelling of a dtype name ("torch.float16" and "HalfStorage" -> "F16")."""
    name = name.removeprefix("torch.")
    return ALIASES.get(name, name)


# Sub-byte float types, packed least-significant bits first across the byte stream (element 0
# in the low bits of byte 0), the convention of PyTorch's float4_e2m1fn_x2, MLX and ggml.
# safetensors itself does not prescribe a bit order. -> (ml_dtypes name, bits)
SUBBYTE: dict[str, tuple[str, int]] = {
    "F4": ("float4_e2m1fn", 4),
    "F6_E2M3": ("float6_e2m3fn", 6),
    "F6_E3M2": ("float6_e3m2fn", 6),
    # 4-bit integers (OpenVINO u4/i4 zero points, TFLite INT4 without quantization)
    "U4": ("uint4", 4),
    "I4": ("int4", 4),
}


def unpack_bits(raw: np.ndarray, bits: int) -> np.ndarray:
    """(n, bits) uint8 rows -> (n, 8) codes of `bits` each, LSB-first (8 codes per `bits` bytes)."""
    n = raw.shape[0]
    if bits == 8:
        return raw
    if bits in (2, 4):  # whole codes per byte: shift the bytes, no 64-bit words needed
        per = 8 // bits
        out = np.empty((n, bits, per), dtype=np.uint8)
        for k in range(per):
            np.right_shift(raw, bits * k, out=out[:, :, k])
        out &= (1 << bits) - 1
        return out.reshape(n, 8)
    wide = np.zeros((n, 8), dtype=np.uint8)
    wide[:, :bits] = raw
    words = wide.view("<u8")  # (n, 1)
    shifts = (np.arange(8, dtype=np.uint64) * np.uint64(bits))
    return ((words >> shifts) & np.uint64((1 << bits) - 1)).astype(np.uint8)


def decode_subbyte(name: str, raw: np.ndarray) -> np.ndarray:
    """(n, bits) packed bytes of F4/F6 -> float32 (n, 8), through ml_dtypes."""
    ml_name, bits = SUBBYTE[name]
    codes = unpack_bits(raw, bits)
    return codes.view(_ml(ml_name)).astype(np.float32)
