"""An export's graph aligned to the named points without the program that exported it.

Four ways, tried in this order for each point (hf_modules.roles says which module a point is):

1. **scope in node names**: torch.onnx with dynamo=False names nodes after the module that ran
   them, `/bert/encoder/layer.2/intermediate/dense/MatMul` (scope `bert.encoder.layer.2.
   intermediate.dense`);
2. **scope in node metadata**: the default exporter (dynamo) names nodes `node_MatMul_233` and
   keeps the scopes in `pkg.torch.onnx.name_scopes` (a list, outermost first);
3. **weight identity** (with the other side's weights): an initializer equal to a module's
   weight, as stored or transposed, or dequantized from quantize_dynamic's `X_quantized` /
   `X_scale` / `X_zero_point`, ties the node that consumes it (and a bias Add after it) to that
   module;
4. **graph position**: the norms left over are matched in order to the norm nodes
   (LayerNormalization, SimplifiedLayerNormalization, RMSNormalization) left over, when their
   counts agree.

A module's point is the value its nodes make that leaves the module (read by a node outside it,
or a graph output), the last one made; an "input" point (pre-norm attn_residual, the input of
post_attention_layernorm) is the first value its nodes read from outside. Points that no way
aligns are returned with the reason, never dropped.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .hf_modules import Point, module_points, point_order

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
NORM_OPS = ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization", "SkipLayerNormalization")
SKIPPED_OPS = ("Constant", "Shape", "DynamicQuantizeLinear", "QuantizeLinear", "ConstantOfShape")
FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16 (onnx TensorProto)
DEQUANT_TOLERANCE = 0.05  # relative L2 between a dequantized initializer and the weight it came from


@dataclass
class Aligned:
    """Where a point is in the graph: the value, the node making it, how it was found."""

    value: str
    node: int  # index into the main graph's nodes
    how: str  # "scope", "metadata", "weight", "position"
    module: str = ""  # the scope (module path) it stands for
    members: list[int] = field(default_factory=list)  # the module's nodes


def node_scope(node) -> tuple[str | None, str]:
    """(the module path a node ran in, "metadata" | "scope"), or (None, "") without one."""
    for prop in node.metadata_props:
        if prop.key == SCOPES_KEY:
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                break
            paths = [s for s in scopes[:-1] if isinstance(s, str) and s]  # the last names the op
            if paths:
                return paths[-1], "metadata"
    name = node.name
    if name.startswith("/") and name.count("/") >= 2:
        return name[1:].rsplit("/", 1)[0].replace("/", "."), "scope"
    return None, ""


class GraphIndex:
    """Producers, consumers and scopes of a graph's nodes, built once."""

    def __init__(self, graph) -> None:
        self.nodes = list(graph.node)
        self.initializers = {t.name: t for t in graph.initializer}
        self.outputs = [o.name for o in graph.output]
        self.inputs = [i.name for i in graph.input]
        self.types: dict[str, int] = {}
        self.shapes: dict[str, list[Any]] = {}
        for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
            tt = vi.type.tensor_type
            self.types[vi.name] = tt.elem_type
            self.shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                    for d in tt.shape.dim]
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        self.scopes: list[str | None] = []
        self.scope_how: list[str] = []
        for i, n in enumerate(self.nodes):
            for v in n.output:
                self.producer[v] = i
            for v in n.input:
                self.consumers.setdefault(v, []).append(i)
            scope, how = node_scope(n)
            self.scopes.append(scope)
            self.scope_how.append(how)

    def module_paths(self) -> list[str]:
        """Every module path the scopes name (each prefix of each scope), shallow ones first."""
        seen: dict[str, None] = {}
        for s in self.scopes:
            if not s:
                continue
            parts = s.split(".")
            for k in range(1, len(parts) + 1):
                seen.setdefault(".".join(parts[:k]), None)
        return sorted(seen, key=lambda p: p.count("."))

    def members(self, path: str) -> list[int]:
        return [i for i, s in enumerate(self.scopes) if s and (s == path or s.startswith(path + "."))]

    def stored(self, value: str) -> str | None:
        """The initializer a value is (through Identity nodes: torch.onnx shares equal ones), or None."""
        for _ in range(8):
            if value in self.initializers:
                return value
            i = self.producer.get(value)
            if i is None or self.nodes[i].op_type != "Identity":
                return None
            value = self.nodes[i].input[0]
        return None

    def is_float(self, value: str) -> bool:
        t = self.types.get(value)
        return t is None or t in FLOAT_TYPES

    def made_by_constant(self, value: str) -> bool:
        i = self.producer.get(value)
        return i is None or self.nodes[i].op_type in ("Constant", "ConstantOfShape", "Shape")

    def leaving(self, members: list[int]) -> str | None:
        """The last float value the member nodes make that a node outside reads (or the graph
        returns), a tensor of rank 2 or more when there is one; followed through a
        DequantizeLinear that turns it back into floats (a quantized Gather's output)."""
        # a quantizer quantize_dynamic put in the scope hands the value on to the matrix product
        inside = {i for i in members if self.nodes[i].op_type not in SKIPPED_OPS}
        found: list[str] = []
        for i in members:
            node = self.nodes[i]
            if node.op_type in SKIPPED_OPS or not node.output:
                continue
            v = node.output[0]  # the others are scales and zero points, masks, indices
            outside = any(c not in inside for c in self.consumers.get(v, ())) or v in self.outputs
            if v and outside:
                v = self.dequantized_from(v)
                if self.is_float(v):
                    found.append(v)
        wide = [v for v in found if len(self.shapes.get(v) or [0, 0]) >= 2]
        return (wide or found or [None])[-1]

    def dequantized_from(self, value: str) -> str:
        for c in self.consumers.get(value, ()):
            n = self.nodes[c]
            if n.op_type == "DequantizeLinear" and n.input[0] == value:
                return n.output[0]
        return value

    def consumes_matrix(self, members: list[int]) -> bool:
        """Whether any member reads a stored matrix (rank 2 or more)."""
        return any(len(self.initializers[v].dims) >= 2 for i in members for v in self.nodes[i].input
                   if v in self.initializers)

    def entering(self, members: list[int]) -> str | None:
        """The first float value the member nodes read that a node outside made (or a graph input)."""
        inside = set(members)
        for i in members:
            for v in self.nodes[i].input:
                if not v or self.stored(v):
                    continue
                p = self.producer.get(v)
                if (p is None and v in self.inputs) or (p is not None and p not in inside and
                                                         not self.made_by_constant(v)):
                    if self.is_float(v):
                        return v
        return None


def align(index: GraphIndex, expected: list[Point] | None = None,
          weights: dict[str, np.ndarray] | None = None,
          modules: dict[Point, tuple[str, str]] | None = None) -> tuple[dict[Point, Aligned], list[dict[str, Any]]]:
    """({point: Aligned}, [{"layer", "module", "why"}] not aligned). `expected`: the points the
    other side records (None: every point the scopes name); `weights`: the other side's weights
    by checkpoint name, `modules`: its {point: (module path, side)}, for weight identity."""
    found: dict[Point, Aligned] = {}
    for point, (path, side) in module_points(index.module_paths()).items():
        members = index.members(path)
        if weights and modules and _owns_matrix(point, modules, weights) and not index.consumes_matrix(members):
            continue  # its matrix products were rewritten outside the scope (quantize_dynamic): by weight
        value = index.entering(members) if side == "input" else index.leaving(members)
        if value is not None:
            how = index.scope_how[members[0]] if members else "scope"
            found[point] = Aligned(value, index.producer.get(value, -1), how, path, members)
    wanted = point_order(expected) if expected is not None else point_order(found)
    if weights and modules:
        paths = {m[0] for m in modules.values()}
        for point in wanted:
            if point not in found and point in modules and modules[point][1] == "output" \
                    and _weight_makes_it(point, modules[point][0]):
                path = modules[point][0]
                # a weight of a module that is a point of its own (BERT's attention.output.dense
                # inside attention.output) stands for that point, not this one
                own = {n: w for n, w in weights.items()
                       if not any(q != path and q.startswith(path + ".") and (n.startswith(q + ".") or
                                                                             ("." + q + ".") in n) for q in paths)}
                got = _by_weight(index, path, own)
                if got is not None:
                    found[point] = got
    _by_position(index, wanted, found)
    missing, seen = [], {}
    for point in wanted:  # one value stands for one point: a second claim is not an alignment
        if point in found and found[point].value in seen:
            missing.append({"layer": point[0], "module": point[1],
                            "why": f"its value {found[point].value} already stands for {seen[found[point].value]}"})
            del found[point]
        elif point in found:
            seen[found[point].value] = f"{point[0]} {point[1]}" if point[0] is not None else point[1]
    for point in wanted:
        if point not in found and not any((m["layer"], m["module"]) == point for m in missing):
            missing.append({"layer": point[0], "module": point[1], "why": _why(index, point, weights, modules)})
    return {p: found[p] for p in wanted if p in found}, missing


def _weight_makes_it(point: Point, path: str) -> bool:
    """Whether a matrix product with the module's weight makes the point's value: not for a
    residual (an add, or a norm after it), nor for an embedding block that adds and normalizes
    (BERT's `embeddings`; a plain `embed_tokens` is its Gather)."""
    if point[1] in ("residual", "attn_residual") or "norm" in point[1]:
        return False
    return point[1] != "embed" or path.rsplit(".", 1)[-1] in ("embed_tokens", "wte", "word_embeddings")


def _owns_matrix(point: Point, modules: dict[Point, tuple[str, str]], weights: dict[str, np.ndarray]) -> bool:
    """Whether the other side's module for `point` holds a matrix of its own (a linear, an MLP)."""
    if point not in modules or modules[point][1] != "output" or point[1] == "residual":
        return False
    path = modules[point][0]
    return any(w.ndim == 2 and (n.startswith(path + ".") or ("." + path + ".") in n) for n, w in weights.items())


def _why(index: GraphIndex, point: Point, weights, modules) -> str:
    have_scopes = any(index.scopes)
    scope = "no node's name or metadata names its module" if have_scopes else "the graph's nodes carry no scopes"
    if not weights:
        return f"{scope}, and no weights of the other side were given to match by identity"
    if modules is None or point not in modules:
        return f"{scope}, and the other side has no module for it"
    if not _weight_makes_it(point, modules[point][0]):
        return (f"{scope}; {modules[point][0]} is an add or a norm, not a product with its weight (no weight "
                "identity), and no norm node was left over to match by position")
    return f"{scope}, and no initializer equals the weights of {modules[point][0]} (as stored, transposed or dequantized)"


def _dequantized(index: GraphIndex, name: str) -> np.ndarray | None:
    """quantize_dynamic's X_quantized back to float: (q - zero_point) * scale."""
    from onnx import numpy_helper

    if not name.endswith("_quantized"):
        return None
    base = name[: -len("_quantized")]
    scale, zero = index.initializers.get(base + "_scale"), index.initializers.get(base + "_zero_point")
    if scale is None:
        return None
    q = numpy_helper.to_array(index.initializers[name]).astype(np.float32)
    s = numpy_helper.to_array(scale).astype(np.float32)
    z = numpy_helper.to_array(zero).astype(np.float32) if zero is not None else np.float32(0)
    return (q - z) * s


def _same(a: np.ndarray, w: np.ndarray, tolerance: float) -> bool:
    if a.shape != w.shape:
        return False
    d = float(np.linalg.norm(a.astype(np.float64) - w)) / max(float(np.linalg.norm(w)), 1e-30)
    return d <= tolerance


def initializer_of(index: GraphIndex, w: np.ndarray) -> str | None:
    """The initializer holding `w` as stored, transposed or dequantized (weight identity)."""
    from onnx import numpy_helper

    for name, t in index.initializers.items():
        dims = tuple(t.dims)
        if dims not in (w.shape, w.shape[::-1]) or len(dims) != w.ndim:
            continue
        deq = _dequantized(index, name)
        a = deq if deq is not None else numpy_helper.to_array(t)
        if not np.issubdtype(a.dtype, np.floating):
            continue
        tol = DEQUANT_TOLERANCE if deq is not None else 1e-6
        if _same(a, w, tol) or (w.ndim == 2 and _same(a, w.T, tol)):
            return name
    return None


def _by_weight(index: GraphIndex, path: str, weights: dict[str, np.ndarray]) -> Aligned | None:
    """The point of module `path` found through its weights: the consumer of the latest of them
    in graph order, and the Add after it when that Add reads a bias."""
    best, first = None, None
    for name, w in weights.items():
        if not (name == path + ".weight" or name.endswith("." + path + ".weight") or
                (name.startswith(path + ".") and name.endswith(".weight"))) or w.ndim != 2:
            continue
        init = initializer_of(index, w)
        if init is None:
            continue
        node = _consumer_through_quantization(index, init)
        if node is not None and (best is None or node > best):
            best, first = node, index.consumers[init][0]
    if best is None or first is None:
        return None
    value = _through_bias(index, index.nodes[best].output[0])
    made = index.producer.get(value, best)
    return Aligned(value, made, "weight", path, sorted({first, best, made}))


def _consumer_through_quantization(index: GraphIndex, init: str) -> int | None:
    """The node that consumes the initializer's values as a matrix product: the MatMul/Gemm (or
    quantize_dynamic's MatMulInteger, then the Mul that rescales its result)."""
    users = index.consumers.get(init, [])
    if not users:
        return None
    i = users[0]
    node = index.nodes[i]
    if node.op_type in ("MatMulInteger", "DynamicQuantizeMatMul", "Cast"):
        # the integer product, then a Cast and the Mul(s) by the scales: the last Mul in that chain
        while True:
            nxt = index.consumers.get(index.nodes[i].output[0], [])
            if len(nxt) != 1 or index.nodes[nxt[0]].op_type not in ("Cast", "Mul"):
                return i
            i = nxt[0]
    return i


def _through_bias(index: GraphIndex, value: str) -> str:
    users = index.consumers.get(value, [])
    if len(users) == 1:
        n = index.nodes[users[0]]
        if n.op_type == "Add" and any(index.stored(v) for v in n.input):
            return n.output[0]
    return value


def _by_position(index: GraphIndex, wanted: list[Point], found: dict[Point, Aligned]) -> None:
    """The norms left over matched in order to the norm nodes left over, when the counts agree."""
    norms = [p for p in wanted if p[1] in ("attn_norm", "ffn_norm", "final_norm") and p not in found]
    if not norms:
        return
    taken = {a.node for a in found.values()}
    nodes = [i for i, n in enumerate(index.nodes) if n.op_type in NORM_OPS and i not in taken]
    if len(nodes) != len(norms):
        return
    for point, i in zip(norms, nodes):
        found[point] = Aligned(index.nodes[i].output[0], i, "position", "", [i])
