"""config.json corrected from the tensors: sizes that contradict the shapes, and the tie flag."""

from __future__ import annotations

import re

from ..spans import Finding
from .build import Build
from .fix import Fix

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _int(cfg: dict, key: str) -> int | None:
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def corrections(cfg: dict, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, int, str]]:
    """config key -> (value now, value the tensors say, why), for Hugging Face llama-style names.

    Orientation-proof where it can be: the MLP width is the dimension of gate_proj that is not
    the hidden size, so a transposed gate_proj still says the right thing.
    """
    out: dict[str, tuple[int, int, str]] = {}

    def check(key: str, found: int | None, why: str) -> None:
        now = _int(cfg, key)
        if found is not None and now is not None and now != found:
            out[key] = (now, found, why)

    embed = shapes.get("model.embed_tokens.weight")
    hidden = _int(cfg, "hidden_size")
    if embed is not None and len(embed) == 2:
        check("vocab_size", embed[0], f"model.embed_tokens.weight has {embed[0]} rows")
        check("hidden_size", embed[1], f"model.embed_tokens.weight is {embed[1]} wide")
        hidden = embed[1]
    layers = {int(m[1]) for n in shapes if (m := _LAYER.match(n))}
    if layers:
        check("num_hidden_layers", max(layers) + 1, f"the tensors name layers 0 to {max(layers)}")
    gate = shapes.get("model.layers.0.mlp.gate_proj.weight") or shapes.get("model.layers.0.mlp.up_proj.weight")
    if gate is not None and len(gate) == 2 and hidden:
        inter = gate[0] if gate[1] == hidden else gate[1] if gate[0] == hidden else None
        check("intermediate_size", inter, f"model.layers.0.mlp.gate_proj.weight is {list(gate)}")
    heads = _int(cfg, "num_attention_heads")
    head_dim = _int(cfg, "head_dim") or (hidden // heads if hidden and heads else None)
    q = shapes.get("model.layers.0.self_attn.q_proj.weight")
    if q is not None and len(q) == 2 and head_dim and q[0] % head_dim == 0:
        check("num_attention_heads", q[0] // head_dim, f"q_proj has {q[0]} rows = heads of {head_dim}")
    k = shapes.get("model.layers.0.self_attn.k_proj.weight")
    if k is not None and len(k) == 2 and head_dim and k[0] % head_dim == 0:
        check("num_key_value_heads", k[0] // head_dim, f"k_proj has {k[0]} rows = heads of {head_dim}")
    return out


def _set_config(build: Build, values: dict, why: str) -> None:
    build.config = dict(build.config or {}, **values)
    build.config_changed = True
    build.notes += [f"config.json {k} = {v!r} ({why})" for k, v in values.items()]


def correct(cfg: dict, shapes: dict[str, tuple[int, ...]], findings: list[Finding]) -> Fix | None:
    fixes = corrections(cfg, shapes)
    if not fixes:
        return None
    found = [f for f in findings if f.code == "config_mismatch" and "config.json" in f.message]

    def apply(b: Build) -> None:
        for key, (now, new, why) in fixes.items():
            _set_config(b, {key: new}, f"was {now}; {why}")

    return Fix("correct_config", "config.json: " + ", ".join(
        f"{k} {now} -> {new} ({why})" for k, (now, new, why) in fixes.items()) + ".", found,
        {"files": ["config.json"], "keys": sorted(fixes), "bytes": 0}, apply, codes=("config_mismatch",))


def tie_in_config() -> Fix:
    def apply(b: Build) -> None:
        _set_config(b, {"tie_word_embeddings": True}, "lm_head is missing: the head reuses the embedding")

    return Fix("tie_lm_head", "config.json: tie_word_embeddings = true, so the head reuses the "
               "embedding (no bytes written).", changes={"files": ["config.json"],
                                                           "keys": ["tie_word_embeddings"], "bytes": 0},
               apply=apply, codes=("lm_head_missing",))
