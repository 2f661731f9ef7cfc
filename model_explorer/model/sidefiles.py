"""The small files beside the weights (config.json, tokenizer_config.json, adapter_config.json...),
read once per checkpoint with the byte position of every top-level key.

A side file that cannot be read gives a finding with the file and the byte where reading
stopped; the caller gets None and fills in what it can from elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import sources
from ..formats.jsonpos import JSONPositionError, members
from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding

MAX_SIDE_FILE = 64 * 1024 * 1024


@dataclass
class SideJSON:
    """One JSON side file: its value and where each top-level key and value sits."""

    name: str
    path: str
    value: Any = None
    # key -> (offset, length) of the value's bytes in the file
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    problem: Finding | None = None

    def where(self, key: str) -> tuple[int | None, int | None]:
        return self.positions.get(key.split(".")[0], (None, None))


def model_dir(ckpt: CheckpointRecord) -> str:
    """The folder that holds the model's files (the source itself when it is a folder)."""
    src = ckpt.source
    if sources.isdir(src):
        return src
    return sources.dirname(src)


def _cache(ckpt: CheckpointRecord) -> dict:
    return ckpt.derived.side_files


def side_path(ckpt: CheckpointRecord, name: str) -> str | None:
    """The path of a side file when it exists (looked up once per checkpoint)."""
    cache = _cache(ckpt).setdefault("paths", {})
    if name not in cache:
        p = sources.join(model_dir(ckpt), name)
        cache[name] = p if sources.exists(p) else None
    return cache[name]


def side_text(ckpt: CheckpointRecord, name: str) -> tuple[str | None, str | None, str | None]:
    """(text, path, problem) of a small text side file; text None when absent or unreadable."""
    path = side_path(ckpt, name)
    if path is None:
        return None, None, None
    text, problem = sources.read_text(path, MAX_SIDE_FILE)
    return text, path, problem


def line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def side_json(ckpt: CheckpointRecord, name: str) -> SideJSON | None:
    """A JSON side file read with positions; None when the file is absent. A file that does not
    parse comes back with `value` None and `problem` set (byte offset of the fault)."""
    cache = _cache(ckpt).setdefault("json", {})
    if name in cache:
        return cache[name]
    path = side_path(ckpt, name)
    if path is None:
        cache[name] = None
        return None
    out = SideJSON(name, path)
    cache[name] = out
    try:
        src = sources.open_source(path)
    except OSError as e:
        out.problem = model_finding("bad_side_file", f"{name} cannot be read: {e}.", file=path)
        return out
    try:
        if src.size > MAX_SIDE_FILE:
            out.problem = model_finding("bad_side_file", f"{name} is {src.size:,} bytes, more than the "
                                        f"{MAX_SIDE_FILE:,} allowed for a side file.", file=path)
            return out
        data = bytes(src.read(0, src.size))
    finally:
        src.close()
    # Latin-1 makes every character one byte, so positions are byte offsets.
    text = data.decode("latin-1")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        out.problem = model_finding("bad_side_file", f"{name} is not valid UTF-8 (byte {e.start}).",
                                    offset=e.start, length=1, file=path)
        return out
    try:
        found, end = members(text)
    except JSONPositionError as e:
        pos = min(e.pos, max(0, len(data) - 1))
        what = "ends before the JSON does" if e.pos >= len(data) else str(e)
        out.problem = model_finding("bad_side_file", f"{name} is not valid JSON: {what} at byte {e.pos} "
                                    f"({line_col(text, pos)}).", offset=pos, length=1 if data else 0,
                                    file=path)
        return out
    if text[end:].strip():
        out.problem = model_finding("bad_side_file", f"{name} has bytes after its JSON object at byte "
                                    f"{end} ({line_col(text, end)}).", offset=end, length=len(data) - end,
                                    file=path)
    value = {}
    for m in found:
        value[m.key] = m.value
        out.positions[m.key] = (m.value_start, m.value_end - m.value_start)
    out.value = value
    return out


def config(ckpt: CheckpointRecord) -> dict:
    """config.json as a dict ({} when absent or unreadable)."""
    c = ckpt.metadata.get("config.json")
    return c if isinstance(c, dict) else {}


def finding_files(ckpt: CheckpointRecord, findings: list[Finding]) -> list[str]:
    """Every file beside the checkpoint's own that a finding points at (config.json,
    modeling_*.py, tokenizer files, generation_config.json, README.md...), and the code files a
    finding names (`extra["files"]`: what auto_map runs), in finding order; never a folder."""
    own = set(ckpt.files)
    out: list[str] = []
    for f in findings:
        for path in [f.file, *(f.extra.get("files") or [])]:
            if isinstance(path, str) and path and path not in own and path not in out \
                    and not sources.isdir(path) and sources.exists(path):
                out.append(path)
    return out
