"""The hyperparameters against the tensor shapes: each count or width a tensor pins down (layers,
width, vocabulary, heads, key/value heads, intermediate size, experts) checked against the config,
and which tensors' shapes say anything at all (a packed quantized tensor does not). Headers only.
"""

from __future__ import annotations

import re

from ..records import CheckpointRecord, TensorInfo
from ..spans import Finding
from . import families
from .findings import model_finding
from .hparams import HParams, embedding, info_span

PACKED_DTYPES = ("U8", "I8", "I32", "U32", "I16", "U16", "BOOL")


def tensor_loc(info: TensorInfo | None) -> dict:
    if info is None:
        return {}
    off, ln = info_span(info)
    return {"offset": off, "length": ln, "tensor": info.name, "file": info.file}


QUANT_SUFFIXES = (".qweight", ".qzeros", ".g_idx", ".weight_packed", ".weight_scale", ".SCB", ".absmax",
                  ".weight_shape", ".scales", ".biases")


def shape_says(info: TensorInfo) -> bool:
    """Whether a tensor's shape is the weight's own. A grouped quantized layer (GPTQ, AWQ,
    bitsandbytes, compressed-tensors, FP8, MXFP4, MLX) carries its logical shape; one the format
    layer could not decode (`unusable`), or packed integers left ungrouped (bitsandbytes'
    [n/2, 1] codes), say nothing about widths or heads."""
    if info.quant:
        return info.quant.usable
    return info.dtype not in PACKED_DTYPES


def quantized(ckpt: CheckpointRecord, by_name: dict[str, TensorInfo]) -> bool:
    cfg = ckpt.metadata.get("config.json")
    if isinstance(cfg, dict) and (cfg.get("quantization_config") or cfg.get("quantization")):
        return True
    return any(n.endswith(QUANT_SUFFIXES) or ".quant_state." in n for n in by_name)


_DIGITS = re.compile(r"(\d+)")


def natural(name: str):
    return [int(t) if t.isdigit() else t for t in _DIGITS.split(name)]


# -- hyperparameters against shapes ---------------------------------------------------------------

_Q = ("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight")
_K = ("model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight")
_UP = ("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", "model.layers.0.mlp.gate_proj.weight",
       "blk.0.ffn_gate.weight")
_LAYER = re.compile(r"^(?:model\.(?:language_model\.)?layers|blk|transformer\.h|model\.decoder\.layers|"
                    r"gpt_neox\.layers|transformer\.blocks)\.(\d+)\.")
ANY_LAYER = re.compile(r"(?:^|\.)(?:layers|blk|h|blocks)\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_EXPS = ("blk.0.ffn_up_exps.weight", "blk.0.ffn_gate_exps.weight")


def _pos_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _first(by_name: dict[str, TensorInfo], names) -> TensorInfo | None:
    return next((by_name[n] for n in names if n in by_name), None)


def quantities(ckpt: CheckpointRecord, hp: HParams, by_name: dict[str, TensorInfo]
                ) -> tuple[dict[str, set[int]], list[Finding]]:
    """Each hyperparameter the tensors pin down, against the config. Returns the values that
    disagree ({quantity: {config value, tensor value}}, so per-tensor lines can be skipped)."""
    out: list[Finding] = []
    explained: dict[str, set[int]] = {}
    gguf = hp.origin == "gguf"

    def check(q: str, found: int | None, info: TensorInfo | None, what: str) -> None:
        s = hp.values.get(q)
        if s is None or found is None or not isinstance(s.value, int) or isinstance(s.value, bool):
            return
        if s.source in ("tensor", "default"):
            return
        if s.value == found:
            return
        scale = _pos_int(hp.get("head_dim")) if q in ("heads", "kv_heads") else 1  # the dims the shapes show
        explained[q] = {s.value * (scale or 1), found * (scale or 1)}
        where = {"offset": s.offset, "length": s.length, "file": s.file} if s.offset is not None else tensor_loc(info)
        if info is not None:
            where["tensor"] = info.name
        out.append(model_finding("config_mismatch", f"{s.where()} = {s.value}, but {what} = {found}.",
                                 quantity=q, expected=s.value, found=found, **where))

    embed = embedding(ckpt) if not by_name.get("model.embed_tokens.weight") else by_name["model.embed_tokens.weight"]
    if embed is not None and len(embed.shape) == 2 and shape_says(embed):
        check("hidden", embed.shape[1], embed, f"{embed.name!r} has shape {list(embed.shape)}, width")
        check("vocab", embed.shape[0], embed, f"{embed.name!r} has {embed.shape[0]} rows (the vocabulary)")
    layers = {int(m[1]) for n in by_name if (m := _LAYER.match(n))}
    if layers:
        check("layers", max(layers) + 1, None, f"the tensors name layers 0 to {max(layers)}, a count")
        if "layers" in explained:
            explained["layers"] = {max(layers) + 1}
    hd, hidden = _pos_int(hp.get("head_dim")), _pos_int(hp.get("hidden"))
    # DeepSeek's latent attention: a q head is qk_nope_head_dim + qk_rope_head_dim wide (head_dim
    # is the rotary part alone), and there is no k_proj
    nope, rope = _pos_int(hp.get("qk_nope_head_dim")), _pos_int(hp.get("qk_rope_head_dim"))
    q_hd = nope + rope if nope and rope else hd
    for q_name, names, what, width in (("heads", _Q, "heads", q_hd), ("kv_heads", _K, "key/value heads", hd)):
        info = _first(by_name, names)
        if info is None or not width or len(info.shape) != 2 or not shape_says(info):
            continue
        rows = info.shape[0]
        if rows % width == 0 and (hidden is None or info.shape[1] == hidden):
            check(q_name, rows // width, info, f"{info.name!r} has {rows} rows = {rows // width} {what} of {width}")
    up = _first(by_name, _UP)
    fam = families.lookup(hp.model_type)
    fused = gguf and fam is not None and fam.mlp == "fused_gated"  # llama.cpp's Phi-3 ffn_up holds gate and up
    if up is not None and len(up.shape) == 2 and shape_says(up) and not fused \
            and (hidden is None or up.shape[1] == hidden):
        check("intermediate", up.shape[0], up, f"{up.name!r} has {up.shape[0]} rows")
    experts = {int(m[1]) for n in by_name if (m := _EXPERT.search(n))}
    if experts:
        check("experts", max(experts) + 1, None, f"the tensors name experts 0 to {max(experts)}, a count")
    elif gguf:
        exps = _first(by_name, _EXPS)
        if exps is not None and len(exps.shape) == 3:
            check("experts", exps.shape[0], exps, f"{exps.name!r} stacks {exps.shape[0]} experts")
    return explained, out
