"""An ONNX graph's wiring checked where the bytes are: a cycle, an input no one makes, a weight
input that names no initializer. onnx.checker refuses such files; runtimes fail to load them;
here each is a finding at the bytes of the node's record, and the graph is still listed.

- a cycle: nodes of one graph that feed each other, so no order runs each after its inputs
  (ONNX wants a DAG); graph_cycles.py finds them without recursion;
- a dangling input: a value no node produces, that is no graph's input and no initializer (an
  inner graph may read its outer graphs' values, so any graph's will do);
- a missing initializer: the same at a position where the operator takes a stored weight (Conv's
  W, Gemm's B, an LSTM's W and R, a bias, a quantized weight's codes and scales).

A nesting past any sane depth is refused by the reader's walk itself (onnx_nesting_too_deep).
"""

from __future__ import annotations

from ...spans import Report, short_repr
from ..graph_cycles import on_cycles
from ..graph_roles import BIAS_INPUTS, INT_WEIGHT_INPUTS
from ..structure import OpRecord

# (op, input index) where the operator takes a stored weight
WEIGHT_INPUTS = (BIAS_INPUTS | INT_WEIGHT_INPUTS
                 | {("ConvTranspose", 1), ("LSTM", 1), ("LSTM", 2), ("GRU", 1), ("GRU", 2), ("RNN", 1),
                    ("RNN", 2), ("BatchNormalization", 1), ("BatchNormalization", 3),
                    ("BatchNormalization", 4), ("LayerNormalization", 1), ("InstanceNormalization", 1),
                    ("GroupNormalization", 1)})
SHOWN = 5  # nodes of a cycle named in its finding


def check_wiring(nodes: list[OpRecord], known: set[str], rep: Report) -> None:
    """Findings for dangling inputs, missing initializers and cycles among `nodes` (every node of
    every graph, in file order); `known`: graph inputs and initializer names of every graph."""
    produced = {v for n in nodes for v in n.outputs if v}
    for n in nodes:
        for i, v in enumerate(n.inputs):
            if not v or v in produced or v in known:
                continue
            weight = (n.op_type, i) in WEIGHT_INPUTS
            code = "onnx_missing_initializer" if weight else "onnx_dangling_input"
            if rep.capped(code):
                continue
            what = "a stored weight (an initializer)" if weight else "a value a node produces, a graph input or an initializer"
            rep.error(code, f"{_node(n)} input {i} names {short_repr(v)!r}: expected {what} of that name, "
                      "found none in the file.", n.at, n.length)
    by_graph: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        by_graph.setdefault(n.graph, []).append(i)
    for graph, members in by_graph.items():
        loop = on_cycles(nodes, members)
        if loop:
            first = nodes[loop[0]]
            names = " -> ".join(_node(nodes[i]) for i in loop[:SHOWN]) + (
                f" and {len(loop) - SHOWN} more" if len(loop) > SHOWN else "")
            rep.error("onnx_graph_cycle", f"In {graph}: expected nodes that can run in an order where "
                      f"each comes after its inputs (ONNX graphs are acyclic); found {len(loop)} nodes "
                      f"that feed each other round a loop: {names}.", first.at, first.length)


def _node(n: OpRecord) -> str:
    return f"node {short_repr(n.name)!r} ({n.op_type or '?'})" if n.name else f"a {n.op_type or '?'} node"
