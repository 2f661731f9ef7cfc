"""Bad graphs (issue 40, item 6): a cycle, a dangling input, a node naming a missing initializer,
subgraphs nested past any sane depth. onnx.helper builds each; onnx.checker refuses the first
three (the reference says the file is bad); here each is a finding at the bytes of the node's
record, with expected vs found and a fix, and mx.graph still lists the graph: no exception, no
hang (the checks are iterative; a 20,000-node loop is walked like a short one)."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _save(tmp_path, nodes, inputs=("x",), initializers=(), outputs=("y",), name="bad.onnx") -> str:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [1, 4]) for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 4]) for o in outputs],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def _refused_by_onnx_checker(path: str, why: str) -> None:
    with pytest.raises(onnx.checker.ValidationError, match=why):
        onnx.checker.check_model(onnx.load(path))


def _findings(path: str, code: str):
    ckpt = mx.open(path)
    return ckpt, [f for f in ckpt.findings if f.code == code]


def _node_at(path: str, finding) -> onnx.NodeProto:
    """The NodeProto whose record the finding's bytes are (tag, length, message)."""
    raw = open(path, "rb").read()[finding.offset:finding.offset + finding.length]
    node = onnx.NodeProto()
    for skip in range(1, 6):
        try:
            node.ParseFromString(raw[skip:])
            return node
        except Exception:  # noqa: BLE001 - not past the length varint yet
            continue
    raise AssertionError("the finding's bytes are no NodeProto")


def test_a_cycle_is_one_finding_at_a_node_of_the_loop(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Identity", ["b"], ["y"], name="after")]
    path = _save(tmp_path, nodes)
    _refused_by_onnx_checker(path, "input 'b' of node.*\n.*name: first.*\n.* is not output of any previous")
    _, found = _findings(path, "onnx_graph_cycle")
    assert len(found) == 1 and found[0].severity == "error" and found[0].fix
    f = found[0]
    assert "expected" in f.message and "found 2 nodes" in f.message and "'after'" not in f.message
    assert _node_at(path, f).name == "first"
    g = mx.graph(path)
    assert len(g.nodes) == 3 and {("first", "second"), ("second", "first")} <= set(zip(g.edges["source"],
                                                                                        g.edges["target"]))


def test_a_dangling_input_and_a_missing_initializer(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 1, 1, 1), np.float32), "conv.weight")
    nodes = [helper.make_node("Add", ["x", "ghost"], ["a"], name="adds_a_ghost"),
             helper.make_node("Conv", ["a", "conv.weigth"], ["y"], name="conv")]  # misspelt weight
    path = _save(tmp_path, nodes, initializers=[w])
    _refused_by_onnx_checker(path, "input 'ghost' of node")  # the checker stops at the first
    del nodes[0].input[1]
    nodes[0].op_type = "Relu"
    _refused_by_onnx_checker(_save(tmp_path, nodes, initializers=[w], name="conv.onnx"), "input 'conv.weigth'")
    ckpt, dangling = _findings(path, "onnx_dangling_input")
    _, missing = _findings(path, "onnx_missing_initializer")
    assert len(dangling) == 1 and "'ghost'" in dangling[0].message and dangling[0].fix
    assert _node_at(path, dangling[0]).name == "adds_a_ghost"
    assert len(missing) == 1 and "'conv.weigth'" in missing[0].message and "stored weight" in missing[0].message
    assert _node_at(path, missing[0]).name == "conv"
    g = mx.graph(path)
    assert g.unused == ["conv.weight"] and len(g.nodes) == 2


def test_a_well_wired_graph_has_none_of_these(tmp_path):
    """Outer values read inside an If branch, graph inputs, initializers: all known."""
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    branch = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)]
    path = _save(tmp_path, nodes, initializers=[w, cond])
    onnx.checker.check_model(onnx.load(path))
    codes = {f.code for f in mx.open(path).findings}
    assert not codes & {"onnx_graph_cycle", "onnx_dangling_input", "onnx_missing_initializer"}


def test_subgraphs_nested_past_the_bound(tmp_path):
    """If inside If, 24 deep: the walk reads 16 levels and says so at the next one's bytes."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [out])
    inner = leaf
    for depth in range(24):  # one branch nests on, the other is a leaf: 24 levels, 49 nodes
        inner = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=leaf,
                                                    name=f"if{depth}")], f"g{depth}", [], [out])
    c = numpy_helper.from_array(np.array(True), "c")
    path = _save(tmp_path, list(inner.node), initializers=[c])
    ckpt, found = _findings(path, "onnx_nesting_too_deep")
    assert found and found[0].severity == "error"
    g = mx.graph(ckpt)
    assert len(g.nodes) == 1 + 2 * 16  # the top If, then each level's If and leaf down to 16


def test_a_long_loop_is_found_without_recursion(tmp_path):
    n = 20_000
    nodes = [helper.make_node("Relu", [f"v{(i - 1) % n}"], [f"v{i}"], name=f"r{i}") for i in range(n)]
    nodes.append(helper.make_node("Identity", [f"v{n - 1}"], ["y"], name="out"))
    path = _save(tmp_path, nodes)
    _, found = _findings(path, "onnx_graph_cycle")
    assert len(found) == 1 and f"found {n} nodes" in found[0].message and "19995 more" in found[0].message
