"""The llama.cpp backend against the numpy reference (runs where llama-cpp-python is installed:
`make bench` builds it; CI's test command does not, so these skip there)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from model_explorer.demo import load_model  # noqa: E402
from model_explorer.samples import sample_path  # noqa: E402

TOUR_PROMPT = "What is the capital of France?"


@pytest.fixture(scope="module")
def sample():
    try:
        return sample_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def engines(sample):
    ref = load_model(sample, device="cpu")
    fast = load_model(sample, backend="llama.cpp")
    yield ref, fast
    fast.close()


def test_auto_picks_llamacpp_for_a_gguf_on_a_cpu_machine(sample):
    from model_explorer.demo.backend import available_devices

    if available_devices() != ["cpu"]:
        pytest.skip("a GPU is present: auto picks torch")
    model = load_model(sample)
    try:
        assert model.device.startswith("cpu (llama.cpp")
        assert "quantized" in model.dequant.summary()
    finally:
        model.close()


def test_greedy_tokens_match_the_numpy_reference(engines):
    ref, fast = engines
    a = ref.generate(TOUR_PROMPT, chat=True, max_new_tokens=16, stop_at_eos=False)
    b = fast.generate(TOUR_PROMPT, chat=True, max_new_tokens=16, stop_at_eos=False)
    assert a.prompt_tokens == b.prompt_tokens  # one tokenizer, one template
    assert b.tokens == a.tokens
    assert "Paris" in b.text


def test_logits_agree_within_quantized_rounding(engines):
    ref, fast = engines
    ids = ref.encode_prompt(TOUR_PROMPT, chat=True)
    la, lb = ref.forward(ids), fast.forward(ids)
    assert la.shape == lb.shape
    # llama.cpp multiplies Q4_1 weights by Q8 activations; the reference by float32 weights.
    rel = np.linalg.norm(la - lb, axis=1) / np.linalg.norm(la, axis=1)
    assert rel.max() < 0.05, rel
    assert (la.argmax(axis=1) == lb.argmax(axis=1)).mean() > 0.9


def test_a_continued_cache_equals_one_pass(engines):
    _, fast = engines
    ids = fast.encode_prompt(TOUR_PROMPT)
    whole = fast.forward(ids, last_only=True)
    cache = fast.new_cache(64)
    fast.forward(ids[:-2], cache, last_only=True)
    step = fast.forward(ids[-2:], cache, last_only=True)
    np.testing.assert_allclose(step, whole, rtol=1e-4, atol=1e-4)


def test_safetensors_source_is_converted_once_and_cached(tmp_path, sample):
    import model_explorer as mx

    folder = mx.convert(sample, tmp_path / "f32", format="safetensors", dtype="F32")
    cache = tmp_path / "cache"
    first = load_model(folder, backend="llama.cpp", cache_dir=str(cache))
    try:
        assert first.dequant.converted and list(cache.iterdir())
        out = first.generate(TOUR_PROMPT, chat=True, max_new_tokens=8)
        assert "Paris" in out.text
    finally:
        first.close()
    second = load_model(folder, backend="llama.cpp", cache_dir=str(cache))
    try:
        assert not second.dequant.converted
    finally:
        second.close()
