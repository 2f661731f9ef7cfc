"""`mx.explore(source)`: every view of one checkpoint in one cell, with linked selection."""

from __future__ import annotations

import os
from typing import Any

from ._base import BaseView


class Explorer(BaseView):
    """Summary bar, bytes, header tree, file map, tensor table with histograms, findings.

    `explorer.selection` holds what the user last selected ({tensor, file, offset, length});
    set it from Python to drive the views. `save_html(path)` writes an offline report.
    """

    def __init__(self, source: Any, **kwargs: Any) -> None:
        super().__init__(source, **kwargs)
        self._run_demo = None

    def save_html(self, path: str | os.PathLike) -> str:
        """Write one self-contained HTML report (no network requests) and return its path.

        A reader of the report clicks a tensor and sees what the live Explorer shows: its
        sampled statistics and histogram (for up to 50,000 tensors, then a note), the first
        16 bytes of its data, its place in the header tree and file map; a tensor a shard
        index names but no shard holds is a marked row. What the report leaves out (bytes
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

        The hook for a "Run" tab: `explore(source, run=True)` puts it in a second tab and only
        builds it when that tab opens, so exploring never loads a model.
        """
        if self._run_demo is None:
            from ..demo.widget import RunDemo

            self._run_demo = RunDemo(self.checkpoint.source)
        return self._run_demo


def explore(source: Any, run: bool = False, **kwargs: Any):
    """Explore a checkpoint path, URL or `Checkpoint`. With `run=True`, adds a lazy "Run" tab."""
    explorer = Explorer(source, **kwargs)
    if not run:
        return explorer
    import ipywidgets

    holder = ipywidgets.VBox([ipywidgets.HTML("Open this tab to load the model and run it.")])
    tabs = ipywidgets.Tab(children=[explorer, holder])
    tabs.set_title(0, "Explore")
    tabs.set_title(1, "Run")

    def opened(change) -> None:
        if change["new"] == 1 and holder.children and not hasattr(holder, "_loaded"):
            holder._loaded = True
            try:
                holder.children = [explorer.run_demo()]
            except Exception as e:  # show why, in the tab
                holder.children = [ipywidgets.HTML(f"The demo cannot run: {type(e).__name__}",
                                                   tooltip=str(e))]

    tabs.observe(opened, names="selected_index")
    tabs.explorer = explorer
    return tabs
