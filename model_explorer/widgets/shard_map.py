"""`mx.ShardMap(source)`: the file map: one bar per file, tensors as segments, on its own."""

from __future__ import annotations

from ._base import BaseView


class ShardMap(BaseView):
    """Standalone view; takes a path, URL or Checkpoint like `mx.explore`."""

    _view = "shardmap"
