"""The Graph view's kernel side (widgets/_graph.py, _graphtree.py; issue 40), against onnx's own
reading of files built here: groups count what onnx lists under each scope, the fully opened view
draws onnx's nodes and the producer -> consumer pairs of its values, a flat graph is cut into
chunks, search finds what onnx lists in its order, a node's record parses back as onnx's node and
its weights are its initializer inputs. Graph.show() and the runs view share viewers.py."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer import viewers
from model_explorer.widgets._graph import GraphIndex, _node_findings
from model_explorer.widgets._graphtree import CHUNK, GraphTree

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def scoped(path, layers=3, named=True):
    """`layers` blocks of MatMul (q, k) -> Add -> Softmax, scoped as torch.onnx names them (or unnamed)."""
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        s = f"/model/layers.{i}"
        for proj in ("q", "k"):
            w = f"model.layers.{i}.{proj}.weight"
            inits.append(numpy_helper.from_array(np.ones((4, 4), np.float32) * i, w))
            nodes.append(helper.make_node("MatMul", [prev, w], [f"{s}/{proj}"], name=f"{s}/{proj}_proj/MatMul" if named else ""))
        nodes.append(helper.make_node("Add", [f"{s}/q", f"{s}/k"], [f"{s}/a"], name=f"{s}/Add" if named else ""))
        nodes.append(helper.make_node("Softmax", [f"{s}/a"], [f"{s}/o"], name=f"{s}/Softmax" if named else ""))
        prev = f"{s}/o"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="/lm_head/Identity" if named else ""))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("graphview")
    return {"scoped": scoped(d / "scoped.onnx"), "flat": scoped(d / "flat.onnx", layers=60, named=False)}


def test_closed_groups_count_what_onnx_lists_under_each_scope(made):
    model = onnx.load(str(made["scoped"]))
    index = GraphIndex(mx.graph(made["scoped"]))
    view = index.view(None)
    assert view["opened"] == ["g:model"]  # the scope that holds most operators opens by itself
    groups = {it["key"]: it for it in view["items"] if it["kind"] == "group"}
    assert set(groups) == {"g:model/layers.0", "g:model/layers.1", "g:model/layers.2", "g:lm_head"}
    for key, it in groups.items():
        scope = "/" + key[2:] + "/"
        assert it["count"] == sum(n.name.startswith(scope) for n in model.graph.node)
        assert it["params"] == sum(int(np.prod(i.dims)) for i in model.graph.initializer
                                   if any(n.name.startswith(scope) and i.name in n.input for n in model.graph.node))
    assert sorted(e[:2] for e in view["edges"]) == [["g:model/layers.0", "g:model/layers.1"],
                                                    ["g:model/layers.1", "g:model/layers.2"],
                                                    ["g:model/layers.2", "g:lm_head"]]


def test_fully_opened_view_is_onnx_nodes_and_their_value_pairs(made):
    model = onnx.load(str(made["scoped"]))
    tree = GraphIndex(mx.graph(made["scoped"])).tree
    items, edges = tree.visible(list(tree.boxes))
    assert sorted(it["key"] for it in items if it["kind"] == "node") == sorted("n:" + n.name for n in model.graph.node)
    producer = {o: n.name for n in model.graph.node for o in n.output}
    pairs = {("n:" + producer[v], "n:" + n.name) for n in model.graph.node for v in n.input if v in producer}
    assert {(s, t) for s, t, _ in edges} == pairs


def test_a_flat_graph_is_cut_into_chunks_in_file_order(made):
    model = onnx.load(str(made["flat"]))
    tree = GraphTree(mx.graph(made["flat"]).nodes, mx.graph(made["flat"]).edges)
    n = len(model.graph.node)
    items, _ = tree.visible([])
    assert [it["count"] for it in items] == [min(CHUNK, n - s) for s in range(0, n, CHUNK)]
    opened, _ = tree.visible([items[1]["key"]])
    inside = [it for it in opened if it["kind"] == "node"]
    assert len(inside) == CHUNK and inside[0]["row"] == CHUNK


def test_search_and_a_node_record_against_onnx(made):
    path = made["scoped"]
    model = onnx.load(str(path))
    ex = mx.explore(path)
    assert ex.has_graph
    hits = ex.answer("graph_search", {"query": "SOFTMAX"})[0]["hits"]
    assert [h["name"] for h in hits] == [n.name for n in model.graph.node if n.op_type == "Softmax"]
    assert hits[1]["open"] == ["g:model", "g:model/layers.1"]
    onnx_node = model.graph.node[4]
    node = ex.answer("graph_node", {"key": "n:" + onnx_node.name})[0]
    inits = {i.name for i in model.graph.initializer}
    assert node["weights"] == [v for v in onnx_node.input if v in inits]
    located = ex.answer("graph_locate", {"tensor": "model.layers.1.k.weight"})[0]
    assert located["key"] == "n:" + next(n.name for n in model.graph.node if "model.layers.1.k.weight" in n.input)
    assert located["open"] == ["g:model", "g:model/layers.1", "g:model/layers.1/k_proj"]
    rec = node["record"]
    data = path.read_bytes()[rec["offset"]:rec["offset"] + rec["length"]]
    assert data[0] == 0x0A  # GraphProto field 1 (node), length-delimited
    body, shift, size, i = data[1:], 0, 0, 0
    while True:  # the varint length, then the NodeProto itself
        size |= (body[i] & 0x7F) << shift
        shift += 7
        i += 1
        if body[i - 1] < 0x80:
            break
    assert onnx.NodeProto.FromString(body[i:i + size]) == onnx_node


def test_findings_outline_the_node_whose_bytes_hold_them():
    class F:
        def __init__(self, severity, offset, tensor=None):
            self.severity, self.code, self.message, self.file = severity, "x", "m", "f"
            self.offset, self.length, self.tensor = offset, 1, tensor

    class Ck:
        findings = [F("warning", 15), F("error", 12), F("info", None, tensor="w")]

    places = [("f", 0, 10), ("f", 10, 10), ("f", 20, 10)]
    out = _node_findings(Ck(), places, [[], [], ["w"]])
    assert out[1]["severity"] == "error" and 0 not in out and out[2]["severity"] == "info"


def test_run_overlay_maps_layer_and_module_columns(monkeypatch, made):
    import model_explorer.runs.state as state

    g = mx.graph(made["scoped"])
    g.nodes["layer"] = [int(n.split("layers.")[1].split("/")[0]) if "layers." in n else None for n in g.nodes["name"]]
    g.nodes["module"] = ["attn" if "MatMul" in n else "mlp" for n in g.nodes["name"]]
    fake = {"kind": "diff", "layers": [0, 1, 2], "modules": ["attn", "mlp"],
            "color": {"label": "relative L2 (log scale)", "values": [[-5, -4], [-3, -2], [-1, 0]], "min": -6, "max": 0},
            "first": {"layer": 1, "module": "mlp"}}
    monkeypatch.setattr(state, "runs_state", lambda result: fake)
    index = GraphIndex(g, overlay=object())
    view = index.view(list(index.tree.boxes))
    by = {it["key"]: it for it in view["items"]}
    assert by["n:/model/layers.1/q_proj/MatMul"]["run"] == -3
    assert by["n:/model/layers.2/Softmax"]["run"] == 0
    assert view["first"] == "n:/model/layers.1/Add" and view["run"]["label"].startswith("relative L2")


def test_graph_show_and_runs_share_one_registry(made):
    from model_explorer.runs import display
    from model_explorer.widgets.graph_view import GraphView

    view = mx.graph(made["scoped"]).show()
    assert isinstance(view, GraphView) and view.view == "graph"
    assert view.answer("graph_view", {})[0]["total"] == len(onnx.load(str(made["scoped"])).graph.node)
    assert display.show is viewers.show and display.register is viewers.register
    with pytest.raises(RuntimeError, match="no widget is loaded for nothing"):
        viewers.show("nothing", None)
