"""The Explorer's kernel side on a file of each new format: bytes pages labelled by the reader's
spans, the header tree, the tensor table, statistics and histograms, tensor_at, the step-through
and the offline HTML report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from model_explorer.widgets import Explorer

from .builders import PT, TF_NAMES, flax_model_msgpack, keras_weights_h5, keras_zip, kinds_h5, tf_model_h5


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("views")
    return {"hdf5": tf_model_h5(d / "tf_model.h5"), "kinds": kinds_h5(d / "kinds.h5", libver="latest"),
            "keras": keras_zip(d / "model.keras", keras_weights_h5(d / "model.weights.h5")),
            "flax": flax_model_msgpack(d / "flax_model.msgpack")}


@pytest.mark.parametrize("kind", ["hdf5", "kinds", "keras", "flax"])
def test_explorer_answers_on_each_format(paths, kind):
    e = Explorer(paths[kind])
    ckpt = e.checkpoint
    assert ckpt.tensors and not [f for f in ckpt.findings if f.severity == "error"]
    raw = paths[kind].read_bytes()
    meta, (data,) = e.answer("bytes", {"offset": 0, "length": 4096})
    assert data == raw[:4096] and meta["segs"] and meta["spans"][meta["segs"][0][2]]["kind"] in ("magic", "zip_header", "count")
    rows = e.answer("table", {"sort": "name", "count": 100})[0]["rows"]
    assert {r["name"] for r in rows} == set(ckpt.tensors)
    plain = [n for n, t in ckpt.tensors.items() if not t.quant]
    name = max(plain, key=lambda n: ckpt.tensors[n].numel)
    t = ckpt.tensors[name]
    stats = e.answer("stats", {"name": name})[0]
    json.dumps(stats)
    values = ckpt.read(name).astype(np.float64)
    assert stats["min"] == pytest.approx(values.min()) and stats["max"] == pytest.approx(values.max())
    sel = e.answer("tensor_at", {"file": t.file, "offset": t.offset + 1})[0]
    assert sel["tensor"] == name and sel["offset"] == t.offset
    roots = e.answer("tree", {"expanded": []})[0]["rows"]
    assert roots
    found = e.answer("tree", {"expanded": [], "query": name.rsplit("/", 1)[-1]})[0]["rows"]
    assert found
    first = e.answer("step", {"index": 0})[0]
    seen = [e.answer("step", {"index": i})[0] for i in range(min(first["count"], 40))]
    assert all(s["text"] for s in seen)


def test_chunked_tensor_stats_through_h5py(paths):
    e = Explorer(paths["kinds"])
    stats = e.answer("stats", {"name": "w/gzip"})[0]
    assert "error" not in stats and stats["hist"]["counts"]


def test_offline_report_of_each_format(paths, tmp_path):
    for kind, path in paths.items():
        e = Explorer(path)
        html = open(e.save_html(tmp_path / f"{kind}.html"), encoding="utf-8").read()
        assert "me-report-data" in html
        first = next(iter(e.checkpoint.tensors))
        assert json.dumps(first)[1:-1] in html, kind


def test_tf_names_read_as_transformers_wrote_them(paths):
    e = Explorer(paths["hdf5"])
    rows = e.answer("table", {"query": "query/kernel"})[0]
    assert rows["total"] == 1
    assert rows["rows"][0]["name"] == TF_NAMES["bert.encoder.layer.0.attention.self.query.weight"]
    assert len(e.checkpoint.tensors) == len(PT)


@pytest.mark.parametrize("kind", ["hdf5", "flax"])
def test_every_span_kind_is_explained_in_words(paths, kind):
    from model_explorer.formats.kind_words import KIND_WORDS

    e = Explorer(paths[kind])
    first = e.answer("step", {"index": 0})[0]
    texts = [e.answer("step", {"index": i})[0] for i in range(first["count"])]
    for t in texts:
        assert "of kind" not in t["text"], t  # the fallback sentence: a kind without words
        if t["span"]["kind"] in KIND_WORDS:
            assert "{" not in t["text"]
