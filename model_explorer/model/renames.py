"""A one-to-one renaming between the tensors a model misses and the ones it does not expect.

A checkpoint written by another codebase often names one module differently in every layer
(`attn.query` for `self_attn.q_proj`, `mlp.fc_in` for `mlp.up_proj`). Such a renaming is safe to
apply only when it is forced: name patterns are compared with the layer number taken out, and a
missing pattern is paired with an unexpected one only when it is the *only* unexpected pattern
found in exactly the same layers with exactly the expected shape in each, and no other missing
pattern could take it. q, k and v misnamed together in a model whose three have one shape stay
unpaired: the shapes cannot tell them apart, and a guess would load the wrong weights.
"""

from __future__ import annotations

import re
from collections import defaultdict

_LAYER = re.compile(r"(?<=\.)(\d+)(?=\.)")
MAX_PATTERNS = 200  # per side: beyond this the names are not one module renamed, stop looking


def _pattern(name: str) -> tuple[str, str]:
    """(name with its first layer number replaced by '#', the number or '')."""
    m = _LAYER.search(name)
    if m is None:
        return name, ""
    return name[:m.start()] + "#" + name[m.end():], m[1]


def _by_pattern(names: dict[str, tuple | None]) -> dict[str, dict[str, tuple | None]]:
    out: dict[str, dict[str, tuple | None]] = defaultdict(dict)
    for name, shape in names.items():
        pat, layer = _pattern(name)
        out[pat][layer] = shape
    return out


def one_to_one(missing: dict[str, tuple | None], unexpected: dict[str, tuple | None]) -> dict[str, str]:
    """{unexpected name: missing name} when the pairing is forced (see the module's docstring);
    `missing` maps each name to its expected shape (None: any), `unexpected` to its stored shape."""
    want, have = _by_pattern(missing), _by_pattern(unexpected)
    if not want or not have or len(want) > MAX_PATTERNS or len(have) > MAX_PATTERNS:
        return {}

    def fits(w: dict, h: dict) -> bool:
        return w.keys() == h.keys() and all(w[k] is None or tuple(w[k]) == tuple(h[k]) for k in w)

    candidates = {wp: [hp for hp, h in have.items() if fits(w, h)] for wp, w in want.items()}
    takers: dict[str, int] = defaultdict(int)
    for hps in candidates.values():
        for hp in hps:
            takers[hp] += 1
    out: dict[str, str] = {}
    for wp, hps in candidates.items():
        if len(hps) != 1 or takers[hps[0]] != 1:
            continue
        hp = hps[0]
        for layer in want[wp]:
            out[hp.replace("#", layer, 1) if layer else hp] = wp.replace("#", layer, 1) if layer else wp
    return out


# -- roles: a rename may change a name, never what the tensor is ------------------------------------

# a part of the path naming the tower a tensor belongs to (the rest is the text model)
_TOWERS = (("vision", ("vision", "visual", "image", "vit", "siglip", "patch", "img")),
           ("audio", ("audio", "speech", "whisper", "encodec", "mel")),
           ("projector", ("projector", "mm_proj", "multi_modal", "connector")))
# containers whose every tensor has that role, wherever the leaf's own name points
_CONTAINERS = {"pooler": "pooler", "lm_head": "head", "cls": "head", "classifier": "head", "score": "head",
               "embed_out": "head", "predictions": "head", "head": "head", "heads": "head"}
# a module's own name -> its kind (the names codebases give q, k, v, the MLP, norms, embeddings)
_KINDS = {
    "q": ("q", "q_proj", "query", "wq", "attn_q", "q_lin", "to_q"),
    "k": ("k", "k_proj", "key", "wk", "attn_k", "k_lin", "to_k"),
    "v": ("v", "v_proj", "value", "wv", "attn_v", "v_lin", "to_v"),
    "qkv": ("qkv", "qkv_proj", "c_attn", "query_key_value", "wqkv", "in_proj", "attn_qkv"),
    "attn_out": ("o", "o_proj", "out_proj", "attn_output", "to_out", "attn_out", "out_lin"),
    "gate": ("gate", "gate_proj", "ffn_gate", "w1"),
    "up": ("up", "up_proj", "fc1", "fc_in", "c_fc", "w3", "dense_h_to_4h", "ffn_up", "wi", "lin1"),
    "down": ("down", "down_proj", "fc2", "fc_out", "dense_4h_to_h", "ffn_down", "w2", "lin2"),
    "router": ("router", "gate_inp", "ffn_gate_inp"),
    "token_embed": ("embed_tokens", "wte", "word_embeddings", "tok_embeddings", "token_embd", "embed_in",
                    "shared", "tok_embed"),
    "position_embed": ("wpe", "position_embeddings", "pos_embed", "position_embedding"),
}
_KIND_OF = {name: kind for kind, names in _KINDS.items() for name in names}


def _dense_kind(parts: list[str], i: int) -> str | None:
    """A `dense` layer's role from its parents (BERT: attention.output.dense, intermediate.dense,
    output.dense; Falcon/NeoX: attention.dense)."""
    before = parts[:i]
    if any(p in ("attention", "attn", "self_attention", "self_attn") for p in before):
        return "attn_out"
    if before and before[-1] == "intermediate":
        return "up"
    if before and before[-1] == "output":
        return "down"
    return None


def _kind(parts: list[str]) -> str | None:
    for part in parts:
        if part in _CONTAINERS:
            return _CONTAINERS[part]
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i].lower()
        if part in _KIND_OF:
            return _KIND_OF[part]
        if part == "dense":
            return _dense_kind(parts, i)
        if part == "c_proj":
            return "attn_out" if any(p in ("attn", "attention") for p in parts[:i]) else "down"
        if "norm" in part or part in ("ln", "ln_1", "ln_2", "ln_f") or part.startswith("ln_"):
            return "norm"
    if len(parts) == 1 and parts[0] == "output":  # a top-level output projection
        return "head"
    return None


def role(name: str) -> tuple[str, str | None, str, bool]:
    """(tower, module kind, parameter, inside a numbered layer) of a tensor name."""
    parts = name.split(".")
    leaf, path = parts[-1], [p for p in parts[:-1] if not p.isdigit()]
    lowered = [p.lower() for p in path]
    tower = next((t for t, keys in _TOWERS if any(k in p for p in lowered for k in keys)), "text")
    return tower, _kind(path), leaf, any(p.isdigit() for p in parts[:-1])


def same_role(old: str, new: str) -> bool:
    """Whether renaming `old` to `new` keeps the tensor's role: both of a known module kind, the
    same one, in the same tower, the same parameter (weight, bias), both inside a layer or both
    outside (one_to_one already keeps the layer number)."""
    a, b = role(old), role(new)
    return a[1] is not None and a == b
