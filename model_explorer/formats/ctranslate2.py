"""CTranslate2 model.bin: a versioned little-endian layout (ctranslate2/specs/model_spec.py
`_serialize`, read by src/models/model.cc).

    u32 binary version (6 today)
    v>=2: string spec name, u32 spec revision      (string: u16 length with the NUL, bytes, NUL)
    u32 variable count, then per variable:
        string name, u8 rank, u32 dims[rank],
        v>=4: u8 dtype id, u32 byte count          (float32 int8 int16 int32 float16 bfloat16)
        v<4:  u8 item size, u32 element count
        the bytes
    v>=3: u32 alias count, then (string alias, string variable) pairs

Quantized weights are int8 (per output row) or int16 (one scalar) codes beside a float32
`<name>_scale` variable, with weight = code / scale; they are grouped here so every view decodes
them through tensors/schemes/affine.py, never showing the codes as weights.
"""

from __future__ import annotations

import math

from ..records import Quant, TensorInfo
from ..spans import Report, short_repr
from . import MAX_RANK
from .cursor import Cursor, PastEnd, past_end_message
from .detect import CT2_MAX_VERSION
from .result import FileResult

CURRENT_VERSION = CT2_MAX_VERSION
DTYPES = ("F32", "I8", "I16", "I32", "F16", "BF16")  # the DataType enum of include/ctranslate2/types.h
ITEM_SIZES = {"F32": 4, "I8": 1, "I16": 2, "I32": 4, "F16": 2, "BF16": 2}
OLD_ITEM_DTYPES = {4: "F32", 2: "I16", 1: "I8"}  # versions 1-3 give an item size, not a type
MIN_VARIABLE_BYTES = 2 + 1 + 1 + 4  # an empty name, rank 0, a type and a count


def read_ctranslate2(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    cur = Cursor(source)
    variables: dict[str, TensorInfo] = {}
    try:
        _read(cur, rep, result, variables)
    except PastEnd as e:
        code, message, at, length = past_end_message(e, source.size)
        rep.error(code, message, at, length)
    _group_scales(variables, rep)
    result.tensors = variables
    rep.spans.sort(key=lambda s: (s.offset, -s.length))
    return result


def _string(cur: Cursor, rep: Report, what: str, path: str, kind: str = "key") -> str:
    start = cur.pos
    n = cur.unpack("H", f"length of the {what}")
    raw = cur.bytes(n, what, length_at=start)
    if n == 0 or raw[-1:] != b"\0":
        rep.warning("ct2_bad_string", f"The {what} at byte {start} does not end with the NUL byte "
                    "CTranslate2 writes.", start, 2 + n)
    text = raw.rstrip(b"\0").decode("utf-8", "replace")
    rep.span(start, 2 + n, kind, path, short_repr(text))
    return text


def _read(cur: Cursor, rep: Report, result: FileResult, variables: dict[str, TensorInfo]) -> None:
    version = cur.unpack("I", "binary version")
    rep.span(0, 4, "version", "binary version", f"u32 = {version}")
    result.details["version"] = version
    result.metadata["ctranslate2.binary_version"] = version
    if not 1 <= version <= CURRENT_VERSION:
        rep.error("ct2_unsupported_version", f"CTranslate2 binary version {version}: this reader "
                  f"knows versions 1 to {CURRENT_VERSION}. The rest is not read.", 0, 4)
        return
    if version >= 2:
        spec = _string(cur, rep, "spec name", "spec name", "value")
        at = cur.pos
        revision = cur.unpack("I", "spec revision")
        rep.span(at, 4, "value", "spec revision", f"u32 = {revision}")
        result.metadata.update({"ctranslate2.spec": spec, "ctranslate2.spec_revision": revision})
    at = cur.pos
    count = cur.unpack("I", "variable count")
    rep.span(at, 4, "count", "variable count", f"u32 = {count}")
    if count * MIN_VARIABLE_BYTES > cur.left:
        rep.error("ct2_count_past_end", f"The file says it holds {count} variables, which need at "
                  f"least {count * MIN_VARIABLE_BYTES} bytes, but only {cur.left} remain.", at, 4)
    for i in range(count):
        _read_variable(cur, rep, version, i, variables)
    if version >= 3:
        _read_aliases(cur, rep, result, variables)
    if cur.pos < cur.size:
        rep.warning("ct2_trailing_bytes", f"{cur.size - cur.pos} bytes follow the last field "
                    "CTranslate2 writes; its loader ignores them.", cur.pos, cur.size - cur.pos)


def _read_variable(cur: Cursor, rep: Report, version: int, i: int,
                   variables: dict[str, TensorInfo]) -> None:
    start = cur.pos
    name = _string(cur, rep, f"name of variable {i}", f"variable {i} > name")
    at = cur.pos
    rank = cur.unpack("B", f"rank of {name!r}")
    if rank > MAX_RANK:
        rep.error("ct2_bad_rank", f"Variable {name!r} says it has {rank} dimensions; no real tensor "
                  "has that many.", at, 1, name)
    dims = cur.unpack(f"{rank}I", f"dimensions of {name!r}") if rank else ()
    shape = (dims,) if isinstance(dims, int) else tuple(dims)
    rep.span(at, 1 + 4 * rank, "shape", f"variable {i} > {name} > shape", f"{rank} dims: {list(shape)}",
             tensor=name)
    at = cur.pos
    code = cur.unpack("B", f"type of {name!r}")
    if version >= 4:
        dtype = DTYPES[code] if code < len(DTYPES) else f"TYPE_{code}"
        rep.span(at, 1, "type", f"variable {i} > {name} > dtype", f"u8 = {code} ({dtype})", tensor=name)
        nat = cur.pos
        nbytes = cur.unpack("I", f"byte count of {name!r}")
        rep.span(nat, 4, "size", f"variable {i} > {name} > byte count", f"u32 = {nbytes}", tensor=name)
    else:
        dtype = OLD_ITEM_DTYPES.get(code, f"ITEM{code}")
        rep.span(at, 1, "type", f"variable {i} > {name} > item size", f"u8 = {code} ({dtype})", tensor=name)
        nat = cur.pos
        nitems = cur.unpack("I", f"element count of {name!r}")
        nbytes = nitems * code
        rep.span(nat, 4, "size", f"variable {i} > {name} > element count", f"u32 = {nitems}", tensor=name)
    data_at = cur.pos
    if dtype not in ITEM_SIZES:
        rep.error("ct2_unknown_dtype", f"Variable {name!r} has type {code}, which CTranslate2 does "
                  "not define; its values cannot be decoded.", at, 1, name)
    elif math.prod(shape) * ITEM_SIZES[dtype] != nbytes:
        rep.error("ct2_size_mismatch", f"Variable {name!r} is {dtype} {list(shape)}: "
                  f"{math.prod(shape) * ITEM_SIZES[dtype]} bytes, but its byte count says {nbytes}.",
                  nat, 4, name)
    cur.skip(nbytes, f"data of {name!r}", length_at=nat)
    rep.span(data_at, nbytes, "tensor_data", f"data > {name}", f"{dtype} {list(shape)}", tensor=name)
    rep.span(start, cur.pos - start, "tensor_info", f"variable {i} > {name}", tensor=name)
    if name in variables:
        rep.error("duplicate_tensor", f"Two variables are named {name!r}; CTranslate2 keeps the "
                  "second.", start, cur.pos - start, name)
    info = TensorInfo(name, dtype, shape, cur.source.name, data_at, nbytes)
    info.extra["info_span"] = (start, data_at - start)
    variables[name] = info


def _read_aliases(cur: Cursor, rep: Report, result: FileResult, variables: dict) -> None:
    at = cur.pos
    count = cur.unpack("I", "alias count")
    rep.span(at, 4, "count", "alias count", f"u32 = {count}")
    if count * 6 > cur.left:
        rep.error("ct2_count_past_end", f"The file says it holds {count} aliases, which need at "
                  f"least {count * 6} bytes, but only {cur.left} remain.", at, 4)
    aliases: dict[str, str] = {}
    for i in range(count):
        start = cur.pos
        alias = _string(cur, rep, f"alias {i}", f"alias {i} > name")
        target = _string(cur, rep, f"target of alias {alias!r}", f"alias {i} > variable", "value")
        rep.span(start, cur.pos - start, "kv", f"alias {i} > {alias}")
        if target not in variables:
            rep.error("ct2_alias_missing", f"Alias {alias!r} names variable {target!r}, which the "
                      "file does not hold.", start, cur.pos - start)
        aliases[alias] = target
    result.metadata["ctranslate2.aliases"] = aliases


def _group_scales(variables: dict[str, TensorInfo], rep: Report) -> None:
    """An int8/int16 variable with a float `<name>_scale` beside it is quantized: one logical
    tensor decoded as code / scale (model_spec.py `_quantize`)."""
    for name, info in variables.items():
        if info.dtype not in ("I8", "I16"):
            continue
        scale = variables.get(name + "_scale")
        if scale is None or scale.dtype not in ("F32", "F16", "BF16"):
            continue
        info.quant = _quant_record(info, scale)
        if info.quant.refusal is not None:
            rep.error("ct2_bad_scale", f"Variable {name!r} is {info.dtype} {list(info.shape)} but its "
                      f"scale is {list(scale.shape)}: one scale per row (int8) or one in all (int16) "
                      "was expected.", scale.offset, scale.length, name)


def _quant_record(info: TensorInfo, scale: TensorInfo) -> Quant:
    """The quant record of a CTranslate2 int8/int16 weight (the one place that builds it)."""
    bits = 8 if info.dtype == "I8" else 16
    rows = info.shape[0] if info.shape else 1
    if scale.numel == 1:
        scale_shape = (1,) * max(1, len(info.shape))
    elif len(info.shape) >= 2 and scale.shape == (rows,):
        scale_shape = (rows,) + (1,) * (len(info.shape) - 1)
    else:
        return Quant(codec="affine", label=f"CT2_INT{bits}",
                     refusal=f"its scale {list(scale.shape)} matches neither its rows nor one value")
    return Quant(codec="affine", label=f"CT2_INT{bits}", parts={"scale": scale}, bits=bits,
                 signed=True, divide=True, scale_shape=scale_shape)
