"""JSON objects read with the byte position of every top-level key and value.

The standard decoder gives values but not where they are. Decoding the UTF-8 bytes as
Latin-1 makes every character one byte, so the positions the C scanner reports are byte
offsets; strings are then re-decoded as UTF-8 (`fix_text`). Nested values go through the
C scanner whole, so this stays fast on 90,000-entry headers.
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


def fix_text(value: Any) -> Any:
    """Undo the Latin-1 reading: turn every string back into what the UTF-8 bytes say."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            return value.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            return value  # \u escapes above U+00FF are already right
    if isinstance(value, DuplicateKeys):
        return DuplicateKeys((fix_text(k), fix_text(v)) for k, v in value)
    if isinstance(value, dict):
        return {fix_text(k): fix_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fix_text(v) for v in value]
    return value


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
        out.append(Member(key, key_start, key_end, value, value_start, pos))
        pos = _WS.match(text, pos).end()
        if pos < len(text) and text[pos] == ",":
            pos = _WS.match(text, pos + 1).end()
            continue
        if pos < len(text) and text[pos] == "}":
            return out, pos + 1
        raise JSONPositionError("expected ',' or '}' after a value", pos)
