"""Byte sources inside other byte sources: a member of an archive, read where it lies.

A stored member (a zip entry written without compression, any tar member) is a byte range of its
archive: `WindowSource` reads the archive's bytes at `start + offset` and never past the member's
end, so nothing is copied or extracted. A compressed member has no bytes of its own in the archive:
`MemorySource` holds it inflated (the archive reader bounds how much it inflates).

A member is named `ARCHIVE!/MEMBER` (`pkg.whl!/pkg/model.pt`); a member of a member adds another
`!/` (`m.whl!/m.nemo!/model_weights.ckpt`). `split_member` takes such a path apart.
"""

from __future__ import annotations

import os

MEMBER_SEP = "!/"


def split_member(path: str) -> tuple[str, list[str]] | None:
    """(the archive's path, the member names from the outside in) of `ARCHIVE!/MEMBER[!/...]`, or
    None for a plain path. A local path whose whole name exists as a file is plain, `!/` or not."""
    path = os.fspath(path)
    if MEMBER_SEP not in path or os.path.isfile(path):
        return None
    outer, *members = path.split(MEMBER_SEP)
    if not outer or not all(members):
        return None
    return outer, members


class WindowSource:
    """Bytes `[start, start + size)` of `parent`, read in place: offset 0 is the member's first
    byte, so every reader works unchanged; `start` says where that byte is in the archive."""

    def __init__(self, parent, start: int, size: int, name: str) -> None:
        self.parent, self.start, self.name = parent, max(0, start), name
        self.size = max(0, min(size, parent.size - self.start))
        self.bytes_read = 0
        self.owned = None  # a source closed with this one (the archive it was opened from by path)

    def read(self, offset: int, length: int) -> bytes:
        if offset >= self.size or length <= 0:
            return b""
        offset = max(0, offset)
        n = min(length, self.size - offset)
        self.bytes_read += n
        return bytes(self.parent.read(self.start + offset, n))

    def prefix(self, n: int) -> bytes:
        return self.read(0, min(n, self.size))

    def close(self) -> None:
        if self.owned is not None:  # else the archive's source belongs to whoever opened it
            self.owned.close()

    def __repr__(self) -> str:
        return f"WindowSource({self.name!r}, start={self.start}, size={self.size})"


class MemorySource:
    """Bytes held in memory (an inflated member), read like a file."""

    def __init__(self, data: bytes | bytearray, name: str) -> None:
        self.data, self.name, self.size = data, name, len(data)
        self.start = None  # no byte of the archive is this member's first byte
        self.bytes_read = 0

    def read(self, offset: int, length: int) -> bytes:
        if offset >= self.size or length <= 0:
            return b""
        offset = max(0, offset)
        out = bytes(self.data[offset:offset + length])
        self.bytes_read += len(out)
        return out

    def prefix(self, n: int) -> bytes:
        return self.read(0, n)

    def close(self) -> None:
        self.data = b""

    def __repr__(self) -> str:
        return f"MemorySource({self.name!r}, size={self.size})"
