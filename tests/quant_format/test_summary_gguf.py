"""The quantization summary of a GGUF: general.file_type by name and the real mix."""

from __future__ import annotations

import gguf
import numpy as np

import model_explorer as mx
from model_explorer.cli import main as cli_main


def _write(path, file_type: int | None) -> str:
    w = gguf.GGUFWriter(str(path), "llama")
    if file_type is not None:
        w.add_file_type(file_type)
    q4 = gguf.GGMLQuantizationType.Q4_K
    q6 = gguf.GGMLQuantizationType.Q6_K
    # raw bytes: rows x (blocks per row x block bytes); Q4_K 144 B and Q6_K 210 B per 256
    for i in range(3):
        w.add_tensor(f"blk.{i}.ffn_up.weight", np.zeros((256, 2 * 144), np.uint8), raw_dtype=q4)
    w.add_tensor("output.weight", np.zeros((256, 2 * 210), np.uint8), raw_dtype=q6)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(512, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_gguf_file_type_and_mix(tmp_path):
    ckpt = mx.open(_write(tmp_path / "m.gguf", 15))
    q = ckpt.summary()["quantization"]
    assert q["scheme"] == "gguf" and q["file_type"] == "MOSTLY_Q4_K_M" and q["file_type_id"] == 15
    rows = {r["label"]: r for r in q["mix"]}
    assert rows["Q4_K"]["bits_per_weight"] == 4.5 and rows["Q6_K"]["bits_per_weight"] == 6.5625
    assert rows["Q4_K"]["parameters"] == 3 * 256 * 512 and rows["F32"]["parameters"] == 512
    params = 4 * 256 * 512 + 512
    nbytes = 3 * 256 * 288 + 256 * 420 + 512 * 4
    assert q["parameters"] == params and q["bytes"] == nbytes
    assert abs(q["bits_per_weight"] - 8 * nbytes / params) < 1e-12
    assert q["text"] == (f"{8 * nbytes / params:.3g} bits per weight: Q4_K 75% of weights at 4.5, "
                         "Q6_K 25% at 6.56, F32 norms")


def test_gguf_without_file_type(tmp_path):
    q = mx.open(_write(tmp_path / "m.gguf", None)).summary()["quantization"]
    assert q["file_type"] is None and q["label"] == "Q4_K"


def test_cli_info_prints_quantization(tmp_path, capsys):
    cli_main(["info", _write(tmp_path / "m.gguf", 15)])
    out = capsys.readouterr().out
    assert "quantization: MOSTLY_Q4_K_M (gguf)" in out
    assert "Q4_K 75% of weights at 4.5, Q6_K 25% at 6.56, F32 norms" in out
