"""Compare quantizations: agreement counts, perplexity against transformers' loss, the cache,
and convert's bounded memory."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.conversion import convert
from model_explorer.runs.quantizations import (
    PERPLEXITY_TEXT,
    compare_quantizations,
    perplexity,
    shipped_dtype,
    token_agreement,
)

try:
    from .test_convert import tiny_hf_weights, write_tiny_gguf
except ImportError:  # tests/runtime is not a package
    from test_convert import tiny_hf_weights, write_tiny_gguf


def test_token_agreement_counts_positions_and_the_shared_prefix():
    assert token_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == {"matches": 3, "total": 4, "prefix": 2, "fraction": 0.75}
    assert token_agreement([1, 2], [1, 2, 3])["total"] == 3  # a shorter run counts as disagreement
    assert token_agreement([], []) == {"matches": 0, "total": 0, "prefix": 0, "fraction": 1.0}


def test_perplexity_text_is_a_few_plain_sentences():
    assert 3 <= PERPLEXITY_TEXT.count(". ") + 1 <= 8 and PERPLEXITY_TEXT.isascii()


def test_shipped_dtype_is_what_most_weights_are_stored_in():
    assert shipped_dtype(mx.open(mx.sample_path())) == "Q4_1"


@pytest.mark.reference
def test_perplexity_matches_transformers_loss(tmp_path):
    """exp(cross-entropy) from LlamaForCausalLM on the same weights and token ids."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaForCausalLM

    from model_explorer.runtime import load_model

    path = write_tiny_gguf(tmp_path / "tiny.gguf", tiny_hf_weights(3))
    hf_dir = convert(path, tmp_path / "hf", format="safetensors", dtype="F32")
    ours = load_model(hf_dir, device="cpu")
    text = "hello the world, hello the world"
    ids = ours.tokenizer.encode(text)
    reference = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        loss = reference(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    assert perplexity(ours, text) == pytest.approx(np.exp(loss), rel=1e-4)


@pytest.mark.slow
def test_compare_on_the_sample_reports_each_variant(tmp_path):
    """The issue's run: Q4_1 as shipped, Q8_0 and F16 conversions, side by side."""
    result = compare_quantizations(prompt="The capital of France is", max_new_tokens=4, device="cpu",
                                   cache_dir=str(tmp_path))
    labels = [v.label for v in result.variants]
    assert labels == ["Q4_1 (as shipped)", "Q8_0", "F16"] and result.reference == "F16"
    sizes = {v.dtype: v.file_bytes for v in result.variants}
    assert sizes["Q4_1"] < sizes["Q8_0"] < sizes["F16"]
    for v in result.variants:
        assert 1 < v.perplexity < 1000 and len(v.tokens) == 4
    assert result.variants[2].agreement["fraction"] == 1.0  # the reference agrees with itself
    # Q8_0 of the same weights keeps the greedy text of F16
    assert result.variants[1].tokens == result.variants[2].tokens
    table = result.table()
    assert list(table["variant"]) == labels
    assert sorted(os.listdir(os.path.join(tmp_path, os.listdir(tmp_path)[0]))) == \
        ["model.F16.gguf", "model.Q8_0.gguf"]


@pytest.mark.slow
def test_convert_holds_about_one_tensor_in_memory(tmp_path):
    """SmolLM2 is 538 MB as float32; converting it must not hold more than a few tensors
    (the largest, the 49152 x 576 embedding, is 113 MB as float32)."""
    sample = mx.sample_path()
    largest = max(t.numel for t in mx.open(sample).tensors.values()) * 4
    tracemalloc.start()
    try:
        convert(sample, tmp_path / "smol.F16.gguf", format="gguf", dtype="F16")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * largest, f"peak {peak / 2**20:.0f} MiB vs largest tensor {largest / 2**20:.0f} MiB"
