"""What a graph format says about its model, for the card and the overview: a graph file
(ONNX, TFLite) describes itself without a config.json: who wrote it, its opset, its inputs and
outputs with their shapes, and how many operators of which kinds it runs.

Each fact is a `Sourced` pointing at the bytes it was read from where the reader kept them
(a graph input's ValueInfoProto, a TFLite tensor table).

`describe_graph(ckpt)` gives the same, as plain data, for every graph file a checkpoint holds
(ONNX, TFLite, OpenVINO IR, a Keras config, a TorchScript module tree: the readers'
`GraphStructure`s): producer, opset, inputs and outputs with dtype, shape and bytes, and the
operator histogram; `describe_text` is how the command line prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..records import CheckpointRecord
from .hparams import Sourced

MAX_SHOWN = 6  # inputs, outputs or operator kinds spelled out
GRAPH_FACTS = (("producer", "producer"), ("description", "description"), ("opset", "opset"), ("inputs", "inputs"),
               ("outputs", "outputs"), ("operators", "operators"))


@dataclass
class GraphFacts:
    architecture: str  # one line: "ONNX graph: 689 nodes of 35 kinds, written by spox"
    facts: dict[str, Sourced] = field(default_factory=dict)


def graph_facts(ckpt: CheckpointRecord) -> GraphFacts | None:
    """The facts of the first graph file of `ckpt`, None when it holds no graph format."""
    if ckpt.format not in ("onnx", "tflite") or not ckpt.files:
        return None
    path = ckpt.files[0]
    described = describe_graph(ckpt)
    d = next((x for x in described if x["file"] == path), described[0] if described else None)
    facts: dict[str, Sourced] = {}
    meta = ckpt.metadata
    if ckpt.format == "onnx":
        if d and d["producer"]:
            facts["producer"] = Sourced(d["producer"], "onnx", "producer_name", path)
        if d and d["opset"]:
            facts["opset"] = Sourced(d["opset"], "onnx", "opset_import", path)
    elif meta.get("tflite.description"):
        facts["description"] = Sourced(meta["tflite.description"], "tflite", "description", path)
    for side in ("inputs", "outputs"):
        values = d[side] if d else []
        if values:
            first = values[0]
            facts[side] = Sourced(_values_text(values), ckpt.format, side, path,
                                  first.get("offset"), first.get("length"))
    ops = d["operators"] if d else {}
    total = sum(ops.values())
    if total:
        kinds = list(ops.items())
        shown = ", ".join(f"{k} × {n}" for k, n in kinds[:MAX_SHOWN])
        more = f", {len(kinds) - MAX_SHOWN} more kinds" if len(kinds) > MAX_SHOWN else ""
        facts["operators"] = Sourced(f"{total:,} ({shown}{more})", ckpt.format, "nodes", path)
    name = "ONNX" if ckpt.format == "onnx" else "TFLite"
    text = f"{name} graph" + (f": {total:,} operators of {len(ops)} kinds" if total else "")
    if "producer" in facts and ckpt.format == "onnx":
        text += f", written by {facts['producer'].value}"
    return GraphFacts(text, facts)


def _values_text(values: list[dict]) -> str:
    parts = [f"{v.get('name') or '?'} {v.get('dtype') or '?'} {_shape(v.get('shape'))}"
             for v in values[:MAX_SHOWN]]
    if len(values) > MAX_SHOWN:
        parts.append(f"{len(values) - MAX_SHOWN} more")
    return "; ".join(parts)


def _shape(shape) -> str:
    if shape is None:
        return "(shape not recorded)"
    return "[" + ", ".join(str(d) for d in shape) + "]"


# The metadata keys that name a graph file's producer and opset, by format
PRODUCER_KEYS = {"onnx": ("onnx.producer_name", "onnx.producer_version"), "keras": ("keras_version", "backend"),
                 "tflite": ("tflite.description",)}
OPSET_KEYS = {"onnx": "onnx.opset_import", "tflite": "tflite.schema_version"}


def describe_graph(ckpt: CheckpointRecord) -> list[dict]:
    """One dict per graph file of `ckpt`: {"file", "format", "producer", "opset", "inputs",
    "outputs" (each {"name", "dtype", "shape", "offset", "length"}), "operators" ({op: count},
    commonest first), "nodes"}; [] when it holds no graph file (a weight-only checkpoint)."""
    out = []
    meta = ckpt.metadata
    for file, structure in ckpt.structures.items():
        fmt = structure.format
        producer = " ".join(str(meta[k]) for k in PRODUCER_KEYS.get(fmt, ()) if meta.get(k)) or None
        opset = meta.get(OPSET_KEYS[fmt]) if fmt in OPSET_KEYS else None
        ops = sorted(structure.op_counts().items(), key=lambda kv: -kv[1])  # ties: first seen first
        out.append({"file": file, "format": fmt, "producer": producer, "opset": opset,
                    "inputs": [v.as_dict() for v in structure.inputs],
                    "outputs": [v.as_dict() for v in structure.outputs],
                    "operators": dict(ops), "nodes": len(structure.nodes)})
    return out


def describe_text(facts: list[dict]) -> str:
    """The description as lines for the command line (every input and output, the top kinds)."""
    lines = []
    for d in facts:
        head = f"{d['format']} graph: {d['nodes']:,} operators of {len(d['operators'])} kinds"
        if d["producer"]:
            head += f", written by {d['producer']}"
        if d["opset"] is not None:
            head += f", opset {d['opset']}"
        lines.append(head)
        for side in ("inputs", "outputs"):
            for v in d[side]:
                at = f" (bytes {v['offset']:,}+{v['length']:,})" if v.get("offset") is not None else ""
                lines.append(f"  {side[:-1]:<6} {v['name'] or '?'} {v['dtype'] or '?'} {_shape(v['shape'])}{at}")
        ops = list(d["operators"].items())
        shown = ", ".join(f"{op} × {n}" for op, n in ops[:12])
        more = f", {len(ops) - 12} more kinds" if len(ops) > 12 else ""
        if ops:
            lines.append(f"  operators: {shown}{more}")
    return "\n".join(lines)
