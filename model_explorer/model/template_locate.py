"""Where a piece of a Jinja template sits in its source text.

jinja2's parse tree gives nodes a line number only. Its lexer gives every token in order (with
the whitespace that `-` modifiers strip left out), so each token is found in the source from
where the previous one ended; a node is then placed by the first unclaimed token on or after its
line that matches it, and widened to the `{{ ... }}` / `{% ... %}` tag around it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

_NEWLINE = re.compile(r"\r\n|\r|\n")
BEGIN = {"block_begin", "variable_begin", "comment_begin", "raw_begin", "linestatement_begin"}
END = {"block_end", "variable_end", "comment_end", "raw_end", "linestatement_end"}


@dataclass(slots=True)
class Token:
    lineno: int
    type: str
    value: str
    start: int  # character range in the original source
    end: int


def _normalized(source: str) -> tuple[str, list[int] | None]:
    """The source with Jinja's newline normalization, and the map back to the original
    positions (None when nothing changed)."""
    if "\r" not in source:
        return source, None
    back, out, last = [], [], 0
    for m in _NEWLINE.finditer(source):
        out.append(source[last:m.start()] + "\n")
        back.extend(range(last, m.start() + 1))
        last = m.end()
    out.append(source[last:])
    back.extend(range(last, len(source) + 1))
    return "".join(out), back


class Locator:
    """The tokens of one template with their positions, and lookups that claim each one once."""

    def __init__(self, env, source: str) -> None:
        self.source = source
        self.tokens: list[Token] = []
        self.claimed: set[int] = set()
        norm, back = _normalized(source)
        cursor = 0
        for lineno, kind, value in env.lexer.tokeniter(norm, None):
            if not value or kind == "whitespace":
                continue
            i = norm.find(value, cursor)
            if i < 0:
                continue
            cursor = i + len(value)
            start, end = (i, cursor) if back is None else (back[i], back[min(cursor, len(back) - 1)])
            self.tokens.append(Token(lineno, kind, value, start, end))
        self.linenos = [t.lineno for t in self.tokens]

    def find(self, lineno: int | None, match: Callable[[Token], bool], claim: bool = True) -> int | None:
        """Index of the first token on or after `lineno` that `match` accepts (unclaimed first)."""
        first = bisect.bisect_left(self.linenos, lineno or 1)
        if first >= len(self.tokens):
            return None
        for pass_claimed in (False, True):
            for i in range(first, len(self.tokens)):
                if (i in self.claimed) != pass_claimed:
                    continue
                if match(self.tokens[i]):
                    if claim:
                        self.claimed.add(i)
                    return i
        return None

    def name(self, lineno: int | None, value: str) -> int | None:
        return self.find(lineno, lambda t: t.type == "name" and t.value == value)

    def string(self, lineno: int | None, value: str) -> int | None:
        return self.find(lineno, lambda t: t.type == "string" and value in _unquote(t.value))

    def data(self, lineno: int | None, value: str) -> int | None:
        return self.find(lineno, lambda t: t.type == "data" and (t.value == value or value in t.value))

    def tag(self, i: int) -> tuple[int, int]:
        """Character range of the `{{ }}` / `{% %}` tag around token `i` (the token itself when it
        is template text)."""
        if self.tokens[i].type == "data":
            return self.tokens[i].start, self.tokens[i].end
        lo = i
        while lo > 0 and self.tokens[lo].type not in BEGIN:
            lo -= 1
        hi = i
        while hi < len(self.tokens) - 1 and self.tokens[hi].type not in END:
            hi += 1
        end = self.tokens[hi].end
        while end > self.tokens[hi].start and self.source[end - 1].isspace():
            end -= 1  # a tag's end token carries the whitespace it strips
        return self.tokens[lo].start, end

    def line(self, lineno: int | None) -> tuple[int, int]:
        """Character range of a whole line (the fallback when no token matches)."""
        starts = [0] + [m.end() for m in _NEWLINE.finditer(self.source)]
        k = min(max((lineno or 1) - 1, 0), len(starts) - 1)
        end = starts[k + 1] - 1 if k + 1 < len(starts) else len(self.source)
        return starts[k], max(end, starts[k])


def _unquote(raw: str) -> str:
    """A string token's value, as jinja2's lexer reads it."""
    try:
        return raw[1:-1].encode("ascii", "backslashreplace").decode("unicode-escape")
    except UnicodeDecodeError:
        return raw[1:-1]
