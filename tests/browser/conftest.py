"""One JupyterLab server per test process (each xdist worker) and one Chromium per browser test
module. The modules share the server (starting one takes ~20 s of a 2-core machine); each
writes and opens notebooks of its own name, so each runs in a kernel of its own.

Recipe from CONVENTIONS.md (see labserver.py): Debian's /usr/bin/chromium driven by
Playwright, JupyterLab on 127.0.0.1 with its folders in a temp dir. Without Chromium the tests
skip with the reason, except in CI (CI=true), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "widgets"))

from labserver import CHROMIUM, CHROMIUM_ARGS, ROOT, jupyter_lab  # noqa: E402
from labserver import require as _need  # noqa: E402


@pytest.fixture(scope="module")
def chromium():
    _need(os.path.exists(CHROMIUM), "Chromium is not installed (apt-get install -y chromium)")
    _need((ROOT / "model_explorer/widgets/static/explorer_widget.js").exists(),
          "the widget JavaScript is not built (make js)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server; yields (base_url, notebook_dir)."""
    try:
        with jupyter_lab(tmp_path_factory.mktemp("lab")) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e))
