"""`info` and `hexdump` beside gguf-dump: metadata values in --json, arrays as their length and
first items (as gguf-dump, but in words, never a Python list), a danger banner and the doctor's exit codes, counted words, `hexdump --tensor`, and a
description for every option."""

from __future__ import annotations

import argparse
import json
import pickle

from model_explorer.cli import build_parser, main

from .conftest import shard_dir, small_gguf, st_bytes, st_entry, write


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo never",))


def test_info_json_gives_metadata_values(tmp_path, capsys):
    blob, _ = small_gguf()
    path = write(tmp_path, "m.gguf", blob)
    assert main(["info", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    meta = data["metadata"]
    assert meta["general.architecture"] == "llama"
    assert isinstance(data["metadata_keys"], list)
    arrays = {k: v for k, v in meta.items() if isinstance(v, (dict, list))}
    for v in arrays.values():  # short arrays whole, long ones as length and first elements
        assert isinstance(v, list) and len(v) <= 16 or set(v) == {"type", "length", "first"}
    assert main(["info", path, "--json", "--full-arrays"]) == 0
    full = json.loads(capsys.readouterr().out)["metadata"]
    assert all(isinstance(full[k], list) for k in arrays)


def test_info_text_prints_arrays_as_their_length_and_first_items(tmp_path, capsys):
    import gguf
    import numpy as np

    path = tmp_path / "a.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("general.languages", ["en"])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(10)])
    w.add_tensor("w", np.ones(4, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert 'general.languages: 1 item: "en"\n' in out
    assert "tokenizer.ggml.scores: 10 items: 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, …\n" in out
    assert "GGUFArray" not in out
    assert "1 tensor," in out and "0 errors" in out
    assert main(["info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["general.languages"] == ["en"]


def test_info_on_a_hostile_pickle_warns_first_and_exits_1(tmp_path, capsys):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"x": _Evil()}))
    assert main(["info", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "DANGER" in lines[1] and "system" in lines[1]
    assert "findings: 1 error," in lines[-1]
    assert main(["info", str(path), "--json"]) == 1


def test_info_on_a_broken_file_exits_1_and_a_missing_one_2(tmp_path, capsys):
    bad = write(tmp_path, "bad.safetensors",
                st_bytes({"a": st_entry("F32", [2], 0, 8), "b": st_entry("F32", [2], 4, 12)}, b"\0" * 12))
    assert main(["info", bad]) == 1
    assert capsys.readouterr().out.startswith("ERRORS: 1 error (first: data_overlap")
    assert main(["info", str(tmp_path / "nope.safetensors")]) == 2


def test_info_says_how_many_indexed_tensors_are_readable(tmp_path, capsys):
    d, _, _ = shard_dir(tmp_path)
    (d / "model-00002-of-00003.safetensors").unlink()
    assert main(["info", str(d)]) == 1
    assert "4 of 6 indexed tensors readable" in capsys.readouterr().out
    assert main(["info", str(d), "--json"]) == 1
    missing = json.loads(capsys.readouterr().out)["missing_tensors"]
    assert {m["name"] for m in missing} == {"layers.2.w0", "layers.2.w1"}


def test_hexdump_tensor_starts_at_its_first_byte_in_its_file(tmp_path, capsys):
    d, _, arrays = shard_dir(tmp_path)
    shard = d / "model-00003-of-00003.safetensors"
    raw = shard.read_bytes()
    data = arrays["layers.3.w1"].tobytes()
    n = int.from_bytes(raw[:8], "little")  # the header length; data_offsets count from its end
    start = 8 + n + json.loads(raw[8:8 + n])["layers.3.w1"]["data_offsets"][0]
    assert raw[start:start + len(data)] == data
    assert main(["hexdump", str(d), "--tensor", "layers.3.w1", "--length", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"layers.3.w1: {len(data)} bytes at {start}") and str(shard) in out[0]
    assert out[1].startswith(f"{start:010x}  " + " ".join(f"{b:02x}" for b in data[:8]))
    assert main(["hexdump", str(d), "--tensor", "layers.3.w9"]) == 2
    assert "did you mean 'layers.3.w1'" in capsys.readouterr().err


def test_every_option_has_a_description():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.dest}" for name, p in sub.choices.items() for a in p._actions if not a.help]
    assert not missing, missing
