"""The static course site (`make course`) works offline: pages opened from file:// in Chromium,
with every request that is not a local file aborted, show the widgets from their saved state,
and hovering, expanding and stepping work with no kernel behind them.

Builds the site for two notebooks (the tour's Explorer and the safetensors lesson's standalone
views) into a temp folder with the real `course/build.sh`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
PAGES = ("00_tour", "01_safetensors")
LOCAL = ("file://", "data:", "blob:")


sys.path.insert(0, str(ROOT / "tests" / "browser"))
from labserver import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from labserver import require as _need  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    _need(os.path.exists(CHROMIUM), "Chromium is not installed (apt-get install -y chromium)")
    _need(shutil.which("npm") is not None, "npm is not installed")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(["bash", "course/build.sh", "--only", *PAGES, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"course/build.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def browser(site):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class OfflinePage:
    """A page on which everything that is not a local file is aborted, and remembered."""

    def __init__(self, browser, site: Path, name: str) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto((site / f"{name}.html").as_uri())

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(LOCAL):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()


@pytest.fixture
def lesson(browser, site):
    pages = []

    def open_page(name: str) -> OfflinePage:
        p = OfflinePage(browser, site, name)
        pages.append(p)
        return p

    yield open_page
    for p in pages:
        assert p.blocked == [], f"the page asked the network for {p.blocked}"
        assert p.errors == [], f"script errors: {p.errors}"
        p.page.close()


def test_site_has_an_index_and_every_asset_locally(site):
    index = (site / "index.html").read_text()
    for name in PAGES:
        assert f'href="{name}.html"' in index
        html = (site / f"{name}.html").read_text()
        assert "cdn.jsdelivr" not in html and "unpkg.com" not in html and "cdnjs" not in html
        assert '"application/vnd.jupyter.widget-state+json"' in html or "widget-state+json" in html
    for asset in ("require.js", "embed-amd.js", "anywidget/index.js", "anywidget_offline.js",
                  "offline_widgets.js", "me_static_model.js"):
        assert (site / "_static" / asset).is_file(), asset


def test_hexdump_hover_and_step_through_without_a_kernel(lesson):
    page = lesson("01_safetensors").page
    hexdump = page.locator(".me-hexdump").first
    first_byte = hexdump.locator('.me-b[data-off="0"]')
    first_byte.wait_for(timeout=20_000)
    assert first_byte.inner_text() == "a0"  # the header length, 160, little-endian
    first_byte.hover()
    status = hexdump.locator(".me-hex-status")
    page.wait_for_function("el => el.textContent.includes('header length')", arg=status.element_handle())
    assert "8 bytes at 0" in status.inner_text()

    hexdump.locator(".me-step-next").click()
    hexdump.locator(".me-step-next").click()
    count = hexdump.locator(".me-step-count")
    page.wait_for_function("el => el.textContent.startsWith('2 /')", arg=count.element_handle())
    assert "JSON header" in hexdump.locator(".me-step-text").inner_text()
    hexdump.locator(".me-step-prev").click()
    page.wait_for_function("el => el.textContent.startsWith('1 /')", arg=count.element_handle())
    assert "header length" in hexdump.locator(".me-step-text").inner_text()
    hexdump.screenshot(path=str(_artifact("course-site-hexdump.png")))


def test_header_tree_expands_without_a_kernel(lesson):
    page = lesson("01_safetensors").page
    tree = page.locator(".me-tree").first
    rows = tree.locator(".me-tree-row")
    rows.first.wait_for(timeout=20_000)
    before = rows.count()
    tensors = rows.filter(has_text="tensors")
    tensors.locator(".me-caret").click()
    page.wait_for_function("([el, n]) => el.querySelectorAll('.me-tree-row').length > n",
                           arg=[tree.element_handle(), before])
    labels = [r.inner_text() for r in rows.all()]
    assert any("weight" in text for text in labels) and any("bias" in text for text in labels)


def test_tour_explorer_renders_from_saved_state(lesson):
    page = lesson("00_tour").page
    explorer = page.locator(".me-explorer").first
    explorer.wait_for(timeout=20_000)
    summary = explorer.locator(".me-summary").inner_text()
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in summary and "272 tensors" in summary
    magic = explorer.locator('.me-hexdump .me-b[data-off="0"]')
    magic.wait_for(timeout=20_000)
    magic.hover()
    status = explorer.locator(".me-hex-status")
    page.wait_for_function("el => el.textContent.includes('magic')", arg=status.element_handle())
    explorer.locator(".me-tab", has_text="Header").click()  # a healthy file opens on the Overview
    explorer.locator(".me-tree .me-tree-row").first.wait_for()
    explorer.scroll_into_view_if_needed()
    explorer.screenshot(path=str(_artifact("course-site-explorer.png")))


def _artifact(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name
