"""The family's block graph of a weight-only checkpoint (safetensors, sharded, GGUF, PyTorch state
dicts, MLX, Hub-quantized folders, encoders): what a transformer of this family computes, drawn
from the tensors it stores, for files that record no graph of their own.

    embed (+ positions, token types, their norm) -> each block -> final norm -> head

Each block, in data-flow order: its input norm, attention (q, k, v apart; one fused qkv split
three ways; or DeepSeek's latent q_a -> q_b and kv_a -> kv_b), q/k norms, the attention itself
(sinks and RoPE buffers on it), the output projection, the norm after it where the family has
one, the residual add; the MLP's input norm, then gate and up -> activation -> down (a fused
gate_up, a plain up -> GELU -> down, or a router and its experts with any shared expert), the
norm after it, the residual add. BERT-style encoders norm after each add.

Every stored tensor sits on exactly one node (block_parts.py says which part a name is; a
quantized tensor's scales and zeros sit with its weight); a tensor no part names, or one past
the config's layer count, goes to `unused` with the reason. A tied head is a node that reads
the embedding (`tied` names it), its parameters counted once, on the embedding.

Each node carries `layer` (its block, None outside) and `module`: the decoder's point it
computes (decoder_points.py MODULES), so a trace or compare_runs point (layer, module) finds it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ..records import CheckpointRecord
from . import families
from .block_parts import classify, module_of
from .hparams import read_hparams

LINEAR = ("q", "k", "v", "qkv", "o", "q_a", "q_b", "kv_a", "kv_b", "gate", "up", "gate_up", "down",
          "shared_gate", "pooler", "head")
NORMS = ("attn_norm", "ffn_norm", "attn_out_norm", "ffn_out_norm", "q_norm", "k_norm", "q_a_norm",
         "kv_a_norm", "embed_norm", "final_norm")
OPS = {"embed": "Embedding", "pos_embed": "Embedding", "type_embed": "Embedding", "router": "Router",
       "experts": "Experts", "shared_experts": "MLP", "attention": "Attention", "rope": "RoPE"}


@dataclass
class BlockGraph:
    """Rows and edges for graph.Graph, with what did not fit: unused tensor -> why."""

    label: str
    rows: list[dict] = field(default_factory=list)
    edges: list[dict] = field(default_factory=list)
    unused: dict[str, str] = field(default_factory=dict)
    tied: str | None = None  # the embedding the head reads, when tied
    layers: int = 0


class _Builder:
    def __init__(self, ckpt: CheckpointRecord, out: BlockGraph, layer_norm: bool) -> None:
        self.ckpt, self.out, self.layer_norm = ckpt, out, layer_norm
        self.ids: set[str] = set()

    def node(self, group: str, layer: int | None, part: str, names: list[str], inputs: list[str],
             module: str | None = None, op: str | None = None) -> str:
        node_id = f"{group}/{part}" if group else part
        inputs = list(dict.fromkeys(inputs))  # q, k and v straight off one input: one edge
        info = self.ckpt.tensors[names[0]] if names else None
        if op is None:
            op = ("Linear" if part in LINEAR else OPS.get(part) or
                  (("LayerNorm" if self.layer_norm or any(n.endswith(".bias") for n in names) else "RMSNorm")
                   if part in NORMS else part))
        self.out.rows.append({
            "id": node_id, "name": _module_name(names) or node_id, "op": op, "group": group,
            "weights": list(names), "parameters": sum(_numel(self.ckpt.tensors[n]) for n in names),
            "inputs": list(inputs), "outputs": [node_id],
            "file": info.file if info else None, "offset": info.offset if info else None,
            "length": info.length if info else None, "layer": layer, "module": module})
        self.ids.add(node_id)
        for source in inputs:
            self.out.edges.append({"source": source, "target": node_id, "value": source})
        return node_id


def block_graph(ckpt: CheckpointRecord) -> BlockGraph:
    """The family's block graph of `ckpt`'s tensors (see the module docstring)."""
    hp = read_hparams(ckpt)
    fam = families.lookup(hp.model_type)
    sandwich = fam is not None and fam.norms in ("sandwich", "post")
    label = fam.label if fam is not None else (hp.architecture or hp.model_type or "unknown family")
    out = BlockGraph(f"{label} block graph")
    layers_said = hp.get("layers") if isinstance(hp.get("layers"), int) else None
    top: dict[str, list[str]] = {}
    blocks: dict[int, dict[str, list[str]]] = {}
    placed = [(name, classify(name, sandwich)) for name in ckpt.tensors]
    stacks = Counter(p.prefix for _, p in placed if p is not None and p.layer is not None)
    main = stacks.most_common(1)[0][0] if stacks else None
    for name, p in placed:
        if p is None or p.part is None:
            out.unused[name] = "no part of a transformer block or its embedding, norm or head is named so"
        elif p.layer is None:
            top.setdefault(p.part, []).append(name)
        elif p.prefix != main:
            out.unused[name] = f"in {p.prefix}, a second stack of blocks (the graph draws {main})"
        elif layers_said is not None and p.layer >= layers_said:
            out.unused[name] = f"block {p.layer} is past the {layers_said} layers the model states"
        else:
            blocks.setdefault(p.layer, {}).setdefault(p.part, []).append(name)
    b = _Builder(ckpt, out, bool(fam and fam.norm_bias))
    x = _embedding(b, top)
    rope = top.pop("rope", [])
    attention_nodes = []
    for i in sorted(blocks):
        x, attention = _block(b, i, blocks[i], x, sandwich, bool(fam and fam.parallel_residual))
        attention_nodes.append(attention)
    out.layers = len(blocks)
    if rope:
        b.node("", None, "rope", rope, [])
        out.edges.extend({"source": "rope", "target": a, "value": "rope"} for a in attention_nodes)
    if top.get("final_norm"):
        x = b.node("", None, "final_norm", top.pop("final_norm"), _some(x), module="final_norm")
    if top.get("pooler"):
        b.node("", None, "pooler", top.pop("pooler"), _some(x))
    if top.get("head"):
        b.node("", None, "head", top.pop("head"), _some(x), module="logits")
    elif _tied(hp, fam, top_had_embed=bool(b.ids & {"embed"})):
        embed = next(r for r in out.rows if r["id"] == "embed")
        out.tied = embed["weights"][0]
        b.node("", None, "head", [out.tied], _some(x), module="logits", op="Linear (tied)")
        out.rows[-1]["parameters"] = 0  # counted on the embedding
    for part, names in top.items():  # a part of the top seen in no usual place: drawn, not lost
        b.node("", None, part, names, [])
    return out


def _embedding(b: _Builder, top: dict[str, list[str]]) -> str | None:
    parts = [b.node("", None, part, top.pop(part), [], module=None)
             for part in ("embed", "pos_embed", "type_embed") if top.get(part)]
    x = parts[0] if len(parts) == 1 else (b.node("", None, "embed_sum", [], parts, op="Add") if parts else None)
    if top.get("embed_norm"):
        x = b.node("", None, "embed_norm", top.pop("embed_norm"), _some(x))
    if x is not None:
        row = next(r for r in b.out.rows if r["id"] == x)
        row["module"] = "embed"  # the decoder's embed point: after positions, scale and norm
    return x


def _block(b: _Builder, i: int, parts: dict[str, list[str]], x: str | None, sandwich: bool,
           parallel: bool) -> tuple[str, str]:
    """One block's nodes, in data-flow order; (its output node, its attention node)."""
    g = f"layers.{i}"
    left = dict(parts)

    def node(part: str, inputs: list[str | None], module: str | None = None, op: str | None = None,
             weights: bool = True) -> str:
        names = left.pop(part, []) if weights else []
        return b.node(g, i, part, names, [s for s in inputs if s is not None], module, op)

    post_ln = "attn_norm" not in parts and "ffn_norm" not in parts and "attn_out_norm" in parts and not sandwich
    h = node("attn_norm", [x], "attn_norm") if "attn_norm" in parts else x
    if "qkv" in parts:
        fused = node("qkv", [h])
        q, k, v = (node(p, [fused], op="Split", weights=False) for p in ("q", "k", "v"))
    elif "kv_a" in parts or "kv_b" in parts:  # DeepSeek's latent attention
        if "q_a" in parts:
            qa = node("q_a", [h])
            qa = node("q_a_norm", [qa]) if "q_a_norm" in parts else qa
            q = node("q_b", [qa])
        else:
            q = node("q", [h])
        kv = node("kv_a", [h]) if "kv_a" in parts else h
        kv = node("kv_a_norm", [kv]) if "kv_a_norm" in parts else kv
        kv = node("kv_b", [kv]) if "kv_b" in parts else kv
        k, v = node("k", [kv], op="Split", weights=False), node("v", [kv], op="Split", weights=False)
    else:
        q, k, v = (node(p, [h]) if p in parts else h for p in ("q", "k", "v"))
    q = node("q_norm", [q]) if "q_norm" in parts else q
    k = node("k_norm", [k]) if "k_norm" in parts else k
    _set_module(b, q, "q")
    _set_module(b, k, "k")
    _set_module(b, v, "v")
    attention = b.node(g, i, "attention", left.pop("sinks", []) + left.pop("rotary", []),
                       [s for s in (q, k, v) if s is not None], op="Attention")
    a = node("o", [attention], "attn_out") if "o" in parts else attention
    if sandwich and "attn_out_norm" in parts:
        a = node("attn_out_norm", [a])
    r = node("attn_residual", [x, a], "attn_residual", op="Add", weights=False)
    if post_ln and "attn_out_norm" in parts:
        r = node("attn_out_norm", [r])
    f = node("ffn_norm", [x if parallel else r], "ffn_norm") if "ffn_norm" in parts else (x if parallel else r)
    if "experts" in parts or "router" in parts:
        router = node("router", [f]) if "router" in parts else None
        helpers = [node(p, [f]) for p in ("shared_experts", "shared_gate") if p in parts]
        m = node("experts", [f, router, *helpers], "ffn_out") if "experts" in parts else router
    elif "gate_up" in parts:
        m = node("down", [node("act", [node("gate_up", [f])], op="GLU", weights=False)], "ffn_out")
    elif "gate" in parts:
        act = node("act", [node("gate", [f]), node("up", [f]) if "up" in parts else None], op="GLU", weights=False)
        m = node("down", [act], "ffn_out") if "down" in parts else act
    elif "up" in parts:
        m = node("down", [node("act", [node("up", [f])], op="GELU", weights=False)], "ffn_out") \
            if "down" in parts else node("up", [f])
    else:
        m = node("down", [f], "ffn_out") if "down" in parts else f
    if sandwich and "ffn_out_norm" in parts:
        m = node("ffn_out_norm", [m])
    y = node("residual", [r, m], "residual", op="Add", weights=False)
    if post_ln and "ffn_out_norm" in parts:
        y = node("ffn_out_norm", [y])
    for part in list(left):  # a part in no usual place for this family: drawn, not lost
        node(part, [h])
    return y, attention


def _set_module(b: _Builder, node_id: str | None, module: str) -> None:
    for row in reversed(b.out.rows):
        if row["id"] == node_id:
            if row["module"] is None:
                row["module"] = module
            return


def _tied(hp, fam, top_had_embed: bool) -> bool:
    """A head that reads the embedding: the config or GGUF says tied, or (no word either way) a
    decoder family whose default ties. An encoder without a head has none."""
    said = hp.get("tied_embeddings")
    if not top_had_embed or said is False:
        return False
    return said is True or bool(fam is not None and fam.tie_default)


def _some(x: str | None) -> list[str]:
    return [x] if x is not None else []


def _module_name(names: list[str]) -> str:
    modules = list(dict.fromkeys(module_of(n) for n in names))
    return modules[0] if len(modules) == 1 else (f"{modules[0]} (+{len(modules) - 1})" if modules else "")


def _numel(t) -> int:
    try:
        return math.prod(int(d) for d in t.shape)
    except (TypeError, ValueError):
        return 0
