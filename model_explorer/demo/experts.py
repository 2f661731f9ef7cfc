"""Mixture-of-experts feed-forwards: where each family stores its experts, how the router picks
them, and the forward pass over the tokens routed to each expert.

Families differ as data: the router (softmax over all experts, then top-k, optionally
renormalised: Mixtral, Qwen2/3-MoE), and a shared expert every token goes through beside its
routed ones (Qwen2-MoE scales it by a sigmoid gate of its own). Routing is decided on the host in
float32, as transformers computes it.
"""

from __future__ import annotations

import numpy as np

from ..model import families
from ..model.config import ModelConfig
from ..tensors.names import (
    GGUF_EXPERT_BIASES,
    GGUF_EXPERTS,
    GGUF_GATE_UP_EXPS,
    GGUF_SCORE_BIAS,
    GGUF_SHARED,
    gguf_expert_shapes,
    gguf_part_name,
)


def is_moe(cfg: ModelConfig, layer: int | None) -> bool:
    return bool(cfg.experts) and (layer is None or cfg.moe_layers is None or cfg.moe_layers[layer])


# Where each family keeps its experts (router, expert {e}'s gate, up, down; gpt-oss's fused
# tensors; the shared expert's), its row says: model/families (expert_names, fused_expert_names,
# shared_expert_names).
def _row(cfg: ModelConfig) -> families.Family:
    return families.family(cfg.architecture)


# DeepSeek's router adds this to its sigmoid scores to choose experts (not to weight them).
SCORE_BIAS = "model.layers.{i}.mlp.gate.e_score_correction_bias"


def router_name(cfg: ModelConfig, layer: int) -> str:
    return _row(cfg).expert_names[0].format(i=layer)


def expert_names(cfg: ModelConfig, layer: int) -> list[tuple[str, str, str]]:
    """(gate, up, down) names of each expert of `layer`."""
    _, gate, up, down = _row(cfg).expert_names
    return [(gate.format(i=layer, e=e), up.format(i=layer, e=e), down.format(i=layer, e=e))
            for e in range(cfg.experts)]


def shared_names(cfg: ModelConfig, layer: int, gguf: bool = False) -> tuple[str, str, str, str | None] | None:
    """(gate, up, down, sigmoid gate or None) of the layer's shared expert; None without one."""
    if not cfg.shared_expert_size:
        return None
    names = (GGUF_SHARED if cfg.shared_expert_gate else GGUF_SHARED[:3] + (None,)) if gguf \
        else _row(cfg).shared_expert_names
    return tuple(n.format(i=layer) if n else None for n in names)


def fused_names(cfg: ModelConfig, layer: int) -> dict[str, str] | None:
    fam = families.family(cfg.architecture)
    names = fam.fused_expert_names if fam else None
    return {k: v.format(i=layer) for k, v in names.items()} if names else None


def expected_shapes(cfg: ModelConfig, layer: int, quantized=lambda name: False
                    ) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every expert tensor of a mixture-of-experts layer, router excepted, as
    stored; quantized(name) says whether a tensor is Hub-quantized (then [..., out, in])."""
    ef, h, sf, n = cfg.expert_intermediate_size, cfg.hidden_size, cfg.shared_expert_size, cfg.experts
    fused = fused_names(cfg, layer)
    if fused:
        return [(fused["router_bias"], (n,)), (fused["gate_up_bias"], (n, 2 * ef)), (fused["down_bias"], (n, h))] + [
            (fused[p], families.stored_shape(cfg.architecture, fused[p], shape, quantized(fused[p])))
            for p, shape in (("gate_up", (n, h, 2 * ef)), ("down", (n, ef, h)))]
    out = [(SCORE_BIAS.format(i=layer), (n,))] if cfg.router == "sigmoid_groups" else []
    for gate, up, down in expert_names(cfg, layer):
        out += [(gate, (ef, h)), (up, (ef, h)), (down, (h, ef))]
    shared = shared_names(cfg, layer)
    if shared:
        out += [(shared[0], (sf, h)), (shared[1], (sf, h)), (shared[2], (h, sf))]
        if shared[3]:
            out.append((shared[3], (1, h)))
    return out


def gguf_fused(tensors, layer: int) -> str | None:
    """The layer's ffn_gate_up_exps (llama.cpp's --fuse-gate-up-exps), where the GGUF has one."""
    name = GGUF_GATE_UP_EXPS.format(i=layer)
    return name if name in tensors else None


def gguf_expected_shapes(cfg: ModelConfig, layer: int, tensors) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape) of a GGUF MoE layer's stacked experts (gate and up apart or fused), shared
    expert and choice bias; the shared expert's gate is [1, hidden] as converted, [hidden] squeezed."""
    ef, h, sf, n = cfg.expert_intermediate_size, cfg.hidden_size, cfg.shared_expert_size, cfg.experts
    out = gguf_expert_shapes(layer, n, ef, h)
    biases = [(b.format(i=layer), (n, w)) for b, w in zip(GGUF_EXPERT_BIASES, (ef, ef, h))]
    fused = gguf_fused(tensors, layer)
    if fused:
        out = [(fused, (n, 2 * ef, h))] + out[2:]
        biases = [(fused.replace(".weight", ".bias"), (n, 2 * ef))] + biases[2:]
    if cfg.expert_bias:  # gpt-oss: each expert's biases, the router's
        out += biases + [(gguf_part_name("router_bias", layer, _row(cfg).gguf_parts), (n,))]
    if cfg.router == "sigmoid_groups":
        out.append((GGUF_SCORE_BIAS.format(i=layer), (n,)))
    shared = shared_names(cfg, layer, gguf=True)
    if shared:
        out += [(shared[0], (sf, h)), (shared[1], (sf, h)), (shared[2], (h, sf))]
        if shared[3]:
            info = tensors.get(shared[3])
            out.append((shared[3], tuple(info.shape) if info is not None and tuple(info.shape) == (h,) else (1, h)))
    return out


def tensor_count(cfg: ModelConfig, layer: int) -> int:
    return len(expected_shapes(cfg, layer))


def build(w, i: int) -> dict:
    """The layer's router, experts ((gate_up, down) each) and shared expert as backend matrices;
    `w` is the `weights.Weights` reading them."""
    def pair(label: str, gate: str, up: str, down: str):
        return (w._matrix(f"layer {i} {label} gate_up", np.concatenate([w._read("", name=gate),
                                                                         w._read("", name=up)])),
                w._matrix(f"layer {i} {label} down", w._read("", name=down)))

    out = {"router": w._matrix(f"layer {i} router", w._read("router", i)),
           "router_bias": None, "shared": None, "shared_gate": None, "score_bias": None}
    if w.cfg.router == "sigmoid_groups":  # chosen on the host: kept as numpy
        out["score_bias"] = w._read("", name=(GGUF_SCORE_BIAS if w.gguf else SCORE_BIAS).format(i=i))
    if w.gguf and w.cfg.expert_bias:
        out.update(_gguf_biased(w, i))
        return out
    if fused_names(w.cfg, i):
        out.update(_fused(w, i))
        return out
    fused = gguf_fused(w.ckpt.tensors, i) if w.gguf else None
    if fused:  # [experts, gate + up, in]: each expert's rows are the decoder's gate_up already
        gate_up = w._read("", name=fused)
        out["experts"] = [(w._matrix(f"layer {i} expert {e} gate_up", np.ascontiguousarray(gate_up[e])),
                           w._matrix(f"layer {i} expert {e} down", w._read("", name=down)))
                          for e, (_, _, down) in enumerate(expert_names(w.cfg, i))]
    else:
        out["experts"] = [pair(f"expert {e}", *names) for e, names in enumerate(expert_names(w.cfg, i))]
    shared = shared_names(w.cfg, i, w.gguf)
    if shared:
        out["shared"] = pair("shared expert", *shared[:3])
        if shared[3]:
            gate = w._read("", name=shared[3]).reshape(1, -1)  # GGUF: [hidden] where squeezed
            out["shared_gate"] = w._matrix(f"layer {i} shared expert gate", gate)
    return out


def _fused(w, i: int) -> dict:
    """gpt-oss's experts: (gate_up [2f, h] with gate rows first, down [h, f], their biases) each."""
    names, b = fused_names(w.cfg, i), w.backend

    def read(part: str) -> np.ndarray:
        a = w._read("", name=names[part])
        if part in ("gate_up", "down") and not w.ckpt.tensors[names[part]].quant:
            a = a.transpose(0, 2, 1)  # [experts, in, out] -> [experts, out, in]
        return a

    gate_up, down, gu_bias, d_bias = read("gate_up"), read("down"), read("gate_up_bias"), read("down_bias")
    experts = [(w._matrix(f"layer {i} expert {e} gate_up", np.concatenate([gate_up[e, 0::2], gate_up[e, 1::2]])),
                w._matrix(f"layer {i} expert {e} down", np.ascontiguousarray(down[e])),
                b.asarray(np.concatenate([gu_bias[e, 0::2], gu_bias[e, 1::2]])), b.asarray(d_bias[e]))
               for e in range(w.cfg.experts)]
    return {"experts": experts, "router_bias": b.asarray(read("router_bias"))}


def _gguf_biased(w, i: int) -> dict:
    """gpt-oss from GGUF: llama.cpp's converter split gate and up and stored [experts, out, in]."""
    b, fused = w.backend, gguf_fused(w.ckpt.tensors, i)
    down, down_b = (w._read("", name=n.format(i=i)) for n in (GGUF_EXPERTS[2], GGUF_EXPERT_BIASES[2]))
    if fused:
        gate_up, gate_up_b = w._read("", name=fused), w._read("", name=fused.replace(".weight", ".bias"))
    else:
        gate, up, gate_b, up_b = (w._read("", name=n.format(i=i)) for n in (*GGUF_EXPERTS[:2], *GGUF_EXPERT_BIASES[:2]))
        gate_up, gate_up_b = np.concatenate([gate, up], axis=1), np.concatenate([gate_b, up_b], axis=1)
    experts = [(w._matrix(f"layer {i} expert {e} gate_up", np.ascontiguousarray(gate_up[e])),
                w._matrix(f"layer {i} expert {e} down", np.ascontiguousarray(down[e])),
                b.asarray(np.ascontiguousarray(gate_up_b[e])), b.asarray(down_b[e]))
               for e in range(w.cfg.experts)]
    bias = w._read("", name=gguf_part_name("router_bias", i, _row(w.cfg).gguf_parts))
    return {"experts": experts, "router_bias": b.asarray(bias)}


def _route_groups(cfg: ModelConfig, logits: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeepSeek-V3: sigmoid scores; with the correction bias added, the topk_groups groups with
    the best two-expert sums, then the top k experts in them; weighted by the scores without
    the bias, renormalised (norm_topk_prob), times routed_scaling."""
    scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores + bias
    n, g = cfg.experts, cfg.expert_groups
    grouped = choice.reshape(-1, g, n // g)
    group_scores = np.sort(grouped, axis=-1)[..., -2:].sum(-1)
    groups = np.argsort(-group_scores, axis=-1, kind="stable")[:, :cfg.topk_groups]
    keep = np.zeros(group_scores.shape, bool)
    np.put_along_axis(keep, groups, True, -1)
    choice = np.where(np.repeat(keep, n // g, axis=-1), choice, -np.inf)
    top = np.argsort(-choice, axis=-1, kind="stable")[:, :cfg.experts_per_token]
    weights = np.take_along_axis(scores, top, -1)
    if cfg.renormalize_top_k:
        weights = weights / (weights.sum(-1, keepdims=True) + np.float32(1e-20))
    return top, (weights * np.float32(cfg.routed_scaling)).astype(np.float32)


def route(cfg: ModelConfig, logits: np.ndarray, score_bias: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """(experts, weights) per token, each (tokens, experts_per_token): softmax over all experts,
    the top k, renormalised to 1 where the family does; or (gpt-oss) the top k logits softmaxed."""
    if cfg.router == "sigmoid_groups":
        return _route_groups(cfg, logits, score_bias)
    if cfg.router == "topk_softmax":
        top = np.argsort(-logits, axis=-1, kind="stable")[:, :cfg.experts_per_token]
        values = np.take_along_axis(logits, top, -1)
        weights = np.exp(values - values.max(-1, keepdims=True))
        return top, weights / weights.sum(-1, keepdims=True)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :cfg.experts_per_token]
    weights = np.take_along_axis(probs, top, -1)
    if cfg.renormalize_top_k:
        weights = weights / weights.sum(-1, keepdims=True)
    return top, weights


def forward(b, cfg: ModelConfig, mlp, h, layer: dict):
    """The experts' output for the normed hidden states `h`: each expert's MLP (`mlp(h, gate_up,
    down, width)`) runs on the tokens routed to it, weighted; plus the shared expert."""
    logits = np.asarray(b.to_numpy(b.linear(h, layer["router"], layer.get("router_bias"))), dtype=np.float32)
    top, weights = route(cfg, logits, layer.get("score_bias"))
    out = b.zeros(tuple(h.shape))
    for e in np.unique(top):
        tokens, slot = np.nonzero(top == e)
        idx = b.ids(tokens)
        y = _expert(b, cfg, mlp, b.rows(h, idx), layer["experts"][int(e)])
        out = b.add_rows(out, idx, y * b.asarray(weights[tokens, slot][:, None].astype(np.float32)))
    if layer.get("shared") is not None:
        y = mlp(h, *layer["shared"], cfg.shared_expert_size)
        if layer.get("shared_gate") is not None:
            y = y * b.sigmoid(b.linear(h, layer["shared_gate"]))
        out = out + y
    return out


def _expert(b, cfg: ModelConfig, mlp, x, expert: tuple):
    """One expert's MLP: the family's gated MLP, or gpt-oss's clamped SwiGLU with biases."""
    if cfg.swiglu_limit is None:
        return mlp(x, expert[0], expert[1], cfg.expert_intermediate_size)
    gate_up, down, gu_bias, d_bias = expert
    gu = b.linear(x, gate_up, gu_bias)
    f = cfg.expert_intermediate_size
    return b.linear(b.clamped_swiglu(gu[:, :f], gu[:, f:], cfg.swiglu_limit, cfg.swiglu_alpha), down, d_bias)
