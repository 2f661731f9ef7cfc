"""The weights behind each named point of our decoder: which of the checkpoint's tensors feed an
activation (most direct first), where their bytes lie, and which of them holds a NaN or Inf.

A point is (layer, module) as the decoder records it (model/decoder_points.py MODULES; layer None
for the embedding, final norm and logits). Used by the decoder's Side (side.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.gguf_keys import config_key_place
from ..runtime.experts import expert_names, fused_names, is_moe, shared_names
from ..runtime.streamed import StreamedMatrix
from ..runtime.weights import layer_parts

# The weight parts (runtime/weights.py names) whose values feed each module's activation, the
# one a divergence points at first; fused and mixture-of-experts families are mapped below.
MODULE_PARTS = {
    "embed": ("embed",), "attn_norm": ("attn_norm",),
    # MLA (DeepSeek) makes q from q_b (or q) over a low-rank q_a, k and v from kv_b over kv_a
    "q": ("q", "q_b", "q_a", "q_bias", "q_a_bias", "q_norm", "q_a_norm"),
    "k": ("k", "kv_b", "kv_a", "k_bias", "kv_a_bias", "k_norm", "kv_a_norm"),
    "v": ("v", "kv_b", "kv_a", "v_bias", "kv_a_bias"), "attn_out": ("o", "o_bias", "sinks"),
    "attn_residual": ("attn_out_norm", "o"), "ffn_norm": ("ffn_norm",),
    "ffn_out": ("down", "gate", "up", "gate_up", "router"), "residual": ("ffn_out_norm", "down"),
    "final_norm": ("norm",), "logits": ("lm_head",),
}


def module_tensors(model, layer: int | None, module: str) -> list[str]:
    """The checkpoint's names of the weights that feed `module` of `layer`, most direct first."""
    if model.is_engine:
        return []  # an engine (llama.cpp) holds no weights of ours
    w, cfg = model.weights, model.config
    parts = MODULE_PARTS[module]
    if layer is None:
        if module == "logits" and w.tied:
            return [w.name("embed")]
        return [w.name(p) for p in parts]
    have = layer_parts(cfg, layer)
    if cfg.fused_projections and module in ("q", "k", "v"):
        parts = ("qkv",) + parts[1:]
    names = [w.name(p, layer) for p in parts if p in have]
    if module == "ffn_out" and is_moe(cfg, layer):  # the experts behind the router, quantized or not
        fused = fused_names(cfg, layer)
        names += ([fused["gate_up"], fused["down"]] if fused else
                  [n for triple in expert_names(cfg, layer) for n in triple])
        names += [n for n in (shared_names(cfg, layer) or ())[:3] if n]
    return [n for n in names if n in w.ckpt.tensors]


def tensor_place(model, name: str | None) -> dict[str, Any]:
    """{"tensor", "file", "offset", "length"} of a weight in the checkpoint, for the hexdump."""
    info = model.weights.ckpt.tensors.get(name) if name and not model.is_engine else None
    if info is None:
        return {"tensor": name, "file": None, "offset": None, "length": None}
    return {"tensor": name, "file": info.file, "offset": int(info.offset), "length": int(info.length)}


def config_place(ckpt, field: str) -> dict[str, Any] | None:
    """Where a GGUF holds the hyperparameter behind ModelConfig `field` (its metadata entry's
    key and bytes), or None for another format or a key the file leaves to its default."""
    if ckpt is None or getattr(ckpt, "format", None) != "gguf":
        return None
    return config_key_place(ckpt.metadata, field, str(getattr(ckpt, "source", "") or ""))


def _held(cfg, layer: dict, module: str) -> list[tuple[str, Any, slice | None]]:
    """(part, held array, its rows) of the weights feeding `module`, as the decoder holds them:
    q, k, v fused into one matrix (rows in that order), gate and up into another."""
    qs, kvs, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    fused = cfg.fused_projections
    rows = {"q": slice(0, qs), "k": slice(qs, qs + kvs), "v": slice(qs + kvs, None)}
    if module in rows:
        return [("qkv" if fused else module, layer["qkv"], rows[module]),
                (f"{module}_bias", layer["qkv_bias"], rows[module]), (f"{module}_norm", layer.get(f"{module}_norm"), None)]
    if module == "ffn_out":
        return [("gate_up" if fused else "gate", layer["gate_up"], slice(0, inter)),
                ("gate_up" if fused else "up", layer["gate_up"], slice(inter, None)), ("down", layer["down"], None)]
    parts = {"attn_norm": ("attn_norm",), "attn_out": ("o", "o_bias"), "attn_residual": ("attn_out_norm",),
             "ffn_norm": ("ffn_norm",), "residual": ("ffn_out_norm",)}[module]
    return [(p, layer.get(p), None) for p in parts]


def nonfinite_weight(model, layer: int | None, module: str) -> str | None:
    """The name of the weight feeding `module` that holds NaN or Inf, as loaded; None if none does
    (or it is held requantized, where NaN/Inf never are: such matrices stay float32)."""
    if model.is_engine:
        return None
    w, b = model.weights, model.backend
    if layer is None:
        top = {"embed": ("embed", w.embed), "final_norm": ("norm", w.norm),
               "logits": ("embed" if w.tied else "lm_head", w.lm_head)}[module]
        held = [(top[0], top[1], None)]
    else:
        held = _held(model.config, w.layer(layer), module)
    for part, array, rows in held:
        if _holds_nonfinite(b, array, rows):
            return w.name(part, layer)
    return None


def _holds_nonfinite(backend, array, rows: slice | None) -> bool:
    """Whether `array` (its `rows`) holds NaN or Inf: a streamed matrix is read block by block
    from the file, never whole; a requantized matrix never holds them (such stay float32)."""
    if isinstance(array, StreamedMatrix):
        lo, hi, _ = (rows or slice(None)).indices(array.shape[0])
        return any(not np.isfinite(block[max(0, lo - start):max(0, hi - start)]).all()
                   for start, block in array.blocks() if start < hi and start + len(block) > lo)
    if array is None or not (isinstance(array, np.ndarray) or hasattr(array, "detach")):
        return False
    a = np.asarray(backend.to_numpy(array))
    return not np.isfinite(a if rows is None else a[rows]).all()
