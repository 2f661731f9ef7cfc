"""Generation with the SmolLM2 sample and tiny models: answers, determinism, sampling,
streaming, timings, the dequantize report, on-the-fly dequantization, the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_state, tiny_config, write_gguf, write_hf_dir

import model_explorer as mx
from model_explorer.cli import main as cli_main
from model_explorer.runtime import DequantReport, GenerationResult, available_devices, load_model


def test_smollm2_knows_the_capital_of_france(smollm2):
    result = smollm2.generate("What is the capital of France?", chat=True, max_new_tokens=24)
    assert "Paris" in result.text
    assert result.stop_reason == "eos"  # it answers and stops


def test_greedy_is_deterministic_and_streams_the_same_text(smollm2):
    pieces = []
    a = smollm2.generate("The three primary colors are", max_new_tokens=8, stream=pieces.append)
    b = smollm2.generate("The three primary colors are", max_new_tokens=8)
    assert a.tokens == b.tokens and len(a.tokens) == 8
    assert "".join(pieces) == a.text == b.text
    assert a.stop_reason == "max_new_tokens"


def test_result_reports_speed_device_memory_and_dequantization(smollm2):
    r = smollm2.generate("Hello", max_new_tokens=4, stop_at_eos=False)
    assert isinstance(r, GenerationResult)
    assert r.prefill_tps > 0 and r.decode_tps > 0 and r.decode_steps == 3
    assert r.device == "cpu (numpy)"
    assert r.peak_memory_bytes > 100 * 2**20  # the float32 weights alone are ~513 MiB
    text = r.report()
    for word in ("tokens/s", "prefill", "decode", "peak memory", "cpu (numpy)", "dequantize"):
        assert word in text
    assert r.to_dict()["dequant"]["quantized_bytes"] == smollm2.dequant.quantized_bytes


def test_dequant_report_of_smollm2(smollm2):
    report = smollm2.dequant
    assert isinstance(report, DequantReport) and report.mode == "load"
    assert len(report) == 272  # every tensor, each once (the output projection is tied)
    kinds = report.by_dtype()
    assert set(kinds) == {"Q4_1", "Q8_0", "F32"}
    assert report.dequantized_bytes == 4 * 134_515_008
    assert report.quantized_bytes < report.dequantized_bytes / 4  # ~4.6 bits per weight
    df = report.to_dataframe()
    assert list(df.columns) == ["name", "dtype", "shape", "quantized_bytes", "dequantized_bytes",
                                "seconds", "calls"]
    assert (df.seconds >= 0).all() and df.loc[df.name == "token_embd.weight", "dtype"].item() == "Q8_0"


@pytest.fixture(scope="module")
def tiny_q8(tmp_path_factory):
    cfg = tiny_config("llama")
    return write_gguf(cfg, random_state(cfg, seed=3), str(tmp_path_factory.mktemp("q8") / "tiny.gguf"), "Q8_0")


def test_sampling_is_reproducible_with_a_seed(tiny_q8):
    model = load_model(tiny_q8, device="cpu")
    kw = dict(max_new_tokens=12, temperature=1.0, top_k=50, top_p=0.95, stop_at_eos=False)
    a = model.generate("the cat", seed=7, **kw)
    b = model.generate("the cat", seed=7, **kw)
    others = [model.generate("the cat", seed=s, **kw).tokens for s in (1, 2, 3)]
    assert a.tokens == b.tokens
    assert any(t != a.tokens for t in others)
    greedy = model.generate("the cat", max_new_tokens=12, stop_at_eos=False).tokens
    assert greedy == model.generate("the cat", max_new_tokens=12, stop_at_eos=False, seed=5).tokens


def test_sampling_respects_top_k_and_top_p():
    from model_explorer.runtime.sampling import choose

    logits = np.array([0.0, 5.0, 4.9, -3.0, 4.8])
    rng = np.random.default_rng(0)
    assert choose(logits) == 1
    assert {choose(logits, 1.0, top_k=2, rng=rng) for _ in range(200)} == {1, 2}
    assert {choose(logits, 1.0, top_p=0.3, rng=rng) for _ in range(200)} == {1}
    assert 3 in {choose(logits, 100.0, rng=rng) for _ in range(400)}


def test_on_the_fly_dequantization_gives_the_same_logits_with_less_held(tiny_q8):
    ids = [5, 6, 7, 8, 9, 200]
    eager = load_model(tiny_q8, device="cpu")
    lazy = load_model(tiny_q8, device="cpu", keep_quantized=True)
    np.testing.assert_array_equal(lazy.forward(ids), eager.forward(ids))
    assert lazy.weights.resident_bytes() < eager.weights.resident_bytes()
    assert lazy.dequant.mode == "on_the_fly"
    lazy.forward(ids)
    calls = {r.name: r.calls for r in lazy.dequant.rows}
    assert calls["blk.0.attn_q.weight"] == 2 and calls["token_embd.weight"] == 1
    a = lazy.generate("the cat", max_new_tokens=5, stop_at_eos=False)
    b = eager.generate("the cat", max_new_tokens=5, stop_at_eos=False)
    assert a.tokens == b.tokens


def test_forward_checks_token_ids(tiny_q8):
    model = load_model(tiny_q8, device="cpu")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.forward([1, 100000])
    with pytest.raises(ValueError, match="at least one"):
        model.forward([])
    assert model.forward(np.array([[1, 2, 3]])).shape == (3, 288)


def test_public_api_names():
    assert mx.load_model is load_model
    assert "cpu" in available_devices()
    from model_explorer.runtime import generate

    assert mx.generate is generate


def test_convenience_generate_keeps_no_model_alive(tiny_q8):
    """mx.generate loads, generates and lets the weights go: no module keeps them (issue 32)."""
    import gc
    import weakref

    from model_explorer.runtime import api

    held = []
    real = api.Model.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        held.append(weakref.ref(self))

    api.Model.__init__ = spy
    try:
        a = mx.generate(tiny_q8, "the cat", max_new_tokens=3, stop_at_eos=False, device="cpu")
        b = mx.generate(tiny_q8, "the cat", max_new_tokens=3, stop_at_eos=False, device="cpu")
    finally:
        api.Model.__init__ = real
    gc.collect()
    assert a.tokens == b.tokens and len(held) == 2
    assert all(ref() is None for ref in held)


def test_cli_generate_streams_text_and_prints_the_report(tmp_path, capsys):
    cfg = tiny_config("qwen2")
    folder = write_hf_dir(str(tmp_path / "qwen"), cfg, random_state(cfg))
    assert cli_main(["generate", folder, "--prompt", "the", "--max-new-tokens", "5", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "peak memory" in out and "cpu (numpy)" in out
    assert cli_main(["generate", folder, "--prompt", "hi", "--chat", "--max-new-tokens", "2",
                     "--temperature", "0.8", "--seed", "3"]) == 0


def test_cli_generate_with_the_sample_answers(capsys, sample_gguf):
    assert cli_main(["generate", "--chat", "--max-new-tokens", "16", "--device", "cpu"]) == 0
    assert "Paris" in capsys.readouterr().out


def test_cli_generate_reports_unloadable_sources(tmp_path, capsys):
    assert cli_main(["generate", str(tmp_path / "missing.gguf")]) == 2
    assert "cannot load" in capsys.readouterr().err


def test_load_progress_and_stopping_from_the_stream(tiny_q8):
    seen = []
    model = load_model(tiny_q8, device="cpu", progress=lambda done, total, name: seen.append((done, total, name)))
    assert [d for d, _, _ in seen] == list(range(1, len(model.dequant) + 1))
    assert {t for _, t, _ in seen} == {len(model.dequant)} and seen[-1][2] in model.weights.ckpt.tensors
    pieces = []

    def stream(piece):
        pieces.append(piece)
        return len(pieces) < 3

    r = model.generate("the cat", max_new_tokens=20, stop_at_eos=False, stream=stream)
    assert r.stop_reason == "stopped" and len(pieces) == 3


def test_long_prompts_are_prefilled_in_chunks_with_the_same_result(tiny_q8, monkeypatch):
    from model_explorer.runtime import api

    model = load_model(tiny_q8, device="cpu")
    prompt = "the cat sat on the mat and then " * 6
    whole = model.generate(prompt, max_new_tokens=6, stop_at_eos=False)
    monkeypatch.setattr(api, "PREFILL_CHUNK", 7)
    chunked = model.generate(prompt, max_new_tokens=6, stop_at_eos=False)
    assert len(whole.prompt_tokens) > 7 * 3
    assert chunked.tokens == whole.tokens


def test_chat_accepts_a_message_list(tiny_q8):
    model = load_model(tiny_q8, device="cpu")
    as_text = model.generate("the cat", chat=True, max_new_tokens=4, stop_at_eos=False)
    as_list = model.generate([{"role": "user", "content": "the cat"}], max_new_tokens=4, stop_at_eos=False)
    assert as_text.prompt_tokens == as_list.prompt_tokens
    assert as_text.prompt.startswith("<|im_start|>user\nthe cat<|im_end|>")
    assert as_text.tokens == as_list.tokens


def test_backend_comparison_reports_bytes_cap_and_agreement(tiny_q8):
    from model_explorer.runs.backends import compare_backends, weight_bytes_per_token

    rows = compare_backends(tiny_q8, prompt="the cat", max_new_tokens=6, chat=False,
                            backends=["torch", "numpy"])
    assert [r["backend"] for r in rows] == ["numpy", "torch"]  # the reference runs first
    ref, torch_row = rows
    assert ref["agrees_with_numpy"] == "6/6" and torch_row["agrees_with_numpy"].endswith("/6")
    model = load_model(tiny_q8, device="cpu")
    cfg = model.config
    layer = (cfg.q_size + 2 * cfg.kv_size) * cfg.hidden_size + cfg.q_size * cfg.hidden_size \
        + 3 * cfg.intermediate_size * cfg.hidden_size
    assert weight_bytes_per_token(model) == 4 * (cfg.num_layers * layer + cfg.vocab_size * cfg.hidden_size)
    assert ref["weight_bytes_per_token"] == weight_bytes_per_token(model)
    assert ref["cap_tps"] > 0 and ref["share_of_cap"] > 0
