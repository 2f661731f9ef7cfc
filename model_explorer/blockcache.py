"""Small reads of a byte source through aligned blocks, a bounded number kept.

A parser that walks structures scattered over a file (flatbuffer tables and vtables, HDF5
object headers, B-tree nodes) asks for a few bytes at a time, here and there and back again.
Read straight from a remote source each ask is a request, and with a single window each jump
back re-reads it. Through `Blocks`, a small read costs at most the blocks it touches, each
fetched once while it is kept: a file smaller than `keep` blocks is read at most once whatever
order the parser asks in, and memory stays `block * keep` bytes on any file.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK = 64 * 1024
KEEP = 64  # 4 MiB of blocks


class Blocks:
    """`read(offset, n)` of `source` (never past its end), small reads served from kept blocks;
    a read of more than `block` bytes goes to the source as it is and is not kept."""

    def __init__(self, source, block: int = BLOCK, keep: int = KEEP) -> None:
        self.source, self.block, self.keep = source, block, keep
        self.size = source.size
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n <= 0 or offset >= self.size:
            return b""
        n = min(n, self.size - offset)
        if n > self.block:
            return bytes(self.source.read(offset, n))
        first, last = offset // self.block, (offset + n - 1) // self.block
        if first == last:
            rel = offset - first * self.block
            return self._get(first)[rel:rel + n]
        data = b"".join(self._get(b) for b in range(first, last + 1))
        rel = offset - first * self.block
        return data[rel:rel + n]

    def _get(self, index: int) -> bytes:
        data = self._blocks.get(index)
        if data is not None:
            self._blocks.move_to_end(index)
            return data
        start = index * self.block
        data = bytes(self.source.read(start, min(self.block, self.size - start)))
        self._blocks[index] = data
        while len(self._blocks) > self.keep:
            self._blocks.popitem(last=False)
        return data
