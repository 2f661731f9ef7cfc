"""The command line: info, hexdump, doctor (exit codes 0/1/2 and the --json shape)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from model_explorer.cli import main

from .conftest import small_gguf, st_bytes, st_entry, write


@pytest.fixture
def good(tmp_path):
    return write(tmp_path, "good.safetensors", st_bytes({"w": st_entry("F32", [2, 2], 0, 16)}, b"\0" * 16))


@pytest.fixture
def bad(tmp_path):
    # "b" overlaps "a": an error finding
    blob = st_bytes({"a": st_entry("F32", [2], 0, 8), "b": st_entry("F32", [2], 4, 12)}, b"\0" * 12)
    return write(tmp_path, "bad.safetensors", blob)


def test_info_text_and_json(good, capsys):
    assert main(["info", good]) == 0
    out = capsys.readouterr().out
    assert "safetensors" in out and "w" in out and "F32" in out
    assert main(["info", good, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "safetensors" and data["tensor_count"] == 1
    assert data["tensors"][0] == {"name": "w", "dtype": "F32", "shape": [2, 2], "file": good,
                                  "offset": 8 + os.path.getsize(good) - 8 - 16, "length": 16}


def test_info_gguf_shows_metadata(tmp_path, capsys):
    blob, _ = small_gguf()
    path = write(tmp_path, "m.gguf", blob)
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "general.architecture: llama\n" in out and "tokenizer.ggml.tokens" in out


def test_doctor_clean_file_exits_0(good, capsys):
    assert main(["doctor", good]) == 0
    assert "no findings" in capsys.readouterr().out


def test_doctor_errors_exit_1_with_json_report(bad, capsys):
    assert main(["doctor", bad, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"source", "format", "tensor_count", "findings", "verdicts"}
    assert (data["source"], data["format"], data["tensor_count"]) == (bad, "safetensors", 2)
    f = next(f for f in data["findings"] if f["code"] == "data_overlap")
    assert set(f) == {"severity", "code", "message", "offset", "length", "tensor", "file", "fix"}
    assert (f["severity"], f["tensor"], f["file"], f["length"]) == ("error", "b", bad, 4)


def test_doctor_text_lists_findings(bad, capsys):
    assert main(["doctor", bad]) == 1
    out = capsys.readouterr().out
    assert "data_overlap" in out and "at byte" in out


def test_doctor_warnings_only_exit_0(tmp_path):
    path = write(tmp_path, "w.safetensors", st_bytes({"a": st_entry("F32", [1], 0, 4)}, b"\0" * 6))
    assert main(["doctor", path]) == 0  # trailing bytes: a warning


def test_unreadable_source_and_usage_errors_exit_2(tmp_path, capsys):
    assert main(["doctor", str(tmp_path / "missing.safetensors")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["doctor"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["frobnicate", "x"])
    assert e.value.code == 2


def test_hexdump_labels_fields(tmp_path, capsys):
    blob, _ = small_gguf()
    path = write(tmp_path, "m.gguf", blob)
    assert main(["hexdump", path, "--length", "32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("0000000000  47 47 55 46")
    assert "magic = GGUF" in lines[0] and "version" in lines[0] and "tensor count" in lines[0]
    assert "key/value count" in lines[1]


def test_hexdump_offset_in_hex(good, capsys):
    assert main(["hexdump", good, "--offset", "0x8", "--length", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0000000008  7b 22") and "JSON header" in out


def test_doctor_through_a_subprocess(bad):
    proc = subprocess.run([sys.executable, "-m", "model_explorer.cli", "doctor", bad, "--json"],
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["format"] == "safetensors"
