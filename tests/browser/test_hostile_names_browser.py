"""A safetensors file whose tensor names hold a lone surrogate, a bidi override and a terminal
escape, in a real JupyterLab (issue 45): the Explorer draws (no invalid JSON reaches the page),
the names read ⟨U+XXXX⟩, and selecting such a tensor answers with its values (the name the
browser sends back is the file's own again)."""

from __future__ import annotations

import struct

import pytest
from labserver import run_cells, screenshot

pytestmark = pytest.mark.browser


def surrogate_file(path) -> str:
    header = (b'{"\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
              b'"ok\\u202eevil\\u001b[2J": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}')
    data = struct.pack("<2f", 1.5, -2.0) + struct.pack("<2f", 3.0, 4.0)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return str(path)


@pytest.fixture(scope="module")
def page(lab, chromium):
    url, home = lab
    path = surrogate_file(home / "surrogate.safetensors")
    page = run_cells(chromium, url, home, "hostile_names.ipynb",
                     ["import model_explorer as mx", f"mx.explore({path!r})"],
                     "document.querySelectorAll('.me-explorer').length >= 1")
    page.wait_for_timeout(300)
    yield page
    page.close()


def test_the_explorer_draws_with_the_names_escaped(page):
    ex = page.locator(".me-explorer").first
    ex.locator(".me-tab", has_text="Tensors").click()
    rows = ex.locator(".me-table-row")
    rows.first.wait_for()
    text = ex.locator(".me-table").inner_text()
    titles = ex.locator(".me-table-row .me-col-name").evaluate_all("els => els.map(e => e.title)")
    assert set(titles) == {"⟨U+D800⟩", "ok⟨U+202E⟩evil⟨U+001B⟩[2J"}, titles  # whole on hover
    assert "⟨U+D800⟩" in text and "\u202e" not in text and "\x1b" not in text
    assert not page.errors, page.errors
    screenshot(page, "hostile-names", ex)


def test_selecting_an_escaped_name_reads_its_values(page):
    ex = page.locator(".me-explorer").first
    ex.locator(".me-tab", has_text="Tensors").click()
    ex.locator(".me-table-row", has_text="⟨U+D800⟩").first.click()
    # The tensor's statistics come back from the kernel for the file's own name.
    page.wait_for_function("() => /1\\.5|-2/.test(document.querySelector('.me-explorer').innerText)",
                           timeout=30_000)
    assert not page.errors, page.errors
