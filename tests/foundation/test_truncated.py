"""A file cut short is one `truncated` finding: GGUF (gguf-py's writer), safetensors (the
safetensors library's save_file), a split GGUF part and a safetensors shard.

Every expectation is computed from the reference readers on the whole file (gguf-py's
GGUFReader offsets, the safetensors header as json reads it), never from this reader.
"""

from __future__ import annotations

import json
import os
import struct

import gguf
import numpy as np
import pytest
import safetensors.numpy

import model_explorer as mx
from model_explorer.cli import main
from model_explorer.hexview import SpanIndex, hexdump_lines
from model_explorer.tensors.read import Undecodable
from model_explorer.widgets import Explorer

from .conftest import F32, GGUFBuilder, codes, finding, open_bytes, shard_dir

# The message every cut file gets (the PyTorch archive reader words it the same way).
SHAPE = ("{name} ends at byte {n:,} of {m:,} expected ({p} %): tensor {x} is the first cut; "
         "{k:,} of {t:,} tensors are wholly present")


def _percent(n: int, m: int) -> str:
    return f"{n * 1000 // m / 10:.1f}"


# -- the reference layouts -----------------------------------------------------------------

def _gguf_layout(path) -> list[tuple[str, int, int]]:
    """(name, first byte, end) of every tensor in offset order, as gguf-py reads them."""
    return sorted(((t.name, int(t.data_offset), int(t.data_offset) + int(t.n_bytes))
                   for t in gguf.GGUFReader(path).tensors), key=lambda r: r[1])


def _st_layout(path) -> list[tuple[str, int, int]]:
    raw = open(path, "rb").read()
    n = struct.unpack_from("<Q", raw)[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return sorted(((k, 8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
                   for k, v in header.items()), key=lambda r: (r[1], r[2]))


def _expected(layout, size: int, name: str) -> tuple[str, str, int]:
    """(message, first cut, wholly present) for a file of `size` bytes with this layout."""
    whole = [r for r in layout if r[2] <= size]
    first = next(r[0] for r in layout if r[2] > size)
    end = layout[-1][2]
    return (SHAPE.format(name=name, n=size, m=end, p=_percent(size, end), x=first, k=len(whole),
                         t=len(layout)), first, len(whole))


# -- files written by the reference writers --------------------------------------------------

def _write_gguf(path) -> dict[str, np.ndarray]:
    """A few F32 tensors (one with a size that needs padding) and a Q8_0 one; the values each
    should read as, from gguf-py."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    values = {}
    for name, shape in (("token_embd.weight", (16, 32)), ("blk.0.attn_norm.weight", (3, 5)),
                        ("blk.0.ffn_up.weight", (8, 32))):
        values[name] = rng.standard_normal(shape).astype(np.float32)
        w.add_tensor(name, values[name])
    q = rng.standard_normal((4, 64)).astype(np.float32)
    packed = gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.ffn_down.weight", packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    values["blk.0.ffn_down.weight"] = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", rng.standard_normal(30).astype(np.float32))  # padded after
    _finish(w)
    for t in gguf.GGUFReader(path).tensors:  # the reference reader's values of the F32 ones
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            values[t.name] = np.array(t.data).reshape(tuple(reversed([int(d) for d in t.shape])))
    return values


def _finish(w: gguf.GGUFWriter) -> None:
    for step in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
        step()


def _write_st(path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    arrays = {"embed": rng.standard_normal((16, 8)).astype(np.float32),
              "norm": rng.standard_normal(7).astype(np.float16),
              "proj": rng.standard_normal((4, 8)).astype(np.float32),
              "ids": np.arange(5, dtype=np.int64)}
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np"})
    return safetensors.numpy.load_file(str(path))


def _cut(path, size: int, out) -> str:
    out.write_bytes(open(path, "rb").read()[:size])
    return str(out)


def _cut_points(layout, header_end: int) -> dict[str, int]:
    """Where to cut: at the data's start, inside the first tensor, at a boundary, in the
    middle of a tensor, one byte short."""
    mid = layout[len(layout) // 2]
    return {"data_start": header_end, "first_tensor": layout[0][1] + 5,
            "boundary": layout[2][1], "middle": (mid[1] + mid[2]) // 2, "one_byte_short": layout[-1][2] - 1}


def _check_cut(ckpt, layout, size: int, name: str, values: dict) -> None:
    """Exactly one `truncated` finding with the reference numbers; no data_past_end; what is
    wholly present reads as the reference does; a cut tensor is Undecodable."""
    message, first, present = _expected(layout, size, name)
    cut = [f for f in ckpt.findings if f.code == "truncated"]
    assert len(cut) == 1, [str(f) for f in ckpt.findings]
    f = cut[0]
    assert f.message == message
    assert (f.severity, f.offset, f.length, f.tensor) == ("error", size, 0, first)
    assert (f.extra["size"], f.extra["expected"]) == (size, layout[-1][2])
    assert f.extra["cut_tensors"] == [r[0] for r in layout if r[2] > size]
    assert "data_past_end" not in codes(ckpt) and len(ckpt.errors) == 1
    assert len(ckpt.tensors) == len(layout)
    for tname, _, end in layout:
        if end <= size:
            np.testing.assert_array_equal(ckpt.read(tname), values[tname])
            assert ckpt.stats(tname).count == values[tname].size
        else:
            with pytest.raises(Undecodable, match="truncated"):
                ckpt.read(tname)
    assert any(x.code == "undecodable" and x.tensor == first for x in ckpt.findings)
    # the spans mark the end; no span claims a byte the file does not have
    spans = ckpt.spans_for(f.file)
    assert all(s.end <= size for s in spans)
    end = [s for s in spans if s.kind == "file_end"]
    assert [(s.offset, s.length, s.value) for s in end] == [
        (size, 0, f"{size:,} bytes of {layout[-1][2]:,} expected ({_percent(size, layout[-1][2])} %)")]


# -- GGUF ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    path = d / "whole.gguf"
    values = _write_gguf(path)
    layout = _gguf_layout(path)
    # where the header ends: gguf-py's reader puts the data at the first aligned byte after it
    return path, values, layout


@pytest.mark.parametrize("where", ["data_start", "first_tensor", "boundary", "middle", "one_byte_short"])
def test_gguf_cut_is_one_finding(gguf_file, tmp_path, where):
    path, values, layout = gguf_file
    size = _cut_points(layout, layout[0][1])[where]
    ckpt = mx.open(_cut(path, size, tmp_path / "cut.gguf"))
    if where != "data_start":
        assert size > layout[0][1]
    _check_cut(ckpt, layout, size, "cut.gguf", values)
    assert ckpt.details["files"][str(tmp_path / "cut.gguf")]["truncated"]["present_tensors"] == \
        sum(1 for r in layout if r[2] <= size)


def test_gguf_cut_in_the_padding_before_the_data(gguf_file, tmp_path):
    path, values, layout = gguf_file
    header_end = mx.open(str(path)).details["files"][str(path)]["header_end"]
    assert header_end < layout[0][1]  # gguf-py pads the header to the alignment
    ckpt = mx.open(_cut(path, header_end + 1, tmp_path / "cut.gguf"))
    _check_cut(ckpt, layout, header_end + 1, "cut.gguf", values)


def test_gguf_cut_inside_the_header_keeps_the_header_finding(gguf_file, tmp_path):
    path, _, _ = gguf_file
    ckpt = mx.open(_cut(path, 100, tmp_path / "cut.gguf"))
    f = finding(ckpt, "truncated")
    assert "the header is cut short" in f.message
    assert "data_past_end" not in codes(ckpt)
    assert "truncated" not in ckpt.details["files"][str(tmp_path / "cut.gguf")]


def test_gguf_whole_file_and_its_padding_are_not_cut(gguf_file, tmp_path):
    path, _, layout = gguf_file
    assert mx.open(str(path)).findings == []
    # the padding after the last tensor carries no data: a file without it is whole
    assert os.path.getsize(path) > layout[-1][2]
    ckpt = mx.open(_cut(path, layout[-1][2], tmp_path / "cut.gguf"))
    assert ckpt.findings == [] and "file_end" not in {s.kind for s in ckpt.spans}


def test_gguf_wrong_offset_stays_data_past_end(tmp_path):
    # "b" points past the end while "c" after it still fits: a hole where "b" should be, so the
    # header is wrong, not the file short
    b = GGUFBuilder().tensor("a", [8], F32, 0).tensor("b", [8], F32, 4096).tensor("c", [8], F32, 64)
    ckpt = open_bytes(tmp_path, b.build(b"\0" * 96), "model.gguf")
    f = finding(ckpt, "data_past_end")
    assert (f.tensor, f.offset) == ("b", b.offsets["data"] + 4096)
    assert "truncated" not in codes(ckpt)


# -- safetensors -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def st_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "whole.safetensors"
    values = _write_st(path)
    return path, values, _st_layout(path)


@pytest.mark.parametrize("where", ["data_start", "first_tensor", "boundary", "middle", "one_byte_short"])
def test_safetensors_cut_is_one_finding(st_file, tmp_path, where):
    path, values, layout = st_file
    size = _cut_points(layout, layout[0][1])[where]
    ckpt = mx.open(_cut(path, size, tmp_path / "cut.safetensors"))
    _check_cut(ckpt, layout, size, "cut.safetensors", values)


def test_safetensors_cut_inside_the_header_keeps_the_header_findings(st_file, tmp_path):
    path, _, _ = st_file
    ckpt = mx.open(_cut(path, 40, tmp_path / "cut.safetensors"))
    assert "header_past_end" in codes(ckpt)
    assert "truncated" not in codes(ckpt) and "data_past_end" not in codes(ckpt)


def test_safetensors_wrong_offsets_stay_data_past_end(tmp_path):
    # "a" and "c" tile the file; "b" says it lies past the end: a hole, not a cut
    a, b = np.zeros(4, np.float32), np.ones(4, np.float32)
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [4], "data_offsets": [64, 80]},
              "c": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}
    raw = json.dumps(header).encode()
    blob = struct.pack("<Q", len(raw)) + raw + a.tobytes() + b.tobytes()
    ckpt = open_bytes(tmp_path, blob)
    assert finding(ckpt, "data_past_end").tensor == "b"
    assert "truncated" not in codes(ckpt)
    np.testing.assert_array_equal(ckpt.read("c"), b)


# -- a split GGUF part and a safetensors shard ------------------------------------------------

def test_split_gguf_part_cut_short(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama", split_max_tensors=2)
    w.add_block_count(1)
    values = {f"t{i}": np.arange(32 * (i + 1), dtype=np.float32).reshape(i + 1, 32) for i in range(5)}
    for name, v in values.items():
        w.add_tensor(name, v)
    _finish(w)
    parts = sorted(str(tmp_path / f) for f in os.listdir(tmp_path))
    assert len(parts) == 3
    layout = _gguf_layout(parts[1])
    whole = os.path.getsize(parts[1])
    size = (layout[1][1] + layout[1][2]) // 2  # inside its second tensor
    open(parts[1], "r+b").truncate(size)
    ckpt = mx.open(parts[0])
    (f,) = [x for x in ckpt.findings if x.code == "truncated"]
    assert f.file == parts[1]
    assert f.message == _expected(layout, size, os.path.basename(parts[1]))[0]
    assert codes(ckpt) == {"truncated"}
    for name in ("t0", "t1", "t2", "t4"):  # the other parts and the part's first tensor
        np.testing.assert_array_equal(ckpt.read(name), values[name])
    with pytest.raises(Undecodable):
        ckpt.read("t3")
    sizes = sum(os.path.getsize(p) for p in parts)
    missing = layout[-1][2] - size
    text = mx.card(ckpt).text()
    assert mx.card(ckpt).bytes == sizes + missing and mx.card(ckpt).present_bytes == sizes
    assert "present (" in text and whole > size


def test_safetensors_shard_cut_short(tmp_path):
    d, index, arrays = shard_dir(tmp_path)
    shard = d / "model-00002-of-00003.safetensors"
    layout = _st_layout(shard)
    size = layout[-1][2] - 1
    open(shard, "r+b").truncate(size)
    ckpt = mx.open(str(d))
    (f,) = [x for x in ckpt.findings if x.code == "truncated"]
    assert f.file == str(shard) and f.message == _expected(layout, size, shard.name)[0]
    assert codes(ckpt) == {"truncated"}
    for name, arr in arrays.items():
        if name != layout[-1][0]:
            np.testing.assert_array_equal(ckpt.read(name), arr)


# -- what people see: doctor, the card, the hexdump, the Explorer ----------------------------

@pytest.fixture
def cut_gguf(gguf_file, tmp_path):
    path, values, layout = gguf_file
    size = _cut_points(layout, layout[0][1])["middle"]
    return _cut(path, size, tmp_path / "cut.gguf"), size, layout


def test_doctor_prints_one_line(cut_gguf, capsys):
    path, size, layout = cut_gguf
    assert main(["doctor", path]) == 1
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "[error]" in ln]
    assert len(lines) == 1 and _expected(layout, size, "cut.gguf")[0] in lines[0]


def test_card_says_expected_and_present(cut_gguf):
    path, size, layout = cut_gguf
    c = mx.card(path)
    expected = layout[-1][2]  # where the last tensor's data ends
    assert (c.bytes, c.present_bytes) == (expected, size)
    line = c.text().splitlines()[1]
    assert line.endswith(f"as stored, {_size(size)} present ({_percent(size, expected)} %)")
    assert c.to_dict()["present_bytes"] == size


def _size(n: int) -> str:
    from model_explorer.model.card import _size

    return _size(n)


def test_hexdump_shows_where_the_file_ends(cut_gguf):
    path, size, layout = cut_gguf
    ckpt = mx.open(path)
    lines = hexdump_lines(ckpt.read_bytes(size - 20, 20), size - 20, SpanIndex(ckpt.spans_for(path)))
    assert lines[-1] == (f"{size:010x}  end of file: {size:,} bytes of {layout[-1][2]:,} expected "
                         f"({_percent(size, layout[-1][2])} %)")
    # a dump that stops before the end says nothing of it
    assert "end of file" not in "\n".join(hexdump_lines(ckpt.read_bytes(0, 64), 0,
                                                        SpanIndex(ckpt.spans_for(path))))


def test_explorer_overview_hexdump_and_stats(cut_gguf):
    path, size, layout = cut_gguf
    e = Explorer(path)
    summary = e.summary
    assert summary["findings"]["error"] == 1 and len(e.findings) == 1
    fmt = summary["overview"]["facts"][0]
    assert fmt[0] == "format" and "present (" in fmt[1] and "as stored" in fmt[1]
    # the hexdump's file entry says where it ends (js/src/hexview.js shows it after the last byte)
    (entry,) = e.files
    assert entry["end"] == (f"end of file: {size:,} bytes of {layout[-1][2]:,} expected "
                            f"({_percent(size, layout[-1][2])} %)") and entry["size"] == size
    step, _ = e.answer("step", {"offset": size})
    assert step["span"]["kind"] == "file_end" and "cut short" in step["text"]
    first = _expected(layout, size, "cut.gguf")[1]
    # the file ends in the middle of this tensor: its present rows, marked partial (issue 39 item 9)
    cut = e.answer("stats", {"name": first})[0]
    assert "error" not in cut and cut["partial"] and 0 < cut["count"] < cut["total"], cut
    whole = layout[0][0]
    assert e.answer("stats", {"name": whole})[0]["count"] > 0
