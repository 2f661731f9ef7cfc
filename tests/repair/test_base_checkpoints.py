"""Repairs of checkpoints saved from another class of the model: a base checkpoint under a head
class gets no prefix or head fix it does not need (transformers adds the prefix itself, and a head
cannot be made up), yet a real fault in it (a transposed weight) is still fixed and loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx

from .conftest import CONFIG, llama_tensors, load_transformers, safe_open_all, write_folder


def _base(tensors: dict) -> dict:
    """LlamaModel's names: the causal LM's without `model.` and without lm_head."""
    return {k.removeprefix("model."): v for k, v in tensors.items() if k != "lm_head.weight"}


def test_base_checkpoint_under_the_causal_lm_class_gets_no_fix(tmp_path):
    src = write_folder(tmp_path / "src", _base(llama_tensors()))
    for cross in (False, True):
        codes = {f.code: f.severity for f in mx.open(src, cross_check=cross).findings
                 if f.code not in ("no_tokenizer",)}
        assert codes == {"head_initialised": "warning"}, codes
    assert mx.repair_plan(src).fixes == []


def test_transposed_weight_in_a_base_checkpoint_is_fixed(tmp_path, checked):
    transformers = pytest.importorskip("transformers")
    tensors = _base(llama_tensors(dict(CONFIG, tie_word_embeddings=True)))
    name = "layers.1.mlp.down_proj.weight"
    broken = dict(tensors, **{name: np.ascontiguousarray(tensors[name].T)})
    src = write_folder(tmp_path / "src", broken, config=dict(CONFIG, tie_word_embeddings=True))
    assert any(f.code == "transposed_weight" for f in mx.open(src).findings)
    assert [(f.name, f.changes["tensors"]) for f in mx.repair_plan(src).fixes] == [("transpose", [name])]
    checked(src)
    np.testing.assert_array_equal(safe_open_all(tmp_path / "fixed")[name], tensors[name])
    model = load_transformers(tmp_path / "fixed")
    assert isinstance(model, transformers.LlamaForCausalLM)
    assert json.loads((tmp_path / "fixed" / "config.json").read_text())["tie_word_embeddings"] is True
