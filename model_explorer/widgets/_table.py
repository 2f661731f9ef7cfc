"""The tensor table: sorted and filtered on the kernel side, sent a window of rows at a time."""

from __future__ import annotations

import os

from ..checkpoint import Checkpoint
from ._tree import _nbytes


class TensorTable:
    def __init__(self, ckpt: Checkpoint) -> None:
        self.infos = list(ckpt.tensors.values())
        self._orders: dict[tuple, list[int]] = {}

    def _key(self, column: str):
        """Sort key over row indices for a column; None keeps file order ("index")."""
        infos = self.infos
        keys = {
            "name": lambda i: infos[i].name,
            "dtype": lambda i: (infos[i].kind, infos[i].name),
            "shape": lambda i: (len(infos[i].shape), tuple(infos[i].shape)),
            "params": lambda i: infos[i].numel,
            "bytes": lambda i: _nbytes(infos[i]),
            "file": lambda i: (infos[i].file, infos[i].offset),
        }
        keys["offset"] = keys["file"]  # offsets only compare within one file
        return keys.get(column)

    def order(self, column: str, desc: bool, query: str) -> list[int]:
        key = (column, desc, query.lower())
        if key not in self._orders:
            if len(self._orders) > 8:
                self._orders.clear()
            q = query.lower()
            idx = [i for i, t in enumerate(self.infos) if q in t.name.lower()] if q else list(range(len(self.infos)))
            sort_key = self._key(column)
            if sort_key is not None:
                idx.sort(key=sort_key, reverse=desc)
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
