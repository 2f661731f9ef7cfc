"""One hostile file must not stop an audit (issue 45): values no int64 holds, names no encoder
writes, side files of any JSON shape, and workers that crash, hang or blow the memory cap each
give a row while the rest finish; the CLI and the widgets print and send such names escaped."""

from __future__ import annotations

import contextlib
import io
import json
import re
import struct

import pandas as pd
import pytest

import model_explorer as mx
from model_explorer.audits import task
from model_explorer.audits.tables import read_parquet
from model_explorer.cli import main

from .synth import small_tensors, write_safetensors

pytest.importorskip("pyarrow")


def _raw_safetensors(path, header: bytes, data: bytes) -> str:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return str(path)


def hostile_files(folder) -> dict[str, str]:
    """The three cases of the issue, one file (or folder) each."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {
        "big_offsets": _raw_safetensors(folder / "big_offsets.safetensors", json.dumps(
            {"w": {"dtype": "F32", "shape": [2], "data_offsets": [2**64, 2**64 + 8]}}).encode(), bytes(8)),
        "big_shape": _raw_safetensors(folder / "big_shape.safetensors", json.dumps(
            {"w": {"dtype": "F32", "shape": [10**30], "data_offsets": [0, 8]}}).encode(), bytes(8)),
        "surrogate": _raw_safetensors(
            folder / "surrogate.safetensors",
            b'{"\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
            b'"ok\\u202eevil\\u001b[2J": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}',
            bytes(16)),
    }
    side = folder / "with_labels"
    side.mkdir(exist_ok=True)
    write_safetensors(side / "model.safetensors", small_tensors(3))
    (side / "labels.json").write_text(json.dumps({"labels": [["a", "b"], ["c"]], "nested":
                                                  {"x": [1, {"y": 2}]}, "big": 2**70}))
    (side / "config.json").write_text(json.dumps({"model_type": "bert", "id2label": {"0": ["x"]},
                                                  "vocab_size": 10**30}))
    out["labels"] = str(side)
    return out


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    hostile = hostile_files(root / "tree" / "hostile")
    for i in range(3):
        write_safetensors(root / "tree" / f"healthy{i}.safetensors", small_tensors(i))
    return root, hostile


def _check(result, hostile, expected_models: int) -> None:
    models, findings = result
    assert len(models) == expected_models and models["source"].is_unique
    assert (models["status"] == "ok").all(), models[["source", "status", "error"]]
    assert result.exit_code == 1
    big = {r["source"]: json.loads(r["big_ints"]) for r in models.to_dict("records") if isinstance(r["big_ints"], str)}
    assert big[hostile["big_shape"]]["parameters"] == str(10**30)  # exact, as text
    offsets = findings[findings["source"] == hostile["big_offsets"]]
    exact = [int(json.loads(b)["offset"]) for b in offsets["big_ints"].dropna() if "offset" in b]
    assert exact and all(2**64 < n < 2**64 + 256 for n in exact), offsets  # exact, past int64
    names = " ".join(findings[findings["source"] == hostile["surrogate"]]["message"])
    assert "⟨U+D800⟩" in names and "\ud800" not in names


def test_each_case_alone(tmp_path):
    hostile = hostile_files(tmp_path / "h")
    for name, path in hostile.items():
        result = mx.audit(path, out=tmp_path / f"{name}.parquet", sarif=tmp_path / f"{name}.sarif",
                          html=tmp_path / f"{name}.html", workers=0, progress=False)
        assert len(result.models) == 1 and result.exit_code in (0, 1), (name, result.models)
        back = read_parquet(tmp_path / f"{name}.parquet")
        assert back.models["source"].tolist() == result.models["source"].tolist()
        json.loads((tmp_path / f"{name}.sarif").read_text())
        assert "<html" in (tmp_path / f"{name}.html").read_text()


def test_mixed_into_a_healthy_tree_in_process(mixed, tmp_path):
    root, hostile = mixed
    result = mx.audit(str(root / "tree"), out=tmp_path / "r.parquet", sarif=tmp_path / "r.sarif",
                      html=tmp_path / "r.html", workers=0, progress=False, deep=True)
    _check(result, hostile, 7)
    back = read_parquet(tmp_path / "r.parquet")
    assert back.models.drop(columns=["seconds"]).equals(result.models.drop(columns=["seconds"]))
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    text = json.dumps(sarif, ensure_ascii=False)
    assert "⟨U+D800⟩" in text and not re.search("[\ud800-\udfff\u202e\x1b]", text)
    page = (tmp_path / "r.html").read_text()
    assert "\u202e" not in page and "\x1b" not in page


def test_mixed_into_a_healthy_tree_on_dask(mixed, cluster):
    root, hostile = mixed
    _check(mx.audit(str(root / "tree"), client=cluster, progress=False), hostile, 7)


def test_the_whole_hostile_corpus_in_one_run(tmp_path, cluster):
    from .corpus import hostile, peer

    marker = tmp_path / "PWNED"
    files = hostile(tmp_path / "tree" / "pickles", marker) + peer(tmp_path / "tree" / "peer")
    ours = hostile_files(tmp_path / "tree" / "values")
    here = mx.audit(str(tmp_path / "tree"), workers=0, progress=False)
    there = mx.audit(str(tmp_path / "tree"), client=cluster, progress=False)
    for result in (here, there):
        assert len(result.models) == len(files) + len(ours)
        assert result.exit_code == 1 and (result.models["status"] == "ok").all()
    assert sorted(here.models["source"]) == sorted(there.models["source"])
    assert not marker.exists()


def _hang():
    import time

    time.sleep(60)


def _hog():
    import numpy as np

    return np.ones(1 << 30, dtype=np.uint8).sum()


@pytest.mark.parametrize("plant,status", [("crash", "crashed"), ("hang", "timeout"), ("hog", "memory")])
def test_a_planted_fault_is_a_row_and_the_rest_finish(tmp_path, monkeypatch, plant, status):
    """The forked child inherits this patched reader: the planted file makes its worker die,
    hang or allocate past the cap; the healthy files beside it are read as usual."""
    import os

    for i in range(2):
        write_safetensors(tmp_path / f"healthy{i}.safetensors", small_tensors(i))
    planted = write_safetensors(tmp_path / f"{plant}.safetensors", small_tensors(9))
    real = task._shallow

    def shallow(source, opts):
        if source == planted:
            {"crash": lambda: os.abort(), "hang": _hang, "hog": _hog}[plant]()
        return real(source, opts)

    monkeypatch.setattr(task, "_shallow", shallow)
    result = mx.audit(str(tmp_path), workers=0, progress=False, timeout=2.0, memory_limit="256MiB")
    by = dict(zip(result.models["source"], result.models["status"]))
    assert by.pop(planted) == status
    assert set(by.values()) == {"ok"} and len(by) == 2
    assert result.exit_code == 2  # a model could not be read: said, never a traceback


def _cli(argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    return code, out.getvalue()


def test_every_command_prints_the_names_escaped(mixed, tmp_path):
    _, hostile = mixed
    path = hostile["surrogate"]
    other = write_safetensors(tmp_path / "other.safetensors", small_tensors(1))
    for argv in (["info", path], ["doctor", path], ["hexdump", path], ["scan", path],
                 ["diff", path, other], ["audit", path, "--workers", "0"]):
        code, text = _cli(argv)
        assert code in (0, 1), (argv, text[-400:])
        assert "internal error" not in text
        text.encode("utf-8")  # nothing an encoder refuses
        assert "\x1b" not in text and "\u202e" not in text, argv
        if argv[0] in ("info", "hexdump", "scan"):
            assert "⟨U+D800⟩" in text, argv


def test_widget_state_and_answers_are_valid_utf8_json(mixed):
    _, hostile = mixed
    w = mx.explore(hostile["surrogate"])
    state = {k: v for k, v in w.get_state().items() if not isinstance(v, (bytes, memoryview))}
    text = json.dumps(state, ensure_ascii=False, default=str)
    text.encode("utf-8")
    assert "⟨U+D800⟩" in text
    from model_explorer.widgets._safe import SafeState

    escaped = SafeState._trait_to_json({"name": "\ud800", "rows": [["ok\u202e", 1]]}, w)
    assert escaped == {"name": "⟨U+D800⟩", "rows": [["ok⟨U+202E⟩", 1]]}
    assert SafeState._trait_from_json(escaped, w) == {"name": "\ud800", "rows": [["ok\u202e", 1]]}


def test_unwritable_row_is_a_row_not_the_end(monkeypatch, tmp_path):
    from model_explorer.audits import cells

    write_safetensors(tmp_path / "a.safetensors", small_tensors(0))
    write_safetensors(tmp_path / "b.safetensors", small_tensors(1))
    real = cells.clean_row

    def broken(row, schema):
        out = real(row, schema)
        if str(out.get("source", "")).endswith("a.safetensors") and out.get("status") == "ok":
            out["files"] = "not a number"  # what no int64 column takes
        return out

    monkeypatch.setattr(cells, "clean_row", broken)
    monkeypatch.setattr("model_explorer.audits.tables.clean_row", broken)
    result = mx.audit(str(tmp_path), workers=0, progress=False)
    by = dict(zip(result.models["source"].map(lambda s: s.rsplit("/", 1)[-1]), result.models["status"]))
    assert by == {"a.safetensors": "unwritable", "b.safetensors": "ok"}
    assert "whose rows could not be written" in result.summary
    assert isinstance(result.models, pd.DataFrame)
