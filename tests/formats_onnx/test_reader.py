"""The ONNX reader against onnx itself: every tensor's values equal onnx.numpy_helper.to_array,
every header field is a span at its bytes, external data is read from its file."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from . import models

onnx = pytest.importorskip("onnx")


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_array_equal(got, want.astype(np.float32) if want.dtype != np.float64 else want)


def test_every_tensor_equals_onnx_numpy_helper(tmp_path):
    path = models.plain_model(tmp_path / "plain.onnx")
    want = models.reference(path)
    ckpt = mx.open(str(path))
    assert ckpt.format == "onnx" and [f for f in ckpt.findings if f.severity != "info"] == []
    assert set(ckpt.tensors) == set(want)
    for name, ref in want.items():
        got = ckpt.read(name)
        if ref.dtype == np.float64:
            np.testing.assert_array_equal(got, ref.astype(np.float32))
        else:
            _same(got, ref)
    # in-place tensors point at their bytes: raw_data and packed float_data are the values
    raw = path.read_bytes()
    w = ckpt.tensors["linear.weight"]
    assert raw[w.offset:w.end] == want["linear.weight"].astype("<f4").tobytes()
    f = ckpt.tensors["typed_float"]
    assert raw[f.offset:f.end] == want["typed_float"].astype("<f4").tobytes()
    assert ckpt.tensors["then.bias"].extra["onnx_graph"].endswith("If > then_branch")
    assert ckpt.tensors["const_out"].extra.get("constant")


def test_header_fields_are_spans_at_their_bytes(tmp_path):
    path = models.plain_model(tmp_path / "plain.onnx")
    ckpt = mx.open(str(path))
    spans = {s.path: s for s in ckpt.spans_for(str(path))}
    raw = path.read_bytes()
    ir = spans["ir_version"]
    assert raw[ir.offset] == 0x08 and ir.value == "10" and ckpt.meta("onnx.ir_version") == 10
    assert ckpt.meta("onnx.producer_name") == "model_explorer tests"
    assert ckpt.meta("onnx.opset_import") == f"ai.onnx {models.OPSET}"
    name = spans["graph > initializer > linear.weight > name"]
    assert raw[name.offset + 2:name.end] == b"linear.weight"
    dims = spans["graph > initializer > linear.weight > dims"]
    assert dims.value == "[8, 4]"
    data = [s for s in ckpt.spans_for(str(path)) if s.kind == "tensor_data" and s.tensor == "linear.weight"]
    assert len(data) == 1 and data[0].offset == ckpt.tensors["linear.weight"].offset
    nodes = [s.path for s in ckpt.spans_for(str(path)) if s.kind == "node"]
    assert "graph > node 2 If" in nodes and any("then_branch > node 0 Add" in p for p in nodes)
    ops = ckpt.details["files"][str(path)]["onnx"]["ops"]
    assert ops["If"] == 1 and ops["Add"] == 2


def test_external_data_is_read_from_the_file_beside(tmp_path):
    path = models.external_model(tmp_path / "model.onnx")
    want = models.reference(path)
    ckpt = mx.open(str(path))
    assert [f for f in ckpt.findings if f.severity != "info"] == []
    data = str(tmp_path / "model.onnx_data")
    assert ckpt.tensors["big.weight"].file == data and ckpt.tensors["small"].file == str(path)
    assert data in ckpt.files and ckpt.sizes[data] == (tmp_path / "model.onnx_data").stat().st_size
    for name, ref in want.items():
        _same(ckpt.read(name), ref)
    assert any(s.tensor == "big.weight" for s in ckpt.spans_for(data))


def test_missing_and_short_external_files_are_errors_at_the_reference(tmp_path):
    path = models.external_model(tmp_path / "model.onnx")
    data = tmp_path / "model.onnx_data"
    data.write_bytes(data.read_bytes()[:100])
    ckpt = mx.open(str(path))
    short = [f for f in ckpt.findings if f.code == "onnx_external_short"]
    assert short and all(f.file == str(path) for f in short)
    raw = path.read_bytes()
    assert b"location" in raw[short[0].offset:short[0].offset + short[0].length]
    with pytest.raises(ValueError, match="ends before"):
        ckpt.read(short[0].tensor)
    data.unlink()
    ckpt = mx.open(str(path))
    missing = {f.tensor for f in ckpt.findings if f.code == "onnx_external_missing"}
    assert missing == {"big.weight", "big.half"}
    assert np.array_equal(ckpt.read("small"), np.ones(2, np.float32))


def test_external_location_outside_the_folder_is_not_opened(tmp_path):
    from onnx import numpy_helper

    (tmp_path / "secret").write_bytes(b"\0" * 64)
    inner = tmp_path / "m"
    inner.mkdir()
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", "../secret"), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    model = models._model([], [t], [], [models.value("w", shape=[4])])
    (inner / "m.onnx").write_bytes(model.SerializeToString())
    ckpt = mx.open(str(inner / "m.onnx"))
    assert [f.code for f in ckpt.findings if f.severity == "error"] == ["onnx_external_path"]
    assert str(tmp_path / "secret") not in ckpt.files
    with pytest.raises(ValueError, match="leaves the model's folder"):
        ckpt.read("w")


def test_detect_names_onnx_by_its_bytes(tmp_path):
    from model_explorer.formats.detect import detect, identify

    path = models.plain_model(tmp_path / "weights.bin")
    raw = path.read_bytes()
    assert detect(raw[:512], len(raw)) == "onnx"
    assert identify(lambda o, n: raw[o:o + n], len(raw)).reads_as == "onnx"
    ckpt = mx.open(str(path))
    assert ckpt.format == "onnx" and "extension_mismatch" in {f.code for f in ckpt.findings}
    assert mx.open(str(models.plain_model(tmp_path / "w.onnx"))).findings == []


def test_over_http_the_header_is_walked_and_payloads_are_not_fetched(served):
    """A remote model: the walk reads the graph's bytes, not the tensors' (a 2 MB raw_data
    initializer stays on the server until a view asks for it); external data is sized by a
    range read and decoded like a local file."""
    folder, base, server = served
    from onnx import numpy_helper

    big = models.RNG.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB inline
    model = models._model([], [numpy_helper.from_array(big, "inline.weight")], [],
                          [models.value("y")])
    onnx.save_model(model, str(folder / "inline.onnx"))
    ckpt = mx.open(f"{base}/inline.onnx")
    assert ckpt.format == "onnx" and list(ckpt.tensors) == ["inline.weight"]
    assert server.bytes_sent < 256 * 1024 and not [f for f in ckpt.findings if f.severity == "error"]
    np.testing.assert_array_equal(ckpt.read("inline.weight", rows=slice(0, 2)), big[:2])
    models.external_model(folder / "model.onnx")
    want = models.reference(folder / "model.onnx")
    ckpt = mx.open(f"{base}/model.onnx")
    assert [f for f in ckpt.findings if f.severity != "info"] == []
    for name, ref in want.items():
        _same(ckpt.read(name), ref)


def test_a_folder_of_onnx_files_opens_model_onnx(tmp_path):
    models.plain_model(tmp_path / "model_fp16.onnx")
    models.external_model(tmp_path / "model.onnx")
    ckpt = mx.open(str(tmp_path))
    assert ckpt.format == "onnx" and "big.weight" in ckpt.tensors
    (f,) = [f for f in ckpt.findings if f.code == "several_models"]
    assert "model_fp16.onnx" in f.message


def test_three_initializers_of_one_name_are_three_tensors(tmp_path):
    """The rename of a repeated name is unique: a third `w` must not overwrite the second."""
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(np.full(2, float(k), np.float32), "w") for k in range(3)]
    path = tmp_path / "dup.onnx"
    onnx.save_model(helper.make_model(helper.make_graph([], "g", [], [], inits)), str(path))
    ckpt = mx.open(str(path))
    assert len(ckpt.tensors) == 3
    assert sorted(float(ckpt.read(n)[0]) for n in ckpt.tensors) == [0.0, 1.0, 2.0]
    assert all(ckpt.tensors[n].extra.get("graph_name", n) == "w" for n in ckpt.tensors)


def test_the_graph_is_kept_as_a_structure_record(tmp_path):
    """Every node of every (sub)graph with its subgraph path, its bytes and all its inputs; the
    main graph's inputs and outputs: on the FileResult and on the checkpoint, from the one parse."""
    from onnx import helper

    path = models.plain_model(tmp_path / "plain.onnx")
    ckpt = mx.open(str(path))
    g = ckpt.structures[str(path)]
    assert g.format == "onnx" and g.complete
    model = onnx.load(str(path))
    main = [n.op_type for n in model.graph.node]
    assert [n.op_type for n in g.nodes if n.graph == "graph"] == main
    branches = {n.graph for n in g.nodes} - {"graph"}
    assert branches == {"graph > node 2 If > then_branch", "graph > node 2 If > else_branch"}
    raw = path.read_bytes()
    matmul = next(n for n in g.nodes if n.op_type == "MatMul")
    assert matmul.inputs == ["x", "linear.weight"] and matmul.outputs == ["y0"]
    want = next(n for n in model.graph.node if n.op_type == "MatMul").SerializeToString()
    assert raw[matmul.at:matmul.at + matmul.length].endswith(want)
    assert [v.name for v in g.inputs] == ["x", "cond"] and [v.name for v in g.outputs] == ["y"]
    assert g.inputs[0].shape == (1, 8) and g.op_counts()["MatMul"] == 1
    # a node with more inputs than the old cap of 4096 keeps every one
    many = [f"v{i}" for i in range(5000)]
    wide = helper.make_model(helper.make_graph([helper.make_node("Concat", many, ["out"], axis=0)], "g",
                                               [], []))
    onnx.save_model(wide, str(tmp_path / "wide.onnx"))
    (node,) = mx.open(str(tmp_path / "wide.onnx")).structures[str(tmp_path / "wide.onnx")].nodes
    assert node.inputs == many
