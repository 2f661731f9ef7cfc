"""Hexdump layout and span lookup, shared by the CLI and the widgets."""

from __future__ import annotations

import bisect

from .spans import Span

ROW = 16


class SpanIndex:
    """Finds the innermost span covering a byte: spans sorted by start, shortest wins."""

    def __init__(self, spans: list[Span]) -> None:
        self.spans = sorted(spans, key=lambda s: (s.offset, -s.length))
        self._starts = [s.offset for s in self.spans]
        # The longest span length bounds how far back a covering span can start.
        self._max_len = max((s.length for s in self.spans), default=0)

    def at(self, offset: int) -> Span | None:
        hi = bisect.bisect_right(self._starts, offset)
        best = None
        i = hi - 1
        while i >= 0 and self.spans[i].offset + self._max_len > offset:
            s = self.spans[i]
            if s.offset <= offset < s.end and (best is None or s.length < best.length):
                best = s
            i -= 1
            if best is not None and hi - i > 64:
                break
        return best

    def starting_in(self, start: int, end: int) -> list[Span]:
        lo = bisect.bisect_left(self._starts, start)
        hi = bisect.bisect_left(self._starts, end)
        return self.spans[lo:hi]


def printable(b: int) -> str:
    return chr(b) if 0x20 <= b < 0x7F else "."


def hexdump_lines(data: bytes, base: int, index: SpanIndex | None = None) -> list[str]:
    """Lines of `offset  hex  |ascii|  labels of spans that start on this row`."""
    lines = []
    for row in range(0, len(data), ROW):
        chunk = data[row:row + ROW]
        hexpart = " ".join(f"{b:02x}" for b in chunk)
        hexpart = hexpart[:23] + " " + hexpart[23:] if len(chunk) > 8 else hexpart
        line = f"{base + row:010x}  {hexpart:<48}  |{''.join(printable(b) for b in chunk):<16}|"
        if index is not None:
            labels = [s.path + (f" = {s.value}" if s.value else "")
                      for s in index.starting_in(base + row, base + row + len(chunk))]
            if labels:
                line += "  " + "; ".join(labels)
        lines.append(line)
    return lines
