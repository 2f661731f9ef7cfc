"""The explorer in a real JupyterLab: every view renders, selection links the views, paging,
step-through, search, the histogram, file strings shown as text, and the offline report."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
import widget_test_files as files
from labserver import ARTIFACTS, open_notebook, screenshot

import model_explorer as mx

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def test_files(lab):
    _, home = lab
    return {
        "broken": files.broken_safetensors(home / "broken.safetensors"),
        "gguf": files.small_gguf(home / "small.gguf"),
        "xss": files.xss_safetensors(home / "xss.safetensors"),
        "index": files.sharded(home / "shards"),
        "pickle": files.evil_pickle(home / "evil.pkl"),
    }


@pytest.fixture(scope="module")
def notebook(lab, test_files, chromium):
    """Open a generated notebook, run every cell, and hand the page to the tests."""
    url, home = lab
    p = {k: str(v) for k, v in test_files.items()}
    cells = [
        "import model_explorer as mx",
        f"mx.explore({p['broken']!r})",
        f"mx.explore({p['gguf']!r})",
        f"mx.explore({p['xss']!r})",
        f"mx.explore({p['index']!r})",
        f"mx.explore({p['pickle']!r})",
        f"mx.HexDump({p['gguf']!r})",
        f"mx.HeaderTree({p['xss']!r})",
        f"mx.ShardMap({p['index']!r})",
        f"mx.TensorHistogram({p['gguf']!r}, tensor='blk.0.attn_q.weight')",
        f"mx.Findings({p['broken']!r})",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, home / "explore.ipynb")
    page = open_notebook(chromium, url, "explore.ipynb")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function("() => document.querySelectorAll('.me-root').length >= 10", timeout=60_000)
    page.wait_for_timeout(500)
    page.errors = errors
    yield page
    page.close()


def explorer(page, i: int):
    return page.locator(".me-explorer").nth(i)


def test_every_view_renders(notebook):
    page = notebook
    assert page.locator(".me-explorer").count() == 5
    for cls in ("me-summary", "me-hexdump", "me-tree", "me-table", "me-shardmap", "me-findings",
                "me-histogram"):
        assert page.locator(f".{cls}").count() >= 1, cls
    gguf = explorer(page, 1)
    assert "GGUF" in gguf.locator(".me-summary").inner_text().upper()
    assert gguf.locator(".me-hex-row").first.inner_text().startswith("00000000")
    # A healthy file opens on its overview: what the model is, metadata expanded.
    assert gguf.locator(".me-panel-overview").is_visible()
    assert "tiny test model" in gguf.locator(".me-facts").inner_text()
    # Header tree rows and byte colours arrive from the kernel.
    gguf.locator(".me-tab", has_text="Header").click()
    gguf.locator(".me-tree-row").first.wait_for()
    gguf.locator(".me-b.me-kind-magic").first.wait_for()
    # The standalone file map draws one bar per shard, and the missing shard is marked.
    page.locator(".me-root.me-shardmap .me-map-bar").first.wait_for()
    assert page.locator(".me-root.me-shardmap .me-map-bar.me-missing").count() == 1
    assert page.locator(".me-root.me-shardmap .me-mark-orphan").count() == 1
    screenshot(page, "explorer-gguf", gguf)
    assert not page.errors, page.errors


def test_hover_names_the_span(notebook):
    gguf = explorer(notebook, 1)
    cell = gguf.locator(".me-b[data-off='2']")
    cell.hover()
    assert gguf.locator(".me-tooltip").inner_text().startswith("magic")
    # The tooltip sits under the byte, not 550 px to its left over the table.
    tip, box = gguf.locator(".me-tooltip").bounding_box(), cell.bounding_box()
    assert abs(tip["x"] - box["x"]) < 40 and 0 <= tip["y"] - (box["y"] + box["height"]) < 20, (tip, box)
    gguf.locator(".me-b[data-off='40']").hover()
    tip = gguf.locator(".me-tooltip").inner_text()
    assert "KV 0 > general.architecture > key" in tip, tip


def test_clicking_a_finding_highlights_its_bytes(notebook, test_files):
    ckpt = mx.open(test_files["broken"])
    finding = next(f for f in ckpt.findings if f.code == "size_mismatch")
    broken = explorer(notebook, 0)
    # A broken file opens on its findings.
    assert broken.locator(".me-panel-findings").is_visible()
    broken.locator(".me-finding", has_text="size_mismatch").click()
    hl = broken.locator(".me-hexdump .me-b.me-hl")
    hl.first.wait_for()
    offsets = [int(x) for x in hl.evaluate_all("els => els.map(e => e.dataset.off)")]
    assert offsets[0] == finding.offset
    assert max(offsets) <= finding.offset + finding.length
    # ... and selects its tensor in the tree.
    broken.locator(".me-tab", has_text="Header").click()
    sel = broken.locator(".me-tree-row.me-selected")
    sel.wait_for()
    assert sel.inner_text().startswith("attn.weight") or "attn.weight" in sel.inner_text()
    screenshot(notebook, "explorer-finding-selected", broken)


def test_step_through_advances(notebook):
    gguf = explorer(notebook, 1)
    nxt = gguf.locator(".me-step-next")
    nxt.click()
    gguf.locator(".me-step-count", has_text="1 /").wait_for()
    assert "magic" in gguf.locator(".me-step-text").inner_text()
    nxt.click()
    gguf.locator(".me-step-count", has_text="2 /").wait_for()
    assert "version" in gguf.locator(".me-step-text").inner_text()
    offs = gguf.locator(".me-b.me-hl").evaluate_all("els => els.map(e => +e.dataset.off)")
    assert offs == [4, 5, 6, 7]
    gguf.locator(".me-step-prev").click()
    gguf.locator(".me-step-count", has_text="1 /").wait_for()


def test_search_filters_the_tree(notebook):
    gguf = explorer(notebook, 1)
    gguf.locator(".me-tab", has_text="Header").click()
    tree = gguf.locator(".me-tree")
    before = tree.locator(".me-count").inner_text()
    tree.locator(".me-search").fill("ffn_norm")
    notebook.wait_for_function(
        "([el, before]) => el.textContent !== before",
        arg=[tree.locator(".me-count").element_handle(), before], timeout=10_000)
    labels = tree.locator(".me-tree-row .me-label").all_inner_texts()
    assert "ffn_norm.weight" in labels
    assert not any("attn_q" in label for label in labels)
    tree.locator(".me-search").fill("")


def test_tensor_click_draws_histogram(notebook):
    gguf = explorer(notebook, 1)
    gguf.locator(".me-tab", has_text="Tensors").click()
    gguf.locator(".me-table-row", has_text="token_embd.weight").click()
    bars = gguf.locator(".me-histogram .me-bar")
    bars.first.wait_for(timeout=10_000)
    assert bars.count() > 5
    assert "sampled" in gguf.locator(".me-sample-note").inner_text() or "exact" in gguf.locator(".me-sample-note").inner_text()
    assert gguf.locator(".me-stats").inner_text().count("\n") >= 6
    screenshot(notebook, "explorer-histogram", gguf)
    # The README's kind of picture (docs/explorer.png shows the SmolLM2 sample on this tab).
    shutil.copy(ARTIFACTS / "explorer-histogram.png", ARTIFACTS / "explorer.png")
    # A quantized tensor also gets the histogram of its block scales.
    gguf.locator(".me-table-row", has_text="output.weight").click()
    gguf.locator(".me-histogram .me-scales .me-bar").first.wait_for(timeout=10_000)
    # The standalone TensorHistogram drew its tensor too.
    assert notebook.locator(".me-root.me-histogram .me-bar").count() > 0


def test_paging_past_the_first_megabyte(notebook, test_files):
    broken = explorer(notebook, 0)
    hexdump = broken.locator(".me-hexdump")
    hexdump.locator(".me-goto").fill("0x100010")
    hexdump.locator(".me-goto-btn").click()
    row = hexdump.locator(".me-hex-row", has_text="00100010")
    row.wait_for()
    notebook.wait_for_function(
        "el => !el.textContent.includes('··')", arg=row.element_handle(), timeout=10_000)
    # The bytes are the big tensor's data, coloured as tensor data.
    assert row.locator(".me-b.me-kind-tensor_data").count() == 16
    raw = Path(test_files["broken"]).read_bytes()[0x100010:0x100020]
    assert row.locator(".me-b").all_inner_texts() == [f"{b:02x}" for b in raw]


def test_file_strings_are_text(notebook):
    xss = explorer(notebook, 2)
    xss.locator(".me-tab", has_text="Header").click()
    xss.locator(".me-tree-row").first.wait_for()
    xss.locator(".me-tree .me-search").fill("img")
    xss.locator(".me-tree-row .me-label", has_text="onerror").first.wait_for()
    assert files.XSS_NAME.split(".")[0] in " ".join(xss.locator(".me-tree-row .me-label").all_inner_texts())
    xss.locator(".me-tree .me-search").fill("note")
    xss.locator(".me-tree-row .me-value", has_text="<script>").first.wait_for()
    assert notebook.evaluate("() => window.__mx_xss") is None
    assert notebook.locator(".me-root img, .me-root script, .me-root b[onmouseover]").count() == 0
    # The table shows the names as text as well.
    xss.locator(".me-tab", has_text="Tensors").click()
    xss.locator(".me-table-row", has_text="<script>").first.wait_for()
    assert notebook.evaluate("() => window.__mx_xss") is None
    screenshot(notebook, "explorer-xss", xss)


def test_pickle_explorer_shows_the_danger_as_text(notebook):
    pkl = explorer(notebook, 4)
    assert "1 error" in pkl.locator(".me-summary").inner_text()
    pkl.locator(".me-finding.me-sev-error").first.click()
    pkl.locator(".me-hexdump .me-b.me-hl").first.wait_for()
    pkl.locator(".me-tab", has_text="Header").click()
    tree = pkl.locator(".me-tree")
    tree.locator(".me-tree-row", has_text="pickle imports").locator(".me-caret").click()
    tree.locator(".me-tree-row.me-node-import").first.wait_for()
    assert "system" in tree.locator(".me-tree-row.me-node-import").first.inner_text()
    tree.locator(".me-tree-row", has_text="pickle structure").locator(".me-caret").click()
    tree.locator(".me-tree-row .me-value", has_text="<script>").first.wait_for()
    assert notebook.evaluate("() => window.__mx_xss") is None
    screenshot(notebook, "explorer-pickle", pkl)


def test_dark_theme_and_narrow_width(notebook):
    gguf = explorer(notebook, 1)
    light = gguf.evaluate("el => getComputedStyle(el).backgroundColor")
    notebook.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    notebook.wait_for_function("([el, before]) => getComputedStyle(el).backgroundColor !== before",
                               arg=[gguf.element_handle(), light], timeout=20_000)
    screenshot(notebook, "explorer-dark", gguf)
    notebook.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    notebook.set_viewport_size({"width": 620, "height": 1000})
    notebook.wait_for_timeout(300)
    left = gguf.locator(".me-left").bounding_box()
    right = gguf.locator(".me-right").bounding_box()
    assert right["y"] >= left["y"] + left["height"] - 1  # stacked, not squeezed side by side
    assert gguf.locator(".me-hexdump").bounding_box()["width"] <= 620
    screenshot(notebook, "explorer-narrow", gguf)
    notebook.set_viewport_size({"width": 1400, "height": 1000})


def test_shard_findings_and_map_link(notebook):
    shards = explorer(notebook, 3)
    shards.locator(".me-tab", has_text="Files").click()
    seg = shards.locator(".me-map-seg", has_text="")
    seg.first.wait_for()
    shards.locator(".me-map-seg[data-tensor='model.extra']").click()
    shards.locator(".me-tab", has_text="Tensors").click()
    shards.locator(".me-table-row.me-selected", has_text="model.extra").wait_for()
    screenshot(notebook, "explorer-shards", shards)


def test_saved_report_works_offline(chromium, test_files, tmp_path):
    for key in ("broken", "xss"):
        report = mx.Explorer(test_files[key]).save_html(tmp_path / f"{key}.html")
        page = chromium.new_page()
        requests: list[str] = []

        def route(r, _request, seen=requests):
            seen.append(r.request.url)
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                r.abort()

        page.route("**/*", route)
        errors: list[str] = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.goto(Path(report).as_uri())
        page.locator("#me-report[data-ready='1']").wait_for(timeout=10_000)
        assert page.locator(".me-explorer .me-summary").count() == 1
        assert page.locator(".me-hex-row").first.inner_text().startswith("00000000")
        page.locator(".me-explorer .me-tab", has_text="Header").click()  # the tree loads when shown
        page.locator(".me-tree-row").first.wait_for()
        assert page.locator(".me-finding").count() == len(mx.open(test_files[key]).findings)
        assert [u for u in requests if not u.startswith("file:")] == []
        assert page.evaluate("() => window.__mx_xss") is None
        assert not errors, errors
        screenshot(page, f"report-{key}")
        page.close()


def test_missing_shard_tensors_are_marked_rows(notebook):
    shards = explorer(notebook, 3)
    assert "3 of 5 indexed tensors readable" in shards.locator(".me-summary").inner_text()
    shards.locator(".me-tab", has_text="Tensors").click()
    shards.locator(".me-table .me-search").fill("missing: shard")
    notebook.wait_for_function("el => el.querySelectorAll('.me-table-row').length === 1",
                               arg=shards.locator(".me-table").element_handle(), timeout=10_000)
    row = shards.locator(".me-table-row.me-mark-missing")
    assert "model.layers.2.w" in row.inner_text() and "model-00003-of-00003" in row.inner_text()
    row.click()
    shards.locator(".me-histogram .me-hist-note", has_text="missing: shard").wait_for()
    assert shards.locator(".me-histogram .me-error").count() == 0
    shards.locator(".me-table .me-search").fill("")
    shards.locator(".me-tab", has_text="Header").click()
    shards.locator(".me-tree-row.me-node-missing.me-selected", has_text="model-00003").wait_for()
    screenshot(notebook, "explorer-missing-rows", shards)
