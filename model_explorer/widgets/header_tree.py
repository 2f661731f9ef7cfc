"""`mx.HeaderTree(source)`: the collapsible header tree with search, on its own."""

from __future__ import annotations

from ._base import BaseView


class HeaderTree(BaseView):
    """Standalone view; takes a path, URL or Checkpoint like `mx.explore`."""

    _view = "tree"
