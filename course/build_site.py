"""`make course`: execute the course notebooks and render them into an offline static site.

    .venv/bin/python course/build_site.py [--out site] [--only 00_tour ...]

Each notebook runs in a fresh kernel with its widget state stored (nbclient
`store_widget_state=True`); last, removed cells record what the Explorer views would answer
without a kernel (record_answers.py) and what each run cell's buttons do on its model
(record_runs.py), for the page to replay. The HTML uses the `offline` template: require.js, the
widget manager (@jupyter-widgets/html-manager), anywidget and the answering hook are served from
`_static/`, so the pages work from file:// with no network at all.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from lessons import COURSE, NOTEBOOK_DIR, execute  # noqa: E402
from outputs import tidy  # noqa: E402
from record_runs import ACTION_SECONDS, ACTIONS  # noqa: E402
from scrub import scrub  # noqa: E402

NODE_MODULES = HERE / "node_modules"
# Tokens a recorded run generates: Compare quantizations generates them three times over and
# Compare backends once per backend, so the run cell's own 48 would add minutes to the build.
RUN_TOKENS = 16
HTML_MANAGER_DIST = NODE_MODULES / "@jupyter-widgets" / "html-manager" / "dist"
REQUIRE_JS = NODE_MODULES / "requirejs" / "require.js"


def script_json(data) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' appear literally."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def copy_static(out: Path, static_model_js: Path) -> None:
    """Everything the pages load, into out/_static: nothing is fetched from elsewhere."""
    import anywidget

    static = out / "_static"
    static.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REQUIRE_JS, static / "require.js")
    # The widget manager alone: the icon fonts its CSS names (2.9 MB) are never requested by a page.
    shutil.copy2(HTML_MANAGER_DIST / "embed-amd.js", static / "embed-amd.js")
    (static / "anywidget").mkdir(exist_ok=True)
    shutil.copy2(Path(anywidget.__file__).parent / "nbextension" / "index.js", static / "anywidget" / "index.js")
    for name in ("offline_widgets.js", "anywidget_offline.js"):
        shutil.copy2(HERE / "static" / name, static / name)
    shutil.copy2(static_model_js, static / "me_static_model.js")


def recorder_cells(answers: Path, runs: Path, actions: tuple[str, ...], run_tokens: int | None) -> tuple[str, ...]:
    """The cells run after a notebook's own: what the views would answer, then the run cells'
    buttons pressed one per cell (each has the per-cell timeout), then the run records saved."""
    setup = f"import sys as _sys\n_sys.path.insert(0, {str(HERE)!r})\n"
    cells = [setup + f"from record_answers import record as _record\n_record({str(answers)!r})",
             setup + f"from record_runs import RunRecorder as _RunRecorder\n_runs = _RunRecorder({run_tokens!r})"]
    cells += [f"_runs.press({action!r})" for action in actions]
    cells.append(f"_runs.save({str(runs)!r})")
    return tuple(cells)


def render(name: str, out: Path, prev: str | None, nxt: str | None, actions: tuple[str, ...] = ACTIONS,
           run_tokens: int | None = None) -> float:
    """Execute one notebook and write out/<name>.html; returns the execution time."""
    from nbconvert import HTMLExporter

    with tempfile.TemporaryDirectory() as tmp:
        answers, runs = Path(tmp) / "answers.json", Path(tmp) / "runs.json"
        run = execute(NOTEBOOK_DIR / f"{name}.ipynb", store_widget_state=True, timeout=ACTION_SECONDS + 60,
                      extra_cells=recorder_cells(answers, runs, actions, run_tokens))
        recorded = json.loads(answers.read_text(encoding="utf-8"))
        recorded["runs"] = json.loads(runs.read_text(encoding="utf-8"))
    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(HERE / "templates")])
    exporter.require_js_url = "_static/require.js"
    exporter.widget_renderer_url = "_static/embed-amd.js"
    exporter.mathjax_url = ""
    resources = {"metadata": {"name": name}, "me_offline_json": script_json(recorded),
                 "me_prev": prev, "me_next": nxt}
    body, _ = exporter.from_notebook_node(tidy(run.notebook), resources=resources)
    (out / f"{name}.html").write_text(scrub(body), encoding="utf-8")
    return run.seconds


def write_index(out: Path, names: list[str]) -> None:
    items = "\n".join(f'<li><a href="{n}.html">{html.escape(n)}</a>: {html.escape(COURSE[n])}</li>' for n in names)
    (out / "index.html").write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>model_explorer course</title>
<meta name="color-scheme" content="light dark">
<style>body{{font-family:system-ui,sans-serif;max-width:50em;margin:2em auto;padding:0 1em;line-height:1.5}}
@media (prefers-color-scheme: dark){{body{{background:#111;color:#ddd}}a{{color:#8ab4f8}}}}</style>
</head><body>
<h1>model_explorer: a short course on checkpoint files</h1>
<p>Each notebook was executed when this site was built; the widgets render from their saved state
and respond to hovering, expanding and stepping without a kernel. Run the notebooks in JupyterLab
(<code>make lab</code>) to explore further.</p>
<ol start="0">
{items}
</ol>
</body></html>
""", encoding="utf-8")


def build_static_model(dest: Path) -> Path:
    """Bundle the Explorer's own kernel-less answering model (js/src/report.js) with esbuild."""
    root = HERE.parent
    esbuild = root / "js" / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        raise SystemExit("esbuild is missing: run `make js` first (cd js && npm ci).")
    import subprocess

    subprocess.run([str(esbuild), str(root / "js" / "src" / "report.js"), "--bundle", "--format=iife",
                    "--global-name=meStaticModel", "--log-level=warning", f"--outfile={dest}"], check=True)
    return dest


def figure_startup(ipython_dir: Path) -> Path:
    """An IPython directory whose startup file gives every figure its dark form (dark_figures.py);
    the build's kernels start with it (IPYTHONDIR), so no cell is added to a notebook."""
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-course-figures.py").write_text(
        f"import sys\nsys.path.append({str(HERE)!r})\nimport dark_figures\ndark_figures.register()\n",
        encoding="utf-8")
    return ipython_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE.parent / "site"))
    parser.add_argument("--only", nargs="*", help="notebook names (default: the whole course)")
    parser.add_argument("--record-runs", default=",".join(ACTIONS),
                        help="the run cell's buttons to record for the page to replay, comma-separated "
                             f"({', '.join(ACTIONS)}; 'none': every button says it needs a kernel)")
    parser.add_argument("--run-tokens", type=int, default=RUN_TOKENS,
                        help=f"generate this many tokens when recording (default {RUN_TOKENS}; 0: the run "
                             "cell's own setting)")
    args = parser.parse_args(argv)
    actions = tuple(a for a in args.record_runs.split(",") if a and a != "none")
    if set(actions) - set(ACTIONS):
        parser.error(f"unknown run cell button(s): {', '.join(sorted(set(actions) - set(ACTIONS)))}")
    names = args.only or list(COURSE)
    unknown = [n for n in names if n not in COURSE]
    if unknown:
        parser.error(f"unknown notebook(s): {', '.join(unknown)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        copy_static(out, build_static_model(Path(tmp) / "me_static_model.js"))
    t0 = time.perf_counter()
    saved_ipython_dir = os.environ.get("IPYTHONDIR")
    with tempfile.TemporaryDirectory() as ipython_dir:
        os.environ["IPYTHONDIR"] = str(figure_startup(Path(ipython_dir)))
        try:
            for i, name in enumerate(names):
                seconds = render(name, out, names[i - 1] if i else None,
                                 names[i + 1] if i + 1 < len(names) else None, actions, args.run_tokens or None)
                print(f"{name}: executed in {seconds:.1f} s -> {out / (name + '.html')}", flush=True)
        finally:
            if saved_ipython_dir is None:
                os.environ.pop("IPYTHONDIR", None)
            else:
                os.environ["IPYTHONDIR"] = saved_ipython_dir
    write_index(out, names)
    print(f"site: {out / 'index.html'} ({len(names)} notebooks, {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
