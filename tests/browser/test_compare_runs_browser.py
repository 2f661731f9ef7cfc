"""The "Compare runs" view in a real JupyterLab (issue 25): a tiny Llama compared against its copy
with layer 2's v weight swapped for layer 0's. `d.show()` draws the heatmap with the first
divergence outlined and explained (layer, module, weight, byte offset) and the KLD / top-1
figures; a trace of a copy with a NaN in layer 2's up weight marks where NaN first appears; in
the Explorer's Run tab, "Compare with…" runs the same comparison in the kernel and a
click on the marked cell selects that weight in the Explorer (the hexdump lands on its first
byte, the tensor table follows). One server for the module."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from labserver import screenshot

import model_explorer as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the runs fixtures' builders

pytestmark = pytest.mark.browser

V2 = "model.layers.2.self_attn.v_proj.weight"
UP2 = "model.layers.2.mlp.up_proj.weight"
EVIL = '<img src=x onerror="window.pwned=1">'
# The state of d with names from a hostile file: drawn as text, never parsed as HTML.
EVIL_CELL = f"""from model_explorer.widgets.runs_view import RunsView
from model_explorer.runs.state import runs_state
s = runs_state(d)
s["title"] = s["verdict"]["sentence"] = s["cell_tensors"][2][3] = s["marks"][0]["text"] = {EVIL!r}
s["config"] = [[{EVIL!r}, {EVIL!r}, "1,000,000"]]
s["config_where"] = [{EVIL!r}]  # a GGUF key's name comes from the file
s["tokenizer_mismatch"] = {{"position": 1, "a_tokens": [{EVIL!r}], "b_tokens": ["x"]}}
RunsView(runs=s)"""
PROMPT = "the cat sat on the mat, and then the hat was in the sun."


@pytest.fixture(scope="module")
def made(lab):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from runs.conftest import Base

    _, home = lab
    base = Base(home / "models")
    swapped = base.copy("swapped", {V2: base.state["model.layers.0.self_attn.v_proj.weight"]})
    up = base.weight(2, "mlp.up_proj").copy()
    up[5, 7] = float("nan")
    nan = base.copy("nan", {UP2: up})
    return {"a": base.folder, "b": swapped, "nan": nan}


@pytest.fixture(scope="module")
def page(lab, made, chromium):
    from labserver import run_cells

    url, home = lab
    cells = ["import model_explorer as mx",
             f"d = mx.compare_runs({made['a']!r}, {made['b']!r}, prompt={PROMPT!r})\nd.show()",
             f"mx.explore({made['a']!r}, run=True)",
             f"mx.trace({made['nan']!r}, prompt={PROMPT!r}).show()",
             EVIL_CELL]
    started = time.perf_counter()
    p = run_cells(chromium, url, home, "runs.ipynb", cells,
                  "document.querySelectorAll('.me-runs').length >= 3 && document.querySelector('.me-explorer')")
    p.opened_s = time.perf_counter() - started
    yield p
    p.close()


def test_the_heatmap_marks_and_explains_the_first_divergence(page, made):
    view = page.locator(".jp-CodeCell").nth(1).locator(".me-runs")
    assert view.get_attribute("data-kind") == "diff"
    assert view.locator(".me-runs-cell").count() == 4 * 9  # 4 layers x the decoder's 9 modules
    heads = view.locator(".me-runs-colhead").all_inner_texts()
    assert heads[:4] == ["attn_norm", "q", "k", "v"] and len(heads) == 9
    marked = view.locator(".me-runs-cell.me-runs-mark")
    assert marked.count() == 1
    assert (marked.get_attribute("data-layer"), marked.get_attribute("data-module")) == ("2", "v")
    assert "me-runs-divergence" in marked.get_attribute("class")
    # Hover says the numbers; the cell before it agrees exactly, the marked one does not.
    title = marked.get_attribute("title")
    for part in ("layer 2", "v", "cosine", "relative L2", V2, "first divergence"):
        assert part in title, (part, title)
    assert "relative L2 0 " in view.locator(".me-runs-cell[data-layer='1'][data-module='v']").get_attribute("title")
    # The sentence: where, the jump, the weight and its bytes.
    info = mx.open(made["b"]).tensors[V2]
    text = view.locator(".me-runs-first").inner_text()
    for part in ("layer 2 v", "relative L2", V2, f"byte {info.offset:,}", "model.safetensors"):
        assert part in text, (part, text)
    # The verdict in its colour: a jump reads red, never the green of runs that agree.
    verdict = view.locator(".me-runs-first")
    assert verdict.get_attribute("data-verdict") == "jump" and "me-runs-jump" in verdict.get_attribute("class")
    assert verdict.evaluate("e => getComputedStyle(e).borderLeftColor") == "rgb(201, 42, 42)"
    figures = view.locator(".me-runs-figures").inner_text()
    assert "KLD mean / median / p99 / max" in figures and "top-1 agreement" in figures
    assert "relative L2 (log scale)" in view.locator(".me-runs-legend").inner_text()
    # The marked cell is coloured as the hottest of its column so far (a visible red).
    assert marked.evaluate("c => getComputedStyle(c).backgroundColor") != \
        view.locator(".me-runs-cell[data-layer='0'][data-module='v']").evaluate("c => getComputedStyle(c).backgroundColor")
    # Outside the Explorer, a click says which weight the cell is.
    marked.click()
    page.wait_for_function("el => /weight model\\.layers\\.2\\.self_attn\\.v_proj/.test(el.textContent)",
                           arg=view.locator(".me-runs-note").element_handle(), timeout=10_000)
    screenshot(page, "compare-runs-view", view)
    assert not page.errors, page.errors


def test_a_trace_marks_where_nan_first_appears(page):
    view = page.locator(".jp-CodeCell").nth(3).locator(".me-runs")
    assert view.get_attribute("data-kind") == "trace"
    assert "absmax / median |x| (log scale)" in view.locator(".me-runs-legend").inner_text()
    cell = view.locator(".me-runs-cell.me-runs-nonfinite")
    assert cell.count() == 1 and (cell.get_attribute("data-layer"), cell.get_attribute("data-module")) == ("2", "ffn_out")
    assert cell.inner_text() == "N" and "NaN" in cell.get_attribute("title")
    assert cell.evaluate("c => c === document.activeElement || c.tabIndex === 0")  # the tab stop
    # NaN spreads from there: every later cell holds some (hatched), no earlier one does.
    bad = {(c.get_attribute("data-layer"), c.get_attribute("data-module")) for c in view.locator(".me-runs-cell.me-runs-bad").all()}
    assert ("2", "ffn_out") in bad and ("3", "residual") in bad and not any(layer in "01" for layer, _ in bad)
    assert "holds NaN/Inf" in view.locator(".me-runs-legend").inner_text()
    text = view.locator(".me-runs-first").inner_text()
    assert "NaN/Inf first appear at layer 2 ffn_out" in text and UP2 in text
    screenshot(page, "compare-runs-trace", view)
    assert not page.errors, page.errors


def test_names_from_files_are_text_never_html(page):
    view = page.locator(".jp-CodeCell").nth(4).locator(".me-runs")
    assert view.locator(".me-runs-title").inner_text() == EVIL
    assert view.locator(".me-runs-first").inner_text() == EVIL
    assert "<img src=x onerror=" in view.locator(".me-runs-warn").inner_text()
    assert view.locator(".me-runs-config td").first.inner_text() == EVIL
    assert view.locator(".me-runs-config td").nth(3).inner_text() == EVIL  # where the file states it
    assert EVIL in view.locator(".me-runs-cell[data-layer='2'][data-module='v']").get_attribute("title")
    assert view.locator("img").count() == 0 and page.evaluate("window.pwned") is None


def test_compare_with_in_the_run_tab_and_a_click_selects_the_weight(page, made):
    ex = page.locator(".me-explorer").first
    ex.locator(".me-tab", has_text="Run").click()
    demo = ex.locator(".me-panel-run .me-rundemo")
    demo.wait_for(timeout=30_000)
    demo.locator("input.me-rd-other").fill(made["b"])
    started = time.perf_counter()
    demo.get_by_role("button", name="Compare with…").click()
    view = demo.locator(".me-runs")
    view.wait_for(timeout=60_000)
    compare_s = time.perf_counter() - started
    cell = view.locator(".me-runs-cell.me-runs-divergence")
    assert (cell.get_attribute("data-layer"), cell.get_attribute("data-module")) == ("2", "v")
    assert "layer 2 v" in view.locator(".me-runs-first").inner_text()
    info = mx.open(made["a"]).tensors[V2]
    cell.click()
    page.wait_for_function("([el, off]) => el.querySelector(`.me-b.me-hl[data-off='${off}']`)",
                           arg=[ex.locator(".me-hexdump").element_handle(), info.offset], timeout=20_000)
    assert "Selected " + V2 in view.locator(".me-runs-note").inner_text()
    assert "me-selected" in cell.get_attribute("class")
    ex.locator(".me-tab", has_text="Tensors").click()
    ex.locator(f".me-table-row.me-selected[data-tensor='{V2}']").wait_for(timeout=10_000)
    page.wait_for_function("([el, name]) => el.textContent.includes(name)",
                           arg=[ex.locator(".me-hist-title").first.element_handle(), V2], timeout=10_000)
    ex.locator(".me-tab", has_text="Run").click()
    screenshot(page, "compare-runs-run-tab", ex)
    # Trace: the same view, coloured by absmax / median; no NaN in a healthy model.
    ex.locator(".me-tab", has_text="Run").click()
    demo.get_by_role("button", name="Trace").click()
    page.wait_for_function("el => el.querySelector('.me-runs[data-kind=\"trace\"]')", arg=demo.element_handle(),
                           timeout=60_000)
    assert "absmax / median" in demo.locator(".me-runs-legend").inner_text()
    assert demo.locator(".me-runs-cell.me-runs-nonfinite").count() == 0
    # A path that is not there: a sentence in the widget, no traceback.
    demo.locator("input.me-rd-other").fill(made["a"] + "-nowhere")
    demo.get_by_role("button", name="Compare with…").click()
    err = demo.locator(".me-rd-error")
    page.wait_for_function("el => el.textContent.length > 0", arg=err.element_handle(), timeout=30_000)
    assert "Traceback" not in err.inner_text()
    print(f"notebook opened and ran in {page.opened_s:.1f} s; Compare with… drawn in {compare_s:.1f} s")
    assert not page.errors, page.errors


def test_the_run_tab_says_what_it_will_do_and_each_run_starts_clean(page):
    """Issue 39 item 11: before Generate, the engine, why and its memory; a first run says its
    first token includes the load, a second that the model was loaded before; each run clears
    the last one's text."""
    ex = page.locator(".me-explorer").first
    ex.locator(".me-tab", has_text="Run").click()
    demo = ex.locator(".me-panel-run .me-rundemo")
    demo.wait_for(timeout=30_000)
    engine = demo.locator(".me-rd-engine")
    page.wait_for_function("el => el.textContent.startsWith('engine: ')", arg=engine.element_handle(),
                           timeout=30_000)
    said = engine.inner_text()
    assert said.startswith("engine: numpy on the CPU, ") and "float32" in said, said  # a safetensors folder
    assert any(unit in said for unit in ("KiB", "MiB", "GiB")), said  # the memory it will take
    tokens = demo.locator("input[type='number']").first
    tokens.fill("3")  # a few tokens are enough
    tokens.dispatch_event("change")
    stats = demo.locator(".me-rd-status").filter(has_text="first token after")
    demo.get_by_role("button", name="Generate").click()
    stats.first.wait_for(timeout=90_000)
    assert "the first run: this includes loading the model" in stats.first.inner_text()
    first_output = demo.locator(".me-rd-output").inner_text()
    demo.get_by_role("button", name="Generate").click()
    page.wait_for_function("el => el.textContent.includes('the model was loaded by an earlier run')",
                           arg=demo.element_handle(), timeout=90_000)
    assert demo.locator(".me-rd-output").inner_text() == first_output  # greedy: the same, not appended
    assert not page.errors, page.errors


def test_the_verdict_never_says_agree_and_drift_apart_at_once(page):
    """Issue 39 item 12: one sentence, consistent with itself."""
    view = page.locator(".jp-CodeCell").nth(1).locator(".me-runs")
    text = view.locator(".me-runs-first").inner_text()
    assert not ("everything before it agrees" in text and "drift apart" in text), text
