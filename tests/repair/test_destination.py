"""Where a repair may write, and what a failure leaves behind (nothing)."""

from __future__ import annotations

import errno
import os

import pytest

import model_explorer as mx
from model_explorer.repairs import RepairError, writer

from .conftest import llama_tensors, tree_hashes, write_folder


@pytest.fixture
def broken(tmp_path):
    return write_folder(tmp_path / "src", {"module." + k: v for k, v in llama_tensors().items()})


def test_refuses_the_source_and_inside_it(broken):
    for dest in (broken, broken / "fixed"):
        with pytest.raises(RepairError, match="source"):
            mx.repair(broken, dest)
    assert sorted(p.name for p in broken.iterdir()) == ["config.json", "model.safetensors"]


def test_refuses_a_file_destination_over_the_source_file(tmp_path, broken):
    src = broken / "model.safetensors"
    with pytest.raises(RepairError):
        mx.repair(src, src, overwrite=True)
    with pytest.raises(RepairError):  # the folder that holds it
        mx.repair(src, broken, overwrite=True)


def test_refuses_a_non_empty_destination_unless_overwrite(tmp_path, broken):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(RepairError, match="not empty"):
        mx.repair(broken, dest)
    report = mx.repair(broken, dest, overwrite=True)
    assert report.ok and (dest / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_failure_halfway_leaves_nothing_behind(tmp_path, broken, monkeypatch, err):
    """A disk that fills up (or turns out read-only) after the first tensors: no partial file
    under a final name, no staging folder, and the destination the repair created is gone."""
    calls = {"n": 0}
    real = writer.read_chunks

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(err, os.strerror(err))
        return real(*a, **k)

    monkeypatch.setattr(writer, "read_chunks", failing)
    before = tree_hashes(broken)
    dest = tmp_path / "dest"
    with pytest.raises(RepairError, match="full|read-only") as e:
        mx.repair(broken, dest)
    assert "Nothing was left behind" in str(e.value)
    assert not dest.exists()
    assert tree_hashes(broken) == before


def test_failure_in_an_existing_destination_removes_only_the_staging(tmp_path, broken, monkeypatch):
    dest = tmp_path / "dest"
    dest.mkdir()

    def boom(*a, **k):
        raise RuntimeError("a fix failed")

    monkeypatch.setattr("model_explorer.repairs.apply.write_safetensors", boom)
    with pytest.raises(RuntimeError):
        mx.repair(broken, dest)
    assert dest.exists() and os.listdir(dest) == []


def test_read_only_destination_folder(tmp_path, broken, monkeypatch):
    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(writer.tempfile, "mkdtemp", refuse)
    with pytest.raises(RepairError, match="read-only"):
        mx.repair(broken, tmp_path / "ro")
    assert not (tmp_path / "ro").exists()


def test_dry_run_writes_nothing(tmp_path, broken):
    report = mx.repair(broken, tmp_path / "dest", dry_run=True)
    assert report.applied and not report.ok and not (tmp_path / "dest").exists()


def test_progress_is_reported_in_bytes(tmp_path, broken):
    seen = []
    mx.repair(broken, tmp_path / "dest", progress=lambda done, total, what: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] and all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))


def test_a_repaired_copy_next_to_the_source_under_a_new_name(tmp_path):
    from .conftest import write_raw

    src = tmp_path / "m.safetensors"
    import numpy as np

    write_raw(src, {"a": np.ones((2, 2), np.float32)}, pad=False)
    report = mx.repair(src, tmp_path / "m.fixed.safetensors")
    assert report.ok and report.files == [str(tmp_path / "m.fixed.safetensors")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.fixed.safetensors", "m.safetensors"]
