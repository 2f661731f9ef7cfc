"""How two models' configurations differ where their forward passes do (run_diff.RunDiff.config_diff),
and those differences as text for people: 10,000 against 1,000,000, "layers 0, 2", yes/no."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# ModelConfig fields that say how a file stores the model rather than what it computes.
STORAGE_FIELDS = {"architecture", "extra", "gguf_qk_permuted", "max_position_embeddings",
                  "tie_word_embeddings", "fused_projections"}
# Fields two formats spell differently for one model: a GGUF folds Gemma's 1 + w into the norm
# weights and keeps Llama 3's RoPE factors as a tensor, so these are compared within a format only.
FORMAT_FIELDS = {"norm_offset", "rope_scaling"}


def config_differences(cfg_a, cfg_b, same_format: bool = True) -> dict[str, list[Any]]:
    """{field: [a's value, b's value]} for the hyperparameters in which the two models' forward
    passes differ (floats equal to float32 precision count as equal: GGUF stores float32)."""
    out = {}
    for f in dataclasses.fields(cfg_a):
        if f.name in STORAGE_FIELDS or (f.name in FORMAT_FIELDS and not same_format):
            continue
        va, vb = _effective(cfg_a, f.name), _effective(cfg_b, f.name)
        if isinstance(va, float) and isinstance(vb, float) and math.isclose(va, vb, rel_tol=1e-6):
            continue
        if va != vb:
            out[f.name] = [va, vb]
    return out


# Per-layer lists where None means "every layer" (a GGUF reader may spell them out).
EVERY_LAYER = ("rope_layers", "moe_layers", "sliding_layers")


def _effective(cfg, name: str) -> Any:
    """A field as the forward pass uses it: None spelled out where None means a default."""
    value = getattr(cfg, name, None)
    if value is None and name in EVERY_LAYER and (name != "moe_layers" or cfg.experts) and \
            (name != "sliding_layers" or cfg.sliding_window):
        return [True] * cfg.num_layers
    if value is None and name == "attention_scale":
        return float(cfg.head_dim) ** -0.5
    return value


# -- the values for people --------------------------------------------------------------

VALUE_CHARS = 60


def value_text(v: Any) -> str:
    """A hyperparameter's value as a person reads it: 10000, yes/no, "layers 0, 2", "not set"."""
    if v is None:
        text = "not set"
    elif isinstance(v, bool):
        text = "yes" if v else "no"
    elif isinstance(v, float):
        text = f"{int(v):,}" if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"
    elif isinstance(v, (list, tuple)) and v and all(isinstance(x, bool) for x in v):
        on = [str(i) for i, x in enumerate(v) if x]
        text = "every layer" if len(on) == len(v) else f"layers {', '.join(on)}" if on else "no layer"
    elif isinstance(v, (list, tuple)):
        text = ", ".join(value_text(x) for x in v) or "none"
    elif isinstance(v, dict):
        text = ", ".join(f"{k} {value_text(x)}" for k, x in v.items()) or "none"
    else:
        text = str(v)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 1] + "…"


def config_rows(diff: dict[str, list[Any]]) -> list[list[str]]:
    """[field, a's value, b's value] as text, one per differing hyperparameter."""
    return [[k, value_text(a), value_text(b)] for k, (a, b) in diff.items()]


def where_text(places: dict[str, dict[str, Any] | None] | None) -> str:
    """Where each side's file states one hyperparameter: "a's llama.rope.freq_base at bytes
    692..728, b's ..." ("" when neither file names it: a config.json, or a key left to its default)."""
    return ", ".join(f"{side}'s {p['key']} at bytes {p['offset']:,}..{p['offset'] + p['length']:,}"
                     for side, p in (places or {}).items() if p)


def config_text(diff: dict[str, list[Any]], places: dict[str, dict[str, Any]] | None = None) -> str:
    """The differences in one line, each with where the files state it (differing_places)."""
    out = []
    for k, a, b in config_rows(diff):
        stated = where_text((places or {}).get(k))
        out.append(f"{k}: a {a}, b {b}" + (f" [{stated}]" if stated else ""))
    return "; ".join(out)


def differing_places(diff: dict[str, list[Any]], places_a: dict[str, dict[str, Any]],
                     places_b: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any] | None]]:
    """{field: {"a": place | None, "b": place | None}} for each differing field: the metadata
    entry (key and bytes) that states it in each side's GGUF, the bytes a fix rewrites."""
    return {k: {"a": places_a.get(k), "b": places_b.get(k)} for k in diff
            if places_a.get(k) or places_b.get(k)}
