"""JSON string literals in a file's bytes: finding the literal that holds a value, and placing
each of its characters (escapes such as \\n, \\" and \\uXXXX take more bytes than the character
they stand for; a surrogate pair is one character in twelve bytes).
"""

from __future__ import annotations

import json
import re

from .. import sources

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_HEX4 = re.compile(rb"[0-9a-fA-F]{4}")
_LOW_SURROGATE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def json_char_starts(literal: bytes) -> list[int]:
    """For a JSON string literal (with its quotes): the byte where each decoded character starts,
    relative to the opening quote, plus the position of the closing quote at the end."""
    out, i, n = [], 1, len(literal) - 1
    while i < n:
        out.append(i)
        b = literal[i]
        if b == 0x5C:  # backslash
            if literal[i + 1:i + 2] == b"u":
                unit = int(literal[i + 2:i + 6], 16) if _HEX4.fullmatch(literal[i + 2:i + 6]) else 0
                pair = 0xD800 <= unit < 0xDC00 and _LOW_SURROGATE.fullmatch(literal[i + 6:i + 12])
                i += 12 if pair else 6  # a surrogate pair decodes to one character
            else:
                i += 2
        else:
            i += 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
    out.append(n)
    return out


def read_range(path: str, offset: int | None, length: int | None) -> bytes | None:
    if offset is None or not length:
        return None
    try:
        src = sources.open_source(path)
    except OSError:
        return None
    try:
        return bytes(src.read(offset, length))
    finally:
        src.close()


def json_strings(raw: bytes):
    """(start, literal, value) of every JSON string in `raw`, a JSON value's bytes."""
    for m in _JSON_STRING.finditer(raw):
        try:
            value = json.loads(m.group(0))
        except ValueError:
            continue
        yield m.start(), m.group(0), value


def find_json_literal(raw: bytes, text: str) -> tuple[bytes | None, int | None]:
    """The JSON string literal in `raw` that decodes to `text`, and where it starts."""
    return next(((literal, at) for at, literal, value in json_strings(raw) if value == text), (None, None))
