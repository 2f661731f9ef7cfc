"""Shared pieces of the Hub-quantization grouping: findings that point at bytes, the logical
tensor that replaces a layer's components, and small helpers on shapes."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeGuard

from ...dtypes import SAFETENSORS_BITS
from ...records import Quant, TensorInfo
from ...spans import Finding


def finding(code: str, message: str, t: TensorInfo | None, **extra) -> Finding:
    """A finding on the bytes of tensor `t` (its name, file, offset and length); its severity and
    fix come from the catalog."""
    if t is None:
        return Finding.of(code, message, **extra)
    return Finding.of(code, message, t.offset, t.length, t.name, t.file, **extra)


def shape_text(t: TensorInfo) -> str:
    return f"{t.dtype} {list(t.shape)}"


def logical(name: str, main: TensorInfo, shape: tuple[int, ...], quant: Quant,
            inferred: bool) -> TensorInfo:
    """One logical tensor standing for a quantized layer: the main component's bytes, the
    unpacked shape, and every component under its role in `quant.parts`."""
    if inferred:
        quant = dataclasses.replace(quant, inferred=True)
    return TensorInfo(name, main.dtype, tuple(map(int, shape)), main.file, main.offset,
                      main.length, main.byteorder, quant=quant,
                      extra={"packed_shape": main.shape})


def quant_of(t: TensorInfo) -> Quant:
    """The Quant of a tensor this grouping made (`logical` and `unusable` always give one)."""
    assert t.quant is not None, t.name
    return t.quant


def unusable(main: TensorInfo, codec: str, label: str, reason: str) -> TensorInfo:
    """The stored tensor, marked so no view shows its packed or unscaled values as weights:
    the codec refuses it with `reason` (its `refusal`)."""
    quant = Quant(codec=codec, label=label, refusal=reason)
    return TensorInfo(main.name, main.dtype, main.shape, main.file, main.offset, main.length,
                      main.byteorder, quant=quant, extra={"packed_shape": main.shape})


def roles(parts: dict[str, TensorInfo], names: tuple[str, ...]) -> dict[str, TensorInfo]:
    """The components among `names` that the layer has, by role, in the order of `names`."""
    return {r: parts[r] for r in names if r in parts}


def block_pair(block: Any) -> tuple[int, int] | None:
    """A 2-D block shape [rows, cols] of positive ints as a pair; None for anything else (a
    config's malformed entry: the codec then reads the blocks off the scales' shape)."""
    if isinstance(block, (list, tuple)) and len(block) == 2 and all(is_int(b) and b > 0 for b in block):
        return int(block[0]), int(block[1])
    return None


def dtype_bits(t: TensorInfo) -> int | None:
    return SAFETENSORS_BITS.get(t.dtype)


def is_int(v: Any) -> TypeGuard[int]:
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
