"""The bytes of one pickle as a file for `pickletools.genops`: read whole when small, through a
buffered window over the source when large."""

from __future__ import annotations

import io

# Pickles larger than this are decoded through a buffered window over the source.
WHOLE_READ_MAX = 64 * 1024 * 1024
MAX_LINE = 1 << 20  # a text opcode's line (protocol 0) without a newline stops here


class _Window:
    """A read-only file over `source.read` for pickles too large to read whole: a 1 MiB read
    buffer for opcodes, and large arguments as zero-copy views of a local file's map."""

    CHUNK = 1 << 20

    def __init__(self, source, start: int, end: int) -> None:
        self._source, self._start, self._end, self._pos = source, start, end, start
        self._buf, self._buf_at = b"", start
        self._map = getattr(source, "buffer", None)

    def tell(self) -> int:
        return self._pos - self._start

    def read(self, n: int = -1):
        if n is None or n < 0:
            n = self._end - self._pos
        n = max(0, min(n, self._end - self._pos))
        off = self._pos - self._buf_at
        if 0 <= off and off + n <= len(self._buf):
            data = self._buf[off:off + n]
        elif n > self.CHUNK:
            data = self._map[self._pos:self._pos + n] if self._map is not None else \
                bytes(self._source.read(self._pos, n))
        else:
            self._refill()
            data = self._buf[:n]
        self._pos += len(data)
        return data

    def _refill(self) -> None:
        self._buf_at = self._pos
        self._buf = bytes(self._source.read(self._pos, min(self.CHUNK, self._end - self._pos)))

    def readline(self, limit: int = -1) -> bytes:
        # Text opcodes end at a newline, nearly always inside the buffer (reading a fresh
        # MAX_LINE bytes for each one copied a megabyte per opcode); a line longer than the
        # buffer is read on its own, up to MAX_LINE bytes when it has no newline.
        off = self._pos - self._buf_at
        i = self._buf.find(b"\n", off) if off >= 0 else -1
        if i < 0:
            self._refill()
            off, i = 0, self._buf.find(b"\n")
        if i >= 0:
            line = self._buf[off:i + 1]
        else:
            chunk = bytes(self._source.read(self._pos, min(MAX_LINE, self._end - self._pos)))
            i = chunk.find(b"\n")
            line = chunk if i < 0 else chunk[:i + 1]
        self._pos += len(line)
        return line


def open_region(source, start: int, length: int):
    """A file-like object over bytes [start, start + length) of a source."""
    if length <= WHOLE_READ_MAX:
        return io.BytesIO(bytes(source.read(start, length)))
    return _Window(source, start, start + length)
