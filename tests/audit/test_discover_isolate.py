"""Discovery groups files into models; the isolated child reports hangs, memory and crashes."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from model_explorer.audits import task
from model_explorer.audits.discover import discover
from model_explorer.audits.isolate import Failed, run_isolated

from .synth import small_tensors, write_gguf, write_safetensors, write_sharded


def test_folders_group_into_models(tmp_path):
    t = small_tensors(0)
    write_sharded(tmp_path / "llama", t, 3, {"model_type": "llama"})  # index: one model
    os.makedirs(tmp_path / "flat")
    write_safetensors(tmp_path / "flat" / "a.safetensors", t)  # no config: one model per file
    write_safetensors(tmp_path / "flat" / "b.safetensors", t)
    os.makedirs(tmp_path / "mlx")
    write_safetensors(tmp_path / "mlx" / "model.safetensors", t)
    (tmp_path / "mlx" / "config.json").write_text("{}")  # config beside weights: the folder
    os.makedirs(tmp_path / "gguf")
    for k in (1, 2):
        write_gguf(tmp_path / "gguf" / f"m-{k:05d}-of-00002.gguf", t)
    write_gguf(tmp_path / "gguf" / "other.gguf", t)
    (tmp_path / "notes.md").write_text("no weights here")
    found = discover(str(tmp_path))
    rel = sorted(os.path.relpath(p, tmp_path) for p in found)
    assert rel == ["flat/a.safetensors", "flat/b.safetensors", "gguf/m-00001-of-00002.gguf",
                   "gguf/other.gguf", "llama", "mlx"]


def test_globs_and_list_files(tmp_path):
    t = small_tensors(0)
    for n in ("a", "b", "c"):
        write_safetensors(tmp_path / f"{n}.safetensors", t)
    assert len(discover(str(tmp_path / "[ab].safetensors"))) == 2
    lst = tmp_path / "models.txt"
    lst.write_text("# two models\na.safetensors\n\n" + str(tmp_path / "c.safetensors") + "\nhttp://x/y.gguf\n")
    assert [os.path.basename(p) for p in discover(str(lst))] == ["a.safetensors", "c.safetensors", "y.gguf"]
    # given twice: audited once
    assert len(discover([str(tmp_path / "a.safetensors"), str(tmp_path / "a.safetensors")])) == 1


def test_fingerprint_changes_with_the_files(tmp_path):
    p = write_safetensors(tmp_path / "a.safetensors", small_tensors(0))
    before = task.fingerprint(p)["key"]
    assert task.fingerprint(p)["key"] == before
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert task.fingerprint(p)["key"] != before


def _hang():
    time.sleep(60)


def _hog():
    return np.ones(1 << 30, dtype=np.uint8).sum()  # 1 GiB against a 256 MiB cap


def _die():
    os.abort()


@pytest.mark.parametrize("fn,kind", [(_hang, "timeout"), (_hog, "memory"), (_die, "crashed")])
def test_isolated_failures(fn, kind):
    t0 = time.monotonic()
    with pytest.raises(Failed) as e:
        run_isolated(fn, (), timeout=1.0, memory_limit=256 * 2**20)
    assert e.value.kind == kind
    assert time.monotonic() - t0 < 10


def _alloc_100mib():
    return len(bytearray(100 * 2**20))


def test_the_cap_counts_from_what_the_child_inherits():
    """A worker that already reserves gigabytes (torch's arenas, a long session) must not fail
    every model it forks: the CI run that found this reported a false unknown_architecture."""
    import mmap

    reserved = mmap.mmap(-1, 6 * 2**30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # never touched
    try:
        assert run_isolated(_alloc_100mib, (), timeout=10, memory_limit=256 * 2**20) == 100 * 2**20
        with pytest.raises(Failed) as e:  # and the cap still holds above that
            run_isolated(_hog, (), timeout=10, memory_limit=256 * 2**20)
        assert e.value.kind == "memory"
    finally:
        reserved.close()


def test_isolated_result_comes_back():
    assert run_isolated(sorted, ([3, 1, 2],), timeout=5, memory_limit=256 * 2**20) == [1, 2, 3]


def test_a_hanging_model_is_a_row(tmp_path, monkeypatch):
    p = write_safetensors(tmp_path / "a.safetensors", small_tensors(0))
    monkeypatch.setattr(task, "_shallow", lambda source, opts: _hang())
    out = task.audit_model(p, {"timeout": 0.5, "memory_limit": 2**28})
    assert out["row"]["status"] == "timeout"
    assert [f["code"] for f in out["findings"]] == ["audit_timeout"]
    assert out["row"]["fingerprint"] and out["row"]["bytes"] > 0


def test_a_missing_model_is_unreadable(tmp_path):
    out = task.audit_model(str(tmp_path / "gone.safetensors"), {})
    assert out["row"]["status"] == "unreadable"
    assert out["findings"][0]["code"] == "unreadable"


def _item(x):
    if x == "hang":
        _hang()
    if x == "die":
        _die()
    return x * 2


def test_batch_survives_a_hang_and_a_crash():
    from model_explorer.audits.isolate import run_isolated_batch

    got = dict(run_isolated_batch(_item, [1, "hang", "die", 3], timeout=1.0, memory_limit=2**28))
    assert got[0] == 2 and got[3] == 6
    assert (got[1].kind, got[2].kind) == ("timeout", "crashed")


def test_scan_ranges_share_bytes_evenly():
    from model_explorer.audits.deepscan import _parts

    items = [(f"t{i}", 10) for i in range(10)]
    assert [len(p) for p in _parts(items, 1000, 2)] == [5, 5]  # at least one range per slot
    assert [len(p) for p in _parts(items, 25, 1)] == [2, 3, 2, 3]  # at most part_bytes each
    assert _parts([("a", 100), ("b", 1), ("c", 1), ("d", 100)], 10**6, 2) == [["a"], ["b", "c", "d"]]
    assert sum(_parts(items, 1000, 50), []) == [n for n, _ in items]  # never more ranges than tensors
    assert _parts([], 100, 4) == []
