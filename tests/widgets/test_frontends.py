"""What the Explorer answers front ends that draw no ipywidgets (marimo): the Fix… dialog as
data (fix_form, fix_write, fix_explore, fix_compare), and child widgets whose bundle marimo can
load although no cell runs (a data: URL there, the class's own file elsewhere)."""

from __future__ import annotations

import base64
import sys
import types

import widget_test_files as files

import model_explorer as mx
from model_explorer.widgets import _frontends
from model_explorer.widgets.explorer import Explorer


def test_fix_dialog_as_data_writes_opens_and_compares(tmp_path):
    folder = files.prefixed_folder(tmp_path / "prefixed")
    ex = mx.explore(folder)
    ex.fixable()
    index = next(i for i, f in enumerate(ex.checkpoint.findings) if f.code == "key_prefix")
    form, _ = ex.answer("fix_form", {"finding": index})
    assert [(f["name"], f["ticked"]) for f in form["fixes"]] == [("strip_prefix", True), ("tie_lm_head", False)]
    assert form["dest"] == str(folder) + ".fixed" and "strip_prefix" in form["plan"]
    done, _ = ex.answer("fix_write", {"fixes": ["strip_prefix"], "dest": form["dest"]})
    assert done["ok"] and "fixed  strip_prefix" in done["text"]
    assert "key_prefix" not in {f.code for f in mx.open(form["dest"]).findings}
    again, _ = ex.answer("fix_write", {"fixes": ["strip_prefix"], "dest": form["dest"]})
    assert not again["ok"] and again["text"].startswith("Not written")  # never over a copy
    ref, _ = ex.answer("fix_explore", {})
    assert ref["ref"] == f"anywidget:{ex.fixed_explorer.model_id}"
    assert isinstance(ex.fixed_explorer, Explorer)
    text, _ = ex.answer("fix_compare", {})
    assert "model.embed_tokens.weight" in text["text"]


def test_child_widgets_get_a_data_url_only_in_marimo(tmp_path, monkeypatch):
    gguf = files.small_gguf(tmp_path / "small.gguf")
    plain = _frontends.child_widget(Explorer, gguf)
    assert not plain._esm.startswith("data:")  # Jupyter: the bundle's code, as anywidget sends it
    fake = types.SimpleNamespace(running_in_notebook=lambda: True)
    monkeypatch.setitem(sys.modules, "marimo", fake)
    assert _frontends.in_marimo()
    child = _frontends.child_widget(Explorer, gguf)
    assert isinstance(child, Explorer) and type(child).__name__ == "Explorer"
    assert child._esm.startswith("data:text/javascript;base64,")
    assert base64.b64decode(child._esm.split(",", 1)[1]).decode() == plain._esm
