"""A bounds-checked flatbuffer walk: tables through their vtables, vectors, strings.

Every position is checked against the file before it is read (`Malformed` otherwise), a
vector's length is checked against the bytes left before anything iterates it, and offsets
to tables, vectors and strings are unsigned, so they only point forward: a walk that follows
them cannot loop, and the reader's depth is fixed by the schema it walks, not by the file.
"""

from __future__ import annotations

import struct

from ...blockcache import Blocks


class Malformed(Exception):
    """A flatbuffer field outside the file, or a length that cannot be; `offset`/`length` are
    the bytes that say so."""

    def __init__(self, message: str, offset: int, length: int = 4) -> None:
        super().__init__(message)
        self.offset, self.length = offset, length


class Buffer:
    """Random-access little-endian reads from a byte source, through cached blocks: tables,
    vtables and vectors are scattered over the file and visited out of order, and each block is
    read once while it is kept (blockcache.py), over http as on disk."""

    def __init__(self, source) -> None:
        self.source = source
        self.size = source.size
        self._blocks = Blocks(source)

    def raw(self, pos: int, n: int, what: str) -> bytes:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise Malformed(f"The {what} at byte {pos} ({n} bytes) lies outside the file "
                            f"({self.size} bytes).", max(0, min(pos, self.size)), 0)
        return self._blocks.read(pos, n) if n else b""

    def unpack(self, fmt: str, pos: int, what: str):
        st = struct.Struct("<" + fmt)
        v = st.unpack(self.raw(pos, st.size, what))
        return v[0] if len(v) == 1 else v


class Table:
    """One flatbuffer table at `pos`: fields by their index in the schema."""

    def __init__(self, buf: Buffer, pos: int, what: str) -> None:
        self.buf, self.pos, self.what = buf, pos, what
        soffset = buf.unpack("i", pos, f"{what} table")
        self.vtable = pos - soffset
        vt_size, self.inline_size = buf.unpack("HH", self.vtable, f"vtable of the {what}")
        if vt_size < 4 or vt_size % 2:
            raise Malformed(f"The vtable of the {what} at byte {self.vtable} says it is {vt_size} "
                            "bytes; a vtable is an even number of bytes, at least 4.", self.vtable, 2)
        self.n_fields = (vt_size - 4) // 2
        buf.raw(self.vtable, vt_size, f"vtable of the {what}")  # the whole vtable is in the file

    def field_pos(self, index: int) -> int | None:
        """Where field `index` is stored, or None when the table leaves it out (its default)."""
        if index >= self.n_fields:
            return None
        off = self.buf.unpack("H", self.vtable + 4 + 2 * index, f"vtable of the {self.what}")
        if not off:
            return None
        if off >= max(self.inline_size, 4):
            raise Malformed(f"Field {index} of the {self.what} at byte {self.pos} is at offset "
                            f"{off}, past the table's own {self.inline_size} bytes.", self.vtable + 4 + 2 * index, 2)
        return self.pos + off

    def scalar(self, index: int, fmt: str, default=0, what: str = "field"):
        p = self.field_pos(index)
        return default if p is None else self.buf.unpack(fmt, p, f"{what} of the {self.what}")

    def _target(self, index: int, what: str) -> tuple[int, int] | None:
        """(position of the offset field, position it points at)."""
        p = self.field_pos(index)
        if p is None:
            return None
        rel = self.buf.unpack("I", p, f"offset to the {what}")
        target = p + rel
        if target >= self.buf.size:
            raise Malformed(f"The {what} of the {self.what} points at byte {target}, past the end "
                            f"of the file ({self.buf.size} bytes).", p, 4)
        return p, target

    def table(self, index: int, what: str) -> Table | None:
        t = self._target(index, what)
        return None if t is None else Table(self.buf, t[1], what)

    def vector(self, index: int, elem_size: int, what: str) -> Vector | None:
        t = self._target(index, what)
        return None if t is None else Vector(self.buf, t[1], elem_size, what)

    def string(self, index: int, what: str) -> tuple[str, int, int] | None:
        """(text, offset, length) of a string field, the length prefix included."""
        v = self.vector(index, 1, what)
        if v is None:
            return None
        text = self.buf.raw(v.data, v.length, what).decode("utf-8", "replace")
        return text, v.pos, 4 + v.length


class Vector:
    """A flatbuffer vector: u32 length, then `length` elements of `elem_size` bytes."""

    def __init__(self, buf: Buffer, pos: int, elem_size: int, what: str) -> None:
        self.buf, self.pos, self.elem_size, self.what = buf, pos, elem_size, what
        self.length = buf.unpack("I", pos, f"length of the {what}")
        self.data = pos + 4
        if self.length * elem_size > buf.size - self.data:
            raise Malformed(f"The {what} at byte {pos} says it holds {self.length} elements of "
                            f"{elem_size} bytes, but only {max(0, buf.size - self.data)} bytes remain "
                            "in the file.", pos, 4)

    @property
    def nbytes(self) -> int:
        return self.length * self.elem_size

    def numbers(self, fmt: str, limit: int | None = None) -> tuple:
        n = self.length if limit is None else min(self.length, limit)
        if not n:
            return ()
        return struct.unpack(f"<{n}{fmt}", self.buf.raw(self.data, n * self.elem_size, self.what))

    def table(self, i: int, what: str) -> Table:
        p = self.data + 4 * i
        return Table(self.buf, p + self.buf.unpack("I", p, f"offset to {what}"), what)
