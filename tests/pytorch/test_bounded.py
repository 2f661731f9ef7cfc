"""No input crashes or exhausts the reader: duplicate zip entries are all judged, malformed and
deeply nested embedded files become findings, a reader's crash becomes `internal_error`,
findings are capped per code, and `doctor`'s exit codes mean what a CI needs."""

from __future__ import annotations

import io
import pickle
import struct
import zipfile

import pytest

import model_explorer as mx
from model_explorer import assemble
from model_explorer.cli import main
from model_explorer.spans import MAX_FINDINGS_PER_CODE

from .helpers import hostile_pickles

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def verdict(ckpt, path) -> str:
    return ckpt.details["files"][str(path)]["pickle"]["verdict"]


def codes(ckpt) -> set[str]:
    return {f.code for f in ckpt.findings}


def two_data_pkls(first: bytes, last: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", first)
        z.writestr("archive/byteorder", "little")
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("archive/data.pkl", last)
    return buf.getvalue()


@pytest.mark.parametrize("evil_last", [True, False])
def test_every_copy_of_a_duplicated_entry_is_judged(tmp_path, evil_last):
    marker = tmp_path / "marker"
    evil, benign = hostile_pickles(marker)["os_system_p2"], pickle.dumps({"a": 1}, protocol=2)
    data = two_data_pkls(benign, evil) if evil_last else two_data_pkls(evil, benign)
    p = tmp_path / "dup.pt"
    p.write_bytes(data)
    assert zipfile.ZipFile(p).read("archive/data.pkl") == (evil if evil_last else benign)
    ckpt = mx.open(p)
    dup = [f for f in ckpt.findings if f.code == "zip_duplicate_entry"]
    assert dup and "load the last one" in dup[0].message
    assert verdict(ckpt, p) == "dangerous"
    danger = [f for f in ckpt.errors if f.code == "dangerous_import"]
    assert danger and ("not the one torch loads" in danger[0].message) != evil_last
    assert main(["doctor", str(p)]) == 1
    assert not marker.exists()


@pytest.mark.parametrize("args", [b")", b"K\x05\x85", b"}\x85", b"N\x85", b"(K\x01K\x02t"])
def test_malformed_load_from_bytes_calls_are_findings(tmp_path, args):
    p = tmp_path / "lfb.pkl"
    p.write_bytes(b"\x80\x02ctorch.storage\n_load_from_bytes\n" + args + b"R.")
    ckpt = mx.open(p)
    assert "bad_embedded_storage" in codes(ckpt)
    assert "internal_error" not in codes(ckpt)


def legacy_file(data_pickle: bytes) -> bytes:
    info = {"protocol_version": 1001, "little_endian": True,
            "type_sizes": {"short": 2, "int": 4, "long": 4}}
    return (pickle.dumps(LEGACY_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2)
            + pickle.dumps(info, protocol=2) + data_pickle + pickle.dumps([], protocol=2))


def nested_legacy(levels: int, marker) -> bytes:
    """A legacy torch file whose pickle calls _load_from_bytes on another, `levels` deep; the
    innermost one runs os.system."""
    inner = legacy_file(hostile_pickles(marker)["os_system_p2"])
    for _ in range(levels):
        inner = legacy_file(b"\x80\x02ctorch.storage\n_load_from_bytes\nB"
                            + struct.pack("<I", len(inner)) + inner + b"\x85R.")
    return inner


def test_deeply_nested_embedded_files_stop_at_a_depth(tmp_path):
    marker = tmp_path / "marker"
    p = tmp_path / "deep.pt"
    p.write_bytes(nested_legacy(400, marker))
    ckpt = mx.open(p)
    assert "embedded_too_deep" in codes(ckpt) and "internal_error" not in codes(ckpt)
    assert verdict(ckpt, p) == "suspicious"
    assert main(["doctor", str(p)]) == 1
    assert not marker.exists()


def test_shallow_nesting_still_finds_the_payload(tmp_path):
    marker = tmp_path / "marker"
    p = tmp_path / "nest3.pt"
    p.write_bytes(nested_legacy(3, marker))
    ckpt = mx.open(p)
    assert "dangerous_import" in codes(ckpt) and verdict(ckpt, p) == "dangerous"
    assert not marker.exists()


def test_a_reader_crash_is_an_internal_error(tmp_path, monkeypatch, capsys):
    def broken(source):
        raise KeyError("boom")

    monkeypatch.setitem(assemble.READERS, "pickle", broken)
    p = tmp_path / "x.pkl"
    p.write_bytes(pickle.dumps([1], protocol=2))
    ckpt = mx.open(p)  # returns, never raises
    f = [f for f in ckpt.findings if f.code == "internal_error"][0]
    assert f.severity == "error" and f.extra["exception"] == "KeyError"
    assert "test_bounded.py" in f.extra["place"] and "KeyError" in f.message
    assert main(["doctor", str(p)]) == 2  # a crash is not a verdict: never exit 1
    assert "Traceback" not in capsys.readouterr().err


def test_findings_are_capped_per_code(tmp_path):
    """500,000 distinct unknown classes in one pickle: 1,000 findings and one summary."""
    n = 5000
    body = b"".join(b"c" + f"pkg{i}\nC\n".encode() + b"a" for i in range(n))
    p = tmp_path / "many.pkl"
    p.write_bytes(b"\x80\x02]" + body + b".")
    ckpt = mx.open(p)
    found = [f for f in ckpt.findings if f.code == "unknown_import"]
    assert len(found) == MAX_FINDINGS_PER_CODE + 1
    assert found[-1].extra == {"capped": True, "total": n}
    assert f"{n - MAX_FINDINGS_PER_CODE} more" in found[-1].message


def test_doctor_exit_codes_and_strict(tmp_path, capsys):
    clean = tmp_path / "clean.pkl"
    clean.write_bytes(pickle.dumps({"a": [1, 2]}, protocol=4))
    warn = tmp_path / "warn.pkl"
    warn.write_bytes(b"\x80\x02]cmypackage\nThing\na.")  # referenced only: a warning
    assert main(["doctor", str(clean)]) == 0
    assert main(["doctor", "--strict", str(clean)]) == 0
    assert main(["doctor", str(warn)]) == 0
    assert main(["doctor", "--strict", str(warn)]) == 1
    assert main(["doctor", str(tmp_path / "missing.pkl")]) == 2
    out = capsys.readouterr().out
    assert "pickle verdict: suspicious" in out and "pickle verdict: safe" in out


def test_a_crash_outside_the_readers_exits_2_not_1(tmp_path, monkeypatch, capsys):
    from model_explorer import opener

    def broken(path, make):
        raise RuntimeError("boom")

    monkeypatch.setattr(opener, "assemble", broken)
    p = tmp_path / "x.pkl"
    p.write_bytes(pickle.dumps([1], protocol=2))
    assert main(["doctor", str(p)]) == 2
    assert "internal error: RuntimeError: boom" in capsys.readouterr().err


def test_the_nesting_depth_belongs_to_one_read(tmp_path):
    # A read in progress inside an embedded file (in a widget's thread, say) must not count
    # towards the depth of another read: a file nested exactly MAX_EMBED_DEPTH levels deep,
    # read while another read is one level down, is still read to its innermost pickle.
    from model_explorer.formats.pytorch import MAX_EMBED_DEPTH, read_torch_legacy
    from model_explorer.formats.pytorch.placement import BytesSource

    deepest = nested_legacy(MAX_EMBED_DEPTH, tmp_path / "marker")  # as deep as is read
    inner = legacy_file(pickle.dumps([1, 2], protocol=2)) + bytes(5000)  # a Blob: read in place
    outer = legacy_file(b"\x80\x02ctorch.storage\n_load_from_bytes\nB"
                        + struct.pack("<I", len(inner)) + inner + b"\x85R.")
    seen = []

    class Paused(BytesSource):
        """The outer file: when the embedded file's reader (its depth taken) reads its first
        pickle, the other read runs meanwhile."""

        def read(self, offset: int, n: int) -> bytes:
            if offset == outer.index(inner) and n > 64 and not seen:  # past detect()'s 64 bytes
                seen.append(read_torch_legacy(BytesSource(deepest)))
            return super().read(offset, n)

    read_torch_legacy(Paused(outer))
    (other,) = seen
    found = {f.code for f in other.report.findings}
    assert "embedded_too_deep" not in found and "dangerous_import" in found, found
