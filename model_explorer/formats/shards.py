"""Sharded checkpoints: an index JSON that maps tensor names to shard files."""

from __future__ import annotations

import json
from typing import Any, Callable

from .. import sources
from ..checkpoint import Checkpoint
from ..spans import Finding

MAX_INDEX_BYTES = 256 * 1024 * 1024


def _finding(sev: str, code: str, msg: str, file: str | None, tensor: str | None = None) -> Finding:
    return Finding(sev, code, msg, None, None, tensor, file)


def read_index(index_path: str, ckpt: Checkpoint,
               read_file: Callable[[str], Any]) -> None:
    """Open every shard an index names and check the index against what they hold.

    `read_file(path)` reads one shard and merges it into `ckpt`, returning its FileResult.
    """
    text, problem = sources.read_text(index_path, MAX_INDEX_BYTES)
    ckpt.details["index_file"] = index_path
    if problem:
        ckpt.findings.append(_finding("error", "bad_index", f"The index file {problem}.", index_path))
        return
    try:
        index = json.loads(text)
    except json.JSONDecodeError as e:
        ckpt.findings.append(_finding("error", "bad_index", f"The index is not valid JSON: {e.msg} "
                                      f"at character {e.pos}.", index_path))
        return
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        ckpt.findings.append(_finding("error", "bad_index", "The index has no \"weight_map\" object "
                                      "mapping tensor names to shard files.", index_path))
        return
    ckpt.details["index"] = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
    base = sources.dirname(index_path)
    expected: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or "/" in shard or "\\" in shard or shard in (".", ".."):
            ckpt.findings.append(_finding("error", "bad_shard_name", f"The index maps {name!r} to "
                                          f"{shard!r}, which is not a plain file name beside the "
                                          "index; it is ignored.", index_path, name))
            continue
        expected.setdefault(shard, []).append(name)

    shard_rows = []
    owner: dict[str, str] = {}
    for shard, names in expected.items():
        path = sources.join(base, shard)
        row = {"file": path, "name": shard, "expected": len(names), "missing": False, "size": 0}
        shard_rows.append(row)
        if not sources.exists(path):
            row["missing"] = True
            ckpt.findings.append(_finding(
                "error", "missing_shard", f"The index names the shard {shard!r} for {len(names)} "
                f"tensors (first: {names[0]!r}), but the file does not exist. Loading fails with "
                "missing keys.", path, names[0]))
            continue
        result = read_file(path)
        row["size"] = result.size
        row["data_start"] = result.data_start
        found = set(result.tensors)
        for name in names:
            if name not in found:
                ckpt.findings.append(_finding(
                    "error", "missing_tensor", f"The index says {name!r} is in {shard!r}, but that "
                    "shard has no such tensor.", path, name))
        listed = set(names)
        for name in result.tensors:
            if name in owner:
                ckpt.findings.append(_finding(
                    "error", "duplicate_tensor", f"{name!r} is stored in both {owner[name]!r} and "
                    f"{shard!r}; which copy a loader keeps depends on the order it reads them.",
                    path, name))
            else:
                owner[name] = shard
            if name not in listed:
                mapped = weight_map.get(name)
                where = f"maps it to {mapped!r}" if isinstance(mapped, str) else "does not list it"
                ckpt.findings.append(_finding(
                    "warning", "orphan_tensor", f"{shard!r} holds {name!r}, but the index {where}; "
                    "loaders that follow the index ignore this copy.", path, name))
    ckpt.details["shards"] = shard_rows
    if not any(row["missing"] for row in shard_rows):
        _check_total_size(index, ckpt, index_path)


def _check_total_size(index: dict, ckpt: Checkpoint, index_path: str) -> None:
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return
    actual = sum(t.length for t in ckpt.tensors.values())
    for t in ckpt.tensors.values():
        if t.quant:
            actual += sum(p.length for p in t.quant.values() if hasattr(p, "length"))
    if not isinstance(total, (int, float)) or int(total) != actual:
        ckpt.findings.append(_finding(
            "warning", "total_size_mismatch", f"The index's metadata.total_size is {total!r}, "
            f"but the tensors it lists take {actual} bytes.", index_path))
