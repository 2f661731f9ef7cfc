"""`graph.show()`: the Graph view alone (js/src/graphview.js), the Explorer's Graph tab without
the checkpoint around it. A click on a node shows what it reads and where its record lies; the
bytes themselves are the Explorer's (`mx.explore(path)` has the same tab, linked to them)."""

from __future__ import annotations

import traceback
from typing import Any

import anywidget
import traitlets

from ..assets import MISSING_BUILD, asset
from ..safe_text import unescape_deep
from ..viewers import register
from ._graph import GraphOps
from ._safe import SafeState


class GraphView(GraphOps, SafeState, anywidget.AnyWidget):
    """A Graph (mx.graph) drawn alone; `overlay`: a trace or compare_runs result (see _graph.py)."""

    _esm = asset("explorer_widget.js", MISSING_BUILD)
    _css = asset("explorer_widget.css")

    view = traitlets.Unicode("graph").tag(sync=True)
    """Which view the JavaScript draws: always "graph" here.

    - Type: `str`
    - Default: `"graph"`
    """

    has_graph = traitlets.Bool(True).tag(sync=True)
    """Whether there is a graph to draw (an empty Graph says so in the view).

    - Type: `bool`
    - Default: `True`
    """

    def __init__(self, graph, overlay=None, **kwargs: Any) -> None:
        super().__init__(has_graph=len(graph.nodes) > 0, **kwargs)
        self._graph = graph
        self._graph_overlay = overlay
        self.on_msg(self._on_request)

    def _graph_source(self):
        return self._graph, None

    def _on_request(self, _widget, content: Any, _buffers) -> None:
        if not isinstance(content, dict) or content.get("type") != "req":
            return
        rid = content.get("id")
        try:
            data, buffers = self.answer(str(content.get("op")), unescape_deep(content.get("args") or {}))
            self.send({"type": "res", "id": rid, "ok": True, "data": data}, buffers or None)
        except Exception as e:  # the view says why it cannot draw
            self.send({"type": "res", "id": rid, "ok": False, "error": f"{type(e).__name__}: {e}",
                       "trace": traceback.format_exc(limit=3)})

    def answer(self, op: str, args: dict) -> tuple[Any, list[bytes] | None]:
        if op == "ping":
            return {"ok": True}, None
        if not op.startswith("graph_"):
            raise ValueError(f"unknown request {op!r}")
        return getattr(self, f"_op_{op}")(**args)


register("graph", GraphView)
