"""Nothing imports upward, and no two modules import each other (directly or round a loop).

The layers, lowest first, as docs/architecture.md draws them. A module may import its own layer
and the ones below; the package's `__init__` (the public face, with lazy re-exports) is exempt.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "model_explorer"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("spans", "sources", "records", "dtypes", "ggml", "codes", "units", "gcpause",
                "assets", "hexview", "samples", "tensormap", "hub", "limits", "http_ranges",
                "blockcache", "safe_text", "subsources", "figures", "viewers")),
    ("formats", ("formats",)),
    ("tensors", ("tensors",)),
    ("checkpoint", ("checkpoint", "assemble")),
    ("model", ("model",)),
    ("checks", ("checks", "opener")),
    ("conversion", ("conversion",)),
    ("repairs", ("repairs",)),
    ("runtime", ("runtime",)),
    ("runs", ("runs",)),
    ("views", ("widgets", "audits", "cli_info", "cli_batch", "cli_repair", "cli_generate", "cli_runs",
               "cli")),
]
# Within the views: the widgets, then audits (which may show them), then the command line.
VIEW_ORDER = ("widgets", "audits", "cli_info", "cli_batch", "cli_repair", "cli_generate", "cli_runs", "cli")
# Layers whose members are ordered too, lowest first: `assemble` builds a Checkpoint, the opener
# runs the checks (so a check takes an open checkpoint and never opens one), the views as above.
ORDERED = {"checkpoint": ("checkpoint", "assemble"), "checks": ("checks", "opener"), "views": VIEW_ORDER}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, name: str) -> set[str]:
    """Every model_explorer module it imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if _is_module(full) else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("model_explorer")}


def _is_module(dotted: str) -> bool:
    p = ROOT.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, module_name(p)) for p in PACKAGE.rglob("*.py")}


def rank(module: str) -> tuple[int, int]:
    if module == "model_explorer":
        return (len(LAYERS), 0)
    top = module.split(".")[1]
    for i, (layer, members) in enumerate(LAYERS):
        if top in members:
            return (i, ORDERED[layer].index(top) if layer in ORDERED else 0)
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md")


def test_every_module_has_a_layer():
    for module in graph():
        rank(module)


def test_nothing_imports_upward():
    upward = []
    for module, deps in graph().items():
        if module == "model_explorer":
            continue
        for dep in deps:
            if dep != "model_explorer" and rank(dep) > rank(module):
                upward.append(f"{module} -> {dep}")
            # The widgets are re-exported by the public face: they may not import it back.
            elif dep == "model_explorer" and module.split(".")[1] not in VIEW_ORDER[1:]:
                upward.append(f"{module} -> model_explorer (the public face)")
    assert not upward, "imports that run up the layers:\n" + "\n".join(sorted(upward))


def test_no_import_cycles():
    g = {m: {d for d in deps if d in deps and d != m} for m, deps in graph().items()}
    # A package's __init__ importing its own submodules is how packages work; a submodule
    # importing its package's __init__ back is the loop to catch.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if d not in g:
                continue
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
