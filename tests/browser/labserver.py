"""Start JupyterLab on 127.0.0.1 for browser tests and benchmarks (recipe in CONVENTIONS.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require(condition: bool, reason: str) -> None:
    """Skip a browser test whose tool is missing; in CI (CI=true) that is a failure instead."""
    if condition:
        return
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: browser tests must run)")
    pytest.skip(reason)


KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return Boolean(k && k.status === 'idle');
}"""


# The effective colours of an element's text and background (translucent layers composited on
# the nearest opaque background), as WCAG contrast: canvas pixels do the compositing.
CONTRAST = """(el) => {
  const c = document.createElement("canvas").getContext("2d", { willReadFrequently: true });
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const bg = getComputedStyle(e).backgroundColor;
    layers.unshift(bg);
    c.fillStyle = "#000"; c.fillStyle = bg;
    if (/^#/.test(c.fillStyle)) break;  // opaque: nothing below shows through
  }
  const paint = (colors) => {
    c.clearRect(0, 0, 1, 1);
    c.fillStyle = "#fff"; c.fillRect(0, 0, 1, 1);
    for (const col of colors) { c.fillStyle = col; c.fillRect(0, 0, 1, 1); }
    return Array.from(c.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };
  const back = paint(layers);
  const fore = paint([...layers, getComputedStyle(el).color]);
  const lum = (rgb) => {
    const [r, g, b] = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [a, b] = [lum(fore), lum(back)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAB_SETTINGS = ROOT / "jupyter" / "overrides.d"


@contextlib.contextmanager
def jupyter_lab(tmp: Path, app: str = "lab", python: str | None = None,
                env: dict[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """Yield (base_url, notebook_dir) of a fresh JupyterLab (or, with app="notebook", Jupyter
    Notebook 7) whose folders all live in `tmp`, with the settings `make lab` installs.

    `python` runs the server (and so its kernels) from another environment; then this checkout
    is not put on the kernel's path, and `env` replaces the server's environment."""
    home = tmp / "notebooks"
    home.mkdir(parents=True, exist_ok=True)
    installed = python is not None
    env = dict(env if env is not None else os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("JUPYTER_DATA_DIR", "data")):
        env[var] = str(tmp / sub)
    # The kernel must import this checkout even when it is not pip-installed.
    if not installed:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # No "news" pop-up over the widgets in screenshots.
    settings = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp / "settings")
    # The app-level overrides `make lab` copies into the venv (widget state saved with notebooks).
    app_settings = tmp / "app-settings"
    shutil.copytree(LAB_SETTINGS, app_settings / "overrides.d", dirs_exist_ok=True)
    server_class = "LabApp" if app == "lab" else "JupyterNotebookApp"
    port = _free_port()
    log_path = tmp / "lab.log"
    with open(log_path, "w") as log:
        # Another environment's bin/ holds no jupyter-lab script: run the app's module there.
        command = ([python, "-m", {"lab": "jupyterlab", "notebook": "notebook"}[app]] if installed
                   else [sys.executable, "-m", "jupyter", app])
        proc = subprocess.Popen(
            [*command, "--no-browser", "--allow-root", f"--port={port}",
             "--ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
             f"--{server_class}.expose_app_in_browser=True", f"--{server_class}.app_settings_dir={app_settings}",
             f"--ServerApp.root_dir={home}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=home)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + 60
            while True:
                try:
                    urllib.request.urlopen(f"{url}/api/status", timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None or time.time() > deadline:
                        raise RuntimeError(f"jupyter {app} did not start:\n" + log_path.read_text()[-3000:]) from None
                    time.sleep(0.3)
            yield url, home
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def open_notebook(browser, url: str, name: str, viewport=(1400, 1000), setup=None):
    """Open a notebook in a new page and wait until its kernel is idle.

    `setup(page)` runs before the page loads (to listen to its websockets, for instance).
    """
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    if setup is not None:
        setup(page)
    # A workspace of the notebook's own: the server is shared by test modules, and the default
    # workspace would reopen the notebooks other modules left open.
    page.goto(f"{url}/lab/workspaces/{Path(name).stem}/tree/{name}")
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    return page


def run_cells(browser, url: str, home: Path, name: str, cells: list[str], ready: str, setup=None):
    """Write `cells` as notebook `name`, open it, run every cell and wait until `ready` (a JS
    expression) holds. The page's uncaught errors collect in `page.errors`."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, home / name)
    page = open_notebook(browser, url, name, setup=setup)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(f"() => {ready}", timeout=60_000)
    return page


def screenshot(page, name: str, locator=None) -> Path:
    """Save a screenshot as a test artefact (test-artifacts/NAME.png, git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    (locator or page).screenshot(path=str(path))
    return path
