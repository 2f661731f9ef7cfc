"""`model-explorer repair SOURCE DEST [--dry-run] [--only CODE ...] [--json]`."""

from __future__ import annotations

import json

from model_explorer.cli import main

from .conftest import llama_tensors, write_folder


def test_repair_and_exit_codes(tmp_path, capsys):
    src = write_folder(tmp_path / "src", {"module." + k: v for k, v in llama_tensors().items()})
    assert main(["repair", str(src), str(tmp_path / "dry"), "--dry-run"]) == 0
    assert "strip_prefix" in capsys.readouterr().out and not (tmp_path / "dry").exists()
    assert main(["repair", str(src), str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["applied"][0]["fix"] == "strip_prefix"
    assert main(["repair", str(src), str(tmp_path / "out")]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
    assert main(["repair", str(src), str(tmp_path / "only"), "--only", "rebuild_index"]) == 0
    assert "no such problem" in capsys.readouterr().out


def test_gguf_set_from_the_command_line(tmp_path, capsys):
    from .test_gguf import fields, make_gguf

    src = make_gguf(tmp_path / "m.gguf")
    out = tmp_path / "o" / "m.gguf"
    assert main(["repair", str(src), str(out), "--gguf-set", "tokenizer.ggml.pre=llama-bpe",
                 "llama.context_length=256", "--json"]) == 0
    b, _, _ = fields(out)
    assert b["tokenizer.ggml.pre"] == "llama-bpe" and b["llama.context_length"] == 256
