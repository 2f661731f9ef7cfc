"""Streamed runs (runtime/streamed.py) and the memory check before a run (runtime/memory_budget.py):
the same numbers as the in-memory path, nothing decoded whole that need not be, and a run that
cannot fit refused before it loads, with the figures and the choices."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.runtime import memory_budget
from model_explorer.runtime.api import load_model
from model_explorer.runtime.memory_budget import WontFit
from model_explorer.runtime.streamed import StreamedMatrix

IDS = [1, 5, 9, 2, 7, 7, 3]


@pytest.fixture(scope="module")
def sample():
    return mx.sample_path()  # SmolLM2-135M Q4_1: a real checkpoint with a quantized head


def test_a_streamed_pass_gives_the_in_memory_logits(sample):
    whole = load_model(sample, device="cpu", stream=False)
    streamed = load_model(sample, device="cpu", stream=True)
    assert whole.run_plan.mode == "in_memory" and streamed.run_plan.mode == "streamed"
    a, b = whole.forward(IDS), streamed.forward(IDS)
    # the head is multiplied slice by slice: BLAS may sum in another order, nothing more
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
    assert (a.argmax(-1) == b.argmax(-1)).all()
    assert streamed.weights.resident_bytes() < whole.weights.resident_bytes() / 20


def test_a_streamed_generation_equals_the_in_memory_one(sample):
    kw = dict(max_new_tokens=6, stop_at_eos=False)
    whole = load_model(sample, device="cpu", stream=False).generate("The capital of France is", **kw)
    streamed = load_model(sample, device="cpu", stream=True).generate("The capital of France is", **kw)
    assert streamed.tokens == whole.tokens


def test_the_streamed_table_reads_only_what_it_is_asked(sample):
    model = load_model(sample, device="cpu", stream=True)
    table = model.weights.embed
    assert isinstance(table, StreamedMatrix)
    with mx.open(sample) as ckpt:
        full = ckpt.read(table.name)
    ids = np.array([3, 3, 100, 7])
    assert np.array_equal(table[ids], full[ids])
    x = np.random.default_rng(0).standard_normal((2, full.shape[1])).astype(np.float32)
    assert np.allclose(x @ table.T, x @ full.T, rtol=1e-5, atol=1e-4)
    assert np.allclose(table @ x[0], full @ x[0], rtol=1e-5, atol=1e-4)


def test_a_streamed_layer_is_multiplied_block_by_block_never_decoded_whole(sample, monkeypatch):
    """Every layer matrix (q/k/v, o, gate/up, down) is read from the file one block of rows at a
    time into one buffer: the largest array a streamed pass allocates stays far below one fused
    matrix, and the dequantization report still lists every tensor with its seconds."""
    import tracemalloc

    from model_explorer.runtime import streamed

    monkeypatch.setattr(streamed, "BLOCK_BYTES", 256 << 10)
    model = load_model(sample, device="cpu", stream=True)
    layer = model.weights.layer(0)
    for part in ("qkv", "o", "gate_up", "down"):
        assert isinstance(layer[part], StreamedMatrix), part
    cfg = model.config
    fused = 4 * 2 * cfg.intermediate_size * cfg.hidden_size  # gate/up as float32
    ids = IDS[:3]
    model.forward(ids)  # warm: imports, caches
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        logits = model.forward(ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < fused / 3, (peak, fused)
    whole = load_model(sample, device="cpu", stream=False).forward(ids)
    assert np.abs(logits - whole).max() <= 1e-5 * np.abs(whole).max()
    names = {row.name for row in model.weights.report.rows}
    assert "blk.0.ffn_gate.weight" in names and "blk.29.attn_q.weight" in names


def test_a_trace_streamed_names_the_same_massive_activations(sample):
    a = mx.trace(sample, ids=IDS, stream=False)
    b = mx.trace(sample, ids=IDS, stream=True)
    assert [(m["layer"], m["module"]) for m in a.massive] == [(m["layer"], m["module"]) for m in b.massive]
    d = mx.compare_runs(sample, sample, ids=IDS, stream=True)
    assert "no divergence" in d.summary().lower() or "agree" in d.summary().lower()


def test_the_plan_streams_when_only_that_fits_and_refuses_with_the_figures(sample):
    with mx.open(sample) as ckpt:
        whole, streamed = memory_budget.needs(ckpt, 2048)
        assert streamed < whole
        assert memory_budget.plan(ckpt, 2048, available=whole * 2).mode == "in_memory"
        mid = memory_budget.plan(ckpt, 2048, available=int((whole + streamed) / 2 / memory_budget.HEADROOM))
        assert mid.mode == "streamed" and "streamed" in mid.text
        assert memory_budget.plan(ckpt, 2048, stream=False, available=streamed).mode == "refused"
        refused = memory_budget.plan(ckpt, 2048, available=streamed // 4)
    assert refused.mode == "refused"
    for words in ("needs about", "available", "shorter prompt", "llama.cpp", "GPU"):
        assert words in refused.text


def _strided_llama(folder) -> str:
    """A tiny Llama saved by torch.save with every q projection a transposed view (strides
    [1, n] in the pickle): its rows are not rows of the file, so a streamed pass decodes it whole."""
    import os

    import torch
    from runtime.conftest import random_state, tiny_config, write_hf_dir  # tests/ is on the path

    cfg = tiny_config("llama")
    state = random_state(cfg, seed=1)
    write_hf_dir(str(folder), cfg, state)
    os.remove(folder / "model.safetensors")
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v.T)).T if k.endswith("q_proj.weight")
               else torch.from_numpy(v) for k, v in state.items()}
    torch.save(tensors, folder / "pytorch_model.bin")
    return str(folder)


def test_the_plan_counts_whole_what_the_stream_decodes_whole(tmp_path, monkeypatch):
    """The memory plan reads the decision the streamed weights build their matrices from: a
    layer whose q projection is strided in the file is decoded whole, and counted whole."""
    pytest.importorskip("torch")
    from model_explorer.runtime import streamed

    monkeypatch.setattr(memory_budget, "BLOCK_BYTES", 1024)  # so a whole layer outweighs the blocks
    folder = _strided_llama(tmp_path / "strided")
    model = load_model(folder, device="cpu", stream=True)
    ckpt, cfg = model.weights.ckpt, model.config
    for i in range(cfg.num_layers):
        layer = model.weights.layer(i)
        by_blocks = all(isinstance(layer[p], StreamedMatrix) for p in ("qkv", "o", "gate_up", "down"))
        assert not by_blocks and isinstance(layer["o"], StreamedMatrix)
        assert streamed.streams_by_blocks(ckpt, cfg, i) is by_blocks
    assert memory_budget.needs(ckpt, 8, cfg) == memory_budget.needs(ckpt, 8)  # every layer counted whole
    model.close()


def test_load_model_refuses_before_loading_when_nothing_fits(sample, monkeypatch):
    monkeypatch.setenv("MODEL_EXPLORER_MEMORY_AVAILABLE", "64MiB")
    with pytest.raises(WontFit) as e:
        load_model(sample, device="cpu")
    assert e.value.plan.available_bytes == 64 * 2**20 and "refused before loading" in str(e.value)
    with pytest.raises(MemoryError):
        mx.trace(sample, ids=IDS)


def test_available_memory_reads_this_machine():
    room = memory_budget.available_bytes()
    assert room is None or room > 0


def test_the_run_cell_says_which_engine_and_its_memory_before_loading(sample):
    from model_explorer.runtime.api import engine_plan

    text = engine_plan(sample, "cpu")
    assert text.startswith("numpy on the CPU, fits") and "available" in text


def test_a_trace_reports_each_layer_and_stops_when_asked(sample):
    from model_explorer.runs.trace import RunStopped

    seen = []
    mx.trace(sample, ids=IDS, progress=lambda label, done, total: seen.append((label, done, total)))
    assert seen[0] == ("tracing", 1, 30) and seen[-1] == ("tracing", 30, 30)
    with pytest.raises(RunStopped):
        mx.trace(sample, ids=IDS, progress=lambda label, done, total: done < 3)


def test_a_streamed_run_in_a_script_shows_a_progress_bar(sample, capsys):
    mx.trace(sample, ids=IDS, stream=True)
    assert "tracing" in capsys.readouterr().err  # tqdm, on stderr
    mx.trace(sample, ids=IDS, stream=True, progress=False)
    mx.trace(sample, ids=IDS, stream=False)
    assert "tracing" not in capsys.readouterr().err
