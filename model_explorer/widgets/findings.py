"""`mx.Findings(source)`: the findings, grouped by severity, on its own."""

from __future__ import annotations

from ._base import BaseView


class Findings(BaseView):
    """Standalone view; takes a path, URL or Checkpoint like `mx.explore`."""

    _view = "findings"
