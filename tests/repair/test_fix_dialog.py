"""The Fix… dialog writes the ticked fixes to a new name next to the source."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from model_explorer.widgets.fix_dialog import FixDialog, fixed_name  # noqa: E402

from .conftest import llama_tensors, tree_hashes, write_folder  # noqa: E402


def test_dialog_writes_next_to_the_source(tmp_path):
    tensors = llama_tensors()
    del tensors["lm_head.weight"]
    src = write_folder(tmp_path / "model", {"module." + k: v for k, v in tensors.items()})
    before = tree_hashes(src)
    d = FixDialog(src)
    assert d.dest.value == str(tmp_path / "model.fixed")
    assert [b.value for b in d.boxes] == [True, True]
    d.boxes[1].value = False  # only the prefix
    report = d.run()
    assert report.ok and [f.name for f in report.applied] == ["strip_prefix"]
    assert d.bar.value == 100 and not d.compare.disabled
    assert tree_hashes(src) == before
    assert fixed_name(src) == str(tmp_path / "model.fixed-2")


def test_names_for_files(tmp_path):
    (tmp_path / "m.bin").write_bytes(b"")
    assert fixed_name(tmp_path / "m.bin") == str(tmp_path / "m.fixed.safetensors")
