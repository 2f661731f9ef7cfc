"""Opening reads safetensors headers into columns; records and spans are built when asked.

The columnar path (formats/stcolumns.py) must agree with the slow reader on everything: the
same records, spans and findings for a header it accepts, and for anything else it must step
aside. What building meets later is a finding, never a traceback, and doctor builds it all.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.cli import main
from model_explorer.formats import safetensors as st
from model_explorer.sources import open_source
from model_explorer.tensormap import TensorMap

from .conftest import st_bytes, st_entry, write

save_file = pytest.importorskip("safetensors.numpy").save_file


def _header(entries: list[tuple[str, str, list[int], int]], meta: dict | None = None,
            pad: str = "", sort_keys: bool = False, data_order=None) -> tuple[str, bytes]:
    """Compact JSON as the safetensors library writes it (`sort_keys`: as MLX does), and data
    tiling it (`data_order`: the entries' positions in the data, when not their own order)."""
    header, off = {}, 0
    if meta is not None:
        header["__metadata__"] = meta
    at = {}
    for i in (data_order or range(len(entries))):
        at[i] = off
        off += entries[i][3]
    for i, (name, dtype, shape, nbytes) in enumerate(entries):
        header[name] = st_entry(dtype, shape, at[i], at[i] + nbytes)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys) + pad
    return text, b"\0" * off


CLEAN = {
    "plain": _header([("a", "F32", [2, 2], 16), ("b", "BF16", [3], 6)]),
    "metadata": _header([("w", "I8", [4], 4)], meta={"format": "pt", "k": "a:b{c}"}),
    "unicode names": _header([("é.poids", "F16", [2], 4), ("名前", "U8", [1], 1)]),
    "long name": _header([("x" * 120, "F32", [1], 4)]),
    "long entry": _header([("w", "F32", [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 4)]),
    "scalar and empty": _header([("s", "F64", [], 8), ("z", "F32", [0, 5], 0), ("e", "I32", [0], 0)]),
    "sub-byte": _header([("f4", "F4", [3], 2), ("f6", "F6_E2M3", [4], 3)]),
    "padding": _header([("w", "F32", [2], 8)], pad="      "),
    "newline padding": _header([("w", "F32", [2], 8)], pad="\n \t "),
    "colon and brace names": _header([("a:b", "F32", [1], 4), ("{c}", "F32", [1], 4)]),
    "sorted keys (MLX)": _header([("lm_head.weight", "F16", [4, 2], 16), ("model.norm.weight", "F16", [2], 4)],
                                 meta={"format": "mlx"}, sort_keys=True, data_order=[1, 0]),
    "sorted keys, scalar": _header([("a", "F32", [], 4), ("b", "U8", [3], 3)], sort_keys=True),
    "empty": ('{}', b""),
    "only metadata": ('{"__metadata__":{"a":"b"}}', b""),
}


def _file(tmp_path, text: str, data: bytes, name: str = "m.safetensors") -> str:
    return write(tmp_path, name, st_bytes(text.encode(), data))


def _both(path: str):
    fast = st.read_safetensors(open_source(path))
    slow = st.read_safetensors(open_source(path), fast=False)
    return fast, slow


@pytest.mark.parametrize("case", sorted(CLEAN))
def test_columns_agree_with_the_slow_reader(tmp_path, case):
    fast, slow = _both(_file(tmp_path, *CLEAN[case]))
    assert fast.lazy_spans is not None, "the columnar path should take this header"
    assert isinstance(fast.tensors, TensorMap) and fast.report.findings == slow.report.findings == []
    assert list(fast.tensors.items()) == list(slow.tensors.items())  # every field, info_span too
    assert fast.metadata == slow.metadata
    spans, found = fast.lazy_spans(open_source(fast.file))
    assert found == [] and spans == slow.report.spans
    # the kinds declared at open (the hexdump's legend) are exactly those the spans have
    assert set(fast.lazy_span_kinds) == {s.kind for s in spans}


BROKEN = {
    "leading zero": '{"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}',
    "gap": '{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    "overlap": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    "past end": '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}',
    "unknown dtype": '{"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}}',
    "size mismatch": '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}',
    "name twice": '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    "field twice": '{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    "escaped name": '{"\\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    "whitespace": '{"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    "other key order": '{"a":{"shape":[2],"dtype":"F32","data_offsets":[0,8]}}',
    "two key orders": '{"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    "sorted, size mismatch": '{"a":{"data_offsets":[0,8],"dtype":"F32","shape":[3]}}',
    "trailing garbage": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}xx',
    "trailing comma": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},}',
    "metadata not string": '{"__metadata__":{"a":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    "metadata as tensor": '{"__metadata__":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    "empty dim": '{"a":{"dtype":"F32","shape":[2,,1],"data_offsets":[0,8]}}',
    "huge dims": '{"a":{"dtype":"F32","shape":[0,99999999999999999999],"data_offsets":[0,0]}}',
    "too many elements": '{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}}',
    "rank 65": '{"a":{"dtype":"F32","shape":[' + ",".join(["1"] * 65) + '],"data_offsets":[0,4]}}',
    "junk between": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]} ,"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}',
    "not utf-8": b'{"\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_anything_else_goes_the_slow_way(tmp_path, case):
    text = BROKEN[case]
    raw = text if isinstance(text, bytes) else text.encode()
    fast, slow = _both(write(tmp_path, "m.safetensors", st_bytes(raw, b"\0" * 8)))
    assert fast.lazy_spans is None
    assert [f.to_dict() for f in fast.report.findings] == [f.to_dict() for f in slow.report.findings]
    assert list(fast.tensors.items()) == list(slow.tensors.items())
    assert fast.report.spans == slow.report.spans


def _shards(tmp_path, n_shards: int = 3, per: int = 4):
    weight_map = {}
    for s in range(n_shards):
        text, data = _header([(f"l{s}.t{j}", "F32", [2], 8) for j in range(per)])
        name = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        _file(tmp_path, text, data, name)
        weight_map.update({f"l{s}.t{j}": name for j in range(per)})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return tmp_path


def test_records_and_spans_wait_until_asked(tmp_path):
    ckpt = mx.open(_shards(tmp_path))
    assert not ckpt.findings and len(ckpt.tensors) == 12
    assert ckpt.tensors.unbuilt() == 12 and len(ckpt.spans.pending()) == 3
    assert ckpt.parameter_count == 24 and ckpt.dtype_mix() == {"F32": 12}
    assert ckpt.tensors.unbuilt() == 12  # counted from the columns
    info = ckpt.tensors["l1.t2"]
    assert ckpt.tensors["l1.t2"] is info and ckpt.tensors.unbuilt() == 11
    assert (info.dtype, info.shape, info.length) == ("F32", (2,), 8)
    first = ckpt.files[0]
    spans = ckpt.spans_for(first)
    assert ckpt.spans.pending() == ckpt.files[1:]
    assert [s.kind for s in spans[:2]] == ["length", "json"] and {s.file for s in spans} == {first}
    assert len(ckpt.spans) == 3 * (2 + 4 * 4) and not ckpt.spans.pending()


def _break_in_place(path: str) -> None:
    """Same size, same length prefix: the second tensor now overlaps the first."""
    with open(path, "r+b") as f:
        raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = raw[8:8 + n].replace(b'"data_offsets":[8,16]', b'"data_offsets":[4,12]')
        assert len(header) == n
        f.seek(8)
        f.write(header)


def test_a_header_broken_after_open_is_a_finding_when_built(tmp_path):
    ckpt = mx.open(_shards(tmp_path))
    assert not ckpt.findings
    _break_in_place(ckpt.files[1])
    assert ckpt.spans_for(ckpt.files[0])  # an intact file: its spans, no finding
    assert not ckpt.findings
    spans = ckpt.spans_for(ckpt.files[1])  # no traceback: the slow reader says what is wrong
    assert spans and {f.code for f in ckpt.findings} >= {"data_overlap"}
    assert all(f.extra.get("found_when_built") for f in ckpt.findings)


def test_a_failing_build_is_an_internal_error_finding(tmp_path, monkeypatch):
    ckpt = mx.open(_shards(tmp_path))

    def boom(*args):
        raise RuntimeError("no")

    monkeypatch.setattr(st, "spans_of", boom)
    assert ckpt.spans_for(ckpt.files[2]) == []
    assert [f.code for f in ckpt.findings] == ["internal_error"]
    monkeypatch.undo()
    assert len(ckpt.spans) == 2 * (2 + 4 * 4)  # the other files still build


def test_doctor_builds_everything_and_reports_it(tmp_path, capsys):
    folder = _shards(tmp_path)
    clean = main(["doctor", str(folder)])
    assert clean == 0
    capsys.readouterr()
    ckpt = mx.open(folder)  # the header changes after an open: a fresh doctor sees it at once
    _break_in_place(ckpt.files[2])
    ckpt.close()
    assert main(["doctor", str(folder), "--json"]) == 1
    codes = {f["code"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert "data_overlap" in codes


def test_build_all_reports_what_lazily_built_spans_meet(tmp_path):
    ckpt = mx.open(_shards(tmp_path))
    _break_in_place(ckpt.files[0])
    ckpt.build_all()
    assert "data_overlap" in {f.code for f in ckpt.findings} and not ckpt.spans.pending()
    assert ckpt.tensors.unbuilt() == 0
    assert ckpt.findings == sorted(ckpt.findings, key=lambda f: ("error", "warning", "info").index(f.severity))


def test_index_checks_still_run_on_columns(tmp_path):
    folder = _shards(tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    wm = index["weight_map"]
    wm["ghost"] = "model-00001-of-00003.safetensors"  # listed, not stored
    del wm["l2.t3"]  # stored, not listed
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    # a second copy of l0.t0 in the last shard, the index naming that shard for it
    text, data = _header([("l2.t0", "F32", [2], 8), ("l2.t1", "F32", [2], 8), ("l2.t2", "F32", [2], 8),
                          ("l2.t3", "F32", [2], 8), ("l0.t0", "F32", [2], 8)])
    _file(folder, text, data, "model-00003-of-00003.safetensors")
    wm["l0.t0"] = "model-00003-of-00003.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = mx.open(folder)
    codes = sorted(f.code for f in ckpt.findings)
    # l0.t0 in the first shard is both a second copy and one the index does not map there
    assert codes == ["duplicate_tensor", "missing_tensor", "orphan_tensor", "orphan_tensor"]
    assert ckpt.tensors["l0.t0"].file.endswith("model-00003-of-00003.safetensors")  # the index's copy
    kinds = sorted((m.kind, m.name) for m in ckpt.index_mismatches)
    assert kinds == [("duplicate", "l0.t0"), ("missing", "ghost"), ("orphan", "l2.t3")]


def test_explorer_opening_state_builds_no_spans_or_records(tmp_path):
    # The Explorer's first state (summary, overview, legend) of a lazily opened index reads
    # columns and declared span kinds: only the first file's spans (the hexdump shows it
    # first) and no tensor record are built.
    from model_explorer.widgets._base import initial_state

    d = tmp_path / "idx"
    d.mkdir()
    weight_map = {}
    for s in range(3):
        name = f"model-{s + 1:05d}-of-00003.safetensors"
        save_file({f"model.layers.{s}.mlp.up_proj.weight": np.ones((4, 4), np.float32)}, str(d / name))
        weight_map[f"model.layers.{s}.mlp.up_proj.weight"] = name
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    ckpt = mx.open(d)
    assert len(ckpt.spans.pending()) == 3
    state = initial_state(ckpt)
    assert len(ckpt.spans.pending()) == 2 and ckpt.tensors.unbuilt() == 3
    assert {"length", "json", "tensor_data"} <= set(state["legend"])
    assert state["summary"]["overview"]
