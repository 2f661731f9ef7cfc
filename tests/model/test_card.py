"""mx.card: what the model is, every value with the file and bytes it came from."""

from __future__ import annotations

import json

import pytest

import model_explorer as mx
from model_explorer.model.card import card

from .conftest import tiny_cfg, write_folder, write_gguf


def test_card_from_config_json_points_at_each_key(tmp_path):
    d = write_folder(tmp_path / "m", tiny_cfg(sliding_window=64, use_sliding_window=True))
    c = mx.card(d)
    assert c.architecture == "LlamaForCausalLM" and c.family == "llama family (Llama)"
    raw = (tmp_path / "m" / "config.json").read_bytes()
    for name, key, value in (("layers", "num_hidden_layers", 2), ("hidden", "hidden_size", 64),
                             ("kv_heads", "num_key_value_heads", 2), ("context", "max_position_embeddings", 256)):
        s = c.hparams[name]
        assert s.value == value and s.key == key and s.file.endswith("config.json")
        assert raw[s.offset:s.offset + s.length] == json.dumps(value).encode()
    assert c.hparams["head_dim"].value == 16
    assert c.value("tied_embeddings") is False
    assert c.parameters == sum(t.numel for t in mx.open(d).tensors.values())
    d2 = c.to_dict()
    json.dumps(d2)  # plain values all the way down
    assert d2["hparams"]["layers"]["key"] == "num_hidden_layers"
    assert d2["tokenizer"]["model"] == "BPE" and d2["chat_example"].endswith("<|im_start|>assistant\n")
    assert [m["context"] for m in d2["memory"]] == [256]


def test_card_from_gguf_points_at_key_values(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    ckpt = mx.open(path)
    c = card(ckpt)
    s = c.hparams["layers"]
    assert (s.value, s.key, s.source) == (2, "llama.block_count", "gguf")
    kv = ckpt.metadata["llama.block_count"]
    assert (s.offset, s.length) == (kv.offset, kv.length)
    assert c.hparams["tied_embeddings"].value is False  # output.weight is stored
    assert c.tokenizer["pre_tokenizer"] == "smollm" and c.tokenizer["count"] == 288


@pytest.mark.slow
def test_card_of_the_bundled_sample_matches_gguf_py():
    import gguf

    path = mx.sample_path()
    c = mx.card(path)
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]

    assert c.value("layers") == field("llama.block_count") == 30
    assert c.value("kv_heads") == field("llama.attention.head_count_kv")
    assert c.value("context") == field("llama.context_length")
    assert c.tokenizer["count"] == len(r.fields["tokenizer.ggml.tokens"].data)
    assert c.value("tied_embeddings") is True
    assert "llama family" in c.family and c.chat_example


def test_deepseek_mla_and_moe_values(tmp_path):
    cfg = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 3,
           "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 32,
           "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 8,
           "num_experts_per_tok": 2, "vocab_size": 100, "max_position_embeddings": 4096,
           "rope_scaling": {"type": "yarn", "factor": 4.0}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"model.embed_tokens.weight": np.zeros((100, 64), np.float32)}, str(tmp_path / "model.safetensors"))
    c = mx.card(str(tmp_path))
    assert c.value("experts") == 8 and c.value("experts_per_token") == 2 and c.value("kv_lora_rank") == 32
    assert c.value("rope_scaling")["factor"] == 4.0
    assert c.family.startswith("DeepSeek")


def test_cli_info_prints_the_card_first(tmp_path, capsys):
    from model_explorer.cli import main

    d = write_folder(tmp_path / "m")
    assert main(["info", d]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model: LlamaForCausalLM") and "num_hidden_layers" in out.split("\n\n")[0]
    assert main(["info", d, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["card"]["hparams"]["layers"]["value"] == 2


@pytest.mark.parametrize("broken", ["config", "tokenizer", "template"])
def test_card_fills_in_around_a_broken_side_file(tmp_path, broken):
    d = write_folder(tmp_path / "m")
    if broken == "config":
        (tmp_path / "m" / "config.json").write_text('{"model_type": "llama", "hidden_size": 64,,}')
    elif broken == "tokenizer":
        p = tmp_path / "m" / "tokenizer.json"
        p.write_bytes(p.read_bytes()[:500])
    else:
        (tmp_path / "m" / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }")
    c = mx.card(d)
    assert c.parameters > 0 and c.bytes > 0
    if broken != "config":
        assert c.value("layers") == 2


def test_explorer_model_tab_requests(tmp_path):
    from model_explorer.widgets import Explorer

    d = write_folder(tmp_path / "m")
    w = Explorer(d)
    card_data, _ = w.answer("model_card", {})
    json.dumps(card_data, allow_nan=False)
    layers = next(r for r in card_data["rows"] if r["name"] == "layers")
    assert layers["value"] == 2 and layers["where"] == "config.json num_hidden_layers"
    assert card_data["rows"][0]["name"] == "architecture"
    toks, _ = w.answer("tokenize", {"text": "hi<|im_end|>"})
    assert toks["tokens"][-1]["token"] == "<|im_end|>"
    found, _ = w.answer("find_token", {"query": "<|im_start|>"})
    assert found["tokens"][0]["token"] == "<|im_start|>"
    page, _ = w.answer("vocab", {"start": 0, "count": 3})
    assert page["total"] == 288 and page["start"] == 0 and [t["id"] for t in page["rows"]] == [0, 1, 2]


def test_open_returns_a_checkpoint_with_card_and_memory_methods(tmp_path):
    from model_explorer.checkpoint import Checkpoint

    d = write_folder(tmp_path / "m", tiny_cfg())
    ckpt = mx.open(d)
    assert isinstance(ckpt, Checkpoint)  # everything a Checkpoint does still works
    assert ckpt.card().to_dict() == mx.card(ckpt).to_dict()
    assert ckpt.memory(context=128) == mx.memory(ckpt, context=128)
    assert ckpt.memory(context=128, fits="1GB").fits is True
