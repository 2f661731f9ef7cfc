"""Deep checks: one test per diagnosis, asserting the code, the tensor and the worst location."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.samples import sample_path

from .conftest import pack_mlx, write_gguf, write_safetensors

RNG = np.random.default_rng(9)


def _codes(ckpt):
    return {(f.code, f.tensor) for f in ckpt.findings}


def _finding(ckpt, code, tensor):
    return next(f for f in ckpt.findings if f.code == code and f.tensor == tensor)


@pytest.fixture
def bad(tmp_path):
    w = RNG.normal(size=(8, 16)).astype(np.float32)
    nan = w.copy()
    nan[3, 5] = np.nan
    nan[6, 0] = np.inf
    big = w.copy()
    big[2, 7] = 1e6
    emb = RNG.normal(size=(32, 16)).astype(np.float32)
    head = emb.copy()
    head[10, 4] += 0.5
    path = write_safetensors(tmp_path / "model.safetensors", {
        "model.embed_tokens.weight": emb, "lm_head.weight": head,
        "model.layers.0.self_attn.q_proj.weight": w.repeat(3, axis=0),  # 24 rows: 6 heads of 4
        "model.layers.0.input_layernorm.weight": np.full(16, 1.0, np.float32) + RNG.normal(0, .01, 16).astype(np.float32),
        "model.layers.0.post_attention_layernorm.weight": np.full(16, 5000.0, np.float32) + np.arange(16, dtype=np.float32),
        "model.layers.1.mlp.up_proj.weight": nan, "model.layers.1.mlp.down_proj.weight": big,
        "model.layers.1.mlp.gate_proj.weight": np.zeros((4, 4), np.float32),
        "model.layers.1.self_attn.v_proj.bias": np.full(4, 0.5, np.float32)},
        config={"hidden_size": 16, "num_hidden_layers": 3, "vocab_size": 32, "num_attention_heads": 4,
                "tie_word_embeddings": True})
    return mx.open(str(tmp_path), deep=True), path


def test_nan_and_inf_with_first_location(bad):
    ckpt, _ = bad
    f = _finding(ckpt, "nan_inf", "model.layers.1.mlp.up_proj.weight")
    info = ckpt.tensors[f.tensor]
    assert f.severity == "error" and "1 NaN and 1 Inf" in f.message and "[3, 5]" in f.message
    assert f.offset == info.offset + (3 * 16 + 5) * 4 and f.length == 4


def test_all_zero_and_constant(bad):
    ckpt, _ = bad
    assert ("all_zero", "model.layers.1.mlp.gate_proj.weight") in _codes(ckpt)
    f = _finding(ckpt, "constant", "model.layers.1.self_attn.v_proj.bias")
    assert "0.5" in f.message


def test_norm_far_from_one(bad):
    ckpt, _ = bad
    f = _finding(ckpt, "norm_exploded", "model.layers.0.post_attention_layernorm.weight")
    assert f.severity == "warning"
    # It says what it saw, not only what it expected.
    assert "mean |w| = 5008" in f.message and "from 5000 to 5015" in f.message
    assert ("norm_far_from_one", "model.layers.0.input_layernorm.weight") not in _codes(ckpt)


def test_fp16_overflow_points_at_the_value(bad):
    ckpt, _ = bad
    f = _finding(ckpt, "fp16_overflow", "model.layers.1.mlp.down_proj.weight")
    assert "[2, 7]" in f.message and f.offset == ckpt.tensors[f.tensor].offset + (2 * 16 + 7) * 4


def test_tied_weights_that_differ(bad):
    ckpt, _ = bad
    f = _finding(ckpt, "tied_weights_differ", "lm_head.weight")
    assert "tie_word_embeddings" in f.message and "[10, 4]" in f.message
    assert f.extra["max_abs_diff"] == pytest.approx(0.5)


def test_config_contradicting_shapes(bad):
    ckpt, _ = bad
    msgs = [f.message for f in ckpt.findings if f.code == "config_mismatch"]
    assert any("num_hidden_layers = 3" in m and "0 to 1" in m for m in msgs)
    assert any("num_attention_heads = 4" in m and "6 heads of 4" in m for m in msgs)
    assert not any("hidden_size" in m or "vocab_size" in m for m in msgs)


def test_mlx_zero_scales(tmp_path):
    codes = RNG.integers(0, 16, size=(4, 64))
    scales = np.ones((4, 2), np.float16)
    scales[2, 1] = 0
    write_safetensors(tmp_path / "model.safetensors", {
        "l.weight": pack_mlx(codes, 4), "l.scales": scales, "l.biases": np.zeros((4, 2), np.float16)},
        config={"quantization": {"bits": 4, "group_size": 32}})
    ckpt = mx.open(str(tmp_path), deep=True)
    f = _finding(ckpt, "mlx_bad_scales", "l.weight")
    s = ckpt.tensors["l.weight"].quant.parts["scales"]
    assert f.offset == s.offset + 5 * 2 and "[2, 1]" in f.message


def test_gguf_tied_pair_and_metadata(tmp_path):
    emb = RNG.normal(size=(16, 32)).astype(np.float32)
    out = emb.copy()
    out[1, 1] += 1e-3
    path = write_gguf(tmp_path / "g.gguf", {"token_embd.weight": emb, "output.weight": out,
                                             "blk.0.attn_q.weight": np.zeros((32, 32), np.float32)},
                      kv={"llama.embedding_length": 32, "llama.block_count": 2})
    ckpt = mx.open(path, deep=True)
    assert ("tied_weights_close", "output.weight") in _codes(ckpt)  # no config says they are tied
    assert any(f.code == "config_mismatch" and "block_count = 2" in f.message for f in ckpt.findings)


def test_clean_sample_has_no_findings():
    """SmolLM2's blk.0.attn_norm (mean |w| 0.027, half negative) is healthy: no false alarm."""
    ckpt = mx.open(sample_path(), deep=True)
    assert ckpt.findings == []
