"""Tensor names: Hugging Face <-> GGUF per architecture, and llama.cpp's Q/K row permutation.

llama.cpp's converter reorders the rows of each attention head of the Q and K projections
(HF keeps the two rotary halves apart, ggml interleaves them) for the architectures it converts
through its LlamaModel class (llama, mistral, mixtral, granite, smollm3); comparing a safetensors
and a GGUF copy of one model means undoing that.

Names come from gguf-py's TensorNameMap (the table llama.cpp's converter uses) when gguf-py is
installed; the built-in tables below cover the tensors the run cell's decoder reads without it.
One HF name can mean two GGUF tensors: `post_attention_layernorm` is the MLP's input norm in
Llama (`ffn_norm`) but the attention output's norm in Gemma 2 and OLMo 2 (`post_attention_norm`),
so the mapping takes the family's own names (its row in model/families: this layer sits below it).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    # Qwen2-MoE's shared expert and its sigmoid gate (DeepSeek's shared_experts map here too)
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
    # DeepSeek's latent attention (llama.cpp's converter splits kv_b: attn_k_b, attn_v_b)
    "attn_q_a.weight": "self_attn.q_a_proj.weight", "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight", "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight", "attn_kv_b.weight": "self_attn.kv_b_proj.weight",
}
# Where a family gives an HF name another GGUF tensor than Llama does, its row says
# (model/families, `gguf_names`): callers pass that table as `overrides`.
# GPT-2 and GPT-NeoX name their tensors their own way (weights and biases alike).
_OWN_TOP = {"transformer.wte": "token_embd", "transformer.wpe": "position_embd", "transformer.ln_f": "output_norm",
            "gpt_neox.embed_in": "token_embd", "embed_out": "output", "gpt_neox.final_layer_norm": "output_norm"}
_OWN_BLOCK = {
    "transformer.h": {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
                      "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"},
    "gpt_neox.layers": {"input_layernorm": "attn_norm", "attention.query_key_value": "attn_qkv",
                        "attention.dense": "attn_output", "post_attention_layernorm": "ffn_norm",
                        "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"},
}
_GGUF_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_ANY_LAYER = re.compile(r"^(model\.layers|transformer\.h|gpt_neox\.layers)\.(\d+)\.(.+)$")  # Llama, GPT-2, NeoX
_HF_BLOCK = {v: k for k, v in _BLOCK.items()}
# The experts stacked as llama.cpp's converter stacks them (merged_expert_name), both spellings.
for _g, _names in (("ffn_gate_exps", ("gate_proj", "w1")), ("ffn_up_exps", ("up_proj", "w3")),
                   ("ffn_down_exps", ("down_proj", "w2"))):
    for _mlp, _hf in zip(("mlp", "block_sparse_moe"), _names):
        _HF_BLOCK[f"{_mlp}.experts.{_hf}.weight"] = f"{_g}.weight"
_HF_BLOCK["block_sparse_moe.gate.weight"] = "ffn_gate_inp.weight"
_HF_BLOCK["mlp.gate_up_proj.weight"] = "ffn_up.weight"  # Phi-3's gate and up, one tensor in both
for _p in ("gate", "up", "down"):
    _HF_BLOCK[f"mlp.shared_experts.{_p}_proj.weight"] = f"ffn_{_p}_shexp.weight"
_HF_TOP = {v: k for k, v in _TOP.items()}

# The decoder's parts (demo/weights.py) by GGUF name: one name each whatever the architecture,
# as llama.cpp names tensors by role (gguf-py's TENSOR_NAMES; a test holds them equal).
GGUF_PARTS = {
    "embed": "token_embd.weight", "norm": "output_norm.weight", "lm_head": "output.weight",
    "attn_norm": "blk.{i}.attn_norm.weight", "q": "blk.{i}.attn_q.weight", "k": "blk.{i}.attn_k.weight",
    "v": "blk.{i}.attn_v.weight", "o": "blk.{i}.attn_output.weight", "q_bias": "blk.{i}.attn_q.bias",
    "k_bias": "blk.{i}.attn_k.bias", "v_bias": "blk.{i}.attn_v.bias", "o_bias": "blk.{i}.attn_output.bias",
    "q_norm": "blk.{i}.attn_q_norm.weight", "k_norm": "blk.{i}.attn_k_norm.weight",
    "attn_out_norm": "blk.{i}.post_attention_norm.weight", "ffn_out_norm": "blk.{i}.post_ffw_norm.weight",
    "qkv": "blk.{i}.attn_qkv.weight", "gate_up": "blk.{i}.ffn_up.weight",  # Phi-3: gate rows, then up
    "ffn_norm": "blk.{i}.ffn_norm.weight", "gate": "blk.{i}.ffn_gate.weight", "up": "blk.{i}.ffn_up.weight",
    "down": "blk.{i}.ffn_down.weight", "router": "blk.{i}.ffn_gate_inp.weight", "sinks": "blk.{i}.attn_sinks.weight",
    # GPT-2 and NeoX: LayerNorm biases, fused q/k/v bias, the plain MLP's up (gate_up) and down biases
    "pos_embed": "position_embd.weight", "norm_bias": "output_norm.bias", "attn_norm_bias": "blk.{i}.attn_norm.bias",
    "ffn_norm_bias": "blk.{i}.ffn_norm.bias", "qkv_bias": "blk.{i}.attn_qkv.bias", "gate_up_bias": "blk.{i}.ffn_up.bias",
    "down_bias": "blk.{i}.ffn_down.bias",
    # DeepSeek's latent attention; newer llama.cpp splits attn_kv_b into attn_k_b (transposed) and attn_v_b
    "q_a": "blk.{i}.attn_q_a.weight", "q_a_norm": "blk.{i}.attn_q_a_norm.weight", "q_b": "blk.{i}.attn_q_b.weight",
    "kv_a": "blk.{i}.attn_kv_a_mqa.weight", "kv_a_norm": "blk.{i}.attn_kv_a_norm.weight",
    "kv_b": "blk.{i}.attn_kv_b.weight", "k_b": "blk.{i}.attn_k_b.weight", "v_b": "blk.{i}.attn_v_b.weight",
}
# Every expert of a layer in one tensor per projection, [experts, out, in] in numpy order.
GGUF_EXPERTS = ("blk.{i}.ffn_gate_exps.weight", "blk.{i}.ffn_up_exps.weight", "blk.{i}.ffn_down_exps.weight")
# A layer's shared expert (gate, up, down) and its sigmoid gate (Qwen2-MoE), [1, hidden] or [hidden]
GGUF_SHARED = ("blk.{i}.ffn_gate_shexp.weight", "blk.{i}.ffn_up_shexp.weight", "blk.{i}.ffn_down_shexp.weight",
               "blk.{i}.ffn_gate_inp_shexp.weight")
GGUF_SCORE_BIAS = "blk.{i}.exp_probs_b.bias"  # DeepSeek's router choice bias
_HF_EXPERT = re.compile(r"^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\."
                        r"(gate_proj|w1|up_proj|w3|down_proj|w2)\.weight$")
_EXPERT_ROLE = {"gate_proj": 0, "w1": 0, "up_proj": 1, "w3": 1, "down_proj": 2, "w2": 2}


# Where llama.cpp names a part by another role for one family (gpt-oss's MLP input norm is its
# `post_attention_norm`), the family's row says (model/families, `gguf_parts`).
# gpt-oss's experts: gate, up, down stacked ([experts, out, in]) and their biases ([experts, out]).
GGUF_EXPERT_BIASES = ("blk.{i}.ffn_gate_exps.bias", "blk.{i}.ffn_up_exps.bias", "blk.{i}.ffn_down_exps.bias")
# llama.cpp's converter with --fuse-gate-up-exps: gate and up of every expert in one [experts, gate + up, in]
GGUF_GATE_UP_EXPS = "blk.{i}.ffn_gate_up_exps.weight"


def gguf_part_name(part: str, layer: int | None = None, own: dict[str, str] | None = None) -> str:
    """The GGUF name of a decoder part ("q", "ffn_norm", "router"...) of block `layer`; `own`:
    the family's names where llama.cpp names a part otherwise (its row's gguf_parts)."""
    return ((own or {}).get(part) or GGUF_PARTS[part]).format(i=layer)


def gguf_expert(hf_name: str) -> tuple[str, int] | None:
    """(merged GGUF tensor, expert index) holding a per-expert HF tensor (Mixtral's w1/w2/w3,
    Qwen-MoE's gate/up/down_proj), else None: read row `index` of the merged tensor."""
    m = _HF_EXPERT.match(hf_name)
    if m is None:
        return None
    return GGUF_EXPERTS[_EXPERT_ROLE[m[3]]].format(i=int(m[1])), int(m[2])


def merged_expert_name(hf_name: str) -> str | None:
    """The HF name llama.cpp's converter gives the stack of one projection of every expert
    (`model.layers.N.mlp.experts.gate_proj.weight`), which its tables map to `ffn_gate_exps`."""
    m = _HF_EXPERT.match(hf_name)
    return None if m is None else hf_name.replace(f".experts.{m[2]}.", ".experts.", 1)


@lru_cache(maxsize=32)
def _name_map(arch: str):
    """gguf-py's TensorNameMap of `arch` for one block (block 0), or None without gguf-py."""
    try:
        import gguf
        from gguf.tensor_mapping import TensorNameMap
    except ImportError:
        return None
    kind = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}.get(arch)
    if kind is None:
        return None
    # TensorNameMap folds an architecture's overrides into the class's shared table; keep it clean.
    shared = dict(TensorNameMap.block_mappings_cfg)
    try:
        return TensorNameMap(kind, 1)
    finally:
        TensorNameMap.block_mappings_cfg.clear()
        TensorNameMap.block_mappings_cfg.update(shared)


def _builtin_hf_to_gguf(name: str, overrides: dict[str, str] | None = None) -> str | None:
    if name in _HF_TOP:
        return _HF_TOP[name]
    stem, dot, suffix = name.rpartition(".")
    if suffix in ("weight", "bias") and stem in _OWN_TOP:
        return f"{_OWN_TOP[stem]}.{suffix}"
    m = _ANY_LAYER.match(stem)
    if m and m[1] in _OWN_BLOCK:
        own = _OWN_BLOCK[m[1]].get(m[3])
        return f"blk.{m[2]}.{own}.{suffix}" if own and suffix in ("weight", "bias") else None
    m = _HF_LAYER.match(name)
    if not m:
        return None
    rest = (overrides or {}).get(m[2]) or _HF_BLOCK.get(m[2])
    return f"blk.{m[1]}.{rest}" if rest else None


def hf_to_gguf(name: str, arch: str | None = None, overrides: dict[str, str] | None = None) -> str | None:
    """The GGUF name of an HF tensor; `arch` (GGUF `general.architecture`) picks gguf-py's
    table for that architecture, else the built-in llama layout with the family's `overrides`
    (its row's gguf_names). Merged expert names (`...mlp.experts.gate_proj.weight`) map to
    `ffn_gate_exps`; per-expert ones to None."""
    tmap = _name_map(arch) if arch else None
    if tmap is not None:
        m = _ANY_LAYER.match(name)  # gguf-py's map is of block 0: ask for that block
        key = f"{m[1]}.0.{m[3]}" if m else name
        got = tmap.get_name(key, try_suffixes=(".weight", ".bias"))
        if got is not None:
            return f"blk.{m[2]}.{got[len('blk.0.'):]}" if m and got.startswith("blk.0.") else got
    return _builtin_hf_to_gguf(name, overrides)


def gguf_to_hf(name: str, overrides: dict[str, str] | None = None) -> str | None:
    """The HF (llama-layout) name of a GGUF tensor, else None; `overrides`: the family's row's
    gguf_names (HF block tail -> GGUF block tail)."""
    if name in _TOP:
        return _TOP[name]
    m = _GGUF_BLK.match(name)
    if not m:
        return None
    for hf, gg in (overrides or {}).items():
        if gg == m[2]:
            return f"model.layers.{m[1]}.{hf}"
    return f"model.layers.{m[1]}.{_BLOCK[m[2]]}" if m[2] in _BLOCK else None


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF row order -> GGUF row order (what llama.cpp's converter does to Q and K)."""
    rows = w.shape[0]
    if n_head <= 0 or rows % (2 * n_head):
        return w
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF row order -> HF row order for a Q or K projection with `n_head` heads."""
    rows = w.shape[0]
    if n_head <= 0 or rows % (2 * n_head):
        return w
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def rope_heads(gguf_name: str, heads: int | None, kv_heads: int | None) -> int | None:
    """How many heads a GGUF Q or K tensor was permuted over, else None."""
    if gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
        return heads
    if gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
        return kv_heads or heads
    return None


def gguf_expert_shapes(layer: int, experts: int, width: int, hidden: int) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape) of a layer's stacked expert tensors in a GGUF: gate, up, down."""
    gate, up, down = (t.format(i=layer) for t in GGUF_EXPERTS)
    return [(gate, (experts, width, hidden)), (up, (experts, width, hidden)), (down, (experts, hidden, width))]
