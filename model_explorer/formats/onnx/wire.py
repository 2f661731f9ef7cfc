"""The protobuf wire format, walked field by field with absolute byte offsets and hard bounds.

No generated classes and no `onnx` package: a message is a run of (tag, value) pairs, the tag a
varint `field_number << 3 | wire_type`. Every read is checked against the end of the enclosing
message, so a length that points past it, a varint that never ends or a wire type protobuf does
not define stops that message with a `WireError` at its bytes; nothing is allocated by a length
the file states (a length-delimited value is returned as its offset and length, never copied).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

VARINT, FIXED64, LEN, GROUP_START, GROUP_END, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_VARINT_BYTES = 10
PAGE = 64 * 1024  # a remote file is read in pages this size (a graph is fetched, a payload skipped)


class WireError(Exception):
    """Bytes that are not a protobuf message: what was expected, at which bytes."""

    def __init__(self, message: str, offset: int, length: int, cut: bool = False) -> None:
        super().__init__(message)
        self.offset, self.length = offset, length
        self.cut = cut  # the bytes stop before the value ends (a file cut short, if at its end)


class Field(NamedTuple):
    """One field: its number and wire type, where its tag starts, where its value starts and how
    many bytes the value takes; `value` is the integer of a varint or fixed field, None for a
    length-delimited one (read it at `at`, `length` bytes)."""

    number: int
    wire: int
    tag_at: int
    at: int
    length: int
    value: int | None

    @property
    def end(self) -> int:
        return self.at + self.length


class Paged:
    """A byte source seen as an indexable buffer: a local file's map directly, a remote file in
    64 KiB pages fetched once each (a walk that skips tensor payloads touches only the pages that
    hold the graph)."""

    def __init__(self, source) -> None:
        self.size = source.size
        buf = getattr(source, "buffer", None)
        self._buf = buf if buf is not None else None
        self._source = source
        self._pages: dict[int, bytes] = {}

    def window(self, start: int, end: int):
        """(buffer, base): buffer[pos - base] is byte pos for start <= pos < end; a small
        message of a remote file is fetched as one piece."""
        if self._buf is not None:
            return self._buf, 0
        if end - start <= PAGE:
            return self.get(start, end - start), start
        return self, 0

    def __getitem__(self, pos: int) -> int:
        return self.byte(pos)

    def byte(self, pos: int) -> int:
        if self._buf is not None:
            return self._buf[pos]
        page = self._page(pos // PAGE)
        return page[pos % PAGE]

    def get(self, pos: int, n: int) -> bytes:
        """Bytes [pos, pos + n), fewer at the end of the file; callers bound `n` themselves."""
        n = max(0, min(n, self.size - pos))
        if self._buf is not None:
            return bytes(self._buf[pos:pos + n])
        out = bytearray()
        while len(out) < n:
            p, r = divmod(pos + len(out), PAGE)
            out += self._page(p)[r:r + n - len(out)]
        return bytes(out)

    def _page(self, p: int) -> bytes:
        page = self._pages.get(p)
        if page is None:
            if len(self._pages) > 64:  # a long walk over a remote file keeps a bounded window
                self._pages.clear()
            page = self._pages[p] = bytes(self._source.read(p * PAGE, PAGE))
        return page


def varint(data: Paged, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; WireError when it runs past `end` or
    past 10 bytes."""
    value = shift = 0
    start = pos
    while pos < end:
        b = data.byte(pos)
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if pos - start >= MAX_VARINT_BYTES:
            raise WireError(f"A varint at byte {start} runs past 10 bytes: no protobuf number is "
                            "that long.", start, pos - start)
    raise WireError(f"A varint at byte {start} is cut off by the end of its message at byte "
                    f"{end}.", start, max(1, end - start), cut=True)


def signed64(v: int) -> int:
    """An int64/int32 field's varint as the signed number it encodes (two's complement)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def fields(data: Paged, start: int, end: int, clip: bool = False) -> Iterator[Field]:
    """The fields of the message in bytes [start, end), in file order. With `clip` (a message
    the end of the file cuts), a length-delimited field that runs past `end` is yielded cut at
    `end` with `value` = the length it declares, and the walk stops there."""
    buf, base = data.window(start, end)
    pos = start
    while pos < end:
        tag_at = pos
        key = buf[pos - base]  # one-byte tags and values (nearly all of them) skip varint()
        if key < 0x80:
            pos += 1
        else:
            key, pos = varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"The field tag at byte {tag_at} has field number 0, which protobuf "
                            "does not allow.", tag_at, pos - tag_at)
        if wire == VARINT or wire == LEN:
            if pos < end and buf[pos - base] < 0x80:
                value, after = buf[pos - base], pos + 1
            else:
                value, after = varint(data, pos, end)
            if wire == VARINT:
                yield Field(number, wire, tag_at, pos, after - pos, value)
                pos = after
                continue
            if value > end - after:
                if clip and after <= end:
                    yield Field(number, wire, tag_at, after, end - after, value)
                    return
                raise WireError(f"Field {number} at byte {tag_at} says {value} bytes follow, but "
                                f"its message ends {end - after} bytes later, at byte {end}.",
                                tag_at, after - tag_at)
            yield Field(number, wire, tag_at, after, value, None)
            pos = after + value
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > end:
                raise WireError(f"Field {number} at byte {tag_at} needs {width} bytes but its "
                                f"message ends at byte {end}.", tag_at, end - tag_at, cut=True)
            raw = data.get(pos, width)
            yield Field(number, wire, tag_at, pos, width,
                        struct.unpack("<Q" if width == 8 else "<I", raw)[0])
            pos += width
        else:
            raise WireError(f"The field tag at byte {tag_at} has wire type {wire}, which ONNX "
                            "never writes (groups are deprecated; 6 and 7 are undefined).",
                            tag_at, pos - tag_at)


def packed_varints(data: Paged, f: Field, limit: int) -> list[int]:
    """Up to `limit` varints of a packed field (dims, ints); WireError past the cap, so a
    hostile count never builds a long list."""
    out: list[int] = []
    pos = f.at
    while pos < f.end:
        if len(out) >= limit:
            raise WireError(f"Field {f.number} at byte {f.tag_at} packs more than {limit} "
                            "numbers.", f.tag_at, f.end - f.tag_at)
        v, pos = varint(data, pos, f.end)
        out.append(v)
    return out


def text(data: Paged, f: Field, limit: int = 4096) -> str:
    """A string field as text (at most `limit` bytes of it; longer ones end in '…')."""
    raw = data.get(f.at, min(f.length, limit)) if data._buf is None else \
        data._buf[f.at:f.at + min(f.length, limit)]
    s = str(raw, "utf-8", "replace")
    return s if f.length <= limit else s + "…"
