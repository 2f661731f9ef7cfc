"""The offline report carries what a reader needs (statistics, histograms, first bytes of every
tensor) and stays small: the packed data decodes back to what the live Explorer answers."""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import widget_test_files as files

from model_explorer.widgets import Explorer, _report
from model_explorer.widgets._report import front_code, rle

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _unrle(runs):
    return [v for v, n in zip(runs[::2], runs[1::2]) for _ in range(n)]


def _names(packed):
    out, prev = [], ""
    for n, s in zip(_unrle(packed["shared"]), packed["suffix"]):
        prev = prev[:n] + packed["strings"][s]
        out.append(prev)
    return out


def _data(path) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="me-report-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


def test_packing_round_trips():
    assert rle([1, 1, 1, 0, 0.0, "a"]) == [1, 3, 0, 1, 0.0, 1, "a", 1]
    names = ["model.layers.0.w", "model.layers.0.b", "model.layers.1.w", "x", ""]
    assert _names(front_code(names)) == names


def test_report_carries_stats_and_first_bytes_of_every_tensor(made, tmp_path):
    e = Explorer(made["gguf"])
    data = _data(e.save_html(tmp_path / "r.html"))
    names = list(e.checkpoint.tensors)
    assert _names(data["table"]["names"])[:len(names)] == names
    st = data["tensor_stats"]
    assert st["count"] == st["of"] == len(names) and not st["errors"]
    floats = np.frombuffer(base64.b64decode(st["floats"]), "<f4").reshape(-1, 4)
    hist = np.frombuffer(base64.b64decode(st["hist"]), np.uint8).reshape(-1, st["bins"])
    for i, name in enumerate(names):
        live = e.answer("stats", {"name": name, "bins": st["bins"]})[0]
        assert floats[i][0] == pytest.approx(live["min"], rel=1e-6)
        assert floats[i][3] == pytest.approx(live["std"], rel=1e-6)
        peak = _unrle(st["peak"])[i]
        assert peak == max(live["hist"]["counts"])
        back = np.rint(hist[i].astype(float) * peak / 255)
        assert np.all(np.abs(back - live["hist"]["counts"]) <= peak / 255)
        assert [c > 0 for c in hist[i]] == [c > 0 for c in live["hist"]["counts"]]
    if any(live.get("scales") for live in [e.answer("stats", {"name": n})[0] for n in names]):
        assert st["scales"]
    heads = base64.b64decode(data["heads"]["bytes"])
    lengths = _unrle(data["heads"]["lengths"])
    pos = 0
    for t, n in zip(e.checkpoint.tensors.values(), lengths):
        assert heads[pos:pos + n] == e.checkpoint.read_bytes(t.offset, min(16, t.length), t.file)
        pos += n


def test_report_lists_missing_tensors_and_the_readable_count(made, tmp_path):
    data = _data(Explorer(made["index"]).save_html(tmp_path / "r.html"))
    t = data["table"]
    names = _names(t["names"])
    marks = {names[int(i)]: m for i, m in t["marks"].items()}
    assert marks["model.layers.2.w"] == ["missing", "missing: shard model-00003-of-00003.safetensors"]
    assert data["state"]["summary"]["readable_indexed_tensors"] == 3


def test_report_stats_cap_says_what_is_left_out(made, tmp_path, monkeypatch):
    monkeypatch.setattr(_report, "MAX_STATS", 2)
    data = _data(Explorer(made["gguf"]).save_html(tmp_path / "r.html"))
    assert data["tensor_stats"]["count"] == 2 < data["tensor_stats"]["of"]


@pytest.mark.slow
def test_20000_tensor_report_is_under_3_mb(tmp_path):
    """The issue's folder: 50 shards of 400 tensors, one shard deleted (benchmarks/bench_report.py)."""
    from bench_report import TARGET, write_folder

    folder = write_folder(tmp_path / "model")
    e = Explorer(str(folder))
    path = e.save_html(tmp_path / "r.html")
    size = Path(path).stat().st_size
    assert size < TARGET, size
    data = _data(path)
    assert data["tensor_stats"]["count"] == 19_600 and data["table"]["count"] == 20_000
    assert data["state"]["summary"]["indexed_tensors"] == 20_000


def test_report_carries_the_model_card_and_the_fixable_findings(made, tmp_path):
    e = Explorer(made["gguf"])
    data = _data(e.save_html(tmp_path / "g.html"))
    assert data["model_card"] == json.loads(json.dumps(e.answer("model_card", {})[0]))
    assert any(r["name"] == "layers" for r in data["model_card"]["rows"])
    data = _data(Explorer(made["index"]).save_html(tmp_path / "i.html"))
    assert set(data["fixable"]["by_finding"]) == {"0", "2"}
    assert "cannot write fixes" in data["fixable"]["note"]


def test_report_carries_the_layer_profile_of_its_sampled_statistics(tmp_path):
    llama = files.damaged_llama(tmp_path / "damaged.safetensors")
    e = Explorer(llama)
    layers = _data(e.save_html(tmp_path / "l.html"))["layers"]
    assert layers["total"] == 54 and set(layers["summaries"]) == {"norm", "std", "absmax"}
    live = files.profile_by_requests(Explorer(llama))
    norm = layers["summaries"]["norm"]
    assert layers["names"] == live["names"] and layers["counts"] == live["counts"]
    for got, want in zip(norm["values"], live["values"]):
        assert got == pytest.approx(want, rel=1e-6)
    assert [(m["layer"], m["role"], m["kind"]) for m in norm["marks"]] == \
        [(m["layer"], m["role"], m["kind"]) for m in live["marks"]]
    # No layers, or more cells than a report holds: a note instead.
    assert "No repeated blocks" in _data(Explorer(made_xss(tmp_path)).save_html(tmp_path / "x.html"))["layers"]["note"]


def made_xss(tmp_path):
    return files.xss_safetensors(tmp_path / "xss.safetensors")


def test_report_leaves_out_a_profile_too_big_for_it(monkeypatch):
    from model_explorer.widgets import _layers

    monkeypatch.setattr(_layers, "MAX_REPORT_CELLS", 10)
    rows = [{"name": f"model.layers.{i}.mlp.{p}.weight", "numel": 4, "min": -1.0, "max": 1.0 + i, "mean": 0.0,
             "std": 1.0 + i / 10, "nan": 0, "inf": 0} for i in range(4) for p in ("up_proj", "down_proj", "gate_proj")]
    out = _layers.report_profiles(rows)
    assert out["total"] == 0 and "more than a saved report holds" in out["note"]
