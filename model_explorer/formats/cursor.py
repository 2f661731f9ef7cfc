"""A bounded little-endian cursor for the sequential binary headers (CTranslate2, legacy GGML).

Every read checks the bytes left before it reads, and a length from the file is compared with
what remains before anything is read or allocated for it: `PastEnd` says where and why.
"""

from __future__ import annotations

import struct

WINDOW = 64 * 1024  # bytes fetched at a time from the source


class PastEnd(Exception):
    """A field, or the length a field announced, runs past the end of the file."""

    def __init__(self, offset: int, need: int, what: str, length_at: int | None = None,
                 code: str = "truncated") -> None:
        super().__init__(what)
        self.offset, self.need, self.what, self.code = offset, need, what, code
        self.length_at = length_at  # where the length that asked for too much was read


class Cursor:
    """Reads fields in file order from `source`, keeping a window of its bytes."""

    def __init__(self, source, pos: int = 0) -> None:
        self.source = source
        self.size = source.size
        self.pos = pos
        self._base = 0
        self._buf = b""
        self._structs: dict[str, struct.Struct] = {}

    @property
    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str, length_at: int | None = None, code: str = "truncated") -> None:
        if n < 0 or self.pos + n > self.size:
            raise PastEnd(self.pos, n, what, length_at, code)

    def _view(self, n: int) -> tuple[bytes, int]:
        """A buffer holding bytes [pos, pos + n) and where pos is in it."""
        rel = self.pos - self._base
        if rel < 0 or rel + n > len(self._buf):
            self._base = self.pos
            self._buf = bytes(self.source.read(self.pos, min(max(n, WINDOW), self.size - self.pos)))
            rel = 0
            if len(self._buf) < n:  # the source delivered less than its size says
                raise PastEnd(self.pos, n, "bytes the source did not deliver")
        return self._buf, rel

    def unpack(self, fmt: str, what: str):
        st = self._structs.get(fmt)
        if st is None:
            st = self._structs[fmt] = struct.Struct("<" + fmt)
        self.need(st.size, what)
        buf, rel = self._view(st.size)
        v = st.unpack_from(buf, rel)
        self.pos += st.size
        return v[0] if len(v) == 1 else v

    def bytes(self, n: int, what: str, length_at: int | None = None) -> bytes:
        """`n` bytes of a string or name: past the end, a string_past_end at its length."""
        self.need(n, what, length_at, "string_past_end" if length_at is not None else "truncated")
        buf, rel = self._view(n)
        self.pos += n
        return bytes(buf[rel:rel + n])

    def skip(self, n: int, what: str, length_at: int | None = None) -> None:
        self.need(n, what, length_at)
        self.pos += n


def past_end_message(e: PastEnd, size: int) -> tuple[str, str, int, int]:
    """(code, message, offset, length) of the finding a `PastEnd` makes."""
    if e.length_at is not None:
        return (e.code, f"The {e.what} at byte {e.length_at} says it is {e.need} bytes long, but only "
                f"{max(0, size - e.offset)} bytes remain in the file.", e.length_at,
                max(1, min(4, e.offset - e.length_at)))
    return ("truncated", f"The file ends at byte {size}, but the {e.what} at byte {e.offset} needs "
            f"{e.need} bytes: the file is cut short.", e.offset, max(0, size - e.offset))
