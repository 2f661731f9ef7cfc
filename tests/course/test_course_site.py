"""The static course site (`make course`) works offline: pages opened from file:// in Chromium,
with every request that is not a local file aborted, show the widgets from their saved state,
and hovering, expanding and stepping work with no kernel behind them.

Builds the site for two notebooks (the tour's Explorer and the safetensors lesson's standalone
views) into a temp folder with the real `course/build.sh`, recording three of the run cell's
buttons (a short generation) so the page replays those and says the others need a kernel. The page checks and the walk run on
every page of that build, or of a whole site already built (`COURSE_SITE=site` after `make
course`), so the whole course is checked without building it again here.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
PAGES = ("00_tour", "01_safetensors")
LOCAL = ("file://", "data:", "blob:")
RECORDED = ("dequantize", "generate", "trace")  # the run cell's buttons this build records


sys.path.insert(0, str(ROOT / "tests" / "browser"))
from labserver import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from labserver import require as _need  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if os.environ.get("COURSE_SITE"):  # a whole site already built: check it, build nothing
        return Path(os.environ["COURSE_SITE"]).resolve()
    _need(os.path.exists(CHROMIUM), "Chromium is not installed (apt-get install -y chromium)")
    _need(shutil.which("npm") is not None, "npm is not installed")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(["bash", "course/build.sh", "--only", *PAGES, "--out", str(out),
                           "--record-runs", ",".join(RECORDED), "--run-tokens", "4"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"course/build.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


def pages_of(site: Path) -> list[str]:
    return sorted(p.stem for p in site.glob("*.html") if p.stem != "index")


@pytest.fixture(scope="module")
def browser():
    _need(os.path.exists(CHROMIUM), "Chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class OfflinePage:
    """A page on which everything that is not a local file is aborted, and remembered."""

    def __init__(self, browser, site: Path, name: str, width: int = 1300, replay_speed: float | None = None,
                 color_scheme: str = "light") -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 900}, color_scheme=color_scheme)
        if replay_speed:  # recorded runs play back this many times faster than they ran
            self.page.add_init_script(f"window.meReplaySpeed = {float(replay_speed)}")
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("requestfailed", lambda r: r.url.startswith(LOCAL)
                     and self.errors.append(f"missing: {r.url}"))
        self.page.goto((site / f"{name}.html").as_uri())

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(LOCAL):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()


@pytest.fixture
def lesson(browser, request):
    pages = []

    def open_page(name: str, width: int = 1300, root: Path | None = None, **kw) -> OfflinePage:
        p = OfflinePage(browser, root or request.getfixturevalue("site"), name, width, **kw)
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


# -- every page of the site ---------------------------------------------------------------------

WIDGET_VIEWS = 'script[type="application/vnd.jupyter.widget-view+json"]'


def test_every_page_draws_its_widgets_and_images_offline(lesson, site):
    """Each page, opened from file:// with the network cut: every saved widget draws, every image
    loads, no script or console error, no request leaves the machine (checked by `lesson`)."""
    for name in pages_of(site):
        page = lesson(name, root=site).page
        page.wait_for_load_state("load")
        views = page.locator(WIDGET_VIEWS).count()
        if views:  # the manager replaces each view's script with the drawn widget
            page.wait_for_function("n => [...document.querySelectorAll('.widget-subarea > .lm-Widget')]"
                                   ".filter(w => w.childElementCount > 0).length >= n", arg=views, timeout=30_000)
        images = page.evaluate("[...document.images].map(i => [i.complete && i.naturalWidth > 0, i.src.slice(0, 40)])")
        assert all(ok for ok, _ in images), f"{name}: an image did not load: {images}"


def test_every_figure_is_an_image_and_no_output_is_blank(site):
    for name in pages_of(site):
        html = (site / f"{name}.html").read_text(encoding="utf-8")
        assert "&lt;Figure size" not in html, f"{name} prints a figure as text"
        assert "<pre></pre>" not in html, f"{name} has a blank output"


def test_pages_name_nothing_of_the_machine_that_built_them(site):
    sys.path.insert(0, str(ROOT / "course"))
    from scrub import leaks

    for page in sorted(site.glob("*.html")):
        assert leaks(page.read_text(encoding="utf-8")) == [], page.name


def test_navigation_top_and_bottom_and_solutions_fold_with_their_output(site):
    for name in pages_of(site):
        html = (site / f"{name}.html").read_text(encoding="utf-8")
        assert html.count('class="me-course-nav') == 2, name
        assert html.count('href="index.html"') >= 2, name
        assert 'prefers-color-scheme: dark' in html, name
        folds = [f.split("</details>", 1)[0] for f in html.split('<details class="me-solution">')[1:]]
        assert folds, f"{name}: no folded solution"
        for fold in folds:  # the whole cell: its code and what it printed unfold together
            assert "jp-CodeCell" in fold and "jp-InputArea" in fold, name
        if name == "08_debugging_a_conversion":
            outside = "".join(f.split("</details>", 1)[-1] for f in html.split('<details class="me-solution">'))
            assert "merge fault: layer 12" in "".join(folds) and "merge fault: layer 12" not in outside


BACKGROUND = "getComputedStyle(document.body).backgroundColor"
KEYWORD = "(() => { const k = document.querySelector('.highlight .k'); return k && getComputedStyle(k).color; })()"
PLAIN_IMAGES = "[...document.querySelectorAll('.jp-OutputArea-output img')].filter((i) => !i.closest('picture')).length"
FIGURES = """[...document.querySelectorAll('picture.me-figure')].map((p) => [
  p.querySelector('source[media*=dark]').srcset, p.querySelector('img').currentSrc])"""


def test_pages_follow_the_readers_dark_preference(lesson, site):
    """With a dark preference the page, the code's highlighting and every figure turn dark (a
    figure shows its dark form); with a light one they stay as they were."""
    for name in pages_of(site):
        light, dark = lesson(name, root=site).page, lesson(name, root=site, color_scheme="dark").page
        for page in (light, dark):
            page.wait_for_load_state("load")
        assert _luminance(light.evaluate(BACKGROUND)) > 0.8 and _luminance(dark.evaluate(BACKGROUND)) < 0.2, name
        assert light.evaluate(KEYWORD) != dark.evaluate(KEYWORD), f"{name}: code highlighting ignores dark mode"
        for dark_src, shown in dark.evaluate(FIGURES):
            assert shown == dark_src, f"{name}: a figure shows its light form on a dark page"
        assert dark.evaluate(PLAIN_IMAGES) == 0, f"{name}: an output image has no dark form"
        for dark_src, shown in light.evaluate(FIGURES):
            assert shown != dark_src, name


def _luminance(css: str) -> float:
    r, g, b = (int(x) for x in css[css.index("(") + 1:].rstrip(")").split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_only_assets_the_pages_use_are_shipped(site):
    shipped = {p.relative_to(site / "_static").as_posix() for p in (site / "_static").rglob("*") if p.is_file()}
    assert shipped == {"require.js", "embed-amd.js", "anywidget/index.js", "anywidget_offline.js",
                       "offline_widgets.js", "me_static_model.js"}


def test_wide_outputs_scroll_inside_a_narrow_page(lesson, site):
    """At 500 px the page itself does not scroll sideways: the hexdump and the tables scroll
    inside their cell; at 1,400 px the Explorer's table shows its last column."""
    narrow = lesson("00_tour", width=500).page
    narrow.locator(".me-explorer .me-hexdump .me-b").first.wait_for(timeout=20_000)
    assert narrow.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    # the hexdump's ASCII column is there, reached by scrolling the dump itself
    assert narrow.evaluate(HEX_ASCII_REACHED), "the hexdump's ASCII column cannot be reached at 500 px"
    wide = lesson("00_tour", width=1400).page
    explorer = wide.locator(".me-explorer").first
    explorer.wait_for(timeout=20_000)
    explorer.locator(".me-tab", has_text="Tensors").click()
    offset = explorer.locator(".me-table-head .me-col-offset").first
    offset.wait_for(timeout=10_000)
    box, edge = offset.bounding_box(), explorer.bounding_box()
    assert box["x"] + box["width"] <= edge["x"] + edge["width"] + 1, "the offset column is cut"
    standalone = wide.locator(".me-hexdump .me-hex-grid").first  # the tour's own HexDump cell
    standalone.wait_for(timeout=10_000)
    assert standalone.evaluate("g => g.scrollWidth <= g.clientWidth + 1"), "the hexdump is cut at 1,400 px"


HEX_ASCII_REACHED = """(() => {
  const grid = document.querySelector('.me-hexdump .me-hex-grid');
  const last = grid.querySelector('.me-hex-row .me-a:last-child');
  if (!last || grid.scrollWidth <= grid.clientWidth) return false;
  grid.scrollLeft = grid.scrollWidth;
  const g = grid.getBoundingClientRect(), a = last.getBoundingClientRect();
  return a.right <= g.right + 1 && a.left >= g.left;
})()"""


RUN_BUTTONS = {"Dequantize": "dequantize", "Generate": "generate", "Compare quantizations": "compare",
               "Compare backends": "compare_backends", "Compare with…": "compare_runs", "Trace": "trace"}
# Where each button's result is drawn in the run cell (js/src/run_demo.js).
RESULT_DRAWN = {"dequantize": "details table", "generate": ".me-rd-output", "compare": ".me-rd-compare",
                "compare_backends": "table", "compare_runs": ".me-rd-runs > *", "trace": ".me-rd-runs > *"}
ANSWERED = """([root, label]) => {
  const mark = root.querySelector('.me-rd-recorded');
  const replayed = mark ? [...mark.children].some((line) => line.textContent.startsWith(label)) : false;
  const error = root.querySelector('.me-rd-error').textContent;
  return replayed || (error.startsWith(label) && error.includes('make lab'));
}"""


def test_every_run_cell_button_replays_its_recording_or_says_it_needs_a_kernel(lesson):
    """No button without a result or a reason: a recorded one plays back its run (the streamed
    tokens, the tables, the trace heatmap) marked with where and when it was recorded; any other
    says it needs a live kernel and `make lab`."""
    page = lesson("00_tour", replay_speed=50).page
    demo = page.locator(".me-rundemo").first
    demo.wait_for(timeout=20_000)
    runs = page.evaluate("JSON.parse(document.getElementById('me-offline-data').textContent).runs")
    (record,) = runs.values()  # the tour's one run cell
    assert socket.gethostname() not in record["machine"] and getpass.getuser() not in record["machine"]
    recorded = set(record["actions"])
    if not os.environ.get("COURSE_SITE"):
        assert recorded == set(RECORDED)
    intro = demo.locator(".me-rd-intro")  # before any click, the cell says what its buttons do here
    intro.wait_for(timeout=10_000)
    assert "make lab" in intro.inner_text() and (not recorded or "replay the runs recorded on" in intro.inner_text())
    for label, action in RUN_BUTTONS.items():
        demo.get_by_role("button", name=label, exact=True).click()
        page.wait_for_function(ANSWERED, arg=[demo.element_handle(), label], timeout=20_000)
        if action in recorded:
            mark = next(line for line in demo.locator(".me-rd-recorded > div").all_inner_texts()
                        if line.startswith(label))
            assert f"recorded on {record['machine']}, {record['date']}" in mark and "make lab" in mark
            assert demo.locator(RESULT_DRAWN[action]).count() > 0, f"{label}: nothing drawn"
        else:
            error = demo.locator(".me-rd-error").inner_text()
            assert "live kernel" in error and "make lab" in error, error
    if "generate" in recorded:  # the replayed stream ends in the recorded text and figures
        events = record["actions"]["generate"]["events"]
        text = next(e[3] for e in reversed(events) if e[1] == "set" and e[2] == "output")
        assert demo.locator(".me-rd-output").inner_text() == text.strip() or text in demo.locator(".me-rd-output").inner_text()
        assert "tokens/s" in demo.inner_text()
    demo.screenshot(path=str(_artifact("course-site-run-cell-replayed.png")))


def test_compute_exact_never_shows_less_offline(lesson):
    page = lesson("00_tour").page
    hist = page.locator(".me-hist, .me-histogram").first
    hist.wait_for(timeout=20_000)
    button = hist.locator(".me-exact")
    if button.is_visible():
        button.click()
        note = hist.locator(".me-toolbar")
        page.wait_for_function("el => /exact: every value read|live kernel/.test(el.textContent)",
                               arg=note.element_handle(), timeout=10_000)
