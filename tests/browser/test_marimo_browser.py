"""The Explorer, the run cell and the FixDialog in marimo (`mo.ui.anywidget(mx.explore(...))`),
against marimo's own server (`marimo run`) in Chromium: first bytes, a tab switch and a
histogram; the Run tab's RunDemo (made when the tab opens, outside any cell); the Fix… dialog,
drawn without ipywidgets, writes the fixed copy, opens it in an Explorer and compares; the Graph
tab of an ONNX file (its layout engine's worker started from the kernel's bytes there too)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import widget_test_files as files
from labserver import ROOT, _free_port, screenshot

import model_explorer as mx

pytestmark = pytest.mark.browser

NOTEBOOK = '''import marimo

app = marimo.App(width="full")


@app.cell
def _():
    import marimo as mo
    import model_explorer as mx
    return mo, mx


@app.cell
def _(mo, mx):
    plain = mo.ui.anywidget(mx.explore({gguf!r}))
    plain
    return (plain,)


@app.cell
def _(mo, mx):
    fixme = mo.ui.anywidget(mx.explore({prefixed!r}))
    fixme
    return (fixme,)


@app.cell
def _(mo, mx):
    runme = mo.ui.anywidget(mx.explore({gguf!r}, run=True))
    runme
    return (runme,)


@app.cell
def _(mo, mx):
    graphed = mo.ui.anywidget(mx.explore({onnx!r}))
    graphed
    return (graphed,)


if __name__ == "__main__":
    app.run()
'''


@pytest.fixture(scope="module")
def marimo_page(tmp_path_factory, chromium):
    pytest.importorskip("marimo")
    tmp = tmp_path_factory.mktemp("marimo")
    from test_graph_browser import scoped_onnx

    made = {"gguf": files.small_gguf(tmp / "small.gguf"), "prefixed": files.prefixed_folder(tmp / "prefixed"),
            "onnx": scoped_onnx(tmp / "scoped.onnx")}
    nb = tmp / "explore.py"
    nb.write_text(NOTEBOOK.format(gguf=str(made["gguf"]), prefixed=str(made["prefixed"]), onnx=str(made["onnx"])))
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               MARIMO_SKIP_UPDATE_CHECK="1", HOME=str(tmp))
    log = open(tmp / "marimo.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", str(nb), "--headless", "--host", "127.0.0.1",
                             "--port", str(port), "--no-token", "--no-sandbox"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    url = f"http://127.0.0.1:{port}/"
    page = None
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail("marimo did not start:\n" + (tmp / "marimo.log").read_text()[-3000:])
                time.sleep(0.3)
        page = chromium.new_page(viewport={"width": 1400, "height": 1400})
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.goto(url)
        page.locator(".me-explorer").nth(3).wait_for(timeout=90_000)
        yield page, made
    finally:
        if page is not None:
            page.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_explorer_draws_bytes_and_switches_tabs_in_marimo(marimo_page):
    page, _ = marimo_page
    ex = page.locator(".me-explorer").nth(0)
    assert "tiny test model" in ex.locator(".me-facts").inner_text()
    ex.locator(".me-b.me-kind-magic").first.wait_for(timeout=20_000)
    ex.locator(".me-tab", has_text="Tensors").click()
    ex.locator(".me-table-row", has_text="token_embd.weight").click()
    ex.locator(".me-histogram .me-bar").first.wait_for(timeout=60_000)  # statistics are computed on the click
    ex.locator(".me-tab", has_text="Header").click()
    ex.locator(".me-tree-row").first.wait_for(timeout=20_000)
    screenshot(page, "marimo-explorer", ex)
    assert not page.errors, page.errors


def test_run_tab_draws_the_run_cell_in_marimo(marimo_page):
    page, _ = marimo_page
    ex = page.locator(".me-explorer").nth(2)
    ex.locator(".me-tab", has_text="Run").click()
    demo = ex.locator(".me-panel-run .me-rundemo")
    demo.wait_for(timeout=30_000)
    assert "small.gguf" in demo.inner_text()
    assert ex.locator(".me-panel-run .me-error").count() == 0
    demo.locator("button", has_text="Generate").wait_for()
    screenshot(page, "marimo-run-tab", ex)
    assert not page.errors, page.errors


def test_fix_dialog_writes_opens_and_compares_in_marimo(marimo_page):
    page, made = marimo_page
    ex = page.locator(".me-explorer").nth(1)
    ex.locator(".me-tab", has_text="Findings").click()
    fix = ex.locator(".me-finding", has_text="key_prefix").locator(".me-fix-btn")
    fix.wait_for(timeout=30_000)
    fix.click()
    panel = ex.locator(".me-fix-panel").first
    panel.locator(".me-fix-choice").first.wait_for(timeout=30_000)
    assert "key_prefix" in panel.locator(".me-fix-title").inner_text()
    assert [b.is_checked() for b in panel.locator(".me-fix-choice input").all()] == [True, False]
    dest = Path(str(made["prefixed"]) + ".fixed")
    assert panel.locator(".me-fix-dest").input_value() == str(dest)
    panel.locator(".me-fix-write").click()
    panel.locator(".me-fix-out", has_text="fixed  strip_prefix").wait_for(timeout=60_000)
    assert (dest / "model.safetensors").is_file()
    assert "key_prefix" not in {f.code for f in mx.open(dest).findings}
    panel.locator(".me-fix-explore").click()
    fixed = panel.locator(".me-fix-view .me-explorer")
    fixed.wait_for(timeout=30_000)
    fixed.locator(".me-tab", has_text="Findings").click()
    assert fixed.locator(".me-finding", has_text="key_prefix").count() == 0
    panel.locator(".me-fix-compare").click()
    panel.locator(".me-fix-out", has_text="model.embed_tokens.weight").wait_for(timeout=60_000)
    screenshot(page, "marimo-fix-dialog", ex)
    panel.locator(".me-fix-head .me-fix-close").first.click()
    assert panel.is_hidden()
    assert not page.errors, page.errors


def test_graph_tab_draws_and_opens_a_group_in_marimo(marimo_page):
    page, _ = marimo_page
    ex = page.locator(".me-explorer", has_text="scoped.onnx")
    ex.locator(".me-tab", has_text="Graph").click()
    graph = ex.locator(".me-graph")
    page.wait_for_function("el => el.dataset.state === 'ready' || el.dataset.state === 'error'",
                           arg=graph.element_handle(), timeout=60_000)
    assert graph.get_attribute("data-state") == "ready", ex.locator(".me-graph-status").inner_text()
    assert "main thread" not in ex.locator(".me-graph-status").inner_text()  # the worker started
    ex.locator(".me-graph [data-node-id='g:model/layers.0']").click()
    ex.locator(".me-graph [data-node-id='n:/model/layers.0/Softmax']").wait_for(timeout=30_000)
    screenshot(page, "marimo-graph-tab", ex)
    assert not page.errors, page.errors
