"""Where a result of a lower layer finds the widget that draws it, without importing upward.

A widget sits in the views layer, above the records it draws (a run's Trace or RunDiff, the model's
Graph), so the widget module names itself here when it is imported (`register("runs", RunsView)`,
`register("graph", GraphView)`) and the record's `.show()` asks for it by kind (`show("graph", g)`).
The public face imports the widget module together with the function that makes the record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_VIEWERS: dict[str, Callable[..., Any]] = {}
# The module that registers each kind, named in the error when none has been imported yet.
_MODULES = {"runs": "model_explorer.widgets.runs_view", "graph": "model_explorer.widgets.graph_view"}


def register(kind: str, factory: Callable[..., Any]) -> None:
    """Called once, at import, by the module that defines the widget for `kind`."""
    _VIEWERS[kind] = factory


def show(kind: str, result, **kwargs):
    factory = _VIEWERS.get(kind)
    if factory is None:
        module = _MODULES.get(kind, "the module of its widget")
        raise RuntimeError(f"no widget is loaded for {kind}: import {module} "
                           "(or use the public face, mx.graph / mx.trace / mx.compare_runs, which loads it)")
    return factory(result, **kwargs)
