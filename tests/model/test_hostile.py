"""Side files nobody foresaw: odd types and sizes in config.json, tokenizer files and adapter
configs give findings or plain gaps in the card, never a traceback or a huge allocation."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model import expected

from .conftest import tiny_cfg, tiny_state, write_folder

ODD = [None, "64", -1, 0, 10**15, 2.5, [64], {"a": 1}, True, float("nan")]


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size",
                                 "head_dim", "num_key_value_heads", "max_position_embeddings",
                                 "tie_word_embeddings", "rope_scaling", "sliding_window", "layer_types"])
def test_odd_config_values(tmp_path, monkeypatch, key):
    monkeypatch.setattr(expected, "transformers_available", lambda: False)  # fast; transformers below
    state = tiny_state(tiny_cfg())
    for i, value in enumerate(ODD):
        d = write_folder(tmp_path / f"m{i}", tiny_cfg(**{key: value}), state, tokenizer=None)
        ckpt = mx.open(d)
        assert not [f for f in ckpt.findings if f.code == "model_check_failed"], [str(f) for f in ckpt.findings]
        c = mx.card(ckpt)
        c.text()
        json.dumps(c.to_dict(), default=str)


@pytest.mark.reference
def test_huge_config_is_not_built(tmp_path):
    pytest.importorskip("transformers")
    d = write_folder(tmp_path / "m", tiny_cfg(num_hidden_layers=10**7), tiny_state(tiny_cfg()), tokenizer=None)
    ckpt = mx.open(d, cross_check=True)
    f = next(f for f in ckpt.findings if f.code == "unknown_architecture")
    assert "not built" in f.message
    assert any(f.code == "config_mismatch" for f in ckpt.findings)


def test_odd_tokenizer_and_adapter_files(tmp_path):
    d = write_folder(tmp_path / "m", tokenizer=None)
    for name, text in (("tokenizer.json", '{"model": 5, "added_tokens": [{"id": "x"}, 3, {"id": -4}]}'),
                       ("tokenizer_config.json", '{"chat_template": [1, 2], "eos_token": {"content": 7}, '
                                                 '"added_tokens_decoder": {"9999999999": {}}}'),
                       ("special_tokens_map.json", "[]"),
                       ("chat_template.jinja", "\udcff".encode("utf-8", "surrogatepass").decode("latin-1"))):
        (tmp_path / "m" / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    ckpt = mx.open(d)
    assert not [f for f in ckpt.findings if f.code == "model_check_failed"], [str(f) for f in ckpt.findings]
    mx.card(ckpt).text()


def test_adapter_with_odd_config(tmp_path):
    from safetensors.numpy import save_file

    save_file({"base_model.model.model.layers.0.mlp.up_proj.lora_A.weight": np.zeros((4, 8), np.float32),
               "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight": np.zeros((8, 3), np.float32)},
              str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": "four", "lora_alpha": [1], "rank_pattern": {"(": 2}, "target_modules": 5}))
    ckpt = mx.open(str(tmp_path))
    codes = {f.code for f in ckpt.findings}
    assert {"adapter_config_invalid", "adapter_rank_mismatch", "adapter_untrained"} <= codes
    assert "model_check_failed" not in codes
    mx.card(ckpt).text()
