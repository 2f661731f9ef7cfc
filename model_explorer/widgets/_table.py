"""The tensor table: sorted and filtered on the kernel side, sent a window of rows at a time."""

from __future__ import annotations

import os

from ..checkpoint import Checkpoint
from ._tree import _nbytes

COLUMNS = ("name", "dtype", "shape", "params", "bytes", "file", "offset")


class TensorTable:
    def __init__(self, ckpt: Checkpoint) -> None:
        self.infos = list(ckpt.tensors.values())
        self.many_files = len(ckpt.files) > 1
        self._orders: dict[tuple, list[int]] = {}

    def _key(self, column: str):
        infos = self.infos
        if column == "dtype":
            return lambda i: (infos[i].kind, infos[i].name)
        if column == "shape":
            return lambda i: (len(infos[i].shape), tuple(infos[i].shape))
        if column == "params":
            return lambda i: infos[i].numel
        if column == "bytes":
            return lambda i: _nbytes(infos[i])
        if column == "file":
            return lambda i: (infos[i].file, infos[i].offset)
        if column == "offset":
            return lambda i: (infos[i].file, infos[i].offset)
        return None  # name: file order is the natural order; sorted on request

    def order(self, column: str, desc: bool, query: str) -> list[int]:
        key = (column, desc, query.lower())
        if key not in self._orders:
            if len(self._orders) > 8:
                self._orders.clear()
            q = query.lower()
            idx = [i for i, t in enumerate(self.infos) if q in t.name.lower()] if q else list(range(len(self.infos)))
            if column == "name":
                idx.sort(key=lambda i: self.infos[i].name, reverse=desc)
            elif column in COLUMNS and column != "index":
                idx.sort(key=self._key(column), reverse=desc)
            elif desc:
                idx.reverse()
            self._orders[key] = idx
        return self._orders[key]

    def row(self, i: int) -> dict:
        t = self.infos[i]
        return {"name": t.name, "dtype": t.kind, "shape": list(t.shape), "params": t.numel,
                "bytes": _nbytes(t), "file": os.path.basename(t.file), "path": t.file,
                "offset": t.offset, "length": t.length}

    def window(self, column: str, desc: bool, query: str, start: int, count: int,
               locate: str | None = None) -> dict:
        idx = self.order(column or "index", bool(desc), query or "")
        index = None
        if locate:
            index = next((k for k, i in enumerate(idx) if self.infos[i].name == locate), None)
            if index is not None and not (start <= index < start + count):
                start = max(0, index - count // 2)
        start = max(0, min(start, len(idx)))
        return {"total": len(idx), "start": start, "index": index,
                "rows": [self.row(i) for i in idx[start:start + count]]}
