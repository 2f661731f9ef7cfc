"""A torch file cut short (a download that stopped) is one `truncated` finding: how much is
there, where it ends, the first tensor cut and how many are wholly present; those read equal
to torch.load's values of the whole file. Cuts are swept through zip and legacy files torch
wrote, and every one is checked against the uncut file.
"""

from __future__ import annotations

import re
import zipfile

import pytest

import model_explorer as mx
from model_explorer.formats.pytorch import read_torch_legacy, read_torch_zip
from model_explorer.formats.truncation import percent
from model_explorer.hexview import END_KIND
from model_explorer.sources import LocalSource

from .helpers import dump_bytes, flatten, storage_view, torch_bytes

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.reference,
              pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")]

MESSAGE = re.compile(r"(?P<file>\S+) ends at byte (?P<size>[\d,]+) of (?P<expected>[\d,]+) expected "
                     r"\((?P<pct>\d+\.\d) %\): tensor (?P<first>\S+) is the first cut; "
                     r"(?P<present>[\d,]+) of (?P<total>[\d,]+) tensors are wholly present$")
READERS = {"zip": read_torch_zip, "legacy": read_torch_legacy}


def _whole(path):
    """name -> (offset, end) of each tensor's bytes in the uncut file, and torch's values."""
    full = mx.open(path)
    assert not full.errors
    spans = {n: (t.offset, t.offset + t.length) for n, t in full.tensors.items()}
    return spans, flatten(torch.load(path, weights_only=True))


def _cut_points(size: int, pickle_end: int) -> list[int]:
    """Every 53rd byte after the pickle, every 7th in the last 1,200 (descriptors, records,
    the directory) and a few inside the pickle."""
    points = set(range(pickle_end, size, 53)) | set(range(max(pickle_end, size - 1200), size, 7))
    points |= {1, 40, pickle_end // 2, pickle_end - 1, size - 1}
    return sorted(p for p in points if 0 < p < size)


@pytest.mark.parametrize("kind", ["zip", "legacy"])
def test_every_cut_is_one_finding_measured_against_the_whole_file(torch_files, tmp_path, kind):
    path = torch_files[kind]
    data = path.read_bytes()
    spans, values = _whole(path)
    info = mx.open(path).details["files"][str(path)]["pickle"]
    pickle_end = info["pickle_offset"] + info["pickle_length"]
    cut_path = tmp_path / f"cut_{kind}.pt"
    checked = 0
    for n in _cut_points(len(data), pickle_end):
        cut_path.write_bytes(data[:n])
        result = READERS[kind](LocalSource(str(cut_path)))
        findings = result.report.findings
        assert [f.code for f in findings] == ["truncated"], (n, [str(f) for f in findings])
        f = findings[0]
        assert f.offset == n and f.length == 0
        if f.extra.get("expected") is None:  # the file ends inside the pickles
            assert n <= pickle_end + 8 and "no tensor can be named" in f.message, (n, f.message)
            continue
        checked += 1
        assert f.extra["expected"] == len(data), n
        lost = sorted((s, name) for name, (s, e) in spans.items() if e > n and e > s)
        want_first = lost[0][1] if lost else None
        assert f.extra["first_cut"] == want_first and f.tensor == want_first, n
        assert f.extra["present_tensors"] == len(spans) - len(lost), n
        assert f.extra["tensors"] == len(spans) == len(result.tensors)
        if lost:
            m = MESSAGE.match(f.message)
            assert m, f.message
            assert m["file"] == cut_path.name and m["first"] == want_first
            assert int(m["size"].replace(",", "")) == n and m["pct"] == percent(n, len(data))
        assert any(s.kind == END_KIND and s.offset == n and s.length == 0
                   for s in result.report.spans)
    assert checked > 20


def test_tensors_before_the_cut_read_as_torch_loads_them(torch_files, tmp_path):
    path = torch_files["zip"]
    data = path.read_bytes()
    spans, values = _whole(path)
    n = int(len(data) * 0.6)
    cut = tmp_path / "cut60.pt"
    cut.write_bytes(data[:n])
    ckpt = mx.open(cut)
    assert [f.code for f in ckpt.findings] == ["truncated"]
    summary = ckpt.details["files"][str(cut)]["truncated"]
    assert set(summary) == {"size", "expected", "first_cut", "present_tensors", "tensors",
                            "cut_tensors"}
    present = [name for name, (s, e) in spans.items() if e <= n]
    assert summary["present_tensors"] == len(present) > 0 and summary["size"] == n
    assert set(summary["cut_tensors"]) == set(spans) - set(present)
    for name in present:
        assert storage_view(ckpt, ckpt.tensors[name]).tobytes() == torch_bytes(values[name]), name


def test_a_torch_save_state_dict_cut_at_60_percent(tmp_path):
    """The issue's case: ten 8 KiB tensors, the file cut at 60 %."""
    state = {f"layer.{i}.weight": torch.full((64, 32), float(i)) for i in range(10)}
    data = dump_bytes(state)
    p = tmp_path / "model.bin"
    p.write_bytes(data[:int(len(data) * 0.6)])
    ckpt = mx.open(p)
    (f,) = ckpt.findings
    assert f.message == (f"model.bin ends at byte {int(len(data) * 0.6):,} of {len(data):,} "
                         "expected (59.9 %): tensor layer.6.weight is the first cut; 6 of 10 "
                         "tensors are wholly present")
    for i in range(6):
        got = storage_view(ckpt, ckpt.tensors[f"layer.{i}.weight"])
        assert (got == i).all()
    for i in range(6, 10):  # placed where torch would have written them
        assert ckpt.tensors[f"layer.{i}.weight"].offset + 8192 > p.stat().st_size


def test_a_cut_torchscript_archive_is_one_finding(tmp_path):
    """torch.jit.save writes the storages first and data.pkl after them."""
    lin = torch.nn.Linear(64, 64)
    whole = tmp_path / "whole.pt"
    torch.jit.save(torch.jit.script(lin), whole)
    data = whole.read_bytes()
    with zipfile.ZipFile(whole) as z:
        pkl = next(i for i in z.infolist() if i.filename.endswith("/data.pkl"))
    for n, words in [(pkl.header_offset - 100, "before any data.pkl"),
                     (len(data) - 100, "all 2 tensors are wholly present")]:
        p = tmp_path / "cut.pt"
        p.write_bytes(data[:n])
        ckpt = mx.open(p)
        assert [f.code for f in ckpt.errors] == ["truncated"], [str(f) for f in ckpt.findings]
        assert words in ckpt.errors[0].message


def test_a_zip_damaged_at_its_end_is_not_called_cut(tmp_path, torch_files):
    """No end record, but the walk stops at bytes that are no zip record: damaged, not cut."""
    data = torch_files["zip"].read_bytes()
    with zipfile.ZipFile(torch_files["zip"]) as z:
        last = max(i.header_offset for i in z.infolist())
    p = tmp_path / "damaged.pt"
    p.write_bytes(data[:last] + b"JUNK" * 64)
    codes = [f.code for f in mx.open(p).errors]
    assert "zip_truncated" in codes and "truncated" not in codes


def test_a_legacy_file_cut_in_its_key_list_predicts_the_storages(tmp_path):
    state = {"a": torch.arange(6.0), "b": torch.ones(3, dtype=torch.int64)}
    data = dump_bytes(state, _use_new_zipfile_serialization=False)
    full = read_torch_legacy(LocalSource(str(_write(tmp_path / "whole.pt", data))))
    keys_run = full.details["pickle"]["pickles"][4]
    p = _write(tmp_path / "cut.pt", data[:keys_run["offset"] + keys_run["length"] - 3])
    result = read_torch_legacy(LocalSource(str(p)))
    (f,) = result.report.findings
    assert f.code == "truncated" and f.extra["expected"] == len(data)
    assert f.extra["present_tensors"] == 0
    assert {n: t.offset for n, t in result.tensors.items()} == \
        {n: t.offset for n, t in full.tensors.items()}


def _write(p, data: bytes):
    p.write_bytes(data)
    return p


def test_a_cut_legacy_tar_is_one_finding(tmp_path):
    """torch's pre-0.4 tar keeps the names in its last member: a cut loses them all, said once."""
    from .test_containers import torch_tar

    data = torch_tar({f"l{i}": torch.arange(300.0) for i in range(4)})
    p = tmp_path / "old.pt"
    seen = set()
    for n in range(600, len(data), 97):
        p.write_bytes(data[:n])
        ckpt = mx.open(p)
        found = [f.code for f in ckpt.findings]
        assert found in ([], ["truncated"]), (n, [str(f) for f in ckpt.findings])
        if found:
            seen.add(ckpt.findings[0].message.split("inside ")[1].split(" (")[0].split(":")[0])
            assert ckpt.findings[0].offset == n
        else:  # only the archive's closing zero blocks are cut: all there
            assert len(ckpt.tensors) == 4
    assert {"its member storages", "its member tensors", "its member pickle"} <= seen
