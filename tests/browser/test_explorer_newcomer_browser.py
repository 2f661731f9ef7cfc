"""What a newcomer meets in a real JupyterLab (issue 16): Hugging Face names in the tensor table,
resizable columns, sorting from the top, the file-map legend, selection set from Python, the Run
tab inside the Explorer, readable finding badges, and a saved notebook reopened without its
kernel. One server for the module; the reopening test runs last because it stops the kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
import widget_test_files as files
from labserver import CONTRAST, open_notebook, screenshot

import model_explorer as mx

pytestmark = pytest.mark.browser

LAYERS = 30
PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def hf_like(path: Path) -> Path:
    """272 tensors named as Hugging Face llama checkpoints name them: F16 matrices, F32 norms."""
    rng = np.random.default_rng(1)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((32, 8)).astype(np.float16)}
    for i in range(LAYERS):
        tensors[f"model.layers.{i}.input_layernorm.weight"] = np.ones(8, np.float32)
        for p in PROJ:
            tensors[f"model.layers.{i}.{p}.weight"] = rng.standard_normal((8, 8)).astype(np.float16)
        tensors[f"model.layers.{i}.post_attention_layernorm.weight"] = np.ones(8, np.float32)
    tensors["model.norm.weight"] = np.ones(8, np.float32)
    return files.write_safetensors(path, tensors, {"format": "pt"})


KERNEL_RUN = """async (code) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const reply = await k.requestExecute({ code }).done;
  return reply.content.status;
}"""


@pytest.fixture(scope="module")
def made(lab):
    _, home = lab
    return {"hf": hf_like(home / "hf.safetensors"), "shards": files.sharded(home / "shards"),
            "broken": files.broken_safetensors(home / "broken.safetensors")}


@pytest.fixture(scope="module")
def page(lab, made, chromium):
    url, home = lab
    cells = [
        "import model_explorer as mx",
        f"ex = mx.explore({str(made['hf'])!r}, run=True)\nex",
        f"sh = mx.explore({str(made['shards'])!r})\nsh",
        f"mx.explore({str(made['broken'])!r})",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, home / "newcomer.ipynb")
    console: list[str] = []
    page = open_notebook(chromium, url, "newcomer.ipynb",
                         setup=lambda p: p.on("console", lambda m: console.append(m.text)))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function("() => document.querySelectorAll('.me-explorer').length >= 3", timeout=60_000)
    page.wait_for_timeout(300)
    page.errors, page.console = errors, console
    yield page
    page.close()


def test_tensor_names_whole_or_shortened_in_the_middle(page):
    ex = page.locator(".me-explorer").nth(0)
    ex.locator(".me-tab", has_text="Tensors").click()
    row = ex.locator(".me-table-row[data-tensor='model.layers.17.mlp.down_proj.weight']")
    ex.locator(".me-table .me-search").fill("layers.17.mlp")
    row.wait_for()
    name = row.locator(".me-col-name")
    # Whole where it fits (the name column starts as wide as the names on the first page) ...
    assert name.inner_text() == "model.layers.17.mlp.down_proj.weight"
    # ... the last columns are there, numbers readable and right-aligned ...
    offset = row.locator(".me-col-offset")
    assert "," in offset.inner_text() and offset.get_attribute("title").startswith("byte ")
    assert offset.evaluate("el => getComputedStyle(el).textAlign") == "right"
    # ... and narrower, it loses its middle, not its tail; the full name is on hover.
    grip = ex.locator(".me-table-head .me-col-name .me-col-resize")
    box = grip.bounding_box()
    page.mouse.move(box["x"] + 3, box["y"] + 5)
    page.mouse.down()
    page.mouse.move(box["x"] - 120, box["y"] + 5, steps=4)
    page.mouse.up()
    short = name.inner_text()
    assert "…" in short and short.endswith("mlp.down_proj.weight") and len(short) < 36, short
    assert name.get_attribute("title") == "model.layers.17.mlp.down_proj.weight"
    # Wider than the pane, the list scrolls sideways and its head follows.
    page.mouse.move(box["x"] - 117, box["y"] + 5)
    page.mouse.down()
    page.mouse.move(box["x"] + 400, box["y"] + 5, steps=4)
    page.mouse.up()
    lst = ex.locator(".me-table-list")
    assert lst.evaluate("el => el.scrollWidth > el.clientWidth")
    lst.evaluate("el => { el.scrollLeft = 120; el.dispatchEvent(new Event('scroll')); }")
    assert ex.locator(".me-table-head").evaluate("el => el.scrollLeft") == 120
    screenshot(page, "table-long-names", ex)
    ex.locator(".me-table .me-search").fill("")


def test_sorting_starts_at_the_top(page):
    ex = page.locator(".me-explorer").nth(0)
    ex.locator(".me-tab", has_text="Tensors").click()
    lst = ex.locator(".me-table-list")
    page.wait_for_function("el => el.scrollHeight > 3000", arg=lst.element_handle())
    lst.evaluate("el => { el.scrollTop = 3000; el.dispatchEvent(new Event('scroll')); }")
    ex.locator(".me-table-head .me-col-bytes .me-col-label").click()
    page.wait_for_function("el => el.scrollTop === 0 && el.querySelector('.me-table-row[data-index=\"0\"]')",
                           arg=lst.element_handle())
    first = ex.locator(".me-table-row[data-index='0'] .me-col-name").inner_text()
    assert first == "model.embed_tokens.weight"  # the biggest tensor heads a descending sort


def test_file_map_legend_lists_every_dtype_beside_its_swatch(page):
    ex = page.locator(".me-explorer").nth(0)
    ex.locator(".me-tab", has_text="Files").click()
    legend = ex.locator(".me-shardmap .me-legend")
    legend.locator(".me-legend-chip").first.wait_for()
    chips = legend.locator(".me-legend-chip").all_inner_texts()
    # 272 tensors are drawn in bins whose colour is their commonest dtype: F32 norms never
    # colour a bin, and the legend still lists them.
    assert {"F16", "F32", "header"} <= {c.strip() for c in chips}, chips
    header = legend.locator(".me-legend-chip", has_text="header")
    assert header.evaluate("el => getComputedStyle(el).backgroundImage") == "none"
    swatch = header.locator(".me-swatch-header").bounding_box()
    text_left = header.evaluate("el => { const r = document.createRange(); r.selectNodeContents(el.lastChild); return r.getBoundingClientRect().left; }")
    assert swatch["x"] + swatch["width"] <= text_left + 0.5


def test_selection_from_python_moves_every_view(page, made):
    ckpt = mx.open(made["shards"])
    name, info = next((n, t) for n, t in ckpt.tensors.items() if t.file != ckpt.files[0])
    sh = page.locator(".me-explorer").nth(1)
    assert page.evaluate(KERNEL_RUN, f"sh.selection = {{'tensor': {name!r}}}") == "ok"
    # The hexdump changes file and lands on the tensor's first byte ...
    page.wait_for_function("([el, f]) => el.value === f", arg=[sh.locator(".me-file-select").element_handle(), info.file])
    hl = sh.locator(".me-hexdump .me-b.me-hl")
    hl.first.wait_for()
    assert int(hl.first.get_attribute("data-off")) == info.offset
    # ... and the table, tree and histogram follow.
    assert name in sh.locator(".me-hist-title").inner_text()
    sh.locator(".me-tab", has_text="Tensors").click()
    sh.locator(f".me-table-row.me-selected[data-tensor='{name}']").wait_for()
    sh.locator(".me-tab", has_text="Header").click()
    sh.locator(".me-tree-row.me-selected").wait_for()


def test_run_is_a_tab_of_the_explorer(page):
    ex = page.locator(".me-explorer").nth(0)
    tabs = ex.locator(".me-tabs .me-tab").all_inner_texts()
    assert tabs[0] == "Overview" and tabs[-1] == "Run", tabs
    ex.locator(".me-tab", has_text="Run").click()
    demo = ex.locator(".me-panel-run .me-rundemo")
    demo.wait_for(timeout=20_000)
    assert "hf.safetensors" in demo.inner_text()
    # One tab bar, the Explorer's: no ipywidgets.Tab around it.
    assert page.locator(".jp-OutputArea .lm-TabBar, .jp-OutputArea .widget-tab").count() == 0
    assert not [m for m in page.console if "Deprecation" in m and "anywidget" in m], page.console
    screenshot(page, "explorer-run-tab", ex)


def test_finding_badges_read_in_light_and_dark_themes(page):
    broken = page.locator(".me-explorer").nth(2)
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
        page.wait_for_function(f"() => document.body.dataset.jpThemeName === '{theme}'", timeout=20_000)
        page.wait_for_timeout(300)
        for badge in broken.locator(".me-badge").all():
            ratio = badge.evaluate(CONTRAST)
            zero = "me-zero" in badge.get_attribute("class")
            assert ratio >= (3.0 if zero else 4.5), (theme, badge.inner_text(), ratio)
        screenshot(page, f"badges-{theme.split()[-1].lower()}", broken.locator(".me-summary"))
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")


def test_reopened_notebook_shows_the_explorer_not_an_error(page, lab, chromium):
    """Saved with widget state (the settings `make lab` installs), then reopened the next day:
    a fresh kernel that never saw these widgets."""
    url, _ = lab
    ex = page.locator(".me-explorer").nth(0)
    ex.locator(".me-tab", has_text="Overview").click()
    assert ex.locator(".me-kernel-note").is_hidden()  # a live kernel answered
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=20_000)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.sessionContext.session", timeout=20_000)
    again = open_notebook(chromium, url, "newcomer.ipynb")
    try:
        again.locator(".me-explorer").first.wait_for(timeout=30_000)
        assert again.locator(".me-explorer").count() == 3
        assert "model not found" not in again.locator(".jp-Notebook").inner_text()
        # What the state carries shows at once: the summary and the overview.
        first = again.locator(".me-explorer").first
        assert "SAFETENSORS" in first.locator(".me-summary").inner_text().upper()
        assert "14,184" in first.locator(".me-facts").inner_text()
        # ... and the first bytes, coloured by their spans: the first page travels with the state.
        row = first.locator(".me-hex-row").first
        row.locator(".me-b.me-kind-length").first.wait_for(timeout=15_000)
        assert row.inner_text().startswith("00000000") and "··" not in row.inner_text()
        # The views that need the kernel say so instead of spinning.
        first.locator(".me-kernel-note").wait_for(timeout=15_000)
        assert "re-run the cell" in first.locator(".me-kernel-note").inner_text()
        screenshot(again, "reopened-notebook", first)
    finally:
        again.close()
    assert not page.errors, page.errors
