"""Tensor names and layouts of the families whose checkpoints are not Llama-shaped.

The decoder holds every family's weights the same way: q, k and v rows in that order in one
matrix, [out, in] matrices, a bias per projection where there is one. GPT-2 stores its
projections as Conv1D, [in, out] (transposed here, except a Hub-quantized tensor, whose logical
shape is already [out, in]: see model/families.py), q/k/v fused as `c_attn`; GPT-NeoX fuses them
as `query_key_value` grouped per head, [heads, 3, head_dim] rows (regrouped here to q, k, v).
Their plain GELU MLP's up projection is held where a gated MLP's fused gate/up is ("gate_up").
"""

from __future__ import annotations

import numpy as np

from ..model import families
from ..model.config import ModelConfig
from . import mla

_GPT2 = "transformer.h.{i}."
_NEOX = "gpt_neox.layers.{i}."
NAMES: dict[str, dict[str, str]] = {
    "gpt2": {
        "embed": "transformer.wte.weight", "pos_embed": "transformer.wpe.weight",
        "norm": "transformer.ln_f.weight", "norm_bias": "transformer.ln_f.bias",
        "attn_norm": _GPT2 + "ln_1.weight", "attn_norm_bias": _GPT2 + "ln_1.bias",
        "qkv": _GPT2 + "attn.c_attn.weight", "qkv_bias": _GPT2 + "attn.c_attn.bias",
        "o": _GPT2 + "attn.c_proj.weight", "o_bias": _GPT2 + "attn.c_proj.bias",
        "ffn_norm": _GPT2 + "ln_2.weight", "ffn_norm_bias": _GPT2 + "ln_2.bias",
        "gate_up": _GPT2 + "mlp.c_fc.weight", "gate_up_bias": _GPT2 + "mlp.c_fc.bias",
        "down": _GPT2 + "mlp.c_proj.weight", "down_bias": _GPT2 + "mlp.c_proj.bias",
    },
    "gpt_neox": {
        "embed": "gpt_neox.embed_in.weight", "lm_head": "embed_out.weight",
        "norm": "gpt_neox.final_layer_norm.weight", "norm_bias": "gpt_neox.final_layer_norm.bias",
        "attn_norm": _NEOX + "input_layernorm.weight", "attn_norm_bias": _NEOX + "input_layernorm.bias",
        "qkv": _NEOX + "attention.query_key_value.weight", "qkv_bias": _NEOX + "attention.query_key_value.bias",
        "o": _NEOX + "attention.dense.weight", "o_bias": _NEOX + "attention.dense.bias",
        "ffn_norm": _NEOX + "post_attention_layernorm.weight",
        "ffn_norm_bias": _NEOX + "post_attention_layernorm.bias",
        "gate_up": _NEOX + "mlp.dense_h_to_4h.weight", "gate_up_bias": _NEOX + "mlp.dense_h_to_4h.bias",
        "down": _NEOX + "mlp.dense_4h_to_h.weight", "down_bias": _NEOX + "mlp.dense_4h_to_h.bias",
    },
    "deepseek_v3": mla.NAMES,
}
DESCRIPTIONS = {"pos_embed": "learned position embedding", "norm_bias": "final norm bias",
                "attn_norm_bias": "attention norm bias", "ffn_norm_bias": "MLP norm bias",
                "qkv_bias": "fused q/k/v bias", "gate_up_bias": "MLP up bias", "down_bias": "MLP down bias",
                **mla.DESCRIPTIONS}


def name(cfg: ModelConfig, part: str, layer: int | None) -> str | None:
    """The family's own name for `part`; None where it follows Hugging Face's Llama naming."""
    own = NAMES.get(cfg.architecture, {}).get(part)
    return None if own is None else own.format(i=layer)


def _in_out(cfg: ModelConfig, part: str, layer: int | None) -> bool:
    own = name(cfg, part, layer)
    return own is not None and families.is_in_out(cfg.architecture, own)


def stored_shape(cfg: ModelConfig, part: str, layer: int | None, shape: tuple[int, ...],
                 quantized: bool) -> tuple[int, ...]:
    """The shape the checkpoint holds for a part the decoder holds as `shape`."""
    if _in_out(cfg, part, layer) and not quantized:
        return tuple(reversed(shape))
    return shape


def to_decoder(cfg: ModelConfig, part: str, layer: int | None, a: np.ndarray, quantized: bool) -> np.ndarray:
    """The tensor as the decoder holds it: Conv1D transposed, NeoX's per-head q/k/v regrouped."""
    if _in_out(cfg, part, layer) and not quantized:
        return np.ascontiguousarray(a.T)
    if cfg.architecture == "gpt_neox" and part in ("qkv", "qkv_bias"):
        rest = a.shape[1:]
        a = a.reshape(cfg.num_heads, 3, cfg.head_dim, *rest).swapaxes(0, 1)
        return np.ascontiguousarray(a.reshape(3 * cfg.num_heads * cfg.head_dim, *rest))
    return a
