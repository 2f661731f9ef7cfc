"""The finding-code catalog is complete, and docs/findings.md is made from it."""

from __future__ import annotations

import ast
import pathlib
import re

from model_explorer.codes import CATALOG, markdown
from model_explorer.spans import SEVERITIES

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "model_explorer"
_CODE = re.compile(r"[a-z][a-z0-9_]*$")
# Finding.of and the helpers that pass a code on to it
_EMITTERS = {"of", "error", "warning", "info", "once", "_err", "model_finding", "finding", "_finding"}


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def codes_in_source() -> dict[str, str]:
    """Codes written as literals where findings are made: ("sev", "code", ...) calls,
    report.error("code", ...) and friends, and `code = "..."` assignments."""
    found: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                args = node.args
                if len(args) >= 2 and _literal(args[0]) in SEVERITIES and _CODE.match(_literal(args[1]) or ""):
                    found.setdefault(_literal(args[1]), rel)
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name in _EMITTERS and args and _CODE.match(_literal(args[0]) or ""):
                    found.setdefault(_literal(args[0]), rel)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "code" for t in node.targets):
                value = node.value
                options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                for v in options:
                    if _CODE.match(_literal(v) or ""):
                        found.setdefault(_literal(v), rel)
    return found


def test_every_code_in_the_source_is_in_the_catalog():
    missing = {c: f for c, f in codes_in_source().items() if c not in CATALOG}
    assert not missing, f"add these to model_explorer/codes.py: {missing}"


def test_catalog_entries_are_well_formed():
    for code, entry in CATALOG.items():
        assert _CODE.match(code), code
        assert entry.severity in SEVERITIES, code
        assert entry.meaning and entry.meaning.endswith("."), code


def test_docs_list_every_code():
    doc = (ROOT / "docs" / "findings.md").read_text()
    assert doc == markdown(), "run: python -m model_explorer.codes > docs/findings.md"
