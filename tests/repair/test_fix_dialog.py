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
    # Both buttons work from the dialog alone (it imports neither the Explorer nor the public face).
    shown = []
    import IPython.display

    monkey = pytest.MonkeyPatch()
    monkey.setattr(IPython.display, "display", shown.append)
    try:
        d._show("explore")
        d._show("diff")
    finally:
        monkey.undo()
    assert type(shown[0]).__name__ == "Explorer" and shown[0].checkpoint.source == report.dest
    assert set(shown[1]["status"]) == {"added", "removed"}  # the prefix stripped: every name differs


def test_names_for_files(tmp_path):
    (tmp_path / "m.bin").write_bytes(b"")
    assert fixed_name(tmp_path / "m.bin") == str(tmp_path / "m.fixed.safetensors")


def test_a_split_gguf_gets_a_folder_keeping_the_split_names(tmp_path):
    import model_explorer as mx

    from .test_gguf import make_split

    parts = make_split(tmp_path / "src")  # m-0000N-of-00003.gguf, written by gguf-py
    assert [p.name for p in parts] == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for part in parts:  # whichever split is opened, the copy is the model's folder
        assert fixed_name(part) == str(tmp_path / "src" / "m.fixed")
    d = FixDialog(parts[1], gguf_set={"tokenizer.ggml.pre": "llama-bpe"})
    assert d.dest.value == str(tmp_path / "src" / "m.fixed")
    report = d.run()
    assert report is not None and report.ok, d.out.outputs
    out = tmp_path / "src" / "m.fixed"
    assert sorted(p.name for p in out.iterdir()) == [p.name for p in parts]
    assert mx.open(out).metadata["tokenizer.ggml.pre"].value == "llama-bpe"
    assert len(mx.open(out).files) == 3 and not d.open_fixed.disabled
    assert fixed_name(parts[0]) == str(tmp_path / "src" / "m.fixed-2")
    # A one-file GGUF keeps the file suffix; a name that only looks split (00001-of-00001) too.
    (tmp_path / "one-00001-of-00001.gguf").write_bytes(b"")
    assert fixed_name(tmp_path / "one-00001-of-00001.gguf") == str(tmp_path / "one-00001-of-00001.fixed.gguf")
