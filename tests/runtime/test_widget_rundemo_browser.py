"""The RunDemo bundle in Chromium with a stand-in anywidget model (no Jupyter): buttons send
the right messages, tokens stream into the output as text, comparisons highlight differences,
and nothing from a model or file is ever parsed as HTML."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from model_explorer.assets import STATIC

pytestmark = pytest.mark.browser

BUNDLE = STATIC / "run_demo_widget.js"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))
from labserver import CHROMIUM, require  # noqa: E402
from labserver import CHROMIUM_ARGS as ARGS  # noqa: E402

EVIL = '<img src=x onerror="window.pwned=1">'

# A stand-in for anywidget's model: traits in a dict, change events, and a log of sent messages.
FAKE_MODEL = """
window.makeModel = (state) => {
  const handlers = {};
  const model = {
    state, sent: [],
    get: (k) => model.state[k],
    set: (k, v) => { model.state[k] = v; },
    save_changes: () => {},
    send: (m) => model.sent.push(m),
    on: (names, fn) => { for (const n of names.split(" ")) (handlers[n] ||= []).push(fn); },
    off: (names, fn) => { for (const n of names.split(" ")) handlers[n] = (handlers[n] || []).filter((f) => f !== fn); },
    emit: (name, payload) => { for (const fn of handlers[name] || []) fn(payload); },
    update: (k, v) => { model.state[k] = v; model.emit(`change:${k}`); },
  };
  return model;
};
"""


@pytest.fixture(scope="module")
def page():
    if not BUNDLE.is_file():
        pytest.skip("the widget bundle is not built (make js)")
    require(os.path.exists(CHROMIUM), "Chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with tempfile.TemporaryDirectory() as profile, sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page()
        pg.set_content("<html><body><div id=root></div></body></html>")
        pg.add_script_tag(content=FAKE_MODEL)
        # anywidget loads the widget's `_css` beside its module; so does this page.
        pg.add_style_tag(content=(STATIC / "run_demo_widget.css").read_text())
        pg.evaluate("""async (code) => {
            const url = URL.createObjectURL(new Blob([code], {type: "text/javascript"}));
            window.widget = await import(url);
        }""", BUNDLE.read_text())
        yield pg
        browser.close()


def render(page, **state):
    base = {"source_label": "tiny.gguf", "devices": ["auto", "cpu"], "device": "auto",
            "prompt": "Hello", "chat": True, "max_new_tokens": 16, "temperature": 0.0,
            "status": "idle", "busy": False, "error": "", "output": "", "stats": {}, "progress": {},
            "dequant": [], "dequant_summary": "", "comparison": {}}
    base.update(state)
    page.evaluate("""(state) => {
        const root = document.getElementById("root");
        root.replaceChildren();
        if (window.cleanup) window.cleanup();
        window.model = makeModel(state);
        // anywidget's current entry point: a default export with render (no bare `render`).
        window.cleanup = widget.default.render({model: window.model, el: root});
    }""", base)


def test_controls_send_messages_and_sync_traits(page):
    # A bare `render` export makes anywidget print a deprecation warning.
    assert page.evaluate("() => typeof widget.render") == "undefined"
    render(page)
    assert page.locator(".me-rundemo").count() == 1
    assert page.locator("select").first.locator("option").all_text_contents() == ["auto", "cpu"]
    assert page.locator(".me-rd-runs-engine option").all_text_contents() == ["decoder"]
    page.fill("textarea", "Tell me a story")
    page.locator("select").first.select_option("cpu")
    page.get_by_role("button", name="Generate").click()
    page.get_by_role("button", name="Compare quantizations").click()
    state = page.evaluate("({prompt: model.state.prompt, device: model.state.device, sent: model.sent})")
    assert state["prompt"] == "Tell me a story" and state["device"] == "cpu"
    assert state["sent"] == [{"type": "generate"}, {"type": "compare"}]


def test_busy_disables_the_run_buttons_and_shows_progress(page):
    render(page, busy=True, status="loading", progress={"label": "dequantizing", "done": 3, "total": 12})
    assert page.get_by_role("button", name="Generate").is_disabled()
    assert page.get_by_role("button", name="Stop").is_enabled()
    assert page.locator("progress").evaluate("p => p.value") == 0.25
    assert "dequantizing 3/12" in page.inner_text(".me-rundemo")
    assert "tiny.gguf: loading the model" in page.inner_text(".me-rundemo")  # the engine's words (issue 39)


def test_tokens_stream_as_text_never_html(page):
    render(page)
    page.evaluate("""(evil) => {
        model.emit("msg:custom", {type: "generate_start"});
        model.emit("msg:custom", {type: "token", text: " Paris", tps: 12.34});
        model.emit("msg:custom", {type: "token", text: evil, tps: 15.0});
        model.emit("msg:custom", {type: "error", message: evil});
    }""", EVIL)
    assert page.inner_text(".me-rd-output") == " Paris" + EVIL
    assert "15.0 tokens/s" in page.inner_text(".me-rundemo")
    assert page.locator(".me-rundemo img").count() == 0
    assert page.evaluate("window.pwned") is None


def test_comparison_cards_highlight_tokens_that_differ(page):
    comparison = {"prompt": "p", "reference": "F16", "variants": [
        {"label": "Q4_1 (as shipped)", "file_bytes": 98362432, "perplexity": 26.03, "decode_tps": 20.0,
         "tokens": [1, 2, 9], "token_texts": [" Paris", ".", EVIL],
         "agreement": {"matches": 2, "total": 3, "prefix": 2}},
        {"label": "F16", "file_bytes": 270885920, "perplexity": 26.02, "decode_tps": 18.0,
         "tokens": [1, 2, 3], "token_texts": [" Paris", ".", "\n"],
         "agreement": {"matches": 3, "total": 3, "prefix": 3}}]}
    render(page, comparison=comparison)
    cards = page.locator(".me-rd-variant")
    assert cards.count() == 2
    first = cards.nth(0)
    assert "2/3 tokens agree, first 2 identical" in first.inner_text()
    assert "perplexity 26.030" in first.inner_text() and "93.8 MiB" in first.inner_text()
    assert first.locator(".me-rd-diff").all_text_contents() == [EVIL]
    assert cards.nth(1).locator(".me-rd-diff").count() == 0
    assert page.locator(".me-rundemo img").count() == 0


def test_dequantize_table_per_layer(page):
    rows = [{"layer": "embeddings / head", "dtypes": ["Q8_0", "F32"], "tensors": 2,
             "quantized_bytes": 30081024, "dequantized_bytes": 113248256, "seconds": 0.2},
            {"layer": "layer 0", "dtypes": ["Q4_1", "F32"], "tensors": 9,
             "quantized_bytes": 2000000, "dequantized_bytes": 13000000, "seconds": 0.01}]
    render(page, dequant=rows, dequant_summary="dequantize (load): 11 tensors")
    page.locator("summary").click()
    cells = page.locator("table tr").nth(1).locator("td").all_text_contents()
    assert cells[:5] == ["embeddings / head", "Q8_0, F32", "2", "28.7 MiB", "108.0 MiB"]
    assert cells[5].strip() == "200 ms"


def test_trace_and_compare_offer_llamacpp_for_a_gguf(page):
    render(page, runs_engines=["decoder", "llama.cpp"], runs_engine="decoder")
    assert page.locator(".me-rd-runs-engine option").all_text_contents() == ["decoder", "llama.cpp"]
    page.locator(".me-rd-runs-engine").select_option("llama.cpp")
    page.get_by_role("button", name="Trace").click()
    state = page.evaluate("({engine: model.state.runs_engine, sent: model.sent})")
    assert state["engine"] == "llama.cpp" and state["sent"] == [{"type": "trace"}]
