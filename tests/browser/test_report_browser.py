"""The saved report in Chromium with every non-local request aborted (no JupyterLab needed):
clicking a tensor shows its statistics, histogram and first bytes, never an error; a shard
index's missing tensors are marked rows, and what the report leaves out says so calmly."""

from __future__ import annotations

from pathlib import Path

import pytest
import widget_test_files as files
from labserver import screenshot

from model_explorer.widgets import Explorer

pytestmark = pytest.mark.browser


def _open(chromium, path: Path):
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    requests: list[str] = []

    def route(r, _request):
        requests.append(r.request.url)
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.locator("#me-report[data-ready='1']").wait_for(timeout=10_000)
    page.requests, page.errors = requests, errors
    return page


def test_clicking_a_tensor_shows_stats_histogram_and_bytes(chromium, tmp_path):
    source = files.small_gguf(tmp_path / "small.gguf")
    e = Explorer(source)
    page = _open(chromium, Path(e.save_html(tmp_path / "gguf.html")))
    page.locator(".me-tab", has_text="Tensors").click()
    page.locator(".me-table-row", has_text="token_embd.weight").click()
    page.locator(".me-histogram .me-values .me-bar").first.wait_for(timeout=10_000)
    hist = page.locator(".me-histogram")
    assert hist.locator(".me-error").count() == 0
    live = e.answer("stats", {"name": "token_embd.weight"})[0]
    text = hist.locator(".me-stats").inner_text()
    assert "mean" in text and "std" in text
    assert "sampled" in hist.locator(".me-sample-note").inner_text() or "exact" in hist.locator(".me-sample-note").inner_text()
    assert hist.locator(".me-exact").is_hidden()  # no kernel to compute more
    # The hexdump jumps to the tensor's first byte and shows the bytes the report holds.
    t = e.checkpoint.tensors["token_embd.weight"]
    first = page.locator(f".me-hexdump .me-b[data-off='{t.offset}']")
    first.wait_for()
    head = Path(source).read_bytes()[t.offset:t.offset + 16]
    cells = [page.locator(f".me-hexdump .me-b[data-off='{t.offset + k}']").inner_text() for k in range(16)]
    assert cells == [f"{b:02x}" for b in head]
    assert "me-kind-tensor_data" in first.get_attribute("class")
    # A byte the report does not hold is blank, with a calm note (not an error).
    heads = [(x.offset, x.offset + 16) for x in e.checkpoint.tensors.values()]
    size = Path(source).stat().st_size
    absent = next(o for o in range(16384, size, 16) if not any(a <= o < b for a, b in heads))
    page.locator(".me-goto").fill(str(absent))
    page.locator(".me-goto-btn").click()
    note = page.locator(".me-hex-note")
    note.wait_for()
    assert "not in this report" in note.inner_text().lower()
    assert page.locator(f".me-hexdump .me-b[data-off='{absent}']").inner_text().strip() == ""
    assert live["min"] is not None
    # A quantized tensor's block scales come along too.
    page.locator(".me-table-row", has_text="output.weight").click()
    page.locator(".me-histogram .me-scales .me-bar").first.wait_for(timeout=10_000)
    screenshot(page, "report-tensor-stats")
    assert [u for u in page.requests if not u.startswith("file:")] == []
    assert not page.errors, page.errors
    page.close()


def test_missing_shard_tensors_are_rows_in_the_report(chromium, tmp_path):
    index = files.sharded(tmp_path / "shards")
    page = _open(chromium, Path(Explorer(index).save_html(tmp_path / "shards.html")))
    assert "3 of 5 indexed tensors readable" in page.locator(".me-summary").inner_text()
    page.locator(".me-tab", has_text="Tensors").click()
    page.locator(".me-table .me-search").fill("missing")
    page.locator(".me-table .me-count", has_text="2 tensors").wait_for()
    assert page.locator(".me-table-row").count() == 2
    row = page.locator(".me-table-row", has_text="model.layers.2.w")
    assert "missing: shard model-00003-of-00003.safetensors" in row.inner_text()
    row.click()
    # Its hexdump shows its entry in the index, which the report holds.
    entry = Path(index).read_bytes().index(b'"model.layers.2.w"')
    page.locator(f".me-hexdump .me-b.me-hl[data-off='{entry}']").wait_for()
    assert page.locator(f".me-hexdump .me-b[data-off='{entry}']").inner_text() == "22"
    page.locator(".me-histogram .me-hist-note").wait_for()
    assert "missing: shard" in page.locator(".me-histogram .me-hist-note").inner_text()
    assert page.locator(".me-histogram .me-error").count() == 0
    # The tree holds it under its layer, marked; a search for the note finds it.
    page.locator(".me-tab", has_text="Header").click()
    page.locator(".me-tree .me-search").fill("missing: shard")
    page.locator(".me-tree-row.me-node-missing").first.wait_for()
    assert "model-00003" in page.locator(".me-tree-row.me-node-missing").first.inner_text()
    # The file map names the missing shard's tensors.
    page.locator(".me-tab", has_text="Files").click()
    page.locator(".me-map-missing", has_text="model.layers.2.w").wait_for()
    screenshot(page, "report-missing-rows")
    # The findings a repair resolves show their Fix… button disabled, with a note: no kernel.
    page.locator(".me-tab", has_text="Findings").click()
    fix = page.locator(".me-finding", has_text="missing_tensor").locator(".me-fix-btn")
    fix.wait_for()
    assert fix.is_disabled() and page.locator(".me-fix-btn").count() == 2
    assert page.locator(".me-finding", has_text="missing_shard").locator(".me-fix-btn").count() == 0
    assert "cannot write fixes" in page.locator(".me-fix-note").inner_text()
    assert not page.errors, page.errors
    page.close()


def test_model_tab_of_a_saved_report(chromium, tmp_path):
    """The card, hyperparameters (each selecting its bytes), memory table, tokenizer summary and
    chat template, from the report alone; the tokenizer's typing is off and says why. The
    Layers tab draws the profile pivoted from the report's own statistics."""
    import model_explorer as mx

    source = mx.sample_path()
    page = _open(chromium, Path(Explorer(source).save_html(tmp_path / "sample.html")))
    page.locator(".me-tab", has_text="Model").click()
    model = page.locator(".me-model")
    row = model.locator(".me-model-card tr", has_text="llama.block_count")
    row.wait_for(timeout=10_000)
    assert "30" in row.inner_text()
    assert "llama" in model.locator(".me-model-head").inner_text()
    assert model.locator(".me-model-memory tr").count() >= 2
    assert "tokenizer:" in model.locator(".me-model-tok").inner_text()
    model.locator("summary", has_text="chat template").click()
    assert "<|im_start|>" in model.locator(".me-model-chat").inner_text()
    assert model.locator(".me-model-text").is_disabled() and model.locator(".me-model-find").is_disabled()
    assert "live kernel" in model.locator(".me-model-offline").inner_text()
    assert model.locator(".me-error").count() == 0
    # A value still selects the bytes it was read from (the report holds the header's start).
    row.click()
    kv = mx.open(source).metadata["llama.block_count"]
    page.locator(f".me-hexdump .me-b.me-hl[data-off='{kv.offset}']").wait_for()
    # The Layers tab draws the profile the report carries (sampled: no exact option offline).
    page.locator(".me-tab", has_text="Layers").click()
    page.locator(".me-layers-grid").wait_for(timeout=10_000)
    assert page.locator(".me-layers-layer").count() == 30
    assert page.locator(".me-layers-exact-label").is_hidden()
    page.locator(".me-layers-stat").select_option("std")
    page.wait_for_function("() => /sampled std/.test(document.querySelector('.me-layers-status').textContent)")
    screenshot(page, "report-model-tab")
    assert [u for u in page.requests if not u.startswith("file:")] == []
    assert not page.errors, page.errors
    page.close()


def test_a_report_counts_the_layer_findings_once_its_layers_tab_is_drawn(chromium, tmp_path):
    source = files.damaged_llama(tmp_path / "damaged.safetensors")
    e = Explorer(source)
    page = _open(chromium, Path(e.save_html(tmp_path / "damaged.html")))
    n = len(e.findings)
    tab = page.locator(".me-tab", has_text="Findings")
    assert tab.inner_text() == f"Findings ({n})" and e.layer_findings == []  # none computed at save
    page.locator(".me-tab", has_text="Layers").click()
    page.locator(".me-layers-grid").wait_for(timeout=10_000)
    assert tab.inner_text() == f"Findings ({n + 2})"
    tab.click()
    group = page.locator(".me-layer-findings")
    assert group.locator("summary").inner_text() == "From the Layers tab: sampled norm statistics (2)"
    assert {t.split("\n")[0] for t in group.locator(".me-finding .me-code").all_inner_texts()} == {"layer_outlier"}
    assert not page.errors, page.errors
    page.close()


@pytest.mark.slow
def test_20000_tensor_report_opens_and_answers(chromium, tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_report import write_folder

    folder = write_folder(tmp_path / "model")
    page = _open(chromium, Path(Explorer(str(folder)).save_html(tmp_path / "big.html")))
    assert "19,600 of 20,000 indexed tensors readable" in page.locator(".me-summary").inner_text()
    page.locator(".me-tab", has_text="Tensors").click()
    page.locator(".me-table .me-search").fill("layers.1999.mlp.down_proj")
    page.locator(".me-table-row", has_text="model.layers.1999.mlp.down_proj.weight").click()
    page.locator(".me-histogram .me-values .me-bar").first.wait_for(timeout=10_000)
    page.locator(".me-table .me-search").fill("missing: shard model-00023")
    page.locator(".me-table .me-count", has_text="400").wait_for()
    assert not page.errors, page.errors
    page.close()
