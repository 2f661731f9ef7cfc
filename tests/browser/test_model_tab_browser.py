"""The Model tab in a real JupyterLab: the card renders, a value selects its bytes in the
hexdump, the tokenizer inspector tokenizes typed text, and a 150,000-token vocabulary pages
through a virtualised list (few rows in the page, the last ids at the end, a jump box)."""

from __future__ import annotations

import pytest
import widget_test_files as files
from labserver import run_cells, screenshot

pytestmark = pytest.mark.browser

BIG = 150_000


@pytest.fixture(scope="module")
def page(lab, chromium):
    url, home = lab
    from model_explorer.samples import sample_path

    big = files.big_vocab_folder(home / "big", BIG)
    cells = ["import model_explorer as mx", f"mx.explore({sample_path()!r})", f"mx.explore({str(big)!r})"]
    sc2 = files.starcoder2_missing_a_tensor(home / "sc2")
    if sc2 is not None:
        cells.append(f"mx.explore({str(sc2)!r})")
    p = run_cells(chromium, url, home, "model.ipynb", cells,
                  f"document.querySelectorAll('.me-explorer').length >= {len(cells) - 1}")
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


def test_model_tab_cross_check_reaches_the_findings_tab(page):
    # Opening used the built-in tables only (no torch); the Model tab starts transformers' build of
    # the architecture in the background, and what it adds joins the Findings tab and its count.
    if page.locator(".me-explorer").count() < 3:
        pytest.skip("transformers is not installed")
    ex = page.locator(".me-explorer").nth(2)
    tab = ex.locator(".me-tab", has_text="Findings")
    at_open = int(tab.inner_text().split("(")[1].rstrip(")"))
    ex.locator(".me-tab", has_text="Model").click()
    page.wait_for_function("([el, n]) => el.textContent === `Findings (${n + 1})`",
                           arg=[tab.element_handle(), at_open], timeout=90_000)
    assert "transformers' cross-check" in tab.get_attribute("title")
    tab.click()
    group = ex.locator(".me-model-findings")
    group.wait_for()
    assert "missing_tensors" in group.inner_text() and "mlp.c_fc.weight" in group.inner_text()
    assert not page.errors, page.errors


def test_a_150000_token_vocabulary_pages_without_building_its_rows(page):
    ex = page.locator(".me-explorer").nth(1)
    ex.locator(".me-tab", has_text="Model").click()
    vocab = ex.locator(".me-model-vocab")
    vocab.locator("summary").wait_for(timeout=30_000)
    assert ex.locator(".me-vocab-row").count() == 0  # nothing asked before it is opened
    vocab.locator("summary").click()
    ex.locator(".me-vocab-row[data-id='0']").wait_for(timeout=30_000)
    assert ex.locator(".me-vocab-count").inner_text() == "150,000 tokens"
    lst = ex.locator(".me-vocab-list")
    assert lst.evaluate("el => el.scrollHeight") >= BIG * 22
    rows = ex.locator(".me-vocab-row")
    assert 10 <= rows.count() <= 60, rows.count()
    # Scrolled to the end, the list shows the last ids (the special tokens), still few rows.
    lst.evaluate("el => { el.scrollTop = el.scrollHeight; }")
    last = ex.locator(".me-vocab-row[data-id='149999']")
    last.wait_for(timeout=20_000)
    assert "<|im_end|>" in last.inner_text() and "special" in last.inner_text()
    ids = [int(i) for i in rows.evaluate_all("els => els.map(e => e.dataset.id).filter(Boolean)")]
    assert max(ids) == BIG - 1 and min(ids) > BIG - 60 and rows.count() <= 60
    assert page.locator(".me-vocab-row").count() <= 60  # in the whole page, not just the list
    # The jump box: an id in the middle, marked, with its neighbours; a control character shows
    # as an escape; an id past the end is refused with the range.
    jump = ex.locator(".me-vocab-jump")
    jump.fill("123,456")
    jump.press("Enter")
    ex.locator(".me-vocab-row.me-selected[data-id='123456']").wait_for(timeout=20_000)
    assert ex.locator(".me-vocab-row[data-id='123456'] .me-vocab-token").inner_text() == "w123456"
    assert ex.locator(".me-vocab-row[data-id='123455']").count() == 1
    jump.fill("300")
    jump.press("Enter")
    ex.locator(".me-vocab-row.me-selected[data-id='300']").wait_for(timeout=20_000)
    assert ex.locator(".me-vocab-row[data-id='300'] .me-vocab-token").inner_text() == "a\\n\\tb"
    jump.fill("150000")
    jump.press("Enter")
    assert "0 to 149,999" in ex.locator(".me-vocab-error").inner_text()
    # A token found by text opens the vocabulary at its id.
    ex.locator(".me-model-find").fill("im_start")
    found = ex.locator(".me-model-found-item", has_text="<|im_start|>")
    found.click()
    ex.locator(".me-vocab-row.me-selected[data-id='149998']").wait_for(timeout=20_000)
    assert ex.locator(".me-vocab-error").is_hidden()
    screenshot(page, "explorer-model-vocab", ex)
    assert page.locator(".me-vocab-row").count() <= 60
    assert not page.errors, page.errors
