"""The layer profile: a zeroed, exploded, duplicated or swapped layer stands out, a clean model
does not, and HF and GGUF names land in the same roles."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.checks.layers import layer_outliers, layer_profile, layer_role

from .synth import llama_like, write_gguf, write_safetensors

ROLES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"]


def _open(tmp_path, tensors):
    return mx.open(write_safetensors(tmp_path / "m.safetensors", tensors))


def _flagged(ckpt):
    return {(f.code, f.extra["layer"], f.extra["role"]) for f in mx.layer_findings(ckpt)}


def test_roles_from_hf_and_gguf_names():
    assert layer_role("model.layers.3.self_attn.q_proj.weight") == (3, "q")
    assert layer_role("blk.3.attn_q.weight") == (3, "q")
    assert layer_role("blk.7.ffn_down.weight") == (7, "down")
    assert layer_role("model.layers.2.mlp.experts.17.up_proj.weight") == (2, "experts")
    assert layer_role("blk.2.ffn_up_exps.weight") == (2, "experts")
    assert layer_role("model.layers.2.mlp.gate.weight") == (2, "router")
    assert layer_role("model.layers.2.mlp.shared_experts.down_proj.weight") == (2, "shared")
    assert layer_role("model.layers.0.self_attn.kv_a_proj_with_mqa.weight") == (0, "kv_a")
    assert layer_role("blk.0.attn_norm.weight") == (0, "attn_norm")
    assert layer_role("model.layers.0.self_attn.q_proj.bias") is None
    assert layer_role("model.embed_tokens.weight") is None


def test_roles_from_tensorflow_and_flax_path_names():
    """tf_model.h5 and flax_model.msgpack name tensors by path; the layers group them as the
    PyTorch names they convert to (model/crossformat_names.py)."""
    tf = "tf_bert_model/bert/encoder/layer_._3/attention/self/query/kernel:0"
    assert layer_role(tf) == (3, "q")
    assert layer_role("tf_bert_model/bert/encoder/layer_._3/attention/output/LayerNorm/gamma:0") == (3, "attn_norm")
    assert layer_role("tf_bert_model/bert/encoder/layer_._3/attention/output/LayerNorm/beta:0") is None
    assert layer_role("bert/encoder/layer/3/intermediate/dense/kernel") == (3, "up")
    assert layer_role("params/bert/encoder/layer/0/output/dense/kernel") == (0, "down")
    assert layer_role("transformer/h/4/attn/c_attn/kernel") == (4, "qkv")
    assert layer_role("bert/embeddings/word_embeddings/embedding") is None


def test_clean_model_has_no_findings(tmp_path):
    ckpt = _open(tmp_path, llama_like(layers=10))
    grid = layer_profile(ckpt)
    assert list(grid.index) == list(range(10))
    assert {"q", "k", "v", "o", "gate", "up", "down", "attn_norm", "ffn_norm"} <= set(grid.columns)
    assert mx.layer_findings(ckpt) == []


def test_zeroed_layer(tmp_path):
    t = llama_like(layers=10)
    t["model.layers.4.mlp.down_proj.weight"][:] = 0
    ckpt = _open(tmp_path, t)
    assert _flagged(ckpt) == {("layer_outlier", 4, "down")}
    f = mx.layer_findings(ckpt)[0]
    info = ckpt.tensors["model.layers.4.mlp.down_proj.weight"]
    assert (f.tensor, f.offset, f.length, f.file) == (info.name, info.offset, info.length, info.file)


def test_exploded_layer(tmp_path):
    t = llama_like(layers=10)
    t["model.layers.6.self_attn.o_proj.weight"] *= 50
    assert _flagged(_open(tmp_path, t)) == {("layer_outlier", 6, "o")}


def test_duplicated_layer(tmp_path):
    t = llama_like(layers=10)
    t["model.layers.5.mlp.up_proj.weight"] = t["model.layers.3.mlp.up_proj.weight"].copy()
    assert ("layer_duplicate", 5, "up") in _flagged(_open(tmp_path, t))


def test_swapped_layers(tmp_path):
    t = llama_like(layers=10)
    for r in ROLES:
        a, b = f"model.layers.1.{r}.weight", f"model.layers.7.{r}.weight"
        t[a], t[b] = t[b], t[a]
    flagged = _flagged(_open(tmp_path, t))
    assert {layer for _, layer, _ in flagged} == {1, 7}
    assert {role for _, _, role in flagged} == {"q", "k", "v", "o", "gate", "up", "down", "attn_norm", "ffn_norm"}


def test_gguf_names_profile_like_hf(tmp_path):
    from model_explorer.tensors.names import hf_to_gguf

    t = llama_like(layers=8)
    t["model.layers.2.mlp.up_proj.weight"] *= 40
    g = {hf_to_gguf(k): v for k, v in t.items() if hf_to_gguf(k)}
    ckpt = mx.open(write_gguf(tmp_path / "m.gguf", g))
    out = layer_outliers(ckpt)
    assert [(r["layer"], r["role"]) for r in out.to_dict("records")] == [(2, "up")]


def test_plot_layers_marks_outliers(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    t = llama_like(layers=8)
    t["model.layers.3.self_attn.q_proj.weight"][:] = 0
    ax = mx.plot_layers(_open(tmp_path, t), stat="norm")
    boxes = [p for p in ax.patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert len(boxes) == 1
    assert boxes[0].get_xy() == (list(layer_profile(_open(tmp_path, t)).columns).index("q") - 0.5, 2.5)


def test_profile_from_a_stats_table(tmp_path):
    t = llama_like(layers=8)
    t["model.layers.5.mlp.gate_proj.weight"] *= 1e3
    table = _open(tmp_path, t).stats_table(progress=False)  # sampled moments: norm derived
    assert np.isfinite(layer_profile(table)["gate"]).all()
    assert _flagged_table(table) == {("layer_outlier", 5, "gate")}


def _flagged_table(table):
    return {(f.code, f.extra["layer"], f.extra["role"]) for f in mx.layer_findings(table)}


def test_cli_scan_prints_the_table_and_layer_findings(tmp_path, capsys):
    from model_explorer.cli import main

    t = llama_like(layers=8)
    t["model.layers.2.mlp.down_proj.weight"][:] = 0
    p = write_safetensors(tmp_path / "m.safetensors", t)
    assert main(["scan", p, "--plot", str(tmp_path / "l.png"), "--out", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "layer_outlier" in out and "Layer 2 down" in out
    assert (tmp_path / "l.png").stat().st_size > 1000 and (tmp_path / "t.csv").is_file()


def test_open_checkpoint_methods_match_the_functions(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    t = llama_like(layers=8)
    t["model.layers.3.self_attn.q_proj.weight"][:] = 0
    ckpt = _open(tmp_path, t)
    assert ckpt.layer_profile().equals(layer_profile(ckpt))
    ax = ckpt.plot_layers()
    assert len([p for p in ax.patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]) == 1
