"""Llama-family tensor names: Hugging Face <-> GGUF, and llama.cpp's Q/K row permutation.

llama.cpp's converter reorders the rows of each attention head of the Q and K projections
(HF keeps the two rotary halves apart, ggml interleaves them); comparing a safetensors and
a GGUF copy of one model means undoing that.
"""

from __future__ import annotations

import re

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
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GGUF_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_HF_BLOCK = {v: k for k, v in _BLOCK.items()}
_HF_TOP = {v: k for k, v in _TOP.items()}


def gguf_to_hf(name: str) -> str | None:
    if name in _TOP:
        return _TOP[name]
    m = _GGUF_BLK.match(name)
    if m and m[2] in _BLOCK:
        return f"model.layers.{m[1]}.{_BLOCK[m[2]]}"
    return None


def hf_to_gguf(name: str) -> str | None:
    if name in _HF_TOP:
        return _HF_TOP[name]
    m = _HF_LAYER.match(name)
    if m and m[2] in _HF_BLOCK:
        return f"blk.{m[1]}.{_HF_BLOCK[m[2]]}"
    return None


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
