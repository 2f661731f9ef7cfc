"""The Layers tab and the Fix… button in a real JupyterLab (issues 14 and 13): a tiny llama with
a zeroed and a scaled-up layer gets those cells marked and listed, hovering says what a cell is,
clicking one selects its tensor everywhere, the keyboard moves between cells and selects one,
and Stop ends a slow computation (Continue goes on from what was kept); a DataParallel folder's key-prefix finding opens the
FixDialog inside the Explorer with only its fix ticked, and the copy it writes reopens without
the finding. One server for the module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import widget_test_files as files
from labserver import CONTRAST, run_cells, screenshot

import model_explorer as mx

pytestmark = pytest.mark.browser


# An Explorer whose statistics take 80 ms a tensor (54 tensors: about 4 s), so Stop has time.
SLOW = """import time
slow = mx.explore({path!r})
_stats = slow.checkpoint.stats_table
def _slow_stats(*a, **k):
    time.sleep(0.08)
    return _stats(*a, **k)
slow.checkpoint.stats_table = _slow_stats
slow"""


@pytest.fixture(scope="module")
def made(lab):
    _, home = lab
    return {"llama": files.damaged_llama(home / "damaged.safetensors"),
            "prefixed": files.prefixed_folder(home / "prefixed")}


@pytest.fixture(scope="module")
def page(lab, made, chromium):
    url, home = lab
    cells = ["import model_explorer as mx",
             f"mx.explore({str(made['llama'])!r})",
             f"mx.explore({str(made['prefixed'])!r})",
             SLOW.format(path=str(made["llama"]))]
    p = run_cells(chromium, url, home, "tabs.ipynb", cells, "document.querySelectorAll('.me-explorer').length >= 3")
    yield p
    p.close()


def test_layers_tab_marks_the_bad_layers_and_selects_a_cell(page, made):
    ex = page.locator(".me-explorer").nth(0)
    ex.locator(".me-tab", has_text="Layers").click()
    grid = ex.locator(".me-layers-grid")
    grid.wait_for(timeout=30_000)
    assert ex.locator(".me-layer-cell").count() == 6 * 9
    # The two damaged cells carry a glyph and an outline, and are listed with their finding.
    marked = {(c.get_attribute("data-layer"), c.get_attribute("data-role"), c.inner_text())
              for c in ex.locator(".me-layer-cell.me-layer-mark").all()}
    assert marked == {("4", "q", "▲"), ("2", "down", "0")}
    items = ex.locator(".me-layers-item").all_inner_texts()
    assert len(items) == 2 and any("Layer 4 q" in t for t in items) and any("Layer 2 down" in t for t in items)
    assert "2 layers marked" in ex.locator(".me-layers-status").inner_text()
    # Hovering a cell says what it is.
    cell = ex.locator(".me-layer-cell[data-layer='4'][data-role='q']")
    cell.hover()
    tip = ex.locator(".me-layers-tip")
    tip.wait_for()
    text = tip.inner_text()
    for part in ("layer 4", "q", "norm", "model.layers.4.self_attn.q_proj.weight", "z +", "far above"):
        assert part in text, (part, text)
    screenshot(page, "explorer-layers-tab", ex)
    # Clicking it selects the tensor: the hexdump lands on its first byte, the table follows.
    info = mx.open(made["llama"]).tensors["model.layers.4.self_attn.q_proj.weight"]
    cell.click()
    hl = ex.locator(".me-hexdump .me-b.me-hl")
    page.wait_for_function("([el, off]) => el.querySelector(`.me-b.me-hl[data-off='${off}']`)",
                           arg=[ex.locator(".me-hexdump").element_handle(), info.offset])
    assert int(hl.first.get_attribute("data-off")) == info.offset
    assert "me-selected" in cell.get_attribute("class")
    ex.locator(".me-tab", has_text="Tensors").click()
    ex.locator(".me-table-row.me-selected[data-tensor='model.layers.4.self_attn.q_proj.weight']").wait_for()
    assert info.name in ex.locator(".me-hist-title").inner_text()
    # Another statistic redraws from the same table; the marks stay readable in the dark theme.
    ex.locator(".me-tab", has_text="Layers").click()
    ex.locator(".me-layers-stat").select_option("absmax")
    page.wait_for_function("el => /absmax/.test(el.textContent)", arg=ex.locator(".me-layers-status").element_handle())
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeName === 'JupyterLab Dark'", timeout=20_000)
    page.wait_for_timeout(300)
    for mark in ex.locator(".me-layer-cell.me-layer-mark").all():
        assert mark.evaluate(CONTRAST) >= 3.0, mark.get_attribute("data-role")
    screenshot(page, "explorer-layers-dark", ex.locator(".me-layers"))
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    page.wait_for_function("() => document.body.dataset.jpThemeName === 'JupyterLab Light'", timeout=20_000)
    assert not page.errors, page.errors


def test_a_folder_with_one_block_says_there_is_nothing_to_profile(page):
    ex = page.locator(".me-explorer").nth(1)
    ex.locator(".me-tab", has_text="Layers").click()
    none = ex.locator(".me-layers-none")
    none.wait_for(timeout=20_000)
    assert "nothing to compare" in none.inner_text() and ex.locator(".me-layers-grid").count() == 0


def test_fix_button_writes_a_copy_that_reopens_without_the_finding(page, made):
    ex = page.locator(".me-explorer").nth(1)
    ex.locator(".me-tab", has_text="Findings").click()
    prefix = ex.locator(".me-finding", has_text="key_prefix")
    prefix.locator(".me-fix-btn").wait_for(timeout=30_000)
    # Only the findings a repair resolves have the button.
    assert ex.locator(".me-finding", has_text="no_tokenizer").locator(".me-fix-btn").count() == 0
    prefix.locator(".me-fix-btn").click()
    panel = ex.locator(".me-fix-panel").first  # the copy's own Explorer will hold another
    panel.locator(".widget-checkbox").first.wait_for(timeout=30_000)
    assert "key_prefix" in panel.locator(".me-fix-title").inner_text()
    boxes = panel.locator(".widget-checkbox input[type=checkbox]")
    assert [b.is_checked() for b in boxes.all()] == [True, False]  # strip_prefix, not tie_lm_head
    dest = Path(str(made["prefixed"]) + ".fixed")
    assert panel.locator(".widget-text input").input_value() == str(dest)
    screenshot(page, "explorer-fix-dialog", ex)
    panel.locator("button", has_text="Write fixed copy").click()
    panel.locator(".jp-OutputArea-output", has_text="fixed  strip_prefix").wait_for(timeout=30_000)
    assert (dest / "model.safetensors").is_file()
    codes = {f.code for f in mx.open(dest).findings}
    assert "key_prefix" not in codes and "lm_head_missing" in codes
    assert "module.model.embed_tokens.weight" in mx.open(made["prefixed"]).tensors  # source untouched
    # "Open in Explorer" shows the copy inside the dialog: no key_prefix finding there.
    panel.locator("button", has_text="Open in Explorer").click()
    fixed = panel.locator(".me-explorer")
    fixed.wait_for(timeout=30_000)
    fixed.locator(".me-tab", has_text="Findings").click()
    assert fixed.locator(".me-finding", has_text="key_prefix").count() == 0
    assert fixed.locator(".me-finding", has_text="lm_head_missing").count() == 1
    panel.locator(".me-fix-head .me-fix-close").first.click()
    assert panel.is_hidden()
    assert not page.errors, page.errors


def test_stop_keeps_what_was_computed_and_the_keyboard_reaches_every_cell(page, made):
    ex = page.locator(".jp-CodeCell").nth(3).locator(".me-explorer").first
    # JupyterLab renders only the cells near the viewport: bring this one there before reading it.
    ex.scroll_into_view_if_needed()
    at_open = len(mx.open(made["llama"]).findings)
    assert ex.locator(".me-tab", has_text="Findings").inner_text() == f"Findings ({at_open})"
    ex.locator(".me-tab", has_text="Layers").click()
    stop = ex.locator(".me-layers-stop")
    stop.wait_for(timeout=20_000)
    progress = ex.locator(".me-layers-progress")
    page.wait_for_function("el => el.value > 0", arg=progress.element_handle(), timeout=20_000)
    stop.click()
    status = ex.locator(".me-layers-status")
    assert stop.is_hidden() and progress.is_hidden() and ex.locator(".me-layers-continue").is_visible()
    text = status.inner_text()
    kept = int(re.search(r"sampled statistics of (\d+) of 54 tensors are kept", text)[1])
    assert 0 < kept < 54, text
    page.wait_for_timeout(800)  # no step is asked for after Stop: the status stays as it is
    assert status.inner_text() == text and ex.locator(".me-layers-grid").count() == 0
    # Continue goes on from the statistics kept, not from the start.
    ex.locator(".me-layers-continue").click()
    page.wait_for_function("([el, n]) => { const m = /statistics of (\\d+) of 54/.exec(el.textContent); return m && Number(m[1]) >= n; }",
                           arg=[status.element_handle(), kept], timeout=10_000)
    grid = ex.locator(".me-layers-grid")
    grid.wait_for(timeout=30_000)
    assert ex.locator(".me-layers-continue").is_hidden() and ex.locator(".me-layers-item").count() == 2
    # One cell is in the tab order: the first marked one. Its label says what it is.
    start = ex.locator(".me-layer-cell[tabindex='0']")
    assert start.count() == 1 and (start.get_attribute("data-layer"), start.get_attribute("data-role")) == ("2", "down")
    label = start.get_attribute("aria-label")
    for part in ("layer 2", "down", "norm 0", "model.layers.2.mlp.down_proj.weight", "all zeros"):
        assert part in label, (part, label)
    assert grid.get_attribute("role") == "grid" and ex.locator("[role='row']").count() == 7
    start.focus()
    focused = "() => { const c = document.activeElement; return c && c.dataset.layer + '/' + c.dataset.role; }"
    for key, want in (("ArrowUp", "1/down"), ("ArrowRight", "1/down"), ("ArrowLeft", "1/up"),
                      ("ArrowDown", "2/up"), ("ArrowDown", "3/up"), ("ArrowDown", "4/up"), ("Home", "4/attn_norm"),
                      ("ArrowRight", "4/ffn_norm"), ("ArrowRight", "4/q")):
        page.keyboard.press(key)
        assert page.evaluate(focused) == want, key
    assert ex.locator(".me-layer-cell[tabindex='0']").get_attribute("data-role") == "q"  # the tab stop moved
    assert "layer 4 · q" in ex.locator(".me-layers-tip").inner_text()  # focus shows what hover shows
    page.keyboard.press("Enter")
    info = mx.open(made["llama"]).tensors["model.layers.4.self_attn.q_proj.weight"]
    page.wait_for_function("([el, off]) => el.querySelector(`.me-b.me-hl[data-off='${off}']`)",
                           arg=[ex.locator(".me-hexdump").element_handle(), info.offset], timeout=20_000)
    assert "me-selected" in ex.locator(".me-layer-cell[data-layer='4'][data-role='q']").get_attribute("class")
    assert not page.errors, page.errors


def test_layer_findings_are_listed_and_counted_once_computed(page, made):
    """After the test above drew the profile: the Findings tab counts its two findings and lists
    them apart, marked as from sampled norm statistics; one selects its tensor's bytes."""
    ex = page.locator(".jp-CodeCell").nth(3).locator(".me-explorer").first
    ex.scroll_into_view_if_needed()
    at_open = len(mx.open(made["llama"]).findings)
    tab = ex.locator(".me-tab", has_text="Findings")
    assert tab.inner_text() == f"Findings ({at_open + 2})"
    assert "2 from the Layers tab (sampled norm statistics)" in tab.get_attribute("title")
    tab.click()
    group = ex.locator(".me-layer-findings")
    assert group.locator("summary").inner_text() == "From the Layers tab: sampled norm statistics (2)"
    items = group.locator(".me-finding")
    assert items.count() == 2 and ex.locator(".me-finding").count() == at_open + 2
    assert items.locator(".me-finding-origin").all_inner_texts() == ["sampled norm"] * 2
    q = group.locator(".me-finding", has_text="Layer 4 q")
    assert "layer_outlier" in q.inner_text()
    q.click()
    info = mx.open(made["llama"]).tensors["model.layers.4.self_attn.q_proj.weight"]
    page.wait_for_function("([el, off]) => el.querySelector(`.me-b.me-hl[data-off='${off}']`)",
                           arg=[ex.locator(".me-hexdump").element_handle(), info.offset], timeout=20_000)
    screenshot(page, "explorer-layer-findings", ex)
    # Another statistic drawn in the Layers tab replaces them with its own, and says so.
    ex.locator(".me-tab", has_text="Layers").click()
    ex.locator(".me-layers-stat").select_option("absmax")
    page.wait_for_function("el => /absmax/.test(el.textContent)", arg=ex.locator(".me-layers-status").element_handle())
    page.wait_for_function("el => /sampled absmax statistics/.test(el.textContent)", arg=group.element_handle())
    assert not page.errors, page.errors
