"""The bytes of one HDF5 file inside a byte source, read only through bounded, checked reads.

An HDF5 file can sit at an offset inside another file (a user block, or model.weights.h5 stored
inside a Keras zip): `Window(source, start, size)` maps the HDF5 file's own addresses to absolute
offsets of the source. Every read is checked against the window's end and capped in size before
anything is allocated; a bad address raises `H5Error`, which the walker turns into a finding.
"""

from __future__ import annotations

import io

# What one structure of a real file needs, with a wide margin: an object header chunk, a
# B-tree node, a local heap's names, an attribute's value.
MAX_READ = 16 * 1024 * 1024
# A source without a memory map (http, hf://) is read in blocks of this size, a few kept: HDF5
# scatters small structures over the file, and each read would otherwise be one request.
REMOTE_BLOCK = 4096  # 800 datasets of 256 KiB over http: 606 requests and 2.5 MB (one per read: 6,208)
REMOTE_BLOCKS_KEPT = 32
UNDEFINED = -1  # the all-ones address HDF5 writes for "none"


class H5Error(Exception):
    """A structure that cannot be read where the file says it is: code, words, where."""

    def __init__(self, code: str, message: str, offset: int | None = None, length: int | None = None):
        super().__init__(message)
        self.code, self.message, self.offset, self.length = code, message, offset, length


class Window:
    """An HDF5 file's bytes: `start` is where its byte 0 (its superblock, or its user block) is
    in the source; `base` (set from the superblock) is what its addresses count from."""

    def __init__(self, source, start: int = 0, size: int | None = None) -> None:
        self.source = source
        self.start = start
        self.size = source.size - start if size is None else size
        self.base = 0  # relative to start
        self.offset_size = 8
        self.length_size = 8
        self._blocks: dict[int, bytes] | None = None if getattr(source, "buffer", None) is not None else {}

    def absolute(self, addr: int) -> int:
        """The source offset of a file address."""
        return self.start + self.base + addr

    def read(self, addr: int, n: int, what: str) -> bytes:
        """`n` bytes at file address `addr`, or H5Error when they are not all in the file."""
        at = self.base + addr
        if addr < 0 or n < 0 or at + n > self.size:
            raise H5Error("h5_address_past_end", f"The {what} is said to be at address {addr} "
                          f"({n} bytes), past the end of the HDF5 data ({self.size} bytes): the "
                          "file is truncated or the address is damaged.", self.start + min(at, self.size), 0)
        if n > MAX_READ:
            raise H5Error("h5_too_large", f"The {what} at address {addr} claims {n} bytes; no "
                          f"real file needs more than {MAX_READ} for one structure.", self.absolute(addr), 0)
        data = self._read(self.start + at, n)
        if len(data) != n:
            raise H5Error("h5_address_past_end", f"Only {len(data)} of the {n} bytes of the {what} "
                          f"at address {addr} could be read.", self.absolute(addr), len(data))
        return data

    def _read(self, offset: int, n: int) -> bytes:
        if self._blocks is None or n > REMOTE_BLOCK:
            return bytes(self.source.read(offset, n))
        out = b""
        for block in range(offset // REMOTE_BLOCK, (offset + n - 1) // REMOTE_BLOCK + 1):
            data = self._blocks.get(block)
            if data is None:
                if len(self._blocks) >= REMOTE_BLOCKS_KEPT:
                    self._blocks.pop(next(iter(self._blocks)))
                data = self._blocks[block] = bytes(self.source.read(block * REMOTE_BLOCK, REMOTE_BLOCK))
            out += data
        skip = offset - (offset // REMOTE_BLOCK) * REMOTE_BLOCK
        return out[skip:skip + n]

    def inside(self, addr: int, n: int) -> bool:
        return addr >= 0 and n >= 0 and self.base + addr + n <= self.size


class Fields:
    """Little-endian fields read from one structure's bytes, with the absolute offset of each."""

    def __init__(self, data: bytes, at: int, win: Window, what: str) -> None:
        self.data, self.pos, self.at, self.win, self.what = data, 0, at, win, what

    @property
    def here(self) -> int:
        """The absolute offset of the next field."""
        return self.at + self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise H5Error("h5_bad_structure", f"The {self.what} ends after {len(self.data)} bytes, "
                          f"inside a field that needs {n} more from byte {self.pos}.", self.at, len(self.data))
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def addr(self) -> int:
        """An address of the file's offset size; UNDEFINED for the all-ones "none"."""
        n = self.win.offset_size
        value = self.uint(n)
        return UNDEFINED if value == (1 << (8 * n)) - 1 else value

    def length(self) -> int:
        return self.uint(self.win.length_size)

    def skip(self, n: int) -> None:
        self.take(n)

    def align(self, k: int) -> None:
        """Skip to the next multiple of `k` from the structure's start (v1 headers pad to 8)."""
        self.pos = min(len(self.data), -(-self.pos // k) * k)

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.pos)

    def left(self) -> int:
        return len(self.data) - self.pos


class SourceFile(io.RawIOBase):
    """A read-only file object over `size` bytes of a source from `start` (for zipfile, and for
    h5py when it reads a chunked dataset): never reads outside that range."""

    def __init__(self, source, start: int = 0, size: int | None = None) -> None:
        super().__init__()
        self.source, self.start = source, start
        self.size = source.size - start if size is None else size
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = max(0, (0, self.pos, self.size)[whence] + offset)
        return self.pos

    def readinto(self, buffer) -> int:
        n = max(0, min(len(buffer), self.size - self.pos))
        data = bytes(self.source.read(self.start + self.pos, n)) if n else b""
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)
