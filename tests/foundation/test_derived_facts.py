"""What the model layer works out once per checkpoint (hyperparameters, tokenizer, side files,
folder layout) is kept in `ckpt.derived`, not in `details`: details says what the readers found,
and views and exports show it."""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import save_file

import model_explorer as mx
from model_explorer.checkpoint import Checkpoint
from model_explorer.model.hparams import read_hparams
from model_explorer.model.tokenizer_info import read_tokenizer
from model_explorer.records import DerivedFacts


def test_model_layer_results_are_kept_apart_from_details(tmp_path):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "intermediate_size": 16, "vocab_size": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({"model.embed_tokens.weight": np.zeros((4, 8), np.float32)},
              str(tmp_path / "model.safetensors"))
    ckpt = mx.open(tmp_path)
    before = dict(ckpt.details)
    ckpt.card()
    hp = read_hparams(ckpt)
    assert hp is ckpt.derived.hparams and read_hparams(ckpt) is hp  # worked out once
    tok = read_tokenizer(ckpt)
    assert tok is ckpt.derived.tokenizer and read_tokenizer(ckpt) is tok
    assert "layout" in ckpt.derived.side_files
    assert ckpt.details == before  # asking the model layer leaves what the readers found alone
    fresh = mx.open(tmp_path)  # one per checkpoint: another open works it out again
    assert fresh.derived is not ckpt.derived and fresh.derived.hparams is not hp
    assert Checkpoint("x").derived == DerivedFacts()  # a record starts with nothing worked out
