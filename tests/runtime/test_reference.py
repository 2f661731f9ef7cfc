"""Logits of our decoder against transformers' LlamaForCausalLM, Qwen2ForCausalLM and
MistralForCausalLM holding the same random weights: saved with save_pretrained and read back
through our safetensors reader, and written as GGUF (F32, Q8_0) the way llama.cpp does."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    hf_model_from,
    random_state,
    reference_logits,
    rel_error,
    tiny_config,
    tiny_vocab,
    write_gguf,
    write_tokenizer_files,
)

from model_explorer.runtime import load_model

pytestmark = pytest.mark.reference

IDS = [1, 72, 101, 108, 108, 111, 3, 200, 17, 5, 99, 287, 45, 45, 120, 8, 64, 250]

CASES = {
    "llama": tiny_config("llama"),
    "llama_tied": tiny_config("llama", tie=True),
    "qwen2": tiny_config("qwen2"),
    # A window shorter than the sequence, so the sliding mask matters.
    "mistral": tiny_config("mistral", sliding_window=8),
    # Llama 3.x frequency scaling (GGUF stores it as a rope_freqs tensor).
    "llama3_rope": tiny_config("llama", tie=True, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}),
}


@pytest.fixture(scope="module", params=list(CASES))
def reference(request, tmp_path_factory):
    """(case name, config, state, transformers model, its save_pretrained folder, its logits)."""
    cfg = CASES[request.param]
    state = random_state(cfg, seed=len(request.param))
    model = hf_model_from(cfg, state)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    write_tokenizer_files(str(folder), tiny_vocab(cfg["vocab_size"]))
    return request.param, cfg, state, model, str(folder), reference_logits(model, IDS)


def test_safetensors_logits_match_transformers(reference):
    _, _, _, _, folder, ref = reference
    ours = load_model(folder, device="cpu").forward(IDS)
    assert ours.shape == ref.shape
    assert rel_error(ours, ref) < 1e-4


def test_torch_backend_gives_the_same_logits(reference):
    _, _, _, _, folder, ref = reference
    ours = load_model(folder, device="cpu", backend="torch").forward(IDS)
    assert rel_error(ours, ref) < 1e-4


def test_kv_cache_continuation_matches_one_pass(reference):
    """Prefill part of the sequence, then feed one token at a time: same logits as one pass."""
    _, _, _, _, folder, ref = reference
    model = load_model(folder, device="cpu")
    cache = model.new_cache(capacity=4)  # too small on purpose: it must grow
    rows = [model.forward(IDS[:5], cache)]
    rows += [model.forward([t], cache) for t in IDS[5:]]
    assert rel_error(np.concatenate(rows), ref) < 1e-4


def test_gguf_f32_logits_match_transformers(reference, tmp_path):
    name, cfg, state, _, _, ref = reference
    path = write_gguf(cfg, state, str(tmp_path / f"{name}.gguf"), "F32")
    model = load_model(path, device="cpu")
    assert model.config.gguf_qk_permuted == (cfg["model_type"] != "qwen2")
    assert rel_error(model.forward(IDS), ref) < 1e-4


def test_gguf_q8_0_logits_match_transformers(reference, tmp_path):
    """Exact against transformers holding the Q8_0-rounded weights (rounded by gguf-py), and
    close to the float model (Q8_0 noise through random layers: a few percent)."""
    import gguf

    name, cfg, state, _, _, ref = reference
    path = write_gguf(cfg, state, str(tmp_path / f"{name}.q8.gguf"), "Q8_0")
    model = load_model(path, device="cpu")
    ours = model.forward(IDS)
    q8 = gguf.GGMLQuantizationType.Q8_0
    rounded = {k: gguf.quants.dequantize(gguf.quants.quantize(v, q8), q8) if v.ndim == 2 else v
               for k, v in state.items()}
    assert rel_error(ours, reference_logits(hf_model_from(cfg, rounded), IDS)) < 1e-4
    assert rel_error(ours, ref) < 0.1
    assert np.mean(ours.argmax(-1) == ref.argmax(-1)) >= 0.8
    assert {r.dtype for r in model.dequant.rows} == {"Q8_0", "F32"}
    assert ("rope_freqs.weight" in {r.name for r in model.dequant.rows}) == (name == "llama3_rope")


def test_greedy_generation_matches_transformers_generate(reference):
    import torch

    name, _, _, hf, folder, _ = reference
    ours = load_model(folder, device="cpu").generate("the cat sat", max_new_tokens=12, stop_at_eos=False)
    with torch.no_grad():
        out = hf.generate(torch.tensor([ours.prompt_tokens]), max_new_tokens=12, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    assert ours.tokens == out[0, len(ours.prompt_tokens):].tolist()
