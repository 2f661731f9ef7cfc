"""Memory estimates: the KV figure equals transformers' cache tensors byte for byte on the CPU,
sliding-window layers and MLA follow their own formulas, and the device-size search."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model import memory

from .conftest import write_folder


def _cache_bytes(model_type: str, tokens: int, **extra) -> tuple[int, str]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(model_type, vocab_size=64, hidden_size=64, intermediate_size=96,
                                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                            head_dim=16, max_position_embeddings=64, **extra)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        cache = model(torch.arange(tokens)[None], use_cache=True).past_key_values
    total = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    return total, cfg


def _folder(tmp_path, cfg) -> str:
    d = tmp_path / "m"
    d.mkdir()
    cfg.save_pretrained(str(d))
    from safetensors.numpy import save_file

    save_file({"model.embed_tokens.weight": np.zeros((64, 64), np.float32)}, str(d / "model.safetensors"))
    return str(d)


@pytest.mark.reference
def test_kv_bytes_equal_transformers_cache_exactly(tmp_path):
    want, cfg = _cache_bytes("llama", 10)
    est = mx.memory(_folder(tmp_path, cfg), context=10, kv_dtype="f32")
    assert est.kv_bytes == want == 2 * 2 * 2 * 16 * 10 * 4  # layers x (k, v) x kv_heads x head_dim x ctx x 4
    assert "kv_heads 2" in est.kv_formula


@pytest.mark.reference
def test_sliding_window_layers(tmp_path):
    # transformers stores window - 1 positions and appends the new one when it attends: the
    # estimate counts the window it attends over, one position per sliding layer more.
    stored, cfg = _cache_bytes("qwen2", 10, sliding_window=4, use_sliding_window=True, max_window_layers=1)
    est = mx.memory(_folder(tmp_path, cfg), context=10, kv_dtype="f32")
    per_position = 2 * 2 * 16 * 4
    assert est.kv_bytes == stored + 1 * per_position
    assert "1 sliding-window layers keep at most 4" in est.kv_formula


def test_mla_counts_the_compressed_latent(tmp_path):
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
           "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
           "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840}
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(1, np.float32)}, str(d / "model.safetensors"))
    est = mx.memory(str(d), context=4096)
    assert est.kv_bytes == 61 * (512 + 64) * 4096 * 2 and "MLA" in est.kv_formula


def test_gqa_table_and_device_fit(tmp_path):
    d = write_folder(tmp_path / "m")
    ckpt = mx.open(d)
    rows = memory.table(ckpt)
    assert [r["context"] for r in rows] == [256]  # the model's maximum is below 2k
    est = memory.estimate(ckpt, context=128, fits="1GiB")
    assert est.fits and est.max_context == 256
    tight = memory.estimate(ckpt, 256).total_bytes - 1
    assert memory.max_context(ckpt, tight) == 255
    assert memory.parse_size("24GB") == 24 * 10**9 and memory.parse_size("24GiB") == 24 * 2**30


def test_sample_memory_table_has_the_standard_contexts():
    rows = memory.table(mx.open(mx.sample_path()))
    assert [r["context"] for r in rows] == [2048, 8192]
    # SmolLM2-135M: 30 layers x 2 x 3 KV heads x 64 x 2 bytes = 23,040 bytes per token in f16
    assert rows[0]["kv_bytes"] == 23040 * 2048


@pytest.mark.reference
@pytest.mark.parametrize("model_type, layers, sliding", [("gemma2", 4, 2), ("gemma3_text", 7, 6)])
def test_gemma_windows_without_layer_types(tmp_path, model_type, layers, sliding):
    """A Gemma 2/3 config.json without layer_types slides as transformers defaults it (every
    other layer; five of six), not on every layer: the KV figure is that of transformers' cache."""
    d = tmp_path / "m"
    d.mkdir()
    cfg = {"model_type": model_type, "num_hidden_layers": layers, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4, "vocab_size": 64,
           "max_position_embeddings": 64}
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.numpy import save_file

    save_file({"model.embed_tokens.weight": np.zeros((64, 64), np.float32)}, str(d / "model.safetensors"))
    est = mx.memory(str(d), context=10, kv_dtype="f32")
    assert f"{sliding} sliding-window layers keep at most 4" in est.kv_formula
    transformers = pytest.importorskip("transformers")
    types = transformers.AutoConfig.for_model(model_type, num_hidden_layers=layers, sliding_window=4).layer_types
    assert types.count("sliding_attention") == sliding


def test_gemma3_gguf_slides_five_layers_of_six(tmp_path):
    """llama.cpp hard-codes Gemma 3's pattern (no key lists it): 15 of 18 layers slide."""
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "g.gguf")
    w = gguf.GGUFWriter(path, "gemma3")
    for key, value in (("block_count", 18), ("embedding_length", 64), ("attention.head_count", 4),
                       ("attention.head_count_kv", 1), ("attention.sliding_window", 512), ("context_length", 4096)):
        (w.add_uint32 if isinstance(value, int) else w.add_float32)(f"gemma3.{key}", value)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    est = mx.memory(path, context=4096, kv_dtype="f32")
    assert "15 sliding-window layers keep at most 512" in est.kv_formula
