"""Sharded checkpoints: an index JSON that maps tensor names to shard files.

Findings about the index point at the entry in the index file; findings about a shard's
tensor point at that tensor's entry in the shard's header.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import sources
from ..limits import MAX_INDEX_BYTES
from ..records import CheckpointRecord, IndexMismatch
from ..spans import Finding
from ..tensormap import TensorMap
from .jsonpos import DuplicateKeys, JSONPositionError, members


def _finding(code: str, msg: str, file: str | None, tensor: str | None = None,
             where: tuple[int | None, int | None] = (None, None)) -> Finding:
    return Finding.of(code, msg, where[0], where[1], tensor, file)


class _IndexPositions:
    """Byte ranges of the index's entries, found only when a finding needs one (they are rare)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._entries: dict[tuple[str, str], tuple[int, int]] | None = None

    def __call__(self, section: str, key: str) -> tuple[int | None, int | None]:
        if self._entries is None:
            self._entries = {}
            latin = self._text.encode("utf-8").decode("latin-1")  # one character per byte
            try:
                for top in members(latin)[0]:
                    if top.key in ("weight_map", "metadata") and isinstance(top.value, (dict, DuplicateKeys)):
                        for m in members(latin, top.value_start)[0]:
                            self._entries.setdefault((top.key, m.key), (m.key_start, m.value_end - m.key_start))
            except JSONPositionError:
                pass
        return self._entries.get((section, key), (None, None))


def _entry_of(result, name: str) -> tuple[int | None, int | None]:
    """Where a tensor's entry sits in its shard's header."""
    info = result.tensors.get(name)
    span = info.extra.get("info_span") if info is not None else None
    return span if span else (None, None)


def _plain_relative(shard: Any) -> bool:
    """A file name, or a path under the index's folder: no absolute paths, no '..'."""
    if not isinstance(shard, str) or not shard or "\\" in shard or shard.startswith("/"):
        return False
    parts = shard.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def read_index(index_path: str, ckpt: CheckpointRecord,
               read_file: Callable[[str], Any]) -> None:
    """Open every shard an index names and check the index against what they hold.

    `read_file(path)` reads one shard and merges it into `ckpt`, returning its FileResult.
    """
    text, problem = sources.read_text(index_path, MAX_INDEX_BYTES)
    ckpt.details["index_file"] = index_path
    if problem or text is None:
        ckpt.findings.append(_finding("bad_index", f"The index file {problem}.", index_path))
        return
    repeated: dict[int, list[tuple[str, Any]]] = {}
    try:
        index = json.loads(text, object_pairs_hook=lambda pairs: _object(pairs, repeated))
    except json.JSONDecodeError as e:
        at = len(text[:e.pos].encode("utf-8"))
        ckpt.findings.append(_finding("bad_index", f"The index is not valid JSON: {e.msg} "
                                      f"at byte {at}.", index_path, where=(at, 1)))
        return
    except RecursionError:
        ckpt.findings.append(_finding("bad_index", "The index nests JSON too deeply to "
                                      "read.", index_path))
        return
    except ValueError as e:  # an integer of more than 4300 digits
        ckpt.findings.append(_finding("bad_index", f"The index cannot be read: "
                                      f"{str(e).split(':')[0]}.", index_path))
        return
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        ckpt.findings.append(_finding("bad_index", "The index has no \"weight_map\" object "
                                      "mapping tensor names to shard files.", index_path))
        return
    where = _IndexPositions(text)
    ckpt.details["index"] = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
    ckpt.details["indexed_tensors"] = len(weight_map)
    marks: list[IndexMismatch] = []
    ckpt.details["index_mismatches"] = marks

    def missing(name: str, shard: Any, note: str) -> None:
        at, length = where("weight_map", name)
        marks.append(IndexMismatch(name, "missing", str(shard), note, index_path, at, length))

    _named_twice(repeated.get(id(weight_map), []), weight_map, ckpt, index_path, where, marks)
    base = sources.dirname(index_path)
    listing = _Listing(weight_map)
    if listing.counts is None:  # some shard name is not a plain file name: judge each entry
        expected: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            # a shard name repeats for every tensor it holds: judge each name once
            if not (type(shard) is str and shard in expected) and not _plain_relative(shard):
                ckpt.findings.append(_finding(
                    "bad_shard_name", f"The index maps {name!r} to {shard!r}, which is "
                    "not a file name under the index's folder; it is ignored.", index_path, name,
                    where("weight_map", name)))
                missing(name, shard, "missing: the index names no valid shard file")
                continue
            expected.setdefault(shard, []).append(name)
        listing.set(expected)

    shard_rows = []
    # The first copy of a name is the one `ckpt.tensors` holds until the index names another:
    # its file tells the shard, so no per-name table of owners is kept.
    by_file: dict[str, tuple[str, TensorMap]] = {}
    copies: dict[str, list[tuple[str, TensorMap]]] = {}  # stored twice or unlisted: each copy
    for shard, count in (listing.counts or {}).items():  # set above when it was None
        path = sources.join(base, shard)
        row: dict[str, Any] = {"file": path, "name": shard, "expected": count, "missing": False, "size": 0,
               "missing_tensors": []}
        shard_rows.append(row)
        if not sources.exists(path):
            names = listing.names(shard)
            row["missing"] = True
            row["missing_tensors"] = list(names)
            for name in names:
                missing(name, shard, f"missing: shard {shard}")
            ckpt.findings.append(_finding(
                "missing_shard", f"The index names the shard {shard!r} for {len(names)} "
                f"tensors (first: {names[0]!r}), but the file does not exist. Loading fails with "
                "missing keys.", index_path, names[0], where("weight_map", names[0])))
            continue
        before = len(ckpt.tensors)
        try:
            result = read_file(path)
        except OSError as e:
            names = listing.names(shard)
            row["missing"] = True
            row["missing_tensors"] = list(names)
            for name in names:
                missing(name, shard, f"missing: shard {shard} cannot be read")
            ckpt.findings.append(_finding("unreadable_shard", f"The shard {shard!r} exists "
                                          f"but cannot be read: {e}.", path, names[0]))
            continue
        row["size"] = result.size
        row["data_start"] = result.data_start
        held = result.tensors if isinstance(result.tensors, TensorMap) else TensorMap(result.tensors)
        keys = held.keys()
        # Name by name in Python only where something is wrong. A clean shard holds as many
        # tensors as the index gives it, each one mapped to it: two checks in C.
        mine = by_file[result.file] = (shard, held)
        clean = len(held) == count and dict.fromkeys(keys, shard).items() <= weight_map.items()
        for name in [] if clean else [n for n in listing.names(shard) if n not in keys]:
            row["missing_tensors"].append(name)
            missing(name, shard, f"missing: not in shard {shard}")
            ckpt.findings.append(_finding(
                "missing_tensor", f"The index says {name!r} is in {shard!r}, but that "
                "shard has no such tensor.", index_path, name, where("weight_map", name)))
        # the checkpoint grew by every name the shard holds unless some were read before
        grew = len(ckpt.tensors) - before
        twice = [n for n in keys if by_file.get(ckpt.tensors.file_of(n)) is not mine] \
            if grew != len(held) else []
        unlisted = [] if clean else [n for n in keys if weight_map.get(n) != shard]
        for name in twice:
            # the first copy: listed in `copies` already when it was met twice before
            first = copies[name][0] if name in copies else by_file[ckpt.tensors.file_of(name)]
            copies.setdefault(name, [first]).append(mine)
            if weight_map.get(name) == shard:
                ckpt.tensors.take(held, name)  # the copy the index names wins
            ckpt.findings.append(_finding(
                "duplicate_tensor", f"{name!r} is stored in both {first[0]!r} and "
                f"{shard!r}; which copy a loader keeps depends on the order it reads them.",
                path, name, _entry_of(result, name)))
        for name in unlisted:
            if name not in copies:
                copies[name] = [mine]
            mapped = weight_map.get(name)
            says = f"maps it to {mapped!r}" if isinstance(mapped, str) else "does not list it"
            ckpt.findings.append(_finding(
                "orphan_tensor", f"{shard!r} holds {name!r}, but the index {says}; "
                "loaders that follow the index ignore this copy.", path, name, _entry_of(result, name)))
    ckpt.details["shards"] = shard_rows
    _mark_copies(ckpt, weight_map, copies, marks)
    if not any(row["missing"] for row in shard_rows):
        _check_total_size(index, ckpt, index_path, where)


class _Listing:
    """The index's tensors per shard: counted in C; listed by name only when a shard needs it
    (missing, unreadable, or not holding what the index says), then all in one pass."""

    def __init__(self, weight_map: dict) -> None:
        self._map = weight_map
        self._names: dict[str, list[str]] | None = None
        try:
            counts = Counter(weight_map.values())
        except TypeError:  # a list or an object as a shard name
            counts = None
        ok = counts is not None and all(type(s) is str and _plain_relative(s) for s in counts)
        self.counts: dict[str, int] | None = counts if ok else None

    def set(self, expected: dict[str, list[str]]) -> None:
        self._names = expected
        self.counts = {shard: len(names) for shard, names in expected.items()}

    def names(self, shard: str) -> list[str]:
        if self._names is None:
            self._names = {}
            for name, s in self._map.items():
                self._names.setdefault(s, []).append(name)
        return self._names.get(shard, [])


def _object(pairs: list[tuple[str, Any]], repeated: dict[int, list[tuple[str, Any]]]) -> dict:
    """A JSON object as json.loads builds it (the last value of a repeated key wins), keeping
    the repeated keys' earlier values aside, by the id of the dict they belong to."""
    d = dict(pairs)
    if len(d) < len(pairs):
        seen: set[str] = set()
        for key, value in reversed(pairs):  # the last one is the one kept
            if key in seen:
                repeated.setdefault(id(d), []).append((key, value))
            seen.add(key)
    return d


def _named_twice(earlier: list[tuple[str, Any]], weight_map: dict, ckpt: CheckpointRecord,
                 index_path: str, where: _IndexPositions, marks: list[IndexMismatch]) -> None:
    for name, shard in reversed(earlier):
        kept = weight_map.get(name)
        at, length = where("weight_map", name)  # the first entry of the name
        ckpt.findings.append(_finding(
            "index_names_twice", f"The index names {name!r} more than once: first in "
            f"{shard!r}, last in {kept!r}. JSON readers keep the last one, so {kept!r} is used.",
            index_path, name, (at, length)))
        marks.append(IndexMismatch(name, "named_twice", str(shard), f"named twice in the index: "
                                   f"also mapped to {shard}; {kept} is used", index_path, at, length))


def _mark_copies(ckpt: CheckpointRecord, weight_map: dict, copies: dict[str, list],
                 marks: list[IndexMismatch]) -> None:
    """Second copies of a tensor and unlisted tensors. The copy in `ckpt.tensors` is the one in
    the shard the index names, else the first one read. In the order the names were first read."""
    position = {name: i for i, name in enumerate(ckpt.tensors)} if copies else {}
    for name in sorted(copies, key=position.__getitem__):
        found = copies[name]
        mapped = weight_map.get(name)
        used = mapped if any(shard == mapped for shard, _ in found) else found[0][0]
        for shard, held in found:
            info = held[name]
            if shard == used:
                if mapped != shard:
                    note = ("orphan: not in the index" if mapped is None
                            else f"orphan: the index maps it to {mapped}")
                    marks.append(IndexMismatch(name, "orphan", shard, note, info.file, info.offset,
                                               info.length))
                continue
            marks.append(IndexMismatch(name, "duplicate", shard, f"duplicate: an unused copy in "
                                       f"{shard}", info.file, info.offset, info.length, info))


def _check_total_size(index: dict, ckpt: CheckpointRecord, index_path: str, where: _IndexPositions) -> None:
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return
    actual = ckpt.tensors.total_length()
    if not isinstance(total, (int, float)) or total != actual:  # JSON allows Infinity and NaN
        ckpt.findings.append(_finding(
            "total_size_mismatch", f"The index's metadata.total_size is {total!r}, "
            f"but the tensors it lists take {actual} bytes.", index_path,
            where=where("metadata", "total_size")))
