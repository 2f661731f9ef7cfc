"""docs/architecture.md stays true: its layer table is the one the layer test enforces, its module
index names every module of the package (and none that is gone), and it names the modules that
import the public face."""

from __future__ import annotations

import re

from house.test_layers import LAYERS, PACKAGE, ROOT, graph

DOC = (ROOT / "docs" / "architecture.md").read_text()


def _doc_name(path) -> str:
    rel = path.relative_to(PACKAGE)
    if rel.name == "__init__.py":
        return f"{rel.parent}/" if str(rel.parent) != "." else "__init__"
    return str(rel.with_suffix(""))


def test_the_layer_table_is_the_enforced_one():
    rows = re.findall(r"^\| (\d+) \| (\w[\w ]*) \| ([^|]+) \|", DOC, re.M)
    table = [(name.strip(), tuple(re.findall(r"`([^`]+)`", members))) for _, name, members in rows]
    assert table == [(name, members) for name, members in LAYERS]


def test_every_module_is_in_the_index():
    index = set(re.findall(r"^- `([^`]+)`: ", DOC.split("## Every module", 1)[1], re.M))
    modules = {_doc_name(p) for p in PACKAGE.rglob("*.py")}
    assert not modules - index, f"modules missing from docs/architecture.md: {sorted(modules - index)}"
    assert not index - modules, f"docs/architecture.md lists modules that are gone: {sorted(index - modules)}"


def test_the_public_face_importers_are_named():
    importers = sorted(m.removeprefix("model_explorer.").replace(".", "/")
                       for m, deps in graph().items() if "model_explorer" in deps and m != "model_explorer")
    sentence = DOC.split("Inside the package it is imported only by", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"`([^`]+)`", sentence) == importers
