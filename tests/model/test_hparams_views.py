"""One hyperparameter reader: the card's HParams (hparams.py: card, memory, the will-load check)
and the decoder's ModelConfig (config.from_hf, a view over hparams.from_config plus what only
the decoder needs) give the same numbers for the same config.json, and the KV cache's bytes are
computed by one formula (memory.kv_bytes) for the estimate and the decoder's cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model import families, memory
from model_explorer.model.config import from_hf
from model_explorer.model.hparams import from_config, read_hparams

from .family_configs import SIZES, tiny_config


def _folder(tmp_path, cfg: dict):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(1, np.float32)}, str(d / "model.safetensors"))
    return d


def _sliding(cfg) -> int | None:
    """How many layers the decoder's config slides (None: no window)."""
    if not cfg.sliding_window:
        return None
    return cfg.num_layers if cfg.sliding_layers is None else sum(cfg.sliding_layers)


def _agree(hp, cfg) -> None:
    fam = families.family(cfg.architecture)
    pairs = {"hidden": cfg.hidden_size, "layers": cfg.num_layers, "heads": cfg.num_heads, "vocab": cfg.vocab_size,
             "intermediate": cfg.intermediate_size, "context": cfg.max_position_embeddings,
             "tied_embeddings": cfg.tie_word_embeddings, "sliding_window": cfg.sliding_window}
    if fam.attention != "mla":  # MLA's head dims are the decoder's own (nope + rope), its KV the latent
        pairs.update(kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim)
    got = {k: hp.get(k) for k in pairs}
    if fam.intermediate_default_x4 and got["intermediate"] is None:
        got["intermediate"] = 4 * hp.get("hidden")  # GPT-2's n_inner null
    assert got == pairs
    assert (hp.get("sliding_layers") if hp.get("sliding_window") else None) == _sliding(cfg)


GEMMA2_WITHOUT_LAYER_TYPES = [
    {},  # no window said: transformers' 4096, every other layer
    {"sliding_window": 4096},
    {"sliding_window": 512, "sliding_window_pattern": 3},  # Gemma 2 has no pattern key: still alternating
]


@pytest.mark.parametrize("extra", GEMMA2_WITHOUT_LAYER_TYPES, ids=["no-window", "window", "stray-pattern"])
def test_gemma2_without_layer_types_agrees(tmp_path, extra):
    cfg = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "vocab_size": 128, **extra}
    hp = read_hparams(mx.open(_folder(tmp_path, cfg)))
    decoder = from_hf(cfg)
    assert decoder.sliding_layers == [True, False, True, False]
    assert hp.get("sliding_layers") == 2 and hp.get("sliding_window") == decoder.sliding_window
    _agree(hp, decoder)


@pytest.mark.parametrize("model_type", sorted(SIZES))
def test_both_views_give_the_same_numbers(tmp_path, model_type):
    pytest.importorskip("transformers")
    cfg = tiny_config(model_type)
    _agree(read_hparams(mx.open(_folder(tmp_path, cfg))), from_hf(cfg))


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2", "smollm3"])
def test_a_config_that_leaves_the_defaults_out_agrees(model_type):
    """Only sizes said: the tie, the context and the window are the family's defaults in both."""
    keep = ("model_type", "hidden_size", "n_embd", "intermediate_size", "num_hidden_layers", "n_layer",
            "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "vocab_size",
            "n_positions")  # GPT-2 states its context (transformers would default it to 1024, the decoder 2048)
    pytest.importorskip("transformers")
    cfg = {k: v for k, v in tiny_config(model_type).items() if k in keep}
    _agree(from_config(cfg), from_hf(cfg))


def test_tie_default_is_the_rows():
    for row in families.ROWS:
        hp = from_config({"model_type": row.model_type, "hidden_size": 8, "num_hidden_layers": 1})
        assert hp.get("tied_embeddings") is row.tie_default
        assert hp.values["tied_embeddings"].source == "default"


def test_kv_bytes_one_formula():
    # layers x positions x kv heads x (key + value dims) x bytes
    assert memory.kv_bytes(2 * 10, 4, 16, 16, 2.0) == 2 * 10 * 4 * 32 * 2
    hp = from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 8})
    got, _, _ = memory.kv_cache_bytes(hp, 10, 1, "f16")
    assert got == memory.kv_bytes(2 * 10, 2, 16, 16, 2.0)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_gemma_27b_gguf_scales_attention_as_llamacpp(arch):
    """llama.cpp scales Gemma 2 and 3 27B (46 and 62 layers) by 1/sqrt(hidden / heads): the rows of
    both say so (gguf_width_scale_layers), for the converter and the reader alike."""
    from model_explorer.model.config_gguf import from_gguf

    layers = 46 if arch == "gemma2" else 62
    meta = {"general.architecture": arch, f"{arch}.embedding_length": 128, f"{arch}.attention.head_count": 4,
            f"{arch}.attention.key_length": 16, f"{arch}.attention.value_length": 16,
            f"{arch}.feed_forward_length": 64, f"{arch}.block_count": layers, f"{arch}.vocab_size": 32}
    assert from_gguf(meta, {"token_embd.weight"}).attention_scale == pytest.approx((128 / 4) ** -0.5)
    meta[f"{arch}.block_count"] = 3
    assert from_gguf(meta, {"token_embd.weight"}).attention_scale is None
