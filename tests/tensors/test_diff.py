"""mx.diff: added/removed/shape/dtype rows, value metrics, and safetensors <-> GGUF matching."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

import model_explorer as mx
from model_explorer.tensors.names import permute_qk, unpermute_qk

from .conftest import write_gguf, write_safetensors

RNG = np.random.default_rng(11)
N_HEAD, N_KV, HEAD_DIM, HIDDEN = 4, 2, 8, 32


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (written out from its definition)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


@pytest.fixture
def hf_model(tmp_path):
    t = {
        "model.embed_tokens.weight": RNG.normal(size=(64, HIDDEN)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": RNG.normal(size=(N_HEAD * HEAD_DIM, HIDDEN)).astype(np.float32),
        "model.layers.0.self_attn.k_proj.weight": RNG.normal(size=(N_KV * HEAD_DIM, HIDDEN)).astype(np.float32),
        "model.layers.0.self_attn.v_proj.weight": RNG.normal(size=(N_KV * HEAD_DIM, HIDDEN)).astype(np.float32),
        "model.layers.0.input_layernorm.weight": np.ones(HIDDEN, np.float32),
        "model.norm.weight": np.ones(HIDDEN, np.float32),
    }
    path = write_safetensors(tmp_path / "hf" / "model.safetensors", t,
                             config={"num_attention_heads": N_HEAD, "num_key_value_heads": N_KV})
    return path, t


def _to_gguf(tmp_path, t, qtype=None, permute=True):
    g = {}
    for name, w in t.items():
        gname = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                 "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
                 "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
                 "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
                 "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight"}[name]
        if permute and gname == "blk.0.attn_q.weight":
            w = llama_permute(w, N_HEAD)
        if permute and gname == "blk.0.attn_k.weight":
            w = llama_permute(w, N_KV)
        g[gname] = (quants.quantize(w, qtype), qtype) if qtype and w.ndim == 2 else w
    return write_gguf(tmp_path / "m.gguf", g, kv={"llama.attention.head_count": N_HEAD,
                                                   "llama.attention.head_count_kv": N_KV})


def test_same_model_safetensors_vs_f32_gguf_is_identical(tmp_path, hf_model):
    path, t = hf_model
    table = mx.diff(path, _to_gguf(tmp_path, t))
    assert set(table["status"]) == {"same"}, table
    assert (table["max_abs_diff"] == 0).all() and np.allclose(table["cosine"], 1.0)
    row = table.set_index("name").loc["model.layers.0.self_attn.q_proj.weight"]
    assert row["name_b"] == "blk.0.attn_q.weight"


def test_permutation_matters(tmp_path, hf_model):
    path, t = hf_model
    table = mx.diff(path, _to_gguf(tmp_path, t, permute=False)).set_index("name")
    assert table.loc["model.layers.0.self_attn.q_proj.weight", "status"] == "changed"
    assert table.loc["model.layers.0.self_attn.v_proj.weight", "status"] == "same"


def test_quantized_gguf_is_close_but_dtype_changed(tmp_path, hf_model):
    path, t = hf_model
    table = mx.diff(_to_gguf(tmp_path, t, Q.Q8_0), path).set_index("name")
    q = table.loc["blk.0.attn_q.weight"]
    assert q["status"] == "dtype" and q["dtype_a"] == "Q8_0" and q["dtype_b"] == "F32"
    assert 0 < q["max_abs_diff"] < 0.05 and q["cosine"] > 0.9999 and q["rel_l2"] < 0.01


def test_added_removed_and_shape_rows(tmp_path):
    a = write_safetensors(tmp_path / "a.safetensors", {"x": np.zeros(3, np.float32), "gone": np.zeros(2, np.float32),
                                                       "s": np.zeros((2, 2), np.float32)})
    b = write_safetensors(tmp_path / "b.safetensors", {"x": np.array([0, 3, 4], np.float32),
                                                       "new": np.zeros(1, np.int8), "s": np.zeros(4, np.float32)})
    table = mx.diff(mx.open(a), mx.open(b)).set_index("name")
    assert table.loc["gone", "status"] == "removed" and table.loc["new", "status"] == "added"
    assert table.loc["s", "status"] == "shape"
    x = table.loc["x"]
    assert x["status"] == "changed" and x["max_abs_diff"] == 4 and x["rel_l2"] == np.inf and x["cosine"] == 0


def test_cli_diff_prints_json(tmp_path, hf_model):
    path, t = hf_model
    out = subprocess.run([sys.executable, "-m", "model_explorer.cli", "diff", path, _to_gguf(tmp_path, t),
                          "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["status"] for r in rows} == {"same"}


def test_permutation_round_trip():
    w = RNG.normal(size=(N_HEAD * HEAD_DIM, 5))
    assert np.array_equal(permute_qk(w, N_HEAD), llama_permute(w, N_HEAD))
    assert np.array_equal(unpermute_qk(permute_qk(w, N_HEAD), N_HEAD), w)


@pytest.mark.parametrize("heads", [1000, 3])  # more heads than rows; rows not a whole number of head pairs
def test_head_counts_that_cannot_be_a_permutation_are_ignored(tmp_path, heads):
    q = RNG.normal(size=(8, 4)).astype(np.float32)
    a = write_safetensors(tmp_path / "hf" / "model.safetensors", {"model.layers.0.self_attn.q_proj.weight": q})
    b = write_gguf(tmp_path / "m.gguf", {"blk.0.attn_q.weight": q}, kv={"llama.attention.head_count": heads})
    row = mx.diff(a, b).iloc[0]
    assert row["status"] == "same" and row["max_abs_diff"] == 0


@pytest.mark.parametrize("model_type, extra", [
    ("gemma2", {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4,
                "query_pre_attn_scalar": 16, "tie_word_embeddings": True}),
    ("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
    ("llama", {}),
])
def test_a_family_against_its_gguf_conversion_is_the_same_model(tmp_path, model_type, extra):
    """What llama.cpp's converter changes is undone, so the copy compares equal both ways:
    Gemma's norms stored as 1 + w (post_attention_norm is Gemma's own, not ffn_norm), each
    expert against its row of the stacked ffn_*_exps, Llama's permuted q/k rows."""
    folder = mx.random_model({"model_type": model_type, **extra}, tmp_path / model_type)
    gguf = mx.convert(folder, tmp_path / f"{model_type}.gguf", format="gguf", dtype="F32")
    for a, b in ((folder, gguf), (gguf, folder)):
        table = mx.diff(a, b, tokenizers=False)
        assert set(table["status"]) <= {"same", "changed"}, table[~table["status"].isin(["same", "changed"])]
        assert table["max_abs_diff"].max() <= 1e-6 and table["cosine"].min() > 0.999999
    experts = table[table["name_b"].str.contains(".experts.", regex=False, na=False)]
    assert len(experts) == (24 if model_type == "qwen3_moe" else 0)
    if model_type == "qwen3_moe":  # a's side is the GGUF here: one row of the stack per expert
        assert "blk.0.ffn_gate_exps.weight[0]" in set(table["name"])
