"""`mx.TensorHistogram(source, tensor=None)`: one tensor's histogram and statistics, on its own."""

from __future__ import annotations

from typing import Any

from ._base import BaseView


class TensorHistogram(BaseView):
    """A tensor picker, its histogram (linear/log), statistics and block-scale histogram."""

    _view = "histogram"

    def __init__(self, source: Any, tensor: str | None = None, **kwargs: Any) -> None:
        super().__init__(source, **kwargs)
        name = tensor or next(iter(self.checkpoint.tensors), None)
        if name is not None:
            sel = self._tensor_selection(name)
            if sel is None:
                raise KeyError(f"No tensor named {name!r}; the checkpoint has "
                               f"{len(self.checkpoint.tensors)} tensors.")
            self.selection = sel
