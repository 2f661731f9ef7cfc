"""The README tells the truth (issue 46): every code block of README.md and of the docs/ pages it
moves its reference to runs as written, and the output they quote is what comes out.

The pages run in order in one empty folder, as a reader goes from the README to docs/: each
page's python blocks in one namespace, in order; its bash blocks as bash would run them, with `model-explorer` and `python` on PATH meaning this checkout's CLI and
this interpreter (a plain `model-explorer ...` line calls the CLI's main() in this process, the
function the console script calls, to spare a start-up per line). A bash line's exit status must
be 0, or the `exit N` its comment names. A
```text  # output``` block right after a block holds lines its output must contain, in order.
A block that cannot run here says why in its fence (```python  # needs: network```, ```bash  #
not run: ...```); SKIPPED lists them all, so a new skip is a visible change to this file.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/reference.md", "docs/formats.md"]
# The pages the README links that hold no examples (tables made from the code, kept by their own tests).
PLAIN_PAGES = ["docs/findings.md", "docs/architecture.md"]

# (page, language, reason): every block that is not run, and why.
SKIPPED = [
    ("README.md", "bash", "not run: sets up this machine (the doc test itself runs inside `make test`)"),
    ("docs/reference.md", "bash", "needs: network (installs from PyPI)"),
    ("docs/reference.md", "python", "needs: network (the Hugging Face Hub)"),
    ("docs/reference.md", "bash", "needs: network (the Hugging Face Hub)"),
]

FENCE = re.compile(r"^```(\w+)[ \t]*(.*?)\n(.*?)^```[ \t]*$", re.M | re.S)
SKIP_WORDS = re.compile(r"#\s*((?:needs|not run):.*)$")


def blocks(page: str) -> list[dict]:
    """The page's fenced blocks in order: language, code, skip reason, quoted output."""
    out: list[dict] = []
    for m in FENCE.finditer((ROOT / page).read_text()):
        lang, info, body = m.group(1), m.group(2).strip(), m.group(3)
        if lang == "text" and re.search(r"#\s*output\b", info):
            assert out and "expected" not in out[-1], f"{page}: an output block follows no code block"
            out[-1]["expected"] = body
            continue
        if lang not in ("python", "bash"):
            continue
        skip = SKIP_WORDS.search(info)
        out.append({"lang": lang, "code": body, "skip": skip.group(1).strip() if skip else None})
    return out


def _bin(tmp: Path) -> Path:
    """A folder whose `model-explorer` and `python` are this checkout's CLI and this interpreter."""
    folder = tmp / ".bin"
    folder.mkdir(exist_ok=True)
    # Scripts, not links: a linked interpreter would not find its virtual environment.
    for name, args in (("model-explorer", " -m model_explorer.cli"), ("python", "")):
        (folder / name).write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)}{args} "$@"\n')
        (folder / name).chmod(0o755)
    return folder


def _commands(code: str) -> list[tuple[str, int | None]]:
    """A bash block's command lines with the exit status each expects (None: an assignment)."""
    out: list[tuple[str, int | None]] = []
    for line in code.splitlines():
        command, _, comment = line.partition("  #")
        command = command.strip()
        if not command or command.startswith("#"):
            continue
        if re.fullmatch(r"[A-Z_]+=.*", command):
            out.append((command, None))
            continue
        status = re.search(r"\bexit (\d)\b", comment)
        out.append((command, int(status.group(1)) if status else 0))
    return out


def _in_bash(command: str, cwd: Path, variables: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, **variables, PATH=f"{_bin(cwd)}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _cli(command: str, variables: dict) -> tuple[int, str]:
    """`model-explorer ARGS [> FILE]`: the console script's main() with those arguments, in this
    process (what the script runs, without a Python start-up per line)."""
    from model_explorer.cli import main

    words = shlex.split(re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: variables[m.group(1)], command))
    target = None
    if len(words) > 2 and words[-2] == ">":
        words, target = words[:-2], words[-1]
    assert words[0] == "model-explorer", command
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(words[1:])
    if target:
        Path(target).write_text(out.getvalue())
        return status, err.getvalue()
    return status, out.getvalue() + err.getvalue()


def _run_bash(code: str, cwd: Path) -> str:
    """Each line as bash would run it: an assignment or a pipeline through bash, a plain
    `model-explorer` line through the CLI's main(); its exit status as the page says."""
    variables: dict = {}
    output = []
    for command, want in _commands(code):
        if want is None:
            name, value = command.split("=", 1)
            run = _in_bash(f'printf %s "{value}"', cwd, variables)
            assert run.returncode == 0 and run.stdout, f"`{command}` failed\n{run.stderr[-3000:]}"
            variables[name] = run.stdout
            continue
        if "|" in command or not command.startswith("model-explorer "):
            run = _in_bash(command, cwd, variables)
            status, text = run.returncode, run.stdout + run.stderr
        else:
            status, text = _cli(command, variables)
        assert status == want, f"`{command}` exited {status}, the page says {want}\n{text[-3000:]}"
        output.append(text)
    return "".join(output)


def _run_python(code: str, namespace: dict) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(code, "<doc block>", "exec"), namespace)
    return buffer.getvalue()


def check_quoted(expected: str, got: str, where: str) -> None:
    """Every quoted line appears in the output, in order."""
    position = 0
    for line in expected.splitlines():
        if not line.strip():
            continue
        found = got.find(line.rstrip(), position)
        assert found >= 0, f"{where}: the page quotes {line!r}; the output was:\n{got[-3000:]}"
        position = found + len(line.rstrip())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The reader's folder: the README's examples run first, the docs pages go on in it."""
    from model_explorer.samples import sample_path
    try:
        sample_path()
    except FileNotFoundError as e:  # make lab installs it; found, never imported
        pytest.skip(str(e))
    return {"path": tmp_path_factory.mktemp("reader"), "done": set()}


def run_page(page: str, folder: dict) -> str:
    """Run the page's blocks (the pages before it first, as a reader would); a summary line."""
    for before in PAGES[:PAGES.index(page)]:
        if before not in folder["done"]:
            run_page(before, folder)
    cwd = folder["path"]
    namespace: dict = {"__name__": "__doc_page__"}
    ran, skipped, slow, started = 0, [], [], time.monotonic()
    with contextlib.chdir(cwd):
        for i, block in enumerate(blocks(page)):
            where = f"{page} block {i + 1} ({block['lang']})"
            if block["skip"]:
                skipped.append(block["skip"])
                continue
            began = time.monotonic()
            got = _run_python(block["code"], namespace) if block["lang"] == "python" \
                else _run_bash(block["code"], cwd)
            slow.append(f"block {i + 1} {time.monotonic() - began:.1f} s")
            ran += 1
            if "expected" in block:
                check_quoted(block["expected"], got, where)
    folder["done"].add(page)
    return (f"{page}: {ran} blocks run, {len(skipped)} not run ({'; '.join(skipped) or 'none'}), "
            f"{time.monotonic() - started:.1f} s ({', '.join(slow)})")


@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_written(page, folder, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    print(run_page(page, folder))


def test_skips_are_few_and_explained():
    found = [(page, b["lang"], b["skip"]) for page in PAGES for b in blocks(page) if b["skip"]]
    assert found == SKIPPED
    total = sum(len(blocks(page)) for page in PAGES)
    print(f"{total - len(found)} blocks run, {len(found)} not run: "
          + "; ".join(f"{page} {lang}: {why}" for page, lang, why in found))
    assert len(found) <= total // 4


def test_every_page_the_readme_links_is_run_or_plain():
    readme = (ROOT / "README.md").read_text()
    linked = {m.split("#")[0] for m in re.findall(r"\]\((docs/[^)]+)\)", readme)}
    linked = {p for p in linked if p.endswith(".md")}
    assert linked == set(PAGES[1:]) | set(PLAIN_PAGES)
    for page in PLAIN_PAGES:
        assert not blocks(page), f"{page} has code blocks: add it to PAGES"


def test_the_set_up_commands_are_make_lab_and_make_test():
    first = blocks("README.md")[0]
    commands = [line.split("#")[0].strip() for line in first["code"].splitlines() if line.strip()]
    assert commands == ["make lab", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
