"""The llama.cpp engine against the numpy reference, on whichever binding loads here
(llamacpp_binding.py); without one the module skips, saying why an installed one did not load.
tests/runtime/test_llamacpp_auto.py covers what a real binding cannot show (a fake one).

Where the two may part: on a quantized file llama.cpp multiplies the stored blocks by
activations rounded to 8 bits (Q8_1 / Q8_K) and keeps the KV cache in F16; the numpy decoder
multiplies float32 weights decoded from the same blocks by float32 activations. Their logits then
differ by a few percent, which flips a greedy token wherever the top two are closer than that."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from model_explorer.runs.metrics import kl_per_position
from model_explorer.runtime import load_model
from model_explorer.runtime.engines import llamacpp
from model_explorer.samples import sample_path

if not llamacpp.installed():
    pytest.skip(f"no llama.cpp binding loads here: {llamacpp.missing()}", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import realfiles  # noqa: E402
from conftest import random_state, tiny_config, write_gguf  # noqa: E402

PROMPT = "What is the capital of France?"
# a paragraph for the distribution comparisons: every position's next-token distribution counts
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
        "combined movable metal type, oil-based ink and a wooden screw press. Within fifty years, "
        "presses had spread to more than two hundred cities across Europe.")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """llama.cpp's threads wait for each other by spinning: on a shared 2-core machine one thread
    is the steady choice (the engine reads OMP_NUM_THREADS when it starts)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def sample():
    try:
        return sample_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def shipped(sample):
    """The sample as shipped (Q4_1) on both engines, loaded once."""
    ref, fast = load_model(sample, device="cpu"), load_model(sample, backend="llama.cpp")
    yield ref, fast
    fast.close()


@pytest.fixture(scope="module")
def f16_gguf(sample, tmp_path_factory):
    """The sample's weights rounded to F16: both engines then multiply by the same numbers."""
    import model_explorer as mx

    return mx.convert(sample, tmp_path_factory.mktemp("f16") / "smol-f16.gguf", format="gguf", dtype="F16")


@pytest.fixture(scope="module")
def engines(f16_gguf):
    ref = load_model(f16_gguf, device="cpu")
    fast = load_model(f16_gguf, backend="llama.cpp")
    yield ref, fast
    fast.close()


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def assert_same_or_near_tie(ref, fast, prompt: str, chat: bool, new_tokens: int) -> None:
    """The same greedy tokens, or the first that differs is one the numpy decoder ranks within
    llama.cpp's logit error of its own choice (a near-tie the 8-bit activations can flip)."""
    a = ref.generate(prompt, chat=chat, max_new_tokens=new_tokens, stop_at_eos=False)
    b = fast.generate(prompt, chat=chat, max_new_tokens=new_tokens, stop_at_eos=False)
    assert a.prompt_tokens == b.prompt_tokens  # one tokenizer, one template
    k = first_difference(a.tokens, b.tokens)
    if k is None:
        return
    ids = a.prompt_tokens + a.tokens[:k]
    la, lb = ref.forward(ids, last_only=True)[0], fast.forward(ids, last_only=True)[0]
    ours, theirs = a.tokens[k], b.tokens[k]
    margin = la[ours] - la[theirs]  # how much the numpy decoder prefers its own token
    noise = np.sqrt(np.mean((la - lb) ** 2))  # llama.cpp's logit error on this row
    assert 0 <= margin < noise, (k, margin, noise)


def test_greedy_tokens_match_the_numpy_reference(engines):
    """Same weights, same tokenizer, template and sampler: the same 16 greedy tokens."""
    ref, fast = engines
    a = ref.generate(PROMPT, chat=True, max_new_tokens=16, stop_at_eos=False)
    b = fast.generate(PROMPT, chat=True, max_new_tokens=16, stop_at_eos=False)
    assert a.prompt_tokens == b.prompt_tokens
    assert b.tokens == a.tokens
    assert "Paris" in b.text


def test_logits_agree_on_the_same_weights(engines):
    ref, fast = engines
    ids = ref.encode_prompt(TEXT)
    la, lb = ref.forward(ids), fast.forward(ids)
    assert la.shape == lb.shape
    rel = np.linalg.norm(la - lb, axis=1) / np.linalg.norm(la, axis=1)
    assert rel.max() < 0.02, rel  # llama.cpp keeps the KV cache in F16
    assert (la.argmax(axis=1) == lb.argmax(axis=1)).all()


def test_shipped_q4_1_greedy_tokens_part_only_at_near_ties(shipped):
    """The plain prompt gives the reference's 16 tokens; under the chat template the first answer
    token is 'The' for numpy and 'L' for llama.cpp, 0.08 apart in numpy's logits (0.1-0.2 the other
    way in llama.cpp's), where llama.cpp's logits differ from numpy's by about 0.6 (RMS)."""
    ref, fast = shipped
    a = ref.generate(PROMPT, max_new_tokens=16, stop_at_eos=False)
    b = fast.generate(PROMPT, max_new_tokens=16, stop_at_eos=False)
    assert b.tokens == a.tokens
    assert_same_or_near_tie(ref, fast, PROMPT, chat=True, new_tokens=16)


def test_shipped_q4_1_next_token_distributions_agree(shipped):
    """Every position of a paragraph: KL(numpy || llama.cpp) and top-1 agreement."""
    ref, fast = shipped
    ids = ref.encode_prompt(TEXT)
    la, lb = ref.forward(ids), fast.forward(ids)
    kl = kl_per_position(la, lb)
    assert kl.mean() < 0.02, kl.mean()
    assert np.mean(la.argmax(1) == lb.argmax(1)) >= 0.9


def test_kld_against_the_base_agrees_with_llamacpps_own(sample, f16_gguf, engines, tmp_path_factory):
    """A GGUF against its base, as llama-perplexity --kl-divergence measures it: the F16 sample is
    the base, a Q4_0 requantization of it the quantized file. The KLD from llama.cpp's own logits
    (every position of one llama_decode) and the KLD from the numpy decoder's are about the same,
    so the numpy figure predicts what llama.cpp users will see."""
    import model_explorer as mx

    q4 = mx.convert(f16_gguf, tmp_path_factory.mktemp("q4") / "smol-q4_0.gguf", format="gguf", dtype="Q4_0")
    base_ref, base_fast = engines
    q_ref, q_fast = load_model(q4, device="cpu"), load_model(q4, backend="llama.cpp")
    try:
        ids = base_ref.encode_prompt(TEXT)
        ours = kl_per_position(base_ref.forward(ids), q_ref.forward(ids)).mean()
        theirs = kl_per_position(base_fast.forward(ids), q_fast.forward(ids)).mean()
    finally:
        q_fast.close()
    assert ours > 0.01  # Q4_0 of a 135M model: visibly lossy
    assert 0.5 < theirs / ours < 2, (ours, theirs)


@pytest.mark.parametrize("arch, tie, spm", [("llama", False, False), ("qwen2", True, False), ("llama", False, True)],
                         ids=["llama", "qwen2-biases-tied-head", "llama-sentencepiece"])
def test_tiny_ggufs_give_the_numpy_decoders_logits_and_greedy_tokens(tmp_path, arch, tie, spm):
    """Random 2-layer F32 models written here (llama's q/k rows permuted as llama.cpp stores them;
    qwen2 with attention biases and the head tied to the embedding; a byte-level or a sentencepiece
    vocabulary): F32 weights leave only llama.cpp's F16 KV cache between the engines (0.1-0.2% of
    the logits), so every position's argmax and 16 greedy tokens are the same."""
    cfg = tiny_config(arch, tie=tie)
    path = write_gguf(cfg, random_state(cfg), str(tmp_path / "tiny.gguf"), spm=spm)
    ref, fast = load_model(path, device="cpu"), load_model(path, backend="llama.cpp")
    try:
        ids = ref.encode_prompt("the cat sat on the mat and the dog ran to the cat")
        la, lb = ref.forward(ids), fast.forward(ids)
        rel = np.linalg.norm(la - lb, axis=1) / np.linalg.norm(la, axis=1)
        assert rel.max() < 0.01, rel
        assert (la.argmax(1) == lb.argmax(1)).all()
        a = ref.generate("the cat", max_new_tokens=16, stop_at_eos=False)
        b = fast.generate("the cat", max_new_tokens=16, stop_at_eos=False)
        assert a.prompt_tokens == b.prompt_tokens and b.tokens == a.tokens
    finally:
        fast.close()


def test_a_session_refuses_what_would_abort_llamacpp(tmp_path):
    """llama.cpp aborts the process on a batch larger than its n_batch, which it clamps to the
    context asked for: a session on a 16-position context (llama.cpp rounds it up) takes a long
    prompt in chunks, refuses positions past the context, and a token id past the vocabulary
    comes back as an exception."""
    from model_explorer.runtime.engines import llamacpp_binding

    cfg = tiny_config()
    session = llamacpp_binding.open_session(write_gguf(cfg, random_state(cfg), str(tmp_path / "t.gguf")), 16, 1)
    try:
        if getattr(session, "n_ctx", None) is None:  # llama-cpp-python's Llama chunks and checks for itself
            pytest.skip(f"{session.label} does not say its context size")
        assert session.n_batch <= 16
        assert session.decode([5] * 40, 0, all_logits=True).shape == (40, cfg["vocab_size"])
        with pytest.raises(ValueError, match="do not fit"):
            session.decode([5] * session.n_ctx, 1, all_logits=False)
        with pytest.raises(RuntimeError):
            session.decode([cfg["vocab_size"]], 40, all_logits=False)
    finally:
        session.close()


def test_a_continued_cache_equals_one_pass(engines):
    _, fast = engines
    ids = fast.encode_prompt(PROMPT)
    whole = fast.forward(ids, last_only=True)
    cache = fast.new_cache(64)
    fast.forward(ids[:-2], cache, last_only=True)
    step = fast.forward(ids[-2:], cache, last_only=True)
    np.testing.assert_allclose(step, whole, rtol=1e-4, atol=1e-4)


def test_auto_picks_llamacpp_for_a_gguf_on_a_cpu_only_machine(sample, monkeypatch):
    from model_explorer.runtime import engines as backend_module

    monkeypatch.setattr(backend_module, "available_devices", lambda: ["cpu"])
    model = load_model(sample)
    try:
        assert isinstance(model.backend, llamacpp.LlamaCppEngine)
        assert "llama.cpp" in model.device
        assert "Paris" in model.generate(PROMPT, max_new_tokens=12, stop_at_eos=False).text
    finally:
        model.close()


def test_safetensors_source_is_converted_once_and_cached(tmp_path, sample):
    import model_explorer as mx

    folder = mx.convert(sample, tmp_path / "f32", format="safetensors", dtype="F32")
    cache = tmp_path / "cache"
    first = load_model(folder, backend="llama.cpp", cache_dir=str(cache))
    try:
        assert first.dequant.converted and list(cache.iterdir())
        out = first.generate(PROMPT, max_new_tokens=12, stop_at_eos=False)
        assert "Paris" in out.text
    finally:
        first.close()
    second = load_model(folder, backend="llama.cpp", cache_dir=str(cache))
    try:
        assert not second.dequant.converted
    finally:
        second.close()


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    path = realfiles.gemma3_gguf(tmp_path_factory.mktemp("gemma3"))
    if path is None:
        pytest.skip("the Gemma 3 270M GGUF packages are not installed (make dev installs them)")
    ref, fast = load_model(path, device="cpu"), load_model(path, backend="llama.cpp")
    yield ref, fast
    fast.close()


def test_gemma3_q4_k_m_agrees_with_llamacpp(gemma3):
    """llama.cpp's own converter and quantizer wrote this file (Q4_K_M, 262k vocabulary, five
    sliding-window layers of six): the same greedy tokens up to near-ties, and close next-token
    distributions at every position."""
    ref, fast = gemma3
    assert_same_or_near_tie(ref, fast, PROMPT, chat=False, new_tokens=8)
    ids = ref.encode_prompt(TEXT)
    la, lb = ref.forward(ids), fast.forward(ids)
    assert kl_per_position(la, lb).mean() < 0.05
    assert np.mean(la.argmax(1) == lb.argmax(1)) >= 0.85
