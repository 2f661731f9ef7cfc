"""The graph of a model, as two tables (issue 40): the graph a file records, or the family's
block graph of a checkpoint that stores weights only.

ONNX, OpenVINO IR and TFLite readers keep every operator they walk (formats/structure.py);
this module meets them in one record, `Graph`:

    nodes   one row per operator: id (unique), name, op, group (the scope path, "/"-joined, ""
            at the top), weights (the stored tensors it reads), parameters, inputs, outputs,
            file, offset, length (the bytes of its record in the file; a block graph's node: its
            first weight's bytes), layer (the block it belongs to, an int, or None; a file's
            operator has one where its scope names it: "model/layers.3/mlp") and module (the
            decoder's point it computes: "embed", "q", "attn_residual", "logits"...
            model/decoder_points.py MODULES; None elsewhere and for every node of a graph file)
    edges   one row per value passed from one operator to another: source, target, value

Values connect by name (ONNX value names, TFLite tensor names, OpenVINO "layer id:port"). A
weight is an input that names a tensor of the checkpoint: an ONNX initializer or Constant (an
inner graph's name first, renamed duplicates by the name the graph uses), a TFLite buffer, an
OpenVINO Const layer's output.

A checkpoint with no graph file (safetensors, GGUF, PyTorch, MLX, Hub-quantized, an encoder's
folder) gets its family's block graph (block_graph.py): embed -> each block in a group
"layers.N" -> final norm -> head, every tensor on one node, `tied` naming the embedding a tied
head reads, and `reasons` saying why each unused tensor is unused. A (layer, module) point of
mx.trace or mx.compare_runs finds its node by the two columns.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

NODE_COLUMNS = ["id", "name", "op", "group", "weights", "parameters", "inputs", "outputs", "file",
                "offset", "length", "layer", "module"]
EDGE_COLUMNS = ["source", "target", "value"]
MAIN_GRAPHS = ("graph", "net", "subgraph 0", "")
LAYER_SCOPE = re.compile(r"(?:^|/)(?:layers|layer|h|blocks|blk)[._](\d{1,6})(?:/|$)")


@dataclass
class Graph:
    """The operators of every graph file of a checkpoint (see the module docstring)."""

    nodes: Any  # pandas.DataFrame, NODE_COLUMNS
    edges: Any  # pandas.DataFrame, EDGE_COLUMNS
    formats: dict[str, str] = field(default_factory=dict)  # file -> format
    complete: bool = True  # False when a reader's budget stopped its walk
    unused: list[str] = field(default_factory=list)  # stored tensors that no operator reads
    kind: str = "file"  # "file": the files' own graph; else what drew it ("Llama block graph")
    tied: str | None = None  # a block graph's tied head: the embedding it reads
    reasons: dict[str, str] = field(default_factory=dict)  # unused tensor -> why (block graph)

    def node_at(self, layer: int | None, module: str):
        """The node row of a run's point (layer, module) (None when no node computes it)."""
        hit = self.nodes[(self.nodes["module"] == module)
                         & self.nodes["layer"].map(lambda v: v == layer if layer is not None else v is None)]
        return None if hit.empty else hit.iloc[0]

    def outline(self, depth: int = 2) -> str:
        """Groups cut at `depth` levels: operators (the commonest kinds) and parameters each;
        alike groups in a row (a block graph's layers) are said once."""
        if not len(self.nodes):
            return "no graph: no graph file, and no tensor names a part of a transformer block"
        noun = "operators" if self.kind == "file" else "nodes"
        head = (f"{len(self.nodes):,} {noun}, {len(self.edges):,} edges, "
                f"{int(self.nodes['parameters'].sum()):,} parameters in weights they read")
        if self.kind != "file":
            layers = self.nodes["layer"].dropna().nunique()
            head = f"{self.kind} (from the family and the tensor names): {layers} layers; " + head
        lines = [head + ("" if self.complete else " (the walk stopped early: some operators are missing)")]
        if self.tied:
            lines.append(f"  head tied: it reads the embedding {self.tied}")
        if self.unused:
            why = self.reasons.get(self.unused[0])
            lines.append(f"  {len(self.unused)} stored tensors no {noun[:-1]} reads (first: {self.unused[0]}"
                         + (f": {why}" if why else "") + ")")
        cut = self.nodes["group"].map(lambda g: "/".join(g.split("/")[:depth]) if g else "(top)")
        run: list[str] = []
        text_of_run = None
        for group, part in self.nodes.groupby(cut, sort=False):
            kinds = part["op"].value_counts()
            ops = ", ".join(f"{op} x{n}" for op, n in kinds.head(4).items())
            more = f", {len(kinds) - 4} more kind{'s' if len(kinds) > 5 else ''}" if len(kinds) > 4 else ""
            text = f"{len(part):,} {noun} ({ops}{more}), {int(part['parameters'].sum()):,} parameters"
            if text != text_of_run:
                _close_run(lines, run, text_of_run)
                run, text_of_run = [], text
            run.append(str(group))
        _close_run(lines, run, text_of_run)
        return "\n".join(lines)

    def show(self, overlay=None):
        """The Graph view alone (widgets/graph_view.py): groups collapsed, expand on click, search,
        overlays; `overlay` a trace or compare_runs result coloured onto the nodes' layer/module."""
        from ..viewers import show

        return show("graph", self, overlay=overlay)

    def __repr__(self) -> str:
        what = "" if self.kind == "file" else f" {self.kind},"
        return f"<Graph:{what} {len(self.nodes):,} nodes, {len(self.edges):,} edges>"


def _close_run(lines: list[str], run: list[str], text: str | None) -> None:
    if run and text is not None:
        name = run[0] if len(run) == 1 else f"{run[0]} .. {run[-1]} ({len(run)} alike, each)"
        lines.append(f"  {name}: {text}")


def graph_of(ckpt) -> Graph:
    """The Graph of an open checkpoint: its graph files' operators, or, when it has none, its
    family's block graph (block_graph.py)."""
    import pandas as pd

    if not ckpt.structures:
        return _block_graph(ckpt)
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
    return Graph(_node_table(rows), pd.DataFrame(edges, columns=EDGE_COLUMNS), formats, complete, unused)


def _block_graph(ckpt) -> Graph:
    import pandas as pd

    from .block_graph import block_graph

    bg = block_graph(ckpt)
    formats = {f: ckpt.format for f in ckpt.files}
    return Graph(_node_table(bg.rows), pd.DataFrame(bg.edges, columns=EDGE_COLUMNS), formats, True,
                 list(bg.unused), bg.label, bg.tied, dict(bg.unused))


def _node_table(rows: list[dict]):
    """The node DataFrame; `layer` stays ints and None (pandas would make it float with NaN)."""
    import pandas as pd

    nodes = pd.DataFrame(rows, columns=NODE_COLUMNS)
    nodes["layer"] = pd.Series([r.get("layer") for r in rows], index=nodes.index, dtype=object)
    nodes["module"] = pd.Series([r.get("module") for r in rows], index=nodes.index, dtype=object)
    return nodes


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
        group = _group(n.name, n.graph)
        rows.append({"id": node_id, "name": n.name, "op": op, "group": group, "layer": _layer_of(group),
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


def _layer_of(group: str) -> int | None:
    """The block a file's operator belongs to, where its scope names one ("model/layers.3/mlp",
    "encoder/layer.11", "transformer/h.0"): what an exporter writes, not a guess."""
    m = LAYER_SCOPE.search(group)
    return int(m[1]) if m else None


def _numel(t) -> int:
    try:
        return math.prod(int(d) for d in t.shape)
    except (TypeError, ValueError):
        return 0
