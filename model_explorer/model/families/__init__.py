"""The model families the explorer knows without transformers: one row each (table.py, the
fields in row.py), looked up by Hugging Face model_type or GGUF architecture; `layout` (layout.py)
turns a row and the hyperparameters into the tensors a checkpoint must hold.

Nothing outside this package compares family names: a reader asks the row (`family(mt).window`,
`by_gguf_arch(arch).norm_offset`), and tests/house/test_family_table.py keeps it so.
"""

from __future__ import annotations

from typing import Any

from . import layout as _layout
from .layout import MAX_DIM, MAX_ENTRIES, MAX_EXPERTS, attention_biases, moe_layers
from .row import ACTIVATIONS, EXPERT_KINDS, GELU_ACTIVATIONS, Family
from .table import ROWS
from .window import layer_types, llamacpp_sliding, window

__all__ = ["Family", "FAMILIES", "ROWS", "family", "by_gguf_arch", "lookup", "HF_MODEL_TYPES", "GGUF_ARCHITECTURES",
           "CAUSAL_LM", "layout", "is_in_out", "stored_shape", "attention_biases", "moe_layers", "window",
           "layer_types", "llamacpp_sliding",
           "MAX_DIM", "MAX_EXPERTS", "MAX_ENTRIES", "ACTIVATIONS", "GELU_ACTIVATIONS", "EXPERT_KINDS",
           "gguf_archs_where"]

# Hugging Face model_type -> its row
FAMILIES: dict[str, Family] = {mt: row for row in ROWS for mt in row.model_types}
HF_MODEL_TYPES: tuple[str, ...] = tuple(FAMILIES)
# Every GGUF general.architecture some row reads, in table order
GGUF_ARCHITECTURES: tuple[str, ...] = tuple(dict.fromkeys(a for row in ROWS for a in row.gguf_archs))
# The class transformers saves each family's causal LM as (config.json's "architectures").
CAUSAL_LM: dict[str, str] = {mt: row.causal_lm for mt, row in FAMILIES.items()}


def family(model_type: str | None) -> Family | None:
    """The row of a Hugging Face model_type (any case), else None."""
    return FAMILIES.get((model_type or "").lower()) if isinstance(model_type, str) or model_type is None else None


def by_gguf_arch(arch: str | None, experts: bool = False) -> Family | None:
    """The row a GGUF of `arch` is read as: the first that lists it, or with `experts` the first
    of those whose feed-forward is a mixture of experts (llama.cpp writes Mixtral as llama)."""
    rows = [row for row in ROWS if arch in row.gguf_archs]
    if experts:
        return next((row for row in rows if row.has_experts), rows[0] if rows else None)
    return rows[0] if rows else None


def lookup(name: str | None) -> Family | None:
    """The row named by a model_type or, failing that, a GGUF architecture."""
    return family(name) or (by_gguf_arch(name) if isinstance(name, str) else None)


def gguf_archs_where(test) -> tuple[str, ...]:
    """The GGUF architectures of the rows `test(row)` is true of (every one each reads), in table order."""
    return tuple(dict.fromkeys(a for row in ROWS if test(row) for a in row.gguf_archs))


def layout(hp: Any, config: dict, max_layers: int) -> dict[str, tuple[int, ...]] | None:
    """Names -> shapes of every tensor a checkpoint of hp.model_type's family holds (layout.py);
    None when the family is not a row or a number it needs is missing."""
    fam = family(hp.model_type)
    return None if fam is None else _layout.layout(fam, hp, config, max_layers)


def is_in_out(model_type: str | None, name: str) -> bool:
    """Whether the parameter `name` of a model_type's model is stored [..., in, out]."""
    return _layout.is_in_out(family(model_type), name)


def stored_shape(model_type: str | None, name: str, shape: tuple[int, ...], quantized: bool) -> tuple[int, ...]:
    """The shape a checkpoint holds for the parameter `name` of `shape` (layout.stored_shape)."""
    return _layout.stored_shape(family(model_type), name, shape, quantized)
