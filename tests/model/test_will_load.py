"""Will it load: one small folder per classic fault, each diagnosed once with cause and fix, and
the same folder without the fault gives no model finding. Header-only: plain mx.open/doctor."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model import expected

from .conftest import model_findings, only, tiny_cfg, tiny_state, write_folder, write_gguf


@pytest.fixture(params=["transformers", "built-in"])
def source(request, monkeypatch):
    """Every fault is diagnosed with transformers on the meta device (the cross-check doctor
    runs) and with the built-in table (what opening uses)."""
    if request.param == "transformers":
        pytest.importorskip("transformers")
        monkeypatch.setattr(mx, "open", functools.partial(mx.open, cross_check=True))
    else:
        monkeypatch.setattr(expected, "transformers_available", lambda: False)
    return request.param


def test_clean_folder_has_no_model_finding(tmp_path, source):
    ckpt = mx.open(write_folder(tmp_path / "m"))
    assert model_findings(ckpt) == [], [str(f) for f in ckpt.findings]


def test_clean_tied_folder(tmp_path, source):
    cfg = tiny_cfg(tie_word_embeddings=True)
    ckpt = mx.open(write_folder(tmp_path / "m", cfg, tiny_state(cfg)))
    assert model_findings(ckpt) == [], [str(f) for f in ckpt.findings]


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod.", "base_model.model."])
def test_common_prefix_is_one_finding(tmp_path, source, prefix):
    state = {prefix + k: v for k, v in tiny_state(tiny_cfg()).items()}
    ckpt = mx.open(write_folder(tmp_path / "m", state=state))
    f = only(ckpt, "key_prefix")
    assert f.severity == "error" and f.extra["prefix"] == prefix and f.extra["count"] == len(state)
    assert f"{len(state)} of {len(state)}" in f.message and "removeprefix" in f.fix
    assert f.tensor.startswith(prefix) and f.offset is not None
    # the prefix explains everything: no missing / unexpected / lm_head lines
    assert [x.code for x in model_findings(ckpt)] == ["key_prefix"]


def test_doubled_model_prefix(tmp_path, source):
    state = {"model." + k: v for k, v in tiny_state(tiny_cfg()).items()}
    ckpt = mx.open(write_folder(tmp_path / "m", state=state))
    f = only(ckpt, "key_prefix_doubled")  # transformers' head class strips one: a warning of its own
    assert "model.model." in f.message and f.extra["prefix"] == "model."
    assert "k.removeprefix('model.')" in f.fix


def test_lm_head_missing_while_config_does_not_tie(tmp_path, source):
    state = tiny_state(tiny_cfg())
    del state["lm_head.weight"]
    d = write_folder(tmp_path / "m", state=state)
    ckpt = mx.open(d)
    f = only(ckpt, "lm_head_missing")
    raw = (tmp_path / "m" / "config.json").read_bytes()
    assert raw[f.offset:f.offset + f.length] == b"false"  # points at tie_word_embeddings' value
    assert "tie_word_embeddings" in f.fix and "random" in f.message
    assert [x.code for x in model_findings(ckpt)] == ["lm_head_missing"]


def test_transposed_weight(tmp_path, source):
    state = tiny_state(tiny_cfg())
    name = "model.layers.1.mlp.down_proj.weight"
    state[name] = np.ascontiguousarray(state[name].T)
    ckpt = mx.open(write_folder(tmp_path / "m", state=state))
    f = only(ckpt, "transposed_weight")
    assert f.tensor == name and "[96, 64]" in f.message and "W.T" in f.fix
    assert [x.code for x in model_findings(ckpt)] == ["transposed_weight"]


@pytest.mark.parametrize("key,value,quantity", [
    ("vocab_size", 300, "vocab"), ("hidden_size", 48, "hidden"), ("num_attention_heads", 2, "heads"),
    ("num_hidden_layers", 3, "layers"), ("intermediate_size", 128, "intermediate"),
    ("num_key_value_heads", 4, "kv_heads")])
def test_config_contradicting_the_shapes(tmp_path, source, key, value, quantity):
    state = tiny_state(tiny_cfg())
    cfg = tiny_cfg(**{key: value})
    if key == "hidden_size":
        cfg["head_dim"] = 16
    d = write_folder(tmp_path / "m", cfg, state, tokenizer=None)
    ckpt = mx.open(d)
    mism = [f for f in ckpt.findings if f.code == "config_mismatch"]
    assert [f.extra["quantity"] for f in mism][:1] == [quantity], [str(f) for f in ckpt.findings]
    f = mism[0]
    raw = (tmp_path / "m" / "config.json").read_bytes()
    assert raw[f.offset:f.offset + f.length] == str(value).encode() and f.fix
    assert f"{key} = {value}" in f.message
    # the mismatch explains the per-tensor shape lines
    assert not [x for x in ckpt.findings if x.code == "shape_mismatch"], [str(x) for x in ckpt.findings]


def test_experts_against_config(tmp_path, source):
    pytest.importorskip("transformers") if source == "transformers" else None
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": 32, "hidden_size": 16,
           "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
           "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": True}
    rng = np.random.default_rng(0)
    state = {"model.embed_tokens.weight": rng.standard_normal((32, 16)).astype(np.float32),
             "model.norm.weight": np.ones(16, np.float32)}
    for e in range(3):  # 3 experts saved, config says 4
        for w, shape in (("w1", (24, 16)), ("w2", (16, 24)), ("w3", (24, 16))):
            state[f"model.layers.0.block_sparse_moe.experts.{e}.{w}.weight"] = np.zeros(shape, np.float32)
    d = write_folder(tmp_path / "m", cfg, state, tokenizer=None)
    f = next(f for f in mx.open(d).findings if f.code == "config_mismatch")
    assert f.extra["quantity"] == "experts" and f.extra["found"] == 3


def test_missing_and_unexpected_are_listed_like_transformers(tmp_path, source):
    state = tiny_state(tiny_cfg())
    del state["model.layers.1.mlp.up_proj.weight"]
    state["model.layers.0.self_attn.rotary_emb.extra"] = np.zeros(4, np.float32)
    ckpt = mx.open(write_folder(tmp_path / "m", state=state))
    assert only(ckpt, "missing_tensors").extra["missing"] == ["model.layers.1.mlp.up_proj.weight"]
    assert only(ckpt, "unexpected_tensors").extra["unexpected"] == ["model.layers.0.self_attn.rotary_emb.extra"]


def test_unknown_architecture_still_gets_built_in_checks(tmp_path, source):
    cfg = tiny_cfg(model_type="frobnicator", architectures=["FrobnicatorForCausalLM"], vocab_size=300)
    ckpt = mx.open(write_folder(tmp_path / "m", cfg, tiny_state(tiny_cfg()), tokenizer=None))
    assert only(ckpt, "unknown_architecture").severity == "info"
    assert any(f.code == "config_mismatch" and f.extra["quantity"] == "vocab" for f in ckpt.findings)


def test_config_json_not_json_points_at_the_byte(tmp_path):
    d = write_folder(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text('{"model_type": "llama",\n "hidden_size": 64,,\n}')
    f = only(mx.open(d), "bad_config")
    raw = (tmp_path / "m" / "config.json").read_bytes()
    assert raw[f.offset:f.offset + 2] == b",\n" and "line 2" in f.message and f.fix


# -- GGUF ------------------------------------------------------------------------------------------

def test_gguf_clean_and_missing_and_unexpected(tmp_path):
    ckpt = mx.open(write_gguf(tmp_path / "ok.gguf"))
    assert model_findings(ckpt) == [], [str(f) for f in ckpt.findings]
    state = tiny_state(tiny_cfg())
    del state["model.layers.1.mlp.gate_proj.weight"]
    ckpt = mx.open(write_gguf(tmp_path / "bad.gguf", state=state))
    assert only(ckpt, "missing_tensors").extra["missing"] == ["blk.1.ffn_gate.weight"]


def test_gguf_block_count_against_tensors(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", cfg=dict(tiny_cfg(), num_hidden_layers=2),
                      state=tiny_state(tiny_cfg(num_hidden_layers=1)))
    f = next(f for f in mx.open(path).findings if f.code == "config_mismatch")
    assert f.extra["quantity"] == "layers" and "block_count = 2" in f.message
    assert not any(x.code == "missing_tensors" for x in mx.open(path).findings)


def test_bundled_sample_is_clean():
    ckpt = mx.open(mx.sample_path())
    assert model_findings(ckpt) == [], [str(f) for f in ckpt.findings]


# -- doctor and load_model blame the real cause ----------------------------------------------------

def test_doctor_without_deep_reports_the_prefix(tmp_path, capsys):
    from model_explorer.cli import main

    state = {"module." + k: v for k, v in tiny_state(tiny_cfg()).items()}
    d = write_folder(tmp_path / "m", state=state)
    assert main(["doctor", d, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    f = next(x for x in out["findings"] if x["code"] == "key_prefix")
    assert "removeprefix" in f["fix"]


def test_load_model_blames_the_prefix_not_the_head(tmp_path):
    from model_explorer.model.config import UnsupportedModel

    state = {"_orig_mod." + k: v for k, v in tiny_state(tiny_cfg()).items()}
    d = write_folder(tmp_path / "m", state=state)
    with pytest.raises(UnsupportedModel) as e:
        mx.load_model(d, device="cpu")
    assert "_orig_mod." in str(e.value) and "removeprefix" in str(e.value)
    assert "initialised at random" not in str(e.value) and "has no tensor" not in str(e.value)


def test_doctor_text_prints_cause_and_fix(tmp_path, capsys):
    from model_explorer.cli import main

    state = tiny_state(tiny_cfg())
    del state["lm_head.weight"]
    assert main(["doctor", write_folder(tmp_path / "m", state=state)]) == 1
    out = capsys.readouterr().out
    assert "lm_head_missing" in out and "    fix: Save the checkpoint with its lm_head.weight" in out


def test_gptq_style_names_are_not_missing(tmp_path, source):
    cfg = tiny_cfg(quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 32})
    state = tiny_state(tiny_cfg())
    for name in [n for n in state if n.endswith("proj.weight")]:
        w = state.pop(name)
        base = name.removesuffix(".weight")
        state[base + ".qweight"] = np.zeros((w.shape[1] // 8, w.shape[0]), np.int32)
        state[base + ".scales"] = np.ones((w.shape[1] // 32, w.shape[0]), np.float16)
        state[base + ".qzeros"] = np.zeros((w.shape[1] // 32, w.shape[0] // 8), np.int32)
    ckpt = mx.open(write_folder(tmp_path / "m", cfg, state))
    assert model_findings(ckpt) == [], [str(f) for f in ckpt.findings]
    del state["model.layers.1.mlp.up_proj.qweight"], state["model.layers.1.mlp.up_proj.scales"]
    del state["model.layers.1.mlp.up_proj.qzeros"]
    ckpt = mx.open(write_folder(tmp_path / "m2", cfg, state))
    assert only(ckpt, "missing_tensors").extra["missing"] == ["model.layers.1.mlp.up_proj.weight"]
