"""`mx.HexDump(source)`: an annotated hexdump with step-through, on its own."""

from __future__ import annotations

from typing import Any

from ._base import BaseView


class HexDump(BaseView):
    """Standalone view; takes a path, URL or Checkpoint like `mx.explore`."""

    def __init__(self, source: Any, **kwargs: Any) -> None:
        super().__init__(source, view="hexdump", **kwargs)
