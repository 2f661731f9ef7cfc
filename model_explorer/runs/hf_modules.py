"""Which module of a transformers model (or which scope of a graph exported from one) is which
named point: (layer, module) with the decoder's module names (runtime/decoder.py MODULES).

Read from the dotted module path alone, so the same rules serve transformers' own modules
(`named_modules`) and the scopes an ONNX export keeps (`/bert/encoder/layer.2/intermediate/dense/
MatMul` with dynamo=False, the `pkg.torch.onnx.name_scopes` metadata of the default exporter):

- the layer: the number after `layers.`, `layer.`, `h.` or `blocks.`;
- in a layer: q, k, v from `q_proj`/`query`/`q_lin`..., attn_out from `o_proj`/`out_proj`/
  `attention.output.dense`/`attn.c_proj`, the norms from `input_layernorm`/`ln_1` and
  `post_attention_layernorm`/`ln_2`, ffn_out from `mlp`/`feed_forward` (its output) or BERT's
  `output.dense`, residual from the layer itself (its output);
- outside: embed from `embeddings`/`embed_tokens`/`wte`, final_norm from `norm`/`ln_f`/
  `final_layer_norm`, logits from `lm_head`.

Post-norm encoders (BERT): the residual stream after attention is `attention.output` (the
LayerNorm of x + attention, which is what the next block reads), so that is attn_residual;
ffn_out is `output.dense` (before the add and the norm) and residual the layer's output.
BERT has no norm before attention or the MLP: attn_norm and ffn_norm are not recorded there.
For pre-norm decoders attn_residual is the *input* of post_attention_layernorm (x + attention
has no module of its own): `role` says ("input") for such points.
"""

from __future__ import annotations

import re

from ..model.decoder_points import LAYER_MODULES

Point = tuple[int | None, str]

_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")

# in-layer path (after `layers.N.`) -> (module, which side of it is the point)
_IN_LAYER: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"^(?:input_layernorm|ln_1|attention_norm|layernorm_before|norm1)$"), "attn_norm", "output"),
    (re.compile(r"^(?:self_attn|attention|attn)(?:\.self|\.attention)?\.(?:q_proj|query|q_lin|q)$"), "q", "output"),
    (re.compile(r"^(?:self_attn|attention|attn)(?:\.self|\.attention)?\.(?:k_proj|key|k_lin|k)$"), "k", "output"),
    (re.compile(r"^(?:self_attn|attention|attn)(?:\.self|\.attention)?\.(?:v_proj|value|v_lin|v)$"), "v", "output"),
    (re.compile(r"^(?:self_attn\.o_proj|self_attn\.out_proj|attention\.output\.dense|attn\.c_proj|"
                r"attention\.out_lin|attn\.out_proj)$"), "attn_out", "output"),
    (re.compile(r"^attention\.output$"), "attn_residual", "output"),  # post-norm: LayerNorm(x + attn)
    (re.compile(r"^(?:post_attention_layernorm|ln_2|ffn_norm|layernorm_after|norm2)$"), "attn_residual", "input"),
    (re.compile(r"^(?:post_attention_layernorm|ln_2|ffn_norm|layernorm_after|norm2)$"), "ffn_norm", "output"),
    (re.compile(r"^(?:mlp|feed_forward|ffn)$|^output\.dense$"), "ffn_out", "output"),
]
_OUTER: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?:^|\.)(?:embeddings|embed_tokens|wte)$"), "embed"),
    (re.compile(r"(?:^|\.)(?:norm|ln_f|final_layer_norm|final_layernorm)$"), "final_norm"),
    (re.compile(r"^(?:.*\.)?lm_head$"), "logits"),
]


def layer_of(path: str) -> tuple[int, str, str] | None:
    """(layer index, the path up to and including it, the rest) of a module path in a layer."""
    m = _LAYER.search(path)
    if m is None:
        return None
    end = m.end(1)
    return int(m.group(1)), path[:end], path[end + 1:]


def roles(path: str) -> list[tuple[Point, str]]:
    """The points a module path stands for, each with "output" or "input" (see the docstring)."""
    found = layer_of(path)
    if found is not None:
        layer, _, rest = found
        if rest == "":
            return [((layer, "residual"), "output")]
        return [((layer, module), side) for pattern, module, side in _IN_LAYER if pattern.match(rest)]
    if path.endswith("embeddings.word_embeddings") or path.endswith("embeddings.position_embeddings"):
        return []
    return [((None, module), "output") for pattern, module in _OUTER if pattern.search(path)]


def point_order(points) -> list[Point]:
    """Points in the order the decoder computes them (embed, each layer's modules, final ones)."""
    outer = {"embed": -1, "final_norm": 1, "logits": 2}

    def key(p: Point):
        layer, module = p
        if layer is None:
            return (outer[module] if outer[module] < 0 else 10**9 + outer[module], 0)
        return (layer, LAYER_MODULES.index(module))
    return sorted(set(points), key=key)


def module_points(paths) -> dict[Point, tuple[str, str]]:
    """{point: (module path, "output" | "input")} over the module paths given; where two paths
    claim a point, the first (the shallower one, named_modules' order) keeps it."""
    out: dict[Point, tuple[str, str]] = {}
    for path in paths:
        for point, side in roles(path):
            out.setdefault(point, (path, side))
    return out
