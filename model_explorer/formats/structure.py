"""The structure of a graph file, kept from the reader's one parse (`FileResult.structure`).

The graph formats (ONNX, OpenVINO IR, TFLite; a Keras model's config, a TorchScript module
tree) hold operators as well as weights. Their readers
walk every operator anyway (to group quantized weights, give tensors their roles, count
operators); these records keep what they saw, typed, so a graph view builds on them without a
second parse. The names stay clear of the ones taken: ONNX's field-number enums `schema.Graph`
and `schema.Node`, HDF5's `groups.Node`, OpenVINO's `_Graph`.

    GraphStructure(format, file)      one file's graph: its operators in file order, the main
                                      graph's inputs and outputs, and (OpenVINO) its edges
      nodes:   [OpRecord]             op_type, domain, name, inputs, outputs (every one, by name),
                                      attrs, graph (the subgraph path), at + length (its bytes)
      inputs, outputs: [GraphValue]   name, dtype, shape, at + length
      edges:   [GraphEdge]            OpenVINO's <edge>s (ONNX and TFLite connect by name)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OpRecord:
    """One operator: an ONNX node, an OpenVINO layer, a TFLite operator.

    inputs/outputs: the values it takes and makes, by name (ONNX: value names; TFLite: tensor
    names; OpenVINO: "layer id:port"), "" where an optional input is left out. graph: the
    (sub)graph it sits in ("graph", "graph > node 3 If > then_branch", "subgraph 1"). at/length:
    the bytes of its definition in the structure's file."""

    op_type: str
    domain: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    attrs: dict[str, object] = field(default_factory=dict)
    name: str = ""
    at: int = 0
    length: int = 0
    graph: str = ""


@dataclass(frozen=True)
class GraphValue:
    """A graph input or output: its name, element type and shape (ints, or names / "?" for
    dynamic sizes; None when not recorded), and the bytes that declare it."""

    name: str
    dtype: str | None
    shape: tuple | None
    at: int | None = None
    length: int | None = None

    def as_dict(self) -> dict:
        """The plain dict the card and overview read (model/graph_facts.py)."""
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape),
                "offset": self.at, "length": self.length}


@dataclass(frozen=True)
class GraphEdge:
    """An explicit edge (OpenVINO): from a layer's output port to a layer's input port."""

    src: str
    src_port: str
    dst: str
    dst_port: str
    at: int


@dataclass
class GraphStructure:
    """One graph file's structure (see the module docstring). complete: False when a reader's
    budget stopped the walk, so some operators are missing."""

    format: str
    file: str
    nodes: list[OpRecord] = field(default_factory=list)
    inputs: list[GraphValue] = field(default_factory=list)
    outputs: list[GraphValue] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    complete: bool = True

    def op_counts(self) -> dict[str, int]:
        """Operators by kind (a domain other than ONNX's own prefixes its operators)."""
        out: dict[str, int] = {}
        for n in self.nodes:
            op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
            out[op] = out.get(op, 0) + 1
        return out
