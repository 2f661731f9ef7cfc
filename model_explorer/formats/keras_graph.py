"""A Keras model's graph from its config (the `model_config` attribute of a Keras 2 / legacy .h5
file, config.json of a Keras 3 .keras archive): each layer one operator, its inbound nodes as
inputs, its weights on it.

    Functional / Model   layers with inbound_nodes: Keras 2 writes [[[layer, node, tensor, {}]]],
                         Keras 3 {"args": [{"class_name": "__keras_tensor__", "config":
                         {"keras_history": [layer, node, tensor]}}], "kwargs": {}}
    Sequential           layers in order, each reading the one before

A layer's weights are found by where they sit: `model_weights/<layer name>/...` in an .h5 file,
`layers/<key>/vars/<i>` in a .keras archive, where Keras 3 keys each layer by its class in
snake case, numbered in order (dense, dense_1...). A layer is found at the bytes of its name in
the config where the config's text lies in the file as it is (else the config's own bytes). A
nested model is one operator; the JSON is parsed by the standard library, bounded in size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from .structure import GraphStructure, OpRecord

MAX_CONFIG = 32 << 20  # a model config is kilobytes; hundreds of layers stay far below this
MAX_LAYERS = 100_000
MAX_DEPTH = 32  # nesting of a Keras 3 inbound node's args walked for tensors


def keras_structure(text: str, file: str, where: tuple[int, int], raw: bytes | None,
                    tensors: Mapping) -> GraphStructure | None:
    """The graph of a Keras config `text`; `where`: (offset, length) of the config in `file`;
    `raw`: the bytes at `where`, to find each layer's name in (None: every layer points at the
    config); `tensors`: the file's TensorInfos (extra["hdf5_path"]). None when the text is not a
    model config."""
    if len(text) > MAX_CONFIG:
        return None
    try:
        config = json.loads(text)
    except (ValueError, RecursionError):
        return None
    inner = config.get("config") if isinstance(config, dict) else None
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layers, list):
        return None
    layers = [la for la in layers[:MAX_LAYERS] if isinstance(la, dict)]
    sequential = config.get("class_name") == "Sequential"
    weights = _weights_by_layer(layers, tensors)
    base = _text_start(raw, text)
    nodes: list[OpRecord] = []
    search = 0
    previous: str | None = None
    for la in layers:
        name = _name(la)
        op = str(la.get("class_name") or "?")
        at, length = where
        if base is not None and raw is not None:
            needle = json.dumps(name).encode()
            hit = raw.find(needle, base + search)
            if hit >= 0:
                at, length, search = where[0] + hit, len(needle), hit - base + len(needle)
            else:  # out of order or escaped: the rest point at the config (no scan per layer)
                base = None
        if sequential:
            inputs = [previous] if previous is not None and op != "InputLayer" else []
        else:
            inputs = [f"{h[0]}:{h[1]}:{h[2]}" for h in _history(la.get("inbound_nodes"))]
        out = f"{name}:0:0"
        nodes.append(OpRecord(op, "", inputs + weights.get(name, []), [out], name=name, at=at,
                              length=length, graph="model"))
        if op != "InputLayer" or sequential:
            previous = out
    _outputs_referenced(nodes)
    return GraphStructure("keras", file, nodes)


def _name(layer: dict) -> str:
    c = layer.get("config")
    name = layer.get("name") or (c.get("name") if isinstance(c, dict) else None)
    return str(name) if name is not None else "?"


def _history(inbound, depth: int = 0) -> list[tuple]:
    """(layer, node index, tensor index) of every tensor an inbound_nodes value names."""
    out: list[tuple] = []
    stack = [(inbound, 0)]
    while stack:
        v, d = stack.pop()
        if d > MAX_DEPTH:
            continue
        if isinstance(v, dict):
            h = v.get("keras_history") if v.get("class_name") != "__keras_tensor__" else \
                (v.get("config") or {}).get("keras_history")
            if isinstance(h, list) and len(h) >= 3:
                out.append(tuple(h[:3]))
                continue
            stack.extend((x, d + 1) for x in reversed(list(v.values())))
        elif isinstance(v, list):
            if len(v) >= 3 and isinstance(v[0], str) and isinstance(v[1], int) and isinstance(v[2], int):
                out.append(tuple(v[:3]))  # Keras 2: [layer, node, tensor, kwargs]
                continue
            stack.extend((x, d + 1) for x in reversed(v))
    return out


def _outputs_referenced(nodes: list[OpRecord]) -> None:
    """A layer's outputs: every (node, tensor) another layer reads of it, not only the first."""
    by_name = {n.name: n for n in nodes}
    for n in nodes:
        for v in n.inputs:
            src = by_name.get(v.rsplit(":", 2)[0])
            if src is not None and v not in src.outputs:
                src.outputs.append(v)


def _weights_by_layer(layers: list[dict], tensors: Mapping) -> dict[str, list[str]]:
    """Layer name -> the names of the tensors stored under it (see the module docstring)."""
    names = {_name(la) for la in layers}
    keys: dict[str, str] = {}  # Keras 3: "dense_1" -> the layer's name
    seen: dict[str, int] = {}
    for la in layers:
        key = _snake(str(la.get("class_name") or ""))
        n = seen.get(key, 0)
        seen[key] = n + 1
        keys[key if n == 0 else f"{key}_{n}"] = _name(la)
    out: dict[str, list[str]] = {}
    for tname, info in tensors.items():
        parts = str((info.extra or {}).get("hdf5_path") or "").strip("/").split("/")
        layer = None
        if len(parts) >= 2 and parts[0] == "model_weights" and parts[1] in names:
            layer = parts[1]
        elif len(parts) >= 2 and parts[0] == "layers":
            layer = keys.get(parts[1])
        elif parts and parts[0] in names:  # a weights-only .h5 (save_weights): layer groups at the top
            layer = parts[0]
        if layer is not None:
            out.setdefault(layer, []).append(tname)
    return out


def _snake(name: str) -> str:
    """Keras' naming.to_snake_case: "LayerNormalization" -> "layer_normalization"."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _text_start(raw: bytes | None, text: str) -> int | None:
    """Where the config's text starts inside `raw` (its first bytes found there), or None."""
    if raw is None:
        return None
    head = text[:64].encode("utf-8", "replace")
    at = raw.find(head)
    return at if at >= 0 else None
