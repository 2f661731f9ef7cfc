"""The tensor part of the header tree, made from the columns of `ckpt.tensors`.

Tensors are grouped by dotted name prefix (model > layers > 0 > self_attn > q_proj.weight).
A group holds the row numbers of its members; it is split when opened, and a tensor's node
is made from the map's columns (name, dtype, shape, header entry) without building its
`TensorInfo`, so showing and opening the tree of 90,000 tensors builds no record. Search
runs over the column of lowered names and makes nodes for its hits only.
"""

from __future__ import annotations

import re

import numpy as np

from ..checkpoint import Checkpoint, TensorInfo
from ..records import IndexMismatch
from ._treeparts import Node

MAX_MATCHES = 2000
MARKED_KINDS = ("missing", "duplicate")
_INT = re.compile(r"^\d+$")


def _split(name: str) -> tuple[list[str], str]:
    """Group path and leaf label of a tensor name.

    The last two components stay together ("q_proj.weight") so leaves read naturally,
    unless the second-to-last is a layer number ("layers.0.w" -> layer 0 > "w").
    """
    parts = name.split(".")
    keep = 2 if len(parts) > 2 and not _INT.match(parts[-2]) else 1
    if len(parts) <= keep:
        return [], name
    return parts[:-keep], ".".join(parts[-keep:])


def marked(ckpt: Checkpoint) -> list[IndexMismatch]:
    """Index entries without a tensor of their own: missing ones and unused second copies."""
    return [m for m in ckpt.index_mismatches if m.kind in MARKED_KINDS]


def _nbytes(info: TensorInfo | IndexMismatch) -> int:
    if isinstance(info, IndexMismatch):
        return _nbytes(info.info) if info.info is not None else 0
    return info.stored_bytes  # a Hub-quantized layer lists its main component among its parts


def count_text(n: int, missing: int) -> str:
    """"400 tensors", "1 tensor", "400 tensors (400 missing)"."""
    return f"{n} tensor{'' if n == 1 else 's'}" + (f" ({missing} missing)" if missing else "")


class TensorNames:
    """Every name the tensor part shows, by row: the checkpoint's tensors in order, then the
    index entries without a tensor of their own (missing ones, unused copies)."""

    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt
        tensors = ckpt.tensors
        self.marks = marked(ckpt)
        self.names: list[str] = [*tensors.keys(), *(m.name for m in self.marks)]
        self.n_tensors = len(tensors)
        self.notes = {m.name: m.note for m in ckpt.index_mismatches if m.kind in ("orphan", "named_twice")}
        nbytes = tensors.stored_bytes() if hasattr(tensors, "stored_bytes") else \
            np.array([t.stored_bytes for t in tensors.values()], dtype=np.int64)
        # Python lists: groups are summed a few members at a time, where numpy's call costs more
        self.nbytes: list[int] = [*nbytes.tolist(), *(_nbytes(m) for m in self.marks)]
        self.missing = {self.n_tensors + i for i, m in enumerate(self.marks) if m.kind == "missing"}
        self._depths: list[int | None] = [None] * len(self.names)
        self._lower: list[str] | None = None
        self._entries: dict[str, dict[str, tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self.names)

    # -- groups ---------------------------------------------------------------------------

    def group(self, label: str, path: str, rows: list[int], depth: int) -> Node:
        """A group of rows whose names share `path`; split further when opened."""
        absent = sum(1 for r in rows if r in self.missing) if self.missing else 0
        node = Node(label, "group", count_text(len(rows), absent), count=len(rows),
                    nbytes=sum(map(self.nbytes.__getitem__, rows)), search=path or label)
        node.lazy = lambda: self._children(path, rows, depth)
        return node

    def _prefix_depth(self, r: int) -> int:
        """How many group levels row `r`'s name sits under (len of `_split(name)[0]`), worked
        out the first time it is asked: a search splits only its hits."""
        d = self._depths[r]
        if d is None:
            d = self._depths[r] = len(_split(self.names[r])[0])
        return d

    def _children(self, path: str, rows: list[int], depth: int) -> list[Node]:
        names, depth_of = self.names, self._prefix_depth
        groups: dict[str, list[int]] = {}
        out: list[Node | str] = []
        for r in rows:
            if depth_of(r) <= depth:
                out.append(self.leaf(r))
                continue
            key = names[r].split(".", depth + 1)[depth]
            members = groups.get(key)
            if members is None:
                members = groups[key] = []
                out.append(key)
            members.append(r)
        nodes = [self.group(x, f"{path}.{x}" if path else x, groups[x], depth + 1)
                 if isinstance(x, str) else x for x in out]
        if nodes and all(_INT.match(n.label) for n in nodes):
            nodes.sort(key=lambda n: int(n.label))
        return nodes

    # -- leaves ---------------------------------------------------------------------------

    def leaf(self, r: int) -> Node:
        name = self.names[r]
        label = _split(name)[1]
        if r >= self.n_tensors:  # where it shows: its index entry, or the unused copy
            m = self.marks[r - self.n_tensors]
            copy = m.info
            return Node(label, m.kind, m.note, tensor=m.name,
                        dtype=copy.label if copy else None, shape=list(copy.shape) if copy else None,
                        nbytes=self.nbytes[r] if copy else None, file=m.file, offset=m.offset,
                        length=m.length, search=f"{m.name} {m.note}")
        tensors = self.ckpt.tensors
        at = tensors.row_of(name) if hasattr(tensors, "row_of") else None
        if at is not None:  # never built: read the columns
            table, i = at
            a, b = int(table.dim_start[i]), int(table.dim_start[i + 1])
            kind, shape, file = table.dtype_names[table.codes[i]], table.dims[a:b].tolist(), table.file
            entry = (int(table.info_at[i]), int(table.info_len[i]))
            data = (int(table.offset[i]), int(table.length[i]))
        else:
            info = tensors[name]
            kind, shape, file = info.label, list(info.shape), info.file
            span = info.extra.get("info_span") if info.extra else None
            entry = tuple(span) if span else None
            data = (info.offset, info.length)
        off, length = entry or self._entry_in_spans(file, name) or data
        return Node(label, "tensor", self.notes.get(name), tensor=name, dtype=kind, shape=shape,
                    nbytes=self.nbytes[r], file=file, offset=off, length=length, search=name)

    def _entry_in_spans(self, file: str, name: str) -> tuple[int, int] | None:
        """Where a record that does not carry its header entry is described (so selecting it
        shows the entry): the file's tensor_info spans, read once per file."""
        if file not in self._entries:
            found: dict[str, tuple[int, int]] = {}
            for s in self.ckpt.spans_for(file):
                if s.kind == "tensor_info" and s.tensor and s.tensor not in found:
                    found[s.tensor] = (s.offset, s.length)
            self._entries[file] = found
        return self._entries[file].get(name)

    # -- search ---------------------------------------------------------------------------

    def search(self, query: str, limit: int = MAX_MATCHES) -> tuple[list[int], int]:
        """Rows whose lowered name (with its note) holds `query` (lowered): the first `limit`
        in order, and how many there are in all. One `in` per name over the lowered column
        (about 10 ms for 90,000 names, however many match); nodes are made for hits only."""
        hits = [r for r, text in enumerate(self._lowered()) if query in text]
        return hits[:limit], len(hits)

    def _lowered(self) -> list[str]:
        """Every row's name (with its note: "missing: shard ...") lowered, made once."""
        if self._lower is None:
            notes = self.notes
            self._lower = [(f"{n}\n{notes[n]}" if n in notes else n).lower()
                           for n in self.names[:self.n_tensors]]
            self._lower += [f"{m.name}\n{m.note}".lower() for m in self.marks]
        return self._lower
