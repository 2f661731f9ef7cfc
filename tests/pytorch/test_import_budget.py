"""A pickle naming hundreds of thousands of distinct callables: past the cap on imports kept
with their detail, every import is still judged by name, so a dangerous call placed after
them is reported, and memory stays bounded by the cap, not by the file."""

from __future__ import annotations

import pytest

import model_explorer as mx
from model_explorer.formats.pytorch import imports


def many_imports(count: int, called: bool, marker) -> bytes:
    """A list of `count` distinct imports (m.f<hex>), each called when `called`, then
    os.system('touch marker') appended last (protocol 2, MARK ... APPENDS in batches)."""
    call = b")R" if called else b""
    body = b"".join(b"(" + b"".join(b"cm\nf%x\n" % i + call
                                    for i in range(j, min(j + 1000, count))) + b"e"
                    for j in range(0, count, 1000))
    cmd = f"touch {marker}".encode()
    evil = b"cos\nsystem\nX" + len(cmd).to_bytes(4, "little") + cmd + b"\x85Ra"
    return b"\x80\x02]" + body + evil + b"."


@pytest.mark.parametrize("called", [False, True])
def test_a_dangerous_call_after_many_distinct_imports_is_reported(tmp_path, monkeypatch, called):
    monkeypatch.setattr(imports, "MAX_IMPORTS_KEPT", 2_000)
    monkeypatch.setattr(imports, "MAX_PAST_CAP_KEPT", 50)
    monkeypatch.setattr(imports, "MAX_SHARED", 100)
    marker = tmp_path / "marker"
    p = tmp_path / "imports.pkl"
    count = 300_000 if not called else 100_000
    p.write_bytes(many_imports(count, called, marker))
    ckpt = mx.open(p)
    info = ckpt.details["files"][str(p)]["pickle"]
    assert info["verdict"] == "dangerous"
    system = [f for f in ckpt.errors if "os.system" in f.message]
    assert system and system[0].code == "dangerous_import"
    assert "touch" in system[0].message
    capped = [f for f in ckpt.findings if f.code == "pickle_imports_capped"]
    assert len(capped) == 1 and f"{count + 1 - 2_000:,} more imports" in capped[0].message
    # bounded: the first 2,000, then at most the kept budget (and the called stand-ins)
    assert info["imports_total"] <= 2_000 + 50 + 101
    assert "internal_error" not in {f.code for f in ckpt.findings}
    assert not marker.exists()


def test_an_unknown_name_called_past_the_cap_is_an_error_with_its_name(tmp_path, monkeypatch):
    monkeypatch.setattr(imports, "MAX_IMPORTS_KEPT", 100)
    marker = tmp_path / "marker"
    junk = b"".join(b"cm\nf%x\n0" % i for i in range(500))  # referenced, never called
    cmd = f"touch {marker}".encode()
    gadget = b"cpty\nspawn\nX" + len(cmd).to_bytes(4, "little") + cmd + b"\x85R"
    p = tmp_path / "late.pkl"
    p.write_bytes(b"\x80\x02" + junk + gadget + b".")
    ckpt = mx.open(p)
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "dangerous"
    assert any("pty.spawn" in f.message and f.severity == "error" for f in ckpt.findings)
    assert "pickle_imports_capped" in {f.code for f in ckpt.findings}
    assert not marker.exists()


def test_unknown_names_past_the_cap_keep_a_file_suspicious(tmp_path, monkeypatch):
    monkeypatch.setattr(imports, "MAX_IMPORTS_KEPT", 100)
    allowed = b"ccollections\nOrderedDict\n0" * 100  # fills the cap with allowed names
    p = tmp_path / "late_unknown.pkl"
    p.write_bytes(b"\x80\x02" + allowed + b"cm\nf\n." )
    ckpt = mx.open(p)
    assert ckpt.details["files"][str(p)]["pickle"]["verdict"] == "suspicious"
