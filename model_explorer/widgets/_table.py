"""The tensor table: sorted and filtered on the kernel side, sent a window of rows at a time.

Tensors a shard index names but no shard holds, and unused second copies, are rows too,
marked with their note ("missing: shard model-00023-of-00050.safetensors"); the filter
matches the note as well as the name. They never enter `ckpt.tensors`.
"""

from __future__ import annotations

import os

from ..checkpoint import Checkpoint
from ..records import IndexMismatch
from ._treetensors import _nbytes


class _MarkedRow:
    """A table row for a tensor that is not in `ckpt.tensors`: missing, or an unused copy."""

    __slots__ = ("name", "label", "shape", "numel", "file", "offset", "length", "quant", "mark",
                 "stored_bytes")

    def __init__(self, m: IndexMismatch) -> None:
        info = m.info
        self.name, self.mark = m.name, m
        self.label = info.label if info else ""
        self.shape = tuple(info.shape) if info else ()
        self.numel = info.numel if info else 0
        self.file = (info.file if info else m.file) or ""
        self.offset = info.offset if info else -1
        self.length = info.length if info else 0
        self.stored_bytes = info.stored_bytes if info else 0
        self.quant = None


class TensorTable:
    def __init__(self, ckpt: Checkpoint) -> None:
        self.infos = list(ckpt.tensors.values())
        marks = ckpt.index_mismatches
        # Orphans and names the index gives twice are real tensors: their rows carry the note.
        self.notes = {m.name: m for m in marks if m.kind in ("orphan", "named_twice")
                      and m.name in ckpt.tensors}
        self.infos += [_MarkedRow(m) for m in marks if m.kind in ("missing", "duplicate")]
        self._orders: dict[tuple, list[int]] = {}

    def _key(self, column: str):
        """Sort key over row indices for a column; None keeps file order ("index")."""
        infos = self.infos
        keys = {
            "name": lambda i: infos[i].name,
            "dtype": lambda i: (infos[i].label, infos[i].name),
            "shape": lambda i: (len(infos[i].shape), tuple(infos[i].shape)),
            "params": lambda i: infos[i].numel,
            "bytes": lambda i: _nbytes(infos[i]),
            "file": lambda i: (infos[i].file, infos[i].offset),
        }
        keys["offset"] = keys["file"]  # offsets only compare within one file
        return keys.get(column)

    def _text(self, i: int) -> str:
        """What the filter searches: the name, and the note of a marked row."""
        t = self.infos[i]
        mark = getattr(t, "mark", None) or self.notes.get(t.name)
        return f"{t.name}\n{mark.note}".lower() if mark else t.name.lower()

    def order(self, column: str, desc: bool, query: str) -> list[int]:
        key = (column, desc, query.lower())
        if key not in self._orders:
            if len(self._orders) > 8:
                self._orders.clear()
            q = query.lower()
            idx = [i for i in range(len(self.infos)) if q in self._text(i)] if q else list(range(len(self.infos)))
            sort_key = self._key(column)
            if sort_key is not None:
                idx.sort(key=sort_key, reverse=desc)
            elif desc:
                idx.reverse()
            self._orders[key] = idx
        return self._orders[key]

    def row(self, i: int) -> dict:
        t = self.infos[i]
        out = {"name": t.name, "dtype": t.label, "shape": list(t.shape), "params": t.numel,
               "bytes": _nbytes(t), "file": os.path.basename(t.file), "path": t.file,
               "offset": t.offset, "length": t.length}
        mark = getattr(t, "mark", None) or self.notes.get(t.name)
        if mark is not None:
            out["mark"], out["note"] = mark.kind, mark.note
            if mark.kind == "missing":  # no bytes of its own: it selects its entry in the index
                out.update(file=os.path.basename(mark.file or ""), path=mark.file,
                           offset=mark.offset, length=mark.length, params=None, bytes=None)
        return out

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
