"""RunDemo on the Python side: messages from the browser start background jobs, which stream
tokens and progress back and leave their results in synced traits (no browser needed)."""

from __future__ import annotations

import math
import threading

import pytest

from model_explorer.widgets.run_cell import RunDemo, layer_table

try:
    from .test_convert import tiny_hf_weights, write_tiny_gguf
except ImportError:  # tests/runtime is not a package
    from test_convert import tiny_hf_weights, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("w") / "tiny.gguf", tiny_hf_weights())


def make(source, tmp_path, **kwargs):
    w = RunDemo(source, device="cpu", cache_dir=str(tmp_path / "cache"), **kwargs)
    sent = []
    w.send = lambda content, buffers=None: sent.append(content)
    return w, sent


def click(w, kind):
    w._on_msg(w, {"type": kind}, [])
    assert w.wait(60)


def test_construction_lists_devices_and_names_the_source(tiny_gguf, tmp_path):
    w, _ = make(tiny_gguf, tmp_path)
    assert w.devices[0] == "auto" and "cpu" in w.devices and w.device == "cpu"
    assert w.source_label == "tiny.gguf" and w.status == "idle" and not w.busy
    assert "me-rundemo" in w._esm  # the built bundle, read by anywidget


def test_generate_streams_tokens_then_fills_output_and_stats(tiny_gguf, tmp_path):
    w, sent = make(tiny_gguf, tmp_path, prompt="hello the world", chat=False, max_new_tokens=6)
    click(w, "generate")
    assert w.status == "idle" and not w.busy and w.error == ""
    kinds = [m["type"] for m in sent]
    assert kinds[0] == "generate_start" and kinds[-1] == "generate_done"
    tokens = [m for m in sent if m["type"] == "token"]
    assert tokens and "".join(m["text"] for m in tokens) == w.output
    assert all(m["tps"] >= 0 for m in tokens)
    assert w.stats["tokens"] == 6 and w.stats["decode_tps"] > 0 and w.stats["device"].startswith("cpu")
    # loading dequantized the model: one row per layer plus embeddings/head
    assert [r["layer"] for r in w.dequant] == ["embeddings / head", "layer 0", "layer 1"]
    assert w.dequant_summary.startswith("dequantize")
    assert w.family == "llama"  # a plain Llama: no feature beyond it to list


def test_dequantize_button_reloads_and_reports_per_layer(tiny_gguf, tmp_path):
    w, _ = make(tiny_gguf, tmp_path)
    seen = []
    w.observe(lambda change: seen.append(change["new"]), "progress")
    click(w, "dequantize")
    totals = [p for p in seen if p.get("total")]
    assert totals and totals[-1]["done"] == totals[-1]["total"] == 20  # every tensor of the tiny model
    first = w._model
    assert first is not None and w.progress == {}
    rows = {r["layer"]: r for r in w.dequant}
    assert rows["layer 0"]["tensors"] == 9 and rows["layer 0"]["dtypes"] == ["F32"]
    assert rows["layer 0"]["dequantized_bytes"] == rows["layer 0"]["quantized_bytes"]  # F32 stays F32
    click(w, "dequantize")
    assert w._model is not first


def test_a_second_job_waits_its_turn(tiny_gguf, tmp_path):
    w, sent = make(tiny_gguf, tmp_path)
    release = threading.Event()
    assert w._start("generating", lambda: release.wait(10))
    assert w.busy
    assert w.generate() is False  # refused, with a notice in the widget
    assert sent[-1]["type"] == "notice" and "generating" in sent[-1]["message"]
    release.set()
    assert w.wait(10) and not w.busy and w.status == "idle"


def test_stop_ends_generation_early(tiny_gguf, tmp_path):
    w, sent = make(tiny_gguf, tmp_path, prompt="hello the world", chat=False, max_new_tokens=500)
    original = w.send

    def send_and_stop(content, buffers=None):
        original(content)
        if content.get("type") == "token" and content["count"] == 2:
            w.stop()

    w.send = send_and_stop
    click(w, "generate")
    assert w.status == "idle" and sent[-1] == {"type": "notice", "message": "Stopped."}
    assert w.stats["stop_reason"] == "stopped"
    assert 0 < len(w.output) and sum(m["type"] == "token" for m in sent) == 2


def test_failures_show_in_the_widget(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 7)
    w, sent = make(str(bad), tmp_path)
    click(w, "generate")
    assert w.status == "error" and not w.busy
    assert "error" in w.error.lower() and sent[-1]["type"] == "error"


def test_compare_runs_each_variant_and_reuses_conversions(tiny_gguf, tmp_path):
    w, sent = make(tiny_gguf, tmp_path, prompt="hello the world", chat=False, max_new_tokens=5)
    click(w, "compare")
    assert w.status == "idle", w.error
    c = w.comparison
    assert [v["label"] for v in c["variants"]] == ["F32 (as shipped)", "Q8_0", "F16"]
    assert c["reference"] == "F16"
    for v in c["variants"]:
        assert len(v["tokens"]) == 5 and len(v["token_texts"]) == 5
        assert math.isfinite(v["perplexity"]) and v["perplexity"] > 1
        assert v["agreement"]["total"] == 5
    events = [m["event"]["type"] for m in sent if m["type"] == "compare_event"]
    assert events.count("convert_start") == 2 and events.count("variant_done") == 3
    sent.clear()
    click(w, "compare")
    events = [m["event"]["type"] for m in sent if m["type"] == "compare_event"]
    assert "convert_start" not in events  # converted once, cached


def test_layer_table_groups_rows_by_layer_in_order():
    rows = [{"name": n, "dtype": d, "quantized_bytes": 10, "dequantized_bytes": 40, "seconds": 0.5}
            for n, d in [("token_embd.weight", "Q8_0"), ("blk.0.attn_q.weight", "Q4_1"),
                         ("blk.0.attn_norm.weight", "F32"), ("blk.1.attn_q.weight", "Q4_1"),
                         ("model.layers.1.mlp.up_proj.weight", "Q4_1"), ("output_norm.weight", "F32")]]
    table = layer_table(rows)
    assert [r["layer"] for r in table] == ["embeddings / head", "layer 0", "layer 1"]
    assert table[0]["tensors"] == 2 and table[0]["dtypes"] == ["Q8_0", "F32"]
    assert table[1]["dtypes"] == ["Q4_1", "F32"] and table[1]["seconds"] == 1.0
    assert table[2]["tensors"] == 2 and table[2]["dequantized_bytes"] == 80


def test_unknown_keywords_are_refused(tiny_gguf):
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_tokens'"):
        RunDemo(tiny_gguf, max_tokens=5)


def test_compare_backends_fills_one_row_per_backend(tiny_gguf, tmp_path):
    w, _ = make(tiny_gguf, tmp_path, max_new_tokens=4, chat=False, prompt="the cat")
    click(w, "compare_backends")
    assert w.wait(120) and not w.error, w.error
    rows = w.backends
    assert rows[0]["backend"] == "numpy" and rows[0]["agrees_with_numpy"] == "4/4"
    for r in rows:
        assert r["weight_bytes_per_token"] > 0 and r["cap_tps"] > 0 and "tokens" not in r


def test_trace_shows_layers_done_and_stop_ends_it(tiny_gguf, tmp_path):
    """Trace and Compare with… report each layer in the progress bar; Stop ends the pass (issue 31)."""
    w, sent = make(tiny_gguf, tmp_path, prompt="hello the world")
    seen = []
    real = w._runs_progress

    def spy(label, done, total):
        seen.append((label, done, total))
        return real(label, done, total)

    w._runs_progress = spy
    click(w, "trace")
    assert w.error == "" and w.runs and seen == [("tracing", 1, 2), ("tracing", 2, 2)]

    def stop_after_first(label, done, total):
        w._stop.set()
        return real(label, done, total)

    w._runs_progress = stop_after_first
    click(w, "trace")
    assert w.status == "idle" and w.error == "" and {"type": "notice", "message": "Stopped."} in sent


def test_loading_says_which_engine_and_its_memory(tiny_gguf, tmp_path):
    w, _ = make(tiny_gguf, tmp_path)
    click(w, "dequantize")
    assert w.engine.startswith("numpy on the CPU, fits") and "available" in w.engine


def test_before_generate_the_run_tab_says_the_engine_and_its_memory(tiny_gguf, tmp_path):
    """Issue 39 item 11: said when the widget is made, before anything loads."""
    w, _ = make(tiny_gguf, tmp_path)
    assert w._model is None and w.engine.startswith("numpy on the CPU, fits") and "float32" in w.engine


def test_cpu_says_when_auto_would_run_llamacpp(tiny_gguf, monkeypatch):
    from model_explorer.runtime import api

    monkeypatch.setattr(api, "wants_llamacpp", lambda path, device, backend, keep: device == "auto")
    auto = api.engine_plan(tiny_gguf, "auto", context=64)
    assert auto.startswith("llama.cpp:") and "the mapped file" in auto and "KV cache" in auto
    assert "compute buffers about" in auto and "(f16, 64 tokens)" in auto
    cpu = api.engine_plan(tiny_gguf, "cpu", context=64)
    assert cpu.startswith("numpy on the CPU, ") and cpu.endswith('Device "auto" would run llama.cpp instead '
                                                                  "(the file's own quantized blocks: faster, less memory).")


def test_a_run_clears_the_last_one_and_says_its_first_token_time(tiny_gguf, tmp_path):
    w, sent = make(tiny_gguf, tmp_path, prompt="hello", chat=False, max_new_tokens=3)
    click(w, "generate")
    first = dict(w.stats)
    assert first["includes_load"] is True and 0 < first["first_token_seconds"]
    w.error = "an old error"
    click(w, "generate")
    assert w.stats["includes_load"] is False and w.error == ""
    assert w.stats["first_token_seconds"] < first["first_token_seconds"] + first["load_seconds"]
