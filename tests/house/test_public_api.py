"""The public names stay functions: a package named like a public function would be rebound to the
module as soon as any of its submodules is imported (Python sets the attribute on the parent)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import model_explorer as mx


def test_public_names_are_not_shadowed_by_subpackages():
    for info in pkgutil.walk_packages(mx.__path__, "model_explorer."):
        if info.name.startswith("model_explorer.widgets") or ".demo." in info.name:
            continue  # need the built JS or torch-free paths; not what this checks
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue  # an optional extra is missing
    for name in ("open", "diff", "convert", "audit", "scan", "load_model", "generate", "repair", "repair_plan"):
        value = getattr(mx, name)
        assert inspect.isfunction(value), f"mx.{name} is {type(value).__name__}, not a function"
