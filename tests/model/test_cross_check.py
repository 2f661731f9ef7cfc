"""Opening never imports torch; transformers' cross-check runs when something asks for it: doctor,
`ckpt.cross_check()`, and the Model tab of an Explorer (in the background)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from widgets.widget_test_files import starcoder2_missing_a_tensor  # tests/ is on the path

import model_explorer as mx

from .conftest import tiny_cfg, tiny_state, write_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def _starcoder2_missing_a_tensor(tmp_path):
    return starcoder2_missing_a_tensor(tmp_path / "sc2")


def test_open_imports_no_torch(tmp_path):
    d = write_folder(tmp_path / "m", tiny_cfg(), tiny_state(tiny_cfg()))
    code = (f"import sys, model_explorer as mx; c = mx.open({str(d)!r}); mx.explore(c)\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_cross_check_adds_what_only_transformers_knows(tmp_path):
    d = _starcoder2_missing_a_tensor(tmp_path)
    ckpt = mx.open(d)
    assert not [f for f in ckpt.findings if f.code == "missing_tensors"]
    added = ckpt.cross_check()
    assert [f.code for f in added] == ["missing_tensors"]
    assert "model.layers.1.mlp.c_fc.weight" in added[0].message and added[0] in ckpt.findings
    assert ckpt.cross_check() == []  # once
    assert [f.code for f in mx.open(d, cross_check=True).findings if f.code == "missing_tensors"] == ["missing_tensors"]


def test_cross_check_replaces_the_open_time_findings(tmp_path):
    state = tiny_state(tiny_cfg())
    del state["model.layers.1.mlp.up_proj.weight"]
    ckpt = mx.open(write_folder(tmp_path / "m", state=state))
    before = [f for f in ckpt.findings if f.code == "missing_tensors"]
    assert len(before) == 1 and "built-in Llama table" in before[0].message
    assert ckpt.cross_check() == []  # nothing new: the same finding, now in transformers' words
    after = [f for f in ckpt.findings if f.code == "missing_tensors"]
    assert len(after) == 1 and "transformers" in after[0].message


def test_model_tab_runs_the_cross_check_in_the_background(tmp_path):
    ex = mx.explore(_starcoder2_missing_a_tensor(tmp_path))
    assert ex.model_findings == []
    ex.answer("model_card", {})
    ex.start_cross_check().join(120)
    assert [f["code"] for f in ex.model_findings] == ["missing_tensors"]
