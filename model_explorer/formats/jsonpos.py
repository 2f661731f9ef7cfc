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
from collections.abc import Callable
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C scanner: not in typeshed
from typing import Any, cast

_WS = re.compile(r"[ \t\n\r]*")
# _ws(text, pos).end(): past the whitespace at pos (the pattern matches the empty string, so
# there is always a match; the cast says so to the type checker at no cost per call)
_ws = cast("Callable[[str, int], re.Match[str]]", _WS.match)
_WS_CHARS = " \t\n\r"


class DuplicateKeys(list):
    """Marks an object whose pairs held a key twice; keeps every pair for diagnosis."""


def _pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
    d = dict(pairs)
    return d if len(d) == len(pairs) else DuplicateKeys(pairs)


_decoder = json.JSONDecoder(object_pairs_hook=_pairs_hook)
_scan_once = _decoder.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


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
    end: list[int] = []
    out = list(iter_members(text, start, end))
    return out, end[0]


def iter_members(text: str, start: int = 0, end: list[int] | None = None):
    """`members` one at a time, so a caller can drop each as it goes (a header of a million
    entries); the end position is appended to `end` when the object closes."""
    n = len(text)
    ascii_only = text.isascii()  # the usual case: no string needs a second look
    pos = _ws(text, start).end()
    if pos >= n or text[pos] != "{":
        raise JSONPositionError("expected '{' to open a JSON object", pos)
    pos = _ws(text, pos + 1).end()
    if pos < n and text[pos] == "}":
        if end is not None:
            end.append(pos + 1)
        return
    ws, scan = _WS_CHARS, _scan_once
    while True:
        if pos >= n or text[pos] != '"':
            raise JSONPositionError("expected a string key", pos)
        key_start = pos
        try:
            key, pos = scanstring(text, pos + 1, True)
        except json.JSONDecodeError as e:
            raise JSONPositionError(e.msg, e.pos) from None
        key_end = pos
        if pos < n and text[pos] in ws:  # whitespace is rare in machine-written headers
            pos = _ws(text, pos).end()
        if pos >= n or text[pos] != ":":
            raise JSONPositionError("expected ':' after a key", pos)
        pos += 1
        if pos < n and text[pos] in ws:
            pos = _ws(text, pos).end()
        value_start = pos
        try:
            value, pos = scan(text, pos)
        except StopIteration as e:
            raise JSONPositionError("expected a JSON value", e.value) from None
        except json.JSONDecodeError as e:
            raise JSONPositionError(e.msg, e.pos) from None
        except RecursionError:
            raise JSONPositionError("JSON nested too deeply", value_start) from None
        except ValueError as e:  # an integer of more than 4300 digits
            raise JSONPositionError(str(e).split(":")[0], value_start) from None
        if not ascii_only:
            if not key.isascii():
                key = _redecode(text, key_start, key_end, key)
            value = _redecode(text, value_start, pos, value)
        yield Member(key, key_start, key_end, value, value_start, pos)
        if pos < n and text[pos] in ws:
            pos = _ws(text, pos).end()
        if pos < n and text[pos] == ",":
            pos += 1
            if pos < n and text[pos] in ws:
                pos = _ws(text, pos).end()
            continue
        if pos < n and text[pos] == "}":
            if end is not None:
                end.append(pos + 1)
            return
        raise JSONPositionError("expected ',' or '}' after a value", pos)
