"""The built-in family tables (what opening checks against, with no torch) equal transformers' own
build of each architecture on the meta device: every name, shape, head and tie."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model import expected, families, hf_build
from model_explorer.model.hparams import read_hparams

from .family_configs import SIZES, tiny_config

pytest.importorskip("transformers")
pytest.importorskip("torch")

VARIANTS = [(mt, {}) for mt in SIZES] + [
    ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("llama", {"tie_word_embeddings": True}),
    ("qwen3", {"attention_bias": True}),
    ("qwen2", {"attention_bias": True}),  # ignored by Qwen2: its q/k/v biases are fixed, o has none
    ("gpt2", {"n_inner": 40}),
    ("gpt_neox", {"attention_bias": False}),
    ("qwen3_moe", {"decoder_sparse_step": 2}),
    ("qwen3_moe", {"mlp_only_layers": [0, 2]}),
    ("deepseek_v3", {"q_lora_rank": None}),
    ("deepseek_v3", {"first_k_dense_replace": 0, "n_shared_experts": 2}),
    ("gpt_oss", {"attention_bias": False}),
]


def _folder(tmp_path, cfg: dict):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(1, np.float32)}, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("model_type,overrides", VARIANTS,
                         ids=[f"{m}-{'-'.join(o) or 'default'}" for m, o in VARIANTS])
def test_builtin_table_equals_transformers(tmp_path, model_type, overrides):
    cfg = tiny_config(model_type, **overrides)
    hp = read_hparams(mx.open(_folder(tmp_path, cfg)))
    ours = expected.builtin(hp, config=cfg)
    ref = hf_build._build(cfg, None)
    assert ours is not None, f"no built-in table for {model_type}"
    assert set(ours.shapes) - set(ref.shapes) == set(), "names transformers does not have"
    assert set(ref.shapes) - set(ours.shapes) == set(), "names the built-in table lacks"
    assert {n: ours.shapes[n] for n in ref.shapes} == ref.shapes
    assert ours.head == (ref.head or families.family(model_type).head)
    assert ours.tied == ref.tied
    assert set(ours.required) | {ours.head} == set(ref.required)


def test_every_family_of_the_run_cell_issue_has_a_table():
    # the 17 families people run (issue 24), plus Qwen2-MoE
    for mt in ("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral", "gemma", "gemma2",
               "gemma3_text", "phi3", "olmo2", "smollm3", "granite", "gpt2", "gpt_neox", "gpt_oss",
               "deepseek_v3"):
        assert families.family(mt) is not None, mt


def test_in_out_parameters_are_the_transposed_ones():
    assert families.is_in_out("gpt_oss", "model.layers.3.mlp.experts.gate_up_proj")
    assert families.is_in_out("gpt2", "transformer.h.0.attn.c_attn.weight")
    assert not families.is_in_out("gpt_oss", "model.layers.3.mlp.router.weight")
    assert not families.is_in_out("llama", "model.layers.0.mlp.experts.gate_up_proj")
    shape = (4, 64, 128)
    assert families.stored_shape("gpt_oss", "model.layers.0.mlp.experts.gate_up_proj", shape, True) == (4, 128, 64)
    assert families.stored_shape("gpt_oss", "model.layers.0.mlp.experts.gate_up_proj", shape, False) == shape
