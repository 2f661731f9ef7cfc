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

DESCRIPTIONS = {"pos_embed": "learned position embedding", "norm_bias": "final norm bias",
                "attn_norm_bias": "attention norm bias", "ffn_norm_bias": "MLP norm bias",
                "qkv_bias": "fused q/k/v bias", "gate_up_bias": "MLP up bias", "down_bias": "MLP down bias",
                **mla.DESCRIPTIONS}


def name(cfg: ModelConfig, part: str, layer: int | None) -> str | None:
    """The family's own name for `part` (its row's part_names); None where it follows Hugging
    Face's Llama naming."""
    fam = families.family(cfg.architecture)
    own = fam.part_names.get(part) if fam else None
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


def row_local(cfg: ModelConfig, part: str, layer: int | None, quantized: bool) -> bool:
    """Whether `to_decoder` keeps the stored rows as they are, so a block of rows read from the
    file is a block of the decoder's matrix (what a streamed pass multiplies block by block)."""
    if _in_out(cfg, part, layer) and not quantized:
        return False
    fam = families.family(cfg.architecture)
    return not (fam is not None and fam.attention == "per_head" and part in ("qkv", "qkv_bias"))


def to_decoder(cfg: ModelConfig, part: str, layer: int | None, a: np.ndarray, quantized: bool) -> np.ndarray:
    """The tensor as the decoder holds it: Conv1D transposed, NeoX's per-head q/k/v regrouped."""
    if _in_out(cfg, part, layer) and not quantized:
        return np.ascontiguousarray(a.T)
    fam = families.family(cfg.architecture)
    if fam is not None and fam.attention == "per_head" and part in ("qkv", "qkv_bias"):
        rest = a.shape[1:]
        a = a.reshape(cfg.num_heads, 3, cfg.head_dim, *rest).swapaxes(0, 1)
        return np.ascontiguousarray(a.reshape(3 * cfg.num_heads * cfg.head_dim, *rest))
    return a
