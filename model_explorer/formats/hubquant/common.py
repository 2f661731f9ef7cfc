"""Shared pieces of the Hub-quantization grouping: findings that point at bytes, the logical
tensor that replaces a layer's components, and small helpers on shapes."""

from __future__ import annotations

import math
from typing import Any

from ...dtypes import SAFETENSORS_BITS
from ...records import TensorInfo
from ...spans import Finding


def finding(code: str, message: str, t: TensorInfo | None, **extra) -> Finding:
    """A finding on the bytes of tensor `t` (its name, file, offset and length); its severity and
    fix come from the catalog."""
    if t is None:
        return Finding.of(code, message, **extra)
    return Finding.of(code, message, t.offset, t.length, t.name, t.file, **extra)


def shape_text(t: TensorInfo) -> str:
    return f"{t.dtype} {list(t.shape)}"


def logical(name: str, main: TensorInfo, shape: tuple[int, ...], quant: dict[str, Any],
            inferred: bool) -> TensorInfo:
    """One logical tensor standing for a quantized layer: the main component's bytes, the
    unpacked shape, and every component under its role in `quant`."""
    if inferred:
        quant["inferred"] = True
    return TensorInfo(name, main.dtype, tuple(map(int, shape)), main.file, main.offset,
                      main.length, main.byteorder, quant=quant,
                      extra={"packed_shape": main.shape})


def unusable(main: TensorInfo, kind: str, label: str, reason: str) -> TensorInfo:
    """The stored tensor, marked so no view shows its packed or unscaled values as weights:
    the codec refuses the kind "unusable" with `reason`."""
    quant = {"kind": "unusable", "scheme": kind, "label": label, "reason": reason}
    return TensorInfo(main.name, main.dtype, main.shape, main.file, main.offset, main.length,
                      main.byteorder, quant=quant, extra={"packed_shape": main.shape})


def dtype_bits(t: TensorInfo) -> int | None:
    return SAFETENSORS_BITS.get(t.dtype)


def is_int(v: Any) -> bool:
    """An int that JSON meant as an int (True is not 1 bit)."""
    return type(v) is int


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def numel(shape) -> int:
    return math.prod(shape) if shape else 1


def module_matches(module: str, patterns) -> bool:
    """Whether a module name is in a list of names to skip, as the libraries match them:
    an exact name, a dotted suffix or prefix, or a compressed-tensors "re:" regex."""
    import re

    if not isinstance(patterns, (list, tuple)):
        return False
    for p in patterns:
        if not isinstance(p, str) or not p:
            continue
        if p.startswith("re:"):
            try:
                if re.match(p[3:], module):
                    return True
            except re.error:
                continue
        elif (module == p or module.endswith("." + p) or module.startswith(p + ".")
              or ("." + p + ".") in ("." + module + ".")):
            return True
    return False
