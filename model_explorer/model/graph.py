"""The graph a file records, as two tables (issue 40, its first part: the graph formats).

ONNX, OpenVINO IR and TFLite readers keep every operator they walk (formats/structure.py);
this module meets them in one record, `Graph`:

    nodes   one row per operator: id (unique), name, op, group (the scope path, "/"-joined, ""
            at the top), weights (the stored tensors it reads), parameters, inputs, outputs,
            file, offset, length (the bytes of its record in the file)
    edges   one row per value passed from one operator to another: source, target, value

Values connect by name (ONNX value names, TFLite tensor names, OpenVINO "layer id:port"). A
weight is an input that names a tensor of the checkpoint: an ONNX initializer or Constant (an
inner graph's name first, renamed duplicates by the name the graph uses), a TFLite buffer, an
OpenVINO Const layer's output. The family's block graph of a weight-only checkpoint is not
built here yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

NODE_COLUMNS = ["id", "name", "op", "group", "weights", "parameters", "inputs", "outputs", "file",
                "offset", "length"]
EDGE_COLUMNS = ["source", "target", "value"]
MAIN_GRAPHS = ("graph", "net", "subgraph 0", "")


@dataclass
class Graph:
    """The operators of every graph file of a checkpoint (see the module docstring)."""

    nodes: Any  # pandas.DataFrame, NODE_COLUMNS
    edges: Any  # pandas.DataFrame, EDGE_COLUMNS
    formats: dict[str, str] = field(default_factory=dict)  # file -> format
    complete: bool = True  # False when a reader's budget stopped its walk
    unused: list[str] = field(default_factory=list)  # stored tensors that no operator reads

    def outline(self, depth: int = 2) -> str:
        """Groups cut at `depth` levels: operators (the commonest kinds) and parameters each."""
        if not len(self.nodes):
            return "no graph: the files record weights only (the family's block graph is not built yet)"
        lines = [f"{len(self.nodes):,} operators, {len(self.edges):,} edges, "
                 f"{int(self.nodes['parameters'].sum()):,} parameters in weights they read"
                 + ("" if self.complete else " (the walk stopped early: some operators are missing)")
                 + (f"; {len(self.unused)} stored tensors no operator reads (first: {self.unused[0]})"
                    if self.unused else "")]
        cut = self.nodes["group"].map(lambda g: "/".join(g.split("/")[:depth]) if g else "(top)")
        for group, part in self.nodes.groupby(cut, sort=False):
            kinds = part["op"].value_counts()
            ops = ", ".join(f"{op} x{n}" for op, n in kinds.head(4).items())
            more = f", {len(kinds) - 4} more kinds" if len(kinds) > 4 else ""
            lines.append(f"  {group}: {len(part):,} operators ({ops}{more}), "
                         f"{int(part['parameters'].sum()):,} parameters")
        return "\n".join(lines)

    def show(self, overlay=None):
        """The Graph view alone (widgets/graph_view.py): groups collapsed, expand on click, search,
        overlays; `overlay` a trace or compare_runs result coloured onto the nodes' layer/module."""
        from ..viewers import show

        return show("graph", self, overlay=overlay)

    def __repr__(self) -> str:
        return f"<Graph: {len(self.nodes):,} operators, {len(self.edges):,} edges>"


def graph_of(ckpt) -> Graph:
    """The Graph of an open checkpoint's graph files."""
    import pandas as pd

    rows: list[dict] = []
    edges: list[dict] = []
    formats: dict[str, str] = {}
    complete = True
    for file, structure in ckpt.structures.items():
        formats[file] = structure.format
        complete = complete and structure.complete
        _add_file(ckpt, file, structure, rows, edges)
    read = {w for row in rows for w in row["weights"]}
    unused = [name for name in ckpt.tensors if name not in read] if rows else []
    return Graph(pd.DataFrame(rows, columns=NODE_COLUMNS), pd.DataFrame(edges, columns=EDGE_COLUMNS),
                 formats, complete, unused)


def _add_file(ckpt, file: str, structure, rows: list[dict], edges: list[dict]) -> None:
    weight = _weights(ckpt, structure)
    producer: dict[str, str] = {}
    ids: set[str] = set()
    first = len(rows)
    for i, n in enumerate(structure.nodes):
        name = n.name or f"{n.op_type}_{i}"
        node_id = name if name not in ids else f"{name} #{i}"
        ids.add(node_id)
        reads = [w for w in (weight(n.graph, v) for v in n.inputs) if w]
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        rows.append({"id": node_id, "name": n.name, "op": op, "group": _group(n.name, n.graph),
                     "weights": reads, "parameters": sum(_numel(ckpt.tensors[w]) for w in reads),
                     "inputs": [v for v in n.inputs if v], "outputs": [v for v in n.outputs if v],
                     "file": file, "offset": n.at, "length": n.length})
        for v in n.outputs:
            if v:
                producer.setdefault(v, node_id)
    for row in rows[first:]:
        for v in row["inputs"]:
            source = producer.get(v)
            if source is not None and source != row["id"]:
                edges.append({"source": source, "target": row["id"], "value": v})


def _weights(ckpt, structure):
    """(graph, value name) -> the checkpoint's tensor that value is, or None."""
    by_graph: dict[tuple[str, str], str] = {}
    by_name: dict[str, str] = {}
    by_layer: dict[str, str] = {}
    for name, t in ckpt.tensors.items():
        extra = t.extra or {}
        own = str(extra.get("graph_name") or name)
        graph = extra.get("onnx_graph")
        if graph is not None:
            by_graph.setdefault((str(graph), own), name)
        by_name.setdefault(own, name)
        if "layer_id" in extra:
            by_layer[str(extra["layer_id"])] = name

    def weight(graph: str, value: str) -> str | None:
        if not value:
            return None
        if structure.format == "openvino":
            return by_layer.get(value.split(":", 1)[0])
        return by_graph.get((graph, value)) or by_name.get(value)

    return weight


def _group(name: str, graph: str) -> str:
    """The scope path: an inner graph's path, then the scopes exporters write into node names
    ("/bert/encoder/layer.2/attention/MatMul" -> "bert/encoder/layer.2/attention")."""
    parts = [] if graph in MAIN_GRAPHS else [p.strip() for p in graph.split(">")[1:] if p.strip()]
    if name.startswith("/") and name.count("/") >= 2:
        parts += [p for p in name.split("/")[1:-1] if p]
    return "/".join(parts)


def _numel(t) -> int:
    try:
        return math.prod(int(d) for d in t.shape)
    except (TypeError, ValueError):
        return 0
