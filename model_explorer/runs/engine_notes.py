"""What a comparison across engines adds to its verdict: the module on one side and the graph
node on the other, an attribute the node holds that differs from what the module implies (a
norm's epsilon, a Softmax axis, a Cast to a lower precision), and, for an encoder, whether the
outputs agree (no logits: the last hidden states, judged by their relative L2)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .metrics import activation_diff
from .verdict import NOISE_REL

LOW_PRECISION = {"FLOAT16", "BFLOAT16", "INT8", "UINT8", "FLOAT8E4M3FN", "FLOAT8E5M2"}


def output_agrees(a: np.ndarray, b: np.ndarray) -> bool:
    """An encoder's outputs agree: same shape, relative L2 at most NOISE_REL."""
    if a.shape != b.shape:
        return False
    r = activation_diff(a, b)["rel_l2"]
    return math.isfinite(r) and r <= NOISE_REL


def output_sentence(rows: list[dict[str, Any]], a: np.ndarray, b: np.ndarray) -> str:
    r = activation_diff(a, b)["rel_l2"] if a.shape == b.shape else math.nan
    worst = max((x["rel_l2"] for x in rows if not math.isnan(x["rel_l2"])), default=0.0)
    return (f"No divergence: the outputs (last hidden states, no logits) agree within float32 noise "
            f"(relative L2 {r:.2g}, at most {NOISE_REL:g}); the largest relative L2 of any point is {worst:.3g}.")


def place_in_graphs(node_a: dict[str, Any] | None, node_b: dict[str, Any] | None,
                    place_a: dict[str, Any] | None) -> dict[str, Any]:
    """{"module_a", "node_b", "op_b", "node_b_offset", "node_b_length", "attribute", "file_a",
    "offset_a", "length_a"} for a point."""
    out: dict[str, Any] = {}
    if node_a:
        out["module_a"] = node_a.get("module") or node_a.get("node")
    if node_b:
        out["node_b"] = node_b.get("node") or node_b.get("module")
        out["op_b"] = node_b.get("op") or node_b.get("class")
        if node_b.get("offset") is not None:  # the node's record in b's file (the project's reader)
            out["node_b_offset"], out["node_b_length"] = node_b["offset"], node_b.get("length")
    if place_a:
        out.update({f"{k}_a": place_a.get(k) for k in ("file", "offset", "length")})
    attribute = differing_attribute(node_a or {}, node_b or {})
    if attribute:
        out["attribute"] = attribute
    return out


def differing_attribute(node_a: dict[str, Any], node_b: dict[str, Any]) -> dict[str, Any] | None:
    """The first attribute of b's node that differs from what a's module implies, as
    {"name", "a", "b", "node", "sentence"}; None when none does."""
    ea, eb = node_a.get("epsilon"), node_b.get("epsilon")
    where = f"node {node_b.get('node')} ({node_b.get('op')})"
    if isinstance(ea, float) and isinstance(eb, float) and not math.isclose(ea, eb, rel_tol=1e-3, abs_tol=1e-30):
        return {"name": "epsilon", "a": ea, "b": eb, "node": node_b.get("node_of_epsilon") or node_b.get("node"),
                "sentence": f"the norm's epsilon differs: a's {node_a.get('module')} uses {ea:g}, b's {where} "
                            f"uses {eb:g}."}
    axis = node_b.get("softmax_axis")
    if axis is not None and axis not in (-1, node_b.get("softmax_last")):
        return {"name": "axis", "a": -1, "b": axis, "node": node_b.get("node"),
                "sentence": f"a Softmax in the attention before {where} runs over axis {axis}, not the last one."}
    if node_b.get("dropout_training"):
        return {"name": "training_mode", "a": False, "b": True, "node": node_b["dropout_training"],
                "sentence": f"the Dropout node {node_b['dropout_training']} of b runs in training mode (its "
                            "training_mode input is true): values are dropped at random, as when a module is "
                            "exported without .eval()."}
    casts = [c for c in node_b.get("casts", ()) if c in LOW_PRECISION]
    if casts:
        return {"name": "Cast", "a": "FLOAT", "b": casts[0], "node": node_b.get("node"),
                "sentence": f"{where} casts to {casts[0]} on the way, where the module computes in float32."}
    return None


def graph_sentence(first: dict[str, Any], engine_a: str, engine_b: str) -> str:
    """Where the divergence sits on each side, when an engine other than our decoder ran one."""
    if not (first.get("module_a") or first.get("node_b")):
        return ""
    a = f"module {first['module_a']}" if first.get("module_a") else "its point"
    b = f"node {first['node_b']} ({first.get('op_b')})" if first.get("node_b") else "its point"
    at = f", the weight {first['tensor_a']} at byte {first['offset_a']:,} in a" if first.get("offset_a") is not None \
        and first.get("tensor_a") else ""
    return f" In a ({engine_a}) it is {a}; in b ({engine_b}) {b}{at}."


def aligned_points(nodes_a: dict, nodes_b: dict) -> list[dict[str, Any]]:
    """[{"layer", "module", "a", "b", "op", "how"}]: the module or node behind each point on
    each side (how: the way b's node was aligned: scope, metadata, weight, position)."""
    out = []
    for key in sorted(set(nodes_a) | set(nodes_b), key=lambda p: (p[0] is not None, p[0] or 0, p[1])):
        na, nb = nodes_a.get(key) or {}, nodes_b.get(key) or {}
        out.append({"layer": key[0], "module": key[1], "a": na.get("module") or na.get("node"),
                    "b": nb.get("node") or nb.get("module"), "op": nb.get("op") or nb.get("class"),
                    "how": nb.get("how")})
    return out
