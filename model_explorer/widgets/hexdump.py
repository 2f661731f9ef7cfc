"""`mx.HexDump(source)`: an annotated hexdump with step-through, on its own."""

from __future__ import annotations

from ._base import BaseView


class HexDump(BaseView):
    """Standalone view; takes a path, URL or Checkpoint like `mx.explore`."""

    _view = "hexdump"
