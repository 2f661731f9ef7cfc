"""Which layers a config.json's sliding window applies to, as transformers applies it, from the
family's row (`window`, `window_rule`, `sliding_period`): the one rule the decoder's config
(config.py), the hyperparameters (hparams.py: the KV cache, the card) and the converter read.
"""

from __future__ import annotations

from typing import Any

from ..decoder_config import UnsupportedModel
from .row import Family

LAYER_CAP = 1 << 16  # a header's layer count never sizes a list beyond this


def window(fam: Family, config: dict[str, Any], rope_layers: list[bool] | None = None
           ) -> tuple[Any, list[bool] | None]:
    """(sliding_window, per layer whether it slides, or None for every layer); (None, None) where
    the family does not apply config.json's window."""
    size = config.get("sliding_window")
    if fam.window == "all":
        return size, None
    if fam.window in ("if_used", "all_if_used") and config.get("use_sliding_window"):
        return size, None if fam.window == "all_if_used" else layer_types(fam, config, rope_layers)
    if fam.window == "layer_types":
        return size, layer_types(fam, config, rope_layers)
    return None, None


def layer_types(fam: Family, config: dict[str, Any], rope_layers: list[bool] | None = None) -> list[bool]:
    """Per layer, whether it slides: config.json's layer_types, or as transformers derives them
    for older configs (window_rule: Gemma 2 and gpt-oss alternate, Gemma 3's
    sliding_window_pattern, Qwen's max_window_layers, SmolLM3's NoPE layers)."""
    types = config.get("layer_types")
    layers = config.get("num_hidden_layers")
    n = range(min(layers, LAYER_CAP)) if isinstance(layers, int) else range(0)
    rule, mt = fam.window_rule, fam.model_type
    if types is None and rule == "pattern":
        pattern = config.get("sliding_window_pattern", fam.sliding_period)
        if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern <= 0:
            raise UnsupportedModel(f"config.json sliding_window_pattern should be a positive integer, "
                                   f"found {pattern!r}.")
        return [bool((i + 1) % pattern) for i in n]
    if types is None and rule == "alternate":  # every other layer, sliding first
        return [bool((i + 1) % fam.sliding_period) for i in n]
    top = config.get("max_window_layers")
    if types is None and rule in ("max_window", "max_window_alternate") and isinstance(top, int):
        if rule == "max_window_alternate":
            return [i % 2 == 0 and i < top for i in n]
        return [i >= top for i in n]
    if types is None and rule == "nope":
        return [not (rope_layers[i] if rope_layers and i < len(rope_layers) else (i + 1) % fam.nope_period != 0)
                for i in n]
    other = sorted({str(t) for t in types if t not in ("sliding_attention", "full_attention")}
                   ) if isinstance(types, list) else []
    if other:
        raise UnsupportedModel(f"config.json layer_types names {', '.join(map(repr, other))} layers ({mt}): "
                               "the decoder implements sliding_attention and full_attention only.")
    if not isinstance(types, list):
        raise UnsupportedModel(f"config.json layer_types should list sliding_attention / full_attention "
                               f"per layer for {mt}, found {types!r}.")
    return [t == "sliding_attention" for t in types]


def llamacpp_sliding(fam: Family, layers: int) -> list[bool]:
    """llama.cpp's set_swa_pattern(n): layer i slides unless it is the last of each n (no GGUF key
    says so for Gemma 2 and 3)."""
    return [(i + 1) % fam.sliding_period != 0 for i in range(min(layers, LAYER_CAP))]
