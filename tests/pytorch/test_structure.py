"""Damaged and unusual files: each problem is one finding with its offset, never a traceback."""

from __future__ import annotations

import io
import pickle
import zipfile

import pytest

import model_explorer as mx
from model_explorer.formats.detect import detect
from model_explorer.formats.pytorch import read_pickle, read_torch_legacy, read_torch_zip
from model_explorer.sources import LocalSource
from model_explorer.spans import Report

from .helpers import dump_bytes, hostile_pickles, zip_with_data_pkl

pytestmark = pytest.mark.reference


def codes(ckpt_or_result):
    findings = getattr(ckpt_or_result, "findings", None)
    if findings is None:
        findings = ckpt_or_result.report.findings
    return [f.code for f in findings]


def one(findings, code):
    found = [f for f in findings if f.code == code]
    assert len(found) == 1, [str(f) for f in findings]
    return found[0]


@pytest.fixture
def small_zip(tmp_path):
    import torch

    p = tmp_path / "small.pt"
    torch.save({"a": torch.arange(12, dtype=torch.float32), "b": torch.ones(3, dtype=torch.int64)}, p)
    return p


def test_detection_from_bytes_not_names(tmp_path, small_zip):
    import torch

    assert detect(small_zip.read_bytes()[:64], small_zip.stat().st_size) == "zip"
    legacy = dump_bytes({"x": torch.ones(1)}, _use_new_zipfile_serialization=False)
    assert detect(legacy[:64], len(legacy)) == "torch_legacy"
    for proto in range(0, 6):
        data = pickle.dumps({"a": 1}, protocol=proto)
        assert detect(data[:64], len(data)) == "pickle", proto
    # Byte 8 of "\x80\x02cposix\nsystem" is a newline: still a pickle, not a safetensors header.
    hostile = b"\x80\x02cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
    assert detect(hostile[:64], len(hostile)) == "pickle"
    # A zip checkpoint named .pkl is still read as a zip; the name mismatch is only an info.
    renamed = tmp_path / "weights.safetensors"
    renamed.write_bytes(small_zip.read_bytes())
    ckpt = mx.open(renamed)
    assert ckpt.format == "pytorch" and set(ckpt.tensors) == {"a", "b"}
    assert "extension_mismatch" in codes(ckpt)


def test_legacy_written_with_other_pickle_protocols(tmp_path):
    import torch

    for proto in (2, 3, 4, 5):
        p = tmp_path / f"l{proto}.pt"
        torch.save({"w": torch.ones(3)}, p, _use_new_zipfile_serialization=False,
                   pickle_protocol=proto)
        ckpt = mx.open(p)
        assert ckpt.format == "pytorch", proto
        assert not ckpt.errors, [str(f) for f in ckpt.errors]
        assert ckpt.read_bytes(ckpt.tensors["w"].offset, 12) == torch.ones(3).numpy().tobytes()


def test_truncated_zip_is_recovered_from_local_headers(tmp_path, small_zip):
    data = small_zip.read_bytes()
    cut = tmp_path / "cut.pt"
    # Keep data.pkl and the first storage (a's 48 bytes), lose the rest and the directory.
    src = zipfile.ZipFile(small_zip)
    info = src.getinfo("small/data/1")
    cut.write_bytes(data[:info.header_offset + 40])
    ckpt = mx.open(cut)
    assert ckpt.format == "pytorch"
    f = one(ckpt.findings, "truncated")  # one finding for the file (test_truncated.py has more)
    assert f.severity == "error" and codes(ckpt) == ["truncated"]
    assert set(ckpt.tensors) == {"a", "b"}
    assert ckpt.read_bytes(ckpt.tensors["a"].offset, 48) == bytes(src.read("small/data/0"))
    assert f.extra["cut_tensors"] == ["b"]  # b's record is gone


def test_missing_storage_record(tmp_path, small_zip):
    out = tmp_path / "missing.pt"
    with zipfile.ZipFile(small_zip) as src, zipfile.ZipFile(out, "w") as dst:
        for i in src.infolist():
            if i.filename != "small/data/1":
                dst.writestr(i.filename, src.read(i.filename))
    ckpt = mx.open(out)
    f = one(ckpt.findings, "missing_storage")
    assert f.tensor == "b" and "data/1" in f.message
    assert f.offset is not None


def test_storage_smaller_than_the_view(tmp_path, small_zip):
    with zipfile.ZipFile(small_zip) as z:
        pkl = z.read("small/data.pkl")
    assert pkl.count(b"K\x0ct") == 1  # BININT1 12 then TUPLE: a's numel in its storage id
    out = tmp_path / "short.pt"
    zip_with_data_pkl(small_zip, pkl.replace(b"K\x0ct", b"K\x05t"), out)
    ckpt = mx.open(out)
    f = one(ckpt.findings, "view_out_of_bounds")
    assert f.tensor == "a" and f.severity == "error"
    assert "48" in f.message and "20" in f.message


def test_storage_record_shorter_than_declared(tmp_path, small_zip):
    out = tmp_path / "short_record.pt"
    with zipfile.ZipFile(small_zip) as src, zipfile.ZipFile(out, "w") as dst:
        for i in src.infolist():
            data = src.read(i.filename)
            dst.writestr(i.filename, data[:10] if i.filename == "small/data/0" else data)
    found = mx.open(out).findings
    assert one(found, "storage_too_small").tensor == "a"
    assert one(found, "view_out_of_bounds").tensor == "a"


def test_pickle_problems_have_offsets(tmp_path):
    cases = {
        b"\x80\x02\xff.": ("pickle_unknown_opcode", 2),
        b"\x80\x02K\x01": ("pickle_truncated", 4),
        b"\x80\x02X\x10\x00\x00\x00abc": ("pickle_truncated", 2),
        b"\x80\x02h\x05.": ("pickle_memo_missing", 2),
        b"\x80\x02t.": ("pickle_no_mark", 2),
    }
    for data, (code, offset) in cases.items():
        p = tmp_path / "bad.pkl"
        p.write_bytes(data)
        ckpt = mx.open(p)
        f = one(ckpt.findings, code)
        assert f.offset == offset, (data, str(f))


def test_pickle_then_zip_is_a_polyglot(tmp_path, small_zip):
    p = tmp_path / "poly.pkl"
    p.write_bytes(pickle.dumps({"a": 1}, protocol=2) + small_zip.read_bytes())
    ckpt = mx.open(p)
    assert ckpt.format == "pickle"
    assert one(ckpt.findings, "polyglot").severity == "warning"
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "suspicious"


def test_zip_with_a_pickle_prepended(tmp_path, small_zip):
    """Zip readers find the directory at the end; pickle readers read the start."""
    from model_explorer.formats.pytorch.zipread import read_zip

    prefix = hostile_pickles(tmp_path / "m")["os_system_p2"]
    data = prefix + small_zip.read_bytes()
    p = tmp_path / "poly.pt"
    p.write_bytes(data)
    src = LocalSource(str(p))
    result = read_torch_zip(src)  # read as a zip, it says what precedes the entries
    assert "polyglot" in codes(result)
    assert "dangerous_import" in codes(read_pickle(src))  # and mx.open reads it as the pickle
    assert "dangerous_import" in codes(mx.open(p))
    listing = read_zip(src, Report(src.name))  # the entries are found, shifted past the prefix
    entry = listing.entries["small/data.pkl"]
    assert listing.ok and entry.header_offset >= len(prefix)
    assert src.read(entry.data_offset, entry.size) == zipfile.ZipFile(small_zip).read("small/data.pkl")


def test_trailing_bytes_after_data_pkl_stop(tmp_path, small_zip):
    with zipfile.ZipFile(small_zip) as z:
        pkl = z.read("small/data.pkl")
    out = tmp_path / "trail.pt"
    zip_with_data_pkl(small_zip, pkl + b"junk", out)
    assert "pickle_trailing_bytes" in codes(mx.open(out))
    zip_with_data_pkl(small_zip, pkl + hostile_pickles(tmp_path / "m")["builtins_exec"], out)
    found = codes(mx.open(out))
    assert "several_pickles" in found and "dangerous_import" in found


def test_compressed_entries_are_flagged_and_still_checked(tmp_path, small_zip):
    out = tmp_path / "deflated.pt"
    with zipfile.ZipFile(small_zip) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for i in src.infolist():
            data = src.read(i.filename)
            if i.filename.endswith("data.pkl"):
                data = hostile_pickles(tmp_path / "m")["os_system_p2"]
            dst.writestr(i.filename, data)
    ckpt = mx.open(out)
    found = codes(ckpt)
    assert "zip_compressed_entry" in found
    assert "dangerous_import" in found  # the inflated data.pkl was read


def test_zip64_records(tmp_path, small_zip):
    """Entries written with ZIP64 extras (as torch does for huge files) keep exact offsets."""
    out = tmp_path / "z64.pt"
    with zipfile.ZipFile(small_zip) as src, zipfile.ZipFile(out, "w") as dst:
        for i in src.infolist():
            with dst.open(i.filename, "w", force_zip64=True) as w:
                w.write(src.read(i.filename))
    ckpt = mx.open(out)
    assert not ckpt.errors, [str(f) for f in ckpt.errors]
    with zipfile.ZipFile(out) as z:
        want = z.read("small/data/0")
    assert ckpt.read_bytes(ckpt.tensors["a"].offset, 48) == want


def test_legacy_truncated_in_the_storages(tmp_path):
    import torch

    data = dump_bytes({"w": torch.arange(100.0)}, _use_new_zipfile_serialization=False)
    p = tmp_path / "cut.pt"
    p.write_bytes(data[:-50])
    result = read_torch_legacy(LocalSource(str(p)))
    f = one(result.report.findings, "truncated")
    assert f.severity == "error" and len(result.report.findings) == 1
    assert f.extra["expected"] == len(data) and f.extra["first_cut"] == "w"
    assert "w" in result.tensors


def test_deep_and_shared_structures_are_bounded(tmp_path):
    deep = tmp_path / "deep.pkl"
    deep.write_bytes(b"\x80\x02" + b"]" * 50_000 + b"a" * 49_999 + b".")
    assert "structure_too_deep" in codes(mx.open(deep))
    laughs = b"\x80\x02]q\x00"
    for i in range(40):
        laughs += b"(" + (b"h" + bytes([i])) * 10 + b"lq" + bytes([i + 1])
    p = tmp_path / "laughs.pkl"
    p.write_bytes(laughs + b".")
    ckpt = mx.open(p)
    assert not ckpt.errors


def test_huge_numbers_and_strings_render_safely(tmp_path):
    big = 1 << 100_000
    p = tmp_path / "big.pkl"
    p.write_bytes(pickle.dumps({"n": big, "s": "x" * 1_000_000, "b": b"y" * 100_000}, protocol=4))
    ckpt = mx.open(p)
    assert not ckpt.errors
    s = ckpt.details["files"][str(p)]["pickle"]["structure"]
    assert s["n"].startswith("<int of") and len(s["s"]) <= 200 and "100000 bytes" in s["b"]


def test_empty_and_tiny_files(tmp_path):
    for data in (b"", b"\x80", b"PK\x03\x04", b"PK\x05\x06" + b"\x00" * 18, b"(", b"c"):
        p = tmp_path / "tiny.bin"
        p.write_bytes(data)
        ckpt = mx.open(p)
        assert ckpt.errors or not data, data


def test_other_pickles_in_the_zip_are_scanned(tmp_path, small_zip):
    out = tmp_path / "extra.pt"
    with zipfile.ZipFile(small_zip) as src, zipfile.ZipFile(out, "w") as dst:
        for i in src.infolist():
            dst.writestr(i.filename, src.read(i.filename))
        dst.writestr("small/extra/evil.pkl", hostile_pickles(tmp_path / "m")["runpy"])
    assert "dangerous_import" in codes(mx.open(out))


def test_bytes_read_stay_small(tmp_path):
    """Opening reads the directory, headers and data.pkl, never the storages."""
    import torch

    p = tmp_path / "big.pt"
    torch.save({f"w{i}": torch.zeros(64 * 1024) for i in range(16)}, p)  # 4 MiB of storages
    src = LocalSource(str(p))
    result = read_torch_zip(src)
    assert len(result.tensors) == 16
    assert src.bytes_read < 16 * 1024, src.bytes_read


def test_io_bytes_source_roundtrip():
    """Readers accept any object with name/size/read (an in-memory source here)."""
    import torch

    class Mem:
        def __init__(self, data):
            self.data, self.size, self.name, self.bytes_read = data, len(data), "mem", 0

        def read(self, off, n):
            return self.data[off:off + n]

        def prefix(self, n):
            return self.data[:n]

    buf = io.BytesIO()
    torch.save({"x": torch.ones(2)}, buf)
    assert list(read_torch_zip(Mem(buf.getvalue())).tensors) == ["x"]


def test_numpy_arrays_in_plain_pickles(tmp_path):
    import numpy as np

    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
              "f": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
              "be": np.arange(4, dtype=">i2"), "big": np.linspace(0, 1, 5000),
              "mask": np.array([True, False])}
    for proto in (3, 4, 5):
        p = tmp_path / f"np{proto}.pkl"
        p.write_bytes(pickle.dumps({**arrays, "names": np.array(["x"]), "n": 1}, protocol=proto))
        ckpt = mx.open(p)
        assert not ckpt.errors and not ckpt.warnings, [str(f) for f in ckpt.findings]
        assert set(ckpt.tensors) == set(arrays)
        # The text array is no tensor, and a finding says so (it stays in the structure).
        assert "'names'" in one(ckpt.findings, "numpy_array_not_listed").message
        for name, want in arrays.items():
            info = ckpt.tensors[name]
            assert info.shape == want.shape
            raw = ckpt.read_bytes(info.offset, info.length)
            assert raw == want.tobytes(order="F" if want.flags.f_contiguous and want.ndim > 1
                                       else "C"), (proto, name)
            np.testing.assert_allclose(ckpt.read(name), want, err_msg=f"{proto} {name}")
    p = tmp_path / "np2.pkl"
    p.write_bytes(pickle.dumps(arrays, protocol=2))
    ckpt = mx.open(p)
    assert set(ckpt.tensors) == set(arrays)
    assert one(ckpt.findings, "array_not_raw").severity == "info"


def test_tensors_pickled_with_plain_pickle(tmp_path):
    """pickle.dump(state_dict): each storage is a legacy torch file inside the pickle."""
    import numpy as np
    import torch

    state = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3, dtype=torch.bfloat16),
             "i": torch.arange(4)[1:]}
    p = tmp_path / "state.pkl"
    p.write_bytes(pickle.dumps(state, protocol=4))
    ckpt = mx.open(p)
    assert ckpt.format == "pickle" and not ckpt.errors
    assert [f.extra.get("callable") for f in ckpt.warnings] == ["torch.storage._load_from_bytes"]
    for name, t in state.items():
        info = ckpt.tensors[name]
        assert (info.shape, info.stride, info.storage_offset) == (
            tuple(t.shape), t.stride(), t.storage_offset())
        got = torch.from_numpy(np.asarray(ckpt.read(name))).to(t.dtype)
        assert torch.equal(got, t), name
    assert any(s.path.startswith("embedded@") and s.kind == "magic" for s in ckpt.spans)
    p.write_bytes(pickle.dumps(state, protocol=2))
    ckpt = mx.open(p)
    assert set(ckpt.tensors) == set(state)
    assert one(ckpt.findings, "tensor_not_raw").severity == "info"


def test_hostile_embedded_torch_file(tmp_path):
    """The file inside _load_from_bytes is read too: its imports are judged."""
    import os

    import torch

    from .helpers import Reducer, touch_command

    marker = tmp_path / "marker"
    inner = dump_bytes({"x": Reducer(os.system, (touch_command(marker),))},
                       _use_new_zipfile_serialization=False)
    p = tmp_path / "outer.pkl"
    p.write_bytes(pickle.dumps({"w": Reducer(torch.storage._load_from_bytes, (inner,))}, protocol=4))
    ckpt = mx.open(p)
    bad = [f for f in ckpt.errors if f.code == "dangerous_import"]
    assert bad and "posix.system" in bad[0].message and "embedded" in bad[0].message
    assert p.read_bytes()[bad[0].offset:bad[0].offset + 1] == b"c"  # the GLOBAL, in place
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "dangerous"
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_archive(tmp_path):
    import torch

    p = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), p)
    ckpt = mx.open(p)
    assert not ckpt.errors
    assert set(ckpt.tensors) == {"weight", "bias"}
    assert "torchscript_archive" in codes(ckpt)


def test_big_endian_byteorder_record(tmp_path, small_zip):
    out = tmp_path / "be.pt"
    with zipfile.ZipFile(small_zip) as src, zipfile.ZipFile(out, "w") as dst:
        for i in src.infolist():
            data = b"big" if i.filename.endswith("/byteorder") else src.read(i.filename)
            dst.writestr(i.filename, data)
    ckpt = mx.open(out)
    assert ckpt.metadata["byteorder"] == "big"
    assert {t.byteorder for t in ckpt.tensors.values()} == {">"}


def test_zip_without_data_pkl_still_judges_its_pickles(tmp_path):
    out = tmp_path / "notorch.zip"
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/payload.pkl", hostile_pickles(tmp_path / "m")["os_system_p0"])
    ckpt = mx.open(out)
    found = codes(ckpt)
    assert "no_data_pkl" in found and "dangerous_import" in found
    assert ckpt.details["files"][str(out)]["pickle"]["verdict"] == "dangerous"


def test_large_pickles_read_through_a_window_give_the_same_result(tmp_path, monkeypatch):
    """Pickles over 64 MiB are decoded through a buffered window over the source instead of
    one read; with a tiny threshold and chunk, every file must read identically both ways."""
    import numpy as np
    import torch

    from model_explorer.formats.pytorch import region

    files = {name: data for name, data in hostile_pickles(tmp_path / "m").items()}
    files["numpy"] = pickle.dumps({"a": np.arange(3000.0), "b": np.ones(3)}, protocol=5)
    files["legacy"] = dump_bytes({"w": torch.arange(6.0)}, _use_new_zipfile_serialization=False)
    files["zip"] = dump_bytes({"w": torch.arange(6.0)})
    files["text"] = pickle.dumps({"a": [1, "x" * 300]}, protocol=0)

    def summary(ckpt):
        return ([(t.name, t.offset, t.length) for t in ckpt.tensors.values()],
                [(f.code, f.offset) for f in ckpt.findings],
                [(s.offset, s.length, s.path, s.value) for s in ckpt.spans])

    for name, data in files.items():
        p = tmp_path / f"{name}.bin"
        p.write_bytes(data)
        want = summary(mx.open(p))
        with monkeypatch.context() as mp:
            mp.setattr(region, "WHOLE_READ_MAX", 0)
            mp.setattr(region._Window, "CHUNK", 64)
            assert summary(mx.open(p)) == want, name


def test_text_pickles_through_a_window_read_each_byte_once(tmp_path, monkeypatch):
    # Each protocol 0 opcode is a line; reading a fresh MAX_LINE bytes per line copied 40 GB
    # for this 0.8 MB pickle (and a megabyte per opcode for the > 64 MiB ones).
    from model_explorer.formats.pytorch import region

    p = tmp_path / "text.pkl"
    p.write_bytes(pickle.dumps(list(range(100_000)), protocol=0))
    monkeypatch.setattr(region, "WHOLE_READ_MAX", 0)
    src = LocalSource(str(p))
    assert not [f for f in read_pickle(src).report.findings if f.severity == "error"]
    assert src.bytes_read == src.size


def test_opcode_limits_are_findings(tmp_path, monkeypatch):
    from model_explorer.formats.pytorch import vm as pickle_vm

    p = tmp_path / "long.pkl"
    p.write_bytes(pickle.dumps(list(range(200)), protocol=2) + hostile_pickles(tmp_path / "m")[
        "os_system_p2"])
    monkeypatch.setattr(pickle_vm, "MAX_OPCODE_SPANS", 10)
    ckpt = mx.open(p)
    assert one(ckpt.findings, "opcode_spans_capped").severity == "info"
    assert len([s for s in ckpt.spans if s.kind == "opcode" and s.path.startswith("pickle >")]) == 10
    assert "dangerous_import" in codes(ckpt)  # emulation goes on past the labelling cap
    monkeypatch.setattr(pickle_vm, "MAX_OPCODES", 50)
    ckpt = mx.open(p)  # past the emulation cap, the imports are still read (issue 43)
    assert one(ckpt.findings, "pickle_imports_only").severity == "info"
    assert "dangerous_import" in codes(ckpt)
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "dangerous"
    monkeypatch.setattr(pickle_vm, "MAX_OPCODES_SCANNED", 20)
    ckpt = mx.open(p)
    assert one(ckpt.findings, "pickle_too_long").severity == "warning"
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "suspicious"


def _long4(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw if len(raw) < 256 else \
        b"\x8b" + len(raw).to_bytes(4, "little") + raw


def test_sizes_beyond_int64_are_findings(tmp_path, small_zip):
    # Integers of thousands of digits cannot even be written in a message: each must become a
    # finding before any arithmetic or text uses it.
    with zipfile.ZipFile(small_zip) as z:
        pkl = z.read("small/data.pkl")
    huge = _long4(10 ** 5000)
    assert pkl.count(b"K\x0c\x85") == 1 and pkl.count(b"K\x0ct") == 1
    out = tmp_path / "huge.pt"
    zip_with_data_pkl(small_zip, pkl.replace(b"K\x0c\x85", huge + b"\x85").replace(b"K\x0ct", huge + b"t"),
                      out)
    ckpt = mx.open(out)
    assert one(ckpt.findings, "bad_tensor_shape").tensor == "a"
    assert "bad_persistent_id" in codes(ckpt)
    assert ckpt.tensors["a"].shape == ()


def test_shapes_of_absurd_rank_are_refused(tmp_path):
    import numpy as np

    func, args, state = np.zeros(2, np.float32).__reduce__()
    for shape in [(2,) * 200_000, (1 << 70, 1 << 70)]:
        p = tmp_path / "rank.pkl"
        p.write_bytes(pickle.dumps({"w": _Reduce(func, args, state[:1] + (shape,) + state[2:])},
                                   protocol=2))
        ckpt = mx.open(p)  # the product of 200,000 dimensions alone took half a minute
        assert "w" not in ckpt.tensors


class _Reduce:
    def __init__(self, *reduced):
        self.reduced = reduced

    def __reduce__(self):
        return self.reduced


def test_reusing_one_big_value_cannot_multiply_work(tmp_path):
    # One 1 MB string passed 3,000 times (through the memo) to _codecs.encode: without a budget
    # each call copies it, 3 GB of work from a 1 MB file (and millions of calls fit in a pickle).
    s = b"a" * (1 << 20)
    p = tmp_path / "amplify.pkl"
    p.write_bytes(b"\x80\x02X" + len(s).to_bytes(4, "little") + s + b"q\x00c_codecs\nencode\nq\x01"
                  b"X\x06\x00\x00\x00latin1q\x02" + b"h\x01h\x00h\x02\x86R0" * 3000 + b"N.")
    ckpt = mx.open(p)
    f = one(ckpt.findings, "pickle_work_capped")
    assert f.severity == "warning" and 1 << 20 < f.offset < p.stat().st_size
    assert "pickle_emulation" not in codes(ckpt)


def test_numpy_array_with_an_impossible_shape_is_a_finding(tmp_path):
    import numpy as np

    class Bad:  # what numpy writes, with a negative dimension no array can have
        def __reduce__(self):
            return (np._core.multiarray._reconstruct, (np.ndarray, (0,), b"b"),
                    (1, (-3, 2), np.dtype("f4"), False, bytes(24)))

    p = tmp_path / "bad.pkl"
    p.write_bytes(pickle.dumps({"ok": np.ones(2, np.float32), "bad": Bad()}, protocol=4))
    ckpt = mx.open(p)
    assert set(ckpt.tensors) == {"ok"}
    f = one(ckpt.findings, "numpy_array_invalid")
    assert f.severity == "warning" and "'bad'" in f.message and "(-3, 2)" in f.message
    assert f.offset is not None and f.offset < p.stat().st_size
