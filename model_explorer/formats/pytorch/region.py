"""The bytes of one pickle as a file for `pickletools.genops`: read whole when small, through a
buffered window over the source when large, or when only where it may end is known (a legacy
torch file's pickles, a plain pickle: each runs "to the end of the file" at most, and reading
that whole for each of them read a 17 MB file five times)."""

from __future__ import annotations

import io

# Pickles larger than this are decoded through a buffered window over the source.
WHOLE_READ_MAX = 64 * 1024 * 1024
# A pickle whose length is not known (only that it ends before the file does) is read whole
# when the rest of the file is this small; else through a window whose reads grow from
# FIRST_CHUNK, so a pickle of a few bytes before megabytes of storages reads a few KiB.
OPEN_ENDED_WHOLE = 64 * 1024
FIRST_CHUNK = 4 * 1024
MAX_LINE = 1 << 20  # a text opcode's line (protocol 0) without a newline stops here


class _Window:
    """A read-only file over `source.read` for pickles too large to read whole: a 1 MiB read
    buffer for opcodes, and large arguments as zero-copy views of a local file's map."""

    CHUNK = 1 << 20

    def __init__(self, source, start: int, end: int, first_chunk: int = CHUNK) -> None:
        self._source, self._start, self._end, self._pos = source, start, end, start
        self._buf, self._buf_at = b"", start
        self._map = getattr(source, "buffer", None)
        self._chunk = min(first_chunk, self.CHUNK)  # doubles with each refill up to CHUNK

    def tell(self) -> int:
        return self._pos - self._start

    def read(self, n: int = -1):
        if n is None or n < 0:
            n = self._end - self._pos
        n = max(0, min(n, self._end - self._pos))
        off = self._pos - self._buf_at
        if 0 <= off and off + n <= len(self._buf):
            data = self._buf[off:off + n]
        elif n > self._chunk:
            data = self._map[self._pos:self._pos + n] if self._map is not None else \
                bytes(self._source.read(self._pos, n))
        else:
            self._refill()
            data = self._buf[:n]
        self._pos += len(data)
        return data

    def _refill(self) -> None:
        """The buffer from the current position: what is left of it, then the next chunk (each
        byte read from the source once)."""
        off = self._pos - self._buf_at
        tail = self._buf[off:] if 0 <= off < len(self._buf) else b""
        at = self._pos + len(tail)
        self._buf_at = self._pos
        self._buf = tail + bytes(self._source.read(at, min(self._chunk, self._end - at)))
        self._chunk = min(2 * self._chunk, self.CHUNK)

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


def open_region(source, start: int, length: int, open_ended: bool = False):
    """A file-like object over bytes [start, start + length) of a source; `open_ended`: the
    pickle may end anywhere before start + length (only what it uses is read)."""
    if open_ended and length > OPEN_ENDED_WHOLE:
        return _Window(source, start, start + length, FIRST_CHUNK)
    if length <= WHOLE_READ_MAX:
        return io.BytesIO(bytes(source.read(start, length)))
    return _Window(source, start, start + length)
