"""What the CLI and the deep config checks make of Hub-quantized folders."""

from __future__ import annotations

import model_explorer as mx
from model_explorer.cli import main as cli_main

from . import layouts as L


def test_doctor_calls_a_valid_gptq_model_healthy(tmp_path, capsys):
    """Issue 11: doctor exited 1 on every GPTQ layer ("'…scales' has no '…weight'")."""
    tensors, quant = L.gptq(4, 32)
    folder = L.write(tmp_path / "m", tensors, quant)
    assert cli_main(["doctor", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "scales" not in out and "no config.json" not in out


def test_info_prints_the_scheme(tmp_path, capsys):
    tensors, quant = L.gptq(4, 32)
    quant["desc_act"] = True
    cli_main(["info", str(L.write(tmp_path / "m", tensors, quant))])
    out = capsys.readouterr().out
    assert "quantization: GPTQ_Q4 (gptq), 4 bits, group 32, symmetric, act-order" in out
    assert "unquantized: model.embed_tokens, lm_head" in out
    assert "bits per weight: GPTQ_Q4 " in out
    assert "GPTQ_Q4  [64, 64]" in out  # the logical shape in the tensor table


def _config_findings(ckpt):
    """The model layer's header-only checks of the config against the (logical) shapes."""
    return [(f.code, f.message) for f in ckpt.findings if f.code in ("config_mismatch", "shape_mismatch")]


def test_no_false_head_count_on_bnb_nf4(tmp_path):
    tensors, quant = L.bnb4("nf4", True)
    ckpt = mx.open(str(L.write(tmp_path / "m", tensors, quant)))
    assert _config_findings(ckpt) == []
    # with its quant state broken the weight keeps its packed [n/2, 1] shape: still no
    # head-count claim from it
    blob = b"junk"
    tensors["model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4"] = ("U8", (4,), blob)
    ckpt = mx.open(str(L.write(tmp_path / "n", tensors, quant)))
    assert ckpt.tensors["model.layers.0.self_attn.q_proj.weight"].shape == (2048, 1)
    assert _config_findings(ckpt) == []


def test_head_count_still_checked_on_logical_shapes(tmp_path):
    tensors, quant = L.gptq(4, 32)
    folder = L.write(tmp_path / "m", tensors, quant)
    import json

    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_key_value_heads"] = 4  # k_proj has 32 rows = 2 heads of 16
    (folder / "config.json").write_text(json.dumps(cfg))
    found = _config_findings(mx.open(str(folder)))
    assert [c for c, _ in found] == ["config_mismatch"] and "2 key/value heads" in found[0][1]
