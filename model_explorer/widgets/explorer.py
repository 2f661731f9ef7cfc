"""`mx.explore(source)`: every view of one checkpoint in one cell, with linked selection."""

from __future__ import annotations

import os
import time
from typing import Any

import anywidget
import traitlets

from ._base import BaseView
from ._graph import GraphOps
from ._layers import LayerOps


class Explorer(GraphOps, LayerOps, BaseView):
    """Overview, header tree, tensor table with histograms, file map, findings and bytes.

    `explorer.selection` holds what the user last selected ({tensor, file, offset, length});
    set it from Python to drive the views. `save_html(path)` writes an offline report.
    With `run=True` the Explorer gets a "Run" tab with the demo's RunDemo widget.
    """

    _init_traits = (*BaseView._init_traits, "run")

    def _new_explorer(self, source: Any) -> Explorer:
        """An Explorer of another checkpoint, made when the browser asks (the Fix… dialog's
        fixed copy): drawable under marimo too, where no cell is running."""
        from ._frontends import child_widget

        return child_widget(Explorer, source)

    run = traitlets.Bool(False).tag(sync=True)
    """Whether the Explorer has a "Run" tab (the demo: dequantize, generate, compare).
    The model is only loaded when someone opens that tab and presses a button.

    - Type: `bool`
    - Default: `False`
    """

    layer_findings = traitlets.List().tag(sync=True)
    """The `layer_outlier` / `layer_duplicate` findings of the layer profile the Layers tab last
    drew, as dicts (`Finding.to_dict()` plus `"statistics"`: "sampled" or "exact", and `"stat"`):
    the Findings tab lists and counts them, marked as coming from those statistics. Empty until
    the Layers tab computes (nothing is computed at open); not part of `checkpoint.findings`.

    - Type: `list[dict]`
    - Default: `[]`
    """

    model_findings = traitlets.List().tag(sync=True)
    """What transformers' build of the architecture (meta device) adds to the open-time
    expected-tensor check, as `Finding.to_dict()` dicts: computed in the background once the Model
    tab opens (the first import of torch takes seconds; opening never waits for it). The Findings
    tab lists and counts them; they are in `checkpoint.findings` too.

    - Type: `list[dict]`
    - Default: `[]`
    """

    has_graph = traitlets.Bool(False).tag(sync=True)
    """Whether the Explorer has a "Graph" tab: the files record a graph (ONNX, OpenVINO IR,
    TFLite) or the family's block graph is known (`mx.graph`). Nothing is laid out until the
    tab opens.

    - Type: `bool`
    - Default: `False` (set from the checkpoint)
    """

    run_widget = anywidget.WidgetTrait().tag(sync=True)
    """The RunDemo shown in the "Run" tab, created when the tab first opens.

    - Type: `RunDemo` or `None`
    - Default: `None`
    """

    def __init__(self, source: Any, **kwargs: Any) -> None:
        super().__init__(source, **kwargs)
        self._graph = None
        self.has_graph = self._has_graph()
        if self.has_graph:
            self.prepare_graph()

    def _has_graph(self) -> bool:
        """A graph file says so without building its table; other files build theirs (small)."""
        if getattr(self.checkpoint, "structures", None):
            return True
        try:
            return len(self._graph_source()[0].nodes) > 0
        except Exception:  # a checkpoint whose graph cannot be built has no Graph tab
            return False

    def _graph_source(self):
        if self._graph is None:
            from ..model.graph import graph_of

            self._graph = graph_of(self.checkpoint)
        return self._graph, self.checkpoint

    def save_html(self, path: str | os.PathLike) -> str:
        """Write one self-contained HTML report (no network requests) and return its path.

        A reader of the report clicks a tensor and sees what the live Explorer shows: its
        sampled statistics and histogram (for up to 50,000 tensors, then a note), the first
        16 bytes of its data, its place in the header tree and file map; a tensor a shard
        index names but no shard holds is a marked row. The Model tab shows the card (its
        tokenizer inspector says typing needs a kernel), the Layers tab the profile pivoted from
        those sampled statistics, and the findings a repair resolves a disabled Fix… button
        with a note. What the report leaves out (bytes
        beyond the first 16 KB of the first file, 4 KB of the next three and each tensor's
        first 16 bytes) says so instead of showing an error.

        Size: about 40 KB of script and style plus roughly 110 bytes per tensor; a 50-shard,
        20,000-tensor folder (2.3 MB of shards) gives a 2.5 MB report
        (benchmarks/bench_report.py). Writing that one takes about 4 s;
        large tensors take longer (each is sampled up to 100,000 values).
        """
        from ._static import report_html

        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write(report_html(self))
        return path

    def run_demo(self):
        """The demo's RunDemo widget for this checkpoint, created on first use.

        The "Run" tab asks for it when it first opens, so exploring never loads a model.
        """
        if self.run_widget is None:
            from ._frontends import child_widget
            from .run_cell import RunDemo

            self.run_widget = child_widget(RunDemo, self.checkpoint.source)
            self.run_widget.on_select = self._select_tensor  # a "Compare runs" cell's weight
        return self.run_widget

    def _select_tensor(self, name: str) -> None:
        """Select a tensor by name, as a click would (the run cell's "Compare runs" view asks):
        a fresh "at" makes a second click on the same tensor move the views again."""
        self.selection = {"tensor": name, "at": time.time() * 1000}

    def _op_run_demo(self):
        """The browser opened the Run tab: create the RunDemo and say which widget it is."""
        demo = self.run_demo()
        return {"ref": f"anywidget:{demo.model_id}"}, None


def explore(source: Any, run: bool = False, **kwargs: Any) -> Explorer:
    """Explore a checkpoint path, URL or `Checkpoint`; `run=True` adds a "Run" tab.

    Keywords: `selection` (what to select first, e.g. `{"tensor": name}`) and `layout`.
    """
    return Explorer(source, run=run, **kwargs)
