"""Issue 39, in the browser: every finding card shows its fix (and Fix… where a repair exists);
side files are files (their bytes in the hexdump, listed in the Files tab, auto_map in the Model
tab); a cut file says so everywhere (top bar, Layers, the partly present tensor). One server and
one notebook for the module."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import widget_test_files as files
from labserver import run_cells, screenshot

import model_explorer as mx

pytestmark = pytest.mark.browser


def side_folder(folder: Path) -> Path:
    """Weights with config.json naming custom code (auto_map) and a generation_config.json that
    suppresses the end token: findings in three files beside the weights."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    files.write_safetensors(folder / "model.safetensors",
                            {"model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(np.float32)})
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["XForCausalLM"], "model_type": "x", "eos_token_id": 2, "vocab_size": 16,
        "auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}, indent=2))
    (folder / "modeling_x.py").write_text("import os\n\nclass XForCausalLM:\n    pass\n")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "bad_words_ids": [[2]]}, indent=2))
    return folder


@pytest.fixture(scope="module")
def made(lab):
    _, home = lab
    return {"cut": files.cut_gguf(home / "cut.gguf"), "side": side_folder(home / "side"),
            "broken": files.broken_safetensors(home / "broken.safetensors")}


@pytest.fixture(scope="module")
def page(lab, made, chromium):
    url, home = lab
    cells = [
        "import model_explorer as mx",
        f"mx.explore({str(made['cut'])!r}, selection={{'tensor': 'output.weight'}})",
        f"mx.explore({str(made['side'])!r})",
        f"mx.explore({str(made['broken'])!r})",
    ]
    page = run_cells(chromium, url, home, "trust.ipynb", cells, "document.querySelectorAll('.me-explorer').length >= 3")
    yield page
    page.close()


def test_every_finding_card_shows_its_fix_and_a_fix_button_where_a_repair_exists(page):
    broken = page.locator(".me-explorer").nth(2)
    broken.locator(".me-tab", has_text="Findings").click()
    cards = broken.locator(".me-findings > .me-finding-group .me-finding")
    cards.first.wait_for()
    for card in cards.all():
        fix = card.locator(".me-finding-fix").inner_text()
        assert fix.startswith("Fix: ") and len(fix) > 20, fix
    # The repair plan answers when the tab is shown: each fixable card gets its button.
    broken.locator(".me-finding .me-fix-btn").first.wait_for(timeout=60_000)
    assert broken.locator(".me-finding .me-fix-btn").count() == cards.count()
    screenshot(page, "finding-fix-text", broken.locator(".me-findings"))


def test_side_files_are_files(page, made):
    side = page.locator(".me-explorer").nth(1)
    side.locator(".me-tab", has_text="Findings").click()
    card = side.locator(".me-finding", has_text="generation_stop_suppressed")
    # The grey label names the file the finding is in, never the folder.
    assert "generation_config.json" in card.locator(".me-where").inner_text()
    assert all(w.strip().split(" in ")[-1] != "side" for w in side.locator(".me-where").all_inner_texts())
    card.click()
    # Its click shows that file's bytes in the hexdump, at the finding.
    gen = str(made["side"] / "generation_config.json")
    page.wait_for_function("([el, f]) => el.value === f", arg=[side.locator(".me-file-select").element_handle(), gen])
    hl = side.locator(".me-hexdump .me-b.me-hl")
    hl.first.wait_for()
    ckpt = mx.open(made["side"])
    f = next(f for f in ckpt.findings if f.code == "generation_stop_suppressed")
    assert int(hl.first.get_attribute("data-off")) == f.offset
    # The Files tab lists every file a finding points at, and the code auto_map runs.
    side.locator(".me-tab", has_text="Files").click()
    listed = side.locator(".me-side-file .me-side-name").all_inner_texts()
    assert {"config.json", "generation_config.json", "modeling_x.py"} <= set(listed), listed
    side.locator(".me-side-file", has_text="config.json").first.click()
    # The Model tab shows auto_map and the code file it names; that file's bytes are a click away.
    side.locator(".me-tab", has_text="Model").click()
    table = side.locator(".me-model-automap")
    table.wait_for(timeout=30_000)
    assert "AutoModelForCausalLM" in table.inner_text() and "modeling_x.py" in table.inner_text()
    table.locator(".me-automap-code").first.click()
    code = str(made["side"] / "modeling_x.py")
    page.wait_for_function("([el, f]) => el.value === f", arg=[side.locator(".me-file-select").element_handle(), code])
    side.locator(".me-hex-row", has_text="import os").first.wait_for()
    screenshot(page, "side-files-model-tab", side)


def test_a_cut_file_says_so_everywhere(page):
    cut = page.locator(".me-explorer").nth(0)
    size = cut.locator(".me-summary .me-size").inner_text()
    assert size.endswith("cut short") and " of " in size and "%" in size, size
    # The partly present tensor shows the rows that are there, marked partial.
    cut.locator(".me-tab", has_text="Tensors").click()
    partial = cut.locator(".me-hist-partial")
    partial.wait_for(timeout=30_000)
    assert "the first 21 of 64 rows" in partial.inner_text()
    assert "1344" in cut.locator(".me-stats").inner_text().replace(",", "")
    # Layers: no "no layer stands out" over a heatmap without values.
    cut.locator(".me-tab", has_text="Layers").click()
    unread = cut.locator(".me-layers-unread")
    unread.wait_for(timeout=60_000)
    assert unread.inner_text().startswith("None of the 6 tensors' values could be read")
    status = cut.inner_text()
    assert "no layer stands out" not in status and "no value could be read" in status
    screenshot(page, "cut-file-layers", cut)
    assert not page.errors, page.errors
