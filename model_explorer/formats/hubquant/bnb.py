"""bitsandbytes: 4-bit NF4/FP4 (Linear4bit) and LLM.int8 (Linear8bitLt), as saved by
`save_pretrained` (bitsandbytes QuantState.as_dict(packed=True)).

4-bit: `W.weight` the packed codes (uint8 [ceil(n/2), 1] by default; bnb_4bit_quant_storage
may make it another dtype of the same bytes), `W.weight.absmax` (float32 [n/blocksize], or
uint8 when double-quantized), `W.weight.quant_map` float32 [16], with double quant
`W.weight.nested_absmax` float32 and `W.weight.nested_quant_map` float32 [256], and the JSON
blob `W.weight.quant_state.bitsandbytes__nf4|fp4` (uint8) holding quant_type, blocksize,
dtype, shape (and nested_blocksize, nested_dtype, nested_offset).
8-bit: `W.weight` int8 [out, in], `W.SCB` float32 [out] (row absmax), `W.weight_format` uint8.
"""

from __future__ import annotations

import json

from ...records import Quant
from .common import cdiv, finding, is_int, logical, numel, roles, shape_text, unusable

MAX_STATE_BYTES = 1 << 16  # the blob is ~170 bytes; anything far larger is not a quant state

def read_state(ckpt, t, add) -> dict | None:
    """The quant_state JSON blob (a few hundred bytes, read at open: it alone holds the shape)."""
    if t.length > MAX_STATE_BYTES or t.dtype not in ("U8", "I8"):
        add(finding("quant_state_invalid", f"{t.name!r} should be a short uint8 JSON "
                    f"blob; it is {shape_text(t)} ({t.length} bytes).", t))
        return None
    try:
        raw = bytes(ckpt.read_bytes(t.offset, t.length, t.file))
        state = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        add(finding("quant_state_invalid", f"{t.name!r} should hold the bitsandbytes "
                    f"quant state as UTF-8 JSON; it does not ({type(e).__name__}: "
                    f"{str(e)[:80]}).", t))
        return None
    if not isinstance(state, dict):
        add(finding("quant_state_invalid", f"{t.name!r} holds JSON but not an object "
                    f"({type(state).__name__}).", t))
        return None
    shape, block = state.get("shape"), state.get("blocksize")
    bad = []
    if not (isinstance(shape, list) and shape and all(is_int(d) and d > 0 for d in shape)):
        bad.append(f"shape = {shape!r}")
    if not (is_int(block) and block > 0):
        bad.append(f"blocksize = {block!r}")
    if state.get("quant_type") not in ("nf4", "fp4"):
        bad.append(f"quant_type = {state.get('quant_type')!r}")
    if bad:
        add(finding("quant_state_invalid", f"The quant state in {t.name!r} has "
                    f"{', '.join(bad)}; expected a list of positive dims, a positive block size "
                    "and 'nf4' or 'fp4'.", t))
        return None
    return state


def build_4bit(ckpt, layer, scheme, add, inferred: bool):
    p = layer.parts
    w, qs = p.get("weight"), p.get("quant_state")
    if w is None:
        add(finding("quant_missing_companion", f"bitsandbytes 4-bit layer {layer.base!r} "
                    f"has {', '.join(repr(n) for n in layer.names)} but no {layer.base + '.weight'!r} "
                    "with the packed codes.", layer.first()))
        return None
    suffix_type = qs.name.rsplit("__", 1)[-1] if qs is not None else None
    label = f"BNB_{(suffix_type or 'nf4').upper()}"
    missing = [r for r in ("quant_state", "absmax", "quant_map") if r not in p]
    if missing:
        add(finding("quant_missing_companion", f"{w.name!r} is bitsandbytes 4-bit but "
                    f"{', '.join(repr(layer.base + '.weight.' + r) for r in missing)} is missing; "
                    "it cannot be dequantized.", w, expected=missing))
        return unusable(w, "bnb_4bit", label, f"missing {', '.join(missing)}")
    state = read_state(ckpt, qs, add)
    if state is None:
        return unusable(w, "bnb_4bit", label, f"{qs.name!r} is not a valid quant state")
    qt = state["quant_type"]
    if qt != suffix_type:
        add(finding("quant_state_invalid", f"{qs.name!r} is named for {suffix_type!r} "
                    f"but its JSON says quant_type {qt!r}.", qs))
    if scheme and scheme.layout == "bnb_4bit" and scheme.params.get("quant_type") not in (None, qt):
        add(finding("quant_param_mismatch", f"config.json says bnb_4bit_quant_type "
                    f"{scheme.params['quant_type']!r}, but {qs.name!r} says {qt!r}; the tensor's "
                    "own state is what bitsandbytes decodes with.", qs,
                    expected=scheme.params["quant_type"], found=qt))
    shape, block = tuple(state["shape"]), state["blocksize"]
    n = numel(shape)
    if w.length != cdiv(n, 2):
        add(finding("quant_packed_shape", f"{w.name!r} holds {w.length} bytes "
                    f"({shape_text(w)}); the quant state's shape {list(shape)} needs "
                    f"{cdiv(n, 2)} bytes of 4-bit codes.", w,
                    expected=cdiv(n, 2), found=w.length))
    absmax = p["absmax"]
    if absmax.numel != cdiv(n, block):
        add(finding("quant_groups_mismatch", f"{absmax.name!r} has {absmax.numel} "
                    f"values; {n} weights in blocks of {block} need {cdiv(n, block)}.", absmax,
                    expected=cdiv(n, block), found=absmax.numel))
    if p["quant_map"].numel != 16:
        add(finding("quant_groups_mismatch", f"{p['quant_map'].name!r} has "
                    f"{p['quant_map'].numel} values; a 4-bit code book has 16.", p["quant_map"],
                    expected=16, found=p["quant_map"].numel))
    nested = "nested_blocksize" in state or "nested_absmax" in p
    if nested:
        gone = [r for r in ("nested_absmax", "nested_quant_map") if r not in p]
        if gone or not is_int(state.get("nested_blocksize")) or state["nested_blocksize"] <= 0:
            add(finding("quant_missing_companion", f"{w.name!r} is double-quantized but "
                        f"{', '.join(repr(layer.base + '.weight.' + r) for r in gone) or 'nested_blocksize in its quant state'} "
                        "is missing.", w, expected=gone))
            return unusable(w, "bnb_4bit", label, "incomplete double quantization")
        want = cdiv(absmax.numel, state["nested_blocksize"])
        na = p["nested_absmax"]
        if na.numel != want:
            add(finding("quant_groups_mismatch", f"{na.name!r} has {na.numel} values; "
                        f"{absmax.numel} absmax codes in blocks of {state['nested_blocksize']} need "
                        f"{want}.", na, expected=want, found=na.numel))
    quant = Quant(codec="bnb_4bit", label=f"BNB_{qt.upper()}", bits=4, group_size=block, sym=True,
                  quant_type=qt, dequant_dtype=state.get("dtype"), nested=nested,
                  nested_group_size=state.get("nested_blocksize") if nested else None,
                  nested_offset=state.get("nested_offset") if nested else None,
                  nested_dtype=state.get("nested_dtype") if nested else None,
                  parts=roles(p, ("weight", "absmax", "quant_map", "nested_absmax",
                                  "nested_quant_map", "quant_state")))
    return logical(layer.base + ".weight", w, shape, quant, inferred)


def build_int8(layer, scheme, add, inferred: bool):
    p = layer.parts
    w, scb = p.get("weight"), p.get("SCB")
    if w is None:
        add(finding("quant_missing_companion", f"{scb.name!r} (LLM.int8 row scales) has "
                    f"no {layer.base + '.weight'!r} to scale.", scb))
        return None
    if w.dtype != "I8" or len(w.shape) != 2:
        add(finding("quant_packed_shape", f"{w.name!r} has LLM.int8 row scales "
                    f"({scb.name!r}), so it should be int8 [out, in]; it is {shape_text(w)}.", w))
        return unusable(w, "bnb_int8", "BNB_INT8", f"{w.name!r} is not int8 [out, in]")
    if scb.numel != w.shape[0]:
        add(finding("quant_groups_mismatch", f"{scb.name!r} has {scb.numel} row scales; "
                    f"{w.name!r} has {w.shape[0]} rows.", scb,
                    expected=w.shape[0], found=scb.numel))
    quant = Quant(codec="bnb_int8", label="BNB_INT8", bits=8, sym=True,
                  parts=roles(p, ("weight", "SCB", "weight_format")))
    return logical(w.name, w, w.shape, quant, inferred)
