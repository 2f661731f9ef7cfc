"""The Model tab in a real JupyterLab: the card renders, a value selects its bytes in the
hexdump, and the tokenizer inspector tokenizes typed text."""

from __future__ import annotations

import pytest
from labserver import run_cells, screenshot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(lab, chromium):
    url, home = lab
    from model_explorer.samples import sample_path

    cells = ["import model_explorer as mx", f"mx.explore({sample_path()!r})"]
    p = run_cells(chromium, url, home, "model.ipynb", cells, "document.querySelectorAll('.me-explorer').length >= 1")
    yield p
    p.close()


def test_model_tab_card_selects_bytes_and_tokenizes(page):
    import model_explorer as mx

    ex = page.locator(".me-explorer").first
    ex.locator(".me-tab", has_text="Model").click()
    row = ex.locator(".me-model-card tr", has_text="llama.block_count")
    row.wait_for(timeout=30_000)
    assert "30" in row.inner_text()
    row.click()
    kv = mx.open(mx.sample_path()).metadata["llama.block_count"]
    hl = ex.locator(".me-hexdump .me-b.me-hl")
    hl.first.wait_for()
    offsets = [int(x) for x in hl.evaluate_all("els => els.map(e => e.dataset.off)")]
    assert offsets[0] == kv.offset and max(offsets) < kv.offset + kv.length
    ex.locator(".me-model-text").fill("Hello world")
    ex.locator(".me-model-tokens .me-token").first.wait_for()
    assert ex.locator(".me-model-tokens .me-token").count() == 2
    screenshot(page, "explorer-model-tab", ex)
    assert not page.errors, page.errors
