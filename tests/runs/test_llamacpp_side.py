"""llama.cpp's own graph as a side of trace and compare_runs (runs/llamacpp_side.py), against
transformers: a tiny random Llama written as an F32 GGUF the way llama.cpp's converter writes it
(gguf-py, q/k rows permuted), its points read through ggml's eval callback.

- every point llama.cpp records equals transformers' hook at the same place (F32 KV cache,
  flash attention off), llama.cpp's own names listed where we have no partner;
- an F16 KV cache rounds K and V: layer 0's q/k/v still agree, its attention output does not
  (our decoder never rounds to F16: this fails if the points came from ours), and the verdict
  calls it a drift, never a jump;
- a planted fault (one layer's ffn_down scaled) is the first divergence at that layer's ffn_out,
  named by the GGUF tensor and its bytes as gguf-py reads them."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.runtime.engines.llamacpp_eval import available

from .conftest import TEXT

pytestmark = pytest.mark.reference
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
if available() is not None:
    pytest.skip(f"tracing llama.cpp needs llama-cpp-python: {available()}", allow_module_level=True)

FAULT_LAYER = 2
IDS = list(range(3, 3 + 12))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """llama.cpp's threads spin while they wait: one is the steady choice on a shared machine."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def clean_gguf(base, tmp_path_factory) -> str:
    return base.h.write_gguf(base.cfg, base.state, str(tmp_path_factory.mktemp("lcpp") / "clean.gguf"))


@pytest.fixture(scope="module")
def faulty_gguf(base, tmp_path_factory) -> str:
    name = f"model.layers.{FAULT_LAYER}.mlp.down_proj.weight"
    state = {**base.state, name: base.state[name] * np.float32(3.0)}
    return base.h.write_gguf(base.cfg, state, str(tmp_path_factory.mktemp("lcpp") / "faulty.gguf"))


def transformers_points(h, cfg, state, ids) -> dict:
    """transformers' activations at our points, through forward hooks."""
    model = h.hf_model_from(cfg, state)
    T, nh, nkv = len(ids), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    got: dict = {}

    def hook(key, reshape=None, use_input=False):
        def f(_module, args, out):
            x = (args[0] if use_input else out[0] if isinstance(out, tuple) else out)[0].detach().float().numpy()
            got[key] = x.reshape(T, reshape, -1) if reshape else x
        return f

    for i, layer in enumerate(model.model.layers):
        att = layer.self_attn
        layer.input_layernorm.register_forward_hook(hook((i, "attn_norm")))
        att.q_proj.register_forward_hook(hook((i, "q"), nh))
        att.k_proj.register_forward_hook(hook((i, "k"), nkv))
        att.v_proj.register_forward_hook(hook((i, "v"), nkv))
        att.o_proj.register_forward_hook(hook((i, "attn_out")))
        layer.post_attention_layernorm.register_forward_hook(hook((i, "attn_residual"), use_input=True))
        layer.post_attention_layernorm.register_forward_hook(hook((i, "ffn_norm")))
        layer.mlp.register_forward_hook(hook((i, "ffn_out")))
        layer.register_forward_hook(hook((i, "residual")))
    model.model.embed_tokens.register_forward_hook(hook((None, "embed")))
    model.model.norm.register_forward_hook(hook((None, "final_norm")))
    with torch.no_grad():
        got[(None, "logits")] = model(torch.tensor([list(ids)])).logits[0].float().numpy()
    return got


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_llamacpp_points_equal_transformers_hooks(base, arch, tmp_path):
    """Llama: q/k rows permuted in the GGUF; Qwen2: q, k, v with a bias (llama.cpp names the
    projection and the projection plus bias alike)."""
    h = base.h
    cfg = base.cfg if arch == "llama" else h.tiny_config("qwen2")
    state = base.state if arch == "llama" else h.random_state(cfg, seed=5)
    path = h.write_gguf(cfg, state, str(tmp_path / f"{arch}.gguf"))
    t = mx.trace(path, ids=IDS, keep=True, engine="llama.cpp")
    assert "llama.cpp via llama-cpp-python" in t.engine_label and "KV cache F32, flash attention off" in t.engine_label
    ref = transformers_points(h, cfg, state, IDS)
    # Qwen2's graph leaves its output projection's result unnamed: that point is ours alone
    unnamed = {(i, "attn_out") for i in range(cfg["num_hidden_layers"])} if arch == "qwen2" else set()
    assert unnamed == set(ref) - set(t.activations)
    for key, want in ref.items():
        if key in unnamed:
            continue
        assert t.activations[key].shape == want.shape, key
        assert rel(t.activations[key], want) < 1e-5, (key, rel(t.activations[key], want))
    # llama.cpp's own tensors without a point of ours are kept under their names
    assert (0, "kqv_out") in t.activations and (None, "embed") in t.activations
    assert t.tensors[(1, "ffn_out")][0] == "blk.1.ffn_down.weight"


def test_clean_conversion_agrees_and_lists_the_unpaired(base, clean_gguf):
    d = mx.compare_runs(base.folder, clean_gguf, prompt=TEXT, b_engine="llama.cpp")
    assert d.agree and d.first_divergence is None, d.summary()
    assert d.engine_labels["a"] == "cpu (numpy)" and d.engine_labels["b"].startswith("llama.cpp via llama-cpp-python")
    unpaired = {(u["layer"], u["module"]): u["why"] for u in d.unpaired}
    assert unpaired == {(i, "kqv_out"): "only b records it" for i in range(base.cfg["num_hidden_layers"])}
    paired = {(r["layer"], r["module"]) for r in d.rows}
    assert (FAULT_LAYER, "q") in paired and (None, "logits") in paired
    assert d.to_json()["engine_labels"]["b"] == d.engine_labels["b"] and d.engine_b == "llama.cpp"


def test_planted_fault_found_on_llamacpps_tensor(base, faulty_gguf):
    import gguf

    d = mx.compare_runs(base.folder, faulty_gguf, prompt=TEXT, b_engine="llama.cpp")
    first = d.first_divergence
    assert first["kind"] == "jump", d.summary()
    assert (first["layer"], first["module"]) == (FAULT_LAYER, "ffn_out")
    name = f"blk.{FAULT_LAYER}.ffn_down.weight"
    assert first["tensor"] == name
    info = next(t for t in gguf.GGUFReader(faulty_gguf).tensors if t.name == name)
    assert (first["offset"], first["length"]) == (int(info.data_offset), int(info.n_bytes))
    before = [r for r in d.rows if r["layer"] is not None and r["layer"] < FAULT_LAYER]
    assert max(r["rel_l2"] for r in before) < 1e-5


def test_f16_cache_is_a_drift_from_llamacpp_not_a_jump(base, clean_gguf):
    from model_explorer.runs.llamacpp_side import LlamaCppSide
    from model_explorer.runs.verdict import DRIFT, find_divergence

    side = LlamaCppSide(clean_gguf, kv_cache="f16")
    try:
        d = mx.compare_runs(base.folder, side, prompt=TEXT)
    finally:
        side.free()
    assert "KV cache F16" in d.engine_labels["b"]
    rows = {(r["layer"], r["module"]): r for r in d.rows}
    assert max(rows[(0, m)]["rel_l2"] for m in ("attn_norm", "q", "k", "v")) < 1e-5
    # K and V rounded to F16 (11 significant bits): only llama.cpp's own attention does this
    assert 1e-4 < rows[(0, "attn_out")]["rel_l2"] < 1e-2
    found = find_divergence(d.rows, logits_differ=True)
    assert found is not None and found[1] == DRIFT and (found[0]["layer"], found[0]["module"]) == (0, "attn_out")
    assert d.first_divergence is None or d.first_divergence["kind"] == DRIFT


def test_a_model_loaded_on_llamacpp_is_traced_on_llamacpp(clean_gguf):
    from model_explorer.runtime import load_model

    model = load_model(clean_gguf, backend="llama.cpp")
    try:
        t = mx.trace(model, ids=IDS)
    finally:
        model.close()
    assert t.engine_label.startswith("llama.cpp via llama-cpp-python")
    assert any(s.module == "kqv_out" for s in t.stats)


def test_cli_names_each_sides_engine(base, clean_gguf, capsys):
    from model_explorer.cli import main

    assert main(["compare-runs", base.folder, clean_gguf, "--prompt", TEXT, "--b-engine", "llama.cpp"]) == 0
    out = capsys.readouterr().out
    assert "(cpu (numpy))" in out and "KV cache F32, flash attention off" in out
    assert main(["compare-runs", base.folder, clean_gguf, "--engine", "tensorflow"]) == 2


def test_run_tab_offers_llamacpp_for_a_gguf_and_traces_on_it(base, clean_gguf, tmp_path):
    from model_explorer.widgets.run_cell import RunDemo

    assert RunDemo(base.folder, device="cpu").runs_engines == ["decoder"]
    w = RunDemo(clean_gguf, device="cpu", cache_dir=str(tmp_path))
    assert w.runs_engines == ["decoder", "llama.cpp"]
    w.runs_engine = "llama.cpp"
    w.prompt = TEXT
    assert w.trace() and w.wait(120) and not w.error, w.error
    assert w.runs["engine_labels"]["a"].startswith("llama.cpp via llama-cpp-python")
    assert w.compare_runs("") and w.wait(120) and not w.error, w.error  # this file on llama.cpp against ours
    assert w.runs["engine_labels"]["a"].startswith("llama.cpp") and w.runs["engine_labels"]["b"] == "cpu (numpy)"


def test_real_gguf_ours_against_llamacpp_pairs_every_point_and_drifts():
    """The real SmolLM2 GGUF make dev installs: every point of every layer paired, and the
    difference is rounding (llama.cpp's 8-bit activations against the Q4_1 weights): a drift,
    never a jump. (Gemma 3 takes 30 s here: benchmarks/bench_llamacpp_trace.py --compare.)"""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import realfiles

    path = realfiles.need(realfiles.smollm2_gguf())
    d = mx.compare_runs(path, path, prompt="The capital of France is", b_engine="llama.cpp")
    assert {u["module"] for u in d.unpaired} == {"kqv_out"}
    assert all(u["why"] == "only b records it" for u in d.unpaired)
    first = d.first_divergence
    assert first is not None and first["kind"] == "drift" and "activations as Q8_1" in first["explanation"], d.summary()
    assert d.top1_agreement >= 0.8 and d.kld["max"] < 0.1
