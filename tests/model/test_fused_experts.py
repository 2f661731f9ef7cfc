"""Fused expert tensors as people ship them get no false finding, at open (built-in tables) and in
doctor's cross-check (transformers on the meta device): gpt-oss in bf16 ([experts, in, out], as
transformers holds it) and in MXFP4 (`_blocks` + `_scales`, stored [experts, out, in/32, 16]),
and the per-expert layouts transformers 5 fuses at load (Mixtral, Qwen3-MoE, DeepSeek-V3)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from quant_codec.layouts import mxfp4_layer  # tests/ is on the path: its folders are packages

import model_explorer as mx

from .family_configs import tiny_config

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

MODEL_CODES = {"missing_tensors", "unexpected_tensors", "shape_mismatch", "transposed_weight",
               "lm_head_missing", "config_mismatch", "key_prefix", "key_prefix_doubled", "unknown_architecture"}


def _saved(tmp_path, model_type: str, **overrides):
    cfg = transformers.AutoConfig.for_model(model_type, **{
        k: v for k, v in tiny_config(model_type, **overrides).items() if k != "model_type"})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    d = tmp_path / model_type
    model.save_pretrained(d)
    return d, model


def _model_findings(ckpt):
    return [str(f) for f in ckpt.findings if f.code in MODEL_CODES]


def _both(d):
    """Findings at open and after doctor's cross-check."""
    return _model_findings(mx.open(d)), _model_findings(mx.open(d, cross_check=True))


@pytest.mark.parametrize("model_type", ["gpt_oss", "mixtral", "qwen3_moe", "deepseek_v3"])
def test_saved_by_transformers_is_clean(tmp_path, model_type):
    d, _ = _saved(tmp_path, model_type)
    assert _both(d) == ([], [])


def _as_mxfp4(d_bf16, d_out, model):
    """The gpt-oss folder as OpenAI ships it: experts' gate_up_proj / down_proj as MXFP4 blocks of
    the transposed ([out, in]) matrices, quantization_config mxfp4."""
    from safetensors.numpy import save_file

    out, ref = {}, {}
    for k, v in model.state_dict().items():
        v = v.detach().float().numpy()
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            t, deq = mxfp4_layer(k, np.ascontiguousarray(v.transpose(0, 2, 1)))
            out.update(t)
            ref[k] = deq
        elif k != "lm_head.weight" or not model.config.tie_word_embeddings:
            out[k] = v
    d_out.mkdir()
    save_file(out, str(d_out / "model.safetensors"))
    cfg = json.loads((d_bf16 / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (d_out / "config.json").write_text(json.dumps(cfg))
    return ref


def test_gpt_oss_mxfp4_is_clean_and_its_experts_read_as_stored(tmp_path):
    d, model = _saved(tmp_path, "gpt_oss", intermediate_size=64, hidden_size=64, head_dim=16)
    ref = _as_mxfp4(d, tmp_path / "mxfp4", model)
    assert _both(tmp_path / "mxfp4") == ([], [])
    ckpt = mx.open(tmp_path / "mxfp4")
    name = "model.layers.0.mlp.experts.gate_up_proj"
    info = ckpt.tensors[name]
    # the logical tensor is [experts, out, in], the transpose of transformers' parameter
    assert info.label == "MXFP4" and info.shape == (4, 128, 64)
    assert tuple(model.state_dict()[name].shape) == (4, 64, 128)
    np.testing.assert_array_equal(ckpt.read(name), ref[name])


def test_gpt_oss_mxfp4_stored_the_wrong_way_round_is_an_error(tmp_path):
    d, model = _saved(tmp_path, "gpt_oss", intermediate_size=64, hidden_size=64, head_dim=16)
    _as_mxfp4(d, tmp_path / "mxfp4", model)
    from safetensors.numpy import load_file, save_file

    path = tmp_path / "mxfp4" / "model.safetensors"
    t = load_file(str(path))
    w = model.state_dict()["model.layers.1.mlp.experts.gate_up_proj"].detach().float().numpy()
    t.update(mxfp4_layer("model.layers.1.mlp.experts.gate_up_proj", w)[0])  # [E, in, out]: not transposed
    save_file(t, str(path))
    for found in _both(tmp_path / "mxfp4"):
        assert len(found) == 1 and "shape_mismatch" in found[0] and "layers.1.mlp.experts.gate_up_proj" in found[0]


def test_diff_of_mxfp4_against_its_float_model_aligns_the_experts(tmp_path):
    # the same parameter in two orientations is compared as one, square or not (down_proj is
    # [4, 64, 64] here: its shape alone cannot tell)
    d, model = _saved(tmp_path, "gpt_oss", intermediate_size=64, hidden_size=64, head_dim=16)
    ref = _as_mxfp4(d, tmp_path / "mxfp4", model)
    for a, b in ((d, tmp_path / "mxfp4"), (tmp_path / "mxfp4", d)):
        table = mx.diff(a, b, tokenizers=False).set_index("name")
        for name, q in ref.items():
            w = model.state_dict()[name].detach().float().numpy().transpose(0, 2, 1)
            row = table.loc[name]
            assert row["status"] == "dtype", row
            assert row["max_abs_diff"] == pytest.approx(float(np.abs(w - q).max()), rel=1e-6)
            assert row["cosine"] > 0.99
