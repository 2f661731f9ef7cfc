"""No object of the package changes its class after it is made (`obj.__class__ = Other`, or
`setattr(obj, "__class__", ...)`): what an object is is decided when it is constructed, so its
type and its fields never disagree (the opener builds an OpenCheckpoint from the start)."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "model_explorer"


def class_swaps(tree: ast.AST) -> list[int]:
    """Lines that assign an object's __class__."""
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "setattr" and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value == "__class__":
            lines.append(node.lineno)
        for t in targets:
            for sub in ast.walk(t):  # a, b.__class__ = ... too
                if isinstance(sub, ast.Attribute) and sub.attr == "__class__":
                    lines.append(node.lineno)
    return sorted(lines)


def test_the_detector_finds_each_form():
    found = class_swaps(ast.parse("x.__class__ = A\na, b.__class__ = 1, B\nsetattr(c, '__class__', C)\n"
                                  "y = z.__class__\n"))
    assert found == [1, 2, 3]


def test_no_module_assigns_a_class():
    swaps = {str(p.relative_to(PACKAGE)): lines for p in sorted(PACKAGE.rglob("*.py"))
             if (lines := class_swaps(ast.parse(p.read_text())))}
    assert not swaps, f"construct the right class instead of assigning __class__: {swaps}"
