"""The "Compare runs" widget (js/src/runsview.js): a RunDiff or a Trace drawn from `runs_state`;
a click on a cell hands the weight tensor behind it to `on_select` (see runs/state.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anywidget
import traitlets as t

from ..assets import MISSING_BUILD, asset
from ..runs import display
from ..runs.state import pick, runs_state
from ._safe import SafeState


class RunsView(SafeState, anywidget.AnyWidget):
    """A RunDiff or a Trace as a heatmap (see the module docstring). `on_select(name)` is called
    with the weight tensor of a clicked cell."""

    _esm = asset("runs_widget.js", MISSING_BUILD)
    _css = asset("runs_widget.css")

    runs = t.Dict().tag(sync=True)
    """The compact summary drawn (`runs_state`): layers, modules, metrics, colours, marks, figures.

    - Type: `dict`
    - Default: `{}`
    """

    def __init__(self, result=None, on_select: Callable[[str], Any] | None = None, **kwargs) -> None:
        if result is not None:
            kwargs["runs"] = runs_state(result)
        super().__init__(**kwargs)
        self.on_select = on_select
        self.on_msg(self._on_msg)

    def _on_msg(self, _widget, content, _buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "runs_select":
            pick(self, self.runs, content, self.on_select)


display.register("runs", RunsView)
