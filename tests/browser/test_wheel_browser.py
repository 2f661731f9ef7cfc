"""The package as a pip user meets it: a wheel built from a clean clone, and a second one from
the sdist alone, each carrying the widget JavaScript; installed into a fresh environment with
no node or npm on PATH, the Explorer renders in JupyterLab and in Notebook 7.

The clone holds what is committed (a clean checkout: no node_modules, no built bundle). The
fresh environment gets the wheel with `--no-deps`; its dependencies come from this test run's
environment through a .pth file written after the install, so it sees neither this checkout
nor its editable install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import nbformat
import pytest
import widget_test_files as files
from labserver import KERNEL_IDLE, ROOT, jupyter_lab, run_cells, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BUNDLE = ["explorer_widget.js", "explorer_widget.css", "report_widget.js", "run_demo_widget.js",
          "run_demo_widget.css"]
STATIC = "model_explorer/widgets/static/"


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 300) -> str:
    run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout + run.stderr


def _no_node_path(tmp: Path, venv_bin: Path) -> str:
    """A PATH with the fresh environment first and no directory that holds node or npm."""
    keep = [str(venv_bin)]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and not any(os.path.exists(os.path.join(d, tool)) for tool in ("node", "npm", "nodejs")):
            keep.append(d)
    return os.pathsep.join(keep)


def _bundle(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {n[len(STATIC):]: hashlib.sha256(z.read(n)).hexdigest()
                for n in z.namelist() if n.startswith(STATIC) and n[len(STATIC):] in BUNDLE}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv holding the wheel built from the sdist alone, its environment)."""
    if shutil.which("npm") is None or shutil.which("git") is None:
        pytest.skip("building a wheel needs git and npm")
    pytest.importorskip("build")
    tmp = tmp_path_factory.mktemp("wheel")
    clone = tmp / "clone"
    _run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], tmp)
    assert not (clone / STATIC / "explorer_widget.js").exists()
    assert not (clone / "js" / "node_modules").exists()
    # From the clean clone: an sdist, and a wheel (npm install + build run by the build hook).
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "-o", str(tmp / "dist"), str(clone)], tmp)
    (sdist,) = (tmp / "dist").glob("*.tar.gz")
    (wheel,) = (tmp / "dist").glob("*.whl")
    # A second wheel from the sdist alone, in a folder that holds nothing else.
    alone = tmp / "alone"
    alone.mkdir()
    shutil.copy(sdist, alone)
    _run([sys.executable, "-m", "build", "--wheel", "-o", str(alone / "dist"), str(alone / sdist.name)], alone)
    (wheel2,) = (alone / "dist").glob("*.whl")

    # A fresh venv with the second wheel; no node, no npm, no checkout on its path.
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
          str(wheel2)], tmp)
    site = subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    Path(site, "_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = _no_node_path(tmp, venv / "bin")
    # The widget front ends (ipywidgets' and anywidget's lab extensions) of the test environment.
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    return {"tmp": tmp, "sdist": sdist, "wheel": wheel, "wheel2": wheel2, "python": str(py), "env": env,
            "site": site}


def test_sdist_carries_js_sources_and_wheels_carry_the_bundle(installed):
    with tarfile.open(installed["sdist"]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for need in ("js/package.json", "js/package-lock.json", "js/build.mjs", "js/src/explorer_widget.js",
                 "model_explorer/__init__.py"):
        assert need in names, need
    assert not any(n.startswith("js/node_modules") for n in names)
    assert not any(n.startswith(STATIC) and n.endswith(".js") for n in names), "the sdist builds its bundle"
    first, second = _bundle(installed["wheel"]), _bundle(installed["wheel2"])
    assert sorted(first) == sorted(BUNDLE), first
    assert first == second, "the wheel from the sdist alone differs from the clone's"


def test_installed_wheel_loads_its_widgets_without_node(installed):
    code = ("import shutil, model_explorer as mx, model_explorer.assets as a\n"
            "assert shutil.which('node') is None and shutil.which('npm') is None\n"
            "print(mx.__file__)\n"
            "ex = mx.explore({path!r})\n"
            "esm = ex._esm if isinstance(ex._esm, str) else open(ex._esm).read()\n"
            "assert 'not built' not in esm and len(esm) > 10000, esm[:200]\n"
            "print('ok', len(esm))\n")
    gguf = files.small_gguf(installed["tmp"] / "small.gguf")
    out = _run([installed["python"], "-c", code.format(path=str(gguf))], installed["tmp"], env=installed["env"])
    assert out.splitlines()[0].startswith(installed["site"]), out
    assert "ok" in out


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_installed_wheel_renders_in_the_browser(installed, chromium, app, tmp_path):
    with jupyter_lab(tmp_path, app=app, python=installed["python"], env=installed["env"]) as (url, home):
        gguf = files.small_gguf(home / "small.gguf")
        cells = ["import model_explorer as mx, shutil\n"
                 f"assert mx.__file__.startswith({installed['site']!r}), mx.__file__\n"
                 "assert shutil.which('node') is None",
                 f"mx.explore({str(gguf)!r})"]
        ready = "document.querySelector('.me-explorer .me-b.me-kind-magic')"
        if app == "lab":
            page = run_cells(chromium, url, home, "wheel.ipynb", cells, ready)
        else:
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
            nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
            nbformat.write(nb, home / "wheel.ipynb")
            page = chromium.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/notebooks/wheel.ipynb")
            page.wait_for_function(KERNEL_IDLE, timeout=90_000)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(f"() => {ready}", timeout=60_000)
        try:
            assert page.locator(".me-missing-build").count() == 0
            ex = page.locator(".me-explorer").first
            assert "tiny test model" in ex.locator(".me-facts").inner_text()
            assert page.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
            screenshot(page, f"wheel-{app}", ex)
        finally:
            page.close()


def test_a_wheel_without_npm_fails_to_build_instead_of_shipping_no_views(installed, tmp_path):
    env = dict(os.environ, PATH=_no_node_path(tmp_path, Path(sys.executable).parent))
    run = subprocess.run([sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"),
                          str(installed["sdist"])], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0
    assert "npm" in run.stdout + run.stderr
    assert not list((tmp_path / "dist").glob("*.whl"))
