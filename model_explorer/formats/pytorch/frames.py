"""Pickle frames read the way CPython's C unpickler reads them, which is not how
`pickletools.genops` does (see LoaderReading); vm.py reads a pickle a second time through
this class when its frames are irregular."""

from __future__ import annotations


class LoaderReading:
    """The bytes of a pickle as CPython's C unpickler reads them from a file that has no
    `peek()` (io.BytesIO, which is how torch.load hands it `data.pkl`; an unbuffered file;
    any frame of 128 KiB or more).

    FRAME reads the whole frame into a buffer. A later read that fits in what is left of the
    buffer is served from it; one that does not *drops the rest of the frame* and reads
    afresh from the file after it, except the payloads of BINBYTES / BYTEARRAY8, which
    continue through the file. `pickletools.genops` (and a scanner built on it) reads
    straight through instead, so an opcode that overruns its frame makes the two see
    different opcodes. Feeding genops through this class shows what the loader runs.
    """

    _READINTO = frozenset(b"BC\x8e\x96")  # ops whose second read is a payload read into place

    def __init__(self, f) -> None:
        self._f = f
        self._buf = b""
        self._i = 0
        self.at_op = True  # the next read is an opcode byte
        self._op = 0
        self._nread = 0

    def tell(self) -> int:
        return self._f.tell() - (len(self._buf) - self._i)

    def read(self, n: int = -1):
        if self.at_op:
            self.at_op = False
            data = self._small(n)
            self._op, self._nread = (data[0] if data else 0), 0
            return data
        self._nread += 1
        if self._nread == 2 and self._op in self._READINTO:
            have = self._buf[self._i:self._i + n]
            self._i += len(have)
            return have + bytes(self._f.read(n - len(have))) if len(have) < n else have
        return self._small(n)

    def _small(self, n: int):
        if 0 <= n <= len(self._buf) - self._i:
            out = self._buf[self._i:self._i + n]
            self._i += n
            return out
        self._buf = bytes(self._f.read(n))  # the rest of the buffer is dropped
        self._i = len(self._buf)
        return self._buf

    def readline(self, limit: int = -1) -> bytes:
        k = self._buf.find(b"\n", self._i)
        if k >= 0:
            out = self._buf[self._i:k + 1]
            self._i = k + 1
            return out
        self._buf = bytes(self._f.readline())
        self._i = len(self._buf)
        return self._buf

    def load_frame(self, n: int) -> None:
        if n <= len(self._buf) - self._i:
            return  # the frame is already buffered: C reads it and rewinds
        self._buf = bytes(self._f.read(n))
        self._i = 0
