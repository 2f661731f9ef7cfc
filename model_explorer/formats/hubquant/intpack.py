"""GPTQ and AWQ: integers packed into int32 words, with group scales and zero points.

Shapes, from the libraries' QuantLinear buffers (AutoGPTQ qlinear_cuda_old, GPTQModel,
AutoAWQ WQLinear_GEMM / WQLinear_GEMV / gemv_fast):
- GPTQ: qweight int32 [in*bits/32, out], qzeros int32 [groups, out*bits/32], scales fp16
  [groups, out], g_idx int32 [in]; groups = ceil(in / group_size), 1 with group_size -1.
- AWQ GEMM: qweight int32 [in, out*bits/32], qzeros int32 [in/group, out*bits/32],
  scales fp16 [in/group, out].
- AWQ GEMV: qweight int32 [out, in*bits/32], qzeros int32 [out, zw], scales fp16
  [out, zw*32/bits], zw = calculate_zeros_width(in, group) (padded).
- AWQ GEMV-fast: qweight int16 [out/4, in], scales and scaled_zeros fp16 [zw*8, out].
"""

from __future__ import annotations

from ...records import Quant
from .common import cdiv, finding, is_int, logical, roles, shape_text
from .config import GPTQ_BITS, Scheme


def orientation(parts) -> str | None:
    """"gptq" or "awq" from the shapes alone: GPTQ's qweight has `out` columns like its
    scales; AWQ GEMM's has out*bits/32; AWQ GEMV's has `out` rows like its scales."""
    qw, sc = parts.get("qweight"), parts.get("scales")
    if "scaled_zeros" in parts:
        return "awq"
    if qw is None or sc is None or len(qw.shape) != 2 or len(sc.shape) != 2:
        return "gptq" if "g_idx" in parts else None
    if qw.shape[1] == sc.shape[1]:
        return "gptq"
    if qw.shape[0] == sc.shape[0] or sc.shape[1] % max(1, qw.shape[1]) == 0:
        return "awq"
    return None


def _missing(layer, add, layout, need) -> bool:
    absent = [r for r in need if r not in layer.parts]
    if absent:
        have = layer.first()
        add(finding("quant_missing_companion", f"{layout.upper()} layer {layer.base!r} has "
                    f"{', '.join(repr(n) for n in layer.names)} but no "
                    f"{', '.join(repr(layer.base + '.' + r) for r in absent)}; it cannot be "
                    "dequantized.", have,
                    expected=absent, found=sorted(layer.parts)))
    return bool(absent)


def _zeros_width(in_features: int, group: int, pack: int = 8) -> int:
    """AutoAWQ's calculate_zeros_width: groups rounded up to whole words, then padded."""
    mult = 1 if group >= 128 else {64: 2, 32: 4}.get(group, 1)
    base = cdiv(in_features // group, pack)
    return cdiv(base, mult) * mult


def _infer_bits(qw, qz, out: int, gptq: bool) -> int | None:
    """Bits from the packed zero points' width (the one place the shapes say it)."""
    if qz is None or len(qz.shape) != 2 or not out:
        return None
    cols = qz.shape[1]
    for b in GPTQ_BITS:
        if gptq and cols == out * b // 32 and (out * b) % 32 == 0:
            return b
    return None


def build_gptq(layer, scheme: Scheme | None, add, inferred: bool):
    p = layer.parts
    if _missing(layer, add, "gptq", ("qweight", "scales", "qzeros")):
        return None
    qw, qz, sc, gi = p["qweight"], p["qzeros"], p["scales"], p.get("g_idx")
    cfg = scheme.layer(layer.base) if scheme else {}
    if cfg is None:
        cfg = {}
    if len(qw.shape) != 2 or qw.dtype not in ("I32", "I16", "I8", "I64", "U32"):
        add(finding("quant_packed_shape", f"GPTQ qweight {qw.name!r} must be a 2-D "
                    f"packed integer tensor; it is {shape_text(qw)}.", qw))
        return None
    word = {"I32": 32, "U32": 32, "I16": 16, "I8": 8, "I64": 64}[qw.dtype]
    out = qw.shape[1]
    bits = cfg.get("bits")
    shape_bits = _infer_bits(qw, qz, out, True)
    if not (is_int(bits) and bits in GPTQ_BITS):
        bits = shape_bits
    elif shape_bits is not None and shape_bits != bits and word == 32:
        add(finding("quant_packed_shape", f"config.json says bits = {bits}, but "
                    f"{qz.name!r} {list(qz.shape)} packs {out} zero points per group into "
                    f"{qz.shape[1]} int32 words, which is {shape_bits} bits.", qz,
                    expected=bits, found=shape_bits))
        bits = shape_bits
    if bits is None:
        add(finding("quant_packed_shape", f"The bits of GPTQ layer {layer.base!r} are "
                    f"unknown: no valid config bits and {qz.name!r} {list(qz.shape)} fits none "
                    f"of {list(GPTQ_BITS)} for {out} output features.", qz))
        return None
    if (qw.shape[0] * word) % bits:
        add(finding("quant_packed_shape", f"{qw.name!r} has {qw.shape[0]} rows of "
                    f"{word}-bit words: {qw.shape[0] * word} bits per column, not a whole number "
                    f"of {bits}-bit values.", qw))
        return None
    in_f = qw.shape[0] * word // bits
    group = cfg.get("group_size")
    if not cfg and len(sc.shape) == 2 and sc.shape[0] > 1:  # no config: the scales' rows say
        group = cdiv(in_f, sc.shape[0])
    group = group if is_int(group) and group > 0 else None
    groups = cdiv(in_f, group) if group else 1
    _check(add, sc, (groups, out), f"GPTQ scales of {layer.base!r} ({in_f} inputs in groups of "
           f"{group or in_f}, {out} outputs)")
    zcols = out * bits // 32 if (out * bits) % 32 == 0 else None
    if zcols is not None:
        _check(add, qz, (groups, zcols), f"GPTQ qzeros of {layer.base!r} ({groups} groups of "
               f"{out} {bits}-bit zero points packed in int32)")
    if gi is not None and (len(gi.shape) != 1 or gi.shape[0] != in_f):
        add(finding("quant_gidx_length", f"{gi.name!r} is {shape_text(gi)}; g_idx maps "
                    f"each of the {in_f} input features to its group, so it should be [{in_f}] "
                    f"(in_features = {qw.shape[0]} qweight rows x {word} / {bits} bits).", gi,
                    expected=[in_f], found=list(gi.shape)))
    params = dict(scheme.params) if scheme and scheme.layout == "gptq" else {}
    params.pop("dynamic", None)
    quant = Quant(codec="gptq", label=f"GPTQ_Q{bits}", bits=bits, group_size=group,
                  sym=cfg.get("sym", True) is not False,
                  act_order=bool(cfg.get("desc_act", params.get("desc_act", False))),
                  checkpoint_format=params.get("checkpoint_format", "gptq"),
                  parts=roles(p, ("qweight", "qzeros", "scales", "g_idx")))
    return logical(layer.base + ".weight", qw, (out, in_f), quant, inferred)


def build_awq(layer, scheme: Scheme | None, add, inferred: bool):
    p = layer.parts
    version = (scheme.params.get("version") if scheme and scheme.layout == "awq" else None)
    if version is None:
        qw, sc = p.get("qweight"), p.get("scales")
        version = "gemv_fast" if "scaled_zeros" in p else (
            "gemv" if qw is not None and sc is not None and qw.shape[:1] == sc.shape[:1] else "gemm")
    need = ("qweight", "scales", "scaled_zeros") if version == "gemv_fast" else ("qweight", "scales", "qzeros")
    if _missing(layer, add, "awq", need):
        return None
    qw, sc = p["qweight"], p["scales"]
    bits = scheme.bits if scheme and scheme.layout == "awq" and scheme.bits else 4
    group = scheme.group_size if scheme and scheme.layout == "awq" else None
    if scheme is None or scheme.layout != "awq":
        group = None  # inferred below
    if len(qw.shape) != 2 or len(sc.shape) != 2:
        add(finding("quant_packed_shape", f"AWQ qweight {qw.name!r} and scales must be "
                    f"2-D; found {shape_text(qw)} and {shape_text(sc)}.", qw))
        return None
    pack = 32 // bits
    if version == "gemm":
        in_f, out = qw.shape[0], qw.shape[1] * pack
        if group is None and sc.shape[0]:
            group = in_f // sc.shape[0] if in_f % sc.shape[0] == 0 else None
        groups = in_f // group if group else 1
        _check(add, sc, (groups, out), f"AWQ scales of {layer.base!r} ({in_f} inputs in groups "
               f"of {group or in_f}, {out} outputs)")
        _check(add, p["qzeros"], (groups, qw.shape[1]), f"AWQ qzeros of {layer.base!r}")
    elif version == "gemv":
        out, in_f = qw.shape[0], qw.shape[1] * pack
        if group is None:  # no config: the group size whose padded zeros width fits
            zw = p["qzeros"].shape[-1] if p["qzeros"].shape else None
            group = next((g for g in (128, 64, 32) if _zeros_width(in_f, g) == zw), None)
        g = group or 128
        zw = _zeros_width(in_f, g)
        _check(add, p["qzeros"], (out, zw), f"AWQ GEMV qzeros of {layer.base!r} ({in_f} inputs, "
               f"groups of {g}, padded)")
        _check(add, sc, (out, zw * pack), f"AWQ GEMV scales of {layer.base!r}")
    elif version == "gemv_fast":
        out, in_f = qw.shape[0] * 4, qw.shape[1]
        g = group or 128
        zw = _zeros_width(in_f, g)
        _check(add, sc, (zw * pack, out), f"AWQ GEMV-fast scales of {layer.base!r}")
        _check(add, p["scaled_zeros"], (zw * pack, out), f"AWQ GEMV-fast scaled_zeros of {layer.base!r}")
    else:
        add(finding("quant_layout_unknown", f"AWQ version {version!r} of "
                    f"{layer.base!r} has no documented layout this tool decodes; its tensors are "
                    "shown as stored (packed), not as weights.", qw))
        return None
    quant = Quant(codec="awq", label=f"AWQ_Q{bits}", bits=bits, group_size=group,
                  sym=bool(scheme.sym) if scheme and scheme.layout == "awq" else False,
                  version=version, parts=roles(p, ("qweight", "scales", "qzeros", "scaled_zeros")))
    return logical(layer.base + ".weight", qw, (out, in_f), quant, inferred)


def _check(add, t, want: tuple[int, ...], what: str) -> None:
    if tuple(t.shape) != tuple(want):
        add(finding("quant_groups_mismatch", f"{t.name!r} is {shape_text(t)}; {what} "
                    f"need {list(want)}.", t, expected=list(want),
                    found=list(t.shape)))
