"""Text from a file made safe to print, to write into a table and to send to a browser.

A file can name a tensor with a lone surrogate (JSON's "\\ud800"), which no UTF-8 encoder
writes, or with control and bidi characters, which move a terminal's cursor or reorder what a
reader sees. Each such code point is written as ⟨U+XXXX⟩, the same way everywhere (the CLI, the
audit's tables, SARIF and HTML, the widgets' state); the finding that points at the name keeps
the raw bytes' offset. `unescape` turns a name the browser sends back into the file's own.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls but tab and newline, DEL and C1, the bidi marks, embeddings, overrides and
# isolates, and every surrogate (a str holds a surrogate only when it stands alone).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
_ESCAPED = re.compile("⟨U\\+([0-9A-F]{4})⟩")
MAX_DEPTH = 64  # nesting walked by escape_deep; deeper values are left to json's default


def escape(text: str) -> str:
    """`text` with every unsafe code point written as ⟨U+XXXX⟩ (unchanged when there is none)."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)


def unescape(text: str) -> str:
    """The inverse of `escape` for the code points it writes."""
    if "⟨U+" not in text:
        return text

    def back(m: re.Match) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if _UNSAFE.fullmatch(ch) else m.group()

    return _ESCAPED.sub(back, text)


def escape_deep(value: Any, depth: int = 0, fn=escape) -> Any:
    """Every str (keys included) in nested dicts, lists and tuples through `fn`; bytes and
    numbers unchanged; containers copied only where something changed."""
    if isinstance(value, str):
        return fn(value)
    if depth >= MAX_DEPTH:
        return value
    if isinstance(value, dict):
        out = {fn(k) if isinstance(k, str) else k: escape_deep(v, depth + 1, fn) for k, v in value.items()}
        return out if any(a is not b for a, b in zip(out.values(), value.values())) or \
            any(a is not b for a, b in zip(out, value)) else value
    if isinstance(value, (list, tuple)):
        items = [escape_deep(v, depth + 1, fn) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def unescape_deep(value: Any) -> Any:
    return escape_deep(value, fn=unescape)


class SafeStream:
    """A text stream that escapes what it is given before writing it: the CLI's stdout and
    stderr, so no command dies on a name it cannot encode or lets a file drive the terminal."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(escape(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
