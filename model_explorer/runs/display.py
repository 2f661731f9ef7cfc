"""Where a run result finds its widget without importing upward.

The "Compare runs" widget (widgets/runs_view.py RunsView) sits in the views layer, above the
runs it draws, so it names itself here when it is imported; the public face imports it together
with `mx.trace` and `mx.compare_runs` (model_explorer/__init__.py), so `d.show()` just works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_VIEWERS: dict[str, Callable[..., Any]] = {}


def register(kind: str, factory: Callable[..., Any]) -> None:
    """Called once, at import, by the module that defines the widget for `kind`."""
    _VIEWERS[kind] = factory


def show(kind: str, result, **kwargs):
    factory = _VIEWERS.get(kind)
    if factory is None:
        raise RuntimeError(f"no widget is loaded for {kind}: import model_explorer.widgets.runs_view "
                           "(or use mx.trace / mx.compare_runs, which load it)")
    return factory(result, **kwargs)
