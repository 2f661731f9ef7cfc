"""The Explorer's Python side on one file of each new format: the hexdump names the bytes, the
tree and table list the tensors, statistics decode them, step-through explains every span, the
static HTML is inert."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.widgets import Explorer
from model_explorer.widgets._pages import explain

from . import ct2_files as C
from .ggml_files import legacy_file, quantized


def _ggjt(d):
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    p = d / "ggml-model-q4_0.bin"
    p.write_bytes(legacy_file(tensors=[("tok_embeddings.weight", (4, 64), 2, quantized(w, "Q4_0")),
                                       ("norm.weight", (64,), 0, quantized(w[0], "F32"))]))
    return p, "tok_embeddings.weight"


def _ct2(d):
    w = np.arange(-8, 8, dtype=np.int8).reshape(2, 8)
    data = (C.header() + struct.pack("<I", 2) + C.variable(b"decoder/w", w, 1)
            + C.variable(b"decoder/w_scale", np.array([100.0, 50.0], np.float32), 0)
            + struct.pack("<I", 0))
    p = d / "model.bin"
    p.write_bytes(data)
    return p, "decoder/w"


def _tflite(d):
    pytest.importorskip("ai_edge_litert")
    from . import tflite_files as T

    p = d / "model.tflite"
    p.write_bytes(T.model_bytes(T.standard_consts(np.random.default_rng(0))))
    return p, "conv.weight_int8"


def _openvino(d):
    pytest.importorskip("openvino")
    from . import ov_files as O

    return O.hand_patterns(d), "w_i4"


@pytest.mark.parametrize("make", [_ggjt, _ct2, _tflite, _openvino], ids=["ggml", "ctranslate2", "tflite", "openvino"])
def test_explorer_answers_on_each_format(tmp_path, make):
    path, weight = make(tmp_path)
    e = Explorer(path)
    ckpt = e.checkpoint
    assert e.summary["tensor_count"] == len(ckpt.tensors) > 0
    # hexdump: the first page names its bytes, for the header file and every file tensors live in
    for file in ckpt.files:
        meta, (data,) = e.answer("bytes", {"file": file, "offset": 0, "length": 4096})
        assert data == open(file, "rb").read(4096)
        assert meta["spans"], file
    # tree and table list every tensor; the weight is located
    table = e.answer("table", {"sort": "name", "count": 500})[0]
    assert table["total"] == len(ckpt.tensors)
    found = e.answer("table", {"locate": weight})[0]
    assert found["rows"][found["index"] - found["start"]]["name"] == weight
    tree = e.answer("tree", {"expanded": [], "locate": weight})[0]
    assert tree["rows"][tree["index"] - tree["start"]]["tensor"] == weight
    # statistics decode the quantized weight, never the codes
    st = e.answer("stats", {"name": weight})[0]
    assert "error" not in st, st
    values = ckpt.read(weight)
    assert st["min"] == pytest.approx(float(values.min())) and st["max"] == pytest.approx(float(values.max()))
    json.dumps(st)
    # a byte of the weight's data selects it
    info = ckpt.tensors[weight]
    sel = e.answer("tensor_at", {"file": info.file, "offset": info.offset})[0]
    assert sel["tensor"] == weight
    # step-through explains every span in plain words
    first = e.answer("step", {"index": 0})[0]
    assert first["count"] > 3 and first["text"]
    for s in ckpt.spans:
        assert explain(s, ckpt.format).endswith(".")
    page = e._repr_mimebundle_()[0]["text/html"]
    assert "<script" not in page
    out = e.save_html(tmp_path / "report.html")
    assert "me-report-data" in open(out, encoding="utf-8").read()


def test_names_from_files_are_never_markup(tmp_path):
    evil = "<img src=x onerror=alert(1)>"
    p = tmp_path / "model.bin"
    p.write_bytes(C.header() + struct.pack("<I", 1) + C.variable(evil.encode(), np.ones(2, np.float32), 0)
                  + struct.pack("<I", 0))
    e = Explorer(p)
    assert evil in e.checkpoint.tensors
    assert evil not in e._repr_mimebundle_()[0]["text/html"]
    text = open(e.save_html(tmp_path / "r.html"), encoding="utf-8").read()
    assert "<img src=x" not in text


def test_open_reports_the_format_and_its_findings(tmp_path):
    p, _ = _ggjt(tmp_path)
    ckpt = mx.open(str(p))
    summary = ckpt.summary()
    assert summary["format"] == "ggml" and summary["tensor_count"] == 2
    assert [f.code for f in ckpt.findings] == ["ggml_legacy"]
