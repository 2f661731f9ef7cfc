"""Hexdump layout and span lookup, shared by the CLI hexdump and the widgets' byte pages."""

from __future__ import annotations

import bisect

from .spans import Span

ROW = 16
# The kind of the zero-length span a reader puts where a file cut short ends.
END_KIND = "file_end"


class SpanIndex:
    """The spans of one file: in file order (for step-through), and as runs of bytes each owned
    by its innermost span (for colouring a page and naming the field under a byte).

    Built once per file in O(n log n); every lookup after that is a binary search.
    """

    def __init__(self, spans: list[Span]) -> None:
        self.spans = sorted(spans, key=lambda s: (s.offset, -s.length))
        self._starts = [s.offset for s in self.spans]
        self.seg_start, self.seg_end, self.seg_span = _innermost_segments(self.spans)

    def at(self, offset: int) -> Span | None:
        """The innermost span covering byte `offset`, or None."""
        i = bisect.bisect_right(self.seg_start, offset) - 1
        if i >= 0 and offset < self.seg_end[i]:
            return self.spans[self.seg_span[i]]
        return None

    def segments(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """(start, end, span index) of the innermost spans covering bytes [start, end)."""
        i = max(0, bisect.bisect_right(self.seg_start, start) - 1)
        out = []
        while i < len(self.seg_start) and self.seg_start[i] < end:
            if self.seg_end[i] > start:
                out.append((max(start, self.seg_start[i]), min(end, self.seg_end[i]), self.seg_span[i]))
            i += 1
        return out

    def starting_in(self, start: int, end: int) -> list[Span]:
        """The spans that start in [start, end), in file order."""
        lo = bisect.bisect_left(self._starts, start)
        hi = bisect.bisect_left(self._starts, end)
        return self.spans[lo:hi]

    def index_at(self, offset: int) -> int:
        """Index (in file order) of the first span starting at or after `offset`."""
        return min(bisect.bisect_left(self._starts, offset), max(0, len(self.spans) - 1))


def _innermost_segments(spans: list[Span]) -> tuple[list[int], list[int], list[int]]:
    """Cut the file into runs owned by one innermost span (spans sorted by start, longest first).

    A sweep with a stack of open spans: a nested span interrupts its parent, which resumes
    after it. Zero-length and partly overlapping spans (damaged files) never break the sweep.
    """
    starts: list[int] = []
    ends: list[int] = []
    owners: list[int] = []
    stack: list[int] = []
    pos = 0

    def emit(a: int, b: int, owner: int) -> None:
        nonlocal pos
        a = max(a, pos)
        if b > a:
            if owners and owners[-1] == owner and ends[-1] == a:
                ends[-1] = b
            else:
                starts.append(a)
                ends.append(b)
                owners.append(owner)
            pos = b

    for i, s in enumerate(spans):
        while stack and spans[stack[-1]].end <= s.offset:
            top = stack.pop()
            emit(pos, spans[top].end, top)
        if stack:
            emit(pos, s.offset, stack[-1])
        pos = max(pos, s.offset)
        if s.length > 0:
            stack.append(i)
    while stack:
        top = stack.pop()
        emit(pos, spans[top].end, top)
    return starts, ends, owners


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
    if index is not None:  # right after the last byte shown: where a cut file ends, if it does
        lines += [f"{base + len(data):010x}  {text}" for text in end_marks(index, base + len(data))]
    return lines


def end_marks(index: SpanIndex, end: int) -> list[str]:
    """"end of file: 95,000,000 bytes of 4,683,000,000 expected (2.0 %)" when a file cut short
    ends at byte `end`, else nothing."""
    return [f"{s.path}: {s.value}" if s.value else s.path
            for s in index.starting_in(end, end + 1) if s.kind == END_KIND and s.offset == end]
