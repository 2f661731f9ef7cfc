r"""JSON objects read with the byte position of every top-level key and value.

The standard decoder gives values but not where they are. Decoding the UTF-8 bytes as
Latin-1 makes every character one byte, so the positions the C scanner reports are byte
offsets. A key or value whose bytes are not all ASCII is then scanned again from its own
bytes decoded as UTF-8 (re-decoding the scanned string instead would garble `\u` escapes).
Nested values go through the C scanner whole, so this stays fast on 90,000-entry headers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any

_WS = re.compile(r"[ \t\n\r]*")


class DuplicateKeys(list):
    """Marks an object whose pairs held a key twice; keeps every pair for diagnosis."""


def _pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        return DuplicateKeys(pairs)
    return dict(pairs)


_decoder = json.JSONDecoder(object_pairs_hook=_pairs_hook)
_scan_once = _decoder.scan_once


@dataclass(slots=True)
class Member:
    key: str
    key_start: int  # position of the opening quote
    key_end: int  # position after the closing quote
    value: Any
    value_start: int
    value_end: int


class JSONPositionError(ValueError):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


def _redecode(text: str, start: int, end: int, scanned: Any) -> Any:
    """The value of `text[start:end]` read from its UTF-8 bytes (it was read as Latin-1)."""
    segment = text[start:end]
    if segment.isascii():
        return scanned
    real = segment.encode("latin-1").decode("utf-8", errors="replace")
    try:
        return _scan_once(real, 0)[0]
    except (StopIteration, ValueError, RecursionError):
        return scanned


def members(text: str, start: int = 0) -> tuple[list[Member], int]:
    """Walk one JSON object at `start` (after whitespace); return its members and end position.

    Raises JSONPositionError with the position of the first problem.
    """
    pos = _WS.match(text, start).end()
    if pos >= len(text) or text[pos] != "{":
        raise JSONPositionError("expected '{' to open a JSON object", pos)
    pos = _WS.match(text, pos + 1).end()
    out: list[Member] = []
    if pos < len(text) and text[pos] == "}":
        return out, pos + 1
    while True:
        if pos >= len(text) or text[pos] != '"':
            raise JSONPositionError("expected a string key", pos)
        key_start = pos
        try:
            key, pos = scanstring(text, pos + 1, True)
        except json.JSONDecodeError as e:
            raise JSONPositionError(e.msg, e.pos) from None
        key_end = pos
        pos = _WS.match(text, pos).end()
        if pos >= len(text) or text[pos] != ":":
            raise JSONPositionError("expected ':' after a key", pos)
        pos = _WS.match(text, pos + 1).end()
        value_start = pos
        try:
            value, pos = _scan_once(text, pos)
        except StopIteration as e:
            raise JSONPositionError("expected a JSON value", e.value) from None
        except json.JSONDecodeError as e:
            raise JSONPositionError(e.msg, e.pos) from None
        except RecursionError:
            raise JSONPositionError("JSON nested too deeply", value_start) from None
        if not key.isascii():
            key = _redecode(text, key_start, key_end, key)
        value = _redecode(text, value_start, pos, value)
        out.append(Member(key, key_start, key_end, value, value_start, pos))
        pos = _WS.match(text, pos).end()
        if pos < len(text) and text[pos] == ",":
            pos = _WS.match(text, pos + 1).end()
            continue
        if pos < len(text) and text[pos] == "}":
            return out, pos + 1
        raise JSONPositionError("expected ',' or '}' after a value", pos)
