"""mx.convert to GGUF states what the model computes even where its config.json is silent (the
family's transformers defaults), and refuses what llama.cpp's architecture cannot hold; checked
with compare_runs, whose config_diff names any hyperparameter the two runs use differently."""

from __future__ import annotations

import warnings

import pytest

import model_explorer as mx
from model_explorer.conversion import ConvertError

IDS = list(range(3, 30))
FAMILIES = {
    # no softcap keys in config.json: transformers' Gemma 2 defaults (50, 30) apply and must be written
    "gemma2": {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4,
               "query_pre_attn_scalar": 16, "tie_word_embeddings": True},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True},
    "smollm3": {},
}


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_the_gguf_runs_the_folders_hyperparameters(tmp_path, model_type):
    folder = mx.random_model({"model_type": model_type, **FAMILIES[model_type]}, tmp_path / model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer next to a random model
        gguf = mx.convert(folder, tmp_path / f"{model_type}.gguf", format="gguf", dtype="F32")
    d = mx.compare_runs(folder, gguf, ids=IDS)
    assert d.config_diff == {}, d.config_diff
    assert d.first_divergence is None and d.kld["max"] < 1e-6 and d.top1_agreement == 1.0


def test_an_untied_gemma_head_is_refused(tmp_path):
    folder = mx.random_model({"model_type": "gemma2", **FAMILIES["gemma2"], "tie_word_embeddings": False},
                             tmp_path / "untied")
    with warnings.catch_warnings(), pytest.raises(ConvertError, match="no output tensor"):
        warnings.simplefilter("ignore")
        mx.convert(folder, tmp_path / "untied.gguf", format="gguf", dtype="F32")
    assert not (tmp_path / "untied.gguf").exists()
