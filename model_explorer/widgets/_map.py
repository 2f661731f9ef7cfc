"""The file map: each file a bar with its header and data regions and its tensors as segments.

At most BINS segments per file travel to the browser: a shard with thousands of tensors is
binned by byte position, each bin carrying its dominant dtype and layer.
"""

from __future__ import annotations

import bisect
import os
import re
from collections import Counter

from ..checkpoint import Checkpoint

BINS = 128
# Segments for all files together: many shards get fewer bins each (163 shards: 49).
SEGMENT_BUDGET = 8000
_LAYER = re.compile(r"\.(\d+)\.")
MARK_CODES = {"orphan_tensor": "orphan", "duplicate_tensor": "duplicate", "missing_tensor": "missing"}


def layer_of(name: str) -> int:
    m = _LAYER.search(f".{name}.")
    return int(m.group(1)) if m else -1


class FileMap:
    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt
        self.by_file: dict[str, list] = {}
        # Unused second copies are drawn where they lie, marked, beside the tensors in use.
        copies = [m.info for m in ckpt.index_mismatches if m.kind == "duplicate" and m.info]
        for t in [*ckpt.tensors.values(), *copies]:
            self.by_file.setdefault(t.file, []).append(t)
        for ts in self.by_file.values():
            ts.sort(key=lambda t: t.offset)
        self._starts = {f: [t.offset for t in ts] for f, ts in self.by_file.items()}

    def tensor_at(self, file: str, offset: int) -> str | None:
        info = self.info_at(file, offset)
        return info.name if info else None

    def info_at(self, file: str, offset: int):
        """The tensor (or unused copy) whose bytes start last at or before `offset`."""
        ts = self.by_file.get(file, [])
        i = bisect.bisect_right(self._starts.get(file, []), offset) - 1
        if 0 <= i < len(ts):
            return ts[i]
        return ts[0] if ts else None

    def payload(self, segment_budget: int = SEGMENT_BUDGET) -> dict:
        ckpt = self.ckpt
        marks: dict[str, dict[str, str]] = {}
        # Missing tensors point into the index; the shard rows say which bar they belong to.
        missing = {row["file"]: row.get("missing_tensors", []) for row in ckpt.details.get("shards") or []}
        for f in ckpt.findings:
            code = MARK_CODES.get(f.code)
            if code and code != "missing" and f.tensor:
                marks.setdefault(f.file or "", {})[f.tensor] = code
        for m in ckpt.index_mismatches:  # the index's view: which copy is unused, or unlisted
            if m.kind in ("orphan", "duplicate") and m.file:
                marks.setdefault(m.file, {})[m.name] = m.kind
        notes = {row["file"]: next((m.note for m in ckpt.index_mismatches if m.kind == "missing"
                                    and m.shard == row.get("name")), None)
                 for row in ckpt.details.get("shards") or [] if row.get("missing_tensors")}
        rows = ckpt.details.get("shards") or [
            {"file": f, "name": os.path.basename(f), "size": ckpt.sizes.get(f, 0), "missing": False}
            for f in ckpt.files]
        # Every dtype is in the legend, also those that never dominate a bin (the small F32
        # norms between big quantized matrices); most common first.
        dtypes: list[str] = list(ckpt.dtype_mix())
        files = []
        bins = max(16, min(BINS, segment_budget // max(1, len(rows))))
        for row in rows:
            file = row["file"]
            size = ckpt.sizes.get(file, row.get("size", 0)) or 0
            fdet = (ckpt.details.get("files") or {}).get(file, {})
            data_start = row.get("data_start", fdet.get("header_end"))
            ts = self.by_file.get(file, [])
            if data_start is None:
                data_start = ts[0].offset if ts else size
            files.append({
                "file": file, "name": row.get("name") or os.path.basename(file), "size": size,
                "data_start": data_start, "missing": bool(row.get("missing")),
                "tensors": len(ts), "missing_tensors": missing.get(file, [])[:20],
                "missing_count": len(missing.get(file, [])), "missing_note": notes.get(file),
                "segments": self._segments(ts, marks.get(file, {}), dtypes, bins),
            })
        return {"files": files, "dtypes": dtypes, "total": ckpt.total_size}

    @staticmethod
    def _segments(ts, marks: dict[str, str], dtypes: list[str], bins: int) -> list[list]:
        """[offset, length, dtype index, layer, label, mark] per tensor, or per bin of tensors
        (label "N tensors from NAME", dominant dtype and layer) when a file holds more than `bins`."""
        index = {d: i for i, d in enumerate(dtypes)}

        def di(kind: str) -> int:
            if kind not in index:
                index[kind] = len(dtypes)
                dtypes.append(kind)
            return index[kind]

        if len(ts) <= bins:
            return [[t.offset, t.length, di(t.label), layer_of(t.name), t.name, marks.get(t.name)]
                    for t in ts]
        out = []
        per = -(-len(ts) // bins)
        for lo in range(0, len(ts), per):
            chunk = ts[lo:lo + per]
            kind = Counter(t.label for t in chunk).most_common(1)[0][0]
            start = chunk[0].offset
            end = max(t.offset + t.length for t in chunk)
            mark = next((marks[t.name] for t in chunk if t.name in marks), None) if marks else None
            out.append([start, end - start, di(kind), layer_of(chunk[len(chunk) // 2].name),
                        f"{len(chunk)} tensors from {chunk[0].name}", mark])
        return out
