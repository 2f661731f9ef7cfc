"""Where a run result finds its widget without importing upward: the ground-level registry
(model_explorer/viewers.py) under the kind "runs".

The "Compare runs" widget (widgets/runs_view.py RunsView) sits in the views layer, above the
runs it draws, so it names itself there when it is imported; the public face imports it together
with `mx.trace` and `mx.compare_runs` (model_explorer/__init__.py), so `d.show()` just works.
"""

from __future__ import annotations

from ..viewers import register, show

__all__ = ["register", "show"]
